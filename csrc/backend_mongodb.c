/*
 * backend_mongodb.c - the MongoDB backend (mongodb:// and mongodb+srv://)
 * on libmongoc-1.0 (the 1.x API Debian ships).
 *
 * URI: a standard MongoDB connection string. The database is the URI path
 * (default "leaselock"); the collection is the leaselock-only option
 * leaselockCollection (default "leaselock"), removed before the URI reaches
 * the driver. Any other option the driver does not know is refused (the
 * driver itself would only log a warning and ignore it). Defaults that differ
 * from the driver's, each kept when the URI sets its own:
 *   socketTimeoutMS=10000          (driver: 5 minutes; a lock op must not hang)
 *   serverSelectionTimeoutMS=5000  (driver: 30 s)
 *   connectTimeoutMS=5000          (driver: 10 s)
 *   w=majority, wtimeoutMS=5000    for acquire, renew, release, force_release
 *                                  (unless the URI sets w; its journal= is
 *                                  kept; w=0, w=-1 and safe=false refused)
 *   appname=leaselock
 * A URI's own socketTimeoutMS, serverSelectionTimeoutMS and
 * connectTimeoutMS must be 1 ms to 1 day: 0 (which libmongoc turns into its
 * own default) and negative values (a negative socket timeout waits
 * forever) are refused. A call therefore waits at most
 * serverSelectionTimeoutMS (which covers connecting) + socketTimeoutMS per
 * command (acquire may send two, acquire_wait three: 3 x (5 s + 10 s) by
 * default; a replica set's retryable write may add one more).
 *
 * One record per key, written only with the server's clock:
 *   { _id: key, owner: "<32 hex>" | null, fence: int64,
 *     acquiredAt: date, renewedAt: date, ttlMs: int64, holdMs: int64,
 *     holder: { host, pid, label },
 *     nextOwner: "<32 hex>" | null, nextAt: date, nextMs: int64,
 *     nextWaitedMs: int64, holds: int64 }
 * expiry = max(renewedAt + ttlMs, acquiredAt + holdMs). Dates come from
 * $currentDate; comparisons use $expr with $$NOW. holdMs is 0 except after a
 * release with min_hold, which writes renewedAt = now, ttlMs = 0 and
 * holdMs = min_hold, so the expiry becomes max(now, acquiredAt + min_hold)
 * without a pipeline update. A record without owner is free only once that
 * expiry is past.
 *
 * The next owner's reservation (acquire_wait): nextOwner, until = nextAt +
 * nextMs, since = nextAt - nextWaitedMs, written together by one claim
 * ($currentDate for nextAt). It is live while nextOwner is a string and
 * until > $$NOW. nextOwner null (a take clears it) or missing (a record
 * written before reservations existed) is no reservation: the queries read
 * it through $ifNull, which treats missing as null on MongoDB and
 * mongo-java-server alike, and until is then null or missing (null sorts
 * below every date), so the old records need no migration.
 *
 * acquire is a conditional findAndModify without upsert,
 *   { _id: key, $expr: { $or: [ { $eq: ["$owner", owner] },
 *       { $and: [ expired, { $or: [ no nextOwner, until <= $$NOW,
 *                                   { $eq: ["$nextOwner", owner] } ] } ] } ] } },
 * and only when it matches nothing an upsert whose query cannot match an
 * existing record, { _id: key, fence: { $exists: false } }: a record that
 * exists answers duplicate key 11000, which is BUSY (and nothing else is).
 * Real MongoDB refuses $expr in an upsert's query and mongo-java-server has
 * no pipeline updates; this shape is valid on both. Both set nextOwner to
 * null. acquire_wait sends the same conditional findAndModify and, when it
 * matches nothing, the claim: a findAndModify without upsert (its new
 * record tells the waiter the record's time left), { _id: key, $expr:
 * { $or: [ no nextOwner, until <= $$NOW, { $eq: ["$nextOwner", owner] },
 * since > $$NOW - waited_ms ] } }, that writes the reservation; only when
 * that matches nothing too (no record, or an older waiter's reservation)
 * the upsert. Without pipeline updates one statement cannot choose between
 * the take's update and the claim's: hence the second (and third) round
 * trip, on the busy path only. prune's filter adds "no live reservation"
 * to "expired", and a second deleteMany removes the queue entries that ran
 * out.
 *
 * holds, the owner's reentrant holds, is set to 1 by every take. hold is
 * a findAndModify that $incs it on the owner's live record (renew's query)
 * when the count may move, holds >= 1 for +1, > 1 for -1 (it never goes
 * below 1), returning the new count: 1 round trip. When that matches
 * nothing, a second findAndModify on the owner's live record alone, $max
 * {holds: 1}, tells "not held" (no document) from "at 1 already" (a -1
 * then succeeds with 1), and gives a record written before hold counts
 * (no holds field: 1 while owned, as inspect reads it) its 1, after which
 * the first try runs again; it runs again too when a concurrent +1 of the
 * same owner moved the count in between. A conditional $inc and $max,
 * never a pipeline update nor an upsert: valid on MongoDB 4.2+ and
 * mongo-java-server alike.
 *
 * The fair mode's queue is the collection "<collection>.queue" (its
 * documents in cmd_mongodb.h), beside the records and never read by the
 * lease operations; queue_join (2 or 3 round trips) says how it is
 * written. Like the records' collection it gets no index of leaselock's:
 * it holds only the entries of waiters (each deletes its own when done)
 * and those that ran out until a prune. force_release reads the record, then frees it with an
 * update conditional on what it read (see ll_mongo_force_release).
 *
 * Threads and fork: a connection is one single-threaded mongoc_client_t,
 * used by one thread at a time (the engine pools connections). abandon()
 * (in a forked child) must send nothing on the sockets it shares with the
 * parent. Without TLS it calls mongoc_client_reset() before destroying the
 * client: the session pool is dropped without endSessions and the sockets
 * are closed without shutdown(). With TLS it leaks the client (see
 * ll_mongo_abandon): destroying it would send a TLS close_notify.
 */
#include "ll_internal.h"

#ifdef LEASELOCK_WITH_MONGODB

#include "cmd_mongodb.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define LL_MONGO_COLL_OPTION "leaselockCollection"
#define LL_MONGO_SOCKET_TIMEOUT_MS 10000
#define LL_MONGO_SELECT_TIMEOUT_MS 5000
#define LL_MONGO_CONNECT_TIMEOUT_MS 5000

typedef struct ll_mongo_conn
{
   mongoc_client_t *client;    /* single-threaded, owned */
   mongoc_collection_t *coll;  /* owned; carries the write concern */
   mongoc_collection_t *queue; /* "<coll>.queue", the fair mode's; the same */
   ll_secrets_t secrets;       /* the URI's passwords, scrubbed from messages */
   bool tls;                   /* the URI asks for TLS (see ll_mongo_abandon) */
} ll_mongo_conn_t;

/* Options libmongoc 1.x knows (MONGOC_URI_* in mongoc-uri.h), lower case. */
static const char *const ll_mongo_known_options[] = { "appname",
                                                      "authmechanism",
                                                      "authmechanismproperties",
                                                      "authsource",
                                                      "canonicalizehostname",
                                                      "connecttimeoutms",
                                                      "compressors",
                                                      "directconnection",
                                                      "gssapiservicename",
                                                      "heartbeatfrequencyms",
                                                      "journal",
                                                      "loadbalanced",
                                                      "localthresholdms",
                                                      "maxidletimems",
                                                      "maxpoolsize",
                                                      "maxstalenessseconds",
                                                      "minpoolsize",
                                                      "readconcernlevel",
                                                      "readpreference",
                                                      "readpreferencetags",
                                                      "replicaset",
                                                      "retryreads",
                                                      "retrywrites",
                                                      "safe",
                                                      "serverselectiontimeoutms",
                                                      "serverselectiontryonce",
                                                      "slaveok",
                                                      "socketcheckintervalms",
                                                      "sockettimeoutms",
                                                      "srvservicename",
                                                      "srvmaxhosts",
                                                      "tls",
                                                      "tlscertificatekeyfile",
                                                      "tlscertificatekeyfilepassword",
                                                      "tlscafile",
                                                      "tlsallowinvalidcertificates",
                                                      "tlsallowinvalidhostnames",
                                                      "tlsinsecure",
                                                      "tlsdisablecertificaterevocationcheck",
                                                      "tlsdisableocspendpointcheck",
                                                      "w",
                                                      "waitqueuemultiple",
                                                      "waitqueuetimeoutms",
                                                      "wtimeoutms",
                                                      "zlibcompressionlevel",
                                                      "ssl",
                                                      "sslclientcertificatekeyfile",
                                                      "sslclientcertificatekeypassword",
                                                      "sslcertificateauthorityfile",
                                                      "sslallowinvalidcertificates",
                                                      "sslallowinvalidhostnames",
                                                      NULL };

static pthread_once_t ll_mongo_once = PTHREAD_ONCE_INIT;

static void ll_mongo_init (void)
{
   mongoc_init ();
}

/* ---- errors ------------------------------------------------------------ */

/* BACKEND "mongodb: <what>: <driver message> (error <domain>.<code>)",
 * the one format of a driver failure, without the connection's secrets.
 * Returns false. */
static bool ll_mongo_fail (const ll_mongo_conn_t *conn,
                           leaselock_error_t *err,
                           const char *what,
                           const bson_error_t *e)
{
   char detail[32];
   snprintf (detail, sizeof detail, "error %u.%u", e->domain, e->code);
   return ll_backend_fail (err, "mongodb", what, e->message, conn ? &conn->secrets : NULL, detail);
}

static bool ll_mongo_nomem (leaselock_error_t *err)
{
   return ll_error_set (err, LEASELOCK_NOMEM, "out of memory building a MongoDB command");
}

/* ---- URI --------------------------------------------------------------- */

static bool ll_mongo_option_known (const char *name, size_t len)
{
   for (const char *const *k = ll_mongo_known_options; *k; k++) {
      if (strlen (*k) == len && strncasecmp (*k, name, len) == 0)
         return true;
   }
   return false;
}

/* Collection names MongoDB refuses: empty, a '$', a leading '.', the
 * reserved "system." prefix, not UTF-8, or a namespace whose queue's
 * ("db.collection.queue") is over 255 bytes (a NUL cannot get here: the
 * decoder refuses %00).
 * 255 is the limit from MongoDB 4.4 on. MongoDB 4.2 allows only 120 bytes
 * for "db.collection"; the server version is not known here (and may differ
 * between the hosts of a URI), so on 4.2 a namespace of 121 to 255 bytes is
 * accepted at open and the first write that creates the collection fails
 * with BACKEND, carrying the server's message. */
static bool ll_mongo_check_collection (const char *db, const char *coll, leaselock_error_t *err)
{
   size_t len = strlen (coll);
   if (len == 0)
      return ll_error_set (err, LEASELOCK_INVALID, "MongoDB collection name is empty (option %s)",
                           LL_MONGO_COLL_OPTION);
   if (strchr (coll, '$'))
      return ll_error_set (err, LEASELOCK_INVALID, "MongoDB collection name \"%s\" contains '$'",
                           coll);
   if (coll[0] == '.')
      return ll_error_set (err, LEASELOCK_INVALID, "MongoDB collection name \"%s\" starts with '.'",
                           coll);
   if (strncmp (coll, "system.", 7) == 0)
      return ll_error_set (err, LEASELOCK_INVALID,
                           "MongoDB collection name \"%s\" uses the reserved prefix \"system.\"",
                           coll);
   if (!bson_utf8_validate (coll, len, false))
      return ll_error_set (err, LEASELOCK_INVALID, "MongoDB collection name is not valid UTF-8");
   /* The queue's collection, "<coll>.queue", must fit too. */
   size_t qlen = strlen (LL_MONGO_QUEUE_SUFFIX);
   if (strlen (db) + 1 + len + qlen > 255)
      return ll_error_set (err, LEASELOCK_INVALID,
                           "MongoDB namespace is longer than %zu bytes (%zu; MongoDB 4.2 allows "
                           "%zu): \"%.32s.%.32s...\" (its queue's, with \"%s\", must fit 255)",
                           255 - qlen, strlen (db) + 1 + len, 120 - qlen, db, coll,
                           LL_MONGO_QUEUE_SUFFIX);
   return true;
}

/* Where the driver's options start: the '?' after the first '/' past
 * the hosts, as the driver splits it; NULL when there is none. */
static const char *ll_mongo_query (const char *text)
{
   const char *sep = strstr (text, "://");
   if (!sep)
      return NULL;
   const char *slash = strchr (sep + 3, '/');
   return strchr (slash ? slash : sep + 3, '?');
}

/* The value of the leaselockCollection option item[0..len) (name length
 * nlen), percent-decoded, into *coll (the last one wins). */
static bool ll_mongo_take_collection (const char *item,
                                      size_t len,
                                      size_t nlen,
                                      char **coll,
                                      leaselock_error_t *err)
{
   bool nomem = false;
   const char *v = item + nlen + (nlen < len);
   char *dec = ll_percent_decode (v, (size_t)(item + len - v), false, &nomem);
   if (!dec)
      return nomem ? ll_mongo_nomem (err)
                   : ll_error_set (err, LEASELOCK_INVALID,
                                   "MongoDB URI option %s has a bad percent-escape or an encoded "
                                   "NUL byte",
                                   LL_MONGO_COLL_OPTION);
   free (*coll);
   *coll = dec;
   return true;
}

/* Copies the options p (after the '?') to out at *o, leaving out
 * leaselockCollection (its value goes to *coll), and the '?' too when no
 * option is left. Refuses options the driver does not know. */
static bool ll_mongo_filter_options (const char *p,
                                     char *out,
                                     size_t *o,
                                     char **coll,
                                     leaselock_error_t *err)
{
   bool first = true;
   for (; *p; p += *p == '&') {
      size_t len = strcspn (p, "&");
      const char *eq = memchr (p, '=', len);
      size_t nlen = eq ? (size_t)(eq - p) : len;
      const char *item = p;
      p += len;
      if (len && nlen == strlen (LL_MONGO_COLL_OPTION) &&
          strncasecmp (item, LL_MONGO_COLL_OPTION, nlen) == 0) {
         if (!ll_mongo_take_collection (item, len, nlen, coll, err))
            return false;
         continue;
      }
      /* An empty item ("a=1&&b=2") is left for the driver to judge. */
      if (len && !ll_mongo_option_known (item, nlen))
         return ll_error_set (err, LEASELOCK_INVALID, "unknown MongoDB URI option \"%.*s\"",
                              nlen > 64 ? 64 : (int)nlen, item);
      if (!first)
         out[(*o)++] = '&';
      memcpy (out + *o, item, len);
      *o += len;
      first = false;
   }
   if (first) /* no option left: drop the '?' */
      (*o)--;
   return true;
}

/*
 * Splits text into the URI for the driver (without leaselockCollection) and
 * the collection name (NULL when the URI names none). Refuses options the
 * driver does not know. *drv and *coll are new strings (free()) on success.
 */
static bool ll_mongo_split_uri (const char *text, char **drv, char **coll, leaselock_error_t *err)
{
   const char *q = ll_mongo_query (text);
   size_t n = strlen (text), o = q ? (size_t)(q - text) + 1 : n; /* through '?' */
   char *out = malloc (n + 1);

   *drv = NULL;
   *coll = NULL;
   if (!out)
      return ll_mongo_nomem (err);
   memcpy (out, text, o);
   if (q && !ll_mongo_filter_options (q + 1, out, &o, coll, err)) {
      free (out);
      free (*coll);
      *coll = NULL;
      return false;
   }
   out[o] = '\0';
   *drv = out;
   return true;
}

/* ---- open / close ------------------------------------------------------ */

/* The URI's own timeouts are bounds: 1 ms to 1 day. */
static bool ll_mongo_check_timeouts (const mongoc_uri_t *uri, leaselock_error_t *err)
{
   static const char *const names[] = { "socketTimeoutMS", "serverSelectionTimeoutMS",
                                        "connectTimeoutMS" };
   for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
      if (!mongoc_uri_has_option (uri, names[i]))
         continue;
      int32_t v = mongoc_uri_get_option_as_int32 (uri, names[i], 0); /* 0 when 0 */
      if (v < 1 || v > 86400000)
         return ll_error_set (err, LEASELOCK_INVALID,
                              "MongoDB URI option %s=%d: expected 1 to 86400000 ms (calls must "
                              "be bounded: 0 means the driver's default and a negative value "
                              "no bound at all)",
                              names[i], (int)v);
   }
   return true;
}

/* Unacknowledged writes (w=0, w=-1, or safe=false, which libmongoc turns
 * into w=0) cannot hold a lock: acquire would never learn whether it got
 * the key, nor release whether it let it go. */
static bool ll_mongo_check_acknowledged (const mongoc_uri_t *uri, leaselock_error_t *err)
{
   int32_t w = mongoc_write_concern_get_w (mongoc_uri_get_write_concern (uri));
   if (w == MONGOC_WRITE_CONCERN_W_UNACKNOWLEDGED || w == MONGOC_WRITE_CONCERN_W_ERRORS_IGNORED)
      return ll_error_set (err, LEASELOCK_INVALID,
                           "MongoDB URI asks for unacknowledged writes (w=%d): unacknowledged "
                           "writes cannot hold a lock; leave w unset (majority) or use w=1 or more",
                           (int)w);
   return true;
}

/* The database: the URI's path, or the default. */
static const char *ll_mongo_db (const mongoc_uri_t *uri)
{
   const char *db = mongoc_uri_get_database (uri);
   return db && *db ? db : LL_MONGO_DEFAULT_DB;
}

/* Checks what the URI asks for (the collection, acknowledged writes,
 * bounded timeouts; *collname gets the default when NULL) and sets
 * leaselock's defaults where the URI has none. */
static bool ll_mongo_settle_uri (mongoc_uri_t *uri, char **collname, leaselock_error_t *err)
{
   if (!*collname && !(*collname = strdup (LL_MONGO_DEFAULT_COLL)))
      return ll_mongo_nomem (err);
   if (!ll_mongo_check_collection (ll_mongo_db (uri), *collname, err) ||
       !ll_mongo_check_acknowledged (uri, err) || !ll_mongo_check_timeouts (uri, err))
      return false;
   if (!mongoc_uri_has_option (uri, MONGOC_URI_SOCKETTIMEOUTMS))
      mongoc_uri_set_option_as_int32 (uri, MONGOC_URI_SOCKETTIMEOUTMS, LL_MONGO_SOCKET_TIMEOUT_MS);
   if (!mongoc_uri_has_option (uri, MONGOC_URI_SERVERSELECTIONTIMEOUTMS))
      mongoc_uri_set_option_as_int32 (uri, MONGOC_URI_SERVERSELECTIONTIMEOUTMS,
                                      LL_MONGO_SELECT_TIMEOUT_MS);
   if (!mongoc_uri_has_option (uri, MONGOC_URI_CONNECTTIMEOUTMS))
      mongoc_uri_set_option_as_int32 (uri, MONGOC_URI_CONNECTTIMEOUTMS,
                                      LL_MONGO_CONNECT_TIMEOUT_MS);
   if (!mongoc_uri_get_appname (uri))
      mongoc_uri_set_appname (uri, "leaselock");
   return true;
}

static void ll_mongo_conn_free (ll_mongo_conn_t *conn)
{
   if (!conn)
      return;
   mongoc_collection_destroy (conn->coll);
   mongoc_collection_destroy (conn->queue);
   mongoc_client_destroy (conn->client);
   ll_secrets_clear (&conn->secrets);
   free (conn);
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

/* The driver's reading of drv (text without leaselock's options), or NULL
 * with INVALID; the password as libmongoc read it joins the secrets. */
static mongoc_uri_t *ll_mongo_read_uri (ll_mongo_conn_t *conn,
                                        const char *text,
                                        const char *drv,
                                        leaselock_error_t *err)
{
   bson_error_t e;
   mongoc_uri_t *uri = mongoc_uri_new_with_error (drv, &e);
   if (!uri) {
      char shown[512], what[600];
      ll_uri_redact (text, shown, sizeof shown);
      snprintf (what, sizeof what, "invalid URI \"%s\"", shown);
      ll_mongo_fail (conn, err, what, &e);
      err->code = LEASELOCK_INVALID;
      return NULL;
   }
   const char *pw = mongoc_uri_get_password (uri);
   if (pw && !ll_secrets_add (&conn->secrets, pw, strlen (pw))) {
      mongoc_uri_destroy (uri);
      return ll_mongo_nomem (err), NULL;
   }
   return uri;
}

/* The URI's write concern, with w=majority unless the URI sets w itself:
 * journal= and wtimeoutMS= combine with the default. safe=true (which
 * libmongoc turns into w=1) asks for acknowledged writes, which majority
 * is, so it does not lower the default. */
static bool ll_mongo_set_write_concern (ll_mongo_conn_t *conn,
                                        const mongoc_uri_t *uri,
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
   mongoc_collection_set_write_concern (conn->coll, wc);
   mongoc_collection_set_write_concern (conn->queue, wc);
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
static bool ll_mongo_connect (ll_mongo_conn_t *conn,
                              const mongoc_uri_t *uri,
                              const char *collname,
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
   return ll_mongo_set_write_concern (conn, uri, err) && ll_mongo_ping (conn, err);
}

static void *ll_mongo_open (const char *text, leaselock_error_t *err)
{
   char *drv = NULL, *collname = NULL;
   mongoc_uri_t *uri = NULL;
   ll_mongo_conn_t *conn = NULL;

   pthread_once (&ll_mongo_once, ll_mongo_init);
   if (!text)
      return ll_error_set (err, LEASELOCK_INVALID, "MongoDB URI is NULL"), NULL;
   bool ok =
     ll_uri_check_at (text, err) && ll_mongo_split_uri (text, &drv, &collname, err) &&
     (conn = ll_mongo_conn_new (text, err)) && (uri = ll_mongo_read_uri (conn, text, drv, err)) &&
     ll_mongo_settle_uri (uri, &collname, err) && ll_mongo_connect (conn, uri, collname, err);
   mongoc_uri_destroy (uri);
   free (drv);
   free (collname);
   if (!ok) {
      ll_mongo_conn_free (conn);
      return NULL;
   }
   return conn;
}

static void ll_mongo_close (void *c)
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
static void ll_mongo_abandon (void *c)
{
   ll_mongo_conn_t *conn = c;
   if (!conn)
      return;
   if (conn->tls) {
      mongoc_collection_destroy (conn->coll); /* memory only, no I/O */
      mongoc_collection_destroy (conn->queue);
      conn->coll = NULL;
      conn->queue = NULL;
      conn->client = NULL; /* leaked on purpose */
   } else {
      mongoc_client_reset (conn->client);
   }
   ll_mongo_conn_free (conn);
}

/* ---- round trips ------------------------------------------------------- */

/* Runs findAndModify(query, update) returning the new document's fence.
 * *matched: whether a document was modified or inserted. *dup: the server
 * answered duplicate key (only looked at when upsert). */
static bool ll_mongo_fam (ll_mongo_conn_t *conn,
                          const bson_t *query,
                          const bson_t *update,
                          bool upsert,
                          bool *matched,
                          int64_t *fence,
                          bool *dup,
                          leaselock_error_t *err)
{
   mongoc_find_and_modify_opts_t *opts = ll_mongo_fam_opts (update, upsert);
   bson_t reply;
   bson_error_t e;
   bson_iter_t it, v;

   *matched = false;
   if (dup)
      *dup = false;
   if (!opts)
      return ll_mongo_nomem (err);
   bool ok = mongoc_collection_find_and_modify_with_opts (conn->coll, query, opts, &reply, &e);
   mongoc_find_and_modify_opts_destroy (opts);
   if (!ok) {
      bson_destroy (&reply);
      if (upsert && dup && e.domain == MONGOC_ERROR_SERVER && e.code == LL_MONGO_DUPLICATE_KEY) {
         *dup = true;
         return ll_error_set (err, LEASELOCK_BUSY, "held by another owner");
      }
      return ll_mongo_fail (conn, err, "findAndModify", &e);
   }
   if (bson_iter_init_find (&it, &reply, "value") && BSON_ITER_HOLDS_DOCUMENT (&it) &&
       bson_iter_recurse (&it, &v) && bson_iter_find (&v, "fence")) {
      *matched = true;
      if (fence)
         *fence = bson_iter_as_int64 (&v);
   }
   bson_destroy (&reply);
   return true;
}

/* updateOne(q, u); *matched from the reply's matchedCount. */
static bool ll_mongo_update (ll_mongo_conn_t *conn,
                             const bson_t *q,
                             const bson_t *u,
                             bool *matched,
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

/* findAndModify(q, u) without upsert, returning the fields named in
 * fields (NULL-terminated) of the new document: *matched whether a
 * document matched, and then *doc a copy of them (the caller destroys
 * it). */
static bool ll_mongo_fam_new (ll_mongo_conn_t *conn,
                              const bson_t *q,
                              const bson_t *u,
                              const char *const *fields,
                              bool *matched,
                              bson_t **doc,
                              leaselock_error_t *err)
{
   mongoc_find_and_modify_opts_t *opts = mongoc_find_and_modify_opts_new ();
   bson_t proj = BSON_INITIALIZER, reply;
   bson_error_t e;
   bson_iter_t it;
   const uint8_t *data;
   uint32_t len;

   *matched = false;
   *doc = NULL;
   bool ok = opts != NULL;
   for (int i = 0; ok && fields[i]; i++)
      ok = bson_append_int32 (&proj, fields[i], -1, 1);
   ok = ok && mongoc_find_and_modify_opts_set_update (opts, u) &&
        mongoc_find_and_modify_opts_set_fields (opts, &proj) &&
        mongoc_find_and_modify_opts_set_flags (opts, MONGOC_FIND_AND_MODIFY_RETURN_NEW);
   bson_destroy (&proj);
   if (!ok) {
      mongoc_find_and_modify_opts_destroy (opts);
      return ll_mongo_nomem (err);
   }
   ok = mongoc_collection_find_and_modify_with_opts (conn->coll, q, opts, &reply, &e);
   mongoc_find_and_modify_opts_destroy (opts);
   if (!ok) {
      bson_destroy (&reply);
      return ll_mongo_fail (conn, err, "findAndModify", &e);
   }
   if (bson_iter_init_find (&it, &reply, "value") && BSON_ITER_HOLDS_DOCUMENT (&it)) {
      bson_iter_document (&it, &len, &data);
      *doc = bson_new_from_data (data, len);
      *matched = true;
      ok = *doc != NULL || ll_mongo_nomem (err);
   }
   bson_destroy (&reply);
   return ok;
}

/* ll_mongo_update for an owner's record, built (ok) into q and u, which
 * it destroys: NOT_HELD when nothing matched. */
static bool ll_mongo_update_owned (ll_mongo_conn_t *conn,
                                   bson_t *q,
                                   bson_t *u,
                                   bool ok,
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

/* ---- operations -------------------------------------------------------- */

/* Builds acquire's conditional query and its update into q and u. */
static bool ll_mongo_take_command (bson_t *q,
                                   bson_t *u,
                                   const char *key,
                                   size_t key_len,
                                   const char *owner,
                                   int64_t ttl_ms,
                                   const ll_holder_t *holder,
                                   leaselock_error_t *err)
{
   if (ll_mongo_acquire_query (q, key, key_len, owner) &&
       ll_mongo_acquire_update (u, owner, ttl_ms, holder && holder->host ? holder->host : "",
                                holder ? holder->pid : 0,
                                holder && holder->label ? holder->label : ""))
      return true;
   return ll_mongo_nomem (err);
}

/* acquire's second try with update u: an upsert whose query matches no
 * existing record. A record that exists answers 11000: BUSY. */
static bool ll_mongo_take_new (ll_mongo_conn_t *conn,
                               const char *key,
                               size_t key_len,
                               const bson_t *u,
                               int64_t *fence,
                               leaselock_error_t *err)
{
   bson_t q = BSON_INITIALIZER;
   bool ok, matched = false, dup = false;

   if (ll_mongo_upsert_query (&q, key, key_len))
      ok = ll_mongo_fam (conn, &q, u, true, &matched, fence, &dup, err);
   else
      ok = ll_mongo_nomem (err);
   bson_destroy (&q);
   if (ok && !matched)
      ok = ll_backend_fail (err, "mongodb", "findAndModify upsert",
                            "no document returned for the key", NULL, NULL);
   return ok;
}

static bool ll_mongo_acquire (void *c,
                              const char *key,
                              size_t key_len,
                              const char *owner,
                              int64_t ttl_ms,
                              const ll_holder_t *holder,
                              int64_t *fence,
                              leaselock_error_t *err)
{
   ll_mongo_conn_t *conn = c;
   bson_t q = BSON_INITIALIZER, u = BSON_INITIALIZER;
   bool matched = false;
   bool ok = ll_mongo_take_command (&q, &u, key, key_len, owner, ttl_ms, holder, err) &&
             ll_mongo_fam (conn, &q, &u, false, &matched, fence, NULL, err);
   /* No such record, or a live one of another owner (or reserved for
    * another waiter): the upsert. */
   if (ok && !matched)
      ok = ll_mongo_take_new (conn, key, key_len, &u, fence, err);
   bson_destroy (&q);
   bson_destroy (&u);
   return ok;
}

/* The claim (ll_mongo_claim_command), a findAndModify without upsert:
 * *reserved when it matched, and then *left_ms, the record's time left at
 * the claim by the server's clock: max(renewedAt + ttlMs, acquiredAt +
 * holdMs) - nextAt, nextAt being the claim's own $currentDate (-1 when a
 * field is missing). */
static bool ll_mongo_claim (ll_mongo_conn_t *conn,
                            const bson_t *q,
                            const bson_t *u,
                            bool *reserved,
                            int64_t *left_ms,
                            leaselock_error_t *err)
{
   static const char *const fields[] = { "renewedAt", "ttlMs",  "acquiredAt",
                                         "holdMs",    "nextAt", NULL };
   bson_t *doc;
   bson_iter_t v;
   int64_t t[5];
   *left_ms = -1;
   if (!ll_mongo_fam_new (conn, q, u, fields, reserved, &doc, err))
      return false;
   bool all = doc != NULL;
   for (int i = 0; all && i < 5; i++) {
      all = bson_iter_init_find (&v, doc, fields[i]);
      if (all && (i == 1 || i == 3))
         t[i] = bson_iter_as_int64 (&v);
      else if (all)
         all = BSON_ITER_HOLDS_DATE_TIME (&v) && ((t[i] = bson_iter_date_time (&v)), true);
   }
   if (all) {
      int64_t end = t[0] + t[1] > t[2] + t[3] ? t[0] + t[1] : t[2] + t[3];
      *left_ms = end > t[4] ? end - t[4] : 0;
   }
   if (doc)
      bson_destroy (doc);
   return true;
}

/* acquire_wait: acquire's conditional findAndModify; when it matches
 * nothing, the claim (ll_mongo_claim, also a findAndModify): when that
 * matches, the record exists and owner is its next owner: BUSY with
 * *reserved (should the key have come free in between, the reservation
 * keeps it for owner's next try). When it matches nothing too, the record
 * is missing or reserved for an older waiter: acquire's upsert settles
 * which (it takes a missing key; 11000 is BUSY, not reserved). Round
 * trips: 1 when it takes an existing record, 2 when busy and reserved, 3
 * otherwise. */
static bool ll_mongo_acquire_wait (void *c,
                                   const char *key,
                                   size_t key_len,
                                   const char *owner,
                                   int64_t ttl_ms,
                                   const ll_holder_t *holder,
                                   int64_t reserve_ms,
                                   int64_t waited_ms,
                                   int64_t *fence,
                                   bool *reserved,
                                   int64_t *left_ms,
                                   leaselock_error_t *err)
{
   ll_mongo_conn_t *conn = c;
   bson_t q = BSON_INITIALIZER, u = BSON_INITIALIZER;
   bson_t cq = BSON_INITIALIZER, cu = BSON_INITIALIZER;
   bool matched = false;

   *reserved = false;
   *left_ms = -1;
   bool ok = ll_mongo_take_command (&q, &u, key, key_len, owner, ttl_ms, holder, err) &&
             ll_mongo_fam (conn, &q, &u, false, &matched, fence, NULL, err);
   if (ok && !matched) {
      ok = ll_mongo_claim_command (&cq, &cu, key, key_len, owner, reserve_ms, waited_ms) ||
           ll_mongo_nomem (err);
      ok = ok && ll_mongo_claim (conn, &cq, &cu, reserved, left_ms, err);
      if (ok && *reserved)
         ok = ll_error_set (err, LEASELOCK_BUSY, "held by another owner");
      else if (ok)
         ok = ll_mongo_take_new (conn, key, key_len, &u, fence, err);
   }
   bson_destroy (&q);
   bson_destroy (&u);
   bson_destroy (&cq);
   bson_destroy (&cu);
   return ok;
}

static bool ll_mongo_renew (void *c,
                            const char *key,
                            size_t key_len,
                            const char *owner,
                            int64_t ttl_ms,
                            leaselock_error_t *err)
{
   bson_t q = BSON_INITIALIZER, u = BSON_INITIALIZER;
   bool ok = ll_mongo_renew_command (&q, &u, key, key_len, owner, ttl_ms);
   return ll_mongo_update_owned (c, &q, &u, ok, err);
}

static bool ll_mongo_release (void *c,
                              const char *key,
                              size_t key_len,
                              const char *owner,
                              int64_t min_hold_ms,
                              leaselock_error_t *err)
{
   bson_t q = BSON_INITIALIZER, u = BSON_INITIALIZER;
   bool ok =
     ll_mongo_owned_query (&q, key, key_len, owner) && ll_mongo_free_update (&u, min_hold_ms);
   return ll_mongo_update_owned (c, &q, &u, ok, err);
}

/* findAndModify(q, u) without upsert returning the new document's holds:
 * *matched whether a document matched. */
static bool ll_mongo_fam_holds (ll_mongo_conn_t *conn,
                                const bson_t *q,
                                const bson_t *u,
                                bool *matched,
                                int64_t *holds,
                                leaselock_error_t *err)
{
   static const char *const fields[] = { "holds", NULL };
   bson_t *doc;
   bson_iter_t v;
   if (!ll_mongo_fam_new (conn, q, u, fields, matched, &doc, err))
      return false;
   if (*matched)
      *holds = bson_iter_init_find (&v, doc, "holds") ? bson_iter_as_int64 (&v) : 1;
   if (doc)
      bson_destroy (doc);
   return true;
}

/* hold (the top comment says how): 1 round trip when the count moves, 2
 * when -1 finds it at 1 or the lease is not held, 3 for +1 on a record
 * written before hold counts; again while the same owner's concurrent
 * holds move the count between the two tries. */
#define LL_MONGO_HOLD_TRIES 16

static bool ll_mongo_hold (void *c,
                           const char *key,
                           size_t key_len,
                           const char *owner,
                           int delta,
                           int64_t *holds,
                           leaselock_error_t *err)
{
   ll_mongo_conn_t *conn = c;
   for (int i = 0; i < LL_MONGO_HOLD_TRIES; i++) {
      bson_t q = BSON_INITIALIZER, u = BSON_INITIALIZER;
      bool matched = false;
      int64_t n = 0;
      bool ok = ll_mongo_hold_command (&q, &u, key, key_len, owner, delta) || ll_mongo_nomem (err);
      ok = ok && ll_mongo_fam_holds (conn, &q, &u, &matched, &n, err);
      bson_destroy (&q);
      bson_destroy (&u);
      if (!ok)
         return false;
      if (matched) {
         *holds = n;
         return true;
      }
      q = (bson_t)BSON_INITIALIZER;
      u = (bson_t)BSON_INITIALIZER;
      ok = ll_mongo_hold_floor_command (&q, &u, key, key_len, owner) || ll_mongo_nomem (err);
      ok = ok && ll_mongo_fam_holds (conn, &q, &u, &matched, &n, err);
      bson_destroy (&q);
      bson_destroy (&u);
      if (!ok)
         return false;
      if (!matched)
         return ll_error_set (err, LEASELOCK_NOT_HELD, "the lease is no longer held by this owner");
      if (delta < 0 && n <= 1) {
         *holds = 1; /* at 1 already: never below */
         return true;
      }
   }
   char detail[32];
   snprintf (detail, sizeof detail, "%d tries", LL_MONGO_HOLD_TRIES);
   return ll_backend_fail (err, "mongodb", "hold", "the hold count kept changing", NULL, detail);
}

/* Copies a utf8 field of doc into buf (truncated, NUL-terminated). */
static void ll_mongo_copy_str (const bson_iter_t *it, char *buf, size_t size, size_t *len_out)
{
   uint32_t len = 0;
   const char *s = BSON_ITER_HOLDS_UTF8 (it) ? bson_iter_utf8 (it, &len) : "";
   size_t n = ll_copy_clipped (buf, size, s, len);
   if (len_out)
      *len_out = n;
}

/* Fills rec from a document shaped by ll_mongo_record_pipeline. */
static void ll_mongo_fill_record (const bson_t *doc, leaselock_record_t *rec)
{
   bson_iter_t it, h;

   memset (rec, 0, sizeof *rec);
   if (!bson_iter_init (&it, doc))
      return;
   while (bson_iter_next (&it)) {
      const char *k = bson_iter_key (&it);
      if (strcmp (k, "_id") == 0) {
         ll_mongo_copy_str (&it, rec->key, sizeof rec->key, &rec->key_len);
      } else if (strcmp (k, "owner") == 0) {
         if (BSON_ITER_HOLDS_UTF8 (&it))
            ll_mongo_copy_str (&it, rec->owner, sizeof rec->owner, NULL);
      } else if (strcmp (k, "fence") == 0) {
         rec->fence = bson_iter_as_int64 (&it);
      } else if (strcmp (k, "holds") == 0) {
         rec->holds = bson_iter_as_int64 (&it);
      } else if (strcmp (k, "leftMs") == 0) {
         /* null when the record lacks the fields: expired */
         rec->expires_in_ms = (BSON_ITER_HOLDS_NUMBER (&it) || BSON_ITER_HOLDS_INT (&it))
                                ? bson_iter_as_int64 (&it)
                                : 0;
      } else if (strcmp (k, "holder") == 0 && BSON_ITER_HOLDS_DOCUMENT (&it) &&
                 bson_iter_recurse (&it, &h)) {
         while (bson_iter_next (&h)) {
            const char *hk = bson_iter_key (&h);
            if (strcmp (hk, "host") == 0)
               ll_mongo_copy_str (&h, rec->host, sizeof rec->host, NULL);
            else if (strcmp (hk, "label") == 0)
               ll_mongo_copy_str (&h, rec->label, sizeof rec->label, NULL);
            else if (strcmp (hk, "pid") == 0)
               rec->pid = bson_iter_as_int64 (&h);
         }
      }
   }
   /* Released: no holds (the stored count is stale); owned without the
    * field (written before hold counts): 1. */
   if (!rec->owner[0])
      rec->holds = 0;
   else if (rec->holds < 1)
      rec->holds = 1;
}

/* Runs the record pipeline for match and calls fn for each record. */
static bool ll_mongo_records (ll_mongo_conn_t *conn,
                              const bson_t *match,
                              bool (*fn) (const leaselock_record_t *, void *),
                              void *data,
                              leaselock_error_t *err)
{
   bson_t pipeline = BSON_INITIALIZER;
   mongoc_cursor_t *cursor;
   const bson_t *doc;
   bson_error_t e;
   leaselock_record_t rec;
   bool ok = true;

   if (!ll_mongo_record_pipeline (&pipeline, match)) {
      bson_destroy (&pipeline);
      return ll_mongo_nomem (err);
   }
   cursor = mongoc_collection_aggregate (conn->coll, MONGOC_QUERY_NONE, &pipeline, NULL, NULL);
   bson_destroy (&pipeline);
   while (mongoc_cursor_next (cursor, &doc)) {
      ll_mongo_fill_record (doc, &rec);
      if (!fn (&rec, data))
         break;
   }
   if (mongoc_cursor_error (cursor, &e))
      ok = ll_mongo_fail (conn, err, "aggregate", &e);
   mongoc_cursor_destroy (cursor);
   return ok;
}

static bool ll_mongo_inspect (void *c,
                              const char *key,
                              size_t key_len,
                              leaselock_record_t *rec,
                              bool *found,
                              leaselock_error_t *err)
{
   bson_t match = BSON_INITIALIZER;
   ll_record_one_t one = { rec, found };
   bool ok;

   *found = false;
   if (!ll_mongo_append_key (&match, key, key_len)) {
      bson_destroy (&match);
      return ll_mongo_nomem (err);
   }
   ok = ll_mongo_records (c, &match, ll_record_take_one, &one, err);
   bson_destroy (&match);
   return ok;
}

static bool ll_mongo_list (void *c,
                           const char *prefix,
                           size_t prefix_len,
                           leaselock_record_cb fn,
                           void *user_data,
                           leaselock_error_t *err)
{
   bson_t match = BSON_INITIALIZER;
   bool ok = ll_mongo_prefix_match (&match, prefix, prefix_len) || ll_mongo_nomem (err);
   ok = ok && ll_mongo_records (c, &match, fn, user_data, err);
   bson_destroy (&match);
   return ok;
}

/*
 * force_release: owner cleared and expiry = now whatever the owner, fence
 * kept; *took when a live lease was taken away. *took must be judged by the
 * server clock at the moment of the write, which one classic findAndModify
 * cannot report (it returns the document before or after the update, never
 * "now" with the old expiry; pipeline updates, which could, are missing on
 * mongo-java-server). So: read the record (the inspect pipeline, expiry
 * judged by $$NOW), then free it with an update conditional on what was
 * read: the same fence (no acquire since), an owner or none as read (no
 * release since), and, when it was live, still live by $$NOW. If anything
 * changed in between, read again. An unconditional second write could
 * clear a lease acquired in between while reporting that none was taken.
 */
#define LL_MONGO_FORCE_TRIES 16

static bool ll_mongo_force_release (void *c,
                                    const char *key,
                                    size_t key_len,
                                    bool *took,
                                    leaselock_error_t *err)
{
   ll_mongo_conn_t *conn = c;

   *took = false;
   for (int i = 0; i < LL_MONGO_FORCE_TRIES; i++) {
      leaselock_record_t rec;
      bson_t q = BSON_INITIALIZER, u = BSON_INITIALIZER;
      bool found = false, matched = false, ok = true, live;

      if (!ll_mongo_inspect (conn, key, key_len, &rec, &found, err))
         return false;
      if (!found)
         return true; /* no record: nothing to release */
      live = rec.owner[0] && rec.expires_in_ms > 0;
      ok = ll_mongo_force_query (&q, key, key_len, rec.fence, rec.owner[0] != '\0', live) &&
           ll_mongo_free_update (&u, 0);
      if (!ok)
         ll_mongo_nomem (err);
      else
         ok = ll_mongo_update (conn, &q, &u, &matched, err);
      bson_destroy (&q);
      bson_destroy (&u);
      if (!ok)
         return false;
      if (matched) {
         *took = live;
         return true;
      }
   }
   char detail[32];
   snprintf (detail, sizeof detail, "%d tries", LL_MONGO_FORCE_TRIES);
   return ll_backend_fail (err, "mongodb", "force_release", "the record kept changing", NULL,
                           detail);
}

/* prune: one deleteMany of the expired records under the prefix
 * (ll_mongo_prune_filter); *count from the reply's deletedCount. */
static bool ll_mongo_prune (void *c,
                            const char *prefix,
                            size_t prefix_len,
                            int64_t older_than_ms,
                            int64_t *count,
                            leaselock_error_t *err)
{
   ll_mongo_conn_t *conn = c;
   bson_t q = BSON_INITIALIZER, reply;
   bson_error_t e;
   bson_iter_t it;

   *count = 0;
   if (!ll_mongo_prune_filter (&q, prefix, prefix_len, older_than_ms)) {
      bson_destroy (&q);
      return ll_mongo_nomem (err);
   }
   bool ok = mongoc_collection_delete_many (conn->coll, &q, NULL, &reply, &e);
   bson_destroy (&q);
   if (!ok) {
      bson_destroy (&reply);
      return ll_mongo_fail (conn, err, "deleteMany", &e);
   }
   if (bson_iter_init_find (&it, &reply, "deletedCount"))
      *count = bson_iter_as_int64 (&it);
   bson_destroy (&reply);
   /* The queue entries that ran out go too (not counted: not records). */
   q = (bson_t)BSON_INITIALIZER;
   if (!ll_mongo_queue_prune_filter (&q, prefix, prefix_len, older_than_ms)) {
      bson_destroy (&q);
      return ll_mongo_nomem (err);
   }
   ok = mongoc_collection_delete_many (conn->queue, &q, NULL, NULL, &e);
   bson_destroy (&q);
   return ok || ll_mongo_fail (conn, err, "deleteMany", &e);
}

/* ---- the fair mode's queue ----------------------------------------------- */

/* findAndModify(q, u) on the queue, returning the new entry's arrival
 * (ms since the epoch, the server's date); *matched: whether an entry was
 * modified or inserted. */
static bool ll_mongo_queue_fam (ll_mongo_conn_t *conn,
                                const bson_t *q,
                                const bson_t *u,
                                bool upsert,
                                bool *matched,
                                int64_t *arrived,
                                leaselock_error_t *err)
{
   mongoc_find_and_modify_opts_t *opts = mongoc_find_and_modify_opts_new ();
   bson_t fields = BSON_INITIALIZER, reply;
   bson_error_t e;
   bson_iter_t it, v;

   *matched = false;
   if (!opts || !BSON_APPEND_INT32 (&fields, "arrived", 1)) {
      mongoc_find_and_modify_opts_destroy (opts);
      bson_destroy (&fields);
      return ll_mongo_nomem (err);
   }
   mongoc_find_and_modify_opts_set_update (opts, u);
   mongoc_find_and_modify_opts_set_fields (opts, &fields);
   mongoc_find_and_modify_opts_set_flags (opts, MONGOC_FIND_AND_MODIFY_RETURN_NEW |
                                                  (upsert ? MONGOC_FIND_AND_MODIFY_UPSERT : 0));
   bool ok = mongoc_collection_find_and_modify_with_opts (conn->queue, q, opts, &reply, &e);
   mongoc_find_and_modify_opts_destroy (opts);
   bson_destroy (&fields);
   if (!ok) {
      bson_destroy (&reply);
      return ll_mongo_fail (conn, err, "findAndModify", &e);
   }
   if (bson_iter_init_find (&it, &reply, "value") && BSON_ITER_HOLDS_DOCUMENT (&it) &&
       bson_iter_recurse (&it, &v) && bson_iter_find (&v, "arrived") &&
       BSON_ITER_HOLDS_DATE_TIME (&v)) {
      *matched = true;
      *arrived = bson_iter_date_time (&v);
   }
   bson_destroy (&reply);
   return true;
}

/*
 * queue_join: 2 round trips when owner's entry is live, 3 when it is new
 * or ran out.
 *  1. a findAndModify without upsert that refreshes a live entry (seenAt =
 *     now), keeping its arrival: {_id: {k, o}, $expr: live};
 *  2. when that matches nothing, an upsert on {_id: {k, o}} alone (no
 *     $expr in an upsert's query) that arrives now: nothing can make the
 *     entry live in between but owner itself;
 *  3. countDocuments of the live entries ordered before (arrived, owner),
 *     arrived being the date the server wrote.
 * No pipeline update, no $expr in an upsert's query: valid on MongoDB
 * 4.2+ and mongo-java-server alike. Order: (arrived, owner), the same
 * for every reader. MongoDB has no lock to serialise the joins of a key
 * by, and it writes documents side by side: a join stamped just before
 * ours, or in the same millisecond and ordered first by owner, may become
 * visible just after our write. So the count waits LL_MONGO_QUEUE_SETTLE_MS
 * after the write (the wait only delays the count: liveness and order
 * stay the server's). Should an earlier join land later still, both read
 * the same place for a moment; their next joins read the order right, and
 * the key's reservation settles who goes first meanwhile.
 * mongo-java-server applies writes one at a time and needs no wait.
 */
#define LL_MONGO_QUEUE_SETTLE_MS 3
static bool ll_mongo_queue_join (void *c,
                                 const char *key,
                                 size_t key_len,
                                 const char *owner,
                                 int64_t keep_ms,
                                 int64_t *ahead,
                                 leaselock_error_t *err)
{
   ll_mongo_conn_t *conn = c;
   bson_t q = BSON_INITIALIZER, u = BSON_INITIALIZER;
   bson_t aq = BSON_INITIALIZER, au = BSON_INITIALIZER, cq = BSON_INITIALIZER;
   bool matched = false;
   int64_t arrived = 0;
   bson_error_t e;

   bool ok = (ll_mongo_queue_refresh (&q, &u, key, key_len, owner, keep_ms) &&
              ll_mongo_queue_arrive (&aq, &au, key, key_len, owner, keep_ms)) ||
             ll_mongo_nomem (err);
   ok = ok && ll_mongo_queue_fam (conn, &q, &u, false, &matched, &arrived, err);
   if (ok && !matched) {
      ok = ll_mongo_queue_fam (conn, &aq, &au, true, &matched, &arrived, err);
      if (ok && !matched)
         ok = ll_backend_fail (err, "mongodb", "queue_join", "no entry returned by the upsert",
                               NULL, NULL);
   }
   ok = ok &&
        (ll_mongo_queue_ahead_filter (&cq, key, key_len, owner, arrived) || ll_mongo_nomem (err));
   if (ok) {
      struct timespec ts = { 0, LL_MONGO_QUEUE_SETTLE_MS * 1000000L };
      while (nanosleep (&ts, &ts) != 0) {
      }
      int64_t n = mongoc_collection_count_documents (conn->queue, &cq, NULL, NULL, NULL, &e);
      if (n < 0)
         ok = ll_mongo_fail (conn, err, "countDocuments", &e);
      else
         *ahead = n;
   }
   bson_destroy (&q);
   bson_destroy (&u);
   bson_destroy (&aq);
   bson_destroy (&au);
   bson_destroy (&cq);
   return ok;
}

static bool ll_mongo_queue_leave (void *c,
                                  const char *key,
                                  size_t key_len,
                                  const char *owner,
                                  leaselock_error_t *err)
{
   ll_mongo_conn_t *conn = c;
   bson_t q = BSON_INITIALIZER;
   bson_error_t e;
   if (!ll_mongo_queue_id (&q, key, key_len, owner)) {
      bson_destroy (&q);
      return ll_mongo_nomem (err);
   }
   bool ok = mongoc_collection_delete_one (conn->queue, &q, NULL, NULL, &e);
   bson_destroy (&q);
   return ok || ll_mongo_fail (conn, err, "deleteOne", &e);
}

/* For tests in tests/test_mongo.c: the connection's client (to install APM
 * callbacks) and collection. Borrowed. ll_mongodb_test_set_password gives a
 * connection opened without credentials the password that its error
 * messages must hide (the test server has no authentication). */
mongoc_client_t *ll_mongodb_test_client (void *conn);
mongoc_collection_t *ll_mongodb_test_collection (void *conn);
mongoc_collection_t *ll_mongodb_test_queue (void *conn);
bool ll_mongodb_test_set_password (void *conn, const char *password);

mongoc_client_t *ll_mongodb_test_client (void *conn)
{
   return ((ll_mongo_conn_t *)conn)->client;
}

mongoc_collection_t *ll_mongodb_test_collection (void *conn)
{
   return ((ll_mongo_conn_t *)conn)->coll;
}

mongoc_collection_t *ll_mongodb_test_queue (void *conn)
{
   return ((ll_mongo_conn_t *)conn)->queue;
}

bool ll_mongodb_test_set_password (void *conn, const char *password)
{
   ll_mongo_conn_t *c = conn;
   return ll_secrets_add (&c->secrets, password, strlen (password));
}

const ll_backend_t ll_backend_mongodb = {
   .name = "mongodb",
   .schemes = { "mongodb", "mongodb+srv", NULL },
   .available = true,
   .unavailable = NULL,
   .open = ll_mongo_open,
   .close = ll_mongo_close,
   .abandon = ll_mongo_abandon,
   .acquire = ll_mongo_acquire,
   .acquire_wait = ll_mongo_acquire_wait,
   .queue_join = ll_mongo_queue_join,
   .queue_leave = ll_mongo_queue_leave,
   .renew = ll_mongo_renew,
   .release = ll_mongo_release,
   .inspect = ll_mongo_inspect,
   .list = ll_mongo_list,
   .force_release = ll_mongo_force_release,
   .prune = ll_mongo_prune,
   .hold = ll_mongo_hold,
};

#else /* !LEASELOCK_WITH_MONGODB */

const ll_backend_t ll_backend_mongodb = {
   .name = "mongodb",
   .schemes = { "mongodb", "mongodb+srv", NULL },
   .available = false,
   .unavailable = "leaselock was built without libmongoc-1.0 (install libmongoc-dev, then rebuild)",
};

#endif /* LEASELOCK_WITH_MONGODB */
