/*
 * contention.c - many workers on one key: throughput, fairness, waits and
 * hand-off latency.
 *
 * Usage: contention URI WORKERS MODE [SECONDS [HOLD_MS]]
 *   MODE: "procs" (one process and one client each, like cron jobs or
 *   web workers) or "threads" (threads of one process sharing a client);
 *   "fair-procs" and "fair-threads" the same in fair mode.
 *
 * Each worker loops: blocking acquire (timeout 10 s), hold HOLD_MS (default
 * 1 ms), release; for SECONDS (default 5). Every grant is written to a
 * shared log (MAP_SHARED, so processes share it): when the wait began, when
 * the grant came, when the release began. Before the run, one worker alone
 * measures the uncontended acquire+release pair time on the same key, and
 * the hold as its own sleep performs it (a 1 ms sleep takes a little
 * longer: timer slack and wake-up, not the lock's doing), so the ideal rate
 * 1 / (hold + pair) comes from the same machine and run.
 *
 * Prints one line "key=value ..." that bench/contention.sh turns into a
 * table:
 *   grants, per-worker fewest/most (fairness = fewest / most), waits the
 *   window's end cut short (they count in the wait percentiles as waits of
 *   at least that long), useful = grants per second / ideal rate, wait
 *   p50/p99 (ms),
 *   handoff p50/p99 (ms): from a release's start to the next grant of
 *   another worker that was already waiting,
 *   requests per grant: the statements the workers' clients sent
 *   (leaselock_client_stats) over the grants,
 *   hold_ms: the uncontended hold the ideal uses; hold_mean_ms: the holds
 *   as measured under contention.
 */
#define BENCH_NAME "contention"
#include "bench.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_WORKERS 64
#define MAX_GRANTS (1 << 20)

/* One wait: a grant, or a wait that the end of the window cut short
 * (granted is then when it gave up, release_start 0). */
typedef struct grant
{
   double wait_start, granted, release_start;
   int worker;
   bool got;
} grant_t;

typedef struct shared_log
{
   atomic_long n;
   atomic_long timeouts;
   atomic_long errors;
   atomic_long requests; /* sent by the workers' clients */
   grant_t g[MAX_GRANTS];
} shared_log_t;

typedef struct run
{
   const char *uri;
   const char *key;
   int workers;
   bool threads;
   bool fair; /* the workers' acquires in fair mode */
   double seconds;
   double hold_s;
   double start, end; /* the window every worker loops in */
   leaselock_client_t *shared_client;
   shared_log_t *log;
} run_t;

static void sleep_s (double s)
{
   struct timespec ts = { (time_t)s, (long)((s - (double)(time_t)s) * 1e9) };
   while (nanosleep (&ts, &ts) != 0) {
   }
}

static void record (shared_log_t *log, int worker, double w, double g, double r, bool got)
{
   long i = atomic_fetch_add (&log->n, 1);
   if (i < MAX_GRANTS)
      log->g[i] = (grant_t){ w, g, r, worker, got };
}

static void worker_loop (run_t *r, leaselock_client_t *c, int worker)
{
   leaselock_acquire_opts_t o;
   leaselock_acquire_opts_init (&o);
   o.ttl_ms = 10000;
   o.auto_renew = false;
   o.fair = r->fair;
   while (bench_now () < r->start)
      sleep_s (0.0005);
   while (bench_now () < r->end) {
      leaselock_lease_t *l = NULL;
      leaselock_error_t err;
      double w = bench_now ();
      /* No wait runs past the window: one cut short there counts as a wait
       * of at least that long. */
      o.timeout_ms = (int64_t)((r->end - w) * 1e3) + 1;
      if (!leaselock_acquire (c, r->key, strlen (r->key), &o, &l, &err)) {
         if (err.code != LEASELOCK_TIMEOUT)
            atomic_fetch_add (&r->log->errors, 1);
         else if (bench_now () >= r->end)
            record (r->log, worker, w, bench_now (), 0, false);
         else
            atomic_fetch_add (&r->log->timeouts, 1);
         continue;
      }
      double g = bench_now ();
      sleep_s (r->hold_s);
      double rel = bench_now ();
      if (!leaselock_lease_release (l, &err))
         atomic_fetch_add (&r->log->errors, 1);
      leaselock_lease_destroy (l);
      record (r->log, worker, w, g, rel, true);
   }
}

/* Adds the statements c has sent to the log's count. */
static void count_requests (shared_log_t *log, leaselock_client_t *c)
{
   leaselock_stats_t st;
   if (leaselock_client_stats (c, &st, NULL))
      atomic_fetch_add (&log->requests, (long)st.requests);
}

static leaselock_client_t *client_or_die (const char *uri)
{
   leaselock_error_t err;
   leaselock_client_t *c = leaselock_client_new (uri, "bench-contention", &err);
   if (!c)
      bench_die ("client", err.message);
   return c;
}

typedef struct thread_arg
{
   run_t *r;
   int worker;
} thread_arg_t;

static void *thread_main (void *p)
{
   thread_arg_t *a = p;
   worker_loop (a->r, a->r->shared_client, a->worker);
   return NULL;
}

static void run_threads (run_t *r)
{
   pthread_t t[MAX_WORKERS];
   thread_arg_t a[MAX_WORKERS];
   r->shared_client = client_or_die (r->uri);
   for (int i = 0; i < r->workers; i++) {
      a[i] = (thread_arg_t){ r, i };
      if (pthread_create (&t[i], NULL, thread_main, &a[i]) != 0)
         bench_die ("pthread_create", "failed");
   }
   for (int i = 0; i < r->workers; i++)
      pthread_join (t[i], NULL);
   count_requests (r->log, r->shared_client);
   leaselock_client_destroy (r->shared_client);
}

static void run_procs (run_t *r)
{
   pid_t pids[MAX_WORKERS];
   for (int i = 0; i < r->workers; i++) {
      pids[i] = fork ();
      if (pids[i] < 0)
         bench_die ("fork", "failed");
      if (pids[i] == 0) {
         leaselock_client_t *c = client_or_die (r->uri);
         worker_loop (r, c, i);
         count_requests (r->log, c);
         leaselock_client_destroy (c);
         _exit (0);
      }
   }
   for (int i = 0; i < r->workers; i++) {
      int st;
      waitpid (pids[i], &st, 0);
      if (!WIFEXITED (st) || WEXITSTATUS (st) != 0)
         bench_die ("worker", "a worker process failed");
   }
}

/* Median uncontended acquire+release pair, in seconds. */
static double pair_time (const run_t *r)
{
   leaselock_client_t *c = client_or_die (r->uri);
   leaselock_acquire_opts_t o;
   leaselock_acquire_opts_init (&o);
   o.auto_renew = false;
   /* A warm-up first: the Java test server, for one, compiles its hot
    * paths during the first thousand requests. */
   enum
   {
      WARM = 1000,
      N = 401
   };
   double t[N];
   for (int i = -WARM; i < N; i++) {
      leaselock_lease_t *l = NULL;
      leaselock_error_t err;
      double s = bench_now ();
      if (!leaselock_acquire (c, r->key, strlen (r->key), &o, &l, &err) ||
          !leaselock_lease_release (l, &err))
         bench_die ("uncontended pair", err.message);
      if (i >= 0)
         t[i] = bench_now () - s;
      leaselock_lease_destroy (l);
   }
   leaselock_client_destroy (c);
   for (int i = 1; i < N; i++) /* insertion sort: N is small */
      for (int j = i; j > 0 && t[j - 1] > t[j]; j--) {
         double x = t[j];
         t[j] = t[j - 1];
         t[j - 1] = x;
      }
   return t[N / 2];
}

static int cmp_double (const void *a, const void *b)
{
   double x = *(const double *)a, y = *(const double *)b;
   return (x > y) - (x < y);
}

/* Median uncontended hold (the workers' sleep of hold_s), in seconds. */
static double hold_time (const run_t *r)
{
   enum
   {
      N = 201
   };
   double t[N];
   for (int i = 0; i < N; i++) {
      double s = bench_now ();
      sleep_s (r->hold_s);
      t[i] = bench_now () - s;
   }
   qsort (t, N, sizeof t[0], cmp_double);
   return t[N / 2];
}

static int cmp_granted (const void *a, const void *b)
{
   return cmp_double (&((const grant_t *)a)->granted, &((const grant_t *)b)->granted);
}

static double pct (double *v, long n, double p)
{
   if (n == 0)
      return 0;
   qsort (v, (size_t)n, sizeof *v, cmp_double);
   long i = (long)(p * (double)(n - 1) + 0.5);
   return v[i];
}

static void report (const run_t *r, double pair, double hold)
{
   shared_log_t *log = r->log;
   long n = atomic_load (&log->n);
   if (n > MAX_GRANTS)
      n = MAX_GRANTS;
   long per[MAX_WORKERS] = { 0 };
   double *waits = malloc (sizeof (double) * (size_t)(n + 1));
   double *hand = malloc (sizeof (double) * (size_t)(n + 1));
   if (!waits || !hand)
      bench_die ("report", "out of memory");
   qsort (log->g, (size_t)n, sizeof log->g[0], cmp_granted);
   long nh = 0, grants = 0, cut = 0;
   double held = 0; /* the holds' own time, sleep overshoot included */
   for (long i = 0; i < n; i++) {
      const grant_t *g = &log->g[i], *next = NULL;
      waits[i] = (g->granted - g->wait_start) * 1e3;
      if (!g->got) {
         cut++;
         continue;
      }
      grants++;
      per[g->worker]++;
      held += g->release_start - g->granted;
      for (long j = i + 1; j < n && !next; j++)
         next = log->g[j].got ? &log->g[j] : NULL;
      /* A hand-off: the next grant went to another worker that was already
       * waiting when this one began to release. */
      if (next && next->worker != g->worker && next->wait_start <= g->release_start)
         hand[nh++] = (next->granted - g->release_start) * 1e3;
   }
   long lo = per[0], hi = per[0];
   for (int i = 1; i < r->workers; i++) {
      lo = per[i] < lo ? per[i] : lo;
      hi = per[i] > hi ? per[i] : hi;
   }
   double ideal = r->seconds / (hold + pair);
   printf (
     "workers=%d mode=%s grants=%ld fewest=%ld most=%ld fairness=%.3f "
     "cut_waits=%ld timeouts=%ld errors=%ld useful=%.3f pair_ms=%.3f wait_p50_ms=%.2f "
     "wait_p99_ms=%.2f "
     "wait_max_ms=%.2f "
     "handoffs=%ld handoff_p50_ms=%.3f handoff_p99_ms=%.3f requests_per_grant=%.2f "
     "hold_ms=%.3f hold_mean_ms=%.3f\n",
     r->workers,
     r->fair ? (r->threads ? "fair-threads" : "fair-procs") : (r->threads ? "threads" : "procs"),
     grants, lo, hi, hi ? (double)lo / (double)hi : 0.0, cut, atomic_load (&log->timeouts),
     atomic_load (&log->errors), (double)grants / ideal, pair * 1e3, pct (waits, n, 0.50),
     pct (waits, n, 0.99), pct (waits, n, 1.0), nh, pct (hand, nh, 0.50), pct (hand, nh, 0.99),
     grants ? (double)atomic_load (&log->requests) / (double)grants : 0.0, hold * 1e3,
     grants ? held / (double)grants * 1e3 : 0.0);
   free (waits);
   free (hand);
}

int main (int argc, char **argv)
{
   if (argc < 4) {
      fprintf (stderr, "usage: contention URI WORKERS [fair-]procs|threads [SECONDS [HOLD_MS]]\n");
      return 2;
   }
   const char *mode = argv[3];
   bool fair = !strncmp (mode, "fair-", 5);
   if (fair)
      mode += 5;
   run_t r = {
      .uri = argv[1], .workers = atoi (argv[2]), .threads = !strcmp (mode, "threads"), .fair = fair
   };
   r.seconds = argc > 4 ? atof (argv[4]) : 5.0;
   r.hold_s = (argc > 5 ? atof (argv[5]) : 1.0) / 1e3;
   if (r.workers < 1 || r.workers > MAX_WORKERS || r.seconds <= 0 || r.hold_s < 0 ||
       (!r.threads && strcmp (mode, "procs")))
      bench_die ("arguments",
                 "WORKERS 1..64, MODE [fair-]procs|threads, SECONDS > 0, HOLD_MS >= 0");
   char key[64];
   snprintf (key, sizeof key, "bench/contention/%d", (int)getpid ());
   r.key = key;
   r.log = mmap (NULL, sizeof *r.log, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
   if (r.log == MAP_FAILED)
      bench_die ("mmap", "failed");
   double pair = pair_time (&r), hold = hold_time (&r);
   r.start = bench_now () + 0.3; /* every worker connected before the window opens */
   r.end = r.start + r.seconds;
   if (r.threads)
      run_threads (&r);
   else
      run_procs (&r);
   report (&r, pair, hold);
   return 0;
}
