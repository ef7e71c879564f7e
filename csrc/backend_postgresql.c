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
 * Table (created on first use, schema version 1):
 *   lock_key text COLLATE "C" PRIMARY KEY   byte order, byte-exact UTF-8
 *   owner text NULL (NULL once released), fence bigint,
 *   expires_at / acquired_at timestamptz, holder_host, holder_pid,
 *   holder_label
 *
 * Every operation is one prepared statement with bound parameters and
 * judges time with the server's clock_timestamp(). Acquire is
 * INSERT ... ON CONFLICT (lock_key) DO UPDATE ... WHERE <expired or ours>
 * RETURNING fence: no row back means BUSY.
 *
 * Connections: before each statement a zero-timeout poll() on the socket
 * tells whether the server closed an idle connection (restart,
 * pg_terminate_backend, idle timeout); such a connection is re-established
 * first. A statement that fails once sent is not assumed to have applied
 * or not: the call reports BACKEND, the connection is dropped, and the
 * next call reconnects (the owner condition makes a retry safe).
 */
#include "ll_internal.h"

#ifdef LEASELOCK_WITH_POSTGRESQL

#include <errno.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SCHEMA_VERSION 1
#define DEFAULT_IO_TIMEOUT_MS 5000
#define DEFAULT_CONNECT_TIMEOUT_S 5
#define MAX_TIMEOUT_S 86400

enum
{
   ST_ACQUIRE,
   ST_RENEW,
   ST_RELEASE,
   ST_INSPECT,
   ST_LIST_FROM,
   ST_LIST_RANGE,
   ST_FORCE,
   ST_COUNT
};

typedef struct
{
   PGconn *db; /* NULL while disconnected */
   bool prepared[ST_COUNT];
   char *conninfo;       /* the URI without leaselock's options */
   ll_secrets_t secrets; /* the URI's passwords, to scrub from messages */
   char table[64];
   int64_t io_timeout_ms;      /* one call's wait once connected */
   int64_t connect_timeout_ms; /* the whole connection set-up */
   char *sql[ST_COUNT];
} pg_conn_t;

/* ---- errors ---------------------------------------------------------- */

/* The message without the password, on one line: newlines and tabs
 * become spaces, trailing spaces are dropped. */
static void scrub (const pg_conn_t *c, const char *msg, char *out, size_t size)
{
   ll_scrub_secrets (msg, &c->secrets, out, size);
   size_t o = 0;
   for (; out[o]; o++)
      if (out[o] == '\n' || out[o] == '\t')
         out[o] = ' ';
   while (o > 0 && out[o - 1] == ' ')
      o--;
   out[o] = '\0';
}

static void disconnect (pg_conn_t *c)
{
   if (c->db)
      PQfinish (c->db);
   c->db = NULL;
   memset (c->prepared, 0, sizeof c->prepared);
}

/* BACKEND with the server's or libpq's message. res may be NULL. The
 * connection is dropped when it is no longer usable. Returns false. */
static bool fail (pg_conn_t *c, PGresult *res, const char *what, leaselock_error_t *err)
{
   const char *msg = res ? PQresultErrorMessage (res) : NULL;
   if (!msg || !*msg)
      msg = c->db ? PQerrorMessage (c->db) : "not connected";
   const char *state = res ? PQresultErrorField (res, PG_DIAG_SQLSTATE) : NULL;
   char clean[LEASELOCK_ERROR_MAX];
   scrub (c, *msg ? msg : "unknown error", clean, sizeof clean);
   ll_error_set (err, LEASELOCK_BACKEND, "postgresql: %s: %s%s%s%s", what, clean,
                 state ? " (SQLSTATE " : "", state ? state : "", state ? ")" : "");
   /* Class 08 (connection exception), 57P (operator intervention:
    * shutdown, terminated) or a broken socket: reconnect next time. */
   if (!c->db || PQstatus (c->db) != CONNECTION_OK ||
       (state && (!strncmp (state, "08", 2) || !strncmp (state, "57P", 3))))
      disconnect (c);
   return false;
}

/* ---- URI ------------------------------------------------------------- */

/* The options of leaselock's own, removed before the URI reaches libpq. */
static bool is_own_option (const char *item, size_t n)
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
static bool parse_timeouts (pg_conn_t *c, const ll_uri_t *u, leaselock_error_t *err)
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
         char *end;
         errno = 0;
         long sec = strtol (v, &end, 10);
         if (!*v || *end || errno || sec < 1 || sec > MAX_TIMEOUT_S)
            return ll_error_set (err, LEASELOCK_INVALID,
                                 "postgresql URI option connect_timeout=\"%.32s\": expected whole "
                                 "seconds from 1 to %d (0, libpq's \"forever\", is refused: calls "
                                 "must be bounded)",
                                 v, MAX_TIMEOUT_S);
         c->connect_timeout_ms = (int64_t)sec * 1000;
      }
   }
   return true;
}

/* The URI's secrets as ll_uri_redact hides them, and the password and
 * sslpassword exactly as libpq reads them (PQconninfoParse, no I/O). */
static bool add_secrets (pg_conn_t *c, const char *text)
{
   if (!ll_secrets_from_uri (&c->secrets, text))
      return false;
   PQconninfoOption *opts = PQconninfoParse (text, NULL);
   bool ok = true;
   for (PQconninfoOption *o = opts; o && o->keyword && ok; o++)
      if (o->val && (!strcmp (o->keyword, "password") || !strcmp (o->keyword, "sslpassword")))
         ok = ll_secrets_add (&c->secrets, o->val, strlen (o->val));
   PQconninfoFree (opts);
   return ok;
}

/* Copies uri to c->conninfo without leaselock's own options, and reads
 * it. */
static bool parse_uri (pg_conn_t *c, const char *text, leaselock_error_t *err)
{
   ll_uri_t u;
   if (!ll_uri_parse (text, &u, err))
      return false;
   snprintf (c->table, sizeof c->table, "leaselock");
   const char *table = ll_uri_param (&u, "table");
   bool ok = false;
   if (!parse_timeouts (c, &u, err))
      goto out;
   if (table && !ll_valid_identifier (table)) {
      ll_error_set (err, LEASELOCK_INVALID,
                    "postgresql URI option table=\"%.64s\": expected an identifier of 1 to 58 "
                    "letters, digits or _ not starting with a digit",
                    table);
      goto out;
   }
   if (table)
      snprintf (c->table, sizeof c->table, "%s", table);
   if (!add_secrets (c, text))
      goto nomem;

   size_t len = strlen (text);
   if (!(c->conninfo = malloc (len + 1)))
      goto nomem;
   const char *q = strchr (text, '?');
   if (!q) {
      memcpy (c->conninfo, text, len + 1);
   } else {
      size_t o = (size_t)(q - text);
      memcpy (c->conninfo, text, o);
      const char *end = q + 1 + strcspn (q + 1, "#");
      char sep = '?';
      for (const char *item = q + 1; item < end;) {
         const char *amp = memchr (item, '&', (size_t)(end - item));
         const char *item_end = amp ? amp : end;
         size_t n = (size_t)(item_end - item);
         if (n && !is_own_option (item, n)) {
            c->conninfo[o++] = sep;
            memcpy (c->conninfo + o, item, n);
            o += n;
            sep = '&';
         }
         item = amp ? amp + 1 : end;
      }
      c->conninfo[o] = '\0';
   }
   ok = true;
   goto out;
nomem:
   ll_error_set (err, LEASELOCK_NOMEM, "out of memory");
out:
   ll_uri_cleanup (&u);
   return ok;
}

/* ---- bounded I/O ----------------------------------------------------- */

/* The real monotonic clock (not the engine's, which tests may fake). */
static int64_t mono_ms (void)
{
   struct timespec ts;
   clock_gettime (CLOCK_MONOTONIC, &ts);
   return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits until the connection's socket has one of events or deadline_ms
 * passes. 1: ready (or an error poll reports: libpq will find it), 0: the
 * deadline passed. */
static int wait_socket (PGconn *db, short events, int64_t deadline_ms)
{
   struct pollfd p = { .fd = PQsocket (db), .events = events };
   if (p.fd < 0)
      return 1;
   for (;;) {
      int64_t left = deadline_ms - mono_ms ();
      if (left <= 0)
         return 0;
      int r = poll (&p, 1, left > 60000 ? 60000 : (int)left);
      if (r > 0 || (r < 0 && errno != EINTR))
         return 1;
   }
}

/* BACKEND for a call that got no answer in time; the connection is closed
 * (whatever it was doing is abandoned). Returns false. */
static bool timed_out (pg_conn_t *c,
                       const char *what,
                       int64_t limit_ms,
                       const char *option,
                       leaselock_error_t *err)
{
   disconnect (c);
   return ll_error_set (err, LEASELOCK_BACKEND,
                        "postgresql: %s: no answer from the server within %lld ms (%s); the "
                        "connection was closed",
                        what, (long long)limit_ms, option);
}

/* After a PQsend* call: flushes the query and reads every result by
 * deadline_ms. Returns the first result that failed, or else the last
 * one (the caller clears it); NULL with err set when the connection failed
 * or the deadline passed (the connection is then closed). */
static PGresult *collect (pg_conn_t *c,
                          int64_t deadline_ms,
                          int64_t limit_ms,
                          const char *option,
                          const char *what,
                          leaselock_error_t *err)
{
   int f;
   while ((f = PQflush (c->db)) != 0) {
      if (f < 0)
         return fail (c, NULL, what, err), NULL;
      if (!wait_socket (c->db, POLLIN | POLLOUT, deadline_ms))
         return timed_out (c, what, limit_ms, option, err), NULL;
      if (!PQconsumeInput (c->db))
         return fail (c, NULL, what, err), NULL;
   }
   PGresult *keep = NULL;
   for (;;) {
      while (PQisBusy (c->db)) {
         if (!wait_socket (c->db, POLLIN, deadline_ms)) {
            PQclear (keep);
            return timed_out (c, what, limit_ms, option, err), NULL;
         }
         if (!PQconsumeInput (c->db)) {
            PQclear (keep);
            return fail (c, NULL, what, err), NULL;
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
      fail (c, NULL, what, err);
      disconnect (c);
   }
   return keep;
}

/* Runs sql (one or more statements, no parameters) within the connect
 * deadline. */
static PGresult *exec_setup (pg_conn_t *c,
                             const char *sql,
                             int64_t deadline_ms,
                             const char *what,
                             leaselock_error_t *err)
{
   if (!PQsendQuery (c->db, sql))
      return fail (c, NULL, what, err), NULL;
   return collect (c, deadline_ms, c->connect_timeout_ms, "connect_timeout", what, err);
}

/* ---- statements ------------------------------------------------------ */

#define COLS                                                                                       \
   "lock_key, owner, fence, "                                                                      \
   "(EXTRACT(EPOCH FROM expires_at - clock_timestamp()) * 1000000)::bigint, holder_host, "         \
   "holder_pid, holder_label"

static const char *const sql_templates[ST_COUNT] = {
   [ST_ACQUIRE] =
     "INSERT INTO \"%1$s\" AS l (lock_key, owner, fence, expires_at, acquired_at, holder_host, "
     "holder_pid, holder_label) VALUES ($1, $2, 1, clock_timestamp() + $3::bigint * "
     "interval '1 microsecond', clock_timestamp(), $4, $5::bigint, $6) "
     "ON CONFLICT (lock_key) DO UPDATE SET owner = excluded.owner, fence = l.fence + 1, "
     "expires_at = clock_timestamp() + $3::bigint * interval '1 microsecond', "
     "acquired_at = clock_timestamp(), holder_host = excluded.holder_host, "
     "holder_pid = excluded.holder_pid, holder_label = excluded.holder_label "
     "WHERE l.expires_at <= clock_timestamp() OR l.owner = excluded.owner RETURNING fence",
   [ST_RENEW] = "UPDATE \"%1$s\" SET expires_at = clock_timestamp() + $3::bigint * "
                "interval '1 microsecond' WHERE lock_key = $1 AND owner = $2 AND "
                "expires_at > clock_timestamp()",
   [ST_RELEASE] = "UPDATE \"%1$s\" SET owner = NULL, expires_at = GREATEST(clock_timestamp(), "
                  "acquired_at + $3::bigint * interval '1 microsecond') "
                  "WHERE lock_key = $1 AND owner = $2",
   [ST_INSPECT] = "SELECT " COLS " FROM \"%1$s\" WHERE lock_key = $1",
   [ST_LIST_FROM] = "SELECT " COLS " FROM \"%1$s\" WHERE lock_key >= $1 ORDER BY lock_key",
   [ST_LIST_RANGE] = "SELECT " COLS " FROM \"%1$s\" WHERE lock_key >= $1 AND lock_key < $2 "
                     "ORDER BY lock_key",
   [ST_FORCE] = "WITH old AS (SELECT lock_key, owner IS NOT NULL AND expires_at > "
                "clock_timestamp() AS live FROM \"%1$s\" WHERE lock_key = $1 FOR UPDATE) "
                "UPDATE \"%1$s\" AS l SET owner = NULL, expires_at = LEAST(l.expires_at, "
                "clock_timestamp()) FROM old WHERE l.lock_key = old.lock_key RETURNING old.live",
};

static const int n_params[ST_COUNT] = {
   [ST_ACQUIRE] = 6,   [ST_RENEW] = 3,      [ST_RELEASE] = 3, [ST_INSPECT] = 1,
   [ST_LIST_FROM] = 1, [ST_LIST_RANGE] = 2, [ST_FORCE] = 1,
};

static const char *const st_names[ST_COUNT] = {
   "leaselock_acquire",   "leaselock_renew",      "leaselock_release", "leaselock_inspect",
   "leaselock_list_from", "leaselock_list_range", "leaselock_force",
};

/* Creates the tables when missing (under an advisory lock, since
 * PostgreSQL's CREATE TABLE IF NOT EXISTS can fail when two sessions race)
 * and checks the schema version. */
static bool ensure_schema (pg_conn_t *c, int64_t deadline_ms, leaselock_error_t *err)
{
   char sql[2048];
   snprintf (sql, sizeof sql, "SELECT schema_version FROM \"%s_meta\" WHERE id = 1", c->table);
   PGresult *res = exec_setup (c, sql, deadline_ms, "reading the schema version", err);
   if (!res)
      return false;
   long version = -1;
   if (PQresultStatus (res) == PGRES_TUPLES_OK) {
      if (PQntuples (res) == 1)
         version = strtol (PQgetvalue (res, 0, 0), NULL, 10);
   } else {
      const char *state = PQresultErrorField (res, PG_DIAG_SQLSTATE);
      if (!state || strcmp (state, "42P01") /* undefined_table */) {
         fail (c, res, "reading the schema version", err);
         PQclear (res);
         return false;
      }
   }
   PQclear (res);
   if (version < 0) {
      snprintf (sql, sizeof sql,
                "BEGIN; SELECT pg_advisory_xact_lock(hashtext('leaselock schema %1$s')); "
                "CREATE TABLE IF NOT EXISTS \"%1$s\" ("
                "lock_key text COLLATE \"C\" NOT NULL PRIMARY KEY, "
                "owner text NULL, "
                "fence bigint NOT NULL, "
                "expires_at timestamptz NOT NULL, "
                "acquired_at timestamptz NOT NULL, "
                "holder_host text NOT NULL, "
                "holder_pid bigint NOT NULL, "
                "holder_label text NOT NULL); "
                "CREATE TABLE IF NOT EXISTS \"%1$s_meta\" (id int NOT NULL PRIMARY KEY, "
                "schema_version int NOT NULL); "
                "INSERT INTO \"%1$s_meta\" VALUES (1, %2$d) ON CONFLICT (id) DO NOTHING; "
                "COMMIT",
                c->table, SCHEMA_VERSION);
      res = exec_setup (c, sql, deadline_ms, "creating the lock table", err);
      if (!res)
         return false;
      if (PQresultStatus (res) != PGRES_COMMAND_OK) {
         fail (c, res, "creating the lock table", err);
         PQclear (res);
         leaselock_error_t ignored;
         if (c->db)
            PQclear (exec_setup (c, "ROLLBACK", deadline_ms, "rolling back", &ignored));
         return false;
      }
      PQclear (res);
      version = SCHEMA_VERSION;
   }
   if (version != SCHEMA_VERSION)
      return ll_error_set (err, LEASELOCK_BACKEND,
                           "postgresql: table \"%s\" has schema version %ld; this leaselock knows "
                           "version %d",
                           c->table, version, SCHEMA_VERSION);
   return true;
}

static void quiet_notices (void *arg, const char *message)
{
   (void)arg;
   (void)message;
}

/* Connects (every host and address of the URI in turn, as libpq does),
 * sets the connection non-blocking and checks the schema, all within
 * connect_timeout. */
static bool do_connect (pg_conn_t *c, leaselock_error_t *err)
{
   int64_t deadline = mono_ms () + c->connect_timeout_ms;
   char user_timeout[32];
   snprintf (user_timeout, sizeof user_timeout, "%lld", (long long)c->io_timeout_ms);
   /* Defaults first: the URI (dbname, expanded) overrides them; the
    * encoding after it is always ours. */
   const char *keys[] = { "keepalives",       "keepalives_idle",  "keepalives_interval",
                          "keepalives_count", "tcp_user_timeout", "fallback_application_name",
                          "dbname",           "client_encoding",  NULL };
   const char *vals[] = {
      "1", "10", "5", "3", user_timeout, "leaselock", c->conninfo, "UTF8", NULL
   };
   c->db = PQconnectStartParams (keys, vals, 1);
   if (!c->db)
      return ll_error_set (err, LEASELOCK_NOMEM, "out of memory (PQconnectStartParams)");
   PostgresPollingStatusType st =
     PQstatus (c->db) == CONNECTION_BAD ? PGRES_POLLING_FAILED : PGRES_POLLING_WRITING;
   while (st != PGRES_POLLING_OK) {
      if (st == PGRES_POLLING_FAILED) {
         fail (c, NULL, "connecting", err);
         disconnect (c);
         return false;
      }
      short ev = st == PGRES_POLLING_READING ? POLLIN : POLLOUT;
      if (!wait_socket (c->db, ev, deadline))
         return timed_out (c, "connecting", c->connect_timeout_ms, "connect_timeout", err);
      st = PQconnectPoll (c->db);
   }
   if (PQsetnonblocking (c->db, 1) != 0) {
      fail (c, NULL, "connecting", err);
      disconnect (c);
      return false;
   }
   PQsetNoticeProcessor (c->db, quiet_notices, NULL);
   if (!ensure_schema (c, deadline, err)) {
      disconnect (c);
      return false;
   }
   return true;
}

/* An idle connection whose socket is readable or hung up was closed (or is
 * being closed) by the server. */
static bool looks_closed (pg_conn_t *c)
{
   return PQstatus (c->db) != CONNECTION_OK || ll_fd_looks_closed (PQsocket (c->db));
}

/* Runs prepared statement id (preparing it on this connection first). */
static PGresult *run (pg_conn_t *c,
                      int id,
                      const char *const *params,
                      const char *what,
                      leaselock_error_t *err)
{
   if (c->db && looks_closed (c))
      disconnect (c);
   if (!c->db && !do_connect (c, err))
      return NULL;
   /* One deadline for the call's prepare and execute together. */
   int64_t deadline = mono_ms () + c->io_timeout_ms;
   if (!c->prepared[id]) {
      if (!PQsendPrepare (c->db, st_names[id], c->sql[id], n_params[id], NULL))
         return fail (c, NULL, "preparing a statement", err), NULL;
      PGresult *res =
        collect (c, deadline, c->io_timeout_ms, "io_timeout", "preparing a statement", err);
      if (!res)
         return NULL;
      if (PQresultStatus (res) != PGRES_COMMAND_OK) {
         fail (c, res, "preparing a statement", err);
         PQclear (res);
         return NULL;
      }
      PQclear (res);
      c->prepared[id] = true;
   }
   if (!PQsendQueryPrepared (c->db, st_names[id], n_params[id], params, NULL, NULL, 0))
      return fail (c, NULL, what, err), NULL;
   PGresult *res = collect (c, deadline, c->io_timeout_ms, "io_timeout", what, err);
   if (!res)
      return NULL;
   ExecStatusType s = PQresultStatus (res);
   if (s != PGRES_COMMAND_OK && s != PGRES_TUPLES_OK) {
      fail (c, res, what, err);
      PQclear (res);
      return NULL;
   }
   return res;
}

/* Holder strings are stored up to 255 bytes (cut at a UTF-8 boundary). */
static const char *clip255 (const char *s, char buf[256])
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

static void pg_close (void *conn)
{
   pg_conn_t *c = conn;
   if (!c)
      return;
   disconnect (c);
   for (int i = 0; i < ST_COUNT; i++)
      free (c->sql[i]);
   ll_secrets_clear (&c->secrets);
   if (c->conninfo)
      memset (c->conninfo, 0, strlen (c->conninfo));
   free (c->conninfo);
   free (c);
}

/* In a forked child the socket is shared with the parent: its descriptor
 * is pointed at /dev/null first, so PQfinish sends nothing on the parent's
 * connection (no Terminate message, no TLS close), then everything is
 * freed. If /dev/null cannot be opened the connection is leaked instead. */
static void pg_abandon (void *conn)
{
   pg_conn_t *c = conn;
   if (!c)
      return;
   if (c->db) {
      int fd = PQsocket (c->db);
      if (fd >= 0 && !ll_fd_point_at_devnull (fd))
         return; /* leak rather than touch the parent's socket */
   }
   pg_close (c);
}

static void *pg_open (const char *uri, leaselock_error_t *err)
{
   pg_conn_t *c = calloc (1, sizeof *c);
   if (!c)
      return ll_error_set (err, LEASELOCK_NOMEM, "out of memory"), NULL;
   if (!parse_uri (c, uri, err) ||
       !ll_sql_format_all (c->sql, sql_templates, ST_COUNT, c->table, err) ||
       !do_connect (c, err)) {
      pg_close (c);
      return NULL;
   }
   return c;
}

/* Copies key (key_len bytes) into a NUL-terminated buffer. */
static const char *key_z (const char *key, size_t key_len, char buf[LEASELOCK_KEY_MAX + 1])
{
   size_t n = key_len > LEASELOCK_KEY_MAX ? LEASELOCK_KEY_MAX : key_len;
   memcpy (buf, key, n);
   buf[n] = '\0';
   return buf;
}

static bool pg_acquire (void *conn,
                        const char *key,
                        size_t key_len,
                        const char *owner,
                        int64_t ttl_ms,
                        const ll_holder_t *holder,
                        int64_t *fence,
                        leaselock_error_t *err)
{
   pg_conn_t *c = conn;
   char kbuf[LEASELOCK_KEY_MAX + 1], ttl[32], pid[32], hbuf[256], lbuf[256];
   snprintf (ttl, sizeof ttl, "%" PRId64, ttl_ms * 1000);
   snprintf (pid, sizeof pid, "%" PRId64, holder->pid);
   const char *p[6] = { key_z (key, key_len, kbuf),   owner, ttl,
                        clip255 (holder->host, hbuf), pid,   clip255 (holder->label, lbuf) };
   PGresult *res = run (c, ST_ACQUIRE, p, "acquire", err);
   if (!res)
      return false;
   bool ok = PQntuples (res) == 1;
   if (ok)
      *fence = strtoll (PQgetvalue (res, 0, 0), NULL, 10);
   else
      ll_error_set (err, LEASELOCK_BUSY, "held by another owner");
   PQclear (res);
   return ok;
}

static bool update_one (pg_conn_t *c,
                        int id,
                        const char *key,
                        size_t key_len,
                        const char *owner,
                        int64_t ms,
                        const char *what,
                        leaselock_error_t *err)
{
   char kbuf[LEASELOCK_KEY_MAX + 1], us[32];
   snprintf (us, sizeof us, "%" PRId64, ms * 1000);
   const char *p[3] = { key_z (key, key_len, kbuf), owner, us };
   PGresult *res = run (c, id, p, what, err);
   if (!res)
      return false;
   bool ok = !strcmp (PQcmdTuples (res), "1");
   PQclear (res);
   if (!ok)
      return ll_error_set (err, LEASELOCK_NOT_HELD, "the lease is no longer held by this owner");
   return true;
}

static bool pg_renew (void *conn,
                      const char *key,
                      size_t key_len,
                      const char *owner,
                      int64_t ttl_ms,
                      leaselock_error_t *err)
{
   return update_one (conn, ST_RENEW, key, key_len, owner, ttl_ms, "renew", err);
}

static bool pg_release (void *conn,
                        const char *key,
                        size_t key_len,
                        const char *owner,
                        int64_t min_hold_ms,
                        leaselock_error_t *err)
{
   return update_one (conn, ST_RELEASE, key, key_len, owner, min_hold_ms, "release", err);
}

static void copy_field (char *dst, size_t size, size_t *len_out, PGresult *res, int row, int col)
{
   size_t n =
     ll_copy_clipped (dst, size, PQgetvalue (res, row, col), (size_t)PQgetlength (res, row, col));
   if (len_out)
      *len_out = n;
}

static void row_to_record (PGresult *res, int row, leaselock_record_t *rec)
{
   memset (rec, 0, sizeof *rec);
   copy_field (rec->key, sizeof rec->key, &rec->key_len, res, row, 0);
   if (!PQgetisnull (res, row, 1))
      copy_field (rec->owner, sizeof rec->owner, NULL, res, row, 1);
   rec->fence = strtoll (PQgetvalue (res, row, 2), NULL, 10);
   rec->expires_in_ms = ll_us_to_left_ms (strtoll (PQgetvalue (res, row, 3), NULL, 10));
   copy_field (rec->host, sizeof rec->host, NULL, res, row, 4);
   rec->pid = strtoll (PQgetvalue (res, row, 5), NULL, 10);
   copy_field (rec->label, sizeof rec->label, NULL, res, row, 6);
}

static bool pg_inspect (void *conn,
                        const char *key,
                        size_t key_len,
                        leaselock_record_t *rec,
                        bool *found,
                        leaselock_error_t *err)
{
   pg_conn_t *c = conn;
   char kbuf[LEASELOCK_KEY_MAX + 1];
   const char *p[1] = { key_z (key, key_len, kbuf) };
   *found = false;
   PGresult *res = run (c, ST_INSPECT, p, "inspect", err);
   if (!res)
      return false;
   if (PQntuples (res) > 0) {
      row_to_record (res, 0, rec);
      *found = true;
   }
   PQclear (res);
   return true;
}

/* The smallest string greater than every string starting with prefix
 * (valid UTF-8): the last code point incremented (past the surrogates),
 * dropping code points that cannot grow. False when there is none. */
static bool prefix_upper (const char *prefix, size_t len, char *out, size_t *out_len)
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

static bool pg_list (void *conn,
                     const char *prefix,
                     size_t prefix_len,
                     leaselock_record_cb fn,
                     void *user_data,
                     leaselock_error_t *err)
{
   pg_conn_t *c = conn;
   char pbuf[LEASELOCK_KEY_MAX + 1], upper[LEASELOCK_KEY_MAX + 2];
   size_t ulen = 0;
   bool bounded = prefix_upper (prefix, prefix_len, upper, &ulen);
   const char *p[2] = { prefix_len ? key_z (prefix, prefix_len, pbuf) : "", upper };
   PGresult *res = run (c, bounded ? ST_LIST_RANGE : ST_LIST_FROM, p, "list", err);
   if (!res)
      return false;
   leaselock_record_t *rec = malloc (sizeof *rec);
   if (!rec) {
      PQclear (res);
      return ll_error_set (err, LEASELOCK_NOMEM, "out of memory");
   }
   int n = PQntuples (res);
   for (int i = 0; i < n; i++) {
      row_to_record (res, i, rec);
      if (!fn (rec, user_data))
         break;
   }
   free (rec);
   PQclear (res);
   return true;
}

static bool pg_force_release (void *conn,
                              const char *key,
                              size_t key_len,
                              bool *took,
                              leaselock_error_t *err)
{
   pg_conn_t *c = conn;
   char kbuf[LEASELOCK_KEY_MAX + 1];
   const char *p[1] = { key_z (key, key_len, kbuf) };
   PGresult *res = run (c, ST_FORCE, p, "force_release", err);
   if (!res)
      return false;
   *took = PQntuples (res) == 1 && !strcmp (PQgetvalue (res, 0, 0), "t");
   PQclear (res);
   return true;
}

const ll_backend_t ll_backend_postgresql = {
   .name = "postgresql",
   .schemes = { "postgresql", "postgres", NULL },
   .available = true,
   .unavailable = NULL,
   .open = pg_open,
   .close = pg_close,
   .abandon = pg_abandon,
   .acquire = pg_acquire,
   .renew = pg_renew,
   .release = pg_release,
   .inspect = pg_inspect,
   .list = pg_list,
   .force_release = pg_force_release,
};

#else /* !LEASELOCK_WITH_POSTGRESQL */

const ll_backend_t ll_backend_postgresql = {
   .name = "postgresql",
   .schemes = { "postgresql", "postgres", NULL },
   .available = false,
   .unavailable = "built without libpq (install libpq-dev and rebuild)",
};

#endif
