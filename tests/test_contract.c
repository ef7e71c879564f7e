/*
 * test_contract.c - the lease contract, against any backend:
 *
 *   test_contract fake://        in-memory backend on a fake clock that runs
 *                                4x faster than real time (and can be
 *                                frozen), so TTL logic costs milliseconds
 *   test_contract sqlite:///tmp/x.db | mongodb://... | mysql://... | ...
 *
 * Every test uses keys under a per-run prefix, so a persistent server can
 * be reused.
 */
#include "fake_backend.h"
#include "testlib.h"

#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static bool FAKE;
/* Whether the backend bounds TTLs by its table's max_ttl (failover.c). */
static bool TTL_BOUNDED;

/* ---- time: real, or the fake clock driven by a ticker thread ---------- */

/* Fake ms per real ms. Modest on purpose: a margin of 200 fake ms must
 * survive a thread stalled for tens of real ms on a loaded CI machine. */
#define RATE 4
static atomic_bool ticking = true;
static atomic_bool ticker_stop;

static void *ticker (void *arg)
{
   (void)arg;
   while (!atomic_load (&ticker_stop)) {
      struct timespec ts = { 0, 1000000 / RATE };
      nanosleep (&ts, NULL);
      if (atomic_load (&ticking))
         ll_clock_advance (1);
   }
   return NULL;
}

/* Sleeps ms on the clock the engine and the backend share. */
static void t_sleep (int64_t ms)
{
   if (!FAKE) {
      sleep_ms (ms);
      return;
   }
   int64_t until = ll_now_ms () + ms;
   while (ll_now_ms () < until)
      sleep_ms (1);
}

static bool acq (leaselock_client_t *c, const char *k, leaselock_acquire_opts_t o,
                 leaselock_lease_t **l, leaselock_error_t *err)
{
   return leaselock_acquire (c, k, strlen (k), &o, l, err);
}

/* ---- basic operations -------------------------------------------------- */

static void test_acquire_release (void)
{
   leaselock_client_t *c = client ("basic");
   CHECK (c);
   leaselock_error_t err;
   leaselock_lease_t *l;
   bool ok = acq (c, key ("basic"), opts (5000, false), &l, &err);
   CHECK_OK (ok, err);
   CHECK (!strcmp (leaselock_lease_key (l), key ("basic")));
   CHECK_EQ (strlen (leaselock_lease_owner (l)), 32);
   CHECK_EQ (strspn (leaselock_lease_owner (l), "0123456789abcdef"), 32);
   CHECK (leaselock_lease_fence (l) >= 1);
   CHECK_EQ (leaselock_lease_ttl_ms (l), 5000);
   CHECK_EQ (leaselock_lease_state (l), LEASELOCK_STATE_HELD);
   CHECK (leaselock_lease_remaining_ms (l) > 4000);
   ok = leaselock_lease_release (l, &err);
   CHECK_OK (ok, err);
   CHECK_EQ (leaselock_lease_state (l), LEASELOCK_STATE_RELEASED);
   ok = leaselock_lease_release (l, &err);
   CHECK_ERR (ok, err, LEASELOCK_NOT_HELD, "already released");
   leaselock_lease_destroy (l);
   leaselock_client_destroy (c);
}

static void test_owner_tokens_unique (void)
{
   leaselock_client_t *c = client (NULL);
   CHECK (c);
   leaselock_error_t err;
   char seen[20][33];
   for (int i = 0; i < 20; i++) {
      leaselock_lease_t *l;
      bool ok = acq (c, key ("tokens"), opts (5000, false), &l, &err);
      CHECK_OK (ok, err);
      snprintf (seen[i], 33, "%s", leaselock_lease_owner (l));
      for (int j = 0; j < i; j++)
         CHECK (strcmp (seen[i], seen[j]) != 0);
      leaselock_lease_destroy (l);
   }
   leaselock_client_destroy (c);
}

static void test_busy_one_try (void)
{
   leaselock_client_t *a = client ("a"), *b = client ("b");
   CHECK (a && b);
   leaselock_error_t err;
   leaselock_lease_t *la, *lb = (void *)1;
   bool ok = acq (a, key ("busy"), opts (5000, false), &la, &err);
   CHECK_OK (ok, err);
   ok = acq (b, key ("busy"), opts (5000, false), &lb, &err);
   CHECK (!ok);
   CHECK_EQ (err.code, LEASELOCK_BUSY);
   CHECK (lb == NULL);
   /* the same client is another owner too */
   ok = acq (a, key ("busy"), opts (5000, false), &lb, &err);
   CHECK (!ok && err.code == LEASELOCK_BUSY);
   leaselock_lease_destroy (la);
   ok = acq (b, key ("busy"), opts (5000, false), &lb, &err);
   CHECK_OK (ok, err);
   leaselock_lease_destroy (lb);
   leaselock_client_destroy (a);
   leaselock_client_destroy (b);
}

static void test_fences_grow (void)
{
   leaselock_client_t *c = client (NULL);
   CHECK (c);
   leaselock_error_t err;
   int64_t last = 0;
   for (int round = 0; round < 6; round++) {
      leaselock_lease_t *l;
      bool ok = acq (c, key ("fence"), opts (300, false), &l, &err);
      CHECK_OK (ok, err);
      CHECK (leaselock_lease_fence (l) > last);
      last = leaselock_lease_fence (l);
      switch (round % 3) {
         case 0: /* release */
            ok = leaselock_lease_release (l, &err);
            CHECK_OK (ok, err);
            break;
         case 1: /* expiry, then takeover */
            t_sleep (450);
            break;
         case 2: /* force release */
            ok = leaselock_force_release (c, key ("fence"), strlen (key ("fence")), NULL, &err);
            CHECK_OK (ok, err);
            break;
      }
      leaselock_lease_destroy (l);
   }
   leaselock_client_destroy (c);
}

static void test_expiry_takeover (void)
{
   leaselock_client_t *a = client ("a"), *b = client ("b");
   CHECK (a && b);
   leaselock_error_t err;
   leaselock_lease_t *la, *lb;
   bool ok = acq (a, key ("expiry"), opts (300, false), &la, &err);
   CHECK_OK (ok, err);
   ok = acq (b, key ("expiry"), opts (5000, false), &lb, &err);
   CHECK (!ok && err.code == LEASELOCK_BUSY);
   t_sleep (500);
   CHECK_EQ (leaselock_lease_state (la), LEASELOCK_STATE_LOST);
   CHECK_EQ (leaselock_lease_remaining_ms (la), 0);
   ok = acq (b, key ("expiry"), opts (5000, false), &lb, &err);
   CHECK_OK (ok, err);
   CHECK (leaselock_lease_fence (lb) > leaselock_lease_fence (la));
   /* A late holder can neither renew nor release B's lease (invariant 4). */
   ok = leaselock_lease_renew (la, 5000, &err);
   CHECK_ERR (ok, err, LEASELOCK_LOST, "lost");
   ok = leaselock_lease_release (la, &err);
   CHECK_ERR (ok, err, LEASELOCK_NOT_HELD, "no longer held");
   leaselock_record_t rec;
   bool found;
   ok = leaselock_inspect (b, key ("expiry"), strlen (key ("expiry")), &rec, &found, &err);
   CHECK_OK (ok, err);
   CHECK (found);
   CHECK (!strcmp (rec.owner, leaselock_lease_owner (lb)));
   CHECK (rec.expires_in_ms > 3000);
   leaselock_lease_destroy (la);
   leaselock_lease_destroy (lb);
   leaselock_client_destroy (a);
   leaselock_client_destroy (b);
}

static void test_renew (void)
{
   leaselock_client_t *a = client ("a"), *b = client ("b");
   CHECK (a && b);
   leaselock_error_t err;
   leaselock_lease_t *la, *lb;
   bool ok = acq (a, key ("renew"), opts (600, false), &la, &err);
   CHECK_OK (ok, err);
   t_sleep (350);
   ok = leaselock_lease_renew (la, 0, &err); /* its own TTL */
   CHECK_OK (ok, err);
   t_sleep (400); /* past the first TTL */
   ok = acq (b, key ("renew"), opts (5000, false), &lb, &err);
   CHECK (!ok && err.code == LEASELOCK_BUSY);
   CHECK_EQ (leaselock_lease_state (la), LEASELOCK_STATE_HELD);
   ok = leaselock_lease_renew (la, 2000, &err); /* a new TTL */
   CHECK_OK (ok, err);
   CHECK_EQ (leaselock_lease_ttl_ms (la), 2000);
   CHECK (leaselock_lease_remaining_ms (la) > 1000);
   ok = leaselock_lease_renew (la, LEASELOCK_TTL_MAX_MS + 1, &err);
   CHECK_ERR (ok, err, LEASELOCK_INVALID, "ttl must be at most 30 days");
   ok = leaselock_lease_release (la, &err);
   CHECK_OK (ok, err);
   ok = leaselock_lease_renew (la, 0, &err);
   CHECK_ERR (ok, err, LEASELOCK_NOT_HELD, "released");
   leaselock_lease_destroy (la);
   leaselock_client_destroy (a);
   leaselock_client_destroy (b);
}

static void test_renew_after_force_release (void)
{
   leaselock_client_t *a = client ("a");
   CHECK (a);
   leaselock_error_t err;
   leaselock_lease_t *la;
   bool ok = acq (a, key ("renew-force"), opts (5000, false), &la, &err);
   CHECK_OK (ok, err);
   bool took = false;
   ok = leaselock_force_release (a, key ("renew-force"), strlen (key ("renew-force")), &took, &err);
   CHECK_OK (ok, err);
   CHECK (took);
   ok = leaselock_lease_renew (la, 0, &err);
   CHECK (!ok && err.code == LEASELOCK_NOT_HELD);
   CHECK_EQ (leaselock_lease_state (la), LEASELOCK_STATE_LOST);
   leaselock_lease_destroy (la);
   leaselock_client_destroy (a);
}

static void test_min_hold (void)
{
   leaselock_client_t *a = client ("a"), *b = client ("b");
   CHECK (a && b);
   leaselock_error_t err;
   leaselock_lease_t *la, *lb;
   leaselock_acquire_opts_t o = opts (5000, false);
   o.min_hold_ms = 800;
   bool ok = acq (a, key ("minhold"), o, &la, &err);
   CHECK_OK (ok, err);
   ok = leaselock_lease_release (la, &err);
   CHECK_OK (ok, err);
   /* "no owner" alone never means free */
   leaselock_record_t rec;
   bool found;
   ok = leaselock_inspect (b, key ("minhold"), strlen (key ("minhold")), &rec, &found, &err);
   CHECK_OK (ok, err);
   CHECK (found);
   CHECK (!strcmp (rec.owner, ""));
   CHECK (rec.expires_in_ms > 300 && rec.expires_in_ms <= 800);
   ok = acq (b, key ("minhold"), opts (5000, false), &lb, &err);
   CHECK (!ok && err.code == LEASELOCK_BUSY);
   t_sleep (1000);
   ok = acq (b, key ("minhold"), opts (5000, false), &lb, &err);
   CHECK_OK (ok, err);
   CHECK (leaselock_lease_fence (lb) > leaselock_lease_fence (la));
   leaselock_lease_destroy (lb);
   leaselock_lease_destroy (la);

   /* min_hold already served: free at once */
   o.min_hold_ms = 100;
   ok = acq (a, key ("minhold2"), o, &la, &err);
   CHECK_OK (ok, err);
   t_sleep (300);
   ok = leaselock_lease_release (la, &err);
   CHECK_OK (ok, err);
   ok = acq (b, key ("minhold2"), opts (5000, false), &lb, &err);
   CHECK_OK (ok, err);
   leaselock_lease_destroy (lb);
   leaselock_lease_destroy (la);
   leaselock_client_destroy (a);
   leaselock_client_destroy (b);
}

/* Time left on k's record as b sees it, -1 when it has none. */
static int64_t left_ms (leaselock_client_t *b, const char *k)
{
   leaselock_record_t rec;
   bool found = false;
   leaselock_error_t err;
   if (!leaselock_inspect (b, k, strlen (k), &rec, &found, &err) || !found)
      return -1;
   return rec.expires_in_ms;
}

/* leaselock_lease_extend: a renew that also extends the minimum hold,
 * counted from the renew; it never shortens one given before. */
static void test_extend_min_hold (void)
{
   leaselock_client_t *a = client ("a"), *b = client ("b");
   CHECK (a && b);
   leaselock_error_t err;
   leaselock_lease_t *la, *lb;
   bool ok = acq (a, key ("extend"), opts (5000, false), &la, &err);
   CHECK_OK (ok, err);
   t_sleep (300);
   ok = leaselock_lease_extend (la, 0, 3000, &err);
   CHECK_OK (ok, err);
   ok = leaselock_lease_release (la, &err);
   CHECK_OK (ok, err);
   /* 3 s from the renew, not from the acquire 300 ms before it */
   int64_t left = left_ms (b, key ("extend"));
   CHECK (left > 2000 && left <= 3100);
   ok = acq (b, key ("extend"), opts (5000, false), &lb, &err);
   CHECK (!ok && err.code == LEASELOCK_BUSY);
   leaselock_lease_destroy (la);

   /* a shorter minimum hold leaves the longer one given at acquire */
   leaselock_acquire_opts_t o = opts (5000, false);
   o.min_hold_ms = 3000;
   ok = acq (a, key ("extend2"), o, &la, &err);
   CHECK_OK (ok, err);
   ok = leaselock_lease_extend (la, 4000, 0, &err);
   CHECK_OK (ok, err);
   CHECK (leaselock_lease_ttl_ms (la) == 4000);
   ok = leaselock_lease_release (la, &err);
   CHECK_OK (ok, err);
   left = left_ms (b, key ("extend2"));
   CHECK (left > 2000 && left <= 3000);

   /* bad minimum holds: nothing is sent */
   ok = leaselock_lease_extend (la, 0, -2, &err);
   CHECK_ERR (ok, err, LEASELOCK_INVALID, "min_hold must not be negative");
   ok = leaselock_lease_extend (la, 0, LEASELOCK_TTL_MAX_MS + 1, &err);
   CHECK_ERR (ok, err, LEASELOCK_INVALID, "min_hold must be at most 30 days");
   ok = leaselock_lease_extend (NULL, 0, 0, &err);
   CHECK_ERR (ok, err, LEASELOCK_INVALID, "lease is NULL");
   leaselock_lease_destroy (la);
   leaselock_client_destroy (a);
   leaselock_client_destroy (b);
}

static void test_inspect (void)
{
   leaselock_client_t *c = client ("inspect-label");
   CHECK (c);
   leaselock_error_t err;
   leaselock_record_t rec;
   bool found = true;
   bool ok =
     leaselock_inspect (c, key ("never-used"), strlen (key ("never-used")), &rec, &found, &err);
   CHECK_OK (ok, err);
   CHECK (!found);
   leaselock_lease_t *l;
   ok = acq (c, key ("inspect"), opts (4000, false), &l, &err);
   CHECK_OK (ok, err);
   ok = leaselock_inspect (c, key ("inspect"), strlen (key ("inspect")), &rec, &found, &err);
   CHECK_OK (ok, err);
   CHECK (found);
   CHECK (!strcmp (rec.key, key ("inspect")));
   CHECK_EQ (rec.key_len, strlen (key ("inspect")));
   CHECK (!strcmp (rec.owner, leaselock_lease_owner (l)));
   CHECK_EQ (rec.fence, leaselock_lease_fence (l));
   CHECK (rec.expires_in_ms > 2000 && rec.expires_in_ms <= 4000);
   CHECK (rec.host[0] != '\0');
   CHECK_EQ (rec.pid, getpid ());
   CHECK (!strcmp (rec.label, "inspect-label"));
   /* Invariant 3: the holder's deadline is never later than the database's
    * expiry (2 ms for rounding between clocks). */
   int64_t left = leaselock_lease_remaining_ms (l);
   CHECK (left <= rec.expires_in_ms + 2);
   leaselock_lease_destroy (l);
   leaselock_client_destroy (c);
}

static bool stop_after_one (const leaselock_record_t *r, void *ud)
{
   (void)r;
   (*(int *)ud)++;
   return false;
}

/* list calls its callback with no connection held: the callback may use
 * the client, and fork, whose child can use it too. */
typedef struct
{
   leaselock_client_t *c;
   int calls, child_status;
   bool inner_ok;
} nested_t;

static bool list_nested (const leaselock_record_t *r, void *ud)
{
   nested_t *n = ud;
   leaselock_record_t rec;
   bool found = false;
   leaselock_error_t err;
   n->inner_ok = leaselock_inspect (n->c, r->key, r->key_len, &rec, &found, &err) && found;
   pid_t pid = fork ();
   if (pid == 0)
      _exit (leaselock_inspect (n->c, r->key, r->key_len, &rec, &found, &err) && found ? 0 : 1);
   if (pid > 0)
      waitpid (pid, &n->child_status, 0);
   n->calls++;
   return false;
}

static void test_list_callback_reenters (void)
{
   leaselock_client_t *a = client ("a");
   CHECK (a);
   leaselock_error_t err;
   leaselock_lease_t *la;
   bool ok = acq (a, key ("nested/1"), opts (60000, false), &la, &err);
   CHECK_OK (ok, err);
   nested_t n = { a, 0, -1, false };
   const char *p = key ("nested/");
   ok = leaselock_list (a, p, strlen (p), list_nested, &n, &err);
   leaselock_lease_destroy (la);
   leaselock_client_destroy (a);
   CHECK_OK (ok, err);
   CHECK_EQ (n.calls, 1);
   CHECK (n.inner_ok);
   CHECK (WIFEXITED (n.child_status) && WEXITSTATUS (n.child_status) == 0);
}

static void test_list_prefix (void)
{
   leaselock_client_t *c = client (NULL);
   CHECK (c);
   leaselock_error_t err;
   const char *names[] = { "list/b", "list/a", "lisx", "list/c%", "lp%_/x", "lpab/x" };
   for (int i = 0; i < 6; i++) {
      leaselock_lease_t *l;
      bool ok = acq (c, key (names[i]), opts (5000, false), &l, &err);
      CHECK_OK (ok, err);
      leaselock_lease_destroy (l); /* released records are listed too */
   }
   listing_t L = { 0 };
   char p[300];
   snprintf (p, sizeof p, "%s/list/", PFX);
   bool ok = leaselock_list (c, p, strlen (p), collect, &L, &err);
   CHECK_OK (ok, err);
   CHECK_EQ (L.n, 3);
   CHECK (!strcmp (L.keys[0], key ("list/a")));
   CHECK (!strcmp (L.keys[1], key ("list/b")));
   CHECK (!strcmp (L.keys[2], key ("list/c%")));
   /* % and _ are literal */
   memset (&L, 0, sizeof L);
   snprintf (p, sizeof p, "%s/lp%%_", PFX);
   ok = leaselock_list (c, p, strlen (p), collect, &L, &err);
   CHECK_OK (ok, err);
   CHECK_EQ (L.n, 1);
   CHECK (!strcmp (L.keys[0], key ("lp%_/x")));
   /* the callback can stop the walk */
   int n = 0;
   ok = leaselock_list (c, PFX, strlen (PFX), stop_after_one, &n, &err);
   CHECK_OK (ok, err);
   CHECK_EQ (n, 1);
   /* all keys of this run */
   memset (&L, 0, sizeof L);
   ok = leaselock_list (c, "", 0, collect, &L, &err);
   CHECK_OK (ok, err);
   CHECK (L.n >= 6);
   leaselock_client_destroy (c);
}

static void test_force_release (void)
{
   leaselock_client_t *a = client ("a"), *b = client ("admin");
   CHECK (a && b);
   leaselock_error_t err;
   leaselock_lease_t *la, *lb;
   bool ok = acq (a, key ("force"), opts (60000, false), &la, &err);
   CHECK_OK (ok, err);
   bool took = false;
   ok = leaselock_force_release (b, key ("force"), strlen (key ("force")), &took, &err);
   CHECK_OK (ok, err);
   CHECK (took);
   ok = leaselock_force_release (b, key ("force"), strlen (key ("force")), &took, &err);
   CHECK_OK (ok, err);
   CHECK (!took);
   ok = leaselock_force_release (b, key ("force-never"), strlen (key ("force-never")), &took, &err);
   CHECK_OK (ok, err);
   CHECK (!took);
   ok = acq (b, key ("force"), opts (5000, false), &lb, &err);
   CHECK_OK (ok, err);
   CHECK_EQ (leaselock_lease_fence (lb), leaselock_lease_fence (la) + 1);
   ok = leaselock_lease_release (la, &err);
   CHECK (!ok && err.code == LEASELOCK_NOT_HELD);
   leaselock_record_t rec;
   bool found;
   ok = leaselock_inspect (a, key ("force"), strlen (key ("force")), &rec, &found, &err);
   CHECK_OK (ok, err);
   CHECK (!strcmp (rec.owner, leaselock_lease_owner (lb)));
   leaselock_lease_destroy (la);
   leaselock_lease_destroy (lb);
   leaselock_client_destroy (a);
   leaselock_client_destroy (b);
}

static void test_destroy_releases (void)
{
   leaselock_client_t *a = client ("a"), *b = client ("b");
   CHECK (a && b);
   leaselock_error_t err;
   leaselock_lease_t *la, *lb;
   bool ok = acq (a, key ("destroy"), opts (60000, true), &la, &err);
   CHECK_OK (ok, err);
   leaselock_lease_destroy (la);
   ok = acq (b, key ("destroy"), opts (5000, false), &lb, &err);
   CHECK_OK (ok, err);
   leaselock_lease_destroy (lb);
   leaselock_client_destroy (a);
   leaselock_client_destroy (b);
}

static void test_lease_outlives_client (void)
{
   leaselock_client_t *a = client ("a");
   CHECK (a);
   leaselock_error_t err;
   leaselock_lease_t *la;
   bool ok = acq (a, key ("outlive"), opts (60000, true), &la, &err);
   CHECK_OK (ok, err);
   leaselock_client_destroy (a);
   ok = leaselock_lease_release (la, &err);
   CHECK_ERR (ok, err, LEASELOCK_NOT_HELD, "client of this lease is closed");
   ok = leaselock_lease_renew (la, 0, &err);
   CHECK_ERR (ok, err, LEASELOCK_NOT_HELD, "client of this lease is closed");
   CHECK (leaselock_lease_fence (la) >= 1);
   leaselock_lease_destroy (la);
   leaselock_client_t *b = client ("b");
   CHECK (b);
   ok = leaselock_force_release (b, key ("outlive"), strlen (key ("outlive")), NULL, &err);
   CHECK_OK (ok, err);
   leaselock_client_destroy (b);
}

/* ---- blocking acquire ------------------------------------------------ */

static void test_blocking_timeout (void)
{
   leaselock_client_t *a = client ("a"), *b = client ("b");
   CHECK (a && b);
   leaselock_error_t err;
   leaselock_lease_t *la, *lb;
   bool ok = acq (a, key ("timeout"), opts (60000, false), &la, &err);
   CHECK_OK (ok, err);
   leaselock_acquire_opts_t o = opts (5000, false);
   o.timeout_ms = 400;
   long before = FAKE ? fake_backend_calls (FAKE_ACQUIRE) : 0;
   int64_t t0 = ll_now_ms ();
   ok = acq (b, key ("timeout"), o, &lb, &err);
   int64_t took = ll_now_ms () - t0;
   CHECK_ERR (ok, err, LEASELOCK_TIMEOUT, "timed out after");
   CHECK (took >= 400);
   if (FAKE) {
      /* backoff, not a busy loop: a handful of tries, not hundreds */
      long tries = fake_backend_calls (FAKE_ACQUIRE) - before;
      CHECK (tries >= 3 && tries <= 40);
   }
   leaselock_lease_destroy (la);
   leaselock_client_destroy (a);
   leaselock_client_destroy (b);
}

/* BUSY and TIMEOUT name the holder as the CLI does (host pid N (label),
 * fence, time left), in the message and in err.holder; a mode's failure
 * names none, and neither does a key free by the time it is read. */
static void test_busy_names_holder (void)
{
   leaselock_client_t *a = client ("holder-job"), *b = client ("b");
   CHECK (a && b);
   leaselock_error_t err;
   leaselock_lease_t *la, *lb = NULL;
   long inspects = FAKE ? fake_backend_calls (FAKE_INSPECT) : 0;
   bool ok = acq (a, key ("who"), opts (60000, false), &la, &err);
   CHECK_OK (ok, err);
   if (FAKE) /* never a read on the success path */
      CHECK_EQ (fake_backend_calls (FAKE_INSPECT), inspects);
   char host[64] = "", want[256];
   gethostname (host, sizeof host - 1);
   snprintf (want, sizeof want, "\"%s\" is held by %s pid %d (holder-job), fence %lld, expires in ",
             key ("who"), host, (int)getpid (), (long long)leaselock_lease_fence (la));
   ok = acq (b, key ("who"), opts (5000, false), &lb, &err);
   CHECK_ERR (ok, err, LEASELOCK_BUSY, want);
   if (FAKE) /* one read, when it gave up */
      CHECK_EQ (fake_backend_calls (FAKE_INSPECT), inspects + 1);
   CHECK (err.holder.known && !err.holder.released);
   CHECK_EQ (err.holder.pid, getpid ());
   CHECK (!strcmp (err.holder.host, host) && !strcmp (err.holder.label, "holder-job"));
   CHECK_EQ (err.holder.fence, leaselock_lease_fence (la));
   CHECK (err.holder.expires_in_ms > 0 && err.holder.expires_in_ms <= 60000);
   leaselock_acquire_opts_t o = opts (5000, false);
   o.timeout_ms = 60;
   ok = acq (b, key ("who"), o, &lb, &err);
   snprintf (want, sizeof want,
             "ms waiting for \"%s\" (held by %s pid %d (holder-job), fence %lld, expires in ",
             key ("who"), host, (int)getpid (), (long long)leaselock_lease_fence (la));
   CHECK_ERR (ok, err, LEASELOCK_TIMEOUT, want);
   CHECK (strstr (err.message, "s)") && err.holder.known && err.holder.pid == getpid ());
   /* The wait a binding drives gives up the same way. */
   leaselock_wait_t *w = leaselock_wait_new (b, key ("who"), strlen (key ("who")), &o, &err);
   CHECK (w);
   int64_t sleep = 0;
   while (!leaselock_wait_try (w, &lb, &sleep, &err) && err.code == LEASELOCK_BUSY)
      t_sleep (sleep > 0 ? sleep : 1);
   leaselock_wait_destroy (w);
   CHECK_ERR (false, err, LEASELOCK_TIMEOUT, want);
   CHECK (err.holder.known && !strcmp (err.holder.label, "holder-job"));
   /* A key kept by its min_hold after the release says so. */
   leaselock_lease_destroy (la);
   o = opts (5000, false);
   o.min_hold_ms = 30000;
   ok = acq (a, key ("who"), o, &la, &err);
   CHECK_OK (ok, err);
   CHECK_OK (leaselock_lease_release (la, &err), err);
   ok = acq (b, key ("who"), opts (5000, false), &lb, &err);
   CHECK_ERR (ok, err, LEASELOCK_BUSY, " is released but kept by min_hold of ");
   CHECK (err.holder.known && err.holder.released);
   /* A semaphore's failure names no one holder; a new error clears it. */
   leaselock_lease_t *s1 = NULL, *s2 = NULL;
   ok = leaselock_semaphore_acquire (a, key ("who-sem"), strlen (key ("who-sem")), 1,
                                     &(leaselock_acquire_opts_t){ .ttl_ms = 5000 }, &s1, &err);
   CHECK_OK (ok, err);
   ok = leaselock_semaphore_acquire (b, key ("who-sem"), strlen (key ("who-sem")), 1,
                                     &(leaselock_acquire_opts_t){ .ttl_ms = 5000 }, &s2, &err);
   CHECK (!ok && err.code == LEASELOCK_BUSY && !err.holder.known);
   /* A poller's tries ask for no holder: none read. */
   leaselock_acquire_opts_t quiet = opts (5000, false);
   quiet.no_holder = true;
   inspects = FAKE ? fake_backend_calls (FAKE_INSPECT) : 0;
   ok = acq (b, key ("who"), quiet, &lb, &err);
   CHECK (!ok && err.code == LEASELOCK_BUSY && !err.holder.known);
   ok = acq (b, key ("who"), opts (5000, false), &lb, NULL);
   CHECK (!ok && lb == NULL);
   if (FAKE)
      CHECK_EQ (fake_backend_calls (FAKE_INSPECT), inspects);
   leaselock_lease_destroy (s1);
   leaselock_lease_destroy (la);
   leaselock_client_destroy (a);
   leaselock_client_destroy (b);
}

/* Hostile keys are stored and listed verbatim, byte for byte, and are
 * never read as SQL, LIKE patterns or MongoDB operators. */
typedef struct
{
   char keys[16][LEASELOCK_KEY_MAX + 1];
   size_t lens[16];
   int n;
} verbatim_t;

static bool collect_verbatim (const leaselock_record_t *r, void *ud)
{
   verbatim_t *v = ud;
   if (v->n < 16) {
      memcpy (v->keys[v->n], r->key, r->key_len);
      v->lens[v->n++] = r->key_len;
   }
   return true;
}

static void test_hostile_keys_verbatim (void)
{
   static const char *const tails[] = {
      "q'uote\"d",
      "back\\slash",
      "$where",
      "a.b.$c",
      "x'); DROP TABLE t; --",
      "100%_done",
      "under_score",
      "{\"$gt\": \"\"}",
      "\xf0\x9f\x94\x92 emoji",
      "tab\there\nnewline",
      "semi;colon*star?",
      "\\N NULL \x7f del",
   };
   int n = (int)(sizeof tails / sizeof tails[0]);
   leaselock_client_t *a = client ("hostile");
   CHECK (a);
   leaselock_error_t err;
   char base[64], keys[16][LEASELOCK_KEY_MAX + 1];
   snprintf (base, sizeof base, "%s/", key ("hostile"));
   bool ok = true;
   for (int i = 0; i < n && ok; i++) {
      snprintf (keys[i], sizeof keys[i], "%.63s%.63s", base, tails[i]);
      leaselock_lease_t *l = NULL;
      ok = acq (a, keys[i], opts (60000, false), &l, &err);
      if (ok) {
         leaselock_record_t rec;
         bool found = false;
         ok = leaselock_inspect (a, keys[i], strlen (keys[i]), &rec, &found, &err);
         if (ok &&
             (!found || rec.key_len != strlen (keys[i]) || memcmp (rec.key, keys[i], rec.key_len) ||
              strcmp (rec.owner, leaselock_lease_owner (l))))
            ok = ll_error_set (&err, LEASELOCK_INVALID, "inspect gave back another key for %d", i);
         if (ok)
            ok = leaselock_lease_release (l, &err);
      }
      leaselock_lease_destroy (l);
   }
   /* A 255-byte key of multibyte characters. */
   char longest[LEASELOCK_KEY_MAX + 1];
   size_t ln = (size_t)snprintf (longest, sizeof longest, "%s", base);
   while (ln + 2 <= LEASELOCK_KEY_MAX)
      ln += (size_t)snprintf (longest + ln, sizeof longest - ln, "\xc3\xa9");
   while (ln < LEASELOCK_KEY_MAX)
      longest[ln++] = '%';
   longest[ln] = '\0';
   leaselock_lease_t *l = NULL;
   if (ok)
      ok = acq (a, longest, opts (60000, false), &l, &err);
   leaselock_lease_destroy (l);
   verbatim_t v = { .n = 0 };
   if (ok)
      ok = leaselock_list (a, base, strlen (base), collect_verbatim, &v, &err);
   /* A prefix with LIKE wildcards matches only keys that start with it. */
   verbatim_t w = { .n = 0 };
   char pct[320];
   snprintf (pct, sizeof pct, "%s100%%", base);
   if (ok)
      ok = leaselock_list (a, pct, strlen (pct), collect_verbatim, &w, &err);
   leaselock_client_destroy (a);
   CHECK_OK (ok, err);
   CHECK_EQ (ln, LEASELOCK_KEY_MAX);
   CHECK_EQ (v.n, n + 1);
   for (int i = 0; i < n; i++) {
      bool seen = false;
      for (int j = 0; j < v.n; j++)
         seen = seen || (v.lens[j] == strlen (keys[i]) && !memcmp (v.keys[j], keys[i], v.lens[j]));
      CHECK (seen);
   }
   CHECK_EQ (w.n, 1);
   CHECK (w.lens[0] == strlen (keys[5]) && !memcmp (w.keys[0], keys[5], w.lens[0]));
}

/* Keys are (pointer, length): a message about a key never reads past its
 * length (ASan: heap-buffer-overflow before), and a long key is cut at a
 * character boundary with "...". */
static void test_key_in_messages (void)
{
   leaselock_client_t *a = client ("a"), *b = client ("b");
   CHECK (a && b);
   char name[200];
   /* 3-byte characters, so byte 64 falls inside one. */
   int n = snprintf (name, sizeof name, "%s/", key ("msg")), n0 = n;
   while (n + 3 <= 120)
      n += snprintf (name + n, sizeof name - (size_t)n, "\xe2\x82\xac");
   char *exact = malloc ((size_t)n); /* no NUL after the key */
   CHECK (exact);
   memcpy (exact, name, (size_t)n);
   leaselock_error_t err;
   leaselock_lease_t *la = NULL, *lb = NULL;
   leaselock_acquire_opts_t o = opts (60000, false);
   bool ok = leaselock_acquire (a, exact, (size_t)n, &o, &la, &err);
   if (ok) {
      o.timeout_ms = 20;
      ok = leaselock_acquire (b, exact, (size_t)n, &o, &lb, &err);
   }
   free (exact);
   leaselock_lease_destroy (la);
   leaselock_lease_destroy (lb);
   leaselock_client_destroy (a);
   leaselock_client_destroy (b);
   CHECK_ERR (ok, err, LEASELOCK_TIMEOUT, "...\" (held by ");
   char *q = strchr (err.message, '"');
   CHECK (q);
   CHECK (strncmp (q + 1, name, LL_KEY_SHOWN_BYTES - 3) == 0);
   /* The shown part is whole characters: at most 64 bytes, ending where a
    * 3-byte character ends. */
   size_t shown = (size_t)(strstr (q, "...") - (q + 1));
   CHECK (shown <= LL_KEY_SHOWN_BYTES && shown > LL_KEY_SHOWN_BYTES - 3);
   CHECK (((unsigned char)q[shown] & 0xC0) != 0xC0 && (unsigned char)q[shown] != 0xe2);
   CHECK ((shown - (size_t)n0) % 3 == 0);

   /* A short key in a buffer of exactly its length. */
   const char *k = key ("m");
   size_t kl = strlen (k);
   exact = malloc (kl);
   CHECK (exact);
   memcpy (exact, k, kl);
   a = client ("a");
   b = client ("b");
   la = lb = NULL;
   o = opts (60000, false);
   ok = a && b && leaselock_acquire (a, exact, kl, &o, &la, &err);
   if (ok) {
      o.timeout_ms = 20;
      ok = leaselock_acquire (b, exact, kl, &o, &lb, &err);
   }
   free (exact);
   leaselock_lease_destroy (la);
   leaselock_lease_destroy (lb);
   leaselock_client_destroy (a);
   leaselock_client_destroy (b);
   char want[300];
   snprintf (want, sizeof want, "\"%s\" (held", k);
   CHECK_ERR (ok, err, LEASELOCK_TIMEOUT, want);
}

/* Capped exponential backoff with full jitter: never a fixed sleep, never
 * a busy loop. */
static void test_backoff_jitter (void)
{
   for (int attempt = 0; attempt < 12; attempt++) {
      int64_t cap = 5LL << attempt;
      if (cap > 1000)
         cap = 1000;
      int64_t lo = INT64_MAX, hi = 0, sum = 0;
      for (int i = 0; i < 2000; i++) {
         int64_t b = ll_backoff_ms (attempt);
         lo = b < lo ? b : lo;
         hi = b > hi ? b : hi;
         sum += b;
      }
      CHECK (lo >= 1);
      CHECK (hi <= cap);
      CHECK (hi > lo); /* jitter */
      /* uniform in [1, cap]: the mean is near cap / 2 */
      double mean = (double)sum / 2000;
      CHECK (mean > cap * 0.35 && mean < cap * 0.65 + 1);
   }
}

/* A waiter that is not next polls within max(50 ms, waited / 8) (never
 * more than the backoff's 1 s), so the oldest claims the reservation soon
 * after it frees; the next owner polls every quarter of the time it has
 * been next, within [1, 50] ms. */
static void test_wait_sleep_policy (void)
{
   for (int i = 0; i < 2000; i++) {
      int64_t t = ll_wait_sleep_ms (20, 100, false, 0);
      CHECK (t >= 1 && t <= 50);
      t = ll_wait_sleep_ms (20, 4000, false, 0);
      CHECK (t >= 1 && t <= 500);
      t = ll_wait_sleep_ms (20, 100000, false, 0);
      CHECK (t >= 1 && t <= 1000);
      t = ll_wait_sleep_ms (1, 100000, false, 0);
      CHECK (t >= 1 && t <= 10); /* the backoff still starts small */
   }
   CHECK_EQ (ll_wait_sleep_ms (0, 0, true, 0), 1);
   CHECK_EQ (ll_wait_sleep_ms (0, 0, true, 40), 10);
   CHECK_EQ (ll_wait_sleep_ms (0, 0, true, 100000), 50);
   /* Behind another waiter: no quick polls (it cannot take the key before
    * that one has), yet bounded, growing with the wait. */
   int64_t lo = INT64_MAX, hi = 0;
   for (int i = 0; i < 2000; i++) {
      int64_t t = ll_behind_sleep_ms (0);
      lo = t < lo ? t : lo;
      hi = t > hi ? t : hi;
      t = ll_behind_sleep_ms (4000);
      CHECK (t >= 250 && t <= 500);
      t = ll_behind_sleep_ms (100000);
      CHECK (t >= 500 && t <= 1000);
   }
   CHECK (lo >= 75 && hi <= 150 && hi > lo);
}

typedef struct
{
   leaselock_client_t *c;
   const char *key;
   int64_t timeout;
   bool fair;
   bool ok;
   leaselock_error_t err;
   leaselock_lease_t *lease;
   atomic_bool done;
   int64_t done_at;
} waiter_t;

static void *waiter_main (void *arg)
{
   waiter_t *w = arg;
   leaselock_acquire_opts_t o = opts (5000, false);
   o.timeout_ms = w->timeout;
   o.fair = w->fair;
   w->ok = leaselock_acquire (w->c, w->key, strlen (w->key), &o, &w->lease, &w->err);
   w->done_at = ll_now_ms ();
   atomic_store (&w->done, true);
   return NULL;
}

/* A waiter in the same process is woken at once by a local release. */
static void test_local_handoff (void)
{
   leaselock_client_t *a = client ("a"), *b = client ("b");
   CHECK (a && b);
   leaselock_error_t err;
   leaselock_lease_t *la;
   bool ok = acq (a, key ("handoff"), opts (60000, false), &la, &err);
   CHECK_OK (ok, err);
   waiter_t w = { .c = b, .key = key ("handoff"), .timeout = 30000 };
   pthread_t th;
   pthread_create (&th, NULL, waiter_main, &w);
   t_sleep (3000); /* long enough for the backoff to reach its cap */
   CHECK (!atomic_load (&w.done));
   if (FAKE)
      atomic_store (&ticking, false); /* time stands still: only a wakeup helps */
   int64_t released_at = ll_now_ms ();
   ok = leaselock_lease_release (la, &err);
   for (int i = 0; i < 2000 && !atomic_load (&w.done); i++)
      sleep_ms (1);
   atomic_store (&ticking, true);
   pthread_join (th, NULL);
   CHECK_OK (w.ok, w.err);
   if (FAKE)
      CHECK_EQ (w.done_at, released_at);
   else
      CHECK (w.done_at - released_at < 900); /* well below the 1 s backoff cap */
   leaselock_lease_destroy (w.lease);
   leaselock_lease_destroy (la);
   leaselock_client_destroy (a);
   leaselock_client_destroy (b);
}

static uint64_t requests_of (leaselock_client_t *c)
{
   leaselock_stats_t st;
   return leaselock_client_stats (c, &st, NULL) ? st.requests : 0;
}

static int count_done (waiter_t *w, int n)
{
   int k = 0;
   for (int i = 0; i < n; i++)
      k += atomic_load (&w[i].done);
   return k;
}

/* c's request count once it has stood still for 50 ms (2.5 s at most). */
static uint64_t requests_still (leaselock_client_t *c)
{
   uint64_t before = requests_of (c);
   for (int t = 0; t < 50; t++) {
      sleep_ms (50);
      uint64_t now = requests_of (c);
      if (now == before)
         break;
      before = now;
   }
   return before;
}

/* The same, after c's watcher's listener opened: an open wakes the
 * waiter that believes it is next, for a try of its own (watch.c,
 * open_listener). */
static uint64_t requests_settled (leaselock_client_t *c)
{
   ll_watch_t *cw = ll_client_watch (c);
   for (int t = 0; t < 10000 && cw->backend->watch_open && ll_watch_opens (cw) < 1; t++)
      sleep_ms (1);
   return requests_still (c);
}

/* A local release wakes one waiter of the key, not all: with their polls
 * put off (ll_test_wait_poll_ms), each release costs the waiters one
 * request, the take of the one woken, and hands the key on in turn. */
static void test_local_wake_one (void)
{
   enum
   {
      N = 4
   };
   leaselock_client_t *a = client ("a"), *b = client ("b");
   CHECK (a && b);
   leaselock_error_t err;
   leaselock_lease_t *la;
   const char *k = key ("wake-one");
   CHECK_OK (acq (a, k, opts (60000, false), &la, &err), err);
   atomic_store (&ll_test_wait_poll_ms, 20000);
   waiter_t w[N];
   pthread_t th[N];
   leaselock_stats_t st = { 0 };
   /* The waiters start one at a time, each once the one before is past
    * its first try and asleep (b's requests stand still): started
    * together, two first tries can claim the reservation in the
    * database's order and not their own, and two waiters then each
    * believe they are next, which is not what this test is about. */
   for (int i = 0; i < N; i++) {
      w[i] = (waiter_t){ .c = b, .key = k, .timeout = 30000 };
      pthread_create (&th[i], NULL, waiter_main, &w[i]);
      for (int t = 0; t < 5000 && st.waits < (uint64_t)i + 1; t++) {
         sleep_ms (1);
         leaselock_client_stats (b, &st, NULL);
      }
      requests_still (b);
   }
   uint64_t before = requests_settled (b);
   bool all_waiting = st.waits == N && count_done (w, N) == 0;
   bool ok = leaselock_lease_release (la, &err);
   bool one_each = all_waiting && ok;
   leaselock_lease_t *holder = NULL;
   for (int round = 0; round < N && one_each; round++) {
      for (int i = 0; i < 5000 && count_done (w, N) <= round; i++)
         sleep_ms (1);
      sleep_ms (100); /* time for any other waiter woken to try */
      one_each = count_done (w, N) == round + 1;
      /* round 0: the take alone; later: the holder's release and the take */
      one_each = one_each && requests_of (b) - before == (round ? 2u : 1u);
      if (!one_each)
         fprintf (stderr, "    round %d: %d done, %llu requests\n", round, count_done (w, N),
                  (unsigned long long)(requests_of (b) - before));
      for (int i = 0; i < N && one_each; i++)
         if (atomic_load (&w[i].done) && w[i].lease && w[i].lease != holder &&
             leaselock_lease_state (w[i].lease) == LEASELOCK_STATE_HELD)
            holder = w[i].lease;
      before = requests_of (b);
      if (one_each && round < N - 1)
         one_each = holder && leaselock_lease_release (holder, &err);
   }
   atomic_store (&ll_test_wait_poll_ms, 0);
   /* Whatever happened, every waiter ends: each holder releases in turn
    * (their timeouts bound this too). */
   for (int t = 0; t < 40000 && count_done (w, N) < N; t++) {
      for (int i = 0; i < N; i++)
         if (atomic_load (&w[i].done) && w[i].lease &&
             leaselock_lease_state (w[i].lease) == LEASELOCK_STATE_HELD)
            leaselock_lease_release (w[i].lease, NULL);
      sleep_ms (1);
   }
   for (int i = 0; i < N; i++)
      pthread_join (th[i], NULL);
   CHECK (all_waiting);
   CHECK (one_each);
   for (int i = 0; i < N; i++) {
      CHECK_OK (w[i].ok, w[i].err);
      leaselock_lease_destroy (w[i].lease);
   }
   leaselock_lease_destroy (la);
   leaselock_client_destroy (a);
   leaselock_client_destroy (b);
}

/* The next owner never sleeps past the record's known end (invariant 9):
 * with its polls put off, a waiter takes a key when the lease a holder
 * stopped renewing runs out, and when a released lease's min_hold ends,
 * long before its own timeout (which its sleeps would otherwise reach). */
static void test_wait_until_known_end (void)
{
   leaselock_client_t *a = client ("a"), *b = client ("b");
   CHECK (a && b);
   const char *k = key ("known-end");
   leaselock_error_t err;
   leaselock_lease_t *la = NULL, *lb = NULL, *la2 = NULL, *lb2 = NULL;
   CHECK_OK (acq (a, k, opts (1000, false), &la, &err), err); /* left to run out */
   atomic_store (&ll_test_wait_poll_ms, 60000);
   leaselock_acquire_opts_t o = opts (60000, false);
   o.timeout_ms = 30000;
   int64_t t0 = ll_now_ms ();
   bool ok = acq (b, k, o, &lb, &err);
   int64_t first = ll_now_ms () - t0;
   leaselock_error_t first_err = err;
   leaselock_acquire_opts_t held = opts (60000, false);
   held.min_hold_ms = 1000;
   bool ok2 = ok && leaselock_lease_release (lb, &err) && acq (a, k, held, &la2, &err) &&
              leaselock_lease_release (la2, &err);
   t_sleep (30); /* past REJOIN_MS since this process's release: b claims at once */
   t0 = ll_now_ms ();
   ok2 = ok2 && acq (b, k, o, &lb2, &err);
   int64_t second = ll_now_ms () - t0;
   atomic_store (&ll_test_wait_poll_ms, 0);
   CHECK_OK (ok, first_err);
   CHECK_OK (ok2, err);
   if (first >= 15000 || second >= 15000)
      fprintf (stderr, "    waited %lld and %lld ms\n", (long long)first, (long long)second);
   CHECK (first < 15000);
   CHECK (second < 15000);
   leaselock_lease_destroy (lb2);
   leaselock_lease_destroy (la2);
   leaselock_lease_destroy (lb);
   leaselock_lease_destroy (la);
   leaselock_client_destroy (a);
   leaselock_client_destroy (b);
}

/* A waiter in another process goes first (invariant 9): a holder that
 * releases and asks again at once finds the key reserved for the waiter
 * (before, its own next try always won, and waiters starved). Real
 * backends: the fake one lives in one process. */
static void test_waiter_goes_first (void)
{
   leaselock_client_t *a = client ("a");
   CHECK (a);
   leaselock_error_t err;
   leaselock_lease_t *la, *again = NULL;
   const char *k = key ("first");
   CHECK_OK (acq (a, k, opts (60000, false), &la, &err), err);
   fflush (NULL);
   pid_t kid = fork ();
   if (kid == 0) {
      leaselock_client_t *c = leaselock_client_new (URI, "waiter", &err);
      leaselock_acquire_opts_t o = opts (60000, false);
      o.timeout_ms = 30000;
      leaselock_lease_t *l = NULL;
      bool ok = c && leaselock_acquire (c, k, strlen (k), &o, &l, &err);
      if (!ok)
         fprintf (stderr, "waiter: %s\n", err.message);
      /* Held a while: a release's notification may hand it the key
       * before the holder's next acquire, which must then find it held. */
      sleep_ms (500);
      leaselock_lease_destroy (l);
      leaselock_client_destroy (c);
      _exit (ok ? 0 : 1);
   }
   sleep_ms (500); /* the waiter has tried, found it busy, and is next */
   CHECK_OK (leaselock_lease_release (la, &err), err);
   bool ok = acq (a, k, opts (60000, false), &again, &err);
   CHECK_ERR (ok, err, LEASELOCK_BUSY, "");
   int status = 0;
   waitpid (kid, &status, 0);
   CHECK (WIFEXITED (status) && WEXITSTATUS (status) == 0);
   leaselock_lease_destroy (again);
   leaselock_lease_destroy (la);
   leaselock_client_destroy (a);
}

static bool stop_now (void *ud)
{
   return atomic_load ((atomic_bool *)ud);
}

typedef struct
{
   leaselock_client_t *c;
   const char *key;
   atomic_bool stop;
   bool ok;
   leaselock_error_t err;
} stopper_t;

static void *stopper_main (void *arg)
{
   stopper_t *s = arg;
   leaselock_acquire_opts_t o = opts (5000, false);
   o.timeout_ms = -1; /* forever */
   o.should_stop = stop_now;
   o.should_stop_data = &s->stop;
   leaselock_lease_t *l;
   s->ok = leaselock_acquire (s->c, s->key, strlen (s->key), &o, &l, &s->err);
   if (s->ok)
      leaselock_lease_destroy (l);
   return NULL;
}

static void test_wait_interrupted (void)
{
   leaselock_client_t *a = client ("a");
   CHECK (a);
   leaselock_error_t err;
   leaselock_lease_t *la;
   bool ok = acq (a, key ("interrupt"), opts (60000, false), &la, &err);
   CHECK_OK (ok, err);
   stopper_t s = { .c = a, .key = key ("interrupt") };
   pthread_t th;
   pthread_create (&th, NULL, stopper_main, &s);
   t_sleep (500);
   atomic_store (&s.stop, true);
   pthread_join (th, NULL);
   CHECK_ERR (s.ok, s.err, LEASELOCK_INTERRUPTED, "interrupted");
   leaselock_lease_destroy (la);
   leaselock_client_destroy (a);
}

/* ---- renewal and loss -------------------------------------------------- */

typedef struct
{
   atomic_int calls;
   leaselock_lease_t *lease;
} lost_t;

static void on_lost (leaselock_lease_t *lease, void *ud)
{
   lost_t *L = ud;
   L->lease = lease;
   atomic_fetch_add (&L->calls, 1);
}

/* Acquires NAME on a (1 s TTL, auto-renewed, on_lost counting into L)
 * and stops the fake clock at *t0. On failure the clock runs again. */
static bool acquire_frozen (leaselock_client_t *a, const char *name, leaselock_lease_t **la,
                            lost_t *L, int64_t *t0, leaselock_error_t *err)
{
   leaselock_acquire_opts_t o = opts (1000, true);
   o.on_lost = on_lost;
   o.on_lost_data = L;
   atomic_store (&ticking, false);
   *t0 = ll_now_ms ();
   bool ok = acq (a, key (name), o, la, err);
   if (!ok)
      atomic_store (&ticking, true);
   return ok;
}

static void test_auto_renew (void)
{
   leaselock_client_t *a = client ("a"), *b = client ("b");
   CHECK (a && b);
   leaselock_error_t err;
   leaselock_lease_t *la, *lb;
   lost_t L = { 0 };
   leaselock_acquire_opts_t o = opts (1000, true);
   o.on_lost = on_lost;
   o.on_lost_data = &L;
   long renews = FAKE ? fake_backend_calls (FAKE_RENEW) : 0;
   bool ok = acq (a, key ("autorenew"), o, &la, &err);
   CHECK_OK (ok, err);
   t_sleep (3000);
   ok = acq (b, key ("autorenew"), opts (5000, false), &lb, &err);
   CHECK (!ok && err.code == LEASELOCK_BUSY);
   CHECK_EQ (leaselock_lease_state (la), LEASELOCK_STATE_HELD);
   CHECK_EQ (atomic_load (&L.calls), 0);
   if (FAKE) /* about every TTL/3 */
      CHECK (fake_backend_calls (FAKE_RENEW) - renews >= 6);
   ok = leaselock_lease_release (la, &err);
   CHECK_OK (ok, err);
   leaselock_lease_destroy (la);
   CHECK_EQ (atomic_load (&L.calls), 0);
   leaselock_client_destroy (a);
   leaselock_client_destroy (b);
}

/* Real clock only (on the fake one the renewal thread polls): a lease due
 * for renewal before the renewal thread's planned wake-up (the first
 * renewal of a long lease) wakes it earlier: the short lease is renewed
 * on time, never lost. */
static void test_renewal_rearms_earlier (void)
{
   leaselock_client_t *a = client ("a");
   CHECK (a);
   leaselock_error_t err;
   leaselock_lease_t *long_l, *short_l;
   CHECK_OK (acq (a, key ("rearm-long"), opts (60000, true), &long_l, &err), err);
   sleep_ms (100); /* the thread now sleeps until the long lease's first renewal */
   lost_t L = { 0 };
   leaselock_acquire_opts_t o = opts (900, true);
   o.on_lost = on_lost;
   o.on_lost_data = &L;
   leaselock_stats_t before, after;
   CHECK_OK (leaselock_client_stats (a, &before, &err), err);
   CHECK_OK (acq (a, key ("rearm-short"), o, &short_l, &err), err);
   sleep_ms (2000); /* two TTLs: renewed about every 300 ms */
   CHECK_EQ (leaselock_lease_state (short_l), LEASELOCK_STATE_HELD);
   CHECK_EQ (atomic_load (&L.calls), 0);
   CHECK_OK (leaselock_client_stats (a, &after, &err), err);
   CHECK (after.renewals - before.renewals >= 3);
   CHECK_OK (leaselock_lease_release (short_l, &err), err);
   CHECK_OK (leaselock_lease_release (long_l, &err), err);
   leaselock_lease_destroy (short_l);
   leaselock_lease_destroy (long_l);
   leaselock_client_destroy (a);
}

/* Real clock only: auto-renewed leases taken and let go one after another
 * leave the renewal thread asleep (each one's first renewal comes after
 * the thread's planned wake-up, and a release does not wake it): the
 * default path pays no thread wake-up per pair. */
static void test_pairs_leave_renewal_asleep (void)
{
   leaselock_client_t *a = client ("a");
   CHECK (a);
   leaselock_error_t err;
   leaselock_lease_t *l;
   const char *k = key ("renewal-asleep");
   for (int i = 0; i < 201; i++) {
      if (i == 1) {
         sleep_ms (100); /* the thread, started by the first, sleeps */
         atomic_store (&ll_test_renewal_wakes, 0);
      }
      CHECK_OK (acq (a, k, opts (30000, true), &l, &err), err);
      CHECK_OK (leaselock_lease_release (l, &err), err);
      leaselock_lease_destroy (l);
   }
   uint64_t wakes = atomic_load (&ll_test_renewal_wakes);
   if (wakes > 2) /* a spurious wake-up or two is not one per pair */
      fprintf (stderr, "    renewal thread woke %llu times in 200 pairs\n",
               (unsigned long long)wakes);
   CHECK (wakes <= 2);
   leaselock_client_destroy (a);
}

/* The threads of this process. */
static int count_threads (void)
{
   DIR *d = opendir ("/proc/self/task");
   int n = 0;
   for (struct dirent *e; d && (e = readdir (d));)
      n += e->d_name[0] != '.';
   if (d)
      closedir (d);
   return n;
}

/* A lease in renewal starts the renewal thread alone; an I/O thread
 * starts when a renewal first falls due (a run shorter than a third of
 * its TTL never starts one). */
static void test_io_thread_when_due (void)
{
   leaselock_client_t *a = client ("a");
   CHECK (a);
   leaselock_error_t err;
   leaselock_lease_t *l = NULL, *s = NULL;
   const char *k = key ("io-long"), *ks = key ("io-short");
   /* A first pair without renewal: whatever the driver starts with its
    * first connection (MongoDB's monitor) runs before the count. */
   CHECK_OK (acq (a, k, opts (60000, false), &l, &err), err);
   CHECK_OK (leaselock_lease_release (l, &err), err);
   leaselock_lease_destroy (l);
   sleep_ms (50);
   int before = count_threads ();
   atomic_store (&ll_test_io_starts, 0);
   CHECK_OK (acq (a, k, opts (60000, true), &l, &err), err);
   sleep_ms (50);
   int started = count_threads () - before;
   uint64_t long_only = atomic_load (&ll_test_io_starts);
   CHECK_OK (acq (a, ks, opts (600, true), &s, &err), err);
   leaselock_stats_t st = { 0 };
   for (int i = 0; i < 3000 && st.renewals < 1; i++) {
      sleep_ms (1);
      leaselock_client_stats (a, &st, NULL);
   }
   uint64_t after_due = atomic_load (&ll_test_io_starts);
   CHECK_OK (leaselock_lease_release (s, &err), err);
   CHECK_OK (leaselock_lease_release (l, &err), err);
   leaselock_lease_destroy (s);
   leaselock_lease_destroy (l);
   leaselock_client_destroy (a);
   CHECK_EQ (started, 1); /* the renewal thread */
   CHECK_EQ (long_only, 0);
   CHECK (st.renewals >= 1);
   CHECK (after_due >= 1);
}

static void test_loss_on_takeover (void)
{
   leaselock_client_t *a = client ("a"), *b = client ("b");
   CHECK (a && b);
   leaselock_error_t err;
   leaselock_lease_t *la;
   lost_t L = { 0 };
   leaselock_acquire_opts_t o = opts (900, true);
   o.on_lost = on_lost;
   o.on_lost_data = &L;
   bool ok = acq (a, key ("loss"), o, &la, &err);
   CHECK_OK (ok, err);
   ok = leaselock_force_release (b, key ("loss"), strlen (key ("loss")), NULL, &err);
   CHECK_OK (ok, err);
   for (int i = 0; i < 100 && !atomic_load (&L.calls); i++)
      t_sleep (50);
   CHECK_EQ (atomic_load (&L.calls), 1);
   CHECK (L.lease == la);
   CHECK_EQ (leaselock_lease_state (la), LEASELOCK_STATE_LOST);
   ok = leaselock_lease_release (la, &err);
   CHECK (!ok && err.code == LEASELOCK_NOT_HELD);
   t_sleep (500);
   CHECK_EQ (atomic_load (&L.calls), 1); /* once */
   leaselock_lease_destroy (la);
   leaselock_client_destroy (a);
   leaselock_client_destroy (b);
}

/* Fake only: the database is down; renewal keeps retrying until the local
 * deadline, not a moment longer, then the lease is LOST and on_lost runs. */
static void test_loss_when_database_down (void)
{
   leaselock_client_t *a = client ("a");
   CHECK (a);
   leaselock_error_t err;
   leaselock_lease_t *la;
   lost_t L = { 0 };
   int64_t t0;
   bool ok = acquire_frozen (a, "down", &la, &L, &t0, &err);
   CHECK_OK (ok, err);
   fake_backend_fail (true);
   long renews = fake_backend_calls (FAKE_RENEW);
   while (ll_now_ms () < t0 + 990) {
      ll_clock_advance (10);
      sleep_ms (2);
   }
   sleep_ms (20);
   bool held = leaselock_lease_state (la) == LEASELOCK_STATE_HELD;
   int calls_before = atomic_load (&L.calls);
   long retries = fake_backend_calls (FAKE_RENEW) - renews;
   ll_clock_advance (t0 + 1000 - ll_now_ms ());
   for (int i = 0; i < 1000 && !atomic_load (&L.calls); i++)
      sleep_ms (1);
   int calls_after = atomic_load (&L.calls);
   fake_backend_fail (false);
   /* Still frozen: the database still has it until its own expiry, the
    * holder stopped first (with the clock ticking again a slow run would
    * see the record expire before the inspect reaches it). */
   leaselock_record_t rec;
   bool found = false;
   ok = leaselock_inspect (a, key ("down"), strlen (key ("down")), &rec, &found, &err);
   atomic_store (&ticking, true);
   CHECK (held);
   CHECK_EQ (calls_before, 0);
   CHECK (retries >= 3); /* kept retrying */
   CHECK_EQ (calls_after, 1);
   CHECK_EQ (leaselock_lease_state (la), LEASELOCK_STATE_LOST);
   CHECK_OK (ok, err);
   CHECK (found && rec.expires_in_ms >= 0);
   leaselock_lease_destroy (la);
   leaselock_client_destroy (a);
}

/* Fake only: the local deadline is the send time + TTL - the margin for
 * rounding and clock rate (ll_deadline_margin_ms: 2 ms + TTL / 1000),
 * exactly. */
static void test_local_deadline_exact (void)
{
   leaselock_client_t *a = client ("a");
   CHECK (a);
   leaselock_error_t err;
   leaselock_lease_t *la;
   atomic_store (&ticking, false);
   bool ok = acq (a, key ("deadline"), opts (1000, false), &la, &err);
   if (!ok)
      atomic_store (&ticking, true);
   CHECK_OK (ok, err);
   int64_t margin = ll_deadline_margin_ms (1000);
   ll_clock_advance (999 - margin);
   bool held = leaselock_lease_state (la) == LEASELOCK_STATE_HELD;
   int64_t left = leaselock_lease_remaining_ms (la);
   ll_clock_advance (1);
   bool lost = leaselock_lease_state (la) == LEASELOCK_STATE_LOST;
   atomic_store (&ticking, true);
   CHECK_EQ (margin, 3);
   CHECK (held);
   CHECK_EQ (left, 1);
   CHECK (lost);
   leaselock_lease_destroy (la);
   leaselock_client_destroy (a);
}

/* Backend level: a retried acquire by the same owner (first reply lost)
 * succeeds with a larger fence. */
static void test_reacquire_same_owner (void)
{
   leaselock_error_t err;
   const ll_backend_t *b;
   void *conn = backend_open (URI, &b);
   CHECK (conn);
   const char *k = key ("retry");
   ll_holder_t h = { "host", 1, "retry" };
   int64_t f1 = 0, f2 = 0;
   bool ok = ll_backend_acquire (
     b, conn,
     &(ll_take_t){
       { k, strlen (k), "0123456789abcdef0123456789abcdef" }, 5000, &h, 0, 0, false, false },
     &f1, &err);
   if (ok)
      ok = ll_backend_acquire (
        b, conn,
        &(ll_take_t){
          { k, strlen (k), "0123456789abcdef0123456789abcdef" }, 5000, &h, 0, 0, false, false },
        &f2, &err);
   bool busy = false;
   if (ok) {
      int64_t f3;
      busy =
        !ll_backend_acquire (
          b, conn,
          &(ll_take_t){
            { k, strlen (k), "fedcba9876543210fedcba9876543210" }, 5000, &h, 0, 0, false, false },
          &f3, &err) &&
        err.code == LEASELOCK_BUSY;
      ok =
        b->release (conn, &(ll_op_t){ k, strlen (k), "0123456789abcdef0123456789abcdef" }, 0, &err);
   }
   b->close (conn);
   CHECK_OK (ok, err);
   CHECK (f2 > f1);
   CHECK (busy);
}

/* ---- fork safety ------------------------------------------------------- */

/* In a forked child: the parent's lease l answers NOT_HELD to release
 * (saying why) and renew, its destroy releases nothing, and the client
 * takes and releases a lease of its own on key k. 0, or the bits of what
 * failed (1 release, 2 renew, 4 acquire, 8 own release). */
static int fork_child_uses (leaselock_client_t *c, leaselock_lease_t *l, const char *k,
                            bool auto_renew)
{
   int code = 0;
   leaselock_error_t e;
   if (leaselock_lease_release (l, &e) || e.code != LEASELOCK_NOT_HELD ||
       !strstr (e.message, "fork"))
      code |= 1;
   if (leaselock_lease_renew (l, 0, &e) || e.code != LEASELOCK_NOT_HELD)
      code |= 2;
   leaselock_lease_destroy (l); /* must not release the parent's lease */
   leaselock_lease_t *mine = NULL;
   leaselock_acquire_opts_t o = opts (5000, auto_renew);
   if (!leaselock_acquire (c, k, strlen (k), &o, &mine, &e))
      code |= 4;
   else if (!leaselock_lease_release (mine, &e))
      code |= 8;
   leaselock_lease_destroy (mine);
   return code;
}

static void test_fork_child_cannot_release (void)
{
   leaselock_client_t *c = client ("parent");
   CHECK (c);
   leaselock_error_t err;
   leaselock_lease_t *l;
   /* On the fake clock a short TTL makes the parent renew often, so a
    * renewal from the child would show within a few milliseconds. */
   bool ok = acq (c, key ("fork"), opts (FAKE ? 3000 : 60000, true), &l, &err);
   CHECK_OK (ok, err);
   /* Let the new renewal thread settle into its wait: a thread caught in
    * the middle of its start-up (allocating) at fork() can leave an
    * allocator lock held in the child under sanitizers. */
   sleep_ms (100);
   fflush (NULL);
   pid_t pid = fork ();
   if (pid == 0) {
      int code = 0;
      leaselock_error_t e;
      if (FAKE) {
         /* The child's own renewal thread renews the child's lease only,
          * never the parent's (the fake database is the child's copy, so
          * the parent's own renewals do not show here). */
         leaselock_lease_t *own = NULL;
         leaselock_acquire_opts_t oo = opts (3000, true);
         long renews = fake_backend_calls (FAKE_RENEW);
         if (!leaselock_acquire (c, key ("fork-own"), strlen (key ("fork-own")), &oo, &own, &e))
            code |= 32;
         for (int i = 0; i < 200; i++) { /* the ticker thread stayed in the parent */
            ll_clock_advance (20);
            sleep_ms (1);
         }
         leaselock_record_t rec;
         bool found = false;
         leaselock_inspect (c, key ("fork"), strlen (key ("fork")), &rec, &found, &e);
         if (!found || rec.expires_in_ms > 0)
            code |= 16;
         if (fake_backend_calls (FAKE_RENEW) == renews ||
             leaselock_lease_state (own) != LEASELOCK_STATE_HELD)
            code |= 32;
         leaselock_lease_destroy (own);
      }
      /* the child can use the client: new connection, own renewal thread */
      code |= fork_child_uses (c, l, key ("fork-child"), true);
      leaselock_client_destroy (c);
      _exit (code);
   }
   int status;
   waitpid (pid, &status, 0);
   CHECK (WIFEXITED (status));
   CHECK_EQ (WEXITSTATUS (status), 0);
   CHECK_EQ (leaselock_lease_state (l), LEASELOCK_STATE_HELD);
   leaselock_record_t rec;
   bool found;
   ok = leaselock_inspect (c, key ("fork"), strlen (key ("fork")), &rec, &found, &err);
   CHECK_OK (ok, err);
   CHECK (found && !strcmp (rec.owner, leaselock_lease_owner (l)));
   ok = leaselock_lease_renew (l, 0, &err);
   CHECK_OK (ok, err);
   ok = leaselock_lease_release (l, &err);
   CHECK_OK (ok, err);
   leaselock_lease_destroy (l);
   leaselock_client_destroy (c);
}

/* A child made by _Fork(), which runs no atfork handler (nor does a raw
 * clone()), is a new process to the engine all the same: it neither
 * releases nor renews the parent's lease, and its own acquire works. The
 * engine's process id is cached without a system call (fork.c,
 * ll_getpid); a cache that only the atfork handlers reset would make
 * this child release the parent's lease. */
static void test_fork_without_atfork_handlers (void)
{
   leaselock_client_t *c = client ("rawfork");
   CHECK (c);
   leaselock_error_t err;
   leaselock_lease_t *l;
   bool ok = acq (c, key ("rawfork"), opts (60000, false), &l, &err);
   CHECK_OK (ok, err);
   fflush (NULL);
   pid_t pid = _Fork ();
   if (pid == 0)
      _exit (fork_child_uses (c, l, key ("rawfork-child"), false));
   CHECK (pid > 0);
   int status;
   waitpid (pid, &status, 0);
   CHECK (WIFEXITED (status));
   CHECK_EQ (WEXITSTATUS (status), 0);
   leaselock_record_t rec;
   bool found;
   ok = leaselock_inspect (c, key ("rawfork"), strlen (key ("rawfork")), &rec, &found, &err);
   CHECK_OK (ok, err);
   CHECK (found && !strcmp (rec.owner, leaselock_lease_owner (l)) && rec.expires_in_ms > 0);
   ok = leaselock_lease_release (l, &err);
   CHECK_OK (ok, err);
   leaselock_lease_destroy (l);
   leaselock_client_destroy (c);
}

/* ---- bad input --------------------------------------------------------- */

/* ---- closing a client ------------------------------------------------- */

static bool record_owner (leaselock_client_t *c, const char *k, char owner[LEASELOCK_OWNER_LEN + 1])
{
   leaselock_record_t rec;
   bool found = false;
   leaselock_error_t err;
   if (!leaselock_inspect (c, k, strlen (k), &rec, &found, &err) || !found)
      return false;
   memcpy (owner, rec.owner, LEASELOCK_OWNER_LEN + 1);
   return true;
}

/* Close without release: held leases become CLOSED, keep their records,
 * are renewed no more and refuse every call; on_lost is not called. */
static void test_close_keeps_leases_closed (void)
{
   leaselock_client_t *a = client ("a"), *b = client ("b");
   CHECK (a && b);
   leaselock_error_t err;
   leaselock_lease_t *renewed, *plain, *released;
   lost_t L = { 0 };
   leaselock_acquire_opts_t o = opts (1000, true);
   o.on_lost = on_lost;
   o.on_lost_data = &L;
   CHECK_OK (acq (a, key ("close-renewed"), o, &renewed, &err), err);
   CHECK_OK (acq (a, key ("close-plain"), opts (60000, false), &plain, &err), err);
   CHECK_OK (acq (a, key ("close-released"), opts (60000, false), &released, &err), err);
   CHECK_OK (leaselock_lease_release (released, &err), err);
   CHECK (!leaselock_client_closed (a));
   CHECK_OK (leaselock_client_close (a, false, &err), err);
   CHECK (leaselock_client_closed (a));
   CHECK_OK (leaselock_client_close (a, false, &err), err); /* idempotent */
   CHECK_EQ (leaselock_lease_state (renewed), LEASELOCK_STATE_CLOSED);
   CHECK_EQ (leaselock_lease_state (plain), LEASELOCK_STATE_CLOSED);
   CHECK_EQ (leaselock_lease_state (released), LEASELOCK_STATE_RELEASED);
   CHECK_EQ (leaselock_lease_remaining_ms (plain), 0);
   char owner[LEASELOCK_OWNER_LEN + 1];
   CHECK (record_owner (b, key ("close-plain"), owner));
   CHECK (!strcmp (owner, leaselock_lease_owner (plain))); /* not released */
   long renews = FAKE ? fake_backend_calls (FAKE_RENEW) : 0;
   t_sleep (1500); /* past the TTL: no renewal, no loss, no callback */
   if (FAKE)
      CHECK_EQ (fake_backend_calls (FAKE_RENEW), renews);
   CHECK_EQ (atomic_load (&L.calls), 0);
   CHECK_EQ (leaselock_lease_state (renewed), LEASELOCK_STATE_CLOSED);
   bool ok = leaselock_lease_renew (plain, 0, &err);
   CHECK_ERR (ok, err, LEASELOCK_NOT_HELD, "client of this lease is closed");
   ok = leaselock_lease_release (plain, &err);
   CHECK_ERR (ok, err, LEASELOCK_NOT_HELD, "client of this lease is closed");
   CHECK_EQ (leaselock_lease_state (plain), LEASELOCK_STATE_CLOSED);
   leaselock_lease_t *again;
   ok = acq (a, key ("close-other"), opts (5000, false), &again, &err);
   CHECK_ERR (ok, err, LEASELOCK_INVALID, "client is closed");
   bool found;
   leaselock_record_t rec;
   ok =
     leaselock_inspect (a, key ("close-plain"), strlen (key ("close-plain")), &rec, &found, &err);
   CHECK_ERR (ok, err, LEASELOCK_INVALID, "client is closed");
   CHECK (!strcmp (leaselock_client_backend (a), leaselock_client_backend (b)));
   leaselock_lease_destroy (plain); /* a closed lease is not released */
   CHECK (record_owner (b, key ("close-plain"), owner) && owner[0]);
   leaselock_client_destroy (a);
   leaselock_lease_destroy (renewed);
   leaselock_lease_destroy (released);
   CHECK_OK (
     leaselock_force_release (b, key ("close-plain"), strlen (key ("close-plain")), NULL, &err),
     err);
   leaselock_client_destroy (b);
}

/* Close with release: every held lease released (RELEASED, record free),
 * another client's lease untouched. */
static void test_close_releases_held (void)
{
   leaselock_client_t *a = client ("a"), *b = client ("b");
   CHECK (a && b);
   leaselock_error_t err;
   leaselock_lease_t *l1, *l2, *lb;
   CHECK_OK (acq (a, key ("close-rel-1"), opts (60000, true), &l1, &err), err);
   CHECK_OK (acq (a, key ("close-rel-2"), opts (60000, false), &l2, &err), err);
   CHECK_OK (acq (b, key ("close-rel-b"), opts (60000, true), &lb, &err), err);
   CHECK_OK (leaselock_client_close (a, true, &err), err);
   CHECK_EQ (leaselock_lease_state (l1), LEASELOCK_STATE_RELEASED);
   CHECK_EQ (leaselock_lease_state (l2), LEASELOCK_STATE_RELEASED);
   CHECK_EQ (leaselock_lease_state (lb), LEASELOCK_STATE_HELD);
   char owner[LEASELOCK_OWNER_LEN + 1];
   CHECK (record_owner (b, key ("close-rel-1"), owner) && !owner[0]);
   CHECK (record_owner (b, key ("close-rel-2"), owner) && !owner[0]);
   CHECK (record_owner (b, key ("close-rel-b"), owner));
   CHECK (!strcmp (owner, leaselock_lease_owner (lb)));
   bool ok = leaselock_lease_release (l1, &err);
   CHECK_ERR (ok, err, LEASELOCK_NOT_HELD, "client of this lease is closed");
   CHECK_OK (leaselock_client_close (a, true, &err), err); /* twice: nothing left */
   leaselock_lease_t *l;
   CHECK_OK (acq (b, key ("close-rel-1"), opts (5000, false), &l, &err), err);
   leaselock_lease_destroy (l);
   leaselock_lease_destroy (l1);
   leaselock_lease_destroy (l2);
   leaselock_client_destroy (a);
   CHECK_EQ (leaselock_lease_state (lb), LEASELOCK_STATE_HELD);
   CHECK_OK (leaselock_lease_release (lb, &err), err);
   leaselock_lease_destroy (lb);
   leaselock_client_destroy (b);
}

/* A release that fails during close: each lease is still tried, close
 * reports the first failure and the client is closed all the same. */
static void test_close_release_fails (void)
{
   leaselock_client_t *a = client ("a");
   CHECK (a);
   leaselock_error_t err;
   leaselock_lease_t *l1, *l2;
   CHECK_OK (acq (a, key ("close-fail-1"), opts (60000, false), &l1, &err), err);
   CHECK_OK (acq (a, key ("close-fail-2"), opts (60000, false), &l2, &err), err);
   long before = fake_backend_calls (FAKE_RELEASE);
   fake_backend_fail_next (FAKE_RELEASE, 2); /* the first release and its resend */
   bool ok = leaselock_client_close (a, true, &err);
   CHECK_ERR (ok, err, LEASELOCK_BACKEND, "");
   CHECK_EQ (fake_backend_calls (FAKE_RELEASE) - before, 3);
   CHECK (leaselock_client_closed (a));
   /* the failed one was let go (RELEASED, as a failed release is), the
    * other released */
   CHECK_EQ (leaselock_lease_state (l1), LEASELOCK_STATE_RELEASED);
   CHECK_EQ (leaselock_lease_state (l2), LEASELOCK_STATE_RELEASED);
   leaselock_lease_destroy (l1);
   leaselock_lease_destroy (l2);
   leaselock_client_destroy (a);
}

typedef struct
{
   leaselock_client_t *c;
   const char *key;
   bool ok;
   leaselock_error_t err;
} close_waiter_t;

static void *close_waiter_main (void *arg)
{
   close_waiter_t *w = arg;
   leaselock_acquire_opts_t o = opts (5000, false);
   o.timeout_ms = -1; /* forever, and no should_stop */
   leaselock_lease_t *l;
   w->ok = leaselock_acquire (w->c, w->key, strlen (w->key), &o, &l, &w->err);
   if (w->ok)
      leaselock_lease_destroy (l);
   return NULL;
}

static int64_t real_ms (void)
{
   struct timespec ts;
   clock_gettime (CLOCK_MONOTONIC, &ts);
   return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A blocking acquire of a client that another thread closes ends at once
 * with INVALID. */
static void test_close_stops_waiter (void)
{
   leaselock_client_t *a = client ("a"), *b = client ("b");
   CHECK (a && b);
   leaselock_error_t err;
   leaselock_lease_t *la;
   CHECK_OK (acq (a, key ("close-wait"), opts (60000, false), &la, &err), err);
   close_waiter_t w = { .c = b, .key = key ("close-wait") };
   pthread_t th;
   pthread_create (&th, NULL, close_waiter_main, &w);
   t_sleep (2000); /* the backoff grows to its cap */
   int64_t t0 = real_ms ();
   CHECK_OK (leaselock_client_close (b, true, &err), err);
   pthread_join (th, NULL);
   int64_t took = real_ms () - t0;
   CHECK_ERR (w.ok, w.err, LEASELOCK_INVALID, "client was closed while waiting for");
   CHECK (took < 1000);
   CHECK_EQ (leaselock_lease_state (la), LEASELOCK_STATE_HELD);
   leaselock_client_destroy (b);
   leaselock_lease_destroy (la);
   leaselock_client_destroy (a);
}

typedef struct
{
   leaselock_client_t *c;
   atomic_int calls;
   atomic_bool close_ok;
} closing_cb_t;

static void close_on_lost (leaselock_lease_t *lease, void *ud)
{
   (void)lease;
   closing_cb_t *x = ud;
   leaselock_error_t err;
   atomic_store (&x->close_ok, leaselock_client_close (x->c, true, &err));
   atomic_fetch_add (&x->calls, 1);
}

/* A close that releases held leases, with the lease its user releases or
 * destroys meanwhile (another thread, or a with-block ending on the
 * close's error): that lease is released too. The close skips a lease
 * whose release is under way and forgets a destroyed one, so the user's
 * call must not be refused for the close. (Fake backend: a release reply
 * held back keeps the close inside its releases.) */
typedef struct closer
{
   leaselock_client_t *c;
   bool ok;
   leaselock_error_t err;
} closer_t;

static void *close_releasing (void *p)
{
   closer_t *x = p;
   x->ok = leaselock_client_close (x->c, true, &x->err);
   return NULL;
}

static void *destroy_both (void *p)
{
   leaselock_lease_t **l = p;
   leaselock_lease_destroy (l[0]);
   leaselock_lease_destroy (l[1]);
   return NULL;
}

static void test_destroy_during_close (void)
{
   leaselock_client_t *a = client ("a"), *b = client ("b");
   CHECK (a && b);
   leaselock_error_t err;
   leaselock_lease_t *l1 = NULL, *l2 = NULL;
   bool ok = acq (a, key ("dc1"), opts (10000, false), &l1, &err) &&
             acq (a, key ("dc2"), opts (10000, false), &l2, &err);
   CHECK_OK (ok, err);
   fake_backend_hold_replies (FAKE_RELEASE, 1);
   closer_t x = { .c = a };
   pthread_t t;
   CHECK (pthread_create (&t, NULL, close_releasing, &x) == 0);
   for (int i = 0; i < 2000 && fake_backend_held () == 0; i++)
      sleep_ms (1);
   int held = fake_backend_held ();
   /* One of them is the close's, held back: its destroy waits for that
    * release, so they run on their own thread. */
   leaselock_lease_t *both[2] = { l1, l2 };
   pthread_t td;
   CHECK (pthread_create (&td, NULL, destroy_both, both) == 0);
   sleep_ms (30);
   fake_backend_let_go ();
   pthread_join (t, NULL);
   pthread_join (td, NULL);
   CHECK_EQ (held, 1);
   CHECK_OK (x.ok, x.err);
   const char *keys[] = { key ("dc1"), key ("dc2") };
   for (int i = 0; i < 2; i++) {
      leaselock_record_t rec;
      bool found = false;
      ok = leaselock_inspect (b, keys[i], strlen (keys[i]), &rec, &found, &err);
      CHECK_OK (ok, err);
      CHECK (found && !strcmp (rec.owner, ""));
   }
   leaselock_client_destroy (a);
   leaselock_client_destroy (b);
}

/* Two releases of one lease at once (a releasing close and the user's
 * with-block ending, or two threads): the later waits for the earlier and
 * shares its outcome instead of sending its own, which the database would
 * answer "not yours" once the first landed. (Fake backend: the first
 * release's reply is held back, so the second starts while it is in
 * flight.) */
typedef struct releaser
{
   leaselock_lease_t *l;
   atomic_bool done;
   bool ok;
   leaselock_error_t err;
} releaser_t;

static void *release_thread (void *p)
{
   releaser_t *x = p;
   x->ok = leaselock_lease_release (x->l, &x->err);
   atomic_store (&x->done, true);
   return NULL;
}

static void test_release_during_release (void)
{
   leaselock_client_t *a = client ("a"), *b = client ("b");
   CHECK (a && b);
   leaselock_error_t err;
   leaselock_lease_t *l1 = NULL, *l2 = NULL;
   CHECK_OK (acq (a, key ("rr1"), opts (10000, true), &l1, &err), err);

   /* The user's own two releases: the second reports "already released". */
   fake_backend_hold_replies (FAKE_RELEASE, 1);
   releaser_t first = { .l = l1 };
   pthread_t t1;
   CHECK (pthread_create (&t1, NULL, release_thread, &first) == 0);
   for (int i = 0; i < 2000 && fake_backend_held () == 0; i++)
      sleep_ms (1);
   CHECK_EQ (fake_backend_held (), 1);
   releaser_t second = { .l = l1 };
   pthread_t t2;
   CHECK (pthread_create (&t2, NULL, release_thread, &second) == 0);
   sleep_ms (30);
   CHECK (!atomic_load (&second.done)); /* waits for the first */
   fake_backend_let_go ();
   pthread_join (t1, NULL);
   pthread_join (t2, NULL);
   CHECK_OK (first.ok, first.err);
   CHECK (!second.ok);
   CHECK_EQ (second.err.code, LEASELOCK_NOT_HELD);
   CHECK (strstr (second.err.message, "already released") != NULL);

   /* A releasing close under way, and the user's release: both succeed. */
   CHECK_OK (acq (a, key ("rr2"), opts (10000, true), &l2, &err), err);
   fake_backend_hold_replies (FAKE_RELEASE, 1);
   closer_t x = { .c = a };
   pthread_t tc;
   CHECK (pthread_create (&tc, NULL, close_releasing, &x) == 0);
   for (int i = 0; i < 2000 && fake_backend_held () == 0; i++)
      sleep_ms (1);
   CHECK_EQ (fake_backend_held (), 1);
   releaser_t user = { .l = l2 };
   pthread_t tu;
   CHECK (pthread_create (&tu, NULL, release_thread, &user) == 0);
   sleep_ms (30);
   fake_backend_let_go ();
   pthread_join (tc, NULL);
   pthread_join (tu, NULL);
   CHECK_OK (x.ok, x.err);
   CHECK_OK (user.ok, user.err);
   leaselock_record_t rec;
   bool found = false;
   CHECK_OK (leaselock_inspect (b, key ("rr2"), strlen (key ("rr2")), &rec, &found, &err), err);
   CHECK (found && !strcmp (rec.owner, ""));
   leaselock_lease_destroy (l1);
   leaselock_lease_destroy (l2);
   leaselock_client_destroy (a);
   leaselock_client_destroy (b);
}

/* on_lost may close its own client (from the renewal thread); destroy
 * then joins that thread. */
static void test_close_from_on_lost (void)
{
   leaselock_client_t *a = client ("a"), *b = client ("b");
   CHECK (a && b);
   leaselock_error_t err;
   leaselock_lease_t *lost, *other;
   closing_cb_t x = { .c = a };
   leaselock_acquire_opts_t o = opts (1000, true);
   o.on_lost = close_on_lost;
   o.on_lost_data = &x;
   CHECK_OK (acq (a, key ("close-cb"), o, &lost, &err), err);
   CHECK_OK (acq (a, key ("close-cb-other"), opts (60000, true), &other, &err), err);
   CHECK_OK (leaselock_force_release (b, key ("close-cb"), strlen (key ("close-cb")), NULL, &err),
             err);
   for (int i = 0; i < 300 && atomic_load (&x.calls) == 0; i++)
      t_sleep (10);
   CHECK_EQ (atomic_load (&x.calls), 1);
   CHECK (atomic_load (&x.close_ok));
   CHECK (leaselock_client_closed (a));
   CHECK_EQ (leaselock_lease_state (lost), LEASELOCK_STATE_LOST);
   CHECK_EQ (leaselock_lease_state (other), LEASELOCK_STATE_RELEASED);
   char owner[LEASELOCK_OWNER_LEN + 1];
   CHECK (record_owner (b, key ("close-cb-other"), owner) && !owner[0]);
   leaselock_lease_destroy (lost);
   leaselock_client_destroy (a);
   leaselock_lease_destroy (other);
   leaselock_client_destroy (b);
}

static void test_bad_keys (void)
{
   leaselock_client_t *c = client (NULL);
   CHECK (c);
   leaselock_error_t err;
   leaselock_lease_t *l = (void *)1;
   leaselock_acquire_opts_t o = opts (1000, false);
   char big[300];
   memset (big, 'k', sizeof big);
   bool ok = leaselock_acquire (c, "", 0, &o, &l, &err);
   CHECK_ERR (ok, err, LEASELOCK_INVALID, "key is empty");
   CHECK (l == NULL);
   ok = leaselock_acquire (c, big, 256, &o, &l, &err);
   CHECK_ERR (ok, err, LEASELOCK_INVALID, "key is 256 bytes long (at most 255)");
   ok = leaselock_acquire (c, "a\0b", 3, &o, &l, &err);
   CHECK_ERR (ok, err, LEASELOCK_INVALID, "NUL byte at offset 1");
   const char *bad_utf8[] = { "\xff",      "ab\xc0\xaf",       "\xed\xa0\x80",
                              "x\xe2\x82", "\xf5\x80\x80\x80", "\x80" };
   for (size_t i = 0; i < sizeof bad_utf8 / sizeof bad_utf8[0]; i++) {
      ok = leaselock_acquire (c, bad_utf8[i], strlen (bad_utf8[i]), &o, &l, &err);
      CHECK_ERR (ok, err, LEASELOCK_INVALID, "not valid UTF-8");
   }
   ok = leaselock_acquire (c, NULL, 3, &o, &l, &err);
   CHECK_ERR (ok, err, LEASELOCK_INVALID, "key is NULL");
   /* the same checks guard inspect and force_release */
   leaselock_record_t rec;
   bool found;
   ok = leaselock_inspect (c, big, 256, &rec, &found, &err);
   CHECK_ERR (ok, err, LEASELOCK_INVALID, "at most 255");
   ok = leaselock_force_release (c, "", 0, NULL, &err);
   CHECK_ERR (ok, err, LEASELOCK_INVALID, "key is empty");
   ok = leaselock_list (c, "\xff", 1, collect, NULL, &err);
   CHECK_ERR (ok, err, LEASELOCK_INVALID, "prefix is not valid UTF-8");
   /* 255 bytes and multibyte keys are fine */
   char k255[256];
   int n = snprintf (k255, sizeof k255, "%s/", PFX);
   memset (k255 + n, 'x', (size_t)(255 - n));
   k255[255] = '\0';
   ok = leaselock_acquire (c, k255, 255, &o, &l, &err);
   CHECK_OK (ok, err);
   leaselock_lease_destroy (l);
   const char *mb = key ("ключ/鍵/🔒");
   ok = leaselock_acquire (c, mb, strlen (mb), &o, &l, &err);
   CHECK_OK (ok, err);
   ok = leaselock_inspect (c, mb, strlen (mb), &rec, &found, &err);
   CHECK_OK (ok, err);
   CHECK (found && !strcmp (rec.key, mb));
   leaselock_lease_destroy (l);
   leaselock_client_destroy (c);
}

static void test_bad_ttls (void)
{
   leaselock_client_t *c = client (NULL);
   CHECK (c);
   leaselock_error_t err;
   leaselock_lease_t *l;
   leaselock_acquire_opts_t o = opts (0, false);
   bool ok = acq (c, key ("ttl"), o, &l, &err);
   CHECK_ERR (ok, err, LEASELOCK_INVALID, "ttl must be at least 1 ms (got 0 ms)");
   o.ttl_ms = -5;
   ok = acq (c, key ("ttl"), o, &l, &err);
   CHECK_ERR (ok, err, LEASELOCK_INVALID, "ttl must be at least 1 ms (got -5 ms)");
   o.ttl_ms = LEASELOCK_TTL_MAX_MS + 1;
   ok = acq (c, key ("ttl"), o, &l, &err);
   CHECK_ERR (ok, err, LEASELOCK_INVALID, "ttl must be at most 30 days");
   o.ttl_ms = 1000;
   o.min_hold_ms = -1;
   ok = acq (c, key ("ttl"), o, &l, &err);
   CHECK_ERR (ok, err, LEASELOCK_INVALID, "min_hold must not be negative");
   o.min_hold_ms = 0;
   o.timeout_ms = LEASELOCK_TTL_MAX_MS + 1;
   ok = acq (c, key ("ttl"), o, &l, &err);
   CHECK_ERR (ok, err, LEASELOCK_INVALID, "timeout must be at most 30 days");
   o = opts (LEASELOCK_TTL_MAX_MS, false); /* the maximum itself is fine */
   ok = acq (c, key ("ttl"), o, &l, &err);
   if (TTL_BOUNDED) {
      /* ...but for the table's max_ttl (the lock-delay after a failover) */
      CHECK_ERR (ok, err, LEASELOCK_INVALID, "over this table's max_ttl of 60000 ms");
      o = opts (60000, false);
      ok = acq (c, key ("ttl"), o, &l, &err);
   }
   CHECK_OK (ok, err);
   leaselock_lease_destroy (l);
   leaselock_client_destroy (c);
}

/* A renewal stuck in a database that does not answer must not delay the
 * loss: on_lost fires at the local deadline while the call still hangs.
 * (fake only) */
static void test_loss_while_renewal_hangs (void)
{
   leaselock_client_t *a = client ("hang");
   CHECK (a);
   leaselock_error_t err;
   leaselock_lease_t *la = NULL;
   lost_t L = { 0 };
   int64_t t0;
   bool ok = acquire_frozen (a, "hang", &la, &L, &t0, &err);
   if (!ok)
      leaselock_client_destroy (a);
   CHECK_OK (ok, err);
   fake_backend_hang (true);
   long renews = fake_backend_calls (FAKE_RENEW);
   /* To the first renewal, which then hangs. */
   while (fake_backend_calls (FAKE_RENEW) == renews && ll_now_ms () < t0 + 900) {
      ll_clock_advance (10);
      sleep_ms (2);
   }
   bool renewing = fake_backend_calls (FAKE_RENEW) > renews;
   ll_clock_advance (t0 + 1000 - ll_now_ms ());
   for (int i = 0; i < 2000 && !atomic_load (&L.calls); i++)
      sleep_ms (1);
   int calls_while_hung = atomic_load (&L.calls);
   bool lost = leaselock_lease_state (la) == LEASELOCK_STATE_LOST;
   fake_backend_hang (false);
   atomic_store (&ticking, true);
   leaselock_lease_destroy (la);
   leaselock_client_destroy (a);
   CHECK (renewing);
   CHECK (lost);
   CHECK_EQ (calls_while_hung, 1);
   CHECK (L.lease == la);
}

/* Fake only: one lease's renewal stuck in the database does not stop the
 * renewals of the client's other leases (each runs on a free I/O thread);
 * the stuck one is still lost at its deadline. */
static void test_stuck_renewal_alone (void)
{
   leaselock_client_t *a = client ("stuck");
   CHECK (a);
   leaselock_error_t err;
   leaselock_lease_t *stuck = NULL, *fine = NULL;
   lost_t Ls = { 0 }, Lf = { 0 };
   int64_t t0;
   bool ok = acquire_frozen (a, "stuck-renewal", &stuck, &Ls, &t0, &err);
   if (ok) {
      leaselock_acquire_opts_t o = opts (1000, true);
      o.on_lost = on_lost;
      o.on_lost_data = &Lf;
      ok = acq (a, key ("fine-renewal"), o, &fine, &err);
   }
   if (!ok)
      atomic_store (&ticking, true);
   CHECK_OK (ok, err);
   fake_backend_hang_key ("stuck-renewal");
   /* Three TTLs of fake time, 10 ms at a time, with real time for the
    * threads to act. */
   for (int i = 0; i < 300; i++) {
      ll_clock_advance (10);
      sleep_ms (1);
   }
   sleep_ms (20);
   leaselock_state_t fine_state = leaselock_lease_state (fine);
   leaselock_state_t stuck_state = leaselock_lease_state (stuck);
   int stuck_calls = atomic_load (&Ls.calls), fine_calls = atomic_load (&Lf.calls);
   fake_backend_hang_key (NULL);
   atomic_store (&ticking, true);
   leaselock_lease_destroy (fine);
   leaselock_lease_destroy (stuck);
   leaselock_client_destroy (a);
   CHECK_EQ (fine_state, LEASELOCK_STATE_HELD);
   CHECK_EQ (fine_calls, 0);
   CHECK_EQ (stuck_state, LEASELOCK_STATE_LOST);
   CHECK_EQ (stuck_calls, 1);
}

/* Fake only: fork() while another thread's database call hangs returns
 * after the handler's bounded wait (invariant 8), and the child cannot use
 * that client (its library state may be mid-call), with a clear error. */
static void test_fork_while_call_hangs (void)
{
   leaselock_client_t *a = client ("fork-hang");
   CHECK (a);
   leaselock_error_t err;
   leaselock_lease_t *la = NULL;
   lost_t L = { 0 };
   int64_t t0;
   bool ok = acquire_frozen (a, "fork-hang", &la, &L, &t0, &err);
   atomic_store (&ticking, true);
   if (!ok)
      leaselock_client_destroy (a);
   CHECK_OK (ok, err);
   fake_backend_hang (true);
   long renews = fake_backend_calls (FAKE_RENEW);
   for (int i = 0; i < 5000 && fake_backend_calls (FAKE_RENEW) == renews; i++)
      sleep_ms (1); /* the automatic renewal starts, and hangs */
   bool hanging = fake_backend_calls (FAKE_RENEW) > renews;
   int64_t f0 = ll_real_now_ms ();
   pid_t pid = fork ();
   if (pid == 0) {
      leaselock_record_t rec;
      bool found;
      const char *k = key ("fork-hang");
      bool iok = leaselock_inspect (a, k, strlen (k), &rec, &found, &err);
      _exit (!iok && err.code == LEASELOCK_BACKEND && strstr (err.message, "forked") ? 0 : 1);
   }
   int64_t took = ll_real_now_ms () - f0;
   int status = -1;
   if (pid > 0)
      waitpid (pid, &status, 0);
   fake_backend_hang (false);
   leaselock_lease_destroy (la);
   leaselock_client_destroy (a);
   CHECK (hanging);
   CHECK (pid > 0);
   CHECK (took < 30000); /* bounded, not "as long as the call hangs" */
   CHECK (WIFEXITED (status) && WEXITSTATUS (status) == 0);
}

/* An acquire whose reply does not come before its timeout (a commit that
 * waits for a synchronous standby that never confirms it): the call ends
 * by its timeout with BACKEND "outcome unknown", and the grant it made is
 * released by the client's I/O threads, not left to run out its TTL. */
static void test_unknown_outcome_released (void)
{
   leaselock_client_t *c = client ("unknown-outcome"), *d = client ("unknown-outcome-2");
   CHECK (c && d);
   leaselock_error_t err;
   leaselock_lease_t *l = NULL;
   const char *k = key ("unknown-outcome");
   leaselock_acquire_opts_t o = opts (60000, false);
   o.timeout_ms = 300;
   /* Two: the fake clock may lag real time, leaving time for a resend. */
   fake_backend_hold_replies (FAKE_ACQUIRE, 2);
   int64_t t0 = ll_real_now_ms ();
   bool ok = acq (c, k, o, &l, &err);
   int64_t took = ll_real_now_ms () - t0;
   fake_backend_let_go ();
   fake_backend_hold_replies (FAKE_ACQUIRE, 0);
   bool got = false;
   leaselock_lease_t *ld = NULL;
   leaselock_error_t errd;
   for (int i = 0; i < 200 && !got; i++) {
      got = acq (d, k, opts (5000, false), &ld, &errd);
      if (!got)
         t_sleep (10);
   }
   leaselock_lease_destroy (ld);
   leaselock_client_destroy (d);
   leaselock_client_destroy (c);
   CHECK_ERR (ok, err, LEASELOCK_BACKEND, "outcome unknown");
   CHECK (strstr (err.message, "no answer before the caller's timeout") != NULL);
   CHECK (l == NULL);
   CHECK (took >= 290 && took < 800);
   CHECK_OK (got, errd); /* 200 tries 10 ms apart: released, not run out (60 s) */
}

/* An acquire applied by the database whose reply is lost is sent once
 * more with the same owner: the caller gets the lease, not a key locked by
 * nobody until its TTL. A second loss in a row is reported. (fake only) */
static void test_lost_reply_resent (void)
{
   leaselock_client_t *c = client ("lost-reply");
   CHECK (c);
   leaselock_error_t err;
   leaselock_lease_t *l = NULL;
   const char *k = key ("lost-reply");
   long before = fake_backend_calls (FAKE_ACQUIRE);
   fake_backend_lose_replies (1);
   bool ok = acq (c, k, opts (5000, false), &l, &err);
   fake_backend_lose_replies (0);
   long calls = fake_backend_calls (FAKE_ACQUIRE) - before;
   leaselock_record_t rec;
   bool found = false;
   bool iok = leaselock_inspect (c, k, strlen (k), &rec, &found, &err);
   CHECK_OK (ok, err);
   CHECK_EQ (calls, 2);
   CHECK_OK (iok, err);
   CHECK (found && !strcmp (rec.owner, leaselock_lease_owner (l)));
   CHECK_EQ (leaselock_lease_fence (l), rec.fence);
   CHECK (leaselock_lease_release (l, &err));
   leaselock_lease_destroy (l);

   /* Lost twice: BACKEND, after exactly two sends, even while waiting. */
   leaselock_acquire_opts_t o = opts (5000, false);
   o.timeout_ms = 2000;
   before = fake_backend_calls (FAKE_ACQUIRE);
   fake_backend_lose_replies (2);
   l = NULL;
   ok = acq (c, k, o, &l, &err);
   fake_backend_lose_replies (0);
   calls = fake_backend_calls (FAKE_ACQUIRE) - before;
   CHECK_ERR (ok, err, LEASELOCK_BACKEND, "the reply was lost");
   CHECK (l == NULL);
   CHECK_EQ (calls, 2);
   /* Either send may have taken the key for an owner nobody holds: it was
    * released for that owner, so the key is free now, not blocked for its
    * TTL. */
   ok = acq (c, k, opts (5000, false), &l, &err);
   CHECK_OK (ok, err);
   leaselock_lease_destroy (l);

   /* The same when that release fails too (the broken path often stays
    * broken a while): it is retried until it lands. */
   fake_backend_lose_replies (2);
   fake_backend_fail_next (FAKE_RELEASE, 3);
   l = NULL;
   ok = acq (c, k, opts (60000, false), &l, &err);
   fake_backend_lose_replies (0);
   CHECK_ERR (ok, err, LEASELOCK_BACKEND, "the reply was lost");
   leaselock_client_t *d = client ("other");
   CHECK (d);
   int64_t t0 = ll_now_ms ();
   bool got = false;
   while (!got && ll_now_ms () < t0 + 5000) {
      got = acq (d, k, opts (5000, false), &l, &err);
      if (!got)
         t_sleep (20);
   }
   fake_backend_fail_next (FAKE_RELEASE, 0);
   leaselock_lease_destroy (l);
   leaselock_client_destroy (d);
   leaselock_client_destroy (c);
   CHECK (got); /* long before the 60 s TTL */
}

/* Fake only: a manual renew with a short TTL runs in the database after a
 * (longer) automatic renewal that was applied first but whose reply comes
 * back last. The database's expiry is the short one; the holder's local
 * deadline must not be later. */
static void test_renew_race (void)
{
   leaselock_client_t *a = client ("a");
   CHECK (a);
   leaselock_error_t err;
   leaselock_lease_t *la;
   lost_t L = { 0 };
   int64_t t0;
   fake_backend_hold_replies (FAKE_RENEW, 1);
   bool ok = acquire_frozen (a, "race", &la, &L, &t0, &err); /* TTL 1000, auto-renewed */
   if (!ok)
      fake_backend_let_go ();
   CHECK_OK (ok, err);
   ll_clock_advance (400); /* past TTL/3: the automatic renewal is applied, its reply held */
   for (int i = 0; i < 2000 && fake_backend_held () == 0; i++)
      sleep_ms (1);
   int held = fake_backend_held ();
   ll_clock_advance (1);
   bool rok = leaselock_lease_renew (la, 100, &err);
   fake_backend_let_go ();
   /* The least time between the holder's deadline and the database's
    * expiry, while the held reply is taken in. */
   int64_t least = INT64_MAX;
   bool found = false, iok = true;
   leaselock_record_t rec;
   for (int i = 0; i < 100 && iok; i++) {
      sleep_ms (2);
      iok = leaselock_inspect (a, key ("race"), strlen (key ("race")), &rec, &found, &err);
      int64_t gap = rec.expires_in_ms - leaselock_lease_remaining_ms (la);
      if (iok && found && gap < least)
         least = gap;
   }
   atomic_store (&ticking, true);
   CHECK_EQ (held, 1);
   CHECK (rok);
   CHECK (iok && found);
   CHECK_EQ (rec.expires_in_ms, 100);
   /* The deadline stays at least the margin before the database's expiry. */
   CHECK (least >= ll_deadline_margin_ms (100));
   leaselock_lease_destroy (la);
   leaselock_client_destroy (a);
}

/* Fake only: a release whose reply is lost although it was applied is
 * asked again; the lease is released, not renewed again, and on_lost never
 * fires. */
static void test_release_lost_reply (void)
{
   leaselock_client_t *a = client ("a");
   CHECK (a);
   leaselock_error_t err;
   leaselock_lease_t *la;
   lost_t L = { 0 };
   int64_t t0;
   bool ok = acquire_frozen (a, "rel-lost", &la, &L, &t0, &err);
   CHECK_OK (ok, err);
   atomic_store (&ticking, true);
   fake_backend_lose_replies_of (FAKE_RELEASE, 1);
   long before = fake_backend_calls (FAKE_RELEASE);
   ok = leaselock_lease_release (la, &err);
   long calls = fake_backend_calls (FAKE_RELEASE) - before;
   fake_backend_lose_replies_of (FAKE_RELEASE, 0);
   t_sleep (1500); /* past the TTL: a renewal would have found it gone */
   CHECK_OK (ok, err);
   CHECK_EQ (calls, 2);
   CHECK_EQ (leaselock_lease_state (la), LEASELOCK_STATE_RELEASED);
   CHECK_EQ (atomic_load (&L.calls), 0);
   leaselock_lease_destroy (la);
   leaselock_client_destroy (a);
}

/* Labels follow a key's rules (they may be empty); renew's TTL is the
 * lease's own (0) or a valid TTL. */
static void test_bad_labels_and_renew_ttls (void)
{
   leaselock_error_t err;
   char long_label[300];
   memset (long_label, 'x', 256);
   long_label[256] = '\0';
   leaselock_client_t *bad = leaselock_client_new (URI, long_label, &err);
   CHECK_ERR (bad != NULL, err, LEASELOCK_INVALID, "label is 256 bytes long (at most 255)");
   leaselock_client_destroy (bad);
   bad = leaselock_client_new (URI, "bad\xff", &err);
   CHECK_ERR (bad != NULL, err, LEASELOCK_INVALID,
              "label is not valid UTF-8 (bad byte at offset 3)");
   leaselock_client_destroy (bad);
   leaselock_client_t *c = client ("");
   CHECK (c);
   leaselock_client_destroy (c);
   c = client ("caf\xc3\xa9 \xe2\x9c\x93");
   CHECK (c);
   leaselock_lease_t *l = NULL;
   bool ok = acq (c, key ("renew-ttl"), opts (5000, false), &l, &err);
   CHECK_OK (ok, err);
   ok = leaselock_lease_renew (l, -5, &err);
   CHECK_ERR (ok, err, LEASELOCK_INVALID, "ttl must be at least 1 ms (got -5 ms)");
   ok = leaselock_lease_renew (l, LEASELOCK_TTL_MAX_MS + 1, &err);
   CHECK_ERR (ok, err, LEASELOCK_INVALID, "ttl must be at most 30 days");
   CHECK (leaselock_lease_state (l) == LEASELOCK_STATE_HELD);
   ok = leaselock_lease_renew (l, 0, &err); /* its own TTL */
   CHECK_OK (ok, err);
   leaselock_lease_destroy (l);
   leaselock_client_destroy (c);
}

static void test_null_arguments (void)
{
   leaselock_error_t err;
   leaselock_lease_t *l;
   bool ok = leaselock_acquire (NULL, "k", 1, NULL, &l, &err);
   CHECK_ERR (ok, err, LEASELOCK_INVALID, "client is NULL");
   leaselock_client_t *c = client (NULL);
   CHECK (c);
   ok = leaselock_acquire (c, "k", 1, NULL, NULL, &err);
   CHECK_ERR (ok, err, LEASELOCK_INVALID, "lease (the out parameter) is NULL");
   CHECK (!leaselock_acquire (c, "", 0, NULL, &l, NULL)); /* error may be NULL */
   ok = leaselock_lease_renew (NULL, 0, &err);
   CHECK_ERR (ok, err, LEASELOCK_INVALID, "lease is NULL");
   ok = leaselock_lease_release (NULL, &err);
   CHECK_ERR (ok, err, LEASELOCK_INVALID, "lease is NULL");
   ok = leaselock_inspect (c, "k", 1, NULL, NULL, &err);
   CHECK_ERR (ok, err, LEASELOCK_INVALID, "record is NULL");
   ok = leaselock_list (c, "", 0, NULL, NULL, &err);
   CHECK_ERR (ok, err, LEASELOCK_INVALID, "fn (the record callback) is NULL");
   ok = leaselock_list (NULL, "", 0, collect, NULL, &err);
   CHECK_ERR (ok, err, LEASELOCK_INVALID, "client is NULL");
   ok = leaselock_force_release (NULL, "k", 1, NULL, &err);
   CHECK_ERR (ok, err, LEASELOCK_INVALID, "client is NULL");
   ok = leaselock_parse_duration (NULL, NULL, &err);
   CHECK_ERR (ok, err, LEASELOCK_INVALID, "duration is NULL");
   leaselock_lease_destroy (NULL);
   leaselock_client_destroy (NULL);
   CHECK (leaselock_lease_state (NULL) == LEASELOCK_STATE_RELEASED);
   CHECK (!strcmp (leaselock_code_name (LEASELOCK_BUSY), "BUSY"));
   CHECK (!strcmp (leaselock_code_name ((leaselock_code_t)99), "UNKNOWN"));
   leaselock_client_destroy (c);
}

/* ---- prune ------------------------------------------------------------- */

/* Acquires k on c with ttl_ms and min_hold_ms (no renewal) and releases
 * it, or with keep returns the lease (for the caller to destroy). */
static leaselock_lease_t *prune_make (leaselock_client_t *c, const char *k, int64_t ttl_ms,
                                      int64_t hold, bool keep)
{
   leaselock_error_t err;
   leaselock_lease_t *l = NULL;
   leaselock_acquire_opts_t o = opts (ttl_ms, false);
   o.min_hold_ms = hold;
   bool ok = acq (c, k, o, &l, &err);
   if (!ok)
      fprintf (stderr, "    acquire %s: %s\n", k, err.message);
   if (ok && keep)
      return l;
   if (ok && !leaselock_lease_release (l, &err))
      fprintf (stderr, "    release %s: %s\n", k, err.message);
   leaselock_lease_destroy (l);
   return NULL;
}

/* How many records lie under PFX/name. */
static int prune_left (leaselock_client_t *c, const char *name)
{
   char p[300];
   snprintf (p, sizeof p, "%s/%s", PFX, name);
   listing_t L = { 0 };
   leaselock_error_t err;
   if (!leaselock_list (c, p, strlen (p), collect, &L, &err)) {
      fprintf (stderr, "    list %s: %s\n", p, err.message);
      return -1;
   }
   return L.n;
}

/* Live leases and records inside their min_hold survive; expired records
 * under the prefix go, others stay; the count is right; a pruned key
 * starts its fence again (contract invariant 6). */
static void test_prune_keeps_live (void)
{
   leaselock_client_t *c = client ("prune");
   CHECK (c);
   leaselock_error_t err;
   leaselock_lease_t *live = prune_make (c, key ("prune/live"), 5000, 0, true);
   CHECK (live);
   prune_make (c, key ("prune/hold"), 5000, 5000, false);
   prune_make (c, key ("prune/gone1"), 5000, 0, false);
   prune_make (c, key ("prune/gone2"), 5000, 0, false);
   prune_make (c, key ("prunex/gone"), 5000, 0, false);
   prune_make (c, key ("prunex/gone"), 5000, 0, false); /* fence 2 */
   char p[300];
   snprintf (p, sizeof p, "%s/prune/", PFX);
   int64_t n = -1;
   bool ok = leaselock_prune (c, p, strlen (p), 0, &n, &err);
   CHECK_OK (ok, err);
   CHECK_EQ (n, 2);
   CHECK_EQ (prune_left (c, "prune/"), 2);
   CHECK_EQ (prune_left (c, "prunex/"), 1);
   ok = leaselock_prune (c, p, strlen (p), 0, &n, &err);
   CHECK_OK (ok, err);
   CHECK_EQ (n, 0);
   /* the pruned key's fence starts again; the kept one's grows on */
   leaselock_lease_t *l;
   ok = acq (c, key ("prune/gone1"), opts (5000, false), &l, &err);
   CHECK_OK (ok, err);
   CHECK_EQ (leaselock_lease_fence (l), 1);
   leaselock_lease_destroy (l);
   ok = acq (c, key ("prunex/gone"), opts (5000, false), &l, &err);
   CHECK_OK (ok, err);
   CHECK_EQ (leaselock_lease_fence (l), 3);
   leaselock_lease_destroy (l);
   /* count may be NULL */
   snprintf (p, sizeof p, "%s/prunex/", PFX);
   ok = leaselock_prune (c, p, strlen (p), 0, NULL, &err);
   CHECK_OK (ok, err);
   CHECK_EQ (prune_left (c, "prunex/"), 0);
   /* the live lease is still ours, and the kept records keep their fences */
   ok = leaselock_lease_release (live, &err);
   CHECK_OK (ok, err);
   leaselock_lease_destroy (live);
   leaselock_record_t rec;
   bool found = false;
   ok = leaselock_inspect (c, key ("prune/hold"), strlen (key ("prune/hold")), &rec, &found, &err);
   CHECK_OK (ok, err);
   CHECK (found && rec.fence == 1 && rec.expires_in_ms > 0);
   ok = acq (c, key ("prune/live"), opts (5000, false), &l, &err);
   CHECK_OK (ok, err);
   CHECK_EQ (leaselock_lease_fence (l), 2);
   leaselock_lease_destroy (l);
   leaselock_client_destroy (c);
}

/* older_than: only records expired at least that long ago go. */
static void test_prune_older_than (void)
{
   leaselock_client_t *c = client ("prune");
   CHECK (c);
   leaselock_error_t err;
   leaselock_lease_destroy (prune_make (c, key ("pruneold/a"), 100, 0, true));
   t_sleep (1500);
   leaselock_lease_destroy (prune_make (c, key ("pruneold/b"), 100, 0, true));
   t_sleep (300);
   char p[300];
   snprintf (p, sizeof p, "%s/pruneold/", PFX);
   int64_t n = -1;
   bool ok = leaselock_prune (c, p, strlen (p), 5000, &n, &err);
   CHECK_OK (ok, err);
   CHECK_EQ (n, 0);
   ok = leaselock_prune (c, p, strlen (p), 900, &n, &err);
   CHECK_OK (ok, err);
   CHECK_EQ (n, 1);
   listing_t L = { 0 };
   ok = leaselock_list (c, p, strlen (p), collect, &L, &err);
   CHECK_OK (ok, err);
   CHECK (L.n == 1 && !strcmp (L.keys[0], key ("pruneold/b")));
   ok = leaselock_prune (c, p, strlen (p), 0, &n, &err);
   CHECK_OK (ok, err);
   CHECK_EQ (n, 1);
   leaselock_client_destroy (c);
}

/* Bad arguments: INVALID before any I/O (contract invariant 7). */
static void test_prune_bad_arguments (void)
{
   leaselock_client_t *c = client (NULL);
   CHECK (c);
   leaselock_error_t err;
   int64_t n = 7;
   bool ok = leaselock_prune (c, "", 0, -1, &n, &err);
   CHECK_ERR (ok, err, LEASELOCK_INVALID, "older_than must not be negative");
   CHECK_EQ (n, 0);
   ok = leaselock_prune (c, "", 0, LEASELOCK_TTL_MAX_MS + 1, &n, &err);
   CHECK_ERR (ok, err, LEASELOCK_INVALID, "at most 30 days");
   ok = leaselock_prune (c, "\xff", 1, 0, &n, &err);
   CHECK_ERR (ok, err, LEASELOCK_INVALID, "prefix");
   ok = leaselock_prune (NULL, "", 0, 0, &n, &err);
   CHECK_ERR (ok, err, LEASELOCK_INVALID, "client is NULL");
   leaselock_client_close (c, false, NULL);
   ok = leaselock_prune (c, "", 0, 0, &n, &err);
   CHECK_ERR (ok, err, LEASELOCK_INVALID, "closed");
   leaselock_client_destroy (c);
}

/* ---- observability: the log hook, the counters, on_renew_failed ------- */

#define LOG_MAX 64

/* What a log hook saw: the events in order, with their level, key and
 * fence; whether the getters it called from within the hook worked. */
typedef struct
{
   pthread_mutex_t mu;
   int n;
   int levels[LOG_MAX];
   const char *events[LOG_MAX];
   char keys[LOG_MAX][LEASELOCK_KEY_MAX + 1];
   int64_t fences[LOG_MAX];
   leaselock_code_t codes[LOG_MAX];
   bool getters_ok;
} logbook_t;

static void logbook_hook (const leaselock_log_event_t *ev, void *ud)
{
   logbook_t *b = ud;
   leaselock_stats_t st;
   bool getters = leaselock_client_stats (ev->client, &st, NULL) &&
                  leaselock_client_uri (ev->client)[0] != '\0' && ev->message && ev->event;
   pthread_mutex_lock (&b->mu);
   if (b->n < LOG_MAX) {
      b->levels[b->n] = ev->level;
      b->events[b->n] = ev->event;
      snprintf (b->keys[b->n], sizeof b->keys[0], "%.*s", (int)ev->key_len, ev->key ? ev->key : "");
      b->fences[b->n] = ev->fence;
      b->codes[b->n] = ev->code;
      b->n++;
   }
   b->getters_ok = (b->n == 1 || b->getters_ok) && getters;
   pthread_mutex_unlock (&b->mu);
}

/* The index of the first event named event from index from on, or -1. */
static int logbook_find (logbook_t *b, const char *event, int from)
{
   pthread_mutex_lock (&b->mu);
   int found = -1;
   for (int i = from; i < b->n && found < 0; i++)
      if (!strcmp (b->events[i], event))
         found = i;
   pthread_mutex_unlock (&b->mu);
   return found;
}

/* Acquire, busy, wait, timeout and release: their events at their levels,
 * with key and fence, and their counters. The hook calls getters. */
static void test_log_and_stats (void)
{
   leaselock_client_t *a = client ("a"), *b = client ("b");
   CHECK (a && b);
   logbook_t L = { .mu = PTHREAD_MUTEX_INITIALIZER };
   leaselock_client_set_log (a, LEASELOCK_LOG_DEBUG, logbook_hook, &L);
   const char *k = key ("observed");
   leaselock_error_t err;
   leaselock_lease_t *la, *lb;
   bool ok = acq (b, k, opts (5000, false), &lb, &err);
   CHECK_OK (ok, err);
   ok = acq (a, k, opts (5000, false), &la, &err);
   CHECK (!ok && err.code == LEASELOCK_BUSY);
   leaselock_acquire_opts_t o = opts (5000, false);
   o.timeout_ms = 150;
   ok = acq (a, k, o, &la, &err);
   CHECK (!ok && err.code == LEASELOCK_TIMEOUT);
   CHECK_OK (leaselock_lease_release (lb, &err), err);
   ok = acq (a, k, opts (5000, false), &la, &err);
   CHECK_OK (ok, err);
   leaselock_stats_t st;
   CHECK (leaselock_client_stats (a, &st, &err));
   CHECK_EQ (st.leases_held, 1);
   CHECK_OK (leaselock_lease_release (la, &err), err);

   int busy = logbook_find (&L, "busy", 0), wait = logbook_find (&L, "wait", 0);
   int timeout = logbook_find (&L, "timeout", 0), got = logbook_find (&L, "acquire", 0);
   int rel = logbook_find (&L, "release", 0);
   CHECK (busy >= 0 && wait > busy && timeout > wait && got > timeout && rel > got);
   CHECK_EQ (L.levels[busy], LEASELOCK_LOG_DEBUG);
   CHECK_EQ (L.levels[timeout], LEASELOCK_LOG_INFO);
   CHECK_EQ (L.codes[timeout], LEASELOCK_TIMEOUT);
   CHECK (!strcmp (L.keys[got], k) && !strcmp (L.keys[busy], k));
   CHECK_EQ (L.fences[got], leaselock_lease_fence (la));
   CHECK_EQ (L.fences[rel], leaselock_lease_fence (la));
   CHECK (L.getters_ok);

   CHECK (leaselock_client_stats (a, &st, &err));
   CHECK_EQ (st.acquires, 1);
   CHECK_EQ (st.busy, 1);
   CHECK_EQ (st.waits, 1);
   CHECK_EQ (st.timeouts, 1);
   CHECK (st.wait_ms >= 100);
   CHECK_EQ (st.releases, 1);
   CHECK_EQ (st.losses, 0);
   CHECK_EQ (st.leases_held, 0);
   CHECK (st.requests >= 5); /* busy, tries of the wait, acquire, release */
   uint64_t sum = 0;
   for (int i = 0; i < LEASELOCK_LATENCY_BUCKETS; i++)
      sum += st.latency_count[i];
   CHECK_EQ (sum, st.requests);
   CHECK (st.latency_le_us[LEASELOCK_LATENCY_BUCKETS - 1] == UINT64_MAX);
   char text[8192];
   size_t need = leaselock_stats_prometheus (&st, "client=\"a\"", text, sizeof text);
   CHECK (need > 0 && need < sizeof text);
   CHECK (strstr (text, "leaselock_acquires_total{client=\"a\"} 1\n"));
   CHECK (strstr (text, "leaselock_request_duration_seconds_bucket{client=\"a\",le=\"+Inf\"}"));
   char small[16];
   CHECK_EQ (leaselock_stats_prometheus (&st, "client=\"a\"", small, sizeof small), need);
   CHECK_EQ (strlen (small), sizeof small - 1);
   leaselock_lease_destroy (la);
   leaselock_lease_destroy (lb);
   leaselock_client_destroy (a);
   leaselock_client_destroy (b);
}

/* A hook at WARNING hears nothing of a quiet acquire, busy and release;
 * set_log_level and set_log (NULL) change that. */
static void test_log_below_level (void)
{
   leaselock_client_t *a = client ("a");
   CHECK (a);
   logbook_t L = { .mu = PTHREAD_MUTEX_INITIALIZER };
   leaselock_client_set_log (a, LEASELOCK_LOG_WARNING, logbook_hook, &L);
   const char *k = key ("quiet");
   leaselock_error_t err;
   leaselock_lease_t *l1, *l2;
   CHECK_OK (acq (a, k, opts (5000, false), &l1, &err), err);
   CHECK (!acq (a, k, opts (5000, false), &l2, &err) && err.code == LEASELOCK_BUSY);
   CHECK_OK (leaselock_lease_release (l1, &err), err);
   leaselock_lease_destroy (l1);
   CHECK_EQ (L.n, 0);
   leaselock_client_set_log_level (a, LEASELOCK_LOG_DEBUG);
   CHECK_OK (acq (a, k, opts (5000, false), &l1, &err), err);
   CHECK_EQ (L.n, 1);
   leaselock_client_set_log (a, LEASELOCK_LOG_DEBUG, NULL, NULL);
   leaselock_lease_destroy (l1);
   CHECK_EQ (L.n, 1);
   CHECK (!strcmp (leaselock_log_level_name (LEASELOCK_LOG_WARNING), "WARNING"));
   CHECK (!strcmp (leaselock_log_level_name (25), "INFO"));
   leaselock_stats_t st;
   CHECK (!leaselock_client_stats (NULL, &st, &err) && err.code == LEASELOCK_INVALID);
   leaselock_client_set_log (NULL, 0, NULL, NULL); /* does nothing */
   leaselock_client_destroy (a);
}

/* A lease taken over: "lost" at ERROR with its key and fence, from the
 * renewal machinery, and the loss counted. */
static void test_log_loss (void)
{
   leaselock_client_t *a = client ("a"), *b = client ("b");
   CHECK (a && b);
   logbook_t L = { .mu = PTHREAD_MUTEX_INITIALIZER };
   leaselock_client_set_log (a, LEASELOCK_LOG_WARNING, logbook_hook, &L);
   lost_t lost = { 0 };
   leaselock_acquire_opts_t o = opts (900, true);
   o.on_lost = on_lost;
   o.on_lost_data = &lost;
   leaselock_error_t err;
   leaselock_lease_t *la;
   CHECK_OK (acq (a, key ("obs-loss"), o, &la, &err), err);
   CHECK_OK (leaselock_force_release (b, key ("obs-loss"), strlen (key ("obs-loss")), NULL, &err),
             err);
   for (int i = 0; i < 100 && !atomic_load (&lost.calls); i++)
      t_sleep (50);
   CHECK_EQ (atomic_load (&lost.calls), 1);
   int i = logbook_find (&L, "lost", 0);
   CHECK (i >= 0);
   CHECK_EQ (L.levels[i], LEASELOCK_LOG_ERROR);
   CHECK_EQ (L.codes[i], LEASELOCK_LOST);
   CHECK (!strcmp (L.keys[i], key ("obs-loss")));
   CHECK_EQ (L.fences[i], leaselock_lease_fence (la));
   CHECK_EQ (logbook_find (&L, "lost", i + 1), -1); /* once */
   leaselock_stats_t st;
   CHECK (leaselock_client_stats (a, &st, &err));
   CHECK_EQ (st.losses, 1);
   CHECK (st.renewal_failures >= 1);
   CHECK_EQ (st.leases_held, 0);
   leaselock_lease_destroy (la);
   leaselock_client_destroy (a);
   leaselock_client_destroy (b);
}

typedef struct
{
   atomic_int calls;
   leaselock_code_t code;
   int64_t remaining;
   leaselock_state_t state;
} renew_failed_t;

static void on_renew_failed (leaselock_lease_t *lease, const leaselock_error_t *error,
                             int64_t remaining_ms, void *ud)
{
   renew_failed_t *R = ud;
   if (atomic_load (&R->calls) == 0) {
      R->code = error->code;
      R->remaining = remaining_ms;
      R->state = leaselock_lease_state (lease);
   }
   atomic_fetch_add (&R->calls, 1);
}

/* Fake only: the database is down for a while. on_renew_failed runs with
 * the error and the time left while the lease is still held, the
 * "renew_failed" event says so, and the lease survives once the database
 * is back. */
static void test_renew_failed_hook (void)
{
   leaselock_client_t *a = client ("a");
   CHECK (a);
   logbook_t L = { .mu = PTHREAD_MUTEX_INITIALIZER };
   leaselock_client_set_log (a, LEASELOCK_LOG_DEBUG, logbook_hook, &L);
   renew_failed_t R = { 0 };
   leaselock_acquire_opts_t o = opts (4000, true); /* 1 s of real time */
   o.on_renew_failed = on_renew_failed;
   o.on_renew_failed_data = &R;
   leaselock_error_t err;
   leaselock_lease_t *la;
   CHECK_OK (acq (a, key ("renew-failed"), o, &la, &err), err);
   fake_backend_fail (true);
   for (int i = 0; i < 400 && atomic_load (&R.calls) < 2; i++)
      sleep_ms (5);
   fake_backend_fail (false);
   int calls = atomic_load (&R.calls);
   t_sleep (1000); /* renewed again meanwhile */
   leaselock_stats_t st;
   CHECK (leaselock_client_stats (a, &st, &err));
   CHECK (calls >= 2);
   CHECK_EQ (R.code, LEASELOCK_BACKEND);
   CHECK (R.remaining > 0 && R.remaining < 4000);
   CHECK_EQ (R.state, LEASELOCK_STATE_HELD);
   CHECK_EQ (leaselock_lease_state (la), LEASELOCK_STATE_HELD);
   int i = logbook_find (&L, "renew_failed", 0);
   CHECK (i >= 0);
   CHECK_EQ (L.levels[i], LEASELOCK_LOG_WARNING);
   CHECK_EQ (L.codes[i], LEASELOCK_BACKEND);
   CHECK (logbook_find (&L, "renew", i + 1) > i);
   CHECK (st.renewal_failures >= 2 && st.renewals >= 1 && st.backend_errors >= 2);
   CHECK_EQ (st.losses, 0);
   leaselock_lease_destroy (la);
   leaselock_client_destroy (a);
}

/* ---- fair mode (invariant 9) ------------------------------------------- */

/* One fair waiter: its own client; writes 'w' to ready once its first try
 * found the key busy (it is queued), then, once granted, its tag to
 * order, holds the key briefly and releases it. A process on the real
 * backends (the test proves order across processes), a thread on the
 * fake one (it lives in one process). */
typedef struct
{
   const char *key;
   char tag;
   int ready, order; /* pipe ends */
   int64_t timeout_ms;
   int64_t limit; /* > 0: a semaphore of this limit, else a plain lock */
   bool ok;
   pthread_t th;
   pid_t pid;
} fair_waiter_t;

static void fair_ready (const leaselock_log_event_t *ev, void *ud)
{
   fair_waiter_t *f = ud;
   if (!strcmp (ev->event, "wait"))
      (void)!write (f->ready, "w", 1);
}

static void *fair_waiter_main (void *arg)
{
   fair_waiter_t *f = arg;
   leaselock_error_t err;
   leaselock_client_t *c = leaselock_client_new (URI, "fair", &err);
   leaselock_acquire_opts_t o = opts (30000, false);
   o.timeout_ms = f->timeout_ms;
   o.fair = true;
   leaselock_lease_t *l = NULL;
   if (c)
      leaselock_client_set_log (c, LEASELOCK_LOG_DEBUG, fair_ready, f);
   if (f->limit > 0)
      f->ok = c && leaselock_semaphore_acquire (c, f->key, strlen (f->key), f->limit, &o, &l, &err);
   else
      f->ok = c && leaselock_acquire (c, f->key, strlen (f->key), &o, &l, &err);
   if (f->ok) {
      (void)!write (f->order, &f->tag, 1);
      sleep_ms (20);
      f->ok = leaselock_lease_release (l, &err);
   }
   if (!f->ok)
      fprintf (stderr, "    fair waiter %c: %s %s\n", f->tag, leaselock_code_name (err.code),
               err.message);
   leaselock_lease_destroy (l);
   leaselock_client_destroy (c);
   return NULL;
}

/* Starts f and returns once it is queued (false: it ended first); from
 * is the read end of f->ready's pipe. */
static bool fair_start (fair_waiter_t *f, int from)
{
   fflush (NULL);
   if (FAKE)
      pthread_create (&f->th, NULL, fair_waiter_main, f);
   else if ((f->pid = fork ()) == 0) {
      fair_waiter_main (f);
      _exit (f->ok ? 0 : 1);
   }
   char b;
   return read (from, &b, 1) == 1;
}

/* Waits for f's end; whether it succeeded. */
static bool fair_join (fair_waiter_t *f)
{
   if (FAKE) {
      pthread_join (f->th, NULL);
      return f->ok;
   }
   int status = 0;
   waitpid (f->pid, &status, 0);
   return WIFEXITED (status) && WEXITSTATUS (status) == 0;
}

#define N_FAIR 4

/* Fair waiters get the key in the order they arrived, and the holder's
 * own one-try fair acquire defers to them. */
static void test_fair_order (void)
{
   leaselock_client_t *a = client ("a");
   CHECK (a);
   leaselock_error_t err;
   leaselock_lease_t *la, *again = NULL;
   const char *k = key ("fair-order");
   leaselock_acquire_opts_t o = opts (60000, false);
   o.fair = true;
   CHECK_OK (acq (a, k, o, &la, &err), err);
   int ready[2], order[2];
   CHECK (pipe (ready) == 0 && pipe (order) == 0);
   fair_waiter_t f[N_FAIR];
   for (int i = 0; i < N_FAIR; i++) {
      f[i] = (fair_waiter_t){
         .key = k, .tag = (char)('A' + i), .ready = ready[1], .order = order[1], .timeout_ms = 60000
      };
      CHECK (fair_start (&f[i], ready[0]));
      t_sleep (3); /* arrivals in one database millisecond are ordered by owner token */
   }
   CHECK_OK (leaselock_lease_release (la, &err), err);
   bool ok = acq (a, k, o, &again, &err); /* the waiters are queued: not the holder's turn */
   leaselock_error_t again_err = err;
   char got[N_FAIR + 1] = { 0 };
   bool all = true;
   for (int i = 0; i < N_FAIR; i++)
      all = fair_join (&f[i]) && read (order[0], &got[i], 1) == 1 && all;
   CHECK (all);
   CHECK_ERR (ok, again_err, LEASELOCK_BUSY, "fair mode");
   if (strcmp (got, "ABCD"))
      fprintf (stderr, "    granted in the order %s\n", got);
   CHECK (!strcmp (got, "ABCD"));
   close (ready[0]), close (ready[1]), close (order[0]), close (order[1]);
   leaselock_lease_destroy (la);
   leaselock_client_destroy (a);
}

/* A fair waiter that gives up leaves the queue at once: the key is free
 * for the next fair acquire as soon as its holder releases it. */
static void test_fair_give_up_leaves (void)
{
   leaselock_client_t *a = client ("a"), *b = client ("b");
   CHECK (a && b);
   leaselock_error_t err;
   leaselock_lease_t *la, *lb = NULL, *again = NULL;
   const char *k = key ("fair-give-up");
   leaselock_acquire_opts_t o = opts (60000, false);
   o.fair = true;
   CHECK_OK (acq (a, k, o, &la, &err), err);
   leaselock_acquire_opts_t w = o;
   w.timeout_ms = 300;
   bool ok = acq (b, k, w, &lb, &err);
   CHECK_ERR (ok, err, LEASELOCK_TIMEOUT, "timed out");
   if (FAKE)
      CHECK_EQ (fake_backend_queued (k), 0);
   CHECK_OK (leaselock_lease_release (la, &err), err);
   CHECK_OK (acq (a, k, o, &again, &err), err); /* nobody is queued before it */
   leaselock_lease_destroy (again);
   leaselock_lease_destroy (la);
   leaselock_client_destroy (a);
   leaselock_client_destroy (b);
}

/* A fair acquire pays only when it waits: uncontended, it is the plain
 * acquire's one statement (it joins the queue only after a busy try, so
 * it has nothing to leave), on the backends whose take reads the queue
 * (fair_take; the others join and leave around it). And that one
 * statement never goes ahead of a queued waiter: with another owner's
 * live entry in the key's queue, a one-try fair acquire is BUSY and
 * writes nothing, on a key without a record too, until the entry leaves. */
static void test_fair_uncontended (void)
{
   leaselock_client_t *a = client ("a");
   const ll_backend_t *b;
   void *conn = backend_open (URI, &b);
   CHECK (a && conn);
   leaselock_error_t err;
   leaselock_lease_t *l = NULL;
   const char *k = key ("fair-uncontended");
   leaselock_acquire_opts_t o = opts (60000, false);
   o.fair = true;
   uint64_t before = requests_of (a);
   CHECK_OK (acq (a, k, o, &l, &err), err);
   CHECK_EQ (requests_of (a) - before, b->fair_take ? 1 : 3);
   CHECK_OK (leaselock_lease_release (l, &err), err);
   leaselock_lease_destroy (l);
   l = NULL;
   const char *q = key ("fair-uncontended-queued");
   const ll_op_t waiter = { q, strlen (q), "0123456789abcdef0123456789abcdef" };
   int64_t ahead = -1;
   CHECK_OK (b->queue_join (conn, &waiter, 60000, &ahead, &err), err);
   CHECK_EQ (ahead, 0);
   bool ok = acq (a, q, o, &l, &err);
   CHECK_ERR (ok, err, LEASELOCK_BUSY, "fair mode");
   leaselock_record_t rec;
   bool found = true;
   CHECK_OK (leaselock_inspect (a, q, strlen (q), &rec, &found, &err), err);
   CHECK (!found);
   CHECK_OK (b->queue_leave (conn, &waiter, &err), err);
   CHECK_OK (acq (a, q, o, &l, &err), err);
   CHECK_OK (leaselock_lease_release (l, &err), err);
   leaselock_lease_destroy (l);
   b->close (conn);
   leaselock_client_destroy (a);
}

/* The fair queue's first, once it holds the reservation, takes first on
 * its next try: a hand-off costs the waiter the take and the queue leave,
 * two requests, not a join before them as well (three). Its polls put
 * off, only the holder's release (a local one: same process) wakes it. */
static void test_fair_first_takes_first (void)
{
   leaselock_client_t *a = client ("a"), *b = client ("b");
   CHECK (a && b);
   leaselock_error_t err;
   leaselock_lease_t *la;
   const char *k = key ("fair-first");
   leaselock_acquire_opts_t o = opts (60000, false);
   o.fair = true;
   CHECK_OK (acq (a, k, o, &la, &err), err);
   atomic_store (&ll_test_wait_poll_ms, 20000);
   waiter_t w = { .c = b, .key = k, .timeout = 30000, .fair = true };
   pthread_t th;
   pthread_create (&th, NULL, waiter_main, &w);
   leaselock_stats_t st = { 0 };
   for (int t = 0; t < 5000 && st.waits < 1; t++) {
      sleep_ms (1);
      leaselock_client_stats (b, &st, NULL);
   }
   uint64_t before = requests_settled (b);
   bool waiting = st.waits == 1 && !atomic_load (&w.done);
   CHECK_OK (leaselock_lease_release (la, &err), err);
   for (int t = 0; t < 5000 && !atomic_load (&w.done); t++)
      sleep_ms (1);
   uint64_t spent = requests_of (b) - before;
   atomic_store (&ll_test_wait_poll_ms, 0);
   pthread_join (th, NULL);
   CHECK (waiting);
   CHECK_OK (w.ok, w.err);
   if (spent != 2)
      fprintf (stderr, "    the hand-off cost the waiter %llu requests\n",
               (unsigned long long)spent);
   CHECK_EQ (spent, 2);
   CHECK_OK (leaselock_lease_release (w.lease, &err), err);
   leaselock_lease_destroy (w.lease);
   leaselock_lease_destroy (la);
   leaselock_client_destroy (a);
   leaselock_client_destroy (b);
}

/* A fair waiter that dies keeps its place only until its entry runs out:
 * the waiters behind it are not blocked for good. */
static void test_fair_dead_waiter (void)
{
   leaselock_client_t *a = client ("a");
   CHECK (a);
   leaselock_error_t err;
   leaselock_lease_t *la;
   const char *k = key ("fair-dead");
   leaselock_acquire_opts_t o = opts (60000, false);
   o.fair = true;
   CHECK_OK (acq (a, k, o, &la, &err), err);
   int ready[2], order[2];
   CHECK (pipe (ready) == 0 && pipe (order) == 0);
   fair_waiter_t dead = { .key = k, .tag = 'D', .ready = ready[1], .order = order[1] };
   if (FAKE) {
      /* An entry nobody keeps up, as a waiter that died leaves it. */
      const ll_backend_t *b;
      void *conn = backend_open (URI, &b);
      int64_t ahead = -1;
      CHECK (conn &&
             b->queue_join (conn, &(ll_op_t){ k, strlen (k), "0123456789abcdef0123456789abcdef" },
                            1000, &ahead, &err));
      CHECK_EQ (ahead, 0);
      b->close (conn);
   } else {
      dead.timeout_ms = -1;
      CHECK (fair_start (&dead, ready[0]));
      kill (dead.pid, SIGKILL);
      waitpid (dead.pid, NULL, 0);
   }
   fair_waiter_t next = {
      .key = k, .tag = 'N', .ready = ready[1], .order = order[1], .timeout_ms = 30000
   };
   CHECK (fair_start (&next, ready[0]));
   CHECK_OK (leaselock_lease_release (la, &err), err);
   char got = 0;
   CHECK (read (order[0], &got, 1) == 1);
   CHECK (fair_join (&next));
   CHECK_EQ (got, 'N');
   close (ready[0]), close (ready[1]), close (order[0]), close (order[1]);
   leaselock_lease_destroy (la);
   leaselock_client_destroy (a);
}

/* The wait driven by its caller: BUSY with a sleep while another owner
 * holds the key, the lease once it is free, then over; its deadline;
 * its arguments. */
static void test_wait_steps (void)
{
   leaselock_client_t *a = client ("a"), *b = client ("b");
   CHECK (a && b);
   leaselock_error_t err;
   leaselock_lease_t *la, *lb = NULL;
   const char *k = key ("steps");
   CHECK_OK (acq (a, k, opts (60000, false), &la, &err), err);
   leaselock_acquire_opts_t o = opts (60000, false);
   o.timeout_ms = 60000;
   leaselock_wait_t *w = leaselock_wait_new (b, k, strlen (k), &o, &err);
   CHECK_OK (w != NULL, err);
   int64_t sleep = -1;
   bool ok = leaselock_wait_try (w, &lb, &sleep, &err);
   CHECK_ERR (ok, err, LEASELOCK_BUSY, "another owner");
   /* 0 when the sleep it chose (1 ms for the next owner) has already
    * passed, as under valgrind: try again at once. */
   CHECK (sleep >= 0 && sleep <= 1000 && lb == NULL);
   CHECK_OK (leaselock_lease_release (la, &err), err);
   CHECK_OK (leaselock_wait_try (w, &lb, &sleep, &err), err);
   CHECK (lb && sleep == 0);
   leaselock_lease_t *none = NULL;
   ok = leaselock_wait_try (w, &none, &sleep, &err);
   CHECK_ERR (ok, err, LEASELOCK_INVALID, "is over");
   leaselock_wait_destroy (w);
   /* A deadline: tries until it passes, then TIMEOUT. */
   o.timeout_ms = 200;
   w = leaselock_wait_new (a, k, strlen (k), &o, &err);
   CHECK_OK (w != NULL, err);
   int tries = 0;
   while (!(ok = leaselock_wait_try (w, &none, &sleep, &err)) && err.code == LEASELOCK_BUSY) {
      CHECK (sleep <= 200);
      t_sleep (sleep);
      tries++;
   }
   CHECK_ERR (ok, err, LEASELOCK_TIMEOUT, "timed out");
   CHECK (tries >= 1);
   leaselock_wait_destroy (w);
   CHECK (leaselock_wait_new (NULL, k, strlen (k), &o, &err) == NULL);
   CHECK_ERR (false, err, LEASELOCK_INVALID, "client is NULL");
   CHECK (leaselock_wait_new (a, "", 0, &o, &err) == NULL);
   CHECK_ERR (false, err, LEASELOCK_INVALID, "key");
   ok = leaselock_wait_try (NULL, &none, &sleep, &err);
   CHECK_ERR (ok, err, LEASELOCK_INVALID, "wait is NULL");
   w = leaselock_wait_new (a, k, strlen (k), &o, &err);
   CHECK_OK (w != NULL, err);
   ok = leaselock_wait_try (w, &none, NULL, &err);
   CHECK_ERR (ok, err, LEASELOCK_INVALID, "sleep_ms");
   leaselock_wait_destroy (w); /* given up before any try */
   leaselock_wait_destroy (NULL);
   leaselock_lease_destroy (lb);
   leaselock_lease_destroy (la);
   leaselock_client_destroy (a);
   leaselock_client_destroy (b);
}

/* A fair wait driven by its caller keeps its place too. */
static void test_wait_steps_fair (void)
{
   leaselock_client_t *a = client ("a"), *b = client ("b");
   CHECK (a && b);
   leaselock_error_t err;
   leaselock_lease_t *la, *lb = NULL, *again = NULL;
   const char *k = key ("steps-fair");
   leaselock_acquire_opts_t o = opts (60000, false);
   o.fair = true;
   CHECK_OK (acq (a, k, o, &la, &err), err);
   o.timeout_ms = 60000;
   leaselock_wait_t *w = leaselock_wait_new (b, k, strlen (k), &o, &err);
   CHECK_OK (w != NULL, err);
   int64_t sleep;
   bool ok = leaselock_wait_try (w, &lb, &sleep, &err);
   CHECK_ERR (ok, err, LEASELOCK_BUSY, "another owner");
   CHECK_OK (leaselock_lease_release (la, &err), err);
   o.timeout_ms = 0;
   t_sleep (3); /* arrivals in one database millisecond are ordered by owner token */
   ok = acq (a, k, o, &again, &err); /* b is queued first */
   CHECK_ERR (ok, err, LEASELOCK_BUSY, "fair mode");
   CHECK_OK (leaselock_wait_try (w, &lb, &sleep, &err), err);
   leaselock_wait_destroy (w);
   if (FAKE)
      CHECK_EQ (fake_backend_queued (k), 0);
   leaselock_lease_destroy (lb);
   leaselock_lease_destroy (la);
   leaselock_client_destroy (a);
   leaselock_client_destroy (b);
}

/* A backend that keeps no queue: fair mode is UNSUPPORTED, before any I/O. */
static ll_backend_t no_queue_backend;

static void *no_queue_open (const char *uri, leaselock_error_t *err)
{
   (void)uri;
   return fake_backend.open ("fake://", err);
}

static void test_fair_unsupported (void)
{
   no_queue_backend = fake_backend;
   no_queue_backend.name = "noqueue";
   no_queue_backend.schemes[0] = "noqueue";
   no_queue_backend.schemes[1] = NULL;
   no_queue_backend.queue_join = NULL;
   no_queue_backend.queue_leave = NULL;
   no_queue_backend.open = no_queue_open;
   ll_backend_register (&no_queue_backend);
   leaselock_error_t err;
   leaselock_client_t *c = leaselock_client_new ("noqueue://x", "nq", &err);
   CHECK_OK (c != NULL, err);
   leaselock_acquire_opts_t o = opts (1000, false);
   o.fair = true;
   leaselock_lease_t *l = NULL;
   bool ok = acq (c, key ("nq"), o, &l, &err);
   CHECK_ERR (ok, err, LEASELOCK_UNSUPPORTED, "the noqueue backend keeps no queue");
   leaselock_client_destroy (c);
}

/* The sleep of a fair waiter behind others: short, within its cap. */
static void test_fair_sleep_policy (void)
{
   for (int i = 0; i < 2000; i++) {
      int64_t t = ll_fair_sleep_ms (1);
      CHECK (t >= 3 && t <= 6);
      t = ll_fair_sleep_ms (1000);
      CHECK (t >= 25 && t <= 50);
   }
}

/* ---- semaphores and read-write locks (modes.c) ------------------------- */

static bool sem (leaselock_client_t *c, const char *k, int64_t limit, leaselock_acquire_opts_t o,
                 leaselock_lease_t **l, leaselock_error_t *err)
{
   return leaselock_semaphore_acquire (c, k, strlen (k), limit, &o, l, err);
}

static bool rw (leaselock_client_t *c, const char *k, leaselock_rw_mode_t mode,
                leaselock_acquire_opts_t o, leaselock_lease_t **l, leaselock_error_t *err)
{
   return leaselock_rwlock_acquire (c, k, strlen (k), mode, &o, l, err);
}

typedef struct
{
   int live, all;
} n_live_t;

static bool count_live (const leaselock_record_t *rec, void *ud)
{
   n_live_t *n = ud;
   n->all++;
   n->live += rec->expires_in_ms > 0;
   return true;
}

/* The records under k + sfx: how many there are, how many live. */
static n_live_t records_under (leaselock_client_t *c, const char *k, const char *sfx)
{
   char p[LEASELOCK_KEY_MAX + 1];
   snprintf (p, sizeof p, "%s%s", k, sfx);
   n_live_t n = { 0, 0 };
   leaselock_error_t err;
   if (!leaselock_list (c, p, strlen (p), count_live, &n, &err))
      n.all = n.live = -1;
   return n;
}

/* Limit 3: three holders on three slots, the fourth BUSY; a release frees
 * a slot; a slot's fence grows with each holder. */
static void test_semaphore_basics (void)
{
   leaselock_client_t *c = client ("sem");
   CHECK (c);
   const char *k = key ("sem");
   leaselock_error_t err;
   leaselock_lease_t *l[4] = { 0 };
   for (int i = 0; i < 3; i++) {
      CHECK_OK (sem (c, k, 3, opts (5000, false), &l[i], &err), err);
      char want[300];
      snprintf (want, sizeof want, "%s/.slot/", k);
      CHECK (!strncmp (leaselock_lease_key (l[i]), want, strlen (want)));
      for (int j = 0; j < i; j++)
         CHECK (strcmp (leaselock_lease_key (l[i]), leaselock_lease_key (l[j])) != 0);
   }
   bool ok = sem (c, k, 3, opts (5000, false), &l[3], &err);
   CHECK_ERR (ok, err, LEASELOCK_BUSY, "3 live holder(s), the limit is 3");
   CHECK (l[3] == NULL);
   CHECK_EQ (records_under (c, k, "/.slot/").live, 3);
   for (int round = 0; round < 3; round++) {
      char freed[300];
      snprintf (freed, sizeof freed, "%s", leaselock_lease_key (l[1]));
      int64_t fence = leaselock_lease_fence (l[1]);
      CHECK_OK (leaselock_lease_release (l[1], &err), err);
      leaselock_lease_destroy (l[1]);
      CHECK_OK (sem (c, k, 3, opts (5000, false), &l[1], &err), err);
      CHECK (!strcmp (leaselock_lease_key (l[1]), freed)); /* the one free slot */
      CHECK (leaselock_lease_fence (l[1]) > fence);
   }
   for (int i = 0; i < 3; i++)
      leaselock_lease_destroy (l[i]);
   CHECK_EQ (records_under (c, k, "/.slot/").live, 0);
   leaselock_client_destroy (c);
}

/* A limit lowered from 3 to 1 while 2 are held: no new holder until the
 * live ones number fewer than 1, then one. */
static void test_semaphore_lowered_limit (void)
{
   leaselock_client_t *a = client ("sem-a"), *b = client ("sem-b");
   CHECK (a && b);
   const char *k = key ("sem-lower");
   leaselock_error_t err;
   leaselock_lease_t *h[3], *h1 = NULL, *h2 = NULL, *n = NULL;
   for (int i = 0; i < 3; i++)
      CHECK_OK (sem (a, k, 3, opts (10000, true), &h[i], &err), err);
   /* Slot 0, the only one under limit 1, is let go: the holders of slots
    * 1 and 2 must keep a new holder out all the same. */
   char slot0[300];
   snprintf (slot0, sizeof slot0, "%s/.slot/0", k);
   for (int i = 0; i < 3; i++) {
      if (!strcmp (leaselock_lease_key (h[i]), slot0))
         leaselock_lease_destroy (h[i]);
      else if (!h1)
         h1 = h[i];
      else
         h2 = h[i];
   }
   CHECK (h1 && h2);
   for (int i = 0; i < 3; i++) {
      bool ok = sem (b, k, 1, opts (5000, false), &n, &err);
      CHECK_ERR (ok, err, LEASELOCK_BUSY, "2 live holder(s), the limit is 1");
   }
   CHECK_OK (leaselock_lease_release (h1, &err), err);
   bool ok = sem (b, k, 1, opts (5000, false), &n, &err);
   CHECK_ERR (ok, err, LEASELOCK_BUSY, "1 live holder(s), the limit is 1");
   leaselock_acquire_opts_t o = opts (5000, false);
   o.timeout_ms = 200;
   ok = sem (b, k, 1, o, &n, &err);
   CHECK_ERR (ok, err, LEASELOCK_TIMEOUT, "waiting for a slot of the semaphore");
   CHECK_OK (leaselock_lease_release (h2, &err), err);
   CHECK_OK (sem (b, k, 1, opts (5000, false), &n, &err), err);
   leaselock_lease_destroy (h1);
   leaselock_lease_destroy (h2);
   ok = sem (a, k, 3, opts (5000, false), &h1, &err);
   CHECK_OK (ok, err); /* under limit 3 there is room beside it */
   CHECK_EQ (records_under (a, k, "/.slot/").live, 2);
   leaselock_lease_destroy (h1);
   leaselock_lease_destroy (n);
   leaselock_client_destroy (a);
   leaselock_client_destroy (b);
}

/* A holder whose lease expires (no renewal) frees its slot; a waiter
 * gets in then, within its timeout. */
static void test_semaphore_expiry (void)
{
   leaselock_client_t *a = client ("sem-a"), *b = client ("sem-b");
   CHECK (a && b);
   const char *k = key ("sem-expiry");
   leaselock_error_t err;
   leaselock_lease_t *la, *lb = NULL;
   CHECK_OK (sem (a, k, 1, opts (300, false), &la, &err), err);
   bool ok = sem (b, k, 1, opts (5000, false), &lb, &err);
   CHECK_ERR (ok, err, LEASELOCK_BUSY, "1 live holder(s)");
   leaselock_acquire_opts_t o = opts (5000, false);
   o.timeout_ms = 10000;
   CHECK_OK (sem (b, k, 1, o, &lb, &err), err);
   CHECK_EQ (leaselock_lease_state (la), LEASELOCK_STATE_LOST);
   CHECK (!strcmp (leaselock_lease_key (lb), leaselock_lease_key (la))); /* slot 0 */
   CHECK (leaselock_lease_fence (lb) > leaselock_lease_fence (la));
   leaselock_lease_destroy (la);
   leaselock_lease_destroy (lb);
   leaselock_client_destroy (a);
   leaselock_client_destroy (b);
}

/* A full semaphore: a one-try is BUSY, a wait times out (counted and
 * logged once), should_stop interrupts it; fair waiters queue at the gate. */
static void test_semaphore_timeout (void)
{
   leaselock_client_t *c = client ("sem-timeout");
   CHECK (c);
   const char *k = key ("sem-timeout");
   leaselock_error_t err;
   leaselock_lease_t *h, *l = NULL;
   CHECK_OK (sem (c, k, 1, opts (10000, true), &h, &err), err);
   leaselock_stats_t before, after;
   CHECK_OK (leaselock_client_stats (c, &before, &err), err);
   leaselock_acquire_opts_t o = opts (5000, false);
   o.timeout_ms = 300;
   bool ok = sem (c, k, 1, o, &l, &err);
   CHECK_ERR (ok, err, LEASELOCK_TIMEOUT, "timed out after");
   CHECK (strstr (err.message, k));
   CHECK_OK (leaselock_client_stats (c, &after, &err), err);
   CHECK_EQ (after.timeouts - before.timeouts, 1);
   CHECK_EQ (after.waits - before.waits, 1);
   static atomic_bool stop;
   atomic_store (&stop, true);
   o.timeout_ms = -1;
   o.should_stop = stop_now;
   o.should_stop_data = &stop;
   ok = sem (c, k, 1, o, &l, &err);
   CHECK_ERR (ok, err, LEASELOCK_INTERRUPTED, "interrupted");
   const ll_backend_t *b = ll_backend_for_uri (URI, &(leaselock_error_t){ 0 });
   if (b && b->queue_join) {
      o = opts (5000, false);
      o.fair = true;
      o.timeout_ms = 200;
      ok = sem (c, k, 1, o, &l, &err);
      CHECK_ERR (ok, err, LEASELOCK_TIMEOUT, "timed out");
      CHECK_OK (leaselock_lease_release (h, &err), err);
      CHECK_OK (sem (c, k, 1, o, &l, &err), err);
      CHECK_EQ (records_under (c, k, "/.sem/fair").live, 0); /* the gate was let go */
   }
   leaselock_lease_destroy (h);
   leaselock_lease_destroy (l);
   leaselock_client_destroy (c);
}

/* Bad arguments: INVALID before any I/O, the message naming the argument. */
static void test_modes_bad_arguments (void)
{
   leaselock_client_t *c = client ("modes-bad");
   CHECK (c);
   leaselock_error_t err;
   leaselock_lease_t *l = (leaselock_lease_t *)&err;
   leaselock_acquire_opts_t o = opts (1000, false);
   bool ok = leaselock_semaphore_acquire (NULL, "k", 1, 3, &o, &l, &err);
   CHECK_ERR (ok, err, LEASELOCK_INVALID, "client is NULL");
   CHECK (l == NULL);
   ok = leaselock_semaphore_acquire (c, "k", 1, 3, &o, NULL, &err);
   CHECK_ERR (ok, err, LEASELOCK_INVALID, "lease (the out parameter) is NULL");
   ok = sem (c, "k", 0, o, &l, &err);
   CHECK_ERR (ok, err, LEASELOCK_INVALID, "limit must be 1 to 1000 (got 0)");
   ok = sem (c, "k", LEASELOCK_SEMAPHORE_MAX + 1, o, &l, &err);
   CHECK_ERR (ok, err, LEASELOCK_INVALID, "limit must be 1 to 1000 (got 1001)");
   ok = sem (c, "", 3, o, &l, &err);
   CHECK_ERR (ok, err, LEASELOCK_INVALID, "key");
   char long_key[LEASELOCK_KEY_MAX + 1];
   memset (long_key, 'k', sizeof long_key - 1);
   long_key[246] = '\0';
   ok = sem (c, long_key, 3, o, &l, &err);
   CHECK_ERR (ok, err, LEASELOCK_INVALID, "key is 246 bytes: a semaphore adds up to 10 bytes");
   long_key[245] = '\0';
   ok = sem (c, long_key, 3, opts (0, false), &l, &err);
   CHECK_ERR (ok, err, LEASELOCK_INVALID, "ttl");
   long_key[217] = '\0';
   ok = rw (c, long_key, LEASELOCK_SHARED, o, &l, &err);
   CHECK_ERR (ok, err, LEASELOCK_INVALID, "key is 217 bytes: a read-write lock adds up to 39");
   ok = rw (c, "k", (leaselock_rw_mode_t)3, o, &l, &err);
   CHECK_ERR (ok, err, LEASELOCK_INVALID, "mode must be LEASELOCK_SHARED or LEASELOCK_EXCLUSIVE");
   ok = leaselock_rwlock_acquire (NULL, "k", 1, LEASELOCK_SHARED, &o, &l, &err);
   CHECK_ERR (ok, err, LEASELOCK_INVALID, "client is NULL");
   leaselock_acquire_opts_t bad = o;
   bad.min_hold_ms = -1;
   ok = rw (c, "k", LEASELOCK_EXCLUSIVE, bad, &l, &err);
   CHECK_ERR (ok, err, LEASELOCK_INVALID, "min_hold");
   bad = o;
   bad.timeout_ms = LEASELOCK_TTL_MAX_MS + 1;
   ok = sem (c, "k", 2, bad, &l, &err);
   CHECK_ERR (ok, err, LEASELOCK_INVALID, "timeout must be at most 30 days");
   leaselock_stats_t st;
   CHECK_OK (leaselock_client_stats (c, &st, &err), err);
   CHECK_EQ (st.requests, 0); /* nothing reached the database */
   leaselock_client_close (c, false, NULL);
   ok = sem (c, "k", 2, o, &l, &err);
   CHECK_ERR (ok, err, LEASELOCK_INVALID, "the client is closed");
   leaselock_client_destroy (c);
}

/* Readers share; a writer is kept out while they hold (its one try
 * leaves the exclusive record free again), gets in once they left, and
 * keeps readers out while it holds; writers' fences grow. */
static void test_rwlock_basics (void)
{
   leaselock_client_t *a = client ("rw-a"), *b = client ("rw-b");
   CHECK (a && b);
   const char *k = key ("rw");
   leaselock_error_t err;
   leaselock_lease_t *r1, *r2, *w = NULL, *w2 = NULL, *r3 = NULL;
   CHECK_OK (rw (a, k, LEASELOCK_SHARED, opts (5000, false), &r1, &err), err);
   CHECK_OK (rw (b, k, LEASELOCK_SHARED, opts (5000, false), &r2, &err), err);
   char want[300];
   snprintf (want, sizeof want, "%s/.rw/r/", k);
   CHECK (!strncmp (leaselock_lease_key (r1), want, strlen (want)));
   CHECK_EQ (strlen (leaselock_lease_key (r1)), strlen (want) + 32);
   CHECK (strcmp (leaselock_lease_key (r1), leaselock_lease_key (r2)) != 0);
   bool ok = rw (b, k, LEASELOCK_EXCLUSIVE, opts (5000, false), &w, &err);
   CHECK_ERR (ok, err, LEASELOCK_BUSY, "2 reader(s) inside");
   CHECK (w == NULL);
   CHECK_EQ (records_under (a, k, "/.rw/w").live, 0);
   CHECK_OK (rw (b, k, LEASELOCK_SHARED, opts (5000, false), &r3, &err), err);
   leaselock_lease_destroy (r1);
   leaselock_lease_destroy (r2);
   leaselock_lease_destroy (r3);
   CHECK_OK (rw (b, k, LEASELOCK_EXCLUSIVE, opts (5000, false), &w, &err), err);
   snprintf (want, sizeof want, "%s/.rw/w", k);
   CHECK (!strcmp (leaselock_lease_key (w), want));
   ok = rw (a, k, LEASELOCK_SHARED, opts (5000, false), &r1, &err);
   CHECK_ERR (ok, err, LEASELOCK_BUSY, "a writer is in or next");
   ok = rw (a, k, LEASELOCK_EXCLUSIVE, opts (5000, false), &w2, &err);
   CHECK_ERR (ok, err, LEASELOCK_BUSY, "held by another owner");
   CHECK_EQ (records_under (a, k, "/.rw/r/").live, 0); /* the refused reader left */
   int64_t fence = leaselock_lease_fence (w);
   leaselock_lease_destroy (w);
   CHECK_OK (rw (a, k, LEASELOCK_EXCLUSIVE, opts (5000, false), &w2, &err), err);
   CHECK (leaselock_lease_fence (w2) > fence);
   leaselock_lease_destroy (w2);
   leaselock_client_destroy (a);
   leaselock_client_destroy (b);
}

/* A reader that waits for a writer gets in once the writer releases. */
typedef struct
{
   const char *key;
   leaselock_rw_mode_t mode;
   int64_t timeout_ms;
   atomic_bool stop;
   atomic_int grants, failures;
   atomic_int inside; /* readers between their acquire and release */
   leaselock_lease_t *lease;
   leaselock_error_t err;
} rw_job_t;

static void *rw_one (void *arg)
{
   rw_job_t *j = arg;
   leaselock_client_t *c = client ("rw-one");
   leaselock_acquire_opts_t o = opts (5000, false);
   o.timeout_ms = j->timeout_ms;
   if (c && rw (c, j->key, j->mode, o, &j->lease, &j->err))
      atomic_fetch_add (&j->grants, 1);
   leaselock_lease_destroy (j->lease);
   leaselock_client_destroy (c);
   return NULL;
}

static void test_rwlock_reader_waits (void)
{
   leaselock_client_t *c = client ("rw-w");
   CHECK (c);
   rw_job_t j = { .key = key ("rw-wait"), .mode = LEASELOCK_SHARED, .timeout_ms = 20000 };
   leaselock_error_t err;
   leaselock_lease_t *w;
   CHECK_OK (rw (c, j.key, LEASELOCK_EXCLUSIVE, opts (10000, true), &w, &err), err);
   pthread_t th;
   pthread_create (&th, NULL, rw_one, &j);
   t_sleep (200);
   CHECK_EQ (atomic_load (&j.grants), 0);
   CHECK_OK (leaselock_lease_release (w, &err), err);
   pthread_join (th, NULL);
   CHECK_OK (atomic_load (&j.grants) == 1, j.err);
   leaselock_lease_destroy (w);
   leaselock_client_destroy (c);
}

/* Readers that keep taking and releasing (threads, and processes on the
 * real backends) never starve a writer: it gets in within its timeout. */
static void *reader_stream (void *arg)
{
   rw_job_t *j = arg;
   leaselock_client_t *c = client ("rw-stream");
   leaselock_acquire_opts_t o = opts (5000, false);
   o.timeout_ms = 30000;
   while (c && !atomic_load (&j->stop)) {
      leaselock_lease_t *l;
      leaselock_error_t err;
      if (!rw (c, j->key, LEASELOCK_SHARED, o, &l, &err)) {
         atomic_fetch_add (&j->failures, 1);
         fprintf (stderr, "    reader: %s\n", err.message);
         break;
      }
      atomic_fetch_add (&j->grants, 1);
      atomic_fetch_add (&j->inside, 1);
      t_sleep (20);
      atomic_fetch_sub (&j->inside, 1);
      leaselock_lease_destroy (l);
   }
   leaselock_client_destroy (c);
   return NULL;
}

static void test_rwlock_writer_not_starved (void)
{
   enum
   {
      N = 3,
      KIDS = 2
   };
   rw_job_t *j = mmap (NULL, sizeof *j, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
   CHECK (j != MAP_FAILED);
   memset (j, 0, sizeof *j);
   j->key = key ("rw-starve");
   pid_t kids[KIDS] = { 0 };
   fflush (NULL);
   /* The processes first: a fork while this process's reader threads
    * allocate can leave the child a locked allocator (AddressSanitizer's
    * is not fork-safe). */
   for (int i = 0; !FAKE && i < KIDS; i++) /* the fake database lives in one process */
      if ((kids[i] = fork ()) == 0) {
         reader_stream (j);
         _exit (0);
      }
   pthread_t th[N];
   for (int i = 0; i < N; i++)
      pthread_create (&th[i], NULL, reader_stream, j);
   while (atomic_load (&j->grants) < 10 && !atomic_load (&j->failures))
      t_sleep (5);
   leaselock_client_t *c = client ("rw-writer");
   leaselock_acquire_opts_t o = opts (10000, true);
   o.timeout_ms = 20000;
   leaselock_lease_t *w = NULL;
   leaselock_error_t err;
   bool ok = c && rw (c, j->key, LEASELOCK_EXCLUSIVE, o, &w, &err);
   /* Not the readers' records: a reader that is backing off has one live
    * for a moment. */
   int during = ok ? atomic_load (&j->inside) : -1;
   t_sleep (20);
   during = ok && during == 0 ? atomic_load (&j->inside) : during;
   leaselock_lease_destroy (w);
   atomic_store (&j->stop, true);
   for (int i = 0; i < N; i++)
      pthread_join (th[i], NULL);
   for (int i = 0; i < KIDS; i++)
      if (kids[i] > 0)
         waitpid (kids[i], NULL, 0);
   CHECK_OK (ok, err);
   CHECK_EQ (during, 0); /* no reader inside with the writer */
   CHECK_EQ (atomic_load (&j->failures), 0);
   leaselock_client_destroy (c);
   munmap (j, sizeof *j);
}

/* A writer that times out waiting for readers lets the exclusive record go
 * (a reader gets in at once); released readers' records get pruned. */
static void test_rwlock_writer_timeout (void)
{
   leaselock_client_t *c = client ("rw-to");
   CHECK (c);
   const char *k = key ("rw-timeout");
   leaselock_error_t err;
   leaselock_lease_t *r, *w = NULL, *r2;
   CHECK_OK (rw (c, k, LEASELOCK_SHARED, opts (10000, true), &r, &err), err);
   leaselock_acquire_opts_t o = opts (5000, false);
   o.timeout_ms = 300;
   bool ok = rw (c, k, LEASELOCK_EXCLUSIVE, o, &w, &err);
   CHECK_ERR (ok, err, LEASELOCK_TIMEOUT, "waiting for the readers to leave");
   CHECK (w == NULL);
   CHECK_EQ (records_under (c, k, "/.rw/w").live, 0);
   CHECK_OK (rw (c, k, LEASELOCK_SHARED, opts (5000, false), &r2, &err), err);
   leaselock_lease_destroy (r2);
   /* should_stop ends the drain the same way. */
   static atomic_bool stop;
   atomic_store (&stop, true);
   o.timeout_ms = -1;
   o.should_stop = stop_now;
   o.should_stop_data = &stop;
   ok = rw (c, k, LEASELOCK_EXCLUSIVE, o, &w, &err);
   CHECK_ERR (ok, err, LEASELOCK_INTERRUPTED, "interrupted");
   CHECK_EQ (records_under (c, k, "/.rw/w").live, 0);
   leaselock_lease_destroy (r);
   /* A released reader deletes its record, unless a min_hold kept it
    * (as one that died leaves it): a reader prunes now and then too, so go
    * on until 16 dead records wait. */
   leaselock_acquire_opts_t kept = opts (5000, false);
   kept.min_hold_ms = 50;
   for (int i = 0; i < 200 && records_under (c, k, "/.rw/r/").all < 16; i++) {
      CHECK_OK (rw (c, k, LEASELOCK_SHARED, kept, &r, &err), err);
      leaselock_lease_destroy (r);
   }
   CHECK (records_under (c, k, "/.rw/r/").all >= 16);
   t_sleep (100); /* the last ones' min_hold runs out */
   CHECK_OK (rw (c, k, LEASELOCK_EXCLUSIVE, opts (5000, false), &w, &err), err);
   n_live_t n = records_under (c, k, "/.rw/r/");
   CHECK_EQ (n.all, 0); /* 16 or more dead records: the writer pruned them */
   leaselock_lease_destroy (w);
   leaselock_client_destroy (c);
}

/* Statements the client has sent so far. */
static uint64_t requests (leaselock_client_t *c)
{
   leaselock_stats_t st;
   return leaselock_client_stats (c, &st, NULL) ? st.requests : 0;
}

/* Uncontended, each mode costs one statement more than a plain lock: the
 * take, the read of the others' records, the release. */
static void test_modes_round_trips (void)
{
   leaselock_client_t *c = client ("modes-rt");
   CHECK (c);
   leaselock_error_t err;
   leaselock_lease_t *l;
   const char *k = key ("modes-rt");
   uint64_t n = requests (c);
   CHECK_OK (sem (c, k, 5, opts (5000, false), &l, &err), err);
   CHECK_OK (leaselock_lease_release (l, &err), err);
   leaselock_lease_destroy (l);
   CHECK_EQ (requests (c) - n, 3);
   n = requests (c);
   CHECK_OK (rw (c, k, LEASELOCK_EXCLUSIVE, opts (5000, false), &l, &err), err);
   CHECK_OK (leaselock_lease_release (l, &err), err);
   leaselock_lease_destroy (l);
   CHECK_EQ (requests (c) - n, 3);
   n = requests (c);
   CHECK_OK (rw (c, k, LEASELOCK_SHARED, opts (5000, false), &l, &err), err);
   CHECK_OK (leaselock_lease_release (l, &err), err);
   leaselock_lease_destroy (l);
   uint64_t d = requests (c) - n;
   CHECK (d == 3 || d == 4); /* one reader in 64 prunes the dead readers' records */
   leaselock_client_destroy (c);
}

/* What leaselock_lock_inspect saw: a copy of the lock's counts. */
typedef struct
{
   int calls;
   leaselock_lock_mode_t mode;
   char state[16], key[LEASELOCK_KEY_MAX + 1];
   int64_t live, slots, readers, n_holders, fence, queued;
   bool writer;
} seen_lock_t;

static bool see_lock (const leaselock_lock_info_t *l, void *ud)
{
   seen_lock_t *s = ud;
   s->calls++;
   s->mode = l->mode;
   snprintf (s->state, sizeof s->state, "%s", l->state);
   snprintf (s->key, sizeof s->key, "%s", l->key);
   s->live = l->live;
   s->slots = l->slots;
   s->readers = l->readers;
   s->writer = l->writer;
   s->n_holders = (int64_t)l->n_holders;
   s->fence = l->record ? l->record->fence : 0;
   s->queued = l->queued;
   return true;
}

/* The lock k as leaselock_lock_inspect calls back once (calls -1 on a
 * failure, or a second call). */
static seen_lock_t inspect_lock (leaselock_client_t *c, const char *k, bool *found)
{
   seen_lock_t s = { 0 };
   leaselock_error_t err;
   if (!leaselock_lock_inspect (c, k, strlen (k), see_lock, &s, found, &err) ||
       s.calls != (*found ? 1 : 0))
      s.calls = -1;
   return s;
}

/* A semaphore's and a read-write lock's records are one lock to inspect
 * (held, its holders counted), a mode's record named by its own key is
 * itself, and a released reader leaves no record behind. */
static void test_lock_inspect_modes (void)
{
   leaselock_client_t *c = client ("lock-info");
   CHECK (c);
   leaselock_error_t err;
   leaselock_lease_t *s1, *s2, *r[3], *w;
   const char *k = key ("info-sem");
   bool found = true;
   char near[2][300];
   snprintf (near[0], sizeof near[0], "%sx", k); /* keys that start with k */
   snprintf (near[1], sizeof near[1], "%s/child", k);
   for (int i = 0; i < 2; i++) {
      CHECK_OK (acq (c, near[i], opts (5000, false), &s1, &err), err);
      leaselock_lease_destroy (s1);
   }
   seen_lock_t s = inspect_lock (c, k, &found);
   CHECK (!found && s.calls == 0);
   CHECK_OK (sem (c, k, 3, opts (5000, false), &s1, &err), err);
   CHECK_OK (sem (c, k, 3, opts (5000, false), &s2, &err), err);
   s = inspect_lock (c, k, &found);
   CHECK (found && s.mode == LEASELOCK_MODE_SEMAPHORE && !strcmp (s.state, "held"));
   CHECK (!strcmp (s.key, k));
   CHECK_EQ (s.live, 2);
   CHECK_EQ (s.n_holders, 2);
   CHECK (s.slots >= 2);
   s = inspect_lock (c, leaselock_lease_key (s1), &found);
   CHECK (found && s.mode == LEASELOCK_MODE_LOCK && s.n_holders == 1);
   leaselock_lease_destroy (s1);
   leaselock_lease_destroy (s2);
   s = inspect_lock (c, k, &found);
   CHECK (found && !strcmp (s.state, "free") && s.live == 0);

   const char *q = key ("info-rw");
   for (int i = 0; i < 10; i++) { /* released readers leave nothing */
      CHECK_OK (rw (c, q, LEASELOCK_SHARED, opts (5000, false), &r[0], &err), err);
      CHECK_OK (leaselock_lease_release (r[0], &err), err);
      leaselock_lease_destroy (r[0]);
   }
   CHECK_EQ (records_under (c, q, "/.rw/r/").all, 0);
   for (int i = 0; i < 3; i++)
      CHECK_OK (rw (c, q, LEASELOCK_SHARED, opts (5000, false), &r[i], &err), err);
   s = inspect_lock (c, q, &found);
   CHECK (found && s.mode == LEASELOCK_MODE_RWLOCK && !strcmp (s.state, "held"));
   CHECK (s.readers == 3 && !s.writer && s.n_holders == 3);
   for (int i = 0; i < 3; i++)
      leaselock_lease_destroy (r[i]);
   CHECK_EQ (records_under (c, q, "/.rw/r/").all, 0);
   CHECK_OK (rw (c, q, LEASELOCK_EXCLUSIVE, opts (5000, false), &w, &err), err);
   s = inspect_lock (c, q, &found);
   CHECK (found && s.writer && s.readers == 0 && s.n_holders == 1);
   CHECK_EQ (s.fence, leaselock_lease_fence (w));
   /* Who waits: read by SQLite, PostgreSQL and MySQL; not (yet) by the
    * fake backend and MongoDB. */
   bool says = !FAKE && strncmp (URI, "mongodb", 7) != 0;
   CHECK_EQ (s.queued, says ? 0 : -1);
   leaselock_lease_destroy (w);
   leaselock_client_destroy (c);
}

/* Fair semaphore waiters get slots in the order they arrived (through the
 * gate, the engine's fair queue), in other processes on the real
 * backends; a one-try fair acquire does not cut in. */
static void test_semaphore_fair_order (void)
{
   leaselock_client_t *a = client ("a");
   CHECK (a);
   leaselock_error_t err;
   leaselock_lease_t *la, *again = NULL;
   const char *k = key ("sem-fair");
   CHECK_OK (sem (a, k, 1, opts (60000, false), &la, &err), err);
   int ready[2], order[2];
   CHECK (pipe (ready) == 0 && pipe (order) == 0);
   fair_waiter_t f[N_FAIR];
   for (int i = 0; i < N_FAIR; i++) {
      f[i] = (fair_waiter_t){ .key = k,
                              .tag = (char)('A' + i),
                              .ready = ready[1],
                              .order = order[1],
                              .timeout_ms = 60000,
                              .limit = 1 };
      CHECK (fair_start (&f[i], ready[0]));
      t_sleep (3);
   }
   leaselock_acquire_opts_t o = opts (60000, false);
   o.fair = true;
   bool ok = sem (a, k, 1, o, &again, &err);
   CHECK_ERR (ok, err, LEASELOCK_BUSY, "");
   CHECK_OK (leaselock_lease_release (la, &err), err);
   char got[N_FAIR + 1] = { 0 };
   bool all = true;
   for (int i = 0; i < N_FAIR; i++)
      all = fair_join (&f[i]) && read (order[0], &got[i], 1) == 1 && all;
   CHECK (all);
   if (strcmp (got, "ABCD"))
      fprintf (stderr, "    granted in the order %s\n", got);
   CHECK (!strcmp (got, "ABCD"));
   close (ready[0]), close (ready[1]), close (order[0]), close (order[1]);
   leaselock_lease_destroy (la);
   leaselock_client_destroy (a);
}

/* A fair semaphore waiter that stops (SIGSTOP, a debugger, a paused VM)
 * while it holds the waiters' turn (key/.sem/fair) holds the others back
 * no longer than a fair lock's stopped waiter (LL_WAITER_KEEP_MS, 1 s):
 * once the slot is free, the next fair waiter gets it within a timeout of
 * 3 s (the gate's TTL was 5 s). Real processes only. */
static void test_semaphore_stopped_waiter (void)
{
   leaselock_client_t *a = client ("a");
   CHECK (a);
   leaselock_error_t err;
   leaselock_lease_t *la = NULL, *lb = NULL;
   const char *k = key ("sem-stopped");
   CHECK_OK (sem (a, k, 1, opts (60000, false), &la, &err), err);
   int ready[2], order[2];
   CHECK (pipe (ready) == 0 && pipe (order) == 0);
   fair_waiter_t f = {
      .key = k, .tag = 'S', .ready = ready[1], .order = order[1], .timeout_ms = 60000, .limit = 1
   };
   /* Waiting for a slot: it holds the gate. */
   bool started = fair_start (&f, ready[0]);
   bool stopped = started && kill (f.pid, SIGSTOP) == 0;
   int st = 0;
   stopped = stopped && waitpid (f.pid, &st, WUNTRACED) == f.pid && WIFSTOPPED (st);
   bool released = leaselock_lease_release (la, &err);
   leaselock_acquire_opts_t o = opts (60000, false);
   o.fair = true;
   o.timeout_ms = 3000;
   int64_t t0 = mono_ms ();
   bool ok = stopped && released && sem (a, k, 1, o, &lb, &err);
   int64_t waited = mono_ms () - t0;
   if (started) {
      kill (f.pid, SIGKILL); /* before any check: a check ends the test */
      waitpid (f.pid, &st, 0);
   }
   CHECK (stopped);
   CHECK (released);
   CHECK_OK (ok, err);
   fprintf (stderr, "    the next fair waiter got the slot in %lld ms\n", (long long)waited);
   close (ready[0]), close (ready[1]), close (order[0]), close (order[1]);
   leaselock_lease_destroy (la);
   leaselock_lease_destroy (lb);
   leaselock_client_destroy (a);
}

/* min_hold: a holder's released record keeps its place until the minimum
 * hold ends; a try that failed (a verify, a writer found) leaves nothing
 * behind, whatever the caller's min_hold. */
static void test_modes_min_hold (void)
{
   leaselock_client_t *c = client ("modes-hold");
   CHECK (c);
   const char *k = key ("modes-hold");
   leaselock_error_t err;
   leaselock_lease_t *l, *h[3], *n = NULL;
   leaselock_acquire_opts_t held = opts (5000, false);
   held.min_hold_ms = 400;
   CHECK_OK (sem (c, k, 1, held, &l, &err), err);
   leaselock_lease_destroy (l); /* released: slot 0 is held 400 ms more */
   bool ok = sem (c, k, 1, opts (5000, false), &n, &err);
   CHECK_ERR (ok, err, LEASELOCK_BUSY, "1 live holder(s)");
   t_sleep (600);
   CHECK_OK (sem (c, k, 1, opts (5000, false), &n, &err), err);
   leaselock_lease_destroy (n);
   /* Limit 3 fills slots 0-2; keep 1 and 2; a limit-1 try with a long
    * min_hold takes slot 0, fails its verify and leaves it free. */
   for (int i = 0; i < 3; i++)
      CHECK_OK (sem (c, k, 3, opts (5000, false), &h[i], &err), err);
   char slot0[300];
   snprintf (slot0, sizeof slot0, "%s/.slot/0", k);
   for (int i = 0; i < 3; i++)
      if (!strcmp (leaselock_lease_key (h[i]), slot0)) {
         leaselock_lease_destroy (h[i]);
         h[i] = NULL;
      }
   held.min_hold_ms = 60000;
   ok = sem (c, k, 1, held, &n, &err);
   CHECK_ERR (ok, err, LEASELOCK_BUSY, "the limit is 1");
   for (int i = 0; i < 3; i++)
      leaselock_lease_destroy (h[i]);
   CHECK_OK (sem (c, k, 1, opts (5000, false), &n, &err), err);
   leaselock_lease_destroy (n);
   /* A reader with a min_hold that found a writer leaves no record that
    * would hold the next writer back; a writer that timed out leaves the
    * exclusive record free for readers. */
   const char *q = key ("modes-hold-rw");
   CHECK_OK (rw (c, q, LEASELOCK_EXCLUSIVE, opts (5000, false), &l, &err), err);
   ok = rw (c, q, LEASELOCK_SHARED, held, &n, &err);
   CHECK_ERR (ok, err, LEASELOCK_BUSY, "a writer is in or next");
   leaselock_lease_destroy (l);
   CHECK_OK (rw (c, q, LEASELOCK_EXCLUSIVE, opts (5000, false), &l, &err), err);
   leaselock_lease_destroy (l);
   CHECK_OK (rw (c, q, LEASELOCK_SHARED, opts (5000, false), &l, &err), err);
   leaselock_acquire_opts_t w = held;
   w.timeout_ms = 200;
   ok = rw (c, q, LEASELOCK_EXCLUSIVE, w, &n, &err);
   CHECK_ERR (ok, err, LEASELOCK_TIMEOUT, "waiting for the readers");
   leaselock_lease_destroy (l);
   CHECK_OK (rw (c, q, LEASELOCK_SHARED, opts (5000, false), &l, &err), err);
   leaselock_lease_destroy (l);
   /* A writer's own min_hold keeps readers out after its release. */
   w.timeout_ms = 0;
   w.min_hold_ms = 400;
   CHECK_OK (rw (c, q, LEASELOCK_EXCLUSIVE, w, &l, &err), err);
   leaselock_lease_destroy (l);
   ok = rw (c, q, LEASELOCK_SHARED, opts (5000, false), &n, &err);
   CHECK_ERR (ok, err, LEASELOCK_BUSY, "a writer is in or next");
   leaselock_client_destroy (c);
}

/* ---- reentrant holds ----------------------------------------------------- */

/* The holder enters again: the record counts the holds, the lease and
 * its fence stay; each release lets one go until the last frees the key. */
static void test_reenter (void)
{
   leaselock_client_t *a = client ("a"), *b = client ("b");
   CHECK (a && b);
   leaselock_error_t err;
   leaselock_lease_t *la, *lb = NULL;
   const char *k = key ("reenter");
   CHECK_OK (acq (a, k, opts (60000, false), &la, &err), err);
   int64_t fence = leaselock_lease_fence (la);
   CHECK_EQ (leaselock_lease_holds (la), 1);
   CHECK_OK (leaselock_lease_reenter (la, &err), err);
   CHECK_OK (leaselock_lease_reenter (la, &err), err);
   CHECK_EQ (leaselock_lease_holds (la), 3);
   leaselock_record_t rec;
   bool found;
   CHECK_OK (leaselock_inspect (a, k, strlen (k), &rec, &found, &err), err);
   CHECK (found && rec.holds == 3 && rec.fence == fence);
   CHECK (!strcmp (rec.owner, leaselock_lease_owner (la)));
   CHECK_OK (leaselock_lease_release (la, &err), err);
   CHECK_OK (leaselock_lease_release (la, &err), err);
   CHECK_EQ (leaselock_lease_state (la), LEASELOCK_STATE_HELD);
   CHECK_EQ (leaselock_lease_holds (la), 1);
   bool ok = acq (b, k, opts (60000, false), &lb, &err);
   CHECK_ERR (ok, err, LEASELOCK_BUSY, "\" is held by ");
   CHECK_OK (leaselock_inspect (a, k, strlen (k), &rec, &found, &err), err);
   CHECK_EQ (rec.holds, 1);
   CHECK_OK (leaselock_lease_release (la, &err), err); /* the last */
   CHECK_EQ (leaselock_lease_state (la), LEASELOCK_STATE_RELEASED);
   CHECK_EQ (leaselock_lease_holds (la), 0);
   ok = leaselock_lease_reenter (la, &err);
   CHECK_ERR (ok, err, LEASELOCK_NOT_HELD, "no longer held");
   CHECK_OK (leaselock_inspect (a, k, strlen (k), &rec, &found, &err), err);
   CHECK_EQ (rec.holds, 0);
   CHECK_OK (acq (b, k, opts (60000, false), &lb, &err), err);
   CHECK (leaselock_lease_fence (lb) > fence);
   leaselock_lease_destroy (lb);
   leaselock_lease_destroy (la);
   leaselock_client_destroy (a);
   leaselock_client_destroy (b);
}

/* Destroying a lease releases the key whatever its holds. */
static void test_reenter_destroy (void)
{
   leaselock_client_t *a = client ("a"), *b = client ("b");
   CHECK (a && b);
   leaselock_error_t err;
   leaselock_lease_t *la, *lb = NULL;
   const char *k = key ("reenter-destroy");
   CHECK_OK (acq (a, k, opts (60000, false), &la, &err), err);
   CHECK_OK (leaselock_lease_reenter (la, &err), err);
   leaselock_lease_destroy (la);
   CHECK_OK (acq (b, k, opts (60000, false), &lb, &err), err);
   leaselock_lease_destroy (lb);
   leaselock_client_destroy (a);
   leaselock_client_destroy (b);
}

/* A holder known by its owner token alone (a supervised command's
 * process) enters and leaves; another owner cannot; bad arguments. */
static void test_hold_by_owner (void)
{
   leaselock_client_t *a = client ("a"), *b = client ("b");
   CHECK (a && b);
   leaselock_error_t err;
   leaselock_lease_t *la;
   const char *k = key ("hold-owner");
   size_t n = strlen (k);
   CHECK_OK (acq (a, k, opts (60000, false), &la, &err), err);
   const char *owner = leaselock_lease_owner (la);
   int64_t holds = 0;
   CHECK_OK (leaselock_hold (b, k, n, owner, +1, &holds, &err), err);
   CHECK_EQ (holds, 2);
   CHECK_OK (leaselock_hold (b, k, n, owner, -1, &holds, &err), err);
   CHECK_EQ (holds, 1);
   CHECK_OK (leaselock_hold (b, k, n, owner, -1, &holds, &err), err);
   CHECK_EQ (holds, 1); /* never the last: the lease's own release is */
   bool ok = leaselock_hold (b, k, n, "0123456789abcdef0123456789abcdef", +1, &holds, &err);
   CHECK_ERR (ok, err, LEASELOCK_NOT_HELD, "no longer held by this owner");
   ok = leaselock_hold (b, k, n, owner, 2, &holds, &err);
   CHECK_ERR (ok, err, LEASELOCK_INVALID, "delta must be +1 or -1");
   ok = leaselock_hold (b, k, n, "xyz", 1, &holds, &err);
   CHECK_ERR (ok, err, LEASELOCK_INVALID, "owner must be 32 lower-case hex");
   ok = leaselock_hold (b, k, n, NULL, 1, &holds, &err);
   CHECK_ERR (ok, err, LEASELOCK_INVALID, "owner must be");
   ok = leaselock_hold (b, k, n, owner, 1, NULL, &err);
   CHECK_ERR (ok, err, LEASELOCK_INVALID, "holds");
   ok = leaselock_hold (b, "", 0, owner, 1, &holds, &err);
   CHECK_ERR (ok, err, LEASELOCK_INVALID, "key");
   ok = leaselock_lease_reenter (NULL, &err);
   CHECK_ERR (ok, err, LEASELOCK_INVALID, "lease is NULL");
   CHECK_EQ (leaselock_lease_holds (NULL), 0);
   CHECK_OK (leaselock_lease_release (la, &err), err);
   ok = leaselock_hold (b, k, n, owner, +1, &holds, &err);
   CHECK_ERR (ok, err, LEASELOCK_NOT_HELD, "no longer held by this owner");
   leaselock_lease_destroy (la);
   leaselock_client_destroy (a);
   leaselock_client_destroy (b);
}

/* An expired lease cannot be entered again (the fake clock lets it run
 * out): the holder stops first. */
static void test_reenter_expired (void)
{
   leaselock_client_t *a = client ("a");
   CHECK (a);
   leaselock_error_t err;
   leaselock_lease_t *la;
   const char *k = key ("reenter-expired");
   CHECK_OK (acq (a, k, opts (200, false), &la, &err), err);
   t_sleep (300);
   bool ok = leaselock_lease_reenter (la, &err);
   CHECK_ERR (ok, err, LEASELOCK_LOST, "was lost");
   leaselock_lease_destroy (la);
   leaselock_client_destroy (a);
}

int main (int argc, char **argv)
{
   if (argc != 2) {
      fprintf (stderr, "usage: %s URI   (fake:// for the in-memory backend)\n", argv[0]);
      return 2;
   }
   tl_start ("contract", argv[1]);
   FAKE = !strncmp (URI, "fake://", 7);
   TTL_BOUNDED = !strncmp (URI, "mysql:", 6) || !strncmp (URI, "mariadb:", 8) ||
                 !strncmp (URI, "postgres", 8) || !strncmp (URI, "mongodb", 7);
   pthread_t tick;
   if (FAKE) {
      ll_backend_register (&fake_backend);
      ll_clock_use_fake (true);
      pthread_create (&tick, NULL, ticker, NULL);
   }

   RUN (test_acquire_release);
   RUN (test_owner_tokens_unique);
   RUN (test_busy_one_try);
   RUN (test_fences_grow);
   RUN (test_expiry_takeover);
   RUN (test_renew);
   RUN (test_renew_after_force_release);
   RUN_SLOW (test_min_hold);
   RUN (test_extend_min_hold);
   RUN (test_inspect);
   RUN (test_list_prefix);
   RUN (test_list_callback_reenters);
   RUN (test_force_release);
   RUN (test_destroy_releases);
   RUN (test_lease_outlives_client);
   RUN (test_blocking_timeout);
   RUN (test_key_in_messages);
   RUN (test_busy_names_holder);
   RUN (test_hostile_keys_verbatim);
   RUN (test_backoff_jitter);
   RUN (test_wait_sleep_policy);
   RUN_SLOW (test_local_handoff);
   RUN (test_local_wake_one);
   RUN (test_wait_until_known_end);
   if (!FAKE)
      RUN_SLOW (test_waiter_goes_first);
   RUN (test_wait_interrupted);
   RUN (test_wait_steps);
   RUN (test_fair_sleep_policy);
   RUN (test_reenter);
   RUN (test_reenter_destroy);
   RUN (test_hold_by_owner);
   RUN (test_reenter_expired);
   RUN (test_fair_order);
   RUN (test_fair_give_up_leaves);
   RUN (test_fair_uncontended);
   RUN (test_fair_first_takes_first);
   RUN_SLOW (test_fair_dead_waiter);
   RUN (test_wait_steps_fair);
   RUN (test_semaphore_fair_order);
   if (!FAKE)
      RUN (test_semaphore_stopped_waiter);
   if (FAKE)
      RUN (test_fair_unsupported);
   RUN_SLOW (test_auto_renew);
   if (!FAKE) {
      RUN_SLOW (test_renewal_rearms_earlier);
      RUN (test_pairs_leave_renewal_asleep);
      RUN (test_io_thread_when_due);
   }
   RUN (test_loss_on_takeover);
   if (FAKE) {
      RUN (test_loss_when_database_down);
      RUN (test_local_deadline_exact);
      RUN (test_lost_reply_resent);
      RUN (test_unknown_outcome_released);
      RUN (test_renew_race);
      RUN (test_release_lost_reply);
      RUN (test_loss_while_renewal_hangs);
      RUN_SLOW (test_fork_while_call_hangs);
      RUN (test_stuck_renewal_alone);
   }
   RUN (test_reacquire_same_owner);
   RUN (test_fork_child_cannot_release);
   RUN (test_fork_without_atfork_handlers);
   RUN_SLOW (test_close_keeps_leases_closed);
   RUN (test_close_releases_held);
   if (FAKE)
      RUN (test_close_release_fails);
   if (FAKE)
      RUN (test_destroy_during_close);
   if (FAKE)
      RUN (test_release_during_release);
   RUN_SLOW (test_close_stops_waiter);
   RUN (test_close_from_on_lost);
   RUN (test_bad_keys);
   RUN (test_bad_ttls);
   RUN (test_bad_labels_and_renew_ttls);
   RUN (test_null_arguments);
   RUN (test_prune_keeps_live);
   RUN_SLOW (test_prune_older_than);
   RUN (test_prune_bad_arguments);
   RUN (test_log_and_stats);
   RUN (test_log_below_level);
   RUN (test_log_loss);
   if (FAKE)
      RUN (test_renew_failed_hook);
   RUN (test_semaphore_basics);
   RUN (test_semaphore_lowered_limit);
   RUN (test_semaphore_expiry);
   RUN (test_semaphore_timeout);
   RUN (test_modes_bad_arguments);
   RUN (test_rwlock_basics);
   RUN (test_rwlock_reader_waits);
   RUN (test_rwlock_writer_not_starved);
   RUN (test_rwlock_writer_timeout);
   RUN (test_modes_round_trips);
   RUN (test_modes_min_hold);
   RUN (test_lock_inspect_modes);

   if (FAKE) {
      atomic_store (&ticker_stop, true);
      pthread_join (tick, NULL);
   }
   return tl_summary ("contract");
}
