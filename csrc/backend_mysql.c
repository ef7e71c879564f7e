/*
 * backend_mysql.c - MySQL / MariaDB through libmariadb (MariaDB
 * Connector/C), which speaks to both servers: the lease operations and
 * the fair queue. The URI, the connection and the schema are in
 * backend_mysql_conn.c.
 *
 * Table (created on first use, schema version 6):
 *   lock_key VARBINARY(255) PRIMARY KEY   byte-exact keys, byte order
 *   owner CHAR(32) ascii_bin NULL          NULL once released
 *   fence BIGINT, expires_at / acquired_at DATETIME(6) in UTC,
 *   holder_host, holder_pid, holder_label,
 *   next_owner CHAR(32) ascii_bin NULL, next_until / next_since
 *   DATETIME(6) NULL                       the reservation for the next
 *                                          owner (a waiter), NULL: none;
 *                                          next_since alone: the owner
 *                                          took the key from the fair
 *                                          queue (its release wakes)
 *   holds INT                              its owner's reentrant holds
 *   queue_until DATETIME(6) NULL           the key's queue mark: no
 *                                          queue entry is live past it
 * and beside it <table>_queue, the fair mode's queue of waiters
 * (lock_key, owner, arrived, alive_until DATETIME(6); live while
 * alive_until > now), which no lease operation reads but a fair acquire's
 * first take while the key's mark is live (LL_SQL_ACQUIRE_FAIR_QUEUE:
 * refused while another owner waits; stmt_mysql.c's LL_MYSQL_QUEUE_MARK
 * says how the mark stands for the queue). A table of version 1 (no
 * reservation columns), 2 (no queue), 3 (no holds), 4 or 5 (no mark) is
 * brought to version 6 in place by the first connection that sees it
 * (ll_mysql_create_schema).
 *
 * Every operation is one prepared statement (bound parameters only) and
 * judges time with the server's clock: UTC_TIMESTAMP(6), which is NOW(6)
 * in UTC, so neither a session time zone nor a DST change moves an expiry.
 * It is the statement's start time: the same all through one statement.
 *
 * Acquire and acquire_wait are one INSERT ... ON DUPLICATE KEY UPDATE;
 * acquire binds reserve and waited as NULL, so it never reserves. MySQL
 * evaluates the assignments left to right and each sees the columns the
 * earlier ones set, so their order carries the logic:
 *   owner first: ours when the old row is "takeable" (ours already, or
 *     expired and its reservation free or ours), else kept. A BUSY row is
 *     never ours, so from there on owner <=> ours says exactly whether the
 *     key was taken, and the take's other columns test that.
 *   next_owner next: NULL when taken; ours when a waiter's claim holds
 *     (the reservation is free, already its own, or held by a waiter that
 *     began waiting later); else kept, and then it is not the waiter's.
 *     From there on, for a waiter, next_owner <=> ours says exactly
 *     whether it holds the reservation; next_until and next_since follow.
 *   fence last: it reports the outcome through LAST_INSERT_ID(expr), which
 *     mysql_stmt_insert_id() returns: the new fence when taken, ~0 (larger
 *     than any fence) when the reservation is ours, 0 when neither (the
 *     server reports 0 for a statement that did not run
 *     LAST_INSERT_ID(expr)).
 * Repeating the whole condition in each assignment would not do: once a
 * claim is written into next_owner, an expired record reads as takeable by
 * its new next owner. A take-over never extends the old owner's lease, and
 * a plain BUSY changes no column (0 affected rows). Renew, hold and
 * force_release use the LAST_INSERT_ID device to tell whether their row
 * matched (hold's insert id is also the count after). One round trip per
 * call: taken or BUSY, reserving or not, and hold; a fair first try two
 * while the key's queue mark is live and the key free. queue_join takes
 * two, and a third at most once a second for the mark (ll_mysql_queue_join
 * says why), queue_leave one, prune three (the records, the queue entries
 * that ran out, the rows that only held a mark).
 *
 * Bounded calls: these timeouts (MYSQL_OPT_CONNECT_TIMEOUT, _READ_TIMEOUT,
 * _WRITE_TIMEOUT) bound each wait for the socket, libmariadb's in poll()
 * and a reply's in recv() under the socket's SO_RCVTIMEO, kept equal to
 * the read timeout (ll_mysql_recv_read, backend_mysql_conn.c), per wait
 * and without retries (unlike old libmysqlclient, whose read timeout was
 * documented as tripled); a wait that times out ends the call
 * with BACKEND (2013, lost connection) and the connection is dropped. A
 * stalled server therefore ends a call at most one timeout after it
 * stopped answering. A call that must reconnect waits on: TCP connect,
 * the handshake and authentication (connect_timeout each), the init
 * command, the schema check (1 round trip; 9 on first use or on a
 * table of versions 1 to 3), the prepare, the execute and its rows
 * (io_timeout each). A stalled server ends a call one timeout after its
 * last answer (5 s on an open connection, 5 s + 5 s when the call
 * reconnects, by default), but the bound is per wait: a server that
 * answers every packet just in time can stretch one call over several
 * timeouts.
 *
 * Connections: before each statement a zero-timeout poll() on the socket
 * tells whether the server closed an idle connection (restart, KILL, idle
 * timeout); such a connection is re-established first. A statement that
 * fails once sent is not assumed to have applied or not: the call reports
 * BACKEND, the connection is dropped, and the next call reconnects (the
 * owner condition in every statement makes a retry safe).
 *
 * The SQL text is in stmt_mysql.c, which bench/core_mysql.c
 * shares; backend_sql.c takes the steps both SQL backends take alike
 * (open, table=, schema, reconnect, close, abandon) through ll_mysql_driver.
 */
#include "ll_internal.h"

#ifdef LEASELOCK_WITH_MYSQL

#include "backend_mysql_private.h"
#include "stmt_mysql.h"

#include <mysql.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEADLOCK_RETRIES 5

/* ---- statements ------------------------------------------------------ */

/* Binds and executes statement id (reconnecting and preparing first when
 * needed), retrying a statement the server rolled back for a deadlock (it
 * had no effect, so running it again is exact). bound_to (may be NULL):
 * the handle params were last bound to, which needs no binding again (the
 * values are read from the bound buffers when it runs); set on a bind. */
static bool ll_mysql_execute_on (ll_mysql_conn_t *c, int id, MYSQL_BIND *params,
                                 MYSQL_STMT **bound_to, const char *what, leaselock_error_t *err)
{
   for (int attempt = 0;; attempt++) {
      ll_mysql_cap_io (c); /* the prepare, on an open connection */
      if (!ll_sql_ready (&c->b, id, err))
         return false;
      ll_mysql_cap_io (c);
      MYSQL_STMT *st = c->st[id];
      if (!bound_to || *bound_to != st) {
         if (mysql_stmt_bind_param (st, params))
            return ll_mysql_fail_stmt (c, st, what, err);
         if (bound_to)
            *bound_to = st;
      }
      if (mysql_stmt_execute (st) == 0)
         return true;
      unsigned no = mysql_stmt_errno (st);
      if ((no == 1213 /* ER_LOCK_DEADLOCK */) && attempt < DEADLOCK_RETRIES)
         continue;
      return ll_mysql_fail_stmt (c, st, what, err);
   }
}

static bool ll_mysql_execute (ll_mysql_conn_t *c, int id, MYSQL_BIND *params, const char *what,
                              leaselock_error_t *err)
{
   return ll_mysql_execute_on (c, id, params, NULL, what, err);
}

static void ll_mysql_bind_str (MYSQL_BIND *b, const char *s, unsigned long *len)
{
   memset (b, 0, sizeof *b);
   b->buffer_type = MYSQL_TYPE_STRING;
   b->buffer = (void *)s;
   b->buffer_length = *len;
   b->length = len;
}

static void ll_mysql_bind_blob (MYSQL_BIND *b, const char *s, unsigned long *len)
{
   ll_mysql_bind_str (b, s, len);
   b->buffer_type = MYSQL_TYPE_BLOB;
}

static void ll_mysql_bind_i64 (MYSQL_BIND *b, int64_t *v)
{
   memset (b, 0, sizeof *b);
   b->buffer_type = MYSQL_TYPE_LONGLONG;
   b->buffer = v;
}

/* Holder strings are stored up to 255 bytes. */
static unsigned long ll_mysql_clip255 (const char *s)
{
   size_t n = s ? strlen (s) : 0;
   return n > 255 ? 255 : (unsigned long)n;
}

/* ---- operations ------------------------------------------------------ */

static void *ll_mysql_open (const char *uri, leaselock_error_t *err)
{
   return ll_sql_open (calloc (1, sizeof (ll_mysql_conn_t)), &ll_mysql_driver, uri, err);
}

/* The values LL_MYSQL_ACQUIRE binds, by their letter in
 * ll_mysql_acquire_params: the texts "kohl" (key, owner, host, label: the
 * owner a string, the others blobs), the numbers "tprwq" (ttl_us, pid,
 * reserve_us, waited_us: NULL for a plain acquire; queued: NULL unless
 * the taker waited in the fair queue) and 'f'. */
typedef struct
{
   const char *text[4];
   unsigned long text_len[4];
   int64_t number[5];
   /* The connection's, read when the statement runs: a reconnect inside
    * ll_mysql_execute updates it first. */
   int64_t *fence_floor;
   my_bool wait_null;   /* reserve and waited are NULL: a plain acquire */
   my_bool queued_null; /* queued is NULL: not a take from the fair queue */
} ll_mysql_acquire_t;

/* Each letter's value in ll_mysql_acquire_t: 1 + its text, 5 + its
 * number, 10 for 'f'; 0 binds nothing (a space). A table, not a search:
 * the acquire binds 50-odd parameters on every call. */
static const signed char ll_mysql_param_slot[128] = {
   ['k'] = 1, ['o'] = 2, ['h'] = 3, ['l'] = 4, ['t'] = 5,
   ['p'] = 6, ['r'] = 7, ['w'] = 8, ['q'] = 9, ['f'] = 10,
};

/* Binds p[] by params (ll_mysql_acquire_params or _fair_params). */
static void ll_mysql_bind_acquire (MYSQL_BIND *p, const char *params, ll_mysql_acquire_t *a)
{
   int i = 0;
   for (const char *s = params; *s; s++) {
      int v = ll_mysql_param_slot[(unsigned char)*s & 127] - 1;
      if (v < 0)
         continue;
      if (v == 9) {
         ll_mysql_bind_i64 (&p[i++], a->fence_floor);
      } else if (v < 4) {
         (*s == 'o' ? ll_mysql_bind_str : ll_mysql_bind_blob) (&p[i++], a->text[v],
                                                               &a->text_len[v]);
      } else {
         ll_mysql_bind_i64 (&p[i], &a->number[v - 4]);
         if (*s == 'r' || *s == 'w')
            p[i].is_null = &a->wait_null;
         else if (*s == 'q')
            p[i].is_null = &a->queued_null;
         i++;
      }
   }
}

/* The acquire's three statements (LL_SQL_ACQUIRE, _FAIR, _FAIR_QUEUE) and
 * their parameter lists, in the order of ll_mysql_acq_binds_t's arrays. */
static const int ll_mysql_acq_ids[3] = { LL_SQL_ACQUIRE, LL_SQL_ACQUIRE_FAIR,
                                         LL_SQL_ACQUIRE_FAIR_QUEUE };

/* A connection's acquire parameters: 50-odd binds per statement, built
 * and bound once (binding them on every call was a fifth of the client's
 * work per acquire+release pair), over buffers that each call fills:
 * MySQL reads bound values when the statement runs. */
typedef struct ll_mysql_acq_binds
{
   ll_mysql_acquire_t a; /* the values; its texts are the buffers below */
   char key[LEASELOCK_KEY_MAX], owner[LEASELOCK_OWNER_LEN], host[255], label[255];
   const char *host_from, *label_from; /* the strings host and label hold */
   MYSQL_BIND p[3][LL_MYSQL_ACQUIRE_BINDS];
   MYSQL_STMT *bound_to[3]; /* the handle p[i] was bound to, or NULL */
} ll_mysql_acq_binds_t;

static const char *const ll_mysql_acq_params[3] = { ll_mysql_acquire_params,
                                                    ll_mysql_acquire_fair_params,
                                                    ll_mysql_acquire_fair_queue_params };

void ll_mysql_acq_binds_reset (ll_mysql_conn_t *c, bool free_too)
{
   if (!c->acq_binds)
      return;
   memset (c->acq_binds->bound_to, 0, sizeof c->acq_binds->bound_to);
   if (free_too) {
      free (c->acq_binds);
      c->acq_binds = NULL;
   }
}

static ll_mysql_acq_binds_t *ll_mysql_acq_binds (ll_mysql_conn_t *c)
{
   ll_mysql_acq_binds_t *k = c->acq_binds;
   if (k)
      return k;
   if (!(k = calloc (1, sizeof *k)))
      return NULL;
   k->a.text[0] = k->key;
   k->a.text[1] = k->owner;
   k->a.text[2] = k->host;
   k->a.text[3] = k->label;
   k->a.fence_floor = &c->b.primary.fence_floor;
   for (int i = 0; i < 3; i++)
      ll_mysql_bind_acquire (k->p[i], ll_mysql_acq_params[i], &k->a);
   return c->acq_binds = k;
}

/* Copies a holder string (clipped to 255 bytes) into buf unless it holds
 * it already. */
static void ll_mysql_acq_text (char *buf, const char **from, unsigned long *len, const char *s)
{
   s = s ? s : "";
   unsigned long n = ll_mysql_clip255 (s);
   if (*from != s || *len != n) {
      memcpy (buf, s, n);
      *from = s;
      *len = n;
   }
}

/* acquire (reserve_ms < 0: never reserves) and acquire_wait: one
 * statement, whose insert id says what it did (the top comment). */
static bool ll_mysql_acquire_wait (void *conn, const ll_take_t *t, ll_taken_t *out,
                                   leaselock_error_t *err)
{
   ll_mysql_conn_t *c = conn;
   out->reserved = false;
   out->left_ms = -1;
   if (!ll_primary_ttl_ok (&c->b.primary, "mysql", t->ttl_ms, err))
      return false;
   ll_mysql_acq_binds_t *k = ll_mysql_acq_binds (c);
   if (!k)
      return ll_error_set (err, LEASELOCK_NOMEM, "out of memory");
   ll_mysql_acquire_t *a = &k->a;
   memcpy (k->key, t->op.key, t->op.key_len);
   a->text_len[0] = (unsigned long)t->op.key_len;
   memcpy (k->owner, t->op.owner, LEASELOCK_OWNER_LEN);
   a->text_len[1] = LEASELOCK_OWNER_LEN;
   ll_mysql_acq_text (k->host, &k->host_from, &a->text_len[2], t->holder->host);
   ll_mysql_acq_text (k->label, &k->label_from, &a->text_len[3], t->holder->label);
   int64_t numbers[5] = { t->ttl_ms * 1000, t->holder->pid, t->reserve_ms * 1000,
                          t->waited_ms * 1000, 1 };
   memcpy (a->number, numbers, sizeof numbers);
   a->wait_null = t->reserve_ms < 0;
   a->queued_null = !t->queued;
   /* A fair first try reads the key's queue mark; where this connection
    * knows the mark live (it joined the key's queue lately), the mark
    * would keep a free key: the queue is asked at once. */
   int v = !t->fair ? 0 : ll_queue_mark_left (&c->mark, &t->op, ll_real_now_ms ()) > 0 ? 2 : 1;
   int which = ll_mysql_acq_ids[v];
   out->reserved = false;
   if (!ll_mysql_execute_on (c, which, k->p[v], &k->bound_to[v], "acquire", err))
      return false;
   MYSQL_STMT *st = c->st[which];
   my_ulonglong id = mysql_stmt_insert_id (st);
   if (id == (my_ulonglong)LL_MYSQL_MARKED) { /* free, but its queue mark is live: ask the queue */
      which = LL_SQL_ACQUIRE_FAIR_QUEUE;
      if (!ll_mysql_execute_on (c, which, k->p[2], &k->bound_to[2], "acquire", err))
         return false;
      st = c->st[which];
      id = mysql_stmt_insert_id (st);
   }
   out->reserved = id >= LL_MYSQL_RESERVED_MIN;
   if (out->reserved) /* rounded up: a part of a millisecond is still left */
      out->left_ms = (int64_t)((~(my_ulonglong)0 - id + 999) / 1000);
   if (id == 0 || out->reserved || mysql_stmt_affected_rows (st) == 0)
      return ll_error_set (err, LEASELOCK_BUSY, "held by another owner");
   out->fence = (int64_t)id;
   return true;
}

/* Renew, release and hold: (n, key, owner) bound, then executed; n the
 * microseconds of a TTL or min_hold, or a hold's delta. */
static bool ll_mysql_execute_owned (ll_mysql_conn_t *c, int id, const ll_op_t *op, int64_t n,
                                    const char *what, leaselock_error_t *err)
{
   unsigned long klen = (unsigned long)op->key_len, olen = LEASELOCK_OWNER_LEN;
   MYSQL_BIND p[3];
   ll_mysql_bind_i64 (&p[0], &n);
   ll_mysql_bind_blob (&p[1], op->key, &klen);
   ll_mysql_bind_str (&p[2], op->owner, &olen);
   return ll_mysql_execute (c, id, p, what, err);
}

static bool ll_mysql_not_held (leaselock_error_t *err)
{
   return ll_error_set (err, LEASELOCK_NOT_HELD, "the lease is no longer held by this owner");
}

static bool ll_mysql_renew (void *conn, const ll_op_t *op, int64_t ttl_ms, leaselock_error_t *err)
{
   ll_mysql_conn_t *c = conn;
   if (!ll_primary_ttl_ok (&c->b.primary, "mysql", ttl_ms, err) ||
       !ll_mysql_execute_owned (c, LL_SQL_RENEW, op, ttl_ms * 1000, "renew", err))
      return false;
   /* Not the rows changed (an expiry could in theory be rewritten with the
    * same value): LAST_INSERT_ID(fence) ran iff the row matched. */
   return mysql_stmt_insert_id (c->st[LL_SQL_RENEW]) != 0 || ll_mysql_not_held (err);
}

static bool ll_mysql_release (void *conn, const ll_op_t *op, int64_t min_hold_ms,
                              leaselock_error_t *err)
{
   ll_mysql_conn_t *c = conn;
   if (!ll_mysql_execute_owned (c, LL_SQL_RELEASE, op, min_hold_ms * 1000, "release", err))
      return false;
   /* The owner column always changes (ours -> NULL) when it matched. */
   if (mysql_stmt_affected_rows (c->st[LL_SQL_RELEASE]) != 1)
      return ll_mysql_not_held (err);
   /* Only a release that leaves a waiter next wakes this machine's
    * listeners: waking them on every release would cost each a request
    * for nothing. */
   if (mysql_stmt_insert_id (c->st[LL_SQL_RELEASE]) != 0)
      ll_wake_touch (&c->wake);
   return true;
}

/* One statement, one round trip: the insert id is the count after, 0 when
 * the row did not match (affected rows would not do: 1 - 1 stays 1). */
static bool ll_mysql_hold (void *conn, const ll_op_t *op, int delta, int64_t *holds,
                           leaselock_error_t *err)
{
   ll_mysql_conn_t *c = conn;
   if (!ll_mysql_execute_owned (c, LL_SQL_HOLD, op, delta, "hold", err))
      return false;
   my_ulonglong id = mysql_stmt_insert_id (c->st[LL_SQL_HOLD]);
   if (id == 0)
      return ll_mysql_not_held (err);
   *holds = (int64_t)id;
   return true;
}

/* Result row of the SELECTs. */
typedef struct
{
   char key[LEASELOCK_KEY_MAX + 1];
   char owner[LEASELOCK_OWNER_LEN + 1];
   char host[256], label[256];
   char next[LEASELOCK_OWNER_LEN + 1];
   unsigned long key_len, owner_len, host_len, label_len, next_len;
   my_bool owner_null, next_null;
   int64_t fence, diff_us, pid, holds, queued, held_us;
   MYSQL_BIND b[11];
} ll_mysql_row_t;

static void ll_mysql_row_bind (ll_mysql_row_t *r)
{
   /* Each text's room (its bind's buffer_length); the fetch then writes
    * its length there. */
   r->key_len = LEASELOCK_KEY_MAX;
   r->owner_len = r->next_len = sizeof r->owner;
   r->host_len = sizeof r->host - 1;
   r->label_len = sizeof r->label - 1;
   ll_mysql_bind_blob (&r->b[0], r->key, &r->key_len);
   ll_mysql_bind_str (&r->b[1], r->owner, &r->owner_len);
   r->b[1].is_null = &r->owner_null;
   ll_mysql_bind_i64 (&r->b[2], &r->fence);
   ll_mysql_bind_i64 (&r->b[3], &r->diff_us);
   ll_mysql_bind_blob (&r->b[4], r->host, &r->host_len);
   ll_mysql_bind_i64 (&r->b[5], &r->pid);
   ll_mysql_bind_blob (&r->b[6], r->label, &r->label_len);
   ll_mysql_bind_i64 (&r->b[7], &r->holds);
   ll_mysql_bind_str (&r->b[8], r->next, &r->next_len);
   r->b[8].is_null = &r->next_null;
   ll_mysql_bind_i64 (&r->b[9], &r->queued);
   ll_mysql_bind_i64 (&r->b[10], &r->held_us);
}

static void ll_mysql_row_to_record (ll_mysql_row_t *r, leaselock_record_t *rec)
{
   memset (rec, 0, sizeof *rec);
   rec->key_len = ll_copy_clipped (rec->key, sizeof rec->key, r->key, r->key_len);
   if (!r->owner_null)
      ll_copy_clipped (rec->owner, sizeof rec->owner, r->owner, r->owner_len);
   rec->fence = r->fence;
   rec->expires_in_ms = ll_us_to_left_ms (r->diff_us);
   ll_copy_clipped (rec->host, sizeof rec->host, r->host, r->host_len);
   rec->pid = r->pid;
   ll_copy_clipped (rec->label, sizeof rec->label, r->label, r->label_len);
   /* A released record's stored count is stale: it shows no holds. */
   rec->holds = r->owner_null ? 0 : r->holds;
   if (!r->next_null)
      ll_copy_clipped (rec->next_owner, sizeof rec->next_owner, r->next, r->next_len);
   rec->queued = r->queued;
   rec->held_ms = r->held_us / 1000;
}

/* Executes a SELECT, buffers its rows, and calls fn for each (fn returns
 * false to stop). */
static bool ll_mysql_query_rows (ll_mysql_conn_t *c, int id, MYSQL_BIND *params,
                                 leaselock_record_cb fn, void *data, const char *what,
                                 leaselock_error_t *err)
{
   if (!ll_mysql_execute (c, id, params, what, err))
      return false;
   MYSQL_STMT *st = c->st[id];
   ll_mysql_row_t *r = malloc (sizeof *r);
   leaselock_record_t *rec = malloc (sizeof *rec);
   bool ok = false;
   if (!r || !rec) {
      ll_error_set (err, LEASELOCK_NOMEM, "out of memory");
      goto done;
   }
   ll_mysql_row_bind (r);
   if (mysql_stmt_bind_result (st, r->b) || mysql_stmt_store_result (st)) {
      ll_mysql_fail_stmt (c, st, what, err);
      goto done;
   }
   for (;;) {
      int rc = mysql_stmt_fetch (st);
      if (rc == MYSQL_NO_DATA)
         break;
      if (rc == 1) {
         ll_mysql_fail_stmt (c, st, what, err);
         goto done;
      }
      /* rc 0, or MYSQL_DATA_TRUNCATED (cannot happen with these widths) */
      ll_mysql_row_to_record (r, rec);
      if (!fn (rec, data))
         break;
   }
   ok = true;
done:
   if (c->db && c->st[id])
      mysql_stmt_free_result (c->st[id]);
   free (r);
   free (rec);
   return ok;
}

static bool ll_mysql_inspect (void *conn, const ll_op_t *op, leaselock_record_t *rec, bool *found,
                              leaselock_error_t *err)
{
   ll_mysql_conn_t *c = conn;
   unsigned long klen = (unsigned long)op->key_len;
   MYSQL_BIND p[1];
   ll_mysql_bind_blob (&p[0], op->key, &klen);
   *found = false;
   ll_record_one_t o = { rec, found };
   return ll_mysql_query_rows (c, LL_SQL_INSPECT, p, ll_record_take_one, &o, "inspect", err);
}

/* The keys under a prefix, for list and prune: exactly those in [prefix,
 * upper) where upper is the prefix with trailing 0xff bytes dropped and
 * the last byte incremented; from the prefix on when there is no upper
 * (the prefix is empty or all 0xff). The binds point into r, which must
 * outlive the statement's execution. */
typedef struct ll_mysql_range
{
   char upper[LEASELOCK_KEY_MAX + 1];
   unsigned long prefix_len, upper_len;
} ll_mysql_range_t;

/* Binds the prefix to from and its upper bound to below; returns whether
 * there is one (then the _RANGE statement, else the _FROM one). */
static bool ll_mysql_bind_range (ll_mysql_range_t *r, const char *prefix, size_t prefix_len,
                                 MYSQL_BIND *from, MYSQL_BIND *below)
{
   r->upper_len = (unsigned long)ll_prefix_upper (prefix, prefix_len, r->upper);
   r->prefix_len = (unsigned long)prefix_len;
   ll_mysql_bind_blob (from, prefix_len ? prefix : "", &r->prefix_len);
   ll_mysql_bind_blob (below, r->upper, &r->upper_len);
   return r->upper_len != 0;
}

static bool ll_mysql_list (void *conn, const char *prefix, size_t prefix_len,
                           leaselock_record_cb fn, void *user_data, leaselock_error_t *err)
{
   ll_mysql_range_t r;
   MYSQL_BIND p[2];
   bool bounded = ll_mysql_bind_range (&r, prefix, prefix_len, &p[0], &p[1]);
   return ll_mysql_query_rows (conn, bounded ? LL_SQL_LIST_RANGE : LL_SQL_LIST_FROM, p, fn,
                               user_data, "list", err);
}

static bool ll_mysql_force_release (void *conn, const ll_op_t *op, bool *took,
                                    leaselock_error_t *err)
{
   ll_mysql_conn_t *c = conn;
   unsigned long klen = (unsigned long)op->key_len;
   MYSQL_BIND p[1];
   ll_mysql_bind_blob (&p[0], op->key, &klen);
   if (!ll_mysql_execute (c, LL_SQL_FORCE, p, "force_release", err))
      return false;
   *took = mysql_stmt_insert_id (c->st[LL_SQL_FORCE]) != 0;
   ll_wake_touch (&c->wake); /* rare: whoever waits tries now */
   return true;
}

static bool ll_mysql_prune (void *conn, const char *prefix, size_t prefix_len,
                            int64_t older_than_ms, int64_t *count, leaselock_error_t *err)
{
   ll_mysql_conn_t *c = conn;
   ll_mysql_range_t r;
   int64_t us = older_than_ms * 1000;
   MYSQL_BIND p[3];
   bool bounded = ll_mysql_bind_range (&r, prefix, prefix_len, &p[0], &p[2]);
   ll_mysql_bind_i64 (&p[1], &us);
   int id = bounded ? LL_SQL_PRUNE_RANGE : LL_SQL_PRUNE_FROM;
   if (!ll_mysql_execute (c, id, p, "prune", err))
      return false;
   *count = (int64_t)mysql_stmt_affected_rows (c->st[id]);
   /* The queue entries that ran out go too, then the rows that only held
    * their mark (neither counted: not records). */
   return ll_mysql_execute (c, bounded ? LL_SQL_QUEUE_PRUNE_RANGE : LL_SQL_QUEUE_PRUNE_FROM, p,
                            "prune", err) &&
          ll_mysql_execute (c, bounded ? LL_SQL_MARK_PRUNE_RANGE : LL_SQL_MARK_PRUNE_FROM, p,
                            "prune", err);
}

/* ---- the fair mode's queue --------------------------------------------- */

/* Reads the one row of statement id's result: n BIGINT columns (NULL reads
 * as -1). */
static bool ll_mysql_fetch_row_i64 (ll_mysql_conn_t *c, int id, int64_t *v, int n,
                                    leaselock_error_t *err)
{
   MYSQL_STMT *st = c->st[id];
   MYSQL_BIND r[2];
   my_bool is_null[2] = { 0, 0 };
   for (int i = 0; i < n; i++) {
      ll_mysql_bind_i64 (&r[i], &v[i]);
      r[i].is_null = &is_null[i];
   }
   int rc = 1;
   if (!mysql_stmt_bind_result (st, r) && !mysql_stmt_store_result (st))
      rc = mysql_stmt_fetch (st);
   bool ok = rc == 0;
   if (!ok && rc == MYSQL_NO_DATA)
      ll_backend_fail (err, "mysql", "queue_join", "no row returned", NULL, NULL);
   else if (!ok)
      ll_mysql_fail_stmt (c, st, "queue_join", err);
   if (c->db && c->st[id])
      mysql_stmt_free_result (c->st[id]);
   for (int i = 0; i < n; i++)
      if (is_null[i])
         v[i] = -1;
   return ok;
}

/* The key's queue mark, set (LL_SQL_QUEUE_MARK) unless the connection
 * knows it fresh (ll_queue_mark_fresh); into *until_us, the mark (us since
 * 1970, the server's clock). */
static bool ll_mysql_queue_mark (ll_mysql_conn_t *c, const ll_op_t *op, int64_t keep_ms,
                                 int64_t *until_us, leaselock_error_t *err)
{
   int64_t now = ll_real_now_ms ();
   if (ll_queue_mark_fresh (&c->mark, op, keep_ms, now)) {
      *until_us = c->mark.end;
      return true;
   }
   unsigned long klen = (unsigned long)op->key_len;
   int64_t span_ms = keep_ms + LL_QUEUE_MARK_SPARE_MS, span_us = span_ms * 1000;
   MYSQL_BIND p[4];
   ll_mysql_bind_blob (&p[0], op->key, &klen);
   for (int i = 1; i < 4; i++)
      ll_mysql_bind_i64 (&p[i], &span_us);
   c->mark.key_len = 0;
   if (!ll_mysql_execute (c, LL_SQL_QUEUE_MARK, p, "queue_join", err))
      return false;
   *until_us = (int64_t)mysql_stmt_insert_id (c->st[LL_SQL_QUEUE_MARK]);
   if (*until_us <= 0) /* never: LAST_INSERT_ID(expr) runs on either path */
      return ll_backend_fail (err, "mysql", "queue_join", "no queue mark returned", NULL, NULL);
   ll_queue_mark_keep (&c->mark, op, *until_us, now, span_ms);
   return true;
}

/*
 * queue_join: the key's queue mark first when due (ll_mysql_queue_mark),
 * then two statements, two round trips, and between them nothing
 * held. The upsert (stmt_mysql.c) writes the key's head row first: its
 * row lock orders the joins of the key, and it hands each join an arrival
 * after the key's latest (so arrivals follow commits), within the one
 * autocommitted statement: the server runs it to its commit whatever the
 * client does, so a waiter stopped in its join (SIGSTOP, a debugger, a
 * paused VM) holds no other join back; its entry runs out after keep like
 * any, and never after the mark the join read, however late the upsert
 * arrives. Then the count, which starts after the upsert committed, when
 * every earlier arrival has. A named lock (GET_LOCK) held across the
 * round trips, as before, made every other join of the key wait for a
 * stopped waiter; plain reads in one transaction do not wait for another
 * join's uncommitted entry, and locking reads deadlock against each
 * other's inserts. A deadlock on the head row (two first joins of a key)
 * is retried (ll_mysql_execute); every wait ends within the caller's
 * bound (ll_mysql_cap_io).
 */
static bool ll_mysql_queue_join (void *conn, const ll_op_t *op, int64_t keep_ms, int64_t *ahead,
                                 leaselock_error_t *err)
{
   ll_mysql_conn_t *c = conn;
   unsigned long klen = (unsigned long)op->key_len, olen = LEASELOCK_OWNER_LEN;
   int64_t keep_us = keep_ms * 1000, mark_us = 0, v[1] = { -1 };
   if (!ll_mysql_queue_mark (c, op, keep_ms, &mark_us, err))
      return false;
   if (ll_test_queue_mark_hook)
      ll_test_queue_mark_hook ();
   MYSQL_BIND p[7];
   ll_mysql_bind_blob (&p[0], op->key, &klen);
   ll_mysql_bind_blob (&p[1], op->key, &klen);
   ll_mysql_bind_str (&p[2], op->owner, &olen);
   for (int i = 3; i < 7; i += 2) {
      ll_mysql_bind_i64 (&p[i], &keep_us);
      ll_mysql_bind_i64 (&p[i + 1], &mark_us);
   }
   if (!ll_mysql_execute (c, LL_SQL_QUEUE_JOIN, p, "queue_join", err))
      return false;
   if (ll_test_queue_join_hook)
      ll_test_queue_join_hook ();
   ll_mysql_bind_str (&p[1], op->owner, &olen);
   if (!ll_mysql_execute (c, LL_SQL_QUEUE_AHEAD, p, "queue_join", err) ||
       !ll_mysql_fetch_row_i64 (c, LL_SQL_QUEUE_AHEAD, v, 1, err))
      return false;
   *ahead = v[0];
   return true;
}

static bool ll_mysql_queue_leave (void *conn, const ll_op_t *op, leaselock_error_t *err)
{
   ll_mysql_conn_t *c = conn;
   unsigned long klen = (unsigned long)op->key_len, olen = LEASELOCK_OWNER_LEN;
   MYSQL_BIND p[2];
   ll_mysql_bind_blob (&p[0], op->key, &klen);
   ll_mysql_bind_str (&p[1], op->owner, &olen);
   if (!ll_mysql_execute (c, LL_SQL_QUEUE_LEAVE, p, "queue_leave", err))
      return false;
   ll_wake_touch_queue (&c->wake); /* queue_leave_notifies */
   return true;
}

/* Release notifications for this machine's processes (wake_file.c). */
LL_WAKE_HOST_WATCH (ll_mysql, "mysql", "table")

const ll_backend_t ll_backend_mysql = {
   .name = "mysql",
   .schemes = { "mysql", "mariadb", NULL },
   LL_SQL_BACKEND_OPS (ll_mysql),
   LL_BACKEND_HOST_WATCH_OPS (ll_mysql),
   .queue_leave_notifies = true,
};

#endif /* LEASELOCK_WITH_MYSQL */
