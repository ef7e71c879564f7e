/*
 * bench.h - the harness the core benchmarks share (header only).
 *
 * Each bench measures acquire+release pairs per second through the
 * leaselock engine (leaselock_acquire, one try, no auto-renewal, then
 * leaselock_lease_release) beside its own bare client program doing the
 * same work, in the same process. bench_run interleaves the two over many
 * short rounds, alternating which side goes first, and prints:
 *   - one line per round when there are at most 10 rounds,
 *   - each side's pairs/s and us/pair over all rounds,
 *   - "ratio engine/bare: median of N rounds Y, best rounds X, all rounds
 *     together Z (goal: median >= 0.95: met|NOT met)".
 * bench_auto_renew puts the engine with auto-renewal on (the default)
 * beside itself with it off, the same way, and bench_modes the reentrant
 * re-acquire, the semaphore and the fair mode beside the plain lock.
 * Each round of one side is paired with the round of the other run beside
 * it, so the two see the same machine; the goal is judged on the median of
 * those paired ratios. The ratio of each side's fastest round is printed
 * too, but it is an extreme value: with a server on another CPU, whose
 * wake-up latency varies widely, it swung from 0.89 to 1.15 between runs
 * whose medians all lay within 0.98 to 1.00.
 *
 * Define BENCH_NAME (the program's name, for error messages) before
 * including this file.
 */
#ifndef LEASELOCK_BENCH_H
#define LEASELOCK_BENCH_H

#include "leaselock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef BENCH_NAME
#error "define BENCH_NAME before including bench.h"
#endif

#define BENCH_TTL_MS 30000
#define BENCH_LABEL "bench"
/* The goals of issue 26: the engine at least 0.95 of the bare program;
 * the fair mode, uncontended, at least 0.9 of the plain lock. */
#define BENCH_GOAL 0.95
#define BENCH_FAIR_GOAL 0.90

/* Seconds on the monotonic clock. */
static inline double bench_now (void)
{
   struct timespec ts;
   clock_gettime (CLOCK_MONOTONIC, &ts);
   return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Prints "BENCH_NAME: what: msg" and exits 1. */
static inline void bench_die (const char *what, const char *msg)
{
   fprintf (stderr, "%s: %s: %s\n", BENCH_NAME, what, msg);
   exit (1);
}

/* Reads PAIRS_PER_ROUND and ROUNDS from argv[AT] and argv[AT + 1] where
 * given (*pairs and *rounds hold the defaults). False unless both are
 * positive. */
static inline bool bench_sizes (int argc, char **argv, int at, long *pairs, int *rounds)
{
   if (argc > at)
      *pairs = atol (argv[at]);
   if (argc > at + 1)
      *rounds = atoi (argv[at + 1]);
   return *pairs > 0 && *rounds > 0;
}

/* A new client on URI labelled BENCH_LABEL (the caller destroys it); dies
 * on error. */
static inline leaselock_client_t *bench_client (const char *uri)
{
   leaselock_error_t err;
   leaselock_client_t *c = leaselock_client_new (uri, BENCH_LABEL, &err);
   if (!c)
      bench_die ("client", err.message);
   return c;
}

/* One round through the engine: PAIRS acquire+release pairs on KEY with
 * the options every bench uses, auto-renewal on or off. Returns the
 * seconds it took. */
static inline double bench_engine_round_renew (leaselock_client_t *client, const char *key,
                                               long pairs, bool auto_renew)
{
   leaselock_acquire_opts_t o;
   leaselock_acquire_opts_init (&o);
   o.ttl_ms = BENCH_TTL_MS;
   o.timeout_ms = 0;
   o.auto_renew = auto_renew;
   leaselock_error_t err;
   size_t klen = strlen (key);
   double t0 = bench_now ();
   for (long i = 0; i < pairs; i++) {
      leaselock_lease_t *l = NULL;
      if (!leaselock_acquire (client, key, klen, &o, &l, &err))
         bench_die ("engine acquire", err.message);
      if (!leaselock_lease_release (l, &err))
         bench_die ("engine release", err.message);
      leaselock_lease_destroy (l);
   }
   return bench_now () - t0;
}

/* One round through the engine, auto-renewal off as the bare programs. */
static inline double bench_engine_round (leaselock_client_t *client, const char *key, long pairs)
{
   return bench_engine_round_renew (client, key, pairs, false);
}

/* The bare program's side: ROUND (CTX, PAIRS) does PAIRS acquire+release
 * pairs and returns the seconds they took. NAME is its short name in the
 * per-round lines ("bare libpq"), WHAT its longer one in the summary
 * ("bare libpq (same two statements)"). Nothing here is owned. */
typedef struct
{
   const char *name;
   const char *what;
   double (*round) (void *ctx, long pairs);
   void *ctx;
} bench_bare_t;

static inline int bench_cmp_double (const void *a, const void *b)
{
   double x = *(const double *)a, y = *(const double *)b;
   return (x > y) - (x < y);
}

/* Sorts V (N > 0 values) and returns their median. */
static inline double bench_median (double *v, int n)
{
   qsort (v, (size_t)n, sizeof *v, bench_cmp_double);
   return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Warms both sides up with WARMUP pairs each (engine first), then runs
 * ROUNDS interleaved rounds of PAIRS pairs on each side (engine first in
 * even rounds, bare first in odd ones, so neither always follows the
 * other's pauses) and prints the figures described above. */
static inline void bench_run (leaselock_client_t *client, const char *engine_key,
                              const bench_bare_t *bare, long pairs, int rounds, long warmup)
{
   if (warmup > 0) {
      bench_engine_round (client, engine_key, warmup);
      bare->round (bare->ctx, warmup);
   }
   double t_engine = 0, t_bare = 0, best_e = 1e300, best_b = 1e300;
   double *ratios = calloc ((size_t)rounds, sizeof *ratios);
   if (!ratios)
      bench_die ("bench", "out of memory");
   for (int r = 0; r < rounds; r++) {
      double te, tb;
      if (r % 2 == 0) {
         te = bench_engine_round (client, engine_key, pairs);
         tb = bare->round (bare->ctx, pairs);
      } else {
         tb = bare->round (bare->ctx, pairs);
         te = bench_engine_round (client, engine_key, pairs);
      }
      t_engine += te;
      t_bare += tb;
      ratios[r] = tb / te;
      best_e = te < best_e ? te : best_e;
      best_b = tb < best_b ? tb : best_b;
      if (rounds <= 10)
         printf ("  round %d: engine %9.0f pairs/s   %s %9.0f pairs/s   ratio %.3f\n", r + 1,
                 pairs / te, bare->name, pairs / tb, tb / te);
   }
   double pe = (double)pairs * rounds / t_engine, pb = (double)pairs * rounds / t_bare;
   double median = bench_median (ratios, rounds);
   free (ratios);
   static const char engine_what[] = "engine (leaselock_acquire + leaselock_lease_release)";
   int w = (int)strlen (engine_what) + 1;
   if ((int)strlen (bare->what) + 1 > w)
      w = (int)strlen (bare->what) + 1;
   printf ("%s:%*s%.0f pairs/s (%.1f us/pair)\n", engine_what, w - (int)strlen (engine_what), "",
           pe, 1e6 / pe);
   printf ("%s:%*s%.0f pairs/s (%.1f us/pair)\n", bare->what, w - (int)strlen (bare->what), "", pb,
           1e6 / pb);
   double best = best_b / best_e;
   printf ("ratio engine/bare: median of %d rounds %.3f, best rounds %.3f, all rounds together "
           "%.3f (goal: median >= %.2f: %s)\n",
           rounds, median, best, pe / pb, BENCH_GOAL, median >= BENCH_GOAL ? "met" : "NOT met");
}

/* ---- auto-renewal on beside off ----------------------------------------- */

#define BENCH_RENEW_GOAL 0.97 /* auto_renew on at most 3% slower than off */

/* What auto-renewal (the default) costs an acquire+release pair: ROUNDS
 * interleaved rounds of PAIRS pairs with auto_renew on and off (on first
 * in even rounds, off first in odd ones), after a warm-up of each, on keys
 * of their own and on clients of their own on URI: the off side's client
 * never starts a renewal thread, as a program that never asks for
 * renewal. Prints both sides' us/pair and the median of the paired
 * ratios off/on (1: free). */
static inline void bench_auto_renew (const char *uri, const char *key, long pairs, int rounds)
{
   char k_on[128], k_off[128];
   snprintf (k_on, sizeof k_on, "%s-renew-on", key);
   snprintf (k_off, sizeof k_off, "%s-renew-off", key);
   leaselock_client_t *c = bench_client (uri), *c_off = bench_client (uri);
   bench_engine_round_renew (c, k_on, pairs / 2 + 1, true);
   bench_engine_round_renew (c_off, k_off, pairs / 2 + 1, false);
   double t_on = 0, t_off = 0;
   double *ratios = calloc ((size_t)rounds, sizeof *ratios);
   if (!ratios)
      bench_die ("bench", "out of memory");
   for (int r = 0; r < rounds; r++) {
      double on, off;
      if (r % 2 == 0) {
         on = bench_engine_round_renew (c, k_on, pairs, true);
         off = bench_engine_round_renew (c_off, k_off, pairs, false);
      } else {
         off = bench_engine_round_renew (c_off, k_off, pairs, false);
         on = bench_engine_round_renew (c, k_on, pairs, true);
      }
      t_on += on;
      t_off += off;
      ratios[r] = off / on;
   }
   double median = bench_median (ratios, rounds);
   free (ratios);
   leaselock_client_destroy (c);
   leaselock_client_destroy (c_off);
   double n = (double)pairs * rounds;
   printf ("auto-renewal, %d interleaved rounds of %ld pairs each:\n", rounds, pairs);
   printf ("  auto_renew on (the default): %.1f us/pair   auto_renew off: %.1f us/pair\n",
           1e6 * t_on / n, 1e6 * t_off / n);
   printf ("ratio auto_renew on/off: median of %d rounds %.3f (goal: median >= %.2f: %s)\n", rounds,
           median, BENCH_RENEW_GOAL, median >= BENCH_RENEW_GOAL ? "met" : "NOT met");
}

/* ---- the lock modes beside the plain lock ----------------------------- */

/* One round of PAIRS pairs in mode MODE on key: 0 the plain lock's
 * acquire + release, 1 a reentrant re-acquire + release of one hold (of a
 * lease held through the round), 2 a semaphore's (limit 4) acquire +
 * release, 3 the plain lock's in fair mode (uncontended: nobody queued).
 * Returns the seconds it took. */
static inline double bench_mode_round (leaselock_client_t *c, const char *key, int mode, long pairs)
{
   leaselock_acquire_opts_t o;
   leaselock_acquire_opts_init (&o);
   o.ttl_ms = BENCH_TTL_MS;
   o.auto_renew = false;
   o.fair = mode == 3;
   leaselock_error_t err;
   size_t klen = strlen (key);
   leaselock_lease_t *outer = NULL;
   if (mode == 1 && !leaselock_acquire (c, key, klen, &o, &outer, &err))
      bench_die ("reentrant acquire", err.message);
   double t0 = bench_now ();
   for (long i = 0; i < pairs; i++) {
      leaselock_lease_t *l = NULL;
      bool ok = mode == 1   ? leaselock_lease_reenter (outer, &err)
                : mode == 2 ? leaselock_semaphore_acquire (c, key, klen, 4, &o, &l, &err)
                            : leaselock_acquire (c, key, klen, &o, &l, &err);
      if (!ok)
         bench_die ("mode acquire", err.message);
      if (!leaselock_lease_release (mode == 1 ? outer : l, &err))
         bench_die ("mode release", err.message);
      leaselock_lease_destroy (l);
   }
   double t = bench_now () - t0;
   leaselock_lease_destroy (outer);
   return t;
}

/* Statements the client has sent so far. */
static inline uint64_t bench_requests (leaselock_client_t *c)
{
   leaselock_stats_t st;
   leaselock_error_t err;
   if (!leaselock_client_stats (c, &st, &err))
      bench_die ("stats", err.message);
   return st.requests;
}

/* The mark of mode m's row in bench_modes, per statements per pair and
 * ratio to the plain lock: the reentrant hold and the semaphore cost at
 * most one statement more than the plain lock's two; the fair mode,
 * uncontended, the plain lock's two and at least BENCH_FAIR_GOAL of its pairs
 * per second. */
static inline const char *bench_mode_goal (int m, double per, double ratio)
{
   if (m == 0)
      return "";
   if (m == 3)
      return per <= 2.0 + 1e-9 && ratio >= BENCH_FAIR_GOAL
               ? " (goal: plain's statements, ratio >= 0.90: met)"
               : " (goal: plain's statements, ratio >= 0.90: NOT met)";
   return per <= 3.0 + 1e-9 ? " (goal: at most one more: met)"
                            : " (goal: at most one more: NOT met)";
}

/* The reentrant re-acquire, the semaphore and the fair mode beside the
 * plain lock, in ROUNDS interleaved rounds of PAIRS pairs each on the same
 * client (odd rounds in the reverse order): pairs per second, the ratio
 * to the plain lock (the median of the rounds' paired ratios: the machine
 * may be loaded), and the statements per pair (bench_mode_goal). */
static inline void bench_modes (leaselock_client_t *c, const char *key, long pairs, int rounds)
{
   static const char *const names[4] = { "plain lock acquire + release",
                                         "reentrant re-acquire + release of one hold",
                                         "semaphore (limit 4) acquire + release",
                                         "fair acquire + release" };
   char keys[4][128];
   double t[4] = { 0, 0, 0, 0 };
   uint64_t req[4] = { 0, 0, 0, 0 };
   double *rt = calloc ((size_t)rounds * 5, sizeof *rt); /* rounds x 4 times, then ratios */
   if (!rt)
      bench_die ("bench", "out of memory");
   for (int m = 0; m < 4; m++) {
      snprintf (keys[m], sizeof keys[m], "%s-mode%d", key, m);
      bench_mode_round (c, keys[m], m, pairs / 10 + 1); /* warm-up */
   }
   for (int r = 0; r < rounds; r++)
      for (int i = 0; i < 4; i++) {
         int m = r % 2 ? 3 - i : i;
         uint64_t before = bench_requests (c);
         t[m] += rt[r * 4 + m] = bench_mode_round (c, keys[m], m, pairs);
         req[m] += bench_requests (c) - before;
      }
   printf ("modes, %d interleaved rounds of %ld pairs each:\n", rounds, pairs);
   double *ratios = rt + (size_t)rounds * 4;
   for (int m = 0; m < 4; m++) {
      double ps = (double)pairs * rounds / t[m];
      double per = (double)req[m] / ((double)pairs * rounds);
      for (int r = 0; r < rounds; r++)
         ratios[r] = rt[r * 4] / rt[r * 4 + m];
      double ratio = bench_median (ratios, rounds);
      printf ("  %-44s %9.0f pairs/s (%.1f us/pair)  ratio to plain (median) %.3f  "
              "statements/pair %.2f%s\n",
              names[m], ps, 1e6 / ps, ratio, per, bench_mode_goal (m, per, ratio));
   }
   free (rt);
}

#endif /* LEASELOCK_BENCH_H */
