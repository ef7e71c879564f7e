/*
 * stmt_mongodb.h - the MongoDB backend's command shapes, written once: the
 * queries, updates and the record pipeline that the backend
 * (backend_mongodb*.c) sends, which bench/core_mongodb.c's bare libmongoc
 * program sends too (so the benchmark compares the engine with the very
 * same commands). Built by stmt_mongodb.c, compiled only with
 * LEASELOCK_WITH_MONGODB: no driver header reaches the engine.
 *
 * The record (backend_mongodb.c says why it is shaped so):
 *   { _id: key, owner: "<32 hex>" | null, fence: int64,
 *     acquiredAt: date, renewedAt: date, ttlMs: int64, holdMs: int64,
 *     holder: { host, pid, label },
 *     nextOwner: "<32 hex>" | null, nextAt: date, nextMs: int64,
 *     nextWaitedMs: int64, holds: int64 }
 *   expiry = max(renewedAt + ttlMs, acquiredAt + holdMs)
 *   holds: the owner's reentrant holds, 1 from the acquire (missing, in a
 *     record written before hold counts: 1 while owned)
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
 *   now + keep, so the sum is taken when it is read), and never past
 *   markEnd: the end of the key's queue mark as the join read it
 * The record's queue mark: queueAt: date, queueMs: int64; no entry of the
 * key is live past queueAt + queueMs (ll_mongo_mark_query)
 *
 * Ownership, for every builder: the documents (q, u, doc, p, match) are
 * the caller's; a builder appends to them and returns false when out of
 * memory (the documents are then to be destroyed). The strings (key,
 * owner, prefix, host, label) are borrowed for the call only; key and
 * prefix are byte strings of the given length, owner is LL_MONGO_OWNER_LEN
 * bytes (no NUL needed).
 */
#ifndef LL_STMT_MONGODB_H
#define LL_STMT_MONGODB_H

#include <mongoc/mongoc.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LL_MONGO_DEFAULT_DB "leaselock"
#define LL_MONGO_DEFAULT_COLL "leaselock"
/* The URI option that names the collection (leaselock's own, taken out
 * before the URI reaches the driver; case-insensitive). */
#define LL_MONGO_COLL_OPTION "leaselockCollection"
/* The queue's collection: the records' name with this suffix. */
#define LL_MONGO_QUEUE_SUFFIX ".queue"
/* The failover record's collection (below): the records' name with this. */
#define LL_MONGO_META_SUFFIX ".meta"
/* The write concern's timeout with the default w=majority. */
#define LL_MONGO_WTIMEOUT_MS 5000
/* The server's answer to an upsert whose _id exists. */
#define LL_MONGO_DUPLICATE_KEY 11000
/* The owner token's length (LEASELOCK_OWNER_LEN). */
#define LL_MONGO_OWNER_LEN 32

/* ---- the records ---------------------------------------------------------- */

/* Appends {_id: key} to doc: inspect's match. */
bool ll_mongo_append_key (bson_t *doc, const char *key, size_t key_len);

/* {_id: key, owner: owner}: the record when it is this owner's (release's
 * query). */
bool ll_mongo_owned_query (bson_t *q, const char *key, size_t key_len, const char *owner);

/* {_id: key, owner: owner, $expr: live}: the owner's live record (renew's
 * query, and hold's second try's). */
bool ll_mongo_live_owned_query (bson_t *q, const char *key, size_t key_len, const char *owner);

/* acquire's first try, a findAndModify without upsert: the record when it
 * is owner's, or expired and not reserved for another waiter:
 * {_id: key, $expr: {$or: [{$eq: ["$owner", owner]},
 *                          {$and: [expired, next_free (owner)]}]}} */
bool ll_mongo_acquire_query (bson_t *q, const char *key, size_t key_len, const char *owner);

/* A fair acquire's first try: ll_mongo_acquire_query whose $and also asks
 * that the key's queue mark be not live ({$lte: [mark end, "$$NOW"]}, a
 * record without one too): no queue entry is live past the mark. */
bool ll_mongo_acquire_fair_query (bson_t *q, const char *key, size_t key_len, const char *owner);

/* The key's queue mark, set by a join before its entry (backend_mongodb_
 * queue.c's ll_mongo_queue_mark): a findAndModify without upsert of the
 * record whose mark ends before now + span_ms,
 * {_id: key, $expr: {$lt: [{$add: [mark end, -span_ms]}, "$$NOW"]}} ->
 * queueAt = now, queueMs = span_ms (so the mark never moves earlier); and
 * for a key without a record, the upsert (ll_mongo_upsert_query) of a
 * document that only holds the mark: fence 0, owner null, which inspect,
 * list and prune do not take for a record, and which a take makes one
 * (fence 1). */
bool ll_mongo_mark_query (bson_t *q, const char *key, size_t key_len, int64_t span_ms);
bool ll_mongo_mark_update (bson_t *u, int64_t span_ms);
bool ll_mongo_mark_new_update (bson_t *u, int64_t span_ms);

/* acquire's second try, an upsert whose query matches no existing record:
 * {_id: key, fence: {$exists: false}} (a record that exists answers
 * LL_MONGO_DUPLICATE_KEY). */
bool ll_mongo_upsert_query (bson_t *q, const char *key, size_t key_len);

/* The acquire update: owner, ttl, holder, dates from the server, fence+1,
 * no next owner (the reservation that let the take through is over),
 * fairQueued = queued (ll_take_t's queued, which the release reads).
 * host and label: NULL reads as "". */
bool ll_mongo_acquire_update (bson_t *u, const char *owner, int64_t ttl_ms, const char *host,
                              int64_t pid, const char *label, bool queued);

/* acquire_wait's claim, a findAndModify without upsert, when the take found
 * the key busy: {_id: key, $expr: next_free (owner, waited_ms)} (the
 * query) -> nextOwner = owner, nextAt = now, nextMs = reserve_ms,
 * nextWaitedMs = waited_ms (the update; until = now + reserve_ms, since =
 * now - waited_ms). */
bool ll_mongo_claim_query (bson_t *q, const char *key, size_t key_len, const char *owner,
                           int64_t waited_ms);
bool ll_mongo_claim_update (bson_t *u, const char *owner, int64_t reserve_ms, int64_t waited_ms);

/* renew's update (its query: ll_mongo_live_owned_query): renewedAt = now,
 * ttlMs = ttl. */
bool ll_mongo_renew_update (bson_t *u, int64_t ttl_ms);

/* hold's first try, a findAndModify without upsert: the owner's live
 * record whose count can move by delta without going below 1,
 * {_id, owner, holds: {$gte: 1} (delta +1) or {$gt: 1} (-1), $expr: live}
 * -> $inc {holds: delta} (ll_mongo_hold_update). A record without holds
 * (written before hold counts) does not match: $inc would start it at
 * delta, not 1 + delta. */
bool ll_mongo_hold_query (bson_t *q, const char *key, size_t key_len, const char *owner, int delta);
bool ll_mongo_hold_update (bson_t *u, int delta);

/* hold's second try, when the first matched nothing: the owner's live
 * record whatever its count (ll_mongo_live_owned_query) -> $max {holds:
 * 1}: a record without holds gets 1, any other keeps its count. No
 * document back: not held; else the count says whether it was at 1. */
bool ll_mongo_hold_floor_update (bson_t *u);

/* The update that frees a record (release, force_release): owner null,
 * renewedAt = now, ttlMs = 0, holdMs = hold_ms, so the expiry becomes
 * max(now, acquiredAt + hold_ms). */
bool ll_mongo_free_update (bson_t *u, int64_t hold_ms);

/* force_release's update is conditional on the record as it was read:
 * {_id: key, fence: fence, owner: a string when owned, else null or
 * missing, and, when it was live, $expr: still live}. */
bool ll_mongo_force_query (bson_t *q, const char *key, size_t key_len, int64_t fence, bool owned,
                           bool live);

/* list's match: {_id: /^prefix/}, an anchored regex with every
 * non-alphanumeric ASCII byte escaped (the prefix is text, never a
 * pattern); nothing for the empty prefix. */
bool ll_mongo_prefix_match (bson_t *match, const char *prefix, size_t prefix_len);

/* prune's deleteMany filter: {_id: /^prefix/ (none for the empty prefix),
 * $expr: {$and: [{$lte: [{$add: [expiry, older_than_ms]}, "$$NOW"]},
 * next_free]}}: expired at least older_than_ms ago by the server's clock
 * ($$NOW in $expr, allowed in a delete's filter on MongoDB 4.2+ and the
 * test server alike), and no live reservation. */
bool ll_mongo_prune_filter (bson_t *q, const char *prefix, size_t prefix_len,
                            int64_t older_than_ms);
/* (ll_mongo_prune_filter takes records only: fence > 0, and no live queue
 * mark.) prune's deleteMany of the documents that only held a queue mark,
 * once it ran out older_than_ms ago: {_id: /^prefix/, fence: 0, $expr:
 * {$lte: [{$add: [mark end, older_than_ms]}, "$$NOW"]}}. */
bool ll_mongo_mark_prune_filter (bson_t *q, const char *prefix, size_t prefix_len,
                                 int64_t older_than_ms);

/* [{$match: match}, {$sort: {_id: 1}}, {$project: {owner, fence, holder,
 *   holds, leftMs: {$subtract: [expiry, "$$NOW"]}}}] - the time left is
 * computed by the server's clock. match is borrowed (copied into p). */
bool ll_mongo_record_pipeline (bson_t *p, const bson_t *match);

/* The findAndModify options of both acquire tries: return the new
 * document's fence; upsert on the second. update is borrowed (the options
 * keep a copy). A new object the caller destroys
 * (mongoc_find_and_modify_opts_destroy); NULL when out of memory. */
mongoc_find_and_modify_opts_t *ll_mongo_fam_opts (const bson_t *update, bool upsert);

/* findAndModify options in general: update, return the new document with
 * the fields named in fields (NULL-terminated, borrowed), upsert or not.
 * Ownership as ll_mongo_fam_opts. */
mongoc_find_and_modify_opts_t *ll_mongo_fam_opts_fields (const bson_t *update,
                                                         const char *const *fields, bool upsert);

/* The findAndModify options of a release (ll_mongo_owned_query,
 * ll_mongo_free_update): return the new document's reservation (nextOwner,
 * nextAt, nextMs), renewedAt, the release's own $currentDate, and
 * fairQueued, so that one round trip tells whether the release left a
 * waiter next (a live reservation by the server's clock, or a fair
 * holder's queue). Ownership as ll_mongo_fam_opts. */
mongoc_find_and_modify_opts_t *ll_mongo_release_opts (const bson_t *update);

/* ---- the fair mode's queue ------------------------------------------------ */

/* Appends {_id: {k: key, o: owner}}, an entry's _id (always k then o: an
 * embedded document matches by equality only with its fields in order):
 * queue_leave's query. */
bool ll_mongo_queue_id (bson_t *doc, const char *key, size_t key_len, const char *owner);

/* queue_join's first try, a findAndModify without upsert: owner's entry
 * while it is live, {_id: {k, o}, $expr: live} -> seenAt = now, keepMs =
 * keep_ms (ll_mongo_queue_refresh_update); its arrival is kept. */
bool ll_mongo_queue_live_query (bson_t *q, const char *key, size_t key_len, const char *owner);
bool ll_mongo_queue_refresh_update (bson_t *u, int64_t keep_ms, int64_t mark_end_ms);

/* queue_join's second try, when the first matched nothing (no entry, or
 * one that ran out): an upsert on {_id: {k, o}} alone (ll_mongo_queue_id,
 * no $expr) that arrives now: arrived = seenAt = now, k, o, keepMs. */
bool ll_mongo_queue_arrive_update (bson_t *u, const char *key, size_t key_len, const char *owner,
                                   int64_t keep_ms, int64_t mark_end_ms);

/* queue_join's count: the live entries of key ordered before (arrived,
 * owner): {k: key, $or: [{arrived: {$lt: arrived}}, {arrived: {$gte:
 * arrived, $lt: arrived + 1 ms}, o: {$lt: owner}}], $expr: live}. arrived
 * is the date the server wrote into owner's entry, in milliseconds; the
 * same millisecond is a range, not an equality, since mongo-java-server
 * keeps finer dates than it returns. */
bool ll_mongo_queue_ahead_filter (bson_t *q, const char *key, size_t key_len, const char *owner,
                                  int64_t arrived);

/* A fair acquire's first take: whether key has a live entry of another
 * owner than owner: {k: key, o: {$ne: owner}, $expr: live}. */
bool ll_mongo_queue_others_filter (bson_t *q, const char *key, size_t key_len, const char *owner);

/* prune's deleteMany of the queue: {k: /^prefix/ (none for the empty
 * prefix), $expr: run out at least older_than_ms ago}. */
bool ll_mongo_queue_prune_filter (bson_t *q, const char *prefix, size_t prefix_len,
                                  int64_t older_than_ms);

/* ---- the failover record ------------------------------------------------- *
 *
 * One document in "<collection>.meta" (backend_mongodb_primary.c says how
 * it is written):
 *   { _id: "primary", primaryId: text, fenceFloor: int64, maxTtlMs: int64,
 *     pausedAt: date, pauseMs: int64, seenAt: date }
 *   no grant before pausedAt + pauseMs (the lock-delay; the sum is taken
 *   when read, against seenAt, the reading write's own $currentDate). */

/* Appends {_id: "primary"}: the read's query. */
bool ll_mongo_meta_id (bson_t *q);

/* The read, a findAndModify without upsert: seenAt = now and, when
 * want_max_ttl_ms > 0, $max {maxTtlMs: want_max_ttl_ms}. */
bool ll_mongo_meta_read_update (bson_t *u, int64_t want_max_ttl_ms);

/* A new collection's record, an upsert whose query matches no existing
 * document, {_id: "primary", primaryId: {$exists: false}} (one that
 * exists answers LL_MONGO_DUPLICATE_KEY) -> primaryId = id, fenceFloor 0,
 * maxTtlMs, pauseMs 0, seenAt = now. id: NUL-terminated, borrowed. */
bool ll_mongo_meta_create_query (bson_t *q);
bool ll_mongo_meta_create_update (bson_t *u, const char *id, int64_t max_ttl_ms);

/* A new primary, a findAndModify without upsert conditional on what the
 * read found, {_id: "primary", primaryId: old_id (NULL: null or missing),
 * fenceFloor: old_floor} -> primaryId = id, fenceFloor = floor, pauseMs
 * = pause_ms, pausedAt = seenAt = now. Strings borrowed. */
bool ll_mongo_meta_swap_query (bson_t *q, const char *old_id, int64_t old_floor);
bool ll_mongo_meta_swap_update (bson_t *u, const char *id, int64_t floor, int64_t pause_ms);

/* The fence floor's second step after a take, a findAndModify without
 * upsert on {_id: key, owner: owner} (ll_mongo_owned_query): $max
 * {fence: floor}. */
bool ll_mongo_fence_floor_update (bson_t *u, int64_t floor);

#endif /* LL_STMT_MONGODB_H */
