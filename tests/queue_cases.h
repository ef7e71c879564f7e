/*
 * queue_cases.h - the fair mode's queue of waiters (queue_join,
 * queue_leave, and prune's part), the same cases on every backend, below
 * the engine (queue_cases.c, linked into test_sqlite, test_sql_* and
 * test_mongodb). Each backend's suite runs the cases on a connection of its
 * own (qc_run); qc_rows is the suite's raw count of the queue entries
 * stored for a key (run-out ones too), so prune can be checked on the
 * database itself.
 *
 * Ownership: every pointer a case takes (backend table, connection, key,
 * owner) is borrowed for the call; the connection stays the caller's.
 */
#ifndef LL_QUEUE_CASES_H
#define LL_QUEUE_CASES_H

#include "ll_internal.h"
#include "testlib.h"

/* The suite's count of the entries stored for key k (-1 on error). */
typedef long long (*qc_rows_fn) (const char *k);

#define QC_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define QC_B "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
#define QC_C "cccccccccccccccccccccccccccccccc"
#define QC_H "hhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhh"

/* owner joins k for keep_ms; returns ahead, or -1 (and why, on stderr). */
int64_t qc_join (const ll_backend_t *b, void *c, const char *k, size_t klen, const char *owner,
                 int64_t keep_ms);

#define QJ(b, c, k, owner, keep) qc_join ((b), (c), (k), strlen (k), (owner), (keep))

bool qc_leave (const ll_backend_t *b, void *c, const char *k, const char *owner);

/* a, b, c join in turn: 0, 1, 2; a leaves: b is first, c second. */
void qc_join_order (const ll_backend_t *b, void *c, qc_rows_fn rows);

/* A rejoin keeps the place: the later arrival rejoins first and stays
 * behind; joining again with a shorter keep changes nothing either. */
void qc_rejoin_keeps_place (const ll_backend_t *b, void *c, qc_rows_fn rows);

/* An entry not joined again within keep_ms runs out: it holds nobody
 * back, and its owner's next join goes to the back of the queue. */
void qc_runs_out (const ll_backend_t *b, void *c, qc_rows_fn rows);

/* Leaving twice, or a queue never joined, succeeds. */
void qc_leave_missing (const ll_backend_t *b, void *c, qc_rows_fn rows);

/* Keys have queues of their own, a key that is a prefix of another too. */
void qc_keys_isolated (const ll_backend_t *b, void *c, qc_rows_fn rows);

/* Queue entries are not records: joining creates none, and a plain
 * acquire, renew, release, inspect and list of the key behave as if there
 * were no queue. */
void qc_records_unaffected (const ll_backend_t *b, void *c, qc_rows_fn rows);

/* A fair take (ll_take_t's fair, backends with fair_take) reads the
 * queue: refused (BUSY, nothing written) while another owner's entry is
 * live, on a key without a record or a free record alike; taken when the
 * only entry is its own, and once the other's entry left or ran out; a
 * plain take ignores the queue. */
void qc_fair_take (const ll_backend_t *b, void *c, qc_rows_fn rows);

/* prune deletes the entries under its prefix that ran out (older_than
 * ago), never a live one, nor one outside the prefix; it counts records
 * only. */
void qc_prune (const ll_backend_t *b, void *c, qc_rows_fn rows);

/* Odd keys are bound, never spliced into the statement: quotes, SQL and
 * operator text, multibyte UTF-8, 255 bytes; each has its own queue. */
void qc_odd_keys (const ll_backend_t *b, void *c, qc_rows_fn rows);

/* Runs a case on a new connection to uri. */
void qc_run (const char *uri, void (*body) (const ll_backend_t *, void *, qc_rows_fn),
             qc_rows_fn rows);

/* N processes, each on a connection of its own, join one key at once
 * (released together through a pipe): the places they are told are 0 ..
 * N-1, each once. Rounds of it, each on a new key. */
void qc_concurrent_joins (const char *uri);

#endif /* LL_QUEUE_CASES_H */
