/*
 * backend_mysql_primary.c - the MySQL backend's check at each connect
 * (failover.c says why): who the primary is, how it makes a commit
 * survive a failover, and its record in the table's meta record. Only
 * with libmariadb (LEASELOCK_WITH_MYSQL).
 */
#ifdef LEASELOCK_WITH_MYSQL

#include "backend_mysql_private.h"
#include "stmt_mysql.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* The settings and status check_primary reads, by name ("" when the
 * server has no such name). */
typedef struct
{
   char server_id[24], server_uuid[40], hostname[64], port[8], wsrep_on[8], log_bin[8];
   char semi_enabled[8], wait_point[24], semi_clients[12], semi_status[8];
   char state_uuid[40], conf_id[24], cluster_status[24];
} ll_mysql_facts_t;

/* Where each name's value goes in the facts. */
static char *ll_mysql_fact_slot (ll_mysql_facts_t *f, const char *name, size_t *size)
{
#define LL_FACT(n, field)                                                                          \
   if (!strcasecmp (name, n))                                                                      \
      return *size = sizeof f->field, f->field;
   LL_FACT ("server_id", server_id);
   LL_FACT ("server_uuid", server_uuid);
   LL_FACT ("hostname", hostname);
   LL_FACT ("port", port);
   LL_FACT ("wsrep_on", wsrep_on);
   LL_FACT ("log_bin", log_bin);
   LL_FACT ("rpl_semi_sync_master_enabled", semi_enabled);
   LL_FACT ("rpl_semi_sync_source_enabled", semi_enabled);
   LL_FACT ("rpl_semi_sync_master_wait_point", wait_point);
   LL_FACT ("rpl_semi_sync_source_wait_point", wait_point);
   LL_FACT ("Rpl_semi_sync_master_clients", semi_clients);
   LL_FACT ("Rpl_semi_sync_source_clients", semi_clients);
   LL_FACT ("Rpl_semi_sync_master_status", semi_status);
   LL_FACT ("Rpl_semi_sync_source_status", semi_status);
   LL_FACT ("wsrep_cluster_state_uuid", state_uuid);
   LL_FACT ("wsrep_cluster_conf_id", conf_id);
   LL_FACT ("wsrep_cluster_status", cluster_status);
#undef LL_FACT
   return NULL;
}

/* Runs a SHOW whose rows are (name, value) into the facts. */
static bool ll_mysql_read_facts (ll_mysql_conn_t *c, const char *sql, ll_mysql_facts_t *f,
                                 leaselock_error_t *err)
{
   if (mysql_real_query (c->db, sql, strlen (sql)))
      return ll_mysql_fail_db (c, "reading the server's replication settings", err);
   MYSQL_RES *res = mysql_store_result (c->db);
   if (!res)
      return ll_mysql_fail_db (c, "reading the server's replication settings", err);
   MYSQL_ROW row;
   while ((row = mysql_fetch_row (res))) {
      size_t size = 0;
      char *slot = row[0] && row[1] ? ll_mysql_fact_slot (f, row[0], &size) : NULL;
      if (slot)
         snprintf (slot, size, "%s", row[1]);
   }
   mysql_free_result (res);
   return true;
}

static bool ll_mysql_on (const char *v)
{
   return !strcasecmp (v, "ON") || !strcmp (v, "1");
}

/* The primary's identity: on Galera the cluster's state (a new history)
 * and configuration (a new primary component); else the server's uuid
 * (MySQL) or id, host and port (MariaDB has no uuid). */
static void ll_mysql_identity (const ll_mysql_facts_t *f, char *out, size_t size)
{
   if (ll_mysql_on (f->wsrep_on))
      snprintf (out, size, "galera/%s/%s", f->state_uuid, f->conf_id);
   else if (f->server_uuid[0])
      snprintf (out, size, "mysql/%s", f->server_uuid);
   else
      snprintf (out, size, "mysql/%s/%s:%s", f->server_id, f->hostname, f->port);
}

/* failover.c's levels: Galera certifies a commit on the Primary
 * component before it returns; semi-sync with AFTER_SYNC has a replica
 * hold a commit before any client sees it; without a binary log no
 * replica can follow. */
static void ll_mysql_durability (ll_primary_t *p, const ll_mysql_facts_t *f)
{
   if (ll_mysql_on (f->wsrep_on)) {
      p->durability =
        strcasecmp (f->cluster_status, "Primary") ? LL_DURABILITY_AT_RISK : LL_DURABILITY_DURABLE;
      snprintf (p->durability_text, sizeof p->durability_text, "galera: wsrep_cluster_status=%s",
                f->cluster_status);
      return;
   }
   bool semi = ll_mysql_on (f->semi_enabled) && ll_mysql_on (f->semi_status) &&
               !strcasecmp (f->wait_point, "AFTER_SYNC") && atol (f->semi_clients) > 0;
   if (semi)
      p->durability = LL_DURABILITY_DURABLE;
   else if (!ll_mysql_on (f->log_bin))
      p->durability = LL_DURABILITY_STANDALONE;
   else
      p->durability = LL_DURABILITY_AT_RISK;
   snprintf (p->durability_text, sizeof p->durability_text,
             "log_bin=%s, semi-sync %s (status %s, wait point %s, %s replicas)", f->log_bin,
             f->semi_enabled[0] ? f->semi_enabled : "absent",
             f->semi_status[0] ? f->semi_status : "-", f->wait_point[0] ? f->wait_point : "-",
             f->semi_clients[0] ? f->semi_clients : "0");
}

/* Formats the meta statement fmt with the table and arg, then runs it. */
static bool ll_mysql_exec_meta (ll_mysql_conn_t *c, const char *fmt, const char *str_arg,
                                long long int_arg, const char *what, leaselock_error_t *err)
{
   char sql[2048];
   if (str_arg)
      snprintf (sql, sizeof sql, fmt, c->b.table, str_arg);
   else
      snprintf (sql, sizeof sql, fmt, c->b.table, int_arg);
   return ll_mysql_exec_plain (c, sql, what, err);
}

/* Reads back what the connection keeps (ll_mysql_schema_sql.read_primary). */
static bool ll_mysql_read_primary (ll_mysql_conn_t *c, leaselock_error_t *err)
{
   char sql[512];
   snprintf (sql, sizeof sql, ll_mysql_schema_sql.read_primary, c->b.table);
   if (mysql_real_query (c->db, sql, strlen (sql)))
      return ll_mysql_fail_db (c, "recording the primary", err);
   MYSQL_RES *res = mysql_store_result (c->db);
   MYSQL_ROW row = res ? mysql_fetch_row (res) : NULL;
   bool ok = row && row[0] && row[1] && row[2];
   if (ok) {
      ll_primary_t *p = &c->b.primary;
      snprintf (p->primary_id, sizeof p->primary_id, "%s", row[3] ? row[3] : "");
      p->new_primary = row[4] && !strcmp (row[4], "1");
      ll_primary_seen (p, strtoll (row[0], NULL, 10), strtoll (row[1], NULL, 10),
                       strtoll (row[2], NULL, 10));
   }
   if (res)
      mysql_free_result (res);
   return ok || ll_backend_fail (err, "mysql", "recording the primary",
                                 "the meta record of the table is missing", NULL, NULL);
}

bool ll_mysql_check_primary (ll_sql_conn_t *b, leaselock_error_t *err)
{
   ll_mysql_conn_t *c = (ll_mysql_conn_t *)b;
   ll_mysql_facts_t f;
   memset (&f, 0, sizeof f);
   if (!ll_mysql_read_facts (c, ll_mysql_schema_sql.primary_variables, &f, err) ||
       !ll_mysql_read_facts (c, ll_mysql_schema_sql.primary_status, &f, err))
      return false;
   ll_mysql_durability (&b->primary, &f);
   char id[160], escaped[2 * sizeof id + 1];
   ll_mysql_identity (&f, id, sizeof id);
   mysql_real_escape_string (c->db, escaped, id, (unsigned long)strlen (id));
   return ll_mysql_exec_meta (c, ll_mysql_schema_sql.set_primary, escaped, 0,
                              "recording the primary", err) &&
          ll_mysql_exec_meta (c, ll_mysql_schema_sql.mark_primary, NULL,
                              (long long)b->primary.want_max_ttl_ms, "recording the primary",
                              err) &&
          ll_mysql_read_primary (c, err);
}

#endif /* LEASELOCK_WITH_MYSQL */
