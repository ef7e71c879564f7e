/*
 * testlib.h - the C suites' few asserts and the helpers they share. A test
 * is a void function; a failed CHECK prints where and returns from it.
 * main() calls RUN() for each test and ends with tl_summary(), which prints
 * "N passed, N failed" and gives the exit status. TEST_FILTER=substr runs
 * only matching tests.
 *
 * A suite against a backend starts with tl_start(suite, uri): URI is then
 * the backend under test and PFX a prefix of this run's own, under which
 * key() names every key (a persistent server can be reused).
 */
#ifndef LL_TESTLIB_H
#define LL_TESTLIB_H

#include "ll_internal.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int tl_passed, tl_failed, tl_cur_failed;

static inline void tl_fail (const char *file, int line, const char *what)
{
   fprintf (stderr, "    FAIL %s:%d: %s\n", file, line, what);
   tl_cur_failed = 1;
}

#define CHECK(cond)                                                                                \
   do {                                                                                            \
      if (!(cond)) {                                                                               \
         tl_fail (__FILE__, __LINE__, #cond);                                                      \
         return;                                                                                   \
      }                                                                                            \
   } while (0)

/* Checks an int64 equality and shows both values. */
#define CHECK_EQ(a, b)                                                                             \
   do {                                                                                            \
      long long _a = (long long)(a), _b = (long long)(b);                                          \
      if (_a != _b) {                                                                              \
         char _m[512];                                                                             \
         snprintf (_m, sizeof _m, "%s == %s (%lld != %lld)", #a, #b, _a, _b);                      \
         tl_fail (__FILE__, __LINE__, _m);                                                         \
         return;                                                                                   \
      }                                                                                            \
   } while (0)

/* A call failed with the given code and its message contains substr. */
#define CHECK_ERR(ok, err, want_code, substr)                                                      \
   do {                                                                                            \
      if ((ok) || (err).code != (want_code) || !strstr ((err).message, (substr))) {                \
         char _m[768];                                                                             \
         snprintf (_m, sizeof _m, "%s: want %s containing \"%s\", got ok=%d %s \"%s\"", #ok,       \
                   leaselock_code_name (want_code), (substr), (int)(ok),                           \
                   leaselock_code_name ((err).code), (err).message);                               \
         tl_fail (__FILE__, __LINE__, _m);                                                         \
         return;                                                                                   \
      }                                                                                            \
   } while (0)

/* A call succeeded; shows the error otherwise. */
#define CHECK_OK(ok, err)                                                                          \
   do {                                                                                            \
      if (!(ok)) {                                                                                 \
         char _m[768];                                                                             \
         snprintf (_m, sizeof _m, "%s failed: %s %s", #ok, leaselock_code_name ((err).code),       \
                   (err).message);                                                                 \
         tl_fail (__FILE__, __LINE__, _m);                                                         \
         return;                                                                                   \
      }                                                                                            \
   } while (0)

/* Runs a checker that reports with tl_fail (file, line, ...), and returns
 * from the test when it failed: CHECK_CALL (expect_x (a, b, __LINE__)). */
#define CHECK_CALL(call)                                                                           \
   do {                                                                                            \
      call;                                                                                        \
      if (tl_cur_failed)                                                                           \
         return;                                                                                   \
   } while (0)

#define RUN(fn)                                                                                    \
   do {                                                                                            \
      const char *_f = getenv ("TEST_FILTER");                                                     \
      if (_f && *_f && !strstr (#fn, _f))                                                          \
         break;                                                                                    \
      tl_cur_failed = 0;                                                                           \
      double _t0 = tl_seconds ();                                                                  \
      fn ();                                                                                       \
      tl_report (#fn, tl_seconds () - _t0);                                                        \
   } while (0)

/* A test that mostly waits (TTLs running out, stalls, skewed clocks,
 * server restarts): the plain suites run it; the sanitizer and valgrind
 * runs, which set TEST_SKIP_SLOW, skip it, so that make test stays short.
 * Their quick tests and the in-process fault suite cover the same calls
 * and error paths under the sanitizers. */
#define RUN_SLOW(fn)                                                                               \
   do {                                                                                            \
      const char *_s = getenv ("TEST_SKIP_SLOW");                                                  \
      if (_s && *_s && strcmp (_s, "0") != 0) {                                                    \
         fprintf (stderr, "  skip %s (waits: the plain suite runs it)\n", #fn);                    \
         break;                                                                                    \
      }                                                                                            \
      RUN (fn);                                                                                    \
   } while (0)

static inline double tl_seconds (void)
{
   struct timespec ts;
   clock_gettime (CLOCK_MONOTONIC, &ts);
   return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* One test's line; its time when it took a second or more (what makes a
 * suite long). */
static inline void tl_report (const char *name, double secs)
{
   char took[32] = "";
   if (secs >= 1.0)
      snprintf (took, sizeof took, " (%.1f s)", secs);
   if (tl_cur_failed) {
      tl_failed++;
      fprintf (stderr, "  not ok %s%s\n", name, took);
   } else {
      tl_passed++;
      fprintf (stderr, "  ok %s%s\n", name, took);
   }
}

static inline int tl_summary (const char *suite)
{
   printf ("%s: %d passed, %d failed\n", suite, tl_passed, tl_failed);
   return tl_failed ? 1 : 0;
}

/* ---- helpers ----------------------------------------------------------- */

/* The backend under test and this run's key prefix (tl_start). */
static const char *URI __attribute__ ((unused));
static char PFX[64] __attribute__ ((unused));

/* Sleeps ms of real time. */
static inline void sleep_ms (int64_t ms)
{
   struct timespec ts = { (time_t)(ms / 1000), (long)(ms % 1000) * 1000000 };
   while (nanosleep (&ts, &ts) != 0) {
   }
}

static inline int64_t mono_ms (void)
{
   struct timespec ts;
   clock_gettime (CLOCK_MONOTONIC, &ts);
   return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Sets URI and PFX ("<suite>-<8 random hex digits>"), makes stdout line
 * buffered and says what runs where (the URI without its password). */
static inline void tl_start (const char *suite, const char *uri)
{
   setvbuf (stdout, NULL, _IOLBF, 0);
   URI = uri;
   unsigned r = 0;
   FILE *f = fopen ("/dev/urandom", "rb");
   if (!f || fread (&r, sizeof r, 1, f) != 1)
      r = (unsigned)getpid ();
   if (f)
      fclose (f);
   snprintf (PFX, sizeof PFX, "%s-%08x", suite, r);
   char shown[512];
   ll_uri_redact (uri, shown, sizeof shown);
   printf ("%s suite on %s (keys under %s/)\n", suite, shown, PFX);
}

/* PFX/name, in a ring of 8 buffers per thread. */
static inline const char *key (const char *name)
{
   static _Thread_local char buf[8][300];
   static _Thread_local int i;
   char *b = buf[i++ % 8];
   snprintf (b, 300, "%s/%s", PFX, name);
   return b;
}

/* A client on URI; NULL (and why, on stderr) when it cannot be created. */
static inline leaselock_client_t *client (const char *label)
{
   leaselock_error_t err;
   leaselock_client_t *c = leaselock_client_new (URI, label, &err);
   if (!c)
      fprintf (stderr, "    client_new: %s %s\n", leaselock_code_name (err.code), err.message);
   return c;
}

/* A connection straight to uri's backend (its table in *b), below the
 * engine; NULL (and why, on stderr) when it cannot be opened. */
static inline void *backend_open (const char *uri, const ll_backend_t **b)
{
   leaselock_error_t err;
   *b = ll_backend_for_uri (uri, &err);
   void *conn = *b ? (*b)->open (uri, &err) : NULL;
   if (!conn)
      fprintf (stderr, "    open: %s %s\n", leaselock_code_name (err.code), err.message);
   return conn;
}

static inline leaselock_acquire_opts_t opts (int64_t ttl_ms, bool auto_renew)
{
   leaselock_acquire_opts_t o;
   leaselock_acquire_opts_init (&o);
   o.ttl_ms = ttl_ms;
   o.auto_renew = auto_renew;
   return o;
}

/* What a list call returned: every record counts in n, the first
 * TL_LIST_MAX are kept (key NUL-terminated, its length, its fence). */
#define TL_LIST_MAX 32
typedef struct
{
   int n;
   char keys[TL_LIST_MAX][LEASELOCK_KEY_MAX + 1];
   size_t lens[TL_LIST_MAX];
   int64_t fences[TL_LIST_MAX];
} listing_t;

/* A leaselock_record_cb filling the listing_t ud (NULL: counts nothing). */
static inline bool collect (const leaselock_record_t *rec, void *ud)
{
   listing_t *L = ud;
   if (!L)
      return true;
   if (L->n < TL_LIST_MAX) {
      memcpy (L->keys[L->n], rec->key, rec->key_len);
      L->keys[L->n][rec->key_len] = '\0';
      L->lens[L->n] = rec->key_len;
      L->fences[L->n] = rec->fence;
   }
   L->n++;
   return true;
}

#endif
