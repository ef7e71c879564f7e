/*
 * stmt_mongodb.c - builds the MongoDB backend's commands (stmt_mongodb.h
 * says what each one is and who owns what): the one place their shapes are
 * written, for the backend and for bench/core_mongodb.c alike. Only
 * libbson/libmongoc calls; nothing of the engine.
 */
#include <stdbool.h>

#ifdef LEASELOCK_WITH_MONGODB

#include "stmt_mongodb.h"

#include <ctype.h>
#include <stdlib.h>

/* An expression appended under a name: the shape the builders below pass
 * to one another. */
typedef bool (*ll_mongo_expr_fn) (bson_t *doc, const char *name);

/* ---- expression pieces ---------------------------------------------------- */

/* Begins {op: [ under name in doc: *expr the document, *args its array
 * (ll_mongo_op_end closes both). */
static bool ll_mongo_op_begin (bson_t *doc, const char *name, const char *op, bson_t *expr,
                               bson_t *args)
{
   return BSON_APPEND_DOCUMENT_BEGIN (doc, name, expr) && BSON_APPEND_ARRAY_BEGIN (expr, op, args);
}

static bool ll_mongo_op_end (bson_t *doc, bson_t *expr, bson_t *args)
{
   return bson_append_array_end (expr, args) && bson_append_document_end (doc, expr);
}

/* Appends {op: [a, b]} under name, a and b strings (field paths, $$NOW). */
static bool ll_mongo_append_op2 (bson_t *doc, const char *name, const char *op, const char *a,
                                 const char *b)
{
   bson_t expr, args;
   return ll_mongo_op_begin (doc, name, op, &expr, &args) && BSON_APPEND_UTF8 (&args, "0", a) &&
          BSON_APPEND_UTF8 (&args, "1", b) && ll_mongo_op_end (doc, &expr, &args);
}

/* Appends {name: {field: value}}: $inc, $max and a field's one condition. */
static bool ll_mongo_append_one_int64 (bson_t *doc, const char *name, const char *field,
                                       int64_t value)
{
   bson_t d;
   return BSON_APPEND_DOCUMENT_BEGIN (doc, name, &d) && BSON_APPEND_INT64 (&d, field, value) &&
          bson_append_document_end (doc, &d);
}

/* Appends {$currentDate: {date1: true[, date2: true]}} to the update u
 * (date2 NULL: one date) and begins u's $set in *set, which the caller
 * fills and ends (bson_append_document_end (u, set)): every update that
 * dates a record or an entry by the server's clock. */
static bool ll_mongo_dated_set_begin (bson_t *u, const char *date1, const char *date2, bson_t *set)
{
   bson_t cd;
   return BSON_APPEND_DOCUMENT_BEGIN (u, "$currentDate", &cd) &&
          BSON_APPEND_BOOL (&cd, date1, true) && (!date2 || BSON_APPEND_BOOL (&cd, date2, true)) &&
          bson_append_document_end (u, &cd) && BSON_APPEND_DOCUMENT_BEGIN (u, "$set", set);
}

/* The update {$currentDate: {date: true}, $set: {field: value}}: renew's
 * and a queue entry's refresh. */
static bool ll_mongo_dated_int64_update (bson_t *u, const char *date, const char *field,
                                         int64_t value)
{
   bson_t set;
   return ll_mongo_dated_set_begin (u, date, NULL, &set) &&
          BSON_APPEND_INT64 (&set, field, value) && bson_append_document_end (u, &set);
}

/* Appends {op: [{$add: [x, extra_ms]}, "$$NOW"]} under name, x appended
 * by fn: a date at least extra_ms in the past ("$lte") or not. */
static bool ll_mongo_append_cmp_now_plus (bson_t *doc, const char *name, const char *op,
                                          ll_mongo_expr_fn fn, int64_t extra_ms)
{
   bson_t cmp, arr, add, terms;
   return ll_mongo_op_begin (doc, name, op, &cmp, &arr) &&
          ll_mongo_op_begin (&arr, "0", "$add", &add, &terms) && fn (&terms, "0") &&
          BSON_APPEND_INT64 (&terms, "1", extra_ms) && ll_mongo_op_end (&arr, &add, &terms) &&
          BSON_APPEND_UTF8 (&arr, "1", "$$NOW") && ll_mongo_op_end (doc, &cmp, &arr);
}

/* ---- the record's expiry and reservation ---------------------------------- */

/* Appends the expiry expression max(renewedAt + ttlMs, acquiredAt + holdMs)
 * under name to doc. */
static bool ll_mongo_append_expiry (bson_t *doc, const char *name)
{
   bson_t max, arr;
   return ll_mongo_op_begin (doc, name, "$max", &max, &arr) &&
          ll_mongo_append_op2 (&arr, "0", "$add", "$renewedAt", "$ttlMs") &&
          ll_mongo_append_op2 (&arr, "1", "$add", "$acquiredAt", "$holdMs") &&
          ll_mongo_op_end (doc, &max, &arr);
}

/* Appends {op: [expiry, "$$NOW"]} (op "$lte": expired, "$gt": live,
 * "$subtract": the time left) under array index / field name to doc. */
static bool ll_mongo_append_cmp_now (bson_t *doc, const char *name, const char *op)
{
   bson_t cmp, arr;
   return ll_mongo_op_begin (doc, name, op, &cmp, &arr) && ll_mongo_append_expiry (&arr, "0") &&
          BSON_APPEND_UTF8 (&arr, "1", "$$NOW") && ll_mongo_op_end (doc, &cmp, &arr);
}

bool ll_mongo_append_key (bson_t *doc, const char *key, size_t key_len)
{
   return bson_append_utf8 (doc, "_id", 3, key, (int)key_len);
}

bool ll_mongo_owned_query (bson_t *q, const char *key, size_t key_len, const char *owner)
{
   return ll_mongo_append_key (q, key, key_len) &&
          bson_append_utf8 (q, "owner", 5, owner, LL_MONGO_OWNER_LEN);
}

bool ll_mongo_live_owned_query (bson_t *q, const char *key, size_t key_len, const char *owner)
{
   return ll_mongo_owned_query (q, key, key_len, owner) &&
          ll_mongo_append_cmp_now (q, "$expr", "$gt");
}

/* Appends {$eq: [field, owner]} under name to doc. */
static bool ll_mongo_append_is_owner (bson_t *doc, const char *name, const char *field,
                                      const char *owner)
{
   bson_t eq, arr;
   return ll_mongo_op_begin (doc, name, "$eq", &eq, &arr) && BSON_APPEND_UTF8 (&arr, "0", field) &&
          bson_append_utf8 (&arr, "1", 1, owner, LL_MONGO_OWNER_LEN) &&
          ll_mongo_op_end (doc, &eq, &arr);
}

/* Appends {$eq: [{$ifNull: ["$nextOwner", null]}, null]} (no next owner:
 * null or missing; $ifNull reads a missing field as null on MongoDB and
 * mongo-java-server alike, where a bare "$nextOwner" would not) under name
 * to doc. */
static bool ll_mongo_append_no_next (bson_t *doc, const char *name)
{
   bson_t eq, arr, ifn, iarr;
   return ll_mongo_op_begin (doc, name, "$eq", &eq, &arr) &&
          ll_mongo_op_begin (&arr, "0", "$ifNull", &ifn, &iarr) &&
          BSON_APPEND_UTF8 (&iarr, "0", "$nextOwner") && BSON_APPEND_NULL (&iarr, "1") &&
          ll_mongo_op_end (&arr, &ifn, &iarr) && BSON_APPEND_NULL (&arr, "1") &&
          ll_mongo_op_end (doc, &eq, &arr);
}

/* Appends {$gt: [{$subtract: ["$nextAt", "$nextWaitedMs"]}, {$subtract:
 * ["$$NOW", waited_ms]}]} (the reservation's waiter began waiting later
 * than one who has waited waited_ms) under name to doc. */
static bool ll_mongo_append_next_younger (bson_t *doc, const char *name, int64_t waited_ms)
{
   bson_t gt, arr, sub, sarr;
   return ll_mongo_op_begin (doc, name, "$gt", &gt, &arr) &&
          ll_mongo_append_op2 (&arr, "0", "$subtract", "$nextAt", "$nextWaitedMs") &&
          ll_mongo_op_begin (&arr, "1", "$subtract", &sub, &sarr) &&
          BSON_APPEND_UTF8 (&sarr, "0", "$$NOW") && BSON_APPEND_INT64 (&sarr, "1", waited_ms) &&
          ll_mongo_op_end (&arr, &sub, &sarr) && ll_mongo_op_end (doc, &gt, &arr);
}

/* Appends under name to doc the test that the record's reservation lets
 * owner through (owner NULL: that there is no live reservation):
 *   {$or: [no next owner, {$lte: [until, "$$NOW"]},  (none, or run out)
 *          {$eq: ["$nextOwner", owner]},             (when owner)
 *          next_younger (waited_ms)]}                (when waited_ms >= 0)
 * until is {$add: ["$nextAt", "$nextMs"]}. A record without the
 * reservation's fields reads as unreserved: no next owner, and until is
 * null ($add of a missing field), below any date. */
static bool ll_mongo_append_next_free (bson_t *doc, const char *name, const char *owner,
                                       int64_t waited_ms)
{
   bson_t any, arr, lte, larr;
   bool ok = ll_mongo_op_begin (doc, name, "$or", &any, &arr) &&
             ll_mongo_append_no_next (&arr, "0") &&
             ll_mongo_op_begin (&arr, "1", "$lte", &lte, &larr) &&
             ll_mongo_append_op2 (&larr, "0", "$add", "$nextAt", "$nextMs") &&
             BSON_APPEND_UTF8 (&larr, "1", "$$NOW") && ll_mongo_op_end (&arr, &lte, &larr);
   if (owner)
      ok = ok && ll_mongo_append_is_owner (&arr, "2", "$nextOwner", owner);
   if (waited_ms >= 0)
      ok = ok && ll_mongo_append_next_younger (&arr, owner ? "3" : "2", waited_ms);
   return ok && ll_mongo_op_end (doc, &any, &arr);
}

/* ---- the lease operations' commands --------------------------------------- */

/* Appends {$add: ["$queueAt", "$queueMs"]}, the end of the record's queue
 * mark (null without one), under name. */
static bool ll_mongo_append_mark_end (bson_t *doc, const char *name)
{
   return ll_mongo_append_op2 (doc, name, "$add", "$queueAt", "$queueMs");
}

/* acquire's query; fair: the record's queue mark not live as well. */
static bool ll_mongo_take_query (bson_t *q, const char *key, size_t key_len, const char *owner,
                                 bool fair)
{
   bson_t expr, any, all, arr;
   return ll_mongo_append_key (q, key, key_len) &&
          ll_mongo_op_begin (q, "$expr", "$or", &expr, &any) &&
          ll_mongo_append_is_owner (&any, "0", "$owner", owner) &&
          ll_mongo_op_begin (&any, "1", "$and", &all, &arr) &&
          ll_mongo_append_cmp_now (&arr, "0", "$lte") &&
          ll_mongo_append_next_free (&arr, "1", owner, -1) &&
          (!fair ||
           ll_mongo_append_cmp_now_plus (&arr, "2", "$lte", ll_mongo_append_mark_end, 0)) &&
          ll_mongo_op_end (&any, &all, &arr) && ll_mongo_op_end (q, &expr, &any);
}

bool ll_mongo_acquire_query (bson_t *q, const char *key, size_t key_len, const char *owner)
{
   return ll_mongo_take_query (q, key, key_len, owner, false);
}

bool ll_mongo_acquire_fair_query (bson_t *q, const char *key, size_t key_len, const char *owner)
{
   return ll_mongo_take_query (q, key, key_len, owner, true);
}

bool ll_mongo_mark_query (bson_t *q, const char *key, size_t key_len, int64_t span_ms)
{
   return ll_mongo_append_key (q, key, key_len) &&
          ll_mongo_append_cmp_now_plus (q, "$expr", "$lt", ll_mongo_append_mark_end, -span_ms);
}

bool ll_mongo_mark_update (bson_t *u, int64_t span_ms)
{
   return ll_mongo_dated_int64_update (u, "queueAt", "queueMs", span_ms);
}

bool ll_mongo_mark_new_update (bson_t *u, int64_t span_ms)
{
   bson_t set;
   return ll_mongo_dated_set_begin (u, "queueAt", NULL, &set) &&
          BSON_APPEND_INT64 (&set, "queueMs", span_ms) && BSON_APPEND_INT64 (&set, "fence", 0) &&
          BSON_APPEND_NULL (&set, "owner") && bson_append_document_end (u, &set);
}

bool ll_mongo_claim_query (bson_t *q, const char *key, size_t key_len, const char *owner,
                           int64_t waited_ms)
{
   return ll_mongo_append_key (q, key, key_len) &&
          ll_mongo_append_next_free (q, "$expr", owner, waited_ms);
}

bool ll_mongo_claim_update (bson_t *u, const char *owner, int64_t reserve_ms, int64_t waited_ms)
{
   bson_t d;
   return ll_mongo_dated_set_begin (u, "nextAt", NULL, &d) &&
          bson_append_utf8 (&d, "nextOwner", 9, owner, LL_MONGO_OWNER_LEN) &&
          BSON_APPEND_INT64 (&d, "nextMs", reserve_ms) &&
          BSON_APPEND_INT64 (&d, "nextWaitedMs", waited_ms) && bson_append_document_end (u, &d);
}

bool ll_mongo_upsert_query (bson_t *q, const char *key, size_t key_len)
{
   bson_t ex;
   return ll_mongo_append_key (q, key, key_len) && BSON_APPEND_DOCUMENT_BEGIN (q, "fence", &ex) &&
          BSON_APPEND_BOOL (&ex, "$exists", false) && bson_append_document_end (q, &ex);
}

bool ll_mongo_acquire_update (bson_t *u, const char *owner, int64_t ttl_ms, const char *host,
                              int64_t pid, const char *label, bool queued)
{
   bson_t set, h;
   return ll_mongo_dated_set_begin (u, "acquiredAt", "renewedAt", &set) &&
          bson_append_utf8 (&set, "owner", 5, owner, LL_MONGO_OWNER_LEN) &&
          BSON_APPEND_INT64 (&set, "ttlMs", ttl_ms) && BSON_APPEND_INT64 (&set, "holdMs", 0) &&
          BSON_APPEND_DOCUMENT_BEGIN (&set, "holder", &h) &&
          BSON_APPEND_UTF8 (&h, "host", host ? host : "") && BSON_APPEND_INT64 (&h, "pid", pid) &&
          BSON_APPEND_UTF8 (&h, "label", label ? label : "") &&
          bson_append_document_end (&set, &h) && BSON_APPEND_NULL (&set, "nextOwner") &&
          BSON_APPEND_INT64 (&set, "holds", 1) && BSON_APPEND_BOOL (&set, "fairQueued", queued) &&
          bson_append_document_end (u, &set) && ll_mongo_append_one_int64 (u, "$inc", "fence", 1);
}

bool ll_mongo_renew_update (bson_t *u, int64_t ttl_ms)
{
   return ll_mongo_dated_int64_update (u, "renewedAt", "ttlMs", ttl_ms);
}

bool ll_mongo_hold_query (bson_t *q, const char *key, size_t key_len, const char *owner, int delta)
{
   return ll_mongo_owned_query (q, key, key_len, owner) &&
          ll_mongo_append_one_int64 (q, "holds", delta > 0 ? "$gte" : "$gt", 1) &&
          ll_mongo_append_cmp_now (q, "$expr", "$gt");
}

bool ll_mongo_hold_update (bson_t *u, int delta)
{
   return ll_mongo_append_one_int64 (u, "$inc", "holds", delta);
}

bool ll_mongo_hold_floor_update (bson_t *u)
{
   return ll_mongo_append_one_int64 (u, "$max", "holds", 1);
}

bool ll_mongo_free_update (bson_t *u, int64_t hold_ms)
{
   bson_t d;
   return ll_mongo_dated_set_begin (u, "renewedAt", NULL, &d) && BSON_APPEND_NULL (&d, "owner") &&
          BSON_APPEND_INT64 (&d, "ttlMs", 0) && BSON_APPEND_INT64 (&d, "holdMs", hold_ms) &&
          bson_append_document_end (u, &d);
}

bool ll_mongo_force_query (bson_t *q, const char *key, size_t key_len, int64_t fence, bool owned,
                           bool live)
{
   bson_t t;
   bool ok = ll_mongo_append_key (q, key, key_len) && BSON_APPEND_INT64 (q, "fence", fence);
   if (owned)
      ok = ok && BSON_APPEND_DOCUMENT_BEGIN (q, "owner", &t) &&
           BSON_APPEND_UTF8 (&t, "$type", "string") && bson_append_document_end (q, &t);
   else
      ok = ok && BSON_APPEND_NULL (q, "owner"); /* null or missing */
   if (live)
      ok = ok && ll_mongo_append_cmp_now (q, "$expr", "$gt");
   return ok;
}

/* {field: /^prefix/} (see ll_mongo_prefix_match); nothing for the empty
 * prefix. */
static bool ll_mongo_prefix_match_on (bson_t *match, const char *field, const char *prefix,
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

bool ll_mongo_prefix_match (bson_t *match, const char *prefix, size_t prefix_len)
{
   return ll_mongo_prefix_match_on (match, "_id", prefix, prefix_len);
}

/* Appends {fence: {op: 0}}: a record ("$gt"), or a document that only
 * ever held a queue mark ("$eq": ll_mongo_mark_new_update). */
static bool ll_mongo_append_fence_cmp (bson_t *q, const char *op)
{
   return ll_mongo_append_one_int64 (q, "fence", op, 0);
}

bool ll_mongo_prune_filter (bson_t *q, const char *prefix, size_t prefix_len, int64_t older_than_ms)
{
   bson_t expr, all;
   return ll_mongo_prefix_match (q, prefix, prefix_len) && ll_mongo_append_fence_cmp (q, "$gt") &&
          ll_mongo_op_begin (q, "$expr", "$and", &expr, &all) &&
          ll_mongo_append_cmp_now_plus (&all, "0", "$lte", ll_mongo_append_expiry, older_than_ms) &&
          ll_mongo_append_next_free (&all, "1", NULL, -1) &&
          ll_mongo_append_cmp_now_plus (&all, "2", "$lte", ll_mongo_append_mark_end, 0) &&
          ll_mongo_op_end (q, &expr, &all);
}

bool ll_mongo_mark_prune_filter (bson_t *q, const char *prefix, size_t prefix_len,
                                 int64_t older_than_ms)
{
   return ll_mongo_prefix_match (q, prefix, prefix_len) && ll_mongo_append_fence_cmp (q, "$eq") &&
          ll_mongo_append_cmp_now_plus (q, "$expr", "$lte", ll_mongo_append_mark_end,
                                        older_than_ms);
}

bool ll_mongo_record_pipeline (bson_t *p, const bson_t *match)
{
   bson_t st, d;
   return BSON_APPEND_DOCUMENT_BEGIN (p, "0", &st) && BSON_APPEND_DOCUMENT (&st, "$match", match) &&
          bson_append_document_end (p, &st) && BSON_APPEND_DOCUMENT_BEGIN (p, "1", &st) &&
          BSON_APPEND_DOCUMENT_BEGIN (&st, "$match", &d) && ll_mongo_append_fence_cmp (&d, "$gt") &&
          bson_append_document_end (&st, &d) && bson_append_document_end (p, &st) &&
          BSON_APPEND_DOCUMENT_BEGIN (p, "2", &st) &&
          BSON_APPEND_DOCUMENT_BEGIN (&st, "$sort", &d) && BSON_APPEND_INT32 (&d, "_id", 1) &&
          bson_append_document_end (&st, &d) && bson_append_document_end (p, &st) &&
          BSON_APPEND_DOCUMENT_BEGIN (p, "3", &st) &&
          BSON_APPEND_DOCUMENT_BEGIN (&st, "$project", &d) && BSON_APPEND_INT32 (&d, "owner", 1) &&
          BSON_APPEND_INT32 (&d, "fence", 1) && BSON_APPEND_INT32 (&d, "holder", 1) &&
          BSON_APPEND_INT32 (&d, "holds", 1) &&
          ll_mongo_append_cmp_now (&d, "leftMs", "$subtract") &&
          bson_append_document_end (&st, &d) && bson_append_document_end (p, &st);
}

mongoc_find_and_modify_opts_t *ll_mongo_fam_opts_fields (const bson_t *update,
                                                         const char *const *fields, bool upsert)
{
   mongoc_find_and_modify_opts_t *opts = mongoc_find_and_modify_opts_new ();
   bson_t proj = BSON_INITIALIZER;
   bool ok = opts != NULL;
   for (int i = 0; ok && fields[i]; i++)
      ok = BSON_APPEND_INT32 (&proj, fields[i], 1);
   ok = ok && mongoc_find_and_modify_opts_set_update (opts, update) &&
        mongoc_find_and_modify_opts_set_fields (opts, &proj) &&
        mongoc_find_and_modify_opts_set_flags (
          opts, MONGOC_FIND_AND_MODIFY_RETURN_NEW | (upsert ? MONGOC_FIND_AND_MODIFY_UPSERT : 0));
   bson_destroy (&proj);
   if (!ok) {
      mongoc_find_and_modify_opts_destroy (opts);
      return NULL;
   }
   return opts;
}

mongoc_find_and_modify_opts_t *ll_mongo_fam_opts (const bson_t *update, bool upsert)
{
   static const char *const fence[] = { "fence", NULL };
   return ll_mongo_fam_opts_fields (update, fence, upsert);
}

mongoc_find_and_modify_opts_t *ll_mongo_release_opts (const bson_t *update)
{
   static const char *const fields[] = { "nextOwner", "nextAt",     "nextMs",
                                         "renewedAt", "fairQueued", NULL };
   return ll_mongo_fam_opts_fields (update, fields, false);
}

/* ---- the fair mode's queue ------------------------------------------------ */

bool ll_mongo_queue_id (bson_t *doc, const char *key, size_t key_len, const char *owner)
{
   bson_t id;
   return BSON_APPEND_DOCUMENT_BEGIN (doc, "_id", &id) &&
          bson_append_utf8 (&id, "k", 1, key, (int)key_len) &&
          bson_append_utf8 (&id, "o", 1, owner, LL_MONGO_OWNER_LEN) &&
          bson_append_document_end (doc, &id);
}

/* Appends an entry's end under name: {$min: [{$add: ["$seenAt",
 * "$keepMs"]}, {$ifNull: ["$markEnd", that sum]}]}, never after the key's
 * queue mark as its join read it (an entry without markEnd: the sum). */
static bool ll_mongo_append_queue_end (bson_t *doc, const char *name)
{
   bson_t min, arr, ifn, iarr;
   return ll_mongo_op_begin (doc, name, "$min", &min, &arr) &&
          ll_mongo_append_op2 (&arr, "0", "$add", "$seenAt", "$keepMs") &&
          ll_mongo_op_begin (&arr, "1", "$ifNull", &ifn, &iarr) &&
          BSON_APPEND_UTF8 (&iarr, "0", "$markEnd") &&
          ll_mongo_append_op2 (&iarr, "1", "$add", "$seenAt", "$keepMs") &&
          ll_mongo_op_end (&arr, &ifn, &iarr) && ll_mongo_op_end (doc, &min, &arr);
}

/* Appends {op: [{$add: [entry's end, extra_ms]}, "$$NOW"]} under name: an
 * entry live ("$gt", extra 0) or run out at least extra_ms ago ("$lte"). */
static bool ll_mongo_append_queue_cmp (bson_t *doc, const char *name, const char *op,
                                       int64_t extra_ms)
{
   return ll_mongo_append_cmp_now_plus (doc, name, op, ll_mongo_append_queue_end, extra_ms);
}

bool ll_mongo_queue_live_query (bson_t *q, const char *key, size_t key_len, const char *owner)
{
   return ll_mongo_queue_id (q, key, key_len, owner) &&
          ll_mongo_append_queue_cmp (q, "$expr", "$gt", 0);
}

bool ll_mongo_queue_refresh_update (bson_t *u, int64_t keep_ms, int64_t mark_end_ms)
{
   bson_t d;
   return ll_mongo_dated_set_begin (u, "seenAt", NULL, &d) &&
          BSON_APPEND_INT64 (&d, "keepMs", keep_ms) &&
          BSON_APPEND_DATE_TIME (&d, "markEnd", mark_end_ms) && bson_append_document_end (u, &d);
}

bool ll_mongo_queue_arrive_update (bson_t *u, const char *key, size_t key_len, const char *owner,
                                   int64_t keep_ms, int64_t mark_end_ms)
{
   bson_t d;
   return ll_mongo_dated_set_begin (u, "arrived", "seenAt", &d) &&
          bson_append_utf8 (&d, "k", 1, key, (int)key_len) &&
          bson_append_utf8 (&d, "o", 1, owner, LL_MONGO_OWNER_LEN) &&
          BSON_APPEND_INT64 (&d, "keepMs", keep_ms) &&
          BSON_APPEND_DATE_TIME (&d, "markEnd", mark_end_ms) && bson_append_document_end (u, &d);
}

bool ll_mongo_queue_ahead_filter (bson_t *q, const char *key, size_t key_len, const char *owner,
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

bool ll_mongo_queue_others_filter (bson_t *q, const char *key, size_t key_len, const char *owner)
{
   bson_t ne;
   return bson_append_utf8 (q, "k", 1, key, (int)key_len) &&
          BSON_APPEND_DOCUMENT_BEGIN (q, "o", &ne) &&
          bson_append_utf8 (&ne, "$ne", 3, owner, LL_MONGO_OWNER_LEN) &&
          bson_append_document_end (q, &ne) && ll_mongo_append_queue_cmp (q, "$expr", "$gt", 0);
}

bool ll_mongo_queue_prune_filter (bson_t *q, const char *prefix, size_t prefix_len,
                                  int64_t older_than_ms)
{
   return ll_mongo_prefix_match_on (q, "k", prefix, prefix_len) &&
          ll_mongo_append_queue_cmp (q, "$expr", "$lte", older_than_ms);
}

/* ---- the failover record ------------------------------------------------- */

#define LL_MONGO_META_ID "primary"

bool ll_mongo_meta_id (bson_t *q)
{
   return BSON_APPEND_UTF8 (q, "_id", LL_MONGO_META_ID);
}

bool ll_mongo_meta_read_update (bson_t *u, int64_t want_max_ttl_ms)
{
   bson_t cd;
   return BSON_APPEND_DOCUMENT_BEGIN (u, "$currentDate", &cd) &&
          BSON_APPEND_BOOL (&cd, "seenAt", true) && bson_append_document_end (u, &cd) &&
          (want_max_ttl_ms <= 0 ||
           ll_mongo_append_one_int64 (u, "$max", "maxTtlMs", want_max_ttl_ms));
}

bool ll_mongo_meta_create_query (bson_t *q)
{
   bson_t ex;
   return ll_mongo_meta_id (q) && BSON_APPEND_DOCUMENT_BEGIN (q, "primaryId", &ex) &&
          BSON_APPEND_BOOL (&ex, "$exists", false) && bson_append_document_end (q, &ex);
}

bool ll_mongo_meta_create_update (bson_t *u, const char *id, int64_t max_ttl_ms)
{
   bson_t set;
   return ll_mongo_dated_set_begin (u, "seenAt", NULL, &set) &&
          BSON_APPEND_UTF8 (&set, "primaryId", id) && BSON_APPEND_INT64 (&set, "fenceFloor", 0) &&
          BSON_APPEND_INT64 (&set, "maxTtlMs", max_ttl_ms) &&
          BSON_APPEND_INT64 (&set, "pauseMs", 0) && bson_append_document_end (u, &set);
}

bool ll_mongo_meta_swap_query (bson_t *q, const char *old_id, int64_t old_floor)
{
   return ll_mongo_meta_id (q) &&
          (old_id ? BSON_APPEND_UTF8 (q, "primaryId", old_id)
                  : BSON_APPEND_NULL (q, "primaryId")) &&
          BSON_APPEND_INT64 (q, "fenceFloor", old_floor);
}

bool ll_mongo_meta_swap_update (bson_t *u, const char *id, int64_t floor, int64_t pause_ms)
{
   bson_t set;
   return ll_mongo_dated_set_begin (u, "seenAt", "pausedAt", &set) &&
          BSON_APPEND_UTF8 (&set, "primaryId", id) &&
          BSON_APPEND_INT64 (&set, "fenceFloor", floor) &&
          BSON_APPEND_INT64 (&set, "pauseMs", pause_ms) && bson_append_document_end (u, &set);
}

bool ll_mongo_fence_floor_update (bson_t *u, int64_t floor)
{
   return ll_mongo_append_one_int64 (u, "$max", "fence", floor);
}

#endif /* LEASELOCK_WITH_MONGODB */
