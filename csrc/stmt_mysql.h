/*
 * stmt_mysql.h - the MySQL backend's SQL text (stmt_mysql.c), for the
 * backend (backend_mysql.c), its tests and its benchmark
 * (bench/core_mysql.c): one text, so the benchmark's bare client sends
 * exactly the backend's statements. Every text is a printf format whose
 * "%s" is the table name (the schema's also take the version, "%d");
 * every "?" a bound parameter. All of it is static storage: nobody frees
 * it.
 */
#ifndef LL_STMT_MYSQL_H
#define LL_STMT_MYSQL_H

#include "ll_internal.h"

/* The version the statements create; <table>_meta records it. Version 2
 * added the reservation for the next owner (next_owner, next_until,
 * next_since); version 3 the fair mode's queue, the table <table>_queue;
 * version 4 the reentrant hold count (holds, 1 for the records there
 * were); version 5 the failover columns of <table>_meta (primary_id,
 * fence_floor, grants_after, max_ttl_ms: failover.c); version 6 the
 * records' queue mark (queue_until: stmt_mysql.c's LL_MYSQL_QUEUE_MARK).
 * A table of versions 1 to 5 is migrated in place. */
#define LL_MYSQL_SCHEMA_VERSION 6

/* The insert ids of an acquire that left the reservation ours: ~0 less
 * the record's time left in microseconds (at most 30 days, far below
 * 2^45), which fences (one per take) never reach. */
#define LL_MYSQL_RESERVED_MIN (~(unsigned long long)0 - (1ULL << 45))

/* The insert id of a fair first try that found the key free but its
 * queue mark live (LL_SQL_ACQUIRE_FAIR): 2^62, above any fence and below
 * LL_MYSQL_RESERVED_MIN. Written without a suffix, as the SQL spells it. */
#define LL_MYSQL_MARKED 4611686018427387904

/* The statement per operation (ll_sql_st_t), "%s" the table. Their
 * parameters are listed in stmt_mysql.c. */
extern const char *const ll_mysql_statements[LL_SQL_COUNT];

/* The acquire's parameters (ll_mysql_statements[LL_SQL_ACQUIRE]), one
 * letter each, for the backend and the benchmark to bind alike: k key, o
 * owner, f the fence floor (ll_primary_t), t ttl (us), h holder host, p pid, l label, r reserve
 * (us), w waited (us); a space between the insert and each assignment (skipped). reserve and waited
 * are NULL for a plain acquire, which never reserves. LL_MYSQL_ACQUIRE_BINDS is room for every one
 * (an array bound). */
extern const char ll_mysql_acquire_params[];
/* The same for a fair acquire's first try (LL_SQL_ACQUIRE_FAIR), and for
 * the one that reads the queue (LL_SQL_ACQUIRE_FAIR_QUEUE). */
extern const char ll_mysql_acquire_fair_params[];
extern const char ll_mysql_acquire_fair_queue_params[];
#define LL_MYSQL_ACQUIRE_BINDS 56

/* The schema's statements, run unprepared when a connection finds no
 * table or an older one (backend_mysql.c's create_schema). "%s" the
 * table; record_version takes the version once ("%d"), raise_version
 * twice. */
typedef struct ll_mysql_schema_sql
{
   const char *read_version;      /* its row, or error 1146: no table */
   const char *create_table;      /* the records */
   const char *add_next_columns;  /* version 1 -> 2 (error 1060: there) */
   const char *add_holds;         /* versions 1 to 3 -> 4 (1060 again) */
   const char *create_queue;      /* <table>_queue (version 3) */
   const char *create_meta;       /* <table>_meta */
   const char *record_version;    /* a new table's version */
   const char *raise_version;     /* an older table's, never a newer's */
   const char *add_meta_failover; /* versions 1 to 4 -> 5 (1060: there) */
   const char *add_queue_until;   /* versions 1 to 5 -> 6 (1060: there) */
   /* check_primary, in this order: the settings and status read (rows of
    * name, value), then "%1$s" the table: @ll_primary set ("%2$s" the
    * escaped identity), the record written ("%2$lld" the URI's max_ttl in
    * ms, 0: none), and read back. */
   const char *primary_variables;
   const char *primary_status;
   const char *set_primary;
   const char *mark_primary;
   const char *read_primary;
} ll_mysql_schema_sql_t;

extern const ll_mysql_schema_sql_t ll_mysql_schema_sql;

#endif /* LL_STMT_MYSQL_H */
