/*
 * backend_mongodb_conn.c - a MongoDB connection: open (the URI read by
 * backend_mongodb_uri.c, the client, the collections, their write concern,
 * a ping, the primary recorded: backend_mongodb_primary.c), close and
 * abandon; the one format of a driver failure; and the
 * round trips the lease operations and the queue share (findAndModify,
 * updateOne, deleteMany).
 *
 * Threads and fork: a connection is one single-threaded mongoc_client_t,
 * used by one thread at a time (the engine pools connections). abandon()
 * (in a forked child) must send nothing on the sockets it shares with the
 * parent. Without TLS it calls mongoc_client_reset() before destroying the
 * client: the session pool is dropped without endSessions and the sockets
 * are closed without shutdown(). With TLS it leaks the client (see
 * ll_mongo_abandon): destroying it would send a TLS close_notify.
 */
#include <stdbool.h>

#ifdef LEASELOCK_WITH_MONGODB

#include "backend_mongodb_private.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_once_t ll_mongo_once = PTHREAD_ONCE_INIT;

static void ll_mongo_init (void)
{
   mongoc_init ();
}

/* ---- errors ------------------------------------------------------------ */

bool ll_mongo_fail (const ll_mongo_conn_t *conn, leaselock_error_t *err, const char *what,
                    const bson_error_t *e)
{
   char detail[32];
   snprintf (detail, sizeof detail, "error %u.%u", e->domain, e->code);
   return ll_backend_fail (err, "mongodb", what, e->message, conn ? &conn->secrets : NULL, detail);
}

bool ll_mongo_nomem (leaselock_error_t *err)
{
   return ll_error_set (err, LEASELOCK_NOMEM, "out of memory building a MongoDB command");
}

/* ---- open / close ------------------------------------------------------ */

static void ll_mongo_conn_free (ll_mongo_conn_t *conn)
{
   if (!conn)
      return;
   mongoc_collection_destroy (conn->coll);
   mongoc_collection_destroy (conn->queue);
   mongoc_collection_destroy (conn->meta);
   mongoc_client_destroy (conn->client);
   ll_secrets_clear (&conn->secrets);
   ll_wake_toucher_free (&conn->wake);
   free (conn);
}

/* The toucher of this machine's release channel of text's collection
 * (wake_file.c): none when the URI does not read as a generic one (its
 * listeners fail alike: waiters poll). */
static void ll_mongo_wake_init (ll_mongo_conn_t *conn, const char *text)
{
   ll_uri_t u;
   leaselock_error_t ignored;
   if (!ll_uri_parse (text, &u, &ignored))
      return;
   ll_wake_host_toucher (&conn->wake, "mongodb", &u, LL_MONGO_COLL_OPTION);
   ll_uri_cleanup (&u);
}

/* A connection with nothing open yet but the secrets of text (libmongoc's
 * URI errors quote the password, "Password \"...\" must not have unescaped
 * chars", so they are scrubbed too). */
static ll_mongo_conn_t *ll_mongo_conn_new (const char *text, leaselock_error_t *err)
{
   ll_mongo_conn_t *conn = calloc (1, sizeof *conn);
   if (!conn || !ll_secrets_from_uri (&conn->secrets, text)) {
      ll_mongo_conn_free (conn);
      return ll_mongo_nomem (err), NULL;
   }
   return conn;
}

/* The URI's write concern, with w=majority unless the URI sets w itself:
 * journal= and wtimeoutMS= combine with the default. safe=true (which
 * libmongoc turns into w=1) asks for acknowledged writes, which majority
 * is, so it does not lower the default. A URI's w that waits for replicas
 * without a wtimeoutMS gets the default one: the server would otherwise
 * hold the reply until the socket timeout, with the write applied on the
 * primary (an unknown outcome either way; the engine cleans it up). */
static bool ll_mongo_set_write_concern (ll_mongo_conn_t *conn, const mongoc_uri_t *uri,
                                        leaselock_error_t *err)
{
   mongoc_write_concern_t *wc = mongoc_write_concern_copy (mongoc_uri_get_write_concern (uri));
   if (!wc)
      return ll_mongo_nomem (err);
   if (!mongoc_uri_has_option (uri, MONGOC_URI_W))
      mongoc_write_concern_set_wmajority (
        wc, mongoc_uri_has_option (uri, MONGOC_URI_WTIMEOUTMS)
              ? (int32_t)mongoc_uri_get_option_as_int32 (uri, MONGOC_URI_WTIMEOUTMS, 0)
              : LL_MONGO_WTIMEOUT_MS);
   else if (!mongoc_uri_has_option (uri, MONGOC_URI_WTIMEOUTMS) &&
            (mongoc_write_concern_get_wmajority (wc) || mongoc_write_concern_get_wtag (wc) ||
             mongoc_write_concern_get_w (wc) > 1))
      mongoc_write_concern_set_wtimeout_int64 (wc, LL_MONGO_WTIMEOUT_MS);
   mongoc_collection_set_write_concern (conn->coll, wc);
   mongoc_collection_set_write_concern (conn->queue, wc);
   mongoc_collection_set_write_concern (conn->meta, wc);
   mongoc_write_concern_destroy (wc);
   return true;
}

/* Reaches the server now, so a wrong host or port fails at open. */
static bool ll_mongo_ping (ll_mongo_conn_t *conn, leaselock_error_t *err)
{
   bson_t ping = BSON_INITIALIZER, reply;
   bson_error_t e;
   BSON_APPEND_INT32 (&ping, "ping", 1);
   bool ok = mongoc_client_command_simple (conn->client, "admin", &ping, NULL, &reply, &e);
   if (!ok)
      ll_mongo_fail (conn, err, "connect", &e);
   bson_destroy (&ping);
   bson_destroy (&reply);
   return ok;
}

/* The client and collection on uri, checked with a ping. */
static bool ll_mongo_connect (ll_mongo_conn_t *conn, const mongoc_uri_t *uri, const char *collname,
                              leaselock_error_t *err)
{
   bson_error_t e;
   conn->client = mongoc_client_new_from_uri_with_error (uri, &e);
   if (!conn->client) {
      /* A failed SRV lookup is the network's doing; the rest is the URI. */
      ll_mongo_fail (conn, err, "client", &e);
      if (e.domain != MONGOC_ERROR_STREAM)
         err->code = LEASELOCK_INVALID;
      return false;
   }
   conn->tls = mongoc_uri_get_tls (uri);
   mongoc_client_set_error_api (conn->client, MONGOC_ERROR_API_VERSION_2);
   conn->coll = mongoc_client_get_collection (conn->client, ll_mongo_db (uri), collname);
   char *qname = bson_strdup_printf ("%s%s", collname, LL_MONGO_QUEUE_SUFFIX);
   conn->queue = mongoc_client_get_collection (conn->client, ll_mongo_db (uri), qname);
   bson_free (qname);
   char *mname = bson_strdup_printf ("%s%s", collname, LL_MONGO_META_SUFFIX);
   conn->meta = mongoc_client_get_collection (conn->client, ll_mongo_db (uri), mname);
   bson_free (mname);
   return ll_mongo_set_write_concern (conn, uri, err) && ll_mongo_ping (conn, err) &&
          ll_mongo_check_primary (conn, err);
}

void *ll_mongo_open (const char *text, leaselock_error_t *err)
{
   char *drv = NULL, *collname = NULL;
   mongoc_uri_t *uri = NULL;
   ll_mongo_conn_t *conn = NULL;

   pthread_once (&ll_mongo_once, ll_mongo_init);
   if (!text)
      return ll_error_set (err, LEASELOCK_INVALID, "MongoDB URI is NULL"), NULL;
   bool ok = ll_uri_check_at (text, err) && (conn = ll_mongo_conn_new (text, err)) &&
             ll_mongo_split_uri (text, &drv, &collname, &conn->primary, err) &&
             (uri = ll_mongo_read_uri (conn, text, drv, err)) &&
             ll_mongo_settle_uri (uri, &collname, err) &&
             ll_mongo_connect (conn, uri, collname, err);
   mongoc_uri_destroy (uri);
   free (drv);
   free (collname);
   if (!ok) {
      ll_mongo_conn_free (conn);
      return NULL;
   }
   ll_mongo_wake_init (conn, text);
   return conn;
}

void ll_mongo_close (void *c)
{
   ll_mongo_conn_free (c);
}

/* In a forked child: the client's sockets are shared with the parent.
 *
 * Without TLS, mongoc_client_reset() drops the session pool without
 * endSessions and bumps the generation; destroying the client then closes
 * the sockets without shutdown() (libmongoc skips it for a socket made by
 * another pid). Nothing is sent.
 *
 * With TLS, destroying a stream frees its OpenSSL BIO, which calls
 * SSL_shutdown(): a close_notify alert written on the parent's socket with
 * the parent's session keys and sequence number, which ends the parent's
 * TLS connection. libmongoc has no way to drop a TLS stream without that,
 * so the client is leaked: its memory and its copies of the socket
 * descriptors (close-on-exec, so an exec closes them). The engine abandons
 * at most its pool of idle connections plus those in use at the fork, so
 * the leak is bounded by that per fork. */
void ll_mongo_abandon (void *c)
{
   ll_mongo_conn_t *conn = c;
   if (!conn)
      return;
   if (conn->tls) {
      mongoc_collection_destroy (conn->coll); /* memory only, no I/O */
      mongoc_collection_destroy (conn->queue);
      mongoc_collection_destroy (conn->meta);
      conn->coll = NULL;
      conn->queue = NULL;
      conn->meta = NULL;
      conn->client = NULL; /* leaked on purpose */
   } else {
      mongoc_client_reset (conn->client);
   }
   ll_mongo_conn_free (conn);
}

/* ---- round trips ------------------------------------------------------- */

bool ll_mongo_fam_run (ll_mongo_conn_t *conn, mongoc_collection_t *coll, const bson_t *q,
                       mongoc_find_and_modify_opts_t *opts, bson_t **doc, leaselock_error_t *err)
{
   bson_t reply;
   bson_error_t e;
   bson_iter_t it;
   const uint8_t *data;
   uint32_t len;

   *doc = NULL;
   if (!opts)
      return ll_mongo_nomem (err);
   bool ok = mongoc_collection_find_and_modify_with_opts (coll, q, opts, &reply, &e);
   mongoc_find_and_modify_opts_destroy (opts);
   if (!ok) {
      bson_destroy (&reply);
      /* Only acquire's upsert inserts into the records: a key that exists. */
      if (coll == conn->coll && e.domain == MONGOC_ERROR_SERVER && e.code == LL_MONGO_DUPLICATE_KEY)
         return ll_error_set (err, LEASELOCK_BUSY, "held by another owner");
      return ll_mongo_fail (conn, err, "findAndModify", &e);
   }
   if (bson_iter_init_find (&it, &reply, "value") && BSON_ITER_HOLDS_DOCUMENT (&it)) {
      bson_iter_document (&it, &len, &data);
      *doc = bson_new_from_data (data, len);
      ok = *doc != NULL || ll_mongo_nomem (err);
   }
   bson_destroy (&reply);
   return ok;
}

bool ll_mongo_update (ll_mongo_conn_t *conn, const bson_t *q, const bson_t *u, bool *matched,
                      leaselock_error_t *err)
{
   bson_t reply;
   bson_error_t e;
   bson_iter_t it;

   *matched = false;
   if (!mongoc_collection_update_one (conn->coll, q, u, NULL, &reply, &e)) {
      bson_destroy (&reply);
      return ll_mongo_fail (conn, err, "update", &e);
   }
   if (bson_iter_init_find (&it, &reply, "matchedCount"))
      *matched = bson_iter_as_int64 (&it) > 0;
   bson_destroy (&reply);
   return true;
}

bool ll_mongo_update_owned (ll_mongo_conn_t *conn, bson_t *q, bson_t *u, bool ok,
                            leaselock_error_t *err)
{
   bool matched = false;
   if (!ok)
      ll_mongo_nomem (err);
   else if ((ok = ll_mongo_update (conn, q, u, &matched, err)) && !matched)
      ok = ll_error_set (err, LEASELOCK_NOT_HELD, "the lease is no longer held by this owner");
   bson_destroy (q);
   bson_destroy (u);
   return ok;
}

bool ll_mongo_delete_many (ll_mongo_conn_t *conn, mongoc_collection_t *coll, const bson_t *q,
                           int64_t *count, leaselock_error_t *err)
{
   bson_t reply;
   bson_error_t e;
   bson_iter_t it;

   bool ok = mongoc_collection_delete_many (coll, q, NULL, &reply, &e);
   if (!ok)
      ll_mongo_fail (conn, err, "deleteMany", &e);
   else if (count && bson_iter_init_find (&it, &reply, "deletedCount"))
      *count = bson_iter_as_int64 (&it);
   bson_destroy (&reply);
   return ok;
}

/* ---- test hooks (backend_mongodb_private.h) ------------------------------ */

mongoc_client_t *ll_mongo_test_client (void *conn)
{
   return ((ll_mongo_conn_t *)conn)->client;
}

mongoc_collection_t *ll_mongo_test_collection (void *conn)
{
   return ((ll_mongo_conn_t *)conn)->coll;
}

mongoc_collection_t *ll_mongo_test_queue (void *conn)
{
   return ((ll_mongo_conn_t *)conn)->queue;
}

bool ll_mongo_test_set_password (void *conn, const char *password)
{
   ll_mongo_conn_t *c = conn;
   return ll_secrets_add (&c->secrets, password, strlen (password));
}

#endif /* LEASELOCK_WITH_MONGODB */
