/*
 * leaselock.h - lease-based distributed locks on a database.
 *
 * The one public header of the leaselock core. The behaviour is the lease
 * contract (docs/contract.md; README.md, "The contract in brief"). Conventions:
 *
 *  - Opaque types with _new/_destroy pairs; every _destroy accepts NULL.
 *  - Every fallible call returns bool and fills a leaselock_error_t that may
 *    be NULL. The error is a fixed-size struct, never allocated.
 *  - "Another owner holds it" is a result: acquire returns false with
 *    error->code == LEASELOCK_BUSY and nothing else is wrong.
 *  - Strings passed in are borrowed for the duration of the call unless a
 *    function says otherwise; strings returned point into the object that
 *    returned them and live as long as it.
 *  - TTLs and durations are milliseconds (int64_t).
 *  - All functions are safe to call from several threads on the same client
 *    or lease, except _destroy, which must be the last call on its object.
 */
#ifndef LEASELOCK_H
#define LEASELOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C"
{
#endif

#define LEASELOCK_VERSION "0.1.0"

#if defined(__GNUC__)
#define LEASELOCK_API __attribute__ ((visibility ("default")))
#else
#define LEASELOCK_API
#endif

/* Limits from the contract. */
#define LEASELOCK_KEY_MAX 255                          /* bytes */
#define LEASELOCK_TTL_MAX_MS (30LL * 24 * 3600 * 1000) /* 30 days */
#define LEASELOCK_OWNER_LEN 32                         /* hex characters */
#define LEASELOCK_ERROR_MAX 256

   /* One enum shared by every layer. Values are stable (bindings expose them). */
   typedef enum leaselock_code
   {
      LEASELOCK_OK = 0,
      LEASELOCK_BUSY = 1,        /* held by another owner (a result) */
      LEASELOCK_TIMEOUT = 2,     /* blocking acquire gave up */
      LEASELOCK_NOT_HELD = 3,    /* renew/release of a lease no longer ours */
      LEASELOCK_LOST = 4,        /* the lease was lost (renewal failed) */
      LEASELOCK_INVALID = 5,     /* bad argument */
      LEASELOCK_BACKEND = 6,     /* connection, server or driver error */
      LEASELOCK_UNSUPPORTED = 7, /* backend or feature not built/available */
      LEASELOCK_NOMEM = 8,
      LEASELOCK_INTERRUPTED = 9, /* a blocking wait was stopped by its caller */
   } leaselock_code_t;

   /* Who held a key when an acquire of it failed with BUSY or TIMEOUT, as
    * the one read of its record made then saw it (leaselock_error_t's
    * holder). The strings are NUL-terminated copies. */
   typedef struct leaselock_holder
   {
      bool known;    /* false: nothing below is set (another code, the
                      * record was gone or free by then, or the read failed) */
      bool released; /* released, but its min_hold keeps the key until it ends */
      int64_t fence;
      int64_t expires_in_ms; /* by the database clock, > 0 */
      int64_t pid;
      char host[256];
      char label[256]; /* "" without a label */
   } leaselock_holder_t;

   typedef struct leaselock_error
   {
      leaselock_code_t code;
      char message[LEASELOCK_ERROR_MAX]; /* NUL-terminated, never a password */
      /* BUSY and TIMEOUT of leaselock_acquire (and leaselock_wait_try's
       * last failure): the key's holder, also named in message ("held by
       * vm pid 11858 (job), fence 1, expires in 29.7s"). Semaphores and
       * read-write locks leave it unknown (no one holder to name). */
      leaselock_holder_t holder;
   } leaselock_error_t;

   /* "BUSY", "TIMEOUT", ...; "UNKNOWN" for a value outside the enum. Static. */
   LEASELOCK_API const char *leaselock_code_name (leaselock_code_t code);
   /* A short human description of the code. Static. */
   LEASELOCK_API const char *leaselock_code_message (leaselock_code_t code);

   typedef struct leaselock_client leaselock_client_t;
   typedef struct leaselock_lease leaselock_lease_t;

   /*
    * Client: one per backend URI; owns a small connection pool and, once a
    * lease with auto-renewal exists, one renewal thread.
    *
    * uri: "sqlite:///abs/path.db", "mongodb://...", "mysql://...",
    * "postgresql://...". NULL or "" means $LEASELOCK_URI, else the embedded
    * SQLite default (see leaselock_default_uri()). The first connection is
    * opened here, so a bad URI or unreachable database fails now.
    *
    * label: optional caller label stored with every lease as holder info
    * (copied; may be NULL): at most 255 bytes of valid UTF-8, else INVALID.
    *
    * Returns a new client to free with leaselock_client_destroy(), or NULL
    * with error filled.
    */
   LEASELOCK_API leaselock_client_t *leaselock_client_new (const char *uri, const char *label,
                                                           leaselock_error_t *error);

   /*
    * fork(): the child may go on using a client of its parent; it gets new
    * connections and no leases (those stay the parent's, see
    * leaselock_lease_release). While fork() runs, the core's atfork handler
    * waits for database calls other threads have in flight (at most the
    * backend's timeouts) and closes idle SQLite connections, so that no
    * database library state crosses the fork half-way.
    */

   /*
    * Closing a client. leaselock_client_close():
    *  1. makes every later call on the client fail with INVALID ("the client
    *     is closed"), and wakes the blocking acquires of the client, which
    *     fail with INVALID ("the client was closed while waiting for ...");
    *     an acquire whose statement lands during the close releases the key
    *     again and fails the same way;
    *  2. stops the renewal thread and waits for renewals in flight;
    *  3. with release_held, releases each lease still HELD by this process
    *     (each one tried, as leaselock_lease_release would, and RELEASED
    *     as it would); it returns false with the first failure's error,
    *     the client being closed all the same;
    *  4. turns every lease still HELD into CLOSED (leaselock_state_t): no
    *     longer renewed, no call of it reaches the database any more, the
    *     record expires by its TTL. Closing is not a loss: no on_lost;
    *  5. closes the connections.
    * Renew and release of a lease of a closed client fail with NOT_HELD
    * ("the client of this lease is closed"). Idempotent: a later call
    * returns true at once, a call while another thread closes returns once
    * that close is done. The client stays valid (its getters work) until
    * leaselock_client_destroy. May be called from an on_lost callback.
    */
   LEASELOCK_API bool leaselock_client_close (leaselock_client_t *client, bool release_held,
                                              leaselock_error_t *error);

   /* True once leaselock_client_close has started on client (or client is
    * NULL). Never fails, never does I/O. */
   LEASELOCK_API bool leaselock_client_closed (const leaselock_client_t *client);

   /*
    * leaselock_client_close (client, false, NULL), then frees the client:
    * destroy releases nothing (leases still held become CLOSED and keep
    * their database expiry; release or destroy them first to release). Its
    * leases may be destroyed before or after: a lease keeps what it needs
    * of its client until it is destroyed itself. Must not be called from
    * an on_lost callback of the client. Accepts NULL.
    */
   LEASELOCK_API void leaselock_client_destroy (leaselock_client_t *client);

   /* The URI actually used (the default resolved: the database this client
    * works on), with any password replaced by "***". Owned by the client. */
   LEASELOCK_API const char *leaselock_client_uri (const leaselock_client_t *client);

   /* Backend name: "sqlite", "mongodb", "mysql", "postgresql". Static. */
   LEASELOCK_API const char *leaselock_client_backend (const leaselock_client_t *client);

   /*
    * The default URI when none is given and LEASELOCK_URI is unset:
    * sqlite://<home>/.local/state/leaselock/locks.db, where <home> is the
    * home directory of the effective user's account (the password
    * database), whatever $HOME and $XDG_STATE_HOME say: cron, sudo and
    * systemd change those, and the same user must find the same database.
    * Writes at most size bytes to buf (NUL-terminated). Returns false
    * (INVALID) if it did not fit or the account has no home directory.
    */
   LEASELOCK_API bool leaselock_default_uri (char *buf, size_t size, leaselock_error_t *error);

   /* Called from the renewal thread, with no leaselock lock held, once, when
    * a lease is declared lost. It may call leaselock_lease_* getters but must
    * not destroy the lease. */
   typedef void (*leaselock_lost_cb) (leaselock_lease_t *lease, void *user_data);

   /* Asked between waits of a blocking acquire; return true to stop waiting
    * (the acquire then fails with LEASELOCK_INTERRUPTED). */
   typedef bool (*leaselock_stop_cb) (void *user_data);

   /* Called from the renewal thread, with no leaselock lock held, when an
    * automatic renewal failed but the lease is not lost yet: the renewal is
    * retried (at about TTL/10, 5 ms to 1 s apart) until it succeeds or the
    * local deadline passes (then on_lost). error is the renewal's failure
    * and remaining_ms the time left to the local deadline when the callback
    * was called; both are borrowed for the call. It may call the
    * leaselock_lease_* getters, renew or release the lease, but must not
    * destroy it. Keep it short: the renewal thread keeps the deadlines of
    * every lease of the client. Renewals made by leaselock_lease_renew
    * report their failure to their caller instead. */
   typedef void (*leaselock_renew_failed_cb) (leaselock_lease_t *lease,
                                              const leaselock_error_t *error, int64_t remaining_ms,
                                              void *user_data);

   typedef struct leaselock_acquire_opts
   {
      int64_t ttl_ms;            /* 1 .. LEASELOCK_TTL_MAX_MS */
      int64_t timeout_ms;        /* 0: one try; > 0: wait up to this long; < 0: forever */
      int64_t min_hold_ms;       /* lockAtLeastFor, applied at release; 0 .. TTL_MAX */
      bool auto_renew;           /* renew at ~ttl/3 from the client's thread */
      leaselock_lost_cb on_lost; /* may be NULL */
      void *on_lost_data;
      leaselock_stop_cb should_stop; /* may be NULL; polled at least every 100 ms */
      void *should_stop_data;
      leaselock_renew_failed_cb on_renew_failed; /* may be NULL; needs auto_renew */
      void *on_renew_failed_data;
      /* Fair mode: waiters get the key in order of arrival. Each try keeps
       * the waiter's place in the key's queue in the database (an entry
       * that is not kept up runs out within a second, so a waiter that
       * died or gave up holds nobody back longer), and only the first in
       * the queue may take the key. A one-try acquire also defers to
       * queued waiters. UNSUPPORTED on a backend without queues. */
      bool fair;
      /* BUSY and TIMEOUT without error->holder: no read of the key's
       * record when the acquire gives up (a poller's one tries, whose
       * failure nobody shows). */
      bool no_holder;
   } leaselock_acquire_opts_t;

   /* Fills opts with the defaults: ttl 30 s, timeout 0, min_hold 0,
    * auto_renew true, no callbacks, not fair. */
   LEASELOCK_API void leaselock_acquire_opts_init (leaselock_acquire_opts_t *opts);

   /*
    * Acquire key (key_len bytes, UTF-8, 1..255, no NUL) for opts->ttl_ms.
    * opts may be NULL (defaults). On success *lease is a new lease to free
    * with leaselock_lease_destroy(). On failure *lease is NULL and
    * error->code is BUSY (one try, another owner holds it), TIMEOUT (waited
    * timeout_ms), INTERRUPTED, INVALID or BACKEND.
    *
    * Every attempt of one call uses the same owner token. A statement that
    * fails once sent (the connection dropped, the reply lost) may have been
    * applied, so it is sent once more at once, on a fresh connection: the
    * database accepts the same owner again. If that fails too, BACKEND, and
    * the key is released for this call's owner (best effort), so that an
    * attempt that was applied does not leave it locked by nobody.
    */
   LEASELOCK_API bool leaselock_acquire (leaselock_client_t *client, const char *key,
                                         size_t key_len, const leaselock_acquire_opts_t *opts,
                                         leaselock_lease_t **lease, leaselock_error_t *error);

   /*
    * Counting semaphores and read-write locks (modes.c), built on leases:
    * each holder holds a full lease (its own owner, fence, renewal, loss
    * detection, min_hold) on a record of its own beside key, so release,
    * renew, destroy and the getters are the lease's as usual, and
    * leaselock_lease_key names that record (key + "/.slot/<i>" for a
    * semaphore's slot i, key + "/.rw/w" for the exclusive holder, key +
    * "/.rw/r/<token>" for a shared one, token being 32 hex digits new for
    * each acquisition; key + "/.sem/fair" orders fair semaphore waiters).
    * These suffixes are reserved. key + its longest suffix must fit in
    * LEASELOCK_KEY_MAX bytes: a semaphore's key may have 245 bytes, a
    * read-write lock's 216 (INVALID otherwise). Arguments are checked as
    * leaselock_acquire checks them, before any I/O. An uncontended
    * acquire costs two statements (take the record, then read the
    * others'; one more to apply a min_hold), a release one (a reader's
    * then deletes its one-use record: a prune of that key). docs/contract.md, "Semaphores and
    * read-write locks", gives the algorithms and why they are safe.
    *
    * leaselock_semaphore_acquire: at most limit (1 ..
    * LEASELOCK_SEMAPHORE_MAX) live leases on key at once; a holder started
    * under a higher limit is counted against a lowered one, and no new
    * holder starts while the live ones number limit or more. opts as for
    * leaselock_acquire (timeout, ttl, min_hold, auto_renew, callbacks); BUSY
    * on one try with all slots taken, TIMEOUT after waiting. opts->fair:
    * fair waiters get slots in order of arrival among themselves (an
    * acquirer that is not fair may still take a slot that frees first).
    *
    * leaselock_rwlock_acquire: any number of SHARED holders or one
    * EXCLUSIVE holder. A writer that is waiting is not starved by a stream
    * of readers: once it holds the exclusive record, new readers wait, and
    * it waits (within opts->timeout_ms) for the readers already in to
    * leave; when its time runs out it lets the exclusive record go (TIMEOUT).
    * opts->fair applies to the exclusive record: writers, and readers
    * waiting for a writer, are served in order of arrival.
    */
#define LEASELOCK_SEMAPHORE_MAX 1000
   LEASELOCK_API bool leaselock_semaphore_acquire (leaselock_client_t *client, const char *key,
                                                   size_t key_len, int64_t limit,
                                                   const leaselock_acquire_opts_t *opts,
                                                   leaselock_lease_t **lease,
                                                   leaselock_error_t *error);

   typedef enum leaselock_rw_mode
   {
      LEASELOCK_SHARED = 1,
      LEASELOCK_EXCLUSIVE = 2
   } leaselock_rw_mode_t;

   LEASELOCK_API bool leaselock_rwlock_acquire (leaselock_client_t *client, const char *key,
                                                size_t key_len, leaselock_rw_mode_t mode,
                                                const leaselock_acquire_opts_t *opts,
                                                leaselock_lease_t **lease,
                                                leaselock_error_t *error);

   /*
    * Reentrant locks. The holder of lease asks for it again: the record's
    * hold count goes up by one (one statement) and the lease, its fence and
    * its renewal stay as they are. leaselock_lease_release then lets one
    * hold go (the count goes down; the lease stays HELD) until the last,
    * which releases the key; leaselock_lease_destroy releases it whatever
    * the count. NOT_HELD (or LOST) when the lease is no longer held,
    * UNSUPPORTED on a backend without hold counts. The count in the record
    * is what inspect shows; this lease's own count decides when a release
    * is the last, so a lost reply never frees the key early.
    */
   LEASELOCK_API bool leaselock_lease_reenter (leaselock_lease_t *lease, leaselock_error_t *error);
   /* The holds of lease (1 after the acquire; 0 once released or lost). */
   LEASELOCK_API int64_t leaselock_lease_holds (leaselock_lease_t *lease);
   /* The same for a holder known only by its owner token (32 hex
    * characters), such as the process a supervised command runs in (the
    * CLI's LEASELOCK_OWNER): delta +1 enters once more, -1 leaves one hold
    * (never the last: the lease's own release does that). *holds: the
    * record's count after. NOT_HELD when key is not owner's and live. */
   LEASELOCK_API bool leaselock_hold (leaselock_client_t *client, const char *key, size_t key_len,
                                      const char *owner, int delta, int64_t *holds,
                                      leaselock_error_t *error);

   /*
    * A waiting acquire driven by its caller, one try at a time, for event
    * loops that must not block a thread while they wait (asyncio, OpenResty's
    * ngx.sleep). The wait is one waiter, as leaselock_acquire's is: one
    * owner token for all its tries, its claim to be the key's next owner,
    * its place in the queue in fair mode. opts are copied (should_stop is
    * ignored: the caller decides when to stop); opts->timeout_ms bounds the
    * whole wait (< 0: none; 0: one try). Returns a wait to free with
    * leaselock_wait_destroy(), or NULL with INVALID, UNSUPPORTED or NOMEM.
    * One thread at a time per wait; it holds a reference on the client.
    */
   typedef struct leaselock_wait leaselock_wait_t;
   LEASELOCK_API leaselock_wait_t *leaselock_wait_new (leaselock_client_t *client, const char *key,
                                                       size_t key_len,
                                                       const leaselock_acquire_opts_t *opts,
                                                       leaselock_error_t *error);
   /* One try (it may block for a round trip or two). true: *lease is a new
    * lease (as from leaselock_acquire) and the wait is over. false with
    * BUSY: sleep *sleep_ms (ms, already cut at the wait's deadline), then
    * try again. Any other code ends the wait: TIMEOUT (its deadline passed),
    * INVALID (the client was closed; the wait is over; a wait of another
    * process), BACKEND, NOMEM. */
   LEASELOCK_API bool leaselock_wait_try (leaselock_wait_t *wait, leaselock_lease_t **lease,
                                          int64_t *sleep_ms, leaselock_error_t *error);
   /* Gives the wait up (leaving the key's queue in fair mode, best effort)
    * unless it is over, and frees it. NULL is fine. */
   LEASELOCK_API void leaselock_wait_destroy (leaselock_wait_t *wait);

   /* Extend the lease to ttl_ms from now (database clock); ttl_ms 0 means
    * the lease's own TTL, other values must be a valid TTL (INVALID). Fails
    * NOT_HELD if another owner has it or it expired, LOST if it was already
    * declared lost. A shorter TTL shortens the local deadline as soon as the
    * renew is sent; while renews (this and the automatic one) are in flight
    * together, or one's outcome stayed unknown, the deadline is the
    * earliest any of them could have left in the database. */
   LEASELOCK_API bool leaselock_lease_renew (leaselock_lease_t *lease, int64_t ttl_ms,
                                             leaselock_error_t *error);

   /* Renew, and with min_hold_ms >= 0 also extend the minimum hold (like
    * ShedLock's extend(lockAtMostFor, lockAtLeastFor)): once renewed, a
    * release keeps the record taken until at least min_hold_ms after this
    * renew ran (by the database clock). A minimum hold is only ever
    * lengthened, never shortened; the margin it may hold longer is the time
    * from the acquire's send to this renew's reply / 1000 + 1 ms. ttl_ms as
    * for leaselock_lease_renew; min_hold_ms -1 keeps the minimum hold as it
    * is, other negative values and values above LEASELOCK_TTL_MAX_MS are
    * INVALID. */
   LEASELOCK_API bool leaselock_lease_extend (leaselock_lease_t *lease, int64_t ttl_ms,
                                              int64_t min_hold_ms, leaselock_error_t *error);

   /*
    * Release: clears the owner (the record and its fence stay); with min_hold
    * the expiry becomes max(now, acquired_at + min_hold). Fails NOT_HELD when
    * the lease is no longer this owner's (released already, taken over, or
    * acquired by the parent of a forked process). Waiters in this process are
    * woken at once. A release whose reply is lost is sent once more. If it
    * still fails (BACKEND), the holder has let go all the same: the lease is
    * RELEASED and never renewed again, and if the release did not land the
    * record expires by its TTL. A release that reached no connection leaves
    * the lease HELD and renewed, and may be called again.
    */
   LEASELOCK_API bool leaselock_lease_release (leaselock_lease_t *lease, leaselock_error_t *error);

   /* Releases the lease if still held by this process and its client is not
    * closed (errors ignored), stops its renewal and frees it. Accepts NULL. */
   LEASELOCK_API void leaselock_lease_destroy (leaselock_lease_t *lease);

   typedef enum leaselock_state
   {
      LEASELOCK_STATE_HELD = 0,
      LEASELOCK_STATE_RELEASED = 1,
      LEASELOCK_STATE_LOST = 2,   /* renewal failed or the local deadline passed */
      LEASELOCK_STATE_CLOSED = 3, /* held when its client was closed without
                                   * releasing it: not renewed, never sent
                                   * again, expires by its TTL */
   } leaselock_state_t;

   /* "held", "released", "lost" or "closed" (the name the bindings give a
    * state); "released" for a value outside the enum. Static storage. */
   LEASELOCK_API const char *leaselock_state_name (leaselock_state_t state);

   /* Getters: never fail, never do I/O. Strings are owned by the lease. */
   LEASELOCK_API const char *leaselock_lease_key (const leaselock_lease_t *lease);
   LEASELOCK_API size_t leaselock_lease_key_len (const leaselock_lease_t *lease);
   LEASELOCK_API const char *leaselock_lease_owner (const leaselock_lease_t *lease);
   LEASELOCK_API int64_t leaselock_lease_fence (const leaselock_lease_t *lease);
   LEASELOCK_API int64_t leaselock_lease_ttl_ms (const leaselock_lease_t *lease);
   /* HELD turns into LOST when the local deadline passes: send time of the
    * acquire or renew + TTL - (2 ms + TTL / 1000), a margin for stored times
    * rounded to milliseconds and for the database's clock running up to
    * 1000 ppm faster than this machine's. So it comes before the
    * database's expiry, and a TTL of 2 ms or less leaves no time at all. */
   LEASELOCK_API leaselock_state_t leaselock_lease_state (leaselock_lease_t *lease);
   /* Milliseconds until the holder's local deadline; <= 0 once passed. */
   LEASELOCK_API int64_t leaselock_lease_remaining_ms (leaselock_lease_t *lease);

   /* A record as the database holds it. */
   typedef struct leaselock_record
   {
      char key[LEASELOCK_KEY_MAX + 1];
      size_t key_len;
      char owner[LEASELOCK_OWNER_LEN + 1]; /* "" when released */
      int64_t fence;
      int64_t expires_in_ms; /* by the database clock; <= 0 when expired */
      char host[256];
      int64_t pid;
      char label[256];
      int64_t holds; /* reentrant holds of its owner: >= 1 while owned, 0 when released */
      /* Who waits (0 / "" when nobody; -1 when the backend does not say:
       * SQLite, PostgreSQL and MySQL say, MongoDB does not yet). */
      char next_owner[LEASELOCK_OWNER_LEN + 1]; /* the live reservation's waiter, or "" */
      int64_t queued;                           /* live entries in the key's fair queue */
      int64_t held_ms; /* since its owner took it, by the database clock; -1 when released */
   } leaselock_record_t;

   /*
    * Names the holder of key in error, an acquire's failure of code BUSY or
    * TIMEOUT (any other code: nothing happens, true): one read of the
    * key's record, and when a holder or a min_hold keeps it, error->holder
    * is filled and error->message becomes '"key" is held by HOLDER' (BUSY)
    * or 'timed out after waited_ms ms waiting for "key" (held by HOLDER)'
    * (TIMEOUT), HOLDER being "host pid N (label), fence F, expires in
    * 29.7s". leaselock_acquire and leaselock_wait_try do this themselves
    * when they give up; it is for a binding that makes its own tries (an
    * event loop's one-try acquires). The read is bounded: a locked SQLite
    * file holds it a moment at most, a server 100 ms. False, with error
    * left as it was, when the read failed or the key is free by then.
    */
   LEASELOCK_API bool leaselock_explain_busy (leaselock_client_t *client, const char *key,
                                              size_t key_len, int64_t waited_ms,
                                              leaselock_error_t *error);

   /* Fills *record and sets *found. Never fails for a missing key. */
   LEASELOCK_API bool leaselock_inspect (leaselock_client_t *client, const char *key,
                                         size_t key_len, leaselock_record_t *record, bool *found,
                                         leaselock_error_t *error);

   /* Calls fn once per record whose key starts with prefix (prefix_len may be
    * 0), in key order. fn returns false to stop early. The record is only
    * valid during the call. The records are read first (one statement) and
    * fn runs with no connection held, so it may call leaselock functions or
    * fork; memory grows with the number of records. */
   typedef bool (*leaselock_record_cb) (const leaselock_record_t *record, void *user_data);
   LEASELOCK_API bool leaselock_list (leaselock_client_t *client, const char *prefix,
                                      size_t prefix_len, leaselock_record_cb fn, void *user_data,
                                      leaselock_error_t *error);

   /*
    * A lock as its records make it up: a semaphore's and a read-write lock's
    * records (key + "/.slot/<i>", "/.sem/fair", "/.rw/w", "/.rw/r/<token>")
    * count as one lock named key, an ordinary key's record as itself.
    * Every pointer in it points into memory the core owns and frees when
    * the callback returns: copy what must outlive the call.
    */
   typedef enum leaselock_lock_mode
   {
      LEASELOCK_MODE_LOCK = 1,
      LEASELOCK_MODE_SEMAPHORE = 2,
      LEASELOCK_MODE_RWLOCK = 3
   } leaselock_lock_mode_t;

   typedef struct leaselock_lock_info
   {
      const char *key; /* the lock's key, without a mode's suffix (NUL-terminated) */
      size_t key_len;
      leaselock_lock_mode_t mode;
      /* "held" (a live record with an owner), "min-hold" (live records, all
       * released inside their min_hold: still blocking) or "free". */
      const char *state;
      int64_t live; /* live records that block an acquire (not the fair gate) */
      /* The live records with an owner: a lock's record; a read-write
       * lock's writer first, then its readers; a semaphore's slots. */
      const leaselock_record_t *const *holders;
      size_t n_holders;
      /* A lock's record, a read-write lock's exclusive record, NULL for a
       * semaphore or when there is none: its fence is the lock's fence. */
      const leaselock_record_t *record;
      int64_t slots;   /* semaphore: slot records (its limit is at least this) */
      int64_t readers; /* read-write lock: live shared holders */
      bool writer;     /* read-write lock: a writer holds the exclusive record
                        * (and may still wait in it for readers to leave) */
      /* Waiters: the reserved next owner ("" when none) and the fair queue's
       * length (-1 when the backend does not say) of the record waiters
       * wait on: a lock's, the exclusive record (writers, and readers
       * waiting for a writer), a semaphore's fair gate (its holder is the
       * next fair waiter, shown as next_owner). */
      const char *next_owner;
      int64_t queued;
      size_t records; /* the records read for it (released ones included) */
   } leaselock_lock_info_t;

   typedef bool (*leaselock_lock_cb) (const leaselock_lock_info_t *lock, void *user_data);

   /* Calls fn once per lock with a record whose key starts with prefix
    * (prefix_len may be 0), in key order: one list statement, then fn with
    * no connection held (as leaselock_list). fn returns false to stop. */
   LEASELOCK_API bool leaselock_locks (leaselock_client_t *client, const char *prefix,
                                       size_t prefix_len, leaselock_lock_cb fn, void *user_data,
                                       leaselock_error_t *error);

   /* The lock named key, whatever its mode: calls fn once when key or its
    * mode's records have a record and sets *found (two statements: an
    * inspect of key, a list of key + "/."). A
    * mode's record named by its own key (a lease's key) is shown alone, as
    * a lock. */
   LEASELOCK_API bool leaselock_lock_inspect (leaselock_client_t *client, const char *key,
                                              size_t key_len, leaselock_lock_cb fn, void *user_data,
                                              bool *found, leaselock_error_t *error);

   /* Admin: clears the owner of key whoever holds it and makes it free now; the
    * fence survives. *took (may be NULL) tells whether a live lease was taken. */
   LEASELOCK_API bool leaselock_force_release (leaselock_client_t *client, const char *key,
                                               size_t key_len, bool *took,
                                               leaselock_error_t *error);

   /*
    * Admin: deletes the free records whose key starts with prefix
    * (prefix_len may be 0: every key) in one statement, and sets *count
    * (may be NULL) to how many. A record is deleted only when its expiry is
    * in the past by the database clock, and by at least older_than_ms (0 ..
    * LEASELOCK_TTL_MAX_MS; 0: any expired record): never a live lease, never
    * a released record still inside its min_hold. Deleting a record forgets
    * its fence: the key's next acquire gets fence 1 again (docs/contract.md,
    * invariant 6), so prune no key whose fences a store still checks.
    */
   LEASELOCK_API bool leaselock_prune (leaselock_client_t *client, const char *prefix,
                                       size_t prefix_len, int64_t older_than_ms, int64_t *count,
                                       leaselock_error_t *error);

   /* Strict UTF-8 (no overlong forms, no surrogates, nothing above
    * U+10FFFF): the offset of the first byte of the first invalid or cut
    * sequence in s[0..len), or len when all of it is valid. A NUL byte is
    * valid UTF-8. The one validator of the core, exposed for the bindings
    * and the CLI. */
   LEASELOCK_API size_t leaselock_utf8_valid_len (const char *s, size_t len);

   /* The check every call applies to a key: 1..LEASELOCK_KEY_MAX bytes of
    * valid UTF-8 without NUL; INVALID with the reason otherwise. */
   LEASELOCK_API bool leaselock_check_key (const char *key, size_t key_len,
                                           leaselock_error_t *error);

   /* ms as the CLI and the core's messages show a duration: "750ms",
    * "29.7s", "3.2m", "2.08h", "1.13d", rounded to the nearest step of the
    * unit shown (1ms, 100ms, 0.01 of the unit), trailing zeros dropped; a
    * negative ms shows its absolute value. Writes at most size bytes to
    * buf (NUL-terminated; 32 is always enough). */
   LEASELOCK_API void leaselock_format_duration (int64_t ms, char *buf, size_t size);

   /* Parses "30s", "500ms", "2m", "1h", "1d", or a bare number of seconds
    * ("1.5") into milliseconds. Used by the CLI; exposed for the bindings. */
   LEASELOCK_API bool leaselock_parse_duration (const char *text, int64_t *ms,
                                                leaselock_error_t *error);

   /* ---- observability: a log hook and counters per client ------------- */

   /* Log levels: the numeric values of Python's logging levels. */
   typedef enum leaselock_log_level
   {
      LEASELOCK_LOG_DEBUG = 10,   /* acquire, busy, wait, renew, release */
      LEASELOCK_LOG_INFO = 20,    /* timeout */
      LEASELOCK_LOG_WARNING = 30, /* renew_failed, release_failed, backend_error */
      LEASELOCK_LOG_ERROR = 40,   /* lost */
      LEASELOCK_LOG_OFF = 1000,   /* above every level: nothing is delivered */
   } leaselock_log_level_t;

   /*
    * One event, as the log hook receives it. Every pointer is borrowed for
    * the duration of the call only (copy what you keep):
    *  - client: the client the event is about (its getters may be called,
    *    and leaselock_client_stats);
    *  - event: a static string: "acquire", "busy", "wait", "timeout",
    *    "renew", "renew_failed", "lost", "release", "release_failed",
    *    "backend_error", "lock_wait", "watch_failed";
    *  - key: key_len bytes, NUL-terminated as well; NULL (key_len 0) when
    *    the event concerns no key;
    *  - fence: the lease's fence, 0 when there is no lease;
    *  - code: LEASELOCK_OK, or the error of a failure;
    *  - message: NUL-terminated human text (the same rules as
    *    leaselock_error_t: never a password).
    */
   typedef struct leaselock_log_event
   {
      leaselock_client_t *client;
      int level;
      const char *event;
      const char *key;
      size_t key_len;
      int64_t fence;
      leaselock_code_t code;
      const char *message;
   } leaselock_log_event_t;

   typedef void (*leaselock_log_cb) (const leaselock_log_event_t *event, void *user_data);

   /*
    * Installs fn as client's log hook: it receives every event whose level
    * is >= min_level. fn NULL (or min_level LEASELOCK_LOG_OFF) turns it
    * off; that is the default. With the hook off, or an event below
    * min_level, an event costs one atomic load and a compare: nothing is
    * formatted.
    *
    * fn is called with no leaselock lock held, from the thread that did the
    * work: the caller's for acquire, release and manual renew; the client's
    * renewal or I/O threads for automatic renewals and losses they find.
    * It may call leaselock getters and leaselock_client_stats; it must not
    * close or destroy the client, nor destroy a lease. Several threads may
    * call it at once. user_data is passed as is and must stay valid until
    * the hook is replaced or the client destroyed: when set_log returns, no
    * call of the previous hook is still running (except when set_log is
    * called from within a hook of the same client). Accepts a NULL client
    * (does nothing).
    */
   LEASELOCK_API void leaselock_client_set_log (leaselock_client_t *client, int min_level,
                                                leaselock_log_cb fn, void *user_data);

   /* Changes only the level of the installed hook (one atomic store, never
    * waits): for bindings that follow a logger's level. */
   LEASELOCK_API void leaselock_client_set_log_level (leaselock_client_t *client, int min_level);

   /* "DEBUG", "INFO", "WARNING", "ERROR" for the levels above (a level in
    * between takes the name of the one below it), "NOTSET" below DEBUG.
    * Static. */
   LEASELOCK_API const char *leaselock_log_level_name (int level);

   /* Buckets of the statement latency histogram. */
#define LEASELOCK_LATENCY_BUCKETS 12

   /*
    * A client's counters since it was created (this process's work only;
    * a forked child starts from its parent's counts). Times are
    * milliseconds, latencies microseconds.
    */
   typedef struct leaselock_stats
   {
      uint64_t acquires;            /* successful acquires */
      uint64_t busy;                /* one-try acquires answered BUSY */
      uint64_t waits;               /* blocking acquires that found the key busy and waited */
      uint64_t timeouts;            /* blocking acquires that gave up (TIMEOUT) */
      uint64_t wait_ms;             /* total time those waits lasted */
      uint64_t held_ms;             /* total time leases were held, counted when each ends */
      uint64_t renewals;            /* successful renew statements (automatic and manual) */
      uint64_t renewal_failures;    /* failed renew statements */
      uint64_t losses;              /* leases declared LOST */
      uint64_t releases;            /* successful releases */
      uint64_t release_failures;    /* releases that failed (NOT_HELD, BACKEND) */
      uint64_t backend_errors;      /* statements and connections that failed with BACKEND */
      uint64_t requests;            /* statements sent to the database */
      uint64_t failovers;           /* connections that found a new primary (a lock-delay began) */
      uint64_t durability_warnings; /* connections whose grants may not survive a failover */
      uint64_t leases_held;         /* leases HELD by this process now (a gauge) */
      uint64_t latency_sum_us;      /* sum of the round trips of the requests */
      /* Upper bounds (inclusive, microseconds) of the buckets; the last
       * is UINT64_MAX (+Inf). */
      uint64_t latency_le_us[LEASELOCK_LATENCY_BUCKETS];
      /* Requests per bucket (not cumulative); they sum to requests. */
      uint64_t latency_count[LEASELOCK_LATENCY_BUCKETS];
   } leaselock_stats_t;

   /* Fills *stats. Cheap (relaxed atomic loads, one short lock to count
    * the leases held); never does I/O; works on a closed client. */
   LEASELOCK_API bool leaselock_client_stats (leaselock_client_t *client, leaselock_stats_t *stats,
                                              leaselock_error_t *error);

   /* How the client's database makes a grant survive a failover, and what
    * leaselock did about a failover (docs/backends.md, "Replicated
    * databases and failover"), as a connection of the client read it when
    * it was made (at connect and each reconnect, never per grant). */
   typedef struct leaselock_durability
   {
      /* "durable" (a grant is on a standby before it is answered),
       * "at-risk" (replicas exist but a grant may be answered first),
       * "standalone" (no replica to fail over to) or "unknown"; static. */
      const char *level;
      const char *policy;    /* the URI's durability=: "report", "require", "off"; static */
      char detail[200];      /* the settings read, for people */
      char primary[80];      /* the primary recorded in the table ("" when none) */
      int64_t fence_floor;   /* every fence granted is at least this (0: no failover seen) */
      int64_t lock_delay_ms; /* grants are paused this much longer (0: not paused) */
      int64_t max_ttl_ms;    /* the longest TTL the table grants (0: no bound) */
   } leaselock_durability_t;

   /* Fills *out from one of the client's connections (connecting first
    * when it has none: bounded by the backend's timeouts). BACKEND when
    * no connection can be made; INVALID on a NULL argument or a closed
    * client. */
   LEASELOCK_API bool leaselock_client_durability (leaselock_client_t *client,
                                                   leaselock_durability_t *out,
                                                   leaselock_error_t *error);

   /*
    * Renders stats in the Prometheus text format (version 0.0.4): one
    * counter per field ("leaselock_acquires_total", ...), the gauge
    * "leaselock_leases_held" and the histogram
    * "leaselock_request_duration_seconds". labels (may be NULL or "") is
    * put inside the braces of every sample as is, e.g.
    * "client=\"jobs\"" (its values escaped by the caller). Like snprintf:
    * writes at most size bytes (NUL-terminated when size > 0) and returns
    * the length the whole text needs, without the NUL.
    */
   LEASELOCK_API size_t leaselock_stats_prometheus (const leaselock_stats_t *stats,
                                                    const char *labels, char *buf, size_t size);

#ifdef __cplusplus
}
#endif

#endif /* LEASELOCK_H */
