/*
 * core_sqlite.c - acquire+release pairs per second on one SQLite file:
 * through the leaselock engine (leaselock_acquire, one try, no
 * auto-renewal, then leaselock_lease_release) beside a bare program using
 * the plain sqlite3 API with the same two statements and the same pragmas
 * (from csrc/stmt_sqlite.c, where the backend takes them) and the same
 * bound values. Rounds alternate (engine, bare, engine, ...)
 * so both see the same machine load and the same file state (WAL size,
 * checkpoints); bench.h runs the rounds and prints the figures.
 *
 * Usage: core_sqlite [PAIRS_PER_ROUND [ROUNDS]]   (default 5000, 20)
 * The file is made in a new directory under $SQLITE_BENCH_DIR or /tmp.
 * A benchmark, not a test: it prints figures and fails only on errors.
 */
#define BENCH_NAME "core_sqlite"
#include "bench.h"

#include "bare_sqlite.h"

#include <inttypes.h>

/* ---- the bare program (bare_sqlite.h) ---------------------------------- */

static double bare_round (void *ctx, long pairs)
{
   bare_sqlite_t *b = ctx;
   double t0 = bench_now ();
   if (!bare_sqlite_pairs (b, "bench-bare", pairs))
      bench_die ("bare", b->err);
   return bench_now () - t0;
}

int main (int argc, char **argv)
{
   long pairs = 5000;
   int rounds = 20;
   if (!bench_sizes (argc, argv, 1, &pairs, &rounds)) {
      fprintf (stderr, "usage: core_sqlite [PAIRS_PER_ROUND [ROUNDS]]\n");
      return 2;
   }
   const char *parent = getenv ("SQLITE_BENCH_DIR");
   char dir[512], path[600], uri[700];
   snprintf (dir, sizeof dir, "%s/leaselock-bench.XXXXXX", parent && *parent ? parent : "/tmp");
   if (!mkdtemp (dir)) {
      perror ("mkdtemp");
      return 1;
   }
   snprintf (path, sizeof path, "%s/bench.db", dir);
   snprintf (uri, sizeof uri, "sqlite://%s", path);

   /* The engine's client creates the schema; the bare program then uses
    * the same file. */
   leaselock_client_t *c = bench_client (uri);
   bare_sqlite_t b;
   if (!bare_sqlite_open (&b, path))
      bench_die ("bare", b.err);

   printf ("SQLite %s, %s: %d rounds of %ld acquire+release pairs each, alternating\n",
           sqlite3_libversion (), path, rounds, pairs);
   /* Half a round of warm-up: page cache, WAL file, statement caches. */
   bench_bare_t bare = { "bare sqlite3", "bare sqlite3 (same two statements)", bare_round, &b };
   bench_run (c, "bench-engine", &bare, pairs, rounds, pairs / 2 + 1);
   bench_auto_renew (uri, "bench-renew", pairs / 2 + 1, rounds);
   bench_modes (c, "bench-modes", pairs / 2 + 1, rounds / 4 + 1);

   leaselock_error_t err;
   leaselock_record_t rec;
   bool found = false;
   if (!leaselock_inspect (c, "bench-engine", 12, &rec, &found, &err) || !found)
      bench_die ("inspect", found ? err.message : "no record");
   printf ("fence after the run: %" PRId64 " (engine key)\n", rec.fence);

   bare_sqlite_close (&b);
   leaselock_client_destroy (c);
   char cmd[600];
   snprintf (cmd, sizeof cmd, "rm -rf '%s'", dir);
   if (system (cmd) != 0)
      fprintf (stderr, "core_sqlite: could not remove %s\n", dir);
   return 0;
}
