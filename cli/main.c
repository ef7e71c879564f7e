/*
 * main.c - the leaselock command line tool.
 *
 *   leaselock run [options] KEY -- CMD [ARGS...]
 *   leaselock status [--json] KEY
 *   leaselock list [--json] [PREFIX]
 *   leaselock release --force KEY
 *
 * Uses the public API (leaselock.h) only. "run" holds the lease in this
 * process (renewed by the core's renewal thread) while the command runs as
 * a forked child that execs at once and never touches the lease (see "How
 * run keeps the command inside the lease" below). Every event the parent waits for arrives on one
 * poll(): signals through a signalfd (they are blocked in every thread, so none is lost between
 * checks) and the loss of the lease through a pipe written by the on_lost callback on the renewal
 * thread.
 */
#include "leaselock.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* Exit statuses (printed by --help, documented in the README). */
enum
{
   EXIT_HELD_OK = 0,
   EXIT_FREE = 1,      /* status: no live lease on the key */
   EXIT_NO_RECORD = 2, /* status: the key has never been acquired */
   EXIT_USAGE = 64,    /* EX_USAGE: bad option, duration, key or URI */
   EXIT_BACKEND = 69,  /* EX_UNAVAILABLE: database unreachable, backend not built */
   EXIT_INTERNAL = 70, /* EX_SOFTWARE: out of memory, cannot start the command */
   EXIT_BUSY = 75,     /* EX_TEMPFAIL: held by another owner / --wait ran out */
   EXIT_LOST = 76,     /* the lease was lost while the command ran */
   EXIT_CANNOT_EXEC = 126,
   EXIT_NOT_FOUND = 127,
};

#define DEFAULT_TTL_MS 30000
#define DEFAULT_GRACE_MS 10000

static const char usage_text[] = "Usage:\n"
                                 "  leaselock [--uri URI] run [options] KEY -- CMD [ARGS...]\n"
                                 "  leaselock [--uri URI] status [--json] KEY\n"
                                 "  leaselock [--uri URI] list [--json] [PREFIX]\n"
                                 "  leaselock [--uri URI] release --force KEY\n"
                                 "  leaselock --help | --version\n";

static const char help_text[] =
  "\n"
  "Lease-based locks on a database, for cron jobs and shells.\n"
  "\n"
  "run: acquires KEY, runs CMD while holding it (the lease is renewed every\n"
  "TTL/3), then releases it and exits with CMD's status. The command sees\n"
  "LEASELOCK_KEY, LEASELOCK_FENCE and LEASELOCK_OWNER in its environment.\n"
  "SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 are forwarded to it.\n"
  "The command is stopped before its lease can expire: when the lease is lost,\n"
  "or not renewed until its local deadline is --grace away, it gets SIGTERM,\n"
  "then SIGKILL by that deadline. It dies with leaselock too: if leaselock is\n"
  "killed or stopped, a watchdog process kills it, by the deadline at the\n"
  "latest. Unless stdin is the controlling terminal, the command runs in its\n"
  "own process group: all of it gets the signals and dies with leaselock, and\n"
  "what is left in it when the command exits is killed.\n"
  "  --ttl DURATION       lease time to live (default 30s; 1ms to 30d)\n"
  "  --wait DURATION      wait that long for a busy lock (default 0: one try;\n"
  "                       \"forever\" waits without limit)\n"
  "  --min-hold DURATION  keep the lock at least this long after acquiring,\n"
  "                       even if CMD ends sooner (default 0)\n"
  "  --grace DURATION     time between SIGTERM and SIGKILL on loss (default 10s,\n"
  "                       less if the TTL needs it); at most TTL/2 - TTL/10\n"
  "                       (this TTL/10 at most 1s)\n"
  "  --label TEXT         label stored with the lease (default: CMD's name)\n"
  "\n"
  "status: shows owner, fence, expiry and holder of KEY.\n"
  "list: one line (or JSON object) per key starting with PREFIX.\n"
  "release --force: clears KEY whoever holds it (the fence survives).\n"
  "\n"
  "Durations: 500ms, 30s, 2m, 1h, 1d, or a bare number of seconds (1.5).\n"
  "--uri URI (or $LEASELOCK_URI) picks the database: sqlite:///path.db,\n"
  "mongodb://..., mysql://..., postgresql://...; the default is the embedded\n"
  "SQLite file $XDG_STATE_HOME/leaselock/locks.db (~/.local/state/...).\n"
  "\n"
  "Exit status:\n"
  "  0      run: CMD succeeded; status: KEY is held; others: success\n"
  "  1      status: KEY is free (released or expired)\n"
  "  2      status: KEY has no record (never acquired)\n"
  "  1-255  run: CMD's own exit status\n"
  "  64     usage error: bad option, duration, key or URI\n"
  "  69     backend unavailable: database unreachable or not built in\n"
  "  70     internal error: out of memory, cannot start CMD\n"
  "  75     run: KEY is busy (--wait 0), or --wait ran out\n"
  "  76     run: the lease was lost, or not renewed in time, while CMD ran\n"
  "         (CMD was stopped)\n"
  "  126    run: CMD cannot be executed\n"
  "  127    run: CMD not found\n"
  "  128+N  run: CMD was killed by signal N, or leaselock got signal N while\n"
  "         waiting for the lock\n";

static const char *cmd_name = "leaselock";

#if defined(__GNUC__)
#define PRINTF_LIKE __attribute__ ((format (printf, 1, 2)))
#else
#define PRINTF_LIKE
#endif

/* Prints "leaselock[ SUBCOMMAND]: message" on stderr. */
static void vsay (const char *fmt, va_list ap)
{
   fprintf (stderr, "%s: ", cmd_name);
   vfprintf (stderr, fmt, ap);
   fputc ('\n', stderr);
}

static void say (const char *fmt, ...) PRINTF_LIKE;
static void say (const char *fmt, ...)
{
   va_list ap;
   va_start (ap, fmt);
   vsay (fmt, ap);
   va_end (ap);
}

/* A usage error: the message, a hint, EXIT_USAGE. */
static int usage_error (const char *fmt, ...) PRINTF_LIKE;
static int usage_error (const char *fmt, ...)
{
   va_list ap;
   va_start (ap, fmt);
   vsay (fmt, ap);
   va_end (ap);
   fputs ("Try 'leaselock --help'.\n", stderr);
   return EXIT_USAGE;
}

/* The exit status for a failed call's error code. */
static int exit_for (const leaselock_error_t *err)
{
   switch (err->code) {
      case LEASELOCK_INVALID:
         return EXIT_USAGE;
      case LEASELOCK_BACKEND:
      case LEASELOCK_UNSUPPORTED:
         return EXIT_BACKEND;
      case LEASELOCK_BUSY:
      case LEASELOCK_TIMEOUT:
         return EXIT_BUSY;
      case LEASELOCK_NOT_HELD:
      case LEASELOCK_LOST:
         return EXIT_LOST;
      default:
         return EXIT_INTERNAL;
   }
}

/* Reports a failed call ("what: CODE: message") and gives its exit status. */
static int fail (const char *what, const leaselock_error_t *err)
{
   say ("%s: %s: %s", what, leaselock_code_name (err->code), err->message);
   return exit_for (err);
}

/* ---- option parsing --------------------------------------------------- */

/*
 * Matches "--name VALUE" or "--name=VALUE" at argv[*i]. Returns 1 with
 * *value set (and *i moved past the value), 0 when argv[*i] is another
 * argument, -1 when the value is missing (message printed).
 */
static int opt_value (int argc, char **argv, int *i, const char *name, const char **value)
{
   const char *a = argv[*i];
   size_t n = strlen (name);
   if (strncmp (a, name, n) != 0)
      return 0;
   if (a[n] == '=') {
      *value = a + n + 1;
      return 1;
   }
   if (a[n] != '\0')
      return 0;
   if (*i + 1 >= argc) {
      usage_error ("option %s needs a value", name);
      return -1;
   }
   *i += 1;
   *value = argv[*i];
   return 1;
}

/* Parses a duration option; min/max in ms. Prints and returns false on
 * error. */
static bool parse_ms (const char *opt, const char *text, int64_t min, int64_t max, int64_t *out)
{
   leaselock_error_t err;
   if (!leaselock_parse_duration (text, out, &err)) {
      usage_error ("%s: %s", opt, err.message);
      return false;
   }
   if (*out < min) {
      usage_error ("%s \"%s\": must be at least %" PRId64 "ms", opt, text, min);
      return false;
   }
   if (*out > max) {
      usage_error ("%s \"%s\": must be at most 30d", opt, text);
      return false;
   }
   return true;
}

/* --uri anywhere among a subcommand's options: 1 matched, 0 not, -1 error. */
static int opt_uri (int argc, char **argv, int *i, const char **uri)
{
   int r = opt_value (argc, argv, i, "--uri", uri);
   if (r == 1 && !**uri) {
      usage_error ("--uri is empty");
      return -1;
   }
   return r;
}

static bool is_help (const char *a)
{
   return !strcmp (a, "--help") || !strcmp (a, "-h");
}

static int print_help (void)
{
   printf ("%s%s", usage_text, help_text);
   return 0;
}

/* Parses the arguments of status, list and release: --help, --uri, one
 * boolean option FLAG (sets *flag_set) and at most one positional argument
 * (*arg; TAKES ends the error for a second one, e.g. "status takes one
 * KEY"). Returns PARSED when all were read, else the exit status the
 * subcommand returns at once (0 after --help, EXIT_USAGE on an error). */
#define PARSED (-1)
static int parse_flag_and_arg (int argc,
                               char **argv,
                               const char **uri,
                               const char *flag,
                               bool *flag_set,
                               const char **arg,
                               const char *takes)
{
   for (int i = 0; i < argc; i++) {
      int r;
      if (is_help (argv[i]))
         return print_help ();
      if ((r = opt_uri (argc, argv, &i, uri)) != 0) {
         if (r < 0)
            return EXIT_USAGE;
      } else if (!strcmp (argv[i], flag)) {
         *flag_set = true;
      } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
         return usage_error ("unknown option %s", argv[i]);
      } else if (!*arg) {
         *arg = argv[i];
      } else {
         return usage_error ("unexpected argument \"%s\" (%s)", argv[i], takes);
      }
   }
   return PARSED;
}

/* ---- output helpers --------------------------------------------------- */

/*
 * Formats a duration as one number and one unit, so that the CLI reads back
 * whatever it prints (leaselock_parse_duration takes no "3m12s"): "750ms",
 * "28.4s", "3.2m", "2.08h", "1.13d", trailing zeros dropped. Rounds to the
 * nearest step of the unit shown (100ms, 0.01m, 0.01h, 0.01d), or down with
 * round_down, for limits that must still be accepted when typed back. A
 * negative ms shows its absolute value.
 */
static void fmt_duration (int64_t ms, bool round_down, char *buf, size_t size)
{
   static const struct
   {
      int64_t below, step, per_unit; /* per_unit: steps in one unit */
      const char *unit;
   } units[] = {
      { 1000, 1, 1, "ms" },          { 60000, 100, 10, "s" },         { 3600000, 600, 100, "m" },
      { 86400000, 36000, 100, "h" }, { INT64_MAX, 864000, 100, "d" },
   };
   if (ms < 0)
      ms = ms == INT64_MIN ? INT64_MAX : -ms;
   size_t u = 0;
   while (ms >= units[u].below)
      u++;
   int64_t q = ms / units[u].step;
   if (!round_down && ms % units[u].step >= (units[u].step + 1) / 2)
      q++;
   int64_t whole = q / units[u].per_unit, frac = q % units[u].per_unit;
   if (frac == 0)
      snprintf (buf, size, "%" PRId64 "%s", whole, units[u].unit);
   else if (units[u].per_unit == 10)
      snprintf (buf, size, "%" PRId64 ".%" PRId64 "%s", whole, frac, units[u].unit);
   else if (frac % 10 == 0)
      snprintf (buf, size, "%" PRId64 ".%" PRId64 "%s", whole, frac / 10, units[u].unit);
   else
      snprintf (buf, size, "%" PRId64 ".%02" PRId64 "%s", whole, frac, units[u].unit);
}

static void fmt_ms (int64_t ms, char *buf, size_t size)
{
   fmt_duration (ms, false, buf, size);
}

/* Writes s (len bytes) for a terminal: control bytes become \xNN. */
static void put_text (FILE *f, const char *s, size_t len)
{
   for (size_t i = 0; i < len; i++) {
      unsigned char c = (unsigned char)s[i];
      if (c < 0x20 || c == 0x7f)
         fprintf (f, "\\x%02x", c);
      else
         fputc (c, f);
   }
}

/* The JSON escape of the ASCII byte c (written into buf when numeric), or
 * NULL when c stands for itself. */
static const char *json_escape (unsigned char c, char buf[8])
{
   static const char *const named[] = {
      ['"'] = "\\\"", ['\\'] = "\\\\", ['\n'] = "\\n", ['\r'] = "\\r",
      ['\t'] = "\\t", ['\b'] = "\\b",  ['\f'] = "\\f",
   };
   if (c < sizeof named / sizeof named[0] && named[c])
      return named[c];
   if (c < 0x20 || c == 0x7f) {
      snprintf (buf, 8, "\\u%04x", c);
      return buf;
   }
   return NULL;
}

/* Writes s as a JSON string: escapes quotes, backslashes and control
 * characters; each byte that is not part of valid UTF-8 (as the core
 * judges it) becomes U+FFFD. */
static void put_json_string (FILE *f, const char *s, size_t len)
{
   fputc ('"', f);
   for (size_t i = 0; i < len;) {
      size_t end = i + leaselock_utf8_valid_len (s + i, len - i);
      for (; i < end; i++) {
         char buf[8];
         const char *esc = json_escape ((unsigned char)s[i], buf);
         if (esc)
            fputs (esc, f);
         else
            fputc (s[i], f);
      }
      if (i < len) {
         fputs ("\\ufffd", f);
         i++;
      }
   }
   fputc ('"', f);
}

/* "held", "min-hold" (released, but min_hold keeps it blocked) or "free". */
static const char *record_state (const leaselock_record_t *r)
{
   if (r->expires_in_ms <= 0)
      return "free";
   return r->owner[0] ? "held" : "min-hold";
}

static void put_record_json (FILE *f, const leaselock_record_t *r)
{
   fputs ("{\"key\":", f);
   put_json_string (f, r->key, r->key_len);
   fprintf (f, ",\"state\":\"%s\",\"owner\":", record_state (r));
   if (r->owner[0])
      put_json_string (f, r->owner, strlen (r->owner));
   else
      fputs ("null", f);
   fprintf (f, ",\"fence\":%" PRId64 ",\"expires_in_ms\":%" PRId64 ",\"host\":", r->fence,
            r->expires_in_ms);
   put_json_string (f, r->host, strnlen (r->host, sizeof r->host));
   fprintf (f, ",\"pid\":%" PRId64 ",\"label\":", r->pid);
   put_json_string (f, r->label, strnlen (r->label, sizeof r->label));
   fputc ('}', f);
}

/* "host pid 123 (label)" */
static void put_holder (FILE *f, const leaselock_record_t *r)
{
   put_text (f, r->host, strnlen (r->host, sizeof r->host));
   fprintf (f, " pid %" PRId64, r->pid);
   if (r->label[0]) {
      fputs (" (", f);
      put_text (f, r->label, strnlen (r->label, sizeof r->label));
      fputc (')', f);
   }
}

/* Copies the C string S to OUT (SIZE > 0 bytes), each byte that is not part
 * of valid UTF-8 (as the core judges it) as '?', cut at a character boundary
 * to fit. Returns whether S was valid UTF-8 and fit. */
static bool utf8_copy (const char *s, char *out, size_t size)
{
   size_t len = strlen (s), o = 0;
   bool clean = true;
   for (size_t i = 0; i < len;) {
      size_t valid = leaselock_utf8_valid_len (s + i, len - i);
      if (o + valid >= size) {
         /* Cut before the character that does not fit. */
         valid = size - 1 - o;
         while (valid > 0 && ((unsigned char)s[i + valid] & 0xC0) == 0x80)
            valid--;
         len = i + valid;
         clean = false;
      }
      memcpy (out + o, s + i, valid);
      o += valid, i += valid;
      if (i == len)
         break;
      clean = false;
      if (o + 1 >= size)
         break;
      out[o++] = '?', i++; /* an invalid byte */
   }
   out[o] = '\0';
   return clean;
}

static leaselock_client_t *open_client (const char *uri, const char *label, int *status)
{
   leaselock_error_t err;
   leaselock_client_t *client = leaselock_client_new (uri, label, &err);
   if (!client)
      *status = fail ("cannot open the lock database", &err);
   return client;
}

/* ---- status ----------------------------------------------------------- */

static int cmd_status (const char *uri, int argc, char **argv)
{
   const char *key = NULL;
   bool json = false;
   int parsed =
     parse_flag_and_arg (argc, argv, &uri, "--json", &json, &key, "status takes one KEY");
   if (parsed != PARSED)
      return parsed;
   if (!key)
      return usage_error ("missing KEY");

   int status = EXIT_INTERNAL;
   leaselock_client_t *client = open_client (uri, NULL, &status);
   if (!client)
      return status;
   leaselock_record_t rec;
   bool found = false;
   leaselock_error_t err;
   if (!leaselock_inspect (client, key, strlen (key), &rec, &found, &err)) {
      status = fail ("status", &err);
   } else if (json) {
      if (found)
         put_record_json (stdout, &rec);
      else
         fputs ("null", stdout);
      fputc ('\n', stdout);
      status = !found ? EXIT_NO_RECORD : rec.expires_in_ms > 0 ? EXIT_HELD_OK : EXIT_FREE;
   } else if (!found) {
      fputs ("key:        ", stdout);
      put_text (stdout, key, strlen (key));
      fputs ("\nstate:      free (no record)\n", stdout);
      status = EXIT_NO_RECORD;
   } else {
      char when[32];
      fmt_ms (rec.expires_in_ms, when, sizeof when);
      fputs ("key:        ", stdout);
      put_text (stdout, rec.key, rec.key_len);
      fprintf (stdout, "\nstate:      %s\n", record_state (&rec));
      fprintf (stdout, "owner:      %s\n", rec.owner[0] ? rec.owner : "-");
      fprintf (stdout, "fence:      %" PRId64 "\n", rec.fence);
      if (rec.expires_in_ms > 0)
         fprintf (stdout, "expires in: %s\n", when);
      else
         fprintf (stdout, "expired:    %s ago\n", when);
      fputs ("holder:     ", stdout);
      put_holder (stdout, &rec);
      fputc ('\n', stdout);
      status = rec.expires_in_ms > 0 ? EXIT_HELD_OK : EXIT_FREE;
   }
   leaselock_client_destroy (client);
   return status;
}

/* ---- list ------------------------------------------------------------- */

typedef struct list_ctx
{
   bool json;
   size_t count;
} list_ctx_t;

static bool list_one (const leaselock_record_t *r, void *user_data)
{
   list_ctx_t *ctx = user_data;
   if (ctx->json) {
      fputs (ctx->count ? ",\n" : "\n", stdout);
      put_record_json (stdout, r);
   } else {
      char when[32] = "-";
      if (r->expires_in_ms > 0)
         fmt_ms (r->expires_in_ms, when, sizeof when);
      put_text (stdout, r->key, r->key_len);
      fprintf (stdout,
               "  %s  fence=%" PRId64 "  expires_in=%s  owner=%s  holder=", record_state (r),
               r->fence, when, r->owner[0] ? r->owner : "-");
      put_holder (stdout, r);
      fputc ('\n', stdout);
   }
   ctx->count++;
   return true;
}

static int cmd_list (const char *uri, int argc, char **argv)
{
   const char *prefix = NULL;
   list_ctx_t ctx = { false, 0 };
   int parsed =
     parse_flag_and_arg (argc, argv, &uri, "--json", &ctx.json, &prefix, "list takes one PREFIX");
   if (parsed != PARSED)
      return parsed;
   int status = EXIT_INTERNAL;
   leaselock_client_t *client = open_client (uri, NULL, &status);
   if (!client)
      return status;
   leaselock_error_t err;
   if (ctx.json)
      fputc ('[', stdout);
   bool ok = leaselock_list (client, prefix ? prefix : "", prefix ? strlen (prefix) : 0, list_one,
                             &ctx, &err);
   if (ctx.json)
      fputs (ctx.count ? "\n]\n" : "]\n", stdout);
   status = ok ? 0 : fail ("list", &err);
   leaselock_client_destroy (client);
   return status;
}

/* ---- release ---------------------------------------------------------- */

static int cmd_release (const char *uri, int argc, char **argv)
{
   const char *key = NULL;
   bool force = false;
   int parsed =
     parse_flag_and_arg (argc, argv, &uri, "--force", &force, &key, "release takes one KEY");
   if (parsed != PARSED)
      return parsed;
   if (!key)
      return usage_error ("missing KEY");
   if (!force)
      return usage_error ("release needs --force: it clears the lock whoever holds it "
                          "(a lock held by \"leaselock run\" is released when its command ends)");
   int status = EXIT_INTERNAL;
   leaselock_client_t *client = open_client (uri, NULL, &status);
   if (!client)
      return status;
   bool took = false;
   leaselock_error_t err;
   if (leaselock_force_release (client, key, strlen (key), &took, &err)) {
      put_text (stdout, key, strlen (key));
      fputs (took ? ": released (a live lease was taken away)\n" : ": was not held\n", stdout);
      status = 0;
   } else {
      status = fail ("release", &err);
   }
   leaselock_client_destroy (client);
   return status;
}

/* ---- run -------------------------------------------------------------- */

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

static int64_t mono_ms (void)
{
   struct timespec ts;
   clock_gettime (CLOCK_MONOTONIC, &ts);
   return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A copy of environ without LEASELOCK_KEY/FENCE/OWNER plus the three new
 * ones. Returns a NULL-terminated array to free with free_env, or NULL. */
static char **child_env (const leaselock_lease_t *lease)
{
   size_t n = 0;
   while (environ[n])
      n++;
   char **env = calloc (n + 4, sizeof *env);
   if (!env)
      return NULL;
   size_t k = 0;
   for (size_t i = 0; i < n; i++) {
      const char *e = environ[i];
      if (!strncmp (e, "LEASELOCK_KEY=", 14) || !strncmp (e, "LEASELOCK_FENCE=", 16) ||
          !strncmp (e, "LEASELOCK_OWNER=", 16))
         continue;
      env[k++] = (char *)e;
   }
   size_t first_own = k;
   int ok = 1;
   ok &= asprintf (&env[k++], "LEASELOCK_KEY=%s", leaselock_lease_key (lease)) >= 0;
   ok &= asprintf (&env[k++], "LEASELOCK_FENCE=%" PRId64, leaselock_lease_fence (lease)) >= 0;
   ok &= asprintf (&env[k++], "LEASELOCK_OWNER=%s", leaselock_lease_owner (lease)) >= 0;
   if (!ok) {
      /* asprintf leaves the pointer undefined on failure: clear them all. */
      for (size_t i = first_own; i < k; i++)
         env[i] = NULL;
      free (env);
      return NULL;
   }
   env[k] = NULL;
   return env;
}

/* Frees what child_env allocated (the last three entries and the array). */
static void free_env (char **env)
{
   if (!env)
      return;
   size_t n = 0;
   while (env[n])
      n++;
   for (size_t i = n - 3; i < n; i++)
      free (env[i]);
   free (env);
}

/* After BUSY: says who holds the key (best effort). */
static void report_busy (leaselock_client_t *client, const char *key, const char *why)
{
   leaselock_record_t rec;
   bool found = false;
   leaselock_error_t err;
   fprintf (stderr, "%s: ", cmd_name);
   put_text (stderr, key, strlen (key));
   fprintf (stderr, " is busy%s", why);
   if (leaselock_inspect (client, key, strlen (key), &rec, &found, &err) && found &&
       rec.expires_in_ms > 0) {
      char when[32];
      fmt_ms (rec.expires_in_ms, when, sizeof when);
      if (rec.owner[0])
         fprintf (stderr, ": held by ");
      else
         fprintf (stderr, ": released but kept by --min-hold of ");
      put_holder (stderr, &rec);
      fprintf (stderr, ", fence %" PRId64 ", expires in %s", rec.fence, when);
   }
   fputc ('\n', stderr);
}

static void close_fd (int *fd)
{
   if (*fd >= 0)
      close (*fd);
   *fd = -1;
}

static void free_paths (char **paths)
{
   if (paths)
      for (char **p = paths; *p; p++)
         free (*p);
   free (paths);
}

/* The SIGKILL margin before the lease's local deadline: TTL/10, at most 1s. */
static int64_t kill_margin_ms (int64_t ttl_ms)
{
   return ttl_ms / 10 < 1000 ? ttl_ms / 10 : 1000;
}

/* The longest --grace for a TTL. SIGTERM goes out grace + margin before the
 * deadline, so at least TTL/2 after the last renewal was sent: the renewal
 * due at TTL/3 has TTL/6 to get through before the command is stopped. */
static int64_t max_grace_ms (int64_t ttl_ms)
{
   int64_t g = ttl_ms / 2 - kill_margin_ms (ttl_ms);
   return g > 0 ? g : 0;
}

typedef struct run_opts
{
   const char *uri, *key, *label;
   char **cmd;
   int64_t ttl_ms, wait_ms, min_hold_ms, grace_ms;
   const char *ttl_text, *grace_text; /* as typed; grace_text NULL: default */
   char label_buf[LEASELOCK_KEY_MAX + 1];
} run_opts_t;

/* Reads one option of run at argv[*i]: 1 read, 0 not an option of run,
 * -1 error (message printed). */
static int run_option (int argc, char **argv, int *i, run_opts_t *o)
{
   const char *v;
   int r;
   if ((r = opt_uri (argc, argv, i, &o->uri)) != 0)
      return r;
   if ((r = opt_value (argc, argv, i, "--ttl", &v)) != 0) {
      o->ttl_text = r > 0 ? v : NULL;
      return r < 0 || !parse_ms ("--ttl", v, 1, LEASELOCK_TTL_MAX_MS, &o->ttl_ms) ? -1 : 1;
   }
   if ((r = opt_value (argc, argv, i, "--wait", &v)) != 0) {
      if (r > 0 && !strcmp (v, "forever")) {
         o->wait_ms = -1;
         return 1;
      }
      return r < 0 || !parse_ms ("--wait", v, 0, LEASELOCK_TTL_MAX_MS, &o->wait_ms) ? -1 : 1;
   }
   if ((r = opt_value (argc, argv, i, "--min-hold", &v)) != 0)
      return r < 0 || !parse_ms ("--min-hold", v, 0, LEASELOCK_TTL_MAX_MS, &o->min_hold_ms) ? -1
                                                                                            : 1;
   if ((r = opt_value (argc, argv, i, "--grace", &v)) != 0) {
      o->grace_text = r > 0 ? v : NULL;
      return r < 0 || !parse_ms ("--grace", v, 0, LEASELOCK_TTL_MAX_MS, &o->grace_ms) ? -1 : 1;
   }
   if ((r = opt_value (argc, argv, i, "--label", &v)) != 0) {
      if (r < 0)
         return -1;
      if (!utf8_copy (v, o->label_buf, sizeof o->label_buf)) {
         usage_error ("--label must be at most %d bytes of UTF-8", LEASELOCK_KEY_MAX);
         return -1;
      }
      o->label = o->label_buf;
      return 1;
   }
   return 0;
}

/* --grace must fit in the TTL (see max_grace_ms). One that was typed and
 * does not fit is refused: the command would lose the time it counts on.
 * The default (10s) shrinks to fit. */
static bool fit_grace (run_opts_t *o)
{
   int64_t max = max_grace_ms (o->ttl_ms);
   if (o->grace_ms <= max)
      return true;
   if (!o->grace_text) {
      o->grace_ms = max;
      return true;
   }
   char m[32];
   fmt_duration (max, true, m, sizeof m);
   usage_error ("--grace %s does not fit in --ttl %s: at most %s (SIGKILL must come before the "
                "lease can expire)",
                o->grace_text, o->ttl_text, m);
   return false;
}

/* Parses run's arguments into o. Returns PARSED, or the exit status. */
static int parse_run (const char *uri, int argc, char **argv, run_opts_t *o)
{
   *o = (run_opts_t){
      .uri = uri, .ttl_ms = DEFAULT_TTL_MS, .grace_ms = DEFAULT_GRACE_MS, .ttl_text = "30s"
   };
   bool saw_dashes = false;
   for (int i = 0; i < argc; i++) {
      int r;
      if (!strcmp (argv[i], "--")) {
         saw_dashes = true;
         if (i + 1 < argc)
            o->cmd = argv + i + 1;
         break;
      }
      if (is_help (argv[i]))
         return print_help ();
      if ((r = run_option (argc, argv, &i, o)) < 0)
         return EXIT_USAGE;
      if (r > 0)
         continue;
      if (argv[i][0] == '-' && argv[i][1] != '\0')
         return usage_error ("unknown option %s", argv[i]);
      if (o->key)
         return usage_error ("unexpected argument \"%s\": put the command after \"--\"", argv[i]);
      o->key = argv[i];
   }
   if (!o->key)
      return usage_error ("missing KEY");
   if (!saw_dashes)
      return usage_error ("missing \"--\" before the command (leaselock run KEY -- CMD ...)");
   if (!o->cmd)
      return usage_error ("missing command after \"--\"");
   if (!fit_grace (o))
      return EXIT_USAGE;
   if (!o->label) {
      /* CMD's file name, which need not be UTF-8: shown, not refused. */
      const char *slash = strrchr (o->cmd[0], '/');
      const char *name = slash ? slash + 1 : o->cmd[0];
      utf8_copy (name, o->label_buf, sizeof o->label_buf);
      o->label = o->label_buf;
   }
   return PARSED;
}

/* ---- run: signals ----------------------------------------------------- */

static const int forwarded[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 };

typedef struct run_signals
{
   int sigfd;          /* the forwarded signals and SIGCHLD */
   int lost_pipe[2];   /* written by on_lost */
   sigset_t orig_mask; /* the mask leaselock started with, for the command */
} run_signals_t;

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

/* ---- run: acquire ----------------------------------------------------- */

/* Acquires o->key, waiting as --wait says. Sets *status when it fails. */
static leaselock_lease_t *acquire_lease (leaselock_client_t *client,
                                         const run_opts_t *o,
                                         int sigfd,
                                         int *status)
{
   wait_ctx_t wctx = { sigfd, 0 };
   leaselock_acquire_opts_t opts;
   leaselock_acquire_opts_init (&opts);
   opts.ttl_ms = o->ttl_ms;
   opts.timeout_ms = o->wait_ms;
   opts.min_hold_ms = o->min_hold_ms;
   opts.auto_renew = true;
   opts.on_lost = on_lost;
   opts.should_stop = should_stop;
   opts.should_stop_data = &wctx;
   leaselock_lease_t *lease = NULL;
   leaselock_error_t err;
   if (leaselock_acquire (client, o->key, strlen (o->key), &opts, &lease, &err))
      return lease;
   if (err.code == LEASELOCK_BUSY) {
      report_busy (client, o->key, "");
      *status = EXIT_BUSY;
   } else if (err.code == LEASELOCK_TIMEOUT) {
      char w[32], why[64];
      fmt_ms (o->wait_ms, w, sizeof w);
      snprintf (why, sizeof why, " (gave up after --wait %s)", w);
      report_busy (client, o->key, why);
      *status = EXIT_BUSY;
   } else if (err.code == LEASELOCK_INTERRUPTED && wctx.signo) {
      say ("interrupted by signal %d while waiting for the lock", wctx.signo);
      *status = 128 + wctx.signo;
   } else {
      *status = fail ("acquire", &err);
   }
   return NULL;
}

/* ---- run: the command and its watchdog -------------------------------- */

typedef struct child
{
   pid_t pid;      /* the command, -1 before it starts */
   pid_t target;   /* where signals go: -pid (its own process group) or pid */
   pid_t watchdog; /* -1: none */
   int watch_fd;   /* our end of the watchdog's socket: 'X' = done, EOF = we died */
   int timer_fd;   /* CLOCK_BOOTTIME timer shared with the watchdog: its SIGKILL */
} child_t;

/* What the forked command needs, all prepared before the fork. */
typedef struct exec_plan
{
   char **argv, **env;
   char **paths; /* where to look for argv[0], in PATH order, NULL-terminated */
   sigset_t mask;
   bool own_group;
   pid_t parent;
   int go_fd;  /* a socket: a byte once the watchdog runs, EOF if we died */
   int go_wr;  /* our end of it, which the child closes */
   int err_fd; /* write end, close-on-exec: errno when no exec worked */
} exec_plan_t;

/* The candidates execvp would try for file, or NULL (out of memory). PATH
 * is the caller's, as for posix_spawnp. Free with free_paths. */
static char **exec_paths (const char *file)
{
   const char *path = getenv ("PATH");
   if (!path)
      path = "/bin:/usr/bin"; /* glibc's default */
   size_t n = 1;
   for (const char *p = path; *p; p++)
      n += *p == ':';
   char **paths = calloc (n + 1, sizeof *paths);
   if (!paths)
      return NULL;
   if (strchr (file, '/')) {
      if (!(paths[0] = strdup (file))) {
         free (paths);
         return NULL;
      }
      return paths;
   }
   if (!*file)
      return paths; /* none: ENOENT */
   size_t k = 0;
   for (const char *p = path;; p++) {
      size_t len = strcspn (p, ":");
      /* An empty entry is the current directory. */
      if (asprintf (&paths[k], "%.*s%s%s", (int)len, p, len ? "/" : "", file) < 0) {
         paths[k] = NULL;
         free_paths (paths);
         return NULL;
      }
      k++;
      p += len;
      if (!*p)
         break;
   }
   return paths;
}

/* In the forked child: joins its own process group, arranges to die with
 * leaselock, waits for the watchdog and execs. Async-signal-safe calls only.
 * A SIGKILL on the parent's death comes when the forking thread ends; that is
 * the main thread, which lives as long as leaselock. */
static _Noreturn void exec_child (const exec_plan_t *p)
{
   if (p->own_group)
      setpgid (0, 0);
   /* The getppid check covers a parent that died before prctl. */
   if (prctl (PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid () != p->parent)
      _exit (EXIT_INTERNAL);
   close (p->go_wr);
   char go;
   ssize_t n;
   while ((n = read (p->go_fd, &go, 1)) < 0 && errno == EINTR)
      ;
   if (n != 1)
      _exit (EXIT_INTERNAL);
   sigprocmask (SIG_SETMASK, &p->mask, NULL);
   /* As execvp: a file not found there is looked for further on, any other
    * error ends the search; EACCES is reported if no file would run. */
   int err = ENOENT;
   bool eacces = false, searched_all = true;
   for (char **path = p->paths; *path; path++) {
      execve (*path, p->argv, p->env);
      err = errno;
      eacces |= err == EACCES;
      if (err != EACCES && err != ENOENT && err != ENOTDIR && err != ESTALE && err != ENODEV &&
          err != ETIMEDOUT) {
         searched_all = false;
         break;
      }
   }
   if (eacces && searched_all)
      err = EACCES;
   n = write (p->err_fd, &err, sizeof err);
   (void)n;
   _exit (EXIT_CANNOT_EXEC);
}

/* The watchdog, forked: SIGKILLs target when leaselock dies (its socket
 * ends without an 'X') or its timer runs out. Async-signal-safe calls only. */
static _Noreturn void watchdog_main (int watch_fd, int timer_fd, pid_t target)
{
   /* The signals leaselock forwards stay blocked (the mask is inherited);
    * job control must not stop it either. */
   struct sigaction ign;
   memset (&ign, 0, sizeof ign);
   ign.sa_handler = SIG_IGN;
   sigaction (SIGTSTP, &ign, NULL);
   sigaction (SIGTTIN, &ign, NULL);
   sigaction (SIGTTOU, &ign, NULL);
   /* Keep no terminal, pipe or database connection of leaselock's open. */
   unsigned lo = (unsigned)(watch_fd < timer_fd ? watch_fd : timer_fd);
   unsigned hi = (unsigned)(watch_fd < timer_fd ? timer_fd : watch_fd);
   if (lo > 0)
      close_range (0, lo - 1, 0);
   if (hi > lo + 1)
      close_range (lo + 1, hi - 1, 0);
   close_range (hi + 1, ~0U, 0);
   for (;;) {
      struct pollfd pfd[2] = { { watch_fd, POLLIN, 0 }, { timer_fd, POLLIN, 0 } };
      if (poll (pfd, 2, -1) < 0) {
         if (errno == EINTR)
            continue;
         break;
      }
      if (pfd[1].revents)
         break; /* the lease's deadline */
      char c;
      ssize_t n = read (watch_fd, &c, 1);
      if (n == 1 && c == 'X')
         _exit (0);
      if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN))
         break; /* leaselock died */
   }
   kill (target, SIGKILL);
   _exit (0);
}

static int64_t boot_ms (void)
{
   struct timespec ts;
   clock_gettime (CLOCK_BOOTTIME, &ts);
   return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Sets the watchdog's SIGKILL to at_mono (CLOCK_MONOTONIC ms), counted on
 * CLOCK_BOOTTIME. */
static void arm_watchdog (const child_t *ch, int64_t at_mono)
{
   int64_t at = boot_ms () + (at_mono - mono_ms ());
   struct itimerspec its;
   memset (&its, 0, sizeof its);
   at = at > 1 ? at : 1; /* zero would disarm it */
   its.it_value.tv_sec = at / 1000;
   its.it_value.tv_nsec = at % 1000 * 1000000;
   timerfd_settime (ch->timer_fd, TFD_TIMER_ABSTIME, &its, NULL);
}

/* Tells the watchdog to end without killing anything. (A socket, not a
 * pipe: MSG_NOSIGNAL, when the watchdog has already gone, spares us a
 * SIGPIPE that we may not ignore, for the command would inherit that.) */
static void watchdog_done (child_t *ch)
{
   if (ch->watch_fd >= 0) {
      ssize_t n = send (ch->watch_fd, "X", 1, MSG_NOSIGNAL);
      (void)n;
   }
   close_fd (&ch->watch_fd);
}

/* Forks the command, which waits on plan->go_fd before it execs. */
static bool fork_command (exec_plan_t *plan, child_t *ch)
{
   pid_t pid = _Fork ();
   if (pid == 0)
      exec_child (plan);
   if (pid < 0)
      return false;
   ch->pid = pid;
   ch->target = plan->own_group ? -pid : pid;
   if (plan->own_group)
      setpgid (pid, pid); /* also here, so that -pid is a group at once */
   return true;
}

/* Forks the watchdog of ch, its timer set to the lease's deadline. */
static bool start_watchdog (child_t *ch, leaselock_lease_t *lease, int64_t margin)
{
   int watch[2];
   ch->timer_fd = timerfd_create (CLOCK_BOOTTIME, TFD_CLOEXEC);
   if (ch->timer_fd < 0 || socketpair (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, watch) < 0)
      return false;
   arm_watchdog (ch, mono_ms () + leaselock_lease_remaining_ms (lease) - margin);
   pid_t pid = _Fork ();
   if (pid == 0)
      watchdog_main (watch[0], ch->timer_fd, ch->target);
   close (watch[0]);
   if (pid < 0) {
      close (watch[1]);
      return false;
   }
   ch->watchdog = pid;
   ch->watch_fd = watch[1];
   return true;
}

/* Lets the command exec, and waits for it to have done so (or died).
 * Returns 0, or the errno of the failed exec. */
static int let_command_exec (int go_fd, int err_fd)
{
   ssize_t n = send (go_fd, "g", 1, MSG_NOSIGNAL); /* (no SIGPIPE if it died) */
   (void)n;
   int err = 0;
   while ((n = read (err_fd, &err, sizeof err)) < 0 && errno == EINTR)
      ;
   return n == (ssize_t)sizeof err ? err : 0;
}

/* Starts o->cmd and its watchdog. Unless leaselock is in the foreground of
 * a terminal, where the command must stay in its group to read it, the
 * command gets its own process group, so a loss stops the whole job. Sets
 * *status when it fails. */
static bool start_command (const run_opts_t *o,
                           leaselock_lease_t *lease,
                           const sigset_t *mask,
                           child_t *ch,
                           int *status)
{
   int go[2] = { -1, -1 }, err[2] = { -1, -1 };
   exec_plan_t plan = { .argv = o->cmd,
                        .env = child_env (lease),
                        .paths = exec_paths (o->cmd[0]),
                        .mask = *mask,
                        .parent = getpid () };
   plan.own_group = !(isatty (STDIN_FILENO) && tcgetpgrp (STDIN_FILENO) == getpgrp ());
   bool ok = false;
   *status = EXIT_INTERNAL;
   if (!plan.env || !plan.paths) {
      say ("out of memory");
   } else if (socketpair (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, go) < 0 ||
              pipe2 (err, O_CLOEXEC) < 0) {
      say ("cannot start %s: %s", o->cmd[0], strerror (errno));
   } else {
      plan.go_fd = go[0];
      plan.go_wr = go[1];
      plan.err_fd = err[1];
      if (!fork_command (&plan, ch)) {
         say ("cannot start %s: %s", o->cmd[0], strerror (errno));
      } else {
         /* Only the command may hold these, or their EOF would not come. */
         close_fd (&go[0]);
         close_fd (&err[1]);
         if (!start_watchdog (ch, lease, kill_margin_ms (o->ttl_ms)))
            say ("cannot start the watchdog of %s: %s", o->cmd[0], strerror (errno));
         else
            ok = true;
      }
   }
   close_fd (&go[0]);
   close_fd (&err[1]);
   int exec_err = ok ? let_command_exec (go[1], err[0]) : 0;
   close_fd (&go[1]); /* without the go byte, EOF: the command ends */
   close_fd (&err[0]);
   free_env (plan.env);
   free_paths (plan.paths);
   if (exec_err) {
      say ("cannot run %s: %s", o->cmd[0], strerror (exec_err));
      *status = exec_err == ENOENT ? EXIT_NOT_FOUND : EXIT_CANNOT_EXEC;
      ok = false;
   }
   if (!ok && ch->pid > 0) {
      watchdog_done (ch);
      waitpid (ch->pid, NULL, 0);
      ch->pid = -1;
   }
   return ok;
}

/* ---- run: supervision ------------------------------------------------- */

typedef struct supervisor
{
   const run_opts_t *o;
   leaselock_lease_t *lease;
   const run_signals_t *sig;
   child_t *ch;
   int64_t margin;   /* kill_margin_ms */
   int64_t deadline; /* the lease's local deadline as last seen (monotonic ms) */
   int64_t armed;    /* the watchdog's timer (monotonic ms) */
   int64_t kill_at;  /* when SIGKILL is due, once stopping */
   bool stopping, killed, internal_error;
   int wstatus;
} supervisor_t;

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
static void supervise (supervisor_t *sv)
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

/* ---- run: exit status ------------------------------------------------- */

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

static int cmd_run (const char *uri, int argc, char **argv)
{
   run_opts_t o;
   int status = parse_run (uri, argc, argv, &o);
   if (status != PARSED)
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

/* ---- main ------------------------------------------------------------- */

int main (int argc, char **argv)
{
   const char *uri = NULL;
   int i = 1;
   for (; i < argc; i++) {
      int r;
      if (is_help (argv[i]))
         return print_help ();
      if (!strcmp (argv[i], "--version")) {
         printf ("leaselock %s\n", LEASELOCK_VERSION);
         return 0;
      }
      if ((r = opt_uri (argc, argv, &i, &uri)) != 0) {
         if (r < 0)
            return EXIT_USAGE;
         continue;
      }
      if (argv[i][0] == '-')
         return usage_error ("unknown option %s", argv[i]);
      break;
   }
   if (i >= argc)
      return usage_error ("missing command (run, status, list or release)");
   const char *sub = argv[i];
   int sub_argc = argc - i - 1;
   char **sub_argv = argv + i + 1;
   if (!strcmp (sub, "run")) {
      cmd_name = "leaselock run";
      return cmd_run (uri, sub_argc, sub_argv);
   }
   if (!strcmp (sub, "status")) {
      cmd_name = "leaselock status";
      return cmd_status (uri, sub_argc, sub_argv);
   }
   if (!strcmp (sub, "list")) {
      cmd_name = "leaselock list";
      return cmd_list (uri, sub_argc, sub_argv);
   }
   if (!strcmp (sub, "release")) {
      cmd_name = "leaselock release";
      return cmd_release (uri, sub_argc, sub_argv);
   }
   return usage_error ("unknown command \"%s\" (run, status, list or release)", sub);
}
