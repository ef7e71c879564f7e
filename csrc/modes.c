/*
 * modes.c - counting semaphores and read-write locks, built on ordinary
 * leases through the engine's public calls only (acquire, inspect, list,
 * release, extend, prune): no backend knows of them, so they behave alike on every
 * backend, and each holder's lease is a full lease of its own record.
 *
 * Records (the suffixes are reserved: no other lock should be named so):
 *   key + "/.slot/<i>"        a semaphore's slot i, 0 <= i < limit
 *   key + "/.sem/fair"        the turn of fair semaphore waiters
 *   key + "/.rw/w"            a read-write lock's exclusive record
 *   key + "/.rw/r/<token>"    one shared holder (32 hex digits, new per
 *                             acquisition)
 *
 * "Live" is always the database's verdict at the read: expires_in_ms > 0,
 * which covers a held record and a released one still inside its
 * min_hold. Every read below is one statement on one server, so it sees
 * every write that completed before it was sent (linearizable enough).
 *
 * Waits poll with the engine's waiter backoff and jitter
 * (ll_wait_sleep_ms) and ask should_stop at least every STOP_POLL_MS. Only
 * waits on one record (a reader or writer waiting for the exclusive
 * record) go through a blocking leaselock_acquire, and get its local
 * wake-ups, reservation and fair queue. The others wait for any of
 * several records (a semaphore's slots, the readers' records), and the
 * engine wakes local waiters per key: they poll.
 */
#include "ll_internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#define SLOT_SFX LL_SLOT_SFX
#define GATE_SFX LL_GATE_SFX
#define W_SFX LL_W_SFX
#define R_SFX LL_R_SFX
#define SLOT_DIGITS_MAX 3 /* LEASELOCK_SEMAPHORE_MAX - 1 = 999 */
#define SEM_SFX_MAX (sizeof SLOT_SFX - 1 + SLOT_DIGITS_MAX)
#define RW_SFX_MAX (sizeof R_SFX - 1 + LEASELOCK_OWNER_LEN)
#define STOP_POLL_MS 100
/* A fair semaphore waiter holds the gate while it waits for a slot; the
 * gate is auto-renewed, so its TTL only bounds how long a waiter that died
 * or stopped holds the others back: no longer than a fair lock's waiter
 * (LL_WAITER_KEEP_MS, the bound of every mode). */
#define GATE_TTL_MS LL_WAITER_KEEP_MS
/* A reader waiting for a writer takes the exclusive record for the time
 * of one statement (PASS below); this TTL bounds it if that reader dies
 * or stops there. A statement slower than that only makes the reader try
 * again (its release of the pass fails: rw_reader_pass). */
#define PASS_TTL_MS LL_WAITER_KEEP_MS
/* Released readers leave expired records: a writer's drain prunes them
 * when it has to wait anyway, or when they are this many; one reader
 * acquire in READER_PRUNE_EVERY prunes after it succeeded. */
#define PRUNE_AT 16
#define READER_PRUNE_EVERY 64

/* Uniform in [0, n). */
static int64_t random_below (int64_t n)
{
   uint32_t r = 0;
   if (getrandom (&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r)
      r = (uint32_t)ll_now_ms () * 2654435761u;
   return (int64_t)(r % (uint32_t)n);
}

/* key + suffix into buf (LEASELOCK_KEY_MAX + 1 bytes; the callers checked
 * that it fits). Returns the length. */
static size_t record_key (char *buf, const char *key, size_t key_len, const char *sfx)
{
   size_t n = strlen (sfx);
   memcpy (buf, key, key_len);
   memcpy (buf + key_len, sfx, n);
   buf[key_len + n] = '\0';
   return key_len + n;
}

/* The checks of leaselock_acquire plus the mode's own, before any I/O.
 * sfx_max is the mode's longest record suffix, what its name. */
static bool mode_args_ok (leaselock_client_t *c, const char *key, size_t key_len, size_t sfx_max,
                          const char *what, const leaselock_acquire_opts_t *o,
                          leaselock_lease_t **lease, leaselock_error_t *err)
{
   if (!ll_acquire_target_ok (c, key, key_len, lease, err))
      return false;
   if (key_len + sfx_max > LEASELOCK_KEY_MAX)
      return ll_error_set (err, LEASELOCK_INVALID,
                           "key is %zu bytes: a %s adds up to %zu bytes to it for its records, "
                           "so it may have at most %zu",
                           key_len, what, sfx_max, (size_t)LEASELOCK_KEY_MAX - sfx_max);
   /* leaselock_wait_new checks exactly what leaselock_acquire checks (ttl,
    * min_hold, timeout, a closed client, fair on a backend without
    * queues), with the same messages and no I/O; given up at once, the
    * wait counts and logs nothing. */
   char rk[LEASELOCK_KEY_MAX + 1];
   size_t rk_len = record_key (rk, key, key_len, W_SFX);
   leaselock_wait_t *w = leaselock_wait_new (c, rk, rk_len, o, err);
   if (!w)
      return false;
   leaselock_wait_destroy (w);
   ll_error_clear (err);
   return true;
}

/* ---- waiting between tries ---------------------------------------------- */

/* One blocking call of a mode: its deadline and the wait it counts. */
typedef struct mode_wait
{
   leaselock_client_t *c;
   const char *key; /* the user's key, for events and messages */
   size_t key_len;
   const leaselock_acquire_opts_t *o;
   int64_t start, until; /* local ms; until unused when timeout_ms < 0 */
   int64_t waited_from;
   int attempt; /* sleeps so far */
   bool timed_out;
} mode_wait_t;

static void mode_wait_init (mode_wait_t *w, leaselock_client_t *c, const char *key, size_t key_len,
                            const leaselock_acquire_opts_t *o)
{
   *w = (mode_wait_t){ .c = c, .key = key, .key_len = key_len, .o = o };
   w->start = ll_now_ms ();
   w->until = w->start + o->timeout_ms;
}

/* The time left for a blocking call inside the wait: < 0 forever, 0 when
 * the deadline has passed (one try). */
static int64_t mode_left (const mode_wait_t *w)
{
   if (w->o->timeout_ms < 0)
      return -1;
   int64_t left = w->until - ll_now_ms ();
   return left > 0 ? left : 0;
}

/* Sleeps until t (local ms) on a condition nobody signals (the fake
 * clock's waits re-check its time), asking should_stop every
 * STOP_POLL_MS. False when it asked to stop. */
static bool sleep_until (int64_t t, const leaselock_acquire_opts_t *o)
{
   pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
   pthread_cond_t cond;
   ll_cond_init (&cond);
   bool stop = false;
   pthread_mutex_lock (&mu);
   for (int64_t now = ll_now_ms (); now < t && !stop; now = ll_now_ms ()) {
      int64_t slice = o->should_stop && t > now + STOP_POLL_MS ? now + STOP_POLL_MS : t;
      ll_cond_wait_until (&cond, &mu, slice);
      stop = o->should_stop && o->should_stop (o->should_stop_data);
   }
   pthread_mutex_unlock (&mu);
   pthread_cond_destroy (&cond);
   pthread_mutex_destroy (&mu);
   return !stop;
}

/* The sleep before the next try, what being what the call waits for (for
 * the messages). False with TIMEOUT once the deadline has passed,
 * INTERRUPTED or INVALID (the client was closed). The first one counts
 * and logs the wait, as a blocking acquire does. */
static bool mode_sleep (mode_wait_t *w, const char *what, leaselock_error_t *err)
{
   int64_t now = ll_now_ms ();
   ll_obs_t *obs = ll_client_obs (w->c);
   if (w->o->timeout_ms >= 0 && now >= w->until) {
      w->timed_out = true;
      return ll_error_set (err, LEASELOCK_TIMEOUT, "timed out after %lld ms waiting for %s \"%s\"",
                           (long long)(now - w->start), what, LL_KEY_SHOWN (w->key, w->key_len));
   }
   if (w->attempt == 0) {
      w->waited_from = now;
      ll_count (obs, LL_ST_WAITS, 1);
      LL_LOG (obs, LEASELOCK_LOG_DEBUG, "wait", w->key, w->key_len, 0, LEASELOCK_BUSY,
              "waiting for %s", what);
   }
   int64_t t = now + ll_wait_sleep_ms (w->attempt++, now - w->waited_from, false, 0);
   if (w->o->timeout_ms >= 0 && t > w->until)
      t = w->until;
   if (!sleep_until (t, w->o))
      return ll_error_set (err, LEASELOCK_INTERRUPTED, "the wait for %s \"%s\" was interrupted",
                           what, LL_KEY_SHOWN (w->key, w->key_len));
   if (leaselock_client_closed (w->c))
      return ll_error_set (err, LEASELOCK_INVALID, "the client was closed while waiting for \"%s\"",
                           LL_KEY_SHOWN (w->key, w->key_len));
   return true;
}

/* Counts the end of a call that waited in mode_sleep; returns ok. */
static bool mode_done (mode_wait_t *w, bool ok, const leaselock_error_t *err)
{
   ll_obs_t *obs = ll_client_obs (w->c);
   if (w->attempt > 0)
      ll_count (obs, LL_ST_WAIT_MS, (uint64_t)(ll_now_ms () - w->waited_from));
   if (!ok && w->timed_out) {
      ll_count (obs, LL_ST_TIMEOUTS, 1);
      LL_LOG (obs, LEASELOCK_LOG_INFO, "timeout", w->key, w->key_len, 0, err->code, "%s",
              err->message);
   }
   return ok;
}

/* Releases and frees l, keeping err as it is. */
static void drop (leaselock_lease_t *l)
{
   leaselock_lease_release (l, NULL);
   leaselock_lease_destroy (l);
}

/* The tries take their records without the caller's min_hold, so that a
 * record let go after a try that failed (a verify, a writer found) is
 * free at once instead of blocking others for min_hold; the min_hold is
 * applied to the record the caller keeps, by an extend (one more
 * statement, only with a min_hold: it then counts from this extend,
 * leaselock_lease_extend). On failure the record is let go. */
static bool keep_min_hold (leaselock_lease_t **lease, int64_t min_hold_ms, leaselock_error_t *err)
{
   if (min_hold_ms == 0 || leaselock_lease_extend (*lease, 0, min_hold_ms, err))
      return true;
   drop (*lease);
   *lease = NULL;
   return false;
}

/* ---- semaphores ---------------------------------------------------------- */

/*
 * Acquire = take a free slot with an ordinary one-try acquire, then VERIFY:
 * list every record under key + "/.slot/" and count the live ones over all
 * slot indices (a holder started under an older, higher limit counts); if
 * they are more than limit, release the slot and wait.
 *
 * Why no more than limit verified holders are ever live at once: suppose
 * limit + 1 are. Let H be the one whose take came last. Every other one's
 * record was taken before H's take and is still live now, so it was live
 * throughout; H's verifying list was sent after its own take, hence after
 * every one of those takes, and a list sees every write completed before
 * it: it counted limit + 1 live records and H backed off. Contradiction.
 * Two racing acquirers may both back off (each sees the other), never
 * both pass. With one limit throughout, the slots alone keep the count
 * (there are limit of them); the verify is what makes a lowered limit
 * hold.
 */
typedef struct sem_call
{
   leaselock_client_t *c;
   const char *key;
   size_t key_len;
   int64_t limit;
   leaselock_acquire_opts_t one; /* the caller's opts, one try, not fair */
   char prefix[LEASELOCK_KEY_MAX + 1];
   size_t prefix_len;
   /* What the last list saw. */
   int64_t live;
   bool taken[LEASELOCK_SEMAPHORE_MAX]; /* live slots among [0, limit) */
} sem_call_t;

/* The slot index that rest (n bytes after the prefix) names, or -1: a
 * plain decimal below LEASELOCK_SEMAPHORE_MAX, so that another lock's
 * records under the prefix (key/.slot/1/.slot/0) are not counted. */
static int64_t slot_index (const char *rest, size_t n)
{
   if (n == 0 || n > SLOT_DIGITS_MAX || (n > 1 && rest[0] == '0'))
      return -1;
   int64_t i = 0;
   for (size_t k = 0; k < n; k++) {
      if (rest[k] < '0' || rest[k] > '9')
         return -1;
      i = i * 10 + (rest[k] - '0');
   }
   return i;
}

static bool sem_count (const leaselock_record_t *rec, void *ud)
{
   sem_call_t *s = ud;
   if (rec->key_len <= s->prefix_len || rec->expires_in_ms <= 0)
      return true;
   int64_t i = slot_index (rec->key + s->prefix_len, rec->key_len - s->prefix_len);
   if (i < 0)
      return true;
   s->live++;
   if (i < s->limit)
      s->taken[i] = true;
   return true;
}

/* One list of the slots: fills live and taken. */
static bool sem_list (sem_call_t *s, leaselock_error_t *err)
{
   s->live = 0;
   memset (s->taken, 0, sizeof s->taken);
   return leaselock_list (s->c, s->prefix, s->prefix_len, sem_count, s, err);
}

/* A free slot in [0, limit) as the last list saw it, at random among the
 * free ones (so that racing acquirers spread), or -1 when the live
 * holders number limit or more. */
static int64_t sem_pick (const sem_call_t *s)
{
   int64_t n_free = 0;
   for (int64_t i = 0; i < s->limit; i++)
      n_free += !s->taken[i];
   if (s->live >= s->limit || n_free == 0)
      return -1;
   int64_t k = random_below (n_free);
   for (int64_t i = 0; i < s->limit; i++)
      if (!s->taken[i] && k-- == 0)
         return i;
   return -1;
}

/* BUSY; mine: the last list counted the slot this call took and let go. */
static bool sem_busy (const sem_call_t *s, bool mine, leaselock_error_t *err)
{
   return ll_error_set (
     err, LEASELOCK_BUSY, "semaphore \"%s\": %lld live holder(s), the limit is %lld",
     LL_KEY_SHOWN (s->key, s->key_len), (long long)(s->live - mine), (long long)s->limit);
}

/* Takes slot i (one try), then verifies. *raced: the slot was taken by
 * someone else since it was chosen (worth another choice at once). */
static bool sem_take (sem_call_t *s, int64_t i, bool *raced, leaselock_lease_t **lease,
                      leaselock_error_t *err)
{
   char sk[LEASELOCK_KEY_MAX + 1];
   char sfx[sizeof SLOT_SFX + SLOT_DIGITS_MAX];
   snprintf (sfx, sizeof sfx, SLOT_SFX "%lld", (long long)i);
   size_t sk_len = record_key (sk, s->key, s->key_len, sfx);
   *raced = false;
   if (!ll_acquire_record (s->c, sk, sk_len, &s->one, lease, err)) {
      *raced = err->code == LEASELOCK_BUSY;
      return false;
   }
   /* The take precedes the list: the verify (the comment above). */
   if (!sem_list (s, err)) {
      drop (*lease);
      *lease = NULL;
      return false;
   }
   if (s->live <= s->limit)
      return true;
   drop (*lease);
   *lease = NULL;
   return sem_busy (s, true, err);
}

/* One round of tries: the slot chosen first (no list before it: the
 * uncontended acquire is one take and one list), else the free slots a
 * list shows, a few times while others race for them. BUSY when there
 * is nothing to take now. */
static bool sem_round (sem_call_t *s, bool first, leaselock_lease_t **lease, leaselock_error_t *err)
{
   bool raced = false;
   if (first && sem_take (s, random_below (s->limit), &raced, lease, err))
      return true;
   if (first && !raced)
      return false; /* an error, or the verify found too many */
   for (int races = 0; races < 3; races++) {
      if (!sem_list (s, err))
         return false;
      int64_t i = sem_pick (s);
      if (i < 0)
         return sem_busy (s, false, err);
      if (sem_take (s, i, &raced, lease, err))
         return true;
      if (!raced)
         return false;
   }
   return false; /* BUSY from the last take */
}

/* Tries until a slot is had or the wait ends. */
static bool sem_loop (sem_call_t *s, mode_wait_t *w, leaselock_lease_t **lease,
                      leaselock_error_t *err)
{
   for (bool first = true;; first = false) {
      if (sem_round (s, first, lease, err))
         return true;
      if (err->code != LEASELOCK_BUSY || w->o->timeout_ms == 0)
         return false;
      if (!mode_sleep (w, "a slot of the semaphore", err))
         return false;
   }
}

/* Fair mode: the semaphore's waiters take turns through the gate, an
 * ordinary fair acquire (order of arrival, the engine's queue); the one
 * holding it is the only fair waiter trying for slots. Acquirers that are
 * not fair do not queue: they may take a slot that frees first. */
static bool sem_gate (sem_call_t *s, leaselock_lease_t **gate, leaselock_error_t *err)
{
   leaselock_acquire_opts_t g;
   leaselock_acquire_opts_init (&g);
   g.ttl_ms = GATE_TTL_MS;
   g.timeout_ms = s->one.timeout_ms;
   g.fair = true;
   g.should_stop = s->one.should_stop;
   g.should_stop_data = s->one.should_stop_data;
   char gk[LEASELOCK_KEY_MAX + 1];
   size_t gk_len = record_key (gk, s->key, s->key_len, GATE_SFX);
   return ll_acquire_record (s->c, gk, gk_len, &g, gate, err);
}

/* The bound of a mode's call with opts for its steps (ll_mode_bound):
 * none of a one-try call (its steps are one-try calls too). */
static int64_t mode_bound_of (const leaselock_acquire_opts_t *o)
{
   if (o->timeout_ms == 0)
      return LL_MODE_NONE;
   return o->timeout_ms < 0 ? -1 : ll_real_now_ms () + o->timeout_ms;
}
bool leaselock_semaphore_acquire (leaselock_client_t *c, const char *key, size_t key_len,
                                  int64_t limit, const leaselock_acquire_opts_t *opts,
                                  leaselock_lease_t **lease, leaselock_error_t *error)
{
   ll_acquire_frame_t f;
   leaselock_error_t *err = ll_acquire_prologue (&f, error, &opts, lease);
   if (c && lease && (limit < 1 || limit > LEASELOCK_SEMAPHORE_MAX))
      return ll_error_set (err, LEASELOCK_INVALID, "limit must be 1 to %d (got %lld)",
                           LEASELOCK_SEMAPHORE_MAX, (long long)limit);
   if (!mode_args_ok (c, key, key_len, SEM_SFX_MAX, "semaphore", opts, lease, err))
      return false;
   sem_call_t *s = calloc (1, sizeof *s);
   if (!s)
      return ll_error_set (err, LEASELOCK_NOMEM, "out of memory");
   *s = (sem_call_t){ .c = c, .key = key, .key_len = key_len, .limit = limit, .one = *opts };
   s->prefix_len = record_key (s->prefix, key, key_len, SLOT_SFX);
   mode_wait_t w;
   mode_wait_init (&w, c, key, key_len, opts);
   leaselock_lease_t *gate = NULL;
   bool ok = !opts->fair || sem_gate (s, &gate, err);
   s->one.timeout_ms = 0;
   s->one.fair = false;
   s->one.min_hold_ms = 0;
   int64_t was = ll_mode_bound_set (mode_bound_of (opts));
   ok = ok && sem_loop (s, &w, lease, err) && keep_min_hold (lease, opts->min_hold_ms, err);
   ll_mode_bound_set (was);
   leaselock_lease_destroy (gate); /* releases it */
   free (s);
   return mode_done (&w, ok, err);
}

/* ---- read-write locks ------------------------------------------------------ */

/*
 * A reader takes its own record key + "/.rw/r/<token>", then inspects the
 * exclusive record key + "/.rw/w"; a writer takes the exclusive record,
 * then lists the readers' records and waits until none is live.
 *
 * Why a writer and a reader never hold at once (Dekker's argument, each
 * write and read one statement on one server): say reader R passed (its
 * inspect saw no live exclusive record) and writer W passed (its list saw
 * no live reader record of R). R's inspect did not see W's take, so it
 * came before it; W's list did not see R's take, so it came before that.
 * Then R's take < R's inspect < W's take < W's list < R's take: impossible.
 * At most one of them backs off (both may wait only when each saw the
 * other). A reader that waited takes its record while it holds the
 * exclusive record itself (PASS: no writer can hold it then), and keeps
 * that record only if its release of the exclusive record succeeds, which
 * proves it was held without a break until after the reader's take.
 *
 * No writer starves: from the moment a writer holds the exclusive record,
 * every new reader sees it and waits, so the writer waits only for the
 * readers already in. Writers exclude each other, get growing fences and
 * take turns through the exclusive record as any lease (reservation, fair
 * queue).
 */
typedef struct rw_call
{
   leaselock_client_t *c;
   const char *key;
   size_t key_len;
   const leaselock_acquire_opts_t *o;
   char wk[LEASELOCK_KEY_MAX + 1]; /* the exclusive record */
   size_t wk_len;
   char rp[LEASELOCK_KEY_MAX + 1]; /* the readers' prefix */
   size_t rp_len;
   /* What the last list of the readers saw. */
   int64_t live, expired;
} rw_call_t;

static bool rw_count (const leaselock_record_t *rec, void *ud)
{
   rw_call_t *r = ud;
   size_t n = rec->key_len - r->rp_len;
   /* Only a reader's record: 32 hex digits after the prefix. */
   if (rec->key_len <= r->rp_len || n != LEASELOCK_OWNER_LEN ||
       strspn (rec->key + r->rp_len, "0123456789abcdef") < n)
      return true;
   if (rec->expires_in_ms > 0)
      r->live++;
   else
      r->expired++;
   return true;
}

static bool rw_list_readers (rw_call_t *r, leaselock_error_t *err)
{
   r->live = r->expired = 0;
   return leaselock_list (r->c, r->rp, r->rp_len, rw_count, r, err);
}

/* Deletes the expired records of released readers; best effort (prune
 * never deletes a live one). */
static void rw_prune (rw_call_t *r)
{
   leaselock_prune (r->c, r->rp, r->rp_len, 0, NULL, NULL);
}

/* The writer's drain: waits until no reader record is live. */
static bool rw_drain (rw_call_t *r, mode_wait_t *w, leaselock_error_t *err)
{
   for (;;) {
      if (!rw_list_readers (r, err))
         return false;
      /* Pruning costs a round trip: only when the wait is on anyway, or
       * when enough dead records have piled up. */
      if (r->expired >= PRUNE_AT || (r->expired > 0 && r->live > 0))
         rw_prune (r);
      if (r->live == 0)
         return true;
      if (r->o->timeout_ms == 0)
         return ll_error_set (err, LEASELOCK_BUSY, "read-write lock \"%s\": %lld reader(s) inside",
                              LL_KEY_SHOWN (r->key, r->key_len), (long long)r->live);
      if (!mode_sleep (w, "the readers to leave the read-write lock", err))
         return false;
   }
}

static bool rw_writer (rw_call_t *r, leaselock_lease_t **lease, leaselock_error_t *err)
{
   mode_wait_t w;
   mode_wait_init (&w, r->c, r->key, r->key_len, r->o);
   /* Blocking, fair if asked, auto-renewed like any lease: it is the
    * lease the caller gets. */
   leaselock_acquire_opts_t o = *r->o;
   o.min_hold_ms = 0;
   if (!ll_acquire_record (r->c, r->wk, r->wk_len, &o, lease, err))
      return false;
   bool ok = rw_drain (r, &w, err);
   if (ok && leaselock_lease_state (*lease) != LEASELOCK_STATE_HELD)
      ok = ll_error_set (err, LEASELOCK_LOST,
                         "the exclusive record of \"%s\" was lost while readers left",
                         LL_KEY_SHOWN (r->key, r->key_len));
   if (!ok) {
      drop (*lease); /* a reader can get in again */
      *lease = NULL;
   }
   ok = ok && keep_min_hold (lease, r->o->min_hold_ms, err);
   return mode_done (&w, ok, err);
}

/* Whether the exclusive record is live (a writer holds it, or waits for
 * readers, or is inside its min_hold). */
static bool rw_writer_in (rw_call_t *r, bool *in, leaselock_error_t *err)
{
   leaselock_record_t rec;
   bool found = false;
   if (!leaselock_inspect (r->c, r->wk, r->wk_len, &rec, &found, err))
      return false;
   *in = found && rec.expires_in_ms > 0;
   return true;
}

/* A reader that found a writer: waits for the exclusive record with a
 * blocking acquire (woken by a local release, the reservation and fair
 * queue as any waiter), takes its own record while holding it, and lets
 * it go. *again: the exclusive record was not held throughout, so the
 * reader's record was dropped; try from the start. */
static bool rw_reader_pass (rw_call_t *r, const mode_wait_t *w, const leaselock_acquire_opts_t *one,
                            const char *rk, size_t rk_len, bool *again, leaselock_lease_t **lease,
                            leaselock_error_t *err)
{
   leaselock_acquire_opts_t p;
   leaselock_acquire_opts_init (&p);
   p.ttl_ms = r->o->ttl_ms < PASS_TTL_MS ? r->o->ttl_ms : PASS_TTL_MS;
   p.auto_renew = false;
   p.timeout_ms = mode_left (w);
   p.fair = r->o->fair;
   p.should_stop = r->o->should_stop;
   p.should_stop_data = r->o->should_stop_data;
   leaselock_lease_t *pass = NULL;
   *again = false;
   if (p.timeout_ms == 0 && r->o->timeout_ms != 0)
      return ll_error_set (err, LEASELOCK_TIMEOUT, "timed out waiting for the writer of \"%s\"",
                           LL_KEY_SHOWN (r->key, r->key_len));
   if (!ll_acquire_record (r->c, r->wk, r->wk_len, &p, &pass, err))
      return false;
   bool ok = ll_acquire_record (r->c, rk, rk_len, one, lease, err);
   if (ok)
      ll_lease_drop_on_release (*lease);
   leaselock_error_t rel;
   if (!leaselock_lease_release (pass, &rel) && ok) {
      drop (*lease);
      *lease = NULL;
      *again = rel.code != LEASELOCK_BACKEND;
      ok = *again ? false : ll_error_set (err, rel.code, "%s", rel.message);
   }
   leaselock_lease_destroy (pass);
   return ok;
}

static bool rw_reader (rw_call_t *r, leaselock_lease_t **lease, leaselock_error_t *err)
{
   mode_wait_t w;
   mode_wait_init (&w, r->c, r->key, r->key_len, r->o);
   char token[LEASELOCK_OWNER_LEN + 1];
   if (!ll_owner_new (token, err))
      return false;
   char sfx[sizeof R_SFX + LEASELOCK_OWNER_LEN];
   snprintf (sfx, sizeof sfx, R_SFX "%s", token);
   char rk[LEASELOCK_KEY_MAX + 1];
   size_t rk_len = record_key (rk, r->key, r->key_len, sfx);
   leaselock_acquire_opts_t one = *r->o;
   one.timeout_ms = 0;
   one.fair = false; /* its own record: nobody queues for it */
   one.min_hold_ms = 0;
   for (;;) {
      bool in = false, again = false;
      if (!ll_acquire_record (r->c, rk, rk_len, &one, lease, err)) {
         /* Its own record is nobody else's: BUSY is the database's own
          * lock (SQLite's file), which a waiting call waits for. */
         if (err->code != LEASELOCK_BUSY || r->o->timeout_ms == 0 ||
             !mode_sleep (&w, "the database to let the reader in", err))
            return false;
         continue;
      }
      ll_lease_drop_on_release (*lease);
      /* The take precedes the inspect (the comment above). */
      if (!rw_writer_in (r, &in, err) || in) {
         drop (*lease);
         *lease = NULL;
         if (!in)
            return false;
      }
      if (!in) {
         if (random_below (READER_PRUNE_EVERY) == 0)
            rw_prune (r);
         return true;
      }
      if (r->o->timeout_ms == 0)
         return ll_error_set (err, LEASELOCK_BUSY, "read-write lock \"%s\": a writer is in or next",
                              LL_KEY_SHOWN (r->key, r->key_len));
      if (rw_reader_pass (r, &w, &one, rk, rk_len, &again, lease, err) || !again)
         return *lease != NULL;
   }
}

bool leaselock_rwlock_acquire (leaselock_client_t *c, const char *key, size_t key_len,
                               leaselock_rw_mode_t mode, const leaselock_acquire_opts_t *opts,
                               leaselock_lease_t **lease, leaselock_error_t *error)
{
   ll_acquire_frame_t f;
   leaselock_error_t *err = ll_acquire_prologue (&f, error, &opts, lease);
   if (c && lease && mode != LEASELOCK_SHARED && mode != LEASELOCK_EXCLUSIVE)
      return ll_error_set (err, LEASELOCK_INVALID,
                           "mode must be LEASELOCK_SHARED or LEASELOCK_EXCLUSIVE (got %d)",
                           (int)mode);
   if (!mode_args_ok (c, key, key_len, RW_SFX_MAX, "read-write lock", opts, lease, err))
      return false;
   rw_call_t r = { .c = c, .key = key, .key_len = key_len, .o = opts };
   r.wk_len = record_key (r.wk, key, key_len, W_SFX);
   r.rp_len = record_key (r.rp, key, key_len, R_SFX);
   int64_t was = ll_mode_bound_set (mode_bound_of (opts));
   bool ok = mode == LEASELOCK_EXCLUSIVE
               ? rw_writer (&r, lease, err)
               : rw_reader (&r, lease, err) && keep_min_hold (lease, opts->min_hold_ms, err);
   ll_mode_bound_set (was);
   return ok;
}
