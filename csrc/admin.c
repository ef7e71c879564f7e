/*
 * admin.c - the calls that read or change records without holding them:
 * a client's stats, inspect, list, force_release and prune.
 */
#include "engine_private.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A pooled connection for one admin statement, and when it was sent. */
typedef struct admin_conn
{
   void *conn;
   pid_t me;
   int64_t t0;
} admin_conn_t;

/* Takes a connection from the pool; false (err set) when none can be had. */
static bool admin_begin (leaselock_client_t *c, admin_conn_t *a, leaselock_error_t *err)
{
   a->me = ll_getpid ();
   a->conn = ll_pool_get (c, a->me, err);
   a->t0 = ll_real_now_us ();
   return a->conn != NULL;
}

/* Gives the connection back (dropped when the statement broke it). */
static void admin_put (leaselock_client_t *c, admin_conn_t *a, bool ok,
                       const leaselock_error_t *err)
{
   ll_pool_put (c, a->conn, a->me, !ok && ll_conn_failed (err));
}

/* Counts the statement (what, on key), logs its backend error, and gives
 * the connection back. */
static void admin_end (leaselock_client_t *c, admin_conn_t *a, const char *what, const char *key,
                       size_t key_len, bool ok, const leaselock_error_t *err)
{
   ll_obs_request (&c->obs, a->t0, ok, err);
   if (!ok && (err->code == LEASELOCK_BACKEND || err->code == LEASELOCK_NOMEM))
      LL_LOG (&c->obs, LEASELOCK_LOG_WARNING, "backend_error", key, key_len, 0, err->code,
              "%s failed: %s", what, err->message);
   admin_put (c, a, ok, err);
}

bool leaselock_client_stats (leaselock_client_t *c, leaselock_stats_t *stats,
                             leaselock_error_t *error)
{
   ll_error_clear (error);
   if (!c || !stats)
      return ll_error_set (error, LEASELOCK_INVALID, "%s is NULL", c ? "stats" : "client");
   ll_obs_read (&c->obs, stats);
   pid_t me = ll_getpid ();
   pthread_mutex_lock (&c->mu);
   int64_t now = ll_now_ms ();
   for (leaselock_lease_t *l = c->leases; l; l = l->next_all)
      stats->leases_held += l->pid == me && l->state == LEASELOCK_STATE_HELD && now < l->dl.at_ms;
   pthread_mutex_unlock (&c->mu);
   return true;
}

/* A record's hold count as the contract has it: 0 without an owner, at
 * least 1 with one (a backend that keeps no count reports none); its
 * waiters and held time unknown (-1) when the backend does not read them. */
static void record_fix (const ll_backend_t *b, leaselock_record_t *r)
{
   if (!r->owner[0])
      r->holds = 0;
   else if (r->holds < 1)
      r->holds = 1;
   if (!b->record_waiters) {
      r->next_owner[0] = '\0';
      r->queued = -1;
      r->held_ms = -1;
   }
   if (!r->owner[0] || r->held_ms < 0)
      r->held_ms = -1;
}

/* leaselock_durability_t from a connection's view of its primary. */
static void durability_fill (leaselock_durability_t *out, const ll_primary_t *p)
{
   static const char *const levels[] = { [LL_DURABILITY_UNKNOWN] = "unknown",
                                         [LL_DURABILITY_STANDALONE] = "standalone",
                                         [LL_DURABILITY_DURABLE] = "durable",
                                         [LL_DURABILITY_AT_RISK] = "at-risk" };
   static const char *const policies[] = { [LL_DURABILITY_REPORT] = "report",
                                           [LL_DURABILITY_REQUIRE] = "require",
                                           [LL_DURABILITY_OFF] = "off" };
   out->level = levels[p->durability];
   out->policy = policies[p->policy];
   snprintf (out->detail, sizeof out->detail, "%s", p->durability_text);
   snprintf (out->primary, sizeof out->primary, "%s", p->primary_id);
   out->fence_floor = p->fence_floor;
   int64_t left = p->paused_until ? p->paused_until - ll_now_ms () : 0;
   out->lock_delay_ms = left > 0 ? left : 0;
   out->max_ttl_ms = p->max_ttl_ms;
}

bool leaselock_client_durability (leaselock_client_t *c, leaselock_durability_t *out,
                                  leaselock_error_t *error)
{
   leaselock_error_t *err = LL_ERROR_START (error);
   if (!ll_client_usable (c, err))
      return false;
   if (!out)
      return ll_error_set (err, LEASELOCK_INVALID, "out is NULL");
   memset (out, 0, sizeof *out);
   admin_conn_t a;
   if (!admin_begin (c, &a, err))
      return false;
   static const ll_primary_t none = { .durability_text = "this backend reports no replication" };
   const ll_primary_t *p = c->backend->primary ? c->backend->primary (a.conn) : NULL;
   durability_fill (out, p ? p : &none);
   admin_put (c, &a, true, err);
   return true;
}

bool leaselock_inspect (leaselock_client_t *c, const char *key, size_t key_len,
                        leaselock_record_t *record, bool *found, leaselock_error_t *error)
{
   leaselock_error_t *err = LL_ERROR_START (error);
   if (!ll_client_usable (c, err) || !ll_check_key (key, key_len, "key", false, err))
      return false;
   if (!record || !found)
      return ll_error_set (err, LEASELOCK_INVALID, "%s is NULL", record ? "found" : "record");
   memset (record, 0, sizeof *record);
   *found = false;
   admin_conn_t a;
   if (!admin_begin (c, &a, err))
      return false;
   bool ok = c->backend->inspect (a.conn, &(ll_op_t){ key, key_len, NULL }, record, found, err);
   record_fix (c->backend, record);
   admin_end (c, &a, "inspect", key, key_len, ok, err);
   return ok;
}

typedef struct records
{
   const ll_backend_t *backend;
   leaselock_record_t *recs;
   size_t n, cap;
   bool failed;
} records_t;

static bool records_add (const leaselock_record_t *rec, void *all_)
{
   records_t *all = all_;
   if (!ll_grow (&all->recs, &all->cap, all->n, sizeof *all->recs, 16)) {
      all->failed = true;
      return false;
   }
   all->recs[all->n] = *rec;
   record_fix (all->backend, &all->recs[all->n++]);
   return true;
}

/* The checks of list's and prune's client and prefix; a NULL prefix of
 * length 0 becomes "". */
static bool prefix_ok (leaselock_client_t *c, const char **prefix, size_t prefix_len,
                       leaselock_error_t *err)
{
   if (!ll_client_usable (c, err))
      return false;
   if (!*prefix && prefix_len == 0)
      *prefix = "";
   return ll_check_key (*prefix, prefix_len, "prefix", true, err);
}

bool leaselock_list (leaselock_client_t *c, const char *prefix, size_t prefix_len,
                     leaselock_record_cb fn, void *user_data, leaselock_error_t *error)
{
   leaselock_error_t *err = LL_ERROR_START (error);
   if (!prefix_ok (c, &prefix, prefix_len, err))
      return false;
   if (!fn)
      return ll_error_set (err, LEASELOCK_INVALID, "fn (the record callback) is NULL");
   /* Read everything first and call fn with no connection held: fn may
    * call leaselock itself, or fork. */
   records_t all = { .backend = c->backend };
   admin_conn_t a;
   if (!admin_begin (c, &a, err))
      return false;
   bool ok = c->backend->list (a.conn, prefix, prefix_len, records_add, &all, err);
   admin_end (c, &a, "list", prefix_len ? prefix : NULL, prefix_len, ok, err);
   if (ok && all.failed)
      ok = ll_error_set (err, LEASELOCK_NOMEM, "out of memory reading %zu records", all.n);
   for (size_t i = 0; ok && i < all.n && fn (&all.recs[i], user_data); i++) {
   }
   free (all.recs);
   return ok;
}

bool leaselock_force_release (leaselock_client_t *c, const char *key, size_t key_len, bool *took,
                              leaselock_error_t *error)
{
   leaselock_error_t *err = LL_ERROR_START (error);
   if (!ll_client_usable (c, err) || !ll_check_key (key, key_len, "key", false, err))
      return false;
   bool took_local = false;
   admin_conn_t a;
   if (!admin_begin (c, &a, err))
      return false;
   bool ok = c->backend->force_release (a.conn, &(ll_op_t){ key, key_len, NULL }, &took_local, err);
   admin_end (c, &a, "force_release", key, key_len, ok, err);
   if (ok)
      ll_bucket_wake (key, key_len);
   if (took)
      *took = ok && took_local;
   return ok;
}

bool leaselock_prune (leaselock_client_t *c, const char *prefix, size_t prefix_len,
                      int64_t older_than_ms, int64_t *count, leaselock_error_t *error)
{
   leaselock_error_t *err = LL_ERROR_START (error);
   if (count)
      *count = 0;
   if (!prefix_ok (c, &prefix, prefix_len, err) ||
       !ll_check_duration (older_than_ms, "older_than", err))
      return false;
   if (!c->backend->prune)
      return ll_error_set (err, LEASELOCK_UNSUPPORTED, "the %s backend cannot prune",
                           c->backend->name);
   int64_t n = 0;
   admin_conn_t a;
   if (!admin_begin (c, &a, err))
      return false;
   bool ok = c->backend->prune (a.conn, prefix, prefix_len, older_than_ms, &n, err);
   admin_put (c, &a, ok, err);
   if (ok && count)
      *count = n;
   return ok;
}
