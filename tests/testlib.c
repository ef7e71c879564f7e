/*
 * testlib.c - the C suites' shared state (the pass/fail counts, the URI
 * under test and this run's key prefix) and helpers, linked into every
 * suite and its case files (queue_cases.c, notify_cases.c) so that a CHECK
 * failing in any of them counts for the test that runs it.
 */
#include "testlib.h"

int tl_passed, tl_failed, tl_cur_failed;

void tl_fail (const char *file, int line, const char *what)
{
   fprintf (stderr, "    FAIL %s:%d: %s\n", file, line, what);
   tl_cur_failed = 1;
}

double tl_seconds (void)
{
   struct timespec ts;
   clock_gettime (CLOCK_MONOTONIC, &ts);
   return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void tl_report (const char *name, double secs)
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

int tl_summary (const char *suite)
{
   printf ("%s: %d passed, %d failed\n", suite, tl_passed, tl_failed);
   return tl_failed ? 1 : 0;
}

const char *URI;
char PFX[64];

void sleep_ms (int64_t ms)
{
   struct timespec ts = { (time_t)(ms / 1000), (long)(ms % 1000) * 1000000 };
   while (nanosleep (&ts, &ts) != 0) {
   }
}

int64_t mono_ms (void)
{
   struct timespec ts;
   clock_gettime (CLOCK_MONOTONIC, &ts);
   return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void tl_start (const char *suite, const char *uri)
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

const char *key (const char *name)
{
   static _Thread_local char buf[8][300];
   static _Thread_local int i;
   char *b = buf[i++ % 8];
   snprintf (b, 300, "%s/%s", PFX, name);
   return b;
}

leaselock_client_t *client (const char *label)
{
   leaselock_error_t err;
   leaselock_client_t *c = leaselock_client_new (URI, label, &err);
   if (!c)
      fprintf (stderr, "    client_new: %s %s\n", leaselock_code_name (err.code), err.message);
   return c;
}

void *backend_open (const char *uri, const ll_backend_t **b)
{
   leaselock_error_t err;
   *b = ll_backend_for_uri (uri, &err);
   void *conn = *b ? (*b)->open (uri, &err) : NULL;
   if (!conn)
      fprintf (stderr, "    open: %s %s\n", leaselock_code_name (err.code), err.message);
   return conn;
}

leaselock_acquire_opts_t opts (int64_t ttl_ms, bool auto_renew)
{
   leaselock_acquire_opts_t o;
   leaselock_acquire_opts_init (&o);
   o.ttl_ms = ttl_ms;
   o.auto_renew = auto_renew;
   return o;
}

bool collect (const leaselock_record_t *rec, void *ud)
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
