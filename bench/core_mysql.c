/*
 * core_mysql.c - acquire+release pairs per second on MySQL/MariaDB:
 * through the leaselock engine (leaselock_acquire, one try, no
 * auto-renewal, then leaselock_lease_release) beside a bare program using
 * libmariadb's prepared statements directly with the same two statements
 * and the same bound values, in the same process, over TCP to the same
 * server. Rounds alternate (engine, bare, bare, engine, ...) so both see
 * the same load.
 *
 * Usage: core_mysql MYSQL_URI [PAIRS_PER_ROUND [ROUNDS]]   (default 3000, 5)
 * A benchmark, not a test: it prints figures and fails only on errors.
 */
#include "leaselock.h"

#include <inttypes.h>
#include <mysql.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The backend's two statements, word for word (csrc/backend_mysql.c). */
#define TAKEABLE "(expires_at <= UTC_TIMESTAMP(6) OR owner <=> ?)"
static const char acquire_sql[] =
  "INSERT INTO `leaselock` (lock_key, owner, fence, expires_at, acquired_at, holder_host, "
  "holder_pid, holder_label) VALUES (?, ?, LAST_INSERT_ID(1), UTC_TIMESTAMP(6) + "
  "INTERVAL ? MICROSECOND, UTC_TIMESTAMP(6), ?, ?, ?) ON DUPLICATE KEY UPDATE "
  "fence = IF(" TAKEABLE ", LAST_INSERT_ID(fence + 1), fence), "
  "acquired_at = IF(" TAKEABLE ", UTC_TIMESTAMP(6), acquired_at), "
  "holder_host = IF(" TAKEABLE ", ?, holder_host), "
  "holder_pid = IF(" TAKEABLE ", ?, holder_pid), "
  "holder_label = IF(" TAKEABLE ", ?, holder_label), "
  "owner = IF(" TAKEABLE ", ?, owner), "
  "expires_at = IF(" TAKEABLE ", UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, expires_at)";
static const char release_sql[] =
  "UPDATE `leaselock` SET owner = NULL, expires_at = GREATEST(UTC_TIMESTAMP(6), "
  "acquired_at + INTERVAL ? MICROSECOND) WHERE lock_key = ? AND owner = ?";

#define TTL_MS 30000
#define LABEL "bench"

static double now_s (void)
{
   struct timespec ts;
   clock_gettime (CLOCK_MONOTONIC, &ts);
   return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die (const char *what, const char *msg)
{
   fprintf (stderr, "core_mysql: %s: %s\n", what, msg);
   exit (1);
}

static double engine_round (leaselock_client_t *c, long pairs)
{
   leaselock_acquire_opts_t o;
   leaselock_acquire_opts_init (&o);
   o.ttl_ms = TTL_MS;
   o.timeout_ms = 0;
   o.auto_renew = false;
   leaselock_error_t err;
   double t0 = now_s ();
   for (long i = 0; i < pairs; i++) {
      leaselock_lease_t *l = NULL;
      if (!leaselock_acquire (c, "bench-engine", 12, &o, &l, &err))
         die ("engine acquire", err.message);
      if (!leaselock_lease_release (l, &err))
         die ("engine release", err.message);
      leaselock_lease_destroy (l);
   }
   return now_s () - t0;
}

typedef struct
{
   MYSQL *db;
   MYSQL_STMT *acq, *rel;
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
      die ("uri", "expected mysql://user:pass@host:port/db");
   p += 3;
   const char *at = strrchr (p, '@'), *slash = strchr (at ? at : p, '/');
   if (!at || !slash)
      die ("uri", "expected mysql://user:pass@host:port/db");
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
      die ("bare connect", mysql_error (b->db));
   b->acq = mysql_stmt_init (b->db);
   b->rel = mysql_stmt_init (b->db);
   if (mysql_stmt_prepare (b->acq, acquire_sql, strlen (acquire_sql)))
      die ("bare prepare acquire", mysql_stmt_error (b->acq));
   if (mysql_stmt_prepare (b->rel, release_sql, strlen (release_sql)))
      die ("bare prepare release", mysql_stmt_error (b->rel));
   if (gethostname (b->host, sizeof b->host - 1) != 0)
      strcpy (b->host, "unknown");
}

static void bare_close (bare_t *b)
{
   mysql_stmt_close (b->acq);
   mysql_stmt_close (b->rel);
   mysql_close (b->db);
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

static double bare_round (bare_t *b, long pairs)
{
   static const char key[] = "bench-bare";
   char owner[33];
   int64_t pid = getpid (), ttl_us = (int64_t)TTL_MS * 1000, hold_us = 0;
   unsigned long klen = sizeof key - 1, olen = 32, hlen = strlen (b->host), llen = strlen (LABEL);
   MYSQL_BIND a[18], r[3];
   int i = 0;
   bind_str (&a[i++], key, &klen, MYSQL_TYPE_BLOB);
   bind_str (&a[i++], owner, &olen, MYSQL_TYPE_STRING);
   bind_i64 (&a[i++], &ttl_us);
   bind_str (&a[i++], b->host, &hlen, MYSQL_TYPE_BLOB);
   bind_i64 (&a[i++], &pid);
   bind_str (&a[i++], LABEL, &llen, MYSQL_TYPE_BLOB);
   bind_str (&a[i++], owner, &olen, MYSQL_TYPE_STRING);
   bind_str (&a[i++], owner, &olen, MYSQL_TYPE_STRING);
   bind_str (&a[i++], owner, &olen, MYSQL_TYPE_STRING);
   bind_str (&a[i++], b->host, &hlen, MYSQL_TYPE_BLOB);
   bind_str (&a[i++], owner, &olen, MYSQL_TYPE_STRING);
   bind_i64 (&a[i++], &pid);
   bind_str (&a[i++], owner, &olen, MYSQL_TYPE_STRING);
   bind_str (&a[i++], LABEL, &llen, MYSQL_TYPE_BLOB);
   bind_str (&a[i++], owner, &olen, MYSQL_TYPE_STRING);
   bind_str (&a[i++], owner, &olen, MYSQL_TYPE_STRING);
   bind_str (&a[i++], owner, &olen, MYSQL_TYPE_STRING);
   bind_i64 (&a[i++], &ttl_us);
   bind_i64 (&r[0], &hold_us);
   bind_str (&r[1], key, &klen, MYSQL_TYPE_BLOB);
   bind_str (&r[2], owner, &olen, MYSQL_TYPE_STRING);
   double t0 = now_s ();
   for (long n = 0; n < pairs; n++) {
      /* A distinct owner per acquire, as the engine makes (from a counter:
       * the cheapest a bare program can be). */
      snprintf (owner, sizeof owner, "%032" PRIx64, ++b->counter);
      if (mysql_stmt_bind_param (b->acq, a) || mysql_stmt_execute (b->acq))
         die ("bare acquire", mysql_stmt_error (b->acq));
      if (mysql_stmt_insert_id (b->acq) == 0)
         die ("bare acquire", "busy");
      if (mysql_stmt_bind_param (b->rel, r) || mysql_stmt_execute (b->rel))
         die ("bare release", mysql_stmt_error (b->rel));
      if (mysql_stmt_affected_rows (b->rel) != 1)
         die ("bare release", "not held");
   }
   return now_s () - t0;
}

static int cmp_double (const void *a, const void *b)
{
   double x = *(const double *)a, y = *(const double *)b;
   return (x > y) - (x < y);
}

int main (int argc, char **argv)
{
   const char *uri = argc > 1 ? argv[1] : getenv ("MYSQL_URI");
   long pairs = argc > 2 ? atol (argv[2]) : 3000;
   int rounds = argc > 3 ? atoi (argv[3]) : 5;
   if (!uri || !*uri || pairs < 1 || rounds < 1) {
      fprintf (stderr, "usage: core_mysql MYSQL_URI [PAIRS_PER_ROUND [ROUNDS]]\n");
      return 2;
   }
   /* The engine's client creates the table; the bare program then uses it. */
   leaselock_error_t err;
   leaselock_client_t *c = leaselock_client_new (uri, LABEL, &err);
   if (!c)
      die ("client", err.message);
   bare_t b;
   bare_open (&b, uri);

   printf ("MySQL/MariaDB server %s (libmariadb %s), %s: %d rounds of %ld acquire+release pairs "
           "each, alternating\n",
           mysql_get_server_info (b.db), mysql_get_client_info (), leaselock_client_uri (c), rounds,
           pairs);
   engine_round (c, pairs / 10 + 1); /* warm-up */
   bare_round (&b, pairs / 10 + 1);

   double t_engine = 0, t_bare = 0, best_e = 1e300, best_b = 1e300;
   double *ratios = calloc ((size_t)rounds, sizeof *ratios);
   if (!ratios)
      die ("bench", "out of memory");
   for (int r = 0; r < rounds; r++) {
      double te, tb;
      if (r % 2 == 0) {
         te = engine_round (c, pairs);
         tb = bare_round (&b, pairs);
      } else {
         tb = bare_round (&b, pairs);
         te = engine_round (c, pairs);
      }
      t_engine += te;
      t_bare += tb;
      ratios[r] = tb / te;
      best_e = te < best_e ? te : best_e;
      best_b = tb < best_b ? tb : best_b;
      if (rounds <= 10)
         printf ("  round %d: engine %8.0f pairs/s   bare libmariadb %8.0f pairs/s   ratio %.3f\n",
                 r + 1, pairs / te, pairs / tb, tb / te);
   }
   double pe = pairs * rounds / t_engine, pb = pairs * rounds / t_bare;
   /* The server's own pauses hit one side of a round at random: judge the
    * median of many short interleaved rounds, and show the total too. */
   qsort (ratios, (size_t)rounds, sizeof *ratios, cmp_double);
   double median =
     rounds % 2 ? ratios[rounds / 2] : (ratios[rounds / 2 - 1] + ratios[rounds / 2]) / 2;
   free (ratios);
   double ratio = pe / pb;
   printf ("engine (leaselock_acquire + leaselock_lease_release): %.0f pairs/s (%.1f us/pair)\n",
           pe, 1e6 / pe);
   printf ("bare libmariadb (same two statements):               %.0f pairs/s (%.1f us/pair)\n", pb,
           1e6 / pb);
   /* Other load only ever slows a round down, so the fastest round of each
    * side is the best estimate of its own cost (as timeit's min). */
   double best = best_b / best_e;
   printf ("ratio engine/bare: best rounds %.3f, median of %d rounds %.3f, all rounds together "
           "%.3f (goal: best >= 0.90: %s)\n",
           best, rounds, median, ratio, best >= 0.9 ? "met" : "NOT met");
   bare_close (&b);
   leaselock_client_destroy (c);
   return 0;
}
