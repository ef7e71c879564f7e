/*
 * stmt_postgresql.c - the PostgreSQL backend's SQL text, compiled once for
 * the backend (backend_postgresql.c) and its benchmark
 * (bench/core_postgresql.c, through libleaselock.a). The text is written
 * as macros, joined into the tables stmt_postgresql.h declares. "%1$s" is
 * the table name; $1, $2, ... are the bound parameters the comments name.
 */
#include "stmt_postgresql.h"

#include <assert.h>

/* ---- schema ------------------------------------------------------------ */

/* The queue of waiters (version 3), inside LL_POSTGRESQL_CREATE_SCHEMA. */
#define LL_POSTGRESQL_CREATE_QUEUE                                                                 \
   "CREATE TABLE IF NOT EXISTS \"%1$s_queue\" ("                                                   \
   "lock_key text COLLATE \"C\" NOT NULL, "                                                        \
   "owner text COLLATE \"C\" NOT NULL, "                                                           \
   "arrived timestamptz NOT NULL, "                                                                \
   "alive_until timestamptz NOT NULL, "                                                            \
   "PRIMARY KEY (lock_key, owner)); "                                                              \
   "CREATE INDEX IF NOT EXISTS \"%1$s_queue_order\" ON \"%1$s_queue\" (lock_key, arrived, "        \
   "owner); "

/* The meta record's failover columns (version 5), inside
 * LL_POSTGRESQL_CREATE_SCHEMA: the primary last recorded, the fence
 * floor, the end of the lock-delay, the longest TTL. */
#define LL_POSTGRESQL_META_FAILOVER                                                                \
   "ALTER TABLE \"%1$s_meta\" ADD COLUMN IF NOT EXISTS primary_id text NULL, "                     \
   "ADD COLUMN IF NOT EXISTS fence_floor bigint NOT NULL DEFAULT 0, "                              \
   "ADD COLUMN IF NOT EXISTS grants_after timestamptz NULL, "                                      \
   "ADD COLUMN IF NOT EXISTS max_ttl_ms bigint NOT NULL DEFAULT 60000; "

static_assert (LL_DEFAULT_MAX_TTL_MS == 60000, "LL_POSTGRESQL_META_FAILOVER's default");

/* This primary's identity: the cluster's system identifier (a copy made
 * by pg_basebackup shares it) and the timeline it writes (a promotion
 * starts a new one; pg_control_checkpoint's lags until a checkpoint). */
#define LL_POSTGRESQL_PRIMARY_ID                                                                   \
   "(SELECT system_identifier FROM pg_control_system())::text || '/' || "                          \
   "substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8)"
/* Whether the meta record m names a primary other than s.id. */
#define LL_POSTGRESQL_OTHER_PRIMARY "(m.primary_id IS NOT NULL AND m.primary_id <> s.id)"
/* The update always writes the record, so that its RETURNING gives the
 * latest values even when another session recorded this primary first
 * (a plain read would see the statement's older snapshot). The first
 * primary recorded (none yet: a new table) sets max_ttl from the URI;
 * later the URI can only raise it, since leases granted under the old
 * bound may still be live. is_new: this statement set the lock-delay. */
/* synchronous_commit, synchronous_standby_names, standbys in sync,
 * standbys: the columns check_primary and read_durability end with. */
#define LL_POSTGRESQL_DURABILITY                                                                   \
   "current_setting('synchronous_commit'), current_setting('synchronous_standby_names'), "         \
   "(SELECT count(*) FROM pg_stat_replication WHERE sync_state IN ('sync', 'quorum')), "           \
   "(SELECT count(*) FROM pg_stat_replication)"
#define LL_POSTGRESQL_CHECK_PRIMARY                                                                \
   "WITH s AS (SELECT " LL_POSTGRESQL_PRIMARY_ID " AS id, clock_timestamp() AS t), "               \
   "u AS (UPDATE \"%1$s_meta\" m SET "                                                             \
   "max_ttl_ms = CASE WHEN m.primary_id IS NULL AND %2$lld > 0 THEN %2$lld "                       \
   "ELSE GREATEST(m.max_ttl_ms, %2$lld) END, "                                                     \
   "fence_floor = CASE WHEN " LL_POSTGRESQL_OTHER_PRIMARY " THEN GREATEST(m.fence_floor + 1, "     \
   "(EXTRACT(EPOCH FROM s.t) * 1000000)::bigint) ELSE m.fence_floor END, "                         \
   "grants_after = CASE WHEN " LL_POSTGRESQL_OTHER_PRIMARY " THEN s.t + GREATEST(m.max_ttl_ms, "   \
   "%2$lld) * interval '1 millisecond' ELSE m.grants_after END, "                                  \
   "primary_id = s.id FROM s WHERE m.id = 1 RETURNING m.fence_floor, m.grants_after, "             \
   "m.max_ttl_ms, m.primary_id, m.grants_after IS NOT DISTINCT FROM s.t + m.max_ttl_ms * "         \
   "interval '1 millisecond' AS is_new) "                                                          \
   "SELECT u.fence_floor, GREATEST(0, (EXTRACT(EPOCH FROM u.grants_after - clock_timestamp()) "    \
   "* 1000000)::bigint), u.max_ttl_ms, u.primary_id, u.is_new, " LL_POSTGRESQL_DURABILITY          \
   " FROM u"
/* Durability alone, read before check_primary's write: that write waits
 * for a synchronous standby, and when none confirms it the error can say
 * so. */
#define LL_POSTGRESQL_READ_DURABILITY "SELECT " LL_POSTGRESQL_DURABILITY

/* A missing table fails with SQLSTATE 42P01 (undefined_table). */
#define LL_POSTGRESQL_READ_VERSION "SELECT schema_version FROM \"%1$s_meta\" WHERE id = 1"
/* Creates the tables, or brings a table of versions 1 to 3 to this
 * version: one transaction under an advisory lock, since PostgreSQL's
 * CREATE TABLE IF NOT EXISTS can fail when two sessions race. The ALTER adds only the
 * columns that are missing (none on a table this text just created), and
 * the version is recorded, or raised from an older one, never lowered.
 * "%1$s" the table, "%2$d" LL_POSTGRESQL_SCHEMA_VERSION. */
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
   "holder_label text NOT NULL, "                                                                  \
   "next_owner text NULL, "                                                                        \
   "next_until timestamptz NULL, "                                                                 \
   "next_since timestamptz NULL, "                                                                 \
   "holds int NOT NULL DEFAULT 1); "                                                               \
   "ALTER TABLE \"%1$s\" ADD COLUMN IF NOT EXISTS next_owner text NULL, "                          \
   "ADD COLUMN IF NOT EXISTS next_until timestamptz NULL, "                                        \
   "ADD COLUMN IF NOT EXISTS next_since timestamptz NULL, "                                        \
   "ADD COLUMN IF NOT EXISTS holds int NOT NULL DEFAULT 1; " LL_POSTGRESQL_CREATE_QUEUE            \
   "CREATE TABLE IF NOT EXISTS \"%1$s_meta\" (id int NOT NULL PRIMARY KEY, "                       \
   "schema_version int NOT NULL); " LL_POSTGRESQL_META_FAILOVER                                    \
   "INSERT INTO \"%1$s_meta\" AS m VALUES (1, %2$d) ON CONFLICT (id) DO UPDATE "                   \
   "SET schema_version = excluded.schema_version "                                                 \
   "WHERE m.schema_version < excluded.schema_version; "                                            \
   "COMMIT"

/* ---- statements -------------------------------------------------------- */

/* acquire and acquire_wait: one statement. "Now" is read once, as the
 * proposed row's acquired_at (clock_timestamp() moves between calls), and
 * the update judges everything by it: excluded.acquired_at. */
#define LL_POSTGRESQL_NOW "excluded.acquired_at"
/* Whether the old row l is ours to take: ours already (a retry), or
 * expired and its reservation free (none, or run out) or ours. */
#define LL_POSTGRESQL_TAKE                                                                         \
   "(l.owner = excluded.owner OR (l.expires_at <= " LL_POSTGRESQL_NOW " AND "                      \
   "(l.next_owner IS NULL OR l.next_until <= " LL_POSTGRESQL_NOW " OR "                            \
   "l.next_owner = excluded.owner)))"
/* Whether a waiter ($7 reserve not NULL) claims the reservation: free,
 * already its own, or held by a waiter that began waiting later than
 * now - $8 (waited). */
#define LL_POSTGRESQL_CLAIM                                                                        \
   "($7::bigint IS NOT NULL AND (l.next_owner IS NULL OR l.next_until <= " LL_POSTGRESQL_NOW       \
   " OR l.next_owner = excluded.owner OR l.next_since > " LL_POSTGRESQL_NOW                        \
   " - $8::bigint * interval '1 microsecond'))"
/* Each column's new value: CASE WHEN <take> THEN <taken> ELSE <kept or
 * claimed> END. */
#define LL_POSTGRESQL_IF_TAKE "CASE WHEN " LL_POSTGRESQL_TAKE " THEN "

/* Parameters: $1 key, $2 owner, $3 ttl (us), $4 holder host, $5 pid,
 * $6 label, $7 reserve (us; NULL for acquire: it never reserves),
 * $8 waited (us; NULL for acquire), $9 the fence floor (ll_primary_t: a
 * fence granted after a failover is above any the old primary issued). A
 * new key is inserted; an existing
 * record is updated either as a take (owner, fence + 1, times, holder;
 * reservation cleared) or, when the take is refused and $7 is given, as a
 * claim of the reservation alone; neither: no row. Returns the fence,
 * whether a reservation is left (only a claim leaves one: no row, or a
 * reservation, means BUSY), and the record's time left (us). */
#define LL_POSTGRESQL_ACQUIRE LL_POSTGRESQL_NEW_ROW LL_POSTGRESQL_UPSERT
/* The proposed row, n.t its "now". */
#define LL_POSTGRESQL_NEW_ROW                                                                      \
   "INSERT INTO \"%1$s\" AS l (lock_key, owner, fence, expires_at, acquired_at, holder_host, "     \
   "holder_pid, holder_label) SELECT $1::text, $2::text, GREATEST(1, $9::bigint), n.t + "          \
   "$3::bigint * "                                                                                 \
   "interval '1 microsecond', n.t, $4::text, $5::bigint, $6::text "                                \
   "FROM (SELECT clock_timestamp() AS t) n "
#define LL_POSTGRESQL_UPSERT                                                                       \
   "ON CONFLICT (lock_key) DO UPDATE SET "                                                         \
   "owner = " LL_POSTGRESQL_IF_TAKE "excluded.owner ELSE l.owner END, "                            \
   "fence = " LL_POSTGRESQL_IF_TAKE "GREATEST(l.fence + 1, $9::bigint) ELSE l.fence END, "         \
   "expires_at = " LL_POSTGRESQL_IF_TAKE "excluded.expires_at ELSE l.expires_at END, "             \
   "acquired_at = " LL_POSTGRESQL_IF_TAKE "excluded.acquired_at ELSE l.acquired_at END, "          \
   "holder_host = " LL_POSTGRESQL_IF_TAKE "excluded.holder_host ELSE l.holder_host END, "          \
   "holder_pid = " LL_POSTGRESQL_IF_TAKE "excluded.holder_pid ELSE l.holder_pid END, "             \
   "holder_label = " LL_POSTGRESQL_IF_TAKE "excluded.holder_label ELSE l.holder_label END, "       \
   "holds = " LL_POSTGRESQL_IF_TAKE "1 ELSE l.holds END, "                                         \
   "next_owner = " LL_POSTGRESQL_IF_TAKE "NULL ELSE excluded.owner END, "                          \
   "next_until = " LL_POSTGRESQL_IF_TAKE "NULL ELSE " LL_POSTGRESQL_NOW " + $7::bigint * "         \
   "interval '1 microsecond' END, "                                                                \
   "next_since = " LL_POSTGRESQL_IF_TAKE "NULL ELSE " LL_POSTGRESQL_NOW " - $8::bigint * "         \
   "interval '1 microsecond' END "                                                                 \
   "WHERE " LL_POSTGRESQL_TAKE " OR " LL_POSTGRESQL_CLAIM                                          \
   " RETURNING fence, next_owner IS NOT NULL, "                                                    \
   "(EXTRACT(EPOCH FROM l.expires_at - clock_timestamp()) * 1000000)::bigint"

/* A fair acquire's first try (ll_take_t's fair): LL_POSTGRESQL_ACQUIRE
 * whose proposed row is there only while the key's fair queue has no live
 * entry of another owner by its "now", so that nothing is inserted or
 * taken (no row back: BUSY) while one waits, a key without a record too.
 * Same parameters, $7 and $8 NULL. A join that commits after this
 * statement's snapshot arrived after it. */
#define LL_POSTGRESQL_ACQUIRE_FAIR                                                                 \
   LL_POSTGRESQL_NEW_ROW "WHERE NOT EXISTS (SELECT 1 FROM \"%1$s_queue\" q WHERE q.lock_key = $1 " \
                         "AND q.owner <> $2 AND q.alive_until > n.t) " LL_POSTGRESQL_UPSERT

/* Parameters: $1 key, $2 owner, $3 ttl (us). One row when it was ours. */
#define LL_POSTGRESQL_RENEW                                                                        \
   "UPDATE \"%1$s\" SET expires_at = clock_timestamp() + $3::bigint * "                            \
   "interval '1 microsecond' WHERE lock_key = $1 AND owner = $2 AND "                              \
   "expires_at > clock_timestamp()"

/* A release's notification, sent with the release in its round trip and
 * delivered once it commits (watch.c wakes the waiter it names), the
 * payload "<next owner>/<key>". A release that names its next owner goes
 * to that owner's channel, ll<table>_<tag> (the owner's first two
 * characters: ll_watch_begin), which only its process listens to: with 32
 * processes waiting, a release wakes one listener, not 32. One that names
 * nobody (force-release of a record without a live reservation) goes to
 * every listener of the table, on ll_<table>, the next owner empty. Both
 * at most 63 bytes (NAMEDATALEN): a table name has at most 58. r is the
 * updated row. */
#define LL_POSTGRESQL_CHANNEL "ll_%1$s"
#define LL_POSTGRESQL_TAG_PREFIX "ll%1$s_"
#define LL_POSTGRESQL_TAG_CHANNEL(owner) "'" LL_POSTGRESQL_TAG_PREFIX "' || left(" owner ", 2)"
#define LL_POSTGRESQL_NOTIFY                                                                       \
   "pg_notify(CASE WHEN r.next_until > clock_timestamp() THEN " LL_POSTGRESQL_TAG_CHANNEL (        \
     "r.next_owner") " ELSE '" LL_POSTGRESQL_CHANNEL "' END, coalesce(CASE WHEN r.next_until > "   \
                     "clock_timestamp() THEN r.next_owner END, '') || '/' || r.lock_key)"

/* The waiter a release hands the key to, if any: the record's live
 * reservation's owner, else the first live entry of the key's fair queue
 * (the one that may take it). r is the updated row. */
#define LL_POSTGRESQL_NEXT_WAITER                                                                  \
   "coalesce(CASE WHEN r.next_until > clock_timestamp() THEN r.next_owner END, "                   \
   "(SELECT q.owner FROM \"%1$s_queue\" q WHERE q.lock_key = r.lock_key AND "                      \
   "q.alive_until > clock_timestamp() ORDER BY q.arrived, q.owner LIMIT 1))"

/* Parameters: $1 key, $2 owner, $3 min_hold (us). One row when it was
 * ours. It notifies only when a waiter is next, naming it: a release
 * nobody waits for wakes no watcher. */
#define LL_POSTGRESQL_RELEASE                                                                      \
   "WITH r AS (UPDATE \"%1$s\" SET owner = NULL, expires_at = GREATEST(clock_timestamp(), "        \
   "acquired_at + $3::bigint * interval '1 microsecond') "                                         \
   "WHERE lock_key = $1 AND owner = $2 RETURNING lock_key, next_owner, next_until), "              \
   "n AS (SELECT r.lock_key, " LL_POSTGRESQL_NEXT_WAITER " AS next FROM r) "                       \
   "SELECT CASE WHEN n.next IS NOT NULL THEN pg_notify(" LL_POSTGRESQL_TAG_CHANNEL (               \
     "n.next") ", n.next || '/' || n.lock_key) END FROM n"

/* Parameters: $1 key, $2 owner, $3 delta (+1 or -1). The owner's hold
 * count moves by delta, never below 1, while the lease is live; no row
 * when it is not. */
#define LL_POSTGRESQL_HOLD                                                                         \
   "UPDATE \"%1$s\" SET holds = GREATEST(1, holds + $3::int) WHERE lock_key = $1 AND "             \
   "owner = $2 AND expires_at > clock_timestamp() RETURNING holds"

/* The columns of a record (the table is t), the time left in
 * microseconds; then who waits (the live reservation's owner, the key's
 * live fair queue entries) and how long the owner has held it (ms). */
#define LL_POSTGRESQL_COLS                                                                         \
   "t.lock_key, owner, fence, "                                                                    \
   "(EXTRACT(EPOCH FROM expires_at - clock_timestamp()) * 1000000)::bigint, holder_host, "         \
   "holder_pid, holder_label, holds, "                                                             \
   "CASE WHEN next_until > clock_timestamp() THEN next_owner END, "                                \
   "(SELECT count(*) FROM \"%1$s_queue\" q WHERE q.lock_key = t.lock_key AND "                     \
   "q.alive_until > clock_timestamp()), "                                                          \
   "(EXTRACT(EPOCH FROM clock_timestamp() - acquired_at) * 1000)::bigint"

/* Parameter: $1 key. */
#define LL_POSTGRESQL_INSPECT "SELECT " LL_POSTGRESQL_COLS " FROM \"%1$s\" t WHERE lock_key = $1"
/* Parameter: $1 prefix (when nothing bounds it above: see prefix_upper). */
#define LL_POSTGRESQL_LIST_FROM                                                                    \
   "SELECT " LL_POSTGRESQL_COLS " FROM \"%1$s\" t WHERE lock_key >= $1 ORDER BY lock_key"
/* Parameters: $1 prefix, $2 upper bound. */
#define LL_POSTGRESQL_LIST_RANGE                                                                   \
   "SELECT " LL_POSTGRESQL_COLS " FROM \"%1$s\" t WHERE lock_key >= $1 AND lock_key < $2 "         \
   "ORDER BY lock_key"

/* Parameter: $1 key. Returns whether a live lease was taken (and
 * notifies, as a release does); no row when the key has no record. */
#define LL_POSTGRESQL_FORCE                                                                        \
   "WITH old AS (SELECT lock_key, owner IS NOT NULL AND expires_at > "                             \
   "clock_timestamp() AS live FROM \"%1$s\" WHERE lock_key = $1 FOR UPDATE), "                     \
   "r AS (UPDATE \"%1$s\" AS l SET owner = NULL, expires_at = LEAST(l.expires_at, "                \
   "clock_timestamp()) FROM old WHERE l.lock_key = old.lock_key "                                  \
   "RETURNING old.live, l.lock_key, l.next_owner, l.next_until) "                                  \
   "SELECT r.live, " LL_POSTGRESQL_NOTIFY " FROM r"

/* The listener's statements (watch_open): "%1$s" the table, "%2$s" the
 * client's tag (LL_POSTGRESQL_NOTIFY's two channels). */
#define LL_POSTGRESQL_LISTEN                                                                       \
   "LISTEN \"" LL_POSTGRESQL_CHANNEL "\"; LISTEN \"" LL_POSTGRESQL_TAG_PREFIX "%2$s\""

/* prune: the records under a prefix expired at least older_than ago by
 * clock_timestamp(), but not one whose reservation is live (a waiter
 * would lose its turn). Parameters: $1 prefix, $2 older_than (us); the range
 * form $3 the upper bound. */
#define LL_POSTGRESQL_PRUNE_FROM                                                                   \
   "DELETE FROM \"%1$s\" WHERE lock_key >= $1 AND expires_at <= clock_timestamp() - "              \
   "$2::bigint * interval '1 microsecond' AND (next_owner IS NULL OR "                             \
   "next_until <= clock_timestamp())"
#define LL_POSTGRESQL_PRUNE_RANGE LL_POSTGRESQL_PRUNE_FROM " AND lock_key < $3"

/* ---- the fair mode's queue ------------------------------------------------ */

/* queue_join's first statement: $1 key, $2 owner, $3 keep (us). Under a
 * transaction-level advisory lock on (table, key), held until it commits,
 * it reads the clock and upserts owner's entry: a new entry, or one that
 * ran out, arrives now; a live one keeps its arrival; alive_until = now +
 * keep. The lock orders the joins of a key: each reads its "now" after
 * the one before it committed, so arrivals follow commits. */
#define LL_POSTGRESQL_QUEUE_JOIN                                                                   \
   "WITH l AS (SELECT pg_advisory_xact_lock(hashtext('leaselock queue %1$s'), "                    \
   "hashtext($1::text))), "                                                                        \
   "n AS (SELECT clock_timestamp() AS t FROM l) "                                                  \
   "INSERT INTO \"%1$s_queue\" AS q (lock_key, owner, arrived, alive_until) "                      \
   "SELECT $1::text, $2::text, n.t, n.t + $3::bigint * interval '1 microsecond' FROM n "           \
   "ON CONFLICT (lock_key, owner) DO UPDATE SET "                                                  \
   "arrived = CASE WHEN q.alive_until > excluded.arrived THEN q.arrived ELSE excluded.arrived "    \
   "END, "                                                                                         \
   "alive_until = excluded.alive_until"
/* queue_join's second statement: $1 key, $2 owner. The live entries of the
 * key ordered before owner's (arrived, owner). Not in the first statement:
 * its snapshot is taken when it starts, before it waits for the lock, so
 * it could miss a join that arrived earlier and committed while it waited;
 * this statement starts after ours committed, when every earlier arrival
 * has. */
#define LL_POSTGRESQL_QUEUE_AHEAD                                                                  \
   "SELECT count(*) FROM \"%1$s_queue\" q, \"%1$s_queue\" me, "                                    \
   "(SELECT clock_timestamp() AS t) n WHERE me.lock_key = $1 AND me.owner = $2 "                   \
   "AND q.lock_key = $1 AND q.alive_until > n.t AND (q.arrived, q.owner) < (me.arrived, me.owner)"
/* $1 key, $2 owner. It leaves the queue and notifies the owner of the
 * key's first live entry left, on that owner's channel, the payload
 * "<owner>|<key>" (a leave: a release's is "<owner>/<key>"), so that it
 * joins again and claims the reservation while the key is still held
 * (ll_backend_t's queue_leave_notifies). */
#define LL_POSTGRESQL_QUEUE_LEAVE                                                                  \
   "WITH d AS (DELETE FROM \"%1$s_queue\" WHERE lock_key = $1 AND owner = $2 RETURNING "           \
   "lock_key), "                                                                                   \
   "n AS (SELECT d.lock_key, (SELECT q.owner FROM \"%1$s_queue\" q WHERE q.lock_key = d.lock_key " \
   "AND q.owner <> $2 AND q.alive_until > clock_timestamp() ORDER BY q.arrived, q.owner LIMIT 1) " \
   "AS next FROM d) "                                                                              \
   "SELECT CASE WHEN n.next IS NOT NULL THEN pg_notify(" LL_POSTGRESQL_TAG_CHANNEL (               \
     "n.next") ", n.next || '|' || n.lock_key) END FROM n"
/* prune's second statement: the queue entries under a prefix that ran out
 * at least older_than ago; never a live one. $1 prefix, $2 older_than
 * (us); the range form $3 the upper bound. */
#define LL_POSTGRESQL_QUEUE_PRUNE_FROM                                                             \
   "DELETE FROM \"%1$s_queue\" WHERE lock_key >= $1 AND alive_until <= clock_timestamp() - "       \
   "$2::bigint * interval '1 microsecond'"
#define LL_POSTGRESQL_QUEUE_PRUNE_RANGE LL_POSTGRESQL_QUEUE_PRUNE_FROM " AND lock_key < $3"

/* No queue lock statement: queue_join's advisory lock is in its text. */
#define LL_POSTGRESQL_QUEUE_LOCK NULL
/* Its fair first try reads the queue itself: no mark. */
#define LL_POSTGRESQL_ACQUIRE_FAIR_QUEUE NULL
#define LL_POSTGRESQL_QUEUE_MARK NULL
#define LL_POSTGRESQL_MARK_PRUNE_FROM NULL
#define LL_POSTGRESQL_MARK_PRUNE_RANGE NULL

const char *const ll_pg_statements[LL_SQL_COUNT] = LL_SQL_STATEMENT_TABLE (LL_POSTGRESQL);

const ll_pg_schema_sql_t ll_pg_schema_sql = {
   .read_version = LL_POSTGRESQL_READ_VERSION,
   .create_schema = LL_POSTGRESQL_CREATE_SCHEMA,
   .create_queue = LL_POSTGRESQL_CREATE_QUEUE,
   .listen = LL_POSTGRESQL_LISTEN,
   .check_primary = LL_POSTGRESQL_CHECK_PRIMARY,
   .read_durability = LL_POSTGRESQL_READ_DURABILITY,
};
