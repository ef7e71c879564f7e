/*
 * bare_sqlite.h - the bare sqlite3 program (header only): acquire+release
 * pairs with the plain sqlite3 API, the engine's two statements and
 * pragmas (csrc/stmt_sqlite.c, where the backend takes them) and the same
 * bound values. One copy for bench/core_sqlite.c (beside the engine) and
 * bench/python/core_loop.c (beside Python's `with lock:`, through ctypes),
 * so both compare against the same program.
 */
#ifndef LEASELOCK_BARE_SQLITE_H
#define LEASELOCK_BARE_SQLITE_H

/* The backend's statements and settings (csrc/stmt_sqlite.c, in libleaselock.a): the bare
 * program prepares exactly what the engine prepares. */
#include "stmt_sqlite.h"

#include <inttypes.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define BARE_SQLITE_TTL_MS 30000
#define BARE_SQLITE_LABEL "bench"

typedef struct
{
   sqlite3 *db;
   sqlite3_stmt *acq, *rel;
   char host[256];
   uint64_t counter;
   char err[256]; /* why the last call failed */
} bare_sqlite_t;

static inline bool bare_sqlite_fail (bare_sqlite_t *b, const char *what, const char *msg)
{
   snprintf (b->err, sizeof b->err, "%s: %s", what, msg ? msg : sqlite3_errmsg (b->db));
   return false;
}

/* Opens PATH (made if missing; the engine's client makes the schema) with
 * the backend's pragmas and prepares its two statements. False with
 * b->err set; bare_sqlite_close frees what was made either way. */
static inline bool bare_sqlite_open (bare_sqlite_t *b, const char *path)
{
   memset (b, 0, sizeof *b);
   int rc = sqlite3_open_v2 (
     path, &b->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
   if (rc != SQLITE_OK)
      return bare_sqlite_fail (b, "bare open", NULL);
   sqlite3_busy_timeout (b->db, LL_SQLITE_DEFAULT_BUSY_TIMEOUT_MS);
   if (sqlite3_exec (b->db, ll_sqlite_wal, NULL, NULL, NULL) != SQLITE_OK ||
       sqlite3_exec (b->db, ll_sqlite_synchronous, NULL, NULL, NULL) != SQLITE_OK)
      return bare_sqlite_fail (b, "bare pragmas", NULL);
   if (sqlite3_prepare_v3 (b->db, ll_sqlite_statements[LL_SQLITE_ST_TAKE], -1,
                           SQLITE_PREPARE_PERSISTENT, &b->acq, NULL) != SQLITE_OK ||
       sqlite3_prepare_v3 (b->db, ll_sqlite_statements[LL_SQLITE_ST_RELEASE], -1,
                           SQLITE_PREPARE_PERSISTENT, &b->rel, NULL) != SQLITE_OK)
      return bare_sqlite_fail (b, "bare prepare", NULL);
   if (gethostname (b->host, sizeof b->host - 1) != 0)
      strcpy (b->host, "unknown");
   return true;
}

static inline void bare_sqlite_close (bare_sqlite_t *b)
{
   sqlite3_finalize (b->acq);
   sqlite3_finalize (b->rel);
   sqlite3_close (b->db);
   b->db = NULL;
}

/* PAIRS acquire+release pairs on KEY (NUL-terminated). False with b->err
 * set on the first failure. */
static inline bool bare_sqlite_pairs (bare_sqlite_t *b, const char *key, long pairs)
{
   char owner[33];
   int64_t pid = getpid ();
   int klen = (int)strlen (key);
   for (long i = 0; i < pairs; i++) {
      /* A distinct owner per acquire, as the engine makes (but from a
       * counter: no random bytes, the cheapest a bare program can be). */
      snprintf (owner, sizeof owner, "%032" PRIx64, ++b->counter);
      sqlite3_bind_text (b->acq, 1, key, klen, SQLITE_STATIC);
      sqlite3_bind_text (b->acq, 2, owner, 32, SQLITE_STATIC);
      sqlite3_bind_int64 (b->acq, 3, BARE_SQLITE_TTL_MS);
      sqlite3_bind_text (b->acq, 4, b->host, -1, SQLITE_STATIC);
      sqlite3_bind_int64 (b->acq, 5, pid);
      sqlite3_bind_text (b->acq, 6, BARE_SQLITE_LABEL, -1, SQLITE_STATIC);
      if (sqlite3_step (b->acq) != SQLITE_ROW || sqlite3_step (b->acq) != SQLITE_DONE)
         return bare_sqlite_fail (b, "bare acquire", NULL);
      sqlite3_reset (b->acq);
      sqlite3_bind_text (b->rel, 1, key, klen, SQLITE_STATIC);
      sqlite3_bind_text (b->rel, 2, owner, 32, SQLITE_STATIC);
      sqlite3_bind_int64 (b->rel, 3, 0);
      /* Released: a row back (the backend's release returns whom to
       * wake), then done, as the backend steps it. */
      if (sqlite3_step (b->rel) != SQLITE_ROW)
         return bare_sqlite_fail (b, "bare release", "not held");
      if (sqlite3_step (b->rel) != SQLITE_DONE)
         return bare_sqlite_fail (b, "bare release", NULL);
      sqlite3_reset (b->rel);
   }
   return true;
}

#endif /* LEASELOCK_BARE_SQLITE_H */
