/*
 * backend_mysql_private.h - what backend_mysql.c (the lease operations
 * and the fair queue) and backend_mysql_conn.c (URI, connection, schema)
 * share: the connection's struct and the calls one makes into the other.
 * Only with libmariadb (LEASELOCK_WITH_MYSQL). A connection is the
 * engine's (ll_sql_open / ll_sql_close); every call here borrows it and
 * the strings it is given.
 */
#ifndef LL_BACKEND_MYSQL_PRIVATE_H
#define LL_BACKEND_MYSQL_PRIVATE_H

#include "ll_internal.h"

#include <mysql.h>

/* One connection, used by one thread at a time: its strings and handles
 * are its own, freed by ll_sql_close through the driver. */
typedef struct
{
   ll_sql_conn_t b; /* first: the part backend_sql.c uses */
   MYSQL *db;       /* NULL while disconnected */
   MYSQL_STMT *st[LL_SQL_COUNT];
   char *user, *password, *dbname, *socket;
   /* The URI's hosts, tried in this order until one takes writes
    * ("localhost" for an empty one); hosts[0] alone with socket=. */
   char *hosts[LL_URI_MAX_HOSTS];
   unsigned ports[LL_URI_MAX_HOSTS]; /* 3306 where the URI names none */
   int n_hosts;
   unsigned connect_timeout, read_timeout, write_timeout;
   /* The socket's SO_RCVTIMEO in ms as ll_mysql_cap_io last set it, which
    * bounds each wait of ll_mysql_recv_read; 0 while libmariadb's own read
    * is used (none set yet on this connection). */
   int recv_timeout_ms;
   bool ssl;
   ll_wake_toucher_t wake; /* this machine's release channel (wake_file.c) */
   /* The queue mark this connection last set (ll_mysql_queue_join; end:
    * us since 1970). Forgotten at each connect (another server may lack
    * it). */
   ll_queue_mark_t mark;
   /* The acquire's parameters, bound once per prepared statement
    * (backend_mysql.c): owned, made at the first acquire, freed with the
    * connection; its handles are forgotten with the statements. */
   struct ll_mysql_acq_binds *acq_binds;
} ll_mysql_conn_t;

/* Forgets the statements c's acquire binds were bound to (they were
 * closed); frees them when free_too. */
void ll_mysql_acq_binds_reset (ll_mysql_conn_t *c, bool free_too);

/* The driver backend_sql.c drives (open, schema, reconnect, close). */
extern const ll_sql_driver_t ll_mysql_driver;

/* Closes the connection and its prepared statements (the driver's
 * disconnect); nothing when there is none. */
void ll_mysql_disconnect (ll_sql_conn_t *b);

/* BACKEND in the one format (ll_backend_fail) from statement st's error,
 * "(error <no>)" after its message; drops the connection when the error
 * says it is gone. Returns false. */
bool ll_mysql_fail_stmt (ll_mysql_conn_t *c, MYSQL_STMT *st, const char *what,
                         leaselock_error_t *err);

/* BACKEND in the one format from the connection's last error; drops the
 * connection when the error says it is gone. Returns false. */
bool ll_mysql_fail_db (ll_mysql_conn_t *c, const char *what, leaselock_error_t *err);

/* Runs a statement without parameters, its result (if any) dropped
 * (schema setup, check_primary). */
bool ll_mysql_exec_plain (ll_mysql_conn_t *c, const char *sql, const char *what,
                          leaselock_error_t *err);

/* Sets the connection's read and write timeouts for the statement about
 * to run: io_timeout (read_timeout, write_timeout), or what is left of
 * the caller's bound (ll_call_bound) when that is less, in milliseconds
 * (at least 1). libmariadb's options count whole seconds and are read at
 * connect only, so this sets its I/O layer's (ma_pvio.h, installed with
 * it), and the socket's SO_RCVTIMEO where the connection reads in recv()
 * (ll_mysql_recv_read): each wait of the statement is bounded by it. */
void ll_mysql_cap_io (ll_mysql_conn_t *c);

/* The driver's check_primary (backend_mysql_primary.c). */
bool ll_mysql_check_primary (ll_sql_conn_t *b, leaselock_error_t *err);

#endif /* LL_BACKEND_MYSQL_PRIVATE_H */
