/*
 * sql_driver.h - the raw driver connection tests/test_sql.c checks the
 * server side with. The suite is linked once per database, with
 * tests/sql_mysql.c (libmariadb) or tests/sql_postgresql.c (libpq), so a
 * missing client library loses only its own suite. Each call opens a
 * connection of its own to the URI given to raw_use().
 */
#ifndef LL_SQL_DRIVER_H
#define LL_SQL_DRIVER_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* The scheme of the URIs this driver speaks ("mysql", "postgresql"). */
extern const char *const raw_scheme;

/* The server every later call connects to. */
void raw_use (const char *uri);
/* Runs sql; copies the first cell of the first row (or "") to out.
 * Returns false and prints why on error. */
bool raw_query (const char *sql, char *out, size_t size);
/* Kills every other connection of this user to this database, as an admin
 * or a crash would. Returns how many, -1 on error. */
int kill_other_connections (void);
/* Opens a connection that holds the row of key k locked in an open
 * transaction (k must exist). Returns the handle, NULL on error. */
void *raw_lock_row (const char *k);
/* Ends raw_lock_row's transaction and its connection. */
void raw_unlock (void *h);
/* Creates <table> and <table>_meta as schema version 1 made them (the old
 * DDL, version 1 recorded) with one released record, key "old" at fence
 * 7, for the migration test. False and why on stderr on error. */
bool raw_create_v1 (const char *table);
/* Makes the server refuse writes to new sessions (on) or take them again
 * (off), as a replica or a demoted primary would: MySQL: SET GLOBAL
 * read_only as root (through LEASELOCK_MYSQL_SOCKET); PostgreSQL:
 * default_transaction_read_only for this database (its owner may). False
 * and why on stderr when this server does not allow it. */
bool raw_read_only (bool on);
/* The server's processes, main process first, into pids (at most max);
 * false and why on stderr when they cannot be found. */
bool raw_server_pids (pid_t *pids, int *n, int max);
/* Whether the backend connection conn (backend_open) has prepared its
 * statement id (ll_sql_st_t): whether it ever ran one, since statements
 * are prepared at their first use on a connection. */
bool raw_statement_prepared (void *conn, int id);

#endif
