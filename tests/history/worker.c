/*
 * worker.c - the C worker of the history checker (tests/history/README.md).
 *
 *   hist_worker URI RUNDIR KEYPREFIX WORKER_ID THREADS SECONDS NKEYS SEED
 *
 * THREADS threads (half share one client, half have their own) take
 * leases on KEYPREFIX/0 .. KEYPREFIX/NKEYS-1 until SECONDS have passed,
 * with TTLs down to 20 ms, explicit renews of varying TTL, auto-renewal
 * on and off, min_hold sometimes, release or expiry. Each grant becomes
 * one history line in RUNDIR/WORKER_ID.tN.hist, on CLOCK_MONOTONIC:
 *
 *   key fence t_acquired_ns t_end_ns t_late_ns end worker binding inc t_write_ns ttl_ms flags
 *
 * While it holds a lease the worker increments RUNDIR/counter.K (read,
 * pause, write: not atomic), only while its own view says the lease is
 * held, and records whether it did (inc) and when the write returned.
 */
#include "leaselock.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* A write is started only with this much of the lease left. */
#define GUARD_NS (2 * 1000000LL)
/* Sleeps inside a hold are cut into pieces this long, each followed by a
 * read of the remaining time, so a renewal the background thread made is
 * seen before the lease could run out. */
#define CHUNK_NS (2 * 1000000LL)

static const char *URI, *RUNDIR, *PREFIX, *WID;
static int NKEYS;
static int64_t END_NS;
static uint64_t SEED;

static int64_t now_ns (void)
{
   struct timespec ts;
   clock_gettime (CLOCK_MONOTONIC, &ts);
   return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void sleep_ns (int64_t ns)
{
   if (ns <= 0)
      return;
   struct timespec ts = { (time_t)(ns / 1000000000LL), (long)(ns % 1000000000LL) };
   while (nanosleep (&ts, &ts) != 0 && errno == EINTR)
      ;
}

static uint64_t next_rand (uint64_t *s)
{
   *s ^= *s >> 12;
   *s ^= *s << 25;
   *s ^= *s >> 27;
   return *s * 2685821657736338717ULL;
}

static int64_t pick (uint64_t *s, const int64_t *v, size_t n)
{
   return v[next_rand (s) % n];
}

/* One grant as the worker sees it. */
typedef struct
{
   leaselock_lease_t *lease;
   int64_t deadline_ns; /* conservatively late: read time + remaining */
   int64_t tight_ns;    /* the least such bound since the deadline last moved */
   int jumps;           /* moves later not made by the worker's own renews */
   int64_t lost_ns;     /* when the worker saw it lost (the clock read after) */
   bool lost;
} hold_t;

/* The local deadline from the remaining time: the engine's deadline is at
 * most (the time the remaining time was computed) + remaining, and that
 * time is before the clock read that follows. Once nothing is left the
 * last estimate stands.
 *
 * Each such bound is late by up to 1 ms (whole milliseconds) plus the
 * read's own time. tight_ns keeps the least bound while the deadline
 * stays put (README.md): a bound more than 1 ms + the read's time above
 * it means a renewal moved the deadline, and reset (after the worker's
 * own renews) starts over. */
static void read_deadline_reset (hold_t *h, bool reset)
{
   int64_t t0 = now_ns ();
   int64_t r = leaselock_lease_remaining_ms (h->lease);
   int64_t t = now_ns ();
   if (r <= 0) {
      /* The engine can declare it lost before the deadline (a renewal
       * answered NOT_HELD): the worker stops when it sees that. */
      if (!h->lost)
         h->lost_ns = t;
      h->lost = true;
      return;
   }
   h->deadline_ns = t + r * 1000000LL;
   bool jump = h->deadline_ns - h->tight_ns > 1000000 + (t - t0);
   if (jump && !reset)
      h->jumps++;
   if (reset || jump || h->deadline_ns < h->tight_ns)
      h->tight_ns = h->deadline_ns;
}

static void read_deadline (hold_t *h)
{
   read_deadline_reset (h, false);
}

/* Sleeps ns in chunks, reading the deadline after each. */
static void hold_sleep (hold_t *h, int64_t ns)
{
   int64_t until = now_ns () + ns;
   while (!h->lost) {
      int64_t left = until - now_ns ();
      if (left <= 0)
         break;
      sleep_ns (left < CHUNK_NS ? left : CHUNK_NS);
      read_deadline (h);
   }
}

static int64_t read_counter (int fd)
{
   char buf[32] = { 0 };
   if (pread (fd, buf, sizeof buf - 1, 0) < 0)
      return -1;
   return strtoll (buf, NULL, 10);
}

static void write_counter (int fd, int64_t v)
{
   char buf[32];
   int n = snprintf (buf, sizeof buf, "%020" PRId64 "\n", v);
   if (pwrite (fd, buf, (size_t)n, 0) != n)
      perror ("pwrite counter");
}

/* Read, pause, write +1, each step only while the lease is ours by the
 * local view. Returns the time the write returned, 0 when skipped. */
static int64_t increment (hold_t *h, int fd, uint64_t *rs)
{
   read_deadline (h);
   if (h->lost || h->deadline_ns - now_ns () < GUARD_NS)
      return 0;
   int64_t v = read_counter (fd);
   sleep_ns ((int64_t)(next_rand (rs) % 300) * 1000);
   read_deadline (h);
   if (h->lost || h->deadline_ns - now_ns () < GUARD_NS)
      return 0;
   write_counter (fd, v + 1);
   return now_ns ();
}

typedef struct
{
   int id;
   leaselock_client_t *client;
   FILE *out;
   int fds[64];
   int64_t grants, incs, errors;
} worker_t;

static const char *end_name (leaselock_code_t code)
{
   switch (code) {
      case LEASELOCK_OK:
         return "released";
      case LEASELOCK_NOT_HELD:
         return "not-held";
      case LEASELOCK_LOST:
         return "lost";
      default:
         return "error";
   }
}

static const int64_t TTLS[] = { 20, 20, 20, 25, 30, 50, 100, 250 };
static const int64_t RENEW_TTLS[] = { 20, 20, 30, 50, 100 };

/* One iteration: maybe a grant, recorded as one line. */
static void one_grant (worker_t *w, uint64_t *rs)
{
   int k = (int)(next_rand (rs) % (uint64_t)NKEYS);
   char key[256];
   snprintf (key, sizeof key, "%s/%d", PREFIX, k);
   leaselock_acquire_opts_t o;
   leaselock_acquire_opts_init (&o);
   o.ttl_ms = pick (rs, TTLS, sizeof TTLS / sizeof TTLS[0]);
   o.auto_renew = next_rand (rs) % 2;
   o.min_hold_ms = next_rand (rs) % 4 == 0 ? 1 + (int64_t)(next_rand (rs) % 30) : 0;
   bool one_try = next_rand (rs) % 3 == 0;
   o.timeout_ms = one_try ? 0 : 2000;
   leaselock_error_t err;
   hold_t h = { 0 };
   if (!leaselock_acquire (w->client, key, strlen (key), &o, &h.lease, &err)) {
      if (err.code == LEASELOCK_BUSY)
         sleep_ns ((int64_t)(next_rand (rs) % 1000) * 1000);
      else if (err.code != LEASELOCK_TIMEOUT) {
         fprintf (stderr, "worker %s.t%d: acquire: %s %s\n", WID, w->id,
                  leaselock_code_name (err.code), err.message);
         w->errors++;
      }
      return;
   }
   int64_t t_acq = now_ns ();
   h.deadline_ns = h.tight_ns = t_acq;
   read_deadline_reset (&h, true);
   if (h.lost)
      h.lost_ns = t_acq; /* it ran out before acquire returned: never held */

   int steps = (int)(next_rand (rs) % 4), inc_step = (int)(next_rand (rs) % (steps + 1));
   int renews = 0;
   int64_t t_write = 0, t_call = INT64_MAX;
   leaselock_code_t end = LEASELOCK_OK;
   bool ended = false;
   for (int s = 0; s <= steps && !h.lost && !ended; s++) {
      if (s == inc_step)
         t_write = increment (&h, w->fds[k], rs);
      if (s == steps)
         break;
      hold_sleep (&h, (int64_t)(next_rand (rs) % (uint64_t)(o.ttl_ms * 1000 / 3)) * 1000);
      if (h.lost || next_rand (rs) % 2)
         continue;
      int64_t ttl = pick (rs, RENEW_TTLS, sizeof RENEW_TTLS / sizeof RENEW_TTLS[0]);
      int64_t t = now_ns ();
      if (leaselock_lease_renew (h.lease, ttl, &err)) {
         renews++;
         read_deadline_reset (&h, true);
      } else if (err.code == LEASELOCK_NOT_HELD || err.code == LEASELOCK_LOST) {
         t_call = t;
         end = err.code;
         ended = true;
      } else {
         w->errors++;
         read_deadline (&h);
      }
   }
   if (!ended && !h.lost && !o.auto_renew && next_rand (rs) % 4 == 0) {
      /* Overstay: keep it until the local deadline passes. */
      while (!h.lost)
         hold_sleep (&h, CHUNK_NS);
   }
   if (!ended && h.lost) {
      end = LEASELOCK_LOST;
      ended = true;
   }
   if (!ended) {
      read_deadline (&h);
      t_call = now_ns ();
      end = leaselock_lease_release (h.lease, &err) ? LEASELOCK_OK : err.code;
      if (end != LEASELOCK_OK && end != LEASELOCK_NOT_HELD && end != LEASELOCK_LOST)
         w->errors++;
   }
   /* Without auto-renewal only the worker's own renews move the deadline,
    * so the least bound since the last one is still late; with it, a
    * renewal may have moved it unseen by less than the bounds' spread. */
   int64_t bound = o.auto_renew ? h.deadline_ns : h.tight_ns;
   if (h.lost && h.lost_ns < t_call)
      t_call = h.lost_ns;
   int64_t t_end = t_call < bound ? t_call : bound;
   int64_t t_late = t_call < h.deadline_ns ? t_call : h.deadline_ns;
   fprintf (w->out,
            "%s %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 " %s %s.t%d c %d %" PRId64 " %" PRId64
            " ar=%d,mh=%" PRId64 ",rn=%d,ot=%d,jp=%d\n",
            key, leaselock_lease_fence (h.lease), t_acq, t_end, t_late, end_name (end), WID, w->id,
            t_write ? 1 : 0, t_write, o.ttl_ms, (int)o.auto_renew, o.min_hold_ms, renews,
            (int)one_try, h.jumps);
   leaselock_lease_destroy (h.lease);
   w->grants++;
   w->incs += t_write ? 1 : 0;
}

static void *thread_main (void *arg)
{
   worker_t *w = arg;
   uint64_t rs = SEED * 0x9E3779B97F4A7C15ULL + (uint64_t)w->id * 7919 + 1;
   for (const char *p = WID; *p; p++)
      rs = rs * 31 + (unsigned char)*p;
   while (now_ns () < END_NS)
      one_grant (w, &rs);
   fprintf (w->out, "# done grants=%" PRId64 " incs=%" PRId64 " errors=%" PRId64 "\n", w->grants,
            w->incs, w->errors);
   return NULL;
}

int main (int argc, char **argv)
{
   if (argc != 9) {
      fprintf (stderr, "usage: %s URI RUNDIR KEYPREFIX WORKER_ID THREADS SECONDS NKEYS SEED\n",
               argv[0]);
      return 2;
   }
   URI = argv[1];
   RUNDIR = argv[2];
   PREFIX = argv[3];
   WID = argv[4];
   int threads = atoi (argv[5]);
   double seconds = atof (argv[6]);
   NKEYS = atoi (argv[7]);
   SEED = strtoull (argv[8], NULL, 10);
   if (threads < 1 || threads > 64 || NKEYS < 1 || NKEYS > 64) {
      fprintf (stderr, "%s: THREADS and NKEYS: 1..64\n", argv[0]);
      return 2;
   }
   leaselock_error_t err;
   leaselock_client_t *shared = leaselock_client_new (URI, "history", &err);
   if (!shared) {
      fprintf (stderr, "worker %s: %s\n", WID, err.message);
      return 1;
   }
   int fds[64];
   for (int k = 0; k < NKEYS; k++) {
      char path[4096];
      snprintf (path, sizeof path, "%s/counter.%d", RUNDIR, k);
      fds[k] = open (path, O_RDWR | O_CREAT, 0644);
      if (fds[k] < 0) {
         perror (path);
         return 1;
      }
   }
   END_NS = now_ns () + (int64_t)(seconds * 1e9);
   worker_t *ws = calloc ((size_t)threads, sizeof *ws);
   pthread_t *th = calloc ((size_t)threads, sizeof *th);
   int rc = 0;
   for (int i = 0; i < threads; i++) {
      worker_t *w = &ws[i];
      w->id = i;
      memcpy (w->fds, fds, sizeof fds);
      w->client = i % 2 ? leaselock_client_new (URI, "history", &err) : shared;
      char path[4096];
      snprintf (path, sizeof path, "%s/%s.t%d.hist", RUNDIR, WID, i);
      w->out = fopen (path, "w");
      if (!w->client || !w->out) {
         fprintf (stderr, "worker %s.t%d: %s\n", WID, i, w->client ? path : err.message);
         return 1;
      }
      fprintf (w->out, "# worker=%s.t%d binding=c backend=%s pid=%d\n", WID, i,
               leaselock_client_backend (w->client), (int)getpid ());
      pthread_create (&th[i], NULL, thread_main, w);
   }
   for (int i = 0; i < threads; i++) {
      pthread_join (th[i], NULL);
      if (fclose (ws[i].out) != 0)
         rc = 1;
      if (ws[i].client != shared)
         leaselock_client_destroy (ws[i].client);
   }
   leaselock_client_destroy (shared);
   free (ws);
   free (th);
   return rc;
}
