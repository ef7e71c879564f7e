/*
 * sql_mysql.h - the MySQL backend's SQL text, in one place for the backend
 * (backend_mysql.c, which says why the statements read as they do) and its
 * benchmark (bench/core_mysql.c). "%s" is the table name; every "?" is a
 * bound parameter, in the order the comments give.
 */
#ifndef LL_SQL_MYSQL_H
#define LL_SQL_MYSQL_H

/* ---- schema ------------------------------------------------------------ */

/* The version the statements below create; <table>_meta records it. */
#define LL_MYSQL_SCHEMA_VERSION 1

#define LL_MYSQL_READ_VERSION "SELECT schema_version FROM `%s_meta` WHERE id = 1"
#define LL_MYSQL_CREATE_TABLE                                                                      \
   "CREATE TABLE IF NOT EXISTS `%s` ("                                                             \
   "lock_key VARBINARY(255) NOT NULL PRIMARY KEY, "                                                \
   "owner CHAR(32) CHARACTER SET ascii COLLATE ascii_bin NULL, "                                   \
   "fence BIGINT NOT NULL, "                                                                       \
   "expires_at DATETIME(6) NOT NULL, "                                                             \
   "acquired_at DATETIME(6) NOT NULL, "                                                            \
   "holder_host VARBINARY(255) NOT NULL, "                                                         \
   "holder_pid BIGINT NOT NULL, "                                                                  \
   "holder_label VARBINARY(255) NOT NULL"                                                          \
   ") ENGINE=InnoDB"
#define LL_MYSQL_CREATE_META                                                                       \
   "CREATE TABLE IF NOT EXISTS `%s_meta` (id TINYINT NOT NULL PRIMARY KEY, "                       \
   "schema_version INT NOT NULL) ENGINE=InnoDB"
/* "%s" the table, "%d" LL_MYSQL_SCHEMA_VERSION. */
#define LL_MYSQL_RECORD_VERSION "INSERT IGNORE INTO `%s_meta` VALUES (1, %d)"

/* ---- statements -------------------------------------------------------- */

/* "Takeable": no live lease of another owner. Parameter: owner. */
#define LL_MYSQL_TAKEABLE "(expires_at <= UTC_TIMESTAMP(6) OR owner <=> ?)"

/* Every assignment repeats "takeable", and owner and expires_at come
 * last, in this order: backend_mysql.c's top comment says why. The fence
 * comes back as the insert id, 0 when BUSY. Parameters: key, owner, ttl
 * (us), holder host, pid, label; then for the update, owner before each
 * value it guards: owner (fence), owner (acquired_at), owner, host, owner,
 * pid, owner, label, owner, owner, owner, ttl (us). */
#define LL_MYSQL_ACQUIRE                                                                           \
   "INSERT INTO `%s` (lock_key, owner, fence, expires_at, acquired_at, holder_host, "              \
   "holder_pid, holder_label) VALUES (?, ?, LAST_INSERT_ID(1), UTC_TIMESTAMP(6) + "                \
   "INTERVAL ? MICROSECOND, UTC_TIMESTAMP(6), ?, ?, ?) ON DUPLICATE KEY UPDATE "                   \
   "fence = IF(" LL_MYSQL_TAKEABLE ", LAST_INSERT_ID(fence + 1), fence), "                         \
   "acquired_at = IF(" LL_MYSQL_TAKEABLE ", UTC_TIMESTAMP(6), acquired_at), "                      \
   "holder_host = IF(" LL_MYSQL_TAKEABLE ", ?, holder_host), "                                     \
   "holder_pid = IF(" LL_MYSQL_TAKEABLE ", ?, holder_pid), "                                       \
   "holder_label = IF(" LL_MYSQL_TAKEABLE ", ?, holder_label), "                                   \
   "owner = IF(" LL_MYSQL_TAKEABLE ", ?, owner), "                                                 \
   "expires_at = IF(" LL_MYSQL_TAKEABLE ", UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, expires_at)"

/* Parameters: ttl (us), key, owner. LAST_INSERT_ID(fence) (>= 1) runs only
 * when the row matched. */
#define LL_MYSQL_RENEW                                                                             \
   "UPDATE `%s` SET expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, "                      \
   "fence = LAST_INSERT_ID(fence) "                                                                \
   "WHERE lock_key = ? AND owner = ? AND expires_at > UTC_TIMESTAMP(6)"

/* Parameters: min_hold (us), key, owner. One row changed when it was ours. */
#define LL_MYSQL_RELEASE                                                                           \
   "UPDATE `%s` SET owner = NULL, expires_at = GREATEST(UTC_TIMESTAMP(6), "                        \
   "acquired_at + INTERVAL ? MICROSECOND) WHERE lock_key = ? AND owner = ?"

/* The columns of a record, the time left in microseconds. */
#define LL_MYSQL_COLS                                                                              \
   "lock_key, owner, fence, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at), "            \
   "holder_host, holder_pid, holder_label"

/* Parameter: key. */
#define LL_MYSQL_INSPECT "SELECT " LL_MYSQL_COLS " FROM `%s` WHERE lock_key = ?"
/* Parameter: prefix (no upper bound: an empty or all-0xff prefix). */
#define LL_MYSQL_LIST_FROM                                                                         \
   "SELECT " LL_MYSQL_COLS " FROM `%s` WHERE lock_key >= ? ORDER BY lock_key"
/* Parameters: prefix, upper bound (ll_prefix_upper). */
#define LL_MYSQL_LIST_RANGE                                                                        \
   "SELECT " LL_MYSQL_COLS " FROM `%s` WHERE lock_key >= ? AND lock_key < ? ORDER BY lock_key"

/* Parameter: key. LAST_INSERT_ID(fence) (>= 1) runs only when a live lease
 * is taken. */
#define LL_MYSQL_FORCE                                                                             \
   "UPDATE `%s` SET fence = IF(owner IS NOT NULL AND expires_at > UTC_TIMESTAMP(6), "              \
   "LAST_INSERT_ID(fence), fence), owner = NULL, "                                                 \
   "expires_at = LEAST(expires_at, UTC_TIMESTAMP(6)) WHERE lock_key = ?"

/* prune: the records under a prefix expired at least older_than ago by
 * the server's clock. Parameters: prefix, older_than (us); the range form
 * then the upper bound (ll_prefix_upper). */
#define LL_MYSQL_PRUNE_EXPIRED "expires_at <= UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND"
#define LL_MYSQL_PRUNE_FROM "DELETE FROM `%s` WHERE lock_key >= ? AND " LL_MYSQL_PRUNE_EXPIRED
#define LL_MYSQL_PRUNE_RANGE                                                                       \
   "DELETE FROM `%s` WHERE lock_key >= ? AND " LL_MYSQL_PRUNE_EXPIRED " AND lock_key < ?"

/* The backend's statement table (ll_sql_st_t, ll_internal.h). */
#define LL_MYSQL_STATEMENTS                                                                        \
   {                                                                                               \
      [LL_SQL_ACQUIRE] = LL_MYSQL_ACQUIRE, [LL_SQL_RENEW] = LL_MYSQL_RENEW,                        \
      [LL_SQL_RELEASE] = LL_MYSQL_RELEASE, [LL_SQL_INSPECT] = LL_MYSQL_INSPECT,                    \
      [LL_SQL_LIST_FROM] = LL_MYSQL_LIST_FROM, [LL_SQL_LIST_RANGE] = LL_MYSQL_LIST_RANGE,          \
      [LL_SQL_FORCE] = LL_MYSQL_FORCE, [LL_SQL_PRUNE_FROM] = LL_MYSQL_PRUNE_FROM,                  \
      [LL_SQL_PRUNE_RANGE] = LL_MYSQL_PRUNE_RANGE,                                                 \
   }

#endif /* LL_SQL_MYSQL_H */
