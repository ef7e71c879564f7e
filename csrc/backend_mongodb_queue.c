/*
 * backend_mongodb_queue.c - the MongoDB backend's fair-mode queue: the
 * collection "<collection>.queue" (its documents in stmt_mongodb.h),
 * beside the records and read by no lease operation but a fair acquire's
 * first take while the key's queue mark is live (ll_mongo_queue_others:
 * backend_mongodb.c's ll_mongo_acquire_fair). queue_join (2 or 3 round
 * trips, and the mark's when due) says how it is written. Like the records'
 * collection it gets no index of leaselock's: it holds only the entries of
 * waiters (each deletes its own when done) and those that ran out until a
 * prune.
 */
#include <stdbool.h>

#ifdef LEASELOCK_WITH_MONGODB

#include "backend_mongodb_private.h"

#include <string.h>
#include <time.h>

/* findAndModify(q, u) on the queue, returning the new entry's arrival
 * and its seenAt, the write's own time (ms since the epoch, the server's
 * dates); *matched: whether an entry was modified or inserted. */
static bool ll_mongo_queue_fam (ll_mongo_conn_t *conn, const bson_t *q, const bson_t *u,
                                bool upsert, bool *matched, int64_t *arrived, int64_t *seen,
                                leaselock_error_t *err)
{
   static const char *const fields[] = { "arrived", "seenAt", NULL };
   bson_t *doc;
   bson_iter_t v, w;
   if (!ll_mongo_fam_run (conn, conn->queue, q, ll_mongo_fam_opts_fields (u, fields, upsert), &doc,
                          err))
      return false;
   *matched = doc && bson_iter_init_find (&v, doc, "arrived") && BSON_ITER_HOLDS_DATE_TIME (&v);
   if (*matched) {
      *arrived = bson_iter_date_time (&v);
      *seen = bson_iter_init_find (&w, doc, "seenAt") && BSON_ITER_HOLDS_DATE_TIME (&w)
                ? bson_iter_date_time (&w)
                : *arrived;
   }
   if (doc)
      bson_destroy (doc);
   return true;
}

void (*ll_test_mongo_mark_hook) (void);

/* findAndModify(q, u) on the records returning the mark's end (ms since
 * 1970, server clock) into *end_ms, 0 when nothing matched or the
 * document has no mark. */
static bool ll_mongo_mark_fam (ll_mongo_conn_t *conn, const bson_t *q, const bson_t *u, bool upsert,
                               int64_t *end_ms, leaselock_error_t *err)
{
   static const char *const fields[] = { "queueAt", "queueMs", NULL };
   bson_t *doc;
   bson_iter_t at, ms;
   *end_ms = 0;
   if (!ll_mongo_fam_run (conn, conn->coll, q, ll_mongo_fam_opts_fields (u, fields, upsert), &doc,
                          err))
      return false;
   if (doc && bson_iter_init_find (&at, doc, "queueAt") && BSON_ITER_HOLDS_DATE_TIME (&at) &&
       bson_iter_init_find (&ms, doc, "queueMs"))
      *end_ms = bson_iter_date_time (&at) + bson_iter_as_int64 (&ms);
   if (doc)
      bson_destroy (doc);
   return true;
}

/* The key's queue mark, set unless the connection knows it fresh
 * (ll_queue_mark_fresh); into *end_ms, its end. One
 * round trip; for a key without a record two (the upsert of a document
 * that holds only the mark); three when another join set a later mark
 * (read back by a findAndModify that changes nothing). */
static bool ll_mongo_queue_mark (ll_mongo_conn_t *conn, const ll_op_t *op, int64_t keep_ms,
                                 int64_t *end_ms, leaselock_error_t *err)
{
   int64_t now = ll_real_now_ms ();
   if (ll_queue_mark_fresh (&conn->mark, op, keep_ms, now)) {
      *end_ms = conn->mark.end;
      return true;
   }
   int64_t span_ms = keep_ms + LL_QUEUE_MARK_SPARE_MS;
   bson_t q = BSON_INITIALIZER, u = BSON_INITIALIZER, nq = BSON_INITIALIZER, nu = BSON_INITIALIZER;
   bool ok =
     (ll_mongo_mark_query (&q, op->key, op->key_len, span_ms) &&
      ll_mongo_mark_update (&u, span_ms) && ll_mongo_upsert_query (&nq, op->key, op->key_len) &&
      ll_mongo_mark_new_update (&nu, span_ms)) ||
     ll_mongo_nomem (err);
   conn->mark.key_len = 0;
   ok = ok && ll_mongo_mark_fam (conn, &q, &u, false, end_ms, err);
   if (ok && *end_ms == 0) {
      ok = ll_mongo_mark_fam (conn, &nq, &nu, true, end_ms, err);
      if (!ok && err->code == LEASELOCK_BUSY) { /* the record is there, its mark later */
         bson_t mx;                             /* a child of u: freed with it */
         bson_reinit (&q);
         bson_reinit (&u);
         ok = (ll_mongo_append_key (&q, op->key, op->key_len) &&
               BSON_APPEND_DOCUMENT_BEGIN (&u, "$max", &mx) &&
               BSON_APPEND_INT64 (&mx, "queueMs", 0) && bson_append_document_end (&u, &mx)) ||
              ll_mongo_nomem (err);
         ok = ok && ll_mongo_mark_fam (conn, &q, &u, false, end_ms, err);
      }
   }
   if (ok && *end_ms == 0)
      ok = ll_backend_fail (err, "mongodb", "queue_join", "no queue mark returned", NULL, NULL);
   if (ok)
      ll_queue_mark_keep (&conn->mark, op, *end_ms, now, span_ms);
   bson_destroy (&q);
   bson_destroy (&u);
   bson_destroy (&nq);
   bson_destroy (&nu);
   return ok;
}

/*
 * queue_join: the key's queue mark when due (ll_mongo_queue_mark), then 2
 * round trips when owner's entry is live, 3 when it is new or ran out.
 *  1. a findAndModify without upsert that refreshes a live entry (seenAt =
 *     now), keeping its arrival: {_id: {k, o}, $expr: live};
 *  2. when that matches nothing, an upsert on {_id: {k, o}} alone (no
 *     $expr in an upsert's query) that arrives now: nothing can make the
 *     entry live in between but owner itself;
 *  3. countDocuments of the live entries ordered before (arrived, owner),
 *     arrived being the date the server wrote.
 * No pipeline update, no $expr in an upsert's query: valid on MongoDB
 * 4.2+ and mongo-java-server alike. Order: (arrived, owner), the same
 * for every reader. MongoDB has no lock to serialise the joins of a key
 * by, and it writes documents side by side: a join stamped just before
 * ours, or in the same millisecond and ordered first by owner, may become
 * visible just after our write. So the count waits LL_MONGO_QUEUE_SETTLE_MS
 * after the write that made the arrival (the wait only delays the count:
 * liveness and order stay the server's); a refresh of an entry that
 * arrived that long before it counts at once, as every join stamped
 * before its arrival has landed since (a waiter's polls, and the
 * second's turn after a hand-off, pay no pause). Should an earlier join land later still, both read
 * the same place for a moment; their next joins read the order right, and
 * the key's reservation settles who goes first meanwhile.
 * mongo-java-server applies writes one at a time and needs no wait.
 */
#define LL_MONGO_QUEUE_SETTLE_MS 3
bool ll_mongo_queue_join (void *c, const ll_op_t *op, int64_t keep_ms, int64_t *ahead,
                          leaselock_error_t *err)
{
   ll_mongo_conn_t *conn = c;
   const char *key = op->key, *owner = op->owner;
   size_t key_len = op->key_len;
   bson_t q = BSON_INITIALIZER, u = BSON_INITIALIZER;
   bson_t aq = BSON_INITIALIZER, au = BSON_INITIALIZER, cq = BSON_INITIALIZER;
   bool matched = false;
   int64_t arrived = 0, seen = 0, mark = 0;
   bson_error_t e;

   bool ok = ll_mongo_queue_mark (conn, op, keep_ms, &mark, err);
   if (ll_test_mongo_mark_hook)
      ll_test_mongo_mark_hook ();
   ok = ok && ((ll_mongo_queue_live_query (&q, key, key_len, owner) &&
                ll_mongo_queue_refresh_update (&u, keep_ms, mark) &&
                ll_mongo_queue_id (&aq, key, key_len, owner) &&
                ll_mongo_queue_arrive_update (&au, key, key_len, owner, keep_ms, mark)) ||
               ll_mongo_nomem (err));
   ok = ok && ll_mongo_queue_fam (conn, &q, &u, false, &matched, &arrived, &seen, err);
   if (ok && !matched) {
      ok = ll_mongo_queue_fam (conn, &aq, &au, true, &matched, &arrived, &seen, err);
      if (ok && !matched)
         ok = ll_backend_fail (err, "mongodb", "queue_join", "no entry returned by the upsert",
                               NULL, NULL);
   }
   ok = ok &&
        (ll_mongo_queue_ahead_filter (&cq, key, key_len, owner, arrived) || ll_mongo_nomem (err));
   if (ok && seen - arrived < LL_MONGO_QUEUE_SETTLE_MS) {
      struct timespec ts = { 0, LL_MONGO_QUEUE_SETTLE_MS * 1000000L };
      while (nanosleep (&ts, &ts) != 0) {
      }
   }
   if (ok) {
      int64_t n = mongoc_collection_count_documents (conn->queue, &cq, NULL, NULL, NULL, &e);
      if (n >= 0)
         *ahead = n;
      else
         ok = ll_mongo_fail (conn, err, "countDocuments", &e);
   }
   bson_destroy (&q);
   bson_destroy (&u);
   bson_destroy (&aq);
   bson_destroy (&au);
   bson_destroy (&cq);
   return ok;
}

bool ll_mongo_queue_others (ll_mongo_conn_t *conn, const ll_op_t *op, bool *any,
                            leaselock_error_t *err)
{
   bson_t q = BSON_INITIALIZER, opts = BSON_INITIALIZER;
   bson_error_t e;
   bool ok = (ll_mongo_queue_others_filter (&q, op->key, op->key_len, op->owner) &&
              BSON_APPEND_INT64 (&opts, "limit", 1)) ||
             ll_mongo_nomem (err);
   if (ok) {
      int64_t n = mongoc_collection_count_documents (conn->queue, &q, &opts, NULL, NULL, &e);
      if (n >= 0)
         *any = n > 0;
      else
         ok = ll_mongo_fail (conn, err, "countDocuments", &e);
   }
   bson_destroy (&q);
   bson_destroy (&opts);
   return ok;
}

bool ll_mongo_queue_leave (void *c, const ll_op_t *op, leaselock_error_t *err)
{
   ll_mongo_conn_t *conn = c;
   bson_t q = BSON_INITIALIZER;
   bson_error_t e;
   if (!ll_mongo_queue_id (&q, op->key, op->key_len, op->owner)) {
      bson_destroy (&q);
      return ll_mongo_nomem (err);
   }
   bool ok = mongoc_collection_delete_one (conn->queue, &q, NULL, NULL, &e);
   bson_destroy (&q);
   if (!ok)
      return ll_mongo_fail (conn, err, "deleteOne", &e);
   ll_wake_touch_queue (&conn->wake); /* queue_leave_notifies */
   return true;
}

bool ll_mongo_queue_prune (ll_mongo_conn_t *conn, const char *prefix, size_t prefix_len,
                           int64_t older_than_ms, leaselock_error_t *err)
{
   bson_t q = BSON_INITIALIZER;
   bool ok =
     ll_mongo_queue_prune_filter (&q, prefix, prefix_len, older_than_ms) || ll_mongo_nomem (err);
   ok = ok && ll_mongo_delete_many (conn, conn->queue, &q, NULL, err);
   bson_destroy (&q);
   return ok;
}

#endif /* LEASELOCK_WITH_MONGODB */
