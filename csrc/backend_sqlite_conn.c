/*
 * backend_sqlite_conn.c - the SQLite backend's connections: the URI and
 * its options, the file and its directories, the connection's settings
 * (busy timeout, WAL, synchronous), the schema and its migrations,
 * closing, and abandoning a connection after fork; and the one format of
 * its errors.
 */
#include "ll_internal.h"
#include "backend_sqlite_private.h"
#include "stmt_sqlite.h"

#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_BUSY_TIMEOUT_MS (3600 * 1000)

/* ---- errors ---------------------------------------------------------- */

/* BACKEND in the one format of a backend failure: "sqlite: <what>: <msg>
 * (error <rc>, database '<path>')", without "error <rc>, " when rc is 0.
 * Returns false. */
bool ll_sqlite_fail (const char *path, int rc, const char *what, const char *msg,
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
static bool ll_sqlite_db_error_os (ll_sqlite_conn_t *c, int rc, const char *what, bool with_os,
                                   leaselock_error_t *err)
{
   if ((rc & 0xff) == SQLITE_NOMEM || !c->db)
      return ll_error_set (err, LEASELOCK_NOMEM, "out of memory in SQLite (%s)", what);
   if ((rc & 0xff) == SQLITE_READONLY && c->readonly) {
      ll_call_unsent_mark (); /* refused before any change: the outcome is known */
      return ll_sqlite_fail (
        c->path, rc, what,
        "the database is read-only for this user: reads (status, list, info) "
        "work, anything else needs write access to the file, its -wal and -shm "
        "files and its directory (docs/operations.md, \"Sharing a database\")",
        err);
   }
   char msg[LEASELOCK_ERROR_MAX];
   int e = with_os ? sqlite3_system_errno (c->db) : 0;
   snprintf (msg, sizeof msg, "%s%s%s", sqlite3_errmsg (c->db), e ? ": " : "",
             e ? strerror (e) : "");
   return ll_sqlite_fail (c->path, rc, what, msg, err);
}

bool ll_sqlite_db_error (ll_sqlite_conn_t *c, int rc, const char *what, leaselock_error_t *err)
{
   return ll_sqlite_db_error_os (c, rc, what, false, err);
}

bool ll_sqlite_busy_or_error (ll_sqlite_conn_t *c, int rc, const char *what, leaselock_error_t *err)
{
   if ((rc & 0xff) != SQLITE_BUSY)
      return ll_sqlite_db_error (c, rc, what, err);
   return ll_error_set (err, LEASELOCK_BUSY,
                        "sqlite: %s: the database file is locked by another connection (a long "
                        "transaction?); waited %lld ms (database '%s')",
                        what, (long long)c->busy_waited_ms, c->path);
}

/* ---- waiting on the file's lock ---------------------------------------- */

/* A one-try acquire waits on the file's lock no longer than a commit of
 * another connection takes (so an OpenResty worker, which makes its SQLite
 * tries itself, is held a moment at most); a wait that lasts
 * WARN_AFTER_MS means a transaction that holds the file, logged once per
 * call (ll_call_wait_warn). */
#define ONE_TRY_WAIT_MS 5
#define WARN_AFTER_MS 100

/* How long this wait may last, from its start: busy_timeout_ms, or a
 * moment for a one-try acquire, and never past the caller's bound. */
static int64_t ll_sqlite_busy_until (const ll_sqlite_conn_t *c)
{
   const ll_call_wait_t *w = ll_call_wait ();
   int64_t limit = c->ready && w && w->one_try ? ONE_TRY_WAIT_MS : c->busy_ms;
   return ll_call_bound_cap (c->busy_since_ms + limit);
}

static void ll_sqlite_busy_warn (const ll_sqlite_conn_t *c, bool giving_up)
{
   char msg[LEASELOCK_ERROR_MAX];
   snprintf (msg, sizeof msg,
             "sqlite: the database file is locked by another connection (a long transaction?): "
             "%s (database '%s')",
             giving_up ? "gave up waiting for it" : "waiting for it", c->path);
   ll_call_wait_warn (msg);
}

/* SQLite's busy handler: sleeps with a growing step until the wait's end
 * (ll_sqlite_busy_until), then answers 0 (the statement fails with
 * SQLITE_BUSY). Replaces sqlite3_busy_timeout, which knows no caller. */
static int ll_sqlite_busy (void *data, int count)
{
   /* Short steps first (microseconds): a commit of another connection
    * takes well under a millisecond, and a one-try acquire has a few. */
   static const int steps_us[] = { 100,  100,  200,   200,   500,   500,   1000,
                                   2000, 5000, 10000, 20000, 25000, 50000, 100000 };
   ll_sqlite_conn_t *c = data;
   int64_t now_us = ll_real_now_us (), now = now_us / 1000;
   if (count == 0)
      c->busy_since_ms = now;
   c->busy_waited_ms = now - c->busy_since_ms;
   int64_t left_us = (ll_sqlite_busy_until (c) - now) * 1000 - now_us % 1000;
   if (left_us <= 0 || c->busy_waited_ms >= WARN_AFTER_MS)
      ll_sqlite_busy_warn (c, left_us <= 0);
   if (left_us <= 0)
      return 0;
   int n = (int)(sizeof steps_us / sizeof steps_us[0]);
   int64_t step = steps_us[count < n ? count : n - 1];
   if (step > left_us)
      step = left_us;
   struct timespec ts = { (time_t)(step / 1000000), (long)(step % 1000000) * 1000 };
   nanosleep (&ts, NULL);
   return 1;
}

/* ---- opening --------------------------------------------------------- */

static bool ll_sqlite_dir_error (const char *path, const char *dir, int e, leaselock_error_t *err)
{
   char msg[PATH_MAX + 64];
   snprintf (msg, sizeof msg, "'%s': %s", dir, strerror (e));
   return ll_sqlite_fail (path, 0, "making its directory", msg, err);
}

/* Creates the missing parent directories of path: 0775 less the umask, so
 * that a umask of 002 or 007 lets a group share what is made (never
 * writable by others: whoever can write the directory can replace the
 * database). A directory made inside a setgid one inherits its group and
 * setgid bit (Linux does that). */
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
      int e = mkdir (dir, 0775) != 0 && errno != EEXIST ? errno : 0;
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
      if ((primary != SQLITE_BUSY && primary != SQLITE_LOCKED) || waited >= timeout_ms ||
          ll_call_bound_cap (INT64_MAX) <= ll_real_now_ms ())
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
bool ll_sqlite_check_uri_shape (const ll_uri_t *uri, const char *text, leaselock_error_t *err)
{
   if (uri->user || uri->password || uri->port)
      return ll_sqlite_bad_uri (text, "no user, password or port allowed", err);
   if (uri->host[0] || uri->n_hosts > 1) {
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
char *ll_sqlite_wake_path_of (const char *path)
{
   size_t n = strlen (path);
   char *w = malloc (n + sizeof "-wake");
   if (w) {
      memcpy (w, path, n);
      memcpy (w + n, "-wake", sizeof "-wake");
   }
   return w;
}

/* A connection with no database open yet. */
static ll_sqlite_conn_t *ll_sqlite_conn_new (const char *path, leaselock_error_t *err)
{
   ll_sqlite_conn_t *c = calloc (1, sizeof *c);
   if (!c || !(c->path = strdup (path)) || !(c->wake.path = ll_sqlite_wake_path_of (path))) {
      if (c)
         free (c->path);
      free (c);
      ll_error_set (err, LEASELOCK_NOMEM, "out of memory opening an SQLite connection");
      return NULL;
   }
   c->wake.fd = -1;
   return c;
}

/* Creates a missing database file with 0666 less the umask: SQLite would
 * make it 0644 whatever the umask, which no group could write. Its -wal
 * and -shm files get the database file's mode and owner from SQLite, its
 * -wake file from ll_sqlite_watch_open. Best effort: a failure here is
 * SQLite's to report. */
static void ll_sqlite_create_file (const char *path)
{
   int fd = open (path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
   if (fd >= 0)
      close (fd);
}

/* file:<path>?<query>, the path percent-encoded (SQLite's URI filename):
 * a new string, NULL when out of memory. */
static char *ll_sqlite_file_uri (const char *path, const char *query)
{
   size_t n = strlen (path);
   char *u = malloc (sizeof "file:" + 3 * n + 1 + strlen (query));
   if (!u)
      return NULL;
   char *o = u + sprintf (u, "file:");
   for (const char *p = path; *p; p++)
      o += strchr ("%?#", *p) ? sprintf (o, "%%%02X", (unsigned char)*p) : sprintf (o, "%c", *p);
   sprintf (o, "?%s", query);
   return u;
}

/* Opens the file read-only for a caller that may only read it. With
 * mode=ro SQLite reads it as it would read-write (under the file's locks,
 * the -wal included) while the -shm file exists, which it does once a
 * writer made it (a close leaves it: ll_sqlite_keep_wal); when it does
 * not and the caller cannot create it (no write access to the
 * directory), no writer ever used the WAL and everything is in the file:
 * it is read as immutable, a snapshot.
 * Returns SQLite's code of the first read. */
static int ll_sqlite_open_readonly (ll_sqlite_conn_t *c, int *version)
{
   static const char *const queries[] = { "mode=ro", "mode=ro&immutable=1" };
   int rc = SQLITE_CANTOPEN;
   for (int i = 0; i < 2; i++) {
      char *u = ll_sqlite_file_uri (c->path, queries[i]);
      if (!u)
         return SQLITE_NOMEM;
      sqlite3_close (c->db);
      c->db = NULL;
      rc = sqlite3_open_v2 (u, &c->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX,
                            NULL);
      free (u);
      if (rc == SQLITE_OK) {
         sqlite3_extended_result_codes (c->db, 1);
         sqlite3_busy_handler (c->db, ll_sqlite_busy, c);
         rc = ll_sqlite_read_version (c->db, version);
      }
      int primary = rc & 0xff;
      if (primary != SQLITE_READONLY && primary != SQLITE_CANTOPEN)
         break;
   }
   c->readonly = true;
   return rc;
}

/* Opens the file read-write (created when missing); a file this user may
 * only read is opened read-only (ll_sqlite_open_readonly): status and
 * list read it, a write fails saying why. */
static bool ll_sqlite_open_file (ll_sqlite_conn_t *c, int busy_ms, leaselock_error_t *err)
{
   ll_sqlite_create_file (c->path);
   /* NOMUTEX: the engine gives a connection to one thread at a time. */
   int rc = sqlite3_open_v2 (
     c->path, &c->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
   if (rc != SQLITE_OK)
      return ll_sqlite_db_error_os (c, rc, "opening the database", true, err);
   sqlite3_extended_result_codes (c->db, 1);
   c->busy_ms = busy_ms;
   sqlite3_busy_handler (c->db, ll_sqlite_busy, c);
   /* The first read says whether the file is a database at all, and
    * whether this user may write it (and create its -wal and -shm). */
   int version = 0;
   rc = ll_sqlite_read_version (c->db, &version);
   bool writable = access (c->path, W_OK) == 0;
   /* READONLY: the file, or the directory where its -wal and -shm would
    * be made, is not this user's to write. */
   if ((rc == SQLITE_OK && sqlite3_db_readonly (c->db, "main") == 1) ||
       (rc & 0xff) == SQLITE_READONLY || ((rc & 0xff) == SQLITE_CANTOPEN && !writable))
      rc = ll_sqlite_open_readonly (c, &version);
   if (rc != SQLITE_OK)
      return ll_sqlite_db_error_os (c, rc, "opening the database", true, err);
   if (c->readonly && version != LL_SQLITE_SCHEMA_VERSION)
      return ll_sqlite_fail (c->path, 0, "opening the database",
                             "the file is read-only for this user, and its schema (version "
                             "0 when new) is not this leaselock's: open it once with write access",
                             err);
   return true;
}

/*
 * The WAL outlives a close. By default the last connection's close
 * checkpoints (two fsyncs) and deletes the -wal and -shm files, and the
 * next process's first write makes them again (a file, a directory sync,
 * a header sync): about 2 ms of every short-lived process, a cron run's
 * or a script's, for nothing a lock needs. So a close leaves both files
 * and checkpoints only a WAL of CLOSE_CKPT_FRAMES frames or more: the next
 * process's open reads at most that many back. While it runs, a commit
 * checkpoints at SQLite's usual AUTO_CKPT_FRAMES (a WAL hook replaces
 * sqlite3_wal_autocheckpoint, which would take the hook's place).
 * Durability is unchanged: synchronous=NORMAL never synced a commit, and a
 * checkpoint is what makes it survive a power loss, as before.
 */
#define CLOSE_CKPT_FRAMES 64
#define AUTO_CKPT_FRAMES 1000

static int ll_sqlite_wal_hook (void *data, sqlite3 *db, const char *name, int frames)
{
   ll_sqlite_conn_t *c = data;
   c->wal_frames = frames;
   if (frames >= AUTO_CKPT_FRAMES &&
       sqlite3_wal_checkpoint_v2 (db, name, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL) == SQLITE_OK)
      c->wal_frames = 0;
   return SQLITE_OK;
}

static void ll_sqlite_keep_wal (ll_sqlite_conn_t *c)
{
   sqlite3_db_config (c->db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, NULL);
   sqlite3_wal_hook (c->db, ll_sqlite_wal_hook, c);
}

/* WAL, synchronous=NORMAL, the schema, the statements. */
static bool ll_sqlite_set_up (ll_sqlite_conn_t *c, int busy_ms, leaselock_error_t *err)
{
   /* Read-only: a WAL switch or a migration would be writes, and the
    * schema's version was checked (ll_sqlite_open_file). */
   if (!c->readonly && !ll_sqlite_use_wal (c, busy_ms, err))
      return false;
   if (!c->readonly)
      ll_sqlite_keep_wal (c);
   int rc = ll_sqlite_exec_simple (c->db, ll_sqlite_synchronous);
   if (rc != SQLITE_OK)
      return ll_sqlite_db_error (c, rc, "setting synchronous=NORMAL", err);
   if (!c->readonly && !ll_sqlite_migrate (c, err))
      return false;
   c->ready = true;
   return true;
}

/* Statements are prepared at their first use, not at open: a short-lived
 * process (a cron run's, a script's) uses two or three of the
 * LL_SQLITE_ST_COUNT, and preparing them all took about half a
 * millisecond of its start. */
sqlite3_stmt *ll_sqlite_st (ll_sqlite_conn_t *c, int which)
{
   if (!c->stmt[which])
      sqlite3_prepare_v3 (c->db, ll_sqlite_statements[which], -1, SQLITE_PREPARE_PERSISTENT,
                          &c->stmt[which], NULL);
   return c->stmt[which];
}

void *ll_sqlite_open (const char *uri_text, leaselock_error_t *err)
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

void ll_sqlite_close (void *conn)
{
   ll_sqlite_conn_t *c = conn;
   if (!c)
      return;
   for (int i = 0; i < LL_SQLITE_ST_COUNT; i++)
      sqlite3_finalize (c->stmt[i]);
   /* TRUNCATE, not PASSIVE: the next process's open rebuilds the -shm and
    * with it forgets what was checkpointed, so it would read the whole WAL
    * back. Without the busy handler: a connection still using the file
    * makes it give up at once (its own close, or a commit, checkpoints). */
   if (c->wal_frames >= CLOSE_CKPT_FRAMES) {
      sqlite3_busy_handler (c->db, NULL, NULL);
      sqlite3_wal_checkpoint_v2 (c->db, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
   }
   sqlite3_close (c->db);
   ll_wake_toucher_free (&c->wake);
   free (c->path);
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

void ll_sqlite_abandon (void *conn)
{
   ll_sqlite_conn_t *c = conn;
   if (!c)
      return;
   ll_sqlite_conn_t *head = atomic_load (&abandoned);
   do {
      c->next = head;
   } while (!atomic_compare_exchange_weak (&abandoned, &head, c));
}
