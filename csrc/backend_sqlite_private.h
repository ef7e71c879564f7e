/*
 * backend_sqlite_private.h - what backend_sqlite.c (the lease operations,
 * the fair queue, the notifications) and backend_sqlite_conn.c (opening,
 * schema, closing) share: the connection's struct and the calls one makes
 * into the other. A connection is the engine's (ll_sqlite_open, then
 * ll_sqlite_close or ll_sqlite_abandon); every other call borrows it and
 * the strings it is given.
 */
#ifndef LL_BACKEND_SQLITE_PRIVATE_H
#define LL_BACKEND_SQLITE_PRIVATE_H

#include "ll_internal.h"
#include "stmt_sqlite.h"

#include <sqlite3.h>

/* One connection: owned by the engine, used by one thread at a time. */
typedef struct ll_sqlite_conn
{
   sqlite3 *db;
   sqlite3_stmt *stmt[LL_SQLITE_ST_COUNT]; /* prepared once, reset after each use */
   char *path;                             /* for messages */
   struct ll_sqlite_conn *next;            /* on the abandoned list (see abandon) */
   ll_wake_toucher_t wake;                 /* the release channel: <path>-wake (watch ops) */
   int busy_ms;            /* the URI's busy_timeout_ms: a wait on the file's lock, at most */
   bool ready;             /* set up: an acquire's one try waits only a moment */
   bool readonly;          /* opened read-only: this user may only read the file */
   int64_t busy_since_ms;  /* when the last wait on the file's lock began (ll_real_now_ms) */
   int64_t busy_waited_ms; /* how long it lasted, so far */
   int wal_frames;         /* the WAL's frames after this connection's last commit */
} ll_sqlite_conn_t;

/* BACKEND in the one format of a backend failure: "sqlite: <what>: <msg>
 * (error <rc>, database '<path>')", without "error <rc>, " when rc is 0.
 * Returns false. */
bool ll_sqlite_fail (const char *path, int rc, const char *what, const char *msg,
                     leaselock_error_t *err);

/* BUSY when rc says the file was locked by another connection (its
 * wait ran out), else ll_sqlite_db_error. Returns false. */
bool ll_sqlite_busy_or_error (ll_sqlite_conn_t *c, int rc, const char *what,
                              leaselock_error_t *err);

/* ll_sqlite_fail with the connection's path and SQLite's message for
 * rc. Returns false. */
bool ll_sqlite_db_error (ll_sqlite_conn_t *c, int rc, const char *what, leaselock_error_t *err);

/* The prepared statement which (LL_SQLITE_ST_*), prepared at its first
 * use and kept until close; NULL when that failed (SQLite's message is
 * the connection's, and every call on NULL answers SQLITE_MISUSE). */
sqlite3_stmt *ll_sqlite_st (ll_sqlite_conn_t *c, int which);

/* ll_backend_t's close: finalizes the statements, closes the database
 * and frees the connection (NULL: nothing). */
void ll_sqlite_close (void *conn);

/* sqlite:///absolute/path.db: no user, password, port or host, a file. */
bool ll_sqlite_check_uri_shape (const ll_uri_t *uri, const char *text, leaselock_error_t *err);

/* <path>-wake, the file whose change time a release touches (a new
 * string, NULL when out of memory). */
char *ll_sqlite_wake_path_of (const char *path);

/* ll_backend_t's open: the file of uri_text, created with its
 * directories when missing, set up and at this schema version. A new
 * connection (the caller's: ll_sqlite_close), or NULL with err set. */
void *ll_sqlite_open (const char *uri_text, leaselock_error_t *err);

/* ll_backend_t's abandon, in a forked child: the connection is kept on
 * a list, never closed (SQLite's locks are the parent's). */
void ll_sqlite_abandon (void *conn);

#endif /* LL_BACKEND_SQLITE_PRIVATE_H */
