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
 *
 * testlib.c holds the shared counts and the helpers' bodies: every suite
 * and its case files (queue_cases.c, notify_cases.c) link it, so a CHECK
 * that fails in any of them counts for the test that runs it.
 *
 * Ownership: key() returns a buffer of its own (a ring of 8 per thread);
 * client() returns a client the caller destroys, backend_open() a
 * connection the caller closes with (*b)->close; the rest borrow what they
 * are given for the call.
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

/* The counts tl_summary prints, and whether the running test failed. */
extern int tl_passed, tl_failed, tl_cur_failed;

void tl_fail (const char *file, int line, const char *what);

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

double tl_seconds (void);

/* One test's line; its time when it took a second or more (what makes a
 * suite long). */
void tl_report (const char *name, double secs);

int tl_summary (const char *suite);

/* ---- helpers ----------------------------------------------------------- */

/* The backend under test and this run's key prefix (tl_start). */
extern const char *URI;
extern char PFX[64];

/* Sleeps ms of real time. */
void sleep_ms (int64_t ms);

int64_t mono_ms (void);

/* Sets URI and PFX ("<suite>-<8 random hex digits>"), makes stdout line
 * buffered and says what runs where (the URI without its password). */
void tl_start (const char *suite, const char *uri);

/* PFX/name, in a ring of 8 buffers per thread. */
const char *key (const char *name);

/* A client on URI; NULL (and why, on stderr) when it cannot be created. */
leaselock_client_t *client (const char *label);

/* A connection straight to uri's backend (its table in *b), below the
 * engine; NULL (and why, on stderr) when it cannot be opened. */
void *backend_open (const char *uri, const ll_backend_t **b);

leaselock_acquire_opts_t opts (int64_t ttl_ms, bool auto_renew);

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
bool collect (const leaselock_record_t *rec, void *ud);

#endif
