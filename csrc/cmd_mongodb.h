/*
 * cmd_mongodb.h - the MongoDB backend's command shapes, written once: the
 * queries, updates and the record pipeline that backend_mongodb.c sends,
 * which bench/core_mongodb.c's bare libmongoc program sends too (so the
 * benchmark compares the engine with the very same commands).
 *
 * The record (backend_mongodb.c says why it is shaped so):
 *   { _id: key, owner: "<32 hex>" | null, fence: int64,
 *     acquiredAt: date, renewedAt: date, ttlMs: int64, holdMs: int64,
 *     holder: { host, pid, label } }
 *   expiry = max(renewedAt + ttlMs, acquiredAt + holdMs)
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

/* acquire's first try, a findAndModify without upsert:
 * {_id: key, $expr: {$or: [expired, {$eq: ["$owner", owner]}]}} */
static inline bool ll_mongo_acquire_query (bson_t *q,
                                           const char *key,
                                           size_t key_len,
                                           const char *owner)
{
   bson_t expr, or, eq, arr;
   bool ok = ll_mongo_append_key (q, key, key_len);
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (q, "$expr", &expr);
   ok = ok && BSON_APPEND_ARRAY_BEGIN (&expr, "$or", & or);
   ok = ok && ll_mongo_append_cmp_now (& or, "0", "$lte");
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (& or, "1", &eq);
   ok = ok && BSON_APPEND_ARRAY_BEGIN (&eq, "$eq", &arr);
   ok = ok && BSON_APPEND_UTF8 (&arr, "0", "$owner");
   ok = ok && bson_append_utf8 (&arr, "1", 1, owner, LL_MONGO_OWNER_LEN);
   ok = ok && bson_append_array_end (&eq, &arr);
   ok = ok && bson_append_document_end (& or, &eq);
   ok = ok && bson_append_array_end (&expr, & or);
   ok = ok && bson_append_document_end (q, &expr);
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

/* The acquire update: owner, ttl, holder, dates from the server, fence+1. */
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

/* list's match: {_id: /^prefix/}, an anchored regex with every
 * non-alphanumeric ASCII byte escaped (the prefix is text, never a
 * pattern); nothing for the empty prefix. */
static inline bool ll_mongo_prefix_match (bson_t *match, const char *prefix, size_t prefix_len)
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
   bool ok = BSON_APPEND_REGEX (match, "_id", re, "");
   free (re);
   return ok;
}

/* prune's deleteMany filter: {_id: /^prefix/ (none for the empty prefix),
 * $expr: {$lte: [{$add: [expiry, older_than_ms]}, "$$NOW"]}}: expired at
 * least older_than_ms ago by the server's clock ($$NOW in $expr, allowed
 * in a delete's filter on MongoDB 4.2+ and the test server alike). */
static inline bool ll_mongo_prune_filter (bson_t *q,
                                          const char *prefix,
                                          size_t prefix_len,
                                          int64_t older_than_ms)
{
   bson_t expr, arr, add, terms;
   bool ok = ll_mongo_prefix_match (q, prefix, prefix_len);
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (q, "$expr", &expr);
   ok = ok && BSON_APPEND_ARRAY_BEGIN (&expr, "$lte", &arr);
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (&arr, "0", &add);
   ok = ok && BSON_APPEND_ARRAY_BEGIN (&add, "$add", &terms);
   ok = ok && ll_mongo_append_expiry (&terms, "0");
   ok = ok && BSON_APPEND_INT64 (&terms, "1", older_than_ms);
   ok = ok && bson_append_array_end (&add, &terms);
   ok = ok && bson_append_document_end (&arr, &add);
   ok = ok && BSON_APPEND_UTF8 (&arr, "1", "$$NOW");
   ok = ok && bson_append_array_end (&expr, &arr);
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

#endif /* LL_CMD_MONGODB_H */
