/*
 * stmt_sqlite.c - the SQLite backend's statement text, compiled once for
 * the backend and its benchmark (stmt_sqlite.h). The text is written as
 * macros, joined into the strings and the table stmt_sqlite.h declares.
 */
#include "stmt_sqlite.h"

#include <assert.h>

#define LL_SQLITE_SET_VERSION "PRAGMA user_version = 4"

/* The connection's settings, in this order, after the busy timeout. */
#define LL_SQLITE_WAL "PRAGMA journal_mode=WAL"
#define LL_SQLITE_SYNCHRONOUS "PRAGMA synchronous=NORMAL"

/* SQLite's clock in integer milliseconds since the Unix epoch.
 * julianday() is a double of day units: ROUND undoes its binary fraction
 * so the value is the exact millisecond SQLite keeps internally. */
#define LL_SQLITE_NOW_MS "CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)"

#define LL_SQLITE_CREATE                                                                           \
   "CREATE TABLE IF NOT EXISTS leaselock_locks ("                                                  \
   " key TEXT NOT NULL PRIMARY KEY,"                                                               \
   " owner TEXT NOT NULL DEFAULT '',"                                                              \
   " fence INTEGER NOT NULL,"                                                                      \
   " acquired_at INTEGER NOT NULL,"                                                                \
   " expires_at INTEGER NOT NULL,"                                                                 \
   " host TEXT NOT NULL DEFAULT '',"                                                               \
   " pid INTEGER NOT NULL DEFAULT 0,"                                                              \
   " label TEXT NOT NULL DEFAULT '',"                                                              \
   " next_owner TEXT NULL,"                                                                        \
   " next_until INTEGER NULL,"                                                                     \
   " next_since INTEGER NULL,"                                                                     \
   " holds INTEGER NOT NULL DEFAULT 1"                                                             \
   ") WITHOUT ROWID"

/* Versions 1 to 3, to 4: the reentrant hold count. */
#define LL_SQLITE_MIGRATE_TO_4                                                                     \
   "ALTER TABLE leaselock_locks ADD COLUMN holds INTEGER NOT NULL DEFAULT 1"

/* Version 1 to 2: the reservation's columns (SQLite adds one column per
 * statement). */
#define LL_SQLITE_MIGRATE_1_2                                                                      \
   "ALTER TABLE leaselock_locks ADD COLUMN next_owner TEXT NULL; "                                 \
   "ALTER TABLE leaselock_locks ADD COLUMN next_until INTEGER NULL; "                              \
   "ALTER TABLE leaselock_locks ADD COLUMN next_since INTEGER NULL"

/* acquire and acquire_wait: one statement. In the update arm the bare
 * column names are the old row's and "now" is excluded.acquired_at (one
 * julianday('now') within the step anyway). Whether the old row is ours
 * to take: ours already (a retry), or expired and its reservation free
 * (none, or run out) or ours. */
#define LL_SQLITE_TAKE                                                                             \
   "(owner = excluded.owner OR (expires_at <= excluded.acquired_at AND"                            \
   " (next_owner IS NULL OR next_until <= excluded.acquired_at OR next_owner = excluded.owner)))"
/* Whether a waiter (?7 reserve not NULL) claims the reservation: free,
 * already its own, or held by a waiter that began waiting later than now
 * - ?8 (waited). */
#define LL_SQLITE_CLAIM                                                                            \
   "(?7 IS NOT NULL AND (next_owner IS NULL OR next_until <= excluded.acquired_at"                 \
   " OR next_owner = excluded.owner OR next_since > excluded.acquired_at - ?8))"
/* Each column's new value: CASE WHEN <take> THEN <taken> ELSE <kept or
 * claimed> END. */
#define LL_SQLITE_IF_TAKE "CASE WHEN " LL_SQLITE_TAKE " THEN "

/* ?1 key, ?2 owner, ?3 ttl_ms, ?4 host, ?5 pid, ?6 label, ?7 reserve_ms
 * (NULL for acquire: it never reserves), ?8 waited_ms (NULL for acquire).
 * A new key is inserted; an existing record is updated either as a take
 * (owner, fence + 1, times, holder; reservation cleared) or, when the take
 * is refused and ?7 is given, as a claim of the reservation alone;
 * neither: no row. Returns the fence, the reservation's owner, NULL
 * unless a claim left one (no row, or a reservation, means BUSY), and the
 * record's time left (ms). (Not
 * "next_owner IS NOT NULL": SQLite 3.40 answers 1 for a NULL column of a
 * WITHOUT ROWID table in RETURNING.) */
#define LL_SQLITE_INSERT                                                                           \
   "INSERT INTO leaselock_locks (key, owner, fence, acquired_at, expires_at, host, pid, label)"
#define LL_SQLITE_NEW_ROW "?1, ?2, 1, " LL_SQLITE_NOW_MS ", " LL_SQLITE_NOW_MS " + ?3, ?4, ?5, ?6"
#define LL_SQLITE_ACQUIRE LL_SQLITE_INSERT " VALUES (" LL_SQLITE_NEW_ROW ")" LL_SQLITE_UPSERT
#define LL_SQLITE_UPSERT                                                                           \
   " ON CONFLICT (key) DO UPDATE SET"                                                              \
   " owner = " LL_SQLITE_IF_TAKE "excluded.owner ELSE owner END,"                                  \
   " fence = " LL_SQLITE_IF_TAKE "fence + 1 ELSE fence END,"                                       \
   " acquired_at = " LL_SQLITE_IF_TAKE "excluded.acquired_at ELSE acquired_at END,"                \
   " expires_at = " LL_SQLITE_IF_TAKE "excluded.expires_at ELSE expires_at END,"                   \
   " host = " LL_SQLITE_IF_TAKE "excluded.host ELSE host END,"                                     \
   " pid = " LL_SQLITE_IF_TAKE "excluded.pid ELSE pid END,"                                        \
   " label = " LL_SQLITE_IF_TAKE "excluded.label ELSE label END,"                                  \
   " holds = " LL_SQLITE_IF_TAKE "1 ELSE holds END,"                                               \
   " next_owner = " LL_SQLITE_IF_TAKE "NULL ELSE excluded.owner END,"                              \
   " next_until = " LL_SQLITE_IF_TAKE "NULL ELSE excluded.acquired_at + ?7 END,"                   \
   " next_since = " LL_SQLITE_IF_TAKE "NULL ELSE excluded.acquired_at - ?8 END"                    \
   " WHERE " LL_SQLITE_TAKE " OR " LL_SQLITE_CLAIM                                                 \
   " RETURNING fence, next_owner, expires_at - " LL_SQLITE_NOW_MS

/* A take without a claim (ll_take_t's reserve_ms < 0, every one-try
 * acquire): LL_SQLITE_ACQUIRE with ?7 NULL, where the claim is never true,
 * written with the take's condition once instead of in every column's
 * CASE. The same row back (a take: a fence and no reservation) or none
 * (BUSY); preparing it costs a fifth of LL_SQLITE_ACQUIRE's (a cron run's
 * process prepares it each time). ?1 to ?6 as for LL_SQLITE_ACQUIRE. */
#define LL_SQLITE_TAKE_UPSERT                                                                      \
   " ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, fence = fence + 1,"                   \
   " acquired_at = excluded.acquired_at, expires_at = excluded.expires_at, host = excluded.host,"  \
   " pid = excluded.pid, label = excluded.label, holds = 1, next_owner = NULL,"                    \
   " next_until = NULL, next_since = NULL"                                                         \
   " WHERE " LL_SQLITE_TAKE " RETURNING fence, next_owner, expires_at - " LL_SQLITE_NOW_MS
#define LL_SQLITE_TAKE_ONLY LL_SQLITE_INSERT " VALUES (" LL_SQLITE_NEW_ROW ")" LL_SQLITE_TAKE_UPSERT

/* A fair acquire's first try (ll_take_t's fair): LL_SQLITE_ACQUIRE whose
 * new row's key is NULL while the key's fair queue has a live entry of
 * another owner; INSERT OR IGNORE then skips the row (the key is NOT
 * NULL), so nothing is inserted or taken (no row back: BUSY) while one
 * waits, a key without a record too. Same parameters, ?7 and ?8 NULL.
 * (A VALUES row, not INSERT ... SELECT: SQLite runs a RETURNING clause as
 * a trigger, which makes an INSERT ... SELECT fill a temporary table
 * first, a pager made and freed on every call; where that memory sat at
 * the top of the heap, each free gave it back to the system and each
 * call faulted it in again, which halved the fair first try's speed.) */
#define LL_SQLITE_NEW_ROW_FAIR                                                                     \
   "CASE WHEN EXISTS (SELECT 1 FROM leaselock_queue q WHERE q.key = ?1 AND q.owner <> ?2 AND"      \
   " q.alive_until > " LL_SQLITE_NOW_MS ") THEN NULL ELSE ?1 END, ?2, 1, " LL_SQLITE_NOW_MS        \
   ", " LL_SQLITE_NOW_MS " + ?3, ?4, ?5, ?6"
#define LL_SQLITE_INSERT_FAIR                                                                      \
   "INSERT OR IGNORE INTO leaselock_locks (key, owner, fence, acquired_at, expires_at, host, pid," \
   " label) VALUES (" LL_SQLITE_NEW_ROW_FAIR ")"
#define LL_SQLITE_ACQUIRE_FAIR LL_SQLITE_INSERT_FAIR LL_SQLITE_UPSERT
/* The same without a claim, as LL_SQLITE_TAKE_ONLY: ?1 to ?6. */
#define LL_SQLITE_TAKE_ONLY_FAIR LL_SQLITE_INSERT_FAIR LL_SQLITE_TAKE_UPSERT

/* ?1 key, ?2 owner, ?3 ttl_ms */
#define LL_SQLITE_RENEW                                                                            \
   "UPDATE leaselock_locks SET expires_at = " LL_SQLITE_NOW_MS " + ?3"                             \
   " WHERE key = ?1 AND owner = ?2 AND expires_at > " LL_SQLITE_NOW_MS

/* ?1 key, ?2 owner, ?3 min_hold_ms. A row when it was ours: the time its
 * reservation has left (NULL or <= 0: none live), and 1 when the key's
 * fair queue has a live entry (else NULL): a waiter to wake, or none. */
#define LL_SQLITE_RELEASE                                                                          \
   "UPDATE leaselock_locks SET owner = '', expires_at = MAX(" LL_SQLITE_NOW_MS                     \
   ", acquired_at + ?3)"                                                                           \
   " WHERE key = ?1 AND owner = ?2 RETURNING next_until - " LL_SQLITE_NOW_MS                       \
   ", (SELECT 1 FROM leaselock_queue q WHERE q.key = ?1 AND q.alive_until > " LL_SQLITE_NOW_MS     \
   " LIMIT 1)"

/* ?1 key, ?2 owner, ?3 delta: the owner's hold count moves by delta,
 * never below 1, while the lease is live. */
#define LL_SQLITE_HOLD                                                                             \
   "UPDATE leaselock_locks SET holds = MAX(1, holds + ?3)"                                         \
   " WHERE key = ?1 AND owner = ?2 AND expires_at > " LL_SQLITE_NOW_MS " RETURNING holds"

/* The record, then who waits: the live reservation's owner, the key's
 * live fair queue entries, and how long the owner has held it. */
#define LL_SQLITE_RECORD_COLUMNS                                                                   \
   "key, owner, fence, expires_at - " LL_SQLITE_NOW_MS ", host, pid, label, holds,"                \
   " CASE WHEN next_until > " LL_SQLITE_NOW_MS " THEN next_owner END,"                             \
   " (SELECT count(*) FROM leaselock_queue q WHERE q.key = leaselock_locks.key"                    \
   " AND q.alive_until > " LL_SQLITE_NOW_MS "), " LL_SQLITE_NOW_MS " - acquired_at"

/* ?1 key */
#define LL_SQLITE_INSPECT "SELECT " LL_SQLITE_RECORD_COLUMNS " FROM leaselock_locks WHERE key = ?1"

/* ?1 prefix, ?2 the first string after every string with that prefix. */
#define LL_SQLITE_LIST                                                                             \
   "SELECT " LL_SQLITE_RECORD_COLUMNS " FROM leaselock_locks"                                      \
   " WHERE key >= ?1 AND key < ?2 ORDER BY key"

/* force_release, inside BEGIN IMMEDIATE: first the live case (changes()
 * tells whether a live lease was taken), then any record. ?1 key */
#define LL_SQLITE_FORCE_LIVE                                                                       \
   "UPDATE leaselock_locks SET owner = '', expires_at = " LL_SQLITE_NOW_MS                         \
   " WHERE key = ?1 AND owner <> '' AND expires_at > " LL_SQLITE_NOW_MS
#define LL_SQLITE_FORCE_ANY                                                                        \
   "UPDATE leaselock_locks SET owner = '', expires_at = MIN(expires_at, " LL_SQLITE_NOW_MS ")"     \
   " WHERE key = ?1"

/* prune: the expired records under a prefix, but not one whose
 * reservation is live (a waiter would lose its turn). ?1 prefix, ?2 the
 * first string after every string with that prefix (as for list), ?3
 * older_than (ms): expired at least that long ago by the same clock
 * acquire uses. */
#define LL_SQLITE_PRUNE                                                                            \
   "DELETE FROM leaselock_locks WHERE key >= ?1 AND key < ?2"                                      \
   " AND expires_at <= " LL_SQLITE_NOW_MS " - ?3"                                                  \
   " AND (next_owner IS NULL OR next_until <= " LL_SQLITE_NOW_MS ")"

/* ---- the fair mode's queue (schema version 3) --------------------------- */

/* The queue of waiters, beside the records: one entry per (key, owner),
 * live while alive_until > now. Created on a new file and on every file
 * older than version 3. */
#define LL_SQLITE_CREATE_QUEUE                                                                     \
   "CREATE TABLE IF NOT EXISTS leaselock_queue ("                                                  \
   " key TEXT NOT NULL,"                                                                           \
   " owner TEXT NOT NULL,"                                                                         \
   " arrived INTEGER NOT NULL,"                                                                    \
   " alive_until INTEGER NOT NULL,"                                                                \
   " PRIMARY KEY (key, owner)"                                                                     \
   ") WITHOUT ROWID; "                                                                             \
   "CREATE INDEX IF NOT EXISTS leaselock_queue_order ON leaselock_queue (key, arrived, owner)"

/* queue_join's first statement, inside BEGIN IMMEDIATE: ?1 key, ?2 owner,
 * ?3 keep_ms. A new entry arrives now, or 1 ms after the key's latest live
 * arrival when the clock reads no later (two joins in one millisecond, or
 * a clock stepped back): arrivals then follow the order in which the
 * write lock admitted the joins, so every count below is exact. A live
 * entry keeps its arrival (in the update arm, excluded.alive_until - ?3 is
 * now); one that ran out arrives again. */
#define LL_SQLITE_QUEUE_JOIN                                                                       \
   "INSERT INTO leaselock_queue (key, owner, arrived, alive_until)"                                \
   " VALUES (?1, ?2, MAX(" LL_SQLITE_NOW_MS ", IFNULL((SELECT MAX(arrived) + 1"                    \
   " FROM leaselock_queue WHERE key = ?1 AND alive_until > " LL_SQLITE_NOW_MS "), 0)),"            \
   " " LL_SQLITE_NOW_MS " + ?3)"                                                                   \
   " ON CONFLICT (key, owner) DO UPDATE SET"                                                       \
   " arrived = CASE WHEN alive_until > excluded.alive_until - ?3 THEN arrived"                     \
   " ELSE excluded.arrived END,"                                                                   \
   " alive_until = excluded.alive_until"

/* queue_join's second statement, in the same transaction: ?1 key, ?2
 * owner. The live entries of the key ordered before owner's (arrived,
 * owner). */
#define LL_SQLITE_QUEUE_AHEAD                                                                      \
   "SELECT count(*) FROM leaselock_queue q, leaselock_queue me"                                    \
   " WHERE me.key = ?1 AND me.owner = ?2 AND q.key = ?1"                                           \
   " AND q.alive_until > " LL_SQLITE_NOW_MS                                                        \
   " AND (q.arrived < me.arrived OR (q.arrived = me.arrived AND q.owner < ?2))"

/* queue_leave: ?1 key, ?2 owner. */
#define LL_SQLITE_QUEUE_LEAVE "DELETE FROM leaselock_queue WHERE key = ?1 AND owner = ?2"

/* prune's second statement: the queue entries under the prefix that ran
 * out at least older_than ago (the same test as the records' expiry);
 * never a live one. ?1 prefix, ?2 its upper bound, ?3 older_than (ms). */
#define LL_SQLITE_QUEUE_PRUNE                                                                      \
   "DELETE FROM leaselock_queue WHERE key >= ?1 AND key < ?2"                                      \
   " AND alive_until <= " LL_SQLITE_NOW_MS " - ?3"

static_assert (LL_SQLITE_SCHEMA_VERSION == 4, "LL_SQLITE_SET_VERSION records the version");

/* In ll_sqlite_st_t's order. */
const char *const ll_sqlite_statements[] = {
   LL_SQLITE_ACQUIRE,
   LL_SQLITE_RENEW,
   LL_SQLITE_RELEASE,
   LL_SQLITE_INSPECT,
   LL_SQLITE_LIST,
   "BEGIN IMMEDIATE",
   LL_SQLITE_FORCE_LIVE,
   LL_SQLITE_FORCE_ANY,
   "COMMIT",
   "ROLLBACK",
   LL_SQLITE_PRUNE,
   LL_SQLITE_QUEUE_JOIN,
   LL_SQLITE_QUEUE_AHEAD,
   LL_SQLITE_QUEUE_LEAVE,
   LL_SQLITE_QUEUE_PRUNE,
   LL_SQLITE_HOLD,
   LL_SQLITE_ACQUIRE_FAIR,
   LL_SQLITE_TAKE_ONLY,
   LL_SQLITE_TAKE_ONLY_FAIR,
};
static_assert (sizeof ll_sqlite_statements / sizeof ll_sqlite_statements[0] == LL_SQLITE_ST_COUNT,
               "a statement per ll_sqlite_st_t");

const char ll_sqlite_wal[] = LL_SQLITE_WAL;
const char ll_sqlite_synchronous[] = LL_SQLITE_SYNCHRONOUS;
const char ll_sqlite_create[] = LL_SQLITE_CREATE;
const char ll_sqlite_migrate_1_2[] = LL_SQLITE_MIGRATE_1_2;
const char ll_sqlite_migrate_to_4[] = LL_SQLITE_MIGRATE_TO_4;
const char ll_sqlite_create_queue[] = LL_SQLITE_CREATE_QUEUE;
const char ll_sqlite_set_version[] = LL_SQLITE_SET_VERSION;
