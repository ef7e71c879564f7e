/*
 * backend_mongodb_primary.c - the MongoDB backend's failover protection
 * (failover.c says why): which primary the driver writes to, how durable
 * the write concern makes a grant, the meta document that records the
 * primary, and the fence floor's second step after a take.
 *
 * The primary's identity comes from the driver's own hello reply to the
 * server it selects for writes (libmongoc sends hello, or isMaster to a
 * server that does not know hello, and keeps the last reply):
 *   a replica set's primary  "rs/<setName>/<electionId>" (the electionId
 *                            holds the election's term: a new term is a
 *                            new primary, even the same node re-elected)
 *   a standalone server      "standalone" (no address: two URIs naming
 *                            one server differently are one primary)
 *   a mongos                 "sharded": the shards' elections are not
 *                            seen through it, so no lock-delay follows
 *                            them; w=majority keeps grants durable there
 *   no reply (load balanced) "unknown"
 *
 * libmongoc follows a new primary by itself, inside one client, with no
 * reconnect that leaselock would see. So the identity is read at open and
 * again before each grant, from the driver's memory (no round trip: a
 * server selection that sends something only when the driver's view is
 * stale, as the grant's own would); when it differs from the one this
 * connection recorded, the meta document is written again before the
 * grant. Retryable writes are off (backend_mongodb_uri.c): a retry could
 * take a grant to the new primary behind leaselock's back.
 *
 * The meta document (stmt_mongodb.h), written by findAndModify:
 *   1. the read: {_id} -> seenAt = now, $max maxTtlMs (the URI's max_ttl:
 *      a URI can only raise it): the same primary, done (1 round trip);
 *   2. none (a new collection): an upsert {_id, primaryId: {$exists:
 *      false}} recording this primary, floor 0, no pause, the URI's
 *      max_ttl or the default; duplicate key: another client created it
 *      first, so back to 1;
 *   3. another primary: a compare-and-swap on the primaryId and
 *      fenceFloor the read found, recording this primary, fenceFloor =
 *      max(fenceFloor + 1, seenAt in us) (every fence from now on is
 *      above any the old primary issued) and the lock-delay (pausedAt =
 *      now, pauseMs = maxTtlMs); matching nothing, another client swapped
 *      first: back to 1, which finds this primary and that client's floor
 *      and pause. Two clients that meet a new primary at once end with the
 *      same floor and lock-delay; only the one that swapped counts a
 *      failover.
 * No pipeline update and no $expr in the upsert's query (docs/contract.md,
 * "Backends"); both dates are $currentDate, the database's clock.
 */
#include <stdbool.h>

#ifdef LEASELOCK_WITH_MONGODB

#include "backend_mongodb_private.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* The meta document's writes before giving up (each retry means another
 * client wrote it in between). */
#define LL_MONGO_META_TRIES 16

/* ---- identity and durability ------------------------------------------- */

/* A utf8 field of doc, or NULL. */
static const char *ll_mongo_hello_str (const bson_t *doc, const char *name)
{
   bson_iter_t it;
   return bson_iter_init_find (&it, doc, name) && BSON_ITER_HOLDS_UTF8 (&it)
            ? bson_iter_utf8 (&it, NULL)
            : NULL;
}

ll_mongo_topology_t ll_mongo_hello_identity (const bson_t *hello, const char *host, char *id,
                                             size_t id_size, char *about, size_t about_size)
{
   bson_iter_t it;
   if (!hello || bson_empty (hello)) {
      snprintf (id, id_size, "unknown");
      snprintf (about, about_size, "no hello reply from %.64s (load balanced?)", host);
      return LL_MONGO_TOPO_UNKNOWN;
   }
   const char *msg = ll_mongo_hello_str (hello, "msg");
   const char *set = ll_mongo_hello_str (hello, "setName");
   const char *me = ll_mongo_hello_str (hello, "me");
   if (msg && !strcmp (msg, "isdbgrid")) {
      snprintf (id, id_size, "sharded");
      snprintf (about, about_size, "sharded cluster (mongos %.64s)", host);
      return LL_MONGO_TOPO_SHARDED;
   }
   if (!set) {
      snprintf (id, id_size, "standalone");
      snprintf (about, about_size, "standalone server %.64s", host);
      return LL_MONGO_TOPO_STANDALONE;
   }
   char election[25] = "";
   if (bson_iter_init_find (&it, hello, "electionId") && BSON_ITER_HOLDS_OID (&it))
      bson_oid_to_string (bson_iter_oid (&it), election);
   /* Without an electionId (a server too old to send one), the node. */
   snprintf (id, id_size, "rs/%.40s/%.32s", set, election[0] ? election : me ? me : host);
   snprintf (about, about_size, "replica set %.40s, primary %.64s, election %s", set,
             me ? me : host, election[0] ? election : "unknown");
   return LL_MONGO_TOPO_REPLSET;
}

void ll_mongo_durability (ll_primary_t *p, ll_mongo_topology_t topo, const char *about,
                          const mongoc_write_concern_t *wc)
{
   char w[48];
   bool majority = mongoc_write_concern_get_wmajority (wc);
   int32_t wn = mongoc_write_concern_get_w (wc);
   if (majority)
      snprintf (w, sizeof w, "majority");
   else if (mongoc_write_concern_get_wtag (wc))
      snprintf (w, sizeof w, "%.40s", mongoc_write_concern_get_wtag (wc));
   else if (wn == MONGOC_WRITE_CONCERN_W_DEFAULT)
      snprintf (w, sizeof w, "the server's default");
   else
      snprintf (w, sizeof w, "%d", (int)wn);
   bool j_set = mongoc_write_concern_journal_is_set (wc);
   bool j = mongoc_write_concern_get_journal (wc);
   /* w=majority is journaled on the majority unless j=false says
    * otherwise (writeConcernMajorityJournalDefault, true by default). */
   bool durable = majority && !(j_set && !j);
   if (topo == LL_MONGO_TOPO_STANDALONE)
      p->durability = LL_DURABILITY_STANDALONE;
   else if (topo == LL_MONGO_TOPO_UNKNOWN)
      p->durability = LL_DURABILITY_UNKNOWN;
   else
      p->durability = durable ? LL_DURABILITY_DURABLE : LL_DURABILITY_AT_RISK;
   snprintf (p->durability_text, sizeof p->durability_text,
             "%.96s; write concern w=%.32s, j=%s, wtimeoutMS=%" PRId64, about, w,
             j_set ? (j ? "true" : "false") : "default",
             mongoc_write_concern_get_wtimeout_int64 (wc));
}

/* The server the driver writes to: its identity into id (conn's
 * identity's size) and what it is into *topo and about. */
static bool ll_mongo_read_identity (ll_mongo_conn_t *conn, char *id, ll_mongo_topology_t *topo,
                                    char *about, size_t about_size, leaselock_error_t *err)
{
   bson_error_t e;
   mongoc_server_description_t *sd = mongoc_client_select_server (conn->client, true, NULL, &e);
   if (!sd)
      return ll_mongo_fail (conn, err, "selecting the primary", &e);
   const bson_t *hello = mongoc_server_description_hello_response (sd);
   const char *host = mongoc_server_description_host (sd)->host_and_port;
   const uint8_t *data = hello ? bson_get_data (hello) : NULL;
   uint32_t len = hello ? hello->len : 0;
   if (len && len == conn->hello_len && !memcmp (data, conn->hello, len) &&
       !strcmp (host, conn->hello_host)) {
      *topo = (ll_mongo_topology_t)conn->hello_topo;
      snprintf (id, sizeof conn->identity, "%s", conn->hello_id);
      snprintf (about, about_size, "%s", conn->hello_about);
   } else {
      *topo = ll_mongo_hello_identity (hello, host, id, sizeof conn->identity, about, about_size);
      bool keep = len && len <= sizeof conn->hello && strlen (host) < sizeof conn->hello_host;
      conn->hello_len = keep ? len : 0;
      if (keep) {
         memcpy (conn->hello, data, len);
         snprintf (conn->hello_host, sizeof conn->hello_host, "%s", host);
         snprintf (conn->hello_id, sizeof conn->hello_id, "%s", id);
         snprintf (conn->hello_about, sizeof conn->hello_about, "%s", about);
         conn->hello_topo = (int)*topo;
      }
   }
   mongoc_server_description_destroy (sd);
   return true;
}

/* ---- the meta document ------------------------------------------------- */

/* The meta document as a write returned it. */
typedef struct
{
   char primary[80]; /* primaryId; "" with has_primary false when missing */
   bool has_primary;
   int64_t floor, max_ttl_ms, pause_ms;
   int64_t paused_at, seen_at; /* ms since the epoch; paused_at 0: none */
} ll_mongo_meta_t;

static void ll_mongo_meta_read (const bson_t *doc, ll_mongo_meta_t *m)
{
   bson_iter_t it;
   memset (m, 0, sizeof *m);
   m->max_ttl_ms = LL_DEFAULT_MAX_TTL_MS;
   if (!bson_iter_init (&it, doc))
      return;
   while (bson_iter_next (&it)) {
      const char *k = bson_iter_key (&it);
      if (!strcmp (k, "primaryId") && BSON_ITER_HOLDS_UTF8 (&it)) {
         snprintf (m->primary, sizeof m->primary, "%s", bson_iter_utf8 (&it, NULL));
         m->has_primary = true;
      } else if (!strcmp (k, "fenceFloor")) {
         m->floor = bson_iter_as_int64 (&it);
      } else if (!strcmp (k, "maxTtlMs")) {
         m->max_ttl_ms = bson_iter_as_int64 (&it);
      } else if (!strcmp (k, "pauseMs")) {
         m->pause_ms = bson_iter_as_int64 (&it);
      } else if (!strcmp (k, "pausedAt") && BSON_ITER_HOLDS_DATE_TIME (&it)) {
         m->paused_at = bson_iter_date_time (&it);
      } else if (!strcmp (k, "seenAt") && BSON_ITER_HOLDS_DATE_TIME (&it)) {
         m->seen_at = bson_iter_date_time (&it);
      }
   }
}

/* One findAndModify of the meta document, q and u built (built false:
 * NOMEM): *found whether a document came back, then into *m. *dup: the
 * upsert found the document there (not an error). */
static bool ll_mongo_meta_write (ll_mongo_conn_t *conn, bson_t *q, bson_t *u, bool built,
                                 bool upsert, bool *found, bool *dup, ll_mongo_meta_t *m,
                                 leaselock_error_t *err)
{
   bson_t reply;
   bson_error_t e;
   bson_iter_t it;
   *found = *dup = false;
   mongoc_find_and_modify_opts_t *opts = NULL;
   if (built) {
      opts = mongoc_find_and_modify_opts_new ();
      built =
        opts && mongoc_find_and_modify_opts_set_update (opts, u) &&
        mongoc_find_and_modify_opts_set_flags (
          opts, MONGOC_FIND_AND_MODIFY_RETURN_NEW | (upsert ? MONGOC_FIND_AND_MODIFY_UPSERT : 0));
   }
   bool ok = built && mongoc_collection_find_and_modify_with_opts (conn->meta, q, opts, &reply, &e);
   mongoc_find_and_modify_opts_destroy (opts);
   bson_destroy (q);
   bson_destroy (u);
   if (!built)
      return ll_mongo_nomem (err);
   if (!ok) {
      bson_destroy (&reply);
      *dup = upsert && e.domain == MONGOC_ERROR_SERVER && e.code == LL_MONGO_DUPLICATE_KEY;
      return *dup || ll_mongo_fail (conn, err, "recording the primary", &e);
   }
   if (bson_iter_init_find (&it, &reply, "value") && BSON_ITER_HOLDS_DOCUMENT (&it)) {
      const uint8_t *data;
      uint32_t len;
      bson_t value;
      bson_iter_document (&it, &len, &data);
      if (bson_init_static (&value, data, len)) {
         ll_mongo_meta_read (&value, m);
         *found = true;
      }
   }
   bson_destroy (&reply);
   return true;
}

/* Step 3 (the top comment): records id in place of what m names. *swapped
 * when this write did it. */
static bool ll_mongo_meta_swap (ll_mongo_conn_t *conn, const char *id, ll_mongo_meta_t *m,
                                bool *swapped, leaselock_error_t *err)
{
   bson_t q = BSON_INITIALIZER, u = BSON_INITIALIZER;
   int64_t now_us = m->seen_at * 1000;
   int64_t floor = m->floor + 1 > now_us ? m->floor + 1 : now_us;
   bool dup, built = ll_mongo_meta_swap_query (&q, m->has_primary ? m->primary : NULL, m->floor) &&
                     ll_mongo_meta_swap_update (&u, id, floor, m->max_ttl_ms);
   return ll_mongo_meta_write (conn, &q, &u, built, false, swapped, &dup, m, err);
}

/* Steps 1 to 3 until the document names id: *m as it then is, *is_new
 * when this call recorded a new primary. */
static bool ll_mongo_meta_record (ll_mongo_conn_t *conn, const char *id, ll_mongo_meta_t *m,
                                  bool *is_new, leaselock_error_t *err)
{
   int64_t want = conn->primary.want_max_ttl_ms;
   *is_new = false;
   for (int i = 0; i < LL_MONGO_META_TRIES; i++) {
      bson_t q = BSON_INITIALIZER, u = BSON_INITIALIZER;
      bool found, dup;
      bool built = ll_mongo_meta_id (&q) && ll_mongo_meta_read_update (&u, want);
      if (!ll_mongo_meta_write (conn, &q, &u, built, false, &found, &dup, m, err))
         return false;
      if (found && m->has_primary && !strcmp (m->primary, id))
         return true;
      if (found) {
         if (!ll_mongo_meta_swap (conn, id, m, is_new, err))
            return false;
         if (*is_new)
            return true;
         continue;
      }
      q = (bson_t)BSON_INITIALIZER;
      u = (bson_t)BSON_INITIALIZER;
      built = ll_mongo_meta_create_query (&q) &&
              ll_mongo_meta_create_update (&u, id, want > 0 ? want : LL_DEFAULT_MAX_TTL_MS);
      if (!ll_mongo_meta_write (conn, &q, &u, built, true, &found, &dup, m, err))
         return false;
      if (found)
         return true;
   }
   return ll_backend_fail (err, "mongodb", "recording the primary",
                           "the meta document kept changing", NULL, NULL);
}

bool ll_mongo_check_primary (ll_mongo_conn_t *conn, leaselock_error_t *err)
{
   char id[sizeof conn->identity], about[160];
   ll_mongo_topology_t topo = LL_MONGO_TOPO_UNKNOWN;
   ll_mongo_meta_t m;
   bool is_new;
   if (!ll_mongo_read_identity (conn, id, &topo, about, sizeof about, err) ||
       !ll_mongo_meta_record (conn, id, &m, &is_new, err))
      return false;
   ll_primary_t *p = &conn->primary;
   ll_mongo_durability (p, topo, about, mongoc_collection_get_write_concern (conn->coll));
   snprintf (conn->identity, sizeof conn->identity, "%s", id);
   snprintf (p->primary_id, sizeof p->primary_id, "%s", m.primary);
   p->new_primary = is_new;
   int64_t left_ms = m.paused_at ? m.paused_at + m.pause_ms - m.seen_at : 0;
   ll_primary_seen (p, m.floor, left_ms > 0 ? left_ms * 1000 : 0, m.max_ttl_ms);
   return true;
}

/* ---- before and after a grant ------------------------------------------ */

bool ll_mongo_grant_ready (ll_mongo_conn_t *conn, int64_t ttl_ms, leaselock_error_t *err)
{
   char id[sizeof conn->identity], about[160];
   ll_mongo_topology_t topo = LL_MONGO_TOPO_UNKNOWN;
   if (!ll_primary_ttl_ok (&conn->primary, "mongodb", ttl_ms, err) ||
       !ll_mongo_read_identity (conn, id, &topo, about, sizeof about, err))
      return false;
   if (strcmp (id, conn->identity) && !ll_mongo_check_primary (conn, err))
      return false;
   return ll_primary_grant_ok (&conn->primary, "mongodb", err);
}

bool ll_mongo_fence_floor (ll_mongo_conn_t *conn, const ll_op_t *op, int64_t *fence,
                           leaselock_error_t *err)
{
   int64_t floor = conn->primary.fence_floor;
   if (*fence >= floor)
      return true;
   bson_t q = BSON_INITIALIZER, u = BSON_INITIALIZER, *doc = NULL;
   bson_iter_t v;
   bool ok = (ll_mongo_owned_query (&q, op->key, op->key_len, op->owner) &&
              ll_mongo_fence_floor_update (&u, floor)) ||
             ll_mongo_nomem (err);
   ok = ok && ll_mongo_fam_run (conn, conn->coll, &q, ll_mongo_fam_opts (&u, false), &doc, err);
   bson_destroy (&q);
   bson_destroy (&u);
   if (ok && !(doc && bson_iter_init_find (&v, doc, "fence")))
      ok = ll_error_set (err, LEASELOCK_BUSY, "held by another owner");
   else if (ok)
      *fence = bson_iter_as_int64 (&v);
   if (doc)
      bson_destroy (doc);
   return ok;
}

struct ll_primary *ll_mongo_primary (void *conn)
{
   return &((ll_mongo_conn_t *)conn)->primary;
}

#endif /* LEASELOCK_WITH_MONGODB */
