/*
 * core_loop.c - the C side of bench/python/bench.py: acquire + release
 * pairs through the leaselock core alone, with the options `with lock:`
 * uses (TTL 30 s, auto-renewal, waiting as long as it takes), on a client
 * of its own. Built by `make bench-python` into a small shared library
 * that bench.py loads with ctypes (which releases the GIL around the
 * call); never part of the shipped extension.
 */
#include "leaselock.h"

#include <stdio.h>
#include <time.h>

#define LL_BENCH_API __attribute__ ((visibility ("default")))

static bool pairs (leaselock_client_t *c, const char *key, size_t key_len, long long n,
                   leaselock_error_t *err)
{
   leaselock_acquire_opts_t o;
   leaselock_acquire_opts_init (&o);
   o.ttl_ms = 30000;
   o.timeout_ms = -1;
   bool ok = true;
   for (long long i = 0; ok && i < n; i++) {
      leaselock_lease_t *l = NULL;
      ok = leaselock_acquire (c, key, key_len, &o, &l, err) && leaselock_lease_release (l, err);
      leaselock_lease_destroy (l);
   }
   return ok;
}

/* Seconds taken by n pairs on key, after 20 pairs outside the timing
 * that warm the new client's connection (prepared statements, page
 * cache), as the binding's long-lived client is. On failure -1, with
 * the core's error in errbuf (errlen bytes). */
LL_BENCH_API double llbench_core_loop (const char *uri, const char *key, size_t key_len,
                                       long long n, char *errbuf, size_t errlen)
{
   leaselock_error_t err = { 0 };
   leaselock_client_t *c = leaselock_client_new (uri, NULL, &err);
   struct timespec t0, t1;
   bool ok = c && pairs (c, key, key_len, 20, &err);
   clock_gettime (CLOCK_MONOTONIC, &t0);
   ok = ok && pairs (c, key, key_len, n, &err);
   clock_gettime (CLOCK_MONOTONIC, &t1);
   leaselock_client_destroy (c);
   if (!ok) {
      snprintf (errbuf, errlen, "%s: %s", leaselock_code_name (err.code), err.message);
      return -1;
   }
   return (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
}
