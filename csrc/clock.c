/* clock.c - the engine's monotonic clock, a fake one for tests, real
 * time for bounds on real waits and for latencies, and the bound of the
 * call under way on a thread (and, for a backend's own lock waits, that
 * call's kind and log). */
#include "ll_internal.h"

#include <stdatomic.h>
#include <time.h>

static atomic_bool fake_on;
static _Atomic int64_t fake_now = 1000000; /* arbitrary non-zero origin */

int64_t ll_now_ms (void)
{
   if (atomic_load_explicit (&fake_on, memory_order_relaxed))
      return atomic_load (&fake_now);
   struct timespec ts;
   clock_gettime (CLOCK_MONOTONIC, &ts);
   return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t ll_real_now_ms (void)
{
   struct timespec ts;
   clock_gettime (CLOCK_MONOTONIC, &ts);
   return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t ll_real_now_us (void)
{
   struct timespec ts;
   clock_gettime (CLOCK_MONOTONIC, &ts);
   return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Per thread: the engine sets it around a bounded call's I/O, on the
 * calling thread, and the backends read it there. */
static _Thread_local int64_t call_bound = -1;

void ll_call_bound_set (int64_t deadline_ms)
{
   call_bound = deadline_ms;
}

int64_t ll_call_bound (void)
{
   return call_bound;
}

int64_t ll_call_bound_cap (int64_t deadline_ms)
{
   return call_bound >= 0 && call_bound < deadline_ms ? call_bound : deadline_ms;
}

/* Per thread too: set by a backend on the thread of the call. */
static _Thread_local bool call_unsent;

void ll_call_unsent_mark (void)
{
   call_unsent = true;
}

bool ll_call_unsent_take (void)
{
   bool unsent = call_unsent;
   call_unsent = false;
   return unsent;
}

static _Thread_local int64_t mode_bound = LL_MODE_NONE;

int64_t ll_mode_bound_set (int64_t bound)
{
   int64_t was = mode_bound;
   mode_bound = bound;
   return was;
}

int64_t ll_mode_bound (void)
{
   return mode_bound;
}

static _Thread_local ll_call_wait_t *call_wait;

void ll_call_wait_set (ll_call_wait_t *w)
{
   call_wait = w;
}

ll_call_wait_t *ll_call_wait (void)
{
   return call_wait;
}

void ll_call_wait_warn (const char *msg)
{
   ll_call_wait_t *w = call_wait;
   if (!w || w->warned || !w->obs)
      return;
   w->warned = true;
   LL_LOG (w->obs, LEASELOCK_LOG_WARNING, "lock_wait", w->key, w->key_len, 0, LEASELOCK_BUSY, "%s",
           msg);
}

void ll_clock_use_fake (bool on)
{
   atomic_store (&fake_on, on);
}

void ll_clock_advance (int64_t ms)
{
   atomic_fetch_add (&fake_now, ms);
}

void ll_cond_init (pthread_cond_t *cond)
{
   pthread_condattr_t attr;
   pthread_condattr_init (&attr);
   pthread_condattr_setclock (&attr, CLOCK_MONOTONIC);
   pthread_cond_init (cond, &attr);
   pthread_condattr_destroy (&attr);
}

void ll_cond_wait_until (pthread_cond_t *cond, pthread_mutex_t *mu, int64_t deadline_ms)
{
   struct timespec ts;
   clock_gettime (CLOCK_MONOTONIC, &ts);
   int64_t wait_ms;
   if (atomic_load_explicit (&fake_on, memory_order_relaxed)) {
      /* Fake time only moves when a test advances it: poll it. */
      wait_ms = 2;
   } else if (deadline_ms < 0) {
      pthread_cond_wait (cond, mu);
      return;
   } else {
      wait_ms = deadline_ms - ll_now_ms ();
      if (wait_ms <= 0)
         return;
   }
   int64_t ns = ts.tv_nsec + (wait_ms % 1000) * 1000000;
   ts.tv_sec += (time_t)(wait_ms / 1000 + ns / 1000000000);
   ts.tv_nsec = (long)(ns % 1000000000);
   pthread_cond_timedwait (cond, mu, &ts);
}
