/*
 * test_exclusion.c - mutual exclusion under real contention, on any
 * backend: 8 threads, then 4 processes, increment a shared counter
 * non-atomically (read, pause, write) under one lock. No update may be
 * lost, nobody may be inside twice, and fences must strictly increase in
 * the order the critical sections ran. Then 4 processes loop on one key
 * (hold 1 ms, release, ask again at once) until 160 grants: each must get
 * its share (no starvation: a holder that releases cannot take the key
 * back before the waiters). Then the modes: a semaphore of limit 3 and a
 * read-write lock, by the same threads and processes, counted at every
 * instant in shared memory: never more than 3 in the semaphore (beside a
 * holder of a slot outside the limit, in the processes' round), never a
 * writer with anyone else, and readers that do share.
 *
 *   test_exclusion URI [iterations]
 */
#include "ll_internal.h"
#include "testlib.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define THREADS 8
#define PROCS 4

static int ITER = 25;
static char KEY[300];

static void pause_a_little (void)
{
   struct timespec ts = { 0, 200000 }; /* 0.2 ms: widens any race window */
   nanosleep (&ts, NULL);
}

/* Waits for KEY (TTL 10 s, 2 min at most); NULL and why on stderr when
 * that fails. who and id name the caller in the message. */
static leaselock_lease_t *take (leaselock_client_t *c, const char *who, long id)
{
   leaselock_acquire_opts_t o = opts (10000, false);
   o.timeout_ms = 120000;
   leaselock_lease_t *l;
   leaselock_error_t err;
   if (leaselock_acquire (c, KEY, strlen (KEY), &o, &l, &err))
      return l;
   fprintf (stderr, "%s %ld: acquire: %s %s\n", who, id, leaselock_code_name (err.code),
            err.message);
   return NULL;
}

/* Releases and frees l; false and why on stderr when the release fails. */
static bool give_back (leaselock_lease_t *l, const char *who, long id)
{
   leaselock_error_t err;
   bool ok = leaselock_lease_release (l, &err);
   if (!ok)
      fprintf (stderr, "%s %ld: release: %s\n", who, id, err.message);
   leaselock_lease_destroy (l);
   return ok;
}

/* ---- threads ----------------------------------------------------------- */

static leaselock_client_t *shared_client;
static int counter;       /* deliberately not atomic */
static atomic_int inside; /* > 1 means two holders at once */
static atomic_int overlaps;
static int64_t fences[THREADS * 100];
static int n_fences; /* written only under the lock */
static atomic_int failures;

static void *thread_main (void *arg)
{
   long id = (long)arg;
   /* half the threads share one client, half have their own */
   leaselock_error_t err;
   leaselock_client_t *own = id % 2 ? leaselock_client_new (URI, "thread", &err) : NULL;
   leaselock_client_t *c = own ? own : shared_client;
   if (id % 2 && !own) {
      fprintf (stderr, "thread %ld: %s\n", id, err.message);
      atomic_fetch_add (&failures, 1);
      return NULL;
   }
   for (int i = 0; i < ITER; i++) {
      leaselock_lease_t *l = take (c, "thread", id);
      if (!l) {
         atomic_fetch_add (&failures, 1);
         break;
      }
      if (atomic_fetch_add (&inside, 1) != 0)
         atomic_fetch_add (&overlaps, 1);
      int v = counter;
      pause_a_little ();
      counter = v + 1;
      fences[n_fences++] = leaselock_lease_fence (l);
      atomic_fetch_sub (&inside, 1);
      if (!give_back (l, "thread", id))
         atomic_fetch_add (&failures, 1);
   }
   leaselock_client_destroy (own);
   return NULL;
}

static void test_threads (void)
{
   leaselock_error_t err;
   shared_client = leaselock_client_new (URI, "threads", &err);
   CHECK_OK (shared_client != NULL, err);
   snprintf (KEY, sizeof KEY, "%s", key ("threads"));
   pthread_t th[THREADS];
   for (long i = 0; i < THREADS; i++)
      pthread_create (&th[i], NULL, thread_main, (void *)i);
   for (int i = 0; i < THREADS; i++)
      pthread_join (th[i], NULL);
   leaselock_client_destroy (shared_client);
   CHECK_EQ (atomic_load (&failures), 0);
   CHECK_EQ (atomic_load (&overlaps), 0);
   CHECK_EQ (counter, THREADS * ITER);
   CHECK_EQ (n_fences, THREADS * ITER);
   for (int i = 1; i < n_fences; i++)
      CHECK (fences[i] > fences[i - 1]);
   printf ("threads: %d critical sections, fences %lld..%lld, 0 overlaps\n", n_fences,
           (long long)fences[0], (long long)fences[n_fences - 1]);
}

/* ---- processes --------------------------------------------------------- */

static char dir[256];

static int read_int (const char *path)
{
   FILE *f = fopen (path, "r");
   int v = 0;
   if (f) {
      if (fscanf (f, "%d", &v) != 1)
         v = -1000000;
      fclose (f);
   }
   return v;
}

static void write_int (const char *path, int v)
{
   FILE *f = fopen (path, "w");
   if (f) {
      fprintf (f, "%d\n", v);
      fclose (f);
   }
}

static int child_main (int id)
{
   char counter_path[300], log_path[300], inside_path[300];
   snprintf (counter_path, sizeof counter_path, "%s/counter", dir);
   snprintf (log_path, sizeof log_path, "%s/log", dir);
   snprintf (inside_path, sizeof inside_path, "%s/inside", dir);
   leaselock_error_t err;
   leaselock_client_t *c = leaselock_client_new (URI, "process", &err);
   if (!c) {
      fprintf (stderr, "child %d: %s\n", id, err.message);
      return 1;
   }
   int rc = 0;
   for (int i = 0; i < ITER; i++) {
      leaselock_lease_t *l = take (c, "child", id);
      if (!l) {
         rc = 1;
         break;
      }
      int fd = open (inside_path, O_CREAT | O_EXCL | O_WRONLY, 0600);
      if (fd < 0) {
         fprintf (stderr, "child %d: overlap (%s)\n", id, strerror (errno));
         rc = 3;
      } else {
         close (fd);
      }
      int v = read_int (counter_path);
      pause_a_little ();
      write_int (counter_path, v + 1);
      FILE *log = fopen (log_path, "a");
      if (log) {
         fprintf (log, "%lld %d\n", (long long)leaselock_lease_fence (l), id);
         fclose (log);
      }
      if (fd >= 0)
         unlink (inside_path);
      if (!give_back (l, "child", id))
         rc = 1;
   }
   leaselock_client_destroy (c);
   return rc;
}

static void test_processes (void)
{
   snprintf (dir, sizeof dir, "%s/leaselock-excl-XXXXXX",
             getenv ("TMPDIR") ? getenv ("TMPDIR") : "/tmp");
   CHECK (mkdtemp (dir));
   snprintf (KEY, sizeof KEY, "%s", key ("processes"));
   fflush (NULL);
   pid_t kids[PROCS];
   for (int i = 0; i < PROCS; i++) {
      kids[i] = fork ();
      if (kids[i] == 0)
         _exit (child_main (i));
   }
   int bad = 0;
   for (int i = 0; i < PROCS; i++) {
      int status;
      waitpid (kids[i], &status, 0);
      if (!WIFEXITED (status) || WEXITSTATUS (status) != 0)
         bad++;
   }
   char path[300];
   snprintf (path, sizeof path, "%s/counter", dir);
   int total = read_int (path);
   snprintf (path, sizeof path, "%s/log", dir);
   FILE *log = fopen (path, "r");
   CHECK (log);
   long long prev = 0, f, first = 0;
   int id, n = 0, increasing = 1;
   while (fscanf (log, "%lld %d", &f, &id) == 2) {
      if (!n)
         first = f;
      if (n && f <= prev)
         increasing = 0;
      prev = f;
      n++;
   }
   fclose (log);
   char cmd[300];
   snprintf (cmd, sizeof cmd, "rm -rf '%s'", dir);
   if (system (cmd) != 0)
      fprintf (stderr, "could not remove %s\n", dir);
   CHECK_EQ (bad, 0);
   CHECK_EQ (total, PROCS * ITER);
   CHECK_EQ (n, PROCS * ITER);
   CHECK (increasing);
   printf ("processes: %d critical sections, fences %lld..%lld, 0 overlaps\n", n, first, prev);
}

/* ---- no starvation across processes ----------------------------------- */

#define STARVE_GRANTS 800

typedef struct starve
{
   atomic_int total;
   atomic_int failures;
   atomic_int grants[PROCS];
} starve_t;

static int starve_child (starve_t *sh, int id)
{
   leaselock_error_t err;
   leaselock_client_t *c = leaselock_client_new (URI, "starve", &err);
   if (!c) {
      fprintf (stderr, "starve %d: %s\n", id, err.message);
      return 1;
   }
   while (atomic_load (&sh->total) < STARVE_GRANTS) {
      leaselock_lease_t *l = take (c, "starve", id);
      if (!l) {
         atomic_fetch_add (&sh->failures, 1);
         break;
      }
      atomic_fetch_add (&sh->grants[id], 1);
      atomic_fetch_add (&sh->total, 1);
      struct timespec ts = { 0, 1000000 };
      nanosleep (&ts, NULL);
      if (!give_back (l, "starve", id))
         atomic_fetch_add (&sh->failures, 1);
   }
   leaselock_client_destroy (c);
   return 0;
}

static void test_no_starvation (void)
{
   starve_t *sh =
     mmap (NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
   CHECK (sh != MAP_FAILED);
   memset (sh, 0, sizeof *sh);
   snprintf (KEY, sizeof KEY, "%s", key ("starve"));
   fflush (NULL);
   pid_t kids[PROCS];
   for (int i = 0; i < PROCS; i++) {
      kids[i] = fork ();
      if (kids[i] == 0)
         _exit (starve_child (sh, i));
   }
   int bad = 0, fewest = STARVE_GRANTS, most = 0;
   for (int i = 0; i < PROCS; i++) {
      int status;
      waitpid (kids[i], &status, 0);
      bad += !WIFEXITED (status) || WEXITSTATUS (status) != 0;
   }
   for (int i = 0; i < PROCS; i++) {
      int g = atomic_load (&sh->grants[i]);
      fewest = g < fewest ? g : fewest;
      most = g > most ? g : most;
   }
   printf ("no starvation: %d grants, fewest %d, most %d per process\n", atomic_load (&sh->total),
           fewest, most);
   CHECK_EQ (bad, 0);
   CHECK_EQ (atomic_load (&sh->failures), 0);
   /* A fair share is 200 each; a starved process gets almost none. */
   CHECK (fewest >= STARVE_GRANTS / PROCS / 4);
   munmap (sh, sizeof *sh);
}

/* ---- the modes: a semaphore and a read-write lock ------------------------ */

#define SEM_LIMIT 3

/* In shared memory: what is inside the semaphore and the read-write lock
 * at every instant, across the threads and processes. */
typedef struct modes
{
   atomic_int inside, most; /* semaphore holders now, and the peak */
   atomic_int readers, writers, most_readers;
   atomic_int violations, failures;
} modes_t;

static modes_t *M;
static char SEM_KEY[300], RW_KEY[300];

static void note_peak (atomic_int *peak, int v)
{
   int m = atomic_load (peak);
   while (v > m && !atomic_compare_exchange_weak (peak, &m, v)) {
   }
}

static leaselock_acquire_opts_t wait_opts (void)
{
   leaselock_acquire_opts_t o = opts (10000, false);
   o.timeout_ms = 120000;
   return o;
}

static void sem_section (leaselock_client_t *c, const char *who, long id)
{
   leaselock_acquire_opts_t o = wait_opts ();
   leaselock_lease_t *l;
   leaselock_error_t err;
   if (!leaselock_semaphore_acquire (c, SEM_KEY, strlen (SEM_KEY), SEM_LIMIT, &o, &l, &err)) {
      fprintf (stderr, "%s %ld: semaphore: %s %s\n", who, id, leaselock_code_name (err.code),
               err.message);
      atomic_fetch_add (&M->failures, 1);
      return;
   }
   int n = atomic_fetch_add (&M->inside, 1) + 1;
   note_peak (&M->most, n);
   if (n > SEM_LIMIT)
      atomic_fetch_add (&M->violations, 1);
   for (int i = 0; i < 5; i++)
      pause_a_little ();
   atomic_fetch_sub (&M->inside, 1);
   if (!give_back (l, who, id))
      atomic_fetch_add (&M->failures, 1);
}

/* A writer must find nobody else inside, a reader no writer; each
 * increments its own count before it reads the other's (sequentially
 * consistent), so two holders at once cannot both miss each other. */
static void rw_section (leaselock_client_t *c, const char *who, long id, bool writer)
{
   leaselock_acquire_opts_t o = wait_opts ();
   leaselock_lease_t *l;
   leaselock_error_t err;
   if (!leaselock_rwlock_acquire (c, RW_KEY, strlen (RW_KEY),
                                  writer ? LEASELOCK_EXCLUSIVE : LEASELOCK_SHARED, &o, &l, &err)) {
      fprintf (stderr, "%s %ld: rwlock: %s %s\n", who, id, leaselock_code_name (err.code),
               err.message);
      atomic_fetch_add (&M->failures, 1);
      return;
   }
   atomic_int *mine = writer ? &M->writers : &M->readers;
   int n = atomic_fetch_add (mine, 1) + 1;
   bool bad = writer ? n != 1 || atomic_load (&M->readers) != 0 : atomic_load (&M->writers) != 0;
   if (!writer)
      note_peak (&M->most_readers, n);
   for (int i = 0; i < 10; i++)
      pause_a_little ();
   bad = bad || (writer ? atomic_load (&M->writers) != 1 || atomic_load (&M->readers) != 0
                        : atomic_load (&M->writers) != 0);
   atomic_fetch_sub (mine, 1);
   if (bad)
      atomic_fetch_add (&M->violations, 1);
   if (!give_back (l, who, id))
      atomic_fetch_add (&M->failures, 1);
}

/* ITER semaphore sections, then ITER read-write sections, one in four a
 * writer. */
static void modes_work (leaselock_client_t *c, const char *who, long id)
{
   for (int i = 0; i < ITER; i++)
      sem_section (c, who, id);
   for (int i = 0; i < ITER; i++)
      rw_section (c, who, id, (i + id) % 4 == 0);
}

static void *modes_thread (void *arg)
{
   long id = (long)arg;
   leaselock_error_t err;
   leaselock_client_t *own = id % 2 ? leaselock_client_new (URI, "modes", &err) : NULL;
   if (id % 2 && !own) {
      fprintf (stderr, "modes thread %ld: %s\n", id, err.message);
      atomic_fetch_add (&M->failures, 1);
      return NULL;
   }
   modes_work (own ? own : shared_client, "modes thread", id);
   leaselock_client_destroy (own);
   return NULL;
}

static void test_modes_threads (void)
{
   leaselock_error_t err;
   shared_client = leaselock_client_new (URI, "modes", &err);
   CHECK_OK (shared_client != NULL, err);
   snprintf (SEM_KEY, sizeof SEM_KEY, "%s", key ("sem-threads"));
   snprintf (RW_KEY, sizeof RW_KEY, "%s", key ("rw-threads"));
   pthread_t th[THREADS];
   for (long i = 0; i < THREADS; i++)
      pthread_create (&th[i], NULL, modes_thread, (void *)i);
   for (int i = 0; i < THREADS; i++)
      pthread_join (th[i], NULL);
   leaselock_client_destroy (shared_client);
   printf ("modes, threads: at most %d in the semaphore (limit %d), %d readers at once\n",
           atomic_load (&M->most), SEM_LIMIT, atomic_load (&M->most_readers));
   CHECK_EQ (atomic_load (&M->failures), 0);
   CHECK_EQ (atomic_load (&M->violations), 0);
   CHECK (atomic_load (&M->most) <= SEM_LIMIT);
   CHECK (atomic_load (&M->most_readers) >= 2); /* the readers did share */
}

/* The processes share the semaphore with a holder of slot SEM_LIMIT, as
 * one started under a higher limit would: it counts, so at most
 * SEM_LIMIT - 1 of them are inside beside it. */
static void test_modes_processes (void)
{
   snprintf (SEM_KEY, sizeof SEM_KEY, "%s", key ("sem-procs"));
   snprintf (RW_KEY, sizeof RW_KEY, "%s", key ("rw-procs"));
   char old_key[320];
   snprintf (old_key, sizeof old_key, "%s/.slot/%d", SEM_KEY, SEM_LIMIT);
   leaselock_error_t err;
   leaselock_client_t *c = leaselock_client_new (URI, "modes-old", &err);
   CHECK_OK (c != NULL, err);
   /* Not auto-renewed: the parent then runs no renewal thread while it
    * forks (a thread inside the ASan allocator at fork() leaves its lock
    * held in the child, whose first malloc then waits forever). 30 s
    * outlasts the processes' work. */
   leaselock_acquire_opts_t o = opts (30000, false);
   leaselock_lease_t *old;
   CHECK_OK (leaselock_acquire (c, old_key, strlen (old_key), &o, &old, &err), err);
   atomic_store (&M->most, 1);
   atomic_store (&M->inside, 1);
   atomic_store (&M->most_readers, 0);
   fflush (NULL);
   pid_t kids[PROCS];
   for (int i = 0; i < PROCS; i++) {
      kids[i] = fork ();
      if (kids[i] == 0) {
         leaselock_client_t *own = leaselock_client_new (URI, "modes-proc", &err);
         if (!own)
            _exit (1);
         modes_work (own, "modes process", i);
         leaselock_client_destroy (own);
         _exit (0);
      }
   }
   int bad = 0;
   for (int i = 0; i < PROCS; i++) {
      int status;
      waitpid (kids[i], &status, 0);
      bad += !WIFEXITED (status) || WEXITSTATUS (status) != 0;
   }
   atomic_fetch_sub (&M->inside, 1);
   CHECK_OK (leaselock_lease_release (old, &err), err);
   leaselock_lease_destroy (old);
   leaselock_client_destroy (c);
   printf ("modes, processes: at most %d in the semaphore with the old holder, %d readers at "
           "once\n",
           atomic_load (&M->most), atomic_load (&M->most_readers));
   CHECK_EQ (bad, 0);
   CHECK_EQ (atomic_load (&M->failures), 0);
   CHECK_EQ (atomic_load (&M->violations), 0);
   CHECK (atomic_load (&M->most) <= SEM_LIMIT);
   CHECK (atomic_load (&M->most_readers) >= 2);
}

int main (int argc, char **argv)
{
   if (argc < 2) {
      fprintf (stderr, "usage: %s URI [iterations]\n", argv[0]);
      return 2;
   }
   if (argc > 2)
      ITER = atoi (argv[2]) > 0 && atoi (argv[2]) <= 100 ? atoi (argv[2]) : ITER;
   tl_start ("exclusion", argv[1]);
   printf ("exclusion: %d threads and %d processes x %d\n", THREADS, PROCS, ITER);
   RUN (test_threads);
   RUN (test_processes);
   RUN (test_no_starvation);
   M = mmap (NULL, sizeof *M, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
   if (M == MAP_FAILED)
      return 1;
   memset (M, 0, sizeof *M);
   RUN (test_modes_threads);
   RUN (test_modes_processes);
   return tl_summary ("exclusion");
}
