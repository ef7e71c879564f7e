/*
 * fork.c - the process id a Lease compares with, without a system call.
 *
 * A Lease remembers the process that acquired it; in a forked child it is
 * "foreign" (state, held, lost, expires_in, repr, and its with-block's exit
 * leaves it alone). The core does the rest of the fork handling (its own
 * pthread_atfork: mutexes, connections, renewal; it refuses to act on a
 * parent's lease), but it says whether a lease is this process's only by
 * failing a call, and the getters above make none: they compare the pid
 * here. getpid() is a system call (glibc caches it no more), so the id is
 * read once and refreshed in the child of every fork() by a handler of
 * pthread_atfork, which runs for any fork of the process, also one that
 * Python's os.register_at_fork does not see (a fork made by C code).
 */
#include "module.h"

#include <pthread.h>
#include <unistd.h>

static pid_t current_pid_value;
static pthread_once_t pid_once = PTHREAD_ONCE_INIT;

static void pid_refresh (void)
{
   current_pid_value = getpid ();
}

static void pid_init (void)
{
   pid_refresh ();
   pthread_atfork (NULL, NULL, pid_refresh);
}

void pyll_fork_init (void)
{
   pthread_once (&pid_once, pid_init);
}

pid_t pyll_pid (void)
{
   return current_pid_value;
}
