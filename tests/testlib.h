/*
 * testlib.h - the C suites' few asserts. A test is a void function; a
 * failed CHECK prints where and returns from it. main() calls RUN() for
 * each test and ends with tl_summary(), which prints "N passed, N failed"
 * and gives the exit status. TEST_FILTER=substr runs only matching tests.
 */
#ifndef LL_TESTLIB_H
#define LL_TESTLIB_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

#define RUN(fn)                                                                                    \
   do {                                                                                            \
      const char *_f = getenv ("TEST_FILTER");                                                     \
      if (_f && *_f && !strstr (#fn, _f))                                                          \
         break;                                                                                    \
      tl_cur_failed = 0;                                                                           \
      fn ();                                                                                       \
      if (tl_cur_failed) {                                                                         \
         tl_failed++;                                                                              \
         fprintf (stderr, "  not ok %s\n", #fn);                                                   \
      } else {                                                                                     \
         tl_passed++;                                                                              \
         fprintf (stderr, "  ok %s\n", #fn);                                                       \
      }                                                                                            \
   } while (0)

static inline int tl_summary (const char *suite)
{
   printf ("%s: %d passed, %d failed\n", suite, tl_passed, tl_failed);
   return tl_failed ? 1 : 0;
}

#endif
