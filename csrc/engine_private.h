/*
 * engine_private.h - the lease engine's types and the calls its files
 * share; not installed, and not for the backends (ll_internal.h).
 *
 * The engine, one file per concern: client.c (a client's life), pool.c
 * (its connections), fork.c (fork() handling), renew.c (the renewal and
 * I/O threads, manual renew and extend), take.c (one try of an acquire),
 * wait.c (waiting between tries), acquire.c (an acquire call), lease.c (a
 * lease's bookkeeping, its owner's statements, getters), release.c
 * (release and reentrant holds), admin.c (stats, inspect, list,
 * force_release, prune).
 *
 * Locking: fork.c's list mutex, then a client's mutex, then its watcher's
 * (watch.c), then a wait bucket's mutex, always in that order. No mutex is
 * held across database I/O or a user callback. A client's log hook and
 * counters (observe.c) have a mutex of their own, taken after the
 * client's (a loss found under it is queued there) and never held across
 * the hook.
 *
 * "_locked" in a name: called with the client's mu held.
 */
#ifndef LL_ENGINE_PRIVATE_H
#define LL_ENGINE_PRIVATE_H

#include "ll_internal.h"

#include <stdatomic.h>
#include <sys/types.h>

#define POOL_MAX 8        /* idle connections a client keeps */
#define LL_N_BUCKETS 64   /* wait buckets of the process (wait.c) */
#define IO_MAX 4          /* I/O threads per client, started as renewals need them */
#define FORK_WAIT_MS 2000 /* fork() waits this long for calls in flight */
/* Fair mode: a waiter's queue entry lasts QUEUE_KEEP_MS past each try (so
 * one that died, stopped or gave up holds the others back at most that
 * long: LL_WAITER_KEEP_MS, the bound of every mode). */
#define QUEUE_KEEP_MS LL_WAITER_KEEP_MS
/* An automatic renewal that failed, and the forgetting of an owner
 * (ll_forget_t), try again after RETRY_MIN_MS .. RETRY_MAX_MS. */
#define RETRY_MIN_MS 5
#define RETRY_MAX_MS 1000

/* An owner whose acquire's outcome stayed unknown (take.c): the grant may
 * have been committed, and nobody would hold it. The client's I/O threads
 * release the key for that owner (renew.c), retrying with backoff, until
 * a release lands, the TTL it asked for has passed (the record has
 * expired), or the client closes; NOT_HELD does not end it (the statement
 * may still be queued on the server). Owned by its client's list; guarded
 * by the client's mu. */
typedef struct ll_forget
{
   char key[LEASELOCK_KEY_MAX + 1];
   size_t key_len;
   char owner[LEASELOCK_OWNER_LEN + 1];
   int64_t until;   /* local ms after which the record has expired anyway */
   int64_t next_ms; /* local ms of its next try */
   int64_t wait;    /* the backoff after a failed try */
   bool busy;       /* an I/O thread sends its release now */
   struct ll_forget *next;
} ll_forget_t;

/* One of a client's I/O threads (renew.c), inside the client; guarded by
 * the client's mu. */
typedef struct io_slot
{
   leaselock_client_t *client; /* borrowed: the client it is inside */
   pthread_t tid;
   bool running;
   bool failed;            /* its thread could not start: not tried again */
   leaselock_lease_t *job; /* lease it renews now (a counted reference) */
   ll_forget_t *forget;    /* or the owner it releases for now (the client's) */
} io_slot_t;

/* A client (client.c). Owned by its user, and referenced by each of its
 * leases and waits (refs): ll_client_unref frees it and
 * its strings. */
struct leaselock_client
{
   const ll_backend_t *backend; /* a static table: not owned */
   char *uri;                   /* owned; as given (may hold a password); never shown */
   char *uri_shown;             /* owned; password replaced */
   char *label;                 /* owned */
   char host[256];
   atomic_int refs; /* the user's + one per lease */
   /* Owned: the memory of the last lease freed, kept for the next acquire
    * (ll_lease_alloc), or NULL: an acquire+release pair then costs no
    * malloc and free of the ~1.3 KiB lease, a size that makes glibc
    * consolidate its fast bins on each malloc. Freed with the client. */
   _Atomic (leaselock_lease_t *) spare_lease;
   /* Set once, under mu, when leaselock_client_close starts: from then on
    * nothing new starts on the client. Read without mu by the getters and
    * by blocking acquires waiting in a bucket. */
   atomic_bool closing;

   pthread_mutex_t mu;        /* guards everything below */
   pid_t pid;                 /* process that owns the pool and the thread */
   bool closed;               /* leaselock_client_close has finished */
   bool close_releases;       /* the close under way releases held leases */
   leaselock_lease_t *leases; /* every lease not yet destroyed (borrowed) */
   void *idle[POOL_MAX];      /* owned idle connections (pool.c) */
   int n_idle;
   int in_use;                  /* connections handed out by ll_pool_get */
   bool fork_busy;              /* one was still in use when fork() ran */
   pthread_cond_t drained;      /* signalled when in_use drops to 0 */
   leaselock_lease_t *renewing; /* auto-renewed leases of this process (borrowed) */
   /* Wakes the user's threads waiting on c: for a release in flight, a
    * callback, a close under way. Never the renewal thread, so that a
    * release's broadcast costs no wake-up of it. */
   pthread_cond_t cond;
   /* Wakes the renewal thread (it alone waits on it), only when it must
    * plan again: ll_renewal_wake_locked. */
   pthread_cond_t renew_cond;
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
   ll_forget_t *forgets; /* owned: releases due for unknown outcomes */
   bool sleeping;        /* the renewal thread waits on renew_cond ... */
   int64_t sleep_until;  /* ... until then (< 0: until signalled) */
   /* The earliest first renewal of the leases added since the renewal
    * thread last planned (0: none, or already past then): it plans for
    * it even when the lease was let go meanwhile, so that the next
    * leases (due later) need not wake it. */
   int64_t added_due;
   leaselock_client_t *next_client; /* fork.c's list (its mutex, not mu) */
   ll_obs_t obs;                    /* log hook and counters (observe.c) */
   ll_watch_t watch;                /* release notifications (watch.c) */
};

/* A lease (lease.c). Owned by its user (leaselock_lease_destroy) and
 * referenced while the renewal thread, an I/O thread or a callback uses
 * it (refs): ll_lease_unref frees it. The fields down to refs are set
 * before the lease is handed out and read-only after, but min_hold_ms
 * (written under client->mu by extend). */
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
   void *on_lost_data; /* the user's, borrowed (as on_renew_failed_data) */
   leaselock_renew_failed_cb on_renew_failed;
   void *on_renew_failed_data;
   atomic_int refs; /* the user's + the renewal thread's while it works */

   /* Guarded by client->mu. */
   int64_t ttl_ms;
   leaselock_state_t state;
   ll_deadline_t dl;      /* local deadline (deadline.c) */
   int64_t next_renew_ms; /* when the renewal thread next acts */
   bool in_list;
   bool lost_notify;                       /* on_lost still to be called */
   bool in_callback;                       /* on_lost or on_renew_failed is running now */
   bool renew_failed_notify;               /* on_renew_failed still to be called ... */
   leaselock_error_t renew_err;            /* ... with this error */
   int64_t acquired_ms;                    /* local time the acquire was sent (stats) */
   int releasing;                          /* releases of it in flight */
   int64_t holds;                          /* reentrant holds (1 once acquired) */
   bool close_tried;                       /* leaselock_client_close tried to release it */
   bool released_by_close;                 /* and that release ended it */
   bool drop_on_release;                   /* a one-use record: its release deletes it */
   leaselock_lease_t *prev, *next;         /* in client->renewing */
   leaselock_lease_t *prev_all, *next_all; /* in client->leases */
};

/* A blocking acquire of this process, from its first try to its end, as
 * its bucket sees it: a local release of its key wakes one such waiter
 * (ll_bucket_wake), not all. Owned by the acquire call (on its stack);
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

/* One of the process's LL_N_BUCKETS wait buckets (wait.c), picked by the
 * key's hash; it lives as long as the process. */
typedef struct bucket
{
   pthread_mutex_t mu;      /* guards the rest */
   pthread_cond_t cond;     /* its blocking acquires sleep on it */
   local_waiter_t *waiters; /* this process's blocking acquires of its keys */
   uint32_t released_hash;  /* the key this process released last here (ll_key_hash) */
   int64_t released_at;     /* and when (local ms; 0: none) */
} bucket_t;

/* A blocking acquire's standing as a waiter (contract invariant 9). Part
 * of its acquire_call_t; only the thread running the call touches it. */
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
   uint64_t leaves_before; /* its watcher's queue leaves heard when that try's count began */
} waiter_t;

/* One call of leaselock_acquire: its tries share one owner. On the
 * caller's stack, or inside a leaselock_wait_t (acquire.c); only the
 * thread running the call touches it, but for local and watch (their
 * bucket's and watcher's mutexes). */
typedef struct acquire_call
{
   leaselock_client_t *c; /* borrowed; a wait holds a reference */
   const char *key;       /* borrowed from the caller, or the wait's copy */
   size_t key_len;
   const leaselock_acquire_opts_t *opts; /* borrowed, as key */
   pid_t me;
   /* One owner for every attempt of this call: an attempt whose reply was
    * lost may have taken the key, and the record then accepts this owner
    * again (a re-acquire) instead of standing locked by nobody until its
    * TTL runs out. */
   char owner[LEASELOCK_OWNER_LEN + 1];
   bool resent, sent_any;
   /* A wait its caller drives (leaselock_wait_try): the caller sleeps
    * between tries, on an event loop that a try must not hold, so a try
    * waits on a database's own lock (SQLite's file) a moment at most, as
    * a one-try acquire does, and comes back BUSY. */
   bool driven;
   int attempt;          /* waits so far: the backoff grows with it */
   int64_t start, until; /* the call's start and deadline */
   int64_t waited_from;  /* when it first found the key busy and waited */
   bucket_t *b;          /* one of ll_buckets: its key's */
   waiter_t w;
   ll_watch_waiter_t watch; /* a blocking acquire's entry with the client's watcher */
   bool watched;
   local_waiter_t local;     /* its entry in its bucket, while watched */
   ll_call_wait_t lock_wait; /* what a try tells the backend (ll_call_wait) */
} acquire_call_t;

/* What follows one try of an acquire call (acquire.c). */
typedef enum
{
   NEXT_DONE,   /* acquired */
   NEXT_RESEND, /* send the same statement once more, at once */
   NEXT_WAIT,   /* busy: wait, then try again */
   NEXT_FAIL    /* err holds the answer */
} acquire_next_t;

/* The process's wait buckets (wait.c): a blocking acquire sleeps on its
 * key's; fork.c takes and renews them around a fork. */
extern bucket_t ll_buckets[LL_N_BUCKETS];

/* ---- fork.c ------------------------------------------------------------ */

/* Once per process: the buckets' mutexes and the atfork handlers. */
void ll_process_init (void);
/* Adds c to (or removes it from) the process's list of clients, which the
 * fork handlers go through; c stays owned by its user. */
void ll_clients_add (leaselock_client_t *c);
void ll_clients_remove (leaselock_client_t *c);
/* In a child (c->pid is not me): drops the parent's renewal list, I/O
 * jobs and thread flags, abandons its idle connections. Called with c->mu
 * held; ll_check_fork takes it. */
void ll_reset_after_fork_locked (leaselock_client_t *c, pid_t me);
void ll_check_fork (leaselock_client_t *c, pid_t me);

/* ---- pool.c ------------------------------------------------------------ */

/* A connection for one call (me: getpid(), asked once per public call),
 * owned by the caller until ll_pool_put; NULL with err set. */
void *ll_pool_get (leaselock_client_t *c, pid_t me, leaselock_error_t *err);
/* Gives conn back (failed: it failed, close it). */
void ll_pool_put (leaselock_client_t *c, void *conn, pid_t me, bool failed);
/* Whether err says the connection may be broken (BACKEND or NOMEM). */
bool ll_conn_failed (const leaselock_error_t *err);

/* ---- client.c ---------------------------------------------------------- */

/* Drops one reference (the user's, a lease's, a wait's); the last
 * frees c. */
void ll_client_unref (leaselock_client_t *c);
/* INVALID for a NULL or closed client. */
bool ll_client_usable (leaselock_client_t *c, leaselock_error_t *err);

/* ---- renew.c ----------------------------------------------------------- */

bool ll_on_renewal_thread (leaselock_client_t *c);
/* Stops and joins the renewal and I/O threads (not the calling one) and
 * empties the renewal list. */
void ll_stop_renewal (leaselock_client_t *c);
/* When the renewal thread first renews a lease acquired at sent. */
int64_t ll_first_renewal (int64_t sent, const ll_deadline_t *dl);
/* Adds l to c's renewal list (borrowed: l stays the user's), starting the
 * threads if need be. Called with c->mu held. */
bool ll_schedule_locked (leaselock_client_t *c, leaselock_lease_t *l, leaselock_error_t *err);
/* Wakes c's renewal thread if it sleeps past at (local ms; -1: whatever
 * it planned), so that it plans again: a lease's renewal or deadline, or a
 * forget, come due then. A thread awake plans again anyway. Called with
 * c->mu held. */
void ll_renewal_wake_locked (leaselock_client_t *c, int64_t at);
/* Hands f (owned by c from now on) to c's I/O threads, starting them if
 * need be: its first try at once. Freed at once when c is closing or no
 * thread can start (its record then expires by its TTL). Called with
 * c->mu held. */
void ll_forget_locked (leaselock_client_t *c, ll_forget_t *f);
/* Frees c's forgets (none in flight: its I/O threads are joined, or are
 * the parent's after a fork). Called with c->mu held. */
void ll_forgets_drop_locked (leaselock_client_t *c);

/* ---- take.c ------------------------------------------------------------ */

/* One try of call a, sent once more at once when it failed after being
 * sent; on NEXT_DONE *lease is a new lease owned by the caller. */
acquire_next_t ll_call_try (acquire_call_t *a, leaselock_lease_t **lease, leaselock_error_t *err);
/* A call that ends without the key leaves the key's queue (fair mode). */
void ll_call_quit (acquire_call_t *a);

/* ---- wait.c (the sleeps' policy is in ll_internal.h) --------------------- */

/* FNV-1a of key: picks its bucket (ll_buckets[hash % LL_N_BUCKETS]). */
uint32_t ll_key_hash (const char *key, size_t len);
void ll_bucket_leave (bucket_t *b, local_waiter_t *e);
/* A release of key in this process: wakes its one local waiter that can
 * take it. */
void ll_bucket_wake (const char *key, size_t len);
/* Wakes every blocking acquire of the process (a client closes). */
void ll_wake_all_waiters (void);
/* Registers call a with its client's watcher and its bucket. */
void ll_call_watch_begin (acquire_call_t *a, int64_t now);
/* TIMEOUT once a's deadline passed; else *until_out, its next try. */
bool ll_wait_plan (acquire_call_t *a, int64_t *until_out, leaselock_error_t *err);
/* Plans and sleeps until a's next try; false with TIMEOUT, INTERRUPTED or
 * INVALID in err. */
bool ll_wait_next (acquire_call_t *a, leaselock_error_t *err);

/* ---- lease.c ----------------------------------------------------------- */

/* Drops one reference (the user's, a callback's, an I/O job's); the last
 * frees l and drops its client reference. */
void ll_lease_unref (leaselock_lease_t *l);
/* A zeroed lease for an acquire on c (c's spare, else calloc), NULL when
 * out of memory; freed by ll_lease_free (c, l) before it is started,
 * ll_lease_unref after. ll_lease_free keeps l as c's spare when c has
 * none. The client must outlive both calls. */
leaselock_lease_t *ll_lease_alloc (leaselock_client_t *c);
void ll_lease_free (leaselock_client_t *c, leaselock_lease_t *l);
/* c's lists (called with c->mu held): the renewal list, every lease. */
void ll_list_remove_locked (leaselock_client_t *c, leaselock_lease_t *l);
void ll_all_add_locked (leaselock_client_t *c, leaselock_lease_t *l);
void ll_all_remove_locked (leaselock_client_t *c, leaselock_lease_t *l);
/* A HELD lease ends: counts its time held (c->mu held). */
void ll_lease_ended_locked (leaselock_client_t *c, leaselock_lease_t *l, int64_t now);
/* HELD -> LOST, once (c->mu held). */
void ll_mark_lost_locked (leaselock_client_t *c, leaselock_lease_t *l);
/* LOST once past the local deadline (c->mu held). */
void ll_check_deadline_locked (leaselock_client_t *c, leaselock_lease_t *l, int64_t now);
/* One renew (renew true: ms is the TTL) or release (ms: min_hold)
 * statement for owner's record of key (both borrowed), counted.
 * *was_sent says whether it reached a connection (so, on failure, it may
 * have been applied). ll_release_call sends lease l's release. */
bool ll_owner_call (leaselock_client_t *c, const char *key, size_t key_len, const char *owner,
                    bool renew, int64_t ms, pid_t me, bool *was_sent, leaselock_error_t *err);
bool ll_release_call (leaselock_client_t *c, leaselock_lease_t *l, pid_t me, bool *was_sent,
                      leaselock_error_t *err);
/* INVALID for a NULL lease, NOT_HELD for a lease of the parent process. */
bool ll_lease_usable (leaselock_lease_t *l, pid_t me, leaselock_error_t *err);

/* ---- release.c --------------------------------------------------------- */

/* Releases l (by_close: leaselock_client_close releases it). */
bool ll_release_lease (leaselock_lease_t *l, pid_t me, bool by_close, leaselock_error_t *err);

#endif /* LL_ENGINE_PRIVATE_H */
