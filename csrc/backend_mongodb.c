/*
 * backend_mongodb.c - the MongoDB backend (mongodb:// and mongodb+srv://)
 * on libmongoc-1.0 (the 1.x API Debian ships): its vtable and the lease
 * operations. The URI is read in backend_mongodb_uri.c (which says what it
 * may hold and the defaults), the connection opened, closed and abandoned
 * in backend_mongodb_conn.c, the fair mode's queue kept in
 * backend_mongodb_queue.c; the commands' shapes are built by
 * stmt_mongodb.c. Built only with libmongoc (LEASELOCK_WITH_MONGODB);
 * without it backend_load.c reports UNSUPPORTED with the reason.
 *
 * One record per key, written only with the server's clock:
 *   { _id: key, owner: "<32 hex>" | null, fence: int64,
 *     acquiredAt: date, renewedAt: date, ttlMs: int64, holdMs: int64,
 *     holder: { host, pid, label },
 *     nextOwner: "<32 hex>" | null, nextAt: date, nextMs: int64,
 *     nextWaitedMs: int64, holds: int64, fairQueued: bool,
 *     queueAt: date, queueMs: int64 }   the queue mark (stmt_mongodb.h)
 * expiry = max(renewedAt + ttlMs, acquiredAt + holdMs). Dates come from
 * $currentDate; comparisons use $expr with $$NOW. holdMs is 0 except after a
 * release with min_hold, which writes renewedAt = now, ttlMs = 0 and
 * holdMs = min_hold, so the expiry becomes max(now, acquiredAt + min_hold)
 * without a pipeline update. A record without owner is free only once that
 * expiry is past.
 *
 * The next owner's reservation (acquire_wait): nextOwner, until = nextAt +
 * nextMs, since = nextAt - nextWaitedMs, written together by one claim
 * ($currentDate for nextAt). It is live while nextOwner is a string and
 * until > $$NOW. nextOwner null (a take clears it) or missing (a record
 * written before reservations existed) is no reservation: the queries read
 * it through $ifNull, which treats missing as null on MongoDB and
 * mongo-java-server alike, and until is then null or missing (null sorts
 * below every date), so the old records need no migration.
 *
 * acquire is a conditional findAndModify without upsert,
 *   { _id: key, $expr: { $or: [ { $eq: ["$owner", owner] },
 *       { $and: [ expired, { $or: [ no nextOwner, until <= $$NOW,
 *                                   { $eq: ["$nextOwner", owner] } ] } ] } ] } },
 * and only when it matches nothing an upsert whose query cannot match an
 * existing record, { _id: key, fence: { $exists: false } }: a record that
 * exists answers duplicate key 11000, which is BUSY (and nothing else is).
 * Real MongoDB refuses $expr in an upsert's query and mongo-java-server has
 * no pipeline updates; this shape is valid on both. Both set nextOwner to
 * null. acquire_wait sends the same conditional findAndModify and, when it
 * matches nothing, the claim: a findAndModify without upsert (its new
 * record tells the waiter the record's time left), { _id: key, $expr:
 * { $or: [ no nextOwner, until <= $$NOW, { $eq: ["$nextOwner", owner] },
 * since > $$NOW - waited_ms ] } }, that writes the reservation; only when
 * that matches nothing too (no record, or an older waiter's reservation)
 * the upsert. Without pipeline updates one statement cannot choose between
 * the take's update and the claim's: hence the second (and third) round
 * trip, on the busy path only.
 *
 * fairQueued says that the owner took the key from the fair queue (set by
 * every take): its release, a findAndModify returning the reservation
 * and fairQueued, then wakes this machine's listeners (wake_file.c), as
 * it does when it leaves a live reservation.
 *
 * holds, the owner's reentrant holds, is set to 1 by every take. hold is
 * a findAndModify that $incs it on the owner's live record (renew's query)
 * when the count may move, holds >= 1 for +1, > 1 for -1 (it never goes
 * below 1), returning the new count: 1 round trip. When that matches
 * nothing, a second findAndModify on the owner's live record alone, $max
 * {holds: 1}, tells "not held" (no document) from "at 1 already" (a -1
 * then succeeds with 1), and gives a record written before hold counts
 * (no holds field: 1 while owned, as inspect reads it) its 1, after which
 * the first try runs again; it runs again too when a concurrent +1 of the
 * same owner moved the count in between. A conditional $inc and $max,
 * never a pipeline update nor an upsert: valid on MongoDB 4.2+ and
 * mongo-java-server alike.
 *
 * Failover (backend_mongodb_primary.c): before a grant, the primary the
 * driver writes to is checked against the one recorded (BUSY during the
 * lock-delay after a new one), and a take whose fence is below the fence
 * floor is followed by a second findAndModify, {_id: key, owner} $max
 * {fence: floor}, before the lease is returned: $inc and $max cannot both
 * write the fence in one update without a pipeline, so only the first
 * grant of a key after a failover pays the second round trip. TTLs over
 * the collection's max_ttl are refused by acquire and renew.
 *
 * prune's filter adds "no live reservation" to "expired", and a second
 * deleteMany removes the queue entries that ran out
 * (backend_mongodb_queue.c). force_release reads the record, then frees it
 * with an update conditional on what it read (see ll_mongo_force_release).
 */
#include "ll_internal.h"

#ifdef LEASELOCK_WITH_MONGODB

#include "backend_mongodb_private.h"

#include <stdio.h>
#include <string.h>

/* ---- round trips ------------------------------------------------------- */

/* Runs findAndModify(query, update) on the records returning the new
 * document's fence (acquire's tries: ll_mongo_fam_opts, as the benchmark
 * sends them). *matched: whether a document was modified or inserted; an
 * upsert that finds the key there is BUSY. */
static bool ll_mongo_fam (ll_mongo_conn_t *conn, const bson_t *query, const bson_t *update,
                          bool upsert, bool *matched, int64_t *fence, leaselock_error_t *err)
{
   bson_t *doc;
   bson_iter_t v;
   if (!ll_mongo_fam_run (conn, conn->coll, query, ll_mongo_fam_opts (update, upsert), &doc, err))
      return false;
   *matched = doc && bson_iter_init_find (&v, doc, "fence");
   if (*matched && fence)
      *fence = bson_iter_as_int64 (&v);
   if (doc)
      bson_destroy (doc);
   return true;
}

/* findAndModify(q, u) on the records without upsert, returning the fields
 * named in fields (NULL-terminated) of the new document: *doc a copy of
 * them (the caller destroys it), NULL when nothing matched. */
static bool ll_mongo_fam_new (ll_mongo_conn_t *conn, const bson_t *q, const bson_t *u,
                              const char *const *fields, bson_t **doc, leaselock_error_t *err)
{
   return ll_mongo_fam_run (conn, conn->coll, q, ll_mongo_fam_opts_fields (u, fields, false), doc,
                            err);
}

/* ---- operations -------------------------------------------------------- */

/* Builds acquire's conditional query and its update into q and u. */
static bool ll_mongo_take_command (bson_t *q, bson_t *u, const ll_take_t *t, leaselock_error_t *err)
{
   const ll_holder_t *holder = t->holder;
   if (ll_mongo_acquire_query (q, t->op.key, t->op.key_len, t->op.owner) &&
       ll_mongo_acquire_update (
         u, t->op.owner, t->ttl_ms, holder && holder->host ? holder->host : "",
         holder ? holder->pid : 0, holder && holder->label ? holder->label : "", t->queued))
      return true;
   return ll_mongo_nomem (err);
}

/* acquire's second try with update u: an upsert whose query matches no
 * existing record. A record that exists answers 11000: BUSY. */
static bool ll_mongo_take_new (ll_mongo_conn_t *conn, const char *key, size_t key_len,
                               const bson_t *u, int64_t *fence, leaselock_error_t *err)
{
   bson_t q = BSON_INITIALIZER;
   bool ok, matched = false;

   if (ll_mongo_upsert_query (&q, key, key_len))
      ok = ll_mongo_fam (conn, &q, u, true, &matched, fence, err);
   else
      ok = ll_mongo_nomem (err);
   bson_destroy (&q);
   if (ok && !matched)
      ok = ll_backend_fail (err, "mongodb", "findAndModify upsert",
                            "no document returned for the key", NULL, NULL);
   return ok;
}

/*
 * A fair first take (no command reads one collection and writes another),
 * with u the take's update:
 *  1. the take of a record whose queue mark is not live (no queue entry is
 *     live past it: ll_mongo_mark_query), which is all an uncontended
 *     fair acquire sends, as a plain one does; else the upsert of a key
 *     without a record (none has a live entry), as a plain acquire's;
 *  2. the key is there, not taken: held, reserved, or its mark live (up
 *     to LL_QUEUE_MARK_SPARE_MS after its queue emptied). BUSY while
 *     another owner is queued (a round trip of its own: a waiter that
 *     joins after it arrived after this take asked), else the plain take.
 * Where this connection knows the mark live (it joined the key's queue
 * lately), step 1 could take nothing but a new key: step 2 at once, and
 * the upsert after it.
 */
static bool ll_mongo_acquire_fair (ll_mongo_conn_t *conn, const ll_take_t *t, bson_t *u,
                                   int64_t *fence, leaselock_error_t *err)
{
   const ll_op_t *op = &t->op;
   bool known = ll_queue_mark_left (&conn->mark, op, ll_real_now_ms ()) > 0, matched = false,
        queued = false, ok = true;
   bson_t q = BSON_INITIALIZER;
   if (!known) {
      ok = (ll_mongo_acquire_fair_query (&q, op->key, op->key_len, op->owner) ||
            ll_mongo_nomem (err)) &&
           ll_mongo_fam (conn, &q, u, false, &matched, fence, err);
      bson_destroy (&q);
      if (!ok || matched || ll_mongo_take_new (conn, op->key, op->key_len, u, fence, err))
         return ok;
      if (err->code != LEASELOCK_BUSY) /* BUSY: the record is there */
         return false;
   }
   if (!ll_mongo_queue_others (conn, op, &queued, err))
      return false;
   if (queued)
      return ll_error_set (err, LEASELOCK_BUSY, "held by another owner");
   bson_init (&q);
   ok = (ll_mongo_acquire_query (&q, op->key, op->key_len, op->owner) || ll_mongo_nomem (err)) &&
        ll_mongo_fam (conn, &q, u, false, &matched, fence, err);
   bson_destroy (&q);
   if (ok && !matched && known)
      return ll_mongo_take_new (conn, op->key, op->key_len, u, fence, err);
   return ok && (matched || ll_error_set (err, LEASELOCK_BUSY, "held by another owner"));
}

static bool ll_mongo_acquire (void *c, const ll_take_t *t, int64_t *fence, leaselock_error_t *err)
{
   ll_mongo_conn_t *conn = c;
   if (!ll_mongo_grant_ready (conn, t->ttl_ms, err))
      return false;
   bson_t q = BSON_INITIALIZER, u = BSON_INITIALIZER;
   bool matched = false;
   bool ok = ll_mongo_take_command (&q, &u, t, err);
   if (ok && t->fair) {
      ok = ll_mongo_acquire_fair (conn, t, &u, fence, err);
   } else if (ok) {
      ok = ll_mongo_fam (conn, &q, &u, false, &matched, fence, err);
      /* No such record, or a live one of another owner (or reserved for
       * another waiter): the upsert. */
      if (ok && !matched)
         ok = ll_mongo_take_new (conn, t->op.key, t->op.key_len, &u, fence, err);
   }
   bson_destroy (&q);
   bson_destroy (&u);
   return ok && ll_mongo_fence_floor (conn, &t->op, fence, err);
}

/* The claim (ll_mongo_claim_query), a findAndModify without upsert:
 * *reserved when it matched, and then *left_ms, the record's time left at
 * the claim by the server's clock: max(renewedAt + ttlMs, acquiredAt +
 * holdMs) - nextAt, nextAt being the claim's own $currentDate (-1 when a
 * field is missing). */
static bool ll_mongo_claim (ll_mongo_conn_t *conn, const bson_t *q, const bson_t *u, bool *reserved,
                            int64_t *left_ms, leaselock_error_t *err)
{
   static const char *const fields[] = { "renewedAt", "ttlMs",  "acquiredAt",
                                         "holdMs",    "nextAt", NULL };
   bson_t *doc;
   bson_iter_t v;
   int64_t t[5];
   *left_ms = -1;
   if (!ll_mongo_fam_new (conn, q, u, fields, &doc, err))
      return false;
   *reserved = doc != NULL;
   bool all = doc != NULL;
   for (int i = 0; all && i < 5; i++) {
      all = bson_iter_init_find (&v, doc, fields[i]);
      if (all && (i == 1 || i == 3))
         t[i] = bson_iter_as_int64 (&v);
      else if (all)
         all = BSON_ITER_HOLDS_DATE_TIME (&v) && ((t[i] = bson_iter_date_time (&v)), true);
   }
   if (all) {
      int64_t end = t[0] + t[1] > t[2] + t[3] ? t[0] + t[1] : t[2] + t[3];
      *left_ms = end > t[4] ? end - t[4] : 0;
   }
   if (doc)
      bson_destroy (doc);
   return true;
}

/* acquire_wait: acquire's conditional findAndModify; when it matches
 * nothing, the claim (ll_mongo_claim, also a findAndModify): when that
 * matches, the record exists and owner is its next owner: BUSY with
 * *reserved (should the key have come free in between, the reservation
 * keeps it for owner's next try). When it matches nothing too, the record
 * is missing or reserved for an older waiter: acquire's upsert settles
 * which (it takes a missing key; 11000 is BUSY, not reserved). Round
 * trips: 1 when it takes an existing record, 2 when busy and reserved, 3
 * otherwise. */
static bool ll_mongo_acquire_wait (void *c, const ll_take_t *t, ll_taken_t *out,
                                   leaselock_error_t *err)
{
   ll_mongo_conn_t *conn = c;
   bson_t q = BSON_INITIALIZER, u = BSON_INITIALIZER;
   bson_t cq = BSON_INITIALIZER, cu = BSON_INITIALIZER;
   bool matched = false;

   out->reserved = false;
   out->left_ms = -1;
   bool ok = ll_mongo_grant_ready (conn, t->ttl_ms, err) &&
             ll_mongo_take_command (&q, &u, t, err) &&
             ll_mongo_fam (conn, &q, &u, false, &matched, &out->fence, err);
   if (ok && !matched) {
      ok = (ll_mongo_claim_query (&cq, t->op.key, t->op.key_len, t->op.owner, t->waited_ms) &&
            ll_mongo_claim_update (&cu, t->op.owner, t->reserve_ms, t->waited_ms)) ||
           ll_mongo_nomem (err);
      ok = ok && ll_mongo_claim (conn, &cq, &cu, &out->reserved, &out->left_ms, err);
      if (ok && out->reserved)
         ok = ll_error_set (err, LEASELOCK_BUSY, "held by another owner");
      else if (ok)
         ok = ll_mongo_take_new (conn, t->op.key, t->op.key_len, &u, &out->fence, err);
   }
   bson_destroy (&q);
   bson_destroy (&u);
   bson_destroy (&cq);
   bson_destroy (&cu);
   return ok && ll_mongo_fence_floor (conn, &t->op, &out->fence, err);
}

static bool ll_mongo_renew (void *c, const ll_op_t *op, int64_t ttl_ms, leaselock_error_t *err)
{
   ll_mongo_conn_t *conn = c;
   if (!ll_primary_ttl_ok (&conn->primary, "mongodb", ttl_ms, err))
      return false;
   bson_t q = BSON_INITIALIZER, u = BSON_INITIALIZER;
   bool ok = ll_mongo_live_owned_query (&q, op->key, op->key_len, op->owner) &&
             ll_mongo_renew_update (&u, ttl_ms);
   return ll_mongo_update_owned (c, &q, &u, ok, err);
}

/* Whether a release's new document (ll_mongo_release_opts) says that a
 * waiter may be next: the owner took the key from the fair queue
 * (fairQueued: others may wait behind it, and the first of them may not
 * have claimed the reservation yet), or a live reservation, nextOwner a
 * string and nextAt + nextMs after renewedAt, the release's own time, all
 * by the server's clock. */
static bool ll_mongo_next_live (const bson_t *doc)
{
   bson_iter_t o, at, ms, now;
   if (bson_iter_init_find (&o, doc, "fairQueued") && BSON_ITER_HOLDS_BOOL (&o) &&
       bson_iter_bool (&o))
      return true;
   return bson_iter_init_find (&o, doc, "nextOwner") && BSON_ITER_HOLDS_UTF8 (&o) &&
          bson_iter_init_find (&at, doc, "nextAt") && BSON_ITER_HOLDS_DATE_TIME (&at) &&
          bson_iter_init_find (&ms, doc, "nextMs") &&
          bson_iter_init_find (&now, doc, "renewedAt") && BSON_ITER_HOLDS_DATE_TIME (&now) &&
          bson_iter_date_time (&at) + bson_iter_as_int64 (&ms) > bson_iter_date_time (&now);
}

/* release: a findAndModify, one round trip as an update would be, whose
 * new document says whether a waiter is next: only then are this
 * machine's listeners woken (waking them on every release would cost each
 * a request for nothing). */
static bool ll_mongo_release (void *c, const ll_op_t *op, int64_t min_hold_ms,
                              leaselock_error_t *err)
{
   ll_mongo_conn_t *conn = c;
   bson_t q = BSON_INITIALIZER, u = BSON_INITIALIZER, *doc = NULL;
   bool ok = (ll_mongo_owned_query (&q, op->key, op->key_len, op->owner) &&
              ll_mongo_free_update (&u, min_hold_ms)) ||
             ll_mongo_nomem (err);
   ok = ok && ll_mongo_fam_run (conn, conn->coll, &q, ll_mongo_release_opts (&u), &doc, err);
   bson_destroy (&q);
   bson_destroy (&u);
   if (!ok)
      return false;
   if (!doc)
      return ll_error_set (err, LEASELOCK_NOT_HELD, "the lease is no longer held by this owner");
   bool next = ll_mongo_next_live (doc);
   bson_destroy (doc);
   if (next)
      ll_wake_touch (&conn->wake);
   return true;
}

/* findAndModify(q, u) without upsert returning the new document's holds,
 * when q and u were built (built false: NOMEM); frees q and u (as
 * ll_mongo_update_owned does). *matched whether a document matched. */
static bool ll_mongo_fam_holds (ll_mongo_conn_t *conn, bson_t *q, bson_t *u, bool built,
                                bool *matched, int64_t *holds, leaselock_error_t *err)
{
   static const char *const fields[] = { "holds", NULL };
   bson_t *doc = NULL;
   bson_iter_t v;
   bool ok = (built || ll_mongo_nomem (err)) && ll_mongo_fam_new (conn, q, u, fields, &doc, err);
   bson_destroy (q);
   bson_destroy (u);
   if (!ok)
      return false;
   *matched = doc != NULL;
   if (*matched)
      *holds = bson_iter_init_find (&v, doc, "holds") ? bson_iter_as_int64 (&v) : 1;
   if (doc)
      bson_destroy (doc);
   return true;
}

/* The failure of an operation (what) that gave up after tries tries, what
 * it read having changed under each (msg says what). Returns false. */
static bool ll_mongo_gave_up (leaselock_error_t *err, const char *what, const char *msg, int tries)
{
   char detail[32];
   snprintf (detail, sizeof detail, "%d tries", tries);
   return ll_backend_fail (err, "mongodb", what, msg, NULL, detail);
}

/* hold (the top comment says how): 1 round trip when the count moves, 2
 * when -1 finds it at 1 or the lease is not held, 3 for +1 on a record
 * written before hold counts; again while the same owner's concurrent
 * holds move the count between the two tries. */
#define LL_MONGO_HOLD_TRIES 16

static bool ll_mongo_hold (void *c, const ll_op_t *op, int delta, int64_t *holds,
                           leaselock_error_t *err)
{
   ll_mongo_conn_t *conn = c;
   for (int i = 0; i < LL_MONGO_HOLD_TRIES; i++) {
      bson_t q = BSON_INITIALIZER, u = BSON_INITIALIZER;
      bool matched = false;
      int64_t n = 0;
      bool built = ll_mongo_hold_query (&q, op->key, op->key_len, op->owner, delta) &&
                   ll_mongo_hold_update (&u, delta);
      if (!ll_mongo_fam_holds (conn, &q, &u, built, &matched, &n, err))
         return false;
      if (matched) {
         *holds = n;
         return true;
      }
      bson_init (&q);
      u = (bson_t)BSON_INITIALIZER;
      built = ll_mongo_live_owned_query (&q, op->key, op->key_len, op->owner) &&
              ll_mongo_hold_floor_update (&u);
      if (!ll_mongo_fam_holds (conn, &q, &u, built, &matched, &n, err))
         return false;
      if (!matched)
         return ll_error_set (err, LEASELOCK_NOT_HELD, "the lease is no longer held by this owner");
      if (delta < 0 && n <= 1) {
         *holds = 1; /* at 1 already: never below */
         return true;
      }
   }
   return ll_mongo_gave_up (err, "hold", "the hold count kept changing", LL_MONGO_HOLD_TRIES);
}

/* Copies a utf8 field of doc into buf (truncated, NUL-terminated). */
static void ll_mongo_copy_str (const bson_iter_t *it, char *buf, size_t size, size_t *len_out)
{
   uint32_t len = 0;
   const char *s = BSON_ITER_HOLDS_UTF8 (it) ? bson_iter_utf8 (it, &len) : "";
   size_t n = ll_copy_clipped (buf, size, s, len);
   if (len_out)
      *len_out = n;
}

/* Fills rec from a document shaped by ll_mongo_record_pipeline. */
static void ll_mongo_fill_record (const bson_t *doc, leaselock_record_t *rec)
{
   bson_iter_t it, h;

   memset (rec, 0, sizeof *rec);
   if (!bson_iter_init (&it, doc))
      return;
   while (bson_iter_next (&it)) {
      const char *k = bson_iter_key (&it);
      if (strcmp (k, "_id") == 0) {
         ll_mongo_copy_str (&it, rec->key, sizeof rec->key, &rec->key_len);
      } else if (strcmp (k, "owner") == 0) {
         if (BSON_ITER_HOLDS_UTF8 (&it))
            ll_mongo_copy_str (&it, rec->owner, sizeof rec->owner, NULL);
      } else if (strcmp (k, "fence") == 0) {
         rec->fence = bson_iter_as_int64 (&it);
      } else if (strcmp (k, "holds") == 0) {
         rec->holds = bson_iter_as_int64 (&it);
      } else if (strcmp (k, "leftMs") == 0) {
         /* null when the record lacks the fields: expired */
         rec->expires_in_ms = (BSON_ITER_HOLDS_NUMBER (&it) || BSON_ITER_HOLDS_INT (&it))
                                ? bson_iter_as_int64 (&it)
                                : 0;
      } else if (strcmp (k, "holder") == 0 && BSON_ITER_HOLDS_DOCUMENT (&it) &&
                 bson_iter_recurse (&it, &h)) {
         while (bson_iter_next (&h)) {
            const char *hk = bson_iter_key (&h);
            if (strcmp (hk, "host") == 0)
               ll_mongo_copy_str (&h, rec->host, sizeof rec->host, NULL);
            else if (strcmp (hk, "label") == 0)
               ll_mongo_copy_str (&h, rec->label, sizeof rec->label, NULL);
            else if (strcmp (hk, "pid") == 0)
               rec->pid = bson_iter_as_int64 (&h);
         }
      }
   }
   /* Released: no holds (the stored count is stale); owned without the
    * field (written before hold counts): 1. */
   if (!rec->owner[0])
      rec->holds = 0;
   else if (rec->holds < 1)
      rec->holds = 1;
}

/* Runs the record pipeline for match and calls fn for each record. */
static bool ll_mongo_records (ll_mongo_conn_t *conn, const bson_t *match,
                              bool (*fn) (const leaselock_record_t *, void *), void *data,
                              leaselock_error_t *err)
{
   bson_t pipeline = BSON_INITIALIZER;
   mongoc_cursor_t *cursor;
   const bson_t *doc;
   bson_error_t e;
   leaselock_record_t rec;
   bool ok = true;

   if (!ll_mongo_record_pipeline (&pipeline, match)) {
      bson_destroy (&pipeline);
      return ll_mongo_nomem (err);
   }
   cursor = mongoc_collection_aggregate (conn->coll, MONGOC_QUERY_NONE, &pipeline, NULL, NULL);
   bson_destroy (&pipeline);
   while (mongoc_cursor_next (cursor, &doc)) {
      ll_mongo_fill_record (doc, &rec);
      if (!fn (&rec, data))
         break;
   }
   if (mongoc_cursor_error (cursor, &e))
      ok = ll_mongo_fail (conn, err, "aggregate", &e);
   mongoc_cursor_destroy (cursor);
   return ok;
}

static bool ll_mongo_inspect (void *c, const ll_op_t *op, leaselock_record_t *rec, bool *found,
                              leaselock_error_t *err)
{
   bson_t match = BSON_INITIALIZER;
   ll_record_one_t one = { rec, found };
   bool ok;

   *found = false;
   if (!ll_mongo_append_key (&match, op->key, op->key_len)) {
      bson_destroy (&match);
      return ll_mongo_nomem (err);
   }
   ok = ll_mongo_records (c, &match, ll_record_take_one, &one, err);
   bson_destroy (&match);
   return ok;
}

static bool ll_mongo_list (void *c, const char *prefix, size_t prefix_len, leaselock_record_cb fn,
                           void *user_data, leaselock_error_t *err)
{
   bson_t match = BSON_INITIALIZER;
   bool ok = ll_mongo_prefix_match (&match, prefix, prefix_len) || ll_mongo_nomem (err);
   ok = ok && ll_mongo_records (c, &match, fn, user_data, err);
   bson_destroy (&match);
   return ok;
}

/*
 * force_release: owner cleared and expiry = now whatever the owner, fence
 * kept; *took when a live lease was taken away. *took must be judged by the
 * server clock at the moment of the write, which one classic findAndModify
 * cannot report (it returns the document before or after the update, never
 * "now" with the old expiry; pipeline updates, which could, are missing on
 * mongo-java-server). So: read the record (the inspect pipeline, expiry
 * judged by $$NOW), then free it with an update conditional on what was
 * read: the same fence (no acquire since), an owner or none as read (no
 * release since), and, when it was live, still live by $$NOW. If anything
 * changed in between, read again. An unconditional second write could
 * clear a lease acquired in between while reporting that none was taken.
 */
#define LL_MONGO_FORCE_TRIES 16

static bool ll_mongo_force_release (void *c, const ll_op_t *op, bool *took, leaselock_error_t *err)
{
   ll_mongo_conn_t *conn = c;

   *took = false;
   for (int i = 0; i < LL_MONGO_FORCE_TRIES; i++) {
      leaselock_record_t rec;
      bson_t q = BSON_INITIALIZER, u = BSON_INITIALIZER;
      bool found = false, matched = false, ok = true, live;

      if (!ll_mongo_inspect (conn, op, &rec, &found, err))
         return false;
      if (!found)
         return true; /* no record: nothing to release */
      live = rec.owner[0] && rec.expires_in_ms > 0;
      ok = ll_mongo_force_query (&q, op->key, op->key_len, rec.fence, rec.owner[0] != '\0', live) &&
           ll_mongo_free_update (&u, 0);
      if (!ok)
         ll_mongo_nomem (err);
      else
         ok = ll_mongo_update (conn, &q, &u, &matched, err);
      bson_destroy (&q);
      bson_destroy (&u);
      if (!ok)
         return false;
      if (matched) {
         *took = live;
         ll_wake_touch (&conn->wake); /* rare: whoever waits tries now */
         return true;
      }
   }
   return ll_mongo_gave_up (err, "force_release", "the record kept changing", LL_MONGO_FORCE_TRIES);
}

/* prune: one deleteMany of the expired records under the prefix
 * (ll_mongo_prune_filter), *count from the reply's deletedCount; then the
 * documents that only held a queue mark, and the queue's entries that ran
 * out. */
static bool ll_mongo_prune (void *c, const char *prefix, size_t prefix_len, int64_t older_than_ms,
                            int64_t *count, leaselock_error_t *err)
{
   ll_mongo_conn_t *conn = c;
   bson_t q = BSON_INITIALIZER;

   *count = 0;
   bool ok = ll_mongo_prune_filter (&q, prefix, prefix_len, older_than_ms) || ll_mongo_nomem (err);
   ok = ok && ll_mongo_delete_many (conn, conn->coll, &q, count, err);
   bson_destroy (&q);
   /* The documents that only held a queue mark, not counted (not records). */
   bson_init (&q);
   ok =
     ok &&
     (ll_mongo_mark_prune_filter (&q, prefix, prefix_len, older_than_ms) || ll_mongo_nomem (err)) &&
     ll_mongo_delete_many (conn, conn->coll, &q, NULL, err);
   bson_destroy (&q);
   return ok && ll_mongo_queue_prune (conn, prefix, prefix_len, older_than_ms, err);
}

/* Release notifications for this machine's processes (wake_file.c). */
LL_WAKE_HOST_WATCH (ll_mongo, "mongodb", LL_MONGO_COLL_OPTION)

const ll_backend_t ll_backend_mongodb = {
   .name = "mongodb",
   .schemes = { "mongodb", "mongodb+srv", NULL },
   LL_BACKEND_CONN_OPS (ll_mongo),
   .acquire = ll_mongo_acquire,
   .fair_take = true,
   .queue_leave_notifies = true,
   LL_BACKEND_LEASE_OPS (ll_mongo),
   LL_BACKEND_HOST_WATCH_OPS (ll_mongo),
   .primary = ll_mongo_primary,
};

#endif /* LEASELOCK_WITH_MONGODB */
