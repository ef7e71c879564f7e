/*
 * pool.c - a client's pool of database connections: at most POOL_MAX idle
 * ones kept per client, in the process that opened them; the count of
 * those in use is what fork.c waits on.
 */
#include "engine_private.h"

#include <inttypes.h>

/* One connection fewer in use (by this process). Called with c->mu held. */
static void pool_done_locked (leaselock_client_t *c, pid_t me)
{
   if (c->pid == me && c->in_use > 0 && --c->in_use == 0)
      pthread_cond_broadcast (&c->drained);
}

/* getpid() is a system call: each public call asks once and passes it down. */
void *ll_pool_get (leaselock_client_t *c, pid_t me, leaselock_error_t *err)
{
   pthread_mutex_lock (&c->mu);
   ll_reset_after_fork_locked (c, me);
   if (c->fork_busy) {
      /* fork_busy stays set only in a child: a thread of its parent was
       * inside the database library at the fork. */
      pthread_mutex_unlock (&c->mu);
      ll_error_set (err, LEASELOCK_BACKEND,
                    "this process was forked while another thread's database call on "
                    "this client ran for over %d ms; the client cannot be used in the "
                    "child: create a new one",
                    FORK_WAIT_MS);
      return NULL;
   }
   void *conn = c->n_idle ? c->idle[--c->n_idle] : NULL;
   c->in_use++;
   pthread_mutex_unlock (&c->mu);
   if (!conn) {
      conn = c->backend->open (c->uri, err);
      if (!conn && err && err->code == LEASELOCK_BACKEND)
         ll_count (&c->obs, LL_ST_BACKEND_ERRORS, 1); /* a database that is down */
      if (!conn) {
         pthread_mutex_lock (&c->mu);
         pool_done_locked (c, me);
         pthread_mutex_unlock (&c->mu);
      }
   }
   return conn;
}

/* What a connection learned of its primary since it was last reported
 * (failover.c): a new primary (its lock-delay began), and grants that
 * may not survive a failover (durability=report), each once per
 * (re)connect, through the log hook and the stats. */
static void pool_report_primary (leaselock_client_t *c, ll_primary_t *p)
{
   if (!p || p->generation == p->reported)
      return;
   p->reported = p->generation;
   int64_t left = p->paused_until ? p->paused_until - ll_now_ms () : 0;
   if (p->new_primary) {
      ll_count (&c->obs, LL_ST_FAILOVERS, 1);
      LL_LOG (&c->obs, LEASELOCK_LOG_WARNING, "failover", NULL, 0, -1, LEASELOCK_OK,
              "%s: a new primary (%s): no grant for %" PRId64
              " ms, the lock-delay for leases the old one granted; fences from now on are at "
              "least %" PRId64,
              c->backend->name, p->primary_id, left > 0 ? left : 0, p->fence_floor);
   }
   if (p->policy == LL_DURABILITY_REPORT && p->durability == LL_DURABILITY_AT_RISK) {
      ll_count (&c->obs, LL_ST_DURABILITY_WARNINGS, 1);
      LL_LOG (&c->obs, LEASELOCK_LOG_WARNING, "durability", NULL, 0, -1, LEASELOCK_OK,
              "%s: a grant may not survive a failover: %s (the URI option durability=require "
              "refuses such grants, durability=off silences this)",
              c->backend->name, p->durability_text);
   }
}

/* Returns conn to the pool. A connection that just failed is closed, so
 * the next call reconnects; one from before a fork is abandoned. */
void ll_pool_put (leaselock_client_t *c, void *conn, pid_t me, bool failed)
{
   /* Before the connection is shared again (the caller alone uses it
    * here), with no engine lock held (the log hook may run). */
   if (conn && c->backend->primary)
      pool_report_primary (c, c->backend->primary (conn));
   pthread_mutex_lock (&c->mu);
   bool stale = c->pid != me;
   pool_done_locked (c, me);
   if (!stale && !failed && !c->closed && c->n_idle < POOL_MAX) {
      c->idle[c->n_idle++] = conn;
      conn = NULL;
   }
   pthread_mutex_unlock (&c->mu);
   if (conn && stale) {
      if (c->backend->abandon)
         c->backend->abandon (conn);
   } else if (conn) {
      c->backend->close (conn);
   }
}

bool ll_conn_failed (const leaselock_error_t *err)
{
   return err->code == LEASELOCK_BACKEND || err->code == LEASELOCK_NOMEM;
}
