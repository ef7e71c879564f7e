/*
 * backend_sqlite.c - the embedded SQLite backend: sqlite:///abs/path.db
 *
 * One file on this machine, shared by every process that opens it. The
 * connection runs in WAL mode (readers never block the writer) with
 * synchronous=NORMAL (a commit is durable against a process crash; a power
 * loss may undo the last commits, which for leases only means a lock is
 * free again earlier than its TTL said, never that two owners hold it at
 * once while the machine runs) and a busy timeout, so concurrent writers
 * from other processes queue instead of failing.
 *
 * Every operation is one SQL statement (force_release and queue_join: one
 * short write transaction; prune: one statement for the records, one for
 * the queue), written in stmt_sqlite.c. Time is SQLite's own clock, in
 * integer milliseconds since the epoch (LL_SQLITE_NOW_MS); within one
 * statement julianday('now') is the same value everywhere, so "now" is
 * consistent in a statement.
 *
 * Schema: see stmt_sqlite.h. A record is live while expires_at > now;
 * owner '' never means "free" by itself (a release with min_hold keeps the
 * expiry in the future). A record may carry a reservation for the next
 * owner (next_owner, next_until, next_since; NULL when none), live while
 * next_until > now: an expired record whose reservation is live can be
 * taken by its next owner alone. Acquire and acquire_wait are one UPSERT
 * whose update arm reads the old row: every column is CASE <take> THEN
 * <taken> ELSE <kept, or claimed for the reservation>, and its WHERE is
 * <take> OR <claim> (the claim only for acquire_wait, whose reserve
 * parameter is not NULL), so no row back means BUSY and nothing written,
 * and a row that kept a reservation means BUSY with owner next. A file at
 * schema version 1 or 2 is migrated in place on open (migrate()).
 *
 * The fair mode's queue (queue_join, queue_leave) is the table
 * leaselock_queue beside the records, never in them: plain acquires,
 * renewals, releases, inspect and list never read it.
 *
 * Keys are TEXT with the default BINARY collation, which compares bytes
 * (memcmp): key order and prefix ranges are byte-wise, and LIKE is never
 * used, so '%' and '_' in keys are plain characters.
 */
#include "ll_internal.h"
#include "stmt_sqlite.h"

#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#define MAX_BUSY_TIMEOUT_MS (3600 * 1000)

/* One connection: owned by the engine, used by one thread at a time. */
typedef struct ll_sqlite_conn
{
   sqlite3 *db;
   sqlite3_stmt *stmt[LL_SQLITE_ST_COUNT]; /* prepared once, reset after each use */
   char *path;                             /* for messages */
   struct ll_sqlite_conn *next;            /* on the abandoned list (see abandon) */
   char *wake_path;                        /* the release channel: <path>-wake (watch ops) */
   int wake_fd;                            /* open on it, or -1 */
   int64_t wake_opened_ms;                 /* when wake_fd was last opened or tried */
} ll_sqlite_conn_t;

/* ---- errors ---------------------------------------------------------- */

/* BACKEND in the one format of a backend failure: "sqlite: <what>: <msg>
 * (error <rc>, database '<path>')", without "error <rc>, " when rc is 0.
 * Returns false. */
static bool ll_sqlite_fail (const char *path,
                            int rc,
                            const char *what,
                            const char *msg,
                            leaselock_error_t *err)
{
   char detail[PATH_MAX + 64];
   if (rc)
      snprintf (detail, sizeof detail, "error %d, database '%s'", rc, path);
   else
      snprintf (detail, sizeof detail, "database '%s'", path);
   return ll_backend_fail (err, "sqlite", what, msg, NULL, detail);
}

/* Fills err from the connection's last SQLite error: NOMEM for
 * SQLITE_NOMEM, else BACKEND with SQLite's message (and, with_os, the
 * system's reason). */
static bool ll_sqlite_db_error_os (ll_sqlite_conn_t *c,
                                   int rc,
                                   const char *what,
                                   bool with_os,
                                   leaselock_error_t *err)
{
   if ((rc & 0xff) == SQLITE_NOMEM || !c->db)
      return ll_error_set (err, LEASELOCK_NOMEM, "out of memory in SQLite (%s)", what);
   char msg[LEASELOCK_ERROR_MAX];
   int e = with_os ? sqlite3_system_errno (c->db) : 0;
   snprintf (msg, sizeof msg, "%s%s%s", sqlite3_errmsg (c->db), e ? ": " : "",
             e ? strerror (e) : "");
   return ll_sqlite_fail (c->path, rc, what, msg, err);
}

static bool ll_sqlite_db_error (ll_sqlite_conn_t *c,
                                int rc,
                                const char *what,
                                leaselock_error_t *err)
{
   return ll_sqlite_db_error_os (c, rc, what, false, err);
}

/* ---- opening --------------------------------------------------------- */

static bool ll_sqlite_dir_error (const char *path, const char *dir, int e, leaselock_error_t *err)
{
   char msg[PATH_MAX + 64];
   snprintf (msg, sizeof msg, "'%s': %s", dir, strerror (e));
   return ll_sqlite_fail (path, 0, "making its directory", msg, err);
}

/* Creates the missing parent directories of path (mode 0700). */
static bool ll_sqlite_make_parents (const char *path, leaselock_error_t *err)
{
   char dir[PATH_MAX];
   snprintf (dir, sizeof dir, "%s", path);
   char *slash = strrchr (dir, '/');
   if (!slash || slash == dir)
      return true; /* a file in "/" */
   *slash = '\0';
   struct stat st;
   if (stat (dir, &st) == 0)
      return S_ISDIR (st.st_mode) || ll_sqlite_dir_error (path, dir, ENOTDIR, err);
   /* Walk down from the root: every component that is missing is made. */
   for (char *p = dir + 1;; p++) {
      if (*p != '/' && *p != '\0')
         continue;
      char saved = *p;
      *p = '\0';
      int e = mkdir (dir, 0700) != 0 && errno != EEXIST ? errno : 0;
      if (!e && (stat (dir, &st) != 0 || !S_ISDIR (st.st_mode)))
         e = ENOTDIR;
      if (e)
         return ll_sqlite_dir_error (path, dir, e, err);
      *p = saved;
      if (saved == '\0')
         break;
   }
   return true;
}

/* Runs one statement that returns no rows (or ignores them). */
static int ll_sqlite_exec_simple (sqlite3 *db, const char *sql)
{
   return sqlite3_exec (db, sql, NULL, NULL, NULL);
}

/* Reads PRAGMA user_version. */
static int ll_sqlite_read_version (sqlite3 *db, int *version)
{
   sqlite3_stmt *st = NULL;
   int rc = sqlite3_prepare_v2 (db, "PRAGMA user_version", -1, &st, NULL);
   if (rc != SQLITE_OK)
      return rc;
   rc = sqlite3_step (st);
   if (rc == SQLITE_ROW) {
      *version = sqlite3_column_int (st, 0);
      rc = SQLITE_OK;
   }
   sqlite3_finalize (st);
   return rc;
}

/* Switches the file to WAL. The switch needs a moment of exclusive access:
 * when several processes open a new file at once, SQLite may answer BUSY
 * without calling the busy handler, so this retries until the timeout. */
static bool ll_sqlite_use_wal (ll_sqlite_conn_t *c, int timeout_ms, leaselock_error_t *err)
{
   int waited = 0;
   for (;;) {
      sqlite3_stmt *st = NULL;
      int rc = sqlite3_prepare_v2 (c->db, ll_sqlite_wal, -1, &st, NULL);
      if (rc == SQLITE_OK) {
         rc = sqlite3_step (st);
         if (rc == SQLITE_ROW) {
            const char *mode = (const char *)sqlite3_column_text (st, 0);
            bool wal = mode && !strcmp (mode, "wal");
            char msg[64];
            snprintf (msg, sizeof msg, "the journal mode stays '%s'", mode ? mode : "?");
            sqlite3_finalize (st);
            return wal || ll_sqlite_fail (c->path, 0, "setting WAL mode", msg, err);
         }
      }
      sqlite3_finalize (st);
      int primary = rc & 0xff;
      if ((primary != SQLITE_BUSY && primary != SQLITE_LOCKED) || waited >= timeout_ms)
         return ll_sqlite_db_error (c, rc, "setting WAL mode", err);
      struct timespec ts = { 0, 5 * 1000 * 1000 };
      nanosleep (&ts, NULL);
      waited += 5;
   }
}

static bool ll_sqlite_too_new (ll_sqlite_conn_t *c, int version, leaselock_error_t *err)
{
   char msg[160];
   snprintf (msg, sizeof msg,
             "leaselock schema version %d, newer than the version %d this leaselock "
             "understands: upgrade leaselock or use another file",
             version, LL_SQLITE_SCHEMA_VERSION);
   return ll_sqlite_fail (c->path, 0, "reading the schema version", msg, err);
}

/* Runs sql inside the transaction migrate opened; on failure rolls it back
 * and fills err. */
static bool ll_sqlite_in_migration (ll_sqlite_conn_t *c, const char *sql, leaselock_error_t *err)
{
   int rc = ll_sqlite_exec_simple (c->db, sql);
   if (rc == SQLITE_OK)
      return true;
   ll_sqlite_db_error (c, rc, "creating the schema", err);
   ll_sqlite_exec_simple (c->db, "ROLLBACK");
   return false;
}

/* Creates the table on a new file, brings an older one up to
 * LL_SQLITE_SCHEMA_VERSION, or checks the version of an existing one. Each
 * schema version adds its step here, inside the same transaction: version
 * 2 the reservation's columns (ll_sqlite_migrate_1_2), version 3 the queue
 * table (ll_sqlite_create_queue). */
static bool ll_sqlite_migrate (ll_sqlite_conn_t *c, leaselock_error_t *err)
{
   int version = 0;
   int rc = ll_sqlite_read_version (c->db, &version);
   if (rc != SQLITE_OK)
      return ll_sqlite_db_error (c, rc, "reading the schema version", err);
   if (version == LL_SQLITE_SCHEMA_VERSION)
      return true;
   if (version > LL_SQLITE_SCHEMA_VERSION)
      return ll_sqlite_too_new (c, version, err);

   rc = ll_sqlite_exec_simple (c->db, "BEGIN IMMEDIATE");
   if (rc != SQLITE_OK)
      return ll_sqlite_db_error (c, rc, "creating the schema", err);
   /* Another process may have done it meanwhile: read again under the
    * write lock. */
   rc = ll_sqlite_read_version (c->db, &version);
   if (rc != SQLITE_OK) {
      ll_sqlite_db_error (c, rc, "creating the schema", err);
      ll_sqlite_exec_simple (c->db, "ROLLBACK");
      return false;
   }
   const char *step = version == 0 ? ll_sqlite_create : version == 1 ? ll_sqlite_migrate_1_2 : NULL;
   if (step && !ll_sqlite_in_migration (c, step, err))
      return false;
   if (version >= 1 && version < 4 && !ll_sqlite_in_migration (c, ll_sqlite_migrate_to_4, err))
      return false;
   if (version < LL_SQLITE_SCHEMA_VERSION &&
       (!ll_sqlite_in_migration (c, ll_sqlite_create_queue, err) ||
        !ll_sqlite_in_migration (c, ll_sqlite_set_version, err)))
      return false;
   if (!ll_sqlite_in_migration (c, "COMMIT", err))
      return false;
   return version <= LL_SQLITE_SCHEMA_VERSION || ll_sqlite_too_new (c, version, err);
}

static void ll_sqlite_close (void *conn);

/* INVALID "bad SQLite URI "<shown>": <why>; expected ...". Returns false. */
static bool ll_sqlite_bad_uri (const char *text, const char *why, leaselock_error_t *err)
{
   char shown[512]; /* the URI as messages may show it: no password */
   ll_uri_redact (text, shown, sizeof shown);
   return ll_error_set (err, LEASELOCK_INVALID,
                        "bad SQLite URI \"%s\": %s; expected sqlite:///absolute/path.db", shown,
                        why);
}

/* sqlite:///absolute/path.db: no user, password, port or host, a file. */
static bool ll_sqlite_check_uri_shape (const ll_uri_t *uri,
                                       const char *text,
                                       leaselock_error_t *err)
{
   if (uri->user || uri->password || uri->port)
      return ll_sqlite_bad_uri (text, "no user, password or port allowed", err);
   if (uri->host[0]) {
      char why[160];
      snprintf (why, sizeof why,
                "a host (\"%.64s\") is not allowed and relative paths are not supported",
                uri->host);
      return ll_sqlite_bad_uri (text, why, err);
   }
   if (uri->path[0] != '/')
      return ll_sqlite_bad_uri (text, "no file path", err);
   size_t plen = strlen (uri->path);
   if (uri->path[plen - 1] == '/')
      return ll_sqlite_bad_uri (text, "the path names a directory, not a file", err);
   if (plen >= PATH_MAX)
      return ll_error_set (err, LEASELOCK_INVALID,
                           "bad SQLite URI: the path is longer than %d bytes", PATH_MAX - 1);
   return true;
}

/* The URI's options: busy_timeout_ms only. */
static bool ll_sqlite_read_options (const ll_uri_t *uri, int *busy_ms, leaselock_error_t *err)
{
   for (int i = 0; i < uri->n_params; i++) {
      const char *name = uri->params[i].name, *value = uri->params[i].value;
      if (strcmp (name, "busy_timeout_ms"))
         return ll_error_set (err, LEASELOCK_INVALID,
                              "unknown SQLite URI option \"%s\" (known: busy_timeout_ms)", name);
      int64_t ms;
      if (!ll_uri_int_option ("sqlite", name, value, 0, MAX_BUSY_TIMEOUT_MS, "milliseconds", &ms,
                              err))
         return false;
      *busy_ms = (int)ms;
   }
   return true;
}

/* <path>-wake, the file whose change time a release touches (a new
 * string, NULL when out of memory). */
static char *ll_sqlite_wake_path_of (const char *path)
{
   size_t n = strlen (path);
   char *w = malloc (n + sizeof "-wake");
   if (w) {
      memcpy (w, path, n);
      memcpy (w + n, "-wake", sizeof "-wake");
   }
   return w;
}

/* A release tells the watchers of other processes (ll_backend_t's
 * watch_*): one system call (futimens) that changes the channel file's
 * times, which inotify reports as IN_ATTRIB. Only releases touch it, never
 * a claim or another write, so waiters' own writes wake nobody. The file
 * is opened (or its open tried) again at most every WAKE_REOPEN_MS, so
 * that one made by a new listener, or deleted and made again, is found
 * within that time and a missing one costs no system call. Best effort: a missing file (nobody
 * listens yet) or a refused touch only leaves the waiters to their next
 * poll. */
#define WAKE_REOPEN_MS 1000
static void ll_sqlite_wake_watchers (ll_sqlite_conn_t *c)
{
   int64_t now = ll_real_now_ms ();
   if (c->wake_opened_ms == 0 || now - c->wake_opened_ms >= WAKE_REOPEN_MS) {
      if (c->wake_fd >= 0)
         close (c->wake_fd);
      c->wake_fd = open (c->wake_path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
      c->wake_opened_ms = now;
   }
   if (c->wake_fd >= 0)
      (void)futimens (c->wake_fd, NULL);
}

/* A connection with no database open yet. */
static ll_sqlite_conn_t *ll_sqlite_conn_new (const char *path, leaselock_error_t *err)
{
   ll_sqlite_conn_t *c = calloc (1, sizeof *c);
   if (!c || !(c->path = strdup (path)) || !(c->wake_path = ll_sqlite_wake_path_of (path))) {
      if (c)
         free (c->path);
      free (c);
      ll_error_set (err, LEASELOCK_NOMEM, "out of memory opening an SQLite connection");
      return NULL;
   }
   c->wake_fd = -1;
   return c;
}

/* Opens the file read-write (created when missing) and checks that it is
 * a database this user may write. */
static bool ll_sqlite_open_file (ll_sqlite_conn_t *c, int busy_ms, leaselock_error_t *err)
{
   /* NOMUTEX: the engine gives a connection to one thread at a time. */
   int rc = sqlite3_open_v2 (
     c->path, &c->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
   if (rc != SQLITE_OK)
      return ll_sqlite_db_error_os (c, rc, "opening the database", true, err);
   sqlite3_extended_result_codes (c->db, 1);
   sqlite3_busy_timeout (c->db, busy_ms);
   /* The first read says whether the file is a database at all. */
   int version = 0;
   rc = ll_sqlite_read_version (c->db, &version);
   if (rc != SQLITE_OK)
      return ll_sqlite_db_error_os (c, rc, "opening the database", true, err);
   if (sqlite3_db_readonly (c->db, "main") == 1)
      return ll_sqlite_fail (c->path, 0, "opening the database",
                             "the file is read-only for this user", err);
   return true;
}

/* WAL, synchronous=NORMAL, the schema, the statements. */
static bool ll_sqlite_set_up (ll_sqlite_conn_t *c, int busy_ms, leaselock_error_t *err)
{
   if (!ll_sqlite_use_wal (c, busy_ms, err))
      return false;
   int rc = ll_sqlite_exec_simple (c->db, ll_sqlite_synchronous);
   if (rc != SQLITE_OK)
      return ll_sqlite_db_error (c, rc, "setting synchronous=NORMAL", err);
   if (!ll_sqlite_migrate (c, err))
      return false;
   for (int i = 0; i < LL_SQLITE_ST_COUNT; i++) {
      rc = sqlite3_prepare_v3 (c->db, ll_sqlite_statements[i], -1, SQLITE_PREPARE_PERSISTENT,
                               &c->stmt[i], NULL);
      if (rc != SQLITE_OK)
         return ll_sqlite_db_error (c, rc, "preparing a statement", err);
   }
   return true;
}

static void *ll_sqlite_open (const char *uri_text, leaselock_error_t *err)
{
   ll_uri_t uri;
   if (!ll_uri_parse (uri_text, &uri, err))
      return NULL;
   ll_sqlite_conn_t *c = NULL;
   int busy_ms = LL_SQLITE_DEFAULT_BUSY_TIMEOUT_MS;
   bool ok = ll_sqlite_check_uri_shape (&uri, uri_text, err) &&
             ll_sqlite_read_options (&uri, &busy_ms, err) &&
             ll_sqlite_make_parents (uri.path, err) && (c = ll_sqlite_conn_new (uri.path, err)) &&
             ll_sqlite_open_file (c, busy_ms, err) && ll_sqlite_set_up (c, busy_ms, err);
   ll_uri_cleanup (&uri);
   if (!ok) {
      ll_sqlite_close (c);
      return NULL;
   }
   return c;
}

static void ll_sqlite_close (void *conn)
{
   ll_sqlite_conn_t *c = conn;
   if (!c)
      return;
   for (int i = 0; i < LL_SQLITE_ST_COUNT; i++)
      sqlite3_finalize (c->stmt[i]);
   sqlite3_close (c->db);
   if (c->wake_fd >= 0)
      close (c->wake_fd);
   free (c->path);
   free (c->wake_path);
   free (c);
}

/*
 * In a forked child. SQLite's documentation forbids using a connection
 * across fork(), and closing one is a use: sqlite3_close() may take
 * SQLite's global mutexes (possibly held by another parent thread at the
 * time of the fork, so the child would hang), touch the WAL index shared
 * memory the parent is using, try a checkpoint, or close file descriptors
 * whose POSIX locks SQLite tracks per inode. So nothing is freed: the
 * connection is put on a list that keeps it reachable (leak checkers stay
 * quiet) and the child opens fresh connections of its own.
 *
 * This is only the fallback for a fork() that skipped the engine's atfork
 * handlers: those close every SQLite connection before fork()
 * (close_before_fork), because a child's new connection to a file would
 * otherwise share the inherited per-inode lock bookkeeping, which holds the
 * parent's locks, not the child's.
 */
static _Atomic (ll_sqlite_conn_t *) abandoned;

static void ll_sqlite_abandon (void *conn)
{
   ll_sqlite_conn_t *c = conn;
   if (!c)
      return;
   ll_sqlite_conn_t *head = atomic_load (&abandoned);
   do {
      c->next = head;
   } while (!atomic_compare_exchange_weak (&abandoned, &head, c));
}

/* ---- operations ------------------------------------------------------ */

static inline void ll_sqlite_bind_key_owner (sqlite3_stmt *st,
                                             const char *key,
                                             size_t key_len,
                                             const char *owner)
{
   sqlite3_bind_text (st, 1, key, (int)key_len, SQLITE_STATIC);
   sqlite3_bind_text (st, 2, owner, LEASELOCK_OWNER_LEN, SQLITE_STATIC);
}

/* acquire (reserve_ms < 0: ?7 and ?8 NULL) and acquire_wait: one
 * statement. A row without a reservation is a take; a row with one is a
 * claim (BUSY, reserved); no row is BUSY. */
static bool ll_sqlite_acquire_wait (void *conn,
                                    const char *key,
                                    size_t key_len,
                                    const char *owner,
                                    int64_t ttl_ms,
                                    const ll_holder_t *holder,
                                    int64_t reserve_ms,
                                    int64_t waited_ms,
                                    int64_t *fence,
                                    bool *reserved,
                                    int64_t *left_ms,
                                    leaselock_error_t *err)
{
   ll_sqlite_conn_t *c = conn;
   *reserved = false;
   sqlite3_stmt *st = c->stmt[LL_SQLITE_ST_ACQUIRE];
   const char *host = holder && holder->host ? holder->host : "";
   const char *label = holder && holder->label ? holder->label : "";
   ll_sqlite_bind_key_owner (st, key, key_len, owner);
   sqlite3_bind_int64 (st, 3, ttl_ms);
   sqlite3_bind_text (st, 4, host, -1, SQLITE_STATIC);
   sqlite3_bind_int64 (st, 5, holder ? holder->pid : 0);
   sqlite3_bind_text (st, 6, label, -1, SQLITE_STATIC);
   if (reserve_ms < 0) {
      sqlite3_bind_null (st, 7);
      sqlite3_bind_null (st, 8);
   } else {
      sqlite3_bind_int64 (st, 7, reserve_ms);
      sqlite3_bind_int64 (st, 8, waited_ms);
   }
   bool row = false, claimed = false;
   int64_t f = 0, left = -1;
   *left_ms = -1;
   int rc = sqlite3_step (st);
   if (rc == SQLITE_ROW) {
      row = true;
      f = sqlite3_column_int64 (st, 0);
      claimed = sqlite3_column_type (st, 1) != SQLITE_NULL;
      left = sqlite3_column_int64 (st, 2);
      /* RETURNING rows are computed in the first step; the second ends
       * the statement (and commits). */
      rc = sqlite3_step (st);
   }
   bool ok = false;
   *reserved = false;
   if (rc != SQLITE_DONE) {
      ll_sqlite_db_error (c, rc, "acquire", err);
   } else if (row && !claimed) {
      *fence = f;
      ok = true;
   } else {
      *reserved = claimed;
      *left_ms = claimed ? (left > 0 ? left : 0) : -1;
      ll_error_set (err, LEASELOCK_BUSY, "the lock is held by another owner");
   }
   sqlite3_reset (st);
   return ok;
}

/* Runs an UPDATE bound with key, owner and a duration; *changed tells
 * whether a row matched. */
static bool ll_sqlite_run_update (ll_sqlite_conn_t *c,
                                  int which,
                                  const char *what,
                                  const char *key,
                                  size_t key_len,
                                  const char *owner,
                                  int64_t ms,
                                  bool *changed,
                                  leaselock_error_t *err)
{
   sqlite3_stmt *st = c->stmt[which];
   ll_sqlite_bind_key_owner (st, key, key_len, owner);
   sqlite3_bind_int64 (st, 3, ms);
   int rc = sqlite3_step (st);
   bool ok = rc == SQLITE_DONE;
   if (ok)
      *changed = sqlite3_changes (c->db) > 0;
   else
      ll_sqlite_db_error (c, rc, what, err);
   sqlite3_reset (st);
   return ok;
}

static bool ll_sqlite_renew (void *conn,
                             const char *key,
                             size_t key_len,
                             const char *owner,
                             int64_t ttl_ms,
                             leaselock_error_t *err)
{
   bool changed = false;
   if (!ll_sqlite_run_update (conn, LL_SQLITE_ST_RENEW, "renew", key, key_len, owner, ttl_ms,
                              &changed, err))
      return false;
   if (!changed)
      return ll_error_set (err, LEASELOCK_NOT_HELD,
                           "the lease is not held by this owner (released, expired or taken)");
   return true;
}

static bool ll_sqlite_release (void *conn,
                               const char *key,
                               size_t key_len,
                               const char *owner,
                               int64_t min_hold_ms,
                               leaselock_error_t *err)
{
   ll_sqlite_conn_t *c = conn;
   sqlite3_stmt *st = c->stmt[LL_SQLITE_ST_RELEASE];
   ll_sqlite_bind_key_owner (st, key, key_len, owner);
   sqlite3_bind_int64 (st, 3, min_hold_ms);
   int rc = sqlite3_step (st);
   bool ours = rc == SQLITE_ROW;
   /* Only a release that leaves a waiter next (a live reservation, or a
    * fair queue's first) wakes anybody: the watchers wake that waiter, and
    * waking every process on every release would cost each a wake-up for
    * nothing. */
   bool next =
     ours && ((sqlite3_column_type (st, 0) != SQLITE_NULL && sqlite3_column_int64 (st, 0) > 0) ||
              sqlite3_column_type (st, 1) != SQLITE_NULL);
   if (ours)
      rc = sqlite3_step (st);
   bool ok = rc == SQLITE_DONE || ll_sqlite_db_error (c, rc, "release", err);
   sqlite3_reset (st);
   if (!ok)
      return false;
   if (!ours)
      return ll_error_set (err, LEASELOCK_NOT_HELD,
                           "the lease is not held by this owner (released already or taken)");
   if (next)
      ll_sqlite_wake_watchers (c);
   return true;
}

/* Copies a TEXT column into a fixed buffer (truncating; NUL-terminated). */
static size_t ll_sqlite_copy_text (sqlite3_stmt *st, int col, char *buf, size_t size)
{
   const char *s = (const char *)sqlite3_column_text (st, col);
   return ll_copy_clipped (buf, size, s, (size_t)sqlite3_column_bytes (st, col));
}

static void ll_sqlite_read_record (sqlite3_stmt *st, leaselock_record_t *rec)
{
   memset (rec, 0, sizeof *rec);
   rec->key_len = ll_sqlite_copy_text (st, 0, rec->key, sizeof rec->key);
   ll_sqlite_copy_text (st, 1, rec->owner, sizeof rec->owner);
   rec->fence = sqlite3_column_int64 (st, 2);
   rec->expires_in_ms = sqlite3_column_int64 (st, 3);
   ll_sqlite_copy_text (st, 4, rec->host, sizeof rec->host);
   rec->pid = sqlite3_column_int64 (st, 5);
   ll_sqlite_copy_text (st, 6, rec->label, sizeof rec->label);
   rec->holds = rec->owner[0] ? sqlite3_column_int64 (st, 7) : 0;
}

static bool ll_sqlite_hold (void *conn,
                            const char *key,
                            size_t key_len,
                            const char *owner,
                            int delta,
                            int64_t *holds,
                            leaselock_error_t *err)
{
   ll_sqlite_conn_t *c = conn;
   sqlite3_stmt *st = c->stmt[LL_SQLITE_ST_HOLD];
   ll_sqlite_bind_key_owner (st, key, key_len, owner);
   sqlite3_bind_int (st, 3, delta);
   int rc = sqlite3_step (st);
   bool ok = rc == SQLITE_ROW;
   if (ok)
      *holds = sqlite3_column_int64 (st, 0);
   else if (rc == SQLITE_DONE)
      ll_error_set (err, LEASELOCK_NOT_HELD, "the lease is not held by this owner");
   else
      ll_sqlite_db_error (c, rc, "hold", err);
   sqlite3_reset (st);
   return ok;
}

static bool ll_sqlite_inspect (void *conn,
                               const char *key,
                               size_t key_len,
                               leaselock_record_t *rec,
                               bool *found,
                               leaselock_error_t *err)
{
   ll_sqlite_conn_t *c = conn;
   sqlite3_stmt *st = c->stmt[LL_SQLITE_ST_INSPECT];
   sqlite3_bind_text (st, 1, key, (int)key_len, SQLITE_STATIC);
   int rc = sqlite3_step (st);
   bool ok = true;
   *found = false;
   if (rc == SQLITE_ROW) {
      ll_sqlite_read_record (st, rec);
      *found = true;
   } else if (rc != SQLITE_DONE) {
      ok = ll_sqlite_db_error (c, rc, "inspect", err);
   }
   sqlite3_reset (st);
   return ok;
}

/* Binds ?1 and ?2 of list and prune: keys with the prefix are >= prefix
 * and < the prefix with its last byte increased. Valid UTF-8 never holds
 * the byte 0xFF, so the last byte can always be increased, and "\xff" is
 * above every key (the bound for the empty prefix). upper is the caller's
 * and must outlive the statement's step. */
static void ll_sqlite_bind_prefix (sqlite3_stmt *st,
                                   const char *prefix,
                                   size_t prefix_len,
                                   char upper[LEASELOCK_KEY_MAX + 1])
{
   size_t upper_len = ll_prefix_upper (prefix, prefix_len, upper);
   if (upper_len == 0) {
      upper[0] = (char)0xFF;
      upper_len = 1;
   }
   sqlite3_bind_text (st, 1, prefix_len ? prefix : "", (int)prefix_len, SQLITE_STATIC);
   sqlite3_bind_text (st, 2, upper, (int)upper_len, SQLITE_STATIC);
}

static bool ll_sqlite_list (void *conn,
                            const char *prefix,
                            size_t prefix_len,
                            leaselock_record_cb fn,
                            void *user_data,
                            leaselock_error_t *err)
{
   ll_sqlite_conn_t *c = conn;
   sqlite3_stmt *st = c->stmt[LL_SQLITE_ST_LIST];
   char upper[LEASELOCK_KEY_MAX + 1];
   ll_sqlite_bind_prefix (st, prefix, prefix_len, upper);
   leaselock_record_t rec;
   bool ok = true;
   int rc;
   while ((rc = sqlite3_step (st)) == SQLITE_ROW) {
      ll_sqlite_read_record (st, &rec);
      if (!fn (&rec, user_data))
         break;
   }
   if (rc != SQLITE_ROW && rc != SQLITE_DONE)
      ok = ll_sqlite_db_error (c, rc, "list", err);
   sqlite3_reset (st);
   return ok;
}

/* Steps a statement that returns no rows and resets it. */
static int ll_sqlite_step_done (sqlite3_stmt *st)
{
   int rc = sqlite3_step (st);
   sqlite3_reset (st);
   return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

static bool ll_sqlite_force_release (void *conn,
                                     const char *key,
                                     size_t key_len,
                                     bool *took,
                                     leaselock_error_t *err)
{
   ll_sqlite_conn_t *c = conn;
   *took = false;
   int rc = ll_sqlite_step_done (c->stmt[LL_SQLITE_ST_BEGIN]);
   if (rc != SQLITE_OK)
      return ll_sqlite_db_error (c, rc, "force release", err);
   sqlite3_stmt *live = c->stmt[LL_SQLITE_ST_FORCE_LIVE], *any = c->stmt[LL_SQLITE_ST_FORCE_ANY];
   sqlite3_bind_text (live, 1, key, (int)key_len, SQLITE_STATIC);
   rc = ll_sqlite_step_done (live);
   if (rc == SQLITE_OK) {
      *took = sqlite3_changes (c->db) > 0;
      if (!*took) {
         sqlite3_bind_text (any, 1, key, (int)key_len, SQLITE_STATIC);
         rc = ll_sqlite_step_done (any);
      }
   }
   if (rc == SQLITE_OK)
      rc = ll_sqlite_step_done (c->stmt[LL_SQLITE_ST_COMMIT]);
   if (rc != SQLITE_OK) {
      ll_sqlite_db_error (c, rc, "force release", err);
      if (!sqlite3_get_autocommit (c->db))
         ll_sqlite_step_done (c->stmt[LL_SQLITE_ST_ROLLBACK]);
      *took = false;
      return false;
   }
   ll_sqlite_wake_watchers (c);
   return true;
}

static bool ll_sqlite_prune (void *conn,
                             const char *prefix,
                             size_t prefix_len,
                             int64_t older_than_ms,
                             int64_t *count,
                             leaselock_error_t *err)
{
   ll_sqlite_conn_t *c = conn;
   sqlite3_stmt *st = c->stmt[LL_SQLITE_ST_PRUNE];
   char upper[LEASELOCK_KEY_MAX + 1];
   ll_sqlite_bind_prefix (st, prefix, prefix_len, upper);
   sqlite3_bind_int64 (st, 3, older_than_ms);
   int rc = ll_sqlite_step_done (st);
   if (rc != SQLITE_OK)
      return ll_sqlite_db_error (c, rc, "prune", err);
   *count = sqlite3_changes (c->db);
   /* The queue entries that ran out go too (not counted: they are not
    * records). */
   st = c->stmt[LL_SQLITE_ST_QUEUE_PRUNE];
   ll_sqlite_bind_prefix (st, prefix, prefix_len, upper);
   sqlite3_bind_int64 (st, 3, older_than_ms);
   rc = ll_sqlite_step_done (st);
   if (rc != SQLITE_OK)
      return ll_sqlite_db_error (c, rc, "prune", err);
   return true;
}

/* ---- the fair mode's queue --------------------------------------------- */

/* Rolls back the transaction queue_join opened, after err was filled. */
static bool ll_sqlite_queue_fail (ll_sqlite_conn_t *c, int rc, leaselock_error_t *err)
{
   ll_sqlite_db_error (c, rc, "queue_join", err);
   if (!sqlite3_get_autocommit (c->db))
      ll_sqlite_step_done (c->stmt[LL_SQLITE_ST_ROLLBACK]);
   return false;
}

/* queue_join: the upsert then the count, in one write transaction, so no
 * other join comes between them (the file is local: the two statements
 * cost no round trip). */
static bool ll_sqlite_queue_join (void *conn,
                                  const char *key,
                                  size_t key_len,
                                  const char *owner,
                                  int64_t keep_ms,
                                  int64_t *ahead,
                                  leaselock_error_t *err)
{
   ll_sqlite_conn_t *c = conn;
   int rc = ll_sqlite_step_done (c->stmt[LL_SQLITE_ST_BEGIN]);
   if (rc != SQLITE_OK)
      return ll_sqlite_queue_fail (c, rc, err);
   sqlite3_stmt *st = c->stmt[LL_SQLITE_ST_QUEUE_JOIN];
   ll_sqlite_bind_key_owner (st, key, key_len, owner);
   sqlite3_bind_int64 (st, 3, keep_ms);
   rc = ll_sqlite_step_done (st);
   if (rc != SQLITE_OK)
      return ll_sqlite_queue_fail (c, rc, err);
   st = c->stmt[LL_SQLITE_ST_QUEUE_AHEAD];
   ll_sqlite_bind_key_owner (st, key, key_len, owner);
   rc = sqlite3_step (st);
   int64_t n = rc == SQLITE_ROW ? sqlite3_column_int64 (st, 0) : 0;
   sqlite3_reset (st);
   if (rc != SQLITE_ROW)
      return ll_sqlite_queue_fail (c, rc, err);
   rc = ll_sqlite_step_done (c->stmt[LL_SQLITE_ST_COMMIT]);
   if (rc != SQLITE_OK)
      return ll_sqlite_queue_fail (c, rc, err);
   *ahead = n;
   return true;
}

static bool ll_sqlite_queue_leave (void *conn,
                                   const char *key,
                                   size_t key_len,
                                   const char *owner,
                                   leaselock_error_t *err)
{
   ll_sqlite_conn_t *c = conn;
   sqlite3_stmt *st = c->stmt[LL_SQLITE_ST_QUEUE_LEAVE];
   ll_sqlite_bind_key_owner (st, key, key_len, owner);
   int rc = ll_sqlite_step_done (st);
   return rc == SQLITE_OK || ll_sqlite_db_error (c, rc, "queue_leave", err);
}

/* ---- release notifications ------------------------------------------- */

/* A listener: inotify on the channel file <path>-wake (created here when
 * missing, with the database file's permissions), for the touches of
 * releases (IN_ATTRIB). Its deletion or renaming breaks the listener,
 * and the next one recreates the file. No key: a touch says only that
 * something was released. */
typedef struct ll_sqlite_watch
{
   int fd; /* the inotify instance */
} ll_sqlite_watch_t;

static void ll_sqlite_watch_close (void *listener)
{
   ll_sqlite_watch_t *w = listener;
   if (w && w->fd >= 0)
      close (w->fd);
   free (w);
}

static void *ll_sqlite_watch_open (const char *uri_text, leaselock_error_t *err)
{
   ll_uri_t uri;
   if (!ll_uri_parse (uri_text, &uri, err))
      return NULL;
   char *wake = NULL;
   ll_sqlite_watch_t *w = NULL;
   if (!ll_sqlite_check_uri_shape (&uri, uri_text, err))
      goto done;
   wake = ll_sqlite_wake_path_of (uri.path);
   w = calloc (1, sizeof *w);
   if (!wake || !w) {
      ll_error_set (err, LEASELOCK_NOMEM, "out of memory");
      goto done;
   }
   struct stat st;
   mode_t mode = stat (uri.path, &st) == 0 ? (st.st_mode & 0666) : 0644;
   int fd = open (wake, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, mode);
   if (fd >= 0)
      close (fd);
   w->fd = inotify_init1 (IN_NONBLOCK | IN_CLOEXEC);
   if (fd < 0 || w->fd < 0 ||
       inotify_add_watch (w->fd, wake, IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF) < 0) {
      ll_sqlite_fail (uri.path, 0, "watching the release channel", strerror (errno), err);
      ll_sqlite_watch_close (w);
      w = NULL;
   }
done:
   free (wake);
   ll_uri_cleanup (&uri);
   return w;
}

static int ll_sqlite_watch_fd (void *listener)
{
   return ((ll_sqlite_watch_t *)listener)->fd;
}

static bool ll_sqlite_watch_drain (void *listener,
                                   ll_watch_fn fn,
                                   void *data,
                                   leaselock_error_t *err)
{
   ll_sqlite_watch_t *w = listener;
   char buf[4096] __attribute__ ((aligned (__alignof__(struct inotify_event))));
   bool touched = false, broken = false;
   ssize_t n;
   while ((n = read (w->fd, buf, sizeof buf)) > 0) {
      for (char *p = buf; p < buf + n;) {
         const struct inotify_event *ev = (const struct inotify_event *)p;
         touched = touched || (ev->mask & IN_ATTRIB);
         broken = broken || (ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED));
         p += sizeof *ev + ev->len;
      }
   }
   if (n < 0 && errno != EAGAIN && errno != EINTR)
      broken = true;
   if (touched)
      fn (data, NULL, 0, NULL);
   if (broken)
      return ll_error_set (err, LEASELOCK_BACKEND, "sqlite: the release channel file went away");
   return true;
}

const ll_backend_t ll_backend_sqlite = {
   .name = "sqlite",
   .schemes = { "sqlite", NULL },
   .available = true,
   .unavailable = NULL,
   .open = ll_sqlite_open,
   .close = ll_sqlite_close,
   .abandon = ll_sqlite_abandon,
   .close_before_fork = true,
   .acquire_wait = ll_sqlite_acquire_wait,
   .queue_join = ll_sqlite_queue_join,
   .queue_leave = ll_sqlite_queue_leave,
   .renew = ll_sqlite_renew,
   .release = ll_sqlite_release,
   .inspect = ll_sqlite_inspect,
   .list = ll_sqlite_list,
   .force_release = ll_sqlite_force_release,
   .prune = ll_sqlite_prune,
   .watch_open = ll_sqlite_watch_open,
   .watch_fd = ll_sqlite_watch_fd,
   .watch_drain = ll_sqlite_watch_drain,
   .watch_close = ll_sqlite_watch_close,
   .watch_abandon = ll_sqlite_watch_close,
   .hold = ll_sqlite_hold,
};
