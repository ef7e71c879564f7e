/*
 * backend_postgresql.c - PostgreSQL through libpq: the lease operations,
 * the fair queue and the release notifications. The URI, the connection
 * and its bounded I/O are in backend_postgresql_conn.c.
 *
 * Table (created on first use, schema version 4):
 *   lock_key text COLLATE "C" PRIMARY KEY   byte order, byte-exact UTF-8
 *   owner text NULL (NULL once released), fence bigint,
 *   expires_at / acquired_at timestamptz, holder_host, holder_pid,
 *   holder_label,
 *   next_owner text NULL, next_until / next_since timestamptz NULL: the
 *   reservation of the next owner (a waiter), live while next_until is
 *   ahead of the server's clock; all NULL when there is none,
 *   holds int: its owner's reentrant holds (1 from the acquire).
 * and beside it <table>_queue, the fair mode's queue of waiters (lock_key,
 * owner, arrived, alive_until timestamptz; an entry is live while
 * alive_until is ahead of the server's clock), read by no lease operation
 * but a fair acquire's first take (LL_SQL_ACQUIRE_FAIR: refused while
 * another owner waits). A version-1 table (without the next_* columns), -2 table
 * (without the queue) or -3 table (without holds) is migrated in place on
 * open (ll_pg_create_schema, under the creation's advisory lock and
 * transaction); a newer version is refused.
 *
 * Every operation is one prepared statement with bound parameters and
 * judges time with the server's clock_timestamp(). Acquire and
 * acquire_wait are one statement, INSERT ... SELECT clock_timestamp() ...
 * ON CONFLICT (lock_key) DO UPDATE SET <each column: CASE take or keep>
 * WHERE <take> OR <claim> RETURNING fence, <reserved>: the update reads
 * the old row, judges "now" by the one clock_timestamp() of the proposed
 * row (excluded.acquired_at, as clock_timestamp() moves between calls),
 * and either takes the record (expired and not reserved for someone else,
 * or ours; the reservation cleared) or, for acquire_wait only (its reserve
 * parameter not NULL), claims the reservation alone. No row back, or a row
 * that kept a reservation, means BUSY.
 *
 * queue_join is two statements: an upsert of the entry under an advisory
 * lock on the key, then the count of live entries ahead
 * (stmt_postgresql.c says why not one); queue_leave one DELETE that
 * notifies the waiter it leaves first; prune a
 * second DELETE for the queue entries that ran out. hold is one UPDATE ...
 * RETURNING holds: the count after, or no row when the lease is not the
 * owner's and live.
 *
 * Connections: before each statement a zero-timeout poll() on the socket
 * tells whether the server closed an idle connection (restart,
 * pg_terminate_backend, idle timeout); such a connection is re-established
 * first. A statement that fails once sent is not assumed to have applied
 * or not: the call reports BACKEND, the connection is dropped, and the
 * next call reconnects (the owner condition makes a retry safe).
 *
 * The SQL text is in stmt_postgresql.c, which bench/core_postgresql.c
 * shares; backend_sql.c takes the steps both SQL backends take alike
 * (open, table=, schema, reconnect, close, abandon) through ll_pg_driver.
 */
#include "ll_internal.h"

#ifdef LEASELOCK_WITH_POSTGRESQL

#include "backend_postgresql_private.h"
#include "stmt_postgresql.h"

#include <errno.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- operations ------------------------------------------------------ */

/* Holder strings are stored up to 255 bytes (cut at a UTF-8 boundary). */
static const char *ll_pg_clip255 (const char *s, char buf[256])
{
   if (!s)
      return "";
   size_t n = strlen (s);
   if (n <= 255)
      return s;
   n = 255;
   while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
      n--;
   memcpy (buf, s, n);
   buf[n] = '\0';
   return buf;
}

static void *ll_pg_open (const char *uri, leaselock_error_t *err)
{
   return ll_sql_open (calloc (1, sizeof (ll_pg_conn_t)), &ll_pg_driver, uri, err);
}

/* Copies key (key_len bytes) into a NUL-terminated buffer. */
static const char *ll_pg_key_z (const char *key, size_t key_len, char buf[LEASELOCK_KEY_MAX + 1])
{
   size_t n = key_len > LEASELOCK_KEY_MAX ? LEASELOCK_KEY_MAX : key_len;
   memcpy (buf, key, n);
   buf[n] = '\0';
   return buf;
}

/* Runs statement id with $1 op's key (made NUL-terminated here) and,
 * where the statement takes them, $2 its owner and $3 *arg in decimal
 * (arg NULL when it takes none). */
static PGresult *ll_pg_run_key (ll_pg_conn_t *c, int id, const ll_op_t *op, const int64_t *arg,
                                const char *what, leaselock_error_t *err)
{
   char kbuf[LEASELOCK_KEY_MAX + 1], abuf[32];
   if (arg)
      snprintf (abuf, sizeof abuf, "%" PRId64, *arg);
   const char *p[3] = { ll_pg_key_z (op->key, op->key_len, kbuf), op->owner, arg ? abuf : NULL };
   return ll_pg_run (c, id, p, what, err);
}

/* Reads the first column of res's one row into *v and clears res; false
 * when there is no row. */
static bool ll_pg_take_i64 (PGresult *res, int64_t *v)
{
   bool ok = PQntuples (res) == 1;
   if (ok)
      *v = strtoll (PQgetvalue (res, 0, 0), NULL, 10);
   PQclear (res);
   return ok;
}

/* acquire (reserve_ms < 0) and acquire_wait: one statement, one round
 * trip. A row without a reservation is a take; a row with one is a claim
 * (BUSY, reserved); no row is BUSY. */
static bool ll_pg_acquire_wait (void *conn, const ll_take_t *t, ll_taken_t *out,
                                leaselock_error_t *err)
{
   ll_pg_conn_t *c = conn;
   out->reserved = false;
   out->left_ms = -1;
   char kbuf[LEASELOCK_KEY_MAX + 1], ttl[32], pid[32], hbuf[256], lbuf[256], res_us[32],
     wait_us[32];
   snprintf (ttl, sizeof ttl, "%" PRId64, t->ttl_ms * 1000);
   snprintf (pid, sizeof pid, "%" PRId64, t->holder->pid);
   snprintf (res_us, sizeof res_us, "%" PRId64, t->reserve_ms * 1000);
   snprintf (wait_us, sizeof wait_us, "%" PRId64, t->waited_ms * 1000);
   if (!ll_primary_ttl_ok (&c->b.primary, "postgresql", t->ttl_ms, err))
      return false;
   /* $9 points into the connection: a reconnect in ll_pg_run rewrites
    * it before the statement is sent. */
   const char *p[9] = { ll_pg_key_z (t->op.key, t->op.key_len, kbuf),
                        t->op.owner,
                        ttl,
                        ll_pg_clip255 (t->holder->host, hbuf),
                        pid,
                        ll_pg_clip255 (t->holder->label, lbuf),
                        t->reserve_ms < 0 ? NULL : res_us,
                        t->reserve_ms < 0 ? NULL : wait_us,
                        c->b.primary.floor_text };
   PGresult *res = ll_pg_run (c, t->fair ? LL_SQL_ACQUIRE_FAIR : LL_SQL_ACQUIRE, p, "acquire", err);
   if (!res)
      return false;
   out->reserved = PQntuples (res) == 1 && !strcmp (PQgetvalue (res, 0, 1), "t");
   bool ok = PQntuples (res) == 1 && !out->reserved;
   if (out->reserved) {
      int64_t us = strtoll (PQgetvalue (res, 0, 2), NULL, 10);
      out->left_ms = us > 0 ? (us + 999) / 1000 : 0; /* rounded up */
   }
   if (ok)
      out->fence = strtoll (PQgetvalue (res, 0, 0), NULL, 10);
   else
      ll_error_set (err, LEASELOCK_BUSY, "held by another owner");
   PQclear (res);
   return ok;
}

static bool ll_pg_update_one (ll_pg_conn_t *c, int id, const ll_op_t *op, int64_t ms,
                              const char *what, leaselock_error_t *err)
{
   PGresult *res = ll_pg_run_key (c, id, op, &(int64_t){ ms * 1000 }, what, err);
   if (!res)
      return false;
   bool ok = !strcmp (PQcmdTuples (res), "1");
   PQclear (res);
   if (!ok)
      return ll_error_set (err, LEASELOCK_NOT_HELD, "the lease is no longer held by this owner");
   return true;
}

static bool ll_pg_renew (void *conn, const ll_op_t *op, int64_t ttl_ms, leaselock_error_t *err)
{
   ll_pg_conn_t *c = conn;
   if (!ll_primary_ttl_ok (&c->b.primary, "postgresql", ttl_ms, err))
      return false;
   return ll_pg_update_one (conn, LL_SQL_RENEW, op, ttl_ms, "renew", err);
}

static bool ll_pg_release (void *conn, const ll_op_t *op, int64_t min_hold_ms,
                           leaselock_error_t *err)
{
   return ll_pg_update_one (conn, LL_SQL_RELEASE, op, min_hold_ms, "release", err);
}

static void ll_pg_copy_field (char *dst, size_t size, size_t *len_out, PGresult *res, int row,
                              int col)
{
   size_t n =
     ll_copy_clipped (dst, size, PQgetvalue (res, row, col), (size_t)PQgetlength (res, row, col));
   if (len_out)
      *len_out = n;
}

static void ll_pg_row_to_record (PGresult *res, int row, leaselock_record_t *rec)
{
   memset (rec, 0, sizeof *rec);
   ll_pg_copy_field (rec->key, sizeof rec->key, &rec->key_len, res, row, 0);
   if (!PQgetisnull (res, row, 1))
      ll_pg_copy_field (rec->owner, sizeof rec->owner, NULL, res, row, 1);
   rec->fence = strtoll (PQgetvalue (res, row, 2), NULL, 10);
   rec->expires_in_ms = ll_us_to_left_ms (strtoll (PQgetvalue (res, row, 3), NULL, 10));
   ll_pg_copy_field (rec->host, sizeof rec->host, NULL, res, row, 4);
   rec->pid = strtoll (PQgetvalue (res, row, 5), NULL, 10);
   ll_pg_copy_field (rec->label, sizeof rec->label, NULL, res, row, 6);
   /* A released record's stored count is stale: it shows no holds. */
   rec->holds = rec->owner[0] ? strtoll (PQgetvalue (res, row, 7), NULL, 10) : 0;
   if (!PQgetisnull (res, row, 8))
      ll_pg_copy_field (rec->next_owner, sizeof rec->next_owner, NULL, res, row, 8);
   rec->queued = strtoll (PQgetvalue (res, row, 9), NULL, 10);
   rec->held_ms = strtoll (PQgetvalue (res, row, 10), NULL, 10);
}

/* One statement, one round trip: the count after, or no row (NOT_HELD). */
static bool ll_pg_hold (void *conn, const ll_op_t *op, int delta, int64_t *holds,
                        leaselock_error_t *err)
{
   PGresult *res = ll_pg_run_key (conn, LL_SQL_HOLD, op, &(int64_t){ delta }, "hold", err);
   if (!res)
      return false;
   if (!ll_pg_take_i64 (res, holds))
      return ll_error_set (err, LEASELOCK_NOT_HELD, "the lease is no longer held by this owner");
   return true;
}

static bool ll_pg_inspect (void *conn, const ll_op_t *op, leaselock_record_t *rec, bool *found,
                           leaselock_error_t *err)
{
   *found = false;
   PGresult *res = ll_pg_run_key (conn, LL_SQL_INSPECT, op, NULL, "inspect", err);
   if (!res)
      return false;
   if (PQntuples (res) > 0) {
      ll_pg_row_to_record (res, 0, rec);
      *found = true;
   }
   PQclear (res);
   return true;
}

/* The smallest string greater than every string starting with prefix
 * (valid UTF-8): the last code point incremented (past the surrogates),
 * dropping code points that cannot grow. False when there is none. */
static bool ll_pg_prefix_upper (const char *prefix, size_t len, char *out, size_t *out_len)
{
   while (len > 0) {
      size_t start = len - 1;
      while (start > 0 && ((unsigned char)prefix[start] & 0xC0) == 0x80)
         start--;
      const unsigned char *s = (const unsigned char *)prefix + start;
      size_t n = len - start;
      uint32_t cp;
      if (n == 1)
         cp = s[0];
      else if (n == 2)
         cp = ((uint32_t)(s[0] & 0x1F) << 6) | (s[1] & 0x3F);
      else if (n == 3)
         cp = ((uint32_t)(s[0] & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
      else
         cp = ((uint32_t)(s[0] & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
              ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
      cp++;
      if (cp == 0xD800)
         cp = 0xE000;
      if (cp > 0x10FFFF) {
         len = start; /* this code point cannot grow: drop it */
         continue;
      }
      memcpy (out, prefix, start);
      size_t o = start;
      if (cp < 0x80) {
         out[o++] = (char)cp;
      } else if (cp < 0x800) {
         out[o++] = (char)(0xC0 | (cp >> 6));
         out[o++] = (char)(0x80 | (cp & 0x3F));
      } else if (cp < 0x10000) {
         out[o++] = (char)(0xE0 | (cp >> 12));
         out[o++] = (char)(0x80 | ((cp >> 6) & 0x3F));
         out[o++] = (char)(0x80 | (cp & 0x3F));
      } else {
         out[o++] = (char)(0xF0 | (cp >> 18));
         out[o++] = (char)(0x80 | ((cp >> 12) & 0x3F));
         out[o++] = (char)(0x80 | ((cp >> 6) & 0x3F));
         out[o++] = (char)(0x80 | (cp & 0x3F));
      }
      out[o] = '\0';
      *out_len = o;
      return true;
   }
   return false;
}

/* The keys under a prefix, for list and prune: from the prefix on, below
 * upper when there is one (ll_pg_prefix_upper). Both NUL-terminated. */
typedef struct ll_pg_range
{
   char from[LEASELOCK_KEY_MAX + 1];
   char upper[LEASELOCK_KEY_MAX + 2]; /* "" when unbounded */
} ll_pg_range_t;

/* Fills r from prefix; returns whether there is an upper bound (then the
 * _RANGE statement, else the _FROM one). */
static bool ll_pg_range (ll_pg_range_t *r, const char *prefix, size_t prefix_len)
{
   size_t ulen = 0;
   r->from[0] = r->upper[0] = '\0';
   if (prefix_len)
      ll_pg_key_z (prefix, prefix_len, r->from);
   return ll_pg_prefix_upper (prefix, prefix_len, r->upper, &ulen);
}

static bool ll_pg_list (void *conn, const char *prefix, size_t prefix_len, leaselock_record_cb fn,
                        void *user_data, leaselock_error_t *err)
{
   ll_pg_range_t r;
   bool bounded = ll_pg_range (&r, prefix, prefix_len);
   const char *p[2] = { r.from, r.upper };
   PGresult *res = ll_pg_run (conn, bounded ? LL_SQL_LIST_RANGE : LL_SQL_LIST_FROM, p, "list", err);
   if (!res)
      return false;
   leaselock_record_t *rec = malloc (sizeof *rec);
   if (!rec) {
      PQclear (res);
      return ll_error_set (err, LEASELOCK_NOMEM, "out of memory");
   }
   int n = PQntuples (res);
   for (int i = 0; i < n; i++) {
      ll_pg_row_to_record (res, i, rec);
      if (!fn (rec, user_data))
         break;
   }
   free (rec);
   PQclear (res);
   return true;
}

static bool ll_pg_force_release (void *conn, const ll_op_t *op, bool *took, leaselock_error_t *err)
{
   PGresult *res = ll_pg_run_key (conn, LL_SQL_FORCE, op, NULL, "force_release", err);
   if (!res)
      return false;
   *took = PQntuples (res) == 1 && !strcmp (PQgetvalue (res, 0, 0), "t");
   PQclear (res);
   return true;
}

static bool ll_pg_prune (void *conn, const char *prefix, size_t prefix_len, int64_t older_than_ms,
                         int64_t *count, leaselock_error_t *err)
{
   ll_pg_conn_t *c = conn;
   ll_pg_range_t r;
   bool bounded = ll_pg_range (&r, prefix, prefix_len);
   char us[32];
   snprintf (us, sizeof us, "%" PRId64, older_than_ms * 1000);
   const char *p[3] = { r.from, us, r.upper };
   PGresult *res = ll_pg_run (c, bounded ? LL_SQL_PRUNE_RANGE : LL_SQL_PRUNE_FROM, p, "prune", err);
   if (!res)
      return false;
   *count = strtoll (PQcmdTuples (res), NULL, 10);
   PQclear (res);
   /* The queue entries that ran out go too (not counted: not records). */
   res =
     ll_pg_run (c, bounded ? LL_SQL_QUEUE_PRUNE_RANGE : LL_SQL_QUEUE_PRUNE_FROM, p, "prune", err);
   PQclear (res);
   return res != NULL;
}

/* ---- the fair mode's queue --------------------------------------------- */

/* queue_join: two statements, two round trips (stmt_postgresql.c says why
 * the count cannot be in the first). The advisory lock that orders the
 * joins is the first statement's transaction's, so nothing is held
 * between them: a waiter stopped there holds no other join back. */
static bool ll_pg_queue_join (void *conn, const ll_op_t *op, int64_t keep_ms, int64_t *ahead,
                              leaselock_error_t *err)
{
   PGresult *res =
     ll_pg_run_key (conn, LL_SQL_QUEUE_JOIN, op, &(int64_t){ keep_ms * 1000 }, "queue_join", err);
   if (!res)
      return false;
   PQclear (res);
   if (ll_test_queue_join_hook)
      ll_test_queue_join_hook ();
   res = ll_pg_run_key (conn, LL_SQL_QUEUE_AHEAD, op, NULL, "queue_join", err);
   if (!res)
      return false;
   return ll_pg_take_i64 (res, ahead) ||
          ll_backend_fail (err, "postgresql", "queue_join", "no count returned", NULL, NULL);
}

static bool ll_pg_queue_leave (void *conn, const ll_op_t *op, leaselock_error_t *err)
{
   PGresult *res = ll_pg_run_key (conn, LL_SQL_QUEUE_LEAVE, op, NULL, "queue_leave", err);
   PQclear (res);
   return res != NULL;
}

/* ---- release notifications ------------------------------------------- */

/* A listener: a connection of its own, opened as the pool's are (the
 * URI's options, keepalives, connect_timeout, the schema check), that ran
 * LISTEN on ll_<table> and on its tag's channel; released keys arrive as notifications
 * (LL_POSTGRESQL_NOTIFY) once the release commits. */
static void *ll_pg_watch_open (const char *uri, const char *tag, leaselock_error_t *err)
{
   ll_pg_conn_t *c = ll_sql_open (calloc (1, sizeof (ll_pg_conn_t)), &ll_pg_driver, uri, err);
   if (!c)
      return NULL;
   char sql[256];
   snprintf (sql, sizeof sql, ll_pg_schema_sql.listen, c->b.table, tag);
   c->call_deadline_ms = -1;
   int64_t deadline = ll_pg_call_deadline (c);
   PGresult *res = NULL;
   if (!PQsendQuery (c->db, sql))
      ll_pg_fail (c, NULL, "listening", err);
   else
      res = ll_pg_collect (c, deadline, c->io_timeout_ms, "io_timeout", "listening", err);
   if (!ll_pg_command_ok (c, res, "listening", err)) {
      ll_sql_close (c);
      return NULL;
   }
   return c;
}

static int ll_pg_watch_fd (void *listener)
{
   ll_pg_conn_t *c = listener;
   return c->db ? PQsocket (c->db) : -1;
}

/* Reads what the socket holds (no wait: the watcher polled it) and
 * reports each notification's key and next owner. */
static bool ll_pg_watch_drain (void *listener, ll_watch_fn fn, void *data, leaselock_error_t *err)
{
   ll_pg_conn_t *c = listener;
   if (!c->db || !PQconsumeInput (c->db) || PQstatus (c->db) != CONNECTION_OK)
      return ll_pg_fail (c, NULL, "listening", err);
   PGnotify *n;
   while ((n = PQnotifies (c->db))) {
      /* "<owner>/<key>" a release, "<owner>|<key>" a queue leave (an
       * owner is hex: the first separator is the one) */
      const char *sep = strpbrk (n->extra, "/|");
      if (sep && sep - n->extra <= LEASELOCK_OWNER_LEN) {
         char owner[LEASELOCK_OWNER_LEN + 1];
         ll_copy_clipped (owner, sizeof owner, n->extra, (size_t)(sep - n->extra));
         fn (data, *sep == '|' ? LL_WATCH_QUEUE_LEFT : LL_WATCH_RELEASE, sep + 1, strlen (sep + 1),
             owner);
      }
      PQfreemem (n);
   }
   return true;
}

const ll_backend_t ll_backend_postgresql = {
   .name = "postgresql",
   .schemes = { "postgresql", "postgres", NULL },
   LL_SQL_BACKEND_OPS (ll_pg),
   LL_BACKEND_WATCH_OPS (ll_pg),
   .queue_leave_notifies = true,
   .watch_close = ll_sql_close,
   .watch_abandon = ll_sql_abandon,
};

#endif /* LEASELOCK_WITH_POSTGRESQL */
