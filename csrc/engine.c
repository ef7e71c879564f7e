/*
 * engine.c - the lease engine: clients, connection pools, acquire (one try
 * and blocking), renew, release, the renewal thread and fork safety.
 *
 * Locking: a global list mutex, then a client's mutex, then its watcher's
 * (watch.c), then a wait bucket's mutex, always in that order. No mutex is
 * held across database I/O or a user callback.
 *
 * fork(): the prepare handler takes every mutex, and first waits until no
 * connection of any client is in use by another thread, so that no thread
 * is inside a database library (whose own mutexes the child would inherit
 * locked) at the moment of the fork; it waits at most FORK_WAIT_MS for the
 * calls in flight (contract invariant 8), and a client whose call was still
 * running is unusable in the child. Backends marked close_before_fork
 * have their idle connections closed there too.
 *
 * A client's log hook and counters (observe.c) have a mutex of their own,
 * taken after the client's (a loss found under it is queued there) and
 * never held across the hook.
 */
#include "ll_internal.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/types.h>
#include <unistd.h>

#define POOL_MAX 8
#define N_BUCKETS 64
#define BACKOFF_BASE_MS 5
#define BACKOFF_CAP_MS 1000
/* Waiting across processes (contract invariant 9): a waiter that is not
 * next polls at least every WAIT_POLL_MS until it has waited 8 times that
 * (so the oldest waiter claims the reservation soon after it frees), then
 * backs off towards BACKOFF_CAP_MS; the reserved waiter polls every quarter
 * of the time it has been next, within [1, NEXT_POLL_MAX_MS]. Its claim
 * lasts RESERVE_MS past each poll: a waiter that died or gave up blocks a
 * free key for at most that long. */
#define WAIT_POLL_MS 50
/* A waiter that found another live waiter next cannot take the key before
 * that one has, and claims the reservation only after it: it polls in
 * [1/2, 1] x max(BEHIND_POLL_MS, waited / 8), never in the backoff's
 * first few milliseconds. Meanwhile the holder of the moment may take the
 * key again at once while nobody is next, so under contention a key
 * changes hands about once per such poll, not on every release: fewer
 * requests per grant and no hand-off gap between most grants, while each
 * waiter still becomes next within a bounded wait (the oldest first).
 * The longer the poll, the fewer hand-offs (each costs a notification or
 * poll gap) and the longer the waits: 150 ms keeps 8 processes holding a
 * key for 1 ms each above 0.8 of the ideal throughput (make
 * bench-contention), with waits of about that long at worst. */
#define BEHIND_POLL_MS 150
/* A blocking acquire that this process begins within REJOIN_MS of its own
 * release of the key (a worker's loop) goes to the back: its first try
 * only takes the key, and when it is busy the call waits as one behind
 * another, claiming at its next poll. Else it would claim the reservation
 * the moment the waiter it handed the key to took it, and the two would
 * pass the key back and forth while the others wait. */
#define REJOIN_MS 10
#define NEXT_POLL_MAX_MS 50
#define RESERVE_MS 200
/* Fair mode: a waiter's queue entry lasts QUEUE_KEEP_MS past each try (so
 * one that died or gave up holds the others back at most that long); a
 * waiter with others queued before it polls within FAIR_POLL_MAX_MS, far
 * more often, so that its entry stays live. */
#define QUEUE_KEEP_MS 1000
#define FAIR_POLL_MAX_MS 50
/* The reserved waiter's poll while its client's listener is open: a
 * release wakes it at once (watch.c), so it polls only to keep its claim
 * (RESERVE_MS) and for what no notification reports (an expiry). */
#define WATCHED_NEXT_POLL_MS 100
#define STOP_POLL_MS 100
#define RETRY_MIN_MS 5
#define RETRY_MAX_MS 1000
#define FORK_WAIT_MS 2000
#define IO_MAX 4 /* I/O threads per client, started as renewals need them */

typedef struct io_slot
{
   leaselock_client_t *client;
   pthread_t tid;
   bool running;
   bool failed;            /* its thread could not start: not tried again */
   leaselock_lease_t *job; /* lease it renews now (a counted reference) */
} io_slot_t;

struct leaselock_client
{
   const ll_backend_t *backend;
   char *uri;       /* as given (may hold a password); never shown */
   char *uri_shown; /* password replaced */
   char *label;
   char host[256];
   atomic_int refs; /* the user's + one per lease */
   /* Set once, under mu, when leaselock_client_close starts: from then on
    * nothing new starts on the client. Read without mu by the getters and
    * by blocking acquires waiting in a bucket. */
   atomic_bool closing;

   pthread_mutex_t mu;        /* guards everything below */
   pid_t pid;                 /* process that owns the pool and the thread */
   bool closed;               /* leaselock_client_close has finished */
   bool close_releases;       /* the close under way releases held leases */
   leaselock_lease_t *leases; /* every lease not yet destroyed */
   void *idle[POOL_MAX];
   int n_idle;
   int in_use;                  /* connections handed out by pool_get */
   bool fork_busy;              /* one was still in use when fork() ran */
   pthread_cond_t drained;      /* signalled when in_use drops to 0 */
   leaselock_lease_t *renewing; /* auto-renewed leases of this process */
   pthread_cond_t cond;         /* wakes the renewal thread */
   pthread_t thread;
   bool thread_running;
   /* The renewal thread keeps time and calls on_lost; its database calls
    * run on I/O threads, so that a call stuck in a busy or unreachable
    * database never delays a loss past the lease's local deadline, and up
    * to IO_MAX of them, so that one stuck call does not stop the other
    * leases' renewals. */
   io_slot_t io[IO_MAX];
   pthread_cond_t io_cond; /* wakes the I/O threads */
   bool stopping;
   bool sleeping;                   /* the renewal thread waits on cond ... */
   int64_t sleep_until;             /* ... until then (< 0: until signalled) */
   leaselock_client_t *next_client; /* the global list, for fork */
   ll_obs_t obs;                    /* log hook and counters (observe.c) */
   ll_watch_t watch;                /* release notifications (watch.c) */
};

struct leaselock_lease
{
   leaselock_client_t *client; /* counted reference */
   char key[LEASELOCK_KEY_MAX + 1];
   size_t key_len;
   char owner[LEASELOCK_OWNER_LEN + 1];
   int64_t fence;
   int64_t min_hold_ms;
   pid_t pid; /* the process that acquired it */
   bool auto_renew;
   leaselock_lost_cb on_lost;
   void *on_lost_data;
   leaselock_renew_failed_cb on_renew_failed;
   void *on_renew_failed_data;
   atomic_int refs; /* the user's + the renewal thread's while it works */

   /* Guarded by client->mu. */
   int64_t ttl_ms;
   leaselock_state_t state;
   ll_deadline_t dl;      /* local deadline (deadline.c) */
   int64_t next_renew_ms; /* when the renewal thread next acts */
   bool in_list;
   bool lost_notify;            /* on_lost still to be called */
   bool in_callback;            /* on_lost or on_renew_failed is running now */
   bool renew_failed_notify;    /* on_renew_failed still to be called ... */
   leaselock_error_t renew_err; /* ... with this error */
   int64_t acquired_ms;         /* local time the acquire was sent (stats) */
   int releasing;               /* releases of it in flight */
   int64_t holds;               /* reentrant holds (1 once acquired) */
   bool close_tried;            /* leaselock_client_close tried to release it */
   bool released_by_close;      /* and that release ended it */
   leaselock_lease_t *next;
   leaselock_lease_t *prev_all, *next_all; /* in client->leases */
};

/* ---- process-wide state: clients (for fork) and wait buckets ---------- */

/* A blocking acquire of this process, from its first try to its end, as
 * its bucket sees it: a local release of its key wakes one such waiter
 * (bucket_wake), not all. Owned by the acquire call (on its stack);
 * guarded by the bucket's mu. */
typedef struct local_waiter
{
   const char *key; /* borrowed from the call */
   size_t key_len;
   int64_t since; /* its call's start: the oldest goes first */
   bool reserved; /* its last try left it the key's next owner */
   bool *woken;   /* the call's wake flag, its watch entry's: a release chose it */
   struct local_waiter *prev, *next;
} local_waiter_t;

typedef struct bucket
{
   pthread_mutex_t mu;
   pthread_cond_t cond;
   local_waiter_t *waiters; /* this process's blocking acquires of its keys */
   uint32_t released_hash;  /* the key this process released last here (key_hash) */
   int64_t released_at;     /* and when (local ms; 0: none) */
} bucket_t;

static pthread_mutex_t clients_mu = PTHREAD_MUTEX_INITIALIZER;
static leaselock_client_t *clients;
static bucket_t buckets[N_BUCKETS];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void fork_prepare (void)
{
   pid_t me = getpid ();
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
      ll_obs_fork_prepare (&c->obs);
      ll_watch_fork_prepare (&c->watch);
   }
   for (int i = 0; i < N_BUCKETS; i++)
      pthread_mutex_lock (&buckets[i].mu);
}

static void fork_parent (void)
{
   for (int i = N_BUCKETS - 1; i >= 0; i--)
      pthread_mutex_unlock (&buckets[i].mu);
   for (leaselock_client_t *c = clients; c; c = c->next_client) {
      c->fork_busy = false;
      ll_watch_fork_parent (&c->watch);
      ll_obs_fork_parent (&c->obs);
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
   for (int i = N_BUCKETS - 1; i >= 0; i--) {
      ll_cond_init (&buckets[i].cond);
      buckets[i].waiters = NULL; /* the parent's waiters: no such threads here */
      pthread_mutex_unlock (&buckets[i].mu);
   }
   for (leaselock_client_t *c = clients; c; c = c->next_client) {
      ll_cond_init (&c->cond);
      ll_cond_init (&c->drained);
      ll_cond_init (&c->io_cond);
      ll_watch_fork_child (&c->watch);
      ll_obs_fork_child (&c->obs);
      pthread_mutex_unlock (&c->mu);
   }
   pthread_mutex_unlock (&clients_mu);
}

static void init_once (void)
{
   for (int i = 0; i < N_BUCKETS; i++) {
      pthread_mutex_init (&buckets[i].mu, NULL);
      ll_cond_init (&buckets[i].cond);
   }
   pthread_atfork (fork_prepare, fork_parent, fork_child);
}

static uint32_t key_hash (const char *key, size_t len)
{
   uint32_t h = 2166136261u; /* FNV-1a */
   for (size_t i = 0; i < len; i++)
      h = (h ^ (unsigned char)key[i]) * 16777619u;
   return h;
}

static bucket_t *bucket_for (const char *key, size_t len)
{
   return &buckets[key_hash (key, len) % N_BUCKETS];
}

static void bucket_join (bucket_t *b, local_waiter_t *e)
{
   pthread_mutex_lock (&b->mu);
   e->prev = NULL;
   e->next = b->waiters;
   if (b->waiters)
      b->waiters->prev = e;
   b->waiters = e;
   pthread_mutex_unlock (&b->mu);
}

static void bucket_leave (bucket_t *b, local_waiter_t *e)
{
   pthread_mutex_lock (&b->mu);
   if (e->prev)
      e->prev->next = e->next;
   else if (b->waiters == e)
      b->waiters = e->next;
   if (e->next)
      e->next->prev = e->prev;
   e->prev = e->next = NULL;
   pthread_mutex_unlock (&b->mu);
}

/* A local release of key: wakes the one local waiter that can take it
 * (the one holding the reservation, else the oldest), which tries at
 * once; the others keep to their polls. Waking them all would cost a
 * request each per release, for one grant. A waiter chosen while it is
 * trying finds woken set and tries again at once, so no release is
 * missed. */
static void bucket_wake (const char *key, size_t len)
{
   bucket_t *b = bucket_for (key, len);
   pthread_mutex_lock (&b->mu);
   b->released_hash = key_hash (key, len);
   b->released_at = ll_now_ms ();
   local_waiter_t *pick = NULL;
   for (local_waiter_t *e = b->waiters; e; e = e->next) {
      if (e->key_len != len || memcmp (e->key, key, len) != 0)
         continue;
      if (!pick || (e->reserved && !pick->reserved) ||
          (e->reserved == pick->reserved && e->since < pick->since))
         pick = e;
   }
   if (pick) {
      *pick->woken = true;
      pthread_cond_broadcast (&b->cond);
   }
   pthread_mutex_unlock (&b->mu);
}

/* ---- client ------------------------------------------------------------ */

static void client_unref (leaselock_client_t *c)
{
   if (atomic_fetch_sub (&c->refs, 1) != 1)
      return;
   pthread_mutex_destroy (&c->mu);
   pthread_cond_destroy (&c->cond);
   pthread_cond_destroy (&c->drained);
   pthread_cond_destroy (&c->io_cond);
   ll_obs_destroy (&c->obs);
   ll_watch_destroy (&c->watch);
   free (c->uri);
   free (c->uri_shown);
   free (c->label);
   free (c);
}

/* Leases of the parent are not ours: drop them from the renewal list. A
 * connection made by the parent is abandoned without I/O. Called with
 * c->mu held. */
static void reset_after_fork_locked (leaselock_client_t *c, pid_t me)
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
      l->next = NULL;
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
   c->sleeping = false;
   c->stopping = false;
   c->pid = me;
}

static void check_fork (leaselock_client_t *c, pid_t me)
{
   pthread_mutex_lock (&c->mu);
   reset_after_fork_locked (c, me);
   pthread_mutex_unlock (&c->mu);
}

/* Removes c from the global list of clients. */
static void unlist (leaselock_client_t *c)
{
   pthread_mutex_lock (&clients_mu);
   for (leaselock_client_t **p = &clients; *p; p = &(*p)->next_client)
      if (*p == c) {
         *p = c->next_client;
         break;
      }
   pthread_mutex_unlock (&clients_mu);
}

/* One connection fewer in use (by this process). Called with c->mu held. */
static void pool_done_locked (leaselock_client_t *c, pid_t me)
{
   if (c->pid == me && c->in_use > 0 && --c->in_use == 0)
      pthread_cond_broadcast (&c->drained);
}

/* getpid() is a system call: each public call asks once and passes it down. */
static void *pool_get (leaselock_client_t *c, pid_t me, leaselock_error_t *err)
{
   pthread_mutex_lock (&c->mu);
   reset_after_fork_locked (c, me);
   if (c->fork_busy) {
      /* fork_busy stays set only in a child: a thread of its parent was
       * inside the database library at the fork. */
      pthread_mutex_unlock (&c->mu);
      ll_error_set (err, LEASELOCK_BACKEND,
                    "this process was forked while another thread's database call on "
                    "this client ran for over %d ms; the client cannot be used in the "
                    "child: create a new one",
                    FORK_WAIT_MS);
      return NULL;
   }
   void *conn = c->n_idle ? c->idle[--c->n_idle] : NULL;
   c->in_use++;
   pthread_mutex_unlock (&c->mu);
   if (!conn) {
      conn = c->backend->open (c->uri, err);
      if (!conn && err && err->code == LEASELOCK_BACKEND)
         ll_count (&c->obs, LL_ST_BACKEND_ERRORS, 1); /* a database that is down */
      if (!conn) {
         pthread_mutex_lock (&c->mu);
         pool_done_locked (c, me);
         pthread_mutex_unlock (&c->mu);
      }
   }
   return conn;
}

/* Returns conn to the pool. A connection that just failed is closed, so
 * the next call reconnects; one from before a fork is abandoned. */
static void pool_put (leaselock_client_t *c, void *conn, pid_t me, bool failed)
{
   pthread_mutex_lock (&c->mu);
   bool stale = c->pid != me;
   pool_done_locked (c, me);
   if (!stale && !failed && !c->closed && c->n_idle < POOL_MAX) {
      c->idle[c->n_idle++] = conn;
      conn = NULL;
   }
   pthread_mutex_unlock (&c->mu);
   if (conn && stale) {
      if (c->backend->abandon)
         c->backend->abandon (conn);
   } else if (conn) {
      c->backend->close (conn);
   }
}

static bool conn_failed (const leaselock_error_t *err)
{
   return err->code == LEASELOCK_BACKEND || err->code == LEASELOCK_NOMEM;
}

/* Appends path to buf at *len, percent-encoding what a URI path cannot
 * hold literally. */
static bool append_path (char *buf, size_t size, size_t *len, const char *path)
{
   for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
      bool plain = *p > 0x20 && *p < 0x7f && !strchr ("%?#", *p);
      size_t need = plain ? 1 : 3;
      if (*len + need >= size)
         return false;
      if (plain)
         buf[(*len)++] = (char)*p;
      else
         *len += (size_t)snprintf (buf + *len, size - *len, "%%%02X", *p);
   }
   buf[*len] = '\0';
   return true;
}

bool leaselock_default_uri (char *buf, size_t size, leaselock_error_t *error)
{
   if (!buf)
      return ll_error_set (error, LEASELOCK_INVALID, "buf is NULL");
   const char *state = getenv ("XDG_STATE_HOME");
   const char *home = getenv ("HOME");
   const char *base, *rest;
   if (state && state[0] == '/') {
      base = state;
      rest = "/leaselock/locks.db";
   } else if (home && home[0] == '/') {
      base = home;
      rest = "/.local/state/leaselock/locks.db";
   } else {
      return ll_error_set (error, LEASELOCK_INVALID,
                           "no default database: neither XDG_STATE_HOME nor HOME is an "
                           "absolute path; give a URI or set LEASELOCK_URI");
   }
   size_t len = sizeof "sqlite://" - 1;
   if (size <= len)
      return ll_error_set (error, LEASELOCK_INVALID, "the default URI does not fit in %zu bytes",
                           size);
   memcpy (buf, "sqlite://", len + 1);
   if (!append_path (buf, size, &len, base) || !append_path (buf, size, &len, rest))
      return ll_error_set (error, LEASELOCK_INVALID, "the default URI does not fit in %zu bytes",
                           size);
   return true;
}

leaselock_client_t *leaselock_client_new (const char *uri,
                                          const char *label,
                                          leaselock_error_t *error)
{
   pthread_once (&once, init_once);
   ll_error_clear (error);
   char dflt[4096];
   if (!uri || !*uri) {
      uri = getenv ("LEASELOCK_URI");
      if (!uri || !*uri) {
         if (!leaselock_default_uri (dflt, sizeof dflt, error))
            return NULL;
         uri = dflt;
      }
   }
   /* A label is held to a key's rules (it may be empty): it is stored as
    * text, and PostgreSQL, for one, refuses invalid UTF-8. */
   if (label && !ll_check_key (label, strlen (label), "label", true, error))
      return NULL;
   const ll_backend_t *backend = ll_backend_for_uri (uri, error);
   if (!backend)
      return NULL;

   leaselock_client_t *c = calloc (1, sizeof *c);
   if (!c)
      return ll_error_set (error, LEASELOCK_NOMEM, "out of memory"), NULL;
   c->backend = backend;
   c->uri = strdup (uri);
   /* Each secret shown as "***" grows by at most 3 bytes per '&' or '@'. */
   size_t shown_size = 2 * strlen (uri) + 8;
   c->uri_shown = malloc (shown_size);
   c->label = strdup (label ? label : "");
   if (!c->uri || !c->uri_shown || !c->label) {
      free (c->uri);
      free (c->uri_shown);
      free (c->label);
      free (c);
      return ll_error_set (error, LEASELOCK_NOMEM, "out of memory"), NULL;
   }
   ll_uri_redact (uri, c->uri_shown, shown_size);
   if (gethostname (c->host, sizeof c->host - 1) != 0)
      snprintf (c->host, sizeof c->host, "unknown");
   atomic_init (&c->refs, 1);
   ll_obs_init (&c->obs, c);
   ll_watch_init (&c->watch, backend, c->uri);
   pthread_mutex_init (&c->mu, NULL);
   ll_cond_init (&c->cond);
   ll_cond_init (&c->drained);
   ll_cond_init (&c->io_cond);
   c->pid = getpid ();

   /* Listed first, so that a fork() while the first connection opens waits
    * for it like for any other. */
   pthread_mutex_lock (&clients_mu);
   c->next_client = clients;
   clients = c;
   pthread_mutex_unlock (&clients_mu);

   /* Open the first connection now so a bad URI fails here. */
   leaselock_error_t local;
   void *conn = pool_get (c, c->pid, &local);
   if (!conn) {
      if (error)
         *error = local;
      unlist (c);
      client_unref (c);
      return NULL;
   }
   pool_put (c, conn, c->pid, false);
   return c;
}

static void *renew_main (void *arg);
static bool client_usable (leaselock_client_t *c, leaselock_error_t *err);
static void lease_unref (leaselock_lease_t *l);
static void check_deadline_locked (leaselock_client_t *c, leaselock_lease_t *l, int64_t now);
static void lease_ended_locked (leaselock_client_t *c, leaselock_lease_t *l, int64_t now);
static bool release_lease (leaselock_lease_t *l, pid_t me, bool by_close, leaselock_error_t *err);

static bool on_renewal_thread (leaselock_client_t *c)
{
   return c->thread_running && pthread_equal (c->thread, pthread_self ());
}

/* Wakes every blocking acquire of the process, so that those of a client
 * being closed see it (wait_turn). */
static void wake_all_waiters (void)
{
   for (int i = 0; i < N_BUCKETS; i++) {
      pthread_mutex_lock (&buckets[i].mu);
      pthread_cond_broadcast (&buckets[i].cond);
      pthread_mutex_unlock (&buckets[i].mu);
   }
}

/* Stops the renewal thread and the I/O threads and empties the renewal
 * list. Called from the renewal thread itself (an on_lost callback that
 * closes the client), it leaves that thread to leaselock_client_destroy
 * to join: it ends once the callback returns. */
static void stop_renewal (leaselock_client_t *c)
{
   pthread_mutex_lock (&c->mu);
   c->stopping = true;
   bool join = c->thread_running && !on_renewal_thread (c), join_io[IO_MAX];
   for (int i = 0; i < IO_MAX; i++)
      join_io[i] = c->io[i].running;
   pthread_cond_broadcast (&c->cond);
   pthread_cond_broadcast (&c->io_cond);
   pthread_mutex_unlock (&c->mu);
   if (join)
      pthread_join (c->thread, NULL);
   for (int i = 0; i < IO_MAX; i++)
      if (join_io[i])
         pthread_join (c->io[i].tid, NULL); /* after its call in flight, if any */

   pthread_mutex_lock (&c->mu);
   if (join)
      c->thread_running = false;
   for (int i = 0; i < IO_MAX; i++)
      c->io[i].running = c->io[i].running && !join_io[i];
   for (leaselock_lease_t *l = c->renewing; l; l = l->next)
      l->in_list = false;
   c->renewing = NULL;
   pthread_mutex_unlock (&c->mu);
}

/* The next lease close should release: held by this process, not being
 * released already, not tried yet. Returned with a reference. */
static leaselock_lease_t *next_to_release (leaselock_client_t *c, pid_t me)
{
   pthread_mutex_lock (&c->mu);
   int64_t now = ll_now_ms ();
   leaselock_lease_t *l = c->leases;
   for (; l; l = l->next_all) {
      if (l->pid != me || l->close_tried || l->releasing > 0)
         continue;
      check_deadline_locked (c, l, now);
      if (l->state == LEASELOCK_STATE_HELD)
         break;
   }
   if (l) {
      l->close_tried = true;
      atomic_fetch_add (&l->refs, 1);
   }
   pthread_mutex_unlock (&c->mu);
   return l;
}

/* Releases every lease the client holds, each tried once; err gets the
 * first failure. */
static bool release_all (leaselock_client_t *c, pid_t me, leaselock_error_t *err)
{
   bool ok = true;
   leaselock_lease_t *l;
   while ((l = next_to_release (c, me))) {
      leaselock_error_t one;
      if (!release_lease (l, me, true, &one) && ok) {
         ok = false;
         if (err)
            *err = one;
      }
      lease_unref (l);
   }
   return ok;
}

/* The end of a close: leases still held become CLOSED (those past their
 * deadline LOST), the idle connections are closed. */
static void finish_close (leaselock_client_t *c, pid_t me)
{
   pthread_mutex_lock (&c->mu);
   int64_t now = ll_now_ms ();
   for (leaselock_lease_t *l = c->leases; l; l = l->next_all) {
      if (l->pid == me)
         check_deadline_locked (c, l, now);
      if (l->state == LEASELOCK_STATE_HELD) {
         lease_ended_locked (c, l, now);
         l->state = LEASELOCK_STATE_CLOSED;
      }
      l->lost_notify = false; /* closing is not a loss */
   }
   int n = c->n_idle;
   void *idle[POOL_MAX];
   memcpy (idle, c->idle, sizeof idle);
   c->n_idle = 0;
   c->closed = true;
   pthread_cond_broadcast (&c->cond); /* other closers wait for this */
   pthread_mutex_unlock (&c->mu);
   for (int i = 0; i < n; i++)
      c->backend->close (idle[i]);
}

/* Marks c closing; false when it already was (after waiting, unless on
 * the renewal thread, for the close under way to finish). */
static bool begin_close (leaselock_client_t *c, pid_t me, bool release_held)
{
   pthread_mutex_lock (&c->mu);
   reset_after_fork_locked (c, me);
   bool first = !atomic_load (&c->closing);
   if (first)
      c->close_releases = release_held;
   atomic_store (&c->closing, true);
   while (!first && !c->closed && !on_renewal_thread (c))
      ll_cond_wait_until (&c->cond, &c->mu, -1);
   pthread_mutex_unlock (&c->mu);
   return first;
}

bool leaselock_client_close (leaselock_client_t *c, bool release_held, leaselock_error_t *error)
{
   ll_error_clear (error);
   if (!c)
      return ll_error_set (error, LEASELOCK_INVALID, "client is NULL");
   pid_t me = getpid ();
   if (!begin_close (c, me, release_held))
      return true;
   wake_all_waiters ();
   stop_renewal (c);
   ll_watch_stop (&c->watch);
   bool ok = !release_held || release_all (c, me, error);
   finish_close (c, me);
   ll_log_flush (&c->obs);
   return ok;
}

bool leaselock_client_closed (const leaselock_client_t *c)
{
   return !c || atomic_load (&c->closing);
}

void leaselock_client_destroy (leaselock_client_t *c)
{
   if (!c)
      return;
   unlist (c);
   leaselock_client_close (c, false, NULL);
   stop_renewal (c); /* joins a renewal thread that closed the client itself */
   client_unref (c);
}

const char *leaselock_client_uri (const leaselock_client_t *c)
{
   return c ? c->uri_shown : "";
}

const char *leaselock_client_backend (const leaselock_client_t *c)
{
   return c ? c->backend->name : "";
}

ll_obs_t *ll_client_obs (leaselock_client_t *c)
{
   return &c->obs;
}

ll_watch_t *ll_client_watch (leaselock_client_t *c)
{
   return &c->watch;
}

/* ---- lease bookkeeping ------------------------------------------------- */

static void lease_unref (leaselock_lease_t *l)
{
   if (atomic_fetch_sub (&l->refs, 1) != 1)
      return;
   leaselock_client_t *c = l->client;
   free (l);
   client_unref (c);
}

static void list_remove_locked (leaselock_client_t *c, leaselock_lease_t *l)
{
   if (!l->in_list)
      return;
   for (leaselock_lease_t **p = &c->renewing; *p; p = &(*p)->next)
      if (*p == l) {
         *p = l->next;
         break;
      }
   l->next = NULL;
   l->in_list = false;
}

/* Every lease of a client, from its acquire to its destroy (close goes
 * through them). Called with c->mu held. */
static void all_add_locked (leaselock_client_t *c, leaselock_lease_t *l)
{
   l->prev_all = NULL;
   l->next_all = c->leases;
   if (c->leases)
      c->leases->prev_all = l;
   c->leases = l;
}

static void all_remove_locked (leaselock_client_t *c, leaselock_lease_t *l)
{
   if (l->prev_all)
      l->prev_all->next_all = l->next_all;
   else if (c->leases == l)
      c->leases = l->next_all;
   if (l->next_all)
      l->next_all->prev_all = l->prev_all;
   l->prev_all = l->next_all = NULL;
}

/* A HELD lease ends (released, lost or closed): counts the time it was
 * held. Called with c->mu held, before its state changes. */
static void lease_ended_locked (leaselock_client_t *c, leaselock_lease_t *l, int64_t now)
{
   if (l->state == LEASELOCK_STATE_HELD && now > l->acquired_ms)
      ll_count (&c->obs, LL_ST_HELD_MS, (uint64_t)(now - l->acquired_ms));
}

/* HELD -> LOST, once. The renewal thread calls on_lost for leases it
 * renews; a lease that is not auto-renewed has no callback. The "lost"
 * event is delivered once c->mu is let go (ll_log_flush). */
static void mark_lost_locked (leaselock_client_t *c, leaselock_lease_t *l)
{
   if (l->state != LEASELOCK_STATE_HELD)
      return;
   int64_t now = ll_now_ms ();
   lease_ended_locked (c, l, now);
   ll_count (&c->obs, LL_ST_LOSSES, 1);
   if (ll_log_on (&c->obs, LEASELOCK_LOG_ERROR))
      ll_log_defer (&c->obs, LEASELOCK_LOG_ERROR, "lost", l->key, l->key_len, l->fence,
                    LEASELOCK_LOST, "lease lost: %s",
                    now >= l->dl.at_ms ? "its local deadline passed before a renewal succeeded"
                                       : "the database says it is no longer this owner's");
   l->state = LEASELOCK_STATE_LOST;
   if (l->on_lost && l->auto_renew && l->in_list) {
      l->lost_notify = true;
      pthread_cond_broadcast (&c->cond);
   } else {
      list_remove_locked (c, l);
   }
}

/* The local deadline rule (contract invariant 3). */
static void check_deadline_locked (leaselock_client_t *c, leaselock_lease_t *l, int64_t now)
{
   if (l->state == LEASELOCK_STATE_HELD && now >= l->dl.at_ms)
      mark_lost_locked (c, l);
}

/* The renewal thread acts a third of the way to the deadline. */
static int64_t first_renewal (int64_t sent, const ll_deadline_t *dl)
{
   return sent + (dl->at_ms - sent) / 3;
}

/* One renew (renew true: ms is the TTL) or release (ms is min_hold)
 * statement for key and owner. *was_sent says whether it reached a
 * connection (so, on failure, it may have been applied). */
static bool owner_call (leaselock_client_t *c,
                        const char *key,
                        size_t key_len,
                        const char *owner,
                        bool renew,
                        int64_t ms,
                        pid_t me,
                        bool *was_sent,
                        leaselock_error_t *err)
{
   ll_error_clear (err);
   *was_sent = false;
   void *conn = pool_get (c, me, err);
   if (!conn)
      return false;
   *was_sent = true;
   int64_t t0 = ll_real_now_us ();
   bool ok = renew ? c->backend->renew (conn, key, key_len, owner, ms, err)
                   : c->backend->release (conn, key, key_len, owner, ms, err);
   ll_obs_request (&c->obs, t0, ok, err);
   pool_put (c, conn, me, !ok && conn_failed (err));
   return ok;
}

static bool renew_call (leaselock_client_t *c,
                        leaselock_lease_t *l,
                        int64_t ttl_ms,
                        pid_t me,
                        bool *was_sent,
                        leaselock_error_t *err)
{
   return owner_call (c, l->key, l->key_len, l->owner, true, ttl_ms, me, was_sent, err);
}

static bool release_call (leaselock_client_t *c,
                          leaselock_lease_t *l,
                          pid_t me,
                          bool *was_sent,
                          leaselock_error_t *err)
{
   return owner_call (c, l->key, l->key_len, l->owner, false, l->min_hold_ms, me, was_sent, err);
}

/* Records the outcome of a renew sent at sent (every renew, manual or
 * automatic, goes through here, so that renews in flight together are
 * judged together: deadline.c). Returns true when the lease is still HELD
 * and was renewed. Called with c->mu held. */
static bool renew_done_locked (leaselock_client_t *c,
                               leaselock_lease_t *l,
                               int64_t sent,
                               int64_t ttl,
                               bool ok,
                               bool was_sent,
                               const leaselock_error_t *err)
{
   ll_outcome_t outcome = ok                                            ? LL_OUTCOME_APPLIED
                          : was_sent && err->code != LEASELOCK_NOT_HELD ? LL_OUTCOME_UNKNOWN
                                                                        : LL_OUTCOME_NOT_APPLIED;
   int64_t now = ll_now_ms ();
   ll_count (&c->obs, ok ? LL_ST_RENEWALS : LL_ST_RENEWAL_FAILURES, 1);
   /* A reply after the deadline cannot bring the lease back. */
   check_deadline_locked (c, l, now);
   ll_deadline_renew_done (&l->dl, outcome, ttl);
   if (l->state != LEASELOCK_STATE_HELD)
      return false;
   if (!ok && err->code == LEASELOCK_NOT_HELD) {
      mark_lost_locked (c, l); /* taken over or force-released */
      return false;
   }
   /* A renew in flight beside this one, or one that may have been applied,
    * may have pulled the deadline in, maybe into the past. */
   check_deadline_locked (c, l, now);
   if (!ok || l->state != LEASELOCK_STATE_HELD)
      return false;
   l->next_renew_ms = first_renewal (sent, &l->dl);
   return true;
}

static int64_t retry_interval (int64_t ttl)
{
   int64_t r = ttl / 10;
   return r < RETRY_MIN_MS ? RETRY_MIN_MS : r > RETRY_MAX_MS ? RETRY_MAX_MS : r;
}

static void *io_main (void *arg);

/* Whether an I/O thread renews l now. Called with c->mu held. */
static bool io_busy_with (leaselock_client_t *c, leaselock_lease_t *l)
{
   for (int i = 0; i < IO_MAX; i++)
      if (c->io[i].job == l)
         return true;
   return false;
}

/* An I/O thread free for a renewal, started if start and need be; NULL
 * when all are busy (or none more can start). Called with c->mu held. */
static io_slot_t *io_free_slot (leaselock_client_t *c, bool start)
{
   for (int i = 0; i < IO_MAX; i++)
      if (c->io[i].running && !c->io[i].job)
         return &c->io[i];
   for (int i = 0; i < IO_MAX; i++) {
      io_slot_t *s = &c->io[i];
      if (!s->running && !s->failed) {
         if (!start)
            return s;
         s->client = c;
         s->failed = pthread_create (&s->tid, NULL, io_main, s) != 0;
         s->running = !s->failed;
         return s->running ? s : NULL;
      }
   }
   return NULL;
}

/* Runs l's pending callback, with c->mu let go: on_lost once it is lost,
 * else on_renew_failed. Called and returns with c->mu held. */
static void notify_locked (leaselock_client_t *c, leaselock_lease_t *l)
{
   bool lost = l->lost_notify;
   leaselock_error_t err = l->renew_err;
   int64_t left = l->dl.at_ms - ll_now_ms ();
   l->lost_notify = false;
   l->renew_failed_notify = false;
   if (lost)
      list_remove_locked (c, l);
   atomic_fetch_add (&l->refs, 1);
   l->in_callback = true;
   pthread_mutex_unlock (&c->mu);
   ll_log_flush (&c->obs);
   if (lost)
      l->on_lost (l, l->on_lost_data);
   else
      l->on_renew_failed (l, &err, left > 0 ? left : 0, l->on_renew_failed_data);
   pthread_mutex_lock (&c->mu);
   l->in_callback = false;
   pthread_cond_broadcast (&c->cond);
   pthread_mutex_unlock (&c->mu);
   lease_unref (l);
   pthread_mutex_lock (&c->mu);
}

static void *renew_main (void *arg)
{
   leaselock_client_t *c = arg;
   pthread_mutex_lock (&c->mu);
   while (!c->stopping) {
      int64_t now = ll_now_ms ();
      int64_t wake = -1;
      leaselock_lease_t *due = NULL, *notify = NULL;
      bool can_renew = io_free_slot (c, false) != NULL;
      for (leaselock_lease_t *l = c->renewing; l; l = l->next) {
         check_deadline_locked (c, l, now);
         if (l->lost_notify || (l->renew_failed_notify && l->state == LEASELOCK_STATE_HELD)) {
            notify = l;
            break;
         }
         if (l->state != LEASELOCK_STATE_HELD)
            continue;
         /* While its renewal is in flight, or no I/O thread is free, only
          * its deadline can come due. */
         bool wait = !can_renew || io_busy_with (c, l) || l->next_renew_ms > l->dl.at_ms;
         int64_t at = wait ? l->dl.at_ms : l->next_renew_ms;
         if (at <= now) {
            if (!due)
               due = l;
         } else if (wake < 0 || at < wake) {
            wake = at;
         }
      }
      if (notify) {
         notify_locked (c, notify);
         continue;
      }
      if (atomic_load_explicit (&c->obs.n_pending, memory_order_relaxed) > 0) {
         pthread_mutex_unlock (&c->mu); /* deliver the losses found above */
         ll_log_flush (&c->obs);
         pthread_mutex_lock (&c->mu);
         continue;
      }
      if (!due) {
         c->sleeping = true;
         c->sleep_until = wake;
         ll_cond_wait_until (&c->cond, &c->mu, wake);
         c->sleeping = false;
         continue;
      }

      /* Hand it to a free I/O thread. */
      io_slot_t *slot = io_free_slot (c, true);
      if (!slot)
         continue; /* could not start one: plan again without it */
      atomic_fetch_add (&due->refs, 1);
      slot->job = due;
      pthread_cond_broadcast (&c->io_cond);
   }
   pthread_mutex_unlock (&c->mu);
   return NULL;
}

/* Records the outcome of an automatic renewal: a failure that left the
 * lease HELD is retried, and on_renew_failed is due. Returns the time left
 * to the local deadline then (< 0 when the lease is no longer HELD).
 * Called with c->mu held. */
static int64_t renew_outcome_locked (leaselock_client_t *c,
                                     leaselock_lease_t *l,
                                     int64_t sent,
                                     int64_t ttl,
                                     bool ok,
                                     bool was_sent,
                                     const leaselock_error_t *err)
{
   if (renew_done_locked (c, l, sent, ttl, ok, was_sent, err) || l->state != LEASELOCK_STATE_HELD)
      return l->state == LEASELOCK_STATE_HELD ? l->dl.at_ms - ll_now_ms () : -1;
   int64_t now = ll_now_ms ();
   l->next_renew_ms = now + retry_interval (ttl);
   if (l->on_renew_failed && l->in_list) {
      l->renew_failed_notify = true;
      l->renew_err = *err;
   }
   return l->dl.at_ms - now;
}

/* The "renew" or "renew_failed" event of a renewal of l (left: as
 * renew_outcome_locked returns it; retry: the automatic renewal's next
 * try, 0 for a manual renew), and the losses it found. With no lock
 * held. */
static void log_renew (leaselock_client_t *c,
                       leaselock_lease_t *l,
                       int64_t ttl,
                       bool ok,
                       int64_t left,
                       int64_t retry,
                       const leaselock_error_t *err)
{
   if (ok && left >= 0)
      LL_LOG (&c->obs, LEASELOCK_LOG_DEBUG, "renew", l->key, l->key_len, l->fence, LEASELOCK_OK,
              "renewed for %lld ms", (long long)ttl);
   else if (!ok && left >= 0 && retry > 0)
      LL_LOG (&c->obs, LEASELOCK_LOG_WARNING, "renew_failed", l->key, l->key_len, l->fence,
              err->code,
              "renewal failed (retrying in %lld ms, %lld ms left before the local deadline): %s",
              (long long)retry, (long long)left, err->message);
   else if (!ok && left >= 0)
      LL_LOG (&c->obs, LEASELOCK_LOG_WARNING, "renew_failed", l->key, l->key_len, l->fence,
              err->code, "renewal failed (%lld ms left before the local deadline): %s",
              (long long)left, err->message);
   ll_log_flush (&c->obs);
}

/* An I/O thread: renews the leases the renewal thread hands it, one at a
 * time, and records the outcome. */
static void *io_main (void *arg)
{
   io_slot_t *slot = arg;
   leaselock_client_t *c = slot->client;
   pid_t me = getpid (); /* the thread lives in one process only */
   pthread_mutex_lock (&c->mu);
   for (;;) {
      while (!slot->job && !c->stopping)
         ll_cond_wait_until (&c->io_cond, &c->mu, -1);
      leaselock_lease_t *due = slot->job;
      if (c->stopping) {
         if (due) {
            slot->job = NULL;
            pthread_mutex_unlock (&c->mu);
            lease_unref (due);
            pthread_mutex_lock (&c->mu);
         }
         break;
      }
      int64_t ttl = due->ttl_ms;
      int64_t sent = ll_now_ms ();
      ll_deadline_renew_sent (&due->dl, sent, ttl);
      pthread_mutex_unlock (&c->mu);

      leaselock_error_t err;
      bool was_sent;
      bool ok = renew_call (c, due, ttl, me, &was_sent, &err);

      pthread_mutex_lock (&c->mu);
      int64_t left = renew_outcome_locked (c, due, sent, ttl, ok, was_sent, &err);
      slot->job = NULL;
      pthread_cond_broadcast (&c->cond); /* the renewal thread plans again */
      pthread_mutex_unlock (&c->mu);
      log_renew (c, due, ttl, ok, left, retry_interval (ttl), &err);
      lease_unref (due);
      pthread_mutex_lock (&c->mu);
   }
   pthread_mutex_unlock (&c->mu);
   return NULL;
}

/* Adds l to the renewal list, starting the threads in this process if
 * needed. Called with c->mu held. */
static bool schedule_locked (leaselock_client_t *c, leaselock_lease_t *l, leaselock_error_t *err)
{
   if (!c->io[0].running) {
      c->stopping = false;
      c->io[0].client = c;
      int rc = pthread_create (&c->io[0].tid, NULL, io_main, &c->io[0]);
      if (rc != 0)
         return ll_error_set (err, LEASELOCK_NOMEM, "cannot start the renewal I/O thread: %s",
                              strerror (rc));
      c->io[0].running = true;
   }
   if (!c->thread_running) {
      int rc = pthread_create (&c->thread, NULL, renew_main, c);
      if (rc != 0)
         return ll_error_set (err, LEASELOCK_NOMEM, "cannot start the renewal thread: %s",
                              strerror (rc));
      c->thread_running = true;
   }
   l->next = c->renewing;
   c->renewing = l;
   l->in_list = true;
   /* Wake the thread only if it sleeps past this lease's first renewal: an
    * awake thread rescans the list anyway, and a wakeup per acquire costs
    * a context switch on every lock. */
   if (c->sleeping && (c->sleep_until < 0 || l->next_renew_ms < c->sleep_until))
      pthread_cond_broadcast (&c->cond);
   return true;
}

/* ---- acquire ----------------------------------------------------------- */

void leaselock_acquire_opts_init (leaselock_acquire_opts_t *opts)
{
   if (!opts)
      return;
   memset (opts, 0, sizeof *opts);
   opts->ttl_ms = 30000;
   opts->auto_renew = true;
}

/* A lease for key and owner, not yet acquired (no client). */
static leaselock_lease_t *lease_new (const char *key,
                                     size_t key_len,
                                     const char *owner,
                                     const leaselock_acquire_opts_t *o,
                                     pid_t me)
{
   leaselock_lease_t *l = calloc (1, sizeof *l);
   if (!l)
      return NULL;
   memcpy (l->owner, owner, sizeof l->owner);
   memcpy (l->key, key, key_len);
   l->key[key_len] = '\0';
   l->key_len = key_len;
   l->ttl_ms = o->ttl_ms;
   l->min_hold_ms = o->min_hold_ms;
   l->auto_renew = o->auto_renew;
   l->on_lost = o->on_lost;
   l->on_lost_data = o->on_lost_data;
   l->on_renew_failed = o->on_renew_failed;
   l->on_renew_failed_data = o->on_renew_failed_data;
   l->pid = me;
   atomic_init (&l->refs, 1);
   return l;
}

/* Makes l, just acquired by a statement sent at sent, a lease of c: HELD,
 * listed, and scheduled for renewal. A client closed meanwhile gets the
 * key released again (the caller never sees the lease): INVALID. On
 * failure l is freed. */
static bool lease_start (leaselock_client_t *c,
                         leaselock_lease_t *l,
                         const leaselock_acquire_opts_t *o,
                         int64_t sent,
                         bool resent,
                         leaselock_error_t *err)
{
   atomic_fetch_add (&c->refs, 1);
   l->client = c;
   l->state = LEASELOCK_STATE_HELD;
   l->holds = 1;
   l->acquired_ms = sent;
   ll_deadline_start (&l->dl, sent, o->ttl_ms);
   if (resent) /* the first send may still run, after any renew */
      ll_deadline_may_rerun (&l->dl, o->ttl_ms);
   l->next_renew_ms = first_renewal (sent, &l->dl);
   pthread_mutex_lock (&c->mu);
   bool closing = atomic_load (&c->closing);
   if (!closing)
      all_add_locked (c, l);
   bool scheduled = closing || !o->auto_renew || schedule_locked (c, l, err);
   pthread_mutex_unlock (&c->mu);
   if (closing) {
      bool sent_release;
      leaselock_error_t ignored;
      release_call (c, l, l->pid, &sent_release, &ignored);
      ll_error_set (err, LEASELOCK_INVALID, "the client was closed while acquiring \"%s\"",
                    LL_KEY_SHOWN (l->key, l->key_len));
      lease_unref (l);
      return false;
   }
   if (!scheduled)
      leaselock_lease_destroy (l); /* releases it */
   return scheduled;
}

/* A blocking acquire's standing as a waiter (contract invariant 9). */
typedef struct waiter
{
   int64_t since;          /* local ms when it first found the key busy; -1 not yet */
   bool waits;             /* a blocking acquire (else it never claims) */
   int64_t until;          /* its call's deadline (local ms), -1 for none */
   bool reserved;          /* the last try left it the key's next owner */
   bool behind;            /* the last try found another live waiter next */
   int64_t reserved_since; /* local ms when it became next */
   int64_t runs_out;       /* while next: local ms by which the record runs out, -1 unknown */
   bool rejoins;           /* begun just after this process released the key (REJOIN_MS) */
   bool fair;              /* it keeps a place in the key's queue (fair mode) */
   bool queued;            /* its queue entry may be live */
   int64_t ahead;          /* live entries queued before its own at the last try */
} waiter_t;

/* How long a waiter's next claim lasts, with left_ms of its call left: it
 * outlasts the sleep, but never the call. The claim starts when the
 * statement reaches the database, a trip after left_ms was read, so near
 * the end it covers half of what is left (less 2 ms for the database's
 * millisecond rounding): a waiter that timed out leaves no claim behind
 * unless that trip took longer than the other half; 0 (no claim) when too
 * little is left. */
static int64_t reserve_for (bool forever, int64_t left_ms)
{
   /* Tests that put polls off (ll_test_wait_poll_ms) keep the claim
    * outlasting the sleep all the same. */
   int64_t keep = RESERVE_MS + atomic_load (&ll_test_wait_poll_ms);
   int64_t half = (left_ms - 2) / 2;
   if (forever || half > keep)
      return keep;
   return half > 0 ? half : 0;
}

/* The take itself: the backend's acquire, or for a waiter its
 * acquire_wait, into l. */
static bool take_or_claim (leaselock_client_t *c,
                           void *conn,
                           leaselock_lease_t *l,
                           int64_t ttl_ms,
                           const ll_holder_t *holder,
                           waiter_t *w,
                           leaselock_error_t *err)
{
   const ll_backend_t *b = c->backend;
   int64_t now = ll_now_ms ();
   int64_t reserve_ms = w && w->waits ? reserve_for (w->until < 0, w->until - now) : 0;
   bool rejoin = w && w->rejoins && w->since < 0; /* its first try (REJOIN_MS) */
   if (w)
      w->behind = false;
   if (reserve_ms <= 0 || !b->acquire_wait || rejoin) {
      bool ok =
        ll_backend_acquire (b, conn, l->key, l->key_len, l->owner, ttl_ms, holder, &l->fence, err);
      if (rejoin && !ok && err->code == LEASELOCK_BUSY)
         w->behind = true;
      return ok;
   }
   int64_t waited = w->since < 0 ? 0 : now - w->since;
   bool was = w->reserved, ok;
   int64_t left = -1;
   ok = b->acquire_wait (conn, l->key, l->key_len, l->owner, ttl_ms, holder, reserve_ms, waited,
                         &l->fence, &w->reserved, &left, err);
   w->reserved = !ok && err->code == LEASELOCK_BUSY && w->reserved;
   /* now was read before the statement, which read the database clock
    * after it: now + left is at or before the record's end. */
   w->runs_out = w->reserved && left >= 0 ? now + left + 1 : -1;
   w->behind = !ok && err->code == LEASELOCK_BUSY && !w->reserved;
   if (w->reserved && !was)
      w->reserved_since = now;
   return ok;
}

/* Fair mode: joins the key's queue again (keeping its place) and learns
 * how many live waiters arrived before it. BUSY while any did: only the
 * first in the queue may take the key. */
static bool queue_turn (leaselock_client_t *c,
                        void *conn,
                        const leaselock_lease_t *l,
                        waiter_t *w,
                        leaselock_error_t *err)
{
   int64_t t0 = ll_real_now_us ();
   bool ok =
     c->backend->queue_join (conn, l->key, l->key_len, l->owner, QUEUE_KEEP_MS, &w->ahead, err);
   ll_obs_request (&c->obs, t0, ok, err);
   if (!ok)
      return false;
   w->queued = true;
   if (w->ahead > 0)
      return ll_error_set (err, LEASELOCK_BUSY,
                           "held by another owner (fair mode: %lld waiter(s) queued before this "
                           "one)",
                           (long long)w->ahead);
   return true;
}

/* Fair mode: leaves the key's queue (the key was taken, or the call ends).
 * Best effort: an entry left behind runs out within QUEUE_KEEP_MS. */
static void queue_quit (leaselock_client_t *c,
                        void *conn,
                        const char *key,
                        size_t key_len,
                        const char *owner,
                        waiter_t *w)
{
   if (!w->queued)
      return;
   leaselock_error_t e;
   int64_t t0 = ll_real_now_us ();
   bool ok = c->backend->queue_leave (conn, key, key_len, owner, &e);
   ll_obs_request (&c->obs, t0, ok, &e);
   w->queued = !ok;
   if (!ok)
      LL_LOG (&c->obs, LEASELOCK_LOG_WARNING, "queue_leave_failed", key, key_len, 0, e.code,
              "leaving the fair queue failed (the entry runs out within %d ms): %s", QUEUE_KEEP_MS,
              e.message);
}

/* One try on conn into l, each statement counted: in fair mode the queue
 * first, then the take (w: the waiter's standing, NULL for none). */
static bool backend_acquire (leaselock_client_t *c,
                             void *conn,
                             leaselock_lease_t *l,
                             int64_t ttl_ms,
                             const ll_holder_t *holder,
                             waiter_t *w,
                             leaselock_error_t *err)
{
   bool fair = w && w->fair;
   bool ok = !fair || queue_turn (c, conn, l, w, err);
   if (ok) {
      int64_t t0 = ll_real_now_us ();
      ok = take_or_claim (c, conn, l, ttl_ms, holder, w, err);
      ll_obs_request (&c->obs, t0, ok, err);
   }
   if (fair && (ok || !w->waits))
      queue_quit (c, conn, l->key, l->key_len, l->owner, w);
   return ok;
}

/* One acquire statement for owner (w: the waiter's standing, NULL for a
 * one-try acquire). *sent says whether it was handed to the backend on a
 * connection (so, on failure, it may have been applied). */
static bool try_once (leaselock_client_t *c,
                      const char *key,
                      size_t key_len,
                      const char *owner,
                      const leaselock_acquire_opts_t *o,
                      pid_t me,
                      bool resent,
                      waiter_t *w,
                      leaselock_lease_t **out,
                      bool *sent_out,
                      leaselock_error_t *err)
{
   *sent_out = false;
   leaselock_lease_t *l = lease_new (key, key_len, owner, o, me);
   if (!l)
      return ll_error_set (err, LEASELOCK_NOMEM, "out of memory");
   ll_holder_t holder = { c->host, (int64_t)l->pid, c->label };
   void *conn = pool_get (c, me, err);
   if (!conn) {
      free (l);
      return false;
   }
   int64_t sent = ll_now_ms ();
   *sent_out = true;
   bool ok = backend_acquire (c, conn, l, o->ttl_ms, &holder, w, err);
   pool_put (c, conn, me, !ok && conn_failed (err));
   if (!ok) {
      free (l);
      return false;
   }
   if (!lease_start (c, l, o, sent, resent, err))
      return false;
   *out = l;
   return true;
}

/* An acquire failed twice once sent: either attempt may have taken the
 * key for owner, which nobody would then hold. It is released for that
 * owner (no min_hold; only this owner's record can match), so that it is
 * not left blocked until its TTL runs out: at once, and when that fails
 * too (the path that lost the replies is often still broken), by a thread
 * that retries with backoff until the record would have expired anyway or
 * the client is closed. Best effort: errors are not reported. */
typedef struct forget
{
   leaselock_client_t *client; /* counted reference */
   char key[LEASELOCK_KEY_MAX + 1];
   size_t key_len;
   char owner[LEASELOCK_OWNER_LEN + 1];
   int64_t until; /* local ms after which the record has expired */
} forget_t;

/* One release of f's record; true when done (released, or not ours). */
static bool forget_once (forget_t *f, pid_t me)
{
   leaselock_error_t err;
   bool sent;
   return owner_call (f->client, f->key, f->key_len, f->owner, false, 0, me, &sent, &err) ||
          err.code == LEASELOCK_NOT_HELD;
}

static void *forget_main (void *arg)
{
   forget_t *f = arg;
   leaselock_client_t *c = f->client;
   pid_t me = getpid ();
   for (int64_t wait = RETRY_MIN_MS;; wait = wait * 2 > RETRY_MAX_MS ? RETRY_MAX_MS : wait * 2) {
      pthread_mutex_lock (&c->mu);
      int64_t at = ll_now_ms () + wait;
      while (!atomic_load (&c->closing) && c->pid == me && ll_now_ms () < at)
         ll_cond_wait_until (&c->cond, &c->mu, at); /* close broadcasts it */
      bool stop = atomic_load (&c->closing) || c->pid != me || ll_now_ms () >= f->until;
      pthread_mutex_unlock (&c->mu);
      if (stop || forget_once (f, me))
         break;
   }
   client_unref (c);
   free (f);
   return NULL;
}

static void forget_owner (leaselock_client_t *c,
                          const char *key,
                          size_t key_len,
                          const char *owner,
                          int64_t ttl_ms,
                          pid_t me)
{
   forget_t *f = calloc (1, sizeof *f);
   if (!f)
      return;
   f->client = c;
   memcpy (f->key, key, key_len);
   f->key_len = key_len;
   memcpy (f->owner, owner, sizeof f->owner);
   f->until = ll_now_ms () + ttl_ms; /* both sends went out before now */
   pthread_t tid;
   pthread_attr_t attr;
   if (forget_once (f, me) || pthread_attr_init (&attr) != 0) {
      free (f);
      return;
   }
   pthread_attr_setdetachstate (&attr, PTHREAD_CREATE_DETACHED);
   atomic_fetch_add (&c->refs, 1);
   if (pthread_create (&tid, &attr, forget_main, f) != 0) {
      atomic_fetch_sub (&c->refs, 1); /* the caller's reference keeps it alive */
      free (f);
   }
   pthread_attr_destroy (&attr);
}

/* Uniform in [1, cap]. */
static int64_t jitter_ms (int64_t cap)
{
   uint32_t r;
   if (getrandom (&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r)
      r = (uint32_t)rand ();
   return 1 + (int64_t)(r % (uint32_t)cap);
}

/* base * 2^attempt, capped. */
static int64_t backoff_cap (int attempt)
{
   int64_t cap = BACKOFF_BASE_MS;
   for (int i = 0; i < attempt && cap < BACKOFF_CAP_MS; i++)
      cap *= 2;
   return cap > BACKOFF_CAP_MS ? BACKOFF_CAP_MS : cap;
}

/* Full jitter: uniform in [1, min(cap, base * 2^attempt)]. */
int64_t ll_backoff_ms (int attempt)
{
   return jitter_ms (backoff_cap (attempt));
}

/* The checks of leaselock_acquire's arguments, before any I/O. */
static bool acquire_args_ok (leaselock_client_t *c,
                             const char *key,
                             size_t key_len,
                             const leaselock_acquire_opts_t *opts,
                             leaselock_lease_t **lease,
                             leaselock_error_t *err)
{
   if (!c)
      return ll_error_set (err, LEASELOCK_INVALID, "client is NULL");
   if (!lease)
      return ll_error_set (err, LEASELOCK_INVALID, "lease (the out parameter) is NULL");
   if (!ll_check_key (key, key_len, "key", false, err) ||
       !ll_check_ttl (opts->ttl_ms, "ttl", err) ||
       !ll_check_duration (opts->min_hold_ms, "min_hold", err))
      return false;
   if (opts->timeout_ms > LEASELOCK_TTL_MAX_MS)
      return ll_error_set (err, LEASELOCK_INVALID, "timeout must be at most 30 days (got %lld ms)",
                           (long long)opts->timeout_ms);
   if (atomic_load (&c->closing))
      return ll_error_set (err, LEASELOCK_INVALID, "the client is closed");
   if (opts->fair && !c->backend->queue_join)
      return ll_error_set (err, LEASELOCK_UNSUPPORTED,
                           "fair mode: the %s backend keeps no queue of waiters", c->backend->name);
   return true;
}

/* A fair waiter's sleep while ahead others are queued before it: uniform
 * in [cap/2, cap], cap growing with its place, at most FAIR_POLL_MAX_MS. */
int64_t ll_fair_sleep_ms (int64_t ahead)
{
   int64_t cap = 2 + 4 * (ahead < 1 ? 1 : ahead > FAIR_POLL_MAX_MS ? FAIR_POLL_MAX_MS : ahead);
   if (cap > FAIR_POLL_MAX_MS)
      cap = FAIR_POLL_MAX_MS;
   return cap / 2 + jitter_ms (cap - cap / 2);
}

/* A waiter's sleep before its next try (WAIT_POLL_MS's comment). */
int64_t ll_wait_sleep_ms (int attempt, int64_t waited_ms, bool reserved, int64_t next_for_ms)
{
   if (reserved) {
      int64_t t = next_for_ms / 4;
      return t < 1 ? 1 : t > NEXT_POLL_MAX_MS ? NEXT_POLL_MAX_MS : t;
   }
   int64_t cap = backoff_cap (attempt);
   int64_t poll = waited_ms / 8 > WAIT_POLL_MS ? waited_ms / 8 : WAIT_POLL_MS;
   return jitter_ms (cap < poll ? cap : poll);
}

/* The sleep of a waiter that another live waiter is next before
 * (BEHIND_POLL_MS's comment). */
int64_t ll_behind_sleep_ms (int64_t waited_ms)
{
   int64_t poll = waited_ms / 8 > BEHIND_POLL_MS ? waited_ms / 8 : BEHIND_POLL_MS;
   if (poll > BACKOFF_CAP_MS)
      poll = BACKOFF_CAP_MS;
   return poll / 2 + jitter_ms (poll - poll / 2);
}

/* A blocking acquire's sleep: until until, or until a release in this
 * process or a notification chooses it (*woken, then cleared), or c is
 * being closed. Returns false when should_stop asks
 * to stop, polled every STOP_POLL_MS. */
static bool wait_turn (leaselock_client_t *c,
                       bucket_t *b,
                       bool *woken,
                       int64_t until,
                       const leaselock_acquire_opts_t *opts)
{
   pthread_mutex_lock (&b->mu);
   while (!*woken && !atomic_load (&c->closing)) {
      int64_t t = ll_now_ms ();
      if (t >= until)
         break;
      int64_t slice = until;
      if (opts->should_stop && slice > t + STOP_POLL_MS)
         slice = t + STOP_POLL_MS;
      ll_cond_wait_until (&b->cond, &b->mu, slice);
      if (opts->should_stop && ll_now_ms () >= slice && ll_now_ms () < until) {
         pthread_mutex_unlock (&b->mu);
         if (opts->should_stop (opts->should_stop_data))
            return false;
         pthread_mutex_lock (&b->mu);
      }
   }
   *woken = false;
   pthread_mutex_unlock (&b->mu);
   return !(opts->should_stop && opts->should_stop (opts->should_stop_data));
}

/* One call of leaselock_acquire: its tries share one owner. */
typedef struct acquire_call
{
   leaselock_client_t *c;
   const char *key;
   size_t key_len;
   const leaselock_acquire_opts_t *opts;
   pid_t me;
   /* One owner for every attempt of this call: an attempt whose reply was
    * lost may have taken the key, and the record then accepts this owner
    * again (a re-acquire) instead of standing locked by nobody until its
    * TTL runs out. */
   char owner[LEASELOCK_OWNER_LEN + 1];
   bool resent, sent_any;
   int attempt;          /* waits so far: the backoff grows with it */
   int64_t start, until; /* the call's start and deadline */
   int64_t waited_from;  /* when it first found the key busy and waited */
   bucket_t *b;
   waiter_t w;
   ll_watch_waiter_t watch; /* a blocking acquire's entry with the client's watcher */
   bool watched;
   local_waiter_t local; /* its entry in its bucket, while watched */
} acquire_call_t;

typedef enum
{
   NEXT_DONE,   /* acquired */
   NEXT_RESEND, /* send the same statement once more, at once */
   NEXT_WAIT,   /* busy: wait, then try again */
   NEXT_FAIL    /* err holds the answer */
} acquire_next_t;

/* What follows an attempt that failed with err (sent: it reached a
 * connection). */
static acquire_next_t after_failure (acquire_call_t *a, bool sent, leaselock_error_t *err)
{
   a->sent_any = a->sent_any || sent;
   if (err->code == LEASELOCK_BACKEND && sent && !a->resent) {
      /* Failed once sent (a dropped connection, a lost reply): send it
       * once more, at once, on a fresh connection. */
      a->resent = true;
      return NEXT_RESEND;
   }
   if (err->code == LEASELOCK_BACKEND && a->sent_any) {
      forget_owner (a->c, a->key, a->key_len, a->owner, a->opts->ttl_ms, a->me);
      return NEXT_FAIL;
   }
   if (err->code != LEASELOCK_BUSY || a->opts->timeout_ms == 0)
      return NEXT_FAIL; /* BUSY is the answer of one try */
   return NEXT_WAIT;
}

/* Registers a blocking acquire with the client's watcher before its
 * first try; the watcher starts listening for releases at its first wait
 * (a client that never waits never listens). */
static void watch_begin (acquire_call_t *a, int64_t now)
{
   a->watch = (ll_watch_waiter_t){ .key = a->key,
                                   .key_len = a->key_len,
                                   .owner = a->owner,
                                   .since = now,
                                   .mu = &a->b->mu,
                                   .cond = &a->b->cond };
   ll_watch_begin (&a->c->watch, &a->watch, a->me);
   a->watched = true;
   a->local = (local_waiter_t){
      .key = a->key, .key_len = a->key_len, .since = now, .woken = &a->watch.woken
   };
   bucket_join (a->b, &a->local);
}

/* Before the wait that follows a busy try: TIMEOUT in err once the
 * call's deadline has passed; else *until_out, when the next try is due
 * (local ms). */
static bool wait_plan (acquire_call_t *a, int64_t *until_out, leaselock_error_t *err)
{
   int64_t now = ll_now_ms ();
   bool forever = a->opts->timeout_ms < 0;
   if (!forever && now >= a->until)
      return ll_error_set (err, LEASELOCK_TIMEOUT,
                           "timed out after %lld ms waiting for \"%s\" (held by another owner)",
                           (long long)(now - a->start), LL_KEY_SHOWN (a->key, a->key_len));
   if (a->attempt == 0) {
      a->waited_from = now;
      ll_count (&a->c->obs, LL_ST_WAITS, 1);
      if (forever)
         LL_LOG (&a->c->obs, LEASELOCK_LOG_DEBUG, "wait", a->key, a->key_len, 0, LEASELOCK_BUSY,
                 "held by another owner: waiting without a time limit");
      else
         LL_LOG (&a->c->obs, LEASELOCK_LOG_DEBUG, "wait", a->key, a->key_len, 0, LEASELOCK_BUSY,
                 "held by another owner: waiting up to %lld ms in all",
                 (long long)a->opts->timeout_ms);
   }
   waiter_t *w = &a->w;
   if (w->since < 0)
      w->since = now;
   bool released = false, heard = false;
   if (a->watched) {
      /* A fair waiter first in the queue is next as much as a reserved
       * one, and so is the second once the first has taken the key: a
       * notification that names no waiter (SQLite's) wakes them too. */
      heard = ll_watch_update (&a->c->watch, &a->watch, w->reserved || (w->fair && w->ahead <= 1),
                               w->behind, &released);
      pthread_mutex_lock (&a->b->mu);
      a->local.reserved = w->reserved;
      pthread_mutex_unlock (&a->b->mu);
   }
   int64_t sleep;
   if (w->fair && w->ahead > 0) {
      sleep = ll_fair_sleep_ms (w->ahead);
      a->attempt++;
   } else if (w->behind) {
      sleep = ll_behind_sleep_ms (now - w->since);
      a->attempt++;
   } else {
      sleep = ll_wait_sleep_ms (a->attempt++, now - w->since, w->reserved, now - w->reserved_since);
   }
   /* Next, it sleeps until a release wakes it; but when it has just
    * become next, or a key's release was heard since its last sleep began,
    * it tries once more soon (the quarter rule): it may have taken the
    * reservation over from a younger waiter after a release, and the key
    * may be free, with no release left to notify it. */
   if (heard && w->reserved && now > w->reserved_since && !released)
      sleep = WATCHED_NEXT_POLL_MS;
   if (w->fair && sleep > QUEUE_KEEP_MS / 4)
      sleep = QUEUE_KEEP_MS / 4; /* tries often enough to keep its place */
   if (atomic_load (&ll_test_wait_poll_ms) > 0)
      sleep = atomic_load (&ll_test_wait_poll_ms);
   /* The next owner never sleeps past the record's known end: nothing
    * tells it when a dead holder's lease, or a released lease's min_hold,
    * runs out. */
   if (w->reserved && w->runs_out > 0 && now + sleep > w->runs_out)
      sleep = w->runs_out > now ? w->runs_out - now : 1;
   int64_t until = now + sleep;
   if (!forever && until > a->until)
      until = a->until;
   *until_out = until;
   return true;
}

/* The wait between two tries of a blocking acquire: false with TIMEOUT,
 * INTERRUPTED or INVALID (the client was closed) in err. */
static bool wait_next (acquire_call_t *a, leaselock_error_t *err)
{
   int64_t until;
   if (!wait_plan (a, &until, err))
      return false;
   /* Sleep, but wake at once if a holder in this process releases a key
    * in this bucket, or a notification wakes this waiter. */
   bool unwatched = false;
   if (!wait_turn (a->c, a->b, a->watched ? &a->watch.woken : &unwatched, until, a->opts))
      return ll_error_set (err, LEASELOCK_INTERRUPTED, "the wait for \"%s\" was interrupted",
                           LL_KEY_SHOWN (a->key, a->key_len));
   if (atomic_load (&a->c->closing))
      return ll_error_set (err, LEASELOCK_INVALID, "the client was closed while waiting for \"%s\"",
                           LL_KEY_SHOWN (a->key, a->key_len));
   return true;
}

/* One try of call a, sent once more at once when it failed after being
 * sent (after_failure). */
static acquire_next_t call_try (acquire_call_t *a,
                                leaselock_lease_t **lease,
                                leaselock_error_t *err)
{
   for (;;) {
      bool sent;
      if (try_once (a->c, a->key, a->key_len, a->owner, a->opts, a->me, a->resent, &a->w, lease,
                    &sent, err))
         return NEXT_DONE;
      acquire_next_t next = after_failure (a, sent, err);
      if (next != NEXT_RESEND)
         return next;
   }
}

/* A call that ends without the key leaves the key's queue (fair mode). */
static void call_quit (acquire_call_t *a)
{
   if (!a->w.queued)
      return;
   leaselock_error_t ignored;
   void *conn = pool_get (a->c, a->me, &ignored);
   if (!conn)
      return;
   queue_quit (a->c, conn, a->key, a->key_len, a->owner, &a->w);
   pool_put (a->c, conn, a->me, a->w.queued);
}

/* Counts and logs the end of an acquire call (lease: NULL when it
 * failed with err). Returns whether it succeeded. */
static bool acquire_done (acquire_call_t *a, leaselock_lease_t *lease, const leaselock_error_t *err)
{
   ll_obs_t *o = &a->c->obs;
   if (a->watched) {
      ll_watch_end (&a->c->watch, &a->watch);
      bucket_leave (a->b, &a->local);
   }
   int64_t waited = a->attempt > 0 ? ll_now_ms () - a->waited_from : 0;
   if (waited > 0)
      ll_count (o, LL_ST_WAIT_MS, (uint64_t)waited);
   if (lease) {
      ll_count (o, LL_ST_ACQUIRES, 1);
      LL_LOG (o, LEASELOCK_LOG_DEBUG, "acquire", a->key, a->key_len, lease->fence, LEASELOCK_OK,
              "acquired for %lld ms (waited %lld ms)", (long long)a->opts->ttl_ms,
              (long long)waited);
      return true;
   }
   if (err->code == LEASELOCK_BUSY) {
      ll_count (o, LL_ST_BUSY, 1);
      LL_LOG (o, LEASELOCK_LOG_DEBUG, "busy", a->key, a->key_len, 0, err->code,
              "held by another owner");
   } else if (err->code == LEASELOCK_TIMEOUT) {
      ll_count (o, LL_ST_TIMEOUTS, 1);
      LL_LOG (o, LEASELOCK_LOG_INFO, "timeout", a->key, a->key_len, 0, err->code, "%s",
              err->message);
   } else if (err->code == LEASELOCK_BACKEND || err->code == LEASELOCK_NOMEM) {
      LL_LOG (o, LEASELOCK_LOG_WARNING, "backend_error", a->key, a->key_len, 0, err->code,
              "acquire failed: %s", err->message);
   }
   return false;
}

/* Sets up call a for key with opts (already checked). */
static bool call_init (acquire_call_t *a,
                       leaselock_client_t *c,
                       const char *key,
                       size_t key_len,
                       const leaselock_acquire_opts_t *opts,
                       leaselock_error_t *err)
{
   *a = (acquire_call_t){ .c = c, .key = key, .key_len = key_len, .opts = opts, .me = getpid () };
   a->start = ll_now_ms ();
   a->until = a->start + opts->timeout_ms;
   a->w.since = -1;
   a->w.runs_out = -1;
   /* A blocking acquire is a waiter from its first try: it claims to be
    * next as soon as it finds the key busy. */
   a->w.waits = opts->timeout_ms != 0;
   a->w.until = opts->timeout_ms < 0 ? -1 : a->until;
   a->w.fair = opts->fair;
   uint32_t h = key_hash (key, key_len);
   a->b = &buckets[h % N_BUCKETS];
   if (a->w.waits && !opts->fair) { /* only a blocking acquire claims: REJOIN_MS */
      pthread_mutex_lock (&a->b->mu);
      a->w.rejoins = a->b->released_at > 0 && a->b->released_hash == h &&
                     a->start - a->b->released_at <= REJOIN_MS;
      pthread_mutex_unlock (&a->b->mu);
   }
   return ll_owner_new (a->owner, err);
}

leaselock_error_t *ll_acquire_prologue (leaselock_error_t *error,
                                        leaselock_error_t *local,
                                        const leaselock_acquire_opts_t **opts,
                                        leaselock_acquire_opts_t *dflt,
                                        leaselock_lease_t **lease)
{
   leaselock_error_t *err = error ? error : local;
   ll_error_clear (err);
   if (!*opts) {
      leaselock_acquire_opts_init (dflt);
      *opts = dflt;
   }
   if (lease)
      *lease = NULL;
   return err;
}

bool leaselock_acquire (leaselock_client_t *c,
                        const char *key,
                        size_t key_len,
                        const leaselock_acquire_opts_t *opts,
                        leaselock_lease_t **lease,
                        leaselock_error_t *error)
{
   leaselock_error_t local;
   leaselock_acquire_opts_t dflt;
   leaselock_error_t *err = ll_acquire_prologue (error, &local, &opts, &dflt, lease);
   if (!acquire_args_ok (c, key, key_len, opts, lease, err))
      return false;
   acquire_call_t a;
   if (!call_init (&a, c, key, key_len, opts, err))
      return false;
   if (opts->timeout_ms != 0)
      watch_begin (&a, a.start);
   for (;;) {
      acquire_next_t next = call_try (&a, lease, err);
      if (next == NEXT_DONE)
         return acquire_done (&a, *lease, err);
      if (next == NEXT_FAIL || !wait_next (&a, err)) {
         call_quit (&a);
         return acquire_done (&a, NULL, err);
      }
   }
}

/* ---- a wait driven by its caller (leaselock_wait_*) ---------------------- */

struct leaselock_wait
{
   acquire_call_t a; /* its key and opts point into this struct */
   leaselock_acquire_opts_t opts;
   char key[LEASELOCK_KEY_MAX + 1];
   bool over; /* acquired, or failed: no more tries */
};

leaselock_wait_t *leaselock_wait_new (leaselock_client_t *c,
                                      const char *key,
                                      size_t key_len,
                                      const leaselock_acquire_opts_t *opts,
                                      leaselock_error_t *error)
{
   leaselock_error_t local;
   leaselock_error_t *err = error ? error : &local;
   ll_error_clear (err);
   leaselock_acquire_opts_t dflt;
   if (!opts) {
      leaselock_acquire_opts_init (&dflt);
      opts = &dflt;
   }
   leaselock_lease_t *unused;
   if (!acquire_args_ok (c, key, key_len, opts, &unused, err))
      return NULL;
   leaselock_wait_t *w = calloc (1, sizeof *w);
   if (!w)
      return ll_error_set (err, LEASELOCK_NOMEM, "out of memory"), NULL;
   w->opts = *opts;
   w->opts.should_stop = NULL; /* the caller decides when to stop */
   memcpy (w->key, key, key_len);
   if (!call_init (&w->a, c, w->key, key_len, &w->opts, err)) {
      free (w);
      return NULL;
   }
   atomic_fetch_add (&c->refs, 1);
   return w;
}

bool leaselock_wait_try (leaselock_wait_t *w,
                         leaselock_lease_t **lease,
                         int64_t *sleep_ms,
                         leaselock_error_t *error)
{
   leaselock_error_t local;
   leaselock_error_t *err = error ? error : &local;
   ll_error_clear (err);
   if (lease)
      *lease = NULL;
   if (sleep_ms)
      *sleep_ms = 0;
   if (!w)
      return ll_error_set (err, LEASELOCK_INVALID, "wait is NULL");
   if (!lease || !sleep_ms)
      return ll_error_set (err, LEASELOCK_INVALID, "%s (an out parameter) is NULL",
                           lease ? "sleep_ms" : "lease");
   acquire_call_t *a = &w->a;
   if (w->over)
      return ll_error_set (err, LEASELOCK_INVALID,
                           "the wait for \"%s\" is over (it acquired the key or failed)",
                           LL_KEY_SHOWN (a->key, a->key_len));
   if (getpid () != a->me)
      return ll_error_set (err, LEASELOCK_INVALID, "the wait was begun in another process");
   if (atomic_load (&a->c->closing)) {
      w->over = true;
      return ll_error_set (err, LEASELOCK_INVALID, "the client was closed while waiting for \"%s\"",
                           LL_KEY_SHOWN (a->key, a->key_len));
   }
   acquire_next_t next = call_try (a, lease, err);
   if (next == NEXT_DONE) {
      w->over = true;
      return acquire_done (a, *lease, err);
   }
   int64_t until;
   if (next == NEXT_WAIT && wait_plan (a, &until, err)) {
      int64_t left = until - ll_now_ms ();
      *sleep_ms = left > 0 ? left : 0;
      return false; /* BUSY, from the try */
   }
   w->over = true;
   call_quit (a);
   return acquire_done (a, NULL, err);
}

void leaselock_wait_destroy (leaselock_wait_t *w)
{
   if (!w)
      return;
   if (!w->over && getpid () == w->a.me) {
      leaselock_error_t timeout;
      ll_error_set (&timeout, LEASELOCK_INTERRUPTED, "the wait was given up");
      call_quit (&w->a);
      acquire_done (&w->a, NULL, &timeout);
   }
   client_unref (w->a.c);
   free (w);
}

/* ---- lease operations -------------------------------------------------- */

/* The lease can be acted on by this process: not a parent's lease, client
 * open. Fills err otherwise. */
static bool lease_usable (leaselock_lease_t *l, pid_t me, leaselock_error_t *err)
{
   if (l->pid != me)
      return ll_error_set (err, LEASELOCK_NOT_HELD,
                           "the lease on \"%s\" belongs to process %d; this process (%d) is a "
                           "fork of it and does not hold it",
                           LL_KEY_SHOWN (l->key, l->key_len), (int)l->pid, (int)me);
   check_fork (l->client, me);
   return true;
}

/* The minimum hold that keeps l's record taken until at least min_hold_ms
 * after a renew whose reply came at done_ms (local). The database adds the
 * release's minimum hold to the record's acquired_at, which the acquire
 * set after it was sent (l->acquired_ms), and the renew ran before its
 * reply came: so the database's clock moved by at most done_ms -
 * acquired_ms between the two, plus its rate error (deadline.c's 1000
 * ppm) and 1 ms of rounding. Only ever raised. */
static int64_t hold_after_renew (const leaselock_lease_t *l, int64_t done_ms, int64_t min_hold_ms)
{
   int64_t since = done_ms - l->acquired_ms;
   int64_t hold = since + since / LL_DEADLINE_RATE_DIV + 1 + min_hold_ms;
   return hold > l->min_hold_ms ? hold : l->min_hold_ms;
}

bool leaselock_lease_renew (leaselock_lease_t *l, int64_t ttl_ms, leaselock_error_t *error)
{
   return leaselock_lease_extend (l, ttl_ms, -1, error);
}

bool leaselock_lease_extend (leaselock_lease_t *l,
                             int64_t ttl_ms,
                             int64_t min_hold_ms,
                             leaselock_error_t *error)
{
   leaselock_error_t local;
   leaselock_error_t *err = error ? error : &local;
   ll_error_clear (err);
   if (!l)
      return ll_error_set (err, LEASELOCK_INVALID, "lease is NULL");
   pid_t me = getpid ();
   if (!lease_usable (l, me, err))
      return false;
   if (ttl_ms != 0 && !ll_check_ttl (ttl_ms, "ttl", err))
      return false;
   if (min_hold_ms != -1 && !ll_check_duration (min_hold_ms, "min_hold", err))
      return false;
   leaselock_client_t *c = l->client;
   pthread_mutex_lock (&c->mu);
   if (ttl_ms == 0)
      ttl_ms = l->ttl_ms;
   int64_t sent = ll_now_ms ();
   check_deadline_locked (c, l, sent);
   leaselock_state_t st = l->state;
   bool closed = atomic_load (&c->closing);
   if (!closed && st == LEASELOCK_STATE_HELD)
      ll_deadline_renew_sent (&l->dl, sent, ttl_ms);
   pthread_mutex_unlock (&c->mu);
   ll_log_flush (&c->obs); /* a loss the deadline check above found */
   if (closed)
      return ll_error_set (err, LEASELOCK_NOT_HELD, "the client of this lease is closed");
   if (st == LEASELOCK_STATE_RELEASED)
      return ll_error_set (err, LEASELOCK_NOT_HELD, "the lease on \"%s\" was released",
                           LL_KEY_SHOWN (l->key, l->key_len));
   if (st == LEASELOCK_STATE_LOST)
      return ll_error_set (err, LEASELOCK_LOST,
                           "the lease on \"%s\" was lost (its local deadline passed)",
                           LL_KEY_SHOWN (l->key, l->key_len));

   bool was_sent;
   bool ok = renew_call (c, l, ttl_ms, me, &was_sent, err);

   pthread_mutex_lock (&c->mu);
   bool renewed = renew_done_locked (c, l, sent, ttl_ms, ok, was_sent, err);
   if (renewed) {
      l->ttl_ms = ttl_ms;
      if (min_hold_ms >= 0)
         l->min_hold_ms = hold_after_renew (l, ll_now_ms (), min_hold_ms);
      pthread_cond_broadcast (&c->cond); /* the renewal thread plans again */
   } else if (ok && l->state == LEASELOCK_STATE_CLOSED) {
      ok = ll_error_set (err, LEASELOCK_NOT_HELD, "the client of this lease was closed meanwhile");
   } else if (ok) {
      ok = ll_error_set (err, LEASELOCK_LOST, "the lease on \"%s\" was lost meanwhile",
                         LL_KEY_SHOWN (l->key, l->key_len));
   }
   int64_t left = l->state == LEASELOCK_STATE_HELD ? l->dl.at_ms - ll_now_ms () : -1;
   pthread_mutex_unlock (&c->mu);
   if (renewed || left >= 0)
      log_renew (c, l, ttl_ms, renewed, left, 0, err);
   ll_log_flush (&c->obs);
   return ok;
}

/* Records the outcome of a release (or its resend) of l. Called with
 * c->mu held. */
static void release_done_locked (leaselock_client_t *c,
                                 leaselock_lease_t *l,
                                 bool ok,
                                 bool was_sent,
                                 bool resent,
                                 const leaselock_error_t *err)
{
   if (ok || err->code == LEASELOCK_NOT_HELD) {
      lease_ended_locked (c, l, ll_now_ms ());
      if (l->state == LEASELOCK_STATE_HELD || ok)
         l->state = LEASELOCK_STATE_RELEASED;
      if (!l->lost_notify)
         list_remove_locked (c, l);
   } else if (!was_sent && !resent && l->state == LEASELOCK_STATE_HELD && l->auto_renew &&
              !l->in_list && !atomic_load (&c->closing)) {
      schedule_locked (c, l, NULL); /* nothing was sent: surely still ours */
   } else if (l->state == LEASELOCK_STATE_HELD) {
      /* Maybe released, maybe not. The holder has let go either way, so
       * RELEASED, never renewed again (renewing a record that may be
       * released would report a loss that is not one); if the release did
       * not land, the database expires the record by its TTL. */
      lease_ended_locked (c, l, ll_now_ms ());
      l->state = LEASELOCK_STATE_RELEASED;
      l->lost_notify = false;
      list_remove_locked (c, l);
   }
}

/* Counts and logs a release of l that reached the database. */
static void log_release (leaselock_client_t *c,
                         leaselock_lease_t *l,
                         bool ok,
                         const leaselock_error_t *err)
{
   ll_count (&c->obs, ok ? LL_ST_RELEASES : LL_ST_RELEASE_FAILURES, 1);
   if (ok)
      LL_LOG (&c->obs, LEASELOCK_LOG_DEBUG, "release", l->key, l->key_len, l->fence, LEASELOCK_OK,
              "released");
   else
      LL_LOG (&c->obs, LEASELOCK_LOG_WARNING, "release_failed", l->key, l->key_len, l->fence,
              err->code, "release failed: %s", err->message);
   ll_log_flush (&c->obs);
}

/* Whether the client's state refuses a release by its user: once it is
 * closing, unless that close releases held leases and has not finished (a
 * lease released or destroyed by its user meanwhile must still be
 * released: the close skips the leases whose release is under way, and
 * forgets destroyed ones). Called with c->mu held. */
static bool refuses_release_locked (const leaselock_client_t *c)
{
   return atomic_load (&c->closing) && !(c->close_releases && !c->closed);
}

/* The release of leaselock_lease_release, also made by
 * leaselock_client_close (by_close), which alone may release once the
 * client is closing. */
static bool release_lease (leaselock_lease_t *l, pid_t me, bool by_close, leaselock_error_t *err)
{
   leaselock_client_t *c = l->client;
   pthread_mutex_lock (&c->mu);
   /* A release of l already in flight (the user's, or a releasing
    * close's) decides for this one too: sending a second would be answered
    * "not yours" once the first landed. Bounded: that call is. */
   bool waited = false;
   for (; l->releasing > 0; waited = true)
      ll_cond_wait_until (&c->cond, &c->mu, -1);
   leaselock_state_t st = l->state;
   bool by_other_close = waited && l->released_by_close && !by_close;
   bool closed = !by_close && !by_other_close && refuses_release_locked (c);
   /* No renewal may start from now on; one in flight is harmless: the
    * owner check makes it fail once the release lands. */
   if (!closed && st != LEASELOCK_STATE_RELEASED && !l->lost_notify)
      list_remove_locked (c, l);
   l->releasing += !closed && st != LEASELOCK_STATE_RELEASED;
   pthread_mutex_unlock (&c->mu);
   if (closed)
      return ll_error_set (err, LEASELOCK_NOT_HELD, "the client of this lease is closed");
   /* Released meanwhile by the close the user raced with: done, as asked.
    * A close finds a lease its user released meanwhile: nothing to do. */
   if (st == LEASELOCK_STATE_RELEASED && (by_other_close || by_close))
      return true;
   if (st == LEASELOCK_STATE_RELEASED)
      return ll_error_set (err, LEASELOCK_NOT_HELD, "the lease on \"%s\" was already released",
                           LL_KEY_SHOWN (l->key, l->key_len));

   bool was_sent, resent = false;
   bool ok = release_call (c, l, me, &was_sent, err);
   if (!ok && was_sent && err->code == LEASELOCK_BACKEND) {
      resent = true;
      /* It may have been applied: ask once more, on a fresh connection.
       * "Not ours" then most likely means the first one landed; either way
       * the key is no longer this owner's, which is what release is for. */
      ok = release_call (c, l, me, &was_sent, err) || err->code == LEASELOCK_NOT_HELD;
      if (ok)
         ll_error_clear (err);
   }

   pthread_mutex_lock (&c->mu);
   release_done_locked (c, l, ok, was_sent, resent, err);
   l->released_by_close = by_close && l->state == LEASELOCK_STATE_RELEASED;
   l->releasing--;
   pthread_cond_broadcast (&c->cond); /* a release waiting for this one */
   pthread_mutex_unlock (&c->mu);
   if (ok) {
      bucket_wake (l->key, l->key_len);
   } else if (err->code == LEASELOCK_NOT_HELD) {
      ll_error_set (err, LEASELOCK_NOT_HELD,
                    "the lease on \"%s\" is no longer held by this owner (it expired and was "
                    "taken, or was force-released)",
                    LL_KEY_SHOWN (l->key, l->key_len));
   }
   log_release (c, l, ok, err);
   return ok;
}

/* One hold statement (delta +1 or -1) for owner of key. */
static bool hold_call (leaselock_client_t *c,
                       const char *key,
                       size_t key_len,
                       const char *owner,
                       int delta,
                       pid_t me,
                       int64_t *holds,
                       leaselock_error_t *err)
{
   if (!c->backend->hold)
      return ll_error_set (err, LEASELOCK_UNSUPPORTED,
                           "reentrant locks: the %s backend keeps no "
                           "hold count",
                           c->backend->name);
   void *conn = pool_get (c, me, err);
   if (!conn)
      return false;
   int64_t t0 = ll_real_now_us ();
   bool ok = c->backend->hold (conn, key, key_len, owner, delta, holds, err);
   ll_obs_request (&c->obs, t0, ok, err);
   pool_put (c, conn, me, !ok && conn_failed (err));
   if (!ok && err->code == LEASELOCK_NOT_HELD)
      ll_error_set (err, LEASELOCK_NOT_HELD,
                    "\"%s\" is no longer held by this owner (it expired and was taken, was "
                    "released, or was force-released)",
                    LL_KEY_SHOWN (key, key_len));
   return ok;
}

/* The lease's holds, or a failure when it is not HELD. */
static bool lease_holds (leaselock_lease_t *l, int64_t *holds, leaselock_error_t *err)
{
   leaselock_client_t *c = l->client;
   pthread_mutex_lock (&c->mu);
   check_deadline_locked (c, l, ll_now_ms ());
   leaselock_state_t st = l->state;
   *holds = l->holds;
   pthread_mutex_unlock (&c->mu);
   if (st == LEASELOCK_STATE_HELD)
      return true;
   if (st == LEASELOCK_STATE_LOST)
      return ll_error_set (err, LEASELOCK_LOST, "the lease on \"%s\" was lost",
                           LL_KEY_SHOWN (l->key, l->key_len));
   return ll_error_set (err, LEASELOCK_NOT_HELD, "the lease on \"%s\" is no longer held",
                        LL_KEY_SHOWN (l->key, l->key_len));
}

bool leaselock_lease_reenter (leaselock_lease_t *l, leaselock_error_t *error)
{
   leaselock_error_t local;
   leaselock_error_t *err = error ? error : &local;
   ll_error_clear (err);
   if (!l)
      return ll_error_set (err, LEASELOCK_INVALID, "lease is NULL");
   pid_t me = getpid ();
   int64_t holds;
   if (!lease_usable (l, me, err) || !lease_holds (l, &holds, err))
      return false;
   int64_t stored;
   /* A lost reply leaves the stored count one higher at most: only shown,
    * never used to decide the last release. */
   if (!hold_call (l->client, l->key, l->key_len, l->owner, +1, me, &stored, err))
      return false;
   pthread_mutex_lock (&l->client->mu);
   l->holds++;
   pthread_mutex_unlock (&l->client->mu);
   LL_LOG (&l->client->obs, LEASELOCK_LOG_DEBUG, "reenter", l->key, l->key_len, l->fence,
           LEASELOCK_OK, "entered again (%lld holds)", (long long)stored);
   return true;
}

int64_t leaselock_lease_holds (leaselock_lease_t *l)
{
   if (!l)
      return 0;
   int64_t holds;
   leaselock_error_t ignored;
   return lease_holds (l, &holds, &ignored) ? holds : 0;
}

bool leaselock_hold (leaselock_client_t *c,
                     const char *key,
                     size_t key_len,
                     const char *owner,
                     int delta,
                     int64_t *holds,
                     leaselock_error_t *error)
{
   leaselock_error_t local;
   leaselock_error_t *err = error ? error : &local;
   ll_error_clear (err);
   if (holds)
      *holds = 0;
   if (!client_usable (c, err) || !ll_check_key (key, key_len, "key", false, err))
      return false;
   if (!holds)
      return ll_error_set (err, LEASELOCK_INVALID, "holds (the out parameter) is NULL");
   if (delta != 1 && delta != -1)
      return ll_error_set (err, LEASELOCK_INVALID, "delta must be +1 or -1 (got %d)", delta);
   if (!owner || strlen (owner) != LEASELOCK_OWNER_LEN ||
       strspn (owner, "0123456789abcdef") != LEASELOCK_OWNER_LEN)
      return ll_error_set (err, LEASELOCK_INVALID,
                           "owner must be %d lower-case hex characters (an owner token)",
                           LEASELOCK_OWNER_LEN);
   return hold_call (c, key, key_len, owner, delta, getpid (), holds, err);
}

bool leaselock_lease_release (leaselock_lease_t *l, leaselock_error_t *error)
{
   leaselock_error_t local;
   leaselock_error_t *err = error ? error : &local;
   ll_error_clear (err);
   if (!l)
      return ll_error_set (err, LEASELOCK_INVALID, "lease is NULL");
   pid_t me = getpid ();
   if (!lease_usable (l, me, err))
      return false;
   int64_t holds = 0;
   leaselock_error_t not_held;
   if (lease_holds (l, &holds, &not_held) && holds > 1) {
      /* Not the last hold: one goes, the key stays this owner's. A failed
       * statement leaves the lease's own count as it was. */
      int64_t stored;
      if (!hold_call (l->client, l->key, l->key_len, l->owner, -1, me, &stored, err))
         return false;
      pthread_mutex_lock (&l->client->mu);
      l->holds--;
      pthread_mutex_unlock (&l->client->mu);
      return true;
   }
   return release_lease (l, me, false, err);
}

void leaselock_lease_destroy (leaselock_lease_t *l)
{
   if (!l)
      return;
   leaselock_client_t *c = l->client;
   if (l->pid == getpid ()) {
      pthread_mutex_lock (&c->mu);
      bool release = !refuses_release_locked (c) && l->state != LEASELOCK_STATE_RELEASED;
      pthread_mutex_unlock (&c->mu);
      if (release && lease_usable (l, getpid (), &(leaselock_error_t){ 0 }))
         release_lease (l, getpid (), false, &(leaselock_error_t){ 0 }); /* every hold */
   }
   pthread_mutex_lock (&c->mu);
   /* In a child forked while on_lost ran, in_callback is the parent's. */
   reset_after_fork_locked (c, getpid ());
   all_remove_locked (c, l);
   if (l->pid == c->pid) {
      l->lost_notify = false; /* the user is gone: no callback after destroy */
      list_remove_locked (c, l);
      /* The callback's data may be freed once we return. */
      while (l->in_callback && !(c->thread_running && pthread_equal (c->thread, pthread_self ())))
         ll_cond_wait_until (&c->cond, &c->mu, -1);
   }
   pthread_mutex_unlock (&c->mu);
   lease_unref (l);
}

const char *leaselock_lease_key (const leaselock_lease_t *l)
{
   return l ? l->key : "";
}

size_t leaselock_lease_key_len (const leaselock_lease_t *l)
{
   return l ? l->key_len : 0;
}

const char *leaselock_lease_owner (const leaselock_lease_t *l)
{
   return l ? l->owner : "";
}

int64_t leaselock_lease_fence (const leaselock_lease_t *l)
{
   return l ? l->fence : 0;
}

int64_t leaselock_lease_ttl_ms (const leaselock_lease_t *l)
{
   if (!l)
      return 0;
   pthread_mutex_lock (&l->client->mu);
   int64_t t = l->ttl_ms;
   pthread_mutex_unlock (&l->client->mu);
   return t;
}

leaselock_state_t leaselock_lease_state (leaselock_lease_t *l)
{
   if (!l)
      return LEASELOCK_STATE_RELEASED;
   leaselock_client_t *c = l->client;
   pthread_mutex_lock (&c->mu);
   if (l->pid == getpid ())
      check_deadline_locked (c, l, ll_now_ms ());
   leaselock_state_t st = l->state;
   pthread_mutex_unlock (&c->mu);
   ll_log_flush (&c->obs);
   return st;
}

int64_t leaselock_lease_remaining_ms (leaselock_lease_t *l)
{
   if (!l)
      return 0;
   leaselock_client_t *c = l->client;
   pthread_mutex_lock (&c->mu);
   int64_t left = l->state == LEASELOCK_STATE_HELD ? l->dl.at_ms - ll_now_ms () : 0;
   pthread_mutex_unlock (&c->mu);
   return left > 0 ? left : 0;
}

/* ---- admin ------------------------------------------------------------- */

/* Counts an admin statement (what) sent at t0, and logs its backend
 * error. */
static void admin_done (leaselock_client_t *c,
                        const char *what,
                        const char *key,
                        size_t key_len,
                        int64_t t0,
                        bool ok,
                        const leaselock_error_t *err)
{
   ll_obs_request (&c->obs, t0, ok, err);
   if (!ok && (err->code == LEASELOCK_BACKEND || err->code == LEASELOCK_NOMEM))
      LL_LOG (&c->obs, LEASELOCK_LOG_WARNING, "backend_error", key, key_len, 0, err->code,
              "%s failed: %s", what, err->message);
}

bool leaselock_client_stats (leaselock_client_t *c,
                             leaselock_stats_t *stats,
                             leaselock_error_t *error)
{
   ll_error_clear (error);
   if (!c || !stats)
      return ll_error_set (error, LEASELOCK_INVALID, "%s is NULL", c ? "stats" : "client");
   ll_obs_read (&c->obs, stats);
   pid_t me = getpid ();
   pthread_mutex_lock (&c->mu);
   int64_t now = ll_now_ms ();
   for (leaselock_lease_t *l = c->leases; l; l = l->next_all)
      stats->leases_held += l->pid == me && l->state == LEASELOCK_STATE_HELD && now < l->dl.at_ms;
   pthread_mutex_unlock (&c->mu);
   return true;
}

static bool client_usable (leaselock_client_t *c, leaselock_error_t *err)
{
   if (!c)
      return ll_error_set (err, LEASELOCK_INVALID, "client is NULL");
   if (atomic_load (&c->closing))
      return ll_error_set (err, LEASELOCK_INVALID, "the client is closed");
   return true;
}

/* A record's hold count as the contract has it: 0 without an owner, at
 * least 1 with one (a backend that keeps no count reports none). */
static void holds_fix (leaselock_record_t *r)
{
   if (!r->owner[0])
      r->holds = 0;
   else if (r->holds < 1)
      r->holds = 1;
}

bool leaselock_inspect (leaselock_client_t *c,
                        const char *key,
                        size_t key_len,
                        leaselock_record_t *record,
                        bool *found,
                        leaselock_error_t *error)
{
   leaselock_error_t local;
   leaselock_error_t *err = error ? error : &local;
   ll_error_clear (err);
   if (!client_usable (c, err) || !ll_check_key (key, key_len, "key", false, err))
      return false;
   if (!record || !found)
      return ll_error_set (err, LEASELOCK_INVALID, "%s is NULL", record ? "found" : "record");
   memset (record, 0, sizeof *record);
   *found = false;
   pid_t me = getpid ();
   void *conn = pool_get (c, me, err);
   if (!conn)
      return false;
   int64_t t0 = ll_real_now_us ();
   bool ok = c->backend->inspect (conn, key, key_len, record, found, err);
   holds_fix (record);
   admin_done (c, "inspect", key, key_len, t0, ok, err);
   pool_put (c, conn, me, !ok && conn_failed (err));
   return ok;
}

typedef struct records
{
   leaselock_record_t *recs;
   size_t n, cap;
   bool failed;
} records_t;

static bool records_add (const leaselock_record_t *rec, void *all_)
{
   records_t *all = all_;
   if (all->n == all->cap) {
      size_t cap = all->cap ? 2 * all->cap : 16;
      leaselock_record_t *grown = realloc (all->recs, cap * sizeof *grown);
      if (!grown) {
         all->failed = true;
         return false;
      }
      all->recs = grown;
      all->cap = cap;
   }
   all->recs[all->n] = *rec;
   holds_fix (&all->recs[all->n++]);
   return true;
}

bool leaselock_list (leaselock_client_t *c,
                     const char *prefix,
                     size_t prefix_len,
                     leaselock_record_cb fn,
                     void *user_data,
                     leaselock_error_t *error)
{
   leaselock_error_t local;
   leaselock_error_t *err = error ? error : &local;
   ll_error_clear (err);
   if (!client_usable (c, err))
      return false;
   if (!prefix && prefix_len == 0)
      prefix = "";
   if (!ll_check_key (prefix, prefix_len, "prefix", true, err))
      return false;
   if (!fn)
      return ll_error_set (err, LEASELOCK_INVALID, "fn (the record callback) is NULL");
   /* Read everything first and call fn with no connection held: fn may
    * call leaselock itself, or fork. */
   records_t all = { 0 };
   pid_t me = getpid ();
   void *conn = pool_get (c, me, err);
   if (!conn)
      return false;
   int64_t t0 = ll_real_now_us ();
   bool ok = c->backend->list (conn, prefix, prefix_len, records_add, &all, err);
   admin_done (c, "list", prefix_len ? prefix : NULL, prefix_len, t0, ok, err);
   pool_put (c, conn, me, !ok && conn_failed (err));
   if (ok && all.failed)
      ok = ll_error_set (err, LEASELOCK_NOMEM, "out of memory reading %zu records", all.n);
   for (size_t i = 0; ok && i < all.n && fn (&all.recs[i], user_data); i++) {
   }
   free (all.recs);
   return ok;
}

bool leaselock_force_release (leaselock_client_t *c,
                              const char *key,
                              size_t key_len,
                              bool *took,
                              leaselock_error_t *error)
{
   leaselock_error_t local;
   leaselock_error_t *err = error ? error : &local;
   ll_error_clear (err);
   if (!client_usable (c, err) || !ll_check_key (key, key_len, "key", false, err))
      return false;
   bool took_local = false;
   pid_t me = getpid ();
   void *conn = pool_get (c, me, err);
   if (!conn)
      return false;
   int64_t t0 = ll_real_now_us ();
   bool ok = c->backend->force_release (conn, key, key_len, &took_local, err);
   admin_done (c, "force_release", key, key_len, t0, ok, err);
   pool_put (c, conn, me, !ok && conn_failed (err));
   if (ok)
      bucket_wake (key, key_len);
   if (took)
      *took = ok && took_local;
   return ok;
}

/* ---- prune ------------------------------------------------------------- */

bool leaselock_prune (leaselock_client_t *c,
                      const char *prefix,
                      size_t prefix_len,
                      int64_t older_than_ms,
                      int64_t *count,
                      leaselock_error_t *error)
{
   leaselock_error_t local;
   leaselock_error_t *err = error ? error : &local;
   ll_error_clear (err);
   if (count)
      *count = 0;
   if (!client_usable (c, err))
      return false;
   if (!prefix && prefix_len == 0)
      prefix = "";
   if (!ll_check_key (prefix, prefix_len, "prefix", true, err) ||
       !ll_check_duration (older_than_ms, "older_than", err))
      return false;
   if (!c->backend->prune)
      return ll_error_set (err, LEASELOCK_UNSUPPORTED, "the %s backend cannot prune",
                           c->backend->name);
   int64_t n = 0;
   pid_t me = getpid ();
   void *conn = pool_get (c, me, err);
   if (!conn)
      return false;
   bool ok = c->backend->prune (conn, prefix, prefix_len, older_than_ms, &n, err);
   pool_put (c, conn, me, !ok && conn_failed (err));
   if (ok && count)
      *count = n;
   return ok;
}
