/*
 * spawn.c - how run starts its command: an environment with the lease's
 * LEASELOCK_* variables, the PATH search done before the fork, a child that
 * arranges to die with leaselock and execs only once its watchdog runs, and
 * the report of an exec that failed (see the design note at the top of
 * run.c).
 */
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* The variables a run sets for its command: every one of them is
 * replaced, never inherited from a run around this one. */
static const char *const own_vars[] = { "LEASELOCK_KEY=", "LEASELOCK_FENCE=", "LEASELOCK_OWNER=",
                                        "LEASELOCK_LOCK=", "LEASELOCK_MODE=" };
#define N_OWN_VARS (sizeof own_vars / sizeof own_vars[0])

static bool is_own_var (const char *e)
{
   for (size_t i = 0; i < N_OWN_VARS; i++)
      if (!strncmp (e, own_vars[i], strlen (own_vars[i])))
         return true;
   return false;
}

/* A copy of environ without the run's own variables plus the new ones:
 * the lease's record (LEASELOCK_KEY), fence and owner, and the KEY and
 * holder kind this run was given (LEASELOCK_LOCK, LEASELOCK_MODE: an
 * inner run compares them with its own). Returns a NULL-terminated array
 * to free with free_env, or NULL. */
static char **child_env (const run_opts_t *o, const leaselock_lease_t *lease)
{
   size_t n = 0;
   while (environ[n])
      n++;
   char **env = calloc (n + N_OWN_VARS + 1, sizeof *env);
   if (!env)
      return NULL;
   size_t k = 0;
   for (size_t i = 0; i < n; i++)
      if (!is_own_var (environ[i]))
         env[k++] = environ[i];
   size_t first_own = k;
   int ok = 1;
   ok &= asprintf (&env[k++], "LEASELOCK_KEY=%s", leaselock_lease_key (lease)) >= 0;
   ok &= asprintf (&env[k++], "LEASELOCK_FENCE=%" PRId64, leaselock_lease_fence (lease)) >= 0;
   ok &= asprintf (&env[k++], "LEASELOCK_OWNER=%s", leaselock_lease_owner (lease)) >= 0;
   ok &= asprintf (&env[k++], "LEASELOCK_LOCK=%s", o->key) >= 0;
   ok &= asprintf (&env[k++], "LEASELOCK_MODE=%s", run_mode_name (o)) >= 0;
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

/* Frees what child_env allocated (the last N_OWN_VARS entries and the
 * array). */
static void free_env (char **env)
{
   if (!env)
      return;
   size_t n = 0;
   while (env[n])
      n++;
   for (size_t i = n - N_OWN_VARS; i < n; i++)
      free (env[i]);
   free (env);
}

static void free_paths (char **paths)
{
   if (paths)
      for (char **p = paths; *p; p++)
         free (*p);
   free (paths);
}

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

/* Forks the command, then its watchdog, the go socket and the error pipe
 * opened into go and err first. Says why it fails. The caller closes what is
 * left open in go and err. */
static bool fork_with_watchdog (const run_opts_t *o, leaselock_lease_t *lease, exec_plan_t *plan,
                                child_t *ch, int go[2], int err[2])
{
   if (socketpair (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, go) < 0 || pipe2 (err, O_CLOEXEC) < 0) {
      say ("cannot start %s: %s", o->cmd[0], strerror (errno));
      return false;
   }
   plan->go_fd = go[0];
   plan->go_wr = go[1];
   plan->err_fd = err[1];
   if (!fork_command (plan, ch)) {
      say ("cannot start %s: %s", o->cmd[0], strerror (errno));
      return false;
   }
   /* Only the command may hold these, or their EOF would not come. */
   close_fd (&go[0]);
   close_fd (&err[1]);
   if (!start_watchdog (ch, lease, kill_margin_ms (o->ttl_ms))) {
      say ("cannot start the watchdog of %s: %s", o->cmd[0], strerror (errno));
      return false;
   }
   return true;
}

/* Starts o->cmd and its watchdog. Unless leaselock is in the foreground of
 * a terminal, where the command must stay in its group to read it, the
 * command gets its own process group, so a loss stops the whole job. Sets
 * *status when it fails. */
bool start_command (const run_opts_t *o, leaselock_lease_t *lease, const sigset_t *mask,
                    child_t *ch, int *status)
{
   int go[2] = { -1, -1 }, err[2] = { -1, -1 };
   exec_plan_t plan = { .argv = o->cmd,
                        .env = child_env (o, lease),
                        .paths = exec_paths (o->cmd[0]),
                        .mask = *mask,
                        .parent = getpid () };
   plan.own_group = !(isatty (STDIN_FILENO) && tcgetpgrp (STDIN_FILENO) == getpgrp ());
   bool ok = false;
   *status = EXIT_INTERNAL;
   if (!plan.env || !plan.paths)
      say ("out of memory");
   else
      ok = fork_with_watchdog (o, lease, &plan, ch, go, err);
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
