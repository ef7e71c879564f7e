/*
 * backend_postgresql_private.h - what backend_postgresql.c (the lease
 * operations, the fair queue, the notifications) and
 * backend_postgresql_conn.c (URI, bounded I/O, connection, schema) share:
 * the connection's struct and the calls one makes into the other. Only
 * with libpq (LEASELOCK_WITH_POSTGRESQL). A connection is the engine's
 * (ll_sql_open / ll_sql_close); every call here borrows it and the
 * strings it is given; a PGresult returned is the caller's to PQclear.
 */
#ifndef LL_BACKEND_POSTGRESQL_PRIVATE_H
#define LL_BACKEND_POSTGRESQL_PRIVATE_H

#include "ll_internal.h"

#include <libpq-fe.h>

/* One connection, used by one thread at a time: its strings and handles
 * are its own, freed by ll_sql_close through the driver. */
typedef struct
{
   ll_sql_conn_t b; /* first: the part backend_sql.c uses */
   PGconn *db;      /* NULL while disconnected */
   bool prepared[LL_SQL_COUNT];
   char *conninfo; /* the URI without leaselock's options */
   /* The URI's host, hostaddr and port lists (PGHOST, PGHOSTADDR, PGPORT
    * where it has none) as owned copies split in place at the commas;
    * host_items[i][k] is item i of list k, NULL where list k is not
    * given or has one item (which then stays as libpq reads it). */
   char *host_lists[3];
   const char *host_items[LL_URI_MAX_HOSTS][3];
   int n_hosts;                 /* >= 2: tried one by one; 0: libpq reads the URI's hosts */
   bool read_write;             /* several hosts and no target_session_attrs: read-write */
   int64_t io_timeout_ms;       /* one call's wait once connected */
   int64_t connect_timeout_ms;  /* the whole connection set-up */
   int64_t connect_deadline_ms; /* while connecting: when connect_timeout ends */
   int64_t call_deadline_ms;    /* in a call: when io_timeout ends; -1 before its first wait */
} ll_pg_conn_t;

/* The driver backend_sql.c drives (open, schema, reconnect, close). */
extern const ll_sql_driver_t ll_pg_driver;

/* BACKEND in the one format (ll_backend_fail) with the server's or libpq's
 * message and "(SQLSTATE <state>)" when the server gave one. res may be
 * NULL. The connection is dropped when it is no longer usable. Returns
 * false. */
bool ll_pg_fail (ll_pg_conn_t *c, PGresult *res, const char *what, leaselock_error_t *err);

/* Whether res (NULL: the call failed, err set already) is a command's
 * success; BACKEND (ll_pg_fail) when it is not. Takes res: it is
 * cleared. */
bool ll_pg_command_ok (ll_pg_conn_t *c, PGresult *res, const char *what, leaselock_error_t *err);

/* After a PQsend* call: flushes the query and reads every result by
 * deadline_ms. Returns the first result that failed, or else the last
 * one (the caller clears it); NULL with err set when the connection failed
 * or the deadline passed (the connection is then closed). */
PGresult *ll_pg_collect (ll_pg_conn_t *c, int64_t deadline_ms, int64_t limit_ms, const char *option,
                         const char *what, leaselock_error_t *err);

/* The deadline of the call under way: io_timeout from its first wait
 * once connected, for its prepare and execute together. */
int64_t ll_pg_call_deadline (ll_pg_conn_t *c);

/* Runs prepared statement id (reconnecting and preparing it first when
 * needed). */
PGresult *ll_pg_run (ll_pg_conn_t *c, int id, const char *const *params, const char *what,
                     leaselock_error_t *err);

#endif /* LL_BACKEND_POSTGRESQL_PRIVATE_H */
