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
 * Every operation is one SQL statement (force_release: one short write
 * transaction). Time is SQLite's own clock, in integer milliseconds since
 * the epoch (NOW_MS below); within one statement julianday('now') is the
 * same value everywhere, so "now" is consistent in a statement.
 *
 * Schema (PRAGMA user_version = 1):
 *
 *   leaselock_locks(key TEXT PRIMARY KEY, owner TEXT -- '' when released,
 *                   fence INTEGER, acquired_at INTEGER, expires_at INTEGER,
 *                   host TEXT, pid INTEGER, label TEXT) WITHOUT ROWID
 *
 * Times are milliseconds since the epoch by the SQLite clock. A record is
 * live while expires_at > now; owner '' never means "free" by itself (a
 * release with min_hold keeps the expiry in the future).
 *
 * Keys are TEXT with the default BINARY collation, which compares bytes
 * (memcmp): key order and prefix ranges are byte-wise, and LIKE is never
 * used, so '%' and '_' in keys are plain characters.
 */
#include "ll_internal.h"

#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <sqlite3.h>

/* The schema version this code writes and understands. A later version
 * adds a step in migrate() and bumps this. */
#define SCHEMA_VERSION 1

#define DEFAULT_BUSY_TIMEOUT_MS 10000
#define MAX_BUSY_TIMEOUT_MS (3600 * 1000)

/* SQLite's clock in integer milliseconds since the Unix epoch.
 * julianday() is a double of day units: ROUND undoes its binary fraction
 * so the value is the exact millisecond SQLite keeps internally. */
#define NOW_MS "CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)"

static const char create_sql[] = "CREATE TABLE IF NOT EXISTS leaselock_locks ("
                                 " key TEXT NOT NULL PRIMARY KEY,"
                                 " owner TEXT NOT NULL DEFAULT '',"
                                 " fence INTEGER NOT NULL,"
                                 " acquired_at INTEGER NOT NULL,"
                                 " expires_at INTEGER NOT NULL,"
                                 " host TEXT NOT NULL DEFAULT '',"
                                 " pid INTEGER NOT NULL DEFAULT 0,"
                                 " label TEXT NOT NULL DEFAULT ''"
                                 ") WITHOUT ROWID";

/* ?1 key, ?2 owner, ?3 ttl_ms, ?4 host, ?5 pid, ?6 label. The update arm
 * runs only when the record is expired (by the same "now") or already
 * ours; otherwise no row comes back: BUSY. */
static const char acquire_sql[] =
  "INSERT INTO leaselock_locks (key, owner, fence, acquired_at, expires_at, host, pid, label)"
  " VALUES (?1, ?2, 1, " NOW_MS ", " NOW_MS " + ?3, ?4, ?5, ?6)"
  " ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, fence = fence + 1,"
  " acquired_at = excluded.acquired_at, expires_at = excluded.expires_at,"
  " host = excluded.host, pid = excluded.pid, label = excluded.label"
  " WHERE expires_at <= excluded.acquired_at OR owner = excluded.owner"
  " RETURNING fence";

/* ?1 key, ?2 owner, ?3 ttl_ms */
static const char renew_sql[] = "UPDATE leaselock_locks SET expires_at = " NOW_MS " + ?3"
                                " WHERE key = ?1 AND owner = ?2 AND expires_at > " NOW_MS;

/* ?1 key, ?2 owner, ?3 min_hold_ms */
static const char release_sql[] =
  "UPDATE leaselock_locks SET owner = '', expires_at = MAX(" NOW_MS ", acquired_at + ?3)"
  " WHERE key = ?1 AND owner = ?2";

#define RECORD_COLUMNS "key, owner, fence, expires_at - " NOW_MS ", host, pid, label"

/* ?1 key */
static const char inspect_sql[] = "SELECT " RECORD_COLUMNS " FROM leaselock_locks WHERE key = ?1";

/* ?1 prefix, ?2 the first string after every string with that prefix. */
static const char list_sql[] = "SELECT " RECORD_COLUMNS " FROM leaselock_locks"
                               " WHERE key >= ?1 AND key < ?2 ORDER BY key";

/* force_release, inside BEGIN IMMEDIATE: first the live case (changes()
 * tells whether a live lease was taken), then any record. ?1 key */
static const char force_live_sql[] = "UPDATE leaselock_locks SET owner = '', expires_at = " NOW_MS
                                     " WHERE key = ?1 AND owner <> '' AND expires_at > " NOW_MS;
static const char force_any_sql[] =
  "UPDATE leaselock_locks SET owner = '', expires_at = MIN(expires_at, " NOW_MS ")"
  " WHERE key = ?1";

enum
{
   ST_ACQUIRE,
   ST_RENEW,
   ST_RELEASE,
   ST_INSPECT,
   ST_LIST,
   ST_BEGIN,
   ST_FORCE_LIVE,
   ST_FORCE_ANY,
   ST_COMMIT,
   ST_ROLLBACK,
   ST_COUNT
};

static const char *const stmt_sql[ST_COUNT] = {
   [ST_ACQUIRE] = acquire_sql,       [ST_RENEW] = renew_sql,         [ST_RELEASE] = release_sql,
   [ST_INSPECT] = inspect_sql,       [ST_LIST] = list_sql,           [ST_BEGIN] = "BEGIN IMMEDIATE",
   [ST_FORCE_LIVE] = force_live_sql, [ST_FORCE_ANY] = force_any_sql, [ST_COMMIT] = "COMMIT",
   [ST_ROLLBACK] = "ROLLBACK",
};

/* One connection: owned by the engine, used by one thread at a time. */
typedef struct sqlite_conn
{
   sqlite3 *db;
   sqlite3_stmt *stmt[ST_COUNT]; /* prepared once, reset after each use */
   char *path;                   /* for messages */
   struct sqlite_conn *next;     /* on the abandoned list (see abandon) */
} sqlite_conn_t;

/* ---- errors ---------------------------------------------------------- */

/* Fills err from the connection's last SQLite error: NOMEM for
 * SQLITE_NOMEM, else BACKEND with SQLite's message and the file. */
static bool db_error (sqlite_conn_t *c, int rc, const char *what, leaselock_error_t *err)
{
   if ((rc & 0xff) == SQLITE_NOMEM)
      return ll_error_set (err, LEASELOCK_NOMEM, "out of memory in SQLite (%s)", what);
   const char *msg = c->db ? sqlite3_errmsg (c->db) : sqlite3_errstr (rc);
   return ll_error_set (err, LEASELOCK_BACKEND, "SQLite %s failed: %s (database '%s')", what, msg,
                        c->path);
}

/* ---- opening --------------------------------------------------------- */

/* Creates the missing parent directories of path (mode 0700). */
static bool make_parents (const char *path, leaselock_error_t *err)
{
   char dir[PATH_MAX];
   snprintf (dir, sizeof dir, "%s", path);
   char *slash = strrchr (dir, '/');
   if (!slash || slash == dir)
      return true; /* a file in "/" */
   *slash = '\0';
   struct stat st;
   if (stat (dir, &st) == 0) {
      if (S_ISDIR (st.st_mode))
         return true;
      return ll_error_set (err, LEASELOCK_BACKEND,
                           "cannot use '%s' for the SQLite database: '%s' is not a directory", path,
                           dir);
   }
   /* Walk down from the root: every component that is missing is made. */
   for (char *p = dir + 1;; p++) {
      if (*p != '/' && *p != '\0')
         continue;
      char saved = *p;
      *p = '\0';
      if (mkdir (dir, 0700) != 0 && errno != EEXIST) {
         int e = errno;
         return ll_error_set (err, LEASELOCK_BACKEND,
                              "cannot create directory '%s' for the SQLite database '%s': %s", dir,
                              path, strerror (e));
      }
      if (stat (dir, &st) != 0 || !S_ISDIR (st.st_mode)) {
         return ll_error_set (err, LEASELOCK_BACKEND,
                              "cannot create directory '%s' for the SQLite database '%s': %s", dir,
                              path, strerror (ENOTDIR));
      }
      *p = saved;
      if (saved == '\0')
         break;
   }
   return true;
}

/* Runs one statement that returns no rows (or ignores them). */
static int exec_simple (sqlite3 *db, const char *sql)
{
   return sqlite3_exec (db, sql, NULL, NULL, NULL);
}

/* Reads PRAGMA user_version. */
static int read_version (sqlite3 *db, int *version)
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
static bool use_wal (sqlite_conn_t *c, int timeout_ms, leaselock_error_t *err)
{
   int waited = 0;
   for (;;) {
      sqlite3_stmt *st = NULL;
      int rc = sqlite3_prepare_v2 (c->db, "PRAGMA journal_mode=WAL", -1, &st, NULL);
      if (rc == SQLITE_OK) {
         rc = sqlite3_step (st);
         if (rc == SQLITE_ROW) {
            const char *mode = (const char *)sqlite3_column_text (st, 0);
            bool wal = mode && !strcmp (mode, "wal");
            char shown[32];
            snprintf (shown, sizeof shown, "%s", mode ? mode : "?");
            sqlite3_finalize (st);
            if (!wal)
               return ll_error_set (err, LEASELOCK_BACKEND,
                                    "SQLite database '%s' cannot use WAL mode (journal mode "
                                    "stays '%s')",
                                    c->path, shown);
            return true;
         }
      }
      sqlite3_finalize (st);
      int primary = rc & 0xff;
      if ((primary != SQLITE_BUSY && primary != SQLITE_LOCKED) || waited >= timeout_ms)
         return db_error (c, rc, "setting WAL mode", err);
      struct timespec ts = { 0, 5 * 1000 * 1000 };
      nanosleep (&ts, NULL);
      waited += 5;
   }
}

/* Creates the table on a new file, or checks the version of an existing
 * one. Later schema versions add their steps here, inside the same
 * transaction. */
static bool migrate (sqlite_conn_t *c, leaselock_error_t *err)
{
   int version = 0;
   int rc = read_version (c->db, &version);
   if (rc != SQLITE_OK)
      return db_error (c, rc, "reading the schema version", err);
   if (version == SCHEMA_VERSION)
      return true;
   if (version > SCHEMA_VERSION)
      goto too_new;

   rc = exec_simple (c->db, "BEGIN IMMEDIATE");
   if (rc != SQLITE_OK)
      return db_error (c, rc, "creating the schema", err);
   /* Another process may have done it meanwhile: read again under the
    * write lock. */
   rc = read_version (c->db, &version);
   if (rc == SQLITE_OK && version == 0) {
      rc = exec_simple (c->db, create_sql);
      if (rc == SQLITE_OK)
         rc = exec_simple (c->db, "PRAGMA user_version = 1");
   }
   if (rc != SQLITE_OK) {
      db_error (c, rc, "creating the schema", err);
      exec_simple (c->db, "ROLLBACK");
      return false;
   }
   rc = exec_simple (c->db, "COMMIT");
   if (rc != SQLITE_OK) {
      db_error (c, rc, "creating the schema", err);
      exec_simple (c->db, "ROLLBACK");
      return false;
   }
   if (version > SCHEMA_VERSION)
      goto too_new;
   return true;

too_new:
   return ll_error_set (err, LEASELOCK_BACKEND,
                        "SQLite database '%s' has leaselock schema version %d, newer than the "
                        "version %d this leaselock understands: upgrade leaselock or use "
                        "another file",
                        c->path, version, SCHEMA_VERSION);
}

static void sqlite_close (void *conn);

/* Parses an option value: a decimal integer in [0, max]. */
static bool parse_ms (const char *text, int max, int *out)
{
   if (!*text)
      return false;
   long v = 0;
   for (const char *p = text; *p; p++) {
      if (*p < '0' || *p > '9')
         return false;
      v = v * 10 + (*p - '0');
      if (v > max)
         return false;
   }
   *out = (int)v;
   return true;
}

static void *sqlite_open (const char *uri_text, leaselock_error_t *err)
{
   ll_uri_t uri;
   if (!ll_uri_parse (uri_text, &uri, err))
      return NULL;

   sqlite_conn_t *c = NULL;
   int busy_ms = DEFAULT_BUSY_TIMEOUT_MS;
   char shown[512]; /* the URI as messages may show it: no password */
   ll_uri_redact (uri_text, shown, sizeof shown);
   const char *want = "expected sqlite:///absolute/path.db";
   if (uri.user || uri.password || uri.port) {
      ll_error_set (err, LEASELOCK_INVALID,
                    "bad SQLite URI \"%s\": no user, password or port allowed; %s", shown, want);
      goto fail;
   }
   if (uri.host[0]) {
      ll_error_set (err, LEASELOCK_INVALID,
                    "bad SQLite URI \"%s\": a host (\"%s\") is not allowed and relative paths "
                    "are not supported; %s",
                    shown, uri.host, want);
      goto fail;
   }
   if (uri.path[0] != '/') {
      ll_error_set (err, LEASELOCK_INVALID, "bad SQLite URI \"%s\": no file path; %s", shown, want);
      goto fail;
   }
   size_t plen = strlen (uri.path);
   if (uri.path[plen - 1] == '/') {
      ll_error_set (err, LEASELOCK_INVALID,
                    "bad SQLite URI \"%s\": the path names a directory, not a file; %s", shown,
                    want);
      goto fail;
   }
   if (plen >= PATH_MAX) {
      ll_error_set (err, LEASELOCK_INVALID, "bad SQLite URI: the path is longer than %d bytes",
                    PATH_MAX - 1);
      goto fail;
   }
   for (int i = 0; i < uri.n_params; i++) {
      const char *name = uri.params[i].name, *value = uri.params[i].value;
      if (!strcmp (name, "busy_timeout_ms")) {
         if (!parse_ms (value, MAX_BUSY_TIMEOUT_MS, &busy_ms)) {
            ll_error_set (err, LEASELOCK_INVALID,
                          "bad SQLite URI option busy_timeout_ms=\"%s\": expected milliseconds "
                          "from 0 to %d",
                          value, MAX_BUSY_TIMEOUT_MS);
            goto fail;
         }
      } else {
         ll_error_set (err, LEASELOCK_INVALID,
                       "unknown SQLite URI option \"%s\" (known: busy_timeout_ms)", name);
         goto fail;
      }
   }

   if (!make_parents (uri.path, err))
      goto fail;

   c = calloc (1, sizeof *c);
   if (!c || !(c->path = strdup (uri.path))) {
      ll_error_set (err, LEASELOCK_NOMEM, "out of memory opening an SQLite connection");
      goto fail;
   }
   /* NOMUTEX: the engine gives a connection to one thread at a time. */
   int rc = sqlite3_open_v2 (
     c->path, &c->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
   if (rc != SQLITE_OK) {
      if (!c->db) {
         ll_error_set (err, LEASELOCK_NOMEM, "out of memory opening SQLite database '%s'", c->path);
         goto fail;
      }
      int e = sqlite3_system_errno (c->db);
      ll_error_set (err, LEASELOCK_BACKEND, "cannot open SQLite database '%s': %s%s%s%s", c->path,
                    sqlite3_errmsg (c->db), e ? " (" : "", e ? strerror (e) : "", e ? ")" : "");
      goto fail;
   }
   sqlite3_extended_result_codes (c->db, 1);
   sqlite3_busy_timeout (c->db, busy_ms);
   /* The first read says whether the file is a database at all. */
   int version = 0;
   rc = read_version (c->db, &version);
   if (rc != SQLITE_OK) {
      int e = sqlite3_system_errno (c->db);
      ll_error_set (err, LEASELOCK_BACKEND, "cannot open SQLite database '%s': %s%s%s%s", c->path,
                    sqlite3_errmsg (c->db), e ? " (" : "", e ? strerror (e) : "", e ? ")" : "");
      goto fail;
   }
   if (sqlite3_db_readonly (c->db, "main") == 1) {
      ll_error_set (err, LEASELOCK_BACKEND,
                    "cannot open SQLite database '%s': the file is read-only for this user",
                    c->path);
      goto fail;
   }
   if (!use_wal (c, busy_ms, err))
      goto fail;
   rc = exec_simple (c->db, "PRAGMA synchronous=NORMAL");
   if (rc != SQLITE_OK) {
      db_error (c, rc, "setting synchronous=NORMAL", err);
      goto fail;
   }
   if (!migrate (c, err))
      goto fail;
   for (int i = 0; i < ST_COUNT; i++) {
      rc =
        sqlite3_prepare_v3 (c->db, stmt_sql[i], -1, SQLITE_PREPARE_PERSISTENT, &c->stmt[i], NULL);
      if (rc != SQLITE_OK) {
         db_error (c, rc, "preparing a statement", err);
         goto fail;
      }
   }
   ll_uri_cleanup (&uri);
   return c;

fail:
   ll_uri_cleanup (&uri);
   sqlite_close (c);
   return NULL;
}

static void sqlite_close (void *conn)
{
   sqlite_conn_t *c = conn;
   if (!c)
      return;
   for (int i = 0; i < ST_COUNT; i++)
      sqlite3_finalize (c->stmt[i]);
   sqlite3_close (c->db);
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
static _Atomic (sqlite_conn_t *) abandoned;

static void sqlite_abandon (void *conn)
{
   sqlite_conn_t *c = conn;
   if (!c)
      return;
   sqlite_conn_t *head = atomic_load (&abandoned);
   do {
      c->next = head;
   } while (!atomic_compare_exchange_weak (&abandoned, &head, c));
}

/* ---- operations ------------------------------------------------------ */

static inline void bind_key_owner (sqlite3_stmt *st,
                                   const char *key,
                                   size_t key_len,
                                   const char *owner)
{
   sqlite3_bind_text (st, 1, key, (int)key_len, SQLITE_STATIC);
   sqlite3_bind_text (st, 2, owner, LEASELOCK_OWNER_LEN, SQLITE_STATIC);
}

static bool sqlite_acquire (void *conn,
                            const char *key,
                            size_t key_len,
                            const char *owner,
                            int64_t ttl_ms,
                            const ll_holder_t *holder,
                            int64_t *fence,
                            leaselock_error_t *err)
{
   sqlite_conn_t *c = conn;
   sqlite3_stmt *st = c->stmt[ST_ACQUIRE];
   const char *host = holder && holder->host ? holder->host : "";
   const char *label = holder && holder->label ? holder->label : "";
   bind_key_owner (st, key, key_len, owner);
   sqlite3_bind_int64 (st, 3, ttl_ms);
   sqlite3_bind_text (st, 4, host, -1, SQLITE_STATIC);
   sqlite3_bind_int64 (st, 5, holder ? holder->pid : 0);
   sqlite3_bind_text (st, 6, label, -1, SQLITE_STATIC);
   int rc = sqlite3_step (st);
   bool ok;
   if (rc == SQLITE_ROW) {
      *fence = sqlite3_column_int64 (st, 0);
      /* RETURNING rows are computed in the first step; the second ends
       * the statement (and commits). */
      rc = sqlite3_step (st);
      ok = rc == SQLITE_DONE ? true : db_error (c, rc, "acquire", err);
   } else if (rc == SQLITE_DONE) {
      ok = ll_error_set (err, LEASELOCK_BUSY, "the lock is held by another owner");
   } else {
      ok = db_error (c, rc, "acquire", err);
   }
   sqlite3_reset (st);
   return ok;
}

/* Runs an UPDATE bound with key, owner and a duration; *changed tells
 * whether a row matched. */
static bool run_update (sqlite_conn_t *c,
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
   bind_key_owner (st, key, key_len, owner);
   sqlite3_bind_int64 (st, 3, ms);
   int rc = sqlite3_step (st);
   bool ok = rc == SQLITE_DONE;
   if (ok)
      *changed = sqlite3_changes (c->db) > 0;
   else
      db_error (c, rc, what, err);
   sqlite3_reset (st);
   return ok;
}

static bool sqlite_renew (void *conn,
                          const char *key,
                          size_t key_len,
                          const char *owner,
                          int64_t ttl_ms,
                          leaselock_error_t *err)
{
   bool changed = false;
   if (!run_update (conn, ST_RENEW, "renew", key, key_len, owner, ttl_ms, &changed, err))
      return false;
   if (!changed)
      return ll_error_set (err, LEASELOCK_NOT_HELD,
                           "the lease is not held by this owner (released, expired or taken)");
   return true;
}

static bool sqlite_release (void *conn,
                            const char *key,
                            size_t key_len,
                            const char *owner,
                            int64_t min_hold_ms,
                            leaselock_error_t *err)
{
   bool changed = false;
   if (!run_update (conn, ST_RELEASE, "release", key, key_len, owner, min_hold_ms, &changed, err))
      return false;
   if (!changed)
      return ll_error_set (err, LEASELOCK_NOT_HELD,
                           "the lease is not held by this owner (released already or taken)");
   return true;
}

/* Copies a TEXT column into a fixed buffer (truncating; NUL-terminated). */
static size_t copy_text (sqlite3_stmt *st, int col, char *buf, size_t size)
{
   const char *s = (const char *)sqlite3_column_text (st, col);
   return ll_copy_clipped (buf, size, s, (size_t)sqlite3_column_bytes (st, col));
}

static void read_record (sqlite3_stmt *st, leaselock_record_t *rec)
{
   memset (rec, 0, sizeof *rec);
   rec->key_len = copy_text (st, 0, rec->key, sizeof rec->key);
   copy_text (st, 1, rec->owner, sizeof rec->owner);
   rec->fence = sqlite3_column_int64 (st, 2);
   rec->expires_in_ms = sqlite3_column_int64 (st, 3);
   copy_text (st, 4, rec->host, sizeof rec->host);
   rec->pid = sqlite3_column_int64 (st, 5);
   copy_text (st, 6, rec->label, sizeof rec->label);
}

static bool sqlite_inspect (void *conn,
                            const char *key,
                            size_t key_len,
                            leaselock_record_t *rec,
                            bool *found,
                            leaselock_error_t *err)
{
   sqlite_conn_t *c = conn;
   sqlite3_stmt *st = c->stmt[ST_INSPECT];
   sqlite3_bind_text (st, 1, key, (int)key_len, SQLITE_STATIC);
   int rc = sqlite3_step (st);
   bool ok = true;
   *found = false;
   if (rc == SQLITE_ROW) {
      read_record (st, rec);
      *found = true;
   } else if (rc != SQLITE_DONE) {
      ok = db_error (c, rc, "inspect", err);
   }
   sqlite3_reset (st);
   return ok;
}

static bool sqlite_list (void *conn,
                         const char *prefix,
                         size_t prefix_len,
                         leaselock_record_cb fn,
                         void *user_data,
                         leaselock_error_t *err)
{
   sqlite_conn_t *c = conn;
   sqlite3_stmt *st = c->stmt[ST_LIST];
   /* Keys with the prefix are >= prefix and < the prefix with its last
    * byte increased. Valid UTF-8 never holds the byte 0xFF, so the last
    * byte can always be increased, and "\xff" is above every key (the
    * bound for the empty prefix). */
   char upper[LEASELOCK_KEY_MAX + 1];
   size_t upper_len = ll_prefix_upper (prefix, prefix_len, upper);
   if (upper_len == 0) {
      upper[0] = (char)0xFF;
      upper_len = 1;
   }
   sqlite3_bind_text (st, 1, prefix_len ? prefix : "", (int)prefix_len, SQLITE_STATIC);
   sqlite3_bind_text (st, 2, upper, (int)upper_len, SQLITE_STATIC);
   leaselock_record_t rec;
   bool ok = true;
   int rc;
   while ((rc = sqlite3_step (st)) == SQLITE_ROW) {
      read_record (st, &rec);
      if (!fn (&rec, user_data))
         break;
   }
   if (rc != SQLITE_ROW && rc != SQLITE_DONE)
      ok = db_error (c, rc, "list", err);
   sqlite3_reset (st);
   return ok;
}

/* Steps a statement that returns no rows and resets it. */
static int step_done (sqlite3_stmt *st)
{
   int rc = sqlite3_step (st);
   sqlite3_reset (st);
   return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

static bool sqlite_force_release (void *conn,
                                  const char *key,
                                  size_t key_len,
                                  bool *took,
                                  leaselock_error_t *err)
{
   sqlite_conn_t *c = conn;
   *took = false;
   int rc = step_done (c->stmt[ST_BEGIN]);
   if (rc != SQLITE_OK)
      return db_error (c, rc, "force release", err);
   sqlite3_stmt *live = c->stmt[ST_FORCE_LIVE], *any = c->stmt[ST_FORCE_ANY];
   sqlite3_bind_text (live, 1, key, (int)key_len, SQLITE_STATIC);
   rc = step_done (live);
   if (rc == SQLITE_OK) {
      *took = sqlite3_changes (c->db) > 0;
      if (!*took) {
         sqlite3_bind_text (any, 1, key, (int)key_len, SQLITE_STATIC);
         rc = step_done (any);
      }
   }
   if (rc == SQLITE_OK)
      rc = step_done (c->stmt[ST_COMMIT]);
   if (rc != SQLITE_OK) {
      db_error (c, rc, "force release", err);
      if (!sqlite3_get_autocommit (c->db))
         step_done (c->stmt[ST_ROLLBACK]);
      *took = false;
      return false;
   }
   return true;
}

const ll_backend_t ll_backend_sqlite = {
   .name = "sqlite",
   .schemes = { "sqlite", NULL },
   .available = true,
   .unavailable = NULL,
   .open = sqlite_open,
   .close = sqlite_close,
   .abandon = sqlite_abandon,
   .close_before_fork = true,
   .acquire = sqlite_acquire,
   .renew = sqlite_renew,
   .release = sqlite_release,
   .inspect = sqlite_inspect,
   .list = sqlite_list,
   .force_release = sqlite_force_release,
};
