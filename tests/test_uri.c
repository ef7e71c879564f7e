/*
 * test_uri.c - the core's unit tests, which need no backend and run once:
 * URI redaction, the scrubbing of driver messages (regression tests for
 * passwords that reached error messages, each through
 * leaselock_client_new with no server contacted: PostgreSQL and MySQL are
 * pointed at a socket in a directory that does not exist, MongoDB fails
 * while parsing), malformed URIs, the duration parser, the default URI and
 * owner tokens. What every backend must do is tests/test_contract.c.
 */
#include "leaselock.h"
#include "ll_internal.h"
#include "testlib.h"

#include <pthread.h>
#include <pwd.h>
#include <sys/wait.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The error of a client that cannot be created. */
static leaselock_error_t open_error (const char *uri)
{
   leaselock_error_t err;
   memset (&err, 0, sizeof err);
   leaselock_client_t *c = leaselock_client_new (uri, NULL, &err);
   if (c) {
      leaselock_client_destroy (c);
      snprintf (err.message, sizeof err.message, "(the client was created)");
      err.code = LEASELOCK_OK;
   }
   return err;
}

static bool shows (const char *text, const char *secret)
{
   if (strstr (text, secret)) {
      fprintf (stderr, "    \"%s\" shows \"%s\"\n", text, secret);
      return true;
   }
   return false;
}

static void redacts (const char *uri, const char *const *secrets)
{
   char out[512];
   ll_uri_redact (uri, out, sizeof out);
   for (const char *const *s = secrets; *s; s++)
      CHECK (!shows (out, *s));
}

/* An '@' in the query made the redactor stop early and copy later options. */
static void test_redact_at_in_query (void)
{
   redacts ("postgresql://u:pw1x@h/db?application_name=a@b&password=SECRETa&sslpassword=SECRETb",
            (const char *const[]){ "pw1x", "SECRETa", "SECRETb", NULL });
   redacts ("postgresql://h?application_name=a@b&password=SECRETc",
            (const char *const[]){ "SECRETc", NULL });
   redacts ("postgresql://u:pw2x@h?application_name=a@b&password=SECRETd",
            (const char *const[]){ "pw2x", "SECRETd", NULL });
   char out[512];
   ll_uri_redact ("postgresql://u:pw@h:5/db?application_name=a@b", out, sizeof out);
   CHECK (!strcmp (out, "postgresql://u:***@h:5/db?application_name=a@b"));
}

/* libpq decodes option names: pass%77ord is password. */
static void test_redact_encoded_names (void)
{
   redacts ("postgresql://h/db?pass%77ord=SECRETe&%73slpassword=SECRETf&PASSWORD=SECRETg",
            (const char *const[]){ "SECRETe", "SECRETf", "SECRETg", NULL });
}

/* Text that libpq or libmongoc reads as part of a password. */
static void test_redact_driver_splits (void)
{
   /* libpq: '?' and '#' do not end the user info, only '@' and '/' do. */
   redacts ("postgresql://u:SECRETh?x#y@h/db", (const char *const[]){ "SECRETh", NULL });
   /* libmongoc: a backslash escapes the next character, even '/'. */
   redacts ("mongodb://u:SEC\\/RETi@h/db", (const char *const[]){ "RETi", NULL });
   /* keyword/value text is not a URI but may still hold a password. */
   redacts ("host=h password=SECRETj", (const char *const[]){ "SECRETj", NULL });
}

/* leaselock split the user info at the last '@', the drivers at the
 * first: such URIs are refused, and the message hides both readings. */
static void test_refuse_second_at (void)
{
   const char *uris[] = { "mysql://u:SECRETk@evil.example@127.0.0.1/db",
                          "postgresql://u:SECRETk@evil.example@127.0.0.1:1/db",
                          "mongodb://u:SECRETk@evil.example@127.0.0.1:1/",
                          "postgresql://h?application_name=a@b&password=SECRETk" };
   for (size_t i = 0; i < sizeof uris / sizeof uris[0]; i++) {
      leaselock_error_t err = open_error (uris[i]);
      CHECK_EQ (err.code, LEASELOCK_INVALID);
      CHECK (strstr (err.message, "%40"));
      CHECK (!shows (err.message, "SECRETk"));
      CHECK (!shows (err.message, "evil"));
   }
   ll_uri_t u;
   leaselock_error_t err;
   CHECK (ll_uri_parse ("mysql://u:p%40ss@h/db", &u, &err));
   CHECK (!strcmp (u.password, "p@ss"));
   CHECK (!strcmp (u.host, "h"));
   ll_uri_cleanup (&u);
}

/* libmongoc's own URI errors quote the password. */
static void test_mongo_driver_error_scrubbed (void)
{
   leaselock_error_t err = open_error ("mongodb://u:SEC:RETm@localhost/");
   if (err.code == LEASELOCK_UNSUPPORTED)
      return;
   CHECK_EQ (err.code, LEASELOCK_INVALID);
   CHECK (!shows (err.message, "SEC:RETm"));
   CHECK (!shows (err.message, "RETm"));
}

/* Driver messages (libpq's, libmariadb's) pass through the scrubber with
 * every secret of the URI, by each driver's reading of it. */
static void test_driver_messages_scrubbed (void)
{
   const char *uris[] = {
      "postgresql://u:SECRETo@/db?host=/nonexistent-ll-dir&application_name=SECRETo",
      "postgresql://u@/db?host=/nonexistent-ll-dir&pass%77ord=SECRETo&application_name=SECRETo",
      "postgresql://u@/db?host=/nonexistent-ll-dir&sslpassword=SECRETo&sslkey=/x/SECRETo",
      "mysql://u:SECRETo@localhost/db?socket=/nonexistent-ll-dir/x.sock",
   };
   for (size_t i = 0; i < sizeof uris / sizeof uris[0]; i++) {
      leaselock_error_t err = open_error (uris[i]);
      if (err.code == LEASELOCK_UNSUPPORTED)
         continue;
      CHECK (err.code != LEASELOCK_OK);
      CHECK (!shows (err.message, "SECRETo"));
   }
}

static void test_scrub_secrets (void)
{
   ll_secrets_t s;
   ll_secrets_init (&s);
   CHECK (ll_secrets_from_uri (&s, "postgresql://u:ab%40c@h/db?password=xyz&sslpassword=q"));
   char out[128];
   ll_scrub_secrets ("bad ab@c, ab%40c and xyz; q stays", &s, out, sizeof out);
   CHECK (!strcmp (out, "bad ***, *** and ***; q stays"));
   ll_secrets_clear (&s);
   ll_scrub_secrets ("nothing to hide", &s, out, 8);
   CHECK (!strcmp (out, "nothing"));
}

/* Any caller, not only the CLI, gets the 30-day maximum. */
static void test_duration_max (void)
{
   int64_t ms = 0;
   leaselock_error_t err;
   CHECK (leaselock_parse_duration ("30d", &ms, &err));
   CHECK_EQ (ms, LEASELOCK_TTL_MAX_MS);
   CHECK (leaselock_parse_duration ("720h", &ms, &err));
   CHECK_EQ (ms, LEASELOCK_TTL_MAX_MS);
   const char *over[] = { "31d", "2592000001ms", "2592000.001", "30000d", "99999999999999999999" };
   for (size_t i = 0; i < sizeof over / sizeof over[0]; i++) {
      CHECK_ERR (leaselock_parse_duration (over[i], &ms, &err), err, LEASELOCK_INVALID,
                 "at most 30 days");
   }
   CHECK (leaselock_parse_duration ("1.5", &ms, &err));
   CHECK_EQ (ms, 1500);
}

/* URIs as messages and repr show them: no password, wherever it sits. */
static void test_uri_redaction (void)
{
   static const struct
   {
      const char *in, *out;
   } cases[] = {
      { "mysql://u:s3cr/t?x#y@h:1/db", "mysql://u:***@h:1/db" },
      { "postgresql://u:pw@h/db?sslpassword=kk&sslmode=require",
        "postgresql://u:***@h/db?sslpassword=***&sslmode=require" },
      { "mongodb://h/?authMechanismProperties=AWS_SESSION_TOKEN:tok&w=1",
        "mongodb://h/?authMechanismProperties=***&w=1" },
      { "mysql://h/db?user=u&PASSWORD=pw", "mysql://h/db?user=u&PASSWORD=***" },
      { "mongodb://h1:1,h2:2/db", "mongodb://h1:1,h2:2/db" },
      { "sqlite:///tmp/x.db", "sqlite:///tmp/x.db" },
   };
   char shown[256];
   for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
      ll_uri_redact (cases[i].in, shown, sizeof shown);
      if (strcmp (shown, cases[i].out))
         fprintf (stderr, "    redact(%s) = %s\n", cases[i].in, shown);
      CHECK (!strcmp (shown, cases[i].out));
   }
   /* Too small a buffer cuts; it never leaves a secret in. */
   ll_uri_redact ("mysql://h/db?pwd=a&password=b", shown, 20);
   CHECK (!strcmp (shown, "mysql://h/db?pwd=**"));
   leaselock_error_t err;
   leaselock_client_t *c = leaselock_client_new ("sqlite://user:s3cretpw@/tmp/x.db", NULL, &err);
   CHECK_ERR (c != NULL, err, LEASELOCK_INVALID, "sqlite://user:***@/tmp/x.db");
   CHECK (!strstr (err.message, "s3cretpw"));
   leaselock_client_destroy (c);
   c = leaselock_client_new ("mysql://u:pa/ss9q@", NULL, &err);
   CHECK (c == NULL);
   CHECK (!strstr (err.message, "ss9q"));
   leaselock_client_destroy (c);
}

/* A host list in the authority: each item host[:port], IPv6 in brackets;
 * host and port name the first. */
static void test_host_lists (void)
{
   ll_uri_t u;
   leaselock_error_t err;
   bool ok = ll_uri_parse ("postgresql://u:p,w@h1:5432,h%2D2,[::1]:6543,:7/db?x=1", &u, &err);
   CHECK_OK (ok, err);
   bool same = u.n_hosts == 4 && !strcmp (u.password, "p,w") && !strcmp (u.hosts[0], "h1") &&
               u.ports[0] == 5432 && !strcmp (u.hosts[1], "h-2") && u.ports[1] == 0 &&
               !strcmp (u.hosts[2], "::1") && u.ports[2] == 6543 && !strcmp (u.hosts[3], "") &&
               u.ports[3] == 7 && u.host == u.hosts[0] && u.port == 5432 &&
               !strcmp (u.path, "/db") && u.n_params == 1;
   ll_uri_cleanup (&u);
   CHECK (same);
   /* One host, and none: one item. */
   CHECK (ll_uri_parse ("mysql://h:3306/db", &u, &err));
   same = u.n_hosts == 1 && !strcmp (u.host, "h") && u.port == 3306;
   ll_uri_cleanup (&u);
   CHECK (same);
   CHECK (ll_uri_parse ("postgresql:///db?host=h1,h2&port=1,2", &u, &err));
   same = u.n_hosts == 1 && !strcmp (u.host, "") && u.port == 0;
   ll_uri_cleanup (&u);
   CHECK (same);
   /* 16 hosts are fine, 17 are not. */
   char text[512] = "mysql://";
   for (int i = 0; i < LL_URI_MAX_HOSTS; i++)
      snprintf (text + strlen (text), sizeof text - strlen (text), "%sh%d:%d", i ? "," : "", i,
                1000 + i);
   strcat (text, "/db");
   CHECK (ll_uri_parse (text, &u, &err));
   same = u.n_hosts == LL_URI_MAX_HOSTS && !strcmp (u.hosts[15], "h15") && u.ports[15] == 1015;
   ll_uri_cleanup (&u);
   CHECK (same);
   memmove (strstr (text, "/db"), ",h16/db", 8);
   CHECK_ERR (ll_uri_parse (text, &u, &err), err, LEASELOCK_INVALID, "more than 16 hosts");
   const struct
   {
      const char *uri, *why;
   } bad[] = {
      { "postgresql://u:SECRETq@h1:1,h2:x/db", "the port must be a number from 1 to 65535" },
      { "mysql://u:SECRETq@h1:1,h2:70000/db", "the port must be a number from 1 to 65535" },
      { "mysql://u:SECRETq@h1,[::1/db", "unterminated [" },
      { "mysql://u:SECRETq@[::1]x,h2/db", "unexpected text after ]" },
      { "mysql://u:SECRETq@h1,h2:/db", "empty port" },
   };
   for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
      CHECK_ERR (ll_uri_parse (bad[i].uri, &u, &err), err, LEASELOCK_INVALID, bad[i].why);
      CHECK (!shows (err.message, "SECRETq"));
   }
}

/* A host list changes nothing of what is hidden. */
static void test_host_lists_redacted (void)
{
   static const struct
   {
      const char *in, *out;
   } cases[] = {
      { "postgresql://u:pw@h1:1,h2:2/db", "postgresql://u:***@h1:1,h2:2/db" },
      { "mysql://u:p,w:x@[::1]:3306,[fe80::1%25eth0],h3/db?password=z",
        "mysql://u:***@[::1]:3306,[fe80::1%25eth0],h3/db?password=***" },
      { "postgresql:///db?host=h1,h2&port=1,2&password=pw",
        "postgresql:///db?host=h1,h2&port=1,2&password=***" },
   };
   char shown[256];
   for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
      ll_uri_redact (cases[i].in, shown, sizeof shown);
      if (strcmp (shown, cases[i].out))
         fprintf (stderr, "    redact(%s) = %s\n", cases[i].in, shown);
      CHECK (!strcmp (shown, cases[i].out));
   }
   ll_secrets_t s;
   ll_secrets_init (&s);
   CHECK (ll_secrets_from_uri (&s, "postgresql://u:SECRETr@h1:1,h2:2/db?sslpassword=SECRETs"));
   char out[128];
   ll_scrub_secrets ("h1:1 said SECRETr, h2:2 said SECRETs", &s, out, sizeof out);
   ll_secrets_clear (&s);
   CHECK (!strcmp (out, "h1:1 said ***, h2:2 said ***"));
   leaselock_error_t err;
   CHECK (ll_uri_check_at ("postgresql://u:pw@h1:1,h2:2/db", &err));
   CHECK_ERR (ll_uri_check_at ("postgresql://u:pw@h1:1,u2@h2:2/db", &err), err, LEASELOCK_INVALID,
              "ambiguous URI");
   /* SQLite names no host, not even an empty list. */
   leaselock_client_t *c = leaselock_client_new ("sqlite://,/tmp/x.db", NULL, &err);
   CHECK_ERR (c != NULL, err, LEASELOCK_INVALID, "a host");
}

static void test_bad_uris (void)
{
   leaselock_error_t err;
   struct
   {
      const char *uri;
      leaselock_code_t code;
      const char *msg;
   } cases[] = {
      { "nope", LEASELOCK_INVALID, "malformed URI \"nope\"" },
      { "://x", LEASELOCK_INVALID, "malformed URI" },
      { "ftp://host/x", LEASELOCK_INVALID, "unknown URI scheme \"ftp\"" },
      { "redis://u:secret@host/x", LEASELOCK_INVALID, "redis://u:***@host/x" },
      { "sqlite:relative.db", LEASELOCK_INVALID, "malformed URI" },
   };
   for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
      leaselock_client_t *c = leaselock_client_new (cases[i].uri, NULL, &err);
      CHECK_ERR (c != NULL, err, cases[i].code, cases[i].msg);
      CHECK (!strstr (err.message, "secret"));
   }
   char label[300];
   memset (label, 'l', sizeof label - 1);
   label[sizeof label - 1] = '\0';
   /* The label is checked before the URI's backend is looked at. */
   leaselock_client_t *c = leaselock_client_new ("sqlite:///nonexistent-ll-dir/x.db", label, &err);
   CHECK_ERR (c != NULL, err, LEASELOCK_INVALID, "label is 299 bytes long");
   CHECK (leaselock_client_new ("nope", NULL, NULL) == NULL); /* error may be NULL */
}

static void test_durations (void)
{
   leaselock_error_t err;
   int64_t ms;
   struct
   {
      const char *text;
      int64_t ms;
   } good[] = { { "30s", 30000 },   { "500ms", 500 }, { "2m", 120000 }, { "1h", 3600000 },
                { "1d", 86400000 }, { "1.5", 1500 },  { "0", 0 },       { "0.25s", 250 },
                { ".5s", 500 },     { "2.", 2000 } };
   for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
      bool ok = leaselock_parse_duration (good[i].text, &ms, &err);
      CHECK_OK (ok, err);
      CHECK_EQ (ms, good[i].ms);
   }
   const char *bad[] = { "",    "abc",   "-1s", "10x",  "nan", "inf",    " 5s",
                         "5 s", "1e400", "1e3", "0x10", ".",   "1.2.3s", "+5s" };
   for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
      bool ok = leaselock_parse_duration (bad[i], &ms, &err);
      CHECK (!ok && err.code == LEASELOCK_INVALID);
      CHECK (strstr (err.message, "duration"));
   }
}

/* The default comes from the account's home directory (the password
 * database), never from $HOME or $XDG_STATE_HOME, which cron, sudo and
 * systemd set differently for the same user: one user, one database. */
static void test_default_uri (void)
{
   char buf[512], first[512], want[512];
   leaselock_error_t err;
   struct passwd *pw = getpwuid (geteuid ());
   CHECK (pw != NULL);
   if (!pw)
      return;
   snprintf (want, sizeof want, "sqlite://%s/.local/state/leaselock/locks.db",
             strcmp (pw->pw_dir, "/") ? pw->pw_dir : "");
   char *old_home = getenv ("HOME") ? strdup (getenv ("HOME")) : NULL;
   char *old_state = getenv ("XDG_STATE_HOME") ? strdup (getenv ("XDG_STATE_HOME")) : NULL;
   setenv ("HOME", "/home/someone", 1);
   unsetenv ("XDG_STATE_HOME");
   bool ok1 = leaselock_default_uri (first, sizeof first, &err);
   setenv ("XDG_STATE_HOME", "/var/state", 1);
   unsetenv ("HOME");
   bool ok2 = leaselock_default_uri (buf, sizeof buf, &err);
   bool same2 = ok2 && !strcmp (buf, first);
   bool small = !leaselock_default_uri (buf, 10, &err) && err.code == LEASELOCK_INVALID;
   if (old_home)
      setenv ("HOME", old_home, 1);
   if (old_state)
      setenv ("XDG_STATE_HOME", old_state, 1);
   else
      unsetenv ("XDG_STATE_HOME");
   free (old_home);
   free (old_state);
   CHECK (ok1);
   CHECK (!strcmp (first, want));
   CHECK (same2);
   CHECK (small);
}

static int cmp_token (const void *a, const void *b)
{
   return memcmp (a, b, LEASELOCK_OWNER_LEN);
}

/* A million owner tokens: 32 lower-case hex digits each, all distinct. */
static void test_owner_tokens (void)
{
   enum
   {
      N = 1000000
   };
   char (*t)[LEASELOCK_OWNER_LEN + 1] = malloc ((size_t)N * sizeof *t);
   CHECK (t);
   leaselock_error_t err;
   int bad = 0;
   for (int i = 0; i < N; i++) {
      if (!ll_owner_new (t[i], &err))
         bad++;
      else if (strlen (t[i]) != LEASELOCK_OWNER_LEN ||
               strspn (t[i], "0123456789abcdef") != LEASELOCK_OWNER_LEN)
         bad++;
   }
   qsort (t, N, sizeof *t, cmp_token);
   int dups = 0;
   for (int i = 1; i < N; i++)
      dups += !memcmp (t[i - 1], t[i], LEASELOCK_OWNER_LEN);
   free (t);
   CHECK_EQ (bad, 0);
   CHECK_EQ (dups, 0);
}

/* Owners drawn after a fork, in the parent and in a child made by _Fork()
 * (no atfork handler runs), are all distinct: the random bytes are drawn
 * ahead into a pool (fork.c) that the child does not inherit. A pool kept
 * anywhere else would hand the child the parent's next owners. */
enum
{
   FORK_OWNERS = 200
};
typedef char owner_t[LEASELOCK_OWNER_LEN + 1];

static bool draw_owners (owner_t *t, int n)
{
   leaselock_error_t err;
   for (int i = 0; i < n; i++)
      if (!ll_owner_new (t[i], &err))
         return false;
   return true;
}

static void test_owner_tokens_fork (void)
{
   static owner_t t[2 * FORK_OWNERS + 1];
   CHECK (draw_owners (t, 1)); /* the pool is drawn */
   int fd[2];
   CHECK (pipe (fd) == 0);
   fflush (NULL);
   pid_t pid = _Fork ();
   if (pid == 0) {
      bool ok =
        draw_owners (t + 1, FORK_OWNERS) &&
        write (fd[1], t + 1, sizeof t[0] * FORK_OWNERS) == (ssize_t)(sizeof t[0] * FORK_OWNERS);
      _exit (ok ? 0 : 1);
   }
   CHECK (pid > 0);
   close (fd[1]);
   size_t want = sizeof t[0] * FORK_OWNERS, got = 0;
   ssize_t n;
   while (got < want && (n = read (fd[0], (char *)(t + 1) + got, want - got)) > 0)
      got += (size_t)n;
   close (fd[0]);
   int status;
   CHECK (waitpid (pid, &status, 0) == pid && WIFEXITED (status) && WEXITSTATUS (status) == 0);
   CHECK_EQ (got, want);
   CHECK (draw_owners (t + 1 + FORK_OWNERS, FORK_OWNERS));
   qsort (t, sizeof t / sizeof t[0], sizeof t[0], cmp_token);
   int dups = 0;
   for (size_t i = 1; i < sizeof t / sizeof t[0]; i++)
      dups += !memcmp (t[i - 1], t[i], LEASELOCK_OWNER_LEN);
   CHECK_EQ (dups, 0);
}

/* Threads drawing owners at once get distinct ones. */
enum
{
   THREAD_OWNERS = 20000,
   OWNER_THREADS = 4
};

static void *draw_thread (void *arg)
{
   return draw_owners (arg, THREAD_OWNERS) ? arg : NULL;
}

static void test_owner_tokens_threads (void)
{
   owner_t *t = malloc (sizeof *t * THREAD_OWNERS * OWNER_THREADS);
   CHECK (t);
   pthread_t th[OWNER_THREADS];
   for (int i = 0; i < OWNER_THREADS; i++)
      CHECK (pthread_create (&th[i], NULL, draw_thread, t + i * THREAD_OWNERS) == 0);
   int failed = 0;
   for (int i = 0; i < OWNER_THREADS; i++) {
      void *r;
      pthread_join (th[i], &r);
      failed += r == NULL;
   }
   CHECK_EQ (failed, 0);
   qsort (t, THREAD_OWNERS * OWNER_THREADS, sizeof *t, cmp_token);
   int dups = 0;
   for (int i = 1; i < THREAD_OWNERS * OWNER_THREADS; i++)
      dups += !memcmp (t[i - 1], t[i], LEASELOCK_OWNER_LEN);
   free (t);
   CHECK_EQ (dups, 0);
}

int main (void)
{
   RUN (test_redact_at_in_query);
   RUN (test_redact_encoded_names);
   RUN (test_redact_driver_splits);
   RUN (test_refuse_second_at);
   RUN (test_mongo_driver_error_scrubbed);
   RUN (test_driver_messages_scrubbed);
   RUN (test_scrub_secrets);
   RUN (test_duration_max);
   RUN (test_owner_tokens);
   RUN (test_owner_tokens_fork);
   RUN (test_owner_tokens_threads);
   RUN (test_uri_redaction);
   RUN (test_host_lists);
   RUN (test_host_lists_redacted);
   RUN (test_bad_uris);
   RUN (test_durations);
   RUN (test_default_uri);
   return tl_summary ("uri");
}
