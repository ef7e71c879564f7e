/*
 * test_sqlite.c - the embedded SQLite backend's own cases: URI checks,
 * schema creation, versioning and the migration of a version-1 file,
 * unwritable paths, keys stored verbatim, prefix listing without
 * wildcards, the next owner's reservation (acquire_wait), the default
 * file, several openers at once, fork. The lease contract itself is tests/test_contract.c.
 *
 * Run: test_sqlite [TMPDIR] (default: a new directory under /tmp).
 */
#include "ll_internal.h"
#include "stmt_sqlite.h"
#include "testlib.h"
#include "notify_cases.h"
#include "queue_cases.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char tmp[128];
static int seq;

static const ll_backend_t *B = &ll_backend_sqlite;

/* A fresh database path and its URI. */
static void new_db (char *path, size_t psize, char *uri, size_t usize)
{
   snprintf (path, psize, "%s/db%d.db", tmp, ++seq);
   snprintf (uri, usize, "sqlite://%s", path);
}

static const char owner_a[] = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
static const char owner_b[] = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
static const ll_holder_t holder = { "testhost", 4242, "test-label" };

/* Runs SQL on the file with the plain sqlite3 API; returns the first
 * column of the first row as an integer (or -1). */
static long long raw_int (const char *path, const char *sql)
{
   sqlite3 *db = NULL;
   long long v = -1;
   if (sqlite3_open_v2 (path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) == SQLITE_OK) {
      sqlite3_stmt *st = NULL;
      if (sqlite3_prepare_v2 (db, sql, -1, &st, NULL) == SQLITE_OK) {
         int rc = sqlite3_step (st);
         if (rc == SQLITE_ROW)
            v = sqlite3_column_int64 (st, 0);
         else if (rc == SQLITE_DONE)
            v = 0;
      }
      sqlite3_finalize (st);
   }
   sqlite3_close (db);
   return v;
}

/* ---- URIs -------------------------------------------------------------- */

static void test_uri_refused (void)
{
   static const struct
   {
      const char *uri;
      const char *msg;
   } cases[] = {
      { "sqlite://host/x.db", "host" },
      { "sqlite://relative.db", "relative" },
      { "sqlite://", "no file path" },
      { "sqlite:relative.db", "malformed" },
      { "sqlite:///tmp/", "directory" },
      { "sqlite://user:pw@/tmp/x.db", "no user" },
      { "sqlite://:123/tmp/x.db", "port" },
      { "sqlite:///tmp/x.db?nosuch=1", "unknown SQLite URI option \"nosuch\"" },
      { "sqlite:///tmp/x.db?busy_timeout_ms=abc",
        "sqlite URI option busy_timeout_ms=\"abc\": expected whole milliseconds from 0 to " },
      { "sqlite:///tmp/x.db?busy_timeout_ms=-1", "busy_timeout_ms=\"-1\": expected whole" },
      { "sqlite:///tmp/x.db?busy_timeout_ms=99999999999", "busy_timeout_ms" },
      { "sqlite:///tmp/bad%zzescape.db", "percent-escape" },
   };
   for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
      leaselock_error_t err = { 0 };
      void *conn = B->open (cases[i].uri, &err);
      if (conn)
         B->close (conn);
      CHECK_ERR (conn != NULL, err, LEASELOCK_INVALID, cases[i].msg);
      /* The same through the public API. */
      leaselock_client_t *c = leaselock_client_new (cases[i].uri, NULL, &err);
      if (c)
         leaselock_client_destroy (c);
      CHECK_ERR (c != NULL, err, LEASELOCK_INVALID, cases[i].msg);
   }
}

static void test_uri_busy_timeout_option (void)
{
   char path[256], uri[320];
   new_db (path, sizeof path, uri, sizeof uri);
   strcat (uri, "?busy_timeout_ms=25");
   leaselock_error_t err = { 0 };
   void *a = B->open (uri, &err);
   CHECK_OK (a != NULL, err);

   /* A writer holding the file: our acquire waits about 25 ms, then
    * reports the file locked as BUSY (waiting, not a failure). */
   sqlite3 *db = NULL;
   CHECK (sqlite3_open (path, &db) == SQLITE_OK);
   CHECK (sqlite3_exec (db, "BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK);
   int64_t fence = 0;
   int64_t t0 = ll_now_ms ();
   bool ok = ll_backend_acquire (
     B, a, &(ll_take_t){ { "k", 1, owner_a }, 1000, &holder, 0, 0, false, false }, &fence, &err);
   int64_t waited = ll_now_ms () - t0;
   sqlite3_exec (db, "ROLLBACK", NULL, NULL, NULL);
   sqlite3_close (db);
   B->close (a);
   CHECK_ERR (ok, err, LEASELOCK_BUSY, "locked by another connection");
   CHECK (strstr (err.message, path) != NULL);
   CHECK (waited >= 20);
}

/* ---- schema ------------------------------------------------------------ */

static void test_schema_created_once (void)
{
   char path[256], uri[320];
   new_db (path, sizeof path, uri, sizeof uri);
   leaselock_error_t err = { 0 };
   void *a = B->open (uri, &err);
   CHECK_OK (a != NULL, err);
   CHECK_EQ (raw_int (path, "PRAGMA user_version"), LL_SQLITE_SCHEMA_VERSION);
   CHECK_EQ (raw_int (path, "SELECT count(*) FROM sqlite_schema WHERE name = 'leaselock_locks'"),
             1);
   int64_t fence = 0;
   bool ok = ll_backend_acquire (
     B, a, &(ll_take_t){ { "k", 1, owner_a }, 60000, &holder, 0, 0, false, false }, &fence, &err);
   B->close (a);
   CHECK_OK (ok, err);
   CHECK_EQ (fence, 1);

   /* Reopening keeps the table and its records: the lease is still live
    * and the fence goes on from 1. */
   void *b = B->open (uri, &err);
   CHECK_OK (b != NULL, err);
   ok = ll_backend_acquire (
     B, b, &(ll_take_t){ { "k", 1, owner_b }, 60000, &holder, 0, 0, false, false }, &fence, &err);
   if (ok) {
      B->close (b);
      CHECK (!"another owner took a live lease after reopening");
   }
   CHECK_EQ (err.code, LEASELOCK_BUSY);
   ok = ll_backend_acquire (
     B, b, &(ll_take_t){ { "k", 1, owner_a }, 60000, &holder, 0, 0, false, false }, &fence, &err);
   B->close (b);
   CHECK_OK (ok, err);
   CHECK_EQ (fence, 2);
   CHECK_EQ (raw_int (path, "PRAGMA user_version"), LL_SQLITE_SCHEMA_VERSION);
   CHECK_EQ (raw_int (path, "SELECT count(*) FROM sqlite_schema WHERE name = 'leaselock_locks'"),
             1);
   CHECK_EQ (raw_int (path, "SELECT count(*) FROM leaselock_locks"), 1);
   /* WAL mode is a property of the file once set. */
   sqlite3 *db = NULL;
   CHECK (sqlite3_open (path, &db) == SQLITE_OK);
   sqlite3_stmt *st = NULL;
   CHECK (sqlite3_prepare_v2 (db, "PRAGMA journal_mode", -1, &st, NULL) == SQLITE_OK);
   CHECK (sqlite3_step (st) == SQLITE_ROW);
   bool wal = !strcmp ((const char *)sqlite3_column_text (st, 0), "wal");
   sqlite3_finalize (st);
   sqlite3_close (db);
   CHECK (wal);
}

/* A close leaves the -wal file (no checkpoint and delete per process:
 * backend_sqlite_conn.c's "The WAL outlives a close"), yet it stays
 * small: a close checkpoints and truncates a WAL of CLOSE_CKPT_FRAMES (64)
 * frames or more, whose frames the next first opener would read back.
 * Each cycle opens the file as a new process would (the last connection
 * closed), takes a key and releases it; no grant is lost. */
static void test_wal_kept_bounded (void)
{
   char path[256], uri[320], wal[300];
   new_db (path, sizeof path, uri, sizeof uri);
   snprintf (wal, sizeof wal, "%s-wal", path);
   leaselock_error_t err = { 0 };
   int64_t fence = 0;
   off_t largest = 0;
   for (int i = 0; i < 200; i++) {
      void *c = B->open (uri, &err);
      CHECK_OK (c != NULL, err);
      ll_op_t op = { "k", 1, owner_a };
      bool ok = ll_backend_acquire (B, c, &(ll_take_t){ op, 60000, &holder, 0, 0, false, false },
                                    &fence, &err) &&
                B->release (c, &op, 0, &err);
      B->close (c);
      CHECK_OK (ok, err);
      struct stat st;
      CHECK (stat (wal, &st) == 0); /* kept */
      if (st.st_size > largest)
         largest = st.st_size;
   }
   CHECK_EQ (fence, 200);
   /* 64 frames, and the few of the cycle that reached them. */
   CHECK (largest <= 32 + 72 * (4096 + 24));
}

static void test_schema_newer_refused (void)
{
   char path[256], uri[320];
   new_db (path, sizeof path, uri, sizeof uri);
   CHECK_EQ (raw_int (path, "PRAGMA user_version = 7"), 0);
   leaselock_error_t err = { 0 };
   void *a = B->open (uri, &err);
   if (a)
      B->close (a);
   CHECK_ERR (a != NULL, err, LEASELOCK_BACKEND, "schema version 7");
   CHECK (strstr (err.message, path) != NULL);
   CHECK (strstr (err.message, "newer") != NULL);
   /* Nothing was written to the file. */
   CHECK_EQ (raw_int (path, "SELECT count(*) FROM sqlite_schema"), 0);

   leaselock_client_t *c = leaselock_client_new (uri, NULL, &err);
   if (c)
      leaselock_client_destroy (c);
   CHECK_ERR (c != NULL, err, LEASELOCK_BACKEND, "schema version 7");
}

static void test_not_a_database (void)
{
   char path[256], uri[320];
   new_db (path, sizeof path, uri, sizeof uri);
   FILE *f = fopen (path, "w");
   CHECK (f != NULL);
   for (int i = 0; i < 200; i++)
      fputs ("this is a text file, not an SQLite database\n", f);
   fclose (f);
   leaselock_error_t err = { 0 };
   void *a = B->open (uri, &err);
   if (a)
      B->close (a);
   CHECK_ERR (a != NULL, err, LEASELOCK_BACKEND, "not a database");
   CHECK (strstr (err.message, path) != NULL);
}

/* ---- unwritable paths -------------------------------------------------- */

static void test_unwritable_paths (void)
{
   leaselock_error_t err = { 0 };
   /* A directory component that is a regular file. */
   char file[200], uri[300];
   snprintf (file, sizeof file, "%s/plainfile", tmp);
   int fd = open (file, O_CREAT | O_WRONLY, 0600);
   CHECK (fd >= 0);
   close (fd);
   snprintf (uri, sizeof uri, "sqlite://%s/sub/x.db", file);
   void *a = B->open (uri, &err);
   if (a)
      B->close (a);
   CHECK_ERR (a != NULL, err, LEASELOCK_BACKEND, file);
   CHECK (strstr (err.message, "not a directory") || strstr (err.message, "Not a directory"));

   /* The file's parent is the file. */
   snprintf (uri, sizeof uri, "sqlite://%s/x.db", file);
   a = B->open (uri, &err);
   if (a)
      B->close (a);
   CHECK_ERR (a != NULL, err, LEASELOCK_BACKEND, file);

   /* /proc refuses new directories even to root. */
   a = B->open ("sqlite:///proc/leaselock-no-such/y.db", &err);
   if (a)
      B->close (a);
   CHECK_ERR (a != NULL, err, LEASELOCK_BACKEND, "/proc/leaselock-no-such");

   /* The path is a directory. */
   snprintf (uri, sizeof uri, "sqlite://%s", tmp);
   a = B->open (uri, &err);
   if (a)
      B->close (a);
   CHECK_ERR (a != NULL, err, LEASELOCK_BACKEND, tmp);

   /* And through the public API. */
   snprintf (uri, sizeof uri, "sqlite://%s/sub/x.db", file);
   leaselock_client_t *c = leaselock_client_new (uri, NULL, &err);
   if (c)
      leaselock_client_destroy (c);
   CHECK_ERR (c != NULL, err, LEASELOCK_BACKEND, file);
}

/* ---- keys -------------------------------------------------------------- */

static const char *const odd_keys[] = {
   "it's", "say \"hi\"",  "100%",
   "%",    "_",           "a_b",
   "a%b",  "back\\slash", "x'); DROP TABLE leaselock_locks; --",
   "ключ", "日本語🔒",     "tab\there",
   "\x7f",
};
#define N_ODD (sizeof odd_keys / sizeof odd_keys[0])

static int cmp_bytes (const void *a, const void *b)
{
   return strcmp (*(const char *const *)a, *(const char *const *)b);
}

static void test_keys_verbatim (void)
{
   char path[256], uri[320];
   new_db (path, sizeof path, uri, sizeof uri);
   leaselock_error_t err = { 0 };
   leaselock_client_t *c = leaselock_client_new (uri, "odd keys", &err);
   CHECK_OK (c != NULL, err);
   leaselock_acquire_opts_t o;
   leaselock_acquire_opts_init (&o);
   o.auto_renew = false;
   o.ttl_ms = 60000;
   leaselock_lease_t *leases[N_ODD] = { 0 };
   bool ok = true;
   for (size_t i = 0; i < N_ODD && ok; i++)
      ok = leaselock_acquire (c, odd_keys[i], strlen (odd_keys[i]), &o, &leases[i], &err);
   listing_t got = { 0 };
   bool listed = ok && leaselock_list (c, "", 0, collect, &got, &err);
   leaselock_record_t rec;
   bool found = false;
   bool inspected =
     listed && leaselock_inspect (c, "日本語🔒", strlen ("日本語🔒"), &rec, &found, &err);
   for (size_t i = 0; i < N_ODD; i++)
      leaselock_lease_destroy (leases[i]);
   leaselock_client_destroy (c);
   CHECK_OK (ok, err);
   CHECK_OK (listed, err);
   CHECK_OK (inspected, err);
   CHECK (found);
   CHECK (!strcmp (rec.key, "日本語🔒"));
   CHECK_EQ (rec.key_len, strlen ("日本語🔒"));
   CHECK (!strcmp (rec.label, "odd keys"));
   CHECK (rec.expires_in_ms > 50000 && rec.expires_in_ms <= 60000);
   CHECK_EQ (rec.fence, 1);
   CHECK_EQ (rec.pid, getpid ());

   /* Every key back, byte for byte, in byte order. */
   const char *want[N_ODD];
   memcpy (want, odd_keys, sizeof want);
   qsort (want, N_ODD, sizeof want[0], cmp_bytes);
   CHECK_EQ (got.n, N_ODD);
   for (size_t i = 0; i < N_ODD; i++)
      CHECK (!strcmp (got.keys[i], want[i]));
   /* The injection attempt was data. */
   CHECK_EQ (raw_int (path, "SELECT count(*) FROM leaselock_locks"), N_ODD);
}

/* Lists prefix on conn and compares with the expected keys (in order). */
static bool list_is (void *conn, const char *prefix, const char *const *want, int n_want)
{
   listing_t got = { 0 };
   leaselock_error_t err;
   if (!B->list (conn, prefix, strlen (prefix), collect, &got, &err)) {
      fprintf (stderr, "    list \"%s\": %s\n", prefix, err.message);
      return false;
   }
   bool same = got.n == n_want;
   for (int i = 0; same && i < n_want; i++)
      same = !strcmp (got.keys[i], want[i]);
   if (!same) {
      fprintf (stderr, "    list \"%s\" gave %d keys:", prefix, got.n);
      for (int i = 0; i < got.n; i++)
         fprintf (stderr, " [%s]", got.keys[i]);
      fprintf (stderr, "\n");
   }
   return same;
}

static void test_prefix_no_wildcards (void)
{
   char path[256], uri[320];
   new_db (path, sizeof path, uri, sizeof uri);
   leaselock_error_t err = { 0 };
   void *a = B->open (uri, &err);
   CHECK_OK (a != NULL, err);
   static const char *const keys[] = { "a%b",   "a%",    "aXb",  "a_c", "abc", "a",  "b",
                                       "ключ1", "ключ2", "клюя", "é1",  "ê1",  "A%b" };
   bool ok = true;
   for (size_t i = 0; i < sizeof keys / sizeof keys[0] && ok; i++) {
      int64_t fence;
      ok = ll_backend_acquire (
        B, a,
        &(ll_take_t){ { keys[i], strlen (keys[i]), owner_a }, 60000, &holder, 0, 0, false, false },
        &fence, &err);
   }
   if (!ok)
      B->close (a);
   CHECK_OK (ok, err);
   bool r1 = list_is (a, "a%", (const char *[]){ "a%", "a%b" }, 2);
   bool r2 = list_is (a, "a_", (const char *[]){ "a_c" }, 1);
   bool r3 = list_is (a, "%", NULL, 0);
   bool r4 = list_is (a, "_", NULL, 0);
   bool r5 = list_is (a, "ключ", (const char *[]){ "ключ1", "ключ2" }, 2);
   bool r6 = list_is (a, "é", (const char *[]){ "é1" }, 1);
   bool r7 = list_is (a, "a", (const char *[]){ "a", "a%", "a%b", "aXb", "a_c", "abc" }, 6);
   bool r8 = list_is (a, "A", (const char *[]){ "A%b" }, 1);
   bool r9 = list_is (a, "abc", (const char *[]){ "abc" }, 1);
   bool r10 = list_is (a, "abcd", NULL, 0);
   B->close (a);
   CHECK (r1);
   CHECK (r2);
   CHECK (r3);
   CHECK (r4);
   CHECK (r5);
   CHECK (r6);
   CHECK (r7);
   CHECK (r8);
   CHECK (r9);
   CHECK (r10);
}

/* ---- operations at the backend level ----------------------------------- */

static void test_ops_by_sqlite_clock (void)
{
   char path[256], uri[320];
   new_db (path, sizeof path, uri, sizeof uri);
   leaselock_error_t err = { 0 };
   void *a = B->open (uri, &err);
   CHECK_OK (a != NULL, err);
   int64_t fence = 0;
   bool ok = ll_backend_acquire (
     B, a, &(ll_take_t){ { "op", 2, owner_a }, 60000, &holder, 0, 0, false, false }, &fence, &err);
   if (!ok)
      B->close (a);
   CHECK_OK (ok, err);
   CHECK_EQ (fence, 1);

   /* Holder info, owner and expiry as stored. */
   leaselock_record_t rec;
   bool found = false;
   ok = B->inspect (a, &(ll_op_t){ "op", 2, NULL }, &rec, &found, &err);
   CHECK_OK (ok, err);
   CHECK (found);
   CHECK (!strcmp (rec.owner, owner_a));
   CHECK (!strcmp (rec.host, "testhost"));
   CHECK (!strcmp (rec.label, "test-label"));
   CHECK_EQ (rec.pid, 4242);
   CHECK (rec.expires_in_ms > 55000 && rec.expires_in_ms <= 60000);
   /* The stored expiry is SQLite's clock + ttl, in ms since the epoch. */
   long long exp_at = raw_int (path, "SELECT expires_at FROM leaselock_locks WHERE key = 'op'");
   struct timespec now;
   clock_gettime (CLOCK_REALTIME, &now);
   long long wall = (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000;
   CHECK (exp_at - wall > 55000 && exp_at - wall <= 60000);

   /* Other owner: busy, cannot renew or release. */
   ok = ll_backend_acquire (
     B, a, &(ll_take_t){ { "op", 2, owner_b }, 60000, &holder, 0, 0, false, false }, &fence, &err);
   CHECK_ERR (ok, err, LEASELOCK_BUSY, "held");
   ok = B->renew (a, &(ll_op_t){ "op", 2, owner_b }, 60000, &err);
   CHECK_ERR (ok, err, LEASELOCK_NOT_HELD, "not held");
   ok = B->release (a, &(ll_op_t){ "op", 2, owner_b }, 0, &err);
   CHECK_ERR (ok, err, LEASELOCK_NOT_HELD, "not held");

   /* Renew to a short TTL, let it expire by SQLite's clock: renew then
    * fails, and another owner takes it with the next fence. */
   ok = B->renew (a, &(ll_op_t){ "op", 2, owner_a }, 30, &err);
   CHECK_OK (ok, err);
   sleep_ms (60);
   ok = B->renew (a, &(ll_op_t){ "op", 2, owner_a }, 60000, &err);
   CHECK_ERR (ok, err, LEASELOCK_NOT_HELD, "not held");
   ok = B->inspect (a, &(ll_op_t){ "op", 2, NULL }, &rec, &found, &err);
   CHECK_OK (ok, err);
   CHECK (rec.expires_in_ms <= 0);
   ok = ll_backend_acquire (
     B, a, &(ll_take_t){ { "op", 2, owner_b }, 60000, &holder, 0, 0, false, false }, &fence, &err);
   CHECK_OK (ok, err);
   CHECK_EQ (fence, 2);

   /* Release with min_hold: no owner, yet not free until the hold ends. */
   ok = B->release (a, &(ll_op_t){ "op", 2, owner_b }, 60000, &err);
   CHECK_OK (ok, err);
   ok = B->inspect (a, &(ll_op_t){ "op", 2, NULL }, &rec, &found, &err);
   CHECK_OK (ok, err);
   CHECK (!strcmp (rec.owner, ""));
   CHECK (rec.expires_in_ms > 55000);
   ok = ll_backend_acquire (
     B, a, &(ll_take_t){ { "op", 2, owner_a }, 60000, &holder, 0, 0, false, false }, &fence, &err);
   CHECK_ERR (ok, err, LEASELOCK_BUSY, "held");
   ok = B->release (a, &(ll_op_t){ "op", 2, owner_b }, 0, &err);
   CHECK_ERR (ok, err, LEASELOCK_NOT_HELD, "not held");

   /* force_release of a held-back record: nothing live taken, free now. */
   bool took = true;
   ok = B->force_release (a, &(ll_op_t){ "op", 2, NULL }, &took, &err);
   CHECK_OK (ok, err);
   CHECK (!took);
   ok = ll_backend_acquire (
     B, a, &(ll_take_t){ { "op", 2, owner_a }, 60000, &holder, 0, 0, false, false }, &fence, &err);
   CHECK_OK (ok, err);
   CHECK_EQ (fence, 3);
   /* A retried acquire by the same owner succeeds with a larger fence. */
   ok = ll_backend_acquire (
     B, a, &(ll_take_t){ { "op", 2, owner_a }, 60000, &holder, 0, 0, false, false }, &fence, &err);
   CHECK_OK (ok, err);
   CHECK_EQ (fence, 4);
   /* force_release of a live lease: taken; the fence survives. */
   ok = B->force_release (a, &(ll_op_t){ "op", 2, NULL }, &took, &err);
   CHECK_OK (ok, err);
   CHECK (took);
   ok = B->renew (a, &(ll_op_t){ "op", 2, owner_a }, 60000, &err);
   CHECK_ERR (ok, err, LEASELOCK_NOT_HELD, "not held");
   ok = B->force_release (a, &(ll_op_t){ "op", 2, NULL }, &took, &err);
   CHECK_OK (ok, err);
   CHECK (!took);
   ok = B->force_release (a, &(ll_op_t){ "none", 4, NULL }, &took, &err);
   CHECK_OK (ok, err);
   CHECK (!took);
   ok = B->inspect (a, &(ll_op_t){ "none", 4, NULL }, &rec, &found, &err);
   CHECK_OK (ok, err);
   CHECK (!found);
   ok = ll_backend_acquire (
     B, a, &(ll_take_t){ { "op", 2, owner_b }, 60000, &holder, 0, 0, false, false }, &fence, &err);
   CHECK_OK (ok, err);
   CHECK_EQ (fence, 5);
   B->close (a);
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
static char rsv_take (void *conn, const char *k, const char *owner, int64_t ttl_ms, int64_t *fence)
{
   leaselock_error_t err;
   int64_t f = 0;
   if (ll_backend_acquire (
         B, conn, &(ll_take_t){ { k, strlen (k), owner }, ttl_ms, &holder, 0, 0, false, false }, &f,
         &err)) {
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
static char rsv_wait (void *conn, const char *k, const char *owner, int64_t reserve_ms,
                      int64_t waited_ms, int64_t *fence)
{
   leaselock_error_t err;
   ll_taken_t out = { 0, true, -2 }; /* the backend must set reserved */
   const ll_take_t t = {
      { k, strlen (k), owner }, 10000, &holder, reserve_ms, waited_ms, false, false
   };
   bool ok = B->acquire_wait (conn, &t, &out, &err);
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

static bool rsv_release (void *conn, const char *k, const char *owner)
{
   leaselock_error_t err;
   return B->release (conn, &(ll_op_t){ k, strlen (k), owner }, 0, &err);
}

/* Runs a reservation test on a connection to uri, closed after. */
static void rsv_run (const char *uri, void (*body) (void *))
{
   leaselock_error_t err = { 0 };
   void *conn = B->open (uri, &err);
   CHECK_OK (conn != NULL, err);
   if (B->acquire_wait)
      body (conn);
   else
      tl_fail (__FILE__, __LINE__, "the backend has no acquire_wait");
   B->close (conn);
}

/* rsv_run on a new file. */
static void rsv_run_new (void (*body) (void *))
{
   char path[256], uri[320];
   new_db (path, sizeof path, uri, sizeof uri);
   rsv_run (uri, body);
}

/* A live reservation of waiter W blocks every other owner's acquire of the
 * released record, the old holder's too; W takes it (fence + 1), which
 * clears the reservation: X can then be next, and takes it after W. */
static void rsv_blocks_others (void *c)
{
   int64_t f1 = 0, f2 = 0, f3 = 0;
   CHECK_EQ (rsv_take (c, "k", RSV_H, 10000, &f1), 'T');
   CHECK_EQ (rsv_wait (c, "k", RSV_W, 2000, 0, NULL), 'R');
   CHECK_EQ (rsv_wait (c, "k", RSV_X, 2000, 0, NULL), 'B'); /* began later: W stays next */
   CHECK (rsv_release (c, "k", RSV_H));
   CHECK_EQ (rsv_take (c, "k", RSV_X, 10000, NULL), 'B');
   CHECK_EQ (rsv_take (c, "k", RSV_H, 10000, NULL), 'B');
   CHECK_EQ (rsv_take (c, "k", RSV_W, 10000, &f2), 'T');
   CHECK_EQ (f2, f1 + 1);
   CHECK_EQ (rsv_wait (c, "k", RSV_X, 2000, 0, NULL), 'R'); /* W's was cleared */
   CHECK (rsv_release (c, "k", RSV_W));
   CHECK_EQ (rsv_take (c, "k", RSV_H, 10000, NULL), 'B');
   CHECK_EQ (rsv_wait (c, "k", RSV_X, 2000, 0, &f3), 'T');
   CHECK_EQ (f3, f2 + 1);
   CHECK (rsv_release (c, "k", RSV_X));
}

/* A claim reports the record's time left by the database clock, so the
 * next owner sleeps no longer than that: while the key is held (ttl 10 s),
 * and after a release with min_hold, whose end nothing notifies. */
static void rsv_reports_left (void *c)
{
   leaselock_error_t err;
   CHECK_EQ (rsv_take (c, "k", RSV_H, 10000, NULL), 'T');
   CHECK_EQ (rsv_wait (c, "k", RSV_W, 2000, 0, NULL), 'R');
   CHECK (rsv_left > 8000 && rsv_left <= 10000);
   CHECK (B->release (c, &(ll_op_t){ "k", 1, RSV_H }, 3000, &err));
   CHECK_EQ (rsv_wait (c, "k", RSV_W, 2000, 0, NULL), 'R');
   CHECK (rsv_left > 1000 && rsv_left <= 3000);
   CHECK_EQ (rsv_wait (c, "k", RSV_X, 2000, 0, NULL), 'B');
}

static void test_reservation_blocks_others (void)
{
   rsv_run_new (rsv_blocks_others);
}

static void test_reservation_reports_left (void)
{
   rsv_run_new (rsv_reports_left);
}

/* A reservation past its until (by the database clock) blocks no more:
 * a younger waiter claims it, and anyone takes the released key. */
static void rsv_runs_out (void *c)
{
   CHECK_EQ (rsv_take (c, "k", RSV_H, 10000, NULL), 'T');
   CHECK_EQ (rsv_wait (c, "k", RSV_W, 300, 0, NULL), 'R');
   sleep_ms (450);
   CHECK_EQ (rsv_wait (c, "k", RSV_X, 1000, 0, NULL), 'R'); /* W's ran out */
   CHECK (rsv_release (c, "k", RSV_H));
   CHECK_EQ (rsv_take (c, "k", RSV_W, 10000, NULL), 'B');
   sleep_ms (1150);
   CHECK_EQ (rsv_take (c, "k", RSV_W, 10000, NULL), 'T'); /* X's ran out */
   CHECK_EQ (rsv_take (c, "k", RSV_X, 10000, NULL), 'B');
   CHECK (rsv_release (c, "k", RSV_W));
}

static void test_reservation_runs_out (void)
{
   rsv_run_new (rsv_runs_out);
}

/* An older waiter (larger waited) takes the reservation from a younger
 * one; the younger one does not take it back, and the older one keeps it
 * and takes the key. */
static void rsv_older_wins (void *c)
{
   CHECK_EQ (rsv_take (c, "k", RSV_H, 10000, NULL), 'T');
   CHECK_EQ (rsv_wait (c, "k", RSV_YOUNG, 2000, 0, NULL), 'R');
   CHECK_EQ (rsv_wait (c, "k", RSV_OLD, 2000, 5000, NULL), 'R');
   CHECK_EQ (rsv_wait (c, "k", RSV_YOUNG, 2000, 100, NULL), 'B');
   CHECK_EQ (rsv_wait (c, "k", RSV_OLD, 2000, 5000, NULL), 'R');
   CHECK (rsv_release (c, "k", RSV_H));
   CHECK_EQ (rsv_take (c, "k", RSV_YOUNG, 10000, NULL), 'B');
   CHECK_EQ (rsv_wait (c, "k", RSV_YOUNG, 2000, 200, NULL), 'B');
   CHECK_EQ (rsv_wait (c, "k", RSV_OLD, 2000, 5000, NULL), 'T');
   CHECK (rsv_release (c, "k", RSV_OLD));
}

static void test_reservation_older_waiter_wins (void)
{
   rsv_run_new (rsv_older_wins);
}

/* A plain acquire that is BUSY leaves no reservation: once the holder
 * releases, anyone takes the key. */
static void rsv_plain_never_reserves (void *c)
{
   CHECK_EQ (rsv_take (c, "k", RSV_H, 10000, NULL), 'T');
   CHECK_EQ (rsv_take (c, "k", RSV_X, 10000, NULL), 'B');
   CHECK (rsv_release (c, "k", RSV_H));
   CHECK_EQ (rsv_take (c, "k", RSV_W, 10000, NULL), 'T');
   CHECK (rsv_release (c, "k", RSV_W));
}

static void test_plain_acquire_never_reserves (void)
{
   rsv_run_new (rsv_plain_never_reserves);
}

/* prune keeps an expired record whose reservation is live (the one
 * beside it, without one, goes), and deletes it once the reservation
 * ran out. */
static void rsv_prune_keeps (void *c)
{
   leaselock_error_t err;
   leaselock_record_t rec;
   bool found = false;
   int64_t n = -1;
   CHECK_EQ (rsv_take (c, "p/reserved", RSV_H, 10000, NULL), 'T');
   CHECK_EQ (rsv_take (c, "p/free", RSV_H, 10000, NULL), 'T');
   CHECK_EQ (rsv_wait (c, "p/reserved", RSV_W, 1000, 0, NULL), 'R');
   CHECK (rsv_release (c, "p/reserved", RSV_H) && rsv_release (c, "p/free", RSV_H));
   CHECK_OK (B->prune (c, "p/", 2, 0, &n, &err), err);
   CHECK_EQ (n, 1);
   CHECK_OK (B->inspect (c, &(ll_op_t){ "p/reserved", 10, NULL }, &rec, &found, &err), err);
   CHECK (found);
   sleep_ms (1150);
   CHECK_OK (B->prune (c, "p/", 2, 0, &n, &err), err);
   CHECK_EQ (n, 1);
   CHECK_OK (B->inspect (c, &(ll_op_t){ "p/reserved", 10, NULL }, &rec, &found, &err), err);
   CHECK (!found);
}

static void test_prune_keeps_reserved (void)
{
   rsv_run_new (rsv_prune_keeps);
}

/* The owner's own retried acquire succeeds whatever the reservation:
 * while its lease is live, and after it expired with W's reservation
 * live. */
static void rsv_retry_wins (void *c)
{
   int64_t f1 = 0, f2 = 0, f3 = 0;
   CHECK_EQ (rsv_take (c, "k", RSV_H, 300, &f1), 'T');
   CHECK_EQ (rsv_wait (c, "k", RSV_W, 3000, 0, NULL), 'R');
   CHECK_EQ (rsv_take (c, "k", RSV_H, 300, &f2), 'T');
   CHECK_EQ (f2, f1 + 1);
   CHECK_EQ (rsv_wait (c, "k", RSV_W, 3000, 0, NULL), 'R');
   sleep_ms (400); /* H's lease expired; W's reservation is live */
   CHECK_EQ (rsv_take (c, "k", RSV_X, 10000, NULL), 'B');
   CHECK_EQ (rsv_take (c, "k", RSV_H, 10000, &f3), 'T');
   CHECK_EQ (f3, f2 + 1);
   CHECK (rsv_release (c, "k", RSV_H));
}

static void test_retry_beats_reservation (void)
{
   rsv_run_new (rsv_retry_wins);
}

/* Schema version 1 as it was created (stmt_sqlite.c before the
 * reservation), with one released record "old" at fence 7. */
static const char V1_FILE[] =
  "CREATE TABLE leaselock_locks (key TEXT NOT NULL PRIMARY KEY, owner TEXT NOT NULL DEFAULT '', "
  "fence INTEGER NOT NULL, acquired_at INTEGER NOT NULL, expires_at INTEGER NOT NULL, "
  "host TEXT NOT NULL DEFAULT '', pid INTEGER NOT NULL DEFAULT 0, "
  "label TEXT NOT NULL DEFAULT '') WITHOUT ROWID; "
  "INSERT INTO leaselock_locks VALUES ('old', '', 7, 1000, 2000, 'old-host', 1, 'old-label'); "
  "PRAGMA user_version = 1";

/* On the migrated file: its record kept and unreserved (the new columns
 * read NULL), and reservations work. */
static void rsv_on_migrated (void *c)
{
   leaselock_error_t err;
   leaselock_record_t rec;
   bool found = false;
   int64_t f = 0;
   CHECK_OK (B->inspect (c, &(ll_op_t){ "old", 3, NULL }, &rec, &found, &err), err);
   CHECK (found && rec.fence == 7 && !rec.owner[0] && !strcmp (rec.label, "old-label"));
   CHECK_EQ (rsv_wait (c, "old", RSV_W, 2000, 0, &f), 'T');
   CHECK_EQ (f, 8);
   CHECK_EQ (rsv_wait (c, "old", RSV_X, 2000, 0, NULL), 'R');
   CHECK (rsv_release (c, "old", RSV_W));
   CHECK_EQ (rsv_take (c, "old", RSV_H, 10000, NULL), 'B');
   CHECK_EQ (rsv_take (c, "old", RSV_X, 10000, &f), 'T');
   CHECK_EQ (f, 9);
}

/* A version-1 file is migrated in place on open: version 2 recorded, the
 * three columns added, and it works. */
static void test_migrate_v1 (void)
{
   char path[256], uri[320];
   new_db (path, sizeof path, uri, sizeof uri);
   sqlite3 *db = NULL;
   CHECK (sqlite3_open (path, &db) == SQLITE_OK);
   int rc = sqlite3_exec (db, V1_FILE, NULL, NULL, NULL);
   sqlite3_close (db);
   CHECK_EQ (rc, SQLITE_OK);
   CHECK_EQ (raw_int (path, "PRAGMA user_version"), 1);
   CHECK_CALL (rsv_run (uri, rsv_on_migrated));
   CHECK_EQ (raw_int (path, "PRAGMA user_version"), LL_SQLITE_SCHEMA_VERSION);
   CHECK_EQ (raw_int (path, "SELECT count(*) FROM pragma_table_info('leaselock_locks') "
                            "WHERE name IN ('next_owner', 'next_until', 'next_since', 'holds')"),
             4);
   CHECK_EQ (raw_int (path, "SELECT count(*) FROM sqlite_schema WHERE name IN "
                            "('leaselock_queue', 'leaselock_queue_order')"),
             2);
   /* Opened again: nothing more to do. */
   CHECK_CALL (rsv_run (uri, rsv_plain_never_reserves));
}

/* ---- the fair mode's queue ---------------------------------------------- */

/* The file the queue cases run on (q_new). */
static char qpath[256], quri[320];

static void q_new (void)
{
   new_db (qpath, sizeof qpath, quri, sizeof quri);
}

/* The entries stored for k in qpath, run-out ones too. */
static long long q_rows (const char *k)
{
   sqlite3 *db = NULL;
   sqlite3_stmt *st = NULL;
   long long v = -1;
   if (sqlite3_open_v2 (qpath, &db, SQLITE_OPEN_READWRITE, NULL) == SQLITE_OK &&
       sqlite3_prepare_v2 (db, "SELECT count(*) FROM leaselock_queue WHERE key = ?1", -1, &st,
                           NULL) == SQLITE_OK) {
      sqlite3_bind_text (st, 1, k, -1, SQLITE_STATIC);
      if (sqlite3_step (st) == SQLITE_ROW)
         v = sqlite3_column_int64 (st, 0);
   }
   sqlite3_finalize (st);
   sqlite3_close (db);
   return v;
}

#define Q_TEST(name)                                                                               \
   static void test_queue_##name (void)                                                            \
   {                                                                                               \
      q_new ();                                                                                    \
      qc_run (quri, qc_##name, q_rows);                                                            \
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
   q_new ();
   qc_concurrent_joins (quri);
}

/* Schema version 2 as it was created (stmt_sqlite.c before the queue), with
 * one released record "old" at fence 7. */
static const char V2_FILE[] =
  "CREATE TABLE leaselock_locks (key TEXT NOT NULL PRIMARY KEY, owner TEXT NOT NULL DEFAULT '', "
  "fence INTEGER NOT NULL, acquired_at INTEGER NOT NULL, expires_at INTEGER NOT NULL, "
  "host TEXT NOT NULL DEFAULT '', pid INTEGER NOT NULL DEFAULT 0, "
  "label TEXT NOT NULL DEFAULT '', next_owner TEXT NULL, next_until INTEGER NULL, "
  "next_since INTEGER NULL) WITHOUT ROWID; "
  "INSERT INTO leaselock_locks VALUES ('old', '', 7, 1000, 2000, 'old-host', 1, 'old-label', "
  "NULL, NULL, NULL); "
  "PRAGMA user_version = 2";

/* On a migrated version-2 file: the record kept, and the queue works. */
static void q_on_migrated (const ll_backend_t *b, void *c, qc_rows_fn rows)
{
   leaselock_error_t err;
   leaselock_record_t rec;
   bool found = false;
   int64_t f = 0;
   CHECK_OK (b->inspect (c, &(ll_op_t){ "old", 3, NULL }, &rec, &found, &err), err);
   CHECK (found && rec.fence == 7 && !rec.owner[0] && !strcmp (rec.label, "old-label"));
   CHECK_EQ (QJ (b, c, "old", QC_A, 10000), 0);
   CHECK_EQ (QJ (b, c, "old", QC_B, 10000), 1);
   CHECK_EQ (rows ("old"), 2);
   CHECK_OK (
     ll_backend_acquire (
       b, c, &(ll_take_t){ { "old", 3, QC_B }, 10000, &holder, 0, 0, false, false }, &f, &err),
     err);
   CHECK_EQ (f, 8);
}

static bool q_make_v2 (const char *path)
{
   sqlite3 *db = NULL;
   bool ok = sqlite3_open (path, &db) == SQLITE_OK &&
             sqlite3_exec (db, V2_FILE, NULL, NULL, NULL) == SQLITE_OK;
   sqlite3_close (db);
   return ok;
}

/* A version-2 file is migrated in place on open: the queue table and its
 * index (version 3), the hold count (version 4), the records kept. */
static void test_migrate_v2 (void)
{
   q_new ();
   CHECK (q_make_v2 (qpath));
   CHECK_EQ (raw_int (qpath, "PRAGMA user_version"), 2);
   CHECK_CALL (qc_run (quri, q_on_migrated, q_rows));
   CHECK_EQ (raw_int (qpath, "PRAGMA user_version"), LL_SQLITE_SCHEMA_VERSION);
   CHECK_EQ (raw_int (qpath, "SELECT count(*) FROM sqlite_schema WHERE name IN "
                             "('leaselock_queue', 'leaselock_queue_order')"),
             2);
   CHECK_EQ (raw_int (qpath, "SELECT count(*) FROM leaselock_locks"), 1);
   /* Version 4: the hold count, 1 for the records there were. */
   CHECK_EQ (raw_int (qpath, "SELECT holds FROM leaselock_locks"), 1);
   /* Opened again: nothing more to do, the queue kept. */
   leaselock_error_t err;
   void *c = B->open (quri, &err);
   CHECK_OK (c != NULL, err);
   int64_t ahead = qc_join (B, c, "old", 3, QC_C, 10000);
   B->close (c);
   CHECK_EQ (ahead, 2);
}

/* Several processes opening one version-2 file at once all succeed, and
 * it ends at version 3 with its record and one queue table. */
static void test_concurrent_migration_v2 (void)
{
   q_new ();
   CHECK (q_make_v2 (qpath));
   int fds[2], failed = 0;
   CHECK (pipe (fds) == 0);
   pid_t pids[6];
   for (int i = 0; i < 6; i++) {
      if ((pids[i] = fork ()) == 0) {
         char ch, owner[LEASELOCK_OWNER_LEN + 1];
         close (fds[1]);
         if (read (fds[0], &ch, 1) < 0) /* all start together */
            _exit (4);
         snprintf (owner, sizeof owner, "%032d", i);
         leaselock_error_t err;
         void *c = B->open (quri, &err);
         bool ok =
           c && B->queue_join (c, &(ll_op_t){ "old", 3, owner }, 10000, &(int64_t){ 0 }, &err);
         if (!ok)
            fprintf (stderr, "    child: %s %s\n", leaselock_code_name (err.code), err.message);
         if (c)
            B->close (c);
         _exit (ok ? 0 : 1);
      }
   }
   close (fds[0]);
   sleep_ms (200);
   close (fds[1]);
   for (int i = 0; i < 6; i++) {
      int st;
      waitpid (pids[i], &st, 0);
      failed += !WIFEXITED (st) || WEXITSTATUS (st) != 0;
   }
   CHECK_EQ (failed, 0);
   CHECK_EQ (raw_int (qpath, "PRAGMA user_version"), LL_SQLITE_SCHEMA_VERSION);
   CHECK_EQ (raw_int (qpath, "SELECT count(*) FROM leaselock_locks"), 1);
   CHECK_EQ (q_rows ("old"), 6);
}

/* ---- the files' modes -------------------------------------------------- */

/* The mode of path & 07777, or -1 when it is missing. */
static int mode_of (const char *path)
{
   struct stat st;
   return stat (path, &st) == 0 ? (int)(st.st_mode & 07777) : -1;
}

/* Under umask u, a database at <tmp>/<name>/a/b/locks.db: the missing
 * directories and the file, then its -wal and -shm (while a lease is held)
 * and -wake (a listener's) are made with *dir_mode and *file_mode. */
static void modes_under_umask (mode_t u, const char *name, int *dir_mode, int *file_mode)
{
   char dir[512], file[600], uri[640], side[640];
   snprintf (dir, sizeof dir, "%s/%s/a", tmp, name);
   snprintf (file, sizeof file, "%s/b/locks.db", dir);
   snprintf (uri, sizeof uri, "sqlite://%s", file);
   mode_t old = umask (u);
   leaselock_error_t err = { 0 };
   leaselock_client_t *c = leaselock_client_new (uri, NULL, &err);
   leaselock_lease_t *l = NULL;
   bool ok = c && leaselock_acquire (c, "modes", 5, NULL, &l, &err);
   void *listener = ok ? B->watch_open (uri, "00", &err) : NULL;
   umask (old);
   CHECK_OK (ok && listener, err);
   *dir_mode = mode_of (dir);
   snprintf (side, sizeof side, "%s/b", dir);
   CHECK_EQ (mode_of (side), *dir_mode);
   *file_mode = mode_of (file);
   static const char *const sides[] = { "-wal", "-shm", "-wake" };
   for (int i = 0; i < 3; i++) {
      snprintf (side, sizeof side, "%s%s", file, sides[i]);
      CHECK_EQ (mode_of (side), *file_mode);
   }
   if (listener)
      B->watch_close (listener);
   if (l)
      leaselock_lease_release (l, &err);
   leaselock_lease_destroy (l);
   leaselock_client_destroy (c);
}

/* The directories and files a database is made of follow the umask (0775
 * and 0666 less it), so that a group can share one (umask 002); they were
 * 0700 and 0644 whatever the umask, which kept every other user out. A
 * directory is never made writable by others, whatever the umask. */
static void test_new_files_follow_umask (void)
{
   int dir_mode, file_mode;
   modes_under_umask (002, "um002", &dir_mode, &file_mode);
   CHECK_EQ (dir_mode, 0775);
   CHECK_EQ (file_mode, 0664);
   modes_under_umask (077, "um077", &dir_mode, &file_mode);
   CHECK_EQ (dir_mode, 0700);
   CHECK_EQ (file_mode, 0600);
   modes_under_umask (0, "um000", &dir_mode, &file_mode);
   CHECK_EQ (dir_mode, 0775);
   CHECK_EQ (file_mode, 0666);
}

/* ---- several openers at once ------------------------------------------- */

#define OPEN_THREADS 6
#define OPEN_PROCS 3

typedef struct
{
   const char *uri;
   int idx;
   bool ok;
   leaselock_error_t err;
} opener_t;

/* Opens the (new) file and acquires its own key. */
static bool open_and_use (const char *uri, int idx, leaselock_error_t *err)
{
   void *a = B->open (uri, err);
   if (!a)
      return false;
   char key[32];
   snprintf (key, sizeof key, "opener-%d", idx);
   int64_t fence;
   bool ok = ll_backend_acquire (
     B, a, &(ll_take_t){ { key, strlen (key), owner_a }, 60000, &holder, 0, 0, false, false },
     &fence, err);
   B->close (a);
   return ok;
}

static void *opener_main (void *arg)
{
   opener_t *o = arg;
   o->ok = open_and_use (o->uri, o->idx, &o->err);
   return NULL;
}

static void test_concurrent_first_open (void)
{
   char path[256], uri[320];
   new_db (path, sizeof path, uri, sizeof uri);
   pid_t pids[OPEN_PROCS];
   for (int i = 0; i < OPEN_PROCS; i++) {
      pids[i] = fork ();
      if (pids[i] == 0) {
         leaselock_error_t err;
         bool ok = open_and_use (uri, 100 + i, &err);
         if (!ok)
            fprintf (stderr, "    child %d: %s\n", i, err.message);
         _exit (ok ? 0 : 1);
      }
   }
   opener_t o[OPEN_THREADS];
   pthread_t th[OPEN_THREADS];
   for (int i = 0; i < OPEN_THREADS; i++) {
      o[i] = (opener_t){ .uri = uri, .idx = i };
      pthread_create (&th[i], NULL, opener_main, &o[i]);
   }
   for (int i = 0; i < OPEN_THREADS; i++)
      pthread_join (th[i], NULL);
   int children_ok = 0;
   for (int i = 0; i < OPEN_PROCS; i++) {
      int status = 0;
      if (pids[i] > 0 && waitpid (pids[i], &status, 0) == pids[i] && WIFEXITED (status) &&
          WEXITSTATUS (status) == 0)
         children_ok++;
   }
   for (int i = 0; i < OPEN_THREADS; i++)
      CHECK_OK (o[i].ok, o[i].err);
   CHECK_EQ (children_ok, OPEN_PROCS);
   CHECK_EQ (raw_int (path, "SELECT count(*) FROM leaselock_locks"), OPEN_THREADS + OPEN_PROCS);
   CHECK_EQ (raw_int (path, "PRAGMA user_version"), LL_SQLITE_SCHEMA_VERSION);
}

/* ---- fork -------------------------------------------------------------- */

static void test_fork_abandon (void)
{
   char path[256], uri[320];
   new_db (path, sizeof path, uri, sizeof uri);
   leaselock_error_t err = { 0 };
   void *a = B->open (uri, &err);
   CHECK_OK (a != NULL, err);
   int64_t fence;
   bool ok = ll_backend_acquire (
     B, a, &(ll_take_t){ { "parent", 6, owner_a }, 60000, &holder, 0, 0, false, false }, &fence,
     &err);
   if (!ok)
      B->close (a);
   CHECK_OK (ok, err);
   pid_t pid = fork ();
   if (pid == 0) {
      /* The child drops the parent's connection without touching it and
       * works on its own. */
      B->abandon (a);
      leaselock_error_t cerr;
      void *mine = B->open (uri, &cerr);
      bool cok =
        mine &&
        ll_backend_acquire (
          B, mine, &(ll_take_t){ { "child", 5, owner_b }, 60000, &holder, 0, 0, false, false },
          &fence, &cerr);
      bool busy =
        mine &&
        !ll_backend_acquire (
          B, mine, &(ll_take_t){ { "parent", 6, owner_b }, 60000, &holder, 0, 0, false, false },
          &fence, &cerr) &&
        cerr.code == LEASELOCK_BUSY;
      if (mine)
         B->close (mine);
      _exit (cok && busy ? 0 : 1);
   }
   int status = 0;
   waitpid (pid, &status, 0);
   /* The parent's connection still works. */
   ok = B->release (a, &(ll_op_t){ "parent", 6, owner_a }, 0, &err);
   bool child_there = false;
   leaselock_record_t rec;
   bool iok = B->inspect (a, &(ll_op_t){ "child", 5, NULL }, &rec, &child_there, &err);
   B->close (a);
   CHECK (WIFEXITED (status) && WEXITSTATUS (status) == 0);
   CHECK_OK (ok, err);
   CHECK_OK (iok, err);
   CHECK (child_there);
   CHECK (!strcmp (rec.owner, owner_b));
}

/* A forked child using the public API gets its own connection and cannot
 * release the parent's lease. */
static void test_fork_client (void)
{
   char path[256], uri[320];
   new_db (path, sizeof path, uri, sizeof uri);
   leaselock_error_t err = { 0 };
   leaselock_client_t *c = leaselock_client_new (uri, NULL, &err);
   CHECK_OK (c != NULL, err);
   leaselock_acquire_opts_t o;
   leaselock_acquire_opts_init (&o);
   o.auto_renew = false;
   leaselock_lease_t *l = NULL;
   bool ok = leaselock_acquire (c, "p", 1, &o, &l, &err);
   if (!ok)
      leaselock_client_destroy (c);
   CHECK_OK (ok, err);
   pid_t pid = fork ();
   if (pid == 0) {
      leaselock_error_t cerr;
      bool rel = leaselock_lease_release (l, &cerr);
      leaselock_lease_t *mine = NULL;
      bool busy = !leaselock_acquire (c, "p", 1, &o, &mine, &cerr) && cerr.code == LEASELOCK_BUSY;
      bool own = leaselock_acquire (c, "q", 1, &o, &mine, &cerr);
      leaselock_lease_destroy (mine);
      _exit (!rel && busy && own ? 0 : 1);
   }
   int status = 0;
   waitpid (pid, &status, 0);
   ok = leaselock_lease_release (l, &err);
   leaselock_lease_destroy (l);
   leaselock_client_destroy (c);
   CHECK (WIFEXITED (status) && WEXITSTATUS (status) == 0);
   CHECK_OK (ok, err);
   CHECK_EQ (raw_int (path, "SELECT fence FROM leaselock_locks WHERE key = 'q'"), 1);
}

static bool one_try (leaselock_client_t *c, const char *k, leaselock_lease_t **l,
                     leaselock_error_t *err)
{
   leaselock_acquire_opts_t o;
   leaselock_acquire_opts_init (&o);
   o.ttl_ms = 60000;
   o.auto_renew = false;
   return leaselock_acquire (c, k, strlen (k), &o, l, err);
}

/* A byte through a pipe, so parent and child take turns. */
static void send_byte (int fd)
{
   char b = 1;
   if (write (fd, &b, 1) != 1)
      _exit (3);
}

static bool recv_byte (int fd)
{
   char b;
   return read (fd, &b, 1) == 1;
}

/* The parent's SQLite connections must not outlive fork() into the child:
 * SQLite keeps each file's locks in process memory, so a child's new
 * connection would take the parent's locks for its own, and the parent
 * closing its last connection would checkpoint and delete the WAL the
 * child still writes to. Then a third connection would not see the
 * child's lease at all. */
static void test_fork_parent_closes (void)
{
   char path[256], uri[320];
   new_db (path, sizeof path, uri, sizeof uri);
   leaselock_error_t err = { 0 };
   leaselock_client_t *c = leaselock_client_new (uri, "parent", &err);
   CHECK_OK (c != NULL, err);
   leaselock_lease_t *l = NULL;
   bool ok = one_try (c, "warm", &l, &err); /* the pool holds a connection now */
   leaselock_lease_destroy (l);
   if (!ok)
      leaselock_client_destroy (c);
   CHECK_OK (ok, err);
   int to_child[2], to_parent[2];
   CHECK (pipe (to_child) == 0 && pipe (to_parent) == 0);
   pid_t pid = fork ();
   if (pid == 0) {
      alarm (30);
      leaselock_lease_t *x = NULL, *y = NULL;
      leaselock_error_t cerr;
      if (!one_try (c, "x", &x, &cerr))
         _exit (4);
      send_byte (to_parent[1]); /* holds x */
      if (!recv_byte (to_child[0]))
         _exit (5);
      if (!one_try (c, "y", &y, &cerr))
         _exit (6);
      send_byte (to_parent[1]); /* holds y */
      recv_byte (to_child[0]);
      bool rel = leaselock_lease_release (y, &cerr) && leaselock_lease_release (x, &cerr);
      _exit (rel ? 0 : 7);
   }
   bool step1 = recv_byte (to_parent[0]);
   leaselock_client_destroy (c); /* the parent's last connection closes */
   send_byte (to_child[1]);
   bool step2 = recv_byte (to_parent[0]);
   /* A third process, new (this one may keep SQLite state of the file). */
   char cmd[800];
   snprintf (cmd, sizeof cmd, "/proc/%d/exe --try '%s' y", (int)getpid (), uri);
   int third = system (cmd);
   send_byte (to_child[1]);
   int status = 0;
   waitpid (pid, &status, 0);
   for (int i = 0; i < 2; i++) {
      close (to_child[i]);
      close (to_parent[i]);
   }
   CHECK (step1 && step2);
   CHECK (WIFEXITED (third));
   CHECK_EQ (WEXITSTATUS (third), 10); /* BUSY */
   CHECK (WIFEXITED (status) && WEXITSTATUS (status) == 0);
}

static atomic_bool hammer_stop;

static void *hammer (void *arg)
{
   leaselock_client_t *c = arg;
   while (!atomic_load (&hammer_stop)) {
      leaselock_lease_t *l = NULL;
      leaselock_error_t err;
      if (one_try (c, "hammer", &l, &err))
         leaselock_lease_release (l, &err);
      leaselock_lease_destroy (l);
   }
   return NULL;
}

/* fork() while another thread is inside SQLite: the child must not inherit
 * SQLite's mutexes locked (it would hang on its first allocation). The
 * engine's prepare handler waits for calls in flight. */
static void test_fork_while_busy (void)
{
   char path[256], uri[320];
   new_db (path, sizeof path, uri, sizeof uri);
   leaselock_error_t err = { 0 };
   leaselock_client_t *c = leaselock_client_new (uri, "busy", &err);
   CHECK_OK (c != NULL, err);
   atomic_store (&hammer_stop, false);
   pthread_t t;
   pthread_create (&t, NULL, hammer, c);
   int hung = 0, failed = 0;
   for (int i = 0; i < 60; i++) {
      sleep_ms (1 + i % 3);
      pid_t pid = fork ();
      if (pid == 0) {
         alarm (20);
         char k[32];
         snprintf (k, sizeof k, "child-%d", i);
         leaselock_lease_t *l = NULL;
         leaselock_error_t cerr;
         /* A wait, not one try: the hammer keeps the file's write lock
          * nearly all the time, and a one-try acquire waits for it only a
          * moment (test_locked_file_bounded). */
         leaselock_acquire_opts_t o;
         leaselock_acquire_opts_init (&o);
         o.timeout_ms = 15000;
         o.auto_renew = false;
         bool ok = leaselock_acquire (c, k, strlen (k), &o, &l, &cerr) &&
                   leaselock_lease_release (l, &cerr);
         if (!ok)
            fprintf (stderr, "    child: %s\n", cerr.message);
         _exit (ok ? 0 : 1);
      }
      int status = 0;
      waitpid (pid, &status, 0);
      if (WIFSIGNALED (status))
         hung++;
      else if (!WIFEXITED (status) || WEXITSTATUS (status) != 0)
         failed++;
   }
   atomic_store (&hammer_stop, true);
   pthread_join (t, NULL);
   leaselock_client_destroy (c);
   CHECK_EQ (hung, 0);
   CHECK_EQ (failed, 0);
}

/* test_sqlite --try URI KEY: one try on KEY in a process of its own; exits
 * 0 when acquired, 10 when BUSY, 1 otherwise. */
static int try_mode (const char *uri, const char *k)
{
   leaselock_error_t err;
   leaselock_client_t *c = leaselock_client_new (uri, "third", &err);
   leaselock_lease_t *l = NULL;
   bool ok = c && one_try (c, k, &l, &err);
   if (!ok && err.code != LEASELOCK_BUSY)
      fprintf (stderr, "    --try %s: %s %s\n", k, leaselock_code_name (err.code), err.message);
   leaselock_lease_destroy (l);
   leaselock_client_destroy (c);
   return ok ? 0 : err.code == LEASELOCK_BUSY ? 10 : 1;
}

/* ---- the file locked by another process; the channel file ------------- */

/* A child that holds BEGIN EXCLUSIVE on path until *fd_out is closed;
 * returns its pid once the lock is taken. */
static pid_t hold_file_lock (const char *path, int *fd_out)
{
   int up[2], down[2];
   if (pipe (up) != 0 || pipe (down) != 0)
      return -1;
   pid_t pid = fork ();
   if (pid == 0) {
      close (up[0]);
      close (down[1]);
      sqlite3 *db = NULL;
      int rc = sqlite3_open (path, &db);
      if (rc == SQLITE_OK)
         rc = sqlite3_exec (db, "BEGIN EXCLUSIVE", NULL, NULL, NULL);
      char b = rc == SQLITE_OK;
      if (write (up[1], &b, 1) != 1 || !b)
         _exit (1);
      (void)!read (down[0], &b, 1); /* until the parent closes it */
      _exit (0);
   }
   close (up[1]);
   close (down[0]);
   char b = 0;
   bool locked = read (up[0], &b, 1) == 1 && b;
   close (up[0]);
   *fd_out = down[1];
   return locked ? pid : -1;
}

static atomic_int lock_wait_warnings;

static void count_lock_waits (const leaselock_log_event_t *ev, void *data)
{
   (void)data;
   if (ev->level == LEASELOCK_LOG_WARNING && !strcmp (ev->event, "lock_wait"))
      atomic_fetch_add (&lock_wait_warnings, 1);
}

/* A wait on the file's lock is waiting: a one-try acquire answers BUSY at
 * once, one with a timeout TIMEOUT when it runs out, each logged once at
 * WARNING; not BACKEND after busy_timeout_ms. */
static void test_locked_file_bounded (void)
{
   char path[PATH_MAX], uri[PATH_MAX + 16];
   new_db (path, sizeof path, uri, sizeof uri);
   leaselock_error_t err;
   leaselock_client_t *c = leaselock_client_new (uri, "t", &err);
   CHECK_OK (c != NULL, err);
   leaselock_lease_t *l = NULL;
   CHECK_OK (one_try (c, "warm", &l, &err), err); /* the schema and a connection */
   CHECK_OK (leaselock_lease_release (l, &err), err);
   leaselock_lease_destroy (l);
   leaselock_client_set_log (c, LEASELOCK_LOG_WARNING, count_lock_waits, NULL);
   int fd = -1;
   pid_t pid = hold_file_lock (path, &fd);
   CHECK (pid > 0);
   double t0 = tl_seconds ();
   l = NULL;
   CHECK_ERR (one_try (c, "k", &l, &err), err, LEASELOCK_BUSY, "locked by another connection");
   CHECK (tl_seconds () - t0 < 0.5);
   leaselock_acquire_opts_t o;
   leaselock_acquire_opts_init (&o);
   o.timeout_ms = 1000;
   t0 = tl_seconds ();
   CHECK_ERR (leaselock_acquire (c, "k", 1, &o, &l, &err), err, LEASELOCK_TIMEOUT, "");
   double took = tl_seconds () - t0;
   CHECK (took > 0.9 && took < 2.5);
   CHECK_EQ (atomic_load (&lock_wait_warnings), 2);
   /* A mode's waiting acquire waits too, within its timeout. */
   o.timeout_ms = 500;
   t0 = tl_seconds ();
   CHECK_ERR (leaselock_rwlock_acquire (c, "rw", 2, LEASELOCK_SHARED, &o, &l, &err), err,
              LEASELOCK_TIMEOUT, "");
   CHECK_ERR (leaselock_semaphore_acquire (c, "sem", 3, 2, &o, &l, &err), err, LEASELOCK_TIMEOUT,
              "");
   took = tl_seconds () - t0;
   CHECK (took > 0.9 && took < 3);
   close (fd);
   waitpid (pid, NULL, 0);
   CHECK_OK (one_try (c, "k", &l, &err), err);
   CHECK_OK (leaselock_lease_release (l, &err), err);
   leaselock_lease_destroy (l);
   leaselock_client_destroy (c);
}

/* ---- hand-off by notification (notify_cases.c) -------------------------- */

/* The channel file removed: the listener breaks and makes a new one. */
void nt_break_listener (const char *uri)
{
   (void)nt_remove_wake (uri);
}

/* <db>-wake beside the database. */
bool nt_wake_path (const char *uri, char *buf, size_t size)
{
   snprintf (buf, size, "%s-wake", uri + strlen ("sqlite://"));
   return true;
}

/* A listener here is an inotify watch in the client's process: the test
 * reads the client's watcher instead. */
int nt_listeners (void)
{
   return -1;
}

static char notify_uri[PATH_MAX + 16];

int main (int argc, char **argv)
{
   if (argc == 4 && !strcmp (argv[1], "--try"))
      return try_mode (argv[2], argv[3]);
   if (argc > 1) {
      snprintf (tmp, sizeof tmp, "%s", argv[1]);
      mkdir (tmp, 0700);
   } else {
      snprintf (tmp, sizeof tmp, "/tmp/leaselock-test-sqlite.XXXXXX");
      if (!mkdtemp (tmp)) {
         perror ("mkdtemp");
         return 2;
      }
   }
   RUN (test_uri_refused);
   RUN (test_uri_busy_timeout_option);
   RUN (test_schema_created_once);
   RUN (test_wal_kept_bounded);
   RUN (test_schema_newer_refused);
   RUN (test_not_a_database);
   RUN (test_unwritable_paths);
   RUN (test_keys_verbatim);
   RUN (test_prefix_no_wildcards);
   RUN (test_ops_by_sqlite_clock);
   RUN (test_reservation_blocks_others);
   RUN (test_reservation_reports_left);
   RUN_SLOW (test_reservation_runs_out);
   RUN (test_reservation_older_waiter_wins);
   RUN (test_plain_acquire_never_reserves);
   RUN_SLOW (test_prune_keeps_reserved);
   RUN (test_retry_beats_reservation);
   RUN (test_migrate_v1);
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
   RUN (test_migrate_v2);
   RUN (test_concurrent_migration_v2);
   RUN (test_new_files_follow_umask);
   RUN (test_concurrent_first_open);
   RUN (test_fork_abandon);
   RUN (test_fork_client);
   RUN (test_fork_parent_closes);
   RUN_SLOW (test_fork_while_busy);
   RUN (test_locked_file_bounded);
   char notify_path[PATH_MAX];
   new_db (notify_path, sizeof notify_path, notify_uri, sizeof notify_uri);
   tl_start ("sqlite", notify_uri);
   notify_cases_run ();
   int rc = tl_summary ("sqlite");
   if (argc <= 1 && rc == 0) {
      char cmd[600];
      snprintf (cmd, sizeof cmd, "rm -rf '%s'", tmp);
      if (system (cmd) != 0)
         fprintf (stderr, "could not remove %s\n", tmp);
   }
   return rc;
}
