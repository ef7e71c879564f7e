/*
 * cli.c - the leaselock command line tool.
 *
 *   leaselock run [options] KEY -- CMD [ARGS...]
 *   leaselock status [--json] KEY
 *   leaselock list [--json] [PREFIX]
 *   leaselock release --force KEY
 *
 * Uses the public API (leaselock.h) only. "run" holds the lease in this
 * process (renewed by the core's renewal thread) while the command runs as
 * a child started with posix_spawn, so the child execs at once and never
 * touches the lease. Every event the parent waits for arrives on one poll():
 * signals through a signalfd (they are blocked in every thread, so none is
 * lost between checks) and the loss of the lease through a pipe written by
 * the on_lost callback on the renewal thread.
 */
#include "leaselock.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
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
  "If the lease is lost, the command gets SIGTERM, then SIGKILL after the\n"
  "grace period. Unless stdin is the controlling terminal, the command runs\n"
  "in its own process group and the signals go to the whole group.\n"
  "  --ttl DURATION       lease time to live (default 30s; 1ms to 30d)\n"
  "  --wait DURATION      wait that long for a busy lock (default 0: one try;\n"
  "                       \"forever\" waits without limit)\n"
  "  --min-hold DURATION  keep the lock at least this long after acquiring,\n"
  "                       even if CMD ends sooner (default 0)\n"
  "  --grace DURATION     time between SIGTERM and SIGKILL on loss (default 10s)\n"
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
  "  76     run: the lease was lost while CMD ran (CMD was stopped)\n"
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

/* Length of the valid UTF-8 sequence at s (1..4), or 0 if invalid. */
static size_t utf8_seq (const unsigned char *s, size_t len)
{
   unsigned char c = s[0];
   size_t n;
   unsigned cp;
   if (c < 0x80)
      return 1;
   if (c >= 0xC2 && c <= 0xDF)
      n = 1, cp = c & 0x1F;
   else if (c >= 0xE0 && c <= 0xEF)
      n = 2, cp = c & 0x0F;
   else if (c >= 0xF0 && c <= 0xF4)
      n = 3, cp = c & 0x07;
   else
      return 0;
   if (n >= len)
      return 0;
   for (size_t k = 1; k <= n; k++) {
      if ((s[k] & 0xC0) != 0x80)
         return 0;
      cp = (cp << 6) | (s[k] & 0x3F);
   }
   if ((n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10FFFF ||
       (cp >= 0xD800 && cp <= 0xDFFF))
      return 0;
   return n + 1;
}

/* Writes s as a JSON string: escapes quotes, backslashes and control
 * characters; bytes that are not UTF-8 become U+FFFD. */
static void put_json_string (FILE *f, const char *s, size_t len)
{
   const unsigned char *u = (const unsigned char *)s;
   fputc ('"', f);
   for (size_t i = 0; i < len;) {
      unsigned char c = u[i];
      size_t n = utf8_seq (u + i, len - i);
      if (n == 0) {
         fputs ("\\ufffd", f);
         i++;
         continue;
      }
      if (n > 1) {
         fwrite (u + i, 1, n, f);
         i += n;
         continue;
      }
      switch (c) {
         case '"':
            fputs ("\\\"", f);
            break;
         case '\\':
            fputs ("\\\\", f);
            break;
         case '\n':
            fputs ("\\n", f);
            break;
         case '\r':
            fputs ("\\r", f);
            break;
         case '\t':
            fputs ("\\t", f);
            break;
         case '\b':
            fputs ("\\b", f);
            break;
         case '\f':
            fputs ("\\f", f);
            break;
         default:
            if (c < 0x20 || c == 0x7f)
               fprintf (f, "\\u%04x", c);
            else
               fputc (c, f);
      }
      i++;
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

/* Copies the first LEN bytes of S to OUT (SIZE > 0 bytes), each byte that
 * is not part of valid UTF-8 as '?', cut at a character boundary to fit.
 * Returns whether S was valid UTF-8 and fit. */
static bool utf8_copy (const char *s, size_t len, char *out, size_t size)
{
   const unsigned char *u = (const unsigned char *)s;
   bool clean = true;
   size_t o = 0;
   for (size_t i = 0; i < len;) {
      size_t n = u[i] ? utf8_seq (u + i, len - i) : 0;
      if (o + (n ? n : 1) >= size) {
         clean = false;
         break;
      }
      if (n) {
         memcpy (out + o, s + i, n);
         o += n, i += n;
      } else {
         out[o++] = '?', i++;
         clean = false;
      }
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

static int cmd_run (const char *uri, int argc, char **argv)
{
   int64_t ttl_ms = DEFAULT_TTL_MS, wait_ms = 0, min_hold_ms = 0, grace_ms = DEFAULT_GRACE_MS;
   const char *label = NULL, *key = NULL;
   char label_buf[LEASELOCK_KEY_MAX + 1];
   char **cmd = NULL;
   bool saw_dashes = false;

   for (int i = 0; i < argc; i++) {
      const char *v;
      int r;
      if (!strcmp (argv[i], "--")) {
         saw_dashes = true;
         if (i + 1 < argc)
            cmd = argv + i + 1;
         break;
      }
      if (is_help (argv[i]))
         return print_help ();
      if ((r = opt_uri (argc, argv, &i, &uri)) != 0) {
         if (r < 0)
            return EXIT_USAGE;
      } else if ((r = opt_value (argc, argv, &i, "--ttl", &v)) != 0) {
         if (r < 0 || !parse_ms ("--ttl", v, 1, LEASELOCK_TTL_MAX_MS, &ttl_ms))
            return EXIT_USAGE;
      } else if ((r = opt_value (argc, argv, &i, "--wait", &v)) != 0) {
         if (r < 0)
            return EXIT_USAGE;
         if (!strcmp (v, "forever"))
            wait_ms = -1;
         else if (!parse_ms ("--wait", v, 0, LEASELOCK_TTL_MAX_MS, &wait_ms))
            return EXIT_USAGE;
      } else if ((r = opt_value (argc, argv, &i, "--min-hold", &v)) != 0) {
         if (r < 0 || !parse_ms ("--min-hold", v, 0, LEASELOCK_TTL_MAX_MS, &min_hold_ms))
            return EXIT_USAGE;
      } else if ((r = opt_value (argc, argv, &i, "--grace", &v)) != 0) {
         if (r < 0 || !parse_ms ("--grace", v, 0, LEASELOCK_TTL_MAX_MS, &grace_ms))
            return EXIT_USAGE;
      } else if ((r = opt_value (argc, argv, &i, "--label", &v)) != 0) {
         if (r < 0)
            return EXIT_USAGE;
         if (!utf8_copy (v, strlen (v), label_buf, sizeof label_buf))
            return usage_error ("--label must be at most %d bytes of UTF-8", LEASELOCK_KEY_MAX);
         label = label_buf;
      } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
         return usage_error ("unknown option %s", argv[i]);
      } else if (!key) {
         key = argv[i];
      } else {
         return usage_error ("unexpected argument \"%s\": put the command after \"--\"", argv[i]);
      }
   }
   if (!key)
      return usage_error ("missing KEY");
   if (!saw_dashes)
      return usage_error ("missing \"--\" before the command (leaselock run KEY -- CMD ...)");
   if (!cmd)
      return usage_error ("missing command after \"--\"");
   if (!label) {
      /* CMD's file name, which need not be UTF-8: shown, not refused. */
      const char *slash = strrchr (cmd[0], '/');
      const char *name = slash ? slash + 1 : cmd[0];
      utf8_copy (name, strlen (name), label_buf, sizeof label_buf);
      label = label_buf;
   }

   /* Block the signals we wait for in every thread (the renewal thread
    * inherits the mask) and receive them through a signalfd. SIGCHLD must
    * not be ignored, or the child would be reaped behind our back. */
   signal (SIGCHLD, SIG_DFL);
   sigset_t waited, orig_mask;
   sigemptyset (&waited);
   int forwarded[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 };
   for (size_t i = 0; i < sizeof forwarded / sizeof forwarded[0]; i++)
      sigaddset (&waited, forwarded[i]);
   sigaddset (&waited, SIGCHLD);
   pthread_sigmask (SIG_BLOCK, &waited, &orig_mask);
   int sigfd = signalfd (-1, &waited, SFD_NONBLOCK | SFD_CLOEXEC);
   int lost_pipe[2] = { -1, -1 };
   if (sigfd < 0 || pipe2 (lost_pipe, O_NONBLOCK | O_CLOEXEC) < 0) {
      say ("cannot set up signal handling: %s", strerror (errno));
      if (sigfd >= 0)
         close (sigfd);
      return EXIT_INTERNAL;
   }
   lost_fd = lost_pipe[1];

   int status = EXIT_INTERNAL;
   leaselock_lease_t *lease = NULL;
   char **env = NULL;
   posix_spawnattr_t attr;
   bool attr_ok = false;
   leaselock_error_t err;
   wait_ctx_t wctx = { sigfd, 0 };

   leaselock_client_t *client = open_client (uri, label, &status);
   if (!client)
      goto done;

   leaselock_acquire_opts_t opts;
   leaselock_acquire_opts_init (&opts);
   opts.ttl_ms = ttl_ms;
   opts.timeout_ms = wait_ms;
   opts.min_hold_ms = min_hold_ms;
   opts.auto_renew = true;
   opts.on_lost = on_lost;
   opts.should_stop = should_stop;
   opts.should_stop_data = &wctx;
   if (!leaselock_acquire (client, key, strlen (key), &opts, &lease, &err)) {
      if (err.code == LEASELOCK_BUSY) {
         report_busy (client, key, "");
         status = EXIT_BUSY;
      } else if (err.code == LEASELOCK_TIMEOUT) {
         char w[32];
         fmt_ms (wait_ms, w, sizeof w);
         char why[64];
         snprintf (why, sizeof why, " (gave up after --wait %s)", w);
         report_busy (client, key, why);
         status = EXIT_BUSY;
      } else if (err.code == LEASELOCK_INTERRUPTED && wctx.signo) {
         say ("interrupted by signal %d while waiting for the lock", wctx.signo);
         status = 128 + wctx.signo;
      } else {
         status = fail ("acquire", &err);
      }
      goto done;
   }

   env = child_env (lease);
   if (!env || posix_spawnattr_init (&attr) != 0) {
      say ("out of memory");
      goto done;
   }
   attr_ok = true;
   /* The child gets the mask we started with. It runs in its own process
    * group (so a loss stops the whole job) unless we are in the foreground
    * of a terminal, where it must stay with us to read it. */
   short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
   bool own_group = !(isatty (STDIN_FILENO) && tcgetpgrp (STDIN_FILENO) == getpgrp ());
   if (own_group)
      flags |= POSIX_SPAWN_SETPGROUP;
   sigset_t def;
   sigemptyset (&def);
   sigaddset (&def, SIGCHLD);
   posix_spawnattr_setflags (&attr, flags);
   posix_spawnattr_setsigmask (&attr, &orig_mask);
   posix_spawnattr_setsigdefault (&attr, &def);
   posix_spawnattr_setpgroup (&attr, 0);

   pid_t pid;
   int rc = posix_spawnp (&pid, cmd[0], NULL, &attr, cmd, env);
   if (rc != 0) {
      say ("cannot run %s: %s", cmd[0], strerror (rc));
      status = (rc == ENOENT) ? EXIT_NOT_FOUND : EXIT_CANNOT_EXEC;
      goto done;
   }
   pid_t target = own_group ? -pid : pid;

   bool lost = false, killed = false, internal_error = false;
   int64_t kill_at = -1;
   int wstatus = 0;
   for (;;) {
      /* Wake at the lease's local deadline too: the renewal thread reports a
       * loss only once its database call returns, and a call stuck in a
       * busy database must not let the command outlive the lease. */
      int64_t wake = lost ? kill_at : leaselock_lease_remaining_ms (lease);
      int timeout = -1;
      if (wake >= 0) {
         int64_t left = lost ? wake - mono_ms () : wake;
         timeout = left > 0 ? (int)(left > 60000 ? 60000 : left) : 0;
      }
      struct pollfd pfd[2] = { { sigfd, POLLIN, 0 }, { lost_pipe[0], POLLIN, 0 } };
      int n = poll (pfd, 2, timeout);
      if (n < 0 && errno != EINTR) {
         /* Nothing can be watched any more: stop the command. */
         say ("poll: %s; stopping %s (pid %d)", strerror (errno), cmd[0], (int)pid);
         kill (target, SIGKILL);
         waitpid (pid, &wstatus, 0);
         internal_error = true;
         break;
      }
      bool child_done = false;
      struct signalfd_siginfo si;
      while (read (sigfd, &si, sizeof si) == (ssize_t)sizeof si) {
         if (si.ssi_signo == SIGCHLD) {
            pid_t w = waitpid (pid, &wstatus, WNOHANG);
            if (w == pid)
               child_done = true;
         } else if (own_group || si.ssi_code != SI_KERNEL) {
            /* (In the terminal's group, the terminal's own signals reach
             * the command directly.) */
            kill (target, (int)si.ssi_signo);
         }
      }
      if (child_done)
         break;
      char drain[16];
      /* Lost: on_lost wrote to the pipe, or the local deadline passed
       * (leaselock_lease_state judges it). */
      bool lost_now = read (lost_pipe[0], drain, sizeof drain) > 0 ||
                      leaselock_lease_state (lease) == LEASELOCK_STATE_LOST;
      if (lost_now && !lost) {
         lost = true;
         char g[32];
         fmt_ms (grace_ms, g, sizeof g);
         fprintf (stderr, "%s: lease on ", cmd_name);
         put_text (stderr, key, strlen (key));
         fprintf (stderr,
                  " lost (fence %" PRId64 "); sending SIGTERM to %s (pid %d), SIGKILL in %s\n",
                  leaselock_lease_fence (lease), cmd[0], (int)pid, g);
         kill (target, SIGTERM);
         kill_at = mono_ms () + grace_ms;
      }
      if (kill_at >= 0 && !killed && mono_ms () >= kill_at) {
         say ("%s (pid %d) still running after the grace period: sending SIGKILL", cmd[0],
              (int)pid);
         kill (target, SIGKILL);
         killed = true;
         kill_at = -1;
      }
   }

   if (!lost && leaselock_lease_state (lease) == LEASELOCK_STATE_LOST)
      lost = true;
   if (!lost && !leaselock_lease_release (lease, &err)) {
      if (err.code == LEASELOCK_NOT_HELD || err.code == LEASELOCK_LOST)
         lost = true;
      else
         say ("release: %s: %s (the lease ends when its TTL runs out)",
              leaselock_code_name (err.code), err.message);
   }
   if (internal_error) {
      status = EXIT_INTERNAL;
   } else if (lost) {
      fprintf (stderr, "%s: the lease on ", cmd_name);
      put_text (stderr, key, strlen (key));
      fprintf (stderr, " was lost while %s ran (exit status %d)\n", cmd[0], EXIT_LOST);
      status = EXIT_LOST;
   } else if (WIFEXITED (wstatus)) {
      status = WEXITSTATUS (wstatus);
   } else if (WIFSIGNALED (wstatus)) {
      status = 128 + WTERMSIG (wstatus);
   } else {
      status = EXIT_INTERNAL;
   }

done:
   if (attr_ok)
      posix_spawnattr_destroy (&attr);
   free_env (env);
   leaselock_lease_destroy (lease);
   leaselock_client_destroy (client);
   close (sigfd);
   close (lost_pipe[0]);
   close (lost_pipe[1]);
   lost_fd = -1;
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
