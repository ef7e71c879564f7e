/*
 * test_mongodb.c - what only the MongoDB backend has to prove:
 *
 *   test_mongodb mongodb://host:port/db
 *
 *  - command shape (libmongoc APM): no upsert query holds $expr, no update
 *    is a pipeline, no client time is ever sent, $$NOW judges expiry,
 *    w=majority by default, combined with journal=, and a URI's w= wins;
 *    unacknowledged writes (w=0, w=-1, safe=false) refused at open; the
 *    same for acquire_wait's commands and prune's, and their round trips;
 *  - the next owner's reservation (acquire_wait): it keeps a released
 *    record from others while its waiter takes it (and the take clears
 *    it), it runs out, the oldest waiter gets it, a plain acquire never
 *    reserves, prune keeps a reserved record, the holder's own retry still
 *    succeeds, and a record without the reservation's fields is
 *    unreserved;
 *  - driver defaults (timeouts, appname, wtimeout) and URI overrides;
 *  - renew of an expired lease nobody took: NOT_HELD;
 *  - reentrant hold counts: acquire sets 1, hold moves it by one and never
 *    below 1, on the owner's live record only (another owner, expired,
 *    released, missing: NOT_HELD), for odd keys too; a record without the
 *    holds field reads as 1 while owned and counts from there; threads of
 *    one owner entering and leaving at once; hold's commands and round
 *    trips;
 *  - force_release: owner cleared, fence kept, and a lease acquired between
 *    its read and its write is never cleared while reporting took=false;
 *  - server clock only: a process whose clock is an hour off (faketime)
 *    neither steals a live lease nor shortens its own;
 *  - server down / hung: clear BACKEND errors within the configured
 *    timeouts, then the same connection works again once it is back;
 *  - a retried acquire whose first reply was lost succeeds;
 *  - after fork, abandoning the parent's connection leaves it working,
 *    with TLS too (a TLS front of the suite's own: the server has none);
 *  - bad input: closed port, unknown host, malformed URI, unknown option,
 *    collection names MongoDB refuses, no password in messages (from open
 *    and from operations);
 *  - failover (backend_mongodb_primary.c): the identity and durability
 *    read from hello replies of a replica set's primary, a standalone
 *    server and a mongos; the meta document's writes and the fence
 *    floor's second step, in the shapes above; a new primary (the meta
 *    document rewritten, as a failover leaves it) pauses grants for
 *    max_ttl, raises every later fence above the floor, lets a surviving
 *    lease renew, and is reported (durability, stats); connections
 *    meeting it at once agree on one floor and one lock-delay; the URI's
 *    max_ttl= and durability=, retryWrites off, a bounded wtimeoutMS.
 *
 * The down/hung/lost-reply tests put a small TCP proxy (tests/tcp_proxy.c)
 * between the backend and the server, the TLS test a TLS front
 * (tests/tls_proxy.c): single host URIs, directConnection=true.
 * Keys live under a per-run prefix so a persistent server can be reused.
 */
#include "ll_internal.h"
#include "backend_mongodb_private.h"
#include "tcp_proxy.h"
#include "testlib.h"
#include "queue_cases.h"
#include "notify_cases.h"
#include "tls_proxy.h"

#include <mongoc/mongoc.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Test hooks exported by csrc/backend_mongodb_conn.c (borrowed pointers;
 * declared in backend_mongodb_private.h). */
mongoc_client_t *ll_mongo_test_client (void *conn);
mongoc_collection_t *ll_mongo_test_collection (void *conn);
mongoc_collection_t *ll_mongo_test_queue (void *conn);
bool ll_mongo_test_set_password (void *conn, const char *password);

static char SELF[4096];
static const ll_backend_t *B = &ll_backend_mongodb;
static const ll_holder_t HOLDER = { "test-host", 4242, "test_mongo" };

static void new_owner (char out[33])
{
   leaselock_error_t err;
   if (!ll_owner_new (out, &err)) {
      fprintf (stderr, "owner: %s\n", err.message);
      exit (2);
   }
}

/* URI with extra options appended ("a=1&b=2"). */
static void uri_with (char *buf, size_t size, const char *base, const char *opts)
{
   snprintf (buf, size, "%s%s%s", base,
             strchr (base, '?') ? "&" : (strchr (strstr (base, "://") + 3, '/') ? "?" : "/?"),
             opts);
}

static void *open_conn (const char *uri)
{
   leaselock_error_t err;
   void *c = B->open (uri, &err);
   if (!c)
      fprintf (stderr, "    open(%s): %s %s\n", uri, leaselock_code_name (err.code), err.message);
   return c;
}

static bool acquire (void *c, const char *k, const char *owner, int64_t ttl, int64_t *fence,
                     leaselock_error_t *err)
{
   int64_t f = 0;
   ll_error_clear (err);
   bool ok = B->acquire (
     c, &(ll_take_t){ { k, strlen (k), owner }, ttl, &HOLDER, 0, 0, false, false }, &f, err);
   if (fence)
      *fence = f;
   return ok;
}

/* The record's time left the last claim reported (acquire_wait's
 * *left_ms). */
static int64_t last_left;

static bool acquire_wait (void *c, const char *k, const char *owner, int64_t reserve_ms,
                          int64_t waited_ms, int64_t *fence, bool *reserved, leaselock_error_t *err)
{
   ll_taken_t out = { 0, true, -2 }; /* the backend must set reserved */
   ll_error_clear (err);
   const ll_take_t t = {
      { k, strlen (k), owner }, 30000, &HOLDER, reserve_ms, waited_ms, false, false
   };
   bool ok = B->acquire_wait (c, &t, &out, err);
   last_left = out.left_ms;
   if (fence)
      *fence = out.fence;
   *reserved = out.reserved;
   return ok;
}

/* ---- command shape (APM) --------------------------------------------- */

#define MAX_CMDS 64
static bson_t *cmds[MAX_CMDS];
static int n_cmds;

static void on_started (const mongoc_apm_command_started_t *ev)
{
   const char *name = mongoc_apm_command_started_get_command_name (ev);
   if (!strcmp (name, "findAndModify") || !strcmp (name, "update") || !strcmp (name, "aggregate") ||
       !strcmp (name, "find") || !strcmp (name, "insert") || !strcmp (name, "delete")) {
      if (n_cmds < MAX_CMDS)
         cmds[n_cmds++] = bson_copy (mongoc_apm_command_started_get_command (ev));
   }
}

static void clear_cmds (void)
{
   for (int i = 0; i < n_cmds; i++)
      bson_destroy (cmds[i]);
   n_cmds = 0;
}

/* Captures the commands of conn c from now on (on_started), the ones
 * captured before forgotten; whether the driver took the callbacks. */
static bool capture_cmds (void *c)
{
   mongoc_apm_callbacks_t *cbs = mongoc_apm_callbacks_new ();
   mongoc_apm_set_command_started_cb (cbs, on_started);
   bool ok = mongoc_client_set_apm_callbacks (ll_mongo_test_client (c), cbs, NULL);
   mongoc_apm_callbacks_destroy (cbs);
   clear_cmds ();
   return ok;
}

/* Whether doc (recursively) holds a key named name. */
static bool has_key (const bson_iter_t *start, const char *name)
{
   bson_iter_t it = *start, sub;
   while (bson_iter_next (&it)) {
      if (!strcmp (bson_iter_key (&it), name))
         return true;
      if ((BSON_ITER_HOLDS_DOCUMENT (&it) || BSON_ITER_HOLDS_ARRAY (&it)) &&
          bson_iter_recurse (&it, &sub) && has_key (&sub, name))
         return true;
   }
   return false;
}

static bool doc_has_key (const bson_t *doc, const char *name)
{
   bson_iter_t it;
   return bson_iter_init (&it, doc) && has_key (&it, name);
}

/* Whether doc holds a date (a client time) anywhere. */
static bool has_date (const bson_iter_t *start)
{
   bson_iter_t it = *start, sub;
   while (bson_iter_next (&it)) {
      /* An entry's markEnd is the end of the queue mark as the server
       * wrote and returned it (ll_mongo_queue_mark), not the client's. */
      if (!strcmp (bson_iter_key (&it), "markEnd"))
         continue;
      if (BSON_ITER_HOLDS_DATE_TIME (&it) || BSON_ITER_HOLDS_TIMESTAMP (&it))
         return true;
      if ((BSON_ITER_HOLDS_DOCUMENT (&it) || BSON_ITER_HOLDS_ARRAY (&it)) &&
          bson_iter_recurse (&it, &sub) && has_date (&sub))
         return true;
   }
   return false;
}

/* Whether doc holds the string value s anywhere. */
static bool has_string (const bson_iter_t *start, const char *s)
{
   bson_iter_t it = *start, sub;
   while (bson_iter_next (&it)) {
      if (BSON_ITER_HOLDS_UTF8 (&it) && !strcmp (bson_iter_utf8 (&it, NULL), s))
         return true;
      if ((BSON_ITER_HOLDS_DOCUMENT (&it) || BSON_ITER_HOLDS_ARRAY (&it)) &&
          bson_iter_recurse (&it, &sub) && has_string (&sub, s))
         return true;
   }
   return false;
}

static char *json (const bson_t *b)
{
   return bson_as_relaxed_extended_json (b, NULL);
}

/* Checks one write (query, update, upsert) against the rules; on a breach
 * writes why to why and returns false. */
static bool check_write (const bson_iter_t *q, const bson_iter_t *u, bool upsert, char *why,
                         size_t size)
{
   bson_iter_t sub;
   if (u && BSON_ITER_HOLDS_ARRAY (u)) {
      snprintf (why, size, "update is a pipeline");
      return false;
   }
   if (u && BSON_ITER_HOLDS_DOCUMENT (u) && bson_iter_recurse (u, &sub)) {
      while (bson_iter_next (&sub)) {
         if (bson_iter_key (&sub)[0] != '$') {
            snprintf (why, size, "update is a replacement (field %s)", bson_iter_key (&sub));
            return false;
         }
      }
   }
   if (upsert && q && BSON_ITER_HOLDS_DOCUMENT (q) && bson_iter_recurse (q, &sub) &&
       has_key (&sub, "$expr")) {
      snprintf (why, size, "upsert query holds $expr");
      return false;
   }
   return true;
}

/* Checks every captured command; returns the number of writes seen. */
static int check_cmds (bool want_majority, char *why, size_t size)
{
   int writes = 0;
   why[0] = '\0';
   for (int i = 0; i < n_cmds; i++) {
      bson_iter_t it, q, u, up, wc, w;
      const bson_t *c = cmds[i];
      bool is_fam = bson_iter_init_find (&it, c, "findAndModify");
      bool is_update = bson_iter_init_find (&it, c, "update");
      if (bson_iter_init (&it, c) && has_date (&it)) {
         snprintf (why, size, "command %d sends a client date", i);
         return -1;
      }
      if (is_fam) {
         bool upsert = bson_iter_init_find (&up, c, "upsert") && bson_iter_as_bool (&up);
         bool hq = bson_iter_init_find (&q, c, "query");
         bool hu = bson_iter_init_find (&u, c, "update");
         if (!hu) {
            snprintf (why, size, "findAndModify %d without update", i);
            return -1;
         }
         if (!check_write (hq ? &q : NULL, &u, upsert, why, size))
            return -1;
         writes++;
      } else if (is_update) {
         bson_iter_t ups, one;
         int n_updates = 0;
         /* libmongoc's started event holds the OP_MSG document sequence
          * as an "updates" array: without one, nothing could be checked. */
         if (!bson_iter_init_find (&ups, c, "updates") || !BSON_ITER_HOLDS_ARRAY (&ups) ||
             !bson_iter_recurse (&ups, &one)) {
            snprintf (why, size, "update %d without an updates array", i);
            return -1;
         }
         while (bson_iter_next (&one)) {
            bson_iter_t f;
            bson_iter_t qq, uu;
            bool upsert = false, hq = false, hu = false;
            n_updates++;
            if (!BSON_ITER_HOLDS_DOCUMENT (&one) || !bson_iter_recurse (&one, &f)) {
               snprintf (why, size, "update %d: a statement is not a document", i);
               return -1;
            }
            while (bson_iter_next (&f)) {
               if (!strcmp (bson_iter_key (&f), "q"))
                  qq = f, hq = true;
               else if (!strcmp (bson_iter_key (&f), "u"))
                  uu = f, hu = true;
               else if (!strcmp (bson_iter_key (&f), "upsert"))
                  upsert = bson_iter_as_bool (&f);
            }
            if (!hu) {
               snprintf (why, size, "update %d without u", i);
               return -1;
            }
            if (!check_write (hq ? &qq : NULL, &uu, upsert, why, size))
               return -1;
         }
         if (n_updates == 0) {
            snprintf (why, size, "update %d with an empty updates array", i);
            return -1;
         }
         writes++;
      } else {
         continue;
      }
      /* write concern */
      bool majority = bson_iter_init_find (&wc, c, "writeConcern") && bson_iter_recurse (&wc, &w) &&
                      bson_iter_find (&w, "w") && BSON_ITER_HOLDS_UTF8 (&w) &&
                      !strcmp (bson_iter_utf8 (&w, NULL), "majority");
      if (majority != want_majority) {
         char *s = json (c);
         snprintf (why, size, "write concern %s majority in %.300s", majority ? "is" : "is not", s);
         bson_free (s);
         return -1;
      }
   }
   return writes;
}

static bool is_cmd (int i, const char *name, bool upsert);

static void test_command_shape (void)
{
   void *c = open_conn (URI);
   CHECK (c);
   CHECK (capture_cmds (c));
   clear_cmds ();

   leaselock_error_t err;
   char a[33], b[33], why[512];
   int64_t fence = 0;
   bool ok, found, took;
   leaselock_record_t rec;
   new_owner (a);
   new_owner (b);
   const char *k = key ("shape");

   ok = acquire (c, k, a, 30000, &fence, &err); /* new record: conditional + upsert */
   CHECK_OK (ok, err);
   int after_first = n_cmds;
   CHECK_EQ (after_first, 2);
   ok = acquire (c, k, b, 30000, NULL, &err); /* busy: conditional + upsert (11000) */
   CHECK_ERR (ok, err, LEASELOCK_BUSY, "");
   ok = acquire (c, k, a, 30000, &fence, &err); /* same owner: one command */
   CHECK_OK (ok, err);
   CHECK_EQ (fence, 2);
   ok = B->renew (c, &(ll_op_t){ k, strlen (k), a }, 30000, &err);
   CHECK_OK (ok, err);
   /* hold: one findAndModify while the count moves, two when -1 finds it
    * at 1 already; neither an upsert. */
   int64_t holds = 0;
   int before = n_cmds;
   CHECK_OK (B->hold (c, &(ll_op_t){ k, strlen (k), a }, +1, &holds, &err), err);
   CHECK_EQ (holds, 2);
   CHECK_EQ (n_cmds - before, 1);
   CHECK_OK (B->hold (c, &(ll_op_t){ k, strlen (k), a }, -1, &holds, &err), err);
   CHECK_EQ (holds, 1);
   CHECK_EQ (n_cmds - before, 2);
   CHECK_OK (B->hold (c, &(ll_op_t){ k, strlen (k), a }, -1, &holds, &err), err);
   CHECK_EQ (holds, 1);
   CHECK_EQ (n_cmds - before, 4);
   for (int i = before; i < n_cmds; i++)
      CHECK (is_cmd (i, "findAndModify", false));
   ok = B->release (c, &(ll_op_t){ k, strlen (k), a }, 1000, &err);
   CHECK_OK (ok, err);
   ok = B->inspect (c, &(ll_op_t){ k, strlen (k), NULL }, &rec, &found, &err);
   CHECK_OK (ok, err);
   listing_t listed = { 0 };
   ok = B->list (c, PFX, strlen (PFX), collect, &listed, &err);
   CHECK_OK (ok, err);
   CHECK (listed.n >= 1);
   ok = B->force_release (c, &(ll_op_t){ k, strlen (k), NULL }, &took, &err);
   CHECK_OK (ok, err);

   int writes = check_cmds (true, why, sizeof why);
   if (writes < 0)
      fprintf (stderr, "    %s\n", why);
   CHECK (writes >= 0);
   CHECK (writes >= 11); /* 2 + 2 + 1 acquire, renew, 4 hold, release, force_release */

   /* The acquire's conditional query judges expiry with $$NOW; the upsert's
    * query is {_id, fence: {$exists: false}}. */
   bson_iter_t it, q;
   CHECK (bson_iter_init_find (&it, cmds[0], "query") && bson_iter_recurse (&it, &q));
   CHECK (has_string (&q, "$$NOW"));
   CHECK (bson_iter_init_find (&it, cmds[0], "query") && bson_iter_recurse (&it, &q) &&
          has_key (&q, "$expr"));
   CHECK (!bson_iter_init_find (&it, cmds[0], "upsert") || !bson_iter_as_bool (&it));
   CHECK (bson_iter_init_find (&it, cmds[1], "upsert") && bson_iter_as_bool (&it));
   CHECK (bson_iter_init_find (&it, cmds[1], "query") && bson_iter_recurse (&it, &q) &&
          has_key (&q, "$exists"));
   /* $currentDate writes the times, $inc the fence. */
   CHECK (doc_has_key (cmds[0], "$currentDate") && doc_has_key (cmds[0], "$inc"));
   clear_cmds ();
   B->close (c);
}

/* Whether captured command i is a findAndModify (upsert as asked) or an
 * update whose one statement is not an upsert, whose query holds $expr
 * judged by $$NOW. */
static bool is_cmd (int i, const char *name, bool upsert)
{
   bson_iter_t it, q;
   if (i >= n_cmds || !bson_iter_init (&it, cmds[i]) || !bson_iter_next (&it) ||
       strcmp (bson_iter_key (&it), name))
      return false;
   if (!strcmp (name, "findAndModify")) {
      bool up = bson_iter_init_find (&it, cmds[i], "upsert") && bson_iter_as_bool (&it);
      bool hq = bson_iter_init_find (&it, cmds[i], "query") && bson_iter_recurse (&it, &q);
      return up == upsert && hq && has_key (&q, "$expr") == !upsert;
   }
   if (!strcmp (name, "update"))
      return bson_iter_init_find (&it, cmds[i], "updates") && bson_iter_recurse (&it, &q) &&
             has_key (&q, "$expr") && has_string (&q, "$$NOW") && has_key (&q, "nextAt") &&
             !has_key (&q, "$exists");
   return true;
}

/* acquire_wait and prune: the same rules (no $expr in an upsert query, no
 * pipeline, no client date, w=majority), and the round trips the backend
 * documents: busy and reserved 2 (take, claim), busy behind an older waiter
 * 3 (take, claim, upsert answering 11000), a missing key 3 (the upsert
 * takes it). */
static void test_command_shape_wait (void)
{
   void *c = open_conn (URI);
   CHECK (c);
   CHECK (capture_cmds (c));
   leaselock_error_t err;
   char a[33], w[33], y[33], why[512];
   bool ok, reserved;
   int64_t count, fence;
   new_owner (a);
   new_owner (w);
   new_owner (y);
   const char *k = key ("shape-wait/held"), *k2 = key ("shape-wait/new");
   ok = acquire (c, k, a, 30000, NULL, &err);
   CHECK_OK (ok, err);
   clear_cmds ();
   ok = acquire_wait (c, k, w, 2000, 5000, NULL, &reserved, &err);
   CHECK_ERR (ok, err, LEASELOCK_BUSY, "held by another owner");
   CHECK (reserved);
   CHECK_EQ (n_cmds, 2);
   CHECK (is_cmd (0, "findAndModify", false) && is_cmd (1, "findAndModify", false));
   ok = acquire_wait (c, k, y, 2000, 0, NULL, &reserved, &err);
   CHECK_ERR (ok, err, LEASELOCK_BUSY, "held by another owner");
   CHECK (!reserved);
   CHECK_EQ (n_cmds, 5);
   CHECK (is_cmd (2, "findAndModify", false) && is_cmd (3, "findAndModify", false) &&
          is_cmd (4, "findAndModify", true));
   ok = acquire_wait (c, k2, y, 2000, 0, &fence, &reserved, &err);
   CHECK_OK (ok, err);
   CHECK (!reserved);
   CHECK_EQ (fence, 1);
   CHECK_EQ (n_cmds, 8);
   ok = B->prune (c, k2, strlen (k2), 3600000, &count, &err);
   CHECK_OK (ok, err);
   CHECK_EQ (n_cmds, 11); /* the records' deleteMany, the mark-only documents', the queue's */
   int writes = check_cmds (true, why, sizeof why);
   if (writes < 0)
      fprintf (stderr, "    %s\n", why);
   CHECK_EQ (writes, 8);
   clear_cmds ();
   B->close (c);
}

/* The write concern of a captured command: w as text ("majority", "1", or
 * "" when absent) and j (-1 when absent). */
static void write_concern_of (const bson_t *cmd, char *w, size_t size, int *j)
{
   bson_iter_t it, wc;
   w[0] = '\0';
   *j = -1;
   if (!bson_iter_init_find (&it, cmd, "writeConcern") || !bson_iter_recurse (&it, &wc))
      return;
   while (bson_iter_next (&wc)) {
      if (!strcmp (bson_iter_key (&wc), "w")) {
         if (BSON_ITER_HOLDS_UTF8 (&wc))
            snprintf (w, size, "%s", bson_iter_utf8 (&wc, NULL));
         else
            snprintf (w, size, "%lld", (long long)bson_iter_as_int64 (&wc));
      } else if (!strcmp (bson_iter_key (&wc), "j")) {
         *j = bson_iter_as_bool (&wc);
      }
   }
}

/* Opens URI + opts, acquires and releases a key, and checks the write
 * concern of every write sent (want_j -1: no j). */
static void expect_write_concern (const char *opts, const char *want_w, int want_j, int line)
{
   char u[1200], a[33], m[1024];
   leaselock_error_t err;
   uri_with (u, sizeof u, URI, opts);
   new_owner (a);
   void *c = open_conn (u);
   if (!c) {
      tl_fail (__FILE__, line, "open");
      return;
   }
   capture_cmds (c);
   const char *k = key ("write-concern");
   bool ok = acquire (c, k, a, 30000, NULL, &err) &&
             B->release (c, &(ll_op_t){ k, strlen (k), a }, 0, &err);
   B->close (c);
   int writes = 0;
   m[0] = '\0';
   for (int i = 0; ok && i < n_cmds && !m[0]; i++) {
      const char *name = "";
      bson_iter_t it;
      if (bson_iter_init (&it, cmds[i]) && bson_iter_next (&it))
         name = bson_iter_key (&it);
      if (strcmp (name, "findAndModify") && strcmp (name, "update"))
         continue;
      char w[64];
      int j;
      write_concern_of (cmds[i], w, sizeof w, &j);
      writes++;
      if (strcmp (w, want_w) || j != want_j) {
         char *js = json (cmds[i]);
         snprintf (m, sizeof m, "%s: want w=%s j=%d, got w=%s j=%d in %.300s", opts, want_w, want_j,
                   w, j, js);
         bson_free (js);
      }
   }
   clear_cmds ();
   if (!ok)
      snprintf (m, sizeof m, "%s: %s %s", opts, leaselock_code_name (err.code), err.message);
   else if (!m[0] && writes < 2)
      snprintf (m, sizeof m, "%s: %d writes captured", opts, writes);
   if (m[0])
      tl_fail (__FILE__, line, m);
}

#define EXPECT_WRITE_CONCERN(opts, w, j)                                                           \
   CHECK_CALL (expect_write_concern ((opts), (w), (j), __LINE__))

/* w=majority unless the URI sets w; journal= combines with it; safe=true
 * does not lower it. */
static void test_write_concern (void)
{
   EXPECT_WRITE_CONCERN ("appname=wc", "majority", -1);
   EXPECT_WRITE_CONCERN ("journal=true", "majority", 1);
   EXPECT_WRITE_CONCERN ("journal=false", "majority", 0);
   EXPECT_WRITE_CONCERN ("safe=true", "majority", -1);
   EXPECT_WRITE_CONCERN ("safe=true&journal=true", "majority", 1);
   EXPECT_WRITE_CONCERN ("w=1", "1", -1);
   EXPECT_WRITE_CONCERN ("w=1&journal=true", "1", 1);
   EXPECT_WRITE_CONCERN ("w=majority&safe=false", "majority", -1);
}

/* The checker itself rejects the shapes it must (so it can fail). */
static void test_command_shape_checker (void)
{
   char why[256];
   bson_error_t e;
   const char *bad[] = {
      "{\"findAndModify\":\"c\",\"query\":{\"_id\":\"k\",\"$expr\":{\"$lte\":[\"$a\",\"$$NOW\"]}},"
      "\"update\":{\"$set\":{\"a\":1}},\"upsert\":true,\"writeConcern\":{\"w\":\"majority\"}}",
      "{\"findAndModify\":\"c\",\"query\":{\"_id\":\"k\"},\"update\":[{\"$set\":{\"a\":\"$$NOW\"}}]"
      ","
      "\"writeConcern\":{\"w\":\"majority\"}}",
      "{\"update\":\"c\",\"updates\":[{\"q\":{\"$and\":[{\"$expr\":{\"$eq\":[1,1]}}]},\"u\":{\"$"
      "set\":"
      "{\"a\":1}},\"upsert\":true}],\"writeConcern\":{\"w\":\"majority\"}}",
      "{\"findAndModify\":\"c\",\"query\":{\"_id\":\"k\"},\"update\":{\"$set\":{\"t\":{\"$date\":"
      "\"2020-01-01T00:00:00Z\"}}},\"writeConcern\":{\"w\":\"majority\"}}",
      "{\"findAndModify\":\"c\",\"query\":{\"_id\":\"k\"},\"update\":{\"$set\":{\"a\":1}}}",
      "{\"update\":\"c\",\"writeConcern\":{\"w\":\"majority\"}}",
      "{\"update\":\"c\",\"updates\":[],\"writeConcern\":{\"w\":\"majority\"}}",
      "{\"update\":\"c\",\"updates\":{\"0\":{\"q\":{},\"u\":{\"$set\":{\"a\":1}}}},"
      "\"writeConcern\":{\"w\":\"majority\"}}",
   };
   for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
      clear_cmds ();
      cmds[n_cmds++] = bson_new_from_json ((const uint8_t *)bad[i], -1, &e);
      CHECK (cmds[0]);
      CHECK (check_cmds (true, why, sizeof why) < 0);
   }
   clear_cmds ();
}

/* ---- force_release ---------------------------------------------------- */

/* A second connection acquires the key just before the Nth lease command
 * (aggregate, find, findAndModify, update) of the connection under test is
 * sent: a race between force_release's round trips, made certain. */
static struct
{
   void *conn;
   const char *key;
   char owner[33];
   int countdown; /* fires when it reaches 0; < 0: disarmed */
   bool fired, ok;
   int64_t fence;
   leaselock_error_t err;
} RACE;

static void on_started_race (const mongoc_apm_command_started_t *ev)
{
   const char *name = mongoc_apm_command_started_get_command_name (ev);
   if (strcmp (name, "findAndModify") && strcmp (name, "update") && strcmp (name, "aggregate") &&
       strcmp (name, "find"))
      return;
   if (RACE.countdown < 0 || --RACE.countdown > 0)
      return;
   RACE.countdown = -1;
   RACE.fired = true;
   RACE.ok = acquire (RACE.conn, RACE.key, RACE.owner, 30000, &RACE.fence, &RACE.err);
}

static void test_force_release (void)
{
   void *c = open_conn (URI), *other = open_conn (URI);
   leaselock_error_t err;
   leaselock_record_t rec;
   char a[33];
   int64_t f = 0;
   bool ok = false, found = false, took = true;
   new_owner (a);
   if (!c || !other) {
      B->close (c);
      B->close (other);
      CHECK (c && other);
   }

   /* No record: nothing to do, nothing created. */
   const char *k0 = key ("force-none");
   ok = B->force_release (c, &(ll_op_t){ k0, strlen (k0), NULL }, &took, &err);
   CHECK_OK (ok, err);
   CHECK (!took);
   ok = B->inspect (c, &(ll_op_t){ k0, strlen (k0), NULL }, &rec, &found, &err);
   CHECK_OK (ok, err);
   CHECK (!found);

   /* A live lease: taken, owner cleared, fence kept, free at once. */
   const char *k1 = key ("force-live");
   ok = acquire (c, k1, a, 60000, &f, &err);
   CHECK_OK (ok, err);
   ok = B->force_release (c, &(ll_op_t){ k1, strlen (k1), NULL }, &took, &err);
   CHECK_OK (ok, err);
   CHECK (took);
   ok = B->inspect (c, &(ll_op_t){ k1, strlen (k1), NULL }, &rec, &found, &err);
   CHECK_OK (ok, err);
   CHECK (found && rec.owner[0] == '\0' && rec.fence == f && rec.expires_in_ms <= 0);
   ok = B->renew (c, &(ll_op_t){ k1, strlen (k1), a }, 30000, &err);
   CHECK_ERR (ok, err, LEASELOCK_NOT_HELD, "");

   /* Race: the key is free when force_release starts; another owner
    * acquires it between force_release's first and second command. That
    * live lease must not be cleared while force_release reports took=false:
    * either it survives, or it was taken and took says so. */
   const char *k2 = key ("force-race");
   ok = acquire (c, k2, a, 60000, &f, &err) &&
        B->release (c, &(ll_op_t){ k2, strlen (k2), a }, 0, &err);
   CHECK_OK (ok, err);
   memset (&RACE, 0, sizeof RACE);
   RACE.conn = other;
   RACE.key = k2;
   new_owner (RACE.owner);
   RACE.countdown = 2;
   mongoc_apm_callbacks_t *cbs = mongoc_apm_callbacks_new ();
   mongoc_apm_set_command_started_cb (cbs, on_started_race);
   mongoc_client_set_apm_callbacks (ll_mongo_test_client (c), cbs, NULL);
   mongoc_apm_callbacks_destroy (cbs);
   took = false;
   ok = B->force_release (c, &(ll_op_t){ k2, strlen (k2), NULL }, &took, &err);
   RACE.countdown = -1;
   leaselock_error_t err2;
   bool ok2 = B->inspect (c, &(ll_op_t){ k2, strlen (k2), NULL }, &rec, &found, &err2);
   B->close (c);
   B->close (other);
   CHECK_OK (ok, err);
   CHECK (RACE.fired);
   CHECK_OK (RACE.ok, RACE.err);
   CHECK_EQ (RACE.fence, f + 1);
   CHECK_OK (ok2, err2);
   CHECK (found);
   CHECK_EQ (rec.fence, f + 1);
   if (rec.owner[0] == '\0')
      CHECK (took); /* the racing owner's live lease was taken: say so */
   else
      CHECK (!strcmp (rec.owner, RACE.owner) && !took);
}

/* ---- server clock (faketime) ------------------------------------------ */

/* Child mode: test_mongodb --child URI op key owner ttl. Prints
 * "time=<unix seconds> ok=<0|1> code=<NAME> fence=<n> left=<ms>". */
static int child_main (int argc, char **argv)
{
   if (argc < 7)
      return 2;
   const char *uri = argv[2], *op = argv[3], *k = argv[4], *owner = argv[5];
   int64_t ttl = atoll (argv[6]), fence = 0, left = 0;
   leaselock_error_t err;
   ll_error_clear (&err);
   void *c = B->open (uri, &err);
   bool ok = false;
   if (c) {
      if (!strcmp (op, "acquire")) {
         ok = B->acquire (
           c, &(ll_take_t){ { k, strlen (k), owner }, ttl, &HOLDER, 0, 0, false, false }, &fence,
           &err);
      } else if (!strcmp (op, "renew")) {
         ok = B->renew (c, &(ll_op_t){ k, strlen (k), owner }, ttl, &err);
      } else if (!strcmp (op, "join")) {
         ok = B->queue_join (c, &(ll_op_t){ k, strlen (k), owner }, ttl, &fence, &err);
      } else if (!strcmp (op, "inspect")) {
         leaselock_record_t rec;
         bool found = false;
         ok = B->inspect (c, &(ll_op_t){ k, strlen (k), NULL }, &rec, &found, &err) && found;
         left = rec.expires_in_ms;
         fence = rec.fence;
      }
      B->close (c);
   }
   printf ("time=%lld ok=%d code=%s fence=%lld left=%lld\n", (long long)time (NULL), (int)ok,
           leaselock_code_name (err.code), (long long)fence, (long long)left);
   if (!ok && err.code != LEASELOCK_BUSY)
      fprintf (stderr, "child %s: %s\n", op, err.message);
   return 0;
}

typedef struct
{
   long long time;
   int ok;
   char code[32];
   long long fence, left;
} child_out_t;

/* Runs this program under faketime with offset ("+1h" / "-1h"). */
static bool run_skewed (const char *offset, const char *op, const char *k, const char *owner,
                        int64_t ttl, child_out_t *out)
{
   char cmd[8192], ttls[32];
   snprintf (ttls, sizeof ttls, "%lld", (long long)ttl);
   /* Only the wall clock is shifted; ASan must tolerate the preload. */
   snprintf (
     cmd, sizeof cmd,
     "FAKETIME_DONT_FAKE_MONOTONIC=1 ASAN_OPTIONS=\"$ASAN_OPTIONS:verify_asan_link_order=0\" "
     "faketime -f '%s' '%s' --child '%s' '%s' '%s' '%s' '%s'",
     offset, SELF, URI, op, k, owner, ttls);
   FILE *p = popen (cmd, "r");
   if (!p)
      return false;
   memset (out, 0, sizeof *out);
   int n = fscanf (p, "time=%lld ok=%d code=%31s fence=%lld left=%lld", &out->time, &out->ok,
                   out->code, &out->fence, &out->left);
   int rc = pclose (p);
   if (n != 5 || rc != 0) {
      fprintf (stderr, "    faketime child (%s %s): rc=%d parsed %d fields\n", offset, op, rc, n);
      return false;
   }
   return true;
}

static void test_server_clock_only (void)
{
   void *c = open_conn (URI);
   CHECK (c);
   leaselock_error_t err;
   char a[33], b[33];
   child_out_t o;
   new_owner (a);
   new_owner (b);

   /* A live lease (60 s) is not stolen by a process one hour ahead. */
   const char *k1 = key ("skew-ahead");
   bool ok = acquire (c, k1, a, 60000, NULL, &err);
   CHECK_OK (ok, err);
   CHECK (run_skewed ("+1h", "acquire", k1, b, 60000, &o));
   CHECK (o.time - (long long)time (NULL) > 3000); /* the child's clock is really ahead */
   CHECK_EQ (o.ok, 0);
   CHECK (!strcmp (o.code, "BUSY"));
   /* ... and it sees the expiry by the server clock. */
   CHECK (run_skewed ("+1h", "inspect", k1, b, 0, &o));
   CHECK_EQ (o.ok, 1);
   CHECK (o.left > 30000 && o.left <= 60000);

   /* A process one hour behind takes a lease for 60 s: it still lasts 60 s
    * by the server clock, so nobody else gets it now. */
   const char *k2 = key ("skew-behind");
   CHECK (run_skewed ("-1h", "acquire", k2, b, 60000, &o));
   CHECK ((long long)time (NULL) - o.time > 3000);
   CHECK_EQ (o.ok, 1);
   ok = acquire (c, k2, a, 60000, NULL, &err);
   CHECK_ERR (ok, err, LEASELOCK_BUSY, "");
   CHECK (run_skewed ("-1h", "renew", k2, b, 60000, &o));
   CHECK_EQ (o.ok, 1);
   ok = acquire (c, k2, a, 60000, NULL, &err);
   CHECK_ERR (ok, err, LEASELOCK_BUSY, "");
   leaselock_record_t rec;
   bool found;
   ok = B->inspect (c, &(ll_op_t){ k2, strlen (k2), NULL }, &rec, &found, &err);
   CHECK_OK (ok, err);
   CHECK (found && !strcmp (rec.owner, b));
   CHECK (rec.expires_in_ms > 30000 && rec.expires_in_ms <= 60000);

   /* A short lease by the skewed process expires on the server's time. */
   const char *k3 = key ("skew-short");
   CHECK (run_skewed ("+1h", "acquire", k3, b, 3000, &o));
   CHECK_EQ (o.ok, 1);
   ok = acquire (c, k3, a, 60000, NULL, &err);
   CHECK_ERR (ok, err, LEASELOCK_BUSY, "");
   sleep_ms (3300);
   ok = acquire (c, k3, a, 60000, NULL, &err);
   CHECK_OK (ok, err);
   B->close (c);
}

/* ---- the fair mode's queue ---------------------------------------------- */

/* The entries stored for k in the queue collection, run-out ones too. */
static long long q_rows (const char *k)
{
   void *c = open_conn (URI);
   if (!c)
      return -1;
   bson_t q = BSON_INITIALIZER;
   bson_error_t e;
   BSON_APPEND_UTF8 (&q, "k", k);
   long long n =
     mongoc_collection_count_documents (ll_mongo_test_queue (c), &q, NULL, NULL, NULL, &e);
   if (n < 0)
      fprintf (stderr, "    count: %s\n", e.message);
   bson_destroy (&q);
   B->close (c);
   return n;
}

#define Q_TEST(name)                                                                               \
   static void test_queue_##name (void)                                                            \
   {                                                                                               \
      qc_run (URI, qc_##name, q_rows);                                                             \
   }
Q_TEST (join_order)
Q_TEST (rejoin_keeps_place)
Q_TEST (runs_out)
Q_TEST (leave_missing)
Q_TEST (keys_isolated)
Q_TEST (records_unaffected)
Q_TEST (fair_take)
Q_TEST (prune)
Q_TEST (odd_keys)

static void test_queue_concurrent_joins (void)
{
   qc_concurrent_joins (URI);
}

/* The database clock decides: a process an hour ahead or behind joins
 * behind the entries before it and ahead of those after, and its entry
 * (1 s) runs out by the server's clock. */
static void q_skew (const ll_backend_t *b, void *c, qc_rows_fn rows)
{
   (void)rows;
   const char *offsets[] = { "+1h", "-1h" };
   for (int i = 0; i < 2; i++) {
      char name[32];
      child_out_t o;
      snprintf (name, sizeof name, "q/skew%d", i);
      const char *k = key (name);
      CHECK_EQ (QJ (b, c, k, QC_A, 10000), 0);
      CHECK (run_skewed (offsets[i], "join", k, QC_B, 1000, &o));
      CHECK (llabs (o.time - (long long)time (NULL)) > 3000); /* really skewed */
      CHECK_EQ (o.ok, 1);
      CHECK_EQ (o.fence, 1); /* ahead */
      CHECK_EQ (QJ (b, c, k, QC_C, 10000), 2);
      sleep_ms (600);
      CHECK_EQ (QJ (b, c, k, QC_C, 10000), 2);
      sleep_ms (700);
      CHECK_EQ (QJ (b, c, k, QC_C, 10000), 1);
      CHECK (qc_leave (b, c, k, QC_A) && qc_leave (b, c, k, QC_B) && qc_leave (b, c, k, QC_C));
   }
}

static void test_queue_server_clock_only (void)
{
   qc_run (URI, q_skew, q_rows);
}

/* The queue's commands keep the rules (no $expr in an upsert's query, no
 * pipeline update, w=majority) and their round trips: the first join of a
 * key without a record 5 (the mark, the upsert of a document that holds
 * only the mark, then refresh, upsert, count), a later one 2 (refresh,
 * count: the connection knows the mark live long enough), a leave 1; the
 * dates sent are the server's own: in the count, the arrival it wrote,
 * and in an entry, the end of the mark it wrote (markEnd). */
static void test_queue_command_shape (void)
{
   void *c = open_conn (URI);
   CHECK (c);
   CHECK (capture_cmds (c));
   const char *k = key ("q/shape");
   char why[512];
   clear_cmds ();
   CHECK_EQ (QJ (B, c, k, QC_A, 10000), 0);
   CHECK_EQ (n_cmds, 5);
   CHECK (is_cmd (0, "findAndModify", false) && is_cmd (1, "findAndModify", true) &&
          is_cmd (2, "findAndModify", false) && is_cmd (3, "findAndModify", true));
   CHECK_EQ (QJ (B, c, k, QC_A, 10000), 0);
   CHECK_EQ (n_cmds, 7);
   CHECK (is_cmd (5, "findAndModify", false));
   bson_iter_t it;
   CHECK (bson_iter_init_find (&it, cmds[4], "aggregate") && bson_iter_init (&it, cmds[4]) &&
          has_date (&it));
   CHECK (qc_leave (B, c, k, QC_A));
   CHECK_EQ (n_cmds, 8);
   /* The counts' dates aside (checked above), every write keeps the rules. */
   bson_destroy (cmds[4]);
   bson_destroy (cmds[6]);
   cmds[4] = bson_new ();
   cmds[6] = bson_new ();
   int writes = check_cmds (true, why, sizeof why);
   if (writes < 0)
      fprintf (stderr, "    %s\n", why);
   CHECK_EQ (writes, 5);
   clear_cmds ();
   B->close (c);
}

/* A fair first take as owner o of k: whether it took it. */
static bool fair_take (void *c, const char *k, const char *o, leaselock_error_t *err)
{
   int64_t f = 0;
   ll_error_clear (err);
   return B->acquire (c, &(ll_take_t){ { k, strlen (k), o }, 10000, &HOLDER, -1, 0, true, false },
                      &f, err);
}

/* A fair first try reads the key's queue mark in its take, not the queue:
 * uncontended it is the plain take's one findAndModify, with no count of
 * the queue before it. Where a queue was used and its mark is still live,
 * the try asks the queue: BUSY while an entry is live, and it takes the key
 * once the queue emptied, mark or not. */
static void test_queue_mark_first_try (void)
{
   void *c = open_conn (URI);
   CHECK (c);
   CHECK (capture_cmds (c));
   const char *k = key ("q/mark-first");
   leaselock_error_t err;
   CHECK_OK (acquire (c, k, QC_H, 10000, NULL, &err), err);
   CHECK_OK (B->release (c, &(ll_op_t){ k, strlen (k), QC_H }, 0, &err), err);
   clear_cmds ();
   CHECK_OK (fair_take (c, k, QC_H, &err), err);
   CHECK_EQ (n_cmds, 1);
   CHECK (is_cmd (0, "findAndModify", false));
   CHECK_OK (B->release (c, &(ll_op_t){ k, strlen (k), QC_H }, 0, &err), err);
   CHECK_EQ (QJ (B, c, k, QC_A, 10000), 0);
   bool ok = fair_take (c, k, QC_H, &err);
   CHECK_ERR (ok, err, LEASELOCK_BUSY, "");
   CHECK (qc_leave (B, c, k, QC_A));
   CHECK_OK (fair_take (c, k, QC_H, &err), err); /* the mark is live still */
   CHECK_OK (B->release (c, &(ll_op_t){ k, strlen (k), QC_H }, 0, &err), err);
   clear_cmds ();
   B->close (c);
}

/* A join whose key's mark already ends later than it needs (another
 * waiter's longer keep) keeps that mark and is counted: the mark never
 * moves earlier, so once the shorter mark would have run out, a fair
 * first try on another connection still finds A queued. */
static void test_queue_mark_kept_later (void)
{
   void *c1 = open_conn (URI), *c2 = open_conn (URI), *c3 = open_conn (URI);
   CHECK (c1 && c2 && c3);
   const char *k = key ("q/mark-later");
   leaselock_error_t err;
   CHECK_EQ (QJ (B, c1, k, QC_A, 30000), 0);
   CHECK_EQ (QJ (B, c2, k, QC_B, 1000), 1);
   CHECK (qc_leave (B, c2, k, QC_B));
   sleep_ms (1000 + 2000 + 500); /* past the mark B's join asked for */
   bool ok = fair_take (c3, k, QC_H, &err);
   CHECK_ERR (ok, err, LEASELOCK_BUSY, "");
   CHECK (qc_leave (B, c1, k, QC_A));
   B->close (c1);
   B->close (c2);
   B->close (c3);
}

/* Holds the join up past its mark (keep 1 s: a mark of 3 s). */
static void sleep_past_mark (void)
{
   sleep_ms (1000 + 2000 + 300);
}

/* A join's entry never outlives the mark the join read, however late its
 * write reaches the server (a stalled client or network): A's join held
 * up past its mark leaves no live entry, so B, joining at once, has nobody
 * ahead (A's entry would live 1 s more without the mark's bound). */
static void test_queue_mark_late_join (void)
{
   void *c = open_conn (URI);
   CHECK (c);
   const char *k = key ("q/mark-late");
   ll_test_mongo_mark_hook = sleep_past_mark;
   int64_t a = QJ (B, c, k, QC_A, 1000);
   ll_test_mongo_mark_hook = NULL;
   CHECK_EQ (a, 0);
   CHECK_EQ (QJ (B, c, k, QC_B, 1000), 0);
   CHECK (qc_leave (B, c, k, QC_A) && qc_leave (B, c, k, QC_B));
   B->close (c);
}

/* ---- a proxy between the backend and the server ------------------------ */

static tcp_proxy_t PX;

/* The address of URI's single host (false when URI has several hosts or
 * is +srv). */
static bool upstream_addr (struct sockaddr_in *up)
{
   bson_error_t e;
   mongoc_uri_t *u = mongoc_uri_new_with_error (URI, &e);
   if (!u)
      return false;
   const mongoc_host_list_t *h = mongoc_uri_get_hosts (u);
   bool ok = h && !h->next && strncmp (URI, "mongodb://", 10) == 0;
   memset (up, 0, sizeof *up);
   up->sin_family = AF_INET;
   if (ok) {
      up->sin_port = htons (h->port);
      ok = inet_pton (AF_INET, strcmp (h->host, "localhost") ? h->host : "127.0.0.1",
                      &up->sin_addr) == 1;
   }
   mongoc_uri_destroy (u);
   return ok;
}

/* URI with its host list replaced by 127.0.0.1:port (after "://" and any
 * userinfo, up to the first '/' or '?'), directConnection=true and
 * extra_opts, written to out. */
static void uri_via (char *out, size_t size, int port, const char *extra_opts)
{
   const char *hs = URI + 10, *at = NULL;
   const char *he = hs + strcspn (hs, "/?");
   for (const char *p = hs; p < he; p++)
      if (*p == '@')
         at = p;
   if (at)
      hs = at + 1;
   char base[1024];
   snprintf (base, sizeof base, "%.*s127.0.0.1:%d%s", (int)(hs - URI), URI, port, he);
   char opts[512];
   snprintf (opts, sizeof opts, "directConnection=true%s%s", extra_opts ? "&" : "",
             extra_opts ? extra_opts : "");
   uri_with (out, size, base, opts);
}

/* Starts the proxy in front of URI's single host and writes a URI through
 * it to out. Returns false when URI has several hosts or is +srv. */
static bool proxy_start (char *out, size_t size, const char *extra_opts)
{
   struct sockaddr_in up;
   if (!upstream_addr (&up) || !tcp_proxy_start (&PX, &up))
      return false;
   uri_via (out, size, PX.port, extra_opts);
   return true;
}

static void proxy_stop (void)
{
   tcp_proxy_stop (&PX);
}

/* Retries acquire for up to 20 s while the answer is BACKEND. */
static bool acquire_until_back (void *c, const char *k, const char *owner, int64_t *fence,
                                leaselock_error_t *err)
{
   int64_t until = mono_ms () + 20000;
   for (;;) {
      if (acquire (c, k, owner, 30000, fence, err))
         return true;
      if (err->code != LEASELOCK_BACKEND || mono_ms () > until)
         return false;
      sleep_ms (200);
   }
}

static void test_server_down_and_back (void)
{
   char u[1200];
   if (!proxy_start (u, sizeof u,
                     "serverSelectionTimeoutMS=1500&connectTimeoutMS=1500&socketTimeoutMS=1500")) {
      fprintf (stderr, "    (skipped: needs a single-host mongodb:// URI)\n");
      return;
   }
   void *c = open_conn (u);
   if (!c) {
      proxy_stop ();
      CHECK (c);
   }
   leaselock_error_t err;
   char a[33];
   int64_t f1 = 0, f2 = 0;
   new_owner (a);
   const char *k = key ("down");
   bool ok = acquire (c, k, a, 30000, &f1, &err);
   bool ok2 = ok;

   /* Down: refused connections. */
   atomic_store (&PX.down, true);
   sleep_ms (100);
   /* The first call meets the closed socket, the next one a refused
    * connection during server selection. */
   bool down_ok = acquire (c, k, a, 30000, NULL, &err);
   leaselock_error_t first_err = err;
   int64_t t0 = mono_ms ();
   down_ok = down_ok || acquire (c, k, a, 30000, NULL, &err);
   int64_t took = mono_ms () - t0;
   leaselock_error_t down_err = err;
   atomic_store (&PX.down, false);
   bool back = acquire_until_back (c, k, a, &f2, &err);

   /* Hung: the server accepts and never answers; the socket timeout
    * (1.5 s here) ends the wait. */
   atomic_store (&PX.hang, true);
   int64_t t1 = mono_ms ();
   leaselock_error_t hang_err;
   bool hang_ok = B->renew (c, &(ll_op_t){ k, strlen (k), a }, 30000, &hang_err);
   int64_t hung = mono_ms () - t1;
   atomic_store (&PX.hang, false);
   /* The hung connection is dropped by the driver; unhang the proxy's pairs
    * by closing them. */
   atomic_store (&PX.down, true);
   sleep_ms (100);
   atomic_store (&PX.down, false);
   int64_t f3 = 0;
   leaselock_error_t err3;
   bool back2 = acquire_until_back (c, k, a, &f3, &err3);
   B->close (c);
   proxy_stop ();

   CHECK_OK (ok2, err);
   CHECK (!down_ok);
   CHECK_EQ (first_err.code, LEASELOCK_BACKEND);
   fprintf (stderr, "    down: %s after %lld ms: %s\n", leaselock_code_name (down_err.code),
            (long long)took, down_err.message);
   CHECK_EQ (down_err.code, LEASELOCK_BACKEND);
   CHECK (strstr (down_err.message, "mongodb: "));
   /* Bounded by the configured timeouts (1.5 s), far from the driver's
    * 30 s / 5 min defaults. */
   CHECK (took < 1500 + 8000);
   CHECK_OK (back, err);
   CHECK (f2 > f1);
   CHECK (!hang_ok);
   fprintf (stderr, "    hung: %s after %lld ms: %s\n", leaselock_code_name (hang_err.code),
            (long long)hung, hang_err.message);
   CHECK_EQ (hang_err.code, LEASELOCK_BACKEND);
   CHECK (hung >= 1000 && hung < 1500 + 8000);
   CHECK_OK (back2, err3);
   CHECK (f3 > f2);
}

/* Errors from operations (not only from open) never carry the password.
 * The test server has no authentication, so unless URI has credentials of
 * its own the connection is given a password that the driver's messages
 * will hold: the proxy's address, which every "connection refused" names. */
static void test_no_password_in_operation_errors (void)
{
   char u[1200], pw[64];
   if (!proxy_start (u, sizeof u,
                     "serverSelectionTimeoutMS=500&connectTimeoutMS=500&socketTimeoutMS=1000")) {
      fprintf (stderr, "    (skipped: needs a single-host mongodb:// URI)\n");
      return;
   }
   bson_error_t e;
   mongoc_uri_t *given = mongoc_uri_new_with_error (URI, &e);
   const char *own = given ? mongoc_uri_get_password (given) : NULL;
   snprintf (pw, sizeof pw, "%s", own ? own : "");
   if (!own)
      snprintf (pw, sizeof pw, "127.0.0.1:%d", PX.port);
   mongoc_uri_destroy (given);

   void *c = open_conn (u);
   bool set = c && (own || ll_mongo_test_set_password (c, pw));
   leaselock_error_t errs[7];
   bool oks[7] = { false };
   bool found = false, took = false;
   listing_t listed = { 0 };
   leaselock_record_t rec;
   char a[33];
   new_owner (a);
   const char *k = key ("no-password");
   if (set) {
      oks[0] = acquire (c, k, a, 30000, NULL, &errs[0]);
      atomic_store (&PX.down, true);
      sleep_ms (100);
      oks[1] = acquire (c, k, a, 30000, NULL, &errs[1]);
      oks[2] = B->renew (c, &(ll_op_t){ k, strlen (k), a }, 30000, &errs[2]);
      oks[3] = B->release (c, &(ll_op_t){ k, strlen (k), a }, 0, &errs[3]);
      oks[4] = B->inspect (c, &(ll_op_t){ k, strlen (k), NULL }, &rec, &found, &errs[4]);
      oks[5] = B->list (c, PFX, strlen (PFX), collect, &listed, &errs[5]);
      oks[6] = B->force_release (c, &(ll_op_t){ k, strlen (k), NULL }, &took, &errs[6]);
   }
   B->close (c);
   proxy_stop ();
   CHECK (c);
   CHECK (set);
   CHECK_OK (oks[0], errs[0]);
   int hidden = 0;
   for (int i = 1; i < 7; i++) {
      if (oks[i] || errs[i].code != LEASELOCK_BACKEND || strstr (errs[i].message, pw)) {
         char m[768];
         snprintf (m, sizeof m, "operation %d: want BACKEND without the password, got ok=%d %s %s",
                   i, (int)oks[i], leaselock_code_name (errs[i].code), errs[i].message);
         tl_fail (__FILE__, __LINE__, m);
         return;
      }
      hidden += strstr (errs[i].message, "***") != NULL;
   }
   /* The messages did name the proxy's address: hidden, not absent. */
   if (!own)
      CHECK (hidden > 0);
}

static void test_lost_reply_retry (void)
{
   char u[1200];
   /* retryWrites=false: on a replica set libmongoc would otherwise retry
    * the findAndModify whose reply was lost and get the server's recorded
    * answer, so the lost reply would never show (mongo-java-server has no
    * retryable writes either way). */
   if (!proxy_start (u, sizeof u,
                     "serverSelectionTimeoutMS=3000&socketTimeoutMS=3000&retryWrites=false")) {
      fprintf (stderr, "    (skipped: needs a single-host mongodb:// URI)\n");
      return;
   }
   void *c = open_conn (u);
   void *direct = open_conn (URI);
   leaselock_error_t err, e1, e2, e3;
   char a[33], b[33], x[33];
   int64_t f0 = 0, f1 = 0, f2 = 0;
   bool ok = false, ok1 = false, ok3 = false, found = false;
   leaselock_record_t rec;
   new_owner (a);
   new_owner (b);
   new_owner (x);
   const char *k = key ("lost-reply");
   memset (&rec, 0, sizeof rec);
   if (c && direct) {
      /* A free record, so the first command of the acquire is the write. */
      ok = acquire (direct, k, a, 30000, &f0, &err) &&
           B->release (direct, &(ll_op_t){ k, strlen (k), a }, 0, &err);
      atomic_store (&PX.drop_reply, true);
      ok1 = acquire (c, k, b, 30000, &f1, &e1);
      /* The write happened: b owns it, x is refused. */
      B->inspect (direct, &(ll_op_t){ k, strlen (k), NULL }, &rec, &found, &e2);
      acquire (direct, k, x, 30000, NULL, &e3);
      ok3 = acquire_until_back (c, k, b, &f2, &err);
   }
   B->close (c);
   B->close (direct);
   proxy_stop ();
   CHECK (c && direct);
   CHECK (ok);
   CHECK_EQ (atomic_load (&PX.dropped), 1);
   CHECK (!ok1);
   CHECK_EQ (e1.code, LEASELOCK_BACKEND);
   CHECK (found && !strcmp (rec.owner, b));
   CHECK_EQ (rec.fence, f0 + 1);
   CHECK_EQ (e3.code, LEASELOCK_BUSY);
   CHECK_OK (ok3, err);
   CHECK (f2 > f0 + 1);
}

/* ---- fork ------------------------------------------------------------- */

static void test_fork_abandon (void)
{
   void *c = open_conn (URI);
   CHECK (c);
   leaselock_error_t err;
   char a[33];
   new_owner (a);
   const char *k = key ("fork");
   bool ok = acquire (c, k, a, 30000, NULL, &err);
   CHECK_OK (ok, err);
   fflush (NULL);
   pid_t pid = fork ();
   if (pid == 0) {
      /* The child drops the parent's connection without I/O, then works on
       * its own; the lease stays the parent's. */
      B->abandon (c);
      leaselock_error_t e;
      char o[33];
      void *mine = B->open (URI, &e);
      if (!mine)
         _exit (3);
      new_owner (o);
      int64_t f;
      bool busy =
        !B->acquire (mine, &(ll_take_t){ { k, strlen (k), o }, 30000, &HOLDER, 0, 0, false, false },
                     &f, &e) &&
        e.code == LEASELOCK_BUSY;
      B->close (mine);
      _exit (busy ? 0 : 4);
   }
   int st = 0;
   CHECK (pid > 0);
   CHECK (waitpid (pid, &st, 0) == pid);
   CHECK (WIFEXITED (st));
   CHECK_EQ (WEXITSTATUS (st), 0);
   /* The parent's connection (and socket) still works. */
   ok = B->renew (c, &(ll_op_t){ k, strlen (k), a }, 30000, &err);
   CHECK_OK (ok, err);
   ok = B->release (c, &(ll_op_t){ k, strlen (k), a }, 0, &err);
   CHECK_OK (ok, err);
   B->close (c);
}

static tls_proxy_t TF;

/* Starts the TLS front and writes a URI through it (TLS on, any certificate
 * accepted) to out. False when URI has several hosts or is +srv. */
static bool tls_front_start (char *out, size_t size, const char *extra_opts, bool *setup_ok)
{
   *setup_ok = false;
   struct sockaddr_in up;
   if (!upstream_addr (&up))
      return false;
   if (!tls_proxy_start (&TF, &up))
      return true;
   char opts[512];
   snprintf (opts, sizeof opts, "tls=true&tlsInsecure=true%s%s", extra_opts ? "&" : "",
             extra_opts ? extra_opts : "");
   uri_via (out, size, TF.port, opts);
   *setup_ok = true;
   return true;
}

/* After fork, abandoning a TLS connection sends nothing on the socket the
 * child shares with its parent. Destroying the client would run OpenSSL's
 * SSL_shutdown, whose close_notify ends the parent's TLS session (and any
 * record from the child's copy of the session state reuses a sequence number
 * the parent will use too). mongo-java-server has no TLS: a TLS front of the
 * test's own terminates it and reports how each connection ended. */
static void test_fork_abandon_tls (void)
{
   char u[1200];
   bool setup_ok;
   if (!tls_front_start (u, sizeof u, "retryWrites=false", &setup_ok)) {
      fprintf (stderr, "    (skipped: needs a single-host mongodb:// URI)\n");
      return;
   }
   CHECK (setup_ok);
   void *c = open_conn (u);
   leaselock_error_t err;
   char a[33];
   bool ok = false, renewed = false;
   int st = -1, accepted = 0, notify = 0, errors = 0;
   pid_t pid = -1;
   new_owner (a);
   const char *k = key ("fork-tls");
   if (c)
      ok = acquire (c, k, a, 30000, NULL, &err);
   if (ok) {
      fflush (NULL);
      pid = fork ();
      if (pid == 0) {
         B->abandon (c);
         _exit (0);
      }
      if (pid > 0 && waitpid (pid, &st, 0) == pid) {
         /* Whatever the child sent has reached the front by now. */
         sleep_ms (200);
         notify = atomic_load (&TF.close_notify);
         errors = atomic_load (&TF.tls_errors);
         renewed = B->renew (c, &(ll_op_t){ k, strlen (k), a }, 30000, &err);
         accepted = atomic_load (&TF.accepted);
         if (renewed)
            renewed = B->release (c, &(ll_op_t){ k, strlen (k), a }, 0, &err);
      }
   }
   B->close (c);
   tls_proxy_stop (&TF);
   CHECK (c);
   CHECK_OK (ok, err);
   CHECK (pid > 0);
   CHECK (WIFEXITED (st) && WEXITSTATUS (st) == 0);
   CHECK_EQ (notify, 0);
   CHECK_EQ (errors, 0);
   /* The parent's TLS connection still works: no reconnection. */
   CHECK_OK (renewed, err);
   CHECK_EQ (accepted, 1);
}

/* ---- URI, collection, database ---------------------------------------- */

static void test_collection_option (void)
{
   char u[1200];
   uri_with (u, sizeof u, URI, "leaselockCollection=leaselock_custom");
   void *c = open_conn (u);
   CHECK (c);
   leaselock_error_t err;
   char a[33];
   new_owner (a);
   const char *k = key ("custom-coll");
   bool ok = acquire (c, k, a, 30000, NULL, &err);
   CHECK_OK (ok, err);
   CHECK (!strcmp (mongoc_collection_get_name (ll_mongo_test_collection (c)), "leaselock_custom"));
   /* The record is really in that collection: count it there. */
   bson_error_t e;
   bson_t *filter = BCON_NEW ("_id", BCON_UTF8 (k), "owner", BCON_UTF8 (a));
   int64_t n =
     mongoc_collection_count_documents (ll_mongo_test_collection (c), filter, NULL, NULL, NULL, &e);
   bson_destroy (filter);
   B->close (c);
   CHECK_EQ (n, 1);

   /* The namespace "db.collection" may have 249 bytes, not one more: the
    * queue's "db.collection.queue" must fit MongoDB 4.4's 255. */
   {
      bson_error_t ue;
      mongoc_uri_t *given = mongoc_uri_new_with_error (URI, &ue);
      CHECK (given);
      const char *db = mongoc_uri_get_database (given);
      size_t room = 255 - strlen (".queue") - 1 - strlen (db && *db ? db : "leaselock");
      mongoc_uri_destroy (given);
      char name[300], nu[1600];
      memset (name, 'n', room + 1);
      name[room] = '\0';
      uri_with (nu, sizeof nu, URI, "leaselockCollection=");
      strcat (nu, name);
      /* Open writes the failover record in "<collection>.meta": a server
       * with a shorter limit (MongoDB 4.2, the test server: 120, 128)
       * refuses the namespace there, with its own message; a later one
       * takes it. Either way the URI's check let it through. */
      leaselock_error_t le;
      c = B->open (nu, &le);
      CHECK (c || (le.code == LEASELOCK_BACKEND && strstr (le.message, "too long")));
      B->close (c);
      name[room] = 'n';
      name[room + 1] = '\0';
      uri_with (nu, sizeof nu, URI, "leaselockCollection=");
      strcat (nu, name);
      leaselock_error_t oe;
      c = B->open (nu, &oe);
      B->close (c);
      CHECK (!c);
      CHECK_ERR (false, oe, LEASELOCK_INVALID, "longer than 249 bytes (250");
   }

   /* The default collection is "leaselock". */
   c = open_conn (URI);
   CHECK (c);
   CHECK (!strcmp (mongoc_collection_get_name (ll_mongo_test_collection (c)), "leaselock"));
   B->close (c);
}

/* The driver settings leaselock changes, as the client sees them: the
 * defaults unless the URI sets its own, then the URI's. */
static void test_driver_defaults (void)
{
   bson_error_t e;
   mongoc_uri_t *given = mongoc_uri_new_with_error (URI, &e);
   CHECK (given);
   bool sets_own = mongoc_uri_has_option (given, MONGOC_URI_SOCKETTIMEOUTMS) ||
                   mongoc_uri_has_option (given, MONGOC_URI_SERVERSELECTIONTIMEOUTMS) ||
                   mongoc_uri_has_option (given, MONGOC_URI_CONNECTTIMEOUTMS) ||
                   mongoc_uri_has_option (given, MONGOC_URI_WTIMEOUTMS) ||
                   mongoc_uri_has_option (given, MONGOC_URI_W) || mongoc_uri_get_appname (given);
   mongoc_uri_destroy (given);
   void *c;
   const mongoc_uri_t *u;
   const mongoc_write_concern_t *wc;
   if (!sets_own) {
      c = open_conn (URI);
      CHECK (c);
      u = mongoc_client_get_uri (ll_mongo_test_client (c));
      wc = mongoc_collection_get_write_concern (ll_mongo_test_collection (c));
      int32_t st = mongoc_uri_get_option_as_int32 (u, MONGOC_URI_SOCKETTIMEOUTMS, -1);
      int32_t sst = mongoc_uri_get_option_as_int32 (u, MONGOC_URI_SERVERSELECTIONTIMEOUTMS, -1);
      int32_t ct = mongoc_uri_get_option_as_int32 (u, MONGOC_URI_CONNECTTIMEOUTMS, -1);
      bool app = mongoc_uri_get_appname (u) && !strcmp (mongoc_uri_get_appname (u), "leaselock");
      bool majority = mongoc_write_concern_get_wmajority (wc);
      int64_t wt = mongoc_write_concern_get_wtimeout_int64 (wc);
      B->close (c);
      CHECK_EQ (st, 10000);
      CHECK_EQ (sst, 5000);
      CHECK_EQ (ct, 5000);
      CHECK (app);
      CHECK (majority);
      CHECK_EQ (wt, 5000);
   } else {
      fprintf (stderr, "    (defaults not checked: the URI sets its own)\n");
   }

   char o[1200];
   uri_with (o, sizeof o, URI,
             "socketTimeoutMS=4321&serverSelectionTimeoutMS=3210&connectTimeoutMS=2109&"
             "wtimeoutMS=1098&appname=mine");
   c = open_conn (o);
   CHECK (c);
   u = mongoc_client_get_uri (ll_mongo_test_client (c));
   wc = mongoc_collection_get_write_concern (ll_mongo_test_collection (c));
   int32_t st = mongoc_uri_get_option_as_int32 (u, MONGOC_URI_SOCKETTIMEOUTMS, -1);
   int32_t sst = mongoc_uri_get_option_as_int32 (u, MONGOC_URI_SERVERSELECTIONTIMEOUTMS, -1);
   int32_t ct = mongoc_uri_get_option_as_int32 (u, MONGOC_URI_CONNECTTIMEOUTMS, -1);
   bool app = mongoc_uri_get_appname (u) && !strcmp (mongoc_uri_get_appname (u), "mine");
   int64_t wt = mongoc_write_concern_get_wtimeout_int64 (wc);
   B->close (c);
   CHECK_EQ (st, 4321);
   CHECK_EQ (sst, 3210);
   CHECK_EQ (ct, 2109);
   CHECK (app);
   CHECK_EQ (wt, 1098);
}

/* A lease that expired (by the server clock) is no longer the owner's to
 * renew, even though nobody took it. */
static void test_renew_expired (void)
{
   void *c = open_conn (URI);
   CHECK (c);
   leaselock_error_t err;
   char a[33];
   new_owner (a);
   const char *k = key ("renew-expired");
   bool ok = acquire (c, k, a, 300, NULL, &err);
   CHECK_OK (ok, err);
   sleep_ms (400);
   ok = B->renew (c, &(ll_op_t){ k, strlen (k), a }, 30000, &err);
   B->close (c);
   CHECK_ERR (ok, err, LEASELOCK_NOT_HELD, "");
}

/* A closed port on 127.0.0.1. */
static int closed_port (void)
{
   int fd = tcp_listen (0);
   int port = tcp_port_of (fd);
   close (fd);
   return port;
}

static void expect_open_error (const char *uri, leaselock_code_t code, const char *substr, int line)
{
   leaselock_error_t err;
   ll_error_clear (&err);
   void *c = B->open (uri, &err);
   if (c || err.code != code || !strstr (err.message, substr) || strstr (err.message, "s3cretPW")) {
      char m[1024];
      snprintf (m, sizeof m, "open(%s): want %s containing \"%s\", got %s %s \"%s\"", uri,
                leaselock_code_name (code), substr, c ? "a connection" : "NULL",
                leaselock_code_name (err.code), err.message);
      tl_fail (__FILE__, line, m);
      B->close (c);
   }
}

#define EXPECT_OPEN_ERROR(uri, code, substr)                                                       \
   CHECK_CALL (expect_open_error ((uri), (code), (substr), __LINE__))

static void test_bad_uris (void)
{
   char u[1200];
   int port = closed_port ();

   /* Nothing listens there: a BACKEND error naming the host. */
   snprintf (u, sizeof u,
             "mongodb://127.0.0.1:%d/?serverSelectionTimeoutMS=500&connectTimeoutMS=500", port);
   EXPECT_OPEN_ERROR (u, LEASELOCK_BACKEND, "127.0.0.1");
   /* A password never shows up in a message. */
   snprintf (
     u, sizeof u,
     "mongodb://user:s3cretPW@127.0.0.1:%d/?serverSelectionTimeoutMS=500&connectTimeoutMS=500",
     port);
   EXPECT_OPEN_ERROR (u, LEASELOCK_BACKEND, "mongodb: ");
   EXPECT_OPEN_ERROR ("mongodb://user:s3cretPW@127.0.0.1:99999/", LEASELOCK_INVALID,
                      "mongodb: invalid URI");
   EXPECT_OPEN_ERROR ("mongodb://user:s3cretPW@127.0.0.1/?bogusOption=1", LEASELOCK_INVALID,
                      "bogusOption");
   /* An unknown host. */
   EXPECT_OPEN_ERROR (
     "mongodb://no-such-host.invalid:27017/?serverSelectionTimeoutMS=500&connectTimeoutMS=500",
     LEASELOCK_BACKEND, "no-such-host.invalid");
   /* Malformed. */
   EXPECT_OPEN_ERROR ("mongodb://", LEASELOCK_INVALID, "mongodb: invalid URI");
   EXPECT_OPEN_ERROR ("mongodb://127.0.0.1:abc/", LEASELOCK_INVALID, "mongodb: invalid URI");
   EXPECT_OPEN_ERROR ("mongodb://127.0.0.1:0/", LEASELOCK_INVALID, "mongodb: invalid URI");
   EXPECT_OPEN_ERROR ("mongodb://127.0.0.1/bad.db", LEASELOCK_INVALID, "database");
   EXPECT_OPEN_ERROR ("mongodb://127.0.0.1/?socketTimeoutMS=abc", LEASELOCK_INVALID,
                      "sockettimeoutms");
   /* Timeouts that would not bound a call (0: the driver's default, 5 min
    * for the socket; negative: no bound), refused before any I/O. */
   EXPECT_OPEN_ERROR ("mongodb://127.0.0.1/?socketTimeoutMS=0", LEASELOCK_INVALID,
                      "socketTimeoutMS=0: expected 1 to 86400000 ms");
   EXPECT_OPEN_ERROR ("mongodb://127.0.0.1/?socketTimeoutMS=-5", LEASELOCK_INVALID,
                      "socketTimeoutMS=-5");
   EXPECT_OPEN_ERROR ("mongodb://127.0.0.1/?serverSelectionTimeoutMS=0", LEASELOCK_INVALID,
                      "serverSelectionTimeoutMS=0");
   EXPECT_OPEN_ERROR ("mongodb://127.0.0.1/?connectTimeoutMS=-1", LEASELOCK_INVALID,
                      "connectTimeoutMS=-1");
   EXPECT_OPEN_ERROR ("mongodb://127.0.0.1/?socketTimeoutMS=2147483647", LEASELOCK_INVALID,
                      "socketTimeoutMS=2147483647");
   EXPECT_OPEN_ERROR ("mongodb://127.0.0.1/?w=0&journal=true", LEASELOCK_INVALID,
                      "mongodb: invalid URI");
   /* Unacknowledged writes, refused before any I/O (nothing listens on the
    * closed port). */
   snprintf (u, sizeof u, "mongodb://127.0.0.1:%d/?w=0", port);
   EXPECT_OPEN_ERROR (u, LEASELOCK_INVALID, "unacknowledged writes cannot hold a lock");
   snprintf (u, sizeof u, "mongodb://127.0.0.1:%d/?w=-1", port);
   EXPECT_OPEN_ERROR (u, LEASELOCK_INVALID, "unacknowledged writes cannot hold a lock");
   snprintf (u, sizeof u, "mongodb://127.0.0.1:%d/?safe=false", port);
   EXPECT_OPEN_ERROR (u, LEASELOCK_INVALID, "unacknowledged writes cannot hold a lock");
   EXPECT_OPEN_ERROR ("mongodb+srv://127.0.0.1:1234/", LEASELOCK_INVALID, "mongodb: invalid URI");
   EXPECT_OPEN_ERROR ("mongodb+srv://no-such-host.invalid/", LEASELOCK_INVALID, "service name");
   /* A name that does not resolve (or has no SRV record): the network. */
   EXPECT_OPEN_ERROR ("mongodb+srv://locks.no-such-host.invalid/", LEASELOCK_BACKEND, "SRV");
   EXPECT_OPEN_ERROR ("mongodb://127.0.0.1/?foo=bar", LEASELOCK_INVALID,
                      "unknown MongoDB URI option \"foo\"");
   EXPECT_OPEN_ERROR ("mongodb://127.0.0.1/?leaselockCollection=a&x", LEASELOCK_INVALID, "\"x\"");
   /* Collection names MongoDB refuses. */
   EXPECT_OPEN_ERROR ("mongodb://127.0.0.1/?leaselockCollection=", LEASELOCK_INVALID, "empty");
   EXPECT_OPEN_ERROR ("mongodb://127.0.0.1/?leaselockCollection=a$b", LEASELOCK_INVALID, "'$'");
   EXPECT_OPEN_ERROR ("mongodb://127.0.0.1/?leaselockCollection=a%24b", LEASELOCK_INVALID, "'$'");
   EXPECT_OPEN_ERROR ("mongodb://127.0.0.1/?leaselockCollection=system.locks", LEASELOCK_INVALID,
                      "system.");
   EXPECT_OPEN_ERROR ("mongodb://127.0.0.1/?leaselockCollection=.x", LEASELOCK_INVALID, "'.'");
   EXPECT_OPEN_ERROR ("mongodb://127.0.0.1/?leaselockCollection=a%00b", LEASELOCK_INVALID, "NUL");
   EXPECT_OPEN_ERROR ("mongodb://127.0.0.1/?leaselockCollection=a%zz", LEASELOCK_INVALID,
                      "percent");
   EXPECT_OPEN_ERROR ("mongodb://127.0.0.1/?leaselockCollection=%ff%fe", LEASELOCK_INVALID,
                      "UTF-8");
   {
      char longname[400];
      memset (longname, 'c', 300);
      longname[300] = '\0';
      snprintf (u, sizeof u, "mongodb://127.0.0.1/?leaselockCollection=%s", longname);
      EXPECT_OPEN_ERROR (u, LEASELOCK_INVALID, "255");
   }
   /* The same through the public API: a clear error, never a crash. */
   leaselock_error_t err;
   leaselock_client_t *cl = leaselock_client_new ("mongodb://127.0.0.1/?foo=bar", NULL, &err);
   CHECK (!cl);
   CHECK_ERR (false, err, LEASELOCK_INVALID, "foo");
   snprintf (u, sizeof u, "mongodb://127.0.0.1:%d/?serverSelectionTimeoutMS=300", port);
   cl = leaselock_client_new (u, NULL, &err);
   CHECK (!cl);
   CHECK_ERR (false, err, LEASELOCK_BACKEND, "mongodb: ");
}

/* Keys are strings, never operators or patterns. */

static void test_keys_are_text (void)
{
   void *c = open_conn (URI);
   CHECK (c);
   leaselock_error_t err;
   char a[33], pfx[300];
   new_owner (a);
   const char *names[] = {
      "t/a.b(1)", "t/aXb(1)", "t/$where", "t/{\"$gt\":\"\"}", "t/^x|y\\", "t/é"
   };
   for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
      bool ok = acquire (c, key (names[i]), a, 30000, NULL, &err);
      CHECK_OK (ok, err);
   }
   listing_t listed = { 0 };
   snprintf (pfx, sizeof pfx, "%s", key ("t/a.b("));
   bool ok = B->list (c, pfx, strlen (pfx), collect, &listed, &err);
   CHECK_OK (ok, err);
   CHECK_EQ (listed.n, 1);
   listed.n = 0;
   snprintf (pfx, sizeof pfx, "%s", key ("t/^x|"));
   ok = B->list (c, pfx, strlen (pfx), collect, &listed, &err);
   CHECK_OK (ok, err);
   CHECK_EQ (listed.n, 1);
   listed.n = 0;
   snprintf (pfx, sizeof pfx, "%s", key ("t/"));
   ok = B->list (c, pfx, strlen (pfx), collect, &listed, &err);
   CHECK_OK (ok, err);
   CHECK_EQ (listed.n, 6);
   leaselock_record_t rec;
   bool found;
   ok = B->inspect (c, &(ll_op_t){ key ("t/$where"), strlen (key ("t/$where")), NULL }, &rec,
                    &found, &err);
   CHECK_OK (ok, err);
   CHECK (found && !strcmp (rec.owner, a) && rec.pid == 4242 && !strcmp (rec.host, "test-host") &&
          !strcmp (rec.label, "test_mongo"));
   B->close (c);
}

/* Released with min_hold: no owner, yet not free until the hold is over,
 * as judged and reported by the server. */
static void test_min_hold_record (void)
{
   void *c = open_conn (URI);
   CHECK (c);
   leaselock_error_t err;
   char a[33], b[33];
   new_owner (a);
   new_owner (b);
   const char *k = key ("hold");
   int64_t f = 0;
   bool ok = acquire (c, k, a, 30000, &f, &err);
   CHECK_OK (ok, err);
   ok = B->release (c, &(ll_op_t){ k, strlen (k), a }, 60000, &err);
   CHECK_OK (ok, err);
   leaselock_record_t rec;
   bool found, took = true;
   ok = B->inspect (c, &(ll_op_t){ k, strlen (k), NULL }, &rec, &found, &err);
   CHECK_OK (ok, err);
   CHECK (found && rec.owner[0] == '\0' && rec.fence == f);
   CHECK (rec.expires_in_ms > 50000 && rec.expires_in_ms <= 60000);
   ok = acquire (c, k, b, 30000, NULL, &err);
   CHECK_ERR (ok, err, LEASELOCK_BUSY, "");
   ok = B->release (c, &(ll_op_t){ k, strlen (k), a }, 0, &err); /* no longer a's */
   CHECK_ERR (ok, err, LEASELOCK_NOT_HELD, "");
   ok = B->force_release (c, &(ll_op_t){ k, strlen (k), NULL }, &took, &err);
   CHECK_OK (ok, err);
   CHECK (!took); /* no owner: no live lease was taken */
   ok = acquire (c, k, b, 30000, &f, &err);
   CHECK_OK (ok, err);
   ok = B->force_release (c, &(ll_op_t){ k, strlen (k), NULL }, &took, &err);
   CHECK_OK (ok, err);
   CHECK (took);
   ok = B->renew (c, &(ll_op_t){ k, strlen (k), b }, 30000, &err);
   CHECK_ERR (ok, err, LEASELOCK_NOT_HELD, "");
   B->close (c);
}

/* ---- the next owner's reservation (acquire_wait) ----------------------- */

/* The stored nextOwner of k: the owner, "" when null, "-" when missing,
 * "?" when there is no record. */
static void next_owner_of (void *c, const char *k, char out[40])
{
   bson_t *filter = BCON_NEW ("_id", BCON_UTF8 (k));
   mongoc_cursor_t *cur =
     mongoc_collection_find_with_opts (ll_mongo_test_collection (c), filter, NULL, NULL);
   const bson_t *doc;
   bson_iter_t it;
   snprintf (out, 40, "?");
   if (mongoc_cursor_next (cur, &doc)) {
      if (!bson_iter_init_find (&it, doc, "nextOwner"))
         snprintf (out, 40, "-");
      else
         snprintf (out, 40, "%s", BSON_ITER_HOLDS_UTF8 (&it) ? bson_iter_utf8 (&it, NULL) : "");
   }
   mongoc_cursor_destroy (cur);
   bson_destroy (filter);
}

#define CHECK_NEXT(c, k, want)                                                                     \
   do {                                                                                            \
      char _n[40];                                                                                 \
      next_owner_of ((c), (k), _n);                                                                \
      if (strcmp (_n, (want))) {                                                                   \
         char _m[200];                                                                             \
         snprintf (_m, sizeof _m, "nextOwner of %s: want \"%s\", got \"%s\"", (k), (want), _n);    \
         tl_fail (__FILE__, __LINE__, _m);                                                         \
         return;                                                                                   \
      }                                                                                            \
   } while (0)

/* Makes k's record look written before reservations existed: the
 * reservation's fields removed. */
static bool strip_next_fields (void *c, const char *k)
{
   bson_t *q = BCON_NEW ("_id", BCON_UTF8 (k));
   bson_t *u = BCON_NEW ("$unset", "{", "nextOwner", BCON_UTF8 (""), "nextAt", BCON_UTF8 (""),
                         "nextMs", BCON_UTF8 (""), "nextWaitedMs", BCON_UTF8 (""), "}");
   bson_t reply;
   bson_iter_t it;
   bool ok =
     mongoc_collection_update_one (ll_mongo_test_collection (c), q, u, NULL, &reply, NULL) &&
     bson_iter_init_find (&it, &reply, "matchedCount") && bson_iter_as_int64 (&it) == 1;
   bson_destroy (&reply);
   bson_destroy (q);
   bson_destroy (u);
   return ok;
}

/* (1) A live reservation of waiter W keeps a released record from another
 * owner (acquire and a younger acquire_wait: BUSY) while W's acquire takes
 * it and clears the reservation; another owner can then reserve. */
static void test_reservation_blocks_others (void)
{
   void *c = open_conn (URI);
   CHECK (c);
   leaselock_error_t err;
   char a[33], w[33], b[33];
   bool ok, reserved;
   int64_t f = 0, f2 = 0;
   new_owner (a);
   new_owner (w);
   new_owner (b);
   const char *k = key ("resv-blocks");
   ok = acquire (c, k, a, 30000, &f, &err);
   CHECK_OK (ok, err);
   ok = acquire_wait (c, k, w, 2000, 0, &f2, &reserved, &err);
   CHECK_ERR (ok, err, LEASELOCK_BUSY, "held by another owner");
   CHECK (reserved);
   CHECK_NEXT (c, k, w);
   ok = acquire_wait (c, k, w, 2000, 50, NULL, &reserved, &err); /* already W's */
   CHECK_ERR (ok, err, LEASELOCK_BUSY, "held by another owner");
   CHECK (reserved);
   ok = B->release (c, &(ll_op_t){ k, strlen (k), a }, 0, &err);
   CHECK_OK (ok, err);
   ok = acquire (c, k, b, 30000, NULL, &err); /* expired, but W's */
   CHECK_ERR (ok, err, LEASELOCK_BUSY, "held by another owner");
   ok = acquire (c, k, a, 30000, NULL, &err); /* the old holder too */
   CHECK_ERR (ok, err, LEASELOCK_BUSY, "held by another owner");
   ok = acquire_wait (c, k, b, 2000, 0, NULL, &reserved, &err);
   CHECK_ERR (ok, err, LEASELOCK_BUSY, "held by another owner");
   CHECK (!reserved);
   CHECK_NEXT (c, k, w);
   ok = acquire (c, k, w, 30000, &f2, &err);
   CHECK_OK (ok, err);
   CHECK_EQ (f2, f + 1);
   CHECK_NEXT (c, k, ""); /* cleared by the take */
   ok = acquire_wait (c, k, b, 2000, 0, NULL, &reserved, &err);
   CHECK_ERR (ok, err, LEASELOCK_BUSY, "held by another owner");
   CHECK (reserved);
   CHECK_NEXT (c, k, b);
   ok = B->release (c, &(ll_op_t){ k, strlen (k), w }, 0, &err);
   CHECK_OK (ok, err);
   ok = acquire (c, k, w, 30000, NULL, &err); /* B's turn now */
   CHECK_ERR (ok, err, LEASELOCK_BUSY, "held by another owner");
   ok = acquire_wait (c, k, b, 2000, 100, &f2, &reserved, &err);
   CHECK_OK (ok, err);
   CHECK (!reserved);
   CHECK_EQ (f2, f + 2);
   CHECK_NEXT (c, k, "");
   B->close (c);
}

/* A claim reports the record's time left by the server's clock: while the
 * key is held (ttl 10 s), and after a release with min_hold, whose end
 * nothing notifies. */
static void test_reservation_reports_left (void)
{
   void *c = open_conn (URI);
   CHECK (c);
   leaselock_error_t err;
   char a[33], w[33];
   bool ok, reserved;
   new_owner (a);
   new_owner (w);
   const char *k = key ("resv-left");
   ok = acquire (c, k, a, 10000, NULL, &err);
   CHECK_OK (ok, err);
   ok = acquire_wait (c, k, w, 2000, 0, NULL, &reserved, &err);
   CHECK_ERR (ok, err, LEASELOCK_BUSY, "held by another owner");
   CHECK (reserved);
   CHECK (last_left > 8000 && last_left <= 10000);
   ok = B->release (c, &(ll_op_t){ k, strlen (k), a }, 3000, &err);
   CHECK_OK (ok, err);
   ok = acquire_wait (c, k, w, 2000, 10, NULL, &reserved, &err);
   CHECK_ERR (ok, err, LEASELOCK_BUSY, "held by another owner");
   CHECK (reserved);
   CHECK (last_left > 1000 && last_left <= 3000);
   B->close (c);
}

/* (2) A reservation past its until (by the server clock) no longer blocks;
 * acquire_wait of a free or missing key takes it in one call. */
static void test_reservation_runs_out (void)
{
   void *c = open_conn (URI);
   CHECK (c);
   leaselock_error_t err;
   char a[33], w[33], b[33], d[33];
   bool ok, reserved;
   int64_t f = 0, f2 = 0;
   new_owner (a);
   new_owner (w);
   new_owner (b);
   new_owner (d);
   const char *k = key ("resv-runs-out");
   ok = acquire (c, k, a, 30000, &f, &err);
   CHECK_OK (ok, err);
   ok = acquire_wait (c, k, w, 1000, 0, NULL, &reserved, &err);
   CHECK_ERR (ok, err, LEASELOCK_BUSY, "held by another owner");
   CHECK (reserved);
   ok = B->release (c, &(ll_op_t){ k, strlen (k), a }, 0, &err);
   CHECK_OK (ok, err);
   ok = acquire (c, k, b, 30000, NULL, &err);
   CHECK_ERR (ok, err, LEASELOCK_BUSY, "held by another owner");
   sleep_ms (1300);
   ok = acquire (c, k, b, 30000, &f2, &err);
   CHECK_OK (ok, err);
   CHECK_EQ (f2, f + 1);
   CHECK_NEXT (c, k, "");
   /* A free record: acquire_wait takes it, not reserved. */
   ok = B->release (c, &(ll_op_t){ k, strlen (k), b }, 0, &err);
   CHECK_OK (ok, err);
   ok = acquire_wait (c, k, d, 1000, 0, &f2, &reserved, &err);
   CHECK_OK (ok, err);
   CHECK (!reserved);
   CHECK_EQ (f2, f + 2);
   /* A missing key: taken through the upsert. */
   const char *k2 = key ("resv-runs-out-new");
   ok = acquire_wait (c, k2, d, 1000, 0, &f2, &reserved, &err);
   CHECK_OK (ok, err);
   CHECK (!reserved);
   CHECK_EQ (f2, 1);
   B->close (c);
}

/* (3) An older waiter (larger waited_ms) takes the reservation from a
 * younger one; a younger one does not take it from an older one. */
static void test_reservation_oldest_waiter (void)
{
   void *c = open_conn (URI);
   CHECK (c);
   leaselock_error_t err;
   char a[33], y[33], o[33];
   bool ok, reserved;
   new_owner (a);
   new_owner (y);
   new_owner (o);
   const char *k = key ("resv-oldest");
   ok = acquire (c, k, a, 30000, NULL, &err);
   CHECK_OK (ok, err);
   ok = acquire_wait (c, k, y, 2000, 0, NULL, &reserved, &err);
   CHECK_ERR (ok, err, LEASELOCK_BUSY, "held by another owner");
   CHECK (reserved);
   CHECK_NEXT (c, k, y);
   ok = acquire_wait (c, k, o, 2000, 5000, NULL, &reserved, &err); /* older */
   CHECK_ERR (ok, err, LEASELOCK_BUSY, "held by another owner");
   CHECK (reserved);
   CHECK_NEXT (c, k, o);
   ok = acquire_wait (c, k, y, 2000, 100, NULL, &reserved, &err); /* younger */
   CHECK_ERR (ok, err, LEASELOCK_BUSY, "held by another owner");
   CHECK (!reserved);
   CHECK_NEXT (c, k, o);
   ok = acquire_wait (c, k, o, 2000, 5100, NULL, &reserved, &err);
   CHECK_ERR (ok, err, LEASELOCK_BUSY, "held by another owner");
   CHECK (reserved);
   ok = B->release (c, &(ll_op_t){ k, strlen (k), a }, 0, &err);
   CHECK_OK (ok, err);
   ok = acquire_wait (c, k, y, 2000, 200, NULL, &reserved, &err);
   CHECK_ERR (ok, err, LEASELOCK_BUSY, "held by another owner");
   CHECK (!reserved);
   ok = acquire_wait (c, k, o, 2000, 5200, NULL, &reserved, &err);
   CHECK_OK (ok, err);
   CHECK (!reserved);
   B->close (c);
}

/* (4) A plain acquire that is BUSY never reserves. */
static void test_plain_acquire_never_reserves (void)
{
   void *c = open_conn (URI);
   CHECK (c);
   leaselock_error_t err;
   char a[33], b[33], d[33];
   new_owner (a);
   new_owner (b);
   new_owner (d);
   const char *k = key ("resv-plain");
   bool ok = acquire (c, k, a, 30000, NULL, &err);
   CHECK_OK (ok, err);
   for (int i = 0; i < 3; i++) {
      ok = acquire (c, k, b, 30000, NULL, &err);
      CHECK_ERR (ok, err, LEASELOCK_BUSY, "held by another owner");
   }
   char next[40];
   next_owner_of (c, k, next);
   CHECK (strcmp (next, b) != 0 && strcmp (next, "?") != 0);
   ok = B->release (c, &(ll_op_t){ k, strlen (k), a }, 0, &err);
   CHECK_OK (ok, err);
   ok = acquire (c, k, d, 30000, NULL, &err);
   CHECK_OK (ok, err);
   B->close (c);
}

/* (5) prune keeps an expired record whose reservation is live, and deletes
 * it once the reservation has run out. */
static void test_prune_keeps_reserved (void)
{
   void *c = open_conn (URI);
   CHECK (c);
   leaselock_error_t err;
   leaselock_record_t rec;
   char a[33], w[33], pfx[300];
   bool ok, reserved, found;
   int64_t count = -1;
   new_owner (a);
   new_owner (w);
   snprintf (pfx, sizeof pfx, "%s", key ("prune-resv/"));
   const char *k = key ("prune-resv/reserved"), *k2 = key ("prune-resv/free");
   ok = acquire (c, k, a, 30000, NULL, &err) && acquire (c, k2, a, 30000, NULL, &err);
   CHECK_OK (ok, err);
   ok = acquire_wait (c, k, w, 1000, 0, NULL, &reserved, &err);
   CHECK_ERR (ok, err, LEASELOCK_BUSY, "held by another owner");
   CHECK (reserved);
   ok = B->release (c, &(ll_op_t){ k, strlen (k), a }, 0, &err) &&
        B->release (c, &(ll_op_t){ k2, strlen (k2), a }, 0, &err);
   CHECK_OK (ok, err);
   ok = B->prune (c, pfx, strlen (pfx), 0, &count, &err);
   CHECK_OK (ok, err);
   CHECK_EQ (count, 1); /* k2 */
   ok = B->inspect (c, &(ll_op_t){ k, strlen (k), NULL }, &rec, &found, &err);
   CHECK_OK (ok, err);
   CHECK (found);
   sleep_ms (1300);
   ok = B->prune (c, pfx, strlen (pfx), 0, &count, &err);
   CHECK_OK (ok, err);
   CHECK_EQ (count, 1); /* k */
   ok = B->inspect (c, &(ll_op_t){ k, strlen (k), NULL }, &rec, &found, &err);
   CHECK_OK (ok, err);
   CHECK (!found);
   B->close (c);
}

/* (6) The holder's own retried acquire succeeds while another waiter holds
 * the reservation, live lease or expired. */
static void test_own_retry_beats_reservation (void)
{
   void *c = open_conn (URI);
   CHECK (c);
   leaselock_error_t err;
   char a[33], w[33];
   bool ok, reserved;
   int64_t f = 0, f2 = 0;
   new_owner (a);
   new_owner (w);
   const char *k = key ("resv-own-retry");
   ok = acquire (c, k, a, 30000, &f, &err);
   CHECK_OK (ok, err);
   ok = acquire_wait (c, k, w, 2000, 0, NULL, &reserved, &err);
   CHECK_ERR (ok, err, LEASELOCK_BUSY, "held by another owner");
   CHECK (reserved);
   ok = acquire (c, k, a, 30000, &f2, &err);
   CHECK_OK (ok, err);
   CHECK_EQ (f2, f + 1);
   ok = acquire_wait (c, k, w, 2000, 10, NULL, &reserved, &err);
   CHECK_ERR (ok, err, LEASELOCK_BUSY, "held by another owner");
   CHECK (reserved);
   ok = acquire_wait (c, k, a, 2000, 0, &f2, &reserved, &err);
   CHECK_OK (ok, err);
   CHECK (!reserved);
   CHECK_EQ (f2, f + 2);
   /* Expired by the server clock and reserved for W: still the holder's. */
   const char *k2 = key ("resv-own-retry-expired");
   ok = acquire (c, k2, a, 300, &f, &err);
   CHECK_OK (ok, err);
   ok = acquire_wait (c, k2, w, 2000, 0, NULL, &reserved, &err);
   CHECK_ERR (ok, err, LEASELOCK_BUSY, "held by another owner");
   CHECK (reserved);
   sleep_ms (450);
   ok = acquire (c, k2, a, 30000, &f2, &err);
   CHECK_OK (ok, err);
   CHECK_EQ (f2, f + 1);
   B->close (c);
}

/* (7) A record written before reservations existed (no nextOwner, nextAt,
 * nextMs, nextWaitedMs) reads as unreserved: taken once expired, claimed
 * by a waiter, pruned. */
static void test_old_record_unreserved (void)
{
   void *c = open_conn (URI);
   CHECK (c);
   leaselock_error_t err;
   char a[33], b[33], w[33], pfx[300];
   bool ok, reserved;
   int64_t f = 0, f2 = 0, count = -1;
   new_owner (a);
   new_owner (b);
   new_owner (w);
   snprintf (pfx, sizeof pfx, "%s", key ("resv-old/"));
   const char *k = key ("resv-old/taken"), *k2 = key ("resv-old/pruned");
   ok =
     acquire (c, k, a, 30000, &f, &err) && B->release (c, &(ll_op_t){ k, strlen (k), a }, 0, &err);
   CHECK_OK (ok, err);
   CHECK (strip_next_fields (c, k));
   CHECK_NEXT (c, k, "-");
   ok = acquire (c, k, b, 30000, &f2, &err);
   CHECK_OK (ok, err);
   CHECK_EQ (f2, f + 1);
   CHECK (strip_next_fields (c, k)); /* live, B's */
   ok = acquire (c, k, w, 30000, NULL, &err);
   CHECK_ERR (ok, err, LEASELOCK_BUSY, "held by another owner");
   ok = acquire_wait (c, k, w, 2000, 0, NULL, &reserved, &err);
   CHECK_ERR (ok, err, LEASELOCK_BUSY, "held by another owner");
   CHECK (reserved);
   CHECK_NEXT (c, k, w);
   ok = acquire (c, k2, a, 30000, NULL, &err) &&
        B->release (c, &(ll_op_t){ k2, strlen (k2), a }, 0, &err);
   CHECK_OK (ok, err);
   CHECK (strip_next_fields (c, k2));
   ok = B->prune (c, pfx, strlen (pfx), 0, &count, &err);
   CHECK_OK (ok, err);
   CHECK_EQ (count, 1); /* k2; k is B's */
   B->close (c);
}

/* ---- reentrant hold counts --------------------------------------------- */

/* hold (delta) of k for owner: the count after, 0 for NOT_HELD, -1 for
 * another error (on stderr). */
static int64_t hold_of (void *c, const char *k, size_t n, const char *owner, int delta)
{
   leaselock_error_t err;
   int64_t holds = -5;
   if (B->hold (c, &(ll_op_t){ k, n, owner }, delta, &holds, &err))
      return holds;
   if (err.code == LEASELOCK_NOT_HELD)
      return 0;
   fprintf (stderr, "    hold: %s %s\n", leaselock_code_name (err.code), err.message);
   return -1;
}

/* The holds inspect reports for k (-1: no record or an error). */
static int64_t holds_shown (void *c, const char *k, size_t n)
{
   leaselock_error_t err;
   leaselock_record_t rec;
   bool found = false;
   if (!B->inspect (c, &(ll_op_t){ k, n, NULL }, &rec, &found, &err) || !found)
      return -1;
   return rec.holds;
}

/* The stored holds of k: -2 when the field is missing, -1 when there is
 * no record. */
static int64_t raw_holds (void *c, const char *k, size_t n)
{
   bson_t filter = BSON_INITIALIZER;
   bson_append_utf8 (&filter, "_id", 3, k, (int)n);
   mongoc_cursor_t *cur =
     mongoc_collection_find_with_opts (ll_mongo_test_collection (c), &filter, NULL, NULL);
   const bson_t *doc;
   bson_iter_t it;
   int64_t v = -1;
   if (mongoc_cursor_next (cur, &doc))
      v = bson_iter_init_find (&it, doc, "holds") ? bson_iter_as_int64 (&it) : -2;
   mongoc_cursor_destroy (cur);
   bson_destroy (&filter);
   return v;
}

/* Makes k's record look written before hold counts: no holds field. */
static bool strip_holds (void *c, const char *k, size_t n)
{
   bson_t q = BSON_INITIALIZER;
   bson_append_utf8 (&q, "_id", 3, k, (int)n);
   bson_t *u = BCON_NEW ("$unset", "{", "holds", BCON_UTF8 (""), "}");
   bson_t reply;
   bson_iter_t it;
   bool ok =
     mongoc_collection_update_one (ll_mongo_test_collection (c), &q, u, NULL, &reply, NULL) &&
     bson_iter_init_find (&it, &reply, "matchedCount") && bson_iter_as_int64 (&it) == 1;
   bson_destroy (&reply);
   bson_destroy (&q);
   bson_destroy (u);
   return ok;
}

typedef struct
{
   int64_t holds;
   int n;
} holds_seen_t;

static bool see_holds (const leaselock_record_t *rec, void *data)
{
   holds_seen_t *s = data;
   s->holds = rec->holds;
   s->n++;
   return true;
}

/* The count moves by one each way, never below 1, the lease and its fence
 * kept; another owner, a released, expired or missing record: NOT_HELD,
 * the count untouched; the next take stores 1 again. */
static void test_hold_counts (void)
{
   void *c = open_conn (URI);
   CHECK (c);
   leaselock_error_t err;
   char a[33], b[33];
   int64_t f1 = 0, f2 = 0;
   new_owner (a);
   new_owner (b);
   const char *k = key ("hold-counts");
   size_t n = strlen (k);
   CHECK_OK (acquire (c, k, a, 30000, &f1, &err), err);
   CHECK_EQ (raw_holds (c, k, n), 1);
   CHECK_EQ (holds_shown (c, k, n), 1);
   CHECK_EQ (hold_of (c, k, n, a, +1), 2);
   CHECK_EQ (hold_of (c, k, n, a, +1), 3);
   CHECK_EQ (holds_shown (c, k, n), 3);
   CHECK_EQ (hold_of (c, k, n, b, +1), 0);
   CHECK_EQ (hold_of (c, k, n, b, -1), 0);
   CHECK_EQ (raw_holds (c, k, n), 3);
   CHECK_EQ (hold_of (c, k, n, a, -1), 2);
   CHECK_EQ (hold_of (c, k, n, a, -1), 1);
   CHECK_EQ (hold_of (c, k, n, a, -1), 1); /* never below 1 */
   CHECK_EQ (raw_holds (c, k, n), 1);
   CHECK_EQ (hold_of (c, k, n, a, +1), 2);
   holds_seen_t seen = { -1, 0 };
   CHECK_OK (B->list (c, k, n, see_holds, &seen, &err), err);
   CHECK (seen.n == 1 && seen.holds == 2);
   leaselock_record_t rec;
   bool found = false;
   CHECK_OK (B->inspect (c, &(ll_op_t){ k, n, NULL }, &rec, &found, &err), err);
   CHECK (found && !strcmp (rec.owner, a) && rec.fence == f1 && rec.expires_in_ms > 25000);
   CHECK_OK (B->release (c, &(ll_op_t){ k, n, a }, 0, &err), err);
   CHECK_EQ (hold_of (c, k, n, a, +1), 0);
   CHECK_EQ (hold_of (c, k, n, a, -1), 0);
   CHECK_EQ (holds_shown (c, k, n), 0); /* released: no holds */
   CHECK_OK (acquire (c, k, b, 30000, &f2, &err), err);
   CHECK_EQ (f2, f1 + 1);
   CHECK_EQ (raw_holds (c, k, n), 1);
   CHECK_EQ (holds_shown (c, k, n), 1);
   /* Expired: its owner cannot enter again; a take-over starts at 1. */
   const char *e = key ("hold-expired");
   CHECK_OK (acquire (c, e, a, 300, NULL, &err), err);
   CHECK_EQ (hold_of (c, e, strlen (e), a, +1), 2);
   sleep_ms (400);
   CHECK_EQ (hold_of (c, e, strlen (e), a, +1), 0);
   CHECK_EQ (hold_of (c, e, strlen (e), a, -1), 0);
   CHECK_EQ (raw_holds (c, e, strlen (e)), 2);
   CHECK_OK (acquire (c, e, b, 30000, NULL, &err), err);
   CHECK_EQ (holds_shown (c, e, strlen (e)), 1);
   /* No record at all. */
   const char *m = key ("hold-missing");
   CHECK_EQ (hold_of (c, m, strlen (m), a, +1), 0);
   CHECK_EQ (raw_holds (c, m, strlen (m)), -1);
   B->close (c);
}

/* A record written before hold counts (no holds field) reads as 1 while
 * owned: -1 leaves it at 1, +1 makes 2, and a released one shows none. */
static void test_hold_old_record (void)
{
   void *c = open_conn (URI);
   CHECK (c);
   leaselock_error_t err;
   char a[33], b[33];
   new_owner (a);
   new_owner (b);
   const char *k = key ("hold-old");
   size_t n = strlen (k);
   CHECK_OK (acquire (c, k, a, 30000, NULL, &err), err);
   CHECK (strip_holds (c, k, n));
   CHECK_EQ (raw_holds (c, k, n), -2);
   CHECK_EQ (holds_shown (c, k, n), 1);
   CHECK_EQ (hold_of (c, k, n, b, +1), 0);
   CHECK_EQ (raw_holds (c, k, n), -2);
   CHECK_EQ (hold_of (c, k, n, a, -1), 1);
   CHECK (strip_holds (c, k, n));
   CHECK_EQ (hold_of (c, k, n, a, +1), 2);
   CHECK_EQ (raw_holds (c, k, n), 2);
   CHECK_EQ (hold_of (c, k, n, a, -1), 1);
   CHECK_OK (B->release (c, &(ll_op_t){ k, n, a }, 0, &err), err);
   CHECK (strip_holds (c, k, n));
   CHECK_EQ (holds_shown (c, k, n), 0);
   CHECK_EQ (hold_of (c, k, n, a, +1), 0);
   B->close (c);
}

/* Threads of one owner entering and leaving at once, each on a
 * connection of its own: every hold counts (each -1 follows its own +1,
 * so the count never meets the floor and ends at 1). */
#define HOLD_THREADS 4
#define HOLD_ROUNDS 25

typedef struct
{
   const char *k, *owner;
   int bad;
} hold_race_t;

static void *hold_racer (void *arg)
{
   hold_race_t *r = arg;
   void *c = open_conn (URI);
   if (!c) {
      r->bad++;
      return NULL;
   }
   for (int i = 0; i < HOLD_ROUNDS; i++) {
      r->bad += hold_of (c, r->k, strlen (r->k), r->owner, +1) < 2;
      r->bad += hold_of (c, r->k, strlen (r->k), r->owner, -1) < 1;
   }
   B->close (c);
   return NULL;
}

static void test_hold_concurrent (void)
{
   void *c = open_conn (URI);
   CHECK (c);
   leaselock_error_t err;
   char a[33];
   new_owner (a);
   const char *k = key ("hold-concurrent");
   CHECK_OK (acquire (c, k, a, 60000, NULL, &err), err);
   pthread_t t[HOLD_THREADS];
   hold_race_t r[HOLD_THREADS];
   for (int i = 0; i < HOLD_THREADS; i++) {
      r[i] = (hold_race_t){ k, a, 0 };
      CHECK (pthread_create (&t[i], NULL, hold_racer, &r[i]) == 0);
   }
   int bad = 0;
   for (int i = 0; i < HOLD_THREADS; i++) {
      pthread_join (t[i], NULL);
      bad += r[i].bad;
   }
   CHECK_EQ (bad, 0);
   CHECK_EQ (raw_holds (c, k, strlen (k)), 1);
   B->close (c);
}

/* Keys with quotes, operators, multibyte characters and 255 bytes: the
 * count of the right record moves. */
static void test_hold_odd_keys (void)
{
   void *c = open_conn (URI);
   CHECK (c);
   leaselock_error_t err;
   char a[33], b[33], big[256] = "";
   new_owner (a);
   new_owner (b);
   for (int i = 0; i < 85; i++)
      strcat (big, "€");
   const char *names[] = { key ("hold/it's a \"quoted\" key` \\ $where {\"$gt\":\"\"}"),
                           key ("hold/ключ/鍵/🔒/é"), big };
   for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
      const char *k = names[i];
      size_t n = strlen (k);
      CHECK_OK (acquire (c, k, a, 30000, NULL, &err), err);
      CHECK_EQ (hold_of (c, k, n, a, +1), 2);
      CHECK_EQ (hold_of (c, k, n, b, +1), 0);
      CHECK_EQ (holds_shown (c, k, n), 2);
      CHECK_EQ (hold_of (c, k, n, a, -1), 1);
      CHECK_OK (B->release (c, &(ll_op_t){ k, n, a }, 0, &err), err);
   }
   CHECK_EQ (strlen (big), 255);
   B->close (c);
}

/* ---- failover (backend_mongodb_primary.c) ------------------------------ */

/* A hello document from JSON (the test's; NULL: a broken literal). */
static bson_t *hello_doc (const char *json_text)
{
   bson_error_t e;
   return bson_new_from_json ((const uint8_t *)json_text, -1, &e);
}

/* Reads a hello reply as the backend does: *id and the topology. */
static ll_mongo_topology_t identity_of (const char *json_text, char *id, size_t size)
{
   char about[160];
   bson_t *h = hello_doc (json_text);
   ll_mongo_topology_t t = ll_mongo_hello_identity (h, "h1:27017", id, size, about, sizeof about);
   if (h)
      bson_destroy (h);
   return t;
}

/* The identity a hello (or isMaster) reply gives: a replica set's primary
 * by its set and election (a new term is a new primary, the same node
 * re-elected too), a standalone without its address, a mongos as the
 * cluster; and the durability a write concern gives on each. */
static void test_hello_identity (void)
{
   char id[80], id2[80];
   CHECK_EQ (identity_of ("{\"isWritablePrimary\":true,\"setName\":\"rs0\",\"me\":\"h1:27017\","
                          "\"electionId\":{\"$oid\":\"7fffffff0000000000000003\"},\"hosts\":["
                          "\"h1:27017\",\"h2:27017\",\"h3:27017\"],\"ok\":1}",
                          id, sizeof id),
             LL_MONGO_TOPO_REPLSET);
   CHECK (!strcmp (id, "rs/rs0/7fffffff0000000000000003"));
   CHECK_EQ (identity_of ("{\"ismaster\":true,\"setName\":\"rs0\",\"me\":\"h1:27017\","
                          "\"electionId\":{\"$oid\":\"7fffffff0000000000000004\"},\"ok\":1}",
                          id2, sizeof id2),
             LL_MONGO_TOPO_REPLSET);
   CHECK (strcmp (id, id2) != 0); /* term 4: another primary, though the same node */
   CHECK_EQ (identity_of ("{\"ismaster\":true,\"setName\":\"rs0\",\"me\":\"h2:27017\",\"ok\":1}",
                          id, sizeof id),
             LL_MONGO_TOPO_REPLSET);
   CHECK (!strcmp (id, "rs/rs0/h2:27017")); /* no electionId: the node */
   CHECK_EQ (identity_of ("{\"ismaster\":true,\"maxWireVersion\":8,\"ok\":1}", id, sizeof id),
             LL_MONGO_TOPO_STANDALONE);
   CHECK (!strcmp (id, "standalone"));
   CHECK_EQ (identity_of ("{\"ismaster\":true,\"msg\":\"isdbgrid\",\"ok\":1}", id, sizeof id),
             LL_MONGO_TOPO_SHARDED);
   CHECK (!strcmp (id, "sharded"));
   CHECK_EQ (identity_of ("{}", id, sizeof id), LL_MONGO_TOPO_UNKNOWN);

   struct
   {
      ll_mongo_topology_t topo;
      const char *w; /* "majority", "1", "2" */
      int j;         /* -1: not set */
      ll_durability_t want;
      const char *text;
   } cases[] = {
      { LL_MONGO_TOPO_REPLSET, "majority", -1, LL_DURABILITY_DURABLE, "w=majority, j=default" },
      { LL_MONGO_TOPO_REPLSET, "majority", 1, LL_DURABILITY_DURABLE, "j=true" },
      { LL_MONGO_TOPO_REPLSET, "majority", 0, LL_DURABILITY_AT_RISK, "j=false" },
      { LL_MONGO_TOPO_REPLSET, "1", -1, LL_DURABILITY_AT_RISK, "w=1" },
      { LL_MONGO_TOPO_REPLSET, "2", 1, LL_DURABILITY_AT_RISK, "w=2" },
      { LL_MONGO_TOPO_STANDALONE, "majority", -1, LL_DURABILITY_STANDALONE, "about" },
      { LL_MONGO_TOPO_SHARDED, "majority", -1, LL_DURABILITY_DURABLE, "w=majority" },
      { LL_MONGO_TOPO_SHARDED, "1", -1, LL_DURABILITY_AT_RISK, "w=1" },
      { LL_MONGO_TOPO_UNKNOWN, "majority", -1, LL_DURABILITY_UNKNOWN, "wtimeoutMS=5000" },
   };
   for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
      mongoc_write_concern_t *wc = mongoc_write_concern_new ();
      if (!strcmp (cases[i].w, "majority"))
         mongoc_write_concern_set_wmajority (wc, 5000);
      else
         mongoc_write_concern_set_w (wc, (int32_t)atoi (cases[i].w));
      if (cases[i].j >= 0)
         mongoc_write_concern_set_journal (wc, cases[i].j);
      ll_primary_t p;
      memset (&p, 0, sizeof p);
      ll_mongo_durability (&p, cases[i].topo, "about", wc);
      mongoc_write_concern_destroy (wc);
      if (p.durability != cases[i].want || !strstr (p.durability_text, cases[i].text)) {
         char m[300];
         snprintf (m, sizeof m, "case %zu: level %d, \"%s\"", i, (int)p.durability,
                   p.durability_text);
         tl_fail (__FILE__, __LINE__, m);
      }
   }
}

/* URI of the suite's server on the collection coll, with extra options. */
static void np_uri (char *buf, size_t size, const char *coll, const char *extra)
{
   char o[256];
   snprintf (o, sizeof o, "leaselockCollection=%s%s%s", coll, extra[0] ? "&" : "", extra);
   uri_with (buf, size, URI, o);
}

/* A collection of this run's own (its meta document is the test's). */
static void np_coll (char *buf, size_t size, const char *name)
{
   snprintf (buf, size, "ll_%s_%d_%s", name, (int)getpid (), PFX + strlen (PFX) - 8);
}

/* What a failover leaves: the meta document naming another primary.
 * Through conn c's client (on that collection). */
static bool np_rewrite (void *c, const char *old_primary)
{
   bson_t *q = BCON_NEW ("_id", BCON_UTF8 ("primary"));
   bson_t *u = BCON_NEW ("$set", "{", "primaryId", BCON_UTF8 (old_primary), "}");
   bson_error_t e;
   bool ok = mongoc_collection_update_one (((ll_mongo_conn_t *)c)->meta, q, u, NULL, NULL, &e);
   if (!ok)
      fprintf (stderr, "    rewriting the meta document: %s\n", e.message);
   bson_destroy (q);
   bson_destroy (u);
   return ok;
}

/* Drops the collection, its queue and its meta document's, through c. */
static void np_drop (void *c)
{
   ll_mongo_conn_t *conn = c;
   bson_error_t e;
   mongoc_collection_drop (conn->coll, &e);
   mongoc_collection_drop (conn->queue, &e);
   mongoc_collection_drop (conn->meta, &e);
}

/* One try on client c for k with ttl_ms; the error code (LEASELOCK_OK:
 * taken, *fence set and the lease released). */
static leaselock_code_t np_try (leaselock_client_t *c, const char *k, int64_t ttl_ms,
                                int64_t *fence)
{
   leaselock_error_t err;
   leaselock_lease_t *l;
   leaselock_acquire_opts_t o;
   leaselock_acquire_opts_init (&o);
   o.ttl_ms = ttl_ms;
   o.auto_renew = false;
   if (!leaselock_acquire (c, k, strlen (k), &o, &l, &err))
      return err.code;
   *fence = leaselock_lease_fence (l);
   leaselock_lease_release (l, &err);
   leaselock_lease_destroy (l);
   return LEASELOCK_OK;
}

/* After a new primary was recorded by c2 (c3 came later): both report
 * it, the lock-delay and the floor; only c2 counted a failover. */
static void np_check_seen (leaselock_client_t *c2, leaselock_client_t *c3)
{
   leaselock_durability_t d2, d3;
   leaselock_error_t err;
   CHECK_OK (leaselock_client_durability (c2, &d2, &err), err);
   CHECK_OK (leaselock_client_durability (c3, &d3, &err), err);
   CHECK (!strcmp (d2.primary, "standalone") && !strcmp (d3.primary, "standalone"));
   CHECK (d2.lock_delay_ms > 0 && d2.lock_delay_ms <= 1500);
   CHECK (d3.lock_delay_ms > 0 && d3.lock_delay_ms <= 1500);
   CHECK (d2.fence_floor > 1577836800LL * 1000000 && d2.fence_floor == d3.fence_floor);
   CHECK_EQ (d2.max_ttl_ms, 1500);
   CHECK (!strcmp (d2.policy, "report") && !strcmp (d2.level, "standalone"));
   CHECK (strstr (d2.detail, "standalone server") && strstr (d2.detail, "w=majority"));
   leaselock_stats_t s2, s3;
   CHECK_OK (leaselock_client_stats (c2, &s2, &err), err);
   CHECK_OK (leaselock_client_stats (c3, &s3, &err), err);
   CHECK_EQ (s2.failovers, 1);
   CHECK_EQ (s3.failovers, 0);
   CHECK_EQ (s2.durability_warnings, 0); /* standalone: nothing to warn of */
}

/* What a new primary shows a client: a meta document naming another
 * primary (the one it replaced). The first connection records itself,
 * raises the fence floor above every fence the old primary could have
 * issued (the database clock in us) and grants nothing for max_ttl by
 * the database clock. A lease that survived is still renewed; TTLs over
 * max_ttl are refused; later connections see the same lock-delay, not a
 * new one. */
static void test_new_primary (void)
{
   char coll[64], u[1200];
   np_coll (coll, sizeof coll, "np");
   np_uri (u, sizeof u, coll, "max_ttl=1500ms");
   leaselock_error_t err;
   leaselock_client_t *c1 = leaselock_client_new (u, "np1", &err);
   CHECK_OK (c1 != NULL, err);
   void *raw = open_conn (u);
   CHECK (raw);
   if (!c1 || !raw)
      return;
   int64_t fence = 0;
   CHECK_EQ (np_try (c1, "k", 1500, &fence), LEASELOCK_OK);
   CHECK_EQ (fence, 1);
   CHECK_EQ (np_try (c1, "k", 1501, &fence), LEASELOCK_INVALID);
   leaselock_lease_t *kept;
   leaselock_acquire_opts_t o;
   leaselock_acquire_opts_init (&o);
   o.ttl_ms = 1500;
   o.auto_renew = false;
   CHECK_OK (leaselock_acquire (c1, "kept", 4, &o, &kept, &err), err);
   CHECK_ERR (leaselock_lease_renew (kept, 1501, &err), err, LEASELOCK_INVALID, "max_ttl");

   CHECK (np_rewrite (raw, "the old primary"));
   int64_t seen = mono_ms ();
   leaselock_client_t *c2 = leaselock_client_new (u, "np2", &err);
   CHECK_OK (c2 != NULL, err);
   CHECK_EQ (np_try (c2, "k", 1000, &fence), LEASELOCK_BUSY);
   CHECK_EQ (np_try (c2, "new", 1000, &fence), LEASELOCK_BUSY);
   CHECK_OK (leaselock_lease_renew (kept, 1500, &err), err);
   leaselock_client_t *c3 = leaselock_client_new (u, "np3", &err);
   CHECK_OK (c3 != NULL, err);
   CHECK_EQ (np_try (c3, "k", 1000, &fence), LEASELOCK_BUSY);
   np_check_seen (c2, c3);
   CHECK_OK (leaselock_lease_release (kept, &err), err);
   leaselock_lease_destroy (kept);

   /* A blocking acquire waits the lock-delay out; its fence is above the
    * floor (the database clock in us: after 2020), on an old key and a
    * new one alike. */
   leaselock_lease_t *l;
   o.timeout_ms = 5000;
   CHECK_OK (leaselock_acquire (c3, "k", 1, &o, &l, &err), err);
   int64_t waited = mono_ms () - seen;
   CHECK (waited >= 1400 && waited < 4000);
   CHECK (l && leaselock_lease_fence (l) > 1577836800LL * 1000000);
   int64_t floor_fence = l ? leaselock_lease_fence (l) : 0;
   if (l) {
      leaselock_lease_release (l, &err);
      leaselock_lease_destroy (l);
   }
   CHECK_EQ (np_try (c2, "k", 1000, &fence), LEASELOCK_OK);
   CHECK_EQ (fence, floor_fence + 1);
   CHECK_EQ (np_try (c2, "new", 1000, &fence), LEASELOCK_OK);
   CHECK_EQ (fence, floor_fence); /* a new record: 1, raised to the floor */
   leaselock_client_destroy (c1);
   leaselock_client_destroy (c2);
   leaselock_client_destroy (c3);
   np_drop (raw);
   B->close (raw);
}

/* Whether captured command i is a findAndModify on the meta collection
 * (upsert as asked) whose update has field under op. */
static bool is_meta_cmd (int i, bool upsert, const char *op, const char *field)
{
   bson_iter_t it, u, sub;
   if (i >= n_cmds || !bson_iter_init_find (&it, cmds[i], "findAndModify") ||
       !BSON_ITER_HOLDS_UTF8 (&it) || !strstr (bson_iter_utf8 (&it, NULL), ".meta"))
      return false;
   bool up = bson_iter_init_find (&it, cmds[i], "upsert") && bson_iter_as_bool (&it);
   return up == upsert && bson_iter_init_find (&u, cmds[i], "update") &&
          bson_iter_recurse (&u, &sub) && bson_iter_find (&sub, op) &&
          bson_iter_recurse (&sub, &it) && bson_iter_find (&it, field);
}

/* The meta document's writes (1 round trip on a known primary, 2 for a
 * new collection or a new primary) and the fence floor's second step (only
 * while a record's fence is below the floor), in the shapes every write
 * keeps: no $expr in an upsert's query, no pipeline, no client date,
 * w=majority. */
static void test_failover_command_shape (void)
{
   char coll[64], u[1200], why[512], a[33], b[33];
   np_coll (coll, sizeof coll, "shape");
   np_uri (u, sizeof u, coll, "");
   void *c = open_conn (u);
   CHECK (c);
   if (!c)
      return;
   leaselock_error_t err;
   int64_t fence;
   new_owner (a);
   new_owner (b);
   np_drop (c);
   capture_cmds (c);
   ll_mongo_conn_t *conn = c;
   CHECK_OK (ll_mongo_check_primary (conn, &err), err); /* a new collection */
   CHECK_EQ (n_cmds, 2);
   CHECK (is_meta_cmd (0, false, "$currentDate", "seenAt"));
   CHECK (is_meta_cmd (1, true, "$set", "primaryId"));
   CHECK_EQ (conn->primary.max_ttl_ms, 60000);
   CHECK_EQ (conn->primary.fence_floor, 0);
   CHECK (acquire (c, "pre", a, 1000, &fence, &err));
   CHECK_EQ (fence, 1);
   CHECK_OK (B->release (c, &(ll_op_t){ "pre", 3, a }, 0, &err), err);
   clear_cmds ();
   CHECK_OK (ll_mongo_check_primary (conn, &err), err); /* the same primary */
   CHECK_EQ (n_cmds, 1);
   CHECK (!conn->primary.new_primary && conn->primary.paused_until == 0);

   CHECK (np_rewrite (c, "rs/old/7fffffff0000000000000001"));
   clear_cmds ();
   CHECK_OK (ll_mongo_check_primary (conn, &err), err); /* a new primary */
   CHECK_EQ (n_cmds, 2);
   CHECK (is_meta_cmd (1, false, "$currentDate", "pausedAt"));
   CHECK (is_meta_cmd (1, false, "$set", "fenceFloor"));
   CHECK (conn->primary.new_primary && conn->primary.paused_until > 0);
   int64_t floor = conn->primary.fence_floor;
   CHECK (floor > 1577836800LL * 1000000);
   /* The lock-delay is test_new_primary's: here grants go on at once. */
   leaselock_error_t busy;
   CHECK_ERR (acquire (c, "fresh", a, 1000, &fence, &busy), busy, LEASELOCK_BUSY, "lock-delay");
   conn->primary.paused_until = 0;
   clear_cmds ();
   CHECK_OK (acquire (c, "fresh", a, 1000, &fence, &err), err); /* take, upsert, $max */
   CHECK_EQ (fence, floor);
   CHECK_EQ (n_cmds, 3);
   bson_iter_t it;
   CHECK (bson_iter_init_find (&it, cmds[2], "findAndModify") && doc_has_key (cmds[2], "$max") &&
          !doc_has_key (cmds[2], "upsert") && doc_has_key (cmds[2], "owner"));
   CHECK_OK (acquire (c, "pre", b, 1000, &fence, &err), err); /* released: take, $max */
   CHECK_EQ (fence, floor);
   CHECK_EQ (n_cmds, 5);
   CHECK (doc_has_key (cmds[4], "$max"));
   CHECK_OK (acquire (c, "pre", b, 1000, &fence, &err), err); /* above the floor: take */
   CHECK_EQ (fence, floor + 1);
   CHECK_EQ (n_cmds, 6);
   bool reserved;
   CHECK_OK (acquire_wait (c, "wait", b, 1000, 0, &fence, &reserved, &err), err);
   CHECK_EQ (fence, floor); /* take, claim, upsert, $max */
   CHECK_EQ (n_cmds, 10);
   int writes = check_cmds (true, why, sizeof why);
   if (writes < 0)
      fprintf (stderr, "    %s\n", why);
   CHECK_EQ (writes, 10);
   clear_cmds ();
   mongoc_client_set_apm_callbacks (ll_mongo_test_client (c), NULL, NULL);
   np_drop (c);
   B->close (c);
}

/* Connections meeting a new primary at once end with one floor and one
 * lock-delay: only one of them swaps, the others read what it wrote. */
#define NP_RACERS 4

typedef struct
{
   const char *uri;
   pthread_barrier_t *go;
   void *conn;
} np_racer_t;

static void *np_race (void *arg)
{
   np_racer_t *r = arg;
   pthread_barrier_wait (r->go);
   r->conn = open_conn (r->uri);
   return NULL;
}

static void test_new_primary_race (void)
{
   char coll[64], u[1200];
   np_coll (coll, sizeof coll, "race");
   np_uri (u, sizeof u, coll, "max_ttl=5s");
   void *c = open_conn (u);
   CHECK (c);
   if (!c)
      return;
   for (int round = 0; round < 3; round++) {
      CHECK (np_rewrite (c, round % 2 ? "sharded" : "rs/old/7fffffff0000000000000002"));
      pthread_barrier_t go;
      pthread_barrier_init (&go, NULL, NP_RACERS);
      np_racer_t r[NP_RACERS];
      pthread_t t[NP_RACERS];
      for (int i = 0; i < NP_RACERS; i++) {
         r[i] = (np_racer_t){ u, &go, NULL };
         pthread_create (&t[i], NULL, np_race, &r[i]);
      }
      int swapped = 0;
      for (int i = 0; i < NP_RACERS; i++) {
         pthread_join (t[i], NULL);
         CHECK (r[i].conn);
      }
      pthread_barrier_destroy (&go);
      ll_primary_t *p0 = r[0].conn ? B->primary (r[0].conn) : NULL;
      for (int i = 0; p0 && i < NP_RACERS; i++) {
         ll_primary_t *p = r[i].conn ? B->primary (r[i].conn) : NULL;
         if (!p)
            continue;
         swapped += p->new_primary;
         CHECK_EQ (p->fence_floor, p0->fence_floor);
         CHECK (p->paused_until > 0 && llabs (p->paused_until - p0->paused_until) < 1000);
         CHECK (!strcmp (p->primary_id, "standalone"));
      }
      CHECK_EQ (swapped, 1);
      for (int i = 0; i < NP_RACERS; i++)
         B->close (r[i].conn);
   }
   np_drop (c);
   B->close (c);
}

/* max_ttl= and durability= in the URI: bad values refused; the first
 * connection to a new collection sets max_ttl, a later URI only raises
 * it; durability=require refuses grants on a standalone server, naming
 * what was read; retryWrites is off whatever the URI says; a w that waits
 * for replicas gets a wtimeoutMS when the URI has none. */
static void test_failover_options (void)
{
   char coll[64], u[1200];
   np_coll (coll, sizeof coll, "opts");
   np_uri (u, sizeof u, coll, "max_ttl=never");
   EXPECT_OPEN_ERROR (u, LEASELOCK_INVALID, "max_ttl=\"never\"");
   np_uri (u, sizeof u, coll, "max_ttl=500ms");
   EXPECT_OPEN_ERROR (u, LEASELOCK_INVALID, "from 1s to 30d");
   np_uri (u, sizeof u, coll, "durability=maybe");
   EXPECT_OPEN_ERROR (u, LEASELOCK_INVALID, "report, require or off");

   np_uri (u, sizeof u, coll, "max_ttl=2s");
   void *c = open_conn (u);
   CHECK (c);
   if (!c)
      return;
   np_drop (c);
   B->close (c);
   c = open_conn (u);
   CHECK (c && B->primary (c)->max_ttl_ms == 2000);
   B->close (c);
   np_uri (u, sizeof u, coll, "max_ttl=1s"); /* lower: kept */
   c = open_conn (u);
   CHECK (c && B->primary (c)->max_ttl_ms == 2000);
   B->close (c);
   np_uri (u, sizeof u, coll, "MAX_TTL=3s&durability=off"); /* higher: raised */
   c = open_conn (u);
   CHECK (c && B->primary (c)->max_ttl_ms == 3000);
   CHECK (c && B->primary (c)->policy == LL_DURABILITY_OFF);
   B->close (c);

   np_uri (u, sizeof u, coll, "durability=require");
   c = open_conn (u);
   CHECK (c);
   leaselock_error_t err;
   char a[33];
   new_owner (a);
   CHECK_ERR (c && acquire (c, "k", a, 1000, NULL, &err), err, LEASELOCK_BACKEND,
              "durability=require, but a grant would not survive a failover: standalone server");
   B->close (c);

   np_uri (u, sizeof u, coll, "retryWrites=true&w=majority");
   c = open_conn (u);
   CHECK (c);
   if (c) {
      const mongoc_uri_t *mu = mongoc_client_get_uri (ll_mongo_test_client (c));
      CHECK (!mongoc_uri_get_option_as_bool (mu, MONGOC_URI_RETRYWRITES, true));
      const mongoc_write_concern_t *wc =
        mongoc_collection_get_write_concern (ll_mongo_test_collection (c));
      CHECK_EQ (mongoc_write_concern_get_wtimeout_int64 (wc), 5000);
      np_drop (c);
      B->close (c);
   }
   np_uri (u, sizeof u, coll, "w=1");
   c = open_conn (u);
   CHECK (c && mongoc_write_concern_get_wtimeout_int64 (
                 mongoc_collection_get_write_concern (ll_mongo_test_collection (c))) == 0);
   if (c)
      np_drop (c);
   B->close (c);
}

/* libmongoc follows a new primary inside one client, with no reconnect:
 * a connection that recorded one primary and whose driver now writes to
 * another records the new one before its next grant (the meta document's
 * read and swap), and that grant is BUSY (the lock-delay). Simulated by
 * a connection that recorded "the old primary". */
/* *out: a connection on a collection of its own (named after name,
 * max_ttl=1s) that took "k" with a new owner (in a), or NULL (a check
 * failed; a connection then is the caller's to close all the same). */
static void primary_conn (const char *name, char a[33], void **out)
{
   char coll[64], u[1200];
   np_coll (coll, sizeof coll, name);
   np_uri (u, sizeof u, coll, "max_ttl=1s");
   *out = open_conn (u);
   CHECK (*out);
   leaselock_error_t err;
   int64_t fence;
   new_owner (a);
   CHECK_OK (acquire (*out, "k", a, 1000, &fence, &err), err);
}

static void test_primary_changed_before_grant (void)
{
   char a[33];
   void *c = NULL;
   primary_conn ("follow", a, &c);
   if (!c)
      return;
   ll_mongo_conn_t *conn = c;
   leaselock_error_t err;
   int64_t fence;
   CHECK (np_rewrite (c, "the old primary"));
   snprintf (conn->identity, sizeof conn->identity, "the old primary");
   uint32_t gen = conn->primary.generation;
   capture_cmds (c);
   CHECK_ERR (acquire (c, "k2", a, 1000, &fence, &err), err, LEASELOCK_BUSY, "lock-delay");
   CHECK_EQ (n_cmds, 2); /* the meta document's read and swap; no take */
   CHECK (is_meta_cmd (0, false, "$currentDate", "seenAt"));
   CHECK (is_meta_cmd (1, false, "$set", "fenceFloor"));
   CHECK (!strcmp (conn->identity, "standalone") && conn->primary.new_primary);
   CHECK_EQ (conn->primary.generation, gen + 1);
   CHECK_OK (B->renew (c, &(ll_op_t){ "k", 1, a }, 1000, &err), err); /* not a grant */
   clear_cmds ();
   mongoc_client_set_apm_callbacks (ll_mongo_test_client (c), NULL, NULL);
   np_drop (c);
   B->close (c);
}

/* The identity read before each grant is parsed again whenever the
 * driver's hello reply differs from the one last parsed
 * (ll_mongo_read_identity keeps the reply's bytes and what they said): a
 * kept reading whose bytes no longer match is not used. Simulated by a
 * kept reading of another primary under altered bytes: a connection that
 * used it would see a new primary (meta commands, then BUSY for the
 * lock-delay). */
static void test_primary_identity_reread (void)
{
   char a[33];
   void *c = NULL;
   primary_conn ("reread", a, &c);
   if (!c)
      return;
   ll_mongo_conn_t *conn = c;
   leaselock_error_t err;
   int64_t fence;
   CHECK (conn->hello_len > 0 && !strcmp (conn->hello_id, conn->identity));
   snprintf (conn->hello_id, sizeof conn->hello_id, "another primary");
   conn->hello[conn->hello_len - 2] ^= 0x5a; /* a byte of the last element */
   capture_cmds (c);
   CHECK_OK (acquire (c, "k2", a, 1000, &fence, &err), err);
   int meta = 0; /* commands on the meta document: none without a new primary */
   for (int i = 0; i < n_cmds; i++) {
      bson_iter_t it;
      meta += bson_iter_init (&it, cmds[i]) && bson_iter_next (&it) && BSON_ITER_HOLDS_UTF8 (&it) &&
              strstr (bson_iter_utf8 (&it, NULL), ".meta");
   }
   CHECK (n_cmds >= 1);
   CHECK_EQ (meta, 0);
   CHECK (!strcmp (conn->hello_id, conn->identity));
   clear_cmds ();
   mongoc_client_set_apm_callbacks (ll_mongo_test_client (c), NULL, NULL);
   np_drop (c);
   B->close (c);
}

/* ---- hand-off by notification (notify_cases.c) -------------------------- */

/* This machine's channel file of the URI's collection (wake_file.c). */
bool nt_wake_path (const char *uri, char *buf, size_t size)
{
   return nt_host_wake_path (uri, "mongodb", LL_MONGO_COLL_OPTION, buf, size);
}

/* The channel file removed: the listener breaks and makes a new one. */
void nt_break_listener (const char *uri)
{
   (void)nt_remove_wake (uri);
}

/* A listener here is an inotify watch in the client's process: the test
 * reads the client's watcher instead. */
int nt_listeners (void)
{
   return -1;
}

int main (int argc, char **argv)
{
   if (argc >= 2 && !strcmp (argv[1], "--child"))
      return child_main (argc, argv);
   const char *uri = argc > 1 ? argv[1] : getenv ("MONGODB_URI");
   if (!uri || strncmp (uri, "mongodb", 7) != 0) {
      fprintf (stderr, "usage: test_mongodb mongodb://host:port/db (or set MONGODB_URI)\n");
      printf ("mongodb: 0 passed, 1 failed\n");
      return 1;
   }
   ssize_t n = readlink ("/proc/self/exe", SELF, sizeof SELF - 1);
   if (n <= 0)
      return 2;
   SELF[n] = '\0';
   tl_start ("mongodb", uri);
   mongoc_init ();

   RUN (test_command_shape_checker);
   RUN (test_command_shape);
   RUN (test_command_shape_wait);
   RUN (test_write_concern);
   RUN (test_keys_are_text);
   RUN (test_min_hold_record);
   RUN (test_force_release);
   RUN (test_collection_option);
   RUN (test_bad_uris);
   RUN (test_driver_defaults);
   RUN (test_renew_expired);
   RUN (test_hold_counts);
   RUN (test_hold_old_record);
   RUN (test_hold_odd_keys);
   RUN (test_hold_concurrent);
   RUN (test_fork_abandon);
   RUN (test_fork_abandon_tls);
   RUN_SLOW (test_server_clock_only);
   RUN (test_lost_reply_retry);
   RUN_SLOW (test_server_down_and_back);
   RUN (test_no_password_in_operation_errors);
   RUN (test_reservation_blocks_others);
   RUN (test_reservation_reports_left);
   RUN_SLOW (test_reservation_runs_out);
   RUN (test_reservation_oldest_waiter);
   RUN (test_plain_acquire_never_reserves);
   RUN_SLOW (test_prune_keeps_reserved);
   RUN (test_own_retry_beats_reservation);
   RUN (test_old_record_unreserved);
   RUN (test_queue_join_order);
   RUN (test_queue_rejoin_keeps_place);
   RUN (test_queue_runs_out);
   RUN (test_queue_leave_missing);
   RUN (test_queue_keys_isolated);
   RUN (test_queue_records_unaffected);
   RUN (test_queue_fair_take);
   RUN (test_queue_prune);
   RUN (test_queue_odd_keys);
   RUN_SLOW (test_queue_concurrent_joins);
   RUN_SLOW (test_queue_server_clock_only);
   RUN (test_queue_command_shape);
   RUN (test_queue_mark_first_try);
   RUN (test_queue_mark_kept_later);
   RUN (test_queue_mark_late_join);
   RUN (test_hello_identity);
   RUN (test_failover_command_shape);
   RUN (test_failover_options);
   RUN (test_new_primary_race);
   RUN (test_primary_changed_before_grant);
   RUN (test_primary_identity_reread);
   RUN (test_new_primary);
   notify_cases_run ();

   clear_cmds ();
   mongoc_cleanup ();
   return tl_summary ("mongodb");
}
