/*
 * cmd_mongodb.h - the MongoDB backend's command shapes, written once: the
 * queries, updates and the record pipeline that backend_mongodb.c sends,
 * which bench/core_mongodb.c's bare libmongoc program sends too (so the
 * benchmark compares the engine with the very same commands).
 *
 * The record (backend_mongodb.c says why it is shaped so):
 *   { _id: key, owner: "<32 hex>" | null, fence: int64,
 *     acquiredAt: date, renewedAt: date, ttlMs: int64, holdMs: int64,
 *     holder: { host, pid, label },
 *     nextOwner: "<32 hex>" | null, nextAt: date, nextMs: int64,
 *     nextWaitedMs: int64 }
 *   expiry = max(renewedAt + ttlMs, acquiredAt + holdMs)
 *   the next owner's reservation (nextOwner null or missing: none):
 *     until = nextAt + nextMs, since = nextAt - nextWaitedMs
 *
 * The fair mode's queue, in the collection "<collection>.queue" (one
 * entry per key and waiter; never read by the lease operations):
 *   { _id: { k: key, o: "<32 hex owner>" }, k: key, o: owner,
 *     arrived: date, seenAt: date, keepMs: int64 }
 *   (k and o again at the top: queries match them there, as
 *   mongo-java-server does not compare "_id.o" with $lt)
 *   live while seenAt + keepMs > $$NOW (seenAt: the last join, from
 *   $currentDate; without pipeline updates a date cannot be written as
 *   now + keep, so the sum is taken when it is read)
 *
 * Each builder appends to a document the caller owns and returns false
 * when out of memory (the document is then to be destroyed).
 * Header only (static inline): no driver header reaches the engine.
 */
#ifndef LL_CMD_MONGODB_H
#define LL_CMD_MONGODB_H

#include <mongoc/mongoc.h>

#include <ctype.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#define LL_MONGO_DEFAULT_DB "leaselock"
#define LL_MONGO_DEFAULT_COLL "leaselock"
/* The queue's collection: the records' name with this suffix. */
#define LL_MONGO_QUEUE_SUFFIX ".queue"
/* The write concern's timeout with the default w=majority. */
#define LL_MONGO_WTIMEOUT_MS 5000
/* The server's answer to an upsert whose _id exists. */
#define LL_MONGO_DUPLICATE_KEY 11000
/* The owner token's length (LEASELOCK_OWNER_LEN). */
#define LL_MONGO_OWNER_LEN 32

/* Appends the expiry expression max(renewedAt + ttlMs, acquiredAt + holdMs)
 * under name to doc. */
static inline bool ll_mongo_append_expiry (bson_t *doc, const char *name)
{
   bson_t max, arr, add1, add2, a1, a2;
   bool ok = true;
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (doc, name, &max);
   ok = ok && BSON_APPEND_ARRAY_BEGIN (&max, "$max", &arr);
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (&arr, "0", &add1);
   ok = ok && BSON_APPEND_ARRAY_BEGIN (&add1, "$add", &a1);
   ok = ok && BSON_APPEND_UTF8 (&a1, "0", "$renewedAt");
   ok = ok && BSON_APPEND_UTF8 (&a1, "1", "$ttlMs");
   ok = ok && bson_append_array_end (&add1, &a1);
   ok = ok && bson_append_document_end (&arr, &add1);
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (&arr, "1", &add2);
   ok = ok && BSON_APPEND_ARRAY_BEGIN (&add2, "$add", &a2);
   ok = ok && BSON_APPEND_UTF8 (&a2, "0", "$acquiredAt");
   ok = ok && BSON_APPEND_UTF8 (&a2, "1", "$holdMs");
   ok = ok && bson_append_array_end (&add2, &a2);
   ok = ok && bson_append_document_end (&arr, &add2);
   ok = ok && bson_append_array_end (&max, &arr);
   ok = ok && bson_append_document_end (doc, &max);
   return ok;
}

/* Appends {op: [expiry, "$$NOW"]} (op "$lte": expired, "$gt": live) under
 * array index / field name to doc. */
static inline bool ll_mongo_append_cmp_now (bson_t *doc, const char *name, const char *op)
{
   bson_t cmp, arr;
   bool ok = true;
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (doc, name, &cmp);
   ok = ok && BSON_APPEND_ARRAY_BEGIN (&cmp, op, &arr);
   ok = ok && ll_mongo_append_expiry (&arr, "0");
   ok = ok && BSON_APPEND_UTF8 (&arr, "1", "$$NOW");
   ok = ok && bson_append_array_end (&cmp, &arr);
   ok = ok && bson_append_document_end (doc, &cmp);
   return ok;
}

static inline bool ll_mongo_append_key (bson_t *doc, const char *key, size_t key_len)
{
   return bson_append_utf8 (doc, "_id", 3, key, (int)key_len);
}

/* {_id: key, owner: owner}: the record when it is this owner's. */
static inline bool ll_mongo_owned_query (bson_t *q,
                                         const char *key,
                                         size_t key_len,
                                         const char *owner)
{
   return ll_mongo_append_key (q, key, key_len) &&
          bson_append_utf8 (q, "owner", 5, owner, LL_MONGO_OWNER_LEN);
}

/* Appends {$add: ["$nextAt", "$nextMs"]}, the reservation's until, under
 * name to doc (null when a field is missing). */
static inline bool ll_mongo_append_next_until (bson_t *doc, const char *name)
{
   bson_t add, arr;
   bool ok = true;
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (doc, name, &add);
   ok = ok && BSON_APPEND_ARRAY_BEGIN (&add, "$add", &arr);
   ok = ok && BSON_APPEND_UTF8 (&arr, "0", "$nextAt");
   ok = ok && BSON_APPEND_UTF8 (&arr, "1", "$nextMs");
   ok = ok && bson_append_array_end (&add, &arr);
   ok = ok && bson_append_document_end (doc, &add);
   return ok;
}

/* Appends {$eq: [field, owner]} under name to doc. */
static inline bool ll_mongo_append_is_owner (bson_t *doc,
                                             const char *name,
                                             const char *field,
                                             const char *owner)
{
   bson_t eq, arr;
   bool ok = true;
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (doc, name, &eq);
   ok = ok && BSON_APPEND_ARRAY_BEGIN (&eq, "$eq", &arr);
   ok = ok && BSON_APPEND_UTF8 (&arr, "0", field);
   ok = ok && bson_append_utf8 (&arr, "1", 1, owner, LL_MONGO_OWNER_LEN);
   ok = ok && bson_append_array_end (&eq, &arr);
   ok = ok && bson_append_document_end (doc, &eq);
   return ok;
}

/* Appends {$eq: [{$ifNull: ["$nextOwner", null]}, null]} (no next owner:
 * null or missing; $ifNull reads a missing field as null on MongoDB and
 * mongo-java-server alike, where a bare "$nextOwner" would not) under name
 * to doc. */
static inline bool ll_mongo_append_no_next (bson_t *doc, const char *name)
{
   bson_t eq, arr, ifn, iarr;
   bool ok = true;
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (doc, name, &eq);
   ok = ok && BSON_APPEND_ARRAY_BEGIN (&eq, "$eq", &arr);
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (&arr, "0", &ifn);
   ok = ok && BSON_APPEND_ARRAY_BEGIN (&ifn, "$ifNull", &iarr);
   ok = ok && BSON_APPEND_UTF8 (&iarr, "0", "$nextOwner");
   ok = ok && BSON_APPEND_NULL (&iarr, "1");
   ok = ok && bson_append_array_end (&ifn, &iarr);
   ok = ok && bson_append_document_end (&arr, &ifn);
   ok = ok && BSON_APPEND_NULL (&arr, "1");
   ok = ok && bson_append_array_end (&eq, &arr);
   ok = ok && bson_append_document_end (doc, &eq);
   return ok;
}

/* Appends {$gt: [{$subtract: ["$nextAt", "$nextWaitedMs"]}, {$subtract:
 * ["$$NOW", waited_ms]}]} (the reservation's waiter began waiting later
 * than one who has waited waited_ms) under name to doc. */
static inline bool ll_mongo_append_next_younger (bson_t *doc, const char *name, int64_t waited_ms)
{
   bson_t gt, arr, sub, sarr;
   bool ok = true;
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (doc, name, &gt);
   ok = ok && BSON_APPEND_ARRAY_BEGIN (&gt, "$gt", &arr);
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (&arr, "0", &sub);
   ok = ok && BSON_APPEND_ARRAY_BEGIN (&sub, "$subtract", &sarr);
   ok = ok && BSON_APPEND_UTF8 (&sarr, "0", "$nextAt");
   ok = ok && BSON_APPEND_UTF8 (&sarr, "1", "$nextWaitedMs");
   ok = ok && bson_append_array_end (&sub, &sarr);
   ok = ok && bson_append_document_end (&arr, &sub);
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (&arr, "1", &sub);
   ok = ok && BSON_APPEND_ARRAY_BEGIN (&sub, "$subtract", &sarr);
   ok = ok && BSON_APPEND_UTF8 (&sarr, "0", "$$NOW");
   ok = ok && BSON_APPEND_INT64 (&sarr, "1", waited_ms);
   ok = ok && bson_append_array_end (&sub, &sarr);
   ok = ok && bson_append_document_end (&arr, &sub);
   ok = ok && bson_append_array_end (&gt, &arr);
   ok = ok && bson_append_document_end (doc, &gt);
   return ok;
}

/* Appends under name to doc the test that the record's reservation lets
 * owner through (owner NULL: that there is no live reservation):
 *   {$or: [no next owner, {$lte: [until, "$$NOW"]},  (none, or run out)
 *          {$eq: ["$nextOwner", owner]},             (when owner)
 *          next_younger (waited_ms)]}                (when waited_ms >= 0)
 * A record without the reservation's fields reads as unreserved: no next
 * owner, and until is null ($add of a missing field), below any date. */
static inline bool ll_mongo_append_next_free (bson_t *doc,
                                              const char *name,
                                              const char *owner,
                                              int64_t waited_ms)
{
   bson_t any, arr, lte, larr;
   bool ok = true;
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (doc, name, &any);
   ok = ok && BSON_APPEND_ARRAY_BEGIN (&any, "$or", &arr);
   ok = ok && ll_mongo_append_no_next (&arr, "0");
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (&arr, "1", &lte);
   ok = ok && BSON_APPEND_ARRAY_BEGIN (&lte, "$lte", &larr);
   ok = ok && ll_mongo_append_next_until (&larr, "0");
   ok = ok && BSON_APPEND_UTF8 (&larr, "1", "$$NOW");
   ok = ok && bson_append_array_end (&lte, &larr);
   ok = ok && bson_append_document_end (&arr, &lte);
   if (owner)
      ok = ok && ll_mongo_append_is_owner (&arr, "2", "$nextOwner", owner);
   if (waited_ms >= 0)
      ok = ok && ll_mongo_append_next_younger (&arr, owner ? "3" : "2", waited_ms);
   ok = ok && bson_append_array_end (&any, &arr);
   ok = ok && bson_append_document_end (doc, &any);
   return ok;
}

/* acquire's first try, a findAndModify without upsert: the record when it
 * is owner's, or expired and not reserved for another waiter:
 * {_id: key, $expr: {$or: [{$eq: ["$owner", owner]},
 *                          {$and: [expired, next_free (owner)]}]}} */
static inline bool ll_mongo_acquire_query (bson_t *q,
                                           const char *key,
                                           size_t key_len,
                                           const char *owner)
{
   bson_t expr, any, all, arr;
   bool ok = ll_mongo_append_key (q, key, key_len);
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (q, "$expr", &expr);
   ok = ok && BSON_APPEND_ARRAY_BEGIN (&expr, "$or", &any);
   ok = ok && ll_mongo_append_is_owner (&any, "0", "$owner", owner);
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (&any, "1", &all);
   ok = ok && BSON_APPEND_ARRAY_BEGIN (&all, "$and", &arr);
   ok = ok && ll_mongo_append_cmp_now (&arr, "0", "$lte");
   ok = ok && ll_mongo_append_next_free (&arr, "1", owner, -1);
   ok = ok && bson_append_array_end (&all, &arr);
   ok = ok && bson_append_document_end (&any, &all);
   ok = ok && bson_append_array_end (&expr, &any);
   ok = ok && bson_append_document_end (q, &expr);
   return ok;
}

/* acquire_wait's claim, an updateOne without upsert, when the take found
 * the key busy: {_id: key, $expr: next_free (owner, waited_ms)} ->
 * nextOwner = owner, nextAt = now, nextMs = reserve_ms, nextWaitedMs =
 * waited_ms (until = now + reserve_ms, since = now - waited_ms). */
static inline bool ll_mongo_claim_command (bson_t *q,
                                           bson_t *u,
                                           const char *key,
                                           size_t key_len,
                                           const char *owner,
                                           int64_t reserve_ms,
                                           int64_t waited_ms)
{
   bson_t d;
   bool ok = ll_mongo_append_key (q, key, key_len);
   ok = ok && ll_mongo_append_next_free (q, "$expr", owner, waited_ms);
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (u, "$currentDate", &d);
   ok = ok && BSON_APPEND_BOOL (&d, "nextAt", true);
   ok = ok && bson_append_document_end (u, &d);
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (u, "$set", &d);
   ok = ok && bson_append_utf8 (&d, "nextOwner", 9, owner, LL_MONGO_OWNER_LEN);
   ok = ok && BSON_APPEND_INT64 (&d, "nextMs", reserve_ms);
   ok = ok && BSON_APPEND_INT64 (&d, "nextWaitedMs", waited_ms);
   ok = ok && bson_append_document_end (u, &d);
   return ok;
}

/* acquire's second try, an upsert whose query matches no existing record:
 * {_id: key, fence: {$exists: false}} (a record that exists answers
 * LL_MONGO_DUPLICATE_KEY). */
static inline bool ll_mongo_upsert_query (bson_t *q, const char *key, size_t key_len)
{
   bson_t ex;
   bool ok = ll_mongo_append_key (q, key, key_len);
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (q, "fence", &ex);
   ok = ok && BSON_APPEND_BOOL (&ex, "$exists", false);
   ok = ok && bson_append_document_end (q, &ex);
   return ok;
}

/* The acquire update: owner, ttl, holder, dates from the server, fence+1,
 * no next owner (the reservation that let the take through is over). */
static inline bool ll_mongo_acquire_update (bson_t *u,
                                            const char *owner,
                                            int64_t ttl_ms,
                                            const char *host,
                                            int64_t pid,
                                            const char *label)
{
   bson_t cd, set, h, inc;
   bool ok = true;
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (u, "$currentDate", &cd);
   ok = ok && BSON_APPEND_BOOL (&cd, "acquiredAt", true);
   ok = ok && BSON_APPEND_BOOL (&cd, "renewedAt", true);
   ok = ok && bson_append_document_end (u, &cd);
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (u, "$set", &set);
   ok = ok && bson_append_utf8 (&set, "owner", 5, owner, LL_MONGO_OWNER_LEN);
   ok = ok && BSON_APPEND_INT64 (&set, "ttlMs", ttl_ms);
   ok = ok && BSON_APPEND_INT64 (&set, "holdMs", 0);
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (&set, "holder", &h);
   ok = ok && BSON_APPEND_UTF8 (&h, "host", host ? host : "");
   ok = ok && BSON_APPEND_INT64 (&h, "pid", pid);
   ok = ok && BSON_APPEND_UTF8 (&h, "label", label ? label : "");
   ok = ok && bson_append_document_end (&set, &h);
   ok = ok && BSON_APPEND_NULL (&set, "nextOwner");
   ok = ok && bson_append_document_end (u, &set);
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (u, "$inc", &inc);
   ok = ok && BSON_APPEND_INT64 (&inc, "fence", 1);
   ok = ok && bson_append_document_end (u, &inc);
   return ok;
}

/* renew: {_id, owner, $expr: live} -> renewedAt = now, ttlMs = ttl. */
static inline bool ll_mongo_renew_command (bson_t *q,
                                           bson_t *u,
                                           const char *key,
                                           size_t key_len,
                                           const char *owner,
                                           int64_t ttl_ms)
{
   bson_t d;
   bool ok = ll_mongo_owned_query (q, key, key_len, owner);
   ok = ok && ll_mongo_append_cmp_now (q, "$expr", "$gt");
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (u, "$currentDate", &d);
   ok = ok && BSON_APPEND_BOOL (&d, "renewedAt", true);
   ok = ok && bson_append_document_end (u, &d);
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (u, "$set", &d);
   ok = ok && BSON_APPEND_INT64 (&d, "ttlMs", ttl_ms);
   ok = ok && bson_append_document_end (u, &d);
   return ok;
}

/* The update that frees a record (release, force_release): owner null,
 * renewedAt = now, ttlMs = 0, holdMs = hold_ms, so the expiry becomes
 * max(now, acquiredAt + hold_ms). */
static inline bool ll_mongo_free_update (bson_t *u, int64_t hold_ms)
{
   bson_t d;
   bool ok = true;
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (u, "$currentDate", &d);
   ok = ok && BSON_APPEND_BOOL (&d, "renewedAt", true);
   ok = ok && bson_append_document_end (u, &d);
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (u, "$set", &d);
   ok = ok && BSON_APPEND_NULL (&d, "owner");
   ok = ok && BSON_APPEND_INT64 (&d, "ttlMs", 0);
   ok = ok && BSON_APPEND_INT64 (&d, "holdMs", hold_ms);
   ok = ok && bson_append_document_end (u, &d);
   return ok;
}

/* force_release's update is conditional on the record as it was read:
 * {_id: key, fence: fence, owner: a string when owned, else null or
 * missing, and, when it was live, $expr: still live}. */
static inline bool ll_mongo_force_query (bson_t *q,
                                         const char *key,
                                         size_t key_len,
                                         int64_t fence,
                                         bool owned,
                                         bool live)
{
   bson_t t;
   bool ok = ll_mongo_append_key (q, key, key_len);
   ok = ok && BSON_APPEND_INT64 (q, "fence", fence);
   if (owned) {
      ok = ok && BSON_APPEND_DOCUMENT_BEGIN (q, "owner", &t);
      ok = ok && BSON_APPEND_UTF8 (&t, "$type", "string");
      ok = ok && bson_append_document_end (q, &t);
   } else {
      ok = ok && BSON_APPEND_NULL (q, "owner"); /* null or missing */
   }
   if (live)
      ok = ok && ll_mongo_append_cmp_now (q, "$expr", "$gt");
   return ok;
}

/* {field: /^prefix/}: ll_mongo_prefix_match on another field. */
static inline bool ll_mongo_prefix_match_on (bson_t *match,
                                             const char *field,
                                             const char *prefix,
                                             size_t prefix_len);

/* list's match: {_id: /^prefix/}, an anchored regex with every
 * non-alphanumeric ASCII byte escaped (the prefix is text, never a
 * pattern); nothing for the empty prefix. */
static inline bool ll_mongo_prefix_match (bson_t *match, const char *prefix, size_t prefix_len)
{
   return ll_mongo_prefix_match_on (match, "_id", prefix, prefix_len);
}

static inline bool ll_mongo_prefix_match_on (bson_t *match,
                                             const char *field,
                                             const char *prefix,
                                             size_t prefix_len)
{
   if (prefix_len == 0)
      return true;
   char *re = malloc (prefix_len * 2 + 2);
   size_t o = 0;
   if (!re)
      return false;
   re[o++] = '^';
   for (size_t i = 0; i < prefix_len; i++) {
      unsigned char ch = (unsigned char)prefix[i];
      if (ch < 0x80 && !isalnum (ch))
         re[o++] = '\\';
      re[o++] = (char)ch;
   }
   re[o] = '\0';
   bool ok = BSON_APPEND_REGEX (match, field, re, "");
   free (re);
   return ok;
}

/* prune's deleteMany filter: {_id: /^prefix/ (none for the empty prefix),
 * $expr: {$and: [{$lte: [{$add: [expiry, older_than_ms]}, "$$NOW"]},
 * next_free]}}: expired at least older_than_ms ago by the server's clock
 * ($$NOW in $expr, allowed in a delete's filter on MongoDB 4.2+ and the
 * test server alike), and no live reservation. */
static inline bool ll_mongo_prune_filter (bson_t *q,
                                          const char *prefix,
                                          size_t prefix_len,
                                          int64_t older_than_ms)
{
   bson_t expr, all, lte, arr, add, terms;
   bool ok = ll_mongo_prefix_match (q, prefix, prefix_len);
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (q, "$expr", &expr);
   ok = ok && BSON_APPEND_ARRAY_BEGIN (&expr, "$and", &all);
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (&all, "0", &lte);
   ok = ok && BSON_APPEND_ARRAY_BEGIN (&lte, "$lte", &arr);
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (&arr, "0", &add);
   ok = ok && BSON_APPEND_ARRAY_BEGIN (&add, "$add", &terms);
   ok = ok && ll_mongo_append_expiry (&terms, "0");
   ok = ok && BSON_APPEND_INT64 (&terms, "1", older_than_ms);
   ok = ok && bson_append_array_end (&add, &terms);
   ok = ok && bson_append_document_end (&arr, &add);
   ok = ok && BSON_APPEND_UTF8 (&arr, "1", "$$NOW");
   ok = ok && bson_append_array_end (&lte, &arr);
   ok = ok && bson_append_document_end (&all, &lte);
   ok = ok && ll_mongo_append_next_free (&all, "1", NULL, -1);
   ok = ok && bson_append_array_end (&expr, &all);
   ok = ok && bson_append_document_end (q, &expr);
   return ok;
}

/* [{$match: match}, {$sort: {_id: 1}}, {$project: {owner, fence, holder,
 *   leftMs: {$subtract: [expiry, "$$NOW"]}}}] - the time left is computed
 * by the server's clock. */
static inline bool ll_mongo_record_pipeline (bson_t *p, const bson_t *match)
{
   bson_t st, d, sub, arr;
   bool ok = true;
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (p, "0", &st);
   ok = ok && BSON_APPEND_DOCUMENT (&st, "$match", match);
   ok = ok && bson_append_document_end (p, &st);
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (p, "1", &st);
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (&st, "$sort", &d);
   ok = ok && BSON_APPEND_INT32 (&d, "_id", 1);
   ok = ok && bson_append_document_end (&st, &d);
   ok = ok && bson_append_document_end (p, &st);
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (p, "2", &st);
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (&st, "$project", &d);
   ok = ok && BSON_APPEND_INT32 (&d, "owner", 1);
   ok = ok && BSON_APPEND_INT32 (&d, "fence", 1);
   ok = ok && BSON_APPEND_INT32 (&d, "holder", 1);
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (&d, "leftMs", &sub);
   ok = ok && BSON_APPEND_ARRAY_BEGIN (&sub, "$subtract", &arr);
   ok = ok && ll_mongo_append_expiry (&arr, "0");
   ok = ok && BSON_APPEND_UTF8 (&arr, "1", "$$NOW");
   ok = ok && bson_append_array_end (&sub, &arr);
   ok = ok && bson_append_document_end (&d, &sub);
   ok = ok && bson_append_document_end (&st, &d);
   ok = ok && bson_append_document_end (p, &st);
   return ok;
}

/* The findAndModify options of both acquire tries: return the new
 * document's fence; upsert on the second. NULL when out of memory. */
static inline mongoc_find_and_modify_opts_t *ll_mongo_fam_opts (const bson_t *update, bool upsert)
{
   mongoc_find_and_modify_opts_t *opts = mongoc_find_and_modify_opts_new ();
   bson_t fields = BSON_INITIALIZER;
   if (!opts)
      return NULL;
   if (!BSON_APPEND_INT32 (&fields, "fence", 1)) {
      mongoc_find_and_modify_opts_destroy (opts);
      return NULL;
   }
   mongoc_find_and_modify_opts_set_update (opts, update);
   mongoc_find_and_modify_opts_set_fields (opts, &fields);
   mongoc_find_and_modify_opts_set_flags (opts, MONGOC_FIND_AND_MODIFY_RETURN_NEW |
                                                  (upsert ? MONGOC_FIND_AND_MODIFY_UPSERT : 0));
   bson_destroy (&fields);
   return opts;
}

/* ---- the fair mode's queue ------------------------------------------------ */

/* Appends {_id: {k: key, o: owner}}, an entry's _id (always k then o: an
 * embedded document matches by equality only with its fields in order). */
static inline bool ll_mongo_queue_id (bson_t *doc,
                                      const char *key,
                                      size_t key_len,
                                      const char *owner)
{
   bson_t id;
   bool ok = BSON_APPEND_DOCUMENT_BEGIN (doc, "_id", &id);
   ok = ok && bson_append_utf8 (&id, "k", 1, key, (int)key_len);
   ok = ok && bson_append_utf8 (&id, "o", 1, owner, LL_MONGO_OWNER_LEN);
   ok = ok && bson_append_document_end (doc, &id);
   return ok;
}

/* Appends {op: [{$add: [{$add: ["$seenAt", "$keepMs"]}, extra_ms]},
 * "$$NOW"]} under name: an entry live ("$gt", extra 0) or run out at least
 * extra_ms ago ("$lte"). */
static inline bool ll_mongo_append_queue_cmp (bson_t *doc,
                                              const char *name,
                                              const char *op,
                                              int64_t extra_ms)
{
   bson_t cmp, arr, add, terms, alive, aterms;
   bool ok = BSON_APPEND_DOCUMENT_BEGIN (doc, name, &cmp);
   ok = ok && BSON_APPEND_ARRAY_BEGIN (&cmp, op, &arr);
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (&arr, "0", &add);
   ok = ok && BSON_APPEND_ARRAY_BEGIN (&add, "$add", &terms);
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (&terms, "0", &alive);
   ok = ok && BSON_APPEND_ARRAY_BEGIN (&alive, "$add", &aterms);
   ok = ok && BSON_APPEND_UTF8 (&aterms, "0", "$seenAt");
   ok = ok && BSON_APPEND_UTF8 (&aterms, "1", "$keepMs");
   ok = ok && bson_append_array_end (&alive, &aterms);
   ok = ok && bson_append_document_end (&terms, &alive);
   ok = ok && BSON_APPEND_INT64 (&terms, "1", extra_ms);
   ok = ok && bson_append_array_end (&add, &terms);
   ok = ok && bson_append_document_end (&arr, &add);
   ok = ok && BSON_APPEND_UTF8 (&arr, "1", "$$NOW");
   ok = ok && bson_append_array_end (&cmp, &arr);
   ok = ok && bson_append_document_end (doc, &cmp);
   return ok;
}

/* queue_join's first try, a findAndModify without upsert: owner's entry
 * while it is live, {_id: {k, o}, $expr: live} -> seenAt = now, keepMs =
 * keep_ms; its arrival is kept. */
static inline bool ll_mongo_queue_refresh (bson_t *q,
                                           bson_t *u,
                                           const char *key,
                                           size_t key_len,
                                           const char *owner,
                                           int64_t keep_ms)
{
   bson_t d;
   bool ok = ll_mongo_queue_id (q, key, key_len, owner);
   ok = ok && ll_mongo_append_queue_cmp (q, "$expr", "$gt", 0);
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (u, "$currentDate", &d);
   ok = ok && BSON_APPEND_BOOL (&d, "seenAt", true);
   ok = ok && bson_append_document_end (u, &d);
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (u, "$set", &d);
   ok = ok && BSON_APPEND_INT64 (&d, "keepMs", keep_ms);
   ok = ok && bson_append_document_end (u, &d);
   return ok;
}

/* queue_join's second try, when the first matched nothing (no entry, or
 * one that ran out): an upsert on {_id: {k, o}} alone (no $expr) that
 * arrives now: arrived = seenAt = now, k, o, keepMs. */
static inline bool ll_mongo_queue_arrive (bson_t *q,
                                          bson_t *u,
                                          const char *key,
                                          size_t key_len,
                                          const char *owner,
                                          int64_t keep_ms)
{
   bson_t d;
   bool ok = ll_mongo_queue_id (q, key, key_len, owner);
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (u, "$currentDate", &d);
   ok = ok && BSON_APPEND_BOOL (&d, "arrived", true);
   ok = ok && BSON_APPEND_BOOL (&d, "seenAt", true);
   ok = ok && bson_append_document_end (u, &d);
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (u, "$set", &d);
   ok = ok && bson_append_utf8 (&d, "k", 1, key, (int)key_len);
   ok = ok && bson_append_utf8 (&d, "o", 1, owner, LL_MONGO_OWNER_LEN);
   ok = ok && BSON_APPEND_INT64 (&d, "keepMs", keep_ms);
   ok = ok && bson_append_document_end (u, &d);
   return ok;
}

/* queue_join's count: the live entries of key ordered before (arrived,
 * owner): {k: key, $or: [{arrived: {$lt: arrived}}, {arrived: {$gte:
 * arrived, $lt: arrived + 1 ms}, o: {$lt: owner}}], $expr: live}. arrived
 * is the date the server wrote into owner's entry, in milliseconds; the
 * same millisecond is a range, not an equality, since mongo-java-server
 * keeps finer dates than it returns. */
static inline bool ll_mongo_queue_ahead_filter (bson_t *q,
                                                const char *key,
                                                size_t key_len,
                                                const char *owner,
                                                int64_t arrived)
{
   bson_t any, d, lt;
   bool ok = bson_append_utf8 (q, "k", 1, key, (int)key_len);
   ok = ok && BSON_APPEND_ARRAY_BEGIN (q, "$or", &any);
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (&any, "0", &d);
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (&d, "arrived", &lt);
   ok = ok && BSON_APPEND_DATE_TIME (&lt, "$lt", arrived);
   ok = ok && bson_append_document_end (&d, &lt);
   ok = ok && bson_append_document_end (&any, &d);
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (&any, "1", &d);
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (&d, "arrived", &lt);
   ok = ok && BSON_APPEND_DATE_TIME (&lt, "$gte", arrived);
   ok = ok && BSON_APPEND_DATE_TIME (&lt, "$lt", arrived + 1);
   ok = ok && bson_append_document_end (&d, &lt);
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (&d, "o", &lt);
   ok = ok && bson_append_utf8 (&lt, "$lt", 3, owner, LL_MONGO_OWNER_LEN);
   ok = ok && bson_append_document_end (&d, &lt);
   ok = ok && bson_append_document_end (&any, &d);
   ok = ok && bson_append_array_end (q, &any);
   ok = ok && ll_mongo_append_queue_cmp (q, "$expr", "$gt", 0);
   return ok;
}

/* prune's deleteMany of the queue: {k: /^prefix/ (none for the empty
 * prefix), $expr: run out at least older_than_ms ago}. */
static inline bool ll_mongo_queue_prune_filter (bson_t *q,
                                                const char *prefix,
                                                size_t prefix_len,
                                                int64_t older_than_ms)
{
   return ll_mongo_prefix_match_on (q, "k", prefix, prefix_len) &&
          ll_mongo_append_queue_cmp (q, "$expr", "$lte", older_than_ms);
}

#endif /* LL_CMD_MONGODB_H */
