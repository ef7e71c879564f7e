/*
 * run.c - "leaselock run": blocks the signals it waits for, acquires the
 * lease, starts the command (spawn.c) with its watchdog (watchdog.c),
 * supervises it (supervise.c), releases the lease and gives the exit status.
 */
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

/*
 * How "run" keeps the command inside the lease (contract invariant 3):
 *
 * - The command is stopped by the lease's local deadline, which comes before
 *   the database's expiry. Renewals move that deadline on every TTL/3; once it
 *   is only grace + margin away, the renewal has failed for too long: the
 *   command gets SIGTERM, and SIGKILL at the deadline minus the margin at the
 *   latest, whether or not the stuck renewal ever returns. The margin covers
 *   this process waking late. A loss the database reports (force release,
 *   takeover) sends SIGTERM at once and SIGKILL after --grace, still no later
 *   than that.
 * - The command dies with leaselock. It has PR_SET_PDEATHSIG = SIGKILL, and a
 *   watchdog process, holding one end of a socket whose other end only
 *   leaselock holds, SIGKILLs the command's process group (grandchildren
 *   too) when the socket ends without a word: leaselock died. The watchdog
 *   also SIGKILLs the group when a timer that leaselock keeps at the deadline
 *   minus the margin runs out: that covers a leaselock stopped (SIGSTOP,
 *   Ctrl-Z) or starved, whose renewals stopped too. The timer counts
 *   CLOCK_BOOTTIME, which goes on while the machine is suspended, as the
 *   database's clock does.
 * - Both children start with _Fork, which runs no atfork handler (the core's
 *   waits for database calls in flight), and call only async-signal-safe
 *   functions until exec or _exit.
 */

/* ---- signals ---------------------------------------------------------- */

static const int forwarded[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 };

/* The write end of the loss pipe, for the on_lost callback. */
static int lost_fd = -1;

/* Runs on the core's renewal thread: only a write(2), which is safe there. */
static void on_lost (leaselock_lease_t *lease, void *user_data)
{
   (void)lease;
   (void)user_data;
   ssize_t n = write (lost_fd, "L", 1);
   (void)n;
}

/* Blocks the signals we wait for in every thread (the core's threads, started
 * later, inherit the mask) and receives them through a signalfd. SIGCHLD must
 * not be ignored, or the child would be reaped behind our back. */
static bool signals_setup (run_signals_t *s)
{
   s->sigfd = -1;
   s->lost_pipe[0] = s->lost_pipe[1] = -1;
   signal (SIGCHLD, SIG_DFL);
   sigset_t waited;
   sigemptyset (&waited);
   for (size_t i = 0; i < sizeof forwarded / sizeof forwarded[0]; i++)
      sigaddset (&waited, forwarded[i]);
   sigaddset (&waited, SIGCHLD);
   pthread_sigmask (SIG_BLOCK, &waited, &s->orig_mask);
   s->sigfd = signalfd (-1, &waited, SFD_NONBLOCK | SFD_CLOEXEC);
   if (s->sigfd < 0 || pipe2 (s->lost_pipe, O_NONBLOCK | O_CLOEXEC) < 0) {
      say ("cannot set up signal handling: %s", strerror (errno));
      return false;
   }
   lost_fd = s->lost_pipe[1];
   return true;
}

static void signals_close (run_signals_t *s)
{
   close_fd (&s->sigfd);
   close_fd (&s->lost_pipe[0]);
   close_fd (&s->lost_pipe[1]);
   lost_fd = -1;
}

/* ---- acquire ---------------------------------------------------------- */

typedef struct wait_ctx
{
   int sigfd;
   int signo; /* the signal that stopped the wait, or 0 */
} wait_ctx_t;

/* Polled by the blocking acquire: a terminating signal stops the wait. */
static bool should_stop (void *user_data)
{
   wait_ctx_t *w = user_data;
   struct signalfd_siginfo si;
   while (read (w->sigfd, &si, sizeof si) == (ssize_t)sizeof si) {
      int s = (int)si.ssi_signo;
      if (s == SIGINT || s == SIGTERM || s == SIGHUP || s == SIGQUIT)
         w->signo = s;
   }
   return w->signo != 0;
}

/* After BUSY: says who holds the key, as the core read it when the
 * acquire gave up (err->holder; nothing when it could not tell), and in
 * which database. */
static void report_busy (leaselock_client_t *client, const char *key, const char *why,
                         const leaselock_error_t *err)
{
   const leaselock_holder_t *h = &err->holder;
   leaselock_record_t rec = { .fence = h->fence, .expires_in_ms = h->expires_in_ms, .pid = h->pid };
   fprintf (stderr, "%s: ", cmd_name);
   put_text (stderr, key, strlen (key));
   fprintf (stderr, " is busy%s", why);
   if (h->known) {
      memcpy (rec.host, h->host, sizeof rec.host);
      memcpy (rec.label, h->label, sizeof rec.label);
      rec.owner[0] = h->released ? '\0' : '?';
      char when[32];
      fmt_ms (rec.expires_in_ms, when, sizeof when);
      if (rec.owner[0])
         fprintf (stderr, ": held by ");
      else
         fprintf (stderr, ": released but kept by --min-hold of ");
      put_holder (stderr, &rec);
      fprintf (stderr, ", fence %" PRId64 ", expires in %s", rec.fence, when);
   }
   fprintf (stderr, " (database %s)\n", leaselock_client_uri (client));
}

/* The core's acquire for run's kind of holder (--slots, --shared,
 * --exclusive, or none: the key itself). */
static bool acquire_as (leaselock_client_t *client, const run_opts_t *o,
                        const leaselock_acquire_opts_t *opts, leaselock_lease_t **lease,
                        leaselock_error_t *err)
{
   size_t len = strlen (o->key);
   if (o->slots)
      return leaselock_semaphore_acquire (client, o->key, len, o->slots, opts, lease, err);
   if (o->rw)
      return leaselock_rwlock_acquire (client, o->key, len, (leaselock_rw_mode_t)o->rw, opts, lease,
                                       err);
   return leaselock_acquire (client, o->key, len, opts, lease, err);
}

/* After BUSY with --slots, --shared or --exclusive: KEY itself has no
 * record to show; the holders' are KEY/.slot/<i>, KEY/.rw/... */
static void report_mode_busy (const run_opts_t *o, const char *why)
{
   fprintf (stderr, "%s: ", cmd_name);
   put_text (stderr, o->key, strlen (o->key));
   if (o->slots)
      fprintf (stderr, " is busy%s: all %" PRId64 " slots are held", why, o->slots);
   else if (o->rw == LEASELOCK_SHARED)
      fprintf (stderr, " is busy%s: an exclusive holder has it or is waiting", why);
   else
      fprintf (stderr, " is busy%s: held by shared or exclusive holders", why);
   fprintf (stderr, " (leaselock list ");
   put_text (stderr, o->key, strlen (o->key));
   fprintf (stderr, "/ shows them)\n");
}

/* Acquires o->key, waiting as --wait says. Sets *status when it fails. */
static leaselock_lease_t *acquire_lease (leaselock_client_t *client, const run_opts_t *o, int sigfd,
                                         int *status)
{
   wait_ctx_t wctx = { sigfd, 0 };
   leaselock_acquire_opts_t opts;
   leaselock_acquire_opts_init (&opts);
   opts.ttl_ms = o->ttl_ms;
   opts.timeout_ms = o->wait_ms;
   opts.min_hold_ms = o->min_hold_ms;
   opts.fair = o->fair;
   opts.auto_renew = true;
   opts.on_lost = on_lost;
   opts.should_stop = should_stop;
   opts.should_stop_data = &wctx;
   leaselock_lease_t *lease = NULL;
   leaselock_error_t err;
   if (acquire_as (client, o, &opts, &lease, &err))
      return lease;
   if (err.code == LEASELOCK_BUSY || err.code == LEASELOCK_TIMEOUT) {
      char w[32], why[64] = "";
      fmt_ms (o->wait_ms, w, sizeof w);
      if (err.code == LEASELOCK_TIMEOUT)
         snprintf (why, sizeof why, " (gave up after --wait %s)", w);
      if (!o->quiet && (o->slots || o->rw))
         report_mode_busy (o, why);
      else if (!o->quiet)
         report_busy (client, o->key, why, &err);
      *status = o->conflict_exit;
   } else if (err.code == LEASELOCK_INTERRUPTED && wctx.signo) {
      say ("interrupted by signal %d while waiting for the lock", wctx.signo);
      *status = 128 + wctx.signo;
   } else {
      *status = fail ("acquire", &err);
   }
   return NULL;
}

/* ---- exit status ------------------------------------------------------ */

/* Releases the lease if it is still held (also after a stop for a renewal
 * that failed too long) and gives run's exit status. */
static int run_status (supervisor_t *sv)
{
   leaselock_error_t err;
   bool lost = leaselock_lease_state (sv->lease) == LEASELOCK_STATE_LOST;
   if (!lost && !leaselock_lease_release (sv->lease, &err)) {
      if (err.code == LEASELOCK_NOT_HELD || err.code == LEASELOCK_LOST)
         lost = true;
      else
         say ("release: %s: %s (the lease ends when its TTL runs out)",
              leaselock_code_name (err.code), err.message);
   }
   if (sv->internal_error)
      return EXIT_INTERNAL;
   if (lost || sv->stopping) {
      fprintf (stderr, "%s: the lease on ", cmd_name);
      put_text (stderr, sv->o->key, strlen (sv->o->key));
      fprintf (stderr, " %s while %s ran (exit status %d)\n",
               lost ? "was lost" : "could not be renewed in time", sv->o->cmd[0], EXIT_LOST);
      return EXIT_LOST;
   }
   if (WIFEXITED (sv->wstatus))
      return WEXITSTATUS (sv->wstatus);
   if (WIFSIGNALED (sv->wstatus))
      return 128 + WTERMSIG (sv->wstatus);
   return EXIT_INTERNAL;
}

int cmd_run (const char *uri, int argc, char **argv)
{
   run_opts_t o;
   int status = parse_run (uri, argc, argv, &o);
   if (status != PARSED)
      return status;
   if (run_reentered (&o, &status))
      return status;
   run_signals_t sig;
   leaselock_client_t *client = NULL;
   leaselock_lease_t *lease = NULL;
   child_t ch = { -1, 0, -1, -1, -1 };
   status = EXIT_INTERNAL;
   if (signals_setup (&sig) && (client = open_client (o.uri, o.label, &status)) &&
       (lease = acquire_lease (client, &o, sig.sigfd, &status)) &&
       start_command (&o, lease, &sig.orig_mask, &ch, &status)) {
      supervisor_t sv = { .o = &o,
                          .lease = lease,
                          .sig = &sig,
                          .ch = &ch,
                          .margin = kill_margin_ms (o.ttl_ms),
                          .kill_at = -1 };
      supervise (&sv);
      status = run_status (&sv);
   }
   watchdog_done (&ch);
   close_fd (&ch.timer_fd);
   leaselock_lease_destroy (lease);
   leaselock_client_destroy (client);
   signals_close (&sig);
   return status;
}
