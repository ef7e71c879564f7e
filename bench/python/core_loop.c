/*
 * core_loop.c - the C side of bench/python/bench.py: acquire + release
 * pairs through the leaselock core alone, with the options `with lock:`
 * uses (TTL 30 s, auto-renewal, waiting as long as it takes), on a client
 * of its own. Built by `make bench-python` into a small shared library
 * that bench.py loads with ctypes (which releases the GIL around the
 * call); never part of the shipped extension. It also holds the bare
 * sqlite3 program of bench/core_sqlite.c (bare_sqlite.h), which
 * bench/report/run.py puts beside `with lock:` on the same file.
 */
#include "leaselock.h"

#include "../bare_sqlite.h"

#include <stdio.h>
#include <stdlib.h>
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

/* The bare sqlite3 program on the file PATH (the schema made by the
 * engine's client first): a handle for llbench_bare_sqlite_pairs, freed by
 * llbench_bare_sqlite_close; NULL on failure, with why in errbuf (errlen
 * bytes). It stays open between rounds, as the binding's client does. */
LL_BENCH_API void *llbench_bare_sqlite_open (const char *path, char *errbuf, size_t errlen)
{
   bare_sqlite_t *b = malloc (sizeof *b);
   if (!b) {
      snprintf (errbuf, errlen, "out of memory");
      return NULL;
   }
   if (!bare_sqlite_open (b, path)) {
      snprintf (errbuf, errlen, "%s", b->err);
      bare_sqlite_close (b);
      free (b);
      return NULL;
   }
   return b;
}

/* Seconds taken by N pairs on KEY through the handle; -1 on failure, with
 * why in errbuf. */
LL_BENCH_API double llbench_bare_sqlite_pairs (void *handle, const char *key, long long n,
                                               char *errbuf, size_t errlen)
{
   bare_sqlite_t *b = handle;
   struct timespec t0, t1;
   clock_gettime (CLOCK_MONOTONIC, &t0);
   bool ok = bare_sqlite_pairs (b, key, (long)n);
   clock_gettime (CLOCK_MONOTONIC, &t1);
   if (!ok) {
      snprintf (errbuf, errlen, "%s", b->err);
      return -1;
   }
   return (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
}

LL_BENCH_API void llbench_bare_sqlite_close (void *handle)
{
   if (handle) {
      bare_sqlite_close (handle);
      free (handle);
   }
}
