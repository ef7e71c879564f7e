/*
 * options.c - the leaselock CLI's options: "--name VALUE" and "--name=VALUE",
 * durations (read by the core's leaselock_parse_duration), the arguments of
 * status, list, release and prune, and those of run with the rules that tie
 * --grace to --ttl.
 */
#include "cli.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_TTL_MS 30000
#define DEFAULT_GRACE_MS 10000

/*
 * Matches "--name VALUE" or "--name=VALUE" at argv[*i]. Returns 1 with
 * *value set (and *i moved past the value), 0 when argv[*i] is another
 * argument, -1 when the value is missing (message printed).
 */
int opt_value (int argc, char **argv, int *i, const char *name, const char **value)
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
bool parse_ms (const char *opt, const char *text, int64_t min, int64_t max, int64_t *out)
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
int opt_uri (int argc, char **argv, int *i, const char **uri)
{
   int r = opt_value (argc, argv, i, "--uri", uri);
   if (r == 1 && !**uri) {
      usage_error ("--uri is empty");
      return -1;
   }
   return r;
}

bool is_help (const char *a)
{
   return !strcmp (a, "--help") || !strcmp (a, "-h");
}

/* The option status, list, release and prune each take besides --help
 * and --uri: a boolean FLAG (sets *flag) or a duration (--name VALUE, 0 to
 * 30d, into *ms); status also -v/--verbose. Points to the caller's
 * result. */
typedef struct admin_opt
{
   const char *name;
   bool *flag; /* a boolean option, or NULL */
   const char *name2;
   bool *flag2;   /* a second boolean option (list --held), or NULL */
   int64_t *ms;   /* else a duration option */
   bool *verbose; /* -v, --verbose: taken when not NULL */
} admin_opt_t;

/* Reads opt at argv[*i]: 1 read, 0 another argument, -1 error (message
 * printed). */
static int admin_option (int argc, char **argv, int *i, const admin_opt_t *opt)
{
   const char *v;
   int r;
   if (opt->verbose && (!strcmp (argv[*i], "-v") || !strcmp (argv[*i], "--verbose"))) {
      *opt->verbose = true;
      return 1;
   }
   if (opt->flag2 && !strcmp (argv[*i], opt->name2)) {
      *opt->flag2 = true;
      return 1;
   }
   if (opt->flag) {
      r = !strcmp (argv[*i], opt->name);
      *opt->flag |= r;
      return r;
   }
   if ((r = opt_value (argc, argv, i, opt->name, &v)) == 0)
      return 0;
   return r < 0 || !parse_ms (opt->name, v, 0, LEASELOCK_TTL_MAX_MS, opt->ms) ? -1 : 1;
}

/* The loop of status, list, release and prune: --help, --uri (into *uri,
 * which holds the default), opt and at most one positional argument (into
 * *arg; TAKES ends the error for a second one, e.g. "status takes one
 * KEY"). Returns PARSED when all were read, else the exit status the
 * subcommand returns at once (0 after --help, EXIT_USAGE on an error). */
static int parse_admin_loop (int argc, char **argv, const admin_opt_t *opt, const char *takes,
                             const char **uri, const char **arg)
{
   for (int i = 0; i < argc; i++) {
      if (is_help (argv[i]))
         return print_help ();
      int r = opt_uri (argc, argv, &i, uri);
      if (r == 0)
         r = admin_option (argc, argv, &i, opt);
      if (r < 0)
         return EXIT_USAGE;
      if (r > 0)
         continue;
      if (argv[i][0] == '-' && argv[i][1] != '\0')
         return usage_error ("unknown option %s", argv[i]);
      if (*arg)
         return usage_error ("unexpected argument \"%s\" (%s)", argv[i], takes);
      *arg = argv[i];
   }
   return PARSED;
}

/* status, list and release: one boolean option FLAG (sets a->flag), with
 * verbose_ok also -v/--verbose (sets a->verbose), at most one KEY or
 * PREFIX (see parse_admin_loop). */
int parse_admin_args (int argc, char **argv, const char *flag, const char *flag2, bool verbose_ok,
                      const char *takes, admin_args_t *a)
{
   admin_opt_t opt = { .name = flag,
                       .flag = &a->flag,
                       .name2 = flag2,
                       .flag2 = flag2 ? &a->held : NULL,
                       .verbose = verbose_ok ? &a->verbose : NULL };
   return parse_admin_loop (argc, argv, &opt, takes, &a->uri, &a->arg);
}

/* prune: --older-than DURATION and at most one PREFIX. */
int parse_prune_args (int argc, char **argv, prune_args_t *a)
{
   admin_opt_t opt = { .name = "--older-than", .ms = &a->older_than_ms };
   return parse_admin_loop (argc, argv, &opt, "prune takes one PREFIX", &a->uri, &a->prefix);
}

/* An exit status for -E / --conflict-exit-code: 0 to 255, digits only.
 * Prints and returns false otherwise. */
static bool parse_exit_code (const char *opt, const char *text, int *out)
{
   size_t n = strspn (text, "0123456789");
   long v = n && n <= 3 && !text[n] ? strtol (text, NULL, 10) : -1;
   if (v < 0 || v > 255) {
      usage_error ("%s \"%s\": expected an exit status, a whole number from 0 to 255", opt, text);
      return false;
   }
   *out = (int)v;
   return true;
}

/* run's cron options: -q/--quiet, -E/--conflict-exit-code N. 1 read, 0 not
 * one of them, -1 error (message printed). */
static int cron_option (int argc, char **argv, int *i, run_opts_t *o)
{
   const char *v;
   int r;
   if (!strcmp (argv[*i], "-q") || !strcmp (argv[*i], "--quiet")) {
      o->quiet = true;
      return 1;
   }
   if (!strcmp (argv[*i], "--fair")) {
      o->fair = true;
      return 1;
   }
   if (!strcmp (argv[*i], "--reentrant")) {
      o->reentrant = true;
      return 1;
   }
   if (!strcmp (argv[*i], "--shared") || !strcmp (argv[*i], "--exclusive")) {
      o->rw = argv[*i][2] == 's' ? LEASELOCK_SHARED : LEASELOCK_EXCLUSIVE;
      return 1;
   }
   const char *names[] = { "--conflict-exit-code", "-E" };
   for (size_t n = 0; n < 2; n++)
      if ((r = opt_value (argc, argv, i, names[n], &v)) != 0)
         return r < 0 || !parse_exit_code (names[n], v, &o->conflict_exit) ? -1 : 1;
   return 0;
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

/* The SIGKILL margin before the lease's local deadline: TTL/10, at most 1s. */
int64_t kill_margin_ms (int64_t ttl_ms)
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

/* Reads one option of run at argv[*i]: 1 read, 0 not an option of run,
 * -1 error (message printed). */
static int run_option (int argc, char **argv, int *i, run_opts_t *o)
{
   const char *v;
   int r;
   if ((r = opt_uri (argc, argv, i, &o->uri)) != 0)
      return r;
   if ((r = cron_option (argc, argv, i, o)) != 0)
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
   if ((r = opt_value (argc, argv, i, "--slots", &v)) != 0) {
      size_t n = r > 0 ? strspn (v, "0123456789") : 0;
      long s = n && n <= 4 && !v[n] ? strtol (v, NULL, 10) : 0;
      if (r > 0 && (s < 1 || s > LEASELOCK_SEMAPHORE_MAX)) {
         usage_error ("--slots \"%s\": expected a whole number from 1 to %d", v,
                      LEASELOCK_SEMAPHORE_MAX);
         return -1;
      }
      o->slots = s;
      return r < 0 ? -1 : 1;
   }
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
   fmt_limit (max, m, sizeof m);
   usage_error ("--grace %s does not fit in --ttl %s: at most %s (SIGKILL must come before the "
                "lease can expire)",
                o->grace_text, o->ttl_text, m);
   return false;
}

/* --slots, --shared and --exclusive pick one kind of holder; --reentrant
 * enters a lease held around us, which a slot or a side of a read-write
 * lock is not (each run holds a record of its own). */
static bool modes_fit (const run_opts_t *o, bool shared_and_exclusive)
{
   if (shared_and_exclusive || (o->slots && o->rw)) {
      usage_error ("--slots, --shared and --exclusive do not go together (pick one)");
      return false;
   }
   if (o->reentrant && (o->slots || o->rw)) {
      usage_error ("--reentrant does not go with %s (each run is a holder of its own)",
                   o->slots                    ? "--slots"
                   : o->rw == LEASELOCK_SHARED ? "--shared"
                                               : "--exclusive");
      return false;
   }
   return true;
}

/* Parses run's arguments into o. Returns PARSED, or the exit status. */
int parse_run (const char *uri, int argc, char **argv, run_opts_t *o)
{
   *o = (run_opts_t){
      .uri = uri,
      .ttl_ms = DEFAULT_TTL_MS,
      .grace_ms = DEFAULT_GRACE_MS,
      .ttl_text = "30s",
      .conflict_exit = EXIT_BUSY,
   };
   bool saw_dashes = false, both_sides = false;
   for (int i = 0; i < argc; i++) {
      int r, rw = o->rw;
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
      both_sides |= rw && o->rw != rw;
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
   if (!fit_grace (o) || !modes_fit (o, both_sides))
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
