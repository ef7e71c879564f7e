/*
 * reenter.c - "leaselock run --reentrant KEY -- CMD" inside a command that
 * "leaselock run KEY" supervises: instead of waiting for the lease around
 * it (it would wait for itself until that run ends), it enters that lease
 * once more (the record counts the holds, as status shows), runs CMD as a
 * plain child and lets its hold go when CMD ends.
 *
 * The run around it keeps renewing the lease, and stops its whole process
 * group, this run and CMD included, if the lease is lost: so this run needs
 * no renewal, watchdog or deadline of its own. If it is killed before it
 * lets its hold go, the count stays one too high until the outer run
 * releases the lease, which ends every hold.
 */
#include "cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Runs cmd and waits for it; run's exit status for it. */
static int run_plain (char **cmd)
{
   fflush (NULL);
   pid_t pid = fork ();
   if (pid < 0) {
      say ("cannot start %s: %s", cmd[0], strerror (errno));
      return EXIT_INTERNAL;
   }
   if (pid == 0) {
      execvp (cmd[0], cmd);
      int e = errno;
      fprintf (stderr, "%s: cannot run %s: %s\n", cmd_name, cmd[0], strerror (e));
      _exit (e == ENOENT ? EXIT_NOT_FOUND : EXIT_CANNOT_EXEC);
   }
   int ws;
   while (waitpid (pid, &ws, 0) < 0)
      if (errno != EINTR) {
         say ("waiting for %s: %s", cmd[0], strerror (errno));
         return EXIT_INTERNAL;
      }
   if (WIFEXITED (ws))
      return WEXITSTATUS (ws);
   return WIFSIGNALED (ws) ? 128 + WTERMSIG (ws) : EXIT_INTERNAL;
}

bool run_reentered (const run_opts_t *o, int *status)
{
   const char *key = getenv ("LEASELOCK_KEY"), *owner = getenv ("LEASELOCK_OWNER");
   if (!o->reentrant || !key || !owner || strcmp (key, o->key) != 0)
      return false;
   leaselock_client_t *client = open_client (o->uri, o->label, status);
   if (!client)
      return true;
   leaselock_error_t err;
   int64_t holds;
   if (!leaselock_hold (client, o->key, strlen (o->key), owner, +1, &holds, &err)) {
      leaselock_client_destroy (client);
      if (err.code == LEASELOCK_NOT_HELD)
         return false; /* not held here (another database, or it ended): a run of its own */
      *status = fail ("enter the lease again", &err);
      return true;
   }
   *status = run_plain (o->cmd);
   if (!leaselock_hold (client, o->key, strlen (o->key), owner, -1, &holds, &err) &&
       err.code != LEASELOCK_NOT_HELD)
      say ("letting the hold go: %s: %s (the outer run's release ends it)",
           leaselock_code_name (err.code), err.message);
   leaselock_client_destroy (client);
   return true;
}
