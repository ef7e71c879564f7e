/*
 * sql_postgresql.c - tests/sql_driver.h over libpq, for the PostgreSQL
 * suite (tests only).
 */
#include "sql_driver.h"

#include "backend_postgresql_private.h"

#include <dirent.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const raw_scheme = "postgresql";
static const char *URI;

void raw_use (const char *uri)
{
   URI = uri;
}

bool raw_query (const char *sql, char *out, size_t size)
{
   if (out && size)
      out[0] = '\0';
   PGconn *db = PQconnectdb (URI);
   bool ok = false;
   if (PQstatus (db) != CONNECTION_OK) {
      fprintf (stderr, "    raw connect: %s\n", PQerrorMessage (db));
   } else {
      PGresult *res = PQexec (db, sql);
      ExecStatusType s = PQresultStatus (res);
      if (s != PGRES_TUPLES_OK && s != PGRES_COMMAND_OK) {
         fprintf (stderr, "    raw query: %s\n", PQresultErrorMessage (res));
      } else {
         if (s == PGRES_TUPLES_OK && PQntuples (res) > 0 && out)
            snprintf (out, size, "%s", PQgetvalue (res, 0, 0));
         ok = true;
      }
      PQclear (res);
   }
   PQfinish (db);
   return ok;
}

int kill_other_connections (void)
{
   char out[64];
   if (!raw_query ("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE "
                   "datname = current_database() AND usename = current_user AND "
                   "pid <> pg_backend_pid()",
                   out, sizeof out))
      return -1;
   return atoi (out);
}

void *raw_lock_row (const char *k)
{
   char sql[600];
   PGconn *db = PQconnectdb (URI);
   snprintf (sql, sizeof sql, "BEGIN; SELECT fence FROM leaselock WHERE lock_key = '%s' FOR UPDATE",
             k);
   PGresult *res = PQstatus (db) == CONNECTION_OK ? PQexec (db, sql) : NULL;
   bool ok = res && PQresultStatus (res) == PGRES_TUPLES_OK;
   if (!ok)
      fprintf (stderr, "    raw lock: %s\n", PQerrorMessage (db));
   PQclear (res);
   if (!ok) {
      PQfinish (db);
      return NULL;
   }
   return db;
}

void raw_unlock (void *h)
{
   PQclear (PQexec (h, "COMMIT"));
   PQfinish (h);
}

/* Schema version 1's DDL (stmt_postgresql.c before the reservation). */
bool raw_create_v1 (const char *table)
{
   char sql[1200];
   snprintf (sql, sizeof sql,
             "CREATE TABLE \"%1$s\" (lock_key text COLLATE \"C\" NOT NULL PRIMARY KEY, "
             "owner text NULL, fence bigint NOT NULL, expires_at timestamptz NOT NULL, "
             "acquired_at timestamptz NOT NULL, holder_host text NOT NULL, "
             "holder_pid bigint NOT NULL, holder_label text NOT NULL); "
             "CREATE TABLE \"%1$s_meta\" (id int NOT NULL PRIMARY KEY, "
             "schema_version int NOT NULL); "
             "INSERT INTO \"%1$s_meta\" VALUES (1, 1); "
             "INSERT INTO \"%1$s\" VALUES ('old', NULL, 7, clock_timestamp() - interval '1 s', "
             "clock_timestamp() - interval '2 s', 'old-host', 1, 'old-label')",
             table);
   return raw_query (sql, NULL, 0);
}

bool raw_read_only (bool on)
{
   /* Its own session stays writable, to undo it. */
   const char *keys[] = { "dbname", "options", NULL };
   const char *vals[] = { URI, "-c default_transaction_read_only=off", NULL };
   PGconn *db = PQconnectdbParams (keys, vals, 1);
   PGresult *res = NULL;
   if (PQstatus (db) == CONNECTION_OK)
      res = PQexec (db, on ? "DO $$BEGIN EXECUTE format('ALTER DATABASE %I SET "
                             "default_transaction_read_only = on', current_database()); END$$"
                           : "DO $$BEGIN EXECUTE format('ALTER DATABASE %I RESET "
                             "default_transaction_read_only', current_database()); END$$");
   bool ok = res && PQresultStatus (res) == PGRES_COMMAND_OK;
   if (!ok)
      fprintf (stderr, "    read-only database: %s\n", PQerrorMessage (db));
   PQclear (res);
   PQfinish (db);
   return ok;
}

/* The parent pid of pid, or -1. */
static pid_t parent_of (pid_t pid)
{
   char path[64], line[256];
   snprintf (path, sizeof path, "/proc/%d/status", (int)pid);
   FILE *f = fopen (path, "r");
   pid_t pp = -1;
   if (!f)
      return -1;
   while (fgets (line, sizeof line, f))
      if (!strncmp (line, "PPid:", 5))
         pp = (pid_t)atoi (line + 5);
   fclose (f);
   return pp;
}

/* The postmaster (the parent of a backend, read while its connection is
 * open) and its children, postmaster first. */
bool raw_server_pids (pid_t *pids, int *n, int max)
{
   *n = 0;
   PGconn *db = PQconnectdb (URI);
   PGresult *res = PQstatus (db) == CONNECTION_OK ? PQexec (db, "SELECT pg_backend_pid()") : NULL;
   pid_t postmaster = -1;
   if (res && PQresultStatus (res) == PGRES_TUPLES_OK && PQntuples (res) == 1)
      postmaster = parent_of ((pid_t)atoi (PQgetvalue (res, 0, 0)));
   PQclear (res);
   PQfinish (db);
   if (postmaster <= 1 || max < 1) {
      fprintf (stderr, "    cannot find the postmaster's pid\n");
      return false;
   }
   pids[(*n)++] = postmaster;
   DIR *d = opendir ("/proc");
   struct dirent *e;
   while (d && (e = readdir (d)) && *n < max) {
      pid_t p = (pid_t)atoi (e->d_name);
      if (p > 1 && parent_of (p) == postmaster)
         pids[(*n)++] = p;
   }
   if (d)
      closedir (d);
   return true;
}

bool raw_statement_prepared (void *conn, int id)
{
   return ((ll_pg_conn_t *)conn)->prepared[id];
}
