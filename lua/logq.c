/*
 * logq.c - what the core's threads leave for the Lua thread. The core
 * calls its hooks from any thread (the renewal thread, a pool thread),
 * where no lua_State may be touched: the hooks only copy what happened,
 * under a mutex, into memory the handles own, and the Lua functions run
 * when Lua next calls the client, a lock or a lease of it.
 *  - the log queue of a client handle (client:set_log), drained into the
 *    log function by ll_lua_drain_log;
 *  - a lease's last renewal failure (on_renew_failed), taken by lease.c.
 */
#include "lleaselock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Both records below start with their mutex, which guards the rest: one
 * allocation (zeroed, the mutex ready) and one free for the two. */
static void *guarded_new (size_t size)
{
   pthread_mutex_t *mu = calloc (1, size);
   if (mu) {
      pthread_mutex_init (mu, NULL);
   }
   return mu;
}

/* mu: the first member of a record from guarded_new, or NULL. */
static void guarded_free (pthread_mutex_t *mu)
{
   if (mu) {
      pthread_mutex_destroy (mu);
      free (mu);
   }
}

/* ---- the log queue (client:set_log) -------------------------------- */

/* One log event, copied by the core's hook. event and code are static. */
typedef struct
{
   int level;
   const char *event;
   const char *code;
   size_t key_len;
   int64_t fence;
   char key[LEASELOCK_KEY_MAX + 1];
   char message[LEASELOCK_ERROR_MAX];
} ll_lua_event_t;

/* Events not yet drained beyond this many are dropped (and counted). */
#define LOG_QUEUE_MAX 64

/* The events the hook queued for the Lua thread (client:set_log). */
struct ll_lua_log
{
   pthread_mutex_t mu;
   int head, n;
   unsigned dropped; /* events lost to a full queue since the last drain */
   ll_lua_event_t ev[LOG_QUEUE_MAX];
};

_Static_assert(offsetof (ll_lua_log_t, mu) == 0, "guarded_new: the mutex comes first");

ll_lua_log_t *ll_lua_log_new (void)
{
   return guarded_new (sizeof (ll_lua_log_t));
}

void ll_lua_log_free (ll_lua_log_t *q)
{
   guarded_free (q ? &q->mu : NULL);
}

/* The core's log hook (any thread): queues a copy of the event. */
void ll_lua_log_hook (const leaselock_log_event_t *ev, void *data)
{
   ll_lua_log_t *q = data;
   pthread_mutex_lock (&q->mu);
   if (q->n == LOG_QUEUE_MAX) {
      q->dropped++;
   } else {
      ll_lua_event_t *e = &q->ev[(q->head + q->n++) % LOG_QUEUE_MAX];
      e->level = ev->level;
      e->event = ev->event;
      e->code = leaselock_code_name (ev->code);
      e->key_len = ev->key ? ev->key_len : 0;
      memcpy (e->key, ev->key ? ev->key : "", e->key_len);
      e->fence = ev->fence;
      snprintf (e->message, sizeof e->message, "%s", ev->message);
   }
   pthread_mutex_unlock (&q->mu);
}

/* {level=, levelname=, event=, key= (absent when none), fence=, code=,
 * message=, dropped= (events lost before this one, when any)} */
static void push_event (lua_State *L, const ll_lua_event_t *e, unsigned dropped)
{
   lua_createtable (L, 0, 8);
   lua_pushinteger (L, e->level);
   lua_setfield (L, -2, "level");
   lua_pushstring (L, leaselock_log_level_name (e->level));
   lua_setfield (L, -2, "levelname");
   lua_pushstring (L, e->event);
   lua_setfield (L, -2, "event");
   if (e->key_len) {
      lua_pushlstring (L, e->key, e->key_len);
      lua_setfield (L, -2, "key");
   }
   lua_pushinteger (L, (lua_Integer)e->fence);
   lua_setfield (L, -2, "fence");
   lua_pushstring (L, e->code);
   lua_setfield (L, -2, "code");
   lua_pushstring (L, e->message);
   lua_setfield (L, -2, "message");
   if (dropped) {
      lua_pushinteger (L, (lua_Integer)dropped);
      lua_setfield (L, -2, "dropped");
   }
}

/* Calls the log function of the client handle at idx for each queued
 * event, protected, on this (the Lua) thread. */
void ll_lua_drain_log (lua_State *L, int idx)
{
   ll_lua_client_t *c = lua_touserdata (L, idx); /* a client handle: the caller's word */
   ll_lua_event_t e;
   if (!c->log) {
      return;
   }
   idx = lua_absindex (L, idx);
   for (;;) {
      unsigned dropped;
      pthread_mutex_lock (&c->log->mu);
      if (c->log->n == 0) {
         pthread_mutex_unlock (&c->log->mu);
         return;
      }
      e = c->log->ev[c->log->head];
      c->log->head = (c->log->head + 1) % LOG_QUEUE_MAX;
      c->log->n--;
      dropped = c->log->dropped;
      c->log->dropped = 0;
      pthread_mutex_unlock (&c->log->mu);
      if (!ll_lua_push_uv_function (L, idx, UV_LOG_FN)) {
         continue;
      }
      push_event (L, &e, dropped);
      if (lua_pcall (L, 1, 0, 0) != 0) {
         ll_lua_report_callback_error (L, "the log function");
      }
   }
}

/* ll_lua_drain_log for the client of the lock or lease handle at idx. */
void ll_lua_drain_from (lua_State *L, int idx)
{
   lua_getuservalue (L, idx);
   lua_rawgeti (L, -1, UV_CLIENT);
   ll_lua_drain_log (L, -1);
   lua_pop (L, 2);
}

/* ---- a lease's last renewal failure (on_renew_failed) -------------- */

/* A new record of renewal failures (owned by the caller), or NULL when out
 * of memory. */
_Static_assert(offsetof (ll_lua_renew_failed_t, mu) == 0, "guarded_new: the mutex comes first");

ll_lua_renew_failed_t *ll_lua_rf_new (void)
{
   return guarded_new (sizeof (ll_lua_renew_failed_t));
}

void ll_lua_rf_free (ll_lua_renew_failed_t *rf)
{
   guarded_free (rf ? &rf->mu : NULL);
}

/* on_renew_failed's C half (renewal thread): records the failure. */
void ll_lua_rf_hook (leaselock_lease_t *lease, const leaselock_error_t *err, int64_t remaining_ms,
                     void *data)
{
   ll_lua_renew_failed_t *rf = data;
   (void)lease;
   pthread_mutex_lock (&rf->mu);
   rf->pending++;
   rf->code = err->code;
   rf->remaining_ms = remaining_ms;
   snprintf (rf->message, sizeof rf->message, "%s", err->message);
   pthread_mutex_unlock (&rf->mu);
}

void ll_lua_rf_take (ll_lua_renew_failed_t *rf, ll_lua_renew_failed_t *got)
{
   pthread_mutex_lock (&rf->mu);
   *got = *rf;
   rf->pending = 0;
   pthread_mutex_unlock (&rf->mu);
}
