/*
 * core_postgresql.c - acquire+release pairs per second on PostgreSQL:
 * through the leaselock engine (leaselock_acquire, one try, no
 * auto-renewal, then leaselock_lease_release) beside a bare program using
 * libpq's prepared statements directly with the same two statements and
 * the same parameters, in the same process, over TCP to the same server.
 * Rounds alternate (engine, bare, bare, engine, ...) so both see the same
 * load; bench.h runs the rounds and prints the figures.
 *
 * Usage: core_postgresql POSTGRESQL_URI [PAIRS_PER_ROUND [ROUNDS]]   (default 200, 61)
 * A benchmark, not a test: it prints figures and fails only on errors.
 */
#define BENCH_NAME "core_postgresql"
#include "bench.h"

#include <inttypes.h>
#include <libpq-fe.h>
#include <unistd.h>

/* The backend's statement text (stmt_postgresql.c, in libleaselock.a). */
#include "stmt_postgresql.h"

/* The engine's client uses the default table. */
#define TABLE "leaselock"

typedef struct
{
   PGconn *db;
   char *sql[2]; /* the acquire and the release, for TABLE */
   char host[256];
   uint64_t counter;
} bare_t;

static void bare_open (bare_t *b, const char *uri)
{
   memset (b, 0, sizeof *b);
   b->db = PQconnectdb (uri);
   if (PQstatus (b->db) != CONNECTION_OK)
      bench_die ("bare connect", PQerrorMessage (b->db));
   const char *const text[2] = { ll_pg_statements[LL_SQL_ACQUIRE],
                                 ll_pg_statements[LL_SQL_RELEASE] };
   leaselock_error_t err;
   if (!ll_sql_format_all (b->sql, text, 2, TABLE, &err))
      bench_die ("bare statements", err.message);
   PGresult *r = PQprepare (b->db, "bare_acquire", b->sql[0], 9, NULL);
   if (PQresultStatus (r) != PGRES_COMMAND_OK)
      bench_die ("bare prepare acquire", PQresultErrorMessage (r));
   PQclear (r);
   r = PQprepare (b->db, "bare_release", b->sql[1], 3, NULL);
   if (PQresultStatus (r) != PGRES_COMMAND_OK)
      bench_die ("bare prepare release", PQresultErrorMessage (r));
   PQclear (r);
   if (gethostname (b->host, sizeof b->host - 1) != 0)
      strcpy (b->host, "unknown");
}

static double bare_round (void *ctx, long pairs)
{
   bare_t *b = ctx;
   static const char key[] = "bench-bare";
   char owner[33], ttl[32], pid[32];
   snprintf (ttl, sizeof ttl, "%" PRId64, (int64_t)BENCH_TTL_MS * 1000);
   snprintf (pid, sizeof pid, "%d", (int)getpid ());
   double t0 = bench_now ();
   for (long n = 0; n < pairs; n++) {
      /* A distinct owner per acquire (from a counter: the cheapest a bare
       * program can be). */
      snprintf (owner, sizeof owner, "%032" PRIx64, ++b->counter);
      /* A plain acquire: no reserve, no waited ($7, $8 NULL), no fence
       * floor ($9: no failover seen). */
      const char *ap[9] = { key, owner, ttl, b->host, pid, BENCH_LABEL, NULL, NULL, "0" };
      PGresult *r = PQexecPrepared (b->db, "bare_acquire", 9, ap, NULL, NULL, 0);
      if (PQresultStatus (r) != PGRES_TUPLES_OK || PQntuples (r) != 1)
         bench_die ("bare acquire", PQresultErrorMessage (r));
      PQclear (r);
      /* The release notifies waiters (a SELECT of pg_notify): rows back. */
      const char *rp[3] = { key, owner, "0" };
      r = PQexecPrepared (b->db, "bare_release", 3, rp, NULL, NULL, 0);
      if (PQresultStatus (r) != PGRES_TUPLES_OK || strcmp (PQcmdTuples (r), "1"))
         bench_die ("bare release", PQresultErrorMessage (r));
      PQclear (r);
   }
   return bench_now () - t0;
}

int main (int argc, char **argv)
{
   const char *uri = argc > 1 ? argv[1] : getenv ("POSTGRESQL_URI");
   long pairs = 200;
   int rounds = 61;
   if (!uri || !*uri || !bench_sizes (argc, argv, 2, &pairs, &rounds)) {
      fprintf (stderr, "usage: core_postgresql POSTGRESQL_URI [PAIRS_PER_ROUND [ROUNDS]]\n");
      return 2;
   }
   leaselock_client_t *c = bench_client (uri);
   bare_t b;
   bare_open (&b, uri);

   printf ("PostgreSQL server %d (libpq %d), %s: %d rounds of %ld acquire+release pairs each, "
           "alternating\n",
           PQserverVersion (b.db), PQlibVersion (), leaselock_client_uri (c), rounds, pairs);
   bench_bare_t bare = { "bare libpq", "bare libpq (same two statements)", bare_round, &b };
   bench_run (c, "bench-engine", &bare, pairs, rounds, pairs / 10 + 1);
   bench_auto_renew (uri, "bench-renew", pairs / 2 + 1, rounds);
   bench_modes (c, "bench-modes", pairs / 2 + 1, rounds / 4 + 1);
   PQfinish (b.db);
   free (b.sql[0]);
   free (b.sql[1]);
   leaselock_client_destroy (c);
   return 0;
}
