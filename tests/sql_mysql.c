/*
 * sql_mysql.c - tests/sql_driver.h over libmariadb, for the MySQL/MariaDB
 * suite (tests only).
 */
#include "sql_driver.h"

#include "backend_mysql_private.h"
#include "ll_internal.h"

#include <mysql.h>
#include <stdio.h>
#include <stdlib.h>

const char *const raw_scheme = "mysql";
static const char *URI;

void raw_use (const char *uri)
{
   URI = uri;
}

/* A connection to URI (its socket= option too); NULL and why on stderr. */
static MYSQL *connect_uri (void)
{
   ll_uri_t u;
   leaselock_error_t err;
   if (!ll_uri_parse (URI, &u, &err)) {
      fprintf (stderr, "    raw connect: %s\n", err.message);
      return NULL;
   }
   const char *sock = ll_uri_param (&u, "socket");
   MYSQL *db = mysql_init (NULL);
   if (!mysql_real_connect (db, sock ? NULL : u.host, u.user, u.password, u.path + 1,
                            (unsigned)(u.port ? u.port : 3306), sock, 0)) {
      fprintf (stderr, "    raw connect: %s\n", mysql_error (db));
      mysql_close (db);
      db = NULL;
   }
   ll_uri_cleanup (&u);
   return db;
}

bool raw_query (const char *sql, char *out, size_t size)
{
   if (out && size)
      out[0] = '\0';
   MYSQL *db = connect_uri ();
   if (!db)
      return false;
   bool ok = false;
   if (mysql_query (db, sql)) {
      fprintf (stderr, "    raw query: %s\n", mysql_error (db));
   } else {
      MYSQL_RES *res = mysql_store_result (db);
      MYSQL_ROW row = res ? mysql_fetch_row (res) : NULL;
      if (row && row[0] && out)
         snprintf (out, size, "%s", row[0]);
      if (res)
         mysql_free_result (res);
      ok = true;
   }
   mysql_close (db);
   return ok;
}

int kill_other_connections (void)
{
   /* One statement can't KILL a list: collect the ids, then kill each. */
   MYSQL *db = connect_uri ();
   if (!db)
      return -1;
   int n = -1;
   if (!mysql_query (db, "SELECT id FROM information_schema.processlist WHERE "
                         "user = SUBSTRING_INDEX(USER(), '@', 1) AND db = DATABASE() "
                         "AND id <> CONNECTION_ID()")) {
      MYSQL_RES *res = mysql_store_result (db);
      unsigned long ids[256];
      int k = 0;
      for (MYSQL_ROW row; res && (row = mysql_fetch_row (res)) && k < 256;)
         ids[k++] = strtoul (row[0], NULL, 10);
      if (res)
         mysql_free_result (res);
      n = 0;
      for (int i = 0; i < k; i++) {
         char sql[64];
         snprintf (sql, sizeof sql, "KILL CONNECTION %lu", ids[i]);
         if (!mysql_query (db, sql))
            n++;
      }
   }
   mysql_close (db);
   return n;
}

void *raw_lock_row (const char *k)
{
   char sql[600];
   MYSQL *db = connect_uri ();
   if (!db)
      return NULL;
   snprintf (sql, sizeof sql, "SELECT fence FROM leaselock WHERE lock_key = '%s' FOR UPDATE", k);
   if (!mysql_query (db, "BEGIN") && !mysql_query (db, sql)) {
      MYSQL_RES *res = mysql_store_result (db);
      if (res)
         mysql_free_result (res);
      return db;
   }
   fprintf (stderr, "    raw lock: %s\n", mysql_error (db));
   mysql_close (db);
   return NULL;
}

void raw_unlock (void *h)
{
   mysql_query (h, "COMMIT");
   mysql_close (h);
}

/* Schema version 1's DDL (stmt_mysql.c before the reservation). */
bool raw_create_v1 (const char *table)
{
   char sql[1024];
   const char *steps[] = {
      "CREATE TABLE `%s` (lock_key VARBINARY(255) NOT NULL PRIMARY KEY, "
      "owner CHAR(32) CHARACTER SET ascii COLLATE ascii_bin NULL, fence BIGINT NOT NULL, "
      "expires_at DATETIME(6) NOT NULL, acquired_at DATETIME(6) NOT NULL, "
      "holder_host VARBINARY(255) NOT NULL, holder_pid BIGINT NOT NULL, "
      "holder_label VARBINARY(255) NOT NULL) ENGINE=InnoDB",
      "CREATE TABLE `%s_meta` (id TINYINT NOT NULL PRIMARY KEY, "
      "schema_version INT NOT NULL) ENGINE=InnoDB",
      "INSERT INTO `%s_meta` VALUES (1, 1)",
      "INSERT INTO `%s` VALUES ('old', NULL, 7, UTC_TIMESTAMP(6) - INTERVAL 1 SECOND, "
      "UTC_TIMESTAMP(6) - INTERVAL 2 SECOND, 'old-host', 1, 'old-label')",
   };
   for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
      snprintf (sql, sizeof sql, steps[i], table);
      if (!raw_query (sql, NULL, 0))
         return false;
   }
   return true;
}

bool raw_read_only (bool on)
{
   const char *sock = getenv ("LEASELOCK_MYSQL_SOCKET");
   if (!sock || !*sock) {
      fprintf (stderr, "    LEASELOCK_MYSQL_SOCKET is not set: no root access\n");
      return false;
   }
   MYSQL *db = mysql_init (NULL);
   bool ok = mysql_real_connect (db, NULL, "root", NULL, NULL, 0, sock, 0) &&
             !mysql_query (db, on ? "SET GLOBAL read_only = 1" : "SET GLOBAL read_only = 0");
   if (!ok)
      fprintf (stderr, "    read_only as root: %s\n", mysql_error (db));
   mysql_close (db);
   return ok;
}

/* MariaDB is one process: the one its pid file names. */
bool raw_server_pids (pid_t *pids, int *n, int max)
{
   char out[4096];
   *n = 0;
   if (max < 1 || !raw_query ("SELECT @@pid_file", out, sizeof out))
      return false;
   FILE *f = fopen (out, "r");
   int pid = 0;
   if (!f || fscanf (f, "%d", &pid) != 1 || pid <= 1) {
      fprintf (stderr, "    cannot read the server's pid from %s\n", out);
      if (f)
         fclose (f);
      return false;
   }
   fclose (f);
   pids[(*n)++] = (pid_t)pid;
   return true;
}

bool raw_statement_prepared (void *conn, int id)
{
   return ((ll_mysql_conn_t *)conn)->st[id] != NULL;
}
