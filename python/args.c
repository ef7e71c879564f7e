/*
 * args.c - the checks of the arguments the extension passes to the core:
 * keys and prefixes, durations in seconds (or timedelta) to milliseconds.
 * Their messages name the argument; the core checks the values again.
 */
#include "module.h"

#include <datetime.h>
#include <math.h>
#include <string.h>

#define TTL_MAX_S ((double)LEASELOCK_TTL_MAX_MS / 1000.0)

/* The UTF-8 of str s, or NULL with ValueError (code INVALID) naming the
 * argument when it holds a lone surrogate. */
const char *pyll_utf8_arg (PyObject *s, const char *name, Py_ssize_t *n)
{
   const char *u = PyUnicode_AsUTF8AndSize (s, n);
   if (!u && PyErr_ExceptionMatches (PyExc_UnicodeEncodeError)) {
      PyErr_Clear ();
      pyll_raise_invalid ("%s must be valid UTF-8 text (it holds a lone surrogate)", name);
   }
   return u;
}

/* A key or prefix: str, valid UTF-8 (no lone surrogate), 1..255 bytes (0
 * allowed for a prefix), no NUL. *s points into the str's UTF-8 cache. */
int pyll_key_arg (PyObject *key, const char *name, bool allow_empty, const char **s, Py_ssize_t *n)
{
   if (!PyUnicode_Check (key)) {
      pyll_raise_type ("%s must be a str, not %.100s", name, Py_TYPE (key)->tp_name);
      return -1;
   }
   if (!(*s = pyll_utf8_arg (key, name, n)))
      return -1;
   if (*n == 0 && !allow_empty) {
      pyll_raise_invalid ("%s must not be empty", name);
      return -1;
   }
   if (*n > LEASELOCK_KEY_MAX) {
      pyll_raise_invalid ("%s is %zd bytes long in UTF-8 (at most %d)", name, *n,
                          LEASELOCK_KEY_MAX);
      return -1;
   }
   if (memchr (*s, '\0', (size_t)*n)) {
      pyll_raise_invalid ("%s must not contain a NUL character", name);
      return -1;
   }
   return 0;
}

/* Seconds (int or float) to milliseconds, range-checked for kind:
 * TTL 0.001 .. 30 days (the contract's 1 ms to 30 days: shorter is
 * refused); DURATION 0 .. 30 days; TIMEOUT None/inf (forever, -1) or 0 ..
 * 30 days, 0 meaning one try. A DURATION or TIMEOUT above 0 but below
 * 1 ms rounds up to 1 ms. */
static int seconds_value (PyObject *v, const char *name, pyll_secs_t kind, int64_t *ms)
{
   if (kind == SECS_TIMEOUT && v == Py_None) {
      *ms = -1;
      return 0;
   }
   if (PyBool_Check (v) || !(PyFloat_Check (v) || PyLong_Check (v))) {
      pyll_raise_type ("%s must be a number of seconds (int or float) or a datetime.timedelta%s, "
                       "not %.100s",
                       name, kind == SECS_TIMEOUT ? " or None" : "", Py_TYPE (v)->tp_name);
      return -1;
   }
   double d = PyFloat_AsDouble (v);
   if (d == -1.0 && PyErr_Occurred ()) {
      if (!PyErr_ExceptionMatches (PyExc_OverflowError))
         return -1;
      PyErr_Clear ();
      /* An int too large for a double: only its sign matters. */
      PyObject *zero = PyLong_FromLong (0);
      int negative = zero ? PyObject_RichCompareBool (v, zero, Py_LT) : -1;
      Py_XDECREF (zero);
      if (negative < 0)
         return -1;
      d = negative ? -INFINITY : INFINITY;
   }
   if (isnan (d)) {
      pyll_raise_invalid ("%s must be a number of seconds, not NaN", name);
      return -1;
   }
   if (kind == SECS_TIMEOUT && isinf (d) && d > 0) {
      *ms = -1;
      return 0;
   }
   if (d < 0) {
      pyll_raise_invalid ("%s must not be negative (got %g s)", name, d);
      return -1;
   }
   if (kind == SECS_TTL && d == 0) {
      pyll_raise_invalid ("%s must be greater than 0 (got 0 s)", name);
      return -1;
   }
   if (kind == SECS_TTL && d < 0.001) {
      pyll_raise_invalid ("%s must be at least 0.001 s (1 ms), got %g s", name, d);
      return -1;
   }
   if (!(d <= TTL_MAX_S)) {
      pyll_raise_invalid ("%s must be at most 30 days (2592000 s), got %g s", name, d);
      return -1;
   }
   int64_t v_ms = (int64_t)llround (d * 1000.0);
   if (v_ms == 0 && d > 0)
      v_ms = 1;
   *ms = v_ms;
   return 0;
}

/* A duration argument in milliseconds: seconds (int or float) or a
 * datetime.timedelta, checked for kind (seconds_value says how). */
int pyll_seconds_arg (PyObject *v, const char *name, pyll_secs_t kind, int64_t *ms)
{
   if (v == Py_None || PyFloat_Check (v) || PyLong_Check (v))
      return seconds_value (v, name, kind, ms);
   /* Only now the datetime C API (PyDateTime_IMPORT fills this file's own
    * PyDateTimeAPI: datetime.h makes it static): importing datetime at
    * module init was a twentieth of `import leaselock`. Two threads may
    * both import it: they store the same capsule pointer. */
   if (!PyDateTimeAPI) {
      PyDateTime_IMPORT;
      if (!PyDateTimeAPI)
         return -1;
   }
   if (!PyDelta_Check (v))
      return seconds_value (v, name, kind, ms);
   PyObject *secs = PyObject_CallMethod (v, "total_seconds", NULL);
   if (!secs)
      return -1;
   int rc = seconds_value (secs, name, kind, ms);
   Py_DECREF (secs);
   return rc;
}
