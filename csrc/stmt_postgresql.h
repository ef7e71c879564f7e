/*
 * stmt_postgresql.h - the PostgreSQL backend's SQL text
 * (stmt_postgresql.c), for the backend (backend_postgresql.c), its tests
 * and its benchmark (bench/core_postgresql.c): one text, so the
 * benchmark's bare client sends exactly the backend's statements. Every
 * text is a printf format whose "%1$s" is the table name; $1, $2, ... are
 * bound parameters. All of it is static storage: nobody frees it.
 */
#ifndef LL_STMT_POSTGRESQL_H
#define LL_STMT_POSTGRESQL_H

#include "ll_internal.h"

/* The version the statements create; <table>_meta records it. Version 2
 * added the reservation for the next owner (next_owner, next_until,
 * next_since); version 3 the fair mode's queue, the table <table>_queue
 * (lock_key, owner, arrived, alive_until; primary key (lock_key, owner),
 * index <table>_queue_order (lock_key, arrived, owner)); version 4 the
 * reentrant hold count (holds, 1 for the records there were); version 5
 * the failover columns of <table>_meta (primary_id, fence_floor,
 * grants_after, max_ttl_ms: failover.c). A table of versions 1 to 4 is
 * migrated in place. */
#define LL_POSTGRESQL_SCHEMA_VERSION 5

/* The statement per operation (ll_sql_st_t; no QUEUE_LOCK: NULL), "%1$s"
 * the table. Their parameters are listed in stmt_postgresql.c. */
extern const char *const ll_pg_statements[LL_SQL_COUNT];

/* The statements run unprepared. "%1$s" the table. */
typedef struct ll_pg_schema_sql
{
   /* The version's row; SQLSTATE 42P01 (undefined_table) when none. */
   const char *read_version;
   /* Creates the tables or migrates an older one, in one transaction
    * under an advisory lock; "%2$d" the version. */
   const char *create_schema;
   /* The queue table and its index (part of create_schema). */
   const char *create_queue;
   /* The listener's LISTENs: the table's channel and its tag's (watch_open). */
   const char *listen;
   /* At each connect (check_primary): records this primary in the meta
    * record, and on a new one raises the fence floor and sets the
    * lock-delay; "%2$lld" the URI's max_ttl in ms (0: none). One row:
    * fence_floor, lock-delay left (us), max_ttl_ms, primary_id, whether
    * this call recorded a new primary, synchronous_commit,
    * synchronous_standby_names, standbys in sync, standbys. */
   const char *check_primary;
   /* Before check_primary: its last four columns alone, in one row. */
   const char *read_durability;
} ll_pg_schema_sql_t;

extern const ll_pg_schema_sql_t ll_pg_schema_sql;

#endif /* LL_STMT_POSTGRESQL_H */
