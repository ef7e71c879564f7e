/*
 * main.c - the leaselock command line tool: the options before the command
 * (--help, --version, --uri, --verbose) and dispatch to the commands.
 *
 *   leaselock run [options] KEY -- CMD [ARGS...]
 *   leaselock status [--json | -v] KEY
 *   leaselock list [--json] [--held] [PREFIX]
 *   leaselock top [--once] [--json] [--interval D] [--prefix P]
 *   leaselock release --force KEY
 *   leaselock prune [--older-than D] [PREFIX]
 *
 * Uses the public API (leaselock.h) only. "run" holds the lease in this
 * process (renewed by the core's renewal thread) while the command runs as
 * a forked child that execs at once and never touches the lease (see "How
 * run keeps the command inside the lease" in run.c; cli.h lists the files).
 * Every event the parent waits for arrives on one poll(): signals through a
 * signalfd (they are blocked in every thread, so none is lost between
 * checks) and the loss of the lease through a pipe written by the on_lost
 * callback on the renewal thread.
 */
#include "cli.h"

#include <string.h>

/* The commands, and the name each prints its messages under. */
static const struct
{
   const char *name, *cmd_name;
   int (*run) (const char *uri, int argc, char **argv);
} commands[] = {
   { "run", "leaselock run", cmd_run },       { "status", "leaselock status", cmd_status },
   { "list", "leaselock list", cmd_list },    { "release", "leaselock release", cmd_release },
   { "prune", "leaselock prune", cmd_prune }, { "top", "leaselock top", cmd_top },
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
      return usage_error ("missing command (run, status, list, top, release or prune)");
   for (size_t c = 0; c < sizeof commands / sizeof commands[0]; c++) {
      if (!strcmp (argv[i], commands[c].name)) {
         cmd_name = commands[c].cmd_name;
         return commands[c].run (uri, argc - i - 1, argv + i + 1);
      }
   }
   return usage_error ("unknown command \"%s\" (run, status, list, top, release or prune)",
                       argv[i]);
}
