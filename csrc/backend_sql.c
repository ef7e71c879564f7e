/*
 * backend_sql.c - the steps the MySQL and PostgreSQL backends take alike,
 * written once over each backend's driver calls (ll_sql_driver_t in
 * ll_internal.h): opening a connection, the table= option, the schema
 * check and its creation, reconnecting before a statement, closing, and
 * abandoning a connection after fork. Statements, parameters and rows stay
 * in each backend's own code.
 */
#include "ll_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Tests only (ll_internal.h): in each module that joins a SQL queue. */
void (*ll_test_queue_join_hook) (void);
void (*ll_test_queue_mark_hook) (void);

/* Reads the schema version and refuses a version other than the driver's.
 * When there is none, or an older one, create_schema runs first: it is
 * also the migration hook. Under the same lock or transaction as the
 * creation, it creates what is missing and brings a table at an older
 * version up to schema_version (re-reading the version there: another
 * process may have done it meanwhile), never touching a newer one. The
 * version is read again after it, so a table that another leaselock took
 * past ours meanwhile is still refused. */
static bool ensure_schema (ll_sql_conn_t *b, leaselock_error_t *err)
{
   const ll_sql_driver_t *d = b->driver;
   long version = -1;
   if (!d->read_version (b, &version, err))
      return false;
   if (version < d->schema_version) {
      if (!d->create_schema (b, err) || !d->read_version (b, &version, err))
         return false;
   }
   if (version == d->schema_version)
      return true;
   char msg[160];
   snprintf (msg, sizeof msg,
             "table %c%s%c has schema version %ld; this leaselock knows version %d", d->quote,
             b->table, d->quote, version, d->schema_version);
   return ll_backend_fail (err, d->name, "checking the schema", msg, NULL, NULL);
}

/* Connects, then checks the schema and the primary (a new one pauses
 * grants: failover.c); disconnected on failure. */
static bool sql_connect (ll_sql_conn_t *b, leaselock_error_t *err)
{
   if (b->driver->connect (b, err) && ensure_schema (b, err) && b->driver->check_primary (b, err))
      return true;
   b->driver->disconnect (b);
   return false;
}

/* Parses the URI, keeps its secrets to scrub from messages, and lets the
 * backend read the rest. */
static bool read_uri (ll_sql_conn_t *b, const char *text, leaselock_error_t *err)
{
   ll_uri_t u;
   if (!ll_uri_parse (text, &u, err))
      return false;
   bool ok = ll_secrets_from_uri (&b->secrets, text) ||
             ll_error_set (err, LEASELOCK_NOMEM, "out of memory");
   for (int i = 0; ok && i < u.n_params; i++) {
      bool taken;
      ok = ll_primary_option (&b->primary, b->driver->name, u.params[i].name, u.params[i].value,
                              &taken, err);
   }
   ok = ok && b->driver->parse_uri (b, &u, text, err);
   ll_uri_cleanup (&u);
   return ok;
}

void *ll_sql_open (ll_sql_conn_t *b, const ll_sql_driver_t *driver, const char *uri,
                   leaselock_error_t *err)
{
   if (!b)
      return ll_error_set (err, LEASELOCK_NOMEM, "out of memory"), NULL;
   b->driver = driver;
   snprintf (b->table, sizeof b->table, "leaselock");
   if (!read_uri (b, uri, err) ||
       !ll_sql_format_all (b->sql, driver->templates, LL_SQL_COUNT, b->table, err) ||
       !sql_connect (b, err)) {
      ll_sql_close (b);
      return NULL;
   }
   return b;
}

struct ll_primary *ll_sql_primary (void *conn)
{
   return &((ll_sql_conn_t *)conn)->primary;
}

bool ll_sql_table_option (ll_sql_conn_t *b, const char *value, leaselock_error_t *err)
{
   if (!ll_valid_identifier (value))
      return ll_error_set (err, LEASELOCK_INVALID,
                           "%s URI option table=\"%.64s\": expected an identifier of 1 to 58 "
                           "letters, digits or _ not starting with a digit",
                           b->driver->name, value);
   snprintf (b->table, sizeof b->table, "%s", value);
   return true;
}

/* ll_sql_ready's steps; on failure nothing was sent (ll_call_unsent). */
static bool sql_ready (ll_sql_conn_t *b, int id, leaselock_error_t *err)
{
   if (!b->driver->alive (b)) {
      b->driver->disconnect (b);
      if (!sql_connect (b, err))
         return false;
   }
   if ((id == LL_SQL_ACQUIRE || id == LL_SQL_ACQUIRE_FAIR) &&
       !ll_primary_grant_ok (&b->primary, b->driver->name, err))
      return false;
   return b->driver->prepare (b, id, err);
}

bool ll_sql_ready (ll_sql_conn_t *b, int id, leaselock_error_t *err)
{
   if (sql_ready (b, id, err))
      return true;
   ll_call_unsent_mark ();
   return false;
}

void ll_sql_close (void *conn)
{
   ll_sql_conn_t *b = conn;
   if (!b)
      return;
   b->driver->disconnect (b);
   b->driver->free_fields (b);
   for (int i = 0; i < LL_SQL_COUNT; i++)
      free (b->sql[i]);
   ll_secrets_clear (&b->secrets);
   free (b);
}

void ll_sql_free_secret (char *s)
{
   /* explicit_bzero: a memset just before free is a dead store the
    * compiler may drop (GCC -O2 does). */
   if (s)
      explicit_bzero (s, strlen (s));
   free (s);
}

/* The descriptor points at /dev/null before the driver closes it, so
 * closing sends nothing on the parent's connection: no COM_QUIT (MySQL), no
 * Terminate message (PostgreSQL), no TLS close. */
void ll_sql_abandon (void *conn)
{
   ll_sql_conn_t *b = conn;
   if (!b)
      return;
   int fd = b->driver->fd (b);
   if (fd >= 0 && !ll_fd_point_at_devnull (fd))
      return; /* leak rather than touch the parent's socket */
   ll_sql_close (b);
}
