/*
 * backend_mysql_conn.c - the MySQL backend's URI, connection and schema:
 * the URI's options, the driver calls that backend_sql.c makes (connect,
 * prepare, read and create the schema), and the errors that drop a
 * connection.
 *
 * URI: mysql://user:password@host:port/database[?option=value&...]
 * (scheme "mariadb" is the same), or with a list of hosts,
 * mysql://user:password@host1:port1,host2:port2,[v6]:port3/database: they
 * are tried in order, each with its share of connect_timeout, until one
 * takes writes. Every connection, reconnections too, checks that its
 * server takes writes (read_only, and super_read_only on MySQL, off; a
 * Galera node in the Primary component and ready, whose reads then wait
 * for the cluster: wsrep_sync_wait = 1). Options:
 *   socket=/path        connect through a unix socket instead of TCP
 *   table=name          the lock table (default "leaselock"); the schema
 *                       version lives in <table>_meta
 *   io_timeout=5s       how long one wait for the server may last once
 *                       connected (read and write; a duration in whole
 *                       seconds: 5, 5s, 5000ms; default 5 s)
 *   connect_timeout=s   seconds (default 5): TCP connect, and each wait
 *                       of the handshake and authentication; with several
 *                       hosts, all of them together
 *   read_timeout=s      seconds; overrides io_timeout for reads
 *   write_timeout=s     seconds; overrides io_timeout for writes
 *   ssl=true|false      require TLS (default false: the server decides)
 * Unknown options are refused, so a typo does not go unnoticed.
 *
 * A call that its caller bounded (an acquire with a timeout:
 * ll_call_bound) waits no longer than that bound either: connecting
 * within it (whole seconds, rounded up, as libmariadb counts), and each
 * wait of a statement within what is left of it (ll_mysql_cap_io).
 *
 */
#include "ll_internal.h"

#ifdef LEASELOCK_WITH_MYSQL

#include "backend_mysql_private.h"
#include "stmt_mysql.h"

#include <errno.h>
#include <ma_pvio.h> /* libmariadb's I/O layer, whose timeouts count milliseconds */
#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>

#define DEFAULT_TIMEOUT_S 5 /* io_timeout and connect_timeout */
#define MAX_TIMEOUT_S 86400

/* ---- errors ---------------------------------------------------------- */

static bool ll_mysql_is_conn_error (unsigned no)
{
   switch (no) {
      case 2002: /* CR_CONNECTION_ERROR */
      case 2003: /* CR_CONN_HOST_ERROR */
      case 2006: /* CR_SERVER_GONE_ERROR */
      case 2013: /* CR_SERVER_LOST */
      case 2014: /* CR_COMMANDS_OUT_OF_SYNC */
      case 2055: /* CR_SERVER_LOST_EXTENDED */
      case 1053: /* ER_SERVER_SHUTDOWN */
      case 1927: /* ER_CONNECTION_KILLED */
      case 4031: /* ER_CLIENT_INTERACTION_TIMEOUT (MySQL 8) */
         return true;
      default:
         return no >= 2000 && no < 3000; /* any other client-side error */
   }
}

/* BACKEND in the one format (ll_backend_fail), "(error <no>)" after the
 * driver's message. Drops the connection when the error says it is gone.
 * Returns false. */
static bool ll_mysql_fail_with (ll_mysql_conn_t *c, unsigned no, const char *msg, const char *what,
                                leaselock_error_t *err)
{
   char detail[32], text[LEASELOCK_ERROR_MAX];
   snprintf (detail, sizeof detail, "error %u", no);
   /* A wait cut by the caller's bound: say so, and why a write may wait
    * (a semi-synchronous commit waits for a replica's acknowledgement, a
    * Galera one for the cluster's certification). */
   int64_t bound = ll_call_bound ();
   if (bound >= 0 && ll_real_now_ms () >= bound && msg) {
      const ll_primary_t *p = &c->b.primary;
      bool galera = !strncmp (p->durability_text, "galera", 6);
      snprintf (text, sizeof text, "%s; no answer before the caller's timeout%s", msg,
                p->durability != LL_DURABILITY_DURABLE ? ""
                : galera ? " (Galera: a commit waits for the cluster to certify it)"
                         : " (semi-synchronous replication: a commit waits for a replica)");
      msg = text;
   }
   ll_backend_fail (err, "mysql", what, msg, &c->b.secrets, detail);
   if (ll_mysql_is_conn_error (no))
      ll_mysql_disconnect (&c->b);
   return false;
}

bool ll_mysql_fail_db (ll_mysql_conn_t *c, const char *what, leaselock_error_t *err)
{
   return ll_mysql_fail_with (c, mysql_errno (c->db), mysql_error (c->db), what, err);
}

bool ll_mysql_fail_stmt (ll_mysql_conn_t *c, MYSQL_STMT *st, const char *what,
                         leaselock_error_t *err)
{
   return ll_mysql_fail_with (c, mysql_stmt_errno (st), mysql_stmt_error (st), what, err);
}

/* ---- URI ------------------------------------------------------------- */

/* io_timeout: a duration that is whole seconds (libmariadb counts in
 * seconds), 1 s to 1 day. */
static bool ll_mysql_parse_io_timeout (const char *v, unsigned *out, leaselock_error_t *err)
{
   int64_t ms = 0;
   leaselock_error_t e;
   if (!leaselock_parse_duration (v, &ms, &e) || ms < 1000 || ms > MAX_TIMEOUT_S * 1000 ||
       ms % 1000)
      return ll_error_set (err, LEASELOCK_INVALID,
                           "mysql URI option io_timeout=\"%.32s\": expected whole seconds from 1s "
                           "to 86400s such as 5 or 5s (libmariadb counts in seconds; calls must "
                           "be bounded)",
                           v);
   *out = (unsigned)(ms / 1000);
   return true;
}

static bool ll_mysql_parse_seconds (const char *name, const char *v, unsigned *out,
                                    leaselock_error_t *err)
{
   int64_t n;
   if (!ll_uri_int_option ("mysql", name, v, 1, MAX_TIMEOUT_S, "seconds", &n, err))
      return false;
   *out = (unsigned)n;
   return true;
}

static bool ll_mysql_parse_bool (const char *name, const char *v, bool *out, leaselock_error_t *err)
{
   if (!strcmp (v, "true") || !strcmp (v, "1"))
      *out = true;
   else if (!strcmp (v, "false") || !strcmp (v, "0"))
      *out = false;
   else
      return ll_error_set (err, LEASELOCK_INVALID,
                           "mysql URI option %s=\"%.32s\": expected true or false", name, v);
   return true;
}

/* The timeouts the options set; read and write default to io_timeout. */
typedef struct
{
   unsigned io;
   bool read_set, write_set;
} ll_mysql_timeouts_t;

/* One ?name=value of the URI (shown is the URI for messages). */
static bool ll_mysql_parse_option (ll_mysql_conn_t *c, const char *n, const char *v,
                                   ll_mysql_timeouts_t *t, const char *shown,
                                   leaselock_error_t *err)
{
   if (!strcmp (n, "socket")) {
      free (c->socket);
      if (!(c->socket = strdup (v)))
         return ll_error_set (err, LEASELOCK_NOMEM, "out of memory");
      return true;
   }
   if (!strcmp (n, "table"))
      return ll_sql_table_option (&c->b, v, err);
   if (!strcmp (n, "io_timeout"))
      return ll_mysql_parse_io_timeout (v, &t->io, err);
   if (!strcmp (n, "connect_timeout"))
      return ll_mysql_parse_seconds (n, v, &c->connect_timeout, err);
   if (!strcmp (n, "read_timeout")) {
      t->read_set = true;
      return ll_mysql_parse_seconds (n, v, &c->read_timeout, err);
   }
   if (!strcmp (n, "write_timeout")) {
      t->write_set = true;
      return ll_mysql_parse_seconds (n, v, &c->write_timeout, err);
   }
   if (!strcmp (n, "ssl"))
      return ll_mysql_parse_bool (n, v, &c->ssl, err);
   if (!strcmp (n, "max_ttl") || !strcmp (n, "durability"))
      return true; /* read by backend_sql.c (ll_primary_option) */
   return ll_error_set (err, LEASELOCK_INVALID,
                        "mysql URI \"%s\": unknown option \"%.64s\" (known: socket, table, "
                        "io_timeout, connect_timeout, read_timeout, write_timeout, ssl, max_ttl, "
                        "durability)",
                        shown, n);
}

static bool ll_mysql_parse_options (ll_mysql_conn_t *c, const ll_uri_t *u, const char *shown,
                                    leaselock_error_t *err)
{
   ll_mysql_timeouts_t t = { .io = DEFAULT_TIMEOUT_S };
   c->connect_timeout = DEFAULT_TIMEOUT_S;
   for (int i = 0; i < u->n_params; i++)
      if (!ll_mysql_parse_option (c, u->params[i].name, u->params[i].value, &t, shown, err))
         return false;
   if (!t.read_set)
      c->read_timeout = t.io;
   if (!t.write_set)
      c->write_timeout = t.io;
   return true;
}

static char *ll_mysql_dup_or_null (const char *s)
{
   return s ? strdup (s) : NULL;
}

/* The hosts in the URI's order: an empty one is "localhost" when it is
 * the only one, an error in a list. */
static bool ll_mysql_parse_hosts (ll_mysql_conn_t *c, const ll_uri_t *u, const char *shown,
                                  leaselock_error_t *err)
{
   if (u->n_hosts > 1 && c->socket)
      return ll_error_set (err, LEASELOCK_INVALID,
                           "mysql URI \"%s\": socket= names one local server; it cannot go with "
                           "a list of hosts",
                           shown);
   for (int i = 0; i < u->n_hosts; i++) {
      if (u->n_hosts > 1 && !*u->hosts[i])
         return ll_error_set (err, LEASELOCK_INVALID,
                              "mysql URI \"%s\": host %d of the list is empty", shown, i + 1);
      if (!(c->hosts[i] = strdup (*u->hosts[i] ? u->hosts[i] : "localhost")))
         return ll_error_set (err, LEASELOCK_NOMEM, "out of memory");
      c->n_hosts = i + 1;
      c->ports[i] = u->ports[i] ? (unsigned)u->ports[i] : 3306;
   }
   return true;
}

/* The database, the servers' addresses and the credentials. */
static bool ll_mysql_parse_address (ll_mysql_conn_t *c, const ll_uri_t *u, const char *shown,
                                    leaselock_error_t *err)
{
   const char *db = u->path[0] == '/' ? u->path + 1 : u->path;
   if (!*db || strchr (db, '/'))
      return ll_error_set (err, LEASELOCK_INVALID,
                           "mysql URI \"%s\": expected mysql://user:password@host:port/database",
                           shown);
   if (!*u->host && u->n_hosts == 1 && !c->socket)
      return ll_error_set (err, LEASELOCK_INVALID, "mysql URI \"%s\": no host (or ?socket=)",
                           shown);
   if (!ll_mysql_parse_hosts (c, u, shown, err))
      return false;
   if (!(c->dbname = strdup (db)) || (u->user && !(c->user = ll_mysql_dup_or_null (u->user))) ||
       (u->password && !(c->password = ll_mysql_dup_or_null (u->password))))
      return ll_error_set (err, LEASELOCK_NOMEM, "out of memory");
   return true;
}

static bool ll_mysql_parse_uri (ll_sql_conn_t *b, const ll_uri_t *u, const char *text,
                                leaselock_error_t *err)
{
   char shown[160];
   ll_uri_redact (text, shown, sizeof shown);
   ll_mysql_conn_t *c = (ll_mysql_conn_t *)b;
   ll_wake_host_toucher (&c->wake, "mysql", u, "table");
   return ll_mysql_parse_options (c, u, shown, err) && ll_mysql_parse_address (c, u, shown, err);
}

/* ---- connection ------------------------------------------------------ */

void ll_mysql_disconnect (ll_sql_conn_t *b)
{
   ll_mysql_conn_t *c = (ll_mysql_conn_t *)b;
   for (int i = 0; i < LL_SQL_COUNT; i++) {
      if (c->st[i])
         mysql_stmt_close (c->st[i]);
      c->st[i] = NULL;
   }
   ll_mysql_acq_binds_reset (c, false);
   if (c->db)
      mysql_close (c->db);
   c->db = NULL;
   c->recv_timeout_ms = 0; /* the next connection's socket has its own */
}

bool ll_mysql_exec_plain (ll_mysql_conn_t *c, const char *sql, const char *what,
                          leaselock_error_t *err)
{
   /* Galera aborts a statement that meets another node's schema change
    * or write with a deadlock (1213): rolled back, so running it again is
    * exact; every statement sent here may run twice (the schema's IF NOT
    * EXISTS / INSERT IGNORE / raising UPDATE, check_primary's). */
   for (int attempt = 0; mysql_real_query (c->db, sql, strlen (sql)); attempt++)
      if (mysql_errno (c->db) != 1213 /* ER_LOCK_DEADLOCK */ || attempt == 5)
         return ll_mysql_fail_db (c, what, err);
   MYSQL_RES *res = mysql_store_result (c->db);
   if (res)
      mysql_free_result (res);
   return true;
}

static bool ll_mysql_read_version (ll_sql_conn_t *b, long *version, leaselock_error_t *err)
{
   ll_mysql_conn_t *c = (ll_mysql_conn_t *)b;
   char sql[256];
   snprintf (sql, sizeof sql, ll_mysql_schema_sql.read_version, b->table);
   *version = -1;
   if (mysql_real_query (c->db, sql, strlen (sql)))
      return mysql_errno (c->db) == 1146 /* ER_NO_SUCH_TABLE */ ||
             ll_mysql_fail_db (c, "reading the schema version", err);
   MYSQL_RES *res = mysql_store_result (c->db);
   MYSQL_ROW row = res ? mysql_fetch_row (res) : NULL;
   if (row && row[0])
      *version = strtol (row[0], NULL, 10);
   if (res)
      mysql_free_result (res);
   return true;
}

/* Runs a schema statement formatted with the table name (and version). */
static bool ll_mysql_exec_schema (ll_mysql_conn_t *c, const char *fmt, const char *what,
                                  leaselock_error_t *err)
{
   char sql[1024];
   int v = LL_MYSQL_SCHEMA_VERSION;
   snprintf (sql, sizeof sql, fmt, c->b.table, v, v);
   return ll_mysql_exec_plain (c, sql, what, err);
}

/* Version 5's meta columns (ll_mysql_schema_sql.add_meta_failover);
 * error 1060 says they are there already. */
static bool ll_mysql_add_meta_failover (ll_mysql_conn_t *c, leaselock_error_t *err)
{
   char sql[1024];
   snprintf (sql, sizeof sql, ll_mysql_schema_sql.add_meta_failover, c->b.table);
   if (mysql_real_query (c->db, sql, strlen (sql)) &&
       mysql_errno (c->db) != 1060 /* ER_DUP_FIELDNAME */)
      return ll_mysql_fail_db (c, "adding the failover columns", err);
   return true;
}

/* Creates what is missing and brings a table of versions 1 to 5 to this
 * version (ensure_schema's hook for both): the holds column and the queue
 * table are made before the version is raised, so a version-4 table
 * always has them. Safe when several processes do it at once, as each
 * statement is: IF NOT EXISTS, an ALTER that finds its
 * columns there already (error 1060) does nothing, INSERT IGNORE, and an
 * UPDATE that only raises an older version. The columns are added whatever
 * the version read, so a table that an older leaselock created while we
 * created ours, whose meta row we then wrote, gets them too. */
static bool ll_mysql_create_schema (ll_sql_conn_t *b, leaselock_error_t *err)
{
   ll_mysql_conn_t *c = (ll_mysql_conn_t *)b;
   char sql[1024];
   if (!ll_mysql_exec_schema (c, ll_mysql_schema_sql.create_table, "creating the lock table", err))
      return false;
   snprintf (sql, sizeof sql, ll_mysql_schema_sql.add_next_columns, b->table);
   if (mysql_real_query (c->db, sql, strlen (sql)) &&
       mysql_errno (c->db) != 1060 /* ER_DUP_FIELDNAME */)
      return ll_mysql_fail_db (c, "adding the reservation columns", err);
   snprintf (sql, sizeof sql, ll_mysql_schema_sql.add_holds, b->table);
   if (mysql_real_query (c->db, sql, strlen (sql)) &&
       mysql_errno (c->db) != 1060 /* ER_DUP_FIELDNAME */)
      return ll_mysql_fail_db (c, "adding the holds column", err);
   snprintf (sql, sizeof sql, ll_mysql_schema_sql.add_queue_until, b->table);
   if (mysql_real_query (c->db, sql, strlen (sql)) &&
       mysql_errno (c->db) != 1060 /* ER_DUP_FIELDNAME */)
      return ll_mysql_fail_db (c, "adding the queue mark column", err);
   return ll_mysql_exec_schema (c, ll_mysql_schema_sql.create_meta, "creating the schema table",
                                err) &&
          ll_mysql_add_meta_failover (c, err) &&
          ll_mysql_exec_schema (c, ll_mysql_schema_sql.create_queue, "creating the queue table",
                                err) &&
          ll_mysql_exec_schema (c, ll_mysql_schema_sql.record_version,
                                "recording the schema version", err) &&
          ll_mysql_exec_schema (c, ll_mysql_schema_sql.raise_version, "raising the schema version",
                                err);
}

static pthread_once_t lib_once = PTHREAD_ONCE_INIT;
static void ll_mysql_lib_init (void)
{
   mysql_library_init (0, NULL, NULL);
}

static void ll_mysql_set_options (ll_mysql_conn_t *c, unsigned connect_timeout)
{
   bool off = false, on = true;
   mysql_optionsv (c->db, MYSQL_OPT_RECONNECT, &off); /* we re-prepare on reconnect */
   mysql_optionsv (c->db, MYSQL_OPT_CONNECT_TIMEOUT, &connect_timeout);
   mysql_optionsv (c->db, MYSQL_OPT_READ_TIMEOUT, &c->read_timeout);
   mysql_optionsv (c->db, MYSQL_OPT_WRITE_TIMEOUT, &c->write_timeout);
   mysql_optionsv (c->db, MYSQL_SET_CHARSET_NAME, "utf8mb4");
   mysql_optionsv (c->db, MYSQL_REPORT_DATA_TRUNCATION, &on);
   /* READ COMMITTED: fewer gap locks, so concurrent first acquires of one
    * key do not deadlock as often (they are retried when they do). */
   mysql_optionsv (c->db, MYSQL_INIT_COMMAND,
                   "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED");
   if (c->ssl)
      mysql_optionsv (c->db, MYSQL_OPT_SSL_ENFORCE, &on);
}

/* ---- a writable server ------------------------------------------------ */

static bool ll_mysql_on (const char *v)
{
   return !strcasecmp (v, "ON") || !strcmp (v, "1");
}

/* Runs sql, a SHOW ... that answers rows of (name, value), and copies the
 * value of each of names[0..n) it answers into vals (unchanged when it
 * does not: a variable this server lacks). */
static bool ll_mysql_show (ll_mysql_conn_t *c, const char *sql, const char *const *names,
                           char (*vals)[32], int n, const char *what, leaselock_error_t *err)
{
   if (mysql_real_query (c->db, sql, strlen (sql)))
      return ll_mysql_fail_db (c, what, err);
   MYSQL_RES *res = mysql_store_result (c->db);
   if (!res)
      return ll_mysql_fail_db (c, what, err);
   for (MYSQL_ROW row; (row = mysql_fetch_row (res));)
      for (int i = 0; i < n; i++)
         if (mysql_num_fields (res) >= 2 && row[0] && row[1] && !strcasecmp (row[0], names[i]))
            snprintf (vals[i], sizeof vals[i], "%s", row[1]);
   mysql_free_result (res);
   return true;
}

/* A Galera node takes leases only in the Primary component and ready;
 * there its reads wait for the writes the cluster committed before them
 * (wsrep_sync_wait = 1: causal reads). why: set when it is not usable. */
static bool ll_mysql_check_galera (ll_mysql_conn_t *c, char *why, size_t size, const char *what,
                                   leaselock_error_t *err)
{
   static const char *const names[] = { "wsrep_cluster_status", "wsrep_ready" };
   char v[2][32] = { "unknown", "unknown" };
   if (!ll_mysql_show (c,
                       "SHOW GLOBAL STATUS WHERE Variable_name IN "
                       "('wsrep_cluster_status', 'wsrep_ready')",
                       names, v, 2, what, err))
      return false;
   if (strcasecmp (v[0], "Primary"))
      snprintf (why, size,
                "the Galera node is not in the Primary component (wsrep_cluster_status=%s)", v[0]);
   else if (!ll_mysql_on (v[1]))
      snprintf (why, size, "the Galera node is not ready (wsrep_ready=%s)", v[1]);
   else
      return ll_mysql_exec_plain (c, "SET SESSION wsrep_sync_wait = 1", what, err);
   return true;
}

/* Refuses a server that takes no writes, so that no lease is ever taken
 * on a replica (whose user may be allowed to write): read_only or
 * super_read_only (MySQL) on, or a Galera node that is not usable. One
 * round trip (two more on Galera), at connect only. */
static bool ll_mysql_check_writable (ll_mysql_conn_t *c, const char *what, leaselock_error_t *err)
{
   static const char *const names[] = { "read_only", "super_read_only", "wsrep_on" };
   char v[3][32] = { "", "", "" };
   char why[160] = "";
   if (!ll_mysql_show (c,
                       "SHOW GLOBAL VARIABLES WHERE Variable_name IN "
                       "('read_only', 'super_read_only', 'wsrep_on')",
                       names, v, 3, what, err))
      return false;
   for (int i = 0; i < 2 && !*why; i++)
      if (ll_mysql_on (v[i]))
         snprintf (why, sizeof why, "the server is read-only (%s=%s)", names[i], v[i]);
   if (!*why && ll_mysql_on (v[2]) && !ll_mysql_check_galera (c, why, sizeof why, what, err))
      return false;
   if (!*why)
      return true;
   strcat (why, "; leases are taken only on a writable server");
   return ll_backend_fail (err, "mysql", what, why, NULL, NULL);
}

/* ---- connection (continued) ------------------------------------------- */

/* "host:port" ("[v6]:port") of host i, or the socket. */
static void ll_mysql_host_name (const ll_mysql_conn_t *c, int i, char *buf, size_t size)
{
   const char *h = c->hosts[i];
   if (c->socket)
      snprintf (buf, size, "socket %.200s", c->socket);
   else
      snprintf (buf, size, strchr (h, ':') ? "[%.200s]:%u" : "%.200s:%u", h, c->ports[i]);
}

/* ---- reads that wait in recv() ---------------------------------------
 *
 * libmariadb reads a reply with a non-blocking recv() and, when nothing
 * has come yet (the server is still at work: nearly always), waits in
 * poll() with the read timeout and reads again: three system calls per
 * wait, and a high-resolution timer started and cancelled for each (2-3%
 * of an acquire+release pair with the server on the client's CPU,
 * 1% with it on another). Its TCP and Unix sockets are in blocking mode
 * once connected (its own calls ask MSG_DONTWAIT), so the connection's
 * I/O layer gets a copy of libmariadb's methods whose read waits in
 * recv() itself, bounded by the socket's SO_RCVTIMEO, which
 * ll_mysql_cap_io keeps equal to the layer's read timeout: one system
 * call per wait and the same bound. A TLS connection (its reads go
 * through the TLS library's own waits), a socket left non-blocking, or
 * any other I/O plugin keeps libmariadb's read. */

static PVIO_METHODS recv_methods;    /* libmariadb's socket methods, read replaced */
static PVIO_METHODS *socket_methods; /* the table recv_methods copies */
static pthread_mutex_t recv_methods_mu = PTHREAD_MUTEX_INITIALIZER; /* guards both while made */

/* The socket plugin's read with the wait in recv(): bytes read, 0 at
 * the end of the stream, -1 on an error or when SO_RCVTIMEO ran out. A
 * signal that cuts a wait short leaves the rest of the read timeout to
 * poll(), as libmariadb waits (a rare path: the timer is the cost). */
static ssize_t ll_mysql_recv_read (MARIADB_PVIO *pvio, uchar *buf, size_t len)
{
   my_socket fd;
   if (pvio->methods->get_handle (pvio, &fd))
      return -1;
   int64_t start = ll_real_now_ms ();
   ssize_t r = recv (fd, buf, len, 0);
   if (r < 0 && errno == EINTR) {
      for (;;) {
         int64_t left = pvio->timeout[PVIO_READ_TIMEOUT] - (ll_real_now_ms () - start);
         struct pollfd p = { .fd = fd, .events = POLLIN };
         int ready = left > 0 ? poll (&p, 1, (int)left) : 0;
         if (ready == 0)
            break; /* the timeout ran out: reported below */
         if (ready < 0 && errno != EINTR)
            return -1;
         if (ready > 0 && ((r = recv (fd, buf, len, MSG_DONTWAIT)) >= 0 ||
                           (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)))
            return r;
      }
      errno = EAGAIN;
   }
   if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      errno = ETIMEDOUT; /* as libmariadb's wait says it */
   return r;
}

/* Whether pvio reads with ll_mysql_recv_read, switching it over when it
 * can (a blocking socket of libmariadb's socket plugin, without TLS). */
static bool ll_mysql_reads_in_recv (MARIADB_PVIO *pvio)
{
   if (pvio->methods == &recv_methods)
      return true;
   if (pvio->ctls || pvio->type > PVIO_TYPE_SOCKET || !pvio->methods->is_blocking ||
       !pvio->methods->is_blocking (pvio) || !pvio->methods->get_handle)
      return false;
   pthread_mutex_lock (&recv_methods_mu);
   if (!socket_methods) {
      socket_methods = pvio->methods;
      recv_methods = *pvio->methods;
      recv_methods.read = ll_mysql_recv_read;
   }
   bool same = pvio->methods == socket_methods;
   pthread_mutex_unlock (&recv_methods_mu);
   if (same)
      pvio->methods = &recv_methods;
   return same;
}

/* SO_RCVTIMEO of c's socket, ms > 0; false (the socket unchanged) when
 * the system refuses it. */
static bool ll_mysql_set_recv_timeout (ll_mysql_conn_t *c, MARIADB_PVIO *pvio, int ms)
{
   my_socket fd;
   struct timeval tv = { .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };
   if (pvio->methods->get_handle (pvio, &fd) ||
       setsockopt (fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0)
      return false;
   c->recv_timeout_ms = ms;
   return true;
}

void ll_mysql_cap_io (ll_mysql_conn_t *c)
{
   MARIADB_PVIO *pvio = c->db ? c->db->net.pvio : NULL;
   if (!pvio)
      return;
   int64_t r = (int64_t)c->read_timeout * 1000, w = (int64_t)c->write_timeout * 1000;
   int64_t bound = ll_call_bound ();
   if (bound >= 0) {
      int64_t left = bound - ll_real_now_ms ();
      left = left < 1 ? 1 : left;
      r = left < r ? left : r;
      w = left < w ? left : w;
   }
   pvio->timeout[PVIO_READ_TIMEOUT] = (int)r;
   pvio->timeout[PVIO_WRITE_TIMEOUT] = (int)w;
   /* A read that waits in recv() waits as long as SO_RCVTIMEO: set to the
    * same, or libmariadb's read again (poll() with the timeout above). */
   if (r > 0 && (r != c->recv_timeout_ms || pvio->methods != &recv_methods) &&
       ll_mysql_reads_in_recv (pvio) && !ll_mysql_set_recv_timeout (c, pvio, (int)r)) {
      pvio->methods = socket_methods;
      c->recv_timeout_ms = 0;
   }
}

/* timeout_s, or fewer whole seconds (at least 1, rounded up) when the
 * caller's bound comes first. */
static unsigned ll_mysql_cap_s (unsigned timeout_s)
{
   int64_t bound = ll_call_bound ();
   if (bound < 0)
      return timeout_s;
   int64_t left_s = (bound - ll_real_now_ms () + 999) / 1000;
   left_s = left_s < 1 ? 1 : left_s;
   return left_s < (int64_t)timeout_s ? (unsigned)left_s : timeout_s;
}

/* Host i: connects within timeout_s (libmariadb counts whole seconds: the
 * TCP connect, then each wait of the handshake) and checks that the
 * server takes writes, each wait from then on within the caller's bound
 * too. */
static bool ll_mysql_connect_host (ll_mysql_conn_t *c, int i, unsigned timeout_s,
                                   leaselock_error_t *err)
{
   if (!(c->db = mysql_init (NULL)))
      return ll_error_set (err, LEASELOCK_NOMEM, "out of memory (mysql_init)");
   ll_mysql_set_options (c, timeout_s);
   char name[224], what[240];
   ll_mysql_host_name (c, i, name, sizeof name);
   snprintf (what, sizeof what, "connecting to %s", name);
   if (!mysql_real_connect (c->db, c->socket ? NULL : c->hosts[i], c->user, c->password, c->dbname,
                            c->socket ? 0 : c->ports[i], c->socket, 0))
      return ll_mysql_fail_db (c, what, err);
   ll_mysql_cap_io (c);
   return ll_mysql_check_writable (c, what, err);
}

/* What a host's error says, without "mysql: connecting to <host>: " (the
 * list's error names the host) nor what follows a "; ". */
static void ll_mysql_reason (const char *msg, char *buf, size_t size)
{
   const char *p = strstr (msg, ": ");
   const char *q = p ? strstr (p + 2, ": ") : NULL;
   const char *r = q ? q + 2 : msg;
   const char *cut = strstr (r, "; ");
   snprintf (buf, size, "%.*s", (int)(cut ? cut - r : (ptrdiff_t)strlen (r)), r);
}

/* Several hosts: each in turn with its share of what is left of
 * connect_timeout (at least 1 s), until one takes writes; a host that
 * fails or is read-only is skipped, and the error when none is left
 * names each one and why. */
static bool ll_mysql_connect_list (ll_mysql_conn_t *c, leaselock_error_t *err)
{
   int64_t deadline = ll_call_bound_cap (ll_real_now_ms () + (int64_t)c->connect_timeout * 1000);
   ll_host_failures_t f = { .len = 0 };
   for (int i = 0; i < c->n_hosts; i++) {
      char name[224];
      ll_mysql_host_name (c, i, name, sizeof name);
      int64_t left = deadline - ll_real_now_ms ();
      if (left <= 0) {
         ll_host_failure_add (&f, c->n_hosts, name, "not tried: connect_timeout ran out");
         continue;
      }
      /* Whole seconds, rounded up: the last host may end the list up to
       * a second after connect_timeout rather than not be tried. */
      int64_t share = (left / (c->n_hosts - i) + 999) / 1000;
      leaselock_error_t e;
      if (ll_mysql_connect_host (c, i, (unsigned)share, &e))
         return true;
      ll_mysql_disconnect (&c->b);
      if (e.code == LEASELOCK_NOMEM)
         return ll_error_set (err, e.code, "%s", e.message);
      char why[LEASELOCK_ERROR_MAX];
      ll_mysql_reason (e.message, why, sizeof why);
      ll_host_failure_add (&f, c->n_hosts, name, why);
   }
   return ll_host_failures_fail (&f, "mysql", c->n_hosts, err);
}

static bool ll_mysql_connect (ll_sql_conn_t *b, leaselock_error_t *err)
{
   ll_mysql_conn_t *c = (ll_mysql_conn_t *)b;
   pthread_once (&lib_once, ll_mysql_lib_init);
   bool ok = c->n_hosts > 1
               ? ll_mysql_connect_list (c, err)
               : ll_mysql_connect_host (c, 0, ll_mysql_cap_s (c->connect_timeout), err);
   /* ok: c->db is a connection to a writable server (every reconnect
    * comes here too): a queue mark known before may be another server's. */
   c->mark.key_len = 0;
   return ok;
}

static int ll_mysql_fd (ll_sql_conn_t *b)
{
   ll_mysql_conn_t *c = (ll_mysql_conn_t *)b;
   return c->db ? (int)mysql_get_socket (c->db) : -1;
}

/* A connected, idle connection whose socket is readable or hung up was
 * closed by the server (nothing is in flight between calls). */
static bool ll_mysql_alive (ll_sql_conn_t *b)
{
   return ((ll_mysql_conn_t *)b)->db && !ll_fd_looks_closed (ll_mysql_fd (b));
}

static bool ll_mysql_prepare (ll_sql_conn_t *b, int id, leaselock_error_t *err)
{
   ll_mysql_conn_t *c = (ll_mysql_conn_t *)b;
   if (c->st[id])
      return true;
   MYSQL_STMT *st = mysql_stmt_init (c->db);
   if (!st)
      return ll_error_set (err, LEASELOCK_NOMEM, "out of memory (mysql_stmt_init)");
   if (mysql_stmt_prepare (st, b->sql[id], strlen (b->sql[id]))) {
      ll_mysql_fail_stmt (c, st, "preparing a statement", err);
      mysql_stmt_close (st);
      return false;
   }
   c->st[id] = st;
   return true;
}

static void ll_mysql_free_fields (ll_sql_conn_t *b)
{
   ll_mysql_conn_t *c = (ll_mysql_conn_t *)b;
   ll_sql_free_secret (c->password);
   for (int i = 0; i < c->n_hosts; i++)
      free (c->hosts[i]);
   free (c->user);
   free (c->dbname);
   free (c->socket);
   ll_wake_toucher_free (&c->wake);
   ll_mysql_acq_binds_reset (c, true);
}

const ll_sql_driver_t ll_mysql_driver = {
   .name = "mysql",
   .quote = '`',
   .schema_version = LL_MYSQL_SCHEMA_VERSION,
   LL_SQL_DRIVER_OPS (ll_mysql),
};

#endif /* LEASELOCK_WITH_MYSQL */
