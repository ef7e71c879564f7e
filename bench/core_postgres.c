/*
 * core_postgres.c - acquire+release pairs per second on PostgreSQL:
 * through the leaselock engine (leaselock_acquire, one try, no
 * auto-renewal, then leaselock_lease_release) beside a bare program using
 * libpq's prepared statements directly with the same two statements and
 * the same parameters, in the same process, over TCP to the same server.
 * Rounds alternate (engine, bare, bare, engine, ...) so both see the same
 * load.
 *
 * Usage: core_postgres POSTGRES_URI [PAIRS_PER_ROUND [ROUNDS]]   (default 3000, 5)
 * A benchmark, not a test: it prints figures and fails only on errors.
 */
#include "leaselock.h"

#include <inttypes.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The backend's two statements, word for word (csrc/backend_postgresql.c). */
static const char acquire_sql[] =
  "INSERT INTO \"leaselock\" AS l (lock_key, owner, fence, expires_at, acquired_at, holder_host, "
  "holder_pid, holder_label) VALUES ($1, $2, 1, clock_timestamp() + $3::bigint * "
  "interval '1 microsecond', clock_timestamp(), $4, $5::bigint, $6) "
  "ON CONFLICT (lock_key) DO UPDATE SET owner = excluded.owner, fence = l.fence + 1, "
  "expires_at = clock_timestamp() + $3::bigint * interval '1 microsecond', "
  "acquired_at = clock_timestamp(), holder_host = excluded.holder_host, "
  "holder_pid = excluded.holder_pid, holder_label = excluded.holder_label "
  "WHERE l.expires_at <= clock_timestamp() OR l.owner = excluded.owner RETURNING fence";
static const char release_sql[] =
  "UPDATE \"leaselock\" SET owner = NULL, expires_at = GREATEST(clock_timestamp(), "
  "acquired_at + $3::bigint * interval '1 microsecond') "
  "WHERE lock_key = $1 AND owner = $2";

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
   fprintf (stderr, "core_postgres: %s: %s\n", what, msg);
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
   PGconn *db;
   char host[256];
   uint64_t counter;
} bare_t;

static void bare_open (bare_t *b, const char *uri)
{
   memset (b, 0, sizeof *b);
   b->db = PQconnectdb (uri);
   if (PQstatus (b->db) != CONNECTION_OK)
      die ("bare connect", PQerrorMessage (b->db));
   PGresult *r = PQprepare (b->db, "bare_acquire", acquire_sql, 6, NULL);
   if (PQresultStatus (r) != PGRES_COMMAND_OK)
      die ("bare prepare acquire", PQresultErrorMessage (r));
   PQclear (r);
   r = PQprepare (b->db, "bare_release", release_sql, 3, NULL);
   if (PQresultStatus (r) != PGRES_COMMAND_OK)
      die ("bare prepare release", PQresultErrorMessage (r));
   PQclear (r);
   if (gethostname (b->host, sizeof b->host - 1) != 0)
      strcpy (b->host, "unknown");
}

static double bare_round (bare_t *b, long pairs)
{
   static const char key[] = "bench-bare";
   char owner[33], ttl[32], pid[32];
   snprintf (ttl, sizeof ttl, "%" PRId64, (int64_t)TTL_MS * 1000);
   snprintf (pid, sizeof pid, "%d", (int)getpid ());
   double t0 = now_s ();
   for (long n = 0; n < pairs; n++) {
      /* A distinct owner per acquire (from a counter: the cheapest a bare
       * program can be). */
      snprintf (owner, sizeof owner, "%032" PRIx64, ++b->counter);
      const char *ap[6] = { key, owner, ttl, b->host, pid, LABEL };
      PGresult *r = PQexecPrepared (b->db, "bare_acquire", 6, ap, NULL, NULL, 0);
      if (PQresultStatus (r) != PGRES_TUPLES_OK || PQntuples (r) != 1)
         die ("bare acquire", PQresultErrorMessage (r));
      PQclear (r);
      const char *rp[3] = { key, owner, "0" };
      r = PQexecPrepared (b->db, "bare_release", 3, rp, NULL, NULL, 0);
      if (PQresultStatus (r) != PGRES_COMMAND_OK || strcmp (PQcmdTuples (r), "1"))
         die ("bare release", PQresultErrorMessage (r));
      PQclear (r);
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
   const char *uri = argc > 1 ? argv[1] : getenv ("POSTGRES_URI");
   long pairs = argc > 2 ? atol (argv[2]) : 3000;
   int rounds = argc > 3 ? atoi (argv[3]) : 5;
   if (!uri || !*uri || pairs < 1 || rounds < 1) {
      fprintf (stderr, "usage: core_postgres POSTGRES_URI [PAIRS_PER_ROUND [ROUNDS]]\n");
      return 2;
   }
   leaselock_error_t err;
   leaselock_client_t *c = leaselock_client_new (uri, LABEL, &err);
   if (!c)
      die ("client", err.message);
   bare_t b;
   bare_open (&b, uri);

   printf ("PostgreSQL server %d (libpq %d), %s: %d rounds of %ld acquire+release pairs each, "
           "alternating\n",
           PQserverVersion (b.db), PQlibVersion (), leaselock_client_uri (c), rounds, pairs);
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
         printf ("  round %d: engine %8.0f pairs/s   bare libpq %8.0f pairs/s   ratio %.3f\n",
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
   printf ("bare libpq (same two statements):                    %.0f pairs/s (%.1f us/pair)\n", pb,
           1e6 / pb);
   /* Other load only ever slows a round down, so the fastest round of each
    * side is the best estimate of its own cost (as timeit's min). */
   double best = best_b / best_e;
   printf ("ratio engine/bare: best rounds %.3f, median of %d rounds %.3f, all rounds together "
           "%.3f (goal: best >= 0.90: %s)\n",
           best, rounds, median, ratio, best >= 0.9 ? "met" : "NOT met");
   PQfinish (b.db);
   leaselock_client_destroy (c);
   return 0;
}
