/*
 * fake_backend.c - an in-memory backend on the engine's (fake) clock, for
 * the engine's own logic: expiry, renewal and loss in milliseconds without
 * sleeping for TTLs. Scheme "fake://". Not part of the library.
 */
#include "fake_backend.h"

#include <stdatomic.h>
#include <time.h>

#include <stdlib.h>
#include <string.h>

#define MAX_RECORDS 4096
#define MAX_QUEUED 256

typedef struct rec
{
   char key[LEASELOCK_KEY_MAX + 1];
   size_t key_len;
   char owner[LEASELOCK_OWNER_LEN + 1];
   int64_t fence, expires_at, acquired_at, pid;
   char host[256], label[256];
   char next_owner[LEASELOCK_OWNER_LEN + 1]; /* the reservation ("" none) */
   int64_t next_until, next_since;
   int64_t holds;
} rec_t;

/* An entry of a key's queue of fair waiters. */
typedef struct queued
{
   char key[LEASELOCK_KEY_MAX + 1];
   size_t key_len;
   char owner[LEASELOCK_OWNER_LEN + 1];
   int64_t arrived, alive_until;
} queued_t;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static rec_t recs[MAX_RECORDS];
static int n_recs;
static queued_t queue[MAX_QUEUED];
static int n_queued;
static int fail_ops;    /* while > 0 every op fails with BACKEND */
static int64_t db_skew; /* the "database clock" = engine clock + skew */
static int lose[16];    /* per op: calls still to apply and then fail */
static int hold[16];    /* per op: calls still to apply and then hold */
static int refuse[16];  /* per op: calls still to fail before applying */
static atomic_int held; /* calls holding their reply now */
static atomic_bool holding;
static atomic_bool hang;
static char hang_key[LEASELOCK_KEY_MAX + 1]; /* ops on keys containing it hang */
static long n_calls[16];

void fake_backend_fail (bool on)
{
   pthread_mutex_lock (&mu);
   fail_ops = on;
   pthread_mutex_unlock (&mu);
}

void fake_backend_hang (bool on)
{
   atomic_store (&hang, on);
}

void fake_backend_hang_key (const char *part)
{
   pthread_mutex_lock (&mu);
   snprintf (hang_key, sizeof hang_key, "%s", part ? part : "");
   pthread_mutex_unlock (&mu);
}

void fake_backend_lose_replies (int n)
{
   fake_backend_lose_replies_of (FAKE_ACQUIRE, n);
}

void fake_backend_lose_replies_of (fake_op_t op, int n)
{
   pthread_mutex_lock (&mu);
   lose[op] = n;
   pthread_mutex_unlock (&mu);
}

void fake_backend_fail_next (fake_op_t op, int n)
{
   pthread_mutex_lock (&mu);
   refuse[op] = n;
   pthread_mutex_unlock (&mu);
}

void fake_backend_hold_replies (fake_op_t op, int n)
{
   pthread_mutex_lock (&mu);
   hold[op] = n;
   atomic_store (&holding, true);
   pthread_mutex_unlock (&mu);
}

int fake_backend_held (void)
{
   return atomic_load (&held);
}

void fake_backend_let_go (void)
{
   atomic_store (&holding, false);
   while (atomic_load (&held) > 0) {
      struct timespec ts = { 0, 1000000 };
      nanosleep (&ts, NULL);
   }
}

void fake_backend_skew (int64_t ms)
{
   pthread_mutex_lock (&mu);
   db_skew = ms;
   pthread_mutex_unlock (&mu);
}

long fake_backend_calls (fake_op_t op)
{
   pthread_mutex_lock (&mu);
   long n = n_calls[op];
   pthread_mutex_unlock (&mu);
   return n;
}

static int64_t db_now (void)
{
   return ll_now_ms () + db_skew;
}

static rec_t *find (const char *key, size_t len)
{
   for (int i = 0; i < n_recs; i++)
      if (recs[i].key_len == len && !memcmp (recs[i].key, key, len))
         return &recs[i];
   return NULL;
}

/* Locks and counts; fails when injection is on. */
static bool key_hangs (const char *key)
{
   pthread_mutex_lock (&mu);
   bool h = key && hang_key[0] && strstr (key, hang_key);
   pthread_mutex_unlock (&mu);
   return h;
}

static bool enter (fake_op_t op, const char *key, leaselock_error_t *err)
{
   pthread_mutex_lock (&mu);
   n_calls[op]++;
   pthread_mutex_unlock (&mu);
   while (atomic_load (&hang) || key_hangs (key)) {
      struct timespec ts = { 0, 1000000 };
      nanosleep (&ts, NULL);
   }
   pthread_mutex_lock (&mu);
   if (refuse[op] > 0) {
      refuse[op]--;
      pthread_mutex_unlock (&mu);
      return ll_error_set (err, LEASELOCK_BACKEND, "fake backend: injected failure");
   }
   if (fail_ops) {
      pthread_mutex_unlock (&mu);
      return ll_error_set (err, LEASELOCK_BACKEND, "fake backend: injected failure");
   }
   return true;
}

/* After an op was applied (mu held, released here): its reply is lost or
 * held back as the tests asked. */
static bool leave (fake_op_t op, bool ok, leaselock_error_t *err)
{
   bool lost = ok && lose[op] > 0 && lose[op]--;
   bool wait = ok && !lost && hold[op] > 0 && hold[op]--;
   pthread_mutex_unlock (&mu);
   if (lost)
      return ll_error_set (err, LEASELOCK_BACKEND, "fake backend: the reply was lost");
   if (wait) {
      /* A real server's reply is awaited no longer than the caller's
       * bound either: then the reply is lost. */
      int64_t bound = ll_call_bound ();
      bool gave_up = false;
      atomic_fetch_add (&held, 1);
      while (atomic_load (&holding) && !gave_up) {
         struct timespec ts = { 0, 1000000 };
         nanosleep (&ts, NULL);
         gave_up = bound >= 0 && ll_real_now_ms () >= bound;
      }
      atomic_fetch_sub (&held, 1);
      if (gave_up)
         return ll_error_set (err, LEASELOCK_BACKEND,
                              "fake backend: no answer before the caller's timeout");
   }
   return ok || ll_error_set (err, LEASELOCK_NOT_HELD, "not held");
}

static void *fake_open (const char *uri, leaselock_error_t *err)
{
   if (strncmp (uri, "fake://", 7) != 0)
      return ll_error_set (err, LEASELOCK_INVALID, "not a fake URI"), NULL;
   if (strstr (uri, "unreachable"))
      return ll_error_set (err, LEASELOCK_BACKEND, "fake backend: cannot connect"), NULL;
   return malloc (1);
}

static void fake_close (void *conn)
{
   free (conn);
}

/* Whether r's reservation is live and not owner's (mu held). */
static bool reserved_for_other (const rec_t *r, const char *owner, int64_t now)
{
   return r->next_owner[0] && r->next_until > now && strcmp (r->next_owner, owner) != 0;
}

/* A waiter's claim on r's reservation (acquire_wait's rule; mu held). */
static bool claim (rec_t *r, const char *owner, int64_t reserve_ms, int64_t waited_ms, int64_t now)
{
   bool free = !r->next_owner[0] || r->next_until <= now;
   if (free || !strcmp (r->next_owner, owner) || r->next_since > now - waited_ms) {
      snprintf (r->next_owner, sizeof r->next_owner, "%s", owner);
      r->next_until = now + reserve_ms;
      r->next_since = now - waited_ms;
      return true;
   }
   return false;
}

/* Whether key's queue has a live entry of another owner than owner (mu
 * held): a fair first take (ll_take_t's fair) is then refused. */
static bool queued_for_other (const char *key, size_t key_len, const char *owner, int64_t now);

/* acquire, and acquire_wait when reserve_ms > 0. */
static bool take (const ll_take_t *t, int64_t reserve_ms, int64_t *fence, ll_taken_t *out,
                  leaselock_error_t *err)
{
   const char *key = t->op.key, *owner = t->op.owner;
   size_t key_len = t->op.key_len;
   out->reserved = false;
   out->left_ms = -1;
   if (!enter (FAKE_ACQUIRE, key, err))
      return false;
   int64_t now = db_now ();
   rec_t *r = find (key, key_len);
   bool mine = r && !strcmp (r->owner, owner);
   if ((t->fair && queued_for_other (key, key_len, owner, now)) ||
       (r && !mine && (r->expires_at > now || reserved_for_other (r, owner, now)))) {
      out->reserved = reserve_ms > 0 && claim (r, owner, reserve_ms, t->waited_ms, now);
      if (out->reserved)
         out->left_ms = r->expires_at > now ? r->expires_at - now : 0;
      pthread_mutex_unlock (&mu);
      return ll_error_set (err, LEASELOCK_BUSY, "held by another owner");
   }
   if (!r) {
      if (n_recs == MAX_RECORDS) {
         pthread_mutex_unlock (&mu);
         return ll_error_set (err, LEASELOCK_BACKEND, "fake backend full");
      }
      r = &recs[n_recs++];
      memset (r, 0, sizeof *r);
      memcpy (r->key, key, key_len);
      r->key_len = key_len;
   }
   snprintf (r->owner, sizeof r->owner, "%s", owner);
   r->fence++;
   r->expires_at = now + t->ttl_ms;
   r->acquired_at = now;
   r->pid = t->holder->pid;
   snprintf (r->host, sizeof r->host, "%s", t->holder->host);
   snprintf (r->label, sizeof r->label, "%s", t->holder->label);
   r->next_owner[0] = '\0';
   r->holds = 1;
   *fence = r->fence;
   return leave (FAKE_ACQUIRE, true, err);
}

static bool fake_acquire (void *conn, const ll_take_t *t, int64_t *fence, leaselock_error_t *err)
{
   (void)conn;
   ll_taken_t out;
   return take (t, 0, fence, &out, err);
}

static bool fake_acquire_wait (void *conn, const ll_take_t *t, ll_taken_t *out,
                               leaselock_error_t *err)
{
   (void)conn;
   return take (t, t->reserve_ms, &out->fence, out, err);
}

static bool fake_renew (void *conn, const ll_op_t *op, int64_t ttl_ms, leaselock_error_t *err)
{
   (void)conn;
   if (!enter (FAKE_RENEW, op->key, err))
      return false;
   int64_t now = db_now ();
   rec_t *r = find (op->key, op->key_len);
   bool ok = r && !strcmp (r->owner, op->owner) && r->expires_at > now;
   if (ok)
      r->expires_at = now + ttl_ms;
   return leave (FAKE_RENEW, ok, err);
}

static bool fake_release (void *conn, const ll_op_t *op, int64_t min_hold_ms,
                          leaselock_error_t *err)
{
   (void)conn;
   if (!enter (FAKE_RELEASE, op->key, err))
      return false;
   int64_t now = db_now ();
   rec_t *r = find (op->key, op->key_len);
   bool ok = r && !strcmp (r->owner, op->owner);
   if (ok) {
      r->owner[0] = '\0';
      int64_t until = r->acquired_at + min_hold_ms;
      r->expires_at = until > now ? until : now;
   }
   return leave (FAKE_RELEASE, ok, err);
}

static void fill (const rec_t *r, leaselock_record_t *out, int64_t now)
{
   memset (out, 0, sizeof *out);
   memcpy (out->key, r->key, r->key_len);
   out->key_len = r->key_len;
   snprintf (out->owner, sizeof out->owner, "%s", r->owner);
   out->fence = r->fence;
   out->expires_in_ms = r->expires_at - now;
   snprintf (out->host, sizeof out->host, "%s", r->host);
   out->pid = r->pid;
   snprintf (out->label, sizeof out->label, "%s", r->label);
   out->holds = r->holds;
}

static bool fake_inspect (void *conn, const ll_op_t *op, leaselock_record_t *rec, bool *found,
                          leaselock_error_t *err)
{
   (void)conn;
   if (!enter (FAKE_INSPECT, op->key, err))
      return false;
   rec_t *r = find (op->key, op->key_len);
   *found = r != NULL;
   if (r)
      fill (r, rec, db_now ());
   pthread_mutex_unlock (&mu);
   return true;
}

static int cmp_rec (const void *a, const void *b)
{
   const rec_t *x = a, *y = b;
   size_t n = x->key_len < y->key_len ? x->key_len : y->key_len;
   int c = memcmp (x->key, y->key, n);
   return c ? c : (x->key_len > y->key_len) - (x->key_len < y->key_len);
}

static bool fake_list (void *conn, const char *prefix, size_t prefix_len, leaselock_record_cb fn,
                       void *user_data, leaselock_error_t *err)
{
   (void)conn;
   if (!enter (FAKE_LIST, NULL, err))
      return false;
   rec_t *copy = malloc (sizeof (rec_t) * (n_recs ? (size_t)n_recs : 1));
   int n = 0;
   for (int i = 0; copy && i < n_recs; i++)
      if (recs[i].key_len >= prefix_len && !memcmp (recs[i].key, prefix, prefix_len))
         copy[n++] = recs[i];
   int64_t now = db_now ();
   pthread_mutex_unlock (&mu);
   if (!copy)
      return ll_error_set (err, LEASELOCK_NOMEM, "out of memory");
   qsort (copy, (size_t)n, sizeof *copy, cmp_rec);
   for (int i = 0; i < n; i++) {
      leaselock_record_t out;
      fill (&copy[i], &out, now);
      if (!fn (&out, user_data))
         break;
   }
   free (copy);
   return true;
}

static bool fake_force (void *conn, const ll_op_t *op, bool *took, leaselock_error_t *err)
{
   (void)conn;
   if (!enter (FAKE_FORCE, op->key, err))
      return false;
   int64_t now = db_now ();
   rec_t *r = find (op->key, op->key_len);
   *took = r && r->owner[0] && r->expires_at > now;
   if (r) {
      r->owner[0] = '\0';
      r->expires_at = now;
   }
   pthread_mutex_unlock (&mu);
   return true;
}

/* Deletes the records under prefix whose expiry is older_than_ms or more
 * in the past (order kept: list sorts anyway). */
static bool fake_prune (void *conn, const char *prefix, size_t prefix_len, int64_t older_than_ms,
                        int64_t *count, leaselock_error_t *err)
{
   (void)conn;
   if (!enter (FAKE_PRUNE, NULL, err))
      return false;
   int64_t now = db_now ();
   int kept = 0;
   for (int i = 0; i < n_recs; i++) {
      const rec_t *r = &recs[i];
      bool under = r->key_len >= prefix_len && !memcmp (r->key, prefix, prefix_len);
      bool reserved = r->next_owner[0] && r->next_until > now;
      if (!under || r->expires_at > now - older_than_ms || reserved)
         recs[kept++] = *r;
   }
   *count = n_recs - kept;
   n_recs = kept;
   return leave (FAKE_PRUNE, true, err);
}

static bool queued_is (const queued_t *q, const char *key, size_t len)
{
   return q->key_len == len && !memcmp (q->key, key, len);
}

/* Drops the entries that ran out (mu held): they count for nobody. */
static void queue_sweep (int64_t now)
{
   int kept = 0;
   for (int i = 0; i < n_queued; i++)
      if (queue[i].alive_until > now)
         queue[kept++] = queue[i];
   n_queued = kept;
}

static bool queued_for_other (const char *key, size_t key_len, const char *owner, int64_t now)
{
   for (int i = 0; i < n_queued; i++)
      if (queued_is (&queue[i], key, key_len) && queue[i].alive_until > now &&
          strcmp (queue[i].owner, owner) != 0)
         return true;
   return false;
}

static bool fake_queue_join (void *conn, const ll_op_t *op, int64_t keep_ms, int64_t *ahead,
                             leaselock_error_t *err)
{
   (void)conn;
   if (!enter (FAKE_QUEUE, op->key, err))
      return false;
   int64_t now = db_now ();
   queue_sweep (now);
   queued_t *me = NULL;
   for (int i = 0; i < n_queued && !me; i++)
      if (queued_is (&queue[i], op->key, op->key_len) && !strcmp (queue[i].owner, op->owner))
         me = &queue[i];
   if (!me) {
      if (n_queued == MAX_QUEUED) {
         pthread_mutex_unlock (&mu);
         return ll_error_set (err, LEASELOCK_BACKEND, "fake backend: queue full");
      }
      me = &queue[n_queued++];
      memcpy (me->key, op->key, op->key_len);
      me->key_len = op->key_len;
      snprintf (me->owner, sizeof me->owner, "%s", op->owner);
      me->arrived = now;
   }
   me->alive_until = now + keep_ms;
   *ahead = 0;
   for (int i = 0; i < n_queued; i++) {
      const queued_t *q = &queue[i];
      if (q != me && queued_is (q, op->key, op->key_len) &&
          (q->arrived < me->arrived ||
           (q->arrived == me->arrived && strcmp (q->owner, me->owner) < 0)))
         ++*ahead;
   }
   return leave (FAKE_QUEUE, true, err);
}

static bool fake_queue_leave (void *conn, const ll_op_t *op, leaselock_error_t *err)
{
   (void)conn;
   if (!enter (FAKE_QUEUE, op->key, err))
      return false;
   int kept = 0;
   for (int i = 0; i < n_queued; i++)
      if (!queued_is (&queue[i], op->key, op->key_len) || strcmp (queue[i].owner, op->owner))
         queue[kept++] = queue[i];
   n_queued = kept;
   return leave (FAKE_QUEUE, true, err);
}

static bool fake_hold (void *conn, const ll_op_t *op, int delta, int64_t *holds,
                       leaselock_error_t *err)
{
   (void)conn;
   if (!enter (FAKE_HOLD, op->key, err))
      return false;
   rec_t *r = find (op->key, op->key_len);
   bool ok = r && !strcmp (r->owner, op->owner) && r->expires_at > db_now ();
   if (ok) {
      r->holds = r->holds + delta < 1 ? 1 : r->holds + delta;
      *holds = r->holds;
   }
   return leave (FAKE_HOLD, ok, err);
}

int fake_backend_queued (const char *key)
{
   pthread_mutex_lock (&mu);
   queue_sweep (db_now ());
   int n = 0;
   for (int i = 0; i < n_queued; i++)
      n += queued_is (&queue[i], key, strlen (key));
   pthread_mutex_unlock (&mu);
   return n;
}

const ll_backend_t fake_backend = {
   .name = "fake",
   .schemes = { "fake", NULL },
   .open = fake_open,
   .close = fake_close,
   .abandon = fake_close, /* nothing shared with a parent: freeing it does no I/O */
   .acquire = fake_acquire,
   .acquire_wait = fake_acquire_wait,
   .renew = fake_renew,
   .release = fake_release,
   .inspect = fake_inspect,
   .list = fake_list,
   .force_release = fake_force,
   .prune = fake_prune,
   .queue_join = fake_queue_join,
   .queue_leave = fake_queue_leave,
   .fair_take = true,
   .hold = fake_hold,
};
