/*
 * fork.c - the core's fork() handling: the process's list of clients, the
 * pthread_atfork handlers, and the reset of a client on its first use in
 * a child.
 *
 * The prepare handler takes every mutex, and first waits until no
 * connection of any client is in use by another thread, so that no thread
 * is inside a database library (whose own mutexes the child would inherit
 * locked) at the moment of the fork; it waits at most FORK_WAIT_MS for the
 * calls in flight (contract invariant 8), and a client whose call was still
 * running is unusable in the child. Backends marked close_before_fork
 * have their idle connections closed there too. The mutexes of each
 * client's log hook (observe.c) and watcher (watch.c) are taken with the
 * client's, in the lock order.
 */
#include "engine_private.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

/*
 * What a process keeps in a page of its own marked MADV_WIPEONFORK, which
 * the kernel hands to any child zeroed, however it was made (fork(),
 * _Fork() and clone() without CLONE_VM run no atfork handler). A kernel
 * without MADV_WIPEONFORK (before Linux 4.14) leaves the page off, and
 * each call below makes its system call.
 *
 * - The process's id: getpid() is a system call (glibc keeps no cache),
 *   and an acquire+release pair through a binding asked it three times. A
 *   0 read there means a new process, which asks getpid() once and keeps
 *   it.
 * - The owners' random bytes (contract: 128 bits from getrandom(2) per
 *   owner), drawn RANDOM_POOL bytes at a time instead of 16 per acquire,
 *   each byte handed out once. A child starts with none left, so it
 *   never hands out an owner its parent did; its mutex is zero too, which
 *   is an unlocked one where PTHREAD_MUTEX_INITIALIZER is all zero bytes
 *   (glibc's; elsewhere the pool stays off), even when the fork came while
 *   another thread held it.
 */
#define RANDOM_POOL 1024
typedef struct wipe_page
{
   _Atomic pid_t pid;
   pthread_mutex_t random_mu; /* guards random_left and random */
   size_t random_left;        /* the bytes at the end of random not yet handed out */
   unsigned char random[RANDOM_POOL];
} wipe_page_t;

static wipe_page_t *wipe_page;
static bool random_pool_on;
static pthread_once_t wipe_once = PTHREAD_ONCE_INIT;

static void wipe_page_init (void)
{
   size_t size = (size_t)sysconf (_SC_PAGESIZE);
   if (size < sizeof (wipe_page_t))
      size = sizeof (wipe_page_t);
   void *p = mmap (NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
   if (p == MAP_FAILED)
      return;
   if (madvise (p, size, MADV_WIPEONFORK) != 0) {
      munmap (p, size);
      return;
   }
   static const pthread_mutex_t initial = PTHREAD_MUTEX_INITIALIZER;
   static const pthread_mutex_t zero;
   random_pool_on = !memcmp (&initial, &zero, sizeof zero);
   wipe_page = p;
}

pid_t ll_getpid (void)
{
   pthread_once (&wipe_once, wipe_page_init);
   if (!wipe_page)
      return getpid ();
   pid_t pid = atomic_load_explicit (&wipe_page->pid, memory_order_relaxed);
   if (pid == 0) {
      pid = getpid ();
      atomic_store_explicit (&wipe_page->pid, pid, memory_order_relaxed);
   }
   return pid;
}

/* All of out from getrandom(2). */
static bool random_fill (unsigned char *out, size_t n)
{
   size_t got = 0;
   while (got < n) {
      ssize_t r = getrandom (out + got, n - got, 0);
      if (r < 0 && errno != EINTR)
         return false;
      got += r > 0 ? (size_t)r : 0;
   }
   return true;
}

bool ll_random_bytes (unsigned char *out, size_t n)
{
   pthread_once (&wipe_once, wipe_page_init);
   if (!random_pool_on || n > RANDOM_POOL / 4)
      return random_fill (out, n);
   wipe_page_t *w = wipe_page;
   pthread_mutex_lock (&w->random_mu);
   bool ok = true;
   if (w->random_left < n) {
      ok = random_fill (w->random, RANDOM_POOL);
      w->random_left = ok ? RANDOM_POOL : 0;
   }
   if (ok) {
      unsigned char *from = w->random + RANDOM_POOL - w->random_left;
      memcpy (out, from, n);
      explicit_bzero (from, n); /* handed out once */
      w->random_left -= n;
   }
   pthread_mutex_unlock (&w->random_mu);
   return ok;
}

static pthread_mutex_t clients_mu = PTHREAD_MUTEX_INITIALIZER;
static leaselock_client_t *clients; /* every client not yet destroyed (clients_mu) */
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void fork_prepare (void)
{
   pid_t me = ll_getpid ();
   int64_t until = ll_real_now_ms () + FORK_WAIT_MS; /* one bound for all clients */
   pthread_mutex_lock (&clients_mu);
   for (leaselock_client_t *c = clients; c; c = c->next_client) {
      pthread_mutex_lock (&c->mu);
      /* Connections in use belong to other threads of this process (the
       * forking thread holds none: no connection is kept across user
       * code). In a client last used by a parent, the count is stale. */
      while (c->pid == me && c->in_use > 0 && ll_real_now_ms () < until)
         ll_cond_wait_until (&c->drained, &c->mu, until);
      c->fork_busy = c->pid == me && c->in_use > 0;
      if (c->pid == me && c->backend->close_before_fork) {
         for (int i = 0; i < c->n_idle; i++)
            c->backend->close (c->idle[i]);
         c->n_idle = 0;
      }
      pthread_mutex_lock (&c->obs.mu);
      pthread_mutex_lock (&c->watch.mu);
   }
   for (int i = 0; i < LL_N_BUCKETS; i++)
      pthread_mutex_lock (&ll_buckets[i].mu);
}

static void fork_parent (void)
{
   for (int i = LL_N_BUCKETS - 1; i >= 0; i--)
      pthread_mutex_unlock (&ll_buckets[i].mu);
   for (leaselock_client_t *c = clients; c; c = c->next_client) {
      c->fork_busy = false;
      pthread_mutex_unlock (&c->watch.mu);
      pthread_mutex_unlock (&c->obs.mu);
      pthread_mutex_unlock (&c->mu);
   }
   pthread_mutex_unlock (&clients_mu);
}

/* The child has one thread: the one that forked, which holds every mutex.
 * Condition variables may hold waiters that no longer exist: renew them.
 * The rest of the reset (pool, thread, leases) happens lazily on the
 * client's next use, by the getpid() check, which also covers fork paths
 * that skip atfork handlers. */
static void fork_child (void)
{
   for (int i = LL_N_BUCKETS - 1; i >= 0; i--) {
      ll_cond_init (&ll_buckets[i].cond);
      ll_buckets[i].waiters = NULL; /* the parent's waiters: no such threads here */
      pthread_mutex_unlock (&ll_buckets[i].mu);
   }
   for (leaselock_client_t *c = clients; c; c = c->next_client) {
      ll_cond_init (&c->cond);
      ll_cond_init (&c->renew_cond);
      ll_cond_init (&c->drained);
      ll_cond_init (&c->io_cond);
      /* The watcher's thread is gone; the rest of the watcher is reset on
       * its next use (watch.c), which also covers forks without handlers. */
      ll_cond_init (&c->watch.cond);
      pthread_mutex_unlock (&c->watch.mu);
      /* The log hook's calls in flight are other threads', and its queued
       * events the parent's (delivered there). */
      ll_cond_init (&c->obs.idle);
      c->obs.calls = 0;
      atomic_store (&c->obs.n_pending, 0);
      pthread_mutex_unlock (&c->obs.mu);
      pthread_mutex_unlock (&c->mu);
   }
   pthread_mutex_unlock (&clients_mu);
}

static void init_once (void)
{
   for (int i = 0; i < LL_N_BUCKETS; i++) {
      pthread_mutex_init (&ll_buckets[i].mu, NULL);
      ll_cond_init (&ll_buckets[i].cond);
   }
   pthread_atfork (fork_prepare, fork_parent, fork_child);
}

/* Leases of the parent are not ours: drop them from the renewal list. A
 * connection made by the parent is abandoned without I/O. Called with
 * c->mu held. */
void ll_reset_after_fork_locked (leaselock_client_t *c, pid_t me)
{
   if (c->pid == me)
      return;
   for (int i = 0; i < c->n_idle; i++)
      if (c->backend->abandon)
         c->backend->abandon (c->idle[i]);
   c->n_idle = 0;
   c->in_use = 0; /* the threads using them are not in this process */
   for (leaselock_lease_t *l = c->renewing, *next; l; l = next) {
      next = l->next;
      l->in_list = false;
      l->prev = l->next = NULL;
   }
   c->renewing = NULL;
   c->thread_running = false; /* they exist only in the parent */
   for (int i = 0; i < IO_MAX; i++) {
      c->io[i].running = false;
      c->io[i].failed = false;
      if (c->io[i].job) { /* its reference is the parent thread's */
         atomic_fetch_sub (&c->io[i].job->refs, 1);
         c->io[i].job = NULL;
      }
   }
   ll_forgets_drop_locked (c); /* the parent's to undo, not the child's */
   c->sleeping = false;
   c->added_due = 0;
   c->stopping = false;
   c->pid = me;
}

void ll_check_fork (leaselock_client_t *c, pid_t me)
{
   pthread_mutex_lock (&c->mu);
   ll_reset_after_fork_locked (c, me);
   pthread_mutex_unlock (&c->mu);
}

/* Removes c from the global list of clients. */
void ll_clients_remove (leaselock_client_t *c)
{
   pthread_mutex_lock (&clients_mu);
   for (leaselock_client_t **p = &clients; *p; p = &(*p)->next_client)
      if (*p == c) {
         *p = c->next_client;
         break;
      }
   pthread_mutex_unlock (&clients_mu);
}

void ll_process_init (void)
{
   pthread_once (&once, init_once);
}

void ll_clients_add (leaselock_client_t *c)
{
   pthread_mutex_lock (&clients_mu);
   c->next_client = clients;
   clients = c;
   pthread_mutex_unlock (&clients_mu);
}
