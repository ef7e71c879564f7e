/*
 * core_mysql.c - acquire+release pairs per second on MySQL/MariaDB:
 * through the leaselock engine (leaselock_acquire, one try, no
 * auto-renewal, then leaselock_lease_release) beside a bare program using
 * libmariadb's prepared statements directly with the same two statements
 * and the same bound values, in the same process, over TCP to the same
 * server. Rounds alternate (engine, bare, bare, engine, ...) so both see
 * the same load; bench.h runs the rounds and prints the figures.
 *
 * Usage: core_mysql MYSQL_URI [PAIRS_PER_ROUND [ROUNDS]]   (default 200, 61)
 * A benchmark, not a test: it prints figures and fails only on errors.
 */
#define BENCH_NAME "core_mysql"
#include "bench.h"

#include <inttypes.h>
#include <mysql.h>
#include <unistd.h>

/* The backend's statement text (stmt_mysql.c, in libleaselock.a). */
#include "stmt_mysql.h"

/* The engine's client uses the default table. */
#define TABLE "leaselock"

typedef struct
{
   MYSQL *db;
   MYSQL_STMT *acq, *rel;
   char *sql[2]; /* the acquire and the release, for TABLE */
   char host[256];
   uint64_t counter;
} bare_t;

/* The URI's parts, for the bare program (no options, TCP). */
static void bare_open (bare_t *b, const char *uri)
{
   memset (b, 0, sizeof *b);
   char user[256] = "", pass[256] = "", host[256] = "", db[256] = "";
   unsigned port = 3306;
   const char *p = strstr (uri, "://");
   if (!p)
      bench_die ("uri", "expected mysql://user:pass@host:port/db");
   p += 3;
   const char *at = strrchr (p, '@'), *slash = strchr (at ? at : p, '/');
   if (!at || !slash)
      bench_die ("uri", "expected mysql://user:pass@host:port/db");
   const char *colon = memchr (p, ':', (size_t)(at - p));
   snprintf (user, sizeof user, "%.*s", (int)((colon ? colon : at) - p), p);
   if (colon)
      snprintf (pass, sizeof pass, "%.*s", (int)(at - colon - 1), colon + 1);
   const char *hp = at + 1, *pc = memchr (hp, ':', (size_t)(slash - hp));
   snprintf (host, sizeof host, "%.*s", (int)((pc ? pc : slash) - hp), hp);
   if (pc)
      port = (unsigned)atoi (pc + 1);
   snprintf (db, sizeof db, "%.*s", (int)strcspn (slash + 1, "?#"), slash + 1);

   b->db = mysql_init (NULL);
   mysql_optionsv (b->db, MYSQL_SET_CHARSET_NAME, "utf8mb4");
   mysql_optionsv (b->db, MYSQL_INIT_COMMAND,
                   "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED");
   if (!mysql_real_connect (b->db, host, user, pass, db, port, NULL, 0))
      bench_die ("bare connect", mysql_error (b->db));
   const char *const text[2] = { ll_mysql_statements[LL_SQL_ACQUIRE],
                                 ll_mysql_statements[LL_SQL_RELEASE] };
   leaselock_error_t err;
   if (!ll_sql_format_all (b->sql, text, 2, TABLE, &err))
      bench_die ("bare statements", err.message);
   b->acq = mysql_stmt_init (b->db);
   b->rel = mysql_stmt_init (b->db);
   if (mysql_stmt_prepare (b->acq, b->sql[0], strlen (b->sql[0])))
      bench_die ("bare prepare acquire", mysql_stmt_error (b->acq));
   if (mysql_stmt_prepare (b->rel, b->sql[1], strlen (b->sql[1])))
      bench_die ("bare prepare release", mysql_stmt_error (b->rel));
   if (gethostname (b->host, sizeof b->host - 1) != 0)
      strcpy (b->host, "unknown");
}

static void bare_close (bare_t *b)
{
   mysql_stmt_close (b->acq);
   mysql_stmt_close (b->rel);
   mysql_close (b->db);
   free (b->sql[0]);
   free (b->sql[1]);
}

static void bind_str (MYSQL_BIND *x, const char *s, unsigned long *len, enum enum_field_types t)
{
   memset (x, 0, sizeof *x);
   x->buffer_type = t;
   x->buffer = (void *)s;
   x->buffer_length = *len;
   x->length = len;
}

static void bind_i64 (MYSQL_BIND *x, int64_t *v)
{
   memset (x, 0, sizeof *x);
   x->buffer_type = MYSQL_TYPE_LONGLONG;
   x->buffer = v;
}

static double bare_round (void *ctx, long pairs)
{
   bare_t *b = ctx;
   static const char key[] = "bench-bare";
   char owner[33];
   int64_t pid = getpid (), ttl_us = (int64_t)BENCH_TTL_MS * 1000, hold_us = 0;
   unsigned long klen = sizeof key - 1, olen = 32, hlen = strlen (b->host),
                 llen = strlen (BENCH_LABEL);
   MYSQL_BIND a[LL_MYSQL_ACQUIRE_BINDS], r[3];
   int64_t none = 0;
   my_bool null = 1;
   int i = 0;
   /* The backend's binding order; reserve, waited and queued NULL (a plain
    * acquire). */
   for (const char *s = ll_mysql_acquire_params; *s; s++) {
      if (*s == 'k')
         bind_str (&a[i++], key, &klen, MYSQL_TYPE_BLOB);
      else if (*s == 'o')
         bind_str (&a[i++], owner, &olen, MYSQL_TYPE_STRING);
      else if (*s == 't')
         bind_i64 (&a[i++], &ttl_us);
      else if (*s == 'f')
         bind_i64 (&a[i++], &none); /* no fence floor: no failover seen */
      else if (*s == 'h')
         bind_str (&a[i++], b->host, &hlen, MYSQL_TYPE_BLOB);
      else if (*s == 'p')
         bind_i64 (&a[i++], &pid);
      else if (*s == 'l')
         bind_str (&a[i++], BENCH_LABEL, &llen, MYSQL_TYPE_BLOB);
      else if (*s == 'r' || *s == 'w' || *s == 'q') {
         bind_i64 (&a[i], &none);
         a[i++].is_null = &null;
      }
   }
   bind_i64 (&r[0], &hold_us);
   bind_str (&r[1], key, &klen, MYSQL_TYPE_BLOB);
   bind_str (&r[2], owner, &olen, MYSQL_TYPE_STRING);
   double t0 = bench_now ();
   for (long n = 0; n < pairs; n++) {
      /* A distinct owner per acquire, as the engine makes (from a counter:
       * the cheapest a bare program can be). */
      snprintf (owner, sizeof owner, "%032" PRIx64, ++b->counter);
      if (mysql_stmt_bind_param (b->acq, a) || mysql_stmt_execute (b->acq))
         bench_die ("bare acquire", mysql_stmt_error (b->acq));
      if (mysql_stmt_insert_id (b->acq) == 0)
         bench_die ("bare acquire", "busy");
      if (mysql_stmt_bind_param (b->rel, r) || mysql_stmt_execute (b->rel))
         bench_die ("bare release", mysql_stmt_error (b->rel));
      if (mysql_stmt_affected_rows (b->rel) != 1)
         bench_die ("bare release", "not held");
   }
   return bench_now () - t0;
}

int main (int argc, char **argv)
{
   const char *uri = argc > 1 ? argv[1] : getenv ("MYSQL_URI");
   long pairs = 200;
   int rounds = 61;
   if (!uri || !*uri || !bench_sizes (argc, argv, 2, &pairs, &rounds)) {
      fprintf (stderr, "usage: core_mysql MYSQL_URI [PAIRS_PER_ROUND [ROUNDS]]\n");
      return 2;
   }
   /* The engine's client creates the table; the bare program then uses it. */
   leaselock_client_t *c = bench_client (uri);
   bare_t b;
   bare_open (&b, uri);

   printf ("MySQL/MariaDB server %s (libmariadb %s), %s: %d rounds of %ld acquire+release pairs "
           "each, alternating\n",
           mysql_get_server_info (b.db), mysql_get_client_info (), leaselock_client_uri (c), rounds,
           pairs);
   bench_bare_t bare = { "bare libmariadb", "bare libmariadb (same two statements)", bare_round,
                         &b };
   bench_run (c, "bench-engine", &bare, pairs, rounds, pairs / 10 + 1);
   bench_auto_renew (uri, "bench-renew", pairs / 2 + 1, rounds);
   bench_modes (c, "bench-modes", pairs / 2 + 1, rounds / 4 + 1);
   bare_close (&b);
   leaselock_client_destroy (c);
   return 0;
}
