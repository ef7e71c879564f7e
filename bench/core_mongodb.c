/*
 * core_mongodb.c - acquire+release pairs per second on one MongoDB server:
 * through the leaselock engine (leaselock_acquire, one try, no
 * auto-renewal, then leaselock_lease_release) beside a bare libmongoc
 * program sending the same commands, built by the same code
 * (csrc/stmt_mongodb.c: the conditional findAndModify, the upsert only when
 * that matched nothing, the release's findAndModify), with the same write
 * concern (w=majority, wtimeout 5 s). After a warm-up,
 * many short rounds alternate (engine, bare, bare, engine, ...), so a
 * pause of the server (its GC or JIT) or of the machine lands on both
 * sides alike; bench.h runs the rounds and prints the figures.
 *
 * Usage: core_mongodb URI [PAIRS_PER_ROUND [ROUNDS]]   (default 200, 100)
 * A benchmark, not a test: it prints figures and fails only on errors.
 */
#define BENCH_NAME "core_mongodb"
#include "bench.h"

/* The backend's command builders (csrc/stmt_mongodb.c, linked from
 * libleaselock.a): the bare program sends exactly what the engine sends. */
#include "stmt_mongodb.h"

#include <inttypes.h>
#include <unistd.h>

/* Pairs each side does before the timed rounds: the server's JIT,
 * connections, the records' first insert. */
#define WARMUP_PAIRS 8000

static char engine_key[64], bare_key[64];

/* ---- the bare program ------------------------------------------------- */

typedef struct
{
   mongoc_client_t *client;
   mongoc_collection_t *coll;
   char host[256];
   uint64_t counter;
} bare_t;

static void bare_open (bare_t *b, const char *uri_text)
{
   bson_error_t e;
   memset (b, 0, sizeof *b);
   mongoc_uri_t *uri = mongoc_uri_new_with_error (uri_text, &e);
   if (!uri)
      bench_die ("bare uri", e.message);
   b->client = mongoc_client_new_from_uri_with_error (uri, &e);
   if (!b->client)
      bench_die ("bare client", e.message);
   mongoc_client_set_error_api (b->client, MONGOC_ERROR_API_VERSION_2);
   const char *db = mongoc_uri_get_database (uri);
   b->coll = mongoc_client_get_collection (b->client, db && *db ? db : LL_MONGO_DEFAULT_DB,
                                           LL_MONGO_DEFAULT_COLL);
   mongoc_write_concern_t *wc = mongoc_write_concern_new ();
   mongoc_write_concern_set_wmajority (wc, LL_MONGO_WTIMEOUT_MS);
   mongoc_collection_set_write_concern (b->coll, wc);
   mongoc_write_concern_destroy (wc);
   mongoc_uri_destroy (uri);
   if (gethostname (b->host, sizeof b->host - 1) != 0)
      strcpy (b->host, "unknown");
}

static void bare_close (bare_t *b)
{
   mongoc_collection_destroy (b->coll);
   mongoc_client_destroy (b->client);
}

/* findAndModify returning the new fence; false when it matched nothing. */
static bool bare_fam (bare_t *b, const bson_t *q, const bson_t *u, bool upsert)
{
   mongoc_find_and_modify_opts_t *o = ll_mongo_fam_opts (u, upsert);
   bson_t reply;
   bson_error_t e;
   bson_iter_t it;
   if (!o)
      bench_die ("bare findAndModify", "out of memory");
   if (!mongoc_collection_find_and_modify_with_opts (b->coll, q, o, &reply, &e))
      bench_die ("bare findAndModify", e.message);
   bool matched = bson_iter_init_find (&it, &reply, "value") && BSON_ITER_HOLDS_DOCUMENT (&it);
   bson_destroy (&reply);
   mongoc_find_and_modify_opts_destroy (o);
   return matched;
}

/* The backend's acquire: the conditional findAndModify, then the upsert
 * only when that matched nothing. */
static void bare_acquire (bare_t *b, const char *owner, int64_t pid)
{
   size_t klen = strlen (bare_key);
   bson_t q = BSON_INITIALIZER, u = BSON_INITIALIZER;
   if (!ll_mongo_acquire_query (&q, bare_key, klen, owner) ||
       !ll_mongo_acquire_update (&u, owner, BENCH_TTL_MS, b->host, pid, BENCH_LABEL, false))
      bench_die ("bare acquire", "out of memory");
   if (!bare_fam (b, &q, &u, false)) {
      bson_reinit (&q);
      if (!ll_mongo_upsert_query (&q, bare_key, klen))
         bench_die ("bare acquire", "out of memory");
      if (!bare_fam (b, &q, &u, true))
         bench_die ("bare acquire", "upsert matched nothing");
   }
   bson_destroy (&q);
   bson_destroy (&u);
}

/* The backend's release without min_hold: the owner's record freed by a
 * findAndModify that returns the reservation (ll_mongo_release_opts). */
static void bare_release (bare_t *b, const char *owner)
{
   bson_t q = BSON_INITIALIZER, u = BSON_INITIALIZER, reply;
   bson_error_t e;
   bson_iter_t it;
   if (!ll_mongo_owned_query (&q, bare_key, strlen (bare_key), owner) ||
       !ll_mongo_free_update (&u, 0))
      bench_die ("bare release", "out of memory");
   mongoc_find_and_modify_opts_t *o = ll_mongo_release_opts (&u);
   if (!o)
      bench_die ("bare release", "out of memory");
   if (!mongoc_collection_find_and_modify_with_opts (b->coll, &q, o, &reply, &e))
      bench_die ("bare release", e.message);
   if (!bson_iter_init_find (&it, &reply, "value") || !BSON_ITER_HOLDS_DOCUMENT (&it))
      bench_die ("bare release", "not held");
   mongoc_find_and_modify_opts_destroy (o);
   bson_destroy (&reply);
   bson_destroy (&q);
   bson_destroy (&u);
}

static double bare_round (void *ctx, long pairs)
{
   bare_t *b = ctx;
   char owner[33];
   int64_t pid = getpid ();
   double t0 = bench_now ();
   for (long i = 0; i < pairs; i++) {
      /* A distinct owner per acquire (from a counter: no random bytes). */
      snprintf (owner, sizeof owner, "%032" PRIx64, ++b->counter);
      bare_acquire (b, owner, pid);
      bare_release (b, owner);
   }
   return bench_now () - t0;
}

int main (int argc, char **argv)
{
   if (argc < 2 || strncmp (argv[1], "mongodb", 7) != 0) {
      fprintf (stderr, "usage: core_mongodb mongodb://... [PAIRS_PER_ROUND [ROUNDS]]\n");
      return 2;
   }
   const char *uri = argv[1];
   long pairs = 200;
   int rounds = 100;
   if (!bench_sizes (argc, argv, 2, &pairs, &rounds)) {
      fprintf (stderr, "core_mongodb: PAIRS_PER_ROUND and ROUNDS must be positive\n");
      return 2;
   }
   snprintf (engine_key, sizeof engine_key, "bench-engine-%d", (int)getpid ());
   snprintf (bare_key, sizeof bare_key, "bench-bare-%d", (int)getpid ());

   leaselock_client_t *c = bench_client (uri);
   mongoc_init ();
   bare_t b;
   bare_open (&b, uri);

   printf ("MongoDB via libmongoc %s, %s: %d rounds of %ld acquire+release pairs each, "
           "alternating\n",
           MONGOC_VERSION_S, leaselock_client_uri (c), rounds, pairs);
   bench_bare_t bare = { "bare libmongoc", "bare libmongoc (same commands)", bare_round, &b };
   bench_run (c, engine_key, &bare, pairs, rounds, WARMUP_PAIRS);
   bench_auto_renew (uri, engine_key, pairs / 2 + 1, rounds);
   bench_modes (c, engine_key, pairs / 2 + 1, rounds / 4 + 1);

   bare_close (&b);
   leaselock_client_destroy (c);
   mongoc_cleanup ();
   return 0;
}
