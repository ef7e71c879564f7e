/*
 * test_sim.c - deterministic simulation of lease holders against a model
 * database (FoundationDB / TigerBeetle style): one seeded scheduler owns
 * time, message delays, lost replies, failures, clock rates and crashes,
 * so any failure replays exactly from its seed.
 *
 * The holders decide with the engine's own code for the local deadline
 * (csrc/deadline.c, ll_deadline_*), and follow the engine's rules around it (csrc/renew.c,
 * lease.c): one owner per acquire, a failed acquire sent once more and then released for its owner,
 * renewals at a third of the way to the deadline (one at a time per client, like its I/O thread)
 * beside manual renews with any TTL, a release that may have been applied asked once more,
 * min_hold.
 *
 * The model database keeps milliseconds like SQLite and MongoDB: it takes
 * its "now" from its own clock, truncated, with a rate and offset of its
 * own; each client's monotonic clock has its own rate (within +-500 ppm,
 * what NTP may slew) and offset, read in whole milliseconds as the engine
 * does. Requests run in the database after a random delay (sometimes a
 * stall longer than the TTL), and replies come back after another, out of
 * order, or never (the engine then sees an error after its I/O bound).
 *
 * After every step, and at the exact instant each record expires:
 *   - a holder whose local view is HELD and whose deadline has not passed
 *     is the database's owner of that key, live by the database's clock
 *     (so at most one holder, and every deadline before its expiry);
 *   - a holder never starts with a fence older than one already granted.
 *
 *   test_sim [--seeds N] [--seed S] [--steps N] [--policy P] [--expect-violation] [-v]
 *
 * --policy engine (default) is the engine's code. Two earlier policies are
 * kept as mutants to prove the simulator finds what they got wrong:
 * "nomargin" (deadline.c built with no margin: millisecond rounding and
 * clock rate) and "latest" (a renew's reply sets the deadline from its
 * own send time, whatever else was in flight). With --expect-violation the
 * run passes only if some seed finds a violation.
 */
#include "ll_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* deadline.c built a second time without its margin (see mk/sim.mk). */
void nomargin_deadline_start (ll_deadline_t *d, int64_t sent_ms, int64_t ttl_ms);
void nomargin_deadline_renew_sent (ll_deadline_t *d, int64_t sent_ms, int64_t ttl_ms);
void nomargin_deadline_renew_done (ll_deadline_t *d, ll_outcome_t outcome, int64_t ttl_ms);
void nomargin_deadline_may_rerun (ll_deadline_t *d, int64_t ttl_ms);

#define N_KEYS 3
#define N_CLIENTS 5
#define MAX_LEASES 8
#define MAX_EVENTS (1 << 16)
#define US 1
#define MS 1000

typedef enum
{
   POLICY_ENGINE,
   POLICY_NOMARGIN,
   POLICY_LATEST
} policy_t;
static policy_t policy = POLICY_ENGINE;

/* ---- seeded randomness -------------------------------------------------- */

static uint64_t rng;

static uint64_t next_u64 (void)
{
   uint64_t z = (rng += 0x9e3779b97f4a7c15ull); /* splitmix64 */
   z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
   z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
   return z ^ (z >> 31);
}

static int64_t uniform (int64_t lo, int64_t hi) /* inclusive */
{
   return lo + (int64_t)(next_u64 () % (uint64_t)(hi - lo + 1));
}

static bool chance (int percent)
{
   return uniform (1, 100) <= percent;
}

/* ---- clocks: real time T in microseconds -------------------------------- */

typedef struct
{
   int64_t off_us;
   int64_t ppm;
} sim_clock_t;

static int64_t clock_us (const sim_clock_t *k, int64_t t)
{
   return k->off_us + t + t * k->ppm / 1000000;
}

static int64_t clock_ms (const sim_clock_t *k, int64_t t)
{
   int64_t us = clock_us (k, t);
   return us >= 0 ? us / 1000 : -((-us + 999) / 1000);
}

/* The first real time at which the clock reads at least ms. */
static int64_t when_ms (const sim_clock_t *k, int64_t ms)
{
   int64_t t = (ms * 1000 - k->off_us) * 1000000 / (1000000 + k->ppm);
   while (clock_ms (k, t) >= ms)
      t--;
   while (clock_ms (k, t) < ms)
      t++;
   return t;
}

/* ---- the model database ------------------------------------------------- */

typedef struct
{
   bool exists;
   uint64_t owner;                         /* 0: none */
   int64_t fence, acquired_at, expires_at; /* database ms */
} record_t;

static record_t db[N_KEYS];
static sim_clock_t db_clock;
static int64_t granted_fence[N_KEYS]; /* the last fence a holder was told */

static int64_t db_now (int64_t t)
{
   return clock_ms (&db_clock, t);
}

/* ---- holders ------------------------------------------------------------ */

typedef enum
{
   L_ACQUIRING,
   L_HELD,
   L_LOST,
   L_RELEASING,
   L_DONE
} lstate_t;

typedef struct
{
   lstate_t state;
   int key;
   uint64_t owner;
   int64_t fence, ttl, min_hold;
   bool auto_renew, resent;
   ll_deadline_t dl;
   int64_t next_renew; /* local ms */
   int64_t latest_at;  /* POLICY_LATEST's own deadline */
} lease_t;

typedef struct
{
   bool alive;
   sim_clock_t mono;
   lease_t leases[MAX_LEASES];
   bool io_busy; /* its one renewal in flight */
   int gen;      /* incarnation: events of a crashed one are ignored */
} client_t;

static client_t clients[N_CLIENTS];
static uint64_t next_owner = 1;

static int64_t mono (const client_t *c, int64_t t)
{
   return clock_ms (&c->mono, t);
}

/* The policy's deadline, and its hooks. */
static int64_t deadline_of (const lease_t *l)
{
   return policy == POLICY_LATEST ? l->latest_at : l->dl.at_ms;
}

static void dl_start (lease_t *l, int64_t sent, int64_t ttl)
{
   if (policy == POLICY_NOMARGIN)
      nomargin_deadline_start (&l->dl, sent, ttl);
   else
      ll_deadline_start (&l->dl, sent, ttl);
   l->latest_at = sent + ttl - ll_deadline_margin_ms (ttl);
}

static void dl_sent (lease_t *l, int64_t sent, int64_t ttl)
{
   if (policy == POLICY_NOMARGIN)
      nomargin_deadline_renew_sent (&l->dl, sent, ttl);
   else
      ll_deadline_renew_sent (&l->dl, sent, ttl);
}

static void dl_done (lease_t *l, ll_outcome_t out, int64_t sent, int64_t ttl)
{
   if (policy == POLICY_NOMARGIN)
      nomargin_deadline_renew_done (&l->dl, out, ttl);
   else
      ll_deadline_renew_done (&l->dl, out, ttl);
   if (out == LL_OUTCOME_APPLIED)
      l->latest_at = sent + ttl - ll_deadline_margin_ms (ttl);
}

/* ---- events --------------------------------------------------------------- */

typedef enum
{
   EV_THINK,   /* a client picks its next action */
   EV_EXEC,    /* a request runs in the database */
   EV_REPLY,   /* its reply (or error) reaches the client */
   EV_RENEWAL, /* a client's renewal thread looks at its leases */
   EV_PROBE,   /* a record's expiry instant: check there */
   EV_RESTART, /* a crashed client comes back as a new process */
} ev_kind_t;

typedef enum
{
   OP_ACQUIRE,
   OP_RENEW,
   OP_RELEASE,
   OP_FORGET /* the best-effort release of a twice-failed acquire */
} op_t;

typedef struct
{
   int64_t t;
   uint64_t seq;
   ev_kind_t kind;
   int client, lease, gen;
   op_t op;
   int64_t sent, ttl;   /* local ms at send; TTL asked */
   int64_t reply_delay; /* from the database back to the client */
   uint64_t owner;
   int key;
   bool applied, ok, sent_ok, is_auto, lost;
   int64_t fence;
   int code; /* NOT_HELD / BUSY / BACKEND for a reply */
} event_t;

static event_t heap[MAX_EVENTS];
static int n_heap;
static uint64_t seq;

static bool before (const event_t *a, const event_t *b)
{
   return a->t != b->t ? a->t < b->t : a->seq < b->seq;
}

static void push (event_t e)
{
   if (n_heap == MAX_EVENTS) {
      fprintf (stderr, "test_sim: more than %d events pending\n", MAX_EVENTS);
      exit (2);
   }
   e.seq = seq++;
   int i = n_heap++;
   while (i > 0 && before (&e, &heap[(i - 1) / 2])) {
      heap[i] = heap[(i - 1) / 2];
      i = (i - 1) / 2;
   }
   heap[i] = e;
}

static event_t pop (void)
{
   event_t top = heap[0], last = heap[--n_heap];
   int i = 0;
   for (;;) {
      int c = 2 * i + 1;
      if (c >= n_heap)
         break;
      if (c + 1 < n_heap && before (&heap[c + 1], &heap[c]))
         c++;
      if (!before (&heap[c], &last))
         break;
      heap[i] = heap[c];
      i = c;
   }
   heap[i] = last;
   return top;
}

/* ---- the run ---------------------------------------------------------------- */

static int64_t now_t;
static long violations, steps_done, grants, faults;
static uint64_t cur_seed;
static bool verbose;

static void violation (const char *what, int key, const lease_t *l)
{
   violations++;
   if (violations <= 3)
      fprintf (stderr,
               "    VIOLATION seed %" PRIu64 " step %ld t=%" PRId64 "us key %d: %s (owner %" PRIu64
               ", fence %" PRId64 "; database owner %" PRIu64 " fence %" PRId64 " expires %" PRId64
               " now %" PRId64 ")\n",
               cur_seed, steps_done, now_t, key, what, l ? l->owner : 0, l ? l->fence : 0,
               db[key].owner, db[key].fence, db[key].expires_at, db_now (now_t));
}

/* Invariants 1 and 3: a holder that believes it holds the key is its live
 * owner in the database. */
static void check (void)
{
   for (int c = 0; c < N_CLIENTS; c++) {
      if (!clients[c].alive)
         continue;
      for (int i = 0; i < MAX_LEASES; i++) {
         lease_t *l = &clients[c].leases[i];
         if (l->state != L_HELD || mono (&clients[c], now_t) >= deadline_of (l))
            continue;
         record_t *r = &db[l->key];
         if (r->owner != l->owner)
            violation ("a holder within its deadline is not the database's owner", l->key, l);
         else if (db_now (now_t) >= r->expires_at)
            violation ("a holder's local deadline is after the database's expiry", l->key, l);
      }
   }
}

static void probe_expiry (int key)
{
   event_t p = { .t = when_ms (&db_clock, db[key].expires_at), .kind = EV_PROBE, .key = key };
   if (p.t > now_t)
      push (p);
}

static const char *const op_names[] = { "acquire", "renew", "release", "forget" };

static void trace (const char *what, const event_t *e)
{
   if (verbose)
      printf ("t=%" PRId64 " db=%" PRId64 " %s %s key %d owner %" PRIu64 " ttl %" PRId64
              " sent %" PRId64 " applied %d lost %d code %d auto %d | rec owner %" PRIu64
              " expires %" PRId64 "\n",
              now_t, db_now (now_t), what, op_names[e->op], e->key, e->owner, e->ttl, e->sent,
              e->applied, e->lost, e->code, e->is_auto, db[e->key].owner, db[e->key].expires_at);
}

static void db_exec (event_t *e)
{
   record_t *r = &db[e->key];
   int64_t now = db_now (now_t);
   switch (e->op) {
      case OP_ACQUIRE:
         if (r->exists && r->expires_at > now && r->owner != e->owner) {
            e->code = LEASELOCK_BUSY;
            return;
         }
         r->exists = true;
         r->owner = e->owner;
         r->fence++;
         r->acquired_at = now;
         r->expires_at = now + e->ttl;
         e->fence = r->fence;
         e->applied = true;
         break;
      case OP_RENEW:
         if (r->owner != e->owner || r->expires_at <= now) {
            e->code = LEASELOCK_NOT_HELD;
            return;
         }
         r->expires_at = now + e->ttl;
         e->applied = true;
         break;
      case OP_RELEASE:
      case OP_FORGET:
         if (r->owner != e->owner) {
            e->code = LEASELOCK_NOT_HELD;
            return;
         }
         r->owner = 0;
         r->expires_at = r->acquired_at + e->ttl > now ? r->acquired_at + e->ttl : now;
         e->applied = true;
         break;
   }
   probe_expiry (e->key);
   trace ("exec", e);
}

/* Sends op for lease i of client c: it may fail before reaching the
 * database, run after a delay (sometimes a stall past the TTL), and its
 * reply may come late or never (then an error after the I/O bound). */
static void send (int c, int i, op_t op, int64_t ttl, bool is_auto)
{
   lease_t *l = &clients[c].leases[i];
   event_t e = { .kind = EV_EXEC,
                 .client = c,
                 .lease = i,
                 .op = op,
                 .ttl = ttl,
                 .owner = l->owner,
                 .key = l->key,
                 .is_auto = is_auto };
   e.sent = mono (&clients[c], now_t);
   int64_t io_bound = uniform (5, 60) * MS;
   if (chance (2)) { /* refused: never reached the database */
      faults++;
      e.kind = EV_REPLY;
      e.sent_ok = false;
      e.code = LEASELOCK_BACKEND;
      e.t = now_t + uniform (0, 2 * MS);
      push (e);
      return;
   }
   e.sent_ok = true;
   int64_t exec_delay = chance (3) ? uniform (0, 3 * ttl * MS + 50 * MS) : uniform (0, 3 * MS);
   int64_t reply_delay = chance (3) ? uniform (0, 3 * ttl * MS + 50 * MS) : uniform (0, 3 * MS);
   e.t = now_t + exec_delay;
   e.reply_delay = reply_delay;
   e.lost = chance (3) || exec_delay + reply_delay > io_bound;
   if (e.lost)
      faults++;
   push (e);
   if (e.lost) { /* the engine gives up at its I/O bound; the request may still run */
      event_t r = e;
      r.kind = EV_REPLY;
      r.t = now_t + (exec_delay + reply_delay < io_bound ? exec_delay + reply_delay : io_bound);
      r.code = LEASELOCK_BACKEND;
      r.applied = false;
      push (r);
   }
}

static int free_slot (client_t *cl)
{
   for (int i = 0; i < MAX_LEASES; i++)
      if (cl->leases[i].state == L_DONE)
         return i;
   return -1;
}

static bool holds_key (client_t *cl, int key)
{
   for (int i = 0; i < MAX_LEASES; i++)
      if (cl->leases[i].state != L_DONE && cl->leases[i].key == key)
         return true;
   return false;
}

static int64_t pick_ttl (void)
{
   return chance (50) ? uniform (1, 40) : uniform (41, 3000);
}

/* The engine's check_deadline: HELD turns LOST once the deadline passes. */
static void settle (client_t *cl, lease_t *l)
{
   if (l->state == L_HELD && mono (cl, now_t) >= deadline_of (l))
      l->state = L_LOST;
}

static void think (int c)
{
   client_t *cl = &clients[c];
   if (chance (2)) { /* crash: its leases end with the process */
      faults++;
      cl->alive = false;
      push ((event_t){ .t = now_t + uniform (1, 200) * MS, .kind = EV_RESTART, .client = c });
      cl->gen++;
      return;
   }
   int pick = (int)uniform (0, MAX_LEASES - 1);
   lease_t *l = &cl->leases[pick];
   if (l->state == L_HELD)
      settle (cl, l);
   if (l->state == L_HELD && chance (50)) {
      int64_t ttl = pick_ttl ();
      dl_sent (l, mono (cl, now_t), ttl);
      send (c, pick, OP_RENEW, ttl, false);
   } else if (l->state == L_HELD || l->state == L_LOST) {
      l->state = L_RELEASING;
      send (c, pick, OP_RELEASE, l->min_hold, false);
   } else {
      int key = (int)uniform (0, N_KEYS - 1);
      int i = free_slot (cl);
      if (i >= 0 && !holds_key (cl, key)) {
         lease_t *n = &cl->leases[i];
         *n = (lease_t){ .state = L_ACQUIRING,
                         .key = key,
                         .owner = next_owner++,
                         .ttl = pick_ttl (),
                         .auto_renew = chance (60) };
         n->min_hold = chance (30) ? uniform (0, 2 * n->ttl) : 0;
         send (c, i, OP_ACQUIRE, n->ttl, false);
      }
   }
   push (
     (event_t){ .t = now_t + uniform (0, 20) * MS, .kind = EV_THINK, .client = c, .gen = cl->gen });
}

/* The renewal thread: hands one due lease at a time to the I/O thread. */
static void renewal (int c)
{
   client_t *cl = &clients[c];
   int64_t m = mono (cl, now_t), wake = m + 50;
   for (int i = 0; i < MAX_LEASES && !cl->io_busy; i++) {
      lease_t *l = &cl->leases[i];
      settle (cl, l);
      if (l->state != L_HELD || !l->auto_renew)
         continue;
      if (l->next_renew <= m) {
         cl->io_busy = true;
         dl_sent (l, m, l->ttl);
         send (c, i, OP_RENEW, l->ttl, true);
      } else if (l->next_renew < wake) {
         wake = l->next_renew;
      }
   }
   push (
     (event_t){ .t = when_ms (&cl->mono, wake), .kind = EV_RENEWAL, .client = c, .gen = cl->gen });
}

static void reply (event_t *e)
{
   client_t *cl = &clients[e->client];
   lease_t *l = &cl->leases[e->lease];
   if (!cl->alive || l->owner != e->owner)
      return; /* a reply to a process that is gone */
   trace ("reply", e);
   bool ok = e->applied && !e->lost;
   int64_t m = mono (cl, now_t);
   if (verbose)
      printf ("   client %d mono %" PRId64 " lease state %d at %" PRId64
              " inflight %d gmin %" PRId64 "\n",
              e->client, m, l->state, l->dl.at_ms, l->dl.inflight, l->dl.group_min);
   switch (e->op) {
      case OP_ACQUIRE:
         if (ok) {
            grants++;
            l->fence = e->fence;
            l->state = L_HELD;
            dl_start (l, e->sent, l->ttl);
            if (l->resent && policy == POLICY_NOMARGIN)
               nomargin_deadline_may_rerun (&l->dl, l->ttl);
            else if (l->resent)
               ll_deadline_may_rerun (&l->dl, l->ttl);
            /* A reply overtaken by a later grant (a TTL shorter than the
             * trip) must arrive already past its deadline. */
            if (e->fence <= granted_fence[l->key] && m < deadline_of (l))
               violation ("a holder starts with a fence older than one already granted", l->key, l);
            if (e->fence > granted_fence[l->key])
               granted_fence[l->key] = e->fence;
            l->next_renew = e->sent + (deadline_of (l) - e->sent) / 3;
         } else if (e->sent_ok && e->code == LEASELOCK_BACKEND && !l->resent) {
            l->resent = true;
            send (e->client, e->lease, OP_ACQUIRE, l->ttl, false);
         } else if (e->sent_ok && e->code == LEASELOCK_BACKEND) {
            send (e->client, e->lease, OP_FORGET, 0, false);
            l->state = L_DONE;
         } else {
            l->state = L_DONE;
         }
         break;
      case OP_RENEW: {
         if (e->is_auto)
            cl->io_busy = false;
         ll_outcome_t out = ok                                            ? LL_OUTCOME_APPLIED
                            : e->sent_ok && e->code != LEASELOCK_NOT_HELD ? LL_OUTCOME_UNKNOWN
                                                                          : LL_OUTCOME_NOT_APPLIED;
         settle (cl, l);
         dl_done (l, out, e->sent, e->ttl);
         if (l->state != L_HELD)
            break;
         if (!ok && e->code == LEASELOCK_NOT_HELD)
            l->state = L_LOST;
         settle (cl, l);
         if (l->state == L_HELD && ok) {
            l->next_renew = e->sent + (deadline_of (l) - e->sent) / 3;
            if (!e->is_auto)
               l->ttl = e->ttl;
         } else if (l->state == L_HELD) {
            int64_t r = l->ttl / 10;
            l->next_renew = m + (r < 5 ? 5 : r > 1000 ? 1000 : r);
         }
         break;
      }
      case OP_RELEASE:
         if (!ok && e->sent_ok && e->code == LEASELOCK_BACKEND && !l->resent) {
            l->resent = true;
            send (e->client, e->lease, OP_RELEASE, l->min_hold, false);
         } else {
            l->state = L_DONE;
         }
         break;
      case OP_FORGET:
         break;
   }
}

static void restart (int c)
{
   client_t *cl = &clients[c];
   int gen = cl->gen;
   memset (cl, 0, sizeof *cl);
   cl->alive = true;
   cl->gen = gen;
   cl->mono = (sim_clock_t){ uniform (0, 1000000) * MS + uniform (0, 999), uniform (-500, 500) };
   for (int i = 0; i < MAX_LEASES; i++)
      cl->leases[i].state = L_DONE;
   push ((event_t){ .t = now_t + uniform (0, 5) * MS, .kind = EV_THINK, .client = c, .gen = gen });
   push ((event_t){ .t = now_t + 1, .kind = EV_RENEWAL, .client = c, .gen = gen });
}

static void run_seed (uint64_t seed, long steps)
{
   rng = seed;
   cur_seed = seed;
   n_heap = 0;
   now_t = 0;
   memset (db, 0, sizeof db);
   memset (granted_fence, 0, sizeof granted_fence);
   db_clock = (sim_clock_t){ uniform (0, 1000000) * MS + uniform (0, 999), uniform (-500, 500) };
   memset (clients, 0, sizeof clients);
   for (int c = 0; c < N_CLIENTS; c++)
      restart (c);
   for (long s = 0; s < steps && n_heap > 0; s++) {
      event_t e = pop ();
      now_t = e.t;
      steps_done++;
      switch (e.kind) {
         case EV_THINK:
            if (clients[e.client].alive && clients[e.client].gen == e.gen)
               think (e.client);
            break;
         case EV_EXEC:
            db_exec (&e);
            if (!e.lost) {
               e.kind = EV_REPLY;
               e.t = now_t + e.reply_delay;
               push (e);
            }
            break;
         case EV_REPLY:
            reply (&e);
            break;
         case EV_RENEWAL:
            if (clients[e.client].alive && clients[e.client].gen == e.gen)
               renewal (e.client);
            break;
         case EV_PROBE:
            break;
         case EV_RESTART:
            restart (e.client);
            break;
      }
      check ();
   }
}

int main (int argc, char **argv)
{
   long seeds = 200, steps = 20000;
   uint64_t first = 1;
   bool one = false, expect_violation = false;
   for (int i = 1; i < argc; i++) {
      if (!strcmp (argv[i], "--seeds") && i + 1 < argc)
         seeds = atol (argv[++i]);
      else if (!strcmp (argv[i], "--seed") && i + 1 < argc)
         first = strtoull (argv[++i], NULL, 10), one = true;
      else if (!strcmp (argv[i], "--steps") && i + 1 < argc)
         steps = atol (argv[++i]);
      else if (!strcmp (argv[i], "--policy") && i + 1 < argc) {
         const char *p = argv[++i];
         policy = !strcmp (p, "nomargin") ? POLICY_NOMARGIN
                  : !strcmp (p, "latest") ? POLICY_LATEST
                                          : POLICY_ENGINE;
         if (policy == POLICY_ENGINE && strcmp (p, "engine")) {
            fprintf (stderr, "unknown policy %s (engine, nomargin, latest)\n", p);
            return 2;
         }
      } else if (!strcmp (argv[i], "--expect-violation"))
         expect_violation = true;
      else if (!strcmp (argv[i], "-v"))
         verbose = true;
      else {
         fprintf (stderr,
                  "usage: %s [--seeds N] [--seed S] [--steps N] [--policy engine|nomargin|latest] "
                  "[--expect-violation] [-v]\n",
                  argv[0]);
         return 2;
      }
   }
   if (one)
      seeds = 1;
   struct timespec t0, t1;
   clock_gettime (CLOCK_MONOTONIC, &t0);
   long failing_seeds = 0;
   uint64_t first_failing = 0;
   for (long s = 0; s < seeds; s++) {
      long before = violations;
      run_seed (first + (uint64_t)s, steps);
      if (violations > before && failing_seeds++ == 0)
         first_failing = first + (uint64_t)s;
      if (expect_violation && failing_seeds)
         break;
   }
   clock_gettime (CLOCK_MONOTONIC, &t1);
   double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
   const char *names[] = { "engine", "nomargin", "latest" };
   printf ("sim %s: %ld steps, %ld grants, %ld faults, %ld violations in %ld seed(s) "
           "(%.0f steps/s)\n",
           names[policy], steps_done, grants, faults, violations, failing_seeds,
           secs > 0 ? (double)steps_done / secs : 0.0);
   if (failing_seeds)
      printf ("sim: replay with --seed %" PRIu64 " --steps %ld --policy %s\n", first_failing, steps,
              names[policy]);
   const char *out = getenv ("STRESS_OUT");
   if (out && *out && !expect_violation) {
      char path[4096];
      snprintf (path, sizeof path, "%s/sim.summary", out);
      FILE *f = fopen (path, "w");
      if (f) {
         fprintf (f,
                  "tool=sim\nbackend=simulated\nsimulated_steps=%ld\nsimulated_grants=%ld\n"
                  "faults_injected=%ld\nviolations=%ld\n",
                  steps_done, grants, faults, violations);
         fclose (f);
      }
   }
   if (expect_violation)
      return failing_seeds ? 0 : 1;
   return violations ? 1 : 0;
}
