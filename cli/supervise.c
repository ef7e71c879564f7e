/*
 * supervise.c - run while its command runs: follows the lease's local
 * deadline (and keeps the watchdog's timer before it), forwards signals,
 * stops the command in time when the lease is lost or not renewed, and
 * reaps it (see the design note at the top of run.c).
 */
#include "cli.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

/* Follows the lease's local deadline while it is held, and keeps the
 * watchdog's timer a margin before it, where our own SIGKILL is due at the
 * latest: the watchdog acts only when we are late. */
static void follow_deadline (supervisor_t *sv, int64_t now)
{
   if (leaselock_lease_state (sv->lease) != LEASELOCK_STATE_HELD)
      return;
   /* now was read first: the sum is never later than the true deadline. */
   sv->deadline = now + leaselock_lease_remaining_ms (sv->lease);
   if (sv->deadline - sv->margin != sv->armed) {
      sv->armed = sv->deadline - sv->margin;
      arm_watchdog (sv->ch, sv->armed);
   }
}

/* Whether the lease was declared lost (on_lost wrote to the pipe, or the
 * local deadline passed). */
static bool lease_lost (supervisor_t *sv)
{
   char drain[16];
   bool written = read (sv->sig->lost_pipe[0], drain, sizeof drain) > 0;
   return written || leaselock_lease_state (sv->lease) == LEASELOCK_STATE_LOST;
}

/* SIGTERM now, SIGKILL after the grace period but no later than a margin
 * before the deadline. */
static void begin_stop (supervisor_t *sv, int64_t now, bool lost)
{
   const run_opts_t *o = sv->o;
   sv->stopping = true;
   sv->kill_at = now + o->grace_ms;
   if (sv->kill_at > sv->deadline - sv->margin)
      sv->kill_at = sv->deadline - sv->margin;
   char left[32], g[32];
   fmt_ms (sv->deadline - now, left, sizeof left);
   fmt_ms (sv->kill_at > now ? sv->kill_at - now : 0, g, sizeof g);
   fprintf (stderr, "%s: lease on ", cmd_name);
   put_text (stderr, o->key, strlen (o->key));
   if (lost)
      fprintf (stderr, " lost (fence %" PRId64 ")", leaselock_lease_fence (sv->lease));
   else
      fprintf (stderr, " not renewed, its local deadline is in %s", left);
   fprintf (stderr, "; sending SIGTERM to %s (pid %d), SIGKILL in %s\n", o->cmd[0],
            (int)sv->ch->pid, g);
   kill (sv->ch->target, SIGTERM);
}

static void kill_if_due (supervisor_t *sv, int64_t now)
{
   if (!sv->stopping || sv->killed || now < sv->kill_at)
      return;
   say ("%s (pid %d) still running after the grace period: sending SIGKILL", sv->o->cmd[0],
        (int)sv->ch->pid);
   kill (sv->ch->target, SIGKILL);
   sv->killed = true;
}

/* Milliseconds until the next thing to do: the point where the command must
 * be stopped, its SIGKILL, or a look at the deadline (which renewals move)
 * every TTL/4 to keep the watchdog's timer ahead. */
static int next_wake_ms (const supervisor_t *sv, int64_t now)
{
   int64_t step = sv->o->ttl_ms / 4;
   int64_t at = now + (step < 1 ? 1 : step > 60000 ? 60000 : step);
   if (!sv->stopping) {
      int64_t stop_at = sv->deadline - sv->o->grace_ms - sv->margin;
      at = stop_at < at ? stop_at : at;
   } else if (!sv->killed) {
      at = sv->kill_at < at ? sv->kill_at : at;
   }
   return at > now ? (int)(at - now) : 0;
}

/* Once the command has exited (still a zombie, so its process group cannot
 * be reused yet): SIGKILL what it left in its group, which would run without
 * the lock, end the watchdog, reap the command. Returns whether it ended. */
static bool command_ended (supervisor_t *sv)
{
   siginfo_t si;
   memset (&si, 0, sizeof si);
   if (waitid (P_PID, (id_t)sv->ch->pid, &si, WEXITED | WNOHANG | WNOWAIT) != 0 ||
       si.si_pid != sv->ch->pid)
      return false;
   if (sv->ch->target < 0)
      kill (sv->ch->target, SIGKILL);
   watchdog_done (sv->ch);
   waitpid (sv->ch->pid, &sv->wstatus, 0);
   sv->ch->pid = -1;
   return true;
}

/* Reads the signals that arrived: forwards them, and returns whether the
 * command ended (SIGCHLD). */
static bool handle_signals (supervisor_t *sv)
{
   bool child_changed = false;
   struct signalfd_siginfo si;
   while (read (sv->sig->sigfd, &si, sizeof si) == (ssize_t)sizeof si) {
      if (si.ssi_signo == SIGCHLD)
         child_changed = true;
      else if (sv->ch->target < 0 || si.ssi_code != SI_KERNEL)
         /* (In the terminal's group, the terminal's own signals reach the
          * command directly.) */
         kill (sv->ch->target, (int)si.ssi_signo);
   }
   return child_changed && command_ended (sv);
}

/* Waits for the command to end, forwarding signals and stopping it in time
 * when the lease is lost or cannot be renewed. */
void supervise (supervisor_t *sv)
{
   for (;;) {
      int64_t now = mono_ms ();
      follow_deadline (sv, now);
      bool lost = lease_lost (sv); /* (drains the pipe every time) */
      if (!sv->stopping && (lost || sv->deadline - now <= sv->o->grace_ms + sv->margin))
         begin_stop (sv, now, lost);
      kill_if_due (sv, now);
      struct pollfd pfd[2] = { { sv->sig->sigfd, POLLIN, 0 },
                               { sv->sig->lost_pipe[0], POLLIN, 0 } };
      if (poll (pfd, 2, next_wake_ms (sv, mono_ms ())) < 0 && errno != EINTR) {
         /* Nothing can be watched any more: stop the command. */
         say ("poll: %s; stopping %s (pid %d)", strerror (errno), sv->o->cmd[0], (int)sv->ch->pid);
         kill (sv->ch->target, SIGKILL);
         watchdog_done (sv->ch);
         waitpid (sv->ch->pid, &sv->wstatus, 0);
         sv->internal_error = true;
         return;
      }
      if (handle_signals (sv))
         return;
   }
}
