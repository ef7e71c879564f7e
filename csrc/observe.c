/*
 * observe.c - a client's log hook and counters (leaselock.h,
 * "observability"): the hook's installation and delivery, events found
 * under the engine's lock and delivered once it is let go, the counters
 * and latency histogram, and their Prometheus rendering.
 *
 * The engine calls in here; nothing here calls the engine (the client's
 * leaselock_client_set_log* hand its ll_obs_t down, and the client pointer
 * kept here is only passed on to the hook in each event). A hook that is
 * off costs one relaxed atomic load and a compare (ll_log_on); counters are
 * relaxed atomic additions.
 */
#include "ll_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* The hooks this thread is running now: set_log called from within one
 * must not wait for itself. */
static _Thread_local int hook_depth;

static const uint64_t latency_le_us[LEASELOCK_LATENCY_BUCKETS] = {
   100, 250, 500, 1000, 2500, 5000, 10000, 25000, 100000, 250000, 1000000, UINT64_MAX,
};

void ll_obs_init (ll_obs_t *o, leaselock_client_t *client)
{
   memset (o, 0, sizeof *o);
   o->client = client;
   atomic_init (&o->level, LEASELOCK_LOG_OFF);
   atomic_init (&o->n_pending, 0);
   pthread_mutex_init (&o->mu, NULL);
   ll_cond_init (&o->idle);
   for (int i = 0; i < LL_ST_COUNT; i++)
      atomic_init (&o->n[i], 0);
   for (int i = 0; i < LEASELOCK_LATENCY_BUCKETS; i++)
      atomic_init (&o->latency[i], 0);
   atomic_init (&o->latency_sum_us, 0);
}

void ll_obs_destroy (ll_obs_t *o)
{
   pthread_mutex_destroy (&o->mu);
   pthread_cond_destroy (&o->idle);
}

/* ---- the hook ------------------------------------------------------------ */

void ll_obs_set_hook (ll_obs_t *o, int min_level, leaselock_log_cb fn, void *data)
{
   pthread_mutex_lock (&o->mu);
   o->fn = fn;
   o->data = data;
   atomic_store (&o->level, fn ? min_level : LEASELOCK_LOG_OFF);
   /* Calls of the previous hook may be running: wait for them, unless
    * this thread is in one of them. */
   while (o->calls > 0 && hook_depth == 0)
      ll_cond_wait_until (&o->idle, &o->mu, -1);
   pthread_mutex_unlock (&o->mu);
}

/* One call of the hook with ev. */
static void deliver (ll_obs_t *o, leaselock_log_event_t *ev)
{
   pthread_mutex_lock (&o->mu);
   leaselock_log_cb fn = o->fn;
   void *data = o->data;
   bool on = fn && ev->level >= atomic_load (&o->level);
   o->calls += on;
   pthread_mutex_unlock (&o->mu);
   if (!on)
      return;
   ev->client = o->client;
   hook_depth++;
   fn (ev, data);
   hook_depth--;
   pthread_mutex_lock (&o->mu);
   if (--o->calls == 0)
      pthread_cond_broadcast (&o->idle);
   pthread_mutex_unlock (&o->mu);
}

/* ev (its message set) to the hook now, its key copied NUL-terminated. */
static void emit_now (ll_obs_t *o, leaselock_log_event_t *ev)
{
   char k[LEASELOCK_KEY_MAX + 1];
   size_t key_len = ev->key_len > LEASELOCK_KEY_MAX ? LEASELOCK_KEY_MAX : ev->key_len;
   if (ev->key)
      memcpy (k, ev->key, key_len);
   k[ev->key ? key_len : 0] = '\0';
   ev->key_len = ev->key ? key_len : 0;
   ev->key = ev->key ? k : NULL;
   deliver (o, ev);
}

/* ev (its message set) kept until ll_log_flush, when there is room. */
static void emit_later (ll_obs_t *o, const leaselock_log_event_t *ev)
{
   pthread_mutex_lock (&o->mu);
   int n = atomic_load (&o->n_pending);
   if (n < LL_LOG_PENDING_MAX) {
      ll_log_pending_t *p = &o->pending[n];
      snprintf (p->message, sizeof p->message, "%s", ev->message);
      p->level = ev->level;
      p->event = ev->event;
      p->key_len = ev->key && ev->key_len <= LEASELOCK_KEY_MAX ? ev->key_len : 0;
      if (p->key_len)
         memcpy (p->key, ev->key, p->key_len);
      p->key[p->key_len] = '\0';
      p->fence = ev->fence;
      p->code = ev->code;
      atomic_store (&o->n_pending, n + 1);
   }
   pthread_mutex_unlock (&o->mu);
}

void ll_log_emit (ll_obs_t *o, bool defer, leaselock_log_event_t ev, const char *fmt, ...)
{
   char msg[LEASELOCK_ERROR_MAX];
   va_list ap;
   va_start (ap, fmt);
   vsnprintf (msg, sizeof msg, fmt, ap);
   va_end (ap);
   ev.message = msg;
   if (defer)
      emit_later (o, &ev);
   else
      emit_now (o, &ev);
}

void ll_log_flush_slow (ll_obs_t *o)
{
   ll_log_pending_t got[LL_LOG_PENDING_MAX];
   pthread_mutex_lock (&o->mu);
   int n = atomic_load (&o->n_pending);
   memcpy (got, o->pending, (size_t)n * sizeof got[0]);
   atomic_store (&o->n_pending, 0);
   pthread_mutex_unlock (&o->mu);
   for (int i = 0; i < n; i++) {
      ll_log_pending_t *p = &got[i];
      leaselock_log_event_t ev = { NULL,       p->level, p->event, p->key_len ? p->key : NULL,
                                   p->key_len, p->fence, p->code,  p->message };
      deliver (o, &ev);
   }
}

void ll_obs_set_level (ll_obs_t *o, int min_level)
{
   pthread_mutex_lock (&o->mu);
   if (o->fn)
      atomic_store (&o->level, min_level);
   pthread_mutex_unlock (&o->mu);
}

const char *leaselock_log_level_name (int level)
{
   return level >= LEASELOCK_LOG_ERROR     ? "ERROR"
          : level >= LEASELOCK_LOG_WARNING ? "WARNING"
          : level >= LEASELOCK_LOG_INFO    ? "INFO"
          : level >= LEASELOCK_LOG_DEBUG   ? "DEBUG"
                                           : "NOTSET";
}

/* ---- counters -------------------------------------------------------------- */

void ll_obs_request (ll_obs_t *o, int64_t start_us, bool ok, const leaselock_error_t *err)
{
   int64_t us = ll_real_now_us () - start_us;
   uint64_t u = us > 0 ? (uint64_t)us : 0;
   int b = 0;
   while (u > latency_le_us[b])
      b++;
   atomic_fetch_add_explicit (&o->latency[b], 1, memory_order_relaxed);
   atomic_fetch_add_explicit (&o->latency_sum_us, u, memory_order_relaxed);
   ll_count (o, LL_ST_REQUESTS, 1);
   if (!ok && err && err->code == LEASELOCK_BACKEND)
      ll_count (o, LL_ST_BACKEND_ERRORS, 1);
}

void ll_obs_read (ll_obs_t *o, leaselock_stats_t *s)
{
   uint64_t n[LL_ST_COUNT];
   for (int i = 0; i < LL_ST_COUNT; i++)
      n[i] = atomic_load_explicit (&o->n[i], memory_order_relaxed);
   *s = (leaselock_stats_t){
      .acquires = n[LL_ST_ACQUIRES],
      .busy = n[LL_ST_BUSY],
      .waits = n[LL_ST_WAITS],
      .timeouts = n[LL_ST_TIMEOUTS],
      .wait_ms = n[LL_ST_WAIT_MS],
      .held_ms = n[LL_ST_HELD_MS],
      .renewals = n[LL_ST_RENEWALS],
      .renewal_failures = n[LL_ST_RENEWAL_FAILURES],
      .losses = n[LL_ST_LOSSES],
      .releases = n[LL_ST_RELEASES],
      .release_failures = n[LL_ST_RELEASE_FAILURES],
      .backend_errors = n[LL_ST_BACKEND_ERRORS],
      .requests = n[LL_ST_REQUESTS],
      .failovers = n[LL_ST_FAILOVERS],
      .durability_warnings = n[LL_ST_DURABILITY_WARNINGS],
      .latency_sum_us = atomic_load_explicit (&o->latency_sum_us, memory_order_relaxed),
   };
   for (int i = 0; i < LEASELOCK_LATENCY_BUCKETS; i++) {
      s->latency_le_us[i] = latency_le_us[i];
      s->latency_count[i] = atomic_load_explicit (&o->latency[i], memory_order_relaxed);
   }
}

/* ---- Prometheus text --------------------------------------------------------- */

/* Appends like snprintf at *len (which counts what the whole text needs). */
static void put (char *buf, size_t size, size_t *len, const char *fmt, ...)
#if defined(__GNUC__)
  __attribute__ ((format (printf, 4, 5)))
#endif
  ;
static void put (char *buf, size_t size, size_t *len, const char *fmt, ...)
{
   va_list ap;
   va_start (ap, fmt);
   int n = vsnprintf (*len < size ? buf + *len : NULL, *len < size ? size - *len : 0, fmt, ap);
   va_end (ap);
   if (n > 0)
      *len += (size_t)n;
}

static const struct
{
   const char *name, *type, *help;
   size_t offset;
   double scale; /* 1, or 1e-3 for milliseconds shown as seconds */
} metrics[] = {
#define M(n, t, h, f, sc)                                                                          \
   {                                                                                               \
      n, t, h, offsetof (leaselock_stats_t, f), sc                                                 \
   }
   M ("acquires_total", "counter", "Successful acquires.", acquires, 1),
   M ("busy_total", "counter", "One-try acquires answered busy.", busy, 1),
   M ("waits_total", "counter", "Blocking acquires that waited.", waits, 1),
   M ("timeouts_total", "counter", "Blocking acquires that timed out.", timeouts, 1),
   M ("wait_seconds_total", "counter", "Time blocking acquires waited.", wait_ms, 1e-3),
   M ("held_seconds_total", "counter", "Time leases were held (counted as each ends).", held_ms,
      1e-3),
   M ("renewals_total", "counter", "Successful renewals.", renewals, 1),
   M ("renewal_failures_total", "counter", "Failed renewals.", renewal_failures, 1),
   M ("losses_total", "counter", "Leases lost.", losses, 1),
   M ("releases_total", "counter", "Successful releases.", releases, 1),
   M ("release_failures_total", "counter", "Failed releases.", release_failures, 1),
   M ("backend_errors_total", "counter",
      "Statements and connections that failed with a backend error.", backend_errors, 1),
   M ("requests_total", "counter", "Statements sent to the database.", requests, 1),
   M ("failovers_total", "counter", "Connections that found a new primary (a lock-delay began).",
      failovers, 1),
   M ("durability_warnings_total", "counter",
      "Connections whose grants may not survive a failover.", durability_warnings, 1),
   M ("leases_held", "gauge", "Leases held by this process now.", leases_held, 1),
#undef M
};

size_t leaselock_stats_prometheus (const leaselock_stats_t *s, const char *labels, char *buf,
                                   size_t size)
{
   size_t len = 0;
   if (size > 0)
      buf[0] = '\0';
   if (!s)
      return 0;
   const char *lb = labels && *labels ? labels : "", *sep = *lb ? "," : "";
   for (size_t i = 0; i < sizeof metrics / sizeof metrics[0]; i++) {
      uint64_t v = *(const uint64_t *)((const char *)s + metrics[i].offset);
      put (buf, size, &len, "# HELP leaselock_%s %s\n# TYPE leaselock_%s %s\n", metrics[i].name,
           metrics[i].help, metrics[i].name, metrics[i].type);
      if (metrics[i].scale == 1)
         put (buf, size, &len, "leaselock_%s{%s} %" PRIu64 "\n", metrics[i].name, lb, v);
      else
         put (buf, size, &len, "leaselock_%s{%s} %.3f\n", metrics[i].name, lb,
              (double)v * metrics[i].scale);
   }
   const char *h = "leaselock_request_duration_seconds";
   put (buf, size, &len, "# HELP %s Round trip of each statement.\n# TYPE %s histogram\n", h, h);
   uint64_t cum = 0;
   for (int i = 0; i < LEASELOCK_LATENCY_BUCKETS; i++) {
      cum += s->latency_count[i];
      if (s->latency_le_us[i] == UINT64_MAX)
         put (buf, size, &len, "%s_bucket{%s%sle=\"+Inf\"} %" PRIu64 "\n", h, lb, sep, cum);
      else
         put (buf, size, &len, "%s_bucket{%s%sle=\"%g\"} %" PRIu64 "\n", h, lb, sep,
              (double)s->latency_le_us[i] / 1e6, cum);
   }
   put (buf, size, &len, "%s_sum{%s} %.6f\n%s_count{%s} %" PRIu64 "\n", h, lb,
        (double)s->latency_sum_us / 1e6, h, lb, cum);
   return len;
}
