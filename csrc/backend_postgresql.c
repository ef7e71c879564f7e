/*
 * backend_postgresql.c - PostgreSQL through libpq.
 *
 * URI: postgresql://... or postgres://..., a libpq connection URI passed
 * to libpq as it is (every libpq option and PG* environment variable
 * works), except for options of leaselock's own, removed before:
 *   table=name        the lock table (default "leaselock"); the schema
 *                     version lives in <table>_meta
 *   io_timeout=5s     how long one call may wait for the server once
 *                     connected (a duration: 5s, 1500ms, 2.5; 1 ms to 1 d)
 * and libpq's connect_timeout, which leaselock enforces itself (whole
 * seconds, 1 to 86400; default 5): the whole connection set-up, every
 * host and address of the URI together, TLS, authentication and the
 * schema check, is one deadline. Defaults that the URI may override:
 * keepalives=1, keepalives_idle=10, keepalives_interval=5,
 * keepalives_count=3, tcp_user_timeout=<io_timeout in ms>,
 * fallback_application_name=leaselock. client_encoding is always UTF8.
 *
 * Bounded calls: the connection is non-blocking and every statement is
 * sent with PQsendPrepare / PQsendQueryPrepared, flushed, and its results
 * read with poll() on PQsocket against one deadline (now + io_timeout) for
 * the call's prepare and execute together. A call that misses its deadline
 * reports BACKEND and closes the connection (the statement may still run
 * once the server wakes up: like any lost reply, the owner condition makes
 * a retry safe); the next call reconnects. One call therefore takes at most
 * connect_timeout + io_timeout (5 s + 5 s by default: at most the renewal
 * interval of the default 30 s TTL, so a renewal stuck on a stalled server
 * ends with time left for retries), plus name resolution (getaddrinfo,
 * which libpq runs blocking and the system resolver bounds).
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
 * alive_until is ahead of the server's clock), never read by the lease
 * operations. A version-1 table (without the next_* columns), -2 table
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
 * (stmt_postgresql.c says why not one); queue_leave one DELETE; prune a
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

#include "stmt_postgresql.h"

#include <errno.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_IO_TIMEOUT_MS 5000
#define DEFAULT_CONNECT_TIMEOUT_S 5
#define MAX_TIMEOUT_S 86400

typedef struct
{
   ll_sql_conn_t b; /* first: the part backend_sql.c uses */
   PGconn *db;      /* NULL while disconnected */
   bool prepared[LL_SQL_COUNT];
   char *conninfo;              /* the URI without leaselock's options */
   int64_t io_timeout_ms;       /* one call's wait once connected */
   int64_t connect_timeout_ms;  /* the whole connection set-up */
   int64_t connect_deadline_ms; /* while connecting: when connect_timeout ends */
   int64_t call_deadline_ms;    /* in a call: when io_timeout ends; -1 before its first wait */
} ll_pg_conn_t;

/* ---- errors ---------------------------------------------------------- */

static void ll_pg_disconnect (ll_sql_conn_t *b)
{
   ll_pg_conn_t *c = (ll_pg_conn_t *)b;
   if (c->db)
      PQfinish (c->db);
   c->db = NULL;
   memset (c->prepared, 0, sizeof c->prepared);
}

/* BACKEND in the one format (ll_backend_fail) with the server's or libpq's
 * message and "(SQLSTATE <state>)" when the server gave one. res may be
 * NULL. The connection is dropped when it is no longer usable. Returns
 * false. */
static bool ll_pg_fail (ll_pg_conn_t *c, PGresult *res, const char *what, leaselock_error_t *err)
{
   const char *msg = res ? PQresultErrorMessage (res) : NULL;
   if (!msg || !*msg)
      msg = c->db ? PQerrorMessage (c->db) : "not connected";
   const char *state = res ? PQresultErrorField (res, PG_DIAG_SQLSTATE) : NULL;
   char detail[32] = "";
   if (state)
      snprintf (detail, sizeof detail, "SQLSTATE %.5s", state);
   ll_backend_fail (err, "postgresql", what, msg, &c->b.secrets, detail);
   /* Class 08 (connection exception), 57P (operator intervention:
    * shutdown, terminated) or a broken socket: reconnect next time. */
   if (!c->db || PQstatus (c->db) != CONNECTION_OK ||
       (state && (!strncmp (state, "08", 2) || !strncmp (state, "57P", 3))))
      ll_pg_disconnect (&c->b);
   return false;
}

/* ---- URI ------------------------------------------------------------- */

/* The options of leaselock's own, removed before the URI reaches libpq. */
static bool ll_pg_is_own_option (const char *item, size_t n)
{
   static const char *const own[] = { "table", "io_timeout" };
   for (size_t i = 0; i < sizeof own / sizeof own[0]; i++) {
      size_t k = strlen (own[i]);
      if (n >= k && !strncmp (item, own[i], k) && (n == k || item[k] == '='))
         return true;
   }
   return false;
}

/* Reads the timeouts (each occurrence is checked; the last one counts, as
 * in libpq). */
static bool ll_pg_parse_timeouts (ll_pg_conn_t *c, const ll_uri_t *u, leaselock_error_t *err)
{
   c->io_timeout_ms = DEFAULT_IO_TIMEOUT_MS;
   c->connect_timeout_ms = DEFAULT_CONNECT_TIMEOUT_S * 1000;
   for (int i = 0; i < u->n_params; i++) {
      const char *n = u->params[i].name, *v = u->params[i].value;
      if (!strcmp (n, "io_timeout")) {
         int64_t ms = 0;
         leaselock_error_t e;
         if (!leaselock_parse_duration (v, &ms, &e) || ms < 1 || ms > MAX_TIMEOUT_S * 1000)
            return ll_error_set (err, LEASELOCK_INVALID,
                                 "postgresql URI option io_timeout=\"%.32s\": expected a duration "
                                 "from 1ms to 1d such as 5s or 1500ms (calls must be bounded)",
                                 v);
         c->io_timeout_ms = ms;
      } else if (!strcmp (n, "connect_timeout")) {
         /* 0, libpq's "forever", is refused: calls must be bounded. */
         int64_t s;
         if (!ll_uri_int_option ("postgresql", n, v, 1, MAX_TIMEOUT_S, "seconds", &s, err))
            return false;
         c->connect_timeout_ms = s * 1000;
      }
   }
   return true;
}

/* Beside the URI's secrets as ll_uri_redact hides them (ll_sql_open adds
 * those), the password and sslpassword exactly as libpq reads them
 * (PQconninfoParse, no I/O). */
static bool ll_pg_add_libpq_secrets (ll_pg_conn_t *c, const char *text)
{
   PQconninfoOption *opts = PQconninfoParse (text, NULL);
   bool ok = true;
   for (PQconninfoOption *o = opts; o && o->keyword && ok; o++)
      if (o->val && (!strcmp (o->keyword, "password") || !strcmp (o->keyword, "sslpassword")))
         ok = ll_secrets_add (&c->b.secrets, o->val, strlen (o->val));
   PQconninfoFree (opts);
   return ok;
}

/* A copy of the URI without leaselock's own options (nor a fragment after
 * them), for libpq; NULL when out of memory. */
static char *ll_pg_without_own_options (const char *text)
{
   size_t len = strlen (text);
   char *out = malloc (len + 1);
   if (!out)
      return NULL;
   const char *q = strchr (text, '?');
   if (!q)
      return memcpy (out, text, len + 1);
   size_t o = (size_t)(q - text);
   memcpy (out, text, o);
   const char *end = q + 1 + strcspn (q + 1, "#");
   char sep = '?';
   for (const char *item = q + 1; item < end;) {
      const char *amp = memchr (item, '&', (size_t)(end - item));
      const char *item_end = amp ? amp : end;
      size_t n = (size_t)(item_end - item);
      if (n && !ll_pg_is_own_option (item, n)) {
         out[o++] = sep;
         memcpy (out + o, item, n);
         o += n;
         sep = '&';
      }
      item = amp ? amp + 1 : end;
   }
   out[o] = '\0';
   return out;
}

/* Reads leaselock's options and keeps the rest of the URI for libpq. */
static bool ll_pg_parse_uri (ll_sql_conn_t *b,
                             const ll_uri_t *u,
                             const char *text,
                             leaselock_error_t *err)
{
   ll_pg_conn_t *c = (ll_pg_conn_t *)b;
   const char *table = ll_uri_param (u, "table");
   if (!ll_pg_parse_timeouts (c, u, err) || (table && !ll_sql_table_option (b, table, err)))
      return false;
   if (!ll_pg_add_libpq_secrets (c, text) || !(c->conninfo = ll_pg_without_own_options (text)))
      return ll_error_set (err, LEASELOCK_NOMEM, "out of memory");
   return true;
}

/* ---- bounded I/O ----------------------------------------------------- */

/* Waits until the connection's socket has one of events or deadline_ms
 * (ll_real_now_ms: the real clock, not the engine's, which tests may fake)
 * passes. 1: ready (or an error poll reports: libpq will find it), 0: the
 * deadline passed. */
static int ll_pg_wait_socket (PGconn *db, short events, int64_t deadline_ms)
{
   struct pollfd p = { .fd = PQsocket (db), .events = events };
   if (p.fd < 0)
      return 1;
   for (;;) {
      int64_t left = deadline_ms - ll_real_now_ms ();
      if (left <= 0)
         return 0;
      int r = poll (&p, 1, left > 60000 ? 60000 : (int)left);
      if (r > 0 || (r < 0 && errno != EINTR))
         return 1;
   }
}

/* BACKEND for a call that got no answer in time; the connection is closed
 * (whatever it was doing is abandoned). Returns false. */
static bool ll_pg_timed_out (ll_pg_conn_t *c,
                             const char *what,
                             int64_t limit_ms,
                             const char *option,
                             leaselock_error_t *err)
{
   ll_pg_disconnect (&c->b);
   char msg[96];
   snprintf (msg, sizeof msg, "no answer from the server within %lld ms; the connection was closed",
             (long long)limit_ms);
   return ll_backend_fail (err, "postgresql", what, msg, NULL, option);
}

/* After a PQsend* call: flushes the query and reads every result by
 * deadline_ms. Returns the first result that failed, or else the last
 * one (the caller clears it); NULL with err set when the connection failed
 * or the deadline passed (the connection is then closed). */
static PGresult *ll_pg_collect (ll_pg_conn_t *c,
                                int64_t deadline_ms,
                                int64_t limit_ms,
                                const char *option,
                                const char *what,
                                leaselock_error_t *err)
{
   int f;
   while ((f = PQflush (c->db)) != 0) {
      if (f < 0)
         return ll_pg_fail (c, NULL, what, err), NULL;
      if (!ll_pg_wait_socket (c->db, POLLIN | POLLOUT, deadline_ms))
         return ll_pg_timed_out (c, what, limit_ms, option, err), NULL;
      if (!PQconsumeInput (c->db))
         return ll_pg_fail (c, NULL, what, err), NULL;
   }
   PGresult *keep = NULL;
   for (;;) {
      while (PQisBusy (c->db)) {
         if (!ll_pg_wait_socket (c->db, POLLIN, deadline_ms)) {
            PQclear (keep);
            return ll_pg_timed_out (c, what, limit_ms, option, err), NULL;
         }
         if (!PQconsumeInput (c->db)) {
            PQclear (keep);
            return ll_pg_fail (c, NULL, what, err), NULL;
         }
      }
      PGresult *res = PQgetResult (c->db);
      if (!res)
         break;
      ExecStatusType s = PQresultStatus (keep);
      if (keep && s != PGRES_COMMAND_OK && s != PGRES_TUPLES_OK) {
         PQclear (res); /* keep the first failure */
      } else {
         PQclear (keep);
         keep = res;
      }
   }
   if (!keep) {
      ll_pg_fail (c, NULL, what, err);
      ll_pg_disconnect (&c->b);
   }
   return keep;
}

/* Runs sql (one or more statements, no parameters) within the connect
 * deadline. */
static PGresult *ll_pg_exec_setup (ll_pg_conn_t *c,
                                   const char *sql,
                                   const char *what,
                                   leaselock_error_t *err)
{
   if (!PQsendQuery (c->db, sql))
      return ll_pg_fail (c, NULL, what, err), NULL;
   return ll_pg_collect (c, c->connect_deadline_ms, c->connect_timeout_ms, "connect_timeout", what,
                         err);
}

/* ---- connection ------------------------------------------------------ */

/* Each statement's number of parameters, and its name on the server. */
static const int n_params[LL_SQL_COUNT] = {
   [LL_SQL_ACQUIRE] = 8,
   [LL_SQL_RENEW] = 3,
   [LL_SQL_RELEASE] = 3,
   [LL_SQL_INSPECT] = 1,
   [LL_SQL_LIST_FROM] = 1,
   [LL_SQL_LIST_RANGE] = 2,
   [LL_SQL_FORCE] = 1,
   [LL_SQL_PRUNE_FROM] = 2,
   [LL_SQL_PRUNE_RANGE] = 3,
   [LL_SQL_QUEUE_JOIN] = 3,
   [LL_SQL_QUEUE_AHEAD] = 2,
   [LL_SQL_QUEUE_LEAVE] = 2,
   [LL_SQL_QUEUE_PRUNE_FROM] = 2,
   [LL_SQL_QUEUE_PRUNE_RANGE] = 3,
   [LL_SQL_HOLD] = 3,
};

static const char *const st_names[LL_SQL_COUNT] = {
   "leaselock_acquire",
   "leaselock_renew",
   "leaselock_release",
   "leaselock_inspect",
   "leaselock_list_from",
   "leaselock_list_range",
   "leaselock_force",
   [LL_SQL_PRUNE_FROM] = "leaselock_prune_from",
   [LL_SQL_PRUNE_RANGE] = "leaselock_prune_range",
   [LL_SQL_QUEUE_JOIN] = "leaselock_queue_join",
   [LL_SQL_QUEUE_AHEAD] = "leaselock_queue_ahead",
   [LL_SQL_QUEUE_LEAVE] = "leaselock_queue_leave",
   [LL_SQL_QUEUE_PRUNE_FROM] = "leaselock_queue_prune_from",
   [LL_SQL_QUEUE_PRUNE_RANGE] = "leaselock_queue_prune_range",
   [LL_SQL_HOLD] = "leaselock_hold",
};

static bool ll_pg_read_version (ll_sql_conn_t *b, long *version, leaselock_error_t *err)
{
   ll_pg_conn_t *c = (ll_pg_conn_t *)b;
   char sql[256];
   snprintf (sql, sizeof sql, ll_pg_schema_sql.read_version, b->table);
   PGresult *res = ll_pg_exec_setup (c, sql, "reading the schema version", err);
   if (!res)
      return false;
   *version = -1;
   bool ok = true;
   if (PQresultStatus (res) == PGRES_TUPLES_OK) {
      if (PQntuples (res) == 1)
         *version = strtol (PQgetvalue (res, 0, 0), NULL, 10);
   } else {
      const char *state = PQresultErrorField (res, PG_DIAG_SQLSTATE);
      if (!state || strcmp (state, "42P01") /* undefined_table */)
         ok = ll_pg_fail (c, res, "reading the schema version", err);
   }
   PQclear (res);
   return ok;
}

static bool ll_pg_create_schema (ll_sql_conn_t *b, leaselock_error_t *err)
{
   ll_pg_conn_t *c = (ll_pg_conn_t *)b;
   char sql[4096];
   snprintf (sql, sizeof sql, ll_pg_schema_sql.create_schema, b->table,
             LL_POSTGRESQL_SCHEMA_VERSION);
   PGresult *res = ll_pg_exec_setup (c, sql, "creating the lock table", err);
   if (!res)
      return false;
   bool ok = PQresultStatus (res) == PGRES_COMMAND_OK;
   if (!ok)
      ll_pg_fail (c, res, "creating the lock table", err);
   PQclear (res);
   if (!ok && c->db) {
      leaselock_error_t ignored;
      PQclear (ll_pg_exec_setup (c, "ROLLBACK", "rolling back", &ignored));
   }
   return ok;
}

static void ll_pg_quiet_notices (void *arg, const char *message)
{
   (void)arg;
   (void)message;
}

/* Starts connecting with leaselock's defaults first: the URI (dbname,
 * expanded) overrides them; the encoding after it is always ours. */
static bool ll_pg_start_connect (ll_pg_conn_t *c, leaselock_error_t *err)
{
   char user_timeout[32];
   snprintf (user_timeout, sizeof user_timeout, "%lld", (long long)c->io_timeout_ms);
   const char *keys[] = { "keepalives",       "keepalives_idle",  "keepalives_interval",
                          "keepalives_count", "tcp_user_timeout", "fallback_application_name",
                          "dbname",           "client_encoding",  NULL };
   const char *vals[] = {
      "1", "10", "5", "3", user_timeout, "leaselock", c->conninfo, "UTF8", NULL
   };
   c->db = PQconnectStartParams (keys, vals, 1);
   if (!c->db)
      return ll_error_set (err, LEASELOCK_NOMEM, "out of memory (PQconnectStartParams)");
   return true;
}

/* Connects (every host and address of the URI in turn, as libpq does) and
 * sets the connection non-blocking, within connect_timeout; the schema
 * check that backend_sql.c runs next (ll_pg_read_version, ll_pg_create_schema)
 * has the same deadline. */
static bool ll_pg_connect (ll_sql_conn_t *b, leaselock_error_t *err)
{
   ll_pg_conn_t *c = (ll_pg_conn_t *)b;
   c->connect_deadline_ms = ll_real_now_ms () + c->connect_timeout_ms;
   if (!ll_pg_start_connect (c, err))
      return false;
   PostgresPollingStatusType st =
     PQstatus (c->db) == CONNECTION_BAD ? PGRES_POLLING_FAILED : PGRES_POLLING_WRITING;
   while (st != PGRES_POLLING_OK) {
      if (st == PGRES_POLLING_FAILED)
         return ll_pg_fail (c, NULL, "connecting", err);
      short ev = st == PGRES_POLLING_READING ? POLLIN : POLLOUT;
      if (!ll_pg_wait_socket (c->db, ev, c->connect_deadline_ms))
         return ll_pg_timed_out (c, "connecting", c->connect_timeout_ms, "connect_timeout", err);
      st = PQconnectPoll (c->db);
   }
   if (PQsetnonblocking (c->db, 1) != 0)
      return ll_pg_fail (c, NULL, "connecting", err);
   PQsetNoticeProcessor (c->db, ll_pg_quiet_notices, NULL);
   return true;
}

static int ll_pg_fd (ll_sql_conn_t *b)
{
   ll_pg_conn_t *c = (ll_pg_conn_t *)b;
   return c->db ? PQsocket (c->db) : -1;
}

/* An idle connection whose socket is readable or hung up was closed (or is
 * being closed) by the server. */
static bool ll_pg_alive (ll_sql_conn_t *b)
{
   ll_pg_conn_t *c = (ll_pg_conn_t *)b;
   return c->db && PQstatus (c->db) == CONNECTION_OK && !ll_fd_looks_closed (PQsocket (c->db));
}

/* The deadline of the call under way: io_timeout from its first wait
 * once connected, for its prepare and execute together. */
static int64_t ll_pg_call_deadline (ll_pg_conn_t *c)
{
   if (c->call_deadline_ms < 0)
      c->call_deadline_ms = ll_real_now_ms () + c->io_timeout_ms;
   return c->call_deadline_ms;
}

static bool ll_pg_prepare (ll_sql_conn_t *b, int id, leaselock_error_t *err)
{
   ll_pg_conn_t *c = (ll_pg_conn_t *)b;
   if (c->prepared[id])
      return true;
   int64_t deadline = ll_pg_call_deadline (c);
   if (!PQsendPrepare (c->db, st_names[id], b->sql[id], n_params[id], NULL))
      return ll_pg_fail (c, NULL, "preparing a statement", err);
   PGresult *res =
     ll_pg_collect (c, deadline, c->io_timeout_ms, "io_timeout", "preparing a statement", err);
   if (!res)
      return false;
   bool ok = PQresultStatus (res) == PGRES_COMMAND_OK;
   if (!ok)
      ll_pg_fail (c, res, "preparing a statement", err);
   PQclear (res);
   c->prepared[id] = ok;
   return ok;
}

static void ll_pg_free_fields (ll_sql_conn_t *b)
{
   ll_sql_free_secret (((ll_pg_conn_t *)b)->conninfo);
}

static const ll_sql_driver_t ll_pg_driver = {
   .name = "postgresql",
   .quote = '"',
   .schema_version = LL_POSTGRESQL_SCHEMA_VERSION,
   .templates = ll_pg_statements,
   .free_fields = ll_pg_free_fields,
   .parse_uri = ll_pg_parse_uri,
   .connect = ll_pg_connect,
   .alive = ll_pg_alive,
   .fd = ll_pg_fd,
   .disconnect = ll_pg_disconnect,
   .prepare = ll_pg_prepare,
   .read_version = ll_pg_read_version,
   .create_schema = ll_pg_create_schema,
};

/* ---- statements ------------------------------------------------------ */

/* Runs prepared statement id (reconnecting and preparing it first when
 * needed). */
static PGresult *ll_pg_run (ll_pg_conn_t *c,
                            int id,
                            const char *const *params,
                            const char *what,
                            leaselock_error_t *err)
{
   c->call_deadline_ms = -1;
   if (!ll_sql_ready (&c->b, id, err))
      return NULL;
   int64_t deadline = ll_pg_call_deadline (c);
   if (!PQsendQueryPrepared (c->db, st_names[id], n_params[id], params, NULL, NULL, 0))
      return ll_pg_fail (c, NULL, what, err), NULL;
   PGresult *res = ll_pg_collect (c, deadline, c->io_timeout_ms, "io_timeout", what, err);
   if (!res)
      return NULL;
   ExecStatusType s = PQresultStatus (res);
   if (s != PGRES_COMMAND_OK && s != PGRES_TUPLES_OK) {
      ll_pg_fail (c, res, what, err);
      PQclear (res);
      return NULL;
   }
   return res;
}

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

/* ---- operations ------------------------------------------------------ */

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

/* Runs statement id with $1 the key (made NUL-terminated here) and, where
 * the statement takes them, $2 owner and $3 arg (NULL when it does not). */
static PGresult *ll_pg_run_key (ll_pg_conn_t *c,
                                int id,
                                const char *key,
                                size_t key_len,
                                const char *owner,
                                const char *arg,
                                const char *what,
                                leaselock_error_t *err)
{
   char kbuf[LEASELOCK_KEY_MAX + 1];
   const char *p[3] = { ll_pg_key_z (key, key_len, kbuf), owner, arg };
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
static bool ll_pg_acquire_wait (void *conn,
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
   ll_pg_conn_t *c = conn;
   *reserved = false;
   *left_ms = -1;
   char kbuf[LEASELOCK_KEY_MAX + 1], ttl[32], pid[32], hbuf[256], lbuf[256], res_us[32],
     wait_us[32];
   snprintf (ttl, sizeof ttl, "%" PRId64, ttl_ms * 1000);
   snprintf (pid, sizeof pid, "%" PRId64, holder->pid);
   snprintf (res_us, sizeof res_us, "%" PRId64, reserve_ms * 1000);
   snprintf (wait_us, sizeof wait_us, "%" PRId64, waited_ms * 1000);
   const char *p[8] = { ll_pg_key_z (key, key_len, kbuf),
                        owner,
                        ttl,
                        ll_pg_clip255 (holder->host, hbuf),
                        pid,
                        ll_pg_clip255 (holder->label, lbuf),
                        reserve_ms < 0 ? NULL : res_us,
                        reserve_ms < 0 ? NULL : wait_us };
   PGresult *res = ll_pg_run (c, LL_SQL_ACQUIRE, p, "acquire", err);
   if (!res)
      return false;
   *reserved = PQntuples (res) == 1 && !strcmp (PQgetvalue (res, 0, 1), "t");
   bool ok = PQntuples (res) == 1 && !*reserved;
   if (*reserved) {
      int64_t us = strtoll (PQgetvalue (res, 0, 2), NULL, 10);
      *left_ms = us > 0 ? (us + 999) / 1000 : 0; /* rounded up */
   }
   if (ok)
      *fence = strtoll (PQgetvalue (res, 0, 0), NULL, 10);
   else
      ll_error_set (err, LEASELOCK_BUSY, "held by another owner");
   PQclear (res);
   return ok;
}

static bool ll_pg_update_one (ll_pg_conn_t *c,
                              int id,
                              const char *key,
                              size_t key_len,
                              const char *owner,
                              int64_t ms,
                              const char *what,
                              leaselock_error_t *err)
{
   char us[32];
   snprintf (us, sizeof us, "%" PRId64, ms * 1000);
   PGresult *res = ll_pg_run_key (c, id, key, key_len, owner, us, what, err);
   if (!res)
      return false;
   bool ok = !strcmp (PQcmdTuples (res), "1");
   PQclear (res);
   if (!ok)
      return ll_error_set (err, LEASELOCK_NOT_HELD, "the lease is no longer held by this owner");
   return true;
}

static bool ll_pg_renew (void *conn,
                         const char *key,
                         size_t key_len,
                         const char *owner,
                         int64_t ttl_ms,
                         leaselock_error_t *err)
{
   return ll_pg_update_one (conn, LL_SQL_RENEW, key, key_len, owner, ttl_ms, "renew", err);
}

static bool ll_pg_release (void *conn,
                           const char *key,
                           size_t key_len,
                           const char *owner,
                           int64_t min_hold_ms,
                           leaselock_error_t *err)
{
   return ll_pg_update_one (conn, LL_SQL_RELEASE, key, key_len, owner, min_hold_ms, "release", err);
}

static void ll_pg_copy_field (char *dst,
                              size_t size,
                              size_t *len_out,
                              PGresult *res,
                              int row,
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
}

/* One statement, one round trip: the count after, or no row (NOT_HELD). */
static bool ll_pg_hold (void *conn,
                        const char *key,
                        size_t key_len,
                        const char *owner,
                        int delta,
                        int64_t *holds,
                        leaselock_error_t *err)
{
   char d[16];
   snprintf (d, sizeof d, "%d", delta);
   PGresult *res = ll_pg_run_key (conn, LL_SQL_HOLD, key, key_len, owner, d, "hold", err);
   if (!res)
      return false;
   if (!ll_pg_take_i64 (res, holds))
      return ll_error_set (err, LEASELOCK_NOT_HELD, "the lease is no longer held by this owner");
   return true;
}

static bool ll_pg_inspect (void *conn,
                           const char *key,
                           size_t key_len,
                           leaselock_record_t *rec,
                           bool *found,
                           leaselock_error_t *err)
{
   *found = false;
   PGresult *res = ll_pg_run_key (conn, LL_SQL_INSPECT, key, key_len, NULL, NULL, "inspect", err);
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

static bool ll_pg_list (void *conn,
                        const char *prefix,
                        size_t prefix_len,
                        leaselock_record_cb fn,
                        void *user_data,
                        leaselock_error_t *err)
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

static bool ll_pg_force_release (void *conn,
                                 const char *key,
                                 size_t key_len,
                                 bool *took,
                                 leaselock_error_t *err)
{
   PGresult *res =
     ll_pg_run_key (conn, LL_SQL_FORCE, key, key_len, NULL, NULL, "force_release", err);
   if (!res)
      return false;
   *took = PQntuples (res) == 1 && !strcmp (PQgetvalue (res, 0, 0), "t");
   PQclear (res);
   return true;
}

static bool ll_pg_prune (void *conn,
                         const char *prefix,
                         size_t prefix_len,
                         int64_t older_than_ms,
                         int64_t *count,
                         leaselock_error_t *err)
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
 * the count cannot be in the first). */
static bool ll_pg_queue_join (void *conn,
                              const char *key,
                              size_t key_len,
                              const char *owner,
                              int64_t keep_ms,
                              int64_t *ahead,
                              leaselock_error_t *err)
{
   char us[32];
   snprintf (us, sizeof us, "%" PRId64, keep_ms * 1000);
   PGresult *res =
     ll_pg_run_key (conn, LL_SQL_QUEUE_JOIN, key, key_len, owner, us, "queue_join", err);
   if (!res)
      return false;
   PQclear (res);
   res = ll_pg_run_key (conn, LL_SQL_QUEUE_AHEAD, key, key_len, owner, NULL, "queue_join", err);
   if (!res)
      return false;
   return ll_pg_take_i64 (res, ahead) ||
          ll_backend_fail (err, "postgresql", "queue_join", "no count returned", NULL, NULL);
}

static bool ll_pg_queue_leave (void *conn,
                               const char *key,
                               size_t key_len,
                               const char *owner,
                               leaselock_error_t *err)
{
   PGresult *res =
     ll_pg_run_key (conn, LL_SQL_QUEUE_LEAVE, key, key_len, owner, NULL, "queue_leave", err);
   PQclear (res);
   return res != NULL;
}

/* ---- release notifications ------------------------------------------- */

/* A listener: a connection of its own, opened as the pool's are (the
 * URI's options, keepalives, connect_timeout, the schema check), that ran
 * LISTEN ll_<table>; released keys arrive as notifications
 * (LL_POSTGRESQL_NOTIFY) once the release commits. */
static void *ll_pg_watch_open (const char *uri, leaselock_error_t *err)
{
   ll_pg_conn_t *c = ll_sql_open (calloc (1, sizeof (ll_pg_conn_t)), &ll_pg_driver, uri, err);
   if (!c)
      return NULL;
   char sql[128];
   snprintf (sql, sizeof sql, ll_pg_schema_sql.listen, c->b.table);
   c->call_deadline_ms = -1;
   int64_t deadline = ll_pg_call_deadline (c);
   PGresult *res = NULL;
   if (!PQsendQuery (c->db, sql))
      ll_pg_fail (c, NULL, "listening", err);
   else
      res = ll_pg_collect (c, deadline, c->io_timeout_ms, "io_timeout", "listening", err);
   bool ok = res && PQresultStatus (res) == PGRES_COMMAND_OK;
   if (res && !ok)
      ll_pg_fail (c, res, "listening", err);
   PQclear (res);
   if (!ok) {
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
      const char *slash = strchr (n->extra, '/');
      if (slash && slash - n->extra <= LEASELOCK_OWNER_LEN) {
         char owner[LEASELOCK_OWNER_LEN + 1];
         ll_copy_clipped (owner, sizeof owner, n->extra, (size_t)(slash - n->extra));
         fn (data, slash + 1, strlen (slash + 1), owner);
      }
      PQfreemem (n);
   }
   return true;
}

const ll_backend_t ll_backend_postgresql = {
   .name = "postgresql",
   .schemes = { "postgresql", "postgres", NULL },
   .available = true,
   .unavailable = NULL,
   .open = ll_pg_open,
   .close = ll_sql_close,
   .abandon = ll_sql_abandon,
   .acquire_wait = ll_pg_acquire_wait,
   .queue_join = ll_pg_queue_join,
   .queue_leave = ll_pg_queue_leave,
   .renew = ll_pg_renew,
   .release = ll_pg_release,
   .inspect = ll_pg_inspect,
   .list = ll_pg_list,
   .force_release = ll_pg_force_release,
   .prune = ll_pg_prune,
   .watch_open = ll_pg_watch_open,
   .watch_fd = ll_pg_watch_fd,
   .watch_drain = ll_pg_watch_drain,
   .watch_close = ll_sql_close,
   .watch_abandon = ll_sql_abandon,
   .hold = ll_pg_hold,
};

#else /* !LEASELOCK_WITH_POSTGRESQL */

const ll_backend_t ll_backend_postgresql = {
   .name = "postgresql",
   .schemes = { "postgresql", "postgres", NULL },
   .available = false,
   .unavailable = "built without libpq (install libpq-dev and rebuild)",
};

#endif
