/*
 * pool.c - a client's pool of database connections: at most POOL_MAX idle
 * ones kept per client, in the process that opened them; the count of
 * those in use is what fork.c waits on.
 */
#include "engine_private.h"

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

/* Returns conn to the pool. A connection that just failed is closed, so
 * the next call reconnects; one from before a fork is abandoned. */
void ll_pool_put (leaselock_client_t *c, void *conn, pid_t me, bool failed)
{
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
