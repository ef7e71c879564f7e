/*
 * backend_sqlite.c - the embedded SQLite backend: sqlite:///abs/path.db.
 * The lease operations, the fair queue and the release notifications;
 * opening a file (the URI, the connection's settings, the schema and its
 * migrations) is in backend_sqlite_conn.c.
 *
 * One file on this machine, shared by every process that opens it. The
 * connection runs in WAL mode (readers never block the writer) with
 * synchronous=NORMAL (a commit is durable against a process crash; a power
 * loss may undo the last commits, which for leases only means a lock is
 * free again earlier than its TTL said, never that two owners hold it at
 * once while the machine runs) and a busy handler, so concurrent writers
 * from other processes queue instead of failing: an acquire that finds the
 * file locked by another connection waits as for a busy key, within its
 * caller's bound, and a one-try acquire only a moment (then BUSY).
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
 * leaselock_queue beside the records, never in them: a fair acquire's
 * first take refuses the key while another owner has a live entry
 * (LL_SQLITE_ACQUIRE_FAIR), the one acquire that reads it; renewals never
 * do; releases ask whether it has a waiter to wake, inspect and list count
 * a key's live entries (who waits).
 *
 * Keys are TEXT with the default BINARY collation, which compares bytes
 * (memcmp): key order and prefix ranges are byte-wise, and LIKE is never
 * used, so '%' and '_' in keys are plain characters.
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
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

/* ---- operations ------------------------------------------------------ */

/* A release tells the watchers of other processes (ll_backend_t's
 * watch_*) through the channel file <path>-wake (wake_file.c): only
 * releases touch it, never a claim or another write, so waiters' own
 * writes wake nobody. */

/* Binds ?1 op's key and ?2 its owner. */
static inline void ll_sqlite_bind_key_owner (sqlite3_stmt *st, const ll_op_t *op)
{
   sqlite3_bind_text (st, 1, op->key, (int)op->key_len, SQLITE_STATIC);
   sqlite3_bind_text (st, 2, op->owner, LEASELOCK_OWNER_LEN, SQLITE_STATIC);
}

/* Renew, release and hold: binds ?1 key, ?2 owner and ?3 n, then takes
 * the first step; the caller reads the row, if any, and resets st. */
static int ll_sqlite_step_owned (sqlite3_stmt *st, const ll_op_t *op, int64_t n)
{
   ll_sqlite_bind_key_owner (st, op);
   sqlite3_bind_int64 (st, 3, n);
   return sqlite3_step (st);
}

/* acquire (reserve_ms < 0: a take alone, LL_SQLITE_ST_TAKE; a fair first
 * take, LL_SQLITE_ST_TAKE_FAIR) and acquire_wait (a take or a claim,
 * LL_SQLITE_ST_ACQUIRE): one statement. A row without a reservation is a
 * take; a row with one is a claim (BUSY, reserved); no row is BUSY. */
static bool ll_sqlite_acquire_wait (void *conn, const ll_take_t *t, ll_taken_t *out,
                                    leaselock_error_t *err)
{
   ll_sqlite_conn_t *c = conn;
   out->reserved = false;
   bool claims = t->reserve_ms >= 0;
   int which = claims ? (t->fair ? LL_SQLITE_ST_ACQUIRE_FAIR : LL_SQLITE_ST_ACQUIRE)
                      : (t->fair ? LL_SQLITE_ST_TAKE_FAIR : LL_SQLITE_ST_TAKE);
   sqlite3_stmt *st = ll_sqlite_st (c, which);
   const char *host = t->holder && t->holder->host ? t->holder->host : "";
   const char *label = t->holder && t->holder->label ? t->holder->label : "";
   ll_sqlite_bind_key_owner (st, &t->op);
   sqlite3_bind_int64 (st, 3, t->ttl_ms);
   sqlite3_bind_text (st, 4, host, -1, SQLITE_STATIC);
   sqlite3_bind_int64 (st, 5, t->holder ? t->holder->pid : 0);
   sqlite3_bind_text (st, 6, label, -1, SQLITE_STATIC);
   if (claims) {
      sqlite3_bind_int64 (st, 7, t->reserve_ms);
      sqlite3_bind_int64 (st, 8, t->waited_ms);
   }
   bool row = false, claimed = false;
   int64_t f = 0, left = -1;
   out->left_ms = -1;
   c->busy_waited_ms = 0;
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
   out->reserved = false;
   if (rc != SQLITE_DONE) {
      ll_sqlite_busy_or_error (c, rc, "acquire", err);
   } else if (row && !claimed) {
      out->fence = f;
      ok = true;
   } else {
      out->reserved = claimed;
      out->left_ms = claimed ? (left > 0 ? left : 0) : -1;
      ll_error_set (err, LEASELOCK_BUSY, "the lock is held by another owner");
   }
   sqlite3_reset (st);
   /* A lease taken is released: the first take of a connection prepares
    * the release too, now rather than at the release. A cron run's
    * process would otherwise prepare it after forking its command and
    * watchdog, where every page SQLite writes is first copied (about 3x
    * the time). */
   if (ok)
      ll_sqlite_st (c, LL_SQLITE_ST_RELEASE);
   return ok;
}

/* Runs an UPDATE bound with key, owner and a duration; *changed tells
 * whether a row matched. */
static bool ll_sqlite_run_update (ll_sqlite_conn_t *c, int which, const char *what,
                                  const ll_op_t *op, int64_t ms, bool *changed,
                                  leaselock_error_t *err)
{
   sqlite3_stmt *st = ll_sqlite_st (c, which);
   int rc = ll_sqlite_step_owned (st, op, ms);
   bool ok = rc == SQLITE_DONE;
   if (ok)
      *changed = sqlite3_changes (c->db) > 0;
   else
      ll_sqlite_db_error (c, rc, what, err);
   sqlite3_reset (st);
   return ok;
}

static bool ll_sqlite_renew (void *conn, const ll_op_t *op, int64_t ttl_ms, leaselock_error_t *err)
{
   bool changed = false;
   if (!ll_sqlite_run_update (conn, LL_SQLITE_ST_RENEW, "renew", op, ttl_ms, &changed, err))
      return false;
   if (!changed)
      return ll_error_set (err, LEASELOCK_NOT_HELD,
                           "the lease is not held by this owner (released, expired or taken)");
   return true;
}

static bool ll_sqlite_release (void *conn, const ll_op_t *op, int64_t min_hold_ms,
                               leaselock_error_t *err)
{
   ll_sqlite_conn_t *c = conn;
   sqlite3_stmt *st = ll_sqlite_st (c, LL_SQLITE_ST_RELEASE);
   int rc = ll_sqlite_step_owned (st, op, min_hold_ms);
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
      ll_wake_touch (&c->wake);
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
   ll_sqlite_copy_text (st, 8, rec->next_owner, sizeof rec->next_owner);
   rec->queued = sqlite3_column_int64 (st, 9);
   rec->held_ms = sqlite3_column_int64 (st, 10);
}

static bool ll_sqlite_hold (void *conn, const ll_op_t *op, int delta, int64_t *holds,
                            leaselock_error_t *err)
{
   ll_sqlite_conn_t *c = conn;
   sqlite3_stmt *st = ll_sqlite_st (c, LL_SQLITE_ST_HOLD);
   int rc = ll_sqlite_step_owned (st, op, delta);
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

static bool ll_sqlite_inspect (void *conn, const ll_op_t *op, leaselock_record_t *rec, bool *found,
                               leaselock_error_t *err)
{
   ll_sqlite_conn_t *c = conn;
   sqlite3_stmt *st = ll_sqlite_st (c, LL_SQLITE_ST_INSPECT);
   sqlite3_bind_text (st, 1, op->key, (int)op->key_len, SQLITE_STATIC);
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
static void ll_sqlite_bind_prefix (sqlite3_stmt *st, const char *prefix, size_t prefix_len,
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

static bool ll_sqlite_list (void *conn, const char *prefix, size_t prefix_len,
                            leaselock_record_cb fn, void *user_data, leaselock_error_t *err)
{
   ll_sqlite_conn_t *c = conn;
   sqlite3_stmt *st = ll_sqlite_st (c, LL_SQLITE_ST_LIST);
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

static bool ll_sqlite_force_release (void *conn, const ll_op_t *op, bool *took,
                                     leaselock_error_t *err)
{
   ll_sqlite_conn_t *c = conn;
   *took = false;
   int rc = ll_sqlite_step_done (ll_sqlite_st (c, LL_SQLITE_ST_BEGIN));
   if (rc != SQLITE_OK)
      return ll_sqlite_db_error (c, rc, "force release", err);
   sqlite3_stmt *live = ll_sqlite_st (c, LL_SQLITE_ST_FORCE_LIVE),
                *any = ll_sqlite_st (c, LL_SQLITE_ST_FORCE_ANY);
   sqlite3_bind_text (live, 1, op->key, (int)op->key_len, SQLITE_STATIC);
   rc = ll_sqlite_step_done (live);
   if (rc == SQLITE_OK) {
      *took = sqlite3_changes (c->db) > 0;
      if (!*took) {
         sqlite3_bind_text (any, 1, op->key, (int)op->key_len, SQLITE_STATIC);
         rc = ll_sqlite_step_done (any);
      }
   }
   if (rc == SQLITE_OK)
      rc = ll_sqlite_step_done (ll_sqlite_st (c, LL_SQLITE_ST_COMMIT));
   if (rc != SQLITE_OK) {
      ll_sqlite_db_error (c, rc, "force release", err);
      if (!sqlite3_get_autocommit (c->db))
         ll_sqlite_step_done (ll_sqlite_st (c, LL_SQLITE_ST_ROLLBACK));
      *took = false;
      return false;
   }
   ll_wake_touch (&c->wake);
   return true;
}

/* Runs prune's statement which (records, or queue entries) for prefix
 * and older_than_ms. */
static bool ll_sqlite_prune_run (ll_sqlite_conn_t *c, int which, const char *prefix,
                                 size_t prefix_len, int64_t older_than_ms, leaselock_error_t *err)
{
   sqlite3_stmt *st = ll_sqlite_st (c, which);
   char upper[LEASELOCK_KEY_MAX + 1];
   ll_sqlite_bind_prefix (st, prefix, prefix_len, upper);
   sqlite3_bind_int64 (st, 3, older_than_ms);
   int rc = ll_sqlite_step_done (st);
   return rc == SQLITE_OK || ll_sqlite_db_error (c, rc, "prune", err);
}

static bool ll_sqlite_prune (void *conn, const char *prefix, size_t prefix_len,
                             int64_t older_than_ms, int64_t *count, leaselock_error_t *err)
{
   ll_sqlite_conn_t *c = conn;
   if (!ll_sqlite_prune_run (c, LL_SQLITE_ST_PRUNE, prefix, prefix_len, older_than_ms, err))
      return false;
   *count = sqlite3_changes (c->db);
   /* The queue entries that ran out go too (not counted: they are not
    * records). */
   return ll_sqlite_prune_run (c, LL_SQLITE_ST_QUEUE_PRUNE, prefix, prefix_len, older_than_ms, err);
}

/* ---- the fair mode's queue --------------------------------------------- */

/* Rolls back the transaction queue_join opened, after err was filled. */
static bool ll_sqlite_queue_fail (ll_sqlite_conn_t *c, int rc, leaselock_error_t *err)
{
   ll_sqlite_busy_or_error (c, rc, "queue_join", err);
   if (!sqlite3_get_autocommit (c->db))
      ll_sqlite_step_done (ll_sqlite_st (c, LL_SQLITE_ST_ROLLBACK));
   return false;
}

/* queue_join: the upsert then the count, in one write transaction, so no
 * other join comes between them (the file is local: the two statements
 * cost no round trip). */
static bool ll_sqlite_queue_join (void *conn, const ll_op_t *op, int64_t keep_ms, int64_t *ahead,
                                  leaselock_error_t *err)
{
   ll_sqlite_conn_t *c = conn;
   c->busy_waited_ms = 0;
   int rc = ll_sqlite_step_done (ll_sqlite_st (c, LL_SQLITE_ST_BEGIN));
   if (rc != SQLITE_OK)
      return ll_sqlite_queue_fail (c, rc, err);
   sqlite3_stmt *st = ll_sqlite_st (c, LL_SQLITE_ST_QUEUE_JOIN);
   ll_sqlite_bind_key_owner (st, op);
   sqlite3_bind_int64 (st, 3, keep_ms);
   rc = ll_sqlite_step_done (st);
   if (rc != SQLITE_OK)
      return ll_sqlite_queue_fail (c, rc, err);
   st = ll_sqlite_st (c, LL_SQLITE_ST_QUEUE_AHEAD);
   ll_sqlite_bind_key_owner (st, op);
   rc = sqlite3_step (st);
   int64_t n = rc == SQLITE_ROW ? sqlite3_column_int64 (st, 0) : 0;
   sqlite3_reset (st);
   if (rc != SQLITE_ROW)
      return ll_sqlite_queue_fail (c, rc, err);
   rc = ll_sqlite_step_done (ll_sqlite_st (c, LL_SQLITE_ST_COMMIT));
   if (rc != SQLITE_OK)
      return ll_sqlite_queue_fail (c, rc, err);
   *ahead = n;
   return true;
}

static bool ll_sqlite_queue_leave (void *conn, const ll_op_t *op, leaselock_error_t *err)
{
   ll_sqlite_conn_t *c = conn;
   sqlite3_stmt *st = ll_sqlite_st (c, LL_SQLITE_ST_QUEUE_LEAVE);
   ll_sqlite_bind_key_owner (st, op);
   int rc = ll_sqlite_step_done (st);
   return rc == SQLITE_OK || ll_sqlite_db_error (c, rc, "queue_leave", err);
}

/* ---- release notifications ------------------------------------------- */

/* A listener: inotify on the channel file <path>-wake (wake_file.c),
 * made here when missing with the database file's mode and (by root)
 * owner, as SQLite makes its -wal and -shm: whoever may use the database
 * may touch it, whatever this process's umask. Its deletion or renaming
 * breaks the listener, and the next one recreates the file. */
static void *ll_sqlite_watch_open (const char *uri_text, const char *tag, leaselock_error_t *err)
{
   (void)tag; /* one channel file: a release's touch names nobody */
   ll_uri_t uri;
   if (!ll_uri_parse (uri_text, &uri, err))
      return NULL;
   void *l = NULL;
   char *wake = NULL;
   if (!ll_sqlite_check_uri_shape (&uri, uri_text, err))
      goto done;
   if (!(wake = ll_sqlite_wake_path_of (uri.path))) {
      ll_error_set (err, LEASELOCK_NOMEM, "out of memory");
      goto done;
   }
   char detail[PATH_MAX + 16];
   snprintf (detail, sizeof detail, "database '%s'", uri.path);
   struct stat st;
   bool have_db = stat (uri.path, &st) == 0;
   int fd = have_db ? ll_wake_make (wake, st.st_mode & 0666, true, &st)
                    : ll_wake_make (wake, 0644, false, NULL);
   l = ll_wake_listen ("sqlite", wake, fd, detail, err); /* reads make's errno */
done:
   free (wake);
   ll_uri_cleanup (&uri);
   return l;
}

/* One file on one machine: no replica to fail over to. Generation 0, so
 * the engine never writes it (pool.c reports a changed generation). */
static ll_primary_t ll_sqlite_view = {
   .durability = LL_DURABILITY_STANDALONE,
   .durability_text = "embedded SQLite: one file on one machine, no replica to fail over to",
};

static struct ll_primary *ll_sqlite_primary (void *conn)
{
   (void)conn;
   return &ll_sqlite_view;
}

const ll_backend_t ll_backend_sqlite = {
   .name = "sqlite",
   .schemes = { "sqlite", NULL },
   LL_BACKEND_CONN_OPS (ll_sqlite),
   .close_before_fork = true,
   LL_BACKEND_LEASE_OPS (ll_sqlite),
   .fair_take = true,
   .record_waiters = true,
   .watch_open = ll_sqlite_watch_open,
   .watch_fd = ll_wake_listener_fd,
   .watch_drain = ll_wake_listener_drain,
   .watch_close = ll_wake_listener_close,
   .watch_abandon = ll_wake_listener_close,
   .primary = ll_sqlite_primary,
};
