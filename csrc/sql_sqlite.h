/*
 * sql_sqlite.h - the SQLite backend's statement text, written once: what
 * backend_sqlite.c prepares, which bench/core_sqlite.c's bare sqlite3
 * program prepares too (so the benchmark compares the engine with the
 * very same statements). backend_sqlite.c says what each does and why.
 *
 * Schema (PRAGMA user_version = LL_SQLITE_SCHEMA_VERSION):
 *
 *   leaselock_locks(key TEXT PRIMARY KEY, owner TEXT -- '' when released,
 *                   fence INTEGER, acquired_at INTEGER, expires_at INTEGER,
 *                   host TEXT, pid INTEGER, label TEXT) WITHOUT ROWID
 *
 * Times are milliseconds since the epoch by the SQLite clock.
 */
#ifndef LL_SQL_SQLITE_H
#define LL_SQL_SQLITE_H

/* The schema version this code writes and understands. A later version
 * adds a step in backend_sqlite.c's migrate() and bumps this. */
#define LL_SQLITE_SCHEMA_VERSION 1
#define LL_SQLITE_SET_VERSION "PRAGMA user_version = 1"

#define LL_SQLITE_DEFAULT_BUSY_TIMEOUT_MS 10000

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
   " label TEXT NOT NULL DEFAULT ''"                                                               \
   ") WITHOUT ROWID"

/* ?1 key, ?2 owner, ?3 ttl_ms, ?4 host, ?5 pid, ?6 label. The update arm
 * runs only when the record is expired (by the same "now") or already
 * ours; otherwise no row comes back: BUSY. */
#define LL_SQLITE_ACQUIRE                                                                          \
   "INSERT INTO leaselock_locks (key, owner, fence, acquired_at, expires_at, host, pid, label)"    \
   " VALUES (?1, ?2, 1, " LL_SQLITE_NOW_MS ", " LL_SQLITE_NOW_MS " + ?3, ?4, ?5, ?6)"              \
   " ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, fence = fence + 1,"                   \
   " acquired_at = excluded.acquired_at, expires_at = excluded.expires_at,"                        \
   " host = excluded.host, pid = excluded.pid, label = excluded.label"                             \
   " WHERE expires_at <= excluded.acquired_at OR owner = excluded.owner"                           \
   " RETURNING fence"

/* ?1 key, ?2 owner, ?3 ttl_ms */
#define LL_SQLITE_RENEW                                                                            \
   "UPDATE leaselock_locks SET expires_at = " LL_SQLITE_NOW_MS " + ?3"                             \
   " WHERE key = ?1 AND owner = ?2 AND expires_at > " LL_SQLITE_NOW_MS

/* ?1 key, ?2 owner, ?3 min_hold_ms */
#define LL_SQLITE_RELEASE                                                                          \
   "UPDATE leaselock_locks SET owner = '', expires_at = MAX(" LL_SQLITE_NOW_MS                     \
   ", acquired_at + ?3)"                                                                           \
   " WHERE key = ?1 AND owner = ?2"

#define LL_SQLITE_RECORD_COLUMNS                                                                   \
   "key, owner, fence, expires_at - " LL_SQLITE_NOW_MS ", host, pid, label"

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

/* prune: the expired records under a prefix. ?1 prefix, ?2 the first
 * string after every string with that prefix (as for list), ?3 older_than
 * (ms): expired at least that long ago by the same clock acquire uses. */
#define LL_SQLITE_PRUNE                                                                            \
   "DELETE FROM leaselock_locks WHERE key >= ?1 AND key < ?2"                                      \
   " AND expires_at <= " LL_SQLITE_NOW_MS " - ?3"

#endif /* LL_SQL_SQLITE_H */
