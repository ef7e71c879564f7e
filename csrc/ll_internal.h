/*
 * ll_internal.h - what the engine, the backends and the tests share.
 * Not installed; bindings use leaselock.h only.
 *
 * A backend is backend_<name>.c (its one const ll_backend_t and the
 * lease operations) plus backend_<name>_<concern>.c files (URI,
 * connection, queue) sharing backend_<name>_private.h. The engine never
 * includes a driver header: everything driver-specific sits behind this
 * table of function pointers (mongoc_stream_t / redisContextFuncs shape).
 */
#ifndef LL_INTERNAL_H
#define LL_INTERNAL_H

#include "leaselock.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/types.h>

/* ---- the modes' records (modes.c takes them, locks.c reads them) ------ */

#define LL_SLOT_SFX "/.slot/"    /* + <i>: a semaphore's slot i */
#define LL_GATE_SFX "/.sem/fair" /* the turn of a semaphore's fair waiters */
#define LL_W_SFX "/.rw/w"        /* a read-write lock's exclusive record */
#define LL_R_SFX "/.rw/r/"       /* + <token>: one shared holder */

/* A reader's record is one-use (its key holds a token nobody takes again):
 * once its release lands, the release deletes it too (a prune of that
 * key, which deletes it only when it is free: not inside a min_hold), so
 * released readers leave no records behind. (release.c) */
void ll_lease_drop_on_release (leaselock_lease_t *lease);

/* ---- errors ---------------------------------------------------------- */

/* Sets code and a printf-style message (truncated to fit). err may be NULL.
 * Returns false so callers can `return ll_error_set(...)`. */
bool ll_error_set (leaselock_error_t *err, leaselock_code_t code, const char *fmt, ...)
#if defined(__GNUC__)
  __attribute__ ((format (printf, 3, 4)))
#endif
  ;
void ll_error_clear (leaselock_error_t *err);
/* The error a public call fills: error, or local (the caller's) when it
 * is NULL; cleared. */
leaselock_error_t *ll_error_start (leaselock_error_t *error, leaselock_error_t *local);
/* The same with a local error that lives until the end of the enclosing
 * block: at the top of a public call's body (as LL_KEY_SHOWN's buffer). */
#define LL_ERROR_START(error) ll_error_start ((error), &(leaselock_error_t){ 0 })

/* A key for a message, from (pointer, length): keys need not be NUL-
 * terminated. At most LL_KEY_SHOWN_BYTES of it, cut at a UTF-8 character
 * boundary, with "..." when cut. Writes to buf and returns it. */
#define LL_KEY_SHOWN_BYTES 64
#define LL_KEY_SHOWN_SIZE (LL_KEY_SHOWN_BYTES + 4)
const char *ll_key_shown (const char *key, size_t len, char buf[LL_KEY_SHOWN_SIZE]);
/* The same into a buffer that lives until the end of the enclosing block. */
#define LL_KEY_SHOWN(key, len) ll_key_shown ((key), (len), (char[LL_KEY_SHOWN_SIZE]){ 0 })

/* ---- intrusive lists -------------------------------------------------- */

/* A doubly linked list of nodes that carry their own links: head is the
 * pointer to its first node (NULL when empty), prev and next name the
 * node's two link fields (a node may be in several lists, one pair of
 * fields each). LL_LIST_PUSH puts e first; LL_LIST_UNLINK takes e out
 * (nothing for a node in no list: both links NULL, not the head) and
 * leaves its links NULL. The caller holds whatever guards the list. */
#define LL_LIST_PUSH(head, e, prev, next)                                                          \
   do {                                                                                            \
      (e)->prev = NULL;                                                                            \
      (e)->next = (head);                                                                          \
      if (head)                                                                                    \
         (head)->prev = (e);                                                                       \
      (head) = (e);                                                                                \
   } while (0)
#define LL_LIST_UNLINK(head, e, prev, next)                                                        \
   do {                                                                                            \
      if ((e)->prev)                                                                               \
         (e)->prev->next = (e)->next;                                                              \
      else if ((head) == (e))                                                                      \
         (head) = (e)->next;                                                                       \
      if ((e)->next)                                                                               \
         (e)->next->prev = (e)->prev;                                                              \
      (e)->prev = (e)->next = NULL;                                                                \
   } while (0)

/* Makes room for one more item in a growing array (items: the address
 * of the array's typed pointer, a T **, to *cap items of size bytes, n
 * used): doubles it (first items at the start) when full. False when out
 * of memory (the array is left as it was). */
bool ll_grow (void *items, size_t *cap, size_t n, size_t size, size_t first);

/* ---- validation (contract "Words") ----------------------------------- */

/* key: 1..255 bytes, valid UTF-8, no NUL. what names the argument in the
 * message ("key", "prefix"). allow_empty is for prefixes. */
bool ll_check_key (const char *key, size_t len, const char *what, bool allow_empty,
                   leaselock_error_t *err);
/* ttl: 1 .. LEASELOCK_TTL_MAX_MS. what names the argument ("ttl"). */
bool ll_check_ttl (int64_t ms, const char *what, leaselock_error_t *err);
/* min_hold and other durations that may be 0. */
bool ll_check_duration (int64_t ms, const char *what, leaselock_error_t *err);

/* Fills out with 32 hex chars + NUL from getrandom(2). */
bool ll_owner_new (char out[LEASELOCK_OWNER_LEN + 1], leaselock_error_t *err);

/* ---- acquire entry points (acquire.c) ------------------------------- */

/* What an acquire entry point keeps on its stack for the prologue below:
 * the error filled when the caller passes none, the options used when it
 * passes none. */
typedef struct ll_acquire_frame
{
   leaselock_error_t local;
   leaselock_acquire_opts_t dflt;
} ll_acquire_frame_t;

/* The start of every acquire entry point (acquire.c, modes.c): returns the
 * error to fill (error, or f->local when it is NULL), cleared; *opts
 * becomes f->dflt, filled with the defaults, when it is NULL; *lease NULL
 * when lease is given. */
leaselock_error_t *ll_acquire_prologue (ll_acquire_frame_t *f, leaselock_error_t *error,
                                        const leaselock_acquire_opts_t **opts,
                                        leaselock_lease_t **lease);

/* The first checks of every acquire entry point, before any I/O: client
 * and lease (the out parameter) given, key valid. */
bool ll_acquire_target_ok (leaselock_client_t *c, const char *key, size_t key_len,
                           leaselock_lease_t **lease, leaselock_error_t *err);

/* leaselock_acquire without naming the holder when it gives up: the
 * acquires of a mode's records (modes.c), which are not the caller's end. */
bool ll_acquire_record (leaselock_client_t *c, const char *key, size_t key_len,
                        const leaselock_acquire_opts_t *opts, leaselock_lease_t **lease,
                        leaselock_error_t *error);

/* ---- the waiters' sleeps (wait.c) ------------------------------------ */

/* Blocking acquire's sleep before retry number attempt (0-based): full
 * jitter, uniform in [1, min(1000, 5 * 2^attempt)] ms. */
int64_t ll_backoff_ms (int attempt);
/* A waiter's sleep before its next try (wait.c's WAIT_POLL_MS says
 * why): the backoff capped to max(50 ms, waited_ms / 8) while it is not
 * the key's next owner; a quarter of next_for_ms (how long it has been
 * next), within [1, 50] ms, while it is. */
int64_t ll_wait_sleep_ms (int attempt, int64_t waited_ms, bool reserved, int64_t next_for_ms);
/* The sleep of a waiter whose last try found another live waiter next:
 * uniform in [poll / 2, poll], poll = max(150, waited_ms / 8) capped at
 * 1000 ms. */
int64_t ll_behind_sleep_ms (int64_t waited_ms);
/* A fair waiter's sleep while ahead (>= 1) live waiters are queued before
 * it: short, growing with ahead, within FAIR_POLL_MAX_MS. */
int64_t ll_fair_sleep_ms (int64_t ahead);

/* ---- clock (clock.c) -------------------------------------------------- */

/* Monotonic milliseconds. Tests may switch the process to a fake clock
 * that only moves with ll_clock_advance(); condition waits then wake at
 * least every 2 ms of real time so waiters re-check the fake time. */
int64_t ll_now_ms (void);
void ll_clock_use_fake (bool on);
/* Monotonic milliseconds even while the fake clock is on (for bounds on
 * real waits, such as the fork handler's). */
int64_t ll_real_now_ms (void);
/* Microseconds of real monotonic time, for latencies. */
int64_t ll_real_now_us (void);
void ll_clock_advance (int64_t ms);
/* Waits on cond until ll_now_ms() >= deadline_ms (or a signal). Spurious
 * wakeups are possible: callers loop. deadline_ms < 0 waits for a signal. */
void ll_cond_wait_until (pthread_cond_t *cond, pthread_mutex_t *mu, int64_t deadline_ms);
/* Initialises a condition variable on CLOCK_MONOTONIC. */
void ll_cond_init (pthread_cond_t *cond);

/* The bound of the public call under way on this thread (real time,
 * ll_real_now_ms; -1: none), so that every wait on a server is bounded
 * by its caller's timeout, connecting included, and not only by the
 * backend's own I/O timeouts: the engine sets it around each try of an
 * acquire with a timeout (take.c) and clears it after; a backend caps
 * each deadline it waits for by it (ll_call_bound_cap: the earlier of
 * deadline_ms and the bound). A per-thread value rather than an argument
 * because it reaches the backend's open (the pool's reconnect) as well as
 * its statements. */
void ll_call_bound_set (int64_t deadline_ms);
int64_t ll_call_bound (void);
int64_t ll_call_bound_cap (int64_t deadline_ms);
/* A backend call that failed before its statement left (its reconnect
 * failed, or a grant was refused before it was sent) says so on its
 * thread (ll_call_unsent_mark); the engine reads and clears it after the
 * call (ll_call_unsent_take): such a failure did nothing, its outcome is
 * known. A backend that never says so leaves every failure after the
 * connection was taken unknown (the safe reading). */
void ll_call_unsent_mark (void);
bool ll_call_unsent_take (void);

/* The acquire under way on this thread, for a backend whose statements
 * can wait on a lock of the database itself (SQLite's file lock, held by
 * another connection): take.c sets it around each try (the struct is the
 * call's, borrowed until cleared with NULL). Such a wait is waiting: a
 * one-try acquire waits a moment at most, another no longer than its
 * bound (ll_call_bound), and the first wait of a call is logged
 * (ll_call_wait_warn). */
typedef struct ll_call_wait
{
   bool one_try;       /* a one-try acquire (timeout 0), or a try of a driven wait */
   struct ll_obs *obs; /* the client's log (borrowed) */
   const char *key;    /* borrowed, key_len bytes */
   size_t key_len;
   bool warned; /* the call's WARNING was given */
} ll_call_wait_t;
void ll_call_wait_set (ll_call_wait_t *w);
ll_call_wait_t *ll_call_wait (void);
/* A semaphore's or read-write lock's acquire that waits (modes.c) makes
 * one-try acquires of its records as steps of its wait: those are bounded
 * by the mode's call, not cut short as a caller's one try. The bound of
 * such a call on this thread (real time; -1: none; LL_MODE_NONE: no such
 * call); ll_mode_bound_set returns the previous one, to restore after. */
#define LL_MODE_NONE INT64_MIN
int64_t ll_mode_bound_set (int64_t bound);
int64_t ll_mode_bound (void);
/* Logs msg at WARNING ("lock_wait") once per call, when a call is under
 * way on this thread; nothing otherwise. */
void ll_call_wait_warn (const char *msg);

/* ---- a holder's local deadline (deadline.c) ---------------------------- */

/* The margin between a holder's local deadline and the database's expiry:
 * LL_DEADLINE_MARGIN_MS for stored times rounded to milliseconds (SQLite,
 * MongoDB) and our own truncation to milliseconds, plus TTL /
 * LL_DEADLINE_RATE_DIV for the rate error between the database's clock and
 * ours (1000 ppm: each may be slewed by 500 ppm). */
#ifndef LL_DEADLINE_MARGIN_MS /* tests build variants of deadline.c */
#define LL_DEADLINE_MARGIN_MS 2
#define LL_DEADLINE_RATE_DIV 1000
#endif
int64_t ll_deadline_margin_ms (int64_t ttl_ms);

/* What a renew did to the database, as far as its caller knows. */
typedef enum ll_outcome
{
   LL_OUTCOME_APPLIED,     /* the database answered: renewed */
   LL_OUTCOME_UNKNOWN,     /* sent, then failed: it may have been applied */
   LL_OUTCOME_NOT_APPLIED, /* refused (not ours) or never sent */
} ll_outcome_t;

/* A lease's local deadline (local monotonic ms): the holder treats the
 * lease as lost once ll_now_ms() >= at_ms. */
typedef struct ll_deadline
{
   int64_t at_ms;
   int inflight;        /* renews sent whose outcome is not yet known */
   int64_t group_min;   /* earliest deadline the renews in flight together could set */
   int64_t unknown_ttl; /* shortest TTL of a renew that may yet run */
} ll_deadline_t;

/* An acquire sent at sent_ms (taken before the statement went out) for ttl_ms
 * succeeded. */
void ll_deadline_start (ll_deadline_t *d, int64_t sent_ms, int64_t ttl_ms);
/* A renew for ttl_ms is about to be sent; sent_ms is taken before it goes
 * out. Every call is matched by one ll_deadline_renew_done. */
void ll_deadline_renew_sent (ll_deadline_t *d, int64_t sent_ms, int64_t ttl_ms);
/* A request whose outcome stayed unknown may still run and set the expiry
 * to ttl_ms from then (an acquire sent twice: the first may run last). */
void ll_deadline_may_rerun (ll_deadline_t *d, int64_t ttl_ms);
/* A renew for ttl_ms has its outcome: moves at_ms to no later than the
 * earliest expiry that any renew in flight with it, or any whose outcome
 * stayed unknown, could have left in the database. */
void ll_deadline_renew_done (ll_deadline_t *d, ll_outcome_t outcome, int64_t ttl_ms);

/* ---- observability: log hook and counters (observe.c) ------------------ */

typedef enum ll_stat
{
   LL_ST_ACQUIRES,
   LL_ST_BUSY,
   LL_ST_WAITS,
   LL_ST_TIMEOUTS,
   LL_ST_WAIT_MS,
   LL_ST_HELD_MS,
   LL_ST_RENEWALS,
   LL_ST_RENEWAL_FAILURES,
   LL_ST_LOSSES,
   LL_ST_RELEASES,
   LL_ST_RELEASE_FAILURES,
   LL_ST_BACKEND_ERRORS,
   LL_ST_REQUESTS,
   LL_ST_FAILOVERS,
   LL_ST_DURABILITY_WARNINGS,
   LL_ST_COUNT
} ll_stat_t;

/* An event found under the engine's lock, delivered once it is let go. */
typedef struct ll_log_pending
{
   int level;
   const char *event;
   char key[LEASELOCK_KEY_MAX + 1];
   size_t key_len;
   int64_t fence;
   leaselock_code_t code;
   char message[LEASELOCK_ERROR_MAX];
} ll_log_pending_t;

#define LL_LOG_PENDING_MAX 8

/* A client's log hook and counters. fork.c takes mu around a fork (after
 * the client's) and resets calls, n_pending and idle in the child. */
typedef struct ll_obs
{
   leaselock_client_t *client; /* borrowed: its owner, passed on in each event */
   atomic_int level;           /* LEASELOCK_LOG_OFF when there is no hook */
   pthread_mutex_t mu;         /* guards the rest */
   pthread_cond_t idle;
   leaselock_log_cb fn;
   void *data;
   int calls;            /* hook calls in flight */
   atomic_int n_pending; /* read without mu by ll_log_flush */
   ll_log_pending_t pending[LL_LOG_PENDING_MAX];
   atomic_uint_fast64_t n[LL_ST_COUNT];
   atomic_uint_fast64_t latency[LEASELOCK_LATENCY_BUCKETS];
   atomic_uint_fast64_t latency_sum_us;
} ll_obs_t;

void ll_obs_init (ll_obs_t *o, leaselock_client_t *client);
void ll_obs_destroy (ll_obs_t *o);

/* Whether an event of level reaches the hook: one load and a compare. */
static inline bool ll_log_on (ll_obs_t *o, int level)
{
   return level >= atomic_load_explicit (&o->level, memory_order_relaxed);
}

static inline void ll_count (ll_obs_t *o, ll_stat_t s, uint64_t n)
{
   atomic_fetch_add_explicit (&o->n[s], n, memory_order_relaxed);
}

/* Formats fmt as ev's message (ev's client and message are filled here;
 * its key is borrowed, copied when kept) and delivers ev to the hook,
 * with no leaselock lock held; or, for an event found with an engine lock
 * held (defer), keeps it (at most LL_LOG_PENDING_MAX, later ones dropped)
 * until ll_log_flush. Callers test ll_log_on first (LL_LOG does), so that
 * a hook that is off costs no formatting. */
void ll_log_emit (ll_obs_t *o, bool defer, leaselock_log_event_t ev, const char *fmt, ...)
#if defined(__GNUC__)
  __attribute__ ((format (printf, 4, 5)))
#endif
  ;
/* An event's fields but its client and message. */
#define LL_LOG_EVENT(level, event, key, key_len, fence, code)                                      \
   ((leaselock_log_event_t){ NULL, (level), (event), (key), (key_len), (fence), (code), NULL })
#define LL_LOG(o, level, event, key, key_len, fence, code, ...)                                    \
   do {                                                                                            \
      if (ll_log_on ((o), (level)))                                                                \
         ll_log_emit ((o), false, LL_LOG_EVENT (level, event, key, key_len, fence, code),          \
                      __VA_ARGS__);                                                                \
   } while (0)
void ll_log_flush_slow (ll_obs_t *o);
/* Delivers the deferred events; with no lock held. One load when none. */
static inline void ll_log_flush (ll_obs_t *o)
{
   if (atomic_load_explicit (&o->n_pending, memory_order_relaxed) > 0)
      ll_log_flush_slow (o);
}

/* The hook of leaselock_client_set_log (fn and data are the caller's,
 * borrowed until the next call), and its level alone. */
void ll_obs_set_hook (ll_obs_t *o, int min_level, leaselock_log_cb fn, void *data);
void ll_obs_set_level (ll_obs_t *o, int min_level);
/* The client's (client.c; for the modes, which sit above the engine). */
ll_obs_t *ll_client_obs (leaselock_client_t *c);

/* Counts one statement that started at start_us (ll_real_now_us) and its
 * round trip; err (may be NULL: it succeeded) counts a backend error. */
void ll_obs_request (ll_obs_t *o, int64_t start_us, bool ok, const leaselock_error_t *err);
/* Copies the counters into stats (leases_held is the caller's). */
void ll_obs_read (ll_obs_t *o, leaselock_stats_t *stats);

/* ---- URIs ------------------------------------------------------------ */

#define LL_URI_MAX_PARAMS 32

typedef struct ll_uri_param
{
   char *name;  /* percent-decoded */
   char *value; /* percent-decoded, "" when absent */
} ll_uri_param_t;

#define LL_URI_MAX_HOSTS 16

/* scheme://[user[:password]@]host[:port][,host[:port]...][/path][?a=b&c=d]
 * Each host is a name, an IPv4 address or an IPv6 one in brackets, its
 * port optional; at most LL_URI_MAX_HOSTS of them.
 * sqlite:///abs/path.db has host "" and path "/abs/path.db".
 * All strings are owned by the ll_uri_t and freed by ll_uri_cleanup. */
typedef struct ll_uri
{
   char *scheme;   /* lower-cased */
   char *user;     /* NULL when absent */
   char *password; /* NULL when absent */
   char *host;     /* the first host: hosts[0] itself (not a copy) */
   int port;       /* the first host's port: ports[0] */
   char *path;     /* percent-decoded, starts with '/', or "" */
   /* Every host in the order given, percent-decoded, "" when an item is
    * empty (an empty authority is one empty host); IPv6 without brackets.
    * ports[i] is 0 when item i names none. n_hosts >= 1 once parsed. */
   char *hosts[LL_URI_MAX_HOSTS];
   int ports[LL_URI_MAX_HOSTS];
   int n_hosts;
   ll_uri_param_t params[LL_URI_MAX_PARAMS];
   int n_params;
} ll_uri_t;

bool ll_uri_parse (const char *text, ll_uri_t *uri, leaselock_error_t *err);
void ll_uri_cleanup (ll_uri_t *uri);
/* The parameter's value or NULL. */
const char *ll_uri_param (const ll_uri_t *uri, const char *name);
/* The one percent-decoder: s[0..n) into a new string (caller frees), '+'
 * as a space when plus_is_space (query values). NULL on a bad or cut
 * escape or an encoded NUL, or out of memory (then *nomem, if given, is
 * set). */
char *ll_percent_decode (const char *s, size_t n, bool plus_is_space, bool *nomem);
/* The one integer URI-option parser: value is a plain decimal (no sign, no
 * blanks) in [min, max], else INVALID with "<backend> URI option
 * <name>=\"<value>\": expected whole <unit> from <min> to <max>". */
bool ll_uri_int_option (const char *backend, const char *name, const char *value, int64_t min,
                        int64_t max, const char *unit, int64_t *out, leaselock_error_t *err);
/* INVALID unless the URI has at most one '@' before its first '/', and
 * that one within the authority: where there are more, leaselock and the
 * drivers could disagree on the password and the host. */
bool ll_uri_check_at (const char *text, leaselock_error_t *err);

/* ---- secrets and the one scrubber (uri.c) ----------------------------- */

/* Strings to scrub from driver messages: owned copies, zeroed when
 * cleared. */
typedef struct ll_secrets
{
   char **v;
   size_t n, cap;
} ll_secrets_t;
void ll_secrets_init (ll_secrets_t *s);
/* Adds secret[0..len) (nothing when len is 0). False when out of memory. */
bool ll_secrets_add (ll_secrets_t *s, const char *secret, size_t len);
/* Adds every secret of a URI as ll_uri_redact hides it, raw and decoded. */
bool ll_secrets_from_uri (ll_secrets_t *s, const char *uri);
void ll_secrets_clear (ll_secrets_t *s);

/* The one scrubber, under one rule (uri.c says it in full): copies text to
 * buf (size bytes, NUL-terminated, cut to fit) with "***" for each run of
 * bytes that a driver may read as a secret where they stand (text read as
 * a URI or as keyword=value text: libpq's, libmongoc's and leaselock's
 * readings) or that spell a secret of s 3 bytes or longer. ll_uri_redact
 * is it without known secrets ("(null)" for NULL text); ll_scrub_secrets
 * is it for a driver's message with the connection's secrets (NULL msg
 * reads as ""). */
void ll_uri_redact (const char *text, char *buf, size_t size);
void ll_scrub_secrets (const char *msg, const ll_secrets_t *s, char *out, size_t size);

/* ---- backend interface ----------------------------------------------- */

typedef struct ll_holder
{
   const char *host;  /* this machine's host name */
   int64_t pid;       /* getpid() at acquire */
   const char *label; /* caller label or "" */
} ll_holder_t;

/* The record an operation is about: key[0..key_len) and the caller's
 * owner (32 hex chars). Every pointer is borrowed for the call. */
typedef struct ll_op
{
   const char *key; /* NUL-terminated, key_len bytes, already validated */
   size_t key_len;
   const char *owner;
} ll_op_t;

/* A take (acquire, acquire_wait); borrowed for the call like op. */
typedef struct ll_take
{
   ll_op_t op;
   int64_t ttl_ms;            /* the lease's expiry is the database's now + ttl_ms */
   const ll_holder_t *holder; /* written to the record */
   int64_t reserve_ms;        /* acquire_wait only: how long a claim holds */
   int64_t waited_ms;         /* acquire_wait only: how long owner has waited */
   /* A fair acquire's first try (backends with fair_take): the take is
    * also refused (BUSY, nothing written, no claim) while the key's fair
    * queue holds a live entry of another owner, a key without a record
    * too, so that it never goes ahead of a queued waiter. */
   bool fair;
   /* The taker waited in the key's fair queue, where others may wait
    * behind it: a backend whose release cannot see the queue in its own
    * round trip (MongoDB) keeps this on the record until the next take,
    * and that lease's release wakes this machine's listeners. */
   bool queued;
} ll_take_t;

/* What acquire_wait tells its caller (a struct of the caller's). */
typedef struct ll_taken
{
   int64_t fence;   /* the lease's fence, when taken */
   bool reserved;   /* whether owner holds the reservation after the call */
   int64_t left_ms; /* when BUSY and reserved: the record's time left, or -1 */
} ll_taken_t;

/* What a listener reports (ll_backend_t's watch_drain): LL_WATCH_RELEASE,
 * key[0..key_len) was released (key NULL: unknown which), leaving
 * next_owner (32 hex) as its reservation ("": none; NULL: unknown); or
 * LL_WATCH_QUEUE_LEFT, a waiter left a key's fair queue (key NULL:
 * unknown which), which brings each one queued behind it a place nearer
 * the head, next_owner the one now first (NULL: unknown). Strings are
 * borrowed. */
typedef enum
{
   LL_WATCH_RELEASE,
   LL_WATCH_QUEUE_LEFT
} ll_watch_event_t;
typedef void (*ll_watch_fn) (void *data, ll_watch_event_t ev, const char *key, size_t key_len,
                             const char *next_owner);

/*
 * Every op gets one connection made by open() and used by one thread at a
 * time (the engine pools them). op (ll_op_t) names the record and the
 * owner (inspect and force_release read no owner); list and prune take a
 * key prefix. Every argument is borrowed for the call. err is never
 * NULL.
 * All times are judged by the database clock: ttl_ms and min_hold_ms are
 * added to the database's "now", never to a client time.
 *
 * Results: true on success. On false, err->code says why:
 *   acquire: BUSY when a live lease of another owner exists;
 *   renew: NOT_HELD when the record is not ours or not live;
 *   release: NOT_HELD when the record is not ours;
 *   any: BACKEND (with the driver's message, never a password), NOMEM.
 */
typedef struct ll_backend
{
   const char *name;       /* "sqlite" */
   const char *schemes[4]; /* URI schemes it answers, NULL-terminated */

   /* Opens one connection. uri is the full text the user gave. Returns a
    * connection owned by the engine (free with close or abandon) or NULL. */
   void *(*open) (const char *uri, leaselock_error_t *err);
   /* Closes a connection normally. */
   void (*close) (void *conn);
   /* In a forked child: frees what can be freed without any I/O on the
    * parent's sockets or files (may leak). NULL means leak the connection.
    * Only reached when fork() ran without the engine's atfork handlers. */
   void (*abandon) (void *conn);
   /* The engine closes this backend's idle connections in the parent just
    * before fork(), so the child inherits none (SQLite: its per-file lock
    * bookkeeping is process memory, and a child's new connection to the
    * same file would trust the parent's locks as its own). */
   bool close_before_fork;

   /* One statement / round trip: take the key if there is no record, it
    * is already ours (a retried acquire), or the record is expired by the
    * database clock and not reserved for another waiter (see
    * acquire_wait). Sets owner, expiry now+ttl, acquired_at now, holder
    * info, fence = old fence + 1 (1 for a new record), and clears the
    * reservation (a reservation that let us take the key is ours or has
    * run out). Optional: NULL when acquire_wait with reserve_ms = -1 (no
    * claim) is the same statement, as in the SQL backends; callers go
    * through ll_backend_acquire, which picks. */
   bool (*acquire) (void *conn, const ll_take_t *t, int64_t *fence, leaselock_error_t *err);
   /* acquire for a waiter (a blocking acquire that found the key busy):
    * the same take; and when it is BUSY, a claim to be the next owner
    * (contract invariant 9, no starvation). The record's reservation
    * (next owner, until, since) becomes owner's, until now + reserve_ms
    * and since now - waited_ms, when it is free (none, or its until has
    * passed by the database clock), already owner's, or held by a waiter
    * that began waiting later (its since > now - waited_ms): the oldest
    * waiter polling gets it. A reserved record can be taken by its next
    * owner alone, so a holder that releases cannot take it back before
    * the waiter. out->reserved: whether owner holds the reservation after
    * the call (false on success). out->left_ms: when BUSY and reserved, the
    * record's time left by the database clock (the waiter need not sleep
    * past it: nobody renews a dead holder's record, and a release with
    * min_hold notifies nobody when that hold ends), -1 when the backend
    * cannot tell. As few round trips as the database allows (one where it
    * can update conditionally from the old row). */
   bool (*acquire_wait) (void *conn, const ll_take_t *t, ll_taken_t *out, leaselock_error_t *err);
   /* Fair mode (contract invariant 9): each key has a queue of waiters,
    * judged by the database clock, kept beside the records (never in
    * them: a queue entry is not a lease). queue_join makes owner's entry
    * live until now + keep_ms: a new entry (none, or the one there ran
    * out) arrives now; a live one keeps its arrival. *ahead: the live
    * entries of key that arrived before owner's (equal arrivals ordered
    * by owner). An entry that is not joined again within keep_ms runs out
    * and no longer counts, so a waiter that died or gave up holds nobody
    * back for longer than that. One statement where the database allows
    * (a transaction of two where not). NULL in a backend without queues. */
   bool (*queue_join) (void *conn, const ll_op_t *op, int64_t keep_ms, int64_t *ahead,
                       leaselock_error_t *err);
   /* Deletes owner's entry of key's queue (after its acquire succeeded or
    * it gave up); succeeds when there is none. */
   bool (*queue_leave) (void *conn, const ll_op_t *op, leaselock_error_t *err);
   /* Whether acquire (or acquire_wait with reserve_ms = -1) honours
    * ll_take_t's fair, in the take's own statement (SQLite, PostgreSQL,
    * MySQL) or a query of the queue just before it (MongoDB): a fair
    * acquire's first try is then that one call, and it joins the queue
    * only when it found the key busy (take.c). Without it, every try of a
    * fair acquire joins first. */
   bool fair_take;
   /* Notification of releases (an optimisation: a lost one only delays a
    * waiter to its next poll). NULL in a backend that cannot notify; all
    * five are set or none. A listener is a backend object of its own, not
    * a pooled connection: the engine opens one per client, on the client's
    * watcher thread (watch.c), which alone uses it; each call is bounded
    * (open by the backend's connect timeout, drain by io_timeout or no
    * I/O at all). watch_open (tag: ll_watch_begin's two characters, which
    * begin the owner of each of this client's waiters: a backend that can
    * address a release's notification to the next owner's process listens
    * for its tag) returns a listener owned by the engine (free
    * with watch_close, or in a forked child watch_abandon) or NULL.
    * watch_fd: the descriptor to poll for POLLIN. watch_drain reads what
    * is pending without waiting and calls fn once per release it saw
    * (key NULL: "something was released, key unknown"; next_owner: the
    * reservation's owner when the release left a live one, "" when it
    * left none, NULL when unknown); false when the listener is broken
    * (the engine closes it and opens another after a backoff). */
   void *(*watch_open) (const char *uri, const char *tag, leaselock_error_t *err);
   int (*watch_fd) (void *listener);
   bool (*watch_drain) (void *listener, ll_watch_fn fn, void *data, leaselock_error_t *err);
   void (*watch_close) (void *listener);
   /* In a forked child: frees without I/O on the parent's socket (may leak). */
   void (*watch_abandon) (void *listener);
   /* The listeners hear only the releases made on this machine (a
    * same-host channel file: MySQL/MariaDB, MongoDB), never another
    * host's: a heard release only wakes a waiter earlier, and the next
    * owner keeps its quarter-rule polls (wait.c) rather than the longer
    * ones of a client whose listener hears every release. */
   bool watch_local_only;
   /* Its queue_leave tells the listeners (LL_WATCH_QUEUE_LEFT,
    * ll_wake_touch_queue). A leave, not a release, is what moves the
    * queue: the new holder's leave wakes the waiter it brings to the head,
    * which joins again and claims the reservation while the key is still
    * held, so the release after hands the key over with the take and the
    * leave alone (no join on the hand-off's path; make bench-contention,
    * 8 fair processes on MySQL: 0.78-0.81 of ideal, 0.67-0.69 before).
    * Not SQLite's: its statements are too quick for the joins to matter
    * (8 processes: 0.78 either way), and its channel file names no key,
    * so each leave wakes every waiting process's watcher, as each release
    * does (32 processes: 0.65 of ideal, 0.69-0.72 without).
    * Without it, a release heard lowers each fair waiter's count of those
    * queued before it (watch.c) and wakes those it brings to 1 or less:
    * the one right behind the new head joins again in time for its turn,
    * and a count that missed a release during its own try is still woken. */
   bool queue_leave_notifies;
   /* Reentrant holds: the record's hold count += delta (+1: its owner
    * asked again; -1: it let one go), never below 1, when the record is
    * owner's and live; *holds: the count after. NOT_HELD otherwise. The
    * count is what inspect and list show; acquire sets it to 1, and a
    * release ends every hold. One statement. NULL in a backend without
    * it. */
   bool (*hold) (void *conn, const ll_op_t *op, int delta, int64_t *holds, leaselock_error_t *err);
   /* expiry = now + ttl when the record is ours and live. */
   bool (*renew) (void *conn, const ll_op_t *op, int64_t ttl_ms, leaselock_error_t *err);
   /* When the record is ours: owner cleared, expiry = max(now, acquired_at +
    * min_hold). */
   bool (*release) (void *conn, const ll_op_t *op, int64_t min_hold_ms, leaselock_error_t *err);
   /* Reads one record; *found false when the key has no record. With
    * record_waiters, inspect and list fill the record's next_owner, queued
    * and held_ms; else the engine marks them unknown. */
   bool record_waiters;
   bool (*inspect) (void *conn, const ll_op_t *op, leaselock_record_t *rec, bool *found,
                    leaselock_error_t *err);
   /* Records whose key starts with prefix (byte-wise), in key order. */
   bool (*list) (void *conn, const char *prefix, size_t prefix_len, leaselock_record_cb fn,
                 void *user_data, leaselock_error_t *err);
   /* Owner cleared and expiry = now whatever the owner; fence kept. *took:
    * whether a live lease was taken away. */
   bool (*force_release) (void *conn, const ll_op_t *op, bool *took, leaselock_error_t *err);
   /* One statement: deletes the records whose key starts with prefix
    * (byte-wise) and whose expiry is older_than_ms or more in the past by
    * the database clock (expiry <= now - older_than_ms, the same test as
    * acquire's "expired" when it is 0), whatever their owner field: never a
    * live lease, never a record inside its min_hold, never a record whose
    * reservation is live. *count: the records
    * deleted. A deleted key's next acquire starts its fence at 1 again.
    * The queue entries under prefix that ran out older_than_ms or more ago
    * are deleted too (a second statement; never a live entry; not
    * counted). */
   bool (*prune) (void *conn, const char *prefix, size_t prefix_len, int64_t older_than_ms,
                  int64_t *count, leaselock_error_t *err);
   /* The connection's view of its primary (failover.c), as its last
    * (re)connect read it; NULL when the backend follows no replication.
    * The engine reads it after each call and reports what changed
    * (pool.c). */
   struct ll_primary *(*primary) (void *conn);
} ll_backend_t;

/* The members every backend fills alike, from its functions' names (the
 * naming rule ll_<backend>_<member>): LL_BACKEND_LEASE_OPS (ll_mysql) is
 * .acquire_wait = ll_mysql_acquire_wait, ... .hold = ll_mysql_hold. A
 * backend's table adds the rest by hand (watch_close, acquire...) or by
 * the macros below. */
#define LL_BACKEND_LEASE_OPS(p)                                                                    \
   .acquire_wait = p##_acquire_wait, .queue_join = p##_queue_join, .queue_leave = p##_queue_leave, \
   .renew = p##_renew, .release = p##_release, .hold = p##_hold, .inspect = p##_inspect,           \
   .list = p##_list, .force_release = p##_force_release, .prune = p##_prune
/* The same for a connection's life (open, close, abandon), where the
 * backend has its own (the SQL ones share backend_sql.c's:
 * LL_SQL_BACKEND_OPS). */
#define LL_BACKEND_CONN_OPS(p) .open = p##_open, .close = p##_close, .abandon = p##_abandon
/* The same for a backend that delivers release notifications: the
 * listener's watch_open, watch_fd and watch_drain (watch_close and
 * watch_abandon by hand: a backend may close a listener as a connection). */
#define LL_BACKEND_WATCH_OPS(p)                                                                    \
   .watch_open = p##_watch_open, .watch_fd = p##_watch_fd, .watch_drain = p##_watch_drain

/* The longest a waiter that stopped (SIGSTOP, a debugger, a paused VM) or
 * died holds the other waiters back, in every mode (docs/contract.md): a
 * fair queue entry's keep (QUEUE_KEEP_MS), the TTL of a fair semaphore's
 * gate and of a reader's pass through a writer's record (modes.c). */
#define LL_WAITER_KEEP_MS 1000

/* A key's queue mark as the connection that set it last knows it (MySQL,
 * MongoDB: the key's record says no queue entry is live past the mark),
 * so that its later joins need not set it again. A join sets the mark to
 * at least keep + LL_QUEUE_MARK_SPARE_MS ahead, and again once the mark is
 * known live for less than keep + LL_QUEUE_MARK_SPARE_MS / 2: at most
 * once per LL_QUEUE_MARK_SPARE_MS / 2 of a wait, and an entry written
 * within LL_QUEUE_MARK_SPARE_MS / 2 of the mark's asking lives its whole
 * keep. Times are the caller's ll_real_now_ms (passed in: a module reaches
 * the core's clock through its table). */
#define LL_QUEUE_MARK_SPARE_MS 2000
typedef struct
{
   char key[LEASELOCK_KEY_MAX];
   size_t key_len; /* 0: none known */
   int64_t end;    /* the mark, in the backend's unit (its server's clock) */
   int64_t at_ms;  /* when it was asked */
   int64_t span_ms;
} ll_queue_mark_t;

/* How long m still knows op's key's mark live (ms; <= 0: not known). */
static inline int64_t ll_queue_mark_left (const ll_queue_mark_t *m, const ll_op_t *op,
                                          int64_t now_ms)
{
   if (m->key_len != op->key_len || memcmp (m->key, op->key, op->key_len))
      return 0;
   return m->span_ms - (now_ms - m->at_ms);
}

/* Whether a join of op's key with keep_ms may use m's mark as it is. */
static inline bool ll_queue_mark_fresh (const ll_queue_mark_t *m, const ll_op_t *op,
                                        int64_t keep_ms, int64_t now_ms)
{
   return ll_queue_mark_left (m, op, now_ms) >= keep_ms + LL_QUEUE_MARK_SPARE_MS / 2;
}

/* m now knows op's key's mark end, asked at at_ms with span_ms. */
static inline void ll_queue_mark_keep (ll_queue_mark_t *m, const ll_op_t *op, int64_t end,
                                       int64_t at_ms, int64_t span_ms)
{
   memcpy (m->key, op->key, op->key_len);
   m->key_len = op->key_len;
   m->end = end;
   m->at_ms = at_ms;
   m->span_ms = span_ms;
}

/* Tests only: when set, a backend's queue_join calls it between its round
 * trips (tests/test_sql.c stops the process there, SIGSTOP, to prove that
 * a waiter stopped mid-join holds no other waiter back). NULL otherwise. */
extern void (*ll_test_queue_join_hook) (void);
/* Tests only: when set, MySQL's queue_join (backend_sql.c's copy) and
 * MongoDB's (ll_test_mongo_mark_hook, its module's own) call it after
 * reading the key's queue mark, before writing the entry (their suites
 * delay the write there past the mark). NULL otherwise. */
extern void (*ll_test_queue_mark_hook) (void);
extern void (*ll_test_mongo_mark_hook) (void);
/* Tests only: when set, a fair waiter's try calls it once its queue_join
 * has counted those ahead (take.c), before it acts on the count. */
extern void (*ll_test_queue_counted_hook) (void);

/* The backends' tables. SQLite's is in the core; the others are each in
 * their module (leaselock_backend_<name>.so, loaded by backend_load.c:
 * ll_core_api.h), or linked in by a white-box program (the core then uses
 * that table). A module is built only where its library is found
 * (tools/backends.sh): backend_load.c says why one is missing. */
extern const ll_backend_t ll_backend_sqlite;
extern const ll_backend_t ll_backend_mongodb;
extern const ll_backend_t ll_backend_mysql;
extern const ll_backend_t ll_backend_postgresql;

/* A backend's acquire: b->acquire when it has one, else b->acquire_wait
 * with reserve_ms = -1 and waited_ms = 0 (a take that never claims the
 * reservation; t's own are not read). Arguments as for ll_backend_t's
 * acquire, borrowed for the call. */
bool ll_backend_acquire (const ll_backend_t *b, void *conn, const ll_take_t *t, int64_t *fence,
                         leaselock_error_t *err);

/* For tests: adds a backend (e.g. the fake one) found by its schemes. */
void ll_backend_register (const ll_backend_t *backend);
/* The backend for uri's scheme, or NULL with INVALID (malformed or unknown
 * scheme) or UNSUPPORTED (known but not built) in err. */
const ll_backend_t *ll_backend_for_uri (const char *uri, leaselock_error_t *err);

/* ---- helpers shared by backends (backend_util.c) --------------------- */

/* The one format of a driver failure: BACKEND with "<backend>: <what>:
 * <driver message> (<detail>)". backend is the backend's name ("mysql");
 * the driver message (may be NULL) has every secret replaced by "***" and
 * is put on one line; detail (may be NULL or "") is the driver's error
 * code and what else places the failure ("error 2013", "SQLSTATE 08006",
 * "error 5, database '/x.db'", "error 2.4" for libmongoc's domain.code).
 * Every backend's driver failures take this form. Returns false. */
bool ll_backend_fail (leaselock_error_t *err, const char *backend, const char *what,
                      const char *driver_msg, const ll_secrets_t *secrets, const char *detail);
/* Why each host of a URI's host list failed, "host: why; ...", each cut to
 * its share of one error message, so that the error when none can be used
 * names them all. On the connecting thread's stack, zeroed. */
typedef struct ll_host_failures
{
   char text[LEASELOCK_ERROR_MAX];
   size_t len;
} ll_host_failures_t;
/* Adds "host: why" for one of n_hosts; why (scrubbed already) is cut to
 * fit the host's share. */
void ll_host_failure_add (ll_host_failures_t *f, int n_hosts, const char *host, const char *why);
/* BACKEND "<backend>: connecting: no writable server among <n_hosts>
 * hosts: <the failures>". Returns false. */
bool ll_host_failures_fail (const ll_host_failures_t *f, const char *backend, int n_hosts,
                            leaselock_error_t *err);
/* Whether s is a table name: 1..58 ASCII letters, digits or _, no leading digit. */
bool ll_valid_identifier (const char *s);
/* out[i] = templates[i] formatted with table (new strings the caller frees,
 * also after a failure: NOMEM leaves the rest NULL); NULL for a NULL
 * template (a statement the backend does not use). */
bool ll_sql_format_all (char **out, const char *const *templates, int count, const char *table,
                        leaselock_error_t *err);
/* Whether an idle connection's socket fd was closed by its peer (a zero-
 * timeout poll finds it readable or hung up); true when fd < 0. */
bool ll_fd_looks_closed (int fd);
/* After fork: points fd at /dev/null so closing it sends nothing on the
 * parent's connection. False (fd untouched) when fd < 0 or that fails. */
bool ll_fd_point_at_devnull (int fd);
/* Writes to out (room for len bytes) the bound above every string starting
 * with prefix: trailing 0xff bytes dropped, the last byte incremented.
 * Returns its length, 0 when there is none (empty or all-0xff prefix). */
size_t ll_prefix_upper (const char *prefix, size_t len, char *out);
/* Copies at most size - 1 of src's n bytes (none when src is NULL) to dst
 * and NUL-terminates; returns the bytes copied. */
size_t ll_copy_clipped (char *dst, size_t size, const char *src, size_t n);
/* For inspect through a list-style row loop: ll_record_take_one (a
 * leaselock_record_cb) copies the first record to one->rec (borrowed), sets
 * *one->found and stops the loop. */
typedef struct ll_record_one
{
   leaselock_record_t *rec;
   bool *found;
} ll_record_one_t;
bool ll_record_take_one (const leaselock_record_t *rec, void *one);
/* Microseconds left to milliseconds, rounded away from zero (so live stays
 * > 0 and expired <= 0). */
int64_t ll_us_to_left_ms (int64_t us);

/* ---- helpers shared by the SQL backends (backend_sql.c) ---------------- */

/* The statements a SQL backend prepares on each connection, one per
 * operation (list and prune have two: from the prefix on, and a bounded
 * range). Each
 * backend's texts, "%s" (or "%1$s") where the table name goes, live in its
 * statement file: stmt_mysql.c, stmt_postgresql.c. */
typedef enum ll_sql_st
{
   LL_SQL_ACQUIRE,
   LL_SQL_RENEW,
   LL_SQL_RELEASE,
   LL_SQL_INSPECT,
   LL_SQL_LIST_FROM,
   LL_SQL_LIST_RANGE,
   LL_SQL_FORCE,
   LL_SQL_PRUNE_FROM,
   LL_SQL_PRUNE_RANGE,
   /* The fair mode's queue (queue_join, queue_leave, prune's part); a
    * backend that needs no QUEUE_LOCK statement leaves its text NULL. */
   LL_SQL_QUEUE_LOCK,
   LL_SQL_QUEUE_JOIN,
   LL_SQL_QUEUE_AHEAD,
   LL_SQL_QUEUE_LEAVE,
   LL_SQL_QUEUE_PRUNE_FROM,
   LL_SQL_QUEUE_PRUNE_RANGE,
   /* Reentrant holds (hold). */
   LL_SQL_HOLD,
   /* A fair acquire's first try (ll_take_t's fair): the acquire, refused
    * while another owner is queued. */
   LL_SQL_ACQUIRE_FAIR,
   /* Where the fair first try does not read the queue itself (MySQL: the
    * key's queue mark, kept in its record, stands for it), the try that
    * does when the mark is live, the join's mark, and prune's part for
    * the records that only ever held a mark; NULL elsewhere. */
   LL_SQL_ACQUIRE_FAIR_QUEUE,
   LL_SQL_QUEUE_MARK,
   LL_SQL_MARK_PRUNE_FROM,
   LL_SQL_MARK_PRUNE_RANGE,
   LL_SQL_COUNT
} ll_sql_st_t;

/* A backend's statement table (const char *[LL_SQL_COUNT]) from its text
 * macros P_ACQUIRE, P_RENEW, ... (P is LL_MYSQL, LL_POSTGRESQL): one
 * initializer for every backend, so no operation is left out of one. */
#define LL_SQL_STATEMENT_TABLE(P)                                                                  \
   {                                                                                               \
      [LL_SQL_ACQUIRE] = P##_ACQUIRE, [LL_SQL_RENEW] = P##_RENEW, [LL_SQL_RELEASE] = P##_RELEASE,  \
      [LL_SQL_INSPECT] = P##_INSPECT, [LL_SQL_LIST_FROM] = P##_LIST_FROM,                          \
      [LL_SQL_LIST_RANGE] = P##_LIST_RANGE, [LL_SQL_FORCE] = P##_FORCE,                            \
      [LL_SQL_PRUNE_FROM] = P##_PRUNE_FROM, [LL_SQL_PRUNE_RANGE] = P##_PRUNE_RANGE,                \
      [LL_SQL_QUEUE_LOCK] = P##_QUEUE_LOCK, [LL_SQL_QUEUE_JOIN] = P##_QUEUE_JOIN,                  \
      [LL_SQL_QUEUE_AHEAD] = P##_QUEUE_AHEAD, [LL_SQL_QUEUE_LEAVE] = P##_QUEUE_LEAVE,              \
      [LL_SQL_QUEUE_PRUNE_FROM] = P##_QUEUE_PRUNE_FROM,                                            \
      [LL_SQL_QUEUE_PRUNE_RANGE] = P##_QUEUE_PRUNE_RANGE, [LL_SQL_HOLD] = P##_HOLD,                \
      [LL_SQL_ACQUIRE_FAIR] = P##_ACQUIRE_FAIR,                                                    \
      [LL_SQL_ACQUIRE_FAIR_QUEUE] = P##_ACQUIRE_FAIR_QUEUE, [LL_SQL_QUEUE_MARK] = P##_QUEUE_MARK,  \
      [LL_SQL_MARK_PRUNE_FROM] = P##_MARK_PRUNE_FROM,                                              \
      [LL_SQL_MARK_PRUNE_RANGE] = P##_MARK_PRUNE_RANGE,                                            \
   }

typedef struct ll_sql_conn ll_sql_conn_t;

/* ---- replication and failover (failover.c) ----------------------------
 *
 * A replicated database can fail over to a standby that lacks the last
 * grants. So each backend records, in its table's meta record, which
 * primary it last wrote through (an identity the server gives: its
 * timeline, server id, cluster state or election term). A connection that
 * finds another identity there is on a new primary: in the same statement
 * it records itself, raises the table's fence floor above any fence the
 * old primary could have issued (the database clock in microseconds:
 * fences stay 64-bit integers that only grow), and sets a lock-delay, no
 * new grant before now + max_ttl by the database clock, since no lease
 * the old primary granted or renewed lasts longer. Checked at each
 * connect and reconnect, never per grant. */

/* How the server makes a grant survive a failover, as read at connect. */
typedef enum ll_durability
{
   LL_DURABILITY_UNKNOWN = 0, /* not read (SQLite: nothing to fail over to) */
   LL_DURABILITY_STANDALONE,  /* no replica to fail over to that the server knows */
   LL_DURABILITY_DURABLE,     /* a grant is on a standby before it is answered */
   LL_DURABILITY_AT_RISK,     /* replicas exist, but a grant can be answered first */
} ll_durability_t;

/* The URI option durability=: what leaselock does about it. */
typedef enum ll_durability_policy
{
   LL_DURABILITY_REPORT = 0, /* a warning through the log, grants go on */
   LL_DURABILITY_REQUIRE,    /* no grant unless DURABLE */
   LL_DURABILITY_OFF,        /* read and shown, never warned of nor refused */
} ll_durability_policy_t;

/* The longest TTL a table grants unless its creator said otherwise (the
 * URI option max_ttl): it is also the lock-delay after a failover. */
#define LL_DEFAULT_MAX_TTL_MS 60000

/* One connection's view of its primary, refreshed at each (re)connect;
 * inside the connection, used by its thread only. */
typedef struct ll_primary
{
   int64_t fence_floor;  /* every fence granted is at least this (0: none) */
   char floor_text[24];  /* fence_floor in decimal, for text parameters */
   int64_t paused_until; /* local monotonic ms: no grant before (0: none) */
   int64_t max_ttl_ms;   /* longest TTL granted or renewed (0: no bound) */
   ll_durability_t durability;
   char durability_text[200]; /* what was read, for messages and reports */
   char primary_id[80];       /* the identity recorded for this primary */
   uint32_t generation;       /* + 1 at each (re)connect that read the above */
   bool new_primary;          /* this connect recorded a new primary */
   uint32_t reported;         /* the engine's: the generation it reported (pool.c) */
   /* From the URI (ll_primary_option); kept across reconnects. */
   int64_t want_max_ttl_ms; /* max_ttl=, 0 when not given */
   ll_durability_policy_t policy;
} ll_primary_t;

/* Reads the URI options max_ttl= and durability= into p (other names:
 * *taken false). INVALID with the backend's name for a bad value. */
bool ll_primary_option (ll_primary_t *p, const char *backend, const char *name, const char *value,
                        bool *taken, leaselock_error_t *err);
/* Records what a (re)connect read: the table's fence floor, the
 * lock-delay left by the database clock (wait_us <= 0: none), its
 * max_ttl; the durability fields are set by the caller before. */
void ll_primary_seen (ll_primary_t *p, int64_t fence_floor, int64_t wait_us, int64_t max_ttl_ms);
/* Before a grant: BUSY while the lock-delay after a new primary lasts;
 * BACKEND under durability=require when the server is not DURABLE. */
bool ll_primary_grant_ok (const ll_primary_t *p, const char *backend, leaselock_error_t *err);
/* Before an acquire or renew: INVALID when ttl_ms is over max_ttl. */
bool ll_primary_ttl_ok (const ll_primary_t *p, const char *backend, int64_t ttl_ms,
                        leaselock_error_t *err);

/* What a SQL backend does through its driver, for the steps below to call
 * in order. Every statement runs in the backend's own code: this table
 * holds the connection's life (open, schema, reconnect, close), not a
 * layer over SQL. Each function gets the backend's connection through its
 * first member, the ll_sql_conn_t. */
typedef struct ll_sql_driver
{
   const char *name;             /* "mysql": its messages start with it */
   char quote;                   /* how messages quote the table: '`', '"' */
   int schema_version;           /* the version its schema text creates */
   const char *const *templates; /* LL_SQL_COUNT statement texts */
   /* Frees what the backend's connection holds beyond its ll_sql_conn_t
    * (not the connection itself); once disconnected. */
   void (*free_fields) (ll_sql_conn_t *b);
   /* Reads the parsed URI u (text: as the user gave it) into the
    * connection: table= through ll_sql_table_option. */
   bool (*parse_uri) (ll_sql_conn_t *b, const ll_uri_t *u, const char *text,
                      leaselock_error_t *err);
   /* Opens the driver's connection (the schema is checked after). */
   bool (*connect) (ll_sql_conn_t *b, leaselock_error_t *err);
   /* Whether there is a connection the server has not closed (an idle
    * connection whose socket reads as closed: ll_fd_looks_closed). */
   bool (*alive) (ll_sql_conn_t *b);
   /* The connection's socket, or -1 when there is none. */
   int (*fd) (ll_sql_conn_t *b);
   /* Closes the connection and forgets its prepared statements; nothing
    * when there is none. */
   void (*disconnect) (ll_sql_conn_t *b);
   /* Prepares statement id on this connection unless it already is. */
   bool (*prepare) (ll_sql_conn_t *b, int id, leaselock_error_t *err);
   /* The version recorded in <table>_meta, -1 when there is none. */
   bool (*read_version) (ll_sql_conn_t *b, long *version, leaselock_error_t *err);
   /* Creates both tables, or brings a table at an older version up to
    * schema_version, and records it; safe when several processes do it at
    * once. */
   bool (*create_schema) (ll_sql_conn_t *b, leaselock_error_t *err);
   /* After the schema check: reads the server's identity and durability
    * and records them in the meta record (a new primary: fence floor and
    * lock-delay), filling b->primary through ll_primary_seen. */
   bool (*check_primary) (ll_sql_conn_t *b, leaselock_error_t *err);
} ll_sql_driver_t;

/* A driver's statements and functions, by the naming rule:
 * LL_SQL_DRIVER_OPS (ll_pg) is .templates = ll_pg_statements, .free_fields
 * = ll_pg_free_fields, ... .check_primary = ll_pg_check_primary. */
#define LL_SQL_DRIVER_OPS(p)                                                                       \
   .templates = p##_statements, .free_fields = p##_free_fields, .parse_uri = p##_parse_uri,        \
   .connect = p##_connect, .alive = p##_alive, .fd = p##_fd, .disconnect = p##_disconnect,         \
   .prepare = p##_prepare, .read_version = p##_read_version, .create_schema = p##_create_schema,   \
   .check_primary = p##_check_primary

/* The part of a connection that every SQL backend has: the first member
 * of the backend's own. */
struct ll_sql_conn
{
   const ll_sql_driver_t *driver;
   char table[64];          /* "leaselock" unless the URI says table= */
   char *sql[LL_SQL_COUNT]; /* the driver's templates with the table name */
   ll_secrets_t secrets;    /* the URI's passwords, scrubbed from messages */
   ll_primary_t primary;    /* read at each (re)connect (check_primary) */
};

/* The backend's open: b is its new zeroed connection (NULL: NOMEM). Reads
 * the URI (its secrets from ll_secrets_from_uri, the rest through
 * parse_uri), formats the statements, connects, and checks the schema
 * version (creating the schema when there is none; BACKEND for a version
 * other than the driver's). Returns b, or NULL after closing it. */
void *ll_sql_open (ll_sql_conn_t *b, const ll_sql_driver_t *driver, const char *uri,
                   leaselock_error_t *err);
/* The backend's primary (ll_backend_t): the connection's ll_primary_t. */
struct ll_primary *ll_sql_primary (void *conn);
/* The table= option: INVALID unless value is an identifier
 * (ll_valid_identifier); else copied to b->table. */
bool ll_sql_table_option (ll_sql_conn_t *b, const char *value, leaselock_error_t *err);
/* Before statement id: reconnects (and checks the schema and the
 * primary, as open does) when the connection is gone or the server closed
 * it while idle, then prepares the statement. Before a grant
 * (LL_SQL_ACQUIRE, LL_SQL_ACQUIRE_FAIR) also ll_primary_grant_ok: a statement that binds
 * b->primary's fence floor reads it after this call. */
bool ll_sql_ready (ll_sql_conn_t *b, int id, leaselock_error_t *err);
/* The backend's close (ll_backend_t): disconnects and frees everything;
 * NULL is fine. */
void ll_sql_close (void *conn);
/* Zeroes (explicit_bzero: kept by the compiler) then frees a string
 * holding a password; NULL is fine. */
void ll_sql_free_secret (char *s);
/* The backend's abandon (ll_backend_t): in a forked child, points the
 * socket at /dev/null (ll_fd_point_at_devnull) so closing sends nothing on
 * the parent's connection, then closes; leaks the connection when that
 * fails. */
void ll_sql_abandon (void *conn);

/* What a SQL backend's table (ll_backend_t) holds alike, the rest by the
 * naming rule: its open (over ll_sql_open), the lease operations, and the
 * steps above (close, abandon, primary); both honour the fair queue on a
 * take and record waiters. */
#define LL_SQL_BACKEND_OPS(p)                                                                      \
   .open = p##_open, .close = ll_sql_close, .abandon = ll_sql_abandon, LL_BACKEND_LEASE_OPS (p),   \
   .fair_take = true, .record_waiters = true, .primary = ll_sql_primary

/* getpid(), without a system call once the process asked it (fork.c;
 * the core's own, not in LL_CORE_API). */
pid_t ll_getpid (void);
/* n bytes from getrandom(2), each handed out once in this process, from a
 * pool a child does not inherit (fork.c). False when getrandom fails. */
bool ll_random_bytes (unsigned char *out, size_t n);

/* ---- release notifications (watch.c) ----------------------------------- */

/* One blocking acquire as its client's watcher sees it, registered from
 * its first try to its end. Owned by the acquire call (on its stack);
 * key and owner are borrowed from it. mu and cond are the wait bucket's
 * (wait.c), which outlive it. */
typedef struct ll_watch_waiter
{
   const char *key;
   size_t key_len;
   const char *owner;
   int64_t since;        /* when it began waiting (ll_now_ms): oldest first */
   bool reserved;        /* it held the reservation after its last try (watch mu) */
   bool behind;          /* its last try found another waiter next (watch mu) */
   int64_t ahead;        /* fair: waiters queued before it at its last try, less the
                          * releases (or, ll_backend_t's queue_leave_notifies, the
                          * queue leaves) heard since; -1: not fair (watch mu) */
   pthread_mutex_t *mu;  /* guards woken */
   pthread_cond_t *cond; /* broadcast when woken is set */
   bool woken;           /* a notification says: try now (the waiter clears it) */
   bool released;        /* a release of its key (or of an unknown key) was heard (watch mu) */
   struct ll_watch_waiter *prev, *next;
} ll_watch_waiter_t;

/* A client's watcher: one listener (ll_backend_t's watch_*) and one
 * thread polling it, started when one of the client's acquires first
 * waits, stopped by the client's close. A release it hears wakes the one
 * waiter that can take the key: the reservation's next owner named by the
 * notification, or without one the oldest waiter of the key (without a
 * key: the waiters that hold a reservation, and the fair waiters that the
 * releases heard may have brought next). A queue leave it hears
 * (queue_leave_notifies) wakes the fair waiter that it brings to the head.
 * Waiters' other writes never wake anybody: only releases and leaves
 * notify. Lock order: the client's mutex, then
 * mu, then a bucket's mutex. fork.c takes mu around a fork and renews cond
 * in the child; the rest is reset on its next use there. */
typedef struct ll_watch
{
   const ll_backend_t *backend;
   const char *uri;    /* borrowed from the client, which outlives it */
   pthread_mutex_t mu; /* guards everything below */
   pthread_cond_t cond;
   ll_watch_waiter_t *waiters;
   pthread_t thread;
   bool running;    /* the thread exists (in this process) */
   bool stopping;   /* the client is closing: no new start */
   void *listener;  /* the thread's open listener, NULL while there is none;
                     * in a forked child, the parent's until the next use
                     * abandons it */
   int stop_fd;     /* eventfd that interrupts the thread's poll (0: none yet) */
   pid_t pid;       /* the process the thread and listener belong to */
   uint64_t opens;  /* listeners opened (tests read it) */
   uint64_t heard;  /* releases its listeners reported (tests read it) */
   uint64_t leaves; /* queue leaves its listeners reported (ll_watch_leaves) */
   ll_obs_t *obs;   /* borrowed: the client's log, for a listener that fails */
   bool warned;     /* the failure of the listener's last open was logged */
   char tag[3];     /* owners' tag (ll_watch_begin), new in each process */
} ll_watch_t;

/* Tests only: a waiter sleeps this long between its tries when > 0 (so a
 * wake-up can only come from a notification), and its claims last that
 * much longer. */
extern _Atomic int64_t ll_test_wait_poll_ms;
/* Tests only: when set, a watcher calls it before it opens a listener
 * (with no lock held): a listener that opens late. */
extern void (*ll_test_watch_open_hook) (void);

/* Tests only: how many times a renewal thread woke from its sleep. */
extern _Atomic uint64_t ll_test_renewal_wakes;

/* Tests only: how many renewal I/O threads started. */
extern _Atomic uint64_t ll_test_io_starts;

void ll_watch_init (ll_watch_t *w, const ll_backend_t *backend, const char *uri, ll_obs_t *obs);
/* Registers e (key, key_len, since, mu, cond set by the caller) before a
 * blocking acquire's first try, so a release during a try is not missed,
 * with owner (a new one: ll_owner_new) as e's owner, its first two
 * characters set to this process's tag, two hex digits chosen at random
 * for each client and process: a release that names owner as next is
 * then heard by this process's listener alone (PostgreSQL: the channel
 * ll<table>_<tag>), not by every process that waits for a key of the
 * table. Nothing for a backend without watch ops. */
void ll_watch_begin (ll_watch_t *w, ll_watch_waiter_t *e, char *owner, pid_t me);
/* e's standing after a try that found the key busy, before it sleeps:
 * starts the watcher unless it runs (an acquire that never waits starts
 * nothing); returns whether a listener that hears every release is open
 * now (a reserved waiter may then poll less often; never with a backend
 * whose listeners are watch_local_only), and in *released whether a release of e's key
 * was heard since the last update (the key may be free). ahead: a fair
 * waiter's count of waiters queued before it (-1: not fair); each release
 * heard since lowers it, and at 1 or less the watcher wakes it as a
 * reserved one, though the notification names nobody (SQLite); where
 * queue leaves notify (queue_leave_notifies), each leave heard lowers it
 * instead, those heard since leaves_before included, and at 0 the
 * watcher wakes it. */
bool ll_watch_update (ll_watch_t *w, ll_watch_waiter_t *e, bool reserved, bool behind,
                      int64_t ahead, uint64_t leaves_before, bool *released);
/* The queue leaves w's listeners have reported: a fair waiter reads it
 * before its count (queue_join) and gives it to ll_watch_update as
 * leaves_before, so that a leave heard while its count was on its way
 * still lowers it (and a count it brings to 0 wakes the waiter at once). */
uint64_t ll_watch_leaves (ll_watch_t *w);
/* me: the caller's process (the call's getpid ()). */
void ll_watch_end (ll_watch_t *w, ll_watch_waiter_t *e, pid_t me);
/* Stops the thread (joined: bounded by one listener open) and closes the
 * listener; later begins start nothing. */
void ll_watch_stop (ll_watch_t *w);
void ll_watch_destroy (ll_watch_t *w);
/* How many listeners the watcher opened so far, and how many releases
 * they reported (tests). */
uint64_t ll_watch_opens (ll_watch_t *w);
uint64_t ll_watch_heard (ll_watch_t *w);
/* The client's watcher (client.c; tests read it). */
ll_watch_t *ll_client_watch (leaselock_client_t *c);

/* ---- release channel files (wake_file.c) ---------------------------------- */

struct stat;

/* Opens a channel file for writing (flags: O_CREAT | O_EXCL or 0, mode
 * for a new file), never blocking and never through a link, and keeps it
 * only when it is a regular file: anything else at that name (a FIFO,
 * which would block the open until a reader came, or a device) is refused
 * with ENOTSUP. An fd, or -1 with errno set. */
int ll_wake_open (const char *path, int flags, mode_t mode);
/* Opens the channel file wake, made when missing with mode; exact: then
 * set to mode whatever the umask; owner (may be NULL): then, by root,
 * given owner's user and group. An fd, or -1 with errno set. */
int ll_wake_make (const char *wake, mode_t mode, bool exact, const struct stat *owner);

/* A release's side: the channel file, opened again (or its open tried) at
 * most every second. Owned by a connection: path (malloc()ed, NULL: no
 * channel) and fd are its own, freed by ll_wake_toucher_free. */
typedef struct ll_wake_toucher
{
   char *path;
   int fd;            /* open on path, or -1 */
   int64_t opened_ms; /* when fd was last opened or tried (ll_real_now_ms) */
} ll_wake_toucher_t;

/* Tells the listeners: futimens on the file (best effort: a missing file,
 * nobody listening yet, or a refused touch only leaves waiters to their
 * polls). Nothing when t has no path. */
void ll_wake_touch (ll_wake_toucher_t *t);
/* Tells the listeners that a waiter left a fair queue (LL_WATCH_QUEUE_LEFT):
 * one byte written at the start of the file (inotify IN_MODIFY, where a
 * release's touch is IN_ATTRIB). Best effort as ll_wake_touch. */
void ll_wake_touch_queue (ll_wake_toucher_t *t);
/* Tests only: when set, ll_wake_touch touches nothing (a release made on
 * another machine, as this machine's listeners hear it). */
extern _Atomic bool ll_test_wake_silent;
/* Closes and frees t's own; a zeroed toucher (no path) is fine. */
void ll_wake_toucher_free (ll_wake_toucher_t *t);

/* A listener on wake (borrowed) for ll_backend_t's watch ops: fd is
 * ll_wake_make's result (closed here; -1 with errno: refused, BACKEND in
 * err, "not a regular file" for anything but one). backend (static) and
 * detail (may be NULL) place failures as ll_backend_fail does. Owned by
 * the caller: ll_wake_listener_close. */
void *ll_wake_listen (const char *backend, const char *wake, int fd, const char *detail,
                      leaselock_error_t *err);
/* watch_fd, watch_drain (one key-less report per drain that saw a touch;
 * false once the file was deleted or renamed) and watch_close (and
 * watch_abandon: no I/O) of such a listener. */
int ll_wake_listener_fd (void *listener);
bool ll_wake_listener_drain (void *listener, ll_watch_fn fn, void *data, leaselock_error_t *err);
void ll_wake_listener_close (void *listener);

/* The same-machine channel of a server backend's table (MySQL/MariaDB,
 * MongoDB): /dev/shm/leaselock-<backend>-<16 hex>.wake (/tmp when /dev/shm
 * is missing or not a writable directory), the hex a hash of backend, u's
 * hosts and ports, its path (the database) and its option table_option
 * (the table or collection), as the URI gives them. A new string (free()),
 * NULL when out of memory. */
char *ll_wake_host_path (const char *backend, const ll_uri_t *u, const char *table_option);
/* A connection's toucher of that channel (no path when out of memory). */
void ll_wake_host_toucher (ll_wake_toucher_t *t, const char *backend, const ll_uri_t *u,
                           const char *table_option);
/* The backend's watch_open: a listener on that channel, the file made
 * when missing with mode 0666 whatever the umask, so that every local
 * user of the table shares it. */
void *ll_wake_host_listen (const char *backend, const char *uri, const char *table_option,
                           leaselock_error_t *err);
/* A module cannot put the core's functions in its constant backend table
 * (it reaches them through ll_core_api.h's table at run time): these
 * define p_watch_open, p_watch_fd, p_watch_drain and p_watch_close over
 * the host channel of table option opt, for LL_BACKEND_WATCH_OPS (p) and
 * LL_BACKEND_HOST_WATCH_OPS (p). */
#define LL_WAKE_HOST_WATCH(p, name, opt)                                                           \
   static void *p##_watch_open (const char *uri, const char *tag, leaselock_error_t *err)          \
   {                                                                                               \
      (void)tag; /* one file: a touch names nobody */                                              \
      return ll_wake_host_listen (name, uri, opt, err);                                            \
   }                                                                                               \
   static int p##_watch_fd (void *l)                                                               \
   {                                                                                               \
      return ll_wake_listener_fd (l);                                                              \
   }                                                                                               \
   static bool p##_watch_drain (void *l, ll_watch_fn fn, void *data, leaselock_error_t *err)       \
   {                                                                                               \
      return ll_wake_listener_drain (l, fn, data, err);                                            \
   }                                                                                               \
   static void p##_watch_close (void *l)                                                           \
   {                                                                                               \
      ll_wake_listener_close (l);                                                                  \
   }
/* A backend table's watch ops over LL_WAKE_HOST_WATCH's functions: its
 * listeners hear this machine's releases only (watch_local_only). */
#define LL_BACKEND_HOST_WATCH_OPS(p)                                                               \
   LL_BACKEND_WATCH_OPS (p), .watch_close = p##_watch_close, .watch_abandon = p##_watch_close,     \
                             .watch_local_only = true

#endif /* LL_INTERNAL_H */
