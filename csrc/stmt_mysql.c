/*
 * stmt_mysql.c - the MySQL backend's SQL text, compiled once for the
 * backend (backend_mysql.c, which says why the statements read as they do)
 * and its benchmark (bench/core_mysql.c, through libleaselock.a), so both
 * send the very same statements. The text is written as macros, joined
 * into the tables stmt_mysql.h declares. "%s" is the table name; every "?"
 * is a bound parameter, in the order the comments give.
 */
#include "stmt_mysql.h"

/* ---- schema ------------------------------------------------------------ */

#define LL_MYSQL_READ_VERSION "SELECT schema_version FROM `%s_meta` WHERE id = 1"
/* The reservation's columns, as CREATE TABLE and the migration's ALTER
 * name them ("ADD " before each for the ALTER). */
#define LL_MYSQL_NEXT_OWNER "next_owner CHAR(32) CHARACTER SET ascii COLLATE ascii_bin NULL"
#define LL_MYSQL_NEXT_UNTIL "next_until DATETIME(6) NULL"
#define LL_MYSQL_NEXT_SINCE "next_since DATETIME(6) NULL"
/* The owner's reentrant holds (version 4), as CREATE TABLE and the
 * migration's ALTER name it. */
#define LL_MYSQL_HOLDS "holds INT NOT NULL DEFAULT 1"
/* The key's queue mark (version 6): while later than now, the key's fair
 * queue may hold live entries, none live beyond it (LL_MYSQL_QUEUE_MARK);
 * NULL or past: none is live. */
#define LL_MYSQL_QUEUE_UNTIL "queue_until DATETIME(6) NULL"
#define LL_MYSQL_CREATE_TABLE                                                                      \
   "CREATE TABLE IF NOT EXISTS `%s` ("                                                             \
   "lock_key VARBINARY(255) NOT NULL PRIMARY KEY, "                                                \
   "owner CHAR(32) CHARACTER SET ascii COLLATE ascii_bin NULL, "                                   \
   "fence BIGINT NOT NULL, "                                                                       \
   "expires_at DATETIME(6) NOT NULL, "                                                             \
   "acquired_at DATETIME(6) NOT NULL, "                                                            \
   "holder_host VARBINARY(255) NOT NULL, "                                                         \
   "holder_pid BIGINT NOT NULL, "                                                                  \
   "holder_label VARBINARY(255) NOT NULL, " LL_MYSQL_NEXT_OWNER ", " LL_MYSQL_NEXT_UNTIL           \
   ", " LL_MYSQL_NEXT_SINCE ", " LL_MYSQL_HOLDS ", " LL_MYSQL_QUEUE_UNTIL ") ENGINE=InnoDB"
/* Version 1 -> 2: the reservation's columns (NULL: no reservation). One
 * ALTER, so they are all there or none is; error 1060 (ER_DUP_FIELDNAME)
 * says they are there already. */
#define LL_MYSQL_ADD_NEXT_COLUMNS                                                                  \
   "ALTER TABLE `%s` ADD " LL_MYSQL_NEXT_OWNER ", ADD " LL_MYSQL_NEXT_UNTIL                        \
   ", ADD " LL_MYSQL_NEXT_SINCE
/* Versions 1 to 3 -> 4: the hold count, 1 for every record there is (the
 * default fills the rows); its own ALTER, as a version-2 or -3 table has
 * the reservation's columns already. Error 1060 again says it is there. */
#define LL_MYSQL_ADD_HOLDS "ALTER TABLE `%s` ADD " LL_MYSQL_HOLDS
/* Versions 1 to 5 -> 6: the queue mark, NULL for every record there is
 * (a table is migrated while no client of version 5 still runs on it:
 * docs/install.md). Error 1060 again says it is there. */
#define LL_MYSQL_ADD_QUEUE_UNTIL "ALTER TABLE `%s` ADD " LL_MYSQL_QUEUE_UNTIL
/* The queue of waiters (version 3): an entry per (lock_key, owner), live
 * while alive_until > now; the index orders a key's entries by arrival. */
#define LL_MYSQL_CREATE_QUEUE                                                                      \
   "CREATE TABLE IF NOT EXISTS `%s_queue` ("                                                       \
   "lock_key VARBINARY(255) NOT NULL, "                                                            \
   "owner CHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, "                               \
   "arrived DATETIME(6) NOT NULL, "                                                                \
   "alive_until DATETIME(6) NOT NULL, "                                                            \
   "PRIMARY KEY (lock_key, owner), "                                                               \
   "KEY queue_order (lock_key, arrived, owner)) ENGINE=InnoDB"
/* The meta record's failover columns (version 5: failover.c): the
 * primary last recorded, the fence floor, the end of the lock-delay, the
 * longest TTL; as CREATE TABLE and the migration's ALTER name them. */
#define LL_MYSQL_META_FAILOVER                                                                     \
   "primary_id VARBINARY(200) NULL, fence_floor BIGINT NOT NULL DEFAULT 0, "                       \
   "grants_after DATETIME(6) NULL, max_ttl_ms BIGINT NOT NULL DEFAULT 60000"
#define LL_MYSQL_CREATE_META                                                                       \
   "CREATE TABLE IF NOT EXISTS `%s_meta` (id TINYINT NOT NULL PRIMARY KEY, "                       \
   "schema_version INT NOT NULL, " LL_MYSQL_META_FAILOVER ") ENGINE=InnoDB"
/* Versions 1 to 4 -> 5; error 1060 says the columns are there already. */
#define LL_MYSQL_ADD_META_FAILOVER                                                                 \
   "ALTER TABLE `%s_meta` ADD primary_id VARBINARY(200) NULL, "                                    \
   "ADD fence_floor BIGINT NOT NULL DEFAULT 0, ADD grants_after DATETIME(6) NULL, "                \
   "ADD max_ttl_ms BIGINT NOT NULL DEFAULT 60000"
/* check_primary's reads: the server's settings and status that say who
 * it is and how it replicates (names it lacks are simply not listed, so
 * MySQL and MariaDB answer alike). */
#define LL_MYSQL_PRIMARY_VARIABLES                                                                 \
   "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('server_id', 'server_uuid', 'hostname', "        \
   "'port', 'wsrep_on', 'log_bin', 'rpl_semi_sync_master_enabled', "                               \
   "'rpl_semi_sync_master_wait_point', 'rpl_semi_sync_source_enabled', "                           \
   "'rpl_semi_sync_source_wait_point')"
#define LL_MYSQL_PRIMARY_STATUS                                                                    \
   "SHOW GLOBAL STATUS WHERE Variable_name IN ('wsrep_cluster_state_uuid', "                       \
   "'wsrep_cluster_conf_id', 'wsrep_cluster_status', 'Rpl_semi_sync_master_clients', "             \
   "'Rpl_semi_sync_master_status', 'Rpl_semi_sync_source_clients', "                               \
   "'Rpl_semi_sync_source_status')"
/* The primary recorded before, and this one's identity ("%2$s", escaped). */
#define LL_MYSQL_SET_PRIMARY                                                                       \
   "SET @ll_old = (SELECT primary_id FROM `%1$s_meta` WHERE id = 1), @ll_primary = '%2$s'"
/* What the connection keeps: fence floor, lock-delay left (us), max_ttl,
 * the primary, whether this connect found another one recorded before. */
#define LL_MYSQL_READ_PRIMARY                                                                      \
   "SELECT fence_floor, GREATEST(0, IFNULL(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), "          \
   "grants_after), 0)), max_ttl_ms, primary_id, @ll_old IS NOT NULL AND @ll_old <> @ll_primary "   \
   "FROM `%1$s_meta` WHERE id = 1"
/* Records this primary in the meta record (always written, so that a
 * concurrent recording is seen, not an older snapshot); on another one
 * raises the fence floor above every fence before (the clock in us) and
 * sets the lock-delay. The first primary recorded (none yet) sets max_ttl
 * from the URI; later the URI only raises it. "%1$s" the table, "%2$lld"
 * the URI's max_ttl in ms (0: none). SET assigns left to right, each
 * seeing the columns assigned before: the primary comes last. */
#define LL_MYSQL_OTHER_PRIMARY "(primary_id IS NOT NULL AND primary_id <> @ll_primary)"
#define LL_MYSQL_MARK_PRIMARY                                                                      \
   "UPDATE `%1$s_meta` SET "                                                                       \
   "grants_after = IF(" LL_MYSQL_OTHER_PRIMARY ", UTC_TIMESTAMP(6) + INTERVAL "                    \
   "GREATEST(max_ttl_ms, %2$lld) * 1000 MICROSECOND, grants_after), "                              \
   "fence_floor = IF(" LL_MYSQL_OTHER_PRIMARY ", GREATEST(fence_floor + 1, "                       \
   "TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6))), "                                 \
   "fence_floor), "                                                                                \
   "max_ttl_ms = IF(primary_id IS NULL AND %2$lld > 0, %2$lld, GREATEST(max_ttl_ms, %2$lld)), "    \
   "primary_id = @ll_primary WHERE id = 1"
/* "%s" the table, "%d" LL_MYSQL_SCHEMA_VERSION (both statements). */
#define LL_MYSQL_RECORD_VERSION "INSERT IGNORE INTO `%s_meta` (id, schema_version) VALUES (1, %d)"
/* Raises an older version, never lowers a newer one. */
#define LL_MYSQL_RAISE_VERSION                                                                     \
   "UPDATE `%s_meta` SET schema_version = %d WHERE id = 1 AND schema_version < %d"

/* ---- statements -------------------------------------------------------- */

/* acquire and acquire_wait: one statement (backend_mysql.c's top comment
 * says why it reads as it does). UTC_TIMESTAMP(6) is the same all through
 * one statement. */
#define LL_MYSQL_NOW "UTC_TIMESTAMP(6)"
/* "Takeable", judged on the old row: ours already (a retry), or expired
 * and its reservation free (none, or run out) or ours. Parameters: owner,
 * owner. */
#define LL_MYSQL_TAKEABLE                                                                          \
   "(owner <=> ? OR (expires_at <= " LL_MYSQL_NOW " AND (next_owner IS NULL OR "                   \
   "next_until <= " LL_MYSQL_NOW " OR next_owner <=> ?)))"
/* Once owner is assigned, whether the key was taken. Parameter: owner. */
#define LL_MYSQL_TAKEN "IF(owner <=> ?, "
/* Whether a waiter (reserve not NULL) claims the reservation: it is free,
 * already its own, or held by a waiter that began waiting later than
 * now - waited. Parameters: reserve (us), owner, waited (us). */
#define LL_MYSQL_CLAIMS                                                                            \
   "(? IS NOT NULL AND (next_owner IS NULL OR next_until <= " LL_MYSQL_NOW " OR "                  \
   "next_owner <=> ? OR next_since > " LL_MYSQL_NOW " - INTERVAL ? MICROSECOND))"
/* Once next_owner is assigned (and the key was not taken), whether the
 * waiter holds the reservation. Parameters: reserve (us), owner. */
#define LL_MYSQL_CLAIMED "(? IS NOT NULL AND next_owner <=> ?)"

/* In this order (backend_mysql.c's top comment says why): owner, which
 * then tells whether the key was taken, and the take's other columns
 * (holds back to 1);
 * next_owner, which then tells whether a waiter holds the reservation,
 * next_until, next_since; fence, which reports the outcome as the insert
 * id: the new fence when taken, ~0 less the record's time left (us) when
 * the reservation is ours (fence & (... | ~0) keeps the fence), 0
 * (LAST_INSERT_ID(expr) not run) when neither.
 * Parameters: LL_MYSQL_ACQUIRE_PARAMS; reserve and waited are NULL for
 * acquire, which never reserves. */
#define LL_MYSQL_ACQUIRE LL_MYSQL_INSERT ("%s") "VALUES (" LL_MYSQL_NEW_ROW ") " LL_MYSQL_UPSERT
/* The insert into table T's records, and the new row's values. */
#define LL_MYSQL_INSERT(T)                                                                         \
   "INSERT INTO `" T "` (lock_key, owner, fence, expires_at, acquired_at, holder_host, "           \
   "holder_pid, holder_label) "
#define LL_MYSQL_NEW_ROW                                                                           \
   "?, ?, LAST_INSERT_ID(GREATEST(1, ?)), " LL_MYSQL_NOW                                           \
   " + INTERVAL ? MICROSECOND, " LL_MYSQL_NOW ", ?, ?, ?"
#define LL_MYSQL_UPSERT                                                                            \
   LL_MYSQL_UPSERT_TAKE (LL_MYSQL_TAKEABLE)                                                        \
   "fence = " LL_MYSQL_TAKEN "LAST_INSERT_ID(GREATEST(fence + 1, ?)), IF(" LL_MYSQL_CLAIMED        \
   ", fence & (LAST_INSERT_ID(~0 - GREATEST(0, TIMESTAMPDIFF(MICROSECOND, " LL_MYSQL_NOW           \
   ", expires_at))) | ~0), fence))"
/* The assignments before the fence, with the old row's test TAKEABLE. */
#define LL_MYSQL_UPSERT_TAKE(TAKEABLE)                                                             \
   "ON DUPLICATE KEY UPDATE "                                                                      \
   "owner = IF(" TAKEABLE ", ?, owner), "                                                          \
   "expires_at = " LL_MYSQL_TAKEN LL_MYSQL_NOW " + INTERVAL ? MICROSECOND, expires_at), "          \
   "acquired_at = " LL_MYSQL_TAKEN LL_MYSQL_NOW ", acquired_at), "                                 \
   "holder_host = " LL_MYSQL_TAKEN "?, holder_host), "                                             \
   "holder_pid = " LL_MYSQL_TAKEN "?, holder_pid), "                                               \
   "holder_label = " LL_MYSQL_TAKEN "?, holder_label), "                                           \
   "holds = " LL_MYSQL_TAKEN "1, holds), "                                                         \
   "next_owner = " LL_MYSQL_TAKEN "NULL, IF(" LL_MYSQL_CLAIMS ", ?, next_owner)), "                \
   "next_until = " LL_MYSQL_TAKEN "NULL, IF(" LL_MYSQL_CLAIMED ", " LL_MYSQL_NOW                   \
   " + INTERVAL ? MICROSECOND, next_until)), "                                                     \
   "next_since = " LL_MYSQL_TAKEN "IF(? IS NULL, NULL, " LL_MYSQL_NOW "), IF(" LL_MYSQL_CLAIMED    \
   ", " LL_MYSQL_NOW " - INTERVAL ? MICROSECOND, next_since)), "
/* LL_MYSQL_ACQUIRE's parameters, one letter each, for the backend and the
 * benchmark to bind alike: k key, o owner, f the fence floor (ll_primary_t:
 * a fence granted after a failover is above any the old primary issued),
 * t ttl (us), h holder host, p pid, l label, r reserve (us), w waited
 * (us), q queued (NULL unless the taker waited in the key's fair queue);
 * a space between the insert and each assignment. */
#define LL_MYSQL_ACQUIRE_PARAMS "kofthpl" LL_MYSQL_UPSERT_PARAMS
#define LL_MYSQL_UPSERT_PARAMS LL_MYSQL_UPSERT_TAKE_PARAMS " ofro"
#define LL_MYSQL_UPSERT_TAKE_PARAMS " ooo ot o oh op ol o orowo oror oqrow"

/* A fair acquire's first try (ll_take_t's fair): LL_MYSQL_ACQUIRE that
 * does not take an expired record whose queue mark is live. A key whose
 * mark is not live has no live queue entry (LL_MYSQL_QUEUE_MARK), a key
 * without a record neither, so the try takes exactly as the plain one,
 * reading nothing more: it never goes ahead of a queued waiter. Where the
 * mark is live but the record otherwise takeable, the insert id is
 * LL_MYSQL_MARKED and the backend asks the queue itself
 * (LL_MYSQL_ACQUIRE_FAIR_QUEUE): a mark outlives the queue's last entry
 * by up to LL_QUEUE_MARK_SPARE_MS. (Any subquery in a write costs MariaDB
 * 30 to 60 us a statement, even on an empty table: that is why the
 * uncontended try reads the mark, not the queue.) Parameters:
 * LL_MYSQL_ACQUIRE_FAIR_PARAMS. */
#define LL_MYSQL_ACQUIRE_FAIR                                                                      \
   LL_MYSQL_INSERT ("%s")                                                                          \
   "VALUES (" LL_MYSQL_NEW_ROW ") " LL_MYSQL_UPSERT_TAKE (LL_MYSQL_TAKEABLE_FAIR)                  \
     LL_MYSQL_FAIR_FENCE
/* Its fence: the new one when taken, else LL_MYSQL_MARKED as the insert id
 * when the mark alone kept the key (the fence kept). */
#define LL_MYSQL_FAIR_FENCE                                                                        \
   "fence = " LL_MYSQL_TAKEN "LAST_INSERT_ID(GREATEST(fence + 1, ?)), IF(" LL_MYSQL_MARK_ONLY      \
   ", fence & (LAST_INSERT_ID(" LL_MYSQL_STR (LL_MYSQL_MARKED) ") | ~0), fence))"
/* The old row (not taken) was takeable but for its live queue mark:
 * expired, no live reservation. */
#define LL_MYSQL_MARK_ONLY                                                                         \
   "expires_at <= " LL_MYSQL_NOW " AND (next_owner IS NULL OR next_until <= " LL_MYSQL_NOW         \
   ") AND queue_until > " LL_MYSQL_NOW
#define LL_MYSQL_STR(x) LL_MYSQL_STR_ (x)
#define LL_MYSQL_STR_(x) #x
/* LL_MYSQL_TAKEABLE, and the queue mark not live. Parameters: owner,
 * owner. */
#define LL_MYSQL_TAKEABLE_FAIR                                                                     \
   "(owner <=> ? OR (expires_at <= " LL_MYSQL_NOW " AND (next_owner IS NULL OR "                   \
   "next_until <= " LL_MYSQL_NOW " OR next_owner <=> ?) AND (queue_until IS NULL OR "              \
   "queue_until <= " LL_MYSQL_NOW ")))"
#define LL_MYSQL_ACQUIRE_FAIR_PARAMS "kofthpl" LL_MYSQL_UPSERT_TAKE_PARAMS " of"

/* A fair first try that reads the queue itself (when the mark is live):
 * LL_MYSQL_ACQUIRE whose new row is there only while the key's fair queue
 * has no live entry of another owner (the head row, owner '', is none),
 * so that nothing is inserted or taken (insert id 0: BUSY) while one
 * waits. Parameters: LL_MYSQL_ACQUIRE_FAIR_QUEUE_PARAMS, the acquire's
 * with key and owner for the queue's test after the row's. */
#define LL_MYSQL_ACQUIRE_FAIR_QUEUE                                                                \
   LL_MYSQL_INSERT ("%1$s")                                                                        \
   "SELECT " LL_MYSQL_NEW_ROW " FROM DUAL WHERE NOT EXISTS (SELECT 1 "                             \
   "FROM `%1$s_queue` q WHERE q.lock_key = ? AND q.owner <> ? AND "                                \
   "q.owner <> '' AND q.alive_until > " LL_MYSQL_NOW ") " LL_MYSQL_UPSERT
#define LL_MYSQL_ACQUIRE_FAIR_QUEUE_PARAMS "kofthpl ko" LL_MYSQL_UPSERT_PARAMS

/* Parameters: ttl (us), key, owner. LAST_INSERT_ID(fence) (>= 1) runs only
 * when the row matched. */
#define LL_MYSQL_RENEW                                                                             \
   "UPDATE `%s` SET expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, "                      \
   "fence = LAST_INSERT_ID(fence) "                                                                \
   "WHERE lock_key = ? AND owner = ? AND expires_at > UTC_TIMESTAMP(6)"

/* Parameters: min_hold (us), key, owner. One row changed when it was ours.
 * LAST_INSERT_ID(fence) (>= 1) runs only when the release leaves a waiter
 * next, whom the same-machine channel wakes: a live reservation, or a key
 * its owner took from the fair queue (next_since set while next_owner is
 * NULL: LL_MYSQL_UPSERT's q), where others may wait whose first has not
 * claimed the reservation yet. Not the queue itself: a subquery in a write
 * costs MariaDB 30 to 60 us a statement, even on an empty table. */
#define LL_MYSQL_RELEASE                                                                           \
   "UPDATE `%s` SET owner = NULL, expires_at = GREATEST(UTC_TIMESTAMP(6), "                        \
   "acquired_at + INTERVAL ? MICROSECOND), fence = IF((next_owner IS NOT NULL AND next_until > "   \
   "UTC_TIMESTAMP(6)) OR (next_owner IS NULL AND next_since IS NOT NULL), LAST_INSERT_ID(fence), " \
   "fence) WHERE lock_key = ? AND owner = ?"

/* Parameters: delta (+1 or -1), key, owner. The owner's hold count moves
 * by delta, never below 1, while the lease is live; the count after is
 * the insert id, since LAST_INSERT_ID(expr) (>= 1) runs only when the row
 * matched (0 otherwise), even when the count stays (1 - 1 -> 1). */
#define LL_MYSQL_HOLD                                                                              \
   "UPDATE `%s` SET holds = LAST_INSERT_ID(GREATEST(1, holds + ?)) "                               \
   "WHERE lock_key = ? AND owner = ? AND expires_at > UTC_TIMESTAMP(6)"

/* The columns of a record, the time left in microseconds. */
#define LL_MYSQL_COLS                                                                              \
   "t.lock_key, owner, fence, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at), "          \
   "holder_host, holder_pid, holder_label, holds, "                                                \
   "IF(next_until > UTC_TIMESTAMP(6), next_owner, NULL), "                                         \
   "(SELECT COUNT(*) FROM `%1$s_queue` q WHERE q.lock_key = t.lock_key AND "                       \
   "q.alive_until > UTC_TIMESTAMP(6)), "                                                           \
   "TIMESTAMPDIFF(MICROSECOND, acquired_at, UTC_TIMESTAMP(6))"

/* A row that is a record: one that only ever held a queue mark (fence 0,
 * LL_MYSQL_QUEUE_MARK) is none, for inspect, list and prune (its
 * "fence > 0") alike. */
#define LL_MYSQL_A_RECORD "fence > 0"
/* Parameter: key. (The table is t; then who waits and the time held,
 * as the columns above say.) */
#define LL_MYSQL_INSPECT                                                                           \
   "SELECT " LL_MYSQL_COLS " FROM `%1$s` t WHERE lock_key = ? AND " LL_MYSQL_A_RECORD
/* Parameter: prefix (no upper bound: an empty or all-0xff prefix). */
#define LL_MYSQL_LIST_FROM                                                                         \
   "SELECT " LL_MYSQL_COLS " FROM `%1$s` t WHERE lock_key >= ? AND " LL_MYSQL_A_RECORD             \
   " ORDER BY lock_key"
/* Parameters: prefix, upper bound (ll_prefix_upper). */
#define LL_MYSQL_LIST_RANGE                                                                        \
   "SELECT " LL_MYSQL_COLS                                                                         \
   " FROM `%1$s` t WHERE lock_key >= ? AND lock_key < ? AND " LL_MYSQL_A_RECORD                    \
   " ORDER BY lock_key"

/* Parameter: key. LAST_INSERT_ID(fence) (>= 1) runs only when a live lease
 * is taken. */
#define LL_MYSQL_FORCE                                                                             \
   "UPDATE `%s` SET fence = IF(owner IS NOT NULL AND expires_at > UTC_TIMESTAMP(6), "              \
   "LAST_INSERT_ID(fence), fence), owner = NULL, "                                                 \
   "expires_at = LEAST(expires_at, UTC_TIMESTAMP(6)) WHERE lock_key = ?"

/* prune: the records under a prefix expired at least older_than ago by
 * the server's clock, but not one whose reservation is live (a waiter
 * would lose its turn), nor one whose queue mark is (its waiters would).
 * Parameters: prefix, older_than (us); the range form then the upper
 * bound (ll_prefix_upper). */
#define LL_MYSQL_PRUNE_EXPIRED                                                                     \
   "fence > 0 AND (queue_until IS NULL OR queue_until <= UTC_TIMESTAMP(6)) AND "                   \
   "expires_at <= UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND AND (next_owner IS NULL OR "           \
   "next_until <= UTC_TIMESTAMP(6))"
#define LL_MYSQL_PRUNE_FROM "DELETE FROM `%s` WHERE lock_key >= ? AND " LL_MYSQL_PRUNE_EXPIRED
#define LL_MYSQL_PRUNE_RANGE                                                                       \
   "DELETE FROM `%s` WHERE lock_key >= ? AND " LL_MYSQL_PRUNE_EXPIRED " AND lock_key < ?"

/* ---- the fair mode's queue ------------------------------------------------ */

/* No queue lock statement: the join's order comes from its head row. */
#define LL_MYSQL_QUEUE_LOCK NULL
/* The key's queue mark, which a join sets before its entry (the join's
 * first statement, when the connection does not know the mark live for
 * long enough): queue_until = now + span at least, never earlier than it
 * was; a key without a record gets one that only holds the mark (fence 0,
 * never held: not a record to inspect, list or prune, and a take makes it
 * one with fence 1). The insert id is the mark, in microseconds since
 * 1970 by the server's clock, which the join's entry never outlives
 * (LL_MYSQL_QUEUE_JOIN): so no entry is live where the mark is not, and a
 * fair first try need not read the queue (LL_MYSQL_ACQUIRE_FAIR).
 * Parameters: key, span (us), span (us), span (us). */
#define LL_MYSQL_EPOCH_US(T) "TIMESTAMPDIFF(MICROSECOND, '1970-01-01', " T ")"
#define LL_MYSQL_QUEUE_MARK                                                                        \
   "INSERT INTO `%s` (lock_key, owner, fence, expires_at, acquired_at, holder_host, holder_pid, "  \
   "holder_label, queue_until) VALUES (?, NULL, LAST_INSERT_ID(" LL_MYSQL_EPOCH_US (               \
     LL_MYSQL_NOW                                                                                  \
     " + INTERVAL ? MICROSECOND") ") & 0, " LL_MYSQL_NOW ", " LL_MYSQL_NOW                         \
                                  ", '', 0, '', " LL_MYSQL_NOW " + INTERVAL ? MICROSECOND) "       \
                                  "ON DUPLICATE KEY UPDATE queue_until = "                         \
                                  "GREATEST(IFNULL(queue_until, " LL_MYSQL_NOW "), " LL_MYSQL_NOW  \
                                  " + INTERVAL ? MICROSECOND), fence = fence & "                   \
                                  "(LAST_INSERT_ID(" LL_MYSQL_EPOCH_US ("queue_until") ") | ~0)"
/* queue_join, two statements (three with the mark), no lock held between them
 * (backend_mysql.c's queue_join says why):
 * 1. the upsert, one autocommitted statement of two rows, written in
 *    order. First the key's head row (owner '', never live: alive_until =
 *    arrived), whose row lock orders the joins of the key until the
 *    statement commits, and which keeps the key's latest arrival: the
 *    arrival of this join, @ll_arrived, is now, or 1 us after that when
 *    now is not later. Then owner's entry: a new entry, or one that ran
 *    out, arrives at @ll_arrived; a live one keeps its arrival (arrived is
 *    assigned first, from the old alive_until); alive_until = now + keep,
 *    or the key's mark if that is earlier (LL_MYSQL_ALIVE_UNTIL).
 *    Parameters: key, key, owner, keep (us), mark (us), keep (us), mark
 *    (us). */
#define LL_MYSQL_QUEUE_JOIN                                                                        \
   "INSERT INTO `%s_queue` (lock_key, owner, arrived, alive_until) VALUES "                        \
   "(?, '', @ll_arrived := " LL_MYSQL_NOW ", @ll_arrived), "                                       \
   "(?, ?, @ll_arrived, " LL_MYSQL_ALIVE_UNTIL ") ON DUPLICATE KEY UPDATE "                        \
   "arrived = IF(owner = '', @ll_arrived := GREATEST(" LL_MYSQL_NOW                                \
   ", arrived + INTERVAL 1 MICROSECOND), IF(alive_until > " LL_MYSQL_NOW                           \
   ", arrived, @ll_arrived)), "                                                                    \
   "alive_until = IF(owner = '', @ll_arrived, " LL_MYSQL_ALIVE_UNTIL ")"
/* An entry's end: now + keep, never after the key's queue mark (the
 * mark's microseconds since 1970, as LL_MYSQL_QUEUE_MARK answered).
 * Parameters: keep (us), mark (us). */
#define LL_MYSQL_ALIVE_UNTIL                                                                       \
   "LEAST(" LL_MYSQL_NOW " + INTERVAL ? MICROSECOND, '1970-01-01' + INTERVAL ? MICROSECOND)"
/* 2. the live entries of the key ordered before owner's (arrived, owner);
 * never the head row. Parameters: key, owner. */
#define LL_MYSQL_QUEUE_AHEAD                                                                       \
   "SELECT COUNT(*) FROM `%1$s_queue` q, `%1$s_queue` me "                                         \
   "WHERE me.lock_key = ? AND me.owner = ? AND q.lock_key = me.lock_key AND q.owner <> '' "        \
   "AND q.alive_until > " LL_MYSQL_NOW " AND (q.arrived < me.arrived OR "                          \
   "(q.arrived = me.arrived AND q.owner < me.owner))"
/* Parameters: key, owner. */
#define LL_MYSQL_QUEUE_LEAVE "DELETE FROM `%s_queue` WHERE lock_key = ? AND owner = ?"
/* prune's second statement: the queue entries under a prefix that ran out
 * at least older_than ago; never a live one. Parameters as for
 * LL_MYSQL_PRUNE_FROM / _RANGE: prefix, older_than (us)[, upper bound]. */
#define LL_MYSQL_QUEUE_PRUNE_FROM                                                                  \
   "DELETE FROM `%s_queue` WHERE lock_key >= ? AND alive_until <= UTC_TIMESTAMP(6) - "             \
   "INTERVAL ? MICROSECOND"
#define LL_MYSQL_QUEUE_PRUNE_RANGE LL_MYSQL_QUEUE_PRUNE_FROM " AND lock_key < ?"
/* prune's third statement: the rows that only ever held a queue mark,
 * once it ran out older_than ago (not counted: not records). Parameters
 * as for LL_MYSQL_PRUNE_FROM / _RANGE. */
#define LL_MYSQL_MARK_PRUNE_FROM                                                                   \
   "DELETE FROM `%s` WHERE lock_key >= ? AND fence = 0 AND owner IS NULL AND "                     \
   "(queue_until IS NULL OR queue_until <= UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND)"
#define LL_MYSQL_MARK_PRUNE_RANGE LL_MYSQL_MARK_PRUNE_FROM " AND lock_key < ?"

_Static_assert(sizeof LL_MYSQL_ACQUIRE_FAIR_QUEUE_PARAMS <= LL_MYSQL_ACQUIRE_BINDS,
               "LL_MYSQL_ACQUIRE_BINDS holds every parameter of the acquire");
_Static_assert(LL_MYSQL_MARKED == 1LL << 62, "the marked insert id is 2^62");

const char ll_mysql_acquire_params[] = LL_MYSQL_ACQUIRE_PARAMS;
const char ll_mysql_acquire_fair_params[] = LL_MYSQL_ACQUIRE_FAIR_PARAMS;
const char ll_mysql_acquire_fair_queue_params[] = LL_MYSQL_ACQUIRE_FAIR_QUEUE_PARAMS;

const char *const ll_mysql_statements[LL_SQL_COUNT] = LL_SQL_STATEMENT_TABLE (LL_MYSQL);

const ll_mysql_schema_sql_t ll_mysql_schema_sql = {
   .read_version = LL_MYSQL_READ_VERSION,
   .create_table = LL_MYSQL_CREATE_TABLE,
   .add_next_columns = LL_MYSQL_ADD_NEXT_COLUMNS,
   .add_holds = LL_MYSQL_ADD_HOLDS,
   .create_queue = LL_MYSQL_CREATE_QUEUE,
   .create_meta = LL_MYSQL_CREATE_META,
   .record_version = LL_MYSQL_RECORD_VERSION,
   .raise_version = LL_MYSQL_RAISE_VERSION,
   .add_meta_failover = LL_MYSQL_ADD_META_FAILOVER,
   .add_queue_until = LL_MYSQL_ADD_QUEUE_UNTIL,
   .primary_variables = LL_MYSQL_PRIMARY_VARIABLES,
   .primary_status = LL_MYSQL_PRIMARY_STATUS,
   .set_primary = LL_MYSQL_SET_PRIMARY,
   .mark_primary = LL_MYSQL_MARK_PRIMARY,
   .read_primary = LL_MYSQL_READ_PRIMARY,
};
