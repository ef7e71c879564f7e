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
 *
 * A read-write run inside a run of the same KEY's read-write lock that
 * would wait for it (a writer inside either, a reader inside the writer)
 * is refused at once: such a lock is never entered again.
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

const char *run_mode_name (const run_opts_t *o)
{
   if (o->slots)
      return "slots";
   if (o->rw)
      return o->rw == LEASELOCK_SHARED ? "shared" : "exclusive";
   return "lock";
}

/* A run of the key the run around it holds (its record rec_key, owned by
 * owner) would wait for itself (until --wait runs out, or for ever): it is
 * refused at once instead, as busy, when that record is still owner's on
 * this database. hint says what to do instead. True when it was (*status
 * set). */
static bool refuse_self_wait (leaselock_client_t *client, const run_opts_t *o, const char *rec_key,
                              const char *owner, const char *hint, int *status)
{
   leaselock_record_t rec;
   bool found = false;
   leaselock_error_t err;
   if (!leaselock_inspect (client, rec_key, strlen (rec_key), &rec, &found, &err) || !found ||
       strcmp (rec.owner, owner) != 0 || rec.expires_in_ms <= 0)
      return false;
   if (!o->quiet) {
      fprintf (stderr, "%s: ", cmd_name);
      put_text (stderr, o->key, strlen (o->key));
      fprintf (stderr,
               " is held by the leaselock run around this one (its LEASELOCK_OWNER): "
               "this run would wait for itself; %s\n",
               hint);
   }
   *status = o->conflict_exit;
   return true;
}

/* refuse_self_wait on a client of its own (a failure to open one ends the
 * run: *status set, true). */
static bool refuse_on_client (const run_opts_t *o, const char *rec_key, const char *owner,
                              const char *hint, int *status)
{
   leaselock_client_t *client = open_client (o->uri, o->label, status);
   if (!client)
      return true;
   bool refused = refuse_self_wait (client, o, rec_key, owner, hint, status);
   leaselock_client_destroy (client);
   return refused;
}

/* --shared or --exclusive inside a run of the same KEY's read-write lock
 * (LEASELOCK_LOCK and LEASELOCK_MODE): a writer waits for every reader and
 * a reader for the writer, so unless both are readers the inner run would
 * wait for the outer one. A read-write lock is not entered again: refused
 * as busy. True when it was (*status set). */
static bool rw_self_wait (const run_opts_t *o, int *status)
{
   const char *rec_key = getenv ("LEASELOCK_KEY"), *owner = getenv ("LEASELOCK_OWNER");
   const char *lock = getenv ("LEASELOCK_LOCK"), *mode = getenv ("LEASELOCK_MODE");
   if (!rec_key || !owner || !lock || !mode || strcmp (lock, o->key) != 0)
      return false;
   bool outer_writes = !strcmp (mode, "exclusive");
   if (!outer_writes && !(strcmp (mode, "shared") == 0 && o->rw == LEASELOCK_EXCLUSIVE))
      return false;
   return refuse_on_client (
     o, rec_key, owner,
     outer_writes ? "it holds the read-write lock --exclusive, and such a lock is not entered "
                    "again (run CMD directly)"
                  : "it holds the read-write lock --shared, and a reader cannot become the writer",
     status);
}

/* --slots 1 inside a run holding the same KEY's semaphore (its one slot,
 * LEASELOCK_KEY): the inner run would wait for the outer one, so it is
 * refused as busy. With more slots a nested run takes a slot of its own
 * (a semaphore counts its holders, as threading.Semaphore does). True
 * when it was (*status set). */
static bool slot_self_wait (const run_opts_t *o, int *status)
{
   const char *rec_key = getenv ("LEASELOCK_KEY"), *owner = getenv ("LEASELOCK_OWNER");
   const char *lock = getenv ("LEASELOCK_LOCK"), *mode = getenv ("LEASELOCK_MODE");
   if (o->slots != 1 || !rec_key || !owner || !lock || !mode || strcmp (lock, o->key) != 0 ||
       strcmp (mode, "slots") != 0)
      return false;
   return refuse_on_client (
     o, rec_key, owner,
     "it holds the semaphore's only slot (run CMD directly, or give the semaphore more --slots)",
     status);
}

bool run_reentered (const run_opts_t *o, int *status)
{
   if (o->rw)
      return rw_self_wait (o, status);
   if (o->slots)
      return slot_self_wait (o, status);
   const char *key = getenv ("LEASELOCK_KEY"), *owner = getenv ("LEASELOCK_OWNER");
   const char *mode = getenv ("LEASELOCK_MODE");
   if (!key || !owner || strcmp (key, o->key) != 0 || o->slots || (mode && strcmp (mode, "lock")))
      return false;
   leaselock_client_t *client = open_client (o->uri, o->label, status);
   if (!client)
      return true;
   if (!o->reentrant) {
      bool refused =
        refuse_self_wait (client, o, key, owner, "pass --reentrant to enter it again", status);
      leaselock_client_destroy (client);
      return refused;
   }
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
