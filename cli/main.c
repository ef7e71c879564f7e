/*
 * main.c - the leaselock command line tool: usage, help and dispatch.
 *
 *   leaselock run [options] KEY -- CMD [ARGS...]
 *   leaselock status [--json] KEY
 *   leaselock list [--json] [PREFIX]
 *   leaselock release --force KEY
 *   leaselock prune [--older-than D] [PREFIX]
 *
 * Uses the public API (leaselock.h) only. "run" holds the lease in this
 * process (renewed by the core's renewal thread) while the command runs as
 * a forked child that execs at once and never touches the lease (see "How
 * run keeps the command inside the lease" in run.c; cli.h lists the files). Every event the parent
 * waits for arrives on one poll(): signals through a signalfd (they are blocked in every thread, so
 * none is lost between checks) and the loss of the lease through a pipe written by the on_lost
 * callback on the renewal thread.
 */
#include "cli.h"

#include <string.h>

static const char usage_text[] = "Usage:\n"
                                 "  leaselock [--uri URI] [--verbose] run [options] KEY -- CMD "
                                 "[ARGS...]\n"
                                 "  leaselock [--uri URI] status [--json] KEY\n"
                                 "  leaselock [--uri URI] list [--json] [PREFIX]\n"
                                 "  leaselock [--uri URI] release --force KEY\n"
                                 "  leaselock [--uri URI] prune [--older-than DURATION] [PREFIX]\n"
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
  "  --fair               wait in order of arrival: runs waiting for KEY get it\n"
  "                       first come, first served (a queue in the database)\n"
  "  --reentrant          inside a command that \"leaselock run KEY\" runs (it\n"
  "                       sees LEASELOCK_KEY and LEASELOCK_OWNER), enter that\n"
  "                       lease once more instead of waiting for it; status\n"
  "                       shows the holds\n"
  "  --slots N            a counting semaphore of N (1 to 1000) slots on KEY:\n"
  "                       at most N runs hold one at once, each its own lease\n"
  "                       on KEY/.slot/<i> (LEASELOCK_KEY names it)\n"
  "  --shared             a shared holder of the read-write lock KEY (as\n"
  "                       flock -s): shared runs go together, not with an\n"
  "                       --exclusive one; a waiting --exclusive run is not\n"
  "                       starved by new shared ones\n"
  "  --exclusive          its exclusive holder (as flock -x): runs alone\n"
  "                       (--slots, --shared, --exclusive: one at most, and\n"
  "                       none with --reentrant)\n"
  "  -q, --quiet          a busy run prints nothing (errors are still printed)\n"
  "  -E, --conflict-exit-code N\n"
  "                       exit with N (0 to 255) instead of 75 when KEY is busy\n"
  "                       or --wait ran out, as flock(1) -E: -E 0 makes a\n"
  "                       skipped cron run a success\n"
  "\n"
  "status: shows owner, fence, expiry and holder of KEY.\n"
  "list: one line (or JSON object) per key starting with PREFIX.\n"
  "release --force: clears KEY whoever holds it (the fence survives).\n"
  "prune: deletes the free records of keys starting with PREFIX (every key\n"
  "without one) and prints how many: only records whose expiry is past by the\n"
  "database clock, never a held lease or one kept by --min-hold.\n"
  "  --older-than DURATION  only records expired at least that long ago\n"
  "A pruned key's fence starts again at 1: prune no key whose fences a store\n"
  "still checks.\n"
  "\n"
  "Durations: 500ms, 30s, 2m, 1h, 1d, or a bare number of seconds (1.5).\n"
  "--verbose (-v), before the command, prints what the lock library does\n"
  "(acquire, wait, renew, renewal failures, loss, release) on stderr.\n"
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
  "  70     internal error: out of memory, cannot set up signal handling,\n"
  "         cannot start CMD or its watchdog\n"
  "  75     run: KEY is busy (--wait 0), or --wait ran out (-E changes it)\n"
  "  76     run: the lease was lost, or not renewed in time, while CMD ran\n"
  "         (CMD was stopped)\n"
  "  126    run: CMD cannot be executed\n"
  "  127    run: CMD not found\n"
  "  128+N  run: CMD was killed by signal N, or leaselock got signal N while\n"
  "         waiting for the lock\n";

int print_help (void)
{
   printf ("%s%s", usage_text, help_text);
   return 0;
}

/* The commands, and the name each prints its messages under. */
static const struct
{
   const char *name, *cmd_name;
   int (*run) (const char *uri, int argc, char **argv);
} commands[] = {
   { "run", "leaselock run", cmd_run },       { "status", "leaselock status", cmd_status },
   { "list", "leaselock list", cmd_list },    { "release", "leaselock release", cmd_release },
   { "prune", "leaselock prune", cmd_prune },
};

/* Reads the options before the command (--help, --version, --uri,
 * --verbose) from argv[*i] on, leaving *i at the command. Returns PARSED,
 * or the exit status. */
static int main_options (int argc, char **argv, int *i, const char **uri)
{
   for (; *i < argc; (*i)++) {
      int r;
      if (is_help (argv[*i]))
         return print_help ();
      if (!strcmp (argv[*i], "--version")) {
         printf ("leaselock %s\n", LEASELOCK_VERSION);
         return 0;
      }
      if (!strcmp (argv[*i], "--verbose") || !strcmp (argv[*i], "-v")) {
         verbose = true;
         continue;
      }
      if ((r = opt_uri (argc, argv, i, uri)) != 0) {
         if (r < 0)
            return EXIT_USAGE;
         continue;
      }
      if (argv[*i][0] == '-')
         return usage_error ("unknown option %s", argv[*i]);
      break;
   }
   return PARSED;
}

int main (int argc, char **argv)
{
   const char *uri = NULL;
   int i = 1;
   int status = main_options (argc, argv, &i, &uri);
   if (status != PARSED)
      return status;
   if (i >= argc)
      return usage_error ("missing command (run, status, list, release or prune)");
   for (size_t c = 0; c < sizeof commands / sizeof commands[0]; c++) {
      if (!strcmp (argv[i], commands[c].name)) {
         cmd_name = commands[c].cmd_name;
         return commands[c].run (uri, argc - i - 1, argv + i + 1);
      }
   }
   return usage_error ("unknown command \"%s\" (run, status, list, release or prune)", argv[i]);
}
