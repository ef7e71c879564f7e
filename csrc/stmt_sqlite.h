/*
 * stmt_sqlite.h - the SQLite backend's statement text (stmt_sqlite.c):
 * what backend_sqlite.c prepares, which bench/core_sqlite.c's bare sqlite3
 * program prepares too, linked through libleaselock.a (so the benchmark
 * compares the engine with the very same statements). backend_sqlite.c
 * says what each does and why. All of it is static storage: nobody frees
 * it.
 *
 * Schema (PRAGMA user_version = LL_SQLITE_SCHEMA_VERSION):
 *
 *   leaselock_locks(key TEXT PRIMARY KEY, owner TEXT -- '' when released,
 *                   fence INTEGER, acquired_at INTEGER, expires_at INTEGER,
 *                   host TEXT, pid INTEGER, label TEXT,
 *                   next_owner TEXT, next_until INTEGER, next_since INTEGER
 *                   -- the next owner's reservation, NULL when none
 *                   holds INTEGER -- its owner's reentrant holds (1)
 *                   ) WITHOUT ROWID
 *   leaselock_queue(key TEXT, owner TEXT, arrived INTEGER,
 *                   alive_until INTEGER, PRIMARY KEY (key, owner))
 *                   WITHOUT ROWID -- the fair mode's waiters, with the
 *                   index leaselock_queue_order (key, arrived, owner)
 *
 * Times are milliseconds since the epoch by the SQLite clock. Version 2
 * added the next_* columns; backend_sqlite.c's ll_sqlite_migrate() adds them to a
 * version-1 file (ll_sqlite_migrate_1_2). Version 3 added the queue table
 * (ll_sqlite_create_queue, run on every file older than 3). Version 4
 * added the holds column (ll_sqlite_migrate_to_4, on files of versions 1
 * to 3).
 */
#ifndef LL_STMT_SQLITE_H
#define LL_STMT_SQLITE_H

/* The schema version this code writes and understands. A later version
 * adds a step in backend_sqlite.c's ll_sqlite_migrate() and bumps this (and
 * ll_sqlite_set_version). */
#define LL_SQLITE_SCHEMA_VERSION 4

#define LL_SQLITE_DEFAULT_BUSY_TIMEOUT_MS 10000

/* The statements a connection prepares, one per step of an operation
 * (force_release and queue_join run theirs inside BEGIN IMMEDIATE ...
 * COMMIT); their parameters are listed in stmt_sqlite.c. */
typedef enum ll_sqlite_st
{
   LL_SQLITE_ST_ACQUIRE,
   LL_SQLITE_ST_RENEW,
   LL_SQLITE_ST_RELEASE,
   LL_SQLITE_ST_INSPECT,
   LL_SQLITE_ST_LIST,
   LL_SQLITE_ST_BEGIN,
   LL_SQLITE_ST_FORCE_LIVE,
   LL_SQLITE_ST_FORCE_ANY,
   LL_SQLITE_ST_COMMIT,
   LL_SQLITE_ST_ROLLBACK,
   LL_SQLITE_ST_PRUNE,
   LL_SQLITE_ST_QUEUE_JOIN,
   LL_SQLITE_ST_QUEUE_AHEAD,
   LL_SQLITE_ST_QUEUE_LEAVE,
   LL_SQLITE_ST_QUEUE_PRUNE,
   LL_SQLITE_ST_HOLD,
   LL_SQLITE_ST_ACQUIRE_FAIR,
   LL_SQLITE_ST_TAKE,      /* LL_SQLITE_ST_ACQUIRE without a claim: ?1 to ?6 */
   LL_SQLITE_ST_TAKE_FAIR, /* LL_SQLITE_ST_ACQUIRE_FAIR without a claim */
   LL_SQLITE_ST_COUNT
} ll_sqlite_st_t;

/* The text of each ll_sqlite_st_t. */
extern const char *const ll_sqlite_statements[LL_SQLITE_ST_COUNT];

/* The connection's settings, in this order, after the busy timeout. */
extern const char ll_sqlite_wal[];
extern const char ll_sqlite_synchronous[];

/* The schema: a new file's records table, the migrations (1 -> 2: the
 * reservation's columns, several statements; 1..3 -> 4: the hold count),
 * the queue table and its index (several statements; a new file and every
 * file older than 3), and the version recorded last. */
extern const char ll_sqlite_create[];
extern const char ll_sqlite_migrate_1_2[];
extern const char ll_sqlite_migrate_to_4[];
extern const char ll_sqlite_create_queue[];
extern const char ll_sqlite_set_version[];

#endif /* LL_STMT_SQLITE_H */
