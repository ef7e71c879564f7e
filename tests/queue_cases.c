/*
 * queue_cases.c - the queue cases every backend's suite runs (see
 * queue_cases.h).
 */
#include "queue_cases.h"

#include <sys/wait.h>
#include <unistd.h>

/* owner joins k for keep_ms; returns ahead, or -1 (and why, on stderr). */
int64_t qc_join (const ll_backend_t *b, void *c, const char *k, size_t klen, const char *owner,
                 int64_t keep_ms)
{
   leaselock_error_t err;
   int64_t ahead = -2;
   if (!b->queue_join (c, &(ll_op_t){ k, klen, owner }, keep_ms, &ahead, &err)) {
      fprintf (stderr, "    queue_join: %s %s\n", leaselock_code_name (err.code), err.message);
      return -1;
   }
   return ahead;
}

bool qc_leave (const ll_backend_t *b, void *c, const char *k, const char *owner)
{
   leaselock_error_t err;
   if (b->queue_leave (c, &(ll_op_t){ k, strlen (k), owner }, &err))
      return true;
   fprintf (stderr, "    queue_leave: %s %s\n", leaselock_code_name (err.code), err.message);
   return false;
}

/* a, b, c join in turn: 0, 1, 2; a leaves: b is first, c second. */
void qc_join_order (const ll_backend_t *b, void *c, qc_rows_fn rows)
{
   (void)rows;
   const char *k = key ("q/order");
   CHECK_EQ (QJ (b, c, k, QC_A, 10000), 0);
   CHECK_EQ (QJ (b, c, k, QC_B, 10000), 1);
   CHECK_EQ (QJ (b, c, k, QC_C, 10000), 2);
   CHECK (qc_leave (b, c, k, QC_A));
   CHECK_EQ (QJ (b, c, k, QC_B, 10000), 0);
   CHECK_EQ (QJ (b, c, k, QC_C, 10000), 1);
   CHECK (qc_leave (b, c, k, QC_B) && qc_leave (b, c, k, QC_C));
   CHECK_EQ (rows (k), 0);
}

/* A rejoin keeps the place: the later arrival rejoins first and stays
 * behind; joining again with a shorter keep changes nothing either. */
void qc_rejoin_keeps_place (const ll_backend_t *b, void *c, qc_rows_fn rows)
{
   const char *k = key ("q/rejoin");
   CHECK_EQ (QJ (b, c, k, QC_B, 10000), 0);
   CHECK_EQ (QJ (b, c, k, QC_A, 10000), 1); /* "a" < "b", but it arrived later */
   sleep_ms (20);
   CHECK_EQ (QJ (b, c, k, QC_A, 10000), 1);
   CHECK_EQ (QJ (b, c, k, QC_B, 5000), 0);
   CHECK_EQ (QJ (b, c, k, QC_A, 10000), 1);
   CHECK_EQ (rows (k), 2);
   CHECK (qc_leave (b, c, k, QC_A) && qc_leave (b, c, k, QC_B));
}

/* An entry not joined again within keep_ms runs out: it holds nobody
 * back, and its owner's next join goes to the back of the queue. */
void qc_runs_out (const ll_backend_t *b, void *c, qc_rows_fn rows)
{
   const char *k = key ("q/runs-out");
   CHECK_EQ (QJ (b, c, k, QC_A, 300), 0);
   CHECK_EQ (QJ (b, c, k, QC_B, 10000), 1);
   CHECK_EQ (QJ (b, c, k, QC_C, 10000), 2);
   sleep_ms (450);
   CHECK_EQ (QJ (b, c, k, QC_B, 10000), 0);
   CHECK_EQ (QJ (b, c, k, QC_C, 10000), 1);
   CHECK_EQ (rows (k), 3); /* run out, not gone */
   CHECK_EQ (QJ (b, c, k, QC_A, 10000), 2);
   CHECK_EQ (QJ (b, c, k, QC_B, 10000), 0);
   CHECK (qc_leave (b, c, k, QC_A) && qc_leave (b, c, k, QC_B) && qc_leave (b, c, k, QC_C));
}

/* Leaving twice, or a queue never joined, succeeds. */
void qc_leave_missing (const ll_backend_t *b, void *c, qc_rows_fn rows)
{
   const char *k = key ("q/leave-missing");
   CHECK (qc_leave (b, c, k, QC_A));
   CHECK_EQ (QJ (b, c, k, QC_A, 10000), 0);
   CHECK (qc_leave (b, c, k, QC_A));
   CHECK (qc_leave (b, c, k, QC_A));
   CHECK_EQ (rows (k), 0);
}

/* Keys have queues of their own, a key that is a prefix of another too. */
void qc_keys_isolated (const ll_backend_t *b, void *c, qc_rows_fn rows)
{
   (void)rows;
   const char *k1 = key ("q/iso"), *k2 = key ("q/iso2"), *k3 = key ("q/is_");
   CHECK_EQ (QJ (b, c, k1, QC_A, 10000), 0);
   CHECK_EQ (QJ (b, c, k2, QC_B, 10000), 0);
   CHECK_EQ (QJ (b, c, k3, QC_C, 10000), 0);
   CHECK_EQ (QJ (b, c, k2, QC_A, 10000), 1);
   CHECK_EQ (QJ (b, c, k1, QC_C, 10000), 1);
   CHECK (qc_leave (b, c, k1, QC_A));
   CHECK_EQ (QJ (b, c, k2, QC_A, 10000), 1);
   CHECK_EQ (QJ (b, c, k1, QC_C, 10000), 0);
   CHECK (qc_leave (b, c, k1, QC_C) && qc_leave (b, c, k2, QC_A) && qc_leave (b, c, k2, QC_B) &&
          qc_leave (b, c, k3, QC_C));
}

/* Queue entries are not records: joining creates none, and a plain
 * acquire, renew, release, inspect and list of the key behave as if there
 * were no queue. */
void qc_records_unaffected (const ll_backend_t *b, void *c, qc_rows_fn rows)
{
   (void)rows;
   const char *k = key ("q/records/k");
   const char *pfx = key ("q/records/");
   static const ll_holder_t h = { "queue-host", 1, "queue" };
   leaselock_error_t err;
   leaselock_record_t rec;
   bool found = true;
   listing_t L = { 0 };
   int64_t fence = 0;
   CHECK_EQ (QJ (b, c, k, QC_A, 10000), 0);
   CHECK_EQ (QJ (b, c, k, QC_B, 10000), 1);
   CHECK_OK (b->inspect (c, &(ll_op_t){ k, strlen (k), NULL }, &rec, &found, &err), err);
   CHECK (!found);
   CHECK_OK (b->list (c, pfx, strlen (pfx), collect, &L, &err), err);
   CHECK_EQ (L.n, 0);
   CHECK_OK (
     ll_backend_acquire (
       b, c, &(ll_take_t){ { k, strlen (k), QC_H }, 10000, &h, 0, 0, false, false }, &fence, &err),
     err);
   CHECK_EQ (fence, 1);
   CHECK_OK (b->renew (c, &(ll_op_t){ k, strlen (k), QC_H }, 10000, &err), err);
   CHECK_OK (b->inspect (c, &(ll_op_t){ k, strlen (k), NULL }, &rec, &found, &err), err);
   CHECK (found && !strcmp (rec.owner, QC_H) && rec.fence == 1);
   CHECK_OK (b->list (c, pfx, strlen (pfx), collect, &L, &err), err);
   CHECK_EQ (L.n, 1);
   CHECK_OK (b->release (c, &(ll_op_t){ k, strlen (k), QC_H }, 0, &err), err);
   CHECK_OK (
     ll_backend_acquire (
       b, c, &(ll_take_t){ { k, strlen (k), QC_C }, 10000, &h, 0, 0, false, false }, &fence, &err),
     err);
   CHECK_EQ (fence, 2);
   CHECK_OK (b->release (c, &(ll_op_t){ k, strlen (k), QC_C }, 0, &err), err);
   /* ... and the queue is as it was. */
   CHECK_EQ (QJ (b, c, k, QC_B, 10000), 1);
   CHECK (qc_leave (b, c, k, QC_A) && qc_leave (b, c, k, QC_B));
}

/* A fair take (ll_take_t's fair) as owner o on k: whether it took it. */
static bool qc_fair_take_as (const ll_backend_t *b, void *c, const char *k, const char *o,
                             bool fair, leaselock_error_t *err)
{
   static const ll_holder_t h = { "queue-host", 1, "queue" };
   int64_t fence = 0;
   return ll_backend_acquire (
     b, c, &(ll_take_t){ { k, strlen (k), o }, 10000, &h, 0, 0, fair, false }, &fence, err);
}

/* Whether k's record is there (false too when inspect fails, said on
 * stderr), and if so its owner into owner. */
static bool qc_record (const ll_backend_t *b, void *c, const char *k, char *owner)
{
   leaselock_error_t err;
   leaselock_record_t rec;
   bool found = false;
   if (!b->inspect (c, &(ll_op_t){ k, strlen (k), NULL }, &rec, &found, &err))
      fprintf (stderr, "    inspect: %s %s\n", leaselock_code_name (err.code), err.message);
   if (found)
      memcpy (owner, rec.owner, sizeof rec.owner);
   return found;
}

void qc_fair_take (const ll_backend_t *b, void *c, qc_rows_fn rows)
{
   const char *k = key ("q/fair-take");
   leaselock_error_t err;
   char owner[LEASELOCK_OWNER_LEN + 1] = "";
   CHECK_EQ (QJ (b, c, k, QC_A, 10000), 0);
   bool ok = qc_fair_take_as (b, c, k, QC_H, true, &err);
   CHECK_ERR (ok, err, LEASELOCK_BUSY, "");
   CHECK (!qc_record (b, c, k, owner));                         /* nothing written */
   CHECK_OK (qc_fair_take_as (b, c, k, QC_A, true, &err), err); /* its own entry */
   CHECK_EQ (QJ (b, c, k, QC_B, 10000), 1);
   CHECK_OK (b->release (c, &(ll_op_t){ k, strlen (k), QC_A }, 0, &err), err);
   CHECK (qc_leave (b, c, k, QC_A));
   ok = qc_fair_take_as (b, c, k, QC_H, true, &err); /* free, but B waits */
   CHECK_ERR (ok, err, LEASELOCK_BUSY, "");
   CHECK (qc_record (b, c, k, owner) && owner[0] == '\0');
   CHECK_OK (qc_fair_take_as (b, c, k, QC_H, false, &err), err); /* a plain take */
   CHECK_OK (b->release (c, &(ll_op_t){ k, strlen (k), QC_H }, 0, &err), err);
   CHECK (qc_leave (b, c, k, QC_B));
   CHECK_OK (qc_fair_take_as (b, c, k, QC_H, true, &err), err);
   CHECK_OK (b->release (c, &(ll_op_t){ k, strlen (k), QC_H }, 0, &err), err);
   CHECK_EQ (QJ (b, c, k, QC_B, 200), 0);
   sleep_ms (350); /* B's entry ran out: it holds nobody back */
   CHECK_OK (qc_fair_take_as (b, c, k, QC_C, true, &err), err);
   CHECK_OK (b->release (c, &(ll_op_t){ k, strlen (k), QC_C }, 0, &err), err);
   CHECK (qc_leave (b, c, k, QC_B));
   CHECK_EQ (rows (k), 0);
}

/* prune deletes the entries under its prefix that ran out (older_than
 * ago), never a live one, nor one outside the prefix; it counts records
 * only. */
void qc_prune (const ll_backend_t *b, void *c, qc_rows_fn rows)
{
   const char *live = key ("q/prune/live"), *dead = key ("q/prune/dead");
   const char *outside = key ("q/prunx/dead"), *pfx = key ("q/prune/");
   leaselock_error_t err;
   int64_t n = -1;
   CHECK_EQ (QJ (b, c, dead, QC_A, 200), 0);
   CHECK_EQ (QJ (b, c, outside, QC_A, 200), 0);
   CHECK_EQ (QJ (b, c, live, QC_A, 200), 0);
   CHECK_EQ (QJ (b, c, live, QC_B, 30000), 1);
   sleep_ms (350);
   CHECK_OK (b->prune (c, pfx, strlen (pfx), 60000, &n, &err), err);
   CHECK_EQ (n, 0);
   CHECK_EQ (rows (dead), 1); /* ran out less than older_than ago */
   CHECK_OK (b->prune (c, pfx, strlen (pfx), 0, &n, &err), err);
   CHECK_EQ (n, 0);
   CHECK_EQ (rows (dead), 0);
   CHECK_EQ (rows (live), 1);
   CHECK_EQ (rows (outside), 1);
   CHECK_EQ (QJ (b, c, live, QC_B, 30000), 0);
   CHECK (qc_leave (b, c, live, QC_B) && qc_leave (b, c, outside, QC_A));
}

/* Odd keys are bound, never spliced into the statement: quotes, SQL and
 * operator text, multibyte UTF-8, 255 bytes; each has its own queue. */
void qc_odd_keys (const ll_backend_t *b, void *c, qc_rows_fn rows)
{
   (void)rows;
   static const char *const names[] = {
      "'; DELETE FROM leaselock_queue; --",
      "\"quoted\" `back` \\slash",
      "percent% under_score",
      "ключ/鍵/🔒/é",
      "$gt {\"$ne\": 1} $$NOW",
   };
   char k[LEASELOCK_KEY_MAX + 1];
   size_t n = sizeof names / sizeof names[0];
   for (size_t i = 0; i < n; i++) {
      snprintf (k, sizeof k, "%s/%s", key ("q/odd"), names[i]);
      CHECK_EQ (QJ (b, c, k, QC_A, 10000), 0);
      CHECK_EQ (QJ (b, c, k, QC_B, 10000), 1);
   }
   /* 255 bytes, ending in a 2-byte character. */
   const char *p = key ("q/odd-long/");
   size_t plen = strlen (p);
   memcpy (k, p, plen);
   memset (k + plen, 'x', 253 - plen);
   memcpy (k + 253, "\xc3\xa9", 2);
   CHECK_EQ (qc_join (b, c, k, 255, QC_C, 10000), 0);
   CHECK_EQ (qc_join (b, c, k, 255, QC_A, 10000), 1);
   CHECK_EQ (qc_join (b, c, k, 253, QC_A, 10000), 0); /* its 253-byte prefix */
   leaselock_error_t err;
   CHECK_OK (b->queue_leave (c, &(ll_op_t){ k, 255, QC_C }, &err), err);
   CHECK_EQ (qc_join (b, c, k, 255, QC_A, 10000), 0);
   for (size_t i = 0; i < n; i++) {
      snprintf (k, sizeof k, "%s/%s", key ("q/odd"), names[i]);
      CHECK_EQ (QJ (b, c, k, QC_B, 10000), 1);
      CHECK (qc_leave (b, c, k, QC_A));
      CHECK_EQ (QJ (b, c, k, QC_B, 10000), 0);
      CHECK (qc_leave (b, c, k, QC_B));
   }
}

/* Runs a case on a new connection to uri. */
void qc_run (const char *uri, void (*body) (const ll_backend_t *, void *, qc_rows_fn),
             qc_rows_fn rows)
{
   const ll_backend_t *b = NULL;
   void *c = backend_open (uri, &b);
   CHECK (c != NULL);
   if (b->queue_join && b->queue_leave)
      body (b, c, rows);
   else
      tl_fail (__FILE__, __LINE__, "the backend has no queue_join / queue_leave");
   b->close (c);
}

#define QC_PROCS 8
#define QC_ROUNDS 5
/* N processes, each on a connection of its own, join one key at once
 * (released together through a pipe): the places they are told are 0 ..
 * N-1, each once. Rounds of it, each on a new key. */
void qc_concurrent_joins (const char *uri)
{
   for (int round = 0; round < QC_ROUNDS; round++) {
      char name[64];
      snprintf (name, sizeof name, "q/concurrent-%d", round);
      const char *k = key (name);
      int go[2], out[2];
      CHECK (pipe (go) == 0 && pipe (out) == 0);
      pid_t pids[QC_PROCS];
      for (int i = 0; i < QC_PROCS; i++) {
         if ((pids[i] = fork ()) == 0) {
            close (go[1]);
            close (out[0]);
            const ll_backend_t *b = NULL;
            void *c = backend_open (uri, &b);
            char owner[LEASELOCK_OWNER_LEN + 1], ch;
            snprintf (owner, sizeof owner, "%032x", (unsigned)(i * 7919 + 13));
            if (!c || read (go[0], &ch, 1) < 0)
               _exit (3);
            int64_t ahead = qc_join (b, c, k, strlen (k), owner, 30000);
            b->close (c);
            char line[32];
            int len = snprintf (line, sizeof line, "%lld\n", (long long)ahead);
            _exit (write (out[1], line, (size_t)len) == len && ahead >= 0 ? 0 : 1);
         }
      }
      close (go[0]);
      close (out[1]);
      sleep_ms (300); /* every child connected and waiting */
      close (go[1]);
      int failed = 0, seen[QC_PROCS] = { 0 };
      for (int i = 0; i < QC_PROCS; i++) {
         int st;
         waitpid (pids[i], &st, 0);
         failed += !WIFEXITED (st) || WEXITSTATUS (st) != 0;
      }
      char buf[512];
      ssize_t n = read (out[0], buf, sizeof buf - 1);
      close (out[0]);
      buf[n > 0 ? n : 0] = '\0';
      int got = 0;
      for (char *s = buf, *e; *s; s = e) {
         long v = strtol (s, &e, 10);
         if (e == s)
            break;
         if (v >= 0 && v < QC_PROCS)
            seen[v]++;
         got++;
      }
      CHECK_EQ (failed, 0);
      CHECK_EQ (got, QC_PROCS);
      for (int i = 0; i < QC_PROCS; i++) {
         if (seen[i] != 1)
            fprintf (stderr, "    round %d: the places told: %s", round, buf);
         CHECK_EQ (seen[i], 1);
      }
   }
}
