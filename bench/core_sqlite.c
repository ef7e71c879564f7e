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

/* The backend's statements and settings (csrc/stmt_sqlite.c, in libleaselock.a): the bare
 * program prepares exactly what the engine prepares. */
#include "stmt_sqlite.h"

#include <inttypes.h>
#include <sqlite3.h>
#include <unistd.h>

/* ---- the bare program ------------------------------------------------- */

typedef struct
{
   sqlite3 *db;
   sqlite3_stmt *acq, *rel;
   char host[256];
   uint64_t counter;
} bare_t;

static void bare_check (bare_t *b, int rc, const char *what)
{
   if (rc != SQLITE_OK)
      bench_die (what, sqlite3_errmsg (b->db));
}

static void bare_open (bare_t *b, const char *path)
{
   memset (b, 0, sizeof *b);
   int rc = sqlite3_open_v2 (
     path, &b->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
   bare_check (b, rc, "bare open");
   sqlite3_busy_timeout (b->db, LL_SQLITE_DEFAULT_BUSY_TIMEOUT_MS);
   bare_check (b, sqlite3_exec (b->db, ll_sqlite_wal, NULL, NULL, NULL), "bare wal");
   bare_check (b, sqlite3_exec (b->db, ll_sqlite_synchronous, NULL, NULL, NULL), "bare sync");
   bare_check (b,
               sqlite3_prepare_v3 (b->db, ll_sqlite_statements[LL_SQLITE_ST_ACQUIRE], -1,
                                   SQLITE_PREPARE_PERSISTENT, &b->acq, NULL),
               "bare prepare acquire");
   bare_check (b,
               sqlite3_prepare_v3 (b->db, ll_sqlite_statements[LL_SQLITE_ST_RELEASE], -1,
                                   SQLITE_PREPARE_PERSISTENT, &b->rel, NULL),
               "bare prepare release");
   if (gethostname (b->host, sizeof b->host - 1) != 0)
      strcpy (b->host, "unknown");
}

static void bare_close (bare_t *b)
{
   sqlite3_finalize (b->acq);
   sqlite3_finalize (b->rel);
   sqlite3_close (b->db);
}

static double bare_round (void *ctx, long pairs)
{
   bare_t *b = ctx;
   static const char key[] = "bench-bare";
   char owner[33];
   int64_t pid = getpid ();
   double t0 = bench_now ();
   for (long i = 0; i < pairs; i++) {
      /* A distinct owner per acquire, as the engine makes (but from a
       * counter: no random bytes, the cheapest a bare program can be). */
      snprintf (owner, sizeof owner, "%032" PRIx64, ++b->counter);
      sqlite3_bind_text (b->acq, 1, key, (int)sizeof key - 1, SQLITE_STATIC);
      sqlite3_bind_text (b->acq, 2, owner, 32, SQLITE_STATIC);
      sqlite3_bind_int64 (b->acq, 3, BENCH_TTL_MS);
      sqlite3_bind_text (b->acq, 4, b->host, -1, SQLITE_STATIC);
      sqlite3_bind_int64 (b->acq, 5, pid);
      sqlite3_bind_text (b->acq, 6, BENCH_LABEL, -1, SQLITE_STATIC);
      /* A plain acquire: no reserve, no waited (?7, ?8 NULL). */
      sqlite3_bind_null (b->acq, 7);
      sqlite3_bind_null (b->acq, 8);
      if (sqlite3_step (b->acq) != SQLITE_ROW)
         bench_die ("bare acquire", sqlite3_errmsg (b->db));
      if (sqlite3_step (b->acq) != SQLITE_DONE)
         bench_die ("bare acquire", sqlite3_errmsg (b->db));
      sqlite3_reset (b->acq);
      sqlite3_bind_text (b->rel, 1, key, (int)sizeof key - 1, SQLITE_STATIC);
      sqlite3_bind_text (b->rel, 2, owner, 32, SQLITE_STATIC);
      sqlite3_bind_int64 (b->rel, 3, 0);
      /* Released: a row back (the backend's release returns whom to
       * wake), then done, as the backend steps it. */
      if (sqlite3_step (b->rel) != SQLITE_ROW)
         bench_die ("bare release", "not held");
      if (sqlite3_step (b->rel) != SQLITE_DONE)
         bench_die ("bare release", sqlite3_errmsg (b->db));
      sqlite3_reset (b->rel);
   }
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
   bare_t b;
   bare_open (&b, path);

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

   bare_close (&b);
   leaselock_client_destroy (c);
   char cmd[600];
   snprintf (cmd, sizeof cmd, "rm -rf '%s'", dir);
   if (system (cmd) != 0)
      fprintf (stderr, "core_sqlite: could not remove %s\n", dir);
   return 0;
}
