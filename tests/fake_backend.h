/* fake_backend.h - the in-memory test backend (tests only). */
#ifndef LL_FAKE_BACKEND_H
#define LL_FAKE_BACKEND_H

#include "ll_internal.h"

#include <stdio.h>

typedef enum
{
   FAKE_ACQUIRE,
   FAKE_RENEW,
   FAKE_RELEASE,
   FAKE_INSPECT,
   FAKE_LIST,
   FAKE_FORCE,
   FAKE_PRUNE,
   FAKE_QUEUE, /* queue_join and queue_leave */
   FAKE_HOLD
} fake_op_t;

extern const ll_backend_t fake_backend;
/* While on, every operation fails with BACKEND (a database that is down). */
void fake_backend_fail (bool on);
/* While on, every operation waits (in real time) before it starts: a
 * database that does not answer. */
void fake_backend_hang (bool on);
/* While part is not NULL or "", every operation on a key containing it
 * waits, as fake_backend_hang does for all. */
void fake_backend_hang_key (const char *part);
/* The next n acquires are applied, then fail with BACKEND as if their
 * reply had been lost on the way back. */
void fake_backend_lose_replies (int n);
/* The next n calls of op fail with BACKEND before they are applied. */
void fake_backend_fail_next (fake_op_t op, int n);
/* The same for the next n calls of op (acquire, renew or release). */
void fake_backend_lose_replies_of (fake_op_t op, int n);
/* The next n calls of op are applied, then hold their reply (in real
 * time) until fake_backend_let_go(): a reply delayed on the way back (a
 * commit that waits for a synchronous standby). A call bounded by its
 * caller (ll_call_bound) gives up at that bound with BACKEND. */
void fake_backend_hold_replies (fake_op_t op, int n);
/* How many calls hold their reply now. */
int fake_backend_held (void);
/* Lets every held reply go, and waits until they have. */
void fake_backend_let_go (void);
/* Offsets the fake database's clock from the engine's. */
void fake_backend_skew (int64_t ms);
/* The live entries of key's queue of fair waiters. */
int fake_backend_queued (const char *key);
/* How many times op was called (to prove e.g. that renewals happened). */
long fake_backend_calls (fake_op_t op);

#endif
