/*
 * test_sql.c - what the MySQL/MariaDB and PostgreSQL backends must do
 * beyond the contract suite:
 *
 *   test_sql mysql://user:pass@host:port/db
 *   test_sql postgresql://user:pass@host:port/db
 *
 * Hostile and multibyte keys stored verbatim (bound parameters only),
 * byte-wise prefix listing without wildcards, a client whose clock is an
 * hour off (a helper process under faketime), a MySQL take-over that must
 * not extend the old owner's lease, reconnection after the server kills a
 * connection, a server restart mid-hold (LEASELOCK_MYSQL_RESTART /
 * LEASELOCK_POSTGRESQL_RESTART name the restart command; tests/servers/<name>.sh
 * print them), a stopped server (SIGSTOP on its processes: every call, and
 * a fork() while one is in flight, ends within the URI's io_timeout and
 * connect_timeout or the default bounds), bad URIs, the table option,
 * concurrent first use, connections abandoned after fork, the next
 * owner's reservation (acquire_wait, backend level), reentrant hold
 * counts (backend level), the migration of tables of versions 1 to 3, and
 * host lists: a dead or silent host skipped within its share of
 * connect_timeout, an error naming every host, libpq's URI forms (host=
 * and port= lists, hostaddr=, unix socket directories) and a read-only
 * server refused at connect and at reconnect.
 *
 * A raw driver connection (tests/sql_driver.h) checks the server side:
 * the suite is built once with libmariadb (build/tests/test_sql_mysql) and
 * once with libpq (build/tests/test_sql_postgresql).
 */
#include "ll_internal.h"
#include "sql_driver.h"
#include "stmt_mysql.h"
#include "stmt_postgresql.h"
#include "testlib.h"
#include "notify_cases.h"
#include "queue_cases.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static bool IS_MYSQL;
static const char *SELF;

/* The schema version this backend writes. */
#define SCHEMA_VERSION (IS_MYSQL ? LL_MYSQL_SCHEMA_VERSION : LL_POSTGRESQL_SCHEMA_VERSION)

/* A URI like URI with extra options appended. */
static const char *uri_with (const char *opts)
{
   static char buf[1024];
   snprintf (buf, sizeof buf, "%s%s%s", URI, strchr (URI, '?') ? "&" : "?", opts);
   return buf;
}

static int count_connections (void)
{
   char out[64];
   bool ok = IS_MYSQL ? raw_query ("SELECT COUNT(*) FROM information_schema.processlist WHERE "
                                   "user = SUBSTRING_INDEX(USER(), '@', 1) AND db = DATABASE()",
                                   out, sizeof out)
                      : raw_query ("SELECT count(*) FROM pg_stat_activity WHERE datname = "
                                   "current_database() AND usename = current_user",
                                   out, sizeof out);
   return ok ? atoi (out) : -1;
}

/* ---- keys ------------------------------------------------------------- */

/* Hostile and multibyte keys go in and come back byte for byte, and the
 * table is still there. */
static void test_hostile_keys (void)
{
   const char *names[] = {
      "'; DROP TABLE leaselock; --",
      "\"; DROP TABLE leaselock; --",
      "it's a \"quoted\" key`",
      "back\\slash\\\\ and \\' \\\" \\0 \\n",
      "percent% under_score * ? [a-z] ^$",
      "ключ/鍵/🔒/é",
      "$1 $2 ? :name @var %s",
      " leading and trailing spaces ",
   };
   leaselock_client_t *c = client ("keys");
   CHECK (c);
   leaselock_error_t err;
   for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
      const char *k = key (names[i]);
      size_t klen = strlen (k);
      leaselock_lease_t *l;
      leaselock_acquire_opts_t o = opts (10000, false);
      bool ok = leaselock_acquire (c, k, klen, &o, &l, &err);
      CHECK_OK (ok, err);
      CHECK (leaselock_lease_fence (l) >= 1);
      leaselock_record_t rec;
      bool found;
      ok = leaselock_inspect (c, k, klen, &rec, &found, &err);
      CHECK_OK (ok, err);
      CHECK (found);
      CHECK_EQ (rec.key_len, klen);
      CHECK (!memcmp (rec.key, k, klen));
      CHECK (!strcmp (rec.owner, leaselock_lease_owner (l)));
      listing_t s = { 0 };
      ok = leaselock_list (c, k, klen, collect, &s, &err);
      CHECK_OK (ok, err);
      CHECK_EQ (s.n, 1);
      CHECK (s.lens[0] == klen && !memcmp (s.keys[0], k, klen));
      ok = leaselock_lease_release (l, &err);
      CHECK_OK (ok, err);
      leaselock_lease_destroy (l);
   }
   /* A key of 255 bytes of 3-byte characters (85 x U+20AC). */
   char big[256] = "";
   for (int i = 0; i < 85; i++)
      strcat (big, "€");
   leaselock_lease_t *l;
   leaselock_acquire_opts_t o = opts (10000, false);
   bool ok = leaselock_acquire (c, big, 255, &o, &l, &err);
   CHECK_OK (ok, err);
   leaselock_record_t rec;
   bool found;
   ok = leaselock_inspect (c, big, 255, &rec, &found, &err);
   CHECK_OK (ok, err);
   CHECK (found && rec.key_len == 255 && !memcmp (rec.key, big, 255));
   leaselock_lease_destroy (l);
   leaselock_client_destroy (c);

   char out[64];
   CHECK (raw_query (IS_MYSQL ? "SELECT COUNT(*) FROM leaselock" : "SELECT count(*) FROM leaselock",
                     out, sizeof out));
   CHECK (atoi (out) >= 9);
   char sql[1024];
   /* Stored as the exact bytes, not escaped text. */
   char hex[700] = "";
   const char *k = key ("'; DROP TABLE leaselock; --");
   for (const unsigned char *p = (const unsigned char *)k; *p; p++)
      sprintf (hex + strlen (hex), "%02x", *p);
   snprintf (sql, sizeof sql,
             IS_MYSQL ? "SELECT COUNT(*) FROM leaselock WHERE lock_key = 0x%s"
                      : "SELECT count(*) FROM leaselock WHERE convert_to(lock_key, 'UTF8') = "
                        "'\\x%s'::bytea",
             hex);
   CHECK (raw_query (sql, out, sizeof out));
   CHECK_EQ (atoi (out), 1);
}

/* Prefixes are literal bytes: no LIKE wildcards, no escapes, no partial
 * characters matching their neighbours. */
static void test_list_prefix_literal (void)
{
   const char *names[] = { "w/100%", "w/100x", "w/a_b", "w/axb", "w/back\\", "w/backs",
                           "w/é1",   "w/ê1",   "w/🔒1",  "w/🔓1",  "w/\x7f",   "w/~" };
   const int n = (int)(sizeof names / sizeof names[0]);
   leaselock_client_t *c = client ("list");
   CHECK (c);
   leaselock_error_t err;
   leaselock_lease_t *ls[16];
   for (int i = 0; i < n; i++) {
      leaselock_acquire_opts_t o = opts (10000, false);
      bool ok = leaselock_acquire (c, key (names[i]), strlen (key (names[i])), &o, &ls[i], &err);
      CHECK_OK (ok, err);
   }
   struct
   {
      const char *prefix;
      int want;
      const char *first;
   } cases[] = {
      { "w/100%", 1, "w/100%" }, { "w/a_", 1, "w/a_b" },   { "w/back\\", 1, "w/back\\" },
      { "w/é", 1, "w/é1" },      { "w/🔒", 1, "w/🔒1" },     { "w/\x7f", 1, "w/\x7f" },
      { "w/", n, "w/100%" },     { "w/100", 2, "w/100%" },
   };
   for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
      listing_t s = { 0 };
      const char *p = key (cases[i].prefix);
      bool ok = leaselock_list (c, p, strlen (p), collect, &s, &err);
      CHECK_OK (ok, err);
      if (s.n != cases[i].want)
         fprintf (stderr, "    prefix \"%s\": %d records\n", cases[i].prefix, s.n);
      CHECK_EQ (s.n, cases[i].want);
      const char *f = key (cases[i].first);
      CHECK (s.lens[0] == strlen (f) && !memcmp (s.keys[0], f, s.lens[0]));
   }
   /* Key order is byte order. */
   listing_t s = { 0 };
   bool ok = leaselock_list (c, key ("w/"), strlen (key ("w/")), collect, &s, &err);
   CHECK_OK (ok, err);
   for (int i = 1; i < s.n; i++) {
      size_t m = s.lens[i - 1] < s.lens[i] ? s.lens[i - 1] : s.lens[i];
      int cmp = memcmp (s.keys[i - 1], s.keys[i], m);
      CHECK (cmp < 0 || (cmp == 0 && s.lens[i - 1] < s.lens[i]));
   }
   for (int i = 0; i < n; i++)
      leaselock_lease_destroy (ls[i]);
   leaselock_client_destroy (c);
}

/* ---- server clock ----------------------------------------------------- */

/* The helper (this program under faketime): prints its wall clock, then
 *   hold KEY TTL_MS: acquires, prints the fence, exits without releasing;
 *   try KEY: one acquire; prints BUSY or the fence. */
static int helper (int argc, char **argv)
{
   if (argc < 5)
      return 2;
   printf ("time %lld\n", (long long)time (NULL));
   leaselock_error_t err;
   leaselock_client_t *c = leaselock_client_new (argv[3], "skewed", &err);
   if (!c) {
      printf ("error %s %s\n", leaselock_code_name (err.code), err.message);
      fflush (stdout);
      _exit (3);
   }
   leaselock_acquire_opts_t o = opts (argc > 5 ? atoll (argv[5]) : 5000, false);
   leaselock_lease_t *l;
   if (leaselock_acquire (c, argv[4], strlen (argv[4]), &o, &l, &err))
      printf ("fence %lld\n", (long long)leaselock_lease_fence (l));
   else
      printf ("%s %s\n", leaselock_code_name (err.code), err.message);
   fflush (stdout);
   _exit (0); /* no release: the record keeps the expiry the helper wrote */
}

/* Runs the helper under faketime with offset; its output goes to out. */
static bool run_skewed (const char *offset, const char *what, const char *k, int64_t ttl, char *out,
                        size_t size)
{
   char cmd[2048], ttl_s[32];
   snprintf (ttl_s, sizeof ttl_s, "%lld", (long long)ttl);
   /* Under ASan, libfaketime is preloaded ahead of the sanitizer runtime. */
   const char *asan = getenv ("ASAN_OPTIONS");
   snprintf (cmd, sizeof cmd,
             "ASAN_OPTIONS='%s%sverify_asan_link_order=0' faketime -f '%s' '%s' --helper %s '%s' "
             "'%s' %s",
             asan ? asan : "", asan && *asan ? ":" : "", offset, SELF, what, URI, k, ttl_s);
   FILE *f = popen (cmd, "r");
   if (!f)
      return false;
   size_t n = fread (out, 1, size - 1, f);
   out[n] = '\0';
   int rc = pclose (f);
   if (rc != 0)
      fprintf (stderr, "    helper (%s): exit %d: %s\n", offset, rc, out);
   return rc == 0;
}

/* A client whose clock is an hour ahead or behind neither steals a live
 * lease nor writes a lease that is longer or shorter than its TTL. */
static void test_clock_skew (void)
{
   if (system ("command -v faketime >/dev/null 2>&1") != 0) {
      fprintf (stderr, "    faketime is not installed (apt-get install faketime)\n");
      CHECK (!"faketime available");
   }
   const char *offsets[] = { "+1h", "-1h" };
   leaselock_client_t *c = client ("skew");
   CHECK (c);
   leaselock_error_t err;
   for (int i = 0; i < 2; i++) {
      char out[1024];
      /* 1. We hold a live lease; the skewed client must get BUSY. */
      char held[64];
      snprintf (held, sizeof held, "skew/held%d", i);
      const char *k = key (held);
      leaselock_lease_t *l;
      leaselock_acquire_opts_t o = opts (20000, false);
      bool ok = leaselock_acquire (c, k, strlen (k), &o, &l, &err);
      CHECK_OK (ok, err);
      CHECK (run_skewed (offsets[i], "try", k, 5000, out, sizeof out));
      long long t_helper = 0;
      CHECK (sscanf (out, "time %lld", &t_helper) == 1);
      long long skew = t_helper - (long long)time (NULL);
      if (llabs (skew) < 3000)
         fprintf (stderr, "    faketime had no effect (skew %lld s)\n", skew);
      CHECK (llabs (skew) > 3000 && llabs (skew) < 4200); /* the helper really was skewed */
      CHECK (strstr (out, "BUSY") != NULL);
      leaselock_record_t rec;
      bool found;
      ok = leaselock_inspect (c, k, strlen (k), &rec, &found, &err);
      CHECK_OK (ok, err);
      CHECK (!strcmp (rec.owner, leaselock_lease_owner (l)));
      CHECK (rec.expires_in_ms > 15000 && rec.expires_in_ms <= 20000);
      leaselock_lease_destroy (l);

      /* 2. The skewed client takes a lease of 3 s: by the server clock it
       * lasts 3 s, not 3 s +/- an hour. */
      char fresh[64];
      snprintf (fresh, sizeof fresh, "skew/fresh%d", i);
      k = key (fresh);
      CHECK (run_skewed (offsets[i], "hold", k, 3000, out, sizeof out));
      CHECK (strstr (out, "fence ") != NULL);
      ok = leaselock_inspect (c, k, strlen (k), &rec, &found, &err);
      CHECK_OK (ok, err);
      CHECK (found && !strcmp (rec.label, "skewed"));
      if (rec.expires_in_ms <= 0 || rec.expires_in_ms > 3000)
         fprintf (stderr, "    skewed lease expires in %lld ms\n", (long long)rec.expires_in_ms);
      CHECK (rec.expires_in_ms > 0 && rec.expires_in_ms <= 3000);
      /* ... so it blocks us now and frees up after about 3 s. */
      o = opts (5000, false);
      ok = leaselock_acquire (c, k, strlen (k), &o, &l, &err);
      CHECK (!ok && err.code == LEASELOCK_BUSY);
      sleep_ms (rec.expires_in_ms + 50);
      ok = leaselock_acquire (c, k, strlen (k), &o, &l, &err);
      CHECK_OK (ok, err);
      leaselock_lease_destroy (l);
   }
   leaselock_client_destroy (c);
}

/* ---- take-over -------------------------------------------------------- */

/* An expired lease taken over by another owner: the new owner gets the
 * full TTL and the old owner's lease is not extended (MySQL evaluates the
 * ON DUPLICATE KEY UPDATE assignments left to right); a BUSY attempt
 * changes nothing. Backend level, so the old owner cannot stop itself. */
static void test_takeover_does_not_extend_old (void)
{
   leaselock_error_t err;
   const ll_backend_t *b;
   void *conn = backend_open (URI, &b);
   CHECK (conn);
   const char *A = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", *B = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
   ll_holder_t ha = { "host-a", 111, "label-a" }, hb = { "host-b", 222, "label-b" };
   const char *k = key ("takeover");
   size_t kl = strlen (k);
   int64_t f1 = 0, f2 = 0, f3 = 0;
   bool ok = ll_backend_acquire (
     b, conn, &(ll_take_t){ { k, kl, A }, 300, &ha, 0, 0, false, false }, &f1, &err);
   leaselock_record_t r1, r2, r3;
   bool found = false;
   bool busy_ok = false, renew_a = true, release_a = true, release_b = false;
   leaselock_error_t e_renew = { 0 }, e_release = { 0 };
   if (ok) {
      /* BUSY while A is live: nothing changes, not even A's expiry. */
      ok = b->inspect (conn, &(ll_op_t){ k, kl, NULL }, &r1, &found, &err);
      busy_ok =
        !ll_backend_acquire (b, conn, &(ll_take_t){ { k, kl, B }, 60000, &hb, 0, 0, false, false },
                             &f2, &err) &&
        err.code == LEASELOCK_BUSY;
      if (ok)
         ok = b->inspect (conn, &(ll_op_t){ k, kl, NULL }, &r2, &found, &err);
   }
   if (ok) {
      sleep_ms (400);
      ok = ll_backend_acquire (b, conn, &(ll_take_t){ { k, kl, B }, 5000, &hb, 0, 0, false, false },
                               &f3, &err);
   }
   if (ok) {
      ok = b->inspect (conn, &(ll_op_t){ k, kl, NULL }, &r3, &found, &err);
      renew_a = b->renew (conn, &(ll_op_t){ k, kl, A }, 60000, &e_renew);
      release_a = b->release (conn, &(ll_op_t){ k, kl, A }, 0, &e_release);
   }
   leaselock_record_t r4;
   if (ok)
      ok = b->inspect (conn, &(ll_op_t){ k, kl, NULL }, &r4, &found, &err);
   if (ok)
      release_b = b->release (conn, &(ll_op_t){ k, kl, B }, 0, &err);
   b->close (conn);
   CHECK_OK (ok, err);
   CHECK (busy_ok);
   CHECK (!strcmp (r2.owner, A) && r2.fence == f1 && !strcmp (r2.label, "label-a") &&
          !strcmp (r2.host, "host-a") && r2.pid == 111);
   CHECK (r2.expires_in_ms <= r1.expires_in_ms && r2.expires_in_ms <= 300);
   CHECK (f3 == f1 + 1);
   CHECK (!strcmp (r3.owner, B) && r3.fence == f3 && !strcmp (r3.label, "label-b") &&
          !strcmp (r3.host, "host-b") && r3.pid == 222);
   CHECK (r3.expires_in_ms > 4000 && r3.expires_in_ms <= 5000);
   CHECK (!renew_a && e_renew.code == LEASELOCK_NOT_HELD);
   CHECK (!release_a && e_release.code == LEASELOCK_NOT_HELD);
   CHECK (!strcmp (r4.owner, B) && r4.expires_in_ms <= r3.expires_in_ms);
   CHECK (release_b);
}

/* ---- the next owner's reservation (acquire_wait) -------------------------- */

/* Owners of the reservation tests: a holder, waiters W, X, and a young
 * and an old waiter. */
#define RSV_H "11111111111111111111111111111111"
#define RSV_W "22222222222222222222222222222222"
#define RSV_X "33333333333333333333333333333333"
#define RSV_YOUNG "44444444444444444444444444444444"
#define RSV_OLD "55555555555555555555555555555555"

/* A plain acquire for ttl_ms: 'T' took (its fence in *fence when given),
 * 'B' busy, 'E' another error (on stderr). */
static char rsv_take (const ll_backend_t *b, void *conn, const char *k, const char *owner,
                      int64_t ttl_ms, int64_t *fence)
{
   static const ll_holder_t h = { "rsv-host", 1, "rsv" };
   leaselock_error_t err;
   int64_t f = 0;
   if (ll_backend_acquire (b, conn,
                           &(ll_take_t){ { k, strlen (k), owner }, ttl_ms, &h, 0, 0, false, false },
                           &f, &err)) {
      if (fence)
         *fence = f;
      return 'T';
   }
   if (err.code == LEASELOCK_BUSY)
      return 'B';
   fprintf (stderr, "    acquire: %s %s\n", leaselock_code_name (err.code), err.message);
   return 'E';
}

/* The record's time left the last claim reported (acquire_wait's
 * *left_ms). */
static int64_t rsv_left;

/* acquire_wait (ttl 10 s): 'T' took, 'R' busy and owner is next, 'B' busy
 * and not next, '?' took but says reserved, 'E' another error. */
static char rsv_wait (const ll_backend_t *b, void *conn, const char *k, const char *owner,
                      int64_t reserve_ms, int64_t waited_ms, int64_t *fence)
{
   static const ll_holder_t h = { "rsv-host", 2, "rsv-waiter" };
   leaselock_error_t err;
   ll_taken_t out = { 0, true, -2 }; /* the backend must set reserved */
   const ll_take_t t = { { k, strlen (k), owner }, 10000, &h, reserve_ms, waited_ms, false, false };
   bool ok = b->acquire_wait (conn, &t, &out, &err);
   bool reserved = out.reserved;
   rsv_left = out.left_ms;
   if (ok && fence)
      *fence = out.fence;
   if (ok)
      return reserved ? '?' : 'T';
   if (err.code == LEASELOCK_BUSY)
      return reserved ? 'R' : 'B';
   fprintf (stderr, "    acquire_wait: %s %s\n", leaselock_code_name (err.code), err.message);
   return 'E';
}

static bool rsv_release (const ll_backend_t *b, void *conn, const char *k, const char *owner)
{
   leaselock_error_t err;
   return b->release (conn, &(ll_op_t){ k, strlen (k), owner }, 0, &err);
}

/* Runs a reservation test on a connection of its own (uri), closed after. */
static void rsv_run (const char *uri, void (*body) (const ll_backend_t *, void *))
{
   const ll_backend_t *b;
   void *conn = backend_open (uri, &b);
   CHECK (conn);
   if (b->acquire_wait)
      body (b, conn);
   else
      tl_fail (__FILE__, __LINE__, "the backend has no acquire_wait");
   b->close (conn);
}

/* ---- reentrant hold counts --------------------------------------------- */

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

/* The holds list reports for the one record under prefix k (-1: not one). */
static int64_t list_count_holds (const ll_backend_t *b, void *conn, const char *k, size_t n)
{
   leaselock_error_t err;
   holds_seen_t s = { -1, 0 };
   if (!b->list (conn, k, n, see_holds, &s, &err) || s.n != 1)
      return -1;
   return s.holds;
}

/* hold (delta) of k for owner: the count after, 0 for NOT_HELD, -1 for
 * another error (on stderr). */
static int64_t hold_of (const ll_backend_t *b, void *conn, const char *k, size_t n,
                        const char *owner, int delta)
{
   leaselock_error_t err;
   int64_t holds = -5;
   if (b->hold (conn, &(ll_op_t){ k, n, owner }, delta, &holds, &err))
      return holds;
   if (err.code == LEASELOCK_NOT_HELD)
      return 0;
   fprintf (stderr, "    hold: %s %s\n", leaselock_code_name (err.code), err.message);
   return -1;
}

/* The holds inspect reports for k (-1: no record or an error). */
static int64_t holds_shown (const ll_backend_t *b, void *conn, const char *k, size_t n)
{
   leaselock_error_t err;
   leaselock_record_t rec;
   bool found = false;
   if (!b->inspect (conn, &(ll_op_t){ k, n, NULL }, &rec, &found, &err) || !found)
      return -1;
   return rec.holds;
}

/* The holds column of k in table, as stored (-1 on error). k is spelled
 * into the query: plain keys only. */
static long long raw_holds (const char *table, const char *k)
{
   char sql[512], out[64] = "";
   snprintf (sql, sizeof sql, "SELECT holds FROM %s WHERE lock_key = '%s'", table, k);
   return raw_query (sql, out, sizeof out) && out[0] ? atoll (out) : -1;
}

/* The count moves by one each way and never below 1; the lease, its
 * fence and expiry stay; another owner, an expired or released lease, a
 * missing key: NOT_HELD, the count untouched; a take sets 1 again. */
static void hold_counts (const ll_backend_t *b, void *c)
{
   const char *k = key ("hold-counts");
   size_t n = strlen (k);
   int64_t f1 = 0, f2 = 0;
   leaselock_error_t err;
   leaselock_record_t r1, r2;
   bool found = false;
   CHECK_EQ (rsv_take (b, c, k, RSV_H, 10000, &f1), 'T');
   CHECK_EQ (holds_shown (b, c, k, n), 1);
   CHECK_OK (b->inspect (c, &(ll_op_t){ k, n, NULL }, &r1, &found, &err), err);
   CHECK_EQ (hold_of (b, c, k, n, RSV_H, +1), 2);
   CHECK_EQ (hold_of (b, c, k, n, RSV_H, +1), 3);
   CHECK_EQ (holds_shown (b, c, k, n), 3);
   CHECK_OK (b->inspect (c, &(ll_op_t){ k, n, NULL }, &r2, &found, &err), err);
   CHECK (!strcmp (r2.owner, RSV_H) && r2.fence == f1 && r2.expires_in_ms <= r1.expires_in_ms);
   CHECK_EQ (hold_of (b, c, k, n, RSV_W, +1), 0);
   CHECK_EQ (hold_of (b, c, k, n, RSV_W, -1), 0);
   CHECK_EQ (holds_shown (b, c, k, n), 3);
   CHECK_EQ (hold_of (b, c, k, n, RSV_H, -1), 2);
   CHECK_EQ (hold_of (b, c, k, n, RSV_H, -1), 1);
   CHECK_EQ (hold_of (b, c, k, n, RSV_H, -1), 1); /* never below 1 */
   CHECK_EQ (hold_of (b, c, k, n, RSV_H, +1), 2);
   CHECK_EQ (list_count_holds (b, c, k, n), 2);
   CHECK (rsv_release (b, c, k, RSV_H));
   CHECK_EQ (hold_of (b, c, k, n, RSV_H, +1), 0);
   CHECK_EQ (holds_shown (b, c, k, n), 0); /* released: no holds */
   /* The next take starts at 1 again. */
   CHECK_EQ (rsv_take (b, c, k, RSV_W, 10000, &f2), 'T');
   CHECK_EQ (f2, f1 + 1);
   CHECK_EQ (holds_shown (b, c, k, n), 1);
   CHECK_EQ (hold_of (b, c, k, n, RSV_W, +1), 2);
   CHECK (rsv_release (b, c, k, RSV_W));
   /* Expired: its owner cannot enter again, and a take-over starts at 1. */
   const char *e = key ("hold-expired");
   CHECK_EQ (rsv_take (b, c, e, RSV_H, 200, NULL), 'T');
   CHECK_EQ (hold_of (b, c, e, strlen (e), RSV_H, +1), 2);
   sleep_ms (300);
   CHECK_EQ (hold_of (b, c, e, strlen (e), RSV_H, +1), 0);
   CHECK_EQ (hold_of (b, c, e, strlen (e), RSV_H, -1), 0);
   CHECK_EQ (rsv_take (b, c, e, RSV_W, 10000, NULL), 'T');
   CHECK_EQ (holds_shown (b, c, e, strlen (e)), 1);
   CHECK (rsv_release (b, c, e, RSV_W));
   /* No record at all. */
   const char *m = key ("hold-missing");
   CHECK_EQ (hold_of (b, c, m, strlen (m), RSV_H, +1), 0);
   CHECK_EQ (holds_shown (b, c, m, strlen (m)), -1);
}

/* Keys with quotes, backslashes, multibyte characters and 255 bytes: the
 * count of the right record moves (bound parameters only). */
static void hold_odd_keys (const ll_backend_t *b, void *c)
{
   char big[256] = "";
   for (int i = 0; i < 85; i++)
      strcat (big, "€");
   const char *names[] = { key ("hold/it's a \"quoted\" key` \\ \\' %_"), key ("hold/ключ/鍵/🔒/é"),
                           big };
   for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
      const char *k = names[i];
      size_t n = strlen (k);
      CHECK_EQ (rsv_take (b, c, k, RSV_H, 10000, NULL), 'T');
      CHECK_EQ (hold_of (b, c, k, n, RSV_H, +1), 2);
      CHECK_EQ (hold_of (b, c, k, n, RSV_W, +1), 0);
      CHECK_EQ (holds_shown (b, c, k, n), 2);
      CHECK_EQ (hold_of (b, c, k, n, RSV_H, -1), 1);
      CHECK (rsv_release (b, c, k, RSV_H));
   }
   CHECK_EQ (strlen (big), 255);
}

static void test_hold_counts (void)
{
   rsv_run (URI, hold_counts);
}

static void test_hold_odd_keys (void)
{
   rsv_run (URI, hold_odd_keys);
}

/* A live reservation of waiter W blocks every other owner's acquire of the
 * released record, the old holder's too; W takes it (fence + 1), which
 * clears the reservation: X can then be next, and takes it after W. */
static void rsv_blocks_others (const ll_backend_t *b, void *c)
{
   const char *k = key ("rsv-blocks");
   int64_t f1 = 0, f2 = 0, f3 = 0;
   CHECK_EQ (rsv_take (b, c, k, RSV_H, 10000, &f1), 'T');
   CHECK_EQ (rsv_wait (b, c, k, RSV_W, 2000, 0, NULL), 'R');
   CHECK_EQ (rsv_wait (b, c, k, RSV_X, 2000, 0, NULL), 'B'); /* began later: W stays next */
   CHECK (rsv_release (b, c, k, RSV_H));
   CHECK_EQ (rsv_take (b, c, k, RSV_X, 10000, NULL), 'B');
   CHECK_EQ (rsv_take (b, c, k, RSV_H, 10000, NULL), 'B');
   CHECK_EQ (rsv_take (b, c, k, RSV_W, 10000, &f2), 'T');
   CHECK_EQ (f2, f1 + 1);
   CHECK_EQ (rsv_wait (b, c, k, RSV_X, 2000, 0, NULL), 'R'); /* W's was cleared */
   CHECK (rsv_release (b, c, k, RSV_W));
   CHECK_EQ (rsv_take (b, c, k, RSV_H, 10000, NULL), 'B');
   CHECK_EQ (rsv_wait (b, c, k, RSV_X, 2000, 0, &f3), 'T');
   CHECK_EQ (f3, f2 + 1);
   CHECK (rsv_release (b, c, k, RSV_X));
}

static void test_reservation_blocks_others (void)
{
   rsv_run (URI, rsv_blocks_others);
}

/* A claim reports the record's time left by the database clock, so the
 * next owner sleeps no longer than that: while the key is held (ttl 10 s),
 * and after a release with min_hold, whose end nothing notifies. */
static void rsv_reports_left (const ll_backend_t *b, void *c)
{
   const char *k = key ("rsv-left");
   leaselock_error_t err;
   CHECK_EQ (rsv_take (b, c, k, RSV_H, 10000, NULL), 'T');
   CHECK_EQ (rsv_wait (b, c, k, RSV_W, 2000, 0, NULL), 'R');
   CHECK (rsv_left > 8000 && rsv_left <= 10000);
   CHECK (b->release (c, &(ll_op_t){ k, strlen (k), RSV_H }, 3000, &err));
   CHECK_EQ (rsv_wait (b, c, k, RSV_W, 2000, 0, NULL), 'R');
   CHECK (rsv_left > 1000 && rsv_left <= 3000);
   CHECK_EQ (rsv_wait (b, c, k, RSV_X, 2000, 0, NULL), 'B');
}

static void test_reservation_reports_left (void)
{
   rsv_run (URI, rsv_reports_left);
}

/* A reservation past its until (by the database clock) blocks no more:
 * a younger waiter claims it, and anyone takes the released key. */
static void rsv_runs_out (const ll_backend_t *b, void *c)
{
   const char *k = key ("rsv-runs-out");
   CHECK_EQ (rsv_take (b, c, k, RSV_H, 10000, NULL), 'T');
   CHECK_EQ (rsv_wait (b, c, k, RSV_W, 300, 0, NULL), 'R');
   sleep_ms (450);
   CHECK_EQ (rsv_wait (b, c, k, RSV_X, 1000, 0, NULL), 'R'); /* W's ran out */
   CHECK (rsv_release (b, c, k, RSV_H));
   CHECK_EQ (rsv_take (b, c, k, RSV_W, 10000, NULL), 'B');
   sleep_ms (1150);
   CHECK_EQ (rsv_take (b, c, k, RSV_W, 10000, NULL), 'T'); /* X's ran out */
   CHECK_EQ (rsv_take (b, c, k, RSV_X, 10000, NULL), 'B');
   CHECK (rsv_release (b, c, k, RSV_W));
}

static void test_reservation_runs_out (void)
{
   rsv_run (URI, rsv_runs_out);
}

/* An older waiter (larger waited) takes the reservation from a younger
 * one; the younger one does not take it back, and the older one keeps it
 * and takes the key. */
static void rsv_older_wins (const ll_backend_t *b, void *c)
{
   const char *k = key ("rsv-older");
   CHECK_EQ (rsv_take (b, c, k, RSV_H, 10000, NULL), 'T');
   CHECK_EQ (rsv_wait (b, c, k, RSV_YOUNG, 2000, 0, NULL), 'R');
   CHECK_EQ (rsv_wait (b, c, k, RSV_OLD, 2000, 5000, NULL), 'R');
   CHECK_EQ (rsv_wait (b, c, k, RSV_YOUNG, 2000, 100, NULL), 'B');
   CHECK_EQ (rsv_wait (b, c, k, RSV_OLD, 2000, 5000, NULL), 'R');
   CHECK (rsv_release (b, c, k, RSV_H));
   CHECK_EQ (rsv_take (b, c, k, RSV_YOUNG, 10000, NULL), 'B');
   CHECK_EQ (rsv_wait (b, c, k, RSV_YOUNG, 2000, 200, NULL), 'B');
   CHECK_EQ (rsv_wait (b, c, k, RSV_OLD, 2000, 5000, NULL), 'T');
   CHECK (rsv_release (b, c, k, RSV_OLD));
}

static void test_reservation_older_waiter_wins (void)
{
   rsv_run (URI, rsv_older_wins);
}

/* A plain acquire that is BUSY leaves no reservation: once the holder
 * releases, anyone takes the key. */
static void rsv_plain_never_reserves (const ll_backend_t *b, void *c)
{
   const char *k = key ("rsv-plain");
   CHECK_EQ (rsv_take (b, c, k, RSV_H, 10000, NULL), 'T');
   CHECK_EQ (rsv_take (b, c, k, RSV_X, 10000, NULL), 'B');
   CHECK (rsv_release (b, c, k, RSV_H));
   CHECK_EQ (rsv_take (b, c, k, RSV_W, 10000, NULL), 'T');
   CHECK (rsv_release (b, c, k, RSV_W));
}

static void test_plain_acquire_never_reserves (void)
{
   rsv_run (URI, rsv_plain_never_reserves);
}

/* prune keeps an expired record whose reservation is live (the one
 * beside it, without one, goes), and deletes it once the reservation
 * ran out. */
static void rsv_prune_keeps (const ll_backend_t *b, void *c)
{
   const char *pfx = key ("rsv-prune/"), *k1 = key ("rsv-prune/reserved");
   const char *k2 = key ("rsv-prune/free");
   leaselock_error_t err;
   leaselock_record_t rec;
   bool found = false;
   int64_t n = -1;
   CHECK_EQ (rsv_take (b, c, k1, RSV_H, 10000, NULL), 'T');
   CHECK_EQ (rsv_take (b, c, k2, RSV_H, 10000, NULL), 'T');
   CHECK_EQ (rsv_wait (b, c, k1, RSV_W, 1000, 0, NULL), 'R');
   CHECK (rsv_release (b, c, k1, RSV_H) && rsv_release (b, c, k2, RSV_H));
   CHECK_OK (b->prune (c, pfx, strlen (pfx), 0, &n, &err), err);
   CHECK_EQ (n, 1);
   CHECK_OK (b->inspect (c, &(ll_op_t){ k1, strlen (k1), NULL }, &rec, &found, &err), err);
   CHECK (found);
   sleep_ms (1150);
   CHECK_OK (b->prune (c, pfx, strlen (pfx), 0, &n, &err), err);
   CHECK_EQ (n, 1);
   CHECK_OK (b->inspect (c, &(ll_op_t){ k1, strlen (k1), NULL }, &rec, &found, &err), err);
   CHECK (!found);
}

static void test_prune_keeps_reserved (void)
{
   rsv_run (URI, rsv_prune_keeps);
}

/* The owner's own retried acquire succeeds whatever the reservation:
 * while its lease is live, and after it expired with W's reservation
 * live. */
static void rsv_retry_wins (const ll_backend_t *b, void *c)
{
   const char *k = key ("rsv-retry");
   int64_t f1 = 0, f2 = 0, f3 = 0;
   CHECK_EQ (rsv_take (b, c, k, RSV_H, 300, &f1), 'T');
   CHECK_EQ (rsv_wait (b, c, k, RSV_W, 3000, 0, NULL), 'R');
   CHECK_EQ (rsv_take (b, c, k, RSV_H, 300, &f2), 'T');
   CHECK_EQ (f2, f1 + 1);
   CHECK_EQ (rsv_wait (b, c, k, RSV_W, 3000, 0, NULL), 'R');
   sleep_ms (400); /* H's lease expired; W's reservation is live */
   CHECK_EQ (rsv_take (b, c, k, RSV_X, 10000, NULL), 'B');
   CHECK_EQ (rsv_take (b, c, k, RSV_H, 10000, &f3), 'T');
   CHECK_EQ (f3, f2 + 1);
   CHECK (rsv_release (b, c, k, RSV_H));
}

static void test_retry_beats_reservation (void)
{
   rsv_run (URI, rsv_retry_wins);
}

/* A version-1 table (the old DDL: raw_create_v1) is migrated in place on
 * open: version 2 recorded, its record kept and unreserved (the new
 * columns read NULL), and reservations work on it. */
static const char *MIGRATING; /* the table a migration test opens */

static void rsv_on_migrated (const ll_backend_t *b, void *c)
{
   leaselock_error_t err;
   leaselock_record_t rec;
   bool found = false;
   int64_t f = 0;
   CHECK_OK (b->inspect (c, &(ll_op_t){ "old", 3, NULL }, &rec, &found, &err), err);
   CHECK (found && rec.fence == 7 && !rec.owner[0] && !strcmp (rec.label, "old-label"));
   CHECK_EQ (raw_holds (MIGRATING, "old"), 1); /* version 4's column, 1 for what was there */
   CHECK_EQ (rsv_wait (b, c, "old", RSV_W, 2000, 0, &f), 'T');
   CHECK_EQ (f, 8);
   CHECK_EQ (rsv_wait (b, c, "old", RSV_X, 2000, 0, NULL), 'R');
   CHECK (rsv_release (b, c, "old", RSV_W));
   CHECK_EQ (rsv_take (b, c, "old", RSV_H, 10000, NULL), 'B');
   CHECK_EQ (rsv_take (b, c, "old", RSV_X, 10000, &f), 'T');
   CHECK_EQ (f, 9);
   CHECK_EQ (hold_of (b, c, "old", 3, RSV_X, +1), 2);
   CHECK_EQ (holds_shown (b, c, "old", 3), 2);
}

static void test_migrate_v1 (void)
{
   char table[64], opt[80], sql[256], out[64] = "";
   snprintf (table, sizeof table, "ll_v1_%d_%s", (int)getpid (), PFX + strlen (PFX) - 8);
   snprintf (opt, sizeof opt, "table=%s", table);
   snprintf (sql, sizeof sql, "SELECT schema_version FROM %s_meta", table);
   bool made = raw_create_v1 (table);
   MIGRATING = table;
   if (made) {
      rsv_run (uri_with (opt), rsv_on_migrated);
      raw_query (sql, out, sizeof out);
   }
   snprintf (sql, sizeof sql, "DROP TABLE IF EXISTS %s, %s_meta, %s_queue", table, table, table);
   raw_query (sql, NULL, 0);
   CHECK (made);
   CHECK_EQ (atoi (out), SCHEMA_VERSION);
}

/* An expired record reserved by a younger waiter: an older waiter's
 * acquire_wait claims the reservation but must not take the key (MySQL:
 * an ON DUPLICATE KEY UPDATE assignment sees the columns set before it, so
 * a claim written first could read as "the reservation is ours"); the
 * lease columns stay as they were, the younger one cannot take it, and
 * the older one then does. */
static void rsv_claim_expired (const ll_backend_t *b, void *c)
{
   const char *k = key ("rsv-claim-expired");
   leaselock_error_t err;
   leaselock_record_t r1, r2;
   bool found = false;
   int64_t f1 = 0, f2 = 0;
   CHECK_EQ (rsv_take (b, c, k, RSV_H, 10000, &f1), 'T');
   CHECK_EQ (rsv_wait (b, c, k, RSV_YOUNG, 2000, 0, NULL), 'R');
   CHECK (rsv_release (b, c, k, RSV_H));
   CHECK_OK (b->inspect (c, &(ll_op_t){ k, strlen (k), NULL }, &r1, &found, &err), err);
   CHECK_EQ (rsv_wait (b, c, k, RSV_OLD, 2000, 5000, NULL), 'R');
   CHECK_OK (b->inspect (c, &(ll_op_t){ k, strlen (k), NULL }, &r2, &found, &err), err);
   CHECK (found && !r2.owner[0] && r2.fence == f1 && r2.pid == r1.pid);
   CHECK (!strcmp (r2.label, r1.label) && r2.expires_in_ms <= r1.expires_in_ms);
   CHECK_EQ (rsv_take (b, c, k, RSV_YOUNG, 10000, NULL), 'B');
   CHECK_EQ (rsv_wait (b, c, k, RSV_YOUNG, 2000, 100, NULL), 'B');
   CHECK_EQ (rsv_wait (b, c, k, RSV_OLD, 2000, 5000, &f2), 'T');
   CHECK_EQ (f2, f1 + 1);
   CHECK (rsv_release (b, c, k, RSV_OLD));
}

static void test_reservation_claim_on_expired (void)
{
   rsv_run (URI, rsv_claim_expired);
}

/* Several processes opening one version-1 table at once all succeed, and
 * it ends at version 2 with its record. */
static void test_concurrent_migration (void)
{
   char table[64], opt[80], sql[256], out[64] = "";
   snprintf (table, sizeof table, "ll_v1race_%d_%s", (int)getpid (), PFX + strlen (PFX) - 8);
   snprintf (opt, sizeof opt, "table=%s", table);
   const char *u = uri_with (opt);
   bool made = raw_create_v1 (table);
   int fds[2], failed = 0;
   CHECK (pipe (fds) == 0);
   pid_t pids[6];
   for (int i = 0; made && i < 6; i++) {
      if ((pids[i] = fork ()) == 0) {
         char ch;
         close (fds[1]);
         if (read (fds[0], &ch, 1) < 0) /* all start together */
            _exit (4);
         leaselock_error_t err;
         leaselock_record_t rec;
         bool found = false;
         leaselock_client_t *cl = leaselock_client_new (u, NULL, &err);
         bool ok = cl && leaselock_inspect (cl, "old", 3, &rec, &found, &err) && found;
         if (!ok)
            fprintf (stderr, "    child: %s %s\n", leaselock_code_name (err.code), err.message);
         leaselock_client_destroy (cl);
         _exit (ok ? 0 : 1);
      }
   }
   close (fds[0]);
   sleep_ms (200);
   close (fds[1]);
   for (int i = 0; made && i < 6; i++) {
      int st;
      waitpid (pids[i], &st, 0);
      failed += !WIFEXITED (st) || WEXITSTATUS (st) != 0;
   }
   snprintf (sql, sizeof sql, "SELECT schema_version FROM %s_meta", table);
   raw_query (sql, out, sizeof out);
   long long holds = raw_holds (table, "old");
   snprintf (sql, sizeof sql, "DROP TABLE IF EXISTS %s, %s_meta, %s_queue", table, table, table);
   raw_query (sql, NULL, 0);
   CHECK (made);
   CHECK_EQ (failed, 0);
   CHECK_EQ (atoi (out), SCHEMA_VERSION);
   CHECK_EQ (holds, 1);
}

/* ---- the fair mode's queue -------------------------------------------- */

/* The entries stored for k in the default table's queue, run-out ones
 * too (not MySQL's head row of the key, owner '': no entry). k is one of
 * the suite's plain keys (letters, digits, '-', '/'), so it is spelled
 * into the text of this raw query. */
static long long q_rows (const char *k)
{
   char sql[512], out[64] = "";
   snprintf (sql, sizeof sql,
             "SELECT COUNT(*) FROM leaselock_queue WHERE lock_key = '%s' AND owner <> ''", k);
   return raw_query (sql, out, sizeof out) ? atoll (out) : -1;
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

/* ---- MySQL's queue mark ------------------------------------------------ */

/* A fair first take as owner o of k on conn: whether it took it. */
static bool mark_fair_take (const ll_backend_t *b, void *c, const char *k, const char *o,
                            leaselock_error_t *err)
{
   static const ll_holder_t h = { "mark-host", 1, "mark" };
   int64_t fence = 0;
   return ll_backend_acquire (
     b, c, &(ll_take_t){ { k, strlen (k), o }, 10000, &h, -1, 0, true, false }, &fence, err);
}

/* MySQL's fair first try reads the key's queue mark, not the queue: an
 * uncontended one never runs the statement that reads the queue. Where a
 * queue was used and its mark is still live, the try asks the queue: BUSY
 * while an entry is live, and it takes the key once the queue emptied,
 * mark or not. */
static void test_queue_mark_first_try (void)
{
   if (!IS_MYSQL)
      return;
   const ll_backend_t *b;
   void *c = backend_open (URI, &b);
   CHECK (c);
   const char *k = key ("q/mark-first");
   leaselock_error_t err;
   int64_t ahead = -1;
   CHECK_OK (mark_fair_take (b, c, k, QC_H, &err), err);
   CHECK_OK (b->release (c, &(ll_op_t){ k, strlen (k), QC_H }, 0, &err), err);
   CHECK (!raw_statement_prepared (c, LL_SQL_ACQUIRE_FAIR_QUEUE));
   CHECK (!strstr (ll_mysql_statements[LL_SQL_ACQUIRE_FAIR], "_queue"));
   CHECK_OK (b->queue_join (c, &(ll_op_t){ k, strlen (k), QC_A }, 10000, &ahead, &err), err);
   CHECK_EQ (ahead, 0);
   bool ok = mark_fair_take (b, c, k, QC_H, &err);
   CHECK_ERR (ok, err, LEASELOCK_BUSY, "");
   CHECK (raw_statement_prepared (c, LL_SQL_ACQUIRE_FAIR_QUEUE));
   CHECK_OK (b->queue_leave (c, &(ll_op_t){ k, strlen (k), QC_A }, &err), err);
   CHECK_OK (mark_fair_take (b, c, k, QC_H, &err), err); /* the mark is live still */
   CHECK_OK (b->release (c, &(ll_op_t){ k, strlen (k), QC_H }, 0, &err), err);
   b->close (c);
}

/* A join whose key's mark already ends later than it needs (another
 * waiter's longer keep) keeps it: the mark never moves earlier, so once
 * the shorter mark would have run out, a fair first try on another
 * connection still finds A queued. */
static void test_queue_mark_kept_later (void)
{
   if (!IS_MYSQL)
      return;
   const ll_backend_t *b;
   void *c1 = backend_open (URI, &b), *c2 = backend_open (URI, &b), *c3 = backend_open (URI, &b);
   CHECK (c1 && c2 && c3);
   const char *k = key ("q/mark-later");
   leaselock_error_t err;
   CHECK_EQ (QJ (b, c1, k, QC_A, 30000), 0);
   CHECK_EQ (QJ (b, c2, k, QC_B, 1000), 1);
   CHECK (qc_leave (b, c2, k, QC_B));
   sleep_ms (1000 + 2000 + 500); /* past the mark B's join asked for */
   bool ok = mark_fair_take (b, c3, k, QC_H, &err);
   CHECK_ERR (ok, err, LEASELOCK_BUSY, "");
   CHECK (qc_leave (b, c1, k, QC_A));
   b->close (c1);
   b->close (c2);
   b->close (c3);
}

/* Holds the join up past its mark (keep 100 ms: a mark of 2.1 s). */
static void sleep_past_mark (void)
{
   sleep_ms (100 + 2000 + 400);
}

/* The join's entry never outlives the mark the join read, however late
 * its upsert reaches the server (a stalled client or network): the key's
 * mark stands for every live entry, so a fair first try that reads only
 * the mark never goes ahead of a queued waiter. */
static void test_queue_mark_late_join (void)
{
   if (!IS_MYSQL)
      return;
   const ll_backend_t *b;
   void *c = backend_open (URI, &b);
   CHECK (c);
   const char *k = key ("q/mark-late");
   leaselock_error_t err;
   int64_t ahead = -1;
   ll_test_queue_mark_hook = sleep_past_mark;
   bool ok = b->queue_join (c, &(ll_op_t){ k, strlen (k), QC_A }, 100, &ahead, &err);
   ll_test_queue_mark_hook = NULL;
   CHECK_OK (ok, err);
   char sql[512], out[64] = "";
   snprintf (sql, sizeof sql,
             "SELECT COUNT(*) FROM leaselock_queue q JOIN leaselock t ON t.lock_key = q.lock_key "
             "WHERE q.lock_key = '%s' AND q.owner <> '' AND q.alive_until > t.queue_until",
             k);
   CHECK (raw_query (sql, out, sizeof out));
   CHECK_EQ (atoll (out), 0);
   CHECK_OK (b->queue_leave (c, &(ll_op_t){ k, strlen (k), QC_A }, &err), err);
   b->close (c);
}

/* A key whose queue was used but that was never taken keeps a row for its
 * mark alone: no record to inspect or list; prune deletes it, uncounted,
 * once the mark ran out, and never while it is live. */
static void test_queue_mark_row (void)
{
   if (!IS_MYSQL)
      return;
   const ll_backend_t *b;
   void *c = backend_open (URI, &b);
   CHECK (c);
   const char *k = key ("q/mark-row/k"), *pfx = key ("q/mark-row/");
   leaselock_error_t err;
   leaselock_record_t rec;
   bool found = true;
   int64_t ahead = -1, n = -1;
   CHECK_OK (b->queue_join (c, &(ll_op_t){ k, strlen (k), QC_A }, 100, &ahead, &err), err);
   CHECK_OK (b->queue_leave (c, &(ll_op_t){ k, strlen (k), QC_A }, &err), err);
   char sql[512], out[64] = "";
   snprintf (sql, sizeof sql, "SELECT COUNT(*) FROM leaselock WHERE lock_key = '%s'", k);
   CHECK (raw_query (sql, out, sizeof out) && atoll (out) == 1);
   CHECK_OK (b->inspect (c, &(ll_op_t){ k, strlen (k), NULL }, &rec, &found, &err), err);
   CHECK (!found);
   CHECK_OK (b->prune (c, pfx, strlen (pfx), 0, &n, &err), err);
   CHECK (n == 0 && raw_query (sql, out, sizeof out) && atoll (out) == 1); /* live mark */
   sleep_ms (100 + 2000 + 200);
   CHECK_OK (b->prune (c, pfx, strlen (pfx), 0, &n, &err), err);
   CHECK_EQ (n, 0);
   CHECK (raw_query (sql, out, sizeof out) && atoll (out) == 0);
   b->close (c);
}

/* The fair waiter of fair_stop_helper stops itself (SIGSTOP) between the
 * round trips of its first join, once. */
static void stop_self (void)
{
   static bool stopped;
   if (!stopped) {
      stopped = true;
      raise (SIGSTOP);
   }
}

/* --fair-stop-helper URI KEY: a fair acquire of KEY that stops in its
 * first queue join; it never gets further before the test kills it. The
 * helper holds KEY for 300 ms first (a lease that runs out by itself), so
 * that the fair acquire's first take finds it busy and joins. */
static int fair_stop_helper (int argc, char **argv)
{
   if (argc < 4)
      return 2;
   ll_test_queue_join_hook = stop_self;
   leaselock_error_t err;
   leaselock_client_t *c = leaselock_client_new (argv[2], "stopped", &err);
   if (!c)
      _exit (3);
   leaselock_acquire_opts_t o = opts (300, false);
   leaselock_lease_t *held, *l;
   if (!leaselock_acquire (c, argv[3], strlen (argv[3]), &o, &held, &err))
      _exit (4);
   o.ttl_ms = 5000;
   o.fair = true;
   o.timeout_ms = 10000;
   _exit (leaselock_acquire (c, argv[3], strlen (argv[3]), &o, &l, &err) ? 0 : 1);
}

/* A fair waiter stopped in the middle of its join (SIGSTOP, a debugger, a
 * paused VM) holds no other fair acquire of the key back for longer than
 * its entry's keep (1 s): a one-try fair acquire answers at once (BUSY
 * while the stopped entry is live, not BACKEND after the queue's lock
 * wait), and a fair acquire with a timeout gets the key within it. MySQL
 * held its named queue lock across the join's round trips (issue 25). */
static void test_queue_stopped_joiner (void)
{
   char k[300];
   snprintf (k, sizeof k, "%s", key ("q/stopped"));
   pid_t pid = fork ();
   if (pid == 0) {
      execl (SELF, SELF, "--fair-stop-helper", URI, k, (char *)NULL);
      _exit (127);
   }
   CHECK (pid > 0);
   int st = 0;
   bool stopped = waitpid (pid, &st, WUNTRACED) == pid && WIFSTOPPED (st);
   leaselock_client_t *c = client ("fair");
   leaselock_error_t e1 = { 0 }, e2 = { 0 };
   leaselock_lease_t *l = NULL;
   leaselock_acquire_opts_t o = opts (5000, false);
   o.fair = true;
   o.timeout_ms = 0;
   int64_t t0 = mono_ms ();
   bool one = stopped && c && leaselock_acquire (c, k, strlen (k), &o, &l, &e1);
   int64_t one_ms = mono_ms () - t0;
   leaselock_lease_destroy (l); /* releases it */
   l = NULL;
   o.timeout_ms = 4000;
   t0 = mono_ms ();
   bool ok = stopped && c && leaselock_acquire (c, k, strlen (k), &o, &l, &e2);
   int64_t waited_ms = mono_ms () - t0;
   leaselock_lease_destroy (l); /* releases it */
   leaselock_client_destroy (c);
   kill (pid, SIGKILL); /* before any check: a check ends the test */
   waitpid (pid, &st, 0);
   CHECK (stopped); /* stopped in its join */
   if (!one)
      fprintf (stderr, "    one-try: %s %s\n", leaselock_code_name (e1.code), e1.message);
   CHECK (one || e1.code == LEASELOCK_BUSY);
   CHECK_OK (ok, e2);
   fprintf (stderr,
            "    stopped joiner: the one-try answered in %lld ms, the fair acquire in %lld ms\n",
            (long long)one_ms, (long long)waited_ms);
}

/* The database clock decides: a client whose clock is an hour ahead or
 * behind joins behind those who arrived before it and ahead of those who
 * come after, and its entry runs out keep_ms after its join by the
 * server's clock, not an hour early or late. */
static int queue_helper (int argc, char **argv)
{
   if (argc < 6)
      return 2;
   printf ("time %lld\n", (long long)time (NULL));
   const ll_backend_t *b = NULL;
   void *c = backend_open (argv[2], &b);
   if (!c)
      _exit (3);
   int64_t ahead = qc_join (b, c, argv[3], strlen (argv[3]), argv[4], atoll (argv[5]));
   b->close (c);
   printf ("ahead %lld\n", (long long)ahead);
   fflush (stdout);
   _exit (ahead >= 0 ? 0 : 1);
}

static bool run_skewed_join (const char *offset, const char *k, const char *owner, int64_t keep,
                             long long *ahead, long long *skew)
{
   char cmd[2048], out[512];
   const char *asan = getenv ("ASAN_OPTIONS");
   snprintf (cmd, sizeof cmd,
             "ASAN_OPTIONS='%s%sverify_asan_link_order=0' faketime -f '%s' '%s' --queue-helper "
             "'%s' '%s' %s %lld",
             asan ? asan : "", asan && *asan ? ":" : "", offset, SELF, URI, k, owner,
             (long long)keep);
   FILE *f = popen (cmd, "r");
   if (!f)
      return false;
   size_t n = fread (out, 1, sizeof out - 1, f);
   out[n] = '\0';
   long long t = 0;
   bool ok = pclose (f) == 0 && sscanf (out, "time %lld\nahead %lld", &t, ahead) == 2;
   *skew = t - (long long)time (NULL);
   if (!ok)
      fprintf (stderr, "    queue helper (%s): %s\n", offset, out);
   return ok;
}

static void q_skew (const ll_backend_t *b, void *c, qc_rows_fn rows)
{
   (void)rows;
   if (system ("command -v faketime >/dev/null 2>&1") != 0) {
      fprintf (stderr, "    faketime is not installed (apt-get install faketime)\n");
      CHECK (!"faketime available");
   }
   const char *offsets[] = { "+1h", "-1h" };
   for (int i = 0; i < 2; i++) {
      char name[32];
      snprintf (name, sizeof name, "q/skew%d", i);
      const char *k = key (name);
      long long ahead = -1, skew = 0;
      CHECK_EQ (QJ (b, c, k, QC_A, 10000), 0);
      CHECK (run_skewed_join (offsets[i], k, QC_B, 1000, &ahead, &skew));
      CHECK (llabs (skew) > 3000 && llabs (skew) < 4200); /* the helper really was skewed */
      CHECK_EQ (ahead, 1);
      CHECK_EQ (QJ (b, c, k, QC_C, 10000), 2);
      /* The skewed entry lives 1 s by the server's clock. */
      sleep_ms (600);
      CHECK_EQ (QJ (b, c, k, QC_C, 10000), 2);
      sleep_ms (700);
      CHECK_EQ (QJ (b, c, k, QC_C, 10000), 1);
      CHECK (qc_leave (b, c, k, QC_A) && qc_leave (b, c, k, QC_B) && qc_leave (b, c, k, QC_C));
   }
}

static void test_queue_clock_skew (void)
{
   qc_run (URI, q_skew, q_rows);
}

/* Makes table a version-2 table: version 1's (raw_create_v1) with the
 * reservation's columns, version 2 recorded. */
static bool raw_create_v2 (const char *table)
{
   char sql[512];
   if (!raw_create_v1 (table))
      return false;
   if (IS_MYSQL)
      snprintf (sql, sizeof sql,
                "ALTER TABLE %s ADD next_owner CHAR(32) CHARACTER SET ascii COLLATE ascii_bin "
                "NULL, ADD next_until DATETIME(6) NULL, ADD next_since DATETIME(6) NULL",
                table);
   else
      snprintf (sql, sizeof sql,
                "ALTER TABLE %s ADD COLUMN next_owner text NULL, ADD COLUMN next_until "
                "timestamptz NULL, ADD COLUMN next_since timestamptz NULL",
                table);
   if (!raw_query (sql, NULL, 0))
      return false;
   snprintf (sql, sizeof sql, "UPDATE %s_meta SET schema_version = 2", table);
   return raw_query (sql, NULL, 0);
}

/* On a migrated version-2 table: its record kept, and the queue works. */
static void q_on_migrated (const ll_backend_t *b, void *c, qc_rows_fn rows)
{
   (void)rows;
   leaselock_error_t err;
   leaselock_record_t rec;
   bool found = false;
   int64_t f = 0;
   static const ll_holder_t h = { "h", 1, "l" };
   CHECK_OK (b->inspect (c, &(ll_op_t){ "old", 3, NULL }, &rec, &found, &err), err);
   CHECK (found && rec.fence == 7 && !rec.owner[0] && !strcmp (rec.label, "old-label"));
   CHECK_EQ (raw_holds (MIGRATING, "old"), 1); /* version 4's column */
   CHECK_EQ (QJ (b, c, "old", QC_A, 10000), 0);
   CHECK_EQ (QJ (b, c, "old", QC_B, 10000), 1);
   CHECK_OK (ll_backend_acquire (
               b, c, &(ll_take_t){ { "old", 3, QC_B }, 10000, &h, 0, 0, false, false }, &f, &err),
             err);
   CHECK_EQ (f, 8);
   CHECK_EQ (hold_of (b, c, "old", 3, QC_B, +1), 2);
}

/* A version-2 table is migrated in place on open: version 3 recorded, the
 * queue table made, the records kept. */
static void test_migrate_v2 (void)
{
   char table[64], opt[80], sql[256], out[64] = "", rows_out[64] = "";
   snprintf (table, sizeof table, "ll_v2_%d_%s", (int)getpid (), PFX + strlen (PFX) - 8);
   snprintf (opt, sizeof opt, "table=%s", table);
   bool made = raw_create_v2 (table);
   MIGRATING = table;
   if (made) {
      qc_run (uri_with (opt), q_on_migrated, q_rows);
      snprintf (sql, sizeof sql, "SELECT schema_version FROM %s_meta", table);
      raw_query (sql, out, sizeof out);
      snprintf (sql, sizeof sql,
                "SELECT COUNT(*) FROM %s_queue WHERE lock_key = 'old' AND owner <> ''", table);
      raw_query (sql, rows_out, sizeof rows_out);
   }
   snprintf (sql, sizeof sql, "DROP TABLE IF EXISTS %s, %s_meta, %s_queue", table, table, table);
   raw_query (sql, NULL, 0);
   CHECK (made);
   CHECK_EQ (atoi (out), SCHEMA_VERSION);
   CHECK_EQ (atoi (rows_out), 2);
}

/* Several processes opening one version-2 table at once all succeed (each
 * joins the queue of "old"), and it ends at version 3. */
static void test_concurrent_migration_v2 (void)
{
   char table[64], opt[80], sql[256], out[64] = "", rows_out[64] = "";
   snprintf (table, sizeof table, "ll_v2race_%d_%s", (int)getpid (), PFX + strlen (PFX) - 8);
   snprintf (opt, sizeof opt, "table=%s", table);
   const char *u = uri_with (opt);
   bool made = raw_create_v2 (table);
   int fds[2], failed = 0;
   CHECK (pipe (fds) == 0);
   pid_t pids[6];
   for (int i = 0; made && i < 6; i++) {
      if ((pids[i] = fork ()) == 0) {
         char ch, owner[LEASELOCK_OWNER_LEN + 1];
         close (fds[1]);
         if (read (fds[0], &ch, 1) < 0) /* all start together */
            _exit (4);
         snprintf (owner, sizeof owner, "%032d", i);
         const ll_backend_t *b = NULL;
         void *c = backend_open (u, &b);
         bool ok = c && qc_join (b, c, "old", 3, owner, 10000) >= 0;
         if (c)
            b->close (c);
         _exit (ok ? 0 : 1);
      }
   }
   close (fds[0]);
   sleep_ms (200);
   close (fds[1]);
   for (int i = 0; made && i < 6; i++) {
      int st;
      waitpid (pids[i], &st, 0);
      failed += !WIFEXITED (st) || WEXITSTATUS (st) != 0;
   }
   snprintf (sql, sizeof sql, "SELECT schema_version FROM %s_meta", table);
   raw_query (sql, out, sizeof out);
   snprintf (sql, sizeof sql, "SELECT COUNT(*) FROM %s_queue WHERE owner <> ''", table);
   raw_query (sql, rows_out, sizeof rows_out);
   long long holds = raw_holds (table, "old");
   snprintf (sql, sizeof sql, "DROP TABLE IF EXISTS %s, %s_meta, %s_queue", table, table, table);
   raw_query (sql, NULL, 0);
   CHECK (made);
   CHECK_EQ (failed, 0);
   CHECK_EQ (atoi (out), SCHEMA_VERSION);
   CHECK_EQ (atoi (rows_out), 6);
   CHECK_EQ (holds, 1);
}

/* Makes table a version-3 table: version 2's (raw_create_v2) with the
 * queue table, version 3 recorded, and its record "old" a live lease of
 * RSV_H (60 s left) as version 3 stored it: no hold count. */
static bool raw_create_v3 (const char *table)
{
   char sql[1024];
   if (!raw_create_v2 (table))
      return false;
   snprintf (sql, sizeof sql,
             IS_MYSQL ? ll_mysql_schema_sql.create_queue : ll_pg_schema_sql.create_queue, table);
   if (!raw_query (sql, NULL, 0))
      return false;
   snprintf (sql, sizeof sql,
             IS_MYSQL ? "UPDATE %s SET owner = '" RSV_H "', expires_at = UTC_TIMESTAMP(6) + "
                        "INTERVAL 60 SECOND WHERE lock_key = 'old'"
                      : "UPDATE %s SET owner = '" RSV_H "', expires_at = clock_timestamp() + "
                        "interval '60 s' WHERE lock_key = 'old'",
             table);
   if (!raw_query (sql, NULL, 0))
      return false;
   snprintf (sql, sizeof sql, "UPDATE %s_meta SET schema_version = 3", table);
   return raw_query (sql, NULL, 0);
}

/* On a migrated version-3 table: the live lease there was holds once; its
 * owner enters again and leaves; another owner cannot. */
static void v3_on_migrated (const ll_backend_t *b, void *c)
{
   CHECK_EQ (raw_holds (MIGRATING, "old"), 1);
   CHECK_EQ (holds_shown (b, c, "old", 3), 1);
   CHECK_EQ (hold_of (b, c, "old", 3, RSV_H, +1), 2);
   CHECK_EQ (hold_of (b, c, "old", 3, RSV_W, +1), 0);
   CHECK_EQ (hold_of (b, c, "old", 3, RSV_H, -1), 1);
   CHECK_EQ (hold_of (b, c, "old", 3, RSV_H, -1), 1);
   CHECK_EQ (rsv_take (b, c, "old", RSV_W, 10000, NULL), 'B');
}

/* A version-3 table is migrated in place on open: version 4 recorded, the
 * holds column added, 1 for its live lease. */
static void test_migrate_v3 (void)
{
   char table[64], opt[80], sql[256], out[64] = "";
   snprintf (table, sizeof table, "ll_v3_%d_%s", (int)getpid (), PFX + strlen (PFX) - 8);
   snprintf (opt, sizeof opt, "table=%s", table);
   bool made = raw_create_v3 (table);
   MIGRATING = table;
   if (made) {
      CHECK_EQ (raw_holds (table, "old"), -1); /* no such column yet */
      rsv_run (uri_with (opt), v3_on_migrated);
      snprintf (sql, sizeof sql, "SELECT schema_version FROM %s_meta", table);
      raw_query (sql, out, sizeof out);
   }
   snprintf (sql, sizeof sql, "DROP TABLE IF EXISTS %s, %s_meta, %s_queue", table, table, table);
   raw_query (sql, NULL, 0);
   CHECK (made);
   CHECK_EQ (atoi (out), SCHEMA_VERSION);
}

/* Several processes opening one version-3 table at once all succeed, each
 * entering the live lease once more: it ends at version 4 with every
 * hold counted (1 + 6). */
static void test_concurrent_migration_v3 (void)
{
   char table[64], opt[80], sql[256], out[64] = "";
   snprintf (table, sizeof table, "ll_v3race_%d_%s", (int)getpid (), PFX + strlen (PFX) - 8);
   snprintf (opt, sizeof opt, "table=%s", table);
   const char *u = uri_with (opt);
   bool made = raw_create_v3 (table);
   int fds[2], failed = 0;
   CHECK (pipe (fds) == 0);
   pid_t pids[6];
   for (int i = 0; made && i < 6; i++) {
      if ((pids[i] = fork ()) == 0) {
         char ch;
         close (fds[1]);
         if (read (fds[0], &ch, 1) < 0) /* all start together */
            _exit (4);
         const ll_backend_t *b = NULL;
         void *c = backend_open (u, &b);
         bool ok = c && hold_of (b, c, "old", 3, RSV_H, +1) >= 2;
         if (c)
            b->close (c);
         _exit (ok ? 0 : 1);
      }
   }
   close (fds[0]);
   sleep_ms (200);
   close (fds[1]);
   for (int i = 0; made && i < 6; i++) {
      int st;
      waitpid (pids[i], &st, 0);
      failed += !WIFEXITED (st) || WEXITSTATUS (st) != 0;
   }
   snprintf (sql, sizeof sql, "SELECT schema_version FROM %s_meta", table);
   raw_query (sql, out, sizeof out);
   long long holds = raw_holds (table, "old");
   snprintf (sql, sizeof sql, "DROP TABLE IF EXISTS %s, %s_meta, %s_queue", table, table, table);
   raw_query (sql, NULL, 0);
   CHECK (made);
   CHECK_EQ (failed, 0);
   CHECK_EQ (atoi (out), SCHEMA_VERSION);
   CHECK_EQ (holds, 7);
}

/* ---- connections ------------------------------------------------------ */

/* The server kills the client's idle connections: the next calls work. */
static void test_reconnect_after_kill (void)
{
   leaselock_client_t *c = client ("kill");
   CHECK (c);
   leaselock_error_t err;
   leaselock_lease_t *l;
   leaselock_acquire_opts_t o = opts (10000, false);
   bool ok = leaselock_acquire (c, key ("kill"), strlen (key ("kill")), &o, &l, &err);
   CHECK_OK (ok, err);
   int killed = kill_other_connections ();
   CHECK (killed >= 1);
   sleep_ms (100);
   leaselock_record_t rec;
   bool found;
   ok = leaselock_inspect (c, key ("kill"), strlen (key ("kill")), &rec, &found, &err);
   CHECK_OK (ok, err);
   CHECK (found && !strcmp (rec.owner, leaselock_lease_owner (l)));
   ok = leaselock_lease_renew (l, 0, &err);
   CHECK_OK (ok, err);
   ok = leaselock_lease_release (l, &err);
   CHECK_OK (ok, err);
   leaselock_lease_destroy (l);

   /* Backend level: the same connection object reconnects by itself. */
   const ll_backend_t *b;
   void *conn = backend_open (URI, &b);
   CHECK (conn);
   CHECK (kill_other_connections () >= 1);
   sleep_ms (100);
   ok =
     b->inspect (conn, &(ll_op_t){ key ("kill"), strlen (key ("kill")), NULL }, &rec, &found, &err);
   b->close (conn);
   CHECK_OK (ok, err);
   CHECK (found && rec.owner[0] == '\0');
   leaselock_client_destroy (c);
}

/* ---- a new primary (failover.c) --------------------------------------- */

/* One try on c for k with ttl_ms; the error code (LEASELOCK_OK: taken,
 * *fence set and the lease released). */
static leaselock_code_t np_try (leaselock_client_t *c, const char *k, int64_t ttl_ms,
                                int64_t *fence)
{
   leaselock_error_t err;
   leaselock_lease_t *l;
   leaselock_acquire_opts_t o = opts (ttl_ms, false);
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
   CHECK (!strcmp (d2.primary, d3.primary) && d2.primary[0] &&
          strcmp (d2.primary, "the old primary"));
   CHECK (d2.lock_delay_ms > 0 && d2.lock_delay_ms <= 1500);
   CHECK (d3.lock_delay_ms > 0 && d3.lock_delay_ms <= 1500);
   CHECK (d2.fence_floor > 1577836800LL * 1000000 && d2.fence_floor == d3.fence_floor);
   CHECK_EQ (d2.max_ttl_ms, 1500);
   CHECK (!strcmp (d2.policy, "report") && d2.detail[0]);
   leaselock_stats_t s2, s3;
   CHECK_OK (leaselock_client_stats (c2, &s2, &err), err);
   CHECK_OK (leaselock_client_stats (c3, &s3, &err), err);
   CHECK_EQ (s2.failovers, 1);
   CHECK_EQ (s3.failovers, 0);
}

/* What a promoted standby shows a client: a meta record naming another
 * primary (the one it replaced). The first connection to it records
 * itself, raises the fence floor above every fence the old primary could
 * have issued (the database clock in us) and grants nothing for max_ttl
 * by the database clock: leases of the old primary may still be live.
 * A lease that survived is still renewed; TTLs over max_ttl are refused;
 * later connections see the same lock-delay, not a new one. */
static void test_new_primary (void)
{
   char table[64], opt[96], sql[256];
   snprintf (table, sizeof table, "ll_np_%d_%s", (int)getpid (), PFX + strlen (PFX) - 8);
   snprintf (opt, sizeof opt, "table=%s&max_ttl=1500ms", table);
   leaselock_error_t err;
   leaselock_client_t *c1 = leaselock_client_new (uri_with (opt), "np1", &err);
   CHECK_OK (c1 != NULL, err);
   if (!c1)
      return;
   int64_t fence = 0;
   CHECK_EQ (np_try (c1, "k", 1500, &fence), LEASELOCK_OK);
   CHECK_EQ (fence, 1);
   CHECK_EQ (np_try (c1, "k", 1501, &fence), LEASELOCK_INVALID);
   leaselock_lease_t *kept;
   leaselock_acquire_opts_t o = opts (1500, false);
   CHECK_OK (leaselock_acquire (c1, "kept", 4, &o, &kept, &err), err);

   snprintf (sql, sizeof sql, "UPDATE %s_meta SET primary_id = 'the old primary'", table);
   CHECK (raw_query (sql, NULL, 0));
   int64_t seen = mono_ms ();
   leaselock_client_t *c2 = leaselock_client_new (uri_with (opt), "np2", &err);
   CHECK_OK (c2 != NULL, err);
   CHECK_EQ (np_try (c2, "k", 1000, &fence), LEASELOCK_BUSY);
   CHECK_EQ (np_try (c2, "new", 1000, &fence), LEASELOCK_BUSY);
   CHECK_OK (leaselock_lease_renew (kept, 1500, &err), err);
   leaselock_client_t *c3 = leaselock_client_new (uri_with (opt), "np3", &err);
   CHECK_OK (c3 != NULL, err);
   CHECK_EQ (np_try (c3, "k", 1000, &fence), LEASELOCK_BUSY);
   np_check_seen (c2, c3);
   CHECK_OK (leaselock_lease_release (kept, &err), err);
   leaselock_lease_destroy (kept);

   /* A blocking acquire waits the lock-delay out; its fence is above the
    * floor (the database clock in us: after 2020). */
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
   leaselock_client_destroy (c1);
   leaselock_client_destroy (c2);
   leaselock_client_destroy (c3);
   snprintf (sql, sizeof sql, "DROP TABLE IF EXISTS %s, %s_meta, %s_queue", table, table, table);
   raw_query (sql, NULL, 0);
}

typedef struct
{
   atomic_int calls;
   _Atomic int64_t at;
} lost_t;

static void on_lost (leaselock_lease_t *lease, void *data)
{
   (void)lease;
   lost_t *L = data;
   atomic_store (&L->at, ll_now_ms ());
   atomic_fetch_add (&L->calls, 1);
}

/* The server goes away for longer than the TTL while a lease is held with
 * auto-renewal: renewal fails, the lease is LOST before the database's own
 * expiry, and once the server is back the same client works again. */
static void test_server_restart_mid_hold (void)
{
   const char *cmd = getenv (IS_MYSQL ? "LEASELOCK_MYSQL_RESTART" : "LEASELOCK_POSTGRESQL_RESTART");
   if (!cmd || !*cmd) {
      fprintf (stderr, "    skipped: %s is not set (tests/servers/<name>.sh set it)\n",
               IS_MYSQL ? "LEASELOCK_MYSQL_RESTART" : "LEASELOCK_POSTGRESQL_RESTART");
      return;
   }
   leaselock_client_t *c = client ("restart");
   CHECK (c);
   leaselock_error_t err;
   leaselock_lease_t *l;
   lost_t L = { 0 };
   leaselock_acquire_opts_t o = opts (2000, true);
   o.on_lost = on_lost;
   o.on_lost_data = &L;
   const char *k = key ("restart");
   bool ok = leaselock_acquire (c, k, strlen (k), &o, &l, &err);
   CHECK_OK (ok, err);
   int64_t fence = leaselock_lease_fence (l);
   sleep_ms (800); /* at least one renewal went through */
   /* The server is down for 4 s (longer than the TTL) while we watch the
    * lease: its local deadline (engine clock) is tracked until it turns
    * LOST. */
   char full[1024];
   snprintf (full, sizeof full, "%s 4 >/dev/null", cmd);
   fflush (NULL);
   pid_t pid = fork ();
   if (pid == 0) {
      execl ("/bin/sh", "sh", "-c", full, (char *)NULL);
      _exit (127);
   }
   CHECK (pid > 0);
   int64_t deadline = -1, lost_seen = -1;
   int st = 0;
   while (waitpid (pid, &st, WNOHANG) == 0) {
      int64_t now = ll_now_ms ();
      int64_t left = leaselock_lease_remaining_ms (l);
      if (leaselock_lease_state (l) == LEASELOCK_STATE_HELD)
         deadline = now + left;
      else if (lost_seen < 0)
         lost_seen = now;
      sleep_ms (1);
   }
   CHECK (WIFEXITED (st) && WEXITSTATUS (st) == 0);
   CHECK (deadline > 0 && lost_seen > 0);
   CHECK_EQ (atomic_load (&L.calls), 1);
   CHECK_EQ (leaselock_lease_state (l), LEASELOCK_STATE_LOST);
   /* The database still names us (nobody else came) and its expiry is not
    * earlier than the holder's deadline. */
   leaselock_record_t rec;
   bool found = false;
   ok = leaselock_inspect (c, k, strlen (k), &rec, &found, &err);
   int64_t recv = ll_now_ms ();
   CHECK_OK (ok, err);
   CHECK (found && !strcmp (rec.owner, leaselock_lease_owner (l)));
   /* The server computed expires_in_ms before we got the reply: its expiry
    * on our clock is at most recv + expires_in_ms (+1 ms of rounding). The
    * holder's deadline is the last renewal's send time + TTL, earlier than
    * the server's time of that renewal + TTL. */
   int64_t db_expiry = recv + rec.expires_in_ms + 1;
   int64_t lost_at = atomic_load (&L.at);
   if (deadline > db_expiry || lost_at < deadline - 1)
      fprintf (stderr,
               "    deadline %lld, on_lost at %lld, LOST seen at %lld, database expiry %lld\n",
               (long long)deadline, (long long)lost_at, (long long)lost_seen, (long long)db_expiry);
   CHECK (deadline <= db_expiry);
   CHECK (lost_at >= deadline - 1); /* on_lost no earlier than the deadline */
   /* (Releasing it would still clear the record: nobody took it over.) */
   leaselock_lease_destroy (l);
   /* Later calls on the same client work again. */
   o = opts (5000, false);
   ok = leaselock_acquire (c, k, strlen (k), &o, &l, &err);
   CHECK_OK (ok, err);
   CHECK (leaselock_lease_fence (l) > fence);
   ok = leaselock_lease_renew (l, 0, &err);
   CHECK_OK (ok, err);
   ok = leaselock_lease_release (l, &err);
   CHECK_OK (ok, err);
   leaselock_lease_destroy (l);
   leaselock_client_destroy (c);
}

/* A forked child abandons the parent's connection without a word on it:
 * the parent's connection stays open on the server. */
static void test_abandon_after_fork (void)
{
   leaselock_error_t err;
   const ll_backend_t *b = ll_backend_for_uri (URI, &err);
   CHECK (b);
   CHECK (b->abandon != NULL);
   void *conn = b->open (URI, &err);
   CHECK_OK (conn != NULL, err);
   int before = count_connections ();
   pid_t pid = fork ();
   if (pid == 0) {
      b->abandon (conn);
      _exit (0);
   }
   int st = 0;
   waitpid (pid, &st, 0);
   sleep_ms (200);
   int after = count_connections ();
   leaselock_record_t rec;
   bool found;
   bool ok = b->inspect (conn, &(ll_op_t){ key ("nothing"), strlen (key ("nothing")), NULL }, &rec,
                         &found, &err);
   b->close (conn);
   CHECK (WIFEXITED (st) && WEXITSTATUS (st) == 0);
   CHECK (before >= 2);
   CHECK_EQ (after, before);
   CHECK_OK (ok, err);
   CHECK (!found);

   /* Through the engine: the child uses the client (new connections). */
   leaselock_client_t *c = client ("fork");
   CHECK (c);
   leaselock_lease_t *l;
   leaselock_acquire_opts_t o = opts (10000, false);
   ok = leaselock_acquire (c, key ("fork"), strlen (key ("fork")), &o, &l, &err);
   CHECK_OK (ok, err);
   pid = fork ();
   if (pid == 0) {
      leaselock_error_t e2;
      leaselock_record_t r;
      bool f;
      bool ok2 = leaselock_inspect (c, key ("fork"), strlen (key ("fork")), &r, &f, &e2);
      _exit (ok2 && f ? 0 : 1);
   }
   waitpid (pid, &st, 0);
   CHECK (WIFEXITED (st) && WEXITSTATUS (st) == 0);
   ok = leaselock_lease_release (l, &err);
   CHECK_OK (ok, err);
   leaselock_lease_destroy (l);
   leaselock_client_destroy (c);
}

/* ---- URIs and schema -------------------------------------------------- */

static int free_port (void)
{
   int s = socket (AF_INET, SOCK_STREAM, 0);
   struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl (INADDR_LOOPBACK) };
   socklen_t len = sizeof a;
   bind (s, (struct sockaddr *)&a, sizeof a);
   getsockname (s, (struct sockaddr *)&a, &len);
   close (s);
   return ntohs (a.sin_port);
}

static void expect_fail (const char *uri, leaselock_code_t code, const char *substr,
                         const char *secret)
{
   leaselock_error_t err;
   leaselock_client_t *c = leaselock_client_new (uri, NULL, &err);
   if (c)
      leaselock_client_destroy (c);
   if (c || err.code != code || !strstr (err.message, substr) ||
       (secret && strstr (err.message, secret)))
      fprintf (stderr, "    %s -> %s \"%s\"\n", uri, leaselock_code_name (err.code), err.message);
   CHECK (!c);
   CHECK_EQ (err.code, code);
   CHECK (strstr (err.message, substr) != NULL);
   CHECK (!secret || !strstr (err.message, secret));
   CHECK (!strchr (err.message, '\n')); /* one line, driver messages too */
}

static void test_bad_uris (void)
{
   ll_uri_t u;
   leaselock_error_t err;
   CHECK (ll_uri_parse (URI, &u, &err));
   const char *scheme = IS_MYSQL ? "mysql" : "postgresql";
   char uri[1024];
   const char *pw = u.password ? u.password : "";
   int port = u.port;
   /* wrong password: BACKEND, and the password given is nowhere */
   snprintf (uri, sizeof uri, "%s://%s:Wr0ngSecret-7c1f@%s:%d%s", scheme, u.user, u.host, port,
             u.path);
   const char *connecting = IS_MYSQL ? "mysql: connecting to " : "postgresql: connecting: ";
   expect_fail (uri, LEASELOCK_BACKEND, connecting, "Wr0ngSecret-7c1f");
   /* unknown database */
   snprintf (uri, sizeof uri, "%s://%s:%s@%s:%d/no_such_db_ll", scheme, u.user, pw, u.host, port);
   expect_fail (uri, LEASELOCK_BACKEND, "no_such_db_ll", strlen (pw) >= 3 ? pw : NULL);
   /* closed port */
   snprintf (uri, sizeof uri, "%s://%s:%s@127.0.0.1:%d%s", scheme, u.user, pw, free_port (),
             u.path);
   expect_fail (uri, LEASELOCK_BACKEND, IS_MYSQL ? "mysql" : "postgresql",
                strlen (pw) >= 3 ? pw : NULL);
   /* bad table names */
   expect_fail (uri_with ("table=bad-name"), LEASELOCK_INVALID, "table", NULL);
   expect_fail (uri_with ("table=1abc"), LEASELOCK_INVALID, "table", NULL);
   expect_fail (uri_with ("table=a%60b"), LEASELOCK_INVALID, "table", NULL);
   expect_fail (uri_with ("table=a%22b"), LEASELOCK_INVALID, "table", NULL);
   /* I/O bounds: zero, garbage and (MySQL) fractions of a second refused */
   expect_fail (uri_with ("io_timeout=0"), LEASELOCK_INVALID, "io_timeout", NULL);
   expect_fail (uri_with ("io_timeout=soon"), LEASELOCK_INVALID, "io_timeout", NULL);
   expect_fail (uri_with ("io_timeout=-5s"), LEASELOCK_INVALID, "io_timeout", NULL);
   expect_fail (uri_with ("io_timeout=2d"), LEASELOCK_INVALID, "io_timeout", NULL);
   expect_fail (uri_with ("connect_timeout=0"), LEASELOCK_INVALID,
                "connect_timeout=\"0\": expected whole seconds from 1 to 86400", NULL);
   expect_fail (uri_with ("connect_timeout=-1"), LEASELOCK_INVALID, "connect_timeout", NULL);
   if (IS_MYSQL)
      expect_fail (uri_with ("io_timeout=1500ms"), LEASELOCK_INVALID, "whole seconds", NULL);
   if (IS_MYSQL) {
      expect_fail (uri_with ("colour=blue"), LEASELOCK_INVALID, "unknown option \"colour\"", NULL);
      expect_fail (uri_with ("connect_timeout=soon"), LEASELOCK_INVALID, "connect_timeout", NULL);
      snprintf (uri, sizeof uri, "mysql://%s:%s@%s:%d", u.user, pw, u.host, port);
      expect_fail (uri, LEASELOCK_INVALID, "database", strlen (pw) >= 3 ? pw : NULL);
   } else {
      expect_fail (uri_with ("colour=blue"), LEASELOCK_BACKEND, "colour", NULL);
   }
   /* the client shows its URI without the password */
   leaselock_client_t *c = client ("uri");
   CHECK (c);
   const char *shown = leaselock_client_uri (c);
   CHECK (strstr (shown, "***") != NULL);
   CHECK (strlen (pw) < 3 || !strstr (shown, pw));
   CHECK (!strcmp (leaselock_client_backend (c), IS_MYSQL ? "mysql" : "postgresql"));
   leaselock_client_destroy (c);
   ll_uri_cleanup (&u);
}

/* ?table= names the table; the schema version is recorded beside it. */
static void test_table_option_and_schema (void)
{
   char opt[64], sql[256], out[64];
   snprintf (opt, sizeof opt, "table=ll_custom_%d", (int)getpid ());
   leaselock_error_t err;
   leaselock_client_t *c = leaselock_client_new (uri_with (opt), NULL, &err);
   CHECK_OK (c != NULL, err);
   leaselock_lease_t *l;
   leaselock_acquire_opts_t o = opts (10000, false);
   bool ok = leaselock_acquire (c, "custom", 6, &o, &l, &err);
   CHECK_OK (ok, err);
   leaselock_lease_destroy (l);
   leaselock_client_destroy (c);
   snprintf (sql, sizeof sql, "SELECT fence FROM ll_custom_%d WHERE lock_key = 'custom'",
             (int)getpid ());
   CHECK (raw_query (sql, out, sizeof out));
   CHECK_EQ (atoi (out), 1);
   snprintf (sql, sizeof sql, "SELECT schema_version FROM ll_custom_%d_meta", (int)getpid ());
   CHECK (raw_query (sql, out, sizeof out));
   CHECK_EQ (atoi (out), SCHEMA_VERSION);
   CHECK (raw_query ("SELECT schema_version FROM leaselock_meta", out, sizeof out));
   CHECK_EQ (atoi (out), SCHEMA_VERSION);
   snprintf (sql, sizeof sql, "DROP TABLE ll_custom_%d, ll_custom_%d_meta, ll_custom_%d_queue",
             (int)getpid (), (int)getpid (), (int)getpid ());
   CHECK (raw_query (sql, NULL, 0));

   /* A table of a newer schema version is refused with a clear message. */
   snprintf (opt, sizeof opt, "table=ll_future_%d", (int)getpid ());
   c = leaselock_client_new (uri_with (opt), NULL, &err);
   CHECK_OK (c != NULL, err);
   leaselock_client_destroy (c);
   snprintf (sql, sizeof sql, "UPDATE ll_future_%d_meta SET schema_version = 99", (int)getpid ());
   CHECK (raw_query (sql, NULL, 0));
   c = leaselock_client_new (uri_with (opt), NULL, &err);
   bool refused = !c && err.code == LEASELOCK_BACKEND && strstr (err.message, "schema version 99");
   if (c)
      leaselock_client_destroy (c);
   snprintf (sql, sizeof sql, "DROP TABLE ll_future_%d, ll_future_%d_meta, ll_future_%d_queue",
             (int)getpid (), (int)getpid (), (int)getpid ());
   raw_query (sql, NULL, 0);
   CHECK (refused);
}

/* Several processes using a new table at once all succeed. */
static void test_concurrent_first_use (void)
{
   char opt[64], sql[256];
   snprintf (opt, sizeof opt, "table=ll_race_%d", (int)getpid ());
   const char *u = uri_with (opt);
   int fds[2];
   CHECK (pipe (fds) == 0);
   pid_t pids[6];
   for (int i = 0; i < 6; i++) {
      pids[i] = fork ();
      if (pids[i] == 0) {
         char c;
         close (fds[1]);
         if (read (fds[0], &c, 1) < 0) /* all start together */
            _exit (4);
         leaselock_error_t err;
         leaselock_client_t *cl = leaselock_client_new (u, NULL, &err);
         if (!cl) {
            fprintf (stderr, "    child: %s %s\n", leaselock_code_name (err.code), err.message);
            _exit (1);
         }
         leaselock_lease_t *l;
         leaselock_acquire_opts_t o = opts (5000, false);
         o.timeout_ms = 10000;
         bool ok = leaselock_acquire (cl, "race", 4, &o, &l, &err);
         if (!ok)
            fprintf (stderr, "    child acquire: %s %s\n", leaselock_code_name (err.code),
                     err.message);
         if (ok)
            leaselock_lease_destroy (l);
         leaselock_client_destroy (cl);
         _exit (ok ? 0 : 2);
      }
   }
   close (fds[0]);
   sleep_ms (200);
   close (fds[1]);
   int failed = 0;
   for (int i = 0; i < 6; i++) {
      int st;
      waitpid (pids[i], &st, 0);
      if (!WIFEXITED (st) || WEXITSTATUS (st) != 0)
         failed++;
   }
   char out[64];
   snprintf (sql, sizeof sql, "SELECT fence FROM ll_race_%d", (int)getpid ());
   bool read_ok = raw_query (sql, out, sizeof out);
   snprintf (sql, sizeof sql, "DROP TABLE ll_race_%d, ll_race_%d_meta, ll_race_%d_queue",
             (int)getpid (), (int)getpid (), (int)getpid ());
   raw_query (sql, NULL, 0);
   CHECK_EQ (failed, 0);
   CHECK (read_ok);
   CHECK_EQ (atoi (out), 6);
}

/* A statement that fails in flight (the client gives up waiting on a row
 * that another transaction holds: MySQL read_timeout, PostgreSQL
 * statement_timeout) is reported as BACKEND, and once the row is free a
 * retry by the same owner succeeds whether or not the first one applied. */
static void test_failed_in_flight (void)
{
   leaselock_error_t err;
   const char *u = uri_with (IS_MYSQL ? "read_timeout=1" : "options=-c%20statement_timeout%3D1000");
   const ll_backend_t *b;
   void *conn = backend_open (u, &b);
   CHECK (conn);
   const char *k = key ("inflight");
   const char *X = "cccccccccccccccccccccccccccccccc";
   ll_holder_t h = { "host", 1, "inflight" };
   int64_t f0 = 0, f1 = 0, f2 = 0;
   bool ok = ll_backend_acquire (
     b, conn, &(ll_take_t){ { k, strlen (k), X }, 5000, &h, 0, 0, false, false }, &f0, &err);
   if (ok)
      ok = b->release (conn, &(ll_op_t){ k, strlen (k), X }, 0, &err);
   void *lock = ok ? raw_lock_row (k) : NULL;
   bool failed_backend = false;
   int64_t t0 = mono_ms (), waited = 0;
   if (lock) {
      leaselock_error_t e1;
      failed_backend =
        !ll_backend_acquire (
          b, conn, &(ll_take_t){ { k, strlen (k), X }, 5000, &h, 0, 0, false, false }, &f1, &e1) &&
        e1.code == LEASELOCK_BACKEND;
      waited = mono_ms () - t0;
      if (!failed_backend)
         fprintf (stderr, "    in-flight acquire: %s %s\n", leaselock_code_name (e1.code),
                  e1.message);
      raw_unlock (lock);
   }
   bool retried = false;
   leaselock_record_t rec;
   bool found = false;
   if (lock) {
      retried = ll_backend_acquire (
        b, conn, &(ll_take_t){ { k, strlen (k), X }, 5000, &h, 0, 0, false, false }, &f2, &err);
      if (retried)
         ok = b->inspect (conn, &(ll_op_t){ k, strlen (k), NULL }, &rec, &found, &err);
      if (retried)
         b->release (conn, &(ll_op_t){ k, strlen (k), X }, 0, &err);
   }
   b->close (conn);
   CHECK_OK (ok, err);
   CHECK (lock != NULL);
   CHECK (failed_backend);
   CHECK (waited >= 900);
   CHECK_OK (retried, err);
   CHECK (f2 > f0);
   CHECK (found && !strcmp (rec.owner, X) && rec.fence == f2);
}

/* ---- a stalled server ------------------------------------------------- */

/* The I/O bounds the stall test gives in its URI (io_timeout, and
 * connect_timeout in whole seconds, as both backends take it), and the
 * slack it allows above the sum for a loaded machine. */
#define STALL_IO_MS 1000
#define STALL_CONNECT_MS 1000
#define STALL_SLACK_MS 6000

typedef struct
{
   pid_t pids[64]; /* the server's processes, stopped */
   int n;
   pid_t watchdog; /* resumes them if this process dies or hangs */
   int wd_fd;      /* closing it tells the watchdog to resume them now */
} stall_t;

static void resume_all (const stall_t *s)
{
   for (int i = s->n - 1; i >= 0; i--)
      kill (s->pids[i], SIGCONT);
}

/* Stops the server (SIGSTOP on its processes) with a watchdog process that
 * sends SIGCONT when stall_end closes its pipe, when this process dies, or
 * after 60 s, whichever comes first: a failing test never leaves a stopped
 * server behind. */
static bool stall_begin (stall_t *s)
{
   memset (s, 0, sizeof *s);
   s->wd_fd = -1;
   if (!raw_server_pids (s->pids, &s->n, (int)(sizeof s->pids / sizeof s->pids[0])))
      return false;
   int fds[2];
   if (pipe (fds) != 0)
      return false;
   fflush (NULL);
   s->watchdog = fork ();
   if (s->watchdog == 0) {
      close (fds[1]);
      struct pollfd p = { .fd = fds[0], .events = POLLIN };
      while (poll (&p, 1, 60000) < 0 && errno == EINTR) {
      }
      resume_all (s);
      _exit (0);
   }
   close (fds[0]);
   if (s->watchdog < 0) {
      close (fds[1]);
      return false;
   }
   s->wd_fd = fds[1];
   for (int i = 0; i < s->n; i++)
      kill (s->pids[i], SIGSTOP);
   return true;
}

static void stall_end (stall_t *s)
{
   resume_all (s);
   if (s->wd_fd >= 0)
      close (s->wd_fd);
   if (s->watchdog > 0)
      waitpid (s->watchdog, NULL, 0);
   s->wd_fd = -1;
   s->watchdog = 0;
}

/* One call run on a thread of its own, so that a call that hangs fails the
 * test instead of hanging it. */
typedef struct
{
   leaselock_client_t *c;
   const char *key;
   enum
   {
      CALL_ACQUIRE,
      CALL_INSPECT,
      CALL_FORK
   } what;
   atomic_bool done;
   bool ok;
   leaselock_error_t err;
   int64_t took_ms;
   pthread_t th;
} call_t;

static void *call_main (void *arg)
{
   call_t *k = arg;
   int64_t t0 = mono_ms ();
   if (k->what == CALL_ACQUIRE) {
      leaselock_lease_t *l = NULL;
      leaselock_acquire_opts_t o = opts (5000, false);
      o.timeout_ms = 1000;
      k->ok = leaselock_acquire (k->c, k->key, strlen (k->key), &o, &l, &k->err);
      leaselock_lease_destroy (l);
   } else if (k->what == CALL_INSPECT) {
      leaselock_record_t rec;
      bool found;
      k->ok = leaselock_inspect (k->c, k->key, strlen (k->key), &rec, &found, &k->err);
   } else {
      pid_t pid = fork ();
      if (pid == 0)
         _exit (0);
      k->ok = pid > 0;
      if (pid > 0)
         waitpid (pid, NULL, 0);
   }
   k->took_ms = mono_ms () - t0;
   atomic_store (&k->done, true);
   return NULL;
}

static void call_start (call_t *k)
{
   atomic_init (&k->done, false);
   k->ok = false;
   memset (&k->err, 0, sizeof k->err);
   pthread_create (&k->th, NULL, call_main, k);
}

/* Whether the call ended within bound_ms of its start (it is left running
 * otherwise: resume the server, then call_join). */
static bool call_wait (call_t *k, int64_t started, int64_t bound_ms)
{
   while (!atomic_load (&k->done) && mono_ms () - started < bound_ms)
      sleep_ms (5);
   return atomic_load (&k->done);
}

static void call_join (call_t *k)
{
   pthread_join (k->th, NULL);
}

/* A stopped server (SIGSTOP: the kernel still accepts connections and ACKs
 * data, so neither TCP nor keepalives notice) bounds every call by the
 * URI's io_timeout and connect_timeout: a blocking acquire with a 1 s
 * timeout returns BACKEND or TIMEOUT, a call in flight ends, and a fork()
 * from another thread meanwhile (whose handler waits for calls in flight)
 * returns; once the server runs again the same client works. */
/* A client labelled label whose URI gives the stall tests' I/O bounds
 * (the caller destroys it); NULL with err set on failure. */
static leaselock_client_t *stall_client (const char *label, leaselock_error_t *err)
{
   char o[128];
   snprintf (o, sizeof o, "io_timeout=%dms&connect_timeout=%d", STALL_IO_MS,
             STALL_CONNECT_MS / 1000);
   return leaselock_client_new (uri_with (o), label, err);
}

static void test_stalled_server (void)
{
   leaselock_error_t err;
   leaselock_client_t *c = stall_client ("stall", &err);
   CHECK_OK (c != NULL, err);
   const int64_t bound = STALL_IO_MS + STALL_CONNECT_MS + STALL_SLACK_MS;
   const char *ka = key ("stall-a"), *kb = key ("stall-b"), *kc = key ("stall-c");
   leaselock_record_t rec;
   bool found;
   stall_t s;

   /* 1. A blocking acquire on a connection the stopped server holds: the
    * statement times out, the engine sends it once more on a new
    * connection, whose connect times out. */
   bool ok = leaselock_inspect (c, ka, strlen (ka), &rec, &found, &err); /* warm */
   if (!ok)
      leaselock_client_destroy (c);
   CHECK_OK (ok, err);
   call_t a = { .c = c, .key = kb, .what = CALL_ACQUIRE };
   bool stalled = stall_begin (&s);
   int64_t t0 = mono_ms ();
   bool a_done = false;
   if (stalled) {
      call_start (&a);
      a_done = call_wait (&a, t0, bound);
   }
   stall_end (&s);
   if (stalled)
      call_join (&a);
   if (!a_done)
      fprintf (stderr, "    acquire on a stopped server: still waiting after %lld ms\n",
               (long long)bound);
   else if (a.ok || (a.err.code != LEASELOCK_BACKEND && a.err.code != LEASELOCK_TIMEOUT))
      fprintf (stderr, "    acquire on a stopped server: ok=%d %s %s\n", (int)a.ok,
               leaselock_code_name (a.err.code), a.err.message);

   /* 2. fork() from another thread while a call waits on the stopped
    * server: the fork handler waits for that call, which ends within its
    * bound. */
   ok = leaselock_inspect (c, ka, strlen (ka), &rec, &found, &err); /* warm again */
   call_t in = { .c = c, .key = ka, .what = CALL_INSPECT };
   call_t fk = { .c = c, .what = CALL_FORK };
   bool stalled2 = ok && stall_begin (&s);
   bool in_done = false, fk_done = false;
   if (stalled2) {
      t0 = mono_ms ();
      call_start (&in);
      sleep_ms (200); /* the inspect is in flight */
      call_start (&fk);
      fk_done = call_wait (&fk, t0, bound);
      in_done = call_wait (&in, t0, bound);
   }
   stall_end (&s);
   if (stalled2) {
      call_join (&in);
      call_join (&fk);
   }
   if (!fk_done || !in_done)
      fprintf (stderr, "    stopped server: fork %s, inspect %s after %lld ms\n",
               fk_done ? "returned" : "still waiting", in_done ? "returned" : "still waiting",
               (long long)bound);

   /* 3. The server runs again: the same client works (a first call may
    * still meet a connection that timed out while the server woke). */
   bool ok3 = false;
   for (int tries = 0; ok && !ok3 && tries < 3; tries++) {
      if (tries)
         sleep_ms (500);
      leaselock_lease_t *l = NULL;
      leaselock_acquire_opts_t ao = opts (5000, false);
      ao.timeout_ms = 2000;
      ok3 = leaselock_acquire (c, kc, strlen (kc), &ao, &l, &err);
      if (ok3)
         ok3 = leaselock_lease_renew (l, 0, &err) && leaselock_lease_release (l, &err);
      if (ok3)
         ok3 = leaselock_inspect (c, kc, strlen (kc), &rec, &found, &err);
      leaselock_lease_destroy (l);
   }
   leaselock_client_destroy (c);

   if (a_done && fk_done && in_done)
      fprintf (stderr,
               "    stopped server: acquire %s after %lld ms, inspect %lld ms, fork %lld ms\n",
               leaselock_code_name (a.err.code), (long long)a.took_ms, (long long)in.took_ms,
               (long long)fk.took_ms);
   CHECK (stalled);
   CHECK (a_done);
   CHECK (!a.ok);
   CHECK (a.err.code == LEASELOCK_BACKEND || a.err.code == LEASELOCK_TIMEOUT);
   CHECK (a.took_ms < bound);
   CHECK_OK (ok, err);
   CHECK (stalled2);
   CHECK (fk_done && fk.ok);
   CHECK (in_done);
   CHECK_EQ (in.err.code, LEASELOCK_BACKEND);
   CHECK (in.took_ms >= STALL_IO_MS - 50); /* it did wait for the reply */
   /* Once: retries would multiply it (seen 1001 ms on an idle machine). */
   CHECK (in.took_ms < 3 * STALL_IO_MS);
   CHECK_OK (ok3, err);
   CHECK (found && rec.owner[0] == '\0');
}

/* An acquire whose timeout (1 s) is shorter than io_timeout (5 s by
 * default) on a stopped server: it returns by its timeout, not the I/O
 * bounds, saying that its outcome is unknown; once the server runs again
 * the key is free long before the TTL (5 s) of the grant that may have
 * run, which the client's I/O threads release. */
static void test_stalled_acquire_in_time (void)
{
   leaselock_error_t err;
   leaselock_client_t *c = client ("stall-in-time"), *d = client ("stall-in-time-2");
   CHECK (c && d);
   const char *k = key ("stall-in-time");
   /* Warm: the acquire statement prepared on the connection, so that the
    * stall meets the statement itself (a failed prepare sends nothing:
    * its outcome is known). */
   leaselock_lease_t *w = NULL;
   leaselock_acquire_opts_t wo = opts (5000, false);
   const char *wk = key ("stall-in-time-warm");
   bool ok =
     leaselock_acquire (c, wk, strlen (wk), &wo, &w, &err) && leaselock_lease_release (w, &err);
   leaselock_lease_destroy (w);
   call_t a = { .c = c, .key = k, .what = CALL_ACQUIRE };
   stall_t s;
   bool stalled = ok && stall_begin (&s), done = false;
   int64_t t0 = mono_ms ();
   if (stalled) {
      call_start (&a);
      done = call_wait (&a, t0, 1000 + STALL_SLACK_MS);
   }
   sleep_ms (300); /* the key's release, if sent, waits too */
   stall_end (&s);
   if (stalled)
      call_join (&a);
   int64_t t1 = mono_ms ();
   leaselock_lease_t *l = NULL;
   leaselock_acquire_opts_t o = opts (5000, false);
   o.timeout_ms = 4500;
   bool got = leaselock_acquire (d, k, strlen (k), &o, &l, &err);
   int64_t free_ms = mono_ms () - t1;
   if (done)
      fprintf (stderr,
               "    stopped server, acquire(timeout=1 s): %s after %lld ms; the key free %lld ms "
               "after the server ran again\n",
               leaselock_code_name (a.err.code), (long long)a.took_ms, (long long)free_ms);
   leaselock_lease_destroy (l);
   leaselock_client_destroy (c);
   leaselock_client_destroy (d);
   CHECK_OK (ok, err);
   CHECK (stalled);
   CHECK (done);
   CHECK (!a.ok);
   CHECK_EQ (a.err.code, LEASELOCK_BACKEND);
   CHECK (strstr (a.err.message, "outcome unknown") != NULL);
   CHECK (a.took_ms < 1000 + 500);
   CHECK_OK (got, err);
   CHECK (free_ms < 3000); /* released, not run out (5 s after it ran) */
}

/* Signals while a call waits for the server (a profiler's timer, a
 * handler of the application's; recv() and poll() return EINTR even
 * under SA_RESTART when they wait with a timeout): each wait a signal
 * cuts short goes on for what is left of its bound, no more. Pairs
 * succeed while another thread signals the calling thread every
 * millisecond, and a call on a stopped server still ends by io_timeout
 * (a wait that started over at each signal would last as long as the
 * signals do). */
typedef struct
{
   pthread_t target, th;
   atomic_bool stop;
   atomic_long sent;
} pester_t;

static void sig_noop (int sig)
{
   (void)sig;
}

static void *pester_main (void *arg)
{
   pester_t *p = arg;
   while (!atomic_load (&p->stop)) {
      if (pthread_kill (p->target, SIGUSR1) == 0)
         atomic_fetch_add (&p->sent, 1);
      sleep_ms (1);
   }
   return NULL;
}

static void pester_start (pester_t *p, pthread_t target)
{
   p->target = target;
   atomic_init (&p->stop, false);
   atomic_init (&p->sent, 0);
   pthread_create (&p->th, NULL, pester_main, p);
}

static void pester_stop (pester_t *p)
{
   atomic_store (&p->stop, true);
   pthread_join (p->th, NULL);
}

static void test_signals_during_waits (void)
{
   /* A handler that returns (kept afterwards: a signal still pending when
    * the disposition went back to the default would end the process). */
   struct sigaction sa = { .sa_handler = sig_noop };
   sigemptyset (&sa.sa_mask);
   CHECK (sigaction (SIGUSR1, &sa, NULL) == 0);
   leaselock_error_t err;
   leaselock_client_t *c = stall_client ("signals", &err);
   CHECK_OK (c != NULL, err);
   const char *k = key ("signals");

   /* 1. Pairs under signals: none fails. */
   pester_t p;
   pester_start (&p, pthread_self ());
   leaselock_acquire_opts_t ao = opts (5000, false);
   int pairs = 0;
   bool ok = true;
   int64_t t0 = mono_ms ();
   while (ok && (pairs < 200 || mono_ms () - t0 < 300)) {
      leaselock_lease_t *l = NULL;
      ok = leaselock_acquire (c, k, strlen (k), &ao, &l, &err) && leaselock_lease_release (l, &err);
      leaselock_lease_destroy (l);
      pairs += ok;
   }
   pester_stop (&p);
   long sent = atomic_load (&p.sent);
   CHECK_OK (ok, err);
   CHECK (sent > 50); /* the calls did run among signals */

   /* 2. A call in flight on a stopped server, its thread signalled every
    * millisecond, still ends by io_timeout. */
   leaselock_record_t rec;
   bool found;
   ok = leaselock_inspect (c, k, strlen (k), &rec, &found, &err); /* a warm connection */
   CHECK_OK (ok, err);
   call_t in = { .c = c, .key = k, .what = CALL_INSPECT };
   stall_t s;
   bool stalled = stall_begin (&s);
   bool done = false;
   if (stalled) {
      t0 = mono_ms ();
      call_start (&in);
      pester_start (&p, in.th);
      done = call_wait (&in, t0, STALL_IO_MS + STALL_CONNECT_MS + STALL_SLACK_MS);
      pester_stop (&p);
   }
   stall_end (&s);
   if (stalled)
      call_join (&in);
   leaselock_client_destroy (c);
   fprintf (stderr,
            "    %d pairs among %ld signals; on a stopped server the inspect %s after %lld ms\n",
            pairs, sent, done ? leaselock_code_name (in.err.code) : "still waiting",
            (long long)(done ? in.took_ms : mono_ms () - t0));
   CHECK (stalled);
   CHECK (done);
   CHECK (!in.ok);
   CHECK_EQ (in.err.code, LEASELOCK_BACKEND);
   CHECK (in.took_ms < 3 * STALL_IO_MS);
}

/* Without any timeout in the URI, a call on a connection to a stopped
 * server ends after the default io_timeout (5 s). */
static void test_stalled_server_default_bound (void)
{
   leaselock_error_t err;
   leaselock_client_t *c = client ("stall-default");
   CHECK (c);
   const char *k = key ("stall-default");
   leaselock_record_t rec;
   bool found;
   bool ok = leaselock_inspect (c, k, strlen (k), &rec, &found, &err); /* warm */
   if (!ok)
      leaselock_client_destroy (c);
   CHECK_OK (ok, err);
   call_t in = { .c = c, .key = k, .what = CALL_INSPECT };
   stall_t s;
   bool stalled = stall_begin (&s), done = false;
   int64_t t0 = mono_ms ();
   if (stalled) {
      call_start (&in);
      done = call_wait (&in, t0, 5000 + STALL_SLACK_MS);
   }
   stall_end (&s);
   if (stalled)
      call_join (&in);
   ok = leaselock_inspect (c, k, strlen (k), &rec, &found, &err); /* works again */
   leaselock_client_destroy (c);
   if (done)
      fprintf (stderr, "    stopped server, default bounds: inspect %s after %lld ms\n",
               leaselock_code_name (in.err.code), (long long)in.took_ms);
   CHECK (stalled);
   CHECK (done);
   CHECK_EQ (in.err.code, LEASELOCK_BACKEND);
   CHECK (in.took_ms >= 4900);
   CHECK_OK (ok, err);
}

/* The scheme aliases and, for MySQL, a unix socket. */
static void test_scheme_aliases_and_socket (void)
{
   char uri[1024];
   const char *colon = strstr (URI, "://");
   CHECK (colon);
   snprintf (uri, sizeof uri, "%s%s", IS_MYSQL ? "mariadb" : "postgres", colon);
   leaselock_error_t err;
   leaselock_client_t *c = leaselock_client_new (uri, NULL, &err);
   CHECK_OK (c != NULL, err);
   leaselock_record_t rec;
   bool found;
   bool ok = leaselock_inspect (c, key ("alias"), strlen (key ("alias")), &rec, &found, &err);
   leaselock_client_destroy (c);
   CHECK_OK (ok, err);
   const char *sock = getenv ("LEASELOCK_MYSQL_SOCKET");
   if (!IS_MYSQL || !sock || !*sock)
      return;
   ll_uri_t u;
   CHECK (ll_uri_parse (URI, &u, &err));
   snprintf (uri, sizeof uri, "mysql://%s:%s@localhost%s?socket=%s", u.user,
             u.password ? u.password : "", u.path, sock);
   ll_uri_cleanup (&u);
   c = leaselock_client_new (uri, NULL, &err);
   CHECK_OK (c != NULL, err);
   leaselock_lease_t *l;
   leaselock_acquire_opts_t o = opts (5000, false);
   ok = leaselock_acquire (c, key ("socket"), strlen (key ("socket")), &o, &l, &err);
   if (ok)
      leaselock_lease_destroy (l);
   leaselock_client_destroy (c);
   CHECK_OK (ok, err);
   snprintf (uri, sizeof uri, "%s%ssocket=/nonexistent/mysqld.sock", URI,
             strchr (URI, '?') ? "&" : "?");
   c = leaselock_client_new (uri, NULL, &err);
   if (c)
      leaselock_client_destroy (c);
   CHECK (!c && err.code == LEASELOCK_BACKEND && strstr (err.message, "/nonexistent/mysqld.sock"));
}

/* ---- host lists: following a failover ----------------------------------- */

/* Where URI's host[:port] begins and ends (after the user info, before the
 * path). */
static void uri_host_part (const char **start, const char **end)
{
   const char *a = strstr (URI, "://") + 3;
   const char *path = a + strcspn (a, "/?#");
   const char *at = memchr (a, '@', (size_t)(path - a));
   *start = at ? at + 1 : a;
   *end = path;
}

/* The server's own host[:port] as URI names it. */
static void self_host (char *out, size_t size)
{
   const char *hs, *he;
   uri_host_part (&hs, &he);
   snprintf (out, size, "%.*s", (int)(he - hs), hs);
}

/* URI with hosts in place of its host[:port], and opts (if any) appended. */
static void uri_hosts (char *out, size_t size, const char *hosts, const char *opts)
{
   const char *hs, *he;
   uri_host_part (&hs, &he);
   snprintf (out, size, "%.*s%s%s%s%s", (int)(hs - URI), URI, hosts, he,
             opts ? (strchr (he, '?') ? "&" : "?") : "", opts ? opts : "");
}

/* A listener that never accepts: connections complete in the kernel's
 * backlog, then hear nothing, as from a server that hangs. Its socket,
 * -1 on error. */
static int silent_listener (int *port)
{
   int s = socket (AF_INET, SOCK_STREAM, 0);
   struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl (INADDR_LOOPBACK) };
   socklen_t len = sizeof a;
   if (s < 0 || bind (s, (struct sockaddr *)&a, sizeof a) || listen (s, 16) ||
       getsockname (s, (struct sockaddr *)&a, &len)) {
      if (s >= 0)
         close (s);
      return -1;
   }
   *port = ntohs (a.sin_port);
   return s;
}

/* A client on uri takes and frees a lease; *took_ms: how long it took. */
static bool use_uri (const char *uri, leaselock_error_t *err, int64_t *took_ms)
{
   int64_t t0 = ll_real_now_ms ();
   leaselock_client_t *c = leaselock_client_new (uri, NULL, err);
   bool ok = c != NULL;
   leaselock_lease_t *l = NULL;
   leaselock_acquire_opts_t o = opts (5000, false);
   if (ok && (ok = leaselock_acquire (c, key ("hosts"), strlen (key ("hosts")), &o, &l, err)))
      ok = leaselock_lease_release (l, err);
   leaselock_lease_destroy (l);
   leaselock_client_destroy (c);
   if (took_ms)
      *took_ms = ll_real_now_ms () - t0;
   char shown[512];
   ll_uri_redact (uri, shown, sizeof shown);
   fprintf (stderr, "    %s: %s after %lld ms%s%s\n", shown, ok ? "ok" : "failed",
            (long long)(ll_real_now_ms () - t0), ok ? "" : ": ", ok ? "" : err->message);
   return ok;
}

/* A list whose first host is down: the next one is used, at once. */
static void test_host_list_dead_first (void)
{
   char self[256], hosts[512], uri[1024];
   self_host (self, sizeof self);
   leaselock_error_t err;
   int64_t took;
   const char *firsts[] = { "127.0.0.1:%d,%s", "[::1]:%d,%s", "127.0.0.1:%d,127.0.0.1:%d,%s" };
   for (size_t i = 0; i < sizeof firsts / sizeof firsts[0]; i++) {
      int dead = free_port ();
      if (i == 2)
         snprintf (hosts, sizeof hosts, firsts[i], dead, free_port (), self);
      else
         snprintf (hosts, sizeof hosts, firsts[i], dead, self);
      uri_hosts (uri, sizeof uri, hosts, NULL);
      bool ok = use_uri (uri, &err, &took);
      CHECK_OK (ok, err);
      CHECK (took < 3000);
   }
   /* The other scheme's name too. */
   snprintf (hosts, sizeof hosts, "127.0.0.1:%d,%s", free_port (), self);
   uri_hosts (uri, sizeof uri, hosts, NULL);
   char alias[1100];
   snprintf (alias, sizeof alias, "%s%s", IS_MYSQL ? "mariadb" : "postgres", strstr (uri, "://"));
   bool ok = use_uri (alias, &err, NULL);
   CHECK_OK (ok, err);
}

/* Only dead hosts: BACKEND at once, naming each and why, no password. */
static void test_host_list_all_dead (void)
{
   char hosts[128], uri[1024], a[32], b[32];
   int p1 = free_port (), p2 = free_port ();
   snprintf (hosts, sizeof hosts, "127.0.0.1:%d,127.0.0.1:%d", p1, p2);
   uri_hosts (uri, sizeof uri, hosts, NULL);
   leaselock_error_t err;
   int64_t took;
   bool ok = use_uri (uri, &err, &took);
   CHECK_ERR (ok, err, LEASELOCK_BACKEND, "connecting: no writable server among 2 hosts: ");
   snprintf (a, sizeof a, "127.0.0.1:%d: ", p1);
   snprintf (b, sizeof b, "; 127.0.0.1:%d: ", p2);
   CHECK (strstr (err.message, a) && strstr (err.message, b));
   CHECK (strstr (err.message, IS_MYSQL ? "(error 200" : "refused"));
   CHECK (took < 3000);
   ll_uri_t u;
   CHECK (ll_uri_parse (URI, &u, &err));
   bool hidden = !u.password || strlen (u.password) < 3 || !strstr (err.message, u.password);
   ll_uri_cleanup (&u);
   CHECK (hidden);
}

/* A host that accepts connections and never answers takes only its share
 * of connect_timeout: the next host is still tried in time; with only
 * such hosts the whole fails within connect_timeout. */
static void test_host_list_silent_host (void)
{
   char self[256], hosts[512], uri[1024];
   self_host (self, sizeof self);
   int port, s = silent_listener (&port);
   CHECK (s >= 0);
   snprintf (hosts, sizeof hosts, "127.0.0.1:%d,%s", port, self);
   uri_hosts (uri, sizeof uri, hosts, "connect_timeout=2");
   leaselock_error_t err, err2;
   int64_t took, took2;
   bool ok = use_uri (uri, &err, &took);
   snprintf (hosts, sizeof hosts, "127.0.0.1:%d,127.0.0.1:%d", port, port);
   uri_hosts (uri, sizeof uri, hosts, "connect_timeout=2");
   bool ok2 = use_uri (uri, &err2, &took2);
   close (s);
   CHECK_OK (ok, err);
   CHECK (took >= 900 && took < 2500);
   CHECK_ERR (ok2, err2, LEASELOCK_BACKEND, "no writable server among 2 hosts");
   CHECK (took2 < 2700);
   char name[32];
   snprintf (name, sizeof name, "; 127.0.0.1:%d: ", port);
   CHECK (strstr (err2.message, name + 2) && strstr (err2.message, name));
}

/* libpq's other forms: host and port lists as options, hostaddr, unix
 * socket directories (as an option and percent-encoded as the host), a
 * list libpq walks itself (an empty item), target_session_attrs. */
static void test_host_list_libpq_forms (void)
{
   if (IS_MYSQL)
      return;
   ll_uri_t u;
   leaselock_error_t err;
   CHECK (ll_uri_parse (URI, &u, &err));
   char sock[256] = "", uri[1024], enc[512] = "";
   const char *pw = u.password ? u.password : "";
   const char *dir = getenv ("LEASELOCK_POSTGRESQL_SOCKET_DIR");
   bool have_sock = dir && dir[0] == '/' && strlen (dir) < sizeof sock;
   if (have_sock)
      snprintf (sock, sizeof sock, "%s", dir);
   for (size_t i = 0, o = 0; sock[i] && o + 4 < sizeof enc; i++)
      o += (size_t)snprintf (enc + o, sizeof enc - o, sock[i] == '/' ? "%%2F" : "%c", sock[i]);
   const int dead = free_port ();
   char forms[8][1024];
   int n = 0;
   snprintf (forms[n++], sizeof forms[0],
             "postgresql://%s?host=127.0.0.1,%s&port=%d,%d&user=%s&password=%s", u.path, u.host,
             dead, u.port, u.user, pw);
   snprintf (forms[n++], sizeof forms[0],
             "postgresql://%s?hostaddr=127.0.0.1,%s&port=%d,%d&user=%s&password=%s", u.path, u.host,
             dead, u.port, u.user, pw);
   snprintf (forms[n++], sizeof forms[0],
             "postgresql://%s:%s@%%2Fnonexistent-ll-dir:%d,%s:%d%s?target_session_attrs=any&"
             "connect_timeout=3",
             u.user, pw, u.port, u.host, u.port, u.path);
   snprintf (forms[n++], sizeof forms[0], "postgresql://%s:%s@,%s:%d%s?port=%d,%d", u.user, pw,
             u.host, u.port, u.path, dead, u.port);
   if (have_sock) {
      snprintf (forms[n++], sizeof forms[0], "postgresql://%s?host=%s&port=%d&user=%s", u.path,
                sock, u.port, u.user);
      snprintf (forms[n++], sizeof forms[0], "postgres://%s@%s:%d%s", u.user, enc, u.port, u.path);
   }
   bool all = true;
   for (int i = 0; i < n; i++)
      all &= use_uri (forms[i], &err, NULL);
   snprintf (uri, sizeof uri, "postgresql://%s:%s@%s:%d,%s:%d%s?target_session_attrs=standby",
             u.user, pw, u.host, u.port, u.host, u.port, u.path);
   bool standby = use_uri (uri, &err, NULL);
   ll_uri_cleanup (&u);
   if (!have_sock)
      fprintf (stderr, "    LEASELOCK_POSTGRESQL_SOCKET_DIR is not set: no socket forms\n");
   CHECK (all);
   CHECK_ERR (standby, err, LEASELOCK_INVALID, "leases are taken only on a writable primary");
   char many[1024] = "postgresql:///db?host=h0";
   for (int i = 1; i < LL_URI_MAX_HOSTS + 1; i++)
      snprintf (many + strlen (many), sizeof many - strlen (many), ",h%d", i);
   CHECK_ERR (use_uri (many, &err, NULL), err, LEASELOCK_INVALID, "at most 16");
}

/* MySQL's host lists: socket= names one server, and no item is empty. */
static void test_host_list_mysql_forms (void)
{
   if (!IS_MYSQL)
      return;
   char self[200], hosts[512], uri[1024];
   self_host (self, sizeof self);
   leaselock_error_t err;
   snprintf (hosts, sizeof hosts, "%s,%s", self, self);
   uri_hosts (uri, sizeof uri, hosts, "socket=/nonexistent-ll-dir/x.sock");
   CHECK_ERR (use_uri (uri, &err, NULL), err, LEASELOCK_INVALID, "socket=");
   snprintf (hosts, sizeof hosts, "%s,,%s", self, self);
   uri_hosts (uri, sizeof uri, hosts, NULL);
   CHECK_ERR (use_uri (uri, &err, NULL), err, LEASELOCK_INVALID, "host 2 of the list is empty");
}

/* A server that refuses writes (a replica, a demoted primary) is refused
 * at connect, and at reconnect: a client whose connections are cut while
 * it is read-only does not use it; once writable again it works. */
static void test_read_only_server_refused (void)
{
   char self[256], hosts[512], list[1024];
   self_host (self, sizeof self);
   int dead = free_port ();
   snprintf (hosts, sizeof hosts, "127.0.0.1:%d,%s", dead, self);
   uri_hosts (list, sizeof list, hosts, NULL);
   leaselock_error_t err, e1, e2, e3;
   leaselock_client_t *c = leaselock_client_new (URI, NULL, &err);
   CHECK_OK (c != NULL, err);
   if (!raw_read_only (true)) {
      leaselock_client_destroy (c);
      fprintf (stderr, "    cannot make this server read-only: not tested\n");
      return;
   }
   int killed = kill_other_connections ();
   sleep_ms (100); /* the kill lands: PostgreSQL's pg_terminate_backend is asynchronous */
   leaselock_record_t rec;
   bool found;
   bool reconnected = leaselock_inspect (c, key ("ro"), strlen (key ("ro")), &rec, &found, &e1);
   if (!reconnected)
      fprintf (stderr, "    reconnect: %s\n", e1.message);
   bool single = use_uri (URI, &e2, NULL);
   bool listed = use_uri (list, &e3, NULL);
   bool undone = raw_read_only (false);
   bool again = leaselock_inspect (c, key ("ro"), strlen (key ("ro")), &rec, &found, &err);
   leaselock_client_destroy (c);
   CHECK (undone);
   CHECK (killed >= 1);
   const char *why =
     IS_MYSQL ? "the server is read-only (read_only=ON)" : "the server gives read-only sessions";
   CHECK_ERR (reconnected, e1, LEASELOCK_BACKEND, why);
   CHECK_ERR (single, e2, LEASELOCK_BACKEND, why);
   CHECK_ERR (listed, e3, LEASELOCK_BACKEND, "no writable server among 2 hosts");
   CHECK (strstr (e3.message, IS_MYSQL ? "read_only=ON" : "read-only"));
   CHECK_OK (again, err);
}

/* Holder info with quotes and UTF-8 comes back as given. */
static void test_holder_info (void)
{
   const char *label = "worker 'quoted' \"x\" \\ ünïcödé 🔒";
   leaselock_error_t err;
   leaselock_client_t *c = leaselock_client_new (URI, label, &err);
   CHECK_OK (c != NULL, err);
   leaselock_lease_t *l;
   leaselock_acquire_opts_t o = opts (10000, false);
   bool ok = leaselock_acquire (c, key ("holder"), strlen (key ("holder")), &o, &l, &err);
   CHECK_OK (ok, err);
   leaselock_record_t rec;
   bool found;
   ok = leaselock_inspect (c, key ("holder"), strlen (key ("holder")), &rec, &found, &err);
   CHECK_OK (ok, err);
   char host[256] = "";
   gethostname (host, sizeof host - 1);
   CHECK (found && !strcmp (rec.label, label));
   CHECK (!strcmp (rec.host, host));
   CHECK_EQ (rec.pid, getpid ());
   CHECK_EQ (rec.fence, leaselock_lease_fence (l));
   leaselock_lease_destroy (l);
   leaselock_client_destroy (c);
}

/* ---- hand-off by notification (notify_cases.c) -------------------------- */

/* MySQL: this machine's channel file (wake_file.c); PostgreSQL has none. */
bool nt_wake_path (const char *uri, char *buf, size_t size)
{
   return IS_MYSQL && nt_host_wake_path (uri, "mysql", "table", buf, size);
}

/* The listeners' connections killed, as an admin or a failover would;
 * MySQL's channel file removed. */
void nt_break_listener (const char *uri)
{
   if (nt_remove_wake (uri))
      return;
   char out[32];
   if (!raw_query ("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                   "WHERE query LIKE 'LISTEN%' AND pid <> pg_backend_pid()",
                   out, sizeof out))
      fprintf (stderr, "    could not kill the listeners\n");
}

/* The server's connections that listen (their last statement). */
int nt_listeners (void)
{
   char out[32];
   if (IS_MYSQL || !raw_query ("SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN%'",
                               out, sizeof out))
      return -1;
   return atoi (out);
}

int main (int argc, char **argv)
{
   if (argc >= 2 && !strcmp (argv[1], "--helper"))
      return helper (argc, argv);
   if (argc >= 2 && !strcmp (argv[1], "--queue-helper"))
      return queue_helper (argc, argv);
   if (argc >= 2 && !strcmp (argv[1], "--fair-stop-helper"))
      return fair_stop_helper (argc, argv);
   if (argc < 2) {
      fprintf (stderr, "usage: %s %s://...\n", argv[0], raw_scheme);
      return 2;
   }
   SELF = argv[0];
   IS_MYSQL = !strncmp (argv[1], "mysql:", 6) || !strncmp (argv[1], "mariadb:", 8);
   bool postgresql = !strncmp (argv[1], "postgres", 8);
   if (IS_MYSQL != !strcmp (raw_scheme, "mysql") || postgresql == IS_MYSQL) {
      fprintf (stderr, "%s: expected a %s:// URI (this program speaks %s)\n", argv[0], raw_scheme,
               raw_scheme);
      return 2;
   }
   char path[4096];
   ssize_t n = readlink ("/proc/self/exe", path, sizeof path - 1);
   if (n > 0) {
      path[n] = '\0';
      SELF = path;
   }
   tl_start (raw_scheme, argv[1]);
   raw_use (URI);

   RUN (test_hostile_keys);
   RUN (test_list_prefix_literal);
   RUN (test_holder_info);
   RUN (test_takeover_does_not_extend_old);
   RUN (test_reservation_blocks_others);
   RUN (test_reservation_reports_left);
   RUN_SLOW (test_reservation_runs_out);
   RUN (test_reservation_older_waiter_wins);
   RUN (test_plain_acquire_never_reserves);
   RUN_SLOW (test_prune_keeps_reserved);
   RUN (test_retry_beats_reservation);
   RUN (test_migrate_v1);
   RUN (test_reservation_claim_on_expired);
   RUN (test_concurrent_migration);
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
   RUN_SLOW (test_queue_clock_skew);
   RUN (test_queue_stopped_joiner);
   RUN (test_queue_mark_first_try);
   RUN (test_queue_mark_kept_later);
   RUN (test_queue_mark_late_join);
   RUN_SLOW (test_queue_mark_row);
   RUN (test_migrate_v2);
   RUN (test_concurrent_migration_v2);
   RUN (test_migrate_v3);
   RUN (test_concurrent_migration_v3);
   RUN (test_hold_counts);
   RUN (test_hold_odd_keys);
   RUN_SLOW (test_clock_skew);
   RUN (test_reconnect_after_kill);
   RUN (test_new_primary);
   RUN (test_failed_in_flight);
   RUN (test_stalled_server);
   RUN (test_stalled_acquire_in_time);
   RUN (test_signals_during_waits);
   RUN_SLOW (test_stalled_server_default_bound);
   notify_cases_run ();
   RUN (test_scheme_aliases_and_socket);
   RUN (test_host_list_dead_first);
   RUN (test_host_list_all_dead);
   RUN (test_host_list_silent_host);
   RUN (test_host_list_libpq_forms);
   RUN (test_host_list_mysql_forms);
   RUN (test_read_only_server_refused);
   RUN (test_abandon_after_fork);
   RUN (test_bad_uris);
   RUN (test_table_option_and_schema);
   RUN (test_concurrent_first_use);
   RUN_SLOW (test_server_restart_mid_hold);
   return tl_summary (raw_scheme);
}
