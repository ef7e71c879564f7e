/*
 * pool.c - the registry of clients and parked leases that lock:acquire_nb
 * shares with OpenResty's thread pools.
 *
 * Under OpenResty, lock:acquire_nb makes each try of a server backend in a
 * thread of an nginx thread pool (ngx.run_worker_thread), so that its
 * round trip never blocks the worker's event loop. That thread runs a Lua
 * VM of its own, and only strings, numbers, booleans and tables of them
 * cross between VMs; but every VM of the process runs this one copy of the
 * module (one dlopen), so the two sides meet here, in C:
 *  - the request's VM registers its client (an id for a refcounted
 *    leaselock_client_t);
 *  - the request's VM begins a wait on that client (leaselock_wait_new,
 *    no I/O) and registers it under an id (ll_lua_pool_wait_add): the one
 *    waiter of all the tries of that acquire_nb, its claim to be next and
 *    its place in a fair queue;
 *  - the pool thread makes one try of that wait (leaselock_wait_try) and
 *    parks the lease it took under a new id (ll_lua_pool_try);
 *  - back in the request's VM, the lock adopts the parked lease into an
 *    ordinary lease handle (lock_adopt_nb).
 * A parked lease that is never adopted (nginx drops the thread's results
 * when the request was aborted while the thread ran) is released, not
 * leaked: in a pool thread once it is PARKED_MAX_MS old, by the next pool
 * try or by acquire_nb's timer (ll_lua_pool_reap_old); else by client:close(), or
 * when the client handle is collected. So is a wait that acquire_nb gave
 * up on nginx (its destroy leaves a fair queue: a round trip) or whose
 * request ended between tries (idle WAIT_IDLE_MAX_MS).
 */
#include "lleaselock.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef struct ll_parked
{
   uint64_t id;
   ll_shared_client_t *sc;    /* one reference */
   leaselock_lease_t *lease;  /* owned */
   ll_lua_renew_failed_t *rf; /* owned; NULL without on_renew_failed */
   int64_t parked_at_ms;      /* monotonic */
   struct ll_parked *next;
} ll_parked_t;

/* The registry, guarded by reg_mu. Nothing does I/O or calls Lua while
 * holding it. Ids count from 1 and stay below 2^53, exact in any Lua
 * number. */
static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static ll_shared_client_t *reg_clients;
static ll_parked_t *reg_parked;
static ll_nbwait_t *reg_waits; /* idle ones: a wait in a try is out */
/* Tries between their acquire and their park, and waits out for a try. */
static size_t reg_trying;
static uint64_t reg_next_id = 1;

static int64_t monotonic_ms (void)
{
   struct timespec ts;
   clock_gettime (CLOCK_MONOTONIC, &ts);
   return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The registry entry of the client handle c, made on first use (it then
 * owns the client; c keeps one reference). NULL when out of memory. */
ll_shared_client_t *ll_lua_pool_share (ll_lua_client_t *c)
{
   ll_shared_client_t *sc = c->shared;
   if (sc) {
      return sc;
   }
   sc = calloc (1, sizeof *sc);
   if (!sc) {
      return NULL;
   }
   sc->client = c->client;
   sc->refs = 1;
   pthread_mutex_lock (&reg_mu);
   sc->id = reg_next_id++;
   sc->next = reg_clients;
   reg_clients = sc;
   pthread_mutex_unlock (&reg_mu);
   c->shared = sc;
   return sc;
}

/* A new reference to the client registered as id whose handle is still
 * alive; NULL if there is none. */
ll_shared_client_t *ll_lua_pool_get (uint64_t id)
{
   ll_shared_client_t *sc;
   pthread_mutex_lock (&reg_mu);
   for (sc = reg_clients; sc && (sc->id != id || sc->handle_gone); sc = sc->next) {
   }
   if (sc) {
      sc->refs++;
   }
   pthread_mutex_unlock (&reg_mu);
   return sc;
}

/* Drops a reference; the last one destroys the client. */
void ll_lua_pool_put (ll_shared_client_t *sc)
{
   ll_shared_client_t **p;
   bool last;
   pthread_mutex_lock (&reg_mu);
   last = --sc->refs == 0;
   if (last) {
      for (p = &reg_clients; *p != sc; p = &(*p)->next) {
      }
      *p = sc->next;
   }
   pthread_mutex_unlock (&reg_mu);
   if (last) {
      leaselock_client_destroy (sc->client);
      free (sc);
   }
}

/*
 * Parks lease and rf (both owned by the registry from now on) for sc and
 * returns their new id. When nobody could adopt them any more (the client
 * handle is collected or the client closed) or out of memory, destroys the
 * lease instead (releasing it), fills *err and returns 0.
 */
uint64_t ll_lua_pool_park (ll_shared_client_t *sc, leaselock_lease_t *lease,
                           ll_lua_renew_failed_t *rf, leaselock_error_t *err)
{
   ll_parked_t *pk = calloc (1, sizeof *pk);
   uint64_t id = 0;
   if (pk) {
      pthread_mutex_lock (&reg_mu);
      /* Checked under reg_mu: a close or a collection marks the client
       * before it reaps, so a lease is either reaped or never parked. */
      if (!sc->handle_gone && !leaselock_client_closed (sc->client)) {
         pk->id = id = reg_next_id++;
         pk->sc = sc;
         sc->refs++;
         pk->lease = lease;
         pk->rf = rf;
         pk->parked_at_ms = monotonic_ms ();
         pk->next = reg_parked;
         reg_parked = pk;
      }
      pthread_mutex_unlock (&reg_mu);
   }
   if (!id) {
      err->code = pk ? LEASELOCK_INVALID : LEASELOCK_NOMEM;
      snprintf (err->message, sizeof err->message, "%s",
                pk ? "the client was closed while acquiring" : "out of memory");
      free (pk);
      leaselock_lease_destroy (lease);
      ll_lua_rf_free (rf);
   }
   return id;
}

/* Takes the lease parked as id for sc (and its rf); false if there is
 * none: it was reaped. */
bool ll_lua_pool_unpark (uint64_t id, ll_shared_client_t *sc, leaselock_lease_t **lease,
                         ll_lua_renew_failed_t **rf)
{
   ll_parked_t **p, *pk;
   pthread_mutex_lock (&reg_mu);
   for (p = &reg_parked; (pk = *p) && (pk->id != id || pk->sc != sc); p = &pk->next) {
   }
   if (pk) {
      *p = pk->next;
   }
   pthread_mutex_unlock (&reg_mu);
   if (!pk) {
      return false;
   }
   *lease = pk->lease;
   *rf = pk->rf;
   ll_lua_pool_put (sc); /* never the last: the caller's handle holds one */
   free (pk);
   return true;
}

uint64_t ll_lua_pool_wait_add (ll_shared_client_t *sc, leaselock_wait_t *wait,
                               ll_lua_renew_failed_t *rf, bool one_try)
{
   ll_nbwait_t *w = calloc (1, sizeof *w);
   if (!w) {
      leaselock_wait_destroy (wait); /* no try yet: nothing to leave */
      ll_lua_rf_free (rf);
      return 0;
   }
   w->sc = sc;
   w->wait = wait;
   w->rf = rf;
   w->one_try = one_try;
   w->used_ms = monotonic_ms ();
   pthread_mutex_lock (&reg_mu);
   sc->refs++;
   w->id = reg_next_id++;
   w->next = reg_waits;
   reg_waits = w;
   pthread_mutex_unlock (&reg_mu);
   return w->id;
}

ll_nbwait_t *ll_lua_pool_wait_take (uint64_t id)
{
   ll_nbwait_t **p, *w;
   pthread_mutex_lock (&reg_mu);
   for (p = &reg_waits; (w = *p) && w->id != id; p = &w->next) {
   }
   if (w) {
      *p = w->next;
      reg_trying++; /* a lease may be parked by this try */
   }
   pthread_mutex_unlock (&reg_mu);
   return w;
}

void ll_lua_pool_wait_back (ll_nbwait_t *w)
{
   w->used_ms = monotonic_ms ();
   pthread_mutex_lock (&reg_mu);
   w->next = reg_waits;
   reg_waits = w;
   reg_trying--;
   pthread_mutex_unlock (&reg_mu);
}

/* Destroys w, out of the registry. */
static void wait_destroy (ll_nbwait_t *w)
{
   leaselock_wait_destroy (w->wait);
   ll_lua_rf_free (w->rf);
   ll_lua_pool_put (w->sc);
   free (w);
}

void ll_lua_pool_wait_free (ll_nbwait_t *w)
{
   pthread_mutex_lock (&reg_mu);
   reg_trying--;
   pthread_mutex_unlock (&reg_mu);
   wait_destroy (w);
}

void ll_lua_pool_wait_give_up (uint64_t id)
{
   ll_nbwait_t *w;
   pthread_mutex_lock (&reg_mu);
   for (w = reg_waits; w && w->id != id; w = w->next) {
   }
   if (w) {
      w->given_up = true;
   }
   pthread_mutex_unlock (&reg_mu);
}

/* Takes out of the registry the waits of sc (every client's when NULL)
 * that the reaper destroys (ll_lua_pool_reap says which; and those of a
 * collected client handle, back from a try that ran meanwhile). */
static ll_nbwait_t *waits_to_reap (ll_shared_client_t *sc, int64_t max_age_ms, int64_t now)
{
   ll_nbwait_t *old = NULL, **p, *w;
   for (p = &reg_waits; (w = *p);) {
      if ((!sc || w->sc == sc) && (max_age_ms == 0 || w->given_up || w->sc->handle_gone ||
                                   now - w->used_ms >= WAIT_IDLE_MAX_MS)) {
         *p = w->next;
         w->next = old;
         old = w;
      } else {
         p = &w->next;
      }
   }
   return old;
}

/* Destroys the parked leases of sc (of every client when sc is NULL)
 * parked at least max_age_ms ago, which releases those still held (one
 * round trip each: never called on an nginx worker's event loop but from
 * a pool thread, a close or a collection). */
void ll_lua_pool_reap (ll_shared_client_t *sc, int64_t max_age_ms)
{
   ll_parked_t *old = NULL, **p, *pk;
   ll_nbwait_t *w;
   int64_t now = monotonic_ms ();
   pthread_mutex_lock (&reg_mu);
   ll_nbwait_t *waits = waits_to_reap (sc, max_age_ms, now);
   for (p = &reg_parked; (pk = *p);) {
      if ((!sc || pk->sc == sc) && now - pk->parked_at_ms >= max_age_ms) {
         *p = pk->next;
         pk->next = old;
         old = pk;
      } else {
         p = &pk->next;
      }
   }
   pthread_mutex_unlock (&reg_mu);
   while ((w = waits)) {
      waits = w->next;
      wait_destroy (w);
   }
   while ((pk = old)) {
      old = pk->next;
      leaselock_lease_destroy (pk->lease); /* no hook runs after it */
      ll_lua_rf_free (pk->rf);
      ll_lua_pool_put (pk->sc);
      free (pk);
   }
}

/* The client handle has been collected: no more parking for it, its
 * parked leases are released, its reference dropped (the client goes
 * with the last one, maybe that of a pool try still running). */
void ll_lua_pool_drop_handle (ll_lua_client_t *c)
{
   pthread_mutex_lock (&reg_mu);
   c->shared->handle_gone = true;
   pthread_mutex_unlock (&reg_mu);
   ll_lua_pool_reap (c->shared, 0);
   ll_lua_pool_put (c->shared);
   c->shared = NULL;
}

size_t ll_lua_pool_parked (void)
{
   ll_parked_t *pk;
   size_t n;
   pthread_mutex_lock (&reg_mu);
   n = reg_trying;
   for (pk = reg_parked; pk; pk = pk->next) {
      n++;
   }
   for (ll_nbwait_t *w = reg_waits; w; w = w->next) {
      n++;
   }
   pthread_mutex_unlock (&reg_mu);
   return n;
}
