/*
 * core_mongo.c - acquire+release pairs per second on one MongoDB server:
 * through the leaselock engine (leaselock_acquire, one try, no
 * auto-renewal, then leaselock_lease_release) beside a bare libmongoc
 * program sending the same commands (the conditional findAndModify, the
 * upsert only when that matched nothing, the updateOne of the release) with
 * the same write concern (w=majority, wtimeout 5 s). After two warm-up
 * rounds, each round alternates slices of 100 pairs (engine, bare, engine,
 * ...), so both see the same server state and machine load.
 *
 * Usage: core_mongo URI [PAIRS_PER_ROUND [ROUNDS]]   (default 4000, 5)
 * A benchmark, not a test: it prints figures and fails only on errors.
 */
#include "leaselock.h"

#include <mongoc/mongoc.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TTL_MS 30000
#define LABEL "bench"
#define SLICE 100

static double now_s (void)
{
   struct timespec ts;
   clock_gettime (CLOCK_MONOTONIC, &ts);
   return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die (const char *what, const char *msg)
{
   fprintf (stderr, "core_mongo: %s: %s\n", what, msg);
   exit (1);
}

/* ---- the engine ------------------------------------------------------- */

static char engine_key[64], bare_key[64];

static double engine_round (leaselock_client_t *c, long pairs)
{
   leaselock_acquire_opts_t o;
   leaselock_acquire_opts_init (&o);
   o.ttl_ms = TTL_MS;
   o.timeout_ms = 0;
   o.auto_renew = false;
   leaselock_error_t err;
   size_t klen = strlen (engine_key);
   double t0 = now_s ();
   for (long i = 0; i < pairs; i++) {
      leaselock_lease_t *l = NULL;
      if (!leaselock_acquire (c, engine_key, klen, &o, &l, &err))
         die ("engine acquire", err.message);
      if (!leaselock_lease_release (l, &err))
         die ("engine release", err.message);
      leaselock_lease_destroy (l);
   }
   return now_s () - t0;
}

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
      die ("bare uri", e.message);
   b->client = mongoc_client_new_from_uri_with_error (uri, &e);
   if (!b->client)
      die ("bare client", e.message);
   mongoc_client_set_error_api (b->client, MONGOC_ERROR_API_VERSION_2);
   const char *db = mongoc_uri_get_database (uri);
   b->coll = mongoc_client_get_collection (b->client, db ? db : "leaselock", "leaselock");
   mongoc_write_concern_t *wc = mongoc_write_concern_new ();
   mongoc_write_concern_set_wmajority (wc, 5000);
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
   mongoc_find_and_modify_opts_t *o = mongoc_find_and_modify_opts_new ();
   bson_t *fields = BCON_NEW ("fence", BCON_INT32 (1));
   bson_t reply;
   bson_error_t e;
   bson_iter_t it;
   mongoc_find_and_modify_opts_set_update (o, u);
   mongoc_find_and_modify_opts_set_fields (o, fields);
   mongoc_find_and_modify_opts_set_flags (o, MONGOC_FIND_AND_MODIFY_RETURN_NEW |
                                               (upsert ? MONGOC_FIND_AND_MODIFY_UPSERT : 0));
   if (!mongoc_collection_find_and_modify_with_opts (b->coll, q, o, &reply, &e))
      die ("bare findAndModify", e.message);
   bool matched = bson_iter_init_find (&it, &reply, "value") && BSON_ITER_HOLDS_DOCUMENT (&it);
   bson_destroy (&reply);
   bson_destroy (fields);
   mongoc_find_and_modify_opts_destroy (o);
   return matched;
}

static double bare_round (bare_t *b, long pairs)
{
   char owner[33];
   int64_t pid = getpid ();
   double t0 = now_s ();
   for (long i = 0; i < pairs; i++) {
      /* A distinct owner per acquire (from a counter: no random bytes). */
      snprintf (owner, sizeof owner, "%032" PRIx64, ++b->counter);
      bson_t *expiry = BCON_NEW ("$max", "[", "{", "$add", "[", BCON_UTF8 ("$renewedAt"),
                                 BCON_UTF8 ("$ttlMs"), "]", "}", "{", "$add", "[",
                                 BCON_UTF8 ("$acquiredAt"), BCON_UTF8 ("$holdMs"), "]", "}", "]");
      bson_t *q = BCON_NEW ("_id", BCON_UTF8 (bare_key), "$expr", "{", "$or", "[", "{", "$lte", "[",
                            BCON_DOCUMENT (expiry), BCON_UTF8 ("$$NOW"), "]", "}", "{", "$eq", "[",
                            BCON_UTF8 ("$owner"), BCON_UTF8 (owner), "]", "}", "]", "}");
      bson_t *u = BCON_NEW ("$currentDate", "{", "acquiredAt", BCON_BOOL (true), "renewedAt",
                            BCON_BOOL (true), "}", "$set", "{", "owner", BCON_UTF8 (owner), "ttlMs",
                            BCON_INT64 (TTL_MS), "holdMs", BCON_INT64 (0), "holder", "{", "host",
                            BCON_UTF8 (b->host), "pid", BCON_INT64 (pid), "label",
                            BCON_UTF8 (LABEL), "}", "}", "$inc", "{", "fence", BCON_INT64 (1), "}");
      if (!bare_fam (b, q, u, false)) {
         bson_t *q2 =
           BCON_NEW ("_id", BCON_UTF8 (bare_key), "fence", "{", "$exists", BCON_BOOL (false), "}");
         if (!bare_fam (b, q2, u, true))
            die ("bare acquire", "upsert matched nothing");
         bson_destroy (q2);
      }
      bson_destroy (q);
      bson_destroy (u);
      bson_destroy (expiry);

      bson_t *rq = BCON_NEW ("_id", BCON_UTF8 (bare_key), "owner", BCON_UTF8 (owner));
      bson_t *ru =
        BCON_NEW ("$currentDate", "{", "renewedAt", BCON_BOOL (true), "}", "$set", "{", "owner",
                  BCON_NULL, "ttlMs", BCON_INT64 (0), "holdMs", BCON_INT64 (0), "}");
      bson_t reply;
      bson_error_t e;
      bson_iter_t it;
      if (!mongoc_collection_update_one (b->coll, rq, ru, NULL, &reply, &e))
         die ("bare release", e.message);
      if (!bson_iter_init_find (&it, &reply, "matchedCount") || bson_iter_as_int64 (&it) != 1)
         die ("bare release", "not held");
      bson_destroy (&reply);
      bson_destroy (rq);
      bson_destroy (ru);
   }
   return now_s () - t0;
}

int main (int argc, char **argv)
{
   if (argc < 2 || strncmp (argv[1], "mongodb", 7) != 0) {
      fprintf (stderr, "usage: core_mongo mongodb://... [PAIRS_PER_ROUND [ROUNDS]]\n");
      return 2;
   }
   const char *uri = argv[1];
   long pairs = argc > 2 ? atol (argv[2]) : 4000;
   int rounds = argc > 3 ? atoi (argv[3]) : 5;
   if (pairs <= 0 || rounds <= 0) {
      fprintf (stderr, "core_mongo: PAIRS_PER_ROUND and ROUNDS must be positive\n");
      return 2;
   }
   snprintf (engine_key, sizeof engine_key, "bench-engine-%d", (int)getpid ());
   snprintf (bare_key, sizeof bare_key, "bench-bare-%d", (int)getpid ());

   leaselock_error_t err;
   leaselock_client_t *c = leaselock_client_new (uri, LABEL, &err);
   if (!c)
      die ("engine client", err.message);
   mongoc_init ();
   bare_t b;
   bare_open (&b, uri);

   /* Warm-up: the server's JIT, connections, the records' first insert. */
   for (int w = 0; w < 2; w++) {
      engine_round (c, pairs);
      bare_round (&b, pairs);
   }

   /* Each round alternates slices of SLICE pairs (engine, bare, engine,
    * ...), so a pause of the server (its GC or JIT) or of the machine lands
    * on both sides alike. */
   double te = 0, tb = 0;
   for (int r = 0; r < rounds; r++) {
      double e = 0, x = 0;
      for (long done = 0; done < pairs; done += SLICE) {
         long n = pairs - done < SLICE ? pairs - done : SLICE;
         e += engine_round (c, n);
         x += bare_round (&b, n);
      }
      te += e;
      tb += x;
      printf ("round %d: engine %8.0f pairs/s   bare libmongoc %8.0f pairs/s   ratio %.2f\n", r + 1,
              (double)pairs / e, (double)pairs / x, x / e);
   }
   double pe = (double)pairs * rounds / te, pb = (double)pairs * rounds / tb;
   printf ("mongodb acquire+release: engine %.0f pairs/s, bare libmongoc %.0f pairs/s, "
           "ratio %.2f (goal >= 0.90)\n",
           pe, pb, pe / pb);

   bare_close (&b);
   leaselock_client_destroy (c);
   mongoc_cleanup ();
   return 0;
}
