/*
 * lleaselock.h - private to the Lua module `leaselock`: its handle
 * structs, user value slots, and the functions its files share.
 *
 *   lleaselock.c  luaopen_leaselock, the module table, argument checks,
 *                 errors and warnings, the embedded Lua chunks
 *   client.c      leaselock.client (connect, admin calls, stats, set_log)
 *   lock.c        leaselock.lock (client:lock, :semaphore, :rwlock;
 *                 acquire, try_acquire, with)
 *   lease.c       leaselock.lease (held, renew, release, close paths)
 *   logq.c        what the core's threads leave for the Lua thread: the
 *                 log queue and a lease's last renewal failure
 *   pool.c        the registry of clients and parked leases shared with
 *                 OpenResty's pool threads
 *   acquire_nb.c  lock:acquire_nb's C halves and leaselock.pool's
 *                 _pool_try/_pool_reap
 *   fields.c      the fields each handle answers, leaselock.methods,
 *                 records, holders and read-write locks as tables
 *   *.lua         Lua code embedded at build time (ll_lua_load_chunk)
 *
 * Nothing here is exported from the module (lua/leaselock.map keeps only
 * luaopen_leaselock). Conventions of the functions below:
 *  - idx: a stack index; functions that keep it across pushes make it
 *    absolute first. "at 1": the method's receiver.
 *  - level, fname, arg: where a misuse error points (luaL_where(level),
 *    1 = the caller of the running C function), the function it names, and
 *    the argument number (0: the receiver). Functions taking them may
 *    raise; they never return on a raise.
 *  - Pointers returned into a userdata are borrowed: valid while the
 *    userdata is reachable from the stack.
 */
#ifndef LLEASELOCK_H
#define LLEASELOCK_H

#include "ll_lua_compat.h"

#include "leaselock.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CLIENT_MT "leaselock.client"
#define LOCK_MT "leaselock.lock"
#define LEASE_MT "leaselock.lease"
/* Metatables of plain tables (fields.c): an acquire's holder, a record
 * (client:info, client:locks), a read-write lock ({key, shared, exclusive}). */
#define HOLDER_MT "leaselock.holder"
#define RECORD_MT "leaselock.record"
#define RWLOCK_MT "leaselock.rwlock"

/* The longest label the core stores (holder info, leaselock_record_t). */
#define LL_LABEL_MAX (sizeof ((leaselock_record_t *)0)->label - 1)

/* User value slots of a lock or lease handle (a table, as the 5.1 API
 * requires). */
#define UV_CLIENT 1          /* the client handle */
#define UV_ON_LOST 2         /* on_lost function or nil */
#define UV_ON_RENEW_FAILED 3 /* on_renew_failed function or nil */
/* A lock's: coroutine -> the lease it took through the lock (weak keys),
 * but with's (UV_HOLDS finds those: lock.c, register_hold). */
#define UV_HELD 4
/* A lock's, so that an acquire looks nothing up by name: LEASE_MT's
 * metatable (for its lease handles), its client's UV_HOLDS table (never
 * replaced once made) and its records' name in it (lock.c). */
#define UV_LEASE_MT 5
#define UV_HOLDS_OF_CLIENT 6
#define UV_HOLD_NAME 7
/* The client handle's user value: its log function, and the holds of its
 * coroutines (lock.c: record name -> {coroutine -> lease handle}). */
#define UV_LOG_FN 1
#define UV_HOLDS 2

/* The log queue of a client handle (logq.c); opaque. */
typedef struct ll_lua_log ll_lua_log_t;

/* A client's entry in the registry shared with pool threads (pool.c). */
typedef struct ll_shared_client ll_shared_client_t;

/* A client handle (CLIENT_MT userdata). */
typedef struct
{
   /* owned; NULL once collected. Once shared is set, the registry entry
    * owns the client and this is a borrowed copy, valid while the handle
    * holds its reference. */
   leaselock_client_t *client;
   ll_lua_log_t *log;          /* owned; NULL until set_log */
   ll_shared_client_t *shared; /* one reference; NULL until acquire_nb needs it */
   /* Its lease handles that are open and in its holds (lock.c): while 0,
    * no coroutine holds anything through it, and an acquire skips the
    * look-ups of UV_HELD and UV_HOLDS. */
   unsigned open_holds;
} ll_lua_client_t;

/* The last renewal failure of a lease, written by ll_lua_rf_hook on the
 * renewal thread, read on the Lua thread through ll_lua_rf_take. mu
 * guards the rest and stays first (logq.c allocates it so). */
typedef struct
{
   pthread_mutex_t mu;
   int pending; /* failures not yet reported to Lua */
   leaselock_code_t code;
   int64_t remaining_ms;
   char message[LEASELOCK_ERROR_MAX];
} ll_lua_renew_failed_t;

/* What a lock object takes: the key itself, a slot of a counting
 * semaphore, or one side of a read-write lock (modes.c). */
typedef enum
{
   LL_PLAIN,
   LL_SEMAPHORE,
   LL_SHARED,
   LL_EXCLUSIVE
} ll_lock_mode_t;

/* A lock object (LOCK_MT userdata): owns no C resource. Its user value
 * holds UV_CLIENT, UV_ON_LOST, UV_ON_RENEW_FAILED, UV_HELD, UV_LEASE_MT,
 * UV_HOLDS_OF_CLIENT and UV_HOLD_NAME. */
typedef struct
{
   /* ttl, min_hold, auto_renew, fair; the callbacks stay NULL (they are
    * Lua's: see lease.c) and timeout is each call's. */
   leaselock_acquire_opts_t opts;
   bool reentrant;       /* its holder (a coroutine) may take it again */
   bool renew_failed_fn; /* UV_ON_RENEW_FAILED holds a function (set once, by new_lock) */
   /* Its client handle (borrowed: UV_CLIENT keeps it alive while the lock
    * is), for its open_holds. */
   ll_lua_client_t *client;
   ll_lock_mode_t mode;
   int64_t limit; /* LL_SEMAPHORE: the number of slots */
   size_t key_len;
   char key[LEASELOCK_KEY_MAX + 1];
} ll_lua_lock_t;

/* A lease handle (LEASE_MT userdata). Its user value is its lock's (one
 * table, shared: no table made per lease): UV_CLIENT (which keeps the
 * client handle alive), UV_ON_LOST and UV_ON_RENEW_FAILED. lease stays the
 * first member: tests/history/histlua.c reads it. */
typedef struct
{
   leaselock_lease_t *lease;  /* owned; NULL once closed */
   ll_lua_renew_failed_t *rf; /* owned; NULL without on_renew_failed */
   /* The client handle whose open_holds counts this handle (borrowed: the
    * user value keeps it alive); NULL when not counted. */
   ll_lua_client_t *counted_in;
   bool lost_seen;   /* on_lost already called (or due) */
   bool closed_lost; /* the state was LOST when it was closed */
   int64_t fence;
   char owner[LEASELOCK_OWNER_LEN + 1];
   size_t key_len;
   /* key holds key_cap bytes: the lock's key length for a plain lock (its
    * lease's key is the lock's), LEASELOCK_KEY_MAX for a mode's holder
    * (key/.slot/<i> and the like). A handle made per acquire is garbage
    * for the GC, so it is no bigger than it needs. */
   size_t key_cap;
   char key[];
} ll_lua_lease_t;

/* A registry entry (pool.c); its fields other than id and client are
 * pool.c's, under its mutex. */
struct ll_shared_client
{
   uint64_t id;                /* immutable once registered */
   leaselock_client_t *client; /* owned: destroyed with the last reference */
   unsigned refs;              /* the Lua handle's, pool tries', parked leases' */
   bool handle_gone;           /* the Lua handle was collected: park no more */
   ll_shared_client_t *next;
};

/* ---- lleaselock.c: checks, errors, chunks, types -------------------- */

/* Kinds of seconds (ll_lua_check_seconds; ll_lua_check_timeout's). */
enum
{
   SECONDS_POSITIVE,    /* a TTL: > 0, at most 30 days */
   SECONDS_NONNEGATIVE, /* min_hold: 0 .. 30 days */
   SECONDS_TIMEOUT      /* 0 .. 30 days, or math.huge: -1, wait forever */
};

/* Raises "bad argument #arg to 'fname' (fmt...)" (arg 0: "calling 'fname'
 * on bad self (...)"), placed `level` frames up. lua_pushfstring's
 * formats. Never returns. */
int ll_lua_arg_error (lua_State *L, int level, const char *fname, int arg, const char *fmt, ...);

/* Pushes nil, message, code name (BUSY: nil, "busy", "BUSY"); returns 3. */
int ll_lua_push_failure (lua_State *L, const leaselock_error_t *err);

/* Raises the message fmt... (lua_pushfstring's formats) placed `level`
 * frames up, as luaL_error does for level 1. Never returns. */
int ll_lua_raise_at (lua_State *L, int level, const char *fmt, ...);

/* The failure err of the core's call fname: INVALID (a misuse the module's
 * checks let through) raises "fname: message" placed `level` frames up;
 * any other code is a result, pushed as ll_lua_push_failure does
 * (returns 3). */
int ll_lua_fail (lua_State *L, int level, const char *fname, const leaselock_error_t *err);

/* Pushes the function in slot of the user value of the userdata at idx
 * and returns true; pushes nothing and returns false when that slot holds
 * no function. */
bool ll_lua_push_uv_function (lua_State *L, int idx, int slot);

/* Strict UTF-8 (the core's validator) of n bytes at s. */
bool ll_lua_utf8_valid (const char *s, size_t n);

/* The key at idx: 1..255 bytes of UTF-8 without NUL, else a Lua error
 * naming argument arg of fname; its length in *len. The string stays owned
 * by the Lua value at idx. */
const char *ll_lua_check_key (lua_State *L, int idx, const char *fname, int arg, size_t *len);

/* The prefix at idx: as ll_lua_check_key, but it may be empty. */
const char *ll_lua_check_prefix (lua_State *L, int idx, const char *fname, int arg, size_t *len);

/* opts at idx must be nil or a table whose keys are all in allowed (a
 * NULL-terminated list). */
void ll_lua_check_opts (lua_State *L, int idx, int level, const char *fname, int arg,
                        const char *const *allowed);

/* Seconds at idx as milliseconds, rounded up; kind: SECONDS_POSITIVE or
 * SECONDS_NONNEGATIVE; a refusal names argument arg of fname (level 1). */
int64_t ll_lua_check_seconds (lua_State *L, int idx, const char *fname, int arg, const char *what,
                              int kind);

/* The timeout at idx as milliseconds (SECONDS_TIMEOUT: math.huge is -1),
 * a refusal placed `level` frames up. */
int64_t ll_lua_check_timeout (lua_State *L, int idx, int level, const char *fname, int arg);

/* Reports the error on top (popped) raised by the Lua callback `what`
 * (on_lost, the log function, ...) as a warning: to leaselock.on_warning's
 * function, else Lua 5.4's warn, else stderr; not raised: a callback's
 * error must not replace what the call that ran it returns. */
void ll_lua_report_callback_error (lua_State *L, const char *what);

/* Pushes the function of the embedded chunk lua/<name>.lua, named
 * "=leaselock.<name>" in errors and tracebacks; raises if it is missing. */
void ll_lua_load_chunk (lua_State *L, const char *name);

/* Creates metatable tname: __name, the metamethods __tostring, __gc and
 * __close (each unless NULL, each a C closure over the metatable: see
 * ll_lua_check_udata_mt), __index = index_fn closed over a new table
 * of methods (also __methods, for leaselock.methods and for more
 * methods), __metatable. Leaves the stack as it was. */
void ll_lua_new_type (lua_State *L, const char *tname, const luaL_Reg *methods,
                      lua_CFunction index_fn, lua_CFunction tostring, lua_CFunction gc,
                      lua_CFunction close);

/* The userdata of type tname at idx (borrowed); raises "tname expected"
 * for anything else. */
void *ll_lua_check_udata (lua_State *L, int idx, int level, const char *fname, const char *tname);

/* ll_lua_check_udata for the hot paths: the metatable of tname is at
 * mt_idx (a C closure's upvalue), which spares the registry look-up. */
void *ll_lua_check_udata_mt (lua_State *L, int idx, int mt_idx, int level, const char *fname,
                             const char *tname);

/* ---- fields.c ------------------------------------------------------- */

/* The __index of handle type tname for the name at 2 that is neither a
 * method nor a field: raises "tname has no field or method 'name' ...",
 * placed at the Lua code that read it. Never returns. */
int ll_lua_no_field (lua_State *L, const char *tname);

/* Sets host, pid and label (unless "") in the table on top: who holds a
 * lease, as a holder and a record's holder name it. */
void ll_lua_set_holder_id (lua_State *L, const char *host, int64_t pid, const char *label);

/* Pushes holder h as a table {host, pid, label, fence, expires_in,
 * released} whose tostring is "vm pid 1 (job), fence 1, expires in 29.7s". */
void ll_lua_push_holder (lua_State *L, const leaselock_holder_t *h);

/* ll_lua_push_failure, then the holder when err names one (BUSY and
 * TIMEOUT of an acquire): nil, msg, code [, holder]; returns 3 or 4. */
int ll_lua_push_acquire_failure (lua_State *L, const leaselock_error_t *err);

/* Sets RECORD_MT on the record table on top. */
void ll_lua_set_record_mt (lua_State *L);

/* Registers HOLDER_MT, RECORD_MT and RWLOCK_MT; leaves the stack as it
 * was. */
void ll_lua_fields_setup (lua_State *L);

/* Sets leaselock.methods in the module table on top. */
void ll_lua_fields_register (lua_State *L);

/* ---- client.c ------------------------------------------------------- */

/* leaselock.connect([uri [, {label=}]]) -> client | nil, msg, code */
int ll_lua_connect (lua_State *L);

/* The client handle at idx (borrowed), open or not. */
ll_lua_client_t *ll_lua_check_client (lua_State *L, int idx, int level, const char *fname);

/* The client of the handle at idx (borrowed); raises if it is closed. */
leaselock_client_t *ll_lua_check_open_client (lua_State *L, int idx, int level, const char *fname);

/* ll_lua_check_open_client for a value known to be a client handle (a lock
 * or lease handle's UV_CLIENT): its type is not checked again. */
leaselock_client_t *ll_lua_open_client_at (lua_State *L, int idx, int level, const char *fname);

/* Registers CLIENT_MT; leaves the stack as it was. */
void ll_lua_client_setup (lua_State *L);

/* ---- lock.c --------------------------------------------------------- */

/* client:lock(key [, opts]), client:semaphore(key, opts),
 * client:rwlock(key [, opts]): new lock objects of the client at 1. */
int ll_lua_client_lock (lua_State *L);
int ll_lua_client_semaphore (lua_State *L);
int ll_lua_client_rwlock (lua_State *L);

/* The lock handle at idx (borrowed). */
ll_lua_lock_t *ll_lua_check_lock (lua_State *L, int idx, int level, const char *fname);

/* The acquire of acquire, try_acquire, with and acquire_nb's tries for
 * the lock k at 1: leaves the new lease handle on top and returns 1, or
 * pushes nil, msg, code and returns 3. timeout_ms as the core takes it. */
int ll_lua_do_acquire (lua_State *L, ll_lua_lock_t *k, int level, const char *fname,
                       int64_t timeout_ms);

/* Pushes the lease the running coroutine took through the lock at 1 (else
 * through another lock of its client on the same records) and still
 * holds and returns 1; pushes nothing and returns 0 when none. */
int ll_lua_push_my_lease (lua_State *L);

/* Remembers the lease handle on top as the running coroutine's through
 * the lock at 1 (UV_HELD, weak keys) and its client (UV_HOLDS). Leaves the
 * stack as it was. */
void ll_lua_set_my_lease (lua_State *L);

/* Whether leases of the lock k at 1 report renewal failures to Lua. */
bool ll_lua_wants_renew_failed (const ll_lua_lock_t *k);

/* Registers LOCK_MT (with lock:with and lock:acquire_nb); leaves the
 * stack as it was. */
void ll_lua_lock_setup (lua_State *L);

/* ---- lease.c -------------------------------------------------------- */

/* For the lock at 1: pushes its user value, its client handle (at
 * *client_idx; its client, borrowed, in *client) and a new lease handle,
 * closed, whose user value holds the client and the lock's callbacks.
 * Raises if the client is closed. */
ll_lua_lease_t *ll_lua_push_lease_handle (lua_State *L, int level, const char *fname,
                                          int *client_idx, leaselock_client_t **client);

/* The lease handle ls takes lease (owned by ls from now on). */
void ll_lua_lease_handle_set (ll_lua_lease_t *ls, leaselock_lease_t *lease);

/* The second half of lock:with, a C closure over LEASE_MT's metatable:
 * finish(lease, pcall's results) -> fn's results | nil, msg, code, or fn's
 * error raised again. */
int ll_lua_lease_with_finish (lua_State *L);

/* Registers LEASE_MT; leaves the stack as it was. */
void ll_lua_lease_setup (lua_State *L);

/* ---- logq.c --------------------------------------------------------- */

/* A new, empty log queue (owned by the caller; ll_lua_log_free), or NULL
 * when out of memory. */
ll_lua_log_t *ll_lua_log_new (void);

/* Frees q (NULL is fine) once no hook call can run on it. */
void ll_lua_log_free (ll_lua_log_t *q);

/* The core's log hook (any thread): queues a copy of ev in data, a
 * ll_lua_log_t. */
void ll_lua_log_hook (const leaselock_log_event_t *ev, void *data);

/* Calls the log function of the client handle at idx (UV_LOG_FN) for each
 * queued event, protected, on this thread. Leaves the stack as it was.
 * idx must hold a client handle (checked by the caller, or a UV_CLIENT). */
void ll_lua_drain_log (lua_State *L, int idx);

/* ll_lua_drain_log for the client (UV_CLIENT) of the lock or lease handle
 * at idx. */
void ll_lua_drain_from (lua_State *L, int idx);

/* A new record of renewal failures (owned by the caller; ll_lua_rf_free),
 * or NULL when out of memory. */
ll_lua_renew_failed_t *ll_lua_rf_new (void);

/* Frees rf (NULL is fine) once no hook call can run on it. */
void ll_lua_rf_free (ll_lua_renew_failed_t *rf);

/* on_renew_failed's C half (the core's renewal thread): records the
 * failure in data, a ll_lua_renew_failed_t. */
void ll_lua_rf_hook (leaselock_lease_t *lease, const leaselock_error_t *err, int64_t remaining_ms,
                     void *data);

/* Copies the last failure recorded in rf into *got and marks it reported;
 * got->pending: how many there were since the last take (0: none). */
void ll_lua_rf_take (ll_lua_renew_failed_t *rf, ll_lua_renew_failed_t *got);

/* ---- pool.c --------------------------------------------------------- */

/* Adoption normally follows parking within a turn of the event loop: 5 s
 * leaves room for a loaded worker while a dead request's key is not kept
 * long. */
#define PARKED_MAX_MS 5000

/* The registry entry of the client handle c, made on first use (it then
 * owns the client; c keeps one reference). NULL when out of memory. */
ll_shared_client_t *ll_lua_pool_share (ll_lua_client_t *c);

/* A new reference to the client registered as id whose handle is still
 * alive; NULL if there is none. */
ll_shared_client_t *ll_lua_pool_get (uint64_t id);

/* Drops a reference; the last one destroys the client. */
void ll_lua_pool_put (ll_shared_client_t *sc);

/* Parks lease and rf (both owned by the registry from now on) for sc and
 * returns their new id; or releases the lease, fills *err and returns 0
 * when nobody could adopt it (client gone or closed) or out of memory. */
uint64_t ll_lua_pool_park (ll_shared_client_t *sc, leaselock_lease_t *lease,
                           ll_lua_renew_failed_t *rf, leaselock_error_t *err);

/* Takes the lease parked as id for sc and its rf (owned by the caller
 * from now on); false if there is none: it was reaped. The caller holds a
 * reference to sc. */
bool ll_lua_pool_unpark (uint64_t id, ll_shared_client_t *sc, leaselock_lease_t **lease,
                         ll_lua_renew_failed_t **rf);

/* Destroys (releasing) the leases parked for sc (for every client when
 * sc is NULL) at least max_age_ms ago, and its waits given up, idle for
 * WAIT_IDLE_MAX_MS, or all of them when max_age_ms is 0 (a close). One
 * round trip each: never on an nginx worker's event loop. */
void ll_lua_pool_reap (ll_shared_client_t *sc, int64_t max_age_ms);

/* A wait of lock:acquire_nb (the core's leaselock_wait_t: one waiter for
 * all its tries, its claim to be next, its place in a fair queue),
 * registered under an id so that whichever thread makes a try (the
 * worker, or a pool thread) finds it. Taken out of the registry while a
 * try runs (ll_lua_pool_wait_take), so one thread at a time uses it. */
typedef struct ll_nbwait
{
   uint64_t id;
   ll_shared_client_t *sc;    /* one reference */
   leaselock_wait_t *wait;    /* owned */
   ll_lua_renew_failed_t *rf; /* owned until a lease takes it; may be NULL */
   bool one_try;              /* timeout 0: its one try ends it */
   bool given_up;             /* acquire_nb ended it: the reaper destroys it */
   int64_t used_ms;           /* monotonic: the end of its last try */
   struct ll_nbwait *next;
} ll_nbwait_t;

/* A wait unused this long is one whose request ended (nginx dropped it
 * between tries): the reaper destroys it. A live wait tries at least every
 * second (its sleeps are the core's, at most 1 s). */
#define WAIT_IDLE_MAX_MS 30000

/* Registers wait and rf (owned by the registry from now on) for sc and
 * returns their id; 0 when out of memory (both destroyed). */
uint64_t ll_lua_pool_wait_add (ll_shared_client_t *sc, leaselock_wait_t *wait,
                               ll_lua_renew_failed_t *rf, bool one_try);

/* Takes the wait id out of the registry for one try (owned by the caller
 * until ll_lua_pool_wait_back or _free); NULL when it is gone (reaped). */
ll_nbwait_t *ll_lua_pool_wait_take (uint64_t id);

/* Puts w back after a try that left it waiting. */
void ll_lua_pool_wait_back (ll_nbwait_t *w);

/* Destroys w (a wait not over leaves the key's fair queue: one round trip,
 * never on an nginx worker's event loop unless on SQLite). */
void ll_lua_pool_wait_free (ll_nbwait_t *w);

/* Marks the wait id given up, for the reaper (ll_lua_pool_reap) to
 * destroy where a round trip may block. */
void ll_lua_pool_wait_give_up (uint64_t id);

/* How many leases are parked, or about to be (tries running), and waits
 * registered: while any, the reaping timer goes on. */
size_t ll_lua_pool_parked (void);

/* The client handle c has been collected: no more parking for it, its
 * parked leases released, its reference dropped (c->shared NULL after). */
void ll_lua_pool_drop_handle (ll_lua_client_t *c);

/* ---- acquire_nb.c --------------------------------------------------- */

/* Pushes lock:acquire_nb: the Lua wait loop (acquire_nb.lua) closed over
 * its C halves. */
void ll_lua_push_acquire_nb (lua_State *L);

/* leaselock.pool's _pool_try(...) and _pool_reap(): a pool thread's side
 * of acquire_nb (require "leaselock.pool", kept out of the module table). */
int ll_lua_pool_try (lua_State *L);
int ll_lua_pool_reap_old (lua_State *L);

#endif /* LLEASELOCK_H */
