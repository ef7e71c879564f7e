/*
 * sql_postgresql.h - the PostgreSQL backend's SQL text, in one place for
 * the backend (backend_postgresql.c) and its benchmark
 * (bench/core_postgresql.c). "%1$s" is the table name; $1, $2, ... are the
 * bound parameters the comments name.
 */
#ifndef LL_SQL_POSTGRESQL_H
#define LL_SQL_POSTGRESQL_H

/* ---- schema ------------------------------------------------------------ */

/* The version the statements below create; <table>_meta records it. */
#define LL_POSTGRESQL_SCHEMA_VERSION 1

/* A missing table fails with SQLSTATE 42P01 (undefined_table). */
#define LL_POSTGRESQL_READ_VERSION "SELECT schema_version FROM \"%1$s_meta\" WHERE id = 1"
/* One transaction under an advisory lock, since PostgreSQL's CREATE TABLE
 * IF NOT EXISTS can fail when two sessions race. "%1$s" the table, "%2$d"
 * LL_POSTGRESQL_SCHEMA_VERSION. */
#define LL_POSTGRESQL_CREATE_SCHEMA                                                                \
   "BEGIN; SELECT pg_advisory_xact_lock(hashtext('leaselock schema %1$s')); "                      \
   "CREATE TABLE IF NOT EXISTS \"%1$s\" ("                                                         \
   "lock_key text COLLATE \"C\" NOT NULL PRIMARY KEY, "                                            \
   "owner text NULL, "                                                                             \
   "fence bigint NOT NULL, "                                                                       \
   "expires_at timestamptz NOT NULL, "                                                             \
   "acquired_at timestamptz NOT NULL, "                                                            \
   "holder_host text NOT NULL, "                                                                   \
   "holder_pid bigint NOT NULL, "                                                                  \
   "holder_label text NOT NULL); "                                                                 \
   "CREATE TABLE IF NOT EXISTS \"%1$s_meta\" (id int NOT NULL PRIMARY KEY, "                       \
   "schema_version int NOT NULL); "                                                                \
   "INSERT INTO \"%1$s_meta\" VALUES (1, %2$d) ON CONFLICT (id) DO NOTHING; "                      \
   "COMMIT"

/* ---- statements -------------------------------------------------------- */

/* Parameters: $1 key, $2 owner, $3 ttl (us), $4 holder host, $5 pid,
 * $6 label. Returns the fence; no row when BUSY. */
#define LL_POSTGRESQL_ACQUIRE                                                                      \
   "INSERT INTO \"%1$s\" AS l (lock_key, owner, fence, expires_at, acquired_at, holder_host, "     \
   "holder_pid, holder_label) VALUES ($1, $2, 1, clock_timestamp() + $3::bigint * "                \
   "interval '1 microsecond', clock_timestamp(), $4, $5::bigint, $6) "                             \
   "ON CONFLICT (lock_key) DO UPDATE SET owner = excluded.owner, fence = l.fence + 1, "            \
   "expires_at = clock_timestamp() + $3::bigint * interval '1 microsecond', "                      \
   "acquired_at = clock_timestamp(), holder_host = excluded.holder_host, "                         \
   "holder_pid = excluded.holder_pid, holder_label = excluded.holder_label "                       \
   "WHERE l.expires_at <= clock_timestamp() OR l.owner = excluded.owner RETURNING fence"

/* Parameters: $1 key, $2 owner, $3 ttl (us). One row when it was ours. */
#define LL_POSTGRESQL_RENEW                                                                        \
   "UPDATE \"%1$s\" SET expires_at = clock_timestamp() + $3::bigint * "                            \
   "interval '1 microsecond' WHERE lock_key = $1 AND owner = $2 AND "                              \
   "expires_at > clock_timestamp()"

/* Parameters: $1 key, $2 owner, $3 min_hold (us). One row when it was
 * ours. */
#define LL_POSTGRESQL_RELEASE                                                                      \
   "UPDATE \"%1$s\" SET owner = NULL, expires_at = GREATEST(clock_timestamp(), "                   \
   "acquired_at + $3::bigint * interval '1 microsecond') "                                         \
   "WHERE lock_key = $1 AND owner = $2"

/* The columns of a record, the time left in microseconds. */
#define LL_POSTGRESQL_COLS                                                                         \
   "lock_key, owner, fence, "                                                                      \
   "(EXTRACT(EPOCH FROM expires_at - clock_timestamp()) * 1000000)::bigint, holder_host, "         \
   "holder_pid, holder_label"

/* Parameter: $1 key. */
#define LL_POSTGRESQL_INSPECT "SELECT " LL_POSTGRESQL_COLS " FROM \"%1$s\" WHERE lock_key = $1"
/* Parameter: $1 prefix (when nothing bounds it above: see prefix_upper). */
#define LL_POSTGRESQL_LIST_FROM                                                                    \
   "SELECT " LL_POSTGRESQL_COLS " FROM \"%1$s\" WHERE lock_key >= $1 ORDER BY lock_key"
/* Parameters: $1 prefix, $2 upper bound. */
#define LL_POSTGRESQL_LIST_RANGE                                                                   \
   "SELECT " LL_POSTGRESQL_COLS " FROM \"%1$s\" WHERE lock_key >= $1 AND lock_key < $2 "           \
   "ORDER BY lock_key"

/* Parameter: $1 key. Returns whether a live lease was taken; no row when
 * the key has no record. */
#define LL_POSTGRESQL_FORCE                                                                        \
   "WITH old AS (SELECT lock_key, owner IS NOT NULL AND expires_at > "                             \
   "clock_timestamp() AS live FROM \"%1$s\" WHERE lock_key = $1 FOR UPDATE) "                      \
   "UPDATE \"%1$s\" AS l SET owner = NULL, expires_at = LEAST(l.expires_at, "                      \
   "clock_timestamp()) FROM old WHERE l.lock_key = old.lock_key RETURNING old.live"

/* prune: the records under a prefix expired at least older_than ago by
 * clock_timestamp(). Parameters: $1 prefix, $2 older_than (us); the range
 * form $3 the upper bound. */
#define LL_POSTGRESQL_PRUNE_FROM                                                                   \
   "DELETE FROM \"%1$s\" WHERE lock_key >= $1 AND expires_at <= clock_timestamp() - "              \
   "$2::bigint * interval '1 microsecond'"
#define LL_POSTGRESQL_PRUNE_RANGE LL_POSTGRESQL_PRUNE_FROM " AND lock_key < $3"

/* The backend's statement table (ll_sql_st_t, ll_internal.h). */
#define LL_POSTGRESQL_STATEMENTS                                                                   \
   {                                                                                               \
      [LL_SQL_ACQUIRE] = LL_POSTGRESQL_ACQUIRE, [LL_SQL_RENEW] = LL_POSTGRESQL_RENEW,              \
      [LL_SQL_RELEASE] = LL_POSTGRESQL_RELEASE, [LL_SQL_INSPECT] = LL_POSTGRESQL_INSPECT,          \
      [LL_SQL_LIST_FROM] = LL_POSTGRESQL_LIST_FROM,                                                \
      [LL_SQL_LIST_RANGE] = LL_POSTGRESQL_LIST_RANGE, [LL_SQL_FORCE] = LL_POSTGRESQL_FORCE,        \
      [LL_SQL_PRUNE_FROM] = LL_POSTGRESQL_PRUNE_FROM,                                              \
      [LL_SQL_PRUNE_RANGE] = LL_POSTGRESQL_PRUNE_RANGE,                                            \
   }

#endif /* LL_SQL_POSTGRESQL_H */
