/*
 * test_inproc_faults.c - faults inside the process.
 *
 *   test_inproc_faults DIR     (DIR: a directory for the SQLite file)
 *
 * One scripted workload (client_new, acquire with and without a timeout,
 * a BUSY acquire, one with min_hold, auto-renewal rounds, renew, inspect,
 * list, force_release, release, destroy of a held lease, client destroy) runs again and again while
 * a fault walks through it:
 *
 *   - backend faults: through tests/fault_backend.c (faulty+fake://,
 *     faulty+sqlite://), call N of the backend fails with BACKEND, with
 *     NOMEM, or is applied and then reports BACKEND (a lost reply), for
 *     N = 1, 2, ... until a run ends before call N;
 *   - allocation faults: the core's allocation N fails (tests/alloc_hook.c),
 *     for N = 1, 2, ... the same way.
 *
 * After every public call: success, or a valid code with a message (never
 * INVALID, the arguments are all valid). At checkpoints, by a second
 * client on the plain backend: a lease that reads HELD is the database's
 * live record of its owner, with its fence, and (fake backend, one clock)
 * a local deadline not after the database's expiry; an auto-renewed lease
 * that reads HELD is renewed when due; on_lost never fires for a lease the
 * caller released. After each run the core has freed every block it
 * allocated. Keys a failed run leaves held until their TTL (a documented
 * outcome of a lost acquire reply or a failed release) are counted.
 *
 * The engine runs on the fake clock, moved only by the test, so the calls
 * of a run come in the same order every time.
 */
#include "alloc_hook.h"
#include "fake_backend.h"
#include "fault_backend.h"
#include "testlib.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#define TTL_MS 30000
#define ROUND_MS (TTL_MS / 3 + 1)
#define MAX_N 1000

static const char *DIR;

typedef enum
{
   MODE_BACKEND,
   MODE_ALLOC
} mode_t_;

typedef struct run
{
   char what[96];      /* names the run in messages */
   mode_t_ mode;       /* which fault walks */
   bool fake;          /* the database shares the engine's clock */
   const char *plain;  /* the backend's URI */
   const char *faulty; /* the same through the fault backend */
   char pfx[64];       /* this run's keys */
   leaselock_client_t *admin;
   int bad;              /* violations */
   int dangling;         /* keys left held by nobody */
   atomic_bool released; /* release() was called on l1 */
   atomic_int spurious;  /* on_lost after that */
} run_t;

/* ---- helpers ----------------------------------------------------------- */

static void violation (run_t *r, const char *fmt, ...)
{
   va_list ap;
   va_start (ap, fmt);
   fprintf (stderr, "    FAIL [%s] ", r->what);
   vfprintf (stderr, fmt, ap);
   fputc ('\n', stderr);
   va_end (ap);
   r->bad++;
}

static const char *run_key (run_t *r, const char *name)
{
   static char buf[4][128];
   static int i;
   char *b = buf[i++ % 4];
   snprintf (b, 128, "%s/%s", r->pfx, name);
   return b;
}

/* A public call's outcome: success, or a clean error. */
static bool judge (run_t *r, const char *call, bool ok, const leaselock_error_t *err)
{
   if (ok)
      return true;
   if (err->code <= LEASELOCK_OK || err->code > LEASELOCK_INTERRUPTED)
      violation (r, "%s: invalid code %d (\"%s\")", call, (int)err->code, err->message);
   else if (!err->message[0])
      violation (r, "%s: %s with an empty message", call, leaselock_code_name (err->code));
   else if (err->code == LEASELOCK_INVALID)
      violation (r, "%s: INVALID for valid arguments: \"%s\"", call, err->message);
   return false;
}

static void on_lost (leaselock_lease_t *l, void *data)
{
   (void)l;
   run_t *r = data;
   if (atomic_load (&r->released))
      atomic_fetch_add (&r->spurious, 1);
}

/* Reads key with the admin client, unhindered by the faults. */
static bool admin_inspect (run_t *r, const char *k, leaselock_record_t *rec, bool *found)
{
   leaselock_error_t err;
   alloc_hook_pause (true);
   bool ok = leaselock_inspect (r->admin, k, strlen (k), rec, found, &err);
   alloc_hook_pause (false);
   if (!ok)
      violation (r, "admin inspect %s: %s %s", k, leaselock_code_name (err.code), err.message);
   return ok;
}

/* A lease that reads HELD is the database's live record of its owner. */
static void check_lease (run_t *r, const char *when, leaselock_lease_t *l)
{
   if (!l || leaselock_lease_state (l) != LEASELOCK_STATE_HELD)
      return;
   int64_t left = leaselock_lease_remaining_ms (l);
   leaselock_record_t rec;
   bool found;
   if (!admin_inspect (r, leaselock_lease_key (l), &rec, &found))
      return;
   if (!found || strcmp (rec.owner, leaselock_lease_owner (l)) != 0 || rec.expires_in_ms <= 0)
      violation (r,
                 "%s: the lease on %s reads HELD but the database has owner \"%s\" (ours: %s), "
                 "expiring in %lld ms",
                 when, leaselock_lease_key (l), found ? rec.owner : "(no record)",
                 leaselock_lease_owner (l), (long long)rec.expires_in_ms);
   else if (rec.fence != leaselock_lease_fence (l))
      violation (r, "%s: the lease on %s has fence %lld, the database %lld", when,
                 leaselock_lease_key (l), (long long)leaselock_lease_fence (l),
                 (long long)rec.fence);
   else if (r->fake && left > rec.expires_in_ms)
      violation (r, "%s: the lease on %s stops in %lld ms, after the database's %lld ms", when,
                 leaselock_lease_key (l), (long long)left, (long long)rec.expires_in_ms);
}

/* Moves the clock past l's next renewal and waits for the I/O thread's
 * call: an auto-renewed lease that reads HELD must be renewed. */
static void renew_round (run_t *r, const char *when, leaselock_lease_t *l)
{
   long before = fault_backend_done ();
   ll_clock_advance (ROUND_MS);
   if (!l || leaselock_lease_state (l) != LEASELOCK_STATE_HELD)
      return;
   for (int waited = 0; fault_backend_done () == before; waited++) {
      if (waited == 1000) {
         if (leaselock_lease_state (l) == LEASELOCK_STATE_HELD)
            violation (r, "%s: the lease on %s reads HELD but is no longer renewed", when,
                       leaselock_lease_key (l));
         return;
      }
      sleep_ms (1);
   }
   sleep_ms (5); /* the I/O thread records the outcome */
}

static bool list_count (const leaselock_record_t *rec, void *data)
{
   (void)rec;
   ++*(int *)data;
   return true;
}

/* Records under the run's prefix that are live with an owner other than
 * except's. */
static bool count_held (const leaselock_record_t *rec, void *data)
{
   void **args = data;
   if (rec->owner[0] && rec->expires_in_ms > 0 && strcmp (rec->owner, (const char *)args[0])) {
      ++*(int *)args[1];
      fprintf (stderr, "    note [%s] %s stays held by nobody for %lld ms\n",
               ((run_t *)args[2])->what, rec->key, (long long)rec->expires_in_ms);
   }
   return true;
}

/* ---- the workload ------------------------------------------------------ */

static void workload (run_t *r)
{
   leaselock_error_t err;
   const char *k1 = run_key (r, "k1"), *k2 = run_key (r, "k2"), *k3 = run_key (r, "k3"),
              *k4 = run_key (r, "k4");

   /* k3 is the admin's, so that one acquire answers BUSY. */
   leaselock_acquire_opts_t ao;
   leaselock_acquire_opts_init (&ao);
   ao.ttl_ms = 600000;
   ao.auto_renew = false;
   leaselock_lease_t *held = NULL;
   alloc_hook_pause (true);
   bool ok = leaselock_acquire (r->admin, k3, strlen (k3), &ao, &held, &err);
   alloc_hook_pause (false);
   if (!ok) {
      violation (r, "admin acquire: %s", err.message);
      return;
   }
   char admin_owner[LEASELOCK_OWNER_LEN + 1];
   snprintf (admin_owner, sizeof admin_owner, "%s", leaselock_lease_owner (held));

   leaselock_client_t *c = leaselock_client_new (r->faulty, "faults", &err);
   if (judge (r, "client_new", c != NULL, &err)) {
      leaselock_lease_t *l1 = NULL, *l2 = NULL, *l3 = NULL, *l4 = NULL;
      leaselock_acquire_opts_t o;
      leaselock_acquire_opts_init (&o);
      o.ttl_ms = TTL_MS;
      o.on_lost = on_lost;
      o.on_lost_data = r;
      judge (r, "acquire k1", leaselock_acquire (c, k1, strlen (k1), &o, &l1, &err), &err);
      o.auto_renew = false;
      o.on_lost = NULL;
      o.timeout_ms = 1000;
      judge (r, "acquire k2 (timeout)", leaselock_acquire (c, k2, strlen (k2), &o, &l2, &err),
             &err);
      o.timeout_ms = 0;
      ok = leaselock_acquire (c, k3, strlen (k3), &o, &l3, &err);
      if (ok)
         violation (r, "acquire k3 succeeded while the admin holds it");
      else if (err.code != LEASELOCK_BUSY)
         judge (r, "acquire k3 (busy)", ok, &err);
      o.min_hold_ms = 100;
      judge (r, "acquire k4 (min_hold)", leaselock_acquire (c, k4, strlen (k4), &o, &l4, &err),
             &err);
      check_lease (r, "after acquire", l1);
      check_lease (r, "after acquire", l2);
      check_lease (r, "after acquire", l4);

      renew_round (r, "auto-renewal 1", l1);
      check_lease (r, "auto-renewal 1", l1);
      renew_round (r, "auto-renewal 2", l1);
      check_lease (r, "auto-renewal 2", l1);
      if (l1)
         judge (r, "renew k1", leaselock_lease_renew (l1, 0, &err), &err);
      if (l2)
         judge (r, "renew k2", leaselock_lease_renew (l2, 20000, &err), &err);
      check_lease (r, "after renew", l1);
      check_lease (r, "after renew", l2);

      leaselock_record_t rec;
      bool found;
      judge (r, "inspect", leaselock_inspect (c, k1, strlen (k1), &rec, &found, &err), &err);
      int n = 0;
      judge (r, "list", leaselock_list (c, r->pfx, strlen (r->pfx), list_count, &n, &err), &err);
      bool took;
      judge (r, "force_release", leaselock_force_release (c, k3, strlen (k3), &took, &err), &err);

      if (l2)
         judge (r, "release k2", leaselock_lease_release (l2, &err), &err);
      if (l1) {
         atomic_store (&r->released, true);
         judge (r, "release k1", leaselock_lease_release (l1, &err), &err);
      }
      check_lease (r, "after release", l1);
      check_lease (r, "after release", l2);
      renew_round (r, "after release", l1);
      check_lease (r, "after release and a round", l1);
      if (atomic_load (&r->spurious))
         violation (r, "on_lost fired for the lease on %s after the caller released it", k1);

      leaselock_lease_destroy (l4); /* releases it */
      leaselock_lease_destroy (l1);
      leaselock_lease_destroy (l2);
      leaselock_lease_destroy (l3);
      leaselock_client_destroy (c);
   }

   /* Keys still held by an owner nobody holds any more. */
   int n_held = 0;
   void *args[3] = { admin_owner, &n_held, r };
   alloc_hook_pause (true);
   if (!leaselock_list (r->admin, r->pfx, strlen (r->pfx), count_held, args, &err))
      violation (r, "admin list: %s", err.message);
   alloc_hook_pause (false);
   r->dangling += n_held;
   leaselock_lease_destroy (held);
}

/* ---- the walks --------------------------------------------------------- */

/* One run with fault n of the walk; false once n was never reached. */
static bool run_once (run_t *r, const char *label, long n)
{
   static int serial;
   snprintf (r->pfx, sizeof r->pfx, "faults-%d-%d", (int)getpid (), ++serial);
   snprintf (r->what, sizeof r->what, "%s N=%ld", label, n);
   atomic_store (&r->released, false);
   atomic_store (&r->spurious, 0);
   long live = alloc_hook_live ();
   workload (r);
   bool reached = r->mode == MODE_ALLOC ? alloc_hook_fired () : fault_backend_fired () != NULL;
   fault_backend_arm (0, FAULT_BACKEND);
   alloc_hook_fail_at (0);
   if (alloc_hook_live () != live)
      violation (r, "the core keeps %ld blocks more than before the run (a leak)",
                 alloc_hook_live () - live);
   return reached;
}

/* Walks N = 1, 2, ... with one fault kind (or allocation failures).
 * Returns the runs. */
static long walk (run_t *r, const char *label, int kind)
{
   long n;
   int dangling0 = r->dangling, bad0 = r->bad;
   for (n = 1; n < MAX_N; n++) {
      if (r->mode == MODE_ALLOC) {
         fault_backend_arm (0, FAULT_BACKEND);
         alloc_hook_fail_at (n);
      } else {
         fault_backend_arm (n, (fault_kind_t)kind);
      }
      if (!run_once (r, label, n))
         break;
   }
   printf ("%-28s N = 1..%ld, %d violations, %d keys left held until their TTL\n", label, n - 1,
           r->bad - bad0, r->dangling - dangling0);
   return n - 1;
}

static bool setup (run_t *r, bool fake, mode_t_ mode)
{
   static char sqlite_plain[512], sqlite_faulty[600];
   snprintf (sqlite_plain, sizeof sqlite_plain, "sqlite://%s/faults.db", DIR);
   snprintf (sqlite_faulty, sizeof sqlite_faulty, "faulty+%s", sqlite_plain);
   memset (r, 0, sizeof *r);
   r->fake = fake;
   r->mode = mode;
   r->plain = fake ? "fake://" : sqlite_plain;
   r->faulty = fake ? "faulty+fake://" : sqlite_faulty;
   leaselock_error_t err;
   r->admin = leaselock_client_new (r->plain, "admin", &err);
   if (!r->admin) {
      fprintf (stderr, "    admin client on %s: %s\n", r->plain, err.message);
      return false;
   }
   /* A client keeps its last freed lease's memory for its next acquire
    * (ll_lease_alloc): one block per client, made here by the admin's
    * first lease rather than inside the first run, whose blocks are
    * counted. */
   leaselock_acquire_opts_t ao;
   leaselock_acquire_opts_init (&ao);
   ao.auto_renew = false;
   leaselock_lease_t *l = NULL;
   if (!leaselock_acquire (r->admin, "faults-warm", 11, &ao, &l, &err)) {
      fprintf (stderr, "    admin acquire on %s: %s\n", r->plain, err.message);
      leaselock_client_destroy (r->admin);
      r->admin = NULL;
      return false;
   }
   leaselock_lease_destroy (l); /* releases it */
   return true;
}

static void backend_faults (bool fake)
{
   run_t r;
   CHECK (setup (&r, fake, MODE_BACKEND));
   for (int k = 0; k < FAULT_KINDS; k++) {
      char label[64];
      snprintf (label, sizeof label, "%s %s", fake ? "faulty+fake" : "faulty+sqlite",
                fault_kind_name ((fault_kind_t)k));
      long runs = walk (&r, label, k);
      if (runs < 10)
         r.bad++, fprintf (stderr, "    FAIL %s: only %ld calls in the workload\n", label, runs);
   }
   leaselock_client_destroy (r.admin);
   CHECK_EQ (r.bad, 0);
}

static void alloc_faults (bool fake)
{
   run_t r;
   CHECK (setup (&r, fake, MODE_ALLOC));
   const char *label = fake ? "alloc fake" : "alloc sqlite";
   long runs = walk (&r, label, 0);
   leaselock_client_destroy (r.admin);
   CHECK (runs >= 3);
   CHECK_EQ (r.bad, 0);
}

static void test_backend_faults_fake (void)
{
   backend_faults (true);
}

static void test_backend_faults_sqlite (void)
{
   backend_faults (false);
}

static void test_alloc_faults_fake (void)
{
   alloc_faults (true);
}

static void test_alloc_faults_sqlite (void)
{
   alloc_faults (false);
}

int main (int argc, char **argv)
{
   if (argc != 2) {
      fprintf (stderr, "usage: %s DIR   (a directory for the SQLite file)\n", argv[0]);
      return 2;
   }
   setvbuf (stdout, NULL, _IOLBF, 0);
   DIR = argv[1];
   ll_backend_register (&fake_backend);
   ll_backend_register (&fault_backend);
   ll_clock_use_fake (true);
   RUN (test_backend_faults_fake);
   RUN (test_backend_faults_sqlite);
   RUN (test_alloc_faults_fake);
   RUN (test_alloc_faults_sqlite);
   return tl_summary ("inproc-faults");
}
