/*
 * backend_postgresql_conn.c - the PostgreSQL backend's URI, connection,
 * bounded I/O and schema: the URI's options, the non-blocking calls
 * against one deadline, the driver calls that backend_sql.c makes, and
 * running a prepared statement.
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
 * fallback_application_name=leaselock, and target_session_attrs=read-write
 * when the URI names several hosts. client_encoding is always UTF8.
 *
 * Several hosts (h1:p1,h2:p2 in the authority, or host=, hostaddr= and
 * port= lists, or PGHOST and the like): leaselock tries them one by one in
 * the URI's order, each with its share of what is left of connect_timeout
 * (so a host that swallows packets does not use up the time of the ones
 * after it), until one takes writes; the error names each host and why it
 * failed. Lists that libpq pairs in ways one host alone cannot say (an
 * empty item) are left to libpq, within the same deadline. Every
 * connection, reconnections too, checks that its server is no standby
 * (pg_is_in_recovery()) and that its sessions are not read-only
 * (transaction_read_only); target_session_attrs that would allow a
 * standby (read-only, standby, prefer-standby) are refused.
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
 * which libpq runs blocking and the system resolver bounds). A call that
 * its caller bounded (an acquire with a timeout: ll_call_bound) ends by
 * that bound too, whichever comes first, connecting included: a commit
 * that waits for a synchronous standby that never confirms it is never
 * answered, and no PostgreSQL setting bounds that wait.
 *
 */
#include "ll_internal.h"

#ifdef LEASELOCK_WITH_POSTGRESQL

#include "backend_postgresql_private.h"
#include "stmt_postgresql.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_IO_TIMEOUT_MS 5000
#define DEFAULT_CONNECT_TIMEOUT_S 5
#define MAX_TIMEOUT_S 86400

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
bool ll_pg_fail (ll_pg_conn_t *c, PGresult *res, const char *what, leaselock_error_t *err)
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
   static const char *const own[] = { "table", "io_timeout", "max_ttl", "durability" };
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

/* The list keys libpq pairs item by item, and where it reads each when
 * the URI has none. */
static const char *const list_keys[3] = { "host", "hostaddr", "port" };
static const char *const list_envs[3] = { "PGHOST", "PGHOSTADDR", "PGPORT" };

/* INVALID for a target_session_attrs that would let leaselock take leases
 * on a standby. */
static bool ll_pg_check_session_attrs (const char *v, leaselock_error_t *err)
{
   if (strcmp (v, "read-only") && strcmp (v, "standby") && strcmp (v, "prefer-standby"))
      return true;
   return ll_error_set (err, LEASELOCK_INVALID,
                        "postgresql URI option target_session_attrs=\"%s\": leases are taken only "
                        "on a writable primary (use read-write, primary or any)",
                        v);
}

/* Splits list k (a copy of v, owned by c) at its commas into
 * c->host_items[.][k]; *count: its items, 0 when v is NULL or "";
 * *empty: some item is "". */
static bool ll_pg_split_list (ll_pg_conn_t *c, int k, const char *v, int *count, bool *empty)
{
   *count = 0;
   if (!v || !*v)
      return true;
   if (!(c->host_lists[k] = strdup (v)))
      return false;
   for (char *p = c->host_lists[k], *comma;; p = comma + 1) {
      if ((comma = strchr (p, ',')))
         *comma = '\0';
      *empty |= !*p;
      if (*count < LL_URI_MAX_HOSTS)
         c->host_items[*count][k] = p;
      ++*count;
      if (!comma)
         return true;
   }
}

/* Reads the hosts as libpq will (PQconninfoParse, no I/O, then the PG*
 * variables): several of them are tried one by one (connect_list) when
 * each can be named alone, i.e. the lists pair up and no item is empty;
 * otherwise libpq walks its list itself within the one deadline. With
 * several hosts and no target_session_attrs, libpq is asked for
 * read-write. */
static bool ll_pg_read_hosts (ll_pg_conn_t *c, const char *text, leaselock_error_t *err)
{
   PQconninfoOption *opts = PQconninfoParse (text, NULL);
   const char *v[3] = { NULL, NULL, NULL };
   bool attrs = getenv ("PGTARGETSESSIONATTRS") != NULL, ok = true, empty = false;
   for (PQconninfoOption *o = opts; o && o->keyword && ok; o++) {
      for (int k = 0; k < 3; k++)
         if (o->val && !strcmp (o->keyword, list_keys[k]))
            v[k] = o->val;
      if (o->val && !strcmp (o->keyword, "target_session_attrs")) {
         attrs = true;
         ok = ll_pg_check_session_attrs (o->val, err);
      }
   }
   int n[3] = { 0, 0, 0 };
   for (int k = 0; k < 3 && ok; k++)
      if (!ll_pg_split_list (c, k, v[k] ? v[k] : getenv (list_envs[k]), &n[k], &empty))
         ok = ll_error_set (err, LEASELOCK_NOMEM, "out of memory");
   PQconninfoFree (opts);
   int hosts = n[0] > n[1] ? n[0] : n[1];
   if (ok && hosts > LL_URI_MAX_HOSTS)
      ok = ll_error_set (err, LEASELOCK_INVALID, "postgresql URI: %d hosts; at most %d are allowed",
                         hosts, LL_URI_MAX_HOSTS);
   c->read_write = hosts > 1 && !attrs;
   bool pairs =
     (n[0] == 0 || n[0] == hosts) && (n[1] == 0 || n[1] == hosts) && (n[2] <= 1 || n[2] == hosts);
   c->n_hosts = ok && hosts > 1 && pairs && !empty ? hosts : 0;
   for (int i = 0; i < LL_URI_MAX_HOSTS; i++)
      for (int k = 0; k < 3; k++)
         if (n[k] < 2 || i >= c->n_hosts)
            c->host_items[i][k] = NULL;
   return ok;
}

/* Reads leaselock's options and keeps the rest of the URI for libpq. */
static bool ll_pg_parse_uri (ll_sql_conn_t *b, const ll_uri_t *u, const char *text,
                             leaselock_error_t *err)
{
   ll_pg_conn_t *c = (ll_pg_conn_t *)b;
   const char *table = ll_uri_param (u, "table");
   if (!ll_pg_parse_timeouts (c, u, err) || (table && !ll_sql_table_option (b, table, err)))
      return false;
   if (!ll_pg_add_libpq_secrets (c, text) || !(c->conninfo = ll_pg_without_own_options (text)))
      return ll_error_set (err, LEASELOCK_NOMEM, "out of memory");
   return ll_pg_read_hosts (c, c->conninfo, err);
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

/* Why a write may get no answer: with synchronous replication (as the
 * connection's last connect read it) a commit waits until a standby
 * confirms it, and PostgreSQL bounds that wait by nothing. "" when commits
 * do not wait, or for a step that writes nothing. */
static const char *ll_pg_sync_note (const ll_pg_conn_t *c, const char *what)
{
   static const char *const reads[] = { "connecting", "checking", "reading",  "preparing",
                                        "list",       "inspect",  "listening" };
   if (c->b.primary.durability != LL_DURABILITY_DURABLE)
      return "";
   for (size_t i = 0; i < sizeof reads / sizeof reads[0]; i++)
      if (!strncmp (what, reads[i], strlen (reads[i])))
         return "";
   return "; synchronous replication: a commit waits until a standby confirms it";
}

/* BACKEND for a call that got no answer by deadline_ms (limit_ms after
 * its start, as option says), or by the caller's bound when that came
 * first (ll_call_bound); the connection is closed (whatever it was doing
 * is abandoned). Returns false. */
static bool ll_pg_timed_out (ll_pg_conn_t *c, const char *what, int64_t deadline_ms,
                             int64_t limit_ms, const char *option, leaselock_error_t *err)
{
   int64_t bound = ll_call_bound ();
   bool caller = bound >= 0 && bound <= deadline_ms;
   char msg[200];
   if (caller)
      snprintf (msg, sizeof msg,
                "no answer from the server before the caller's timeout; the connection was "
                "closed%s",
                ll_pg_sync_note (c, what));
   else
      snprintf (msg, sizeof msg,
                "no answer from the server within %lld ms; the connection was closed%s",
                (long long)limit_ms, ll_pg_sync_note (c, what));
   ll_pg_disconnect (&c->b);
   return ll_backend_fail (err, "postgresql", what, msg, NULL, caller ? "timeout" : option);
}

/* After a PQsend* call: flushes the query and reads every result by
 * deadline_ms. Returns the first result that failed, or else the last
 * one (the caller clears it); NULL with err set when the connection failed
 * or the deadline passed (the connection is then closed). */
PGresult *ll_pg_collect (ll_pg_conn_t *c, int64_t deadline_ms, int64_t limit_ms, const char *option,
                         const char *what, leaselock_error_t *err)
{
   int f;
   while ((f = PQflush (c->db)) != 0) {
      if (f < 0)
         return ll_pg_fail (c, NULL, what, err), NULL;
      if (!ll_pg_wait_socket (c->db, POLLIN | POLLOUT, deadline_ms))
         return ll_pg_timed_out (c, what, deadline_ms, limit_ms, option, err), NULL;
      if (!PQconsumeInput (c->db))
         return ll_pg_fail (c, NULL, what, err), NULL;
   }
   PGresult *keep = NULL;
   for (;;) {
      while (PQisBusy (c->db)) {
         if (!ll_pg_wait_socket (c->db, POLLIN, deadline_ms)) {
            PQclear (keep);
            return ll_pg_timed_out (c, what, deadline_ms, limit_ms, option, err), NULL;
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
static PGresult *ll_pg_exec_setup (ll_pg_conn_t *c, const char *sql, const char *what,
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
   [LL_SQL_ACQUIRE] = 9,
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
   [LL_SQL_ACQUIRE_FAIR] = 9,
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
   [LL_SQL_ACQUIRE_FAIR] = "leaselock_acquire_fair",
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

bool ll_pg_command_ok (ll_pg_conn_t *c, PGresult *res, const char *what, leaselock_error_t *err)
{
   if (!res)
      return false;
   bool ok = PQresultStatus (res) == PGRES_COMMAND_OK || ll_pg_fail (c, res, what, err);
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
   bool answered = res != NULL; /* else nothing to roll back */
   bool ok = ll_pg_command_ok (c, res, "creating the lock table", err);
   if (!ok && answered && c->db) {
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
 * expanded) overrides them; after it, host i's items of the URI's lists
 * (i >= 0: one host alone) and the encoding, which is always ours. */
static bool ll_pg_start_connect (ll_pg_conn_t *c, int i, leaselock_error_t *err)
{
   char user_timeout[32];
   snprintf (user_timeout, sizeof user_timeout, "%lld", (long long)c->io_timeout_ms);
   const char *keys[16] = { "keepalives",       "keepalives_idle",  "keepalives_interval",
                            "keepalives_count", "tcp_user_timeout", "fallback_application_name" };
   const char *vals[16] = { "1", "10", "5", "3", user_timeout, "leaselock" };
   int n = 6;
   if (c->read_write) {
      keys[n] = "target_session_attrs";
      vals[n++] = "read-write";
   }
   keys[n] = "dbname";
   vals[n++] = c->conninfo;
   for (int k = 0; i >= 0 && k < 3; k++)
      if (c->host_items[i][k]) {
         keys[n] = list_keys[k];
         vals[n++] = c->host_items[i][k];
      }
   keys[n] = "client_encoding";
   vals[n++] = "UTF8";
   keys[n] = vals[n] = NULL;
   c->db = PQconnectStartParams (keys, vals, 1);
   if (!c->db)
      return ll_error_set (err, LEASELOCK_NOMEM, "out of memory (PQconnectStartParams)");
   return true;
}

/* Refuses a server that takes no writes, so that no lease is ever taken
 * on a standby, nor kept on one that a failover promotes later without
 * this check (a reconnect runs it again): in recovery, or a session that
 * is read-only. One round trip, at connect only. */
static bool ll_pg_check_writable (ll_pg_conn_t *c, int64_t deadline_ms, int64_t limit_ms,
                                  leaselock_error_t *err)
{
   const char *what = "checking that the server takes writes";
   if (!PQsendQuery (c->db, "SELECT pg_is_in_recovery(), current_setting('transaction_read_only')"))
      return ll_pg_fail (c, NULL, what, err);
   PGresult *res = ll_pg_collect (c, deadline_ms, limit_ms, "connect_timeout", what, err);
   if (!res)
      return false;
   if (PQresultStatus (res) != PGRES_TUPLES_OK || PQntuples (res) != 1 || PQnfields (res) != 2) {
      ll_pg_fail (c, res, what, err);
      PQclear (res);
      return false;
   }
   bool standby = !strcmp (PQgetvalue (res, 0, 0), "t");
   bool read_only = !strcmp (PQgetvalue (res, 0, 1), "on");
   PQclear (res);
   if (!standby && !read_only)
      return true;
   const char *h = PQhost (c->db) ? PQhost (c->db) : "";
   char where[160], msg[320];
   snprintf (where, sizeof where,
             strchr (h, ':') ? "connecting to [%.100s]:%.8s" : "connecting to %.100s:%.8s", h,
             PQport (c->db) ? PQport (c->db) : "");
   snprintf (msg, sizeof msg, "%s; leases are taken only on a writable primary",
             standby ? "the server is a standby (pg_is_in_recovery() is true)"
                     : "the server gives read-only sessions (transaction_read_only is on)");
   return ll_backend_fail (err, "postgresql", where, msg, NULL, NULL);
}

/* Connects to host i of the list (-1: every host as the URI says, libpq
 * walking them) by deadline_ms (limit_ms after the start), sets the
 * connection non-blocking and checks that the server takes writes. */
static bool ll_pg_connect_host (ll_pg_conn_t *c, int i, int64_t deadline_ms, int64_t limit_ms,
                                leaselock_error_t *err)
{
   if (!ll_pg_start_connect (c, i, err))
      return false;
   PostgresPollingStatusType st =
     PQstatus (c->db) == CONNECTION_BAD ? PGRES_POLLING_FAILED : PGRES_POLLING_WRITING;
   while (st != PGRES_POLLING_OK) {
      if (st == PGRES_POLLING_FAILED)
         return ll_pg_fail (c, NULL, "connecting", err);
      short ev = st == PGRES_POLLING_READING ? POLLIN : POLLOUT;
      if (!ll_pg_wait_socket (c->db, ev, deadline_ms))
         return ll_pg_timed_out (c, "connecting", deadline_ms, limit_ms, "connect_timeout", err);
      st = PQconnectPoll (c->db);
   }
   if (PQsetnonblocking (c->db, 1) != 0)
      return ll_pg_fail (c, NULL, "connecting", err);
   PQsetNoticeProcessor (c->db, ll_pg_quiet_notices, NULL);
   return ll_pg_check_writable (c, deadline_ms, limit_ms, err);
}

/* "host:port" of host i of the list, as the error names it. */
static void ll_pg_host_name (const ll_pg_conn_t *c, int i, char *buf, size_t size)
{
   const char *h = c->host_items[i][0] ? c->host_items[i][0] : c->host_items[i][1];
   const char *port = c->host_items[i][2] ? c->host_items[i][2] : c->host_lists[2];
   snprintf (buf, size, strchr (h, ':') ? "[%.100s]" : "%.100s", h);
   if (port)
      snprintf (buf + strlen (buf), size - strlen (buf), ":%.8s", port);
}

/* What a host's error says, without "postgresql: <what>: " (the list's
 * error names the host), libpq's "connection to server at ... failed: ",
 * its hint (after a line break, now two blanks) nor what follows a
 * "; ". */
static void ll_pg_reason (const char *msg, char *buf, size_t size)
{
   const char *p = strstr (msg, ": ");
   const char *q = p ? strstr (p + 2, ": ") : NULL;
   const char *r = q ? q + 2 : msg;
   for (const char *f; (f = strstr (r, "failed: "));)
      r = f + 8;
   const char *cut = strstr (r, "  "), *semi = strstr (r, "; ");
   if (!cut || (semi && semi < cut))
      cut = semi;
   snprintf (buf, size, "%.*s", (int)(cut ? cut - r : (ptrdiff_t)strlen (r)), r);
}

/* Several hosts: each in turn with its share of what is left of
 * connect_timeout, until one takes writes; a host that fails, times out
 * or is a standby is skipped, and the error when none is left names each
 * one and why. */
static bool ll_pg_connect_list (ll_pg_conn_t *c, leaselock_error_t *err)
{
   ll_host_failures_t f = { .len = 0 };
   for (int i = 0; i < c->n_hosts; i++) {
      char name[128], why[LEASELOCK_ERROR_MAX];
      ll_pg_host_name (c, i, name, sizeof name);
      int64_t now = ll_real_now_ms (), left = c->connect_deadline_ms - now;
      if (left <= 0) {
         ll_host_failure_add (&f, c->n_hosts, name, "not tried: connect_timeout ran out");
         continue;
      }
      int64_t share = left / (c->n_hosts - i);
      leaselock_error_t e;
      if (ll_pg_connect_host (c, i, now + share, share, &e))
         return true;
      ll_pg_disconnect (&c->b);
      if (e.code == LEASELOCK_NOMEM)
         return ll_error_set (err, e.code, "%s", e.message);
      ll_pg_reason (e.message, why, sizeof why);
      ll_host_failure_add (&f, c->n_hosts, name, why);
   }
   return ll_host_failures_fail (&f, "postgresql", c->n_hosts, err);
}

/* Connects within connect_timeout, every host together: one by one when
 * the URI's lists allow it (connect_list), else as libpq walks them; the
 * schema check that backend_sql.c runs next (ll_pg_read_version,
 * ll_pg_create_schema) has the same deadline. */
static bool ll_pg_connect (ll_sql_conn_t *b, leaselock_error_t *err)
{
   ll_pg_conn_t *c = (ll_pg_conn_t *)b;
   c->connect_deadline_ms = ll_call_bound_cap (ll_real_now_ms () + c->connect_timeout_ms);
   bool ok = c->n_hosts > 1
               ? ll_pg_connect_list (c, err)
               : ll_pg_connect_host (c, -1, c->connect_deadline_ms, c->connect_timeout_ms, err);
   /* ok: c->db is a connection to a writable primary (every reconnect
    * comes here too). */
   return ok;
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
 * once connected, for its prepare and execute together, or the caller's
 * bound when that comes first. */
int64_t ll_pg_call_deadline (ll_pg_conn_t *c)
{
   if (c->call_deadline_ms < 0)
      c->call_deadline_ms = ll_call_bound_cap (ll_real_now_ms () + c->io_timeout_ms);
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
   bool ok = ll_pg_command_ok (c, res, "preparing a statement", err);
   c->prepared[id] = ok;
   return ok;
}

/* How the server makes a commit survive a failover (failover.c's
 * levels): synchronous standbys named, in sync, and a commit level that
 * waits for them. sync_names with no standby in sync makes commits wait
 * (never answered before a standby has them): durable, if stalled. */
static void ll_pg_durability (ll_primary_t *p, PGresult *res, int col)
{
   const char *commit = PQgetvalue (res, 0, col), *names = PQgetvalue (res, 0, col + 1);
   long in_sync = strtol (PQgetvalue (res, 0, col + 2), NULL, 10);
   long standbys = strtol (PQgetvalue (res, 0, col + 3), NULL, 10);
   bool waits = strcmp (commit, "off") && strcmp (commit, "local");
   if (names[0] && waits)
      p->durability = LL_DURABILITY_DURABLE;
   else if (standbys == 0 && !names[0])
      p->durability = LL_DURABILITY_STANDALONE;
   else
      p->durability = LL_DURABILITY_AT_RISK;
   snprintf (p->durability_text, sizeof p->durability_text,
             "synchronous_commit=%.16s, synchronous_standby_names='%.64s', %ld of %ld standbys "
             "in sync",
             commit, names, in_sync, standbys);
}

/* Reads the durability alone (one round trip), so that a check_primary
 * write that a synchronous standby never confirms fails with an error
 * that says why (ll_pg_sync_note). */
static bool ll_pg_read_durability (ll_pg_conn_t *c, leaselock_error_t *err)
{
   const char *what = "reading the replication settings";
   PGresult *res = ll_pg_exec_setup (c, ll_pg_schema_sql.read_durability, what, err);
   if (!res)
      return false;
   bool ok =
     PQresultStatus (res) == PGRES_TUPLES_OK && PQntuples (res) == 1 && PQnfields (res) == 4;
   if (ok)
      ll_pg_durability (&c->b.primary, res, 0);
   else
      ll_pg_fail (c, res, what, err);
   PQclear (res);
   return ok;
}

static bool ll_pg_check_primary (ll_sql_conn_t *b, leaselock_error_t *err)
{
   ll_pg_conn_t *c = (ll_pg_conn_t *)b;
   if (b->primary.policy != LL_DURABILITY_OFF && !ll_pg_read_durability (c, err))
      return false;
   char sql[4096];
   snprintf (sql, sizeof sql, ll_pg_schema_sql.check_primary, b->table,
             (long long)b->primary.want_max_ttl_ms);
   PGresult *res = ll_pg_exec_setup (c, sql, "recording the primary", err);
   if (!res)
      return false;
   if (PQresultStatus (res) != PGRES_TUPLES_OK || PQntuples (res) != 1) {
      bool ok = ll_pg_fail (c, res, "recording the primary", err);
      PQclear (res);
      return ok;
   }
   ll_primary_t *p = &b->primary;
   ll_pg_durability (p, res, 5);
   snprintf (p->primary_id, sizeof p->primary_id, "%s", PQgetvalue (res, 0, 3));
   p->new_primary = !strcmp (PQgetvalue (res, 0, 4), "t");
   ll_primary_seen (p, strtoll (PQgetvalue (res, 0, 0), NULL, 10),
                    strtoll (PQgetvalue (res, 0, 1), NULL, 10),
                    strtoll (PQgetvalue (res, 0, 2), NULL, 10));
   PQclear (res);
   return true;
}

static void ll_pg_free_fields (ll_sql_conn_t *b)
{
   ll_pg_conn_t *c = (ll_pg_conn_t *)b;
   ll_sql_free_secret (c->conninfo);
   for (int k = 0; k < 3; k++)
      free (c->host_lists[k]);
}

const ll_sql_driver_t ll_pg_driver = {
   .name = "postgresql",
   .quote = '"',
   .schema_version = LL_POSTGRESQL_SCHEMA_VERSION,
   LL_SQL_DRIVER_OPS (ll_pg),
};

/* ---- statements ------------------------------------------------------ */

/* Runs prepared statement id (reconnecting and preparing it first when
 * needed). */
PGresult *ll_pg_run (ll_pg_conn_t *c, int id, const char *const *params, const char *what,
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

#endif /* LEASELOCK_WITH_POSTGRESQL */
