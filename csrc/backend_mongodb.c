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
 * command (acquire may send two: 2 x (5 s + 10 s) by default; a replica
 * set's retryable write may add one more).
 *
 * One record per key, written only with the server's clock:
 *   { _id: key, owner: "<32 hex>" | null, fence: int64,
 *     acquiredAt: date, renewedAt: date, ttlMs: int64, holdMs: int64,
 *     holder: { host, pid, label } }
 * expiry = max(renewedAt + ttlMs, acquiredAt + holdMs). Dates come from
 * $currentDate; comparisons use $expr with $$NOW. holdMs is 0 except after a
 * release with min_hold, which writes renewedAt = now, ttlMs = 0 and
 * holdMs = min_hold, so the expiry becomes max(now, acquiredAt + min_hold)
 * without a pipeline update. A record without owner is free only once that
 * expiry is past.
 *
 * acquire is a conditional findAndModify without upsert,
 *   { _id: key, $expr: { $or: [ expired, { $eq: ["$owner", owner] } ] } },
 * and only when it matches nothing an upsert whose query cannot match an
 * existing record, { _id: key, fence: { $exists: false } }: a record that
 * exists answers duplicate key 11000, which is BUSY (and nothing else is).
 * Real MongoDB refuses $expr in an upsert's query and mongo-java-server has
 * no pipeline updates; this shape is valid on both. force_release reads the
 * record, then frees it with an update conditional on what it read (see
 * ll_mongo_force_release).
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

#include <mongoc/mongoc.h>

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define LL_MONGO_DEFAULT_DB "leaselock"
#define LL_MONGO_DEFAULT_COLL "leaselock"
#define LL_MONGO_COLL_OPTION "leaselockCollection"
#define LL_MONGO_SOCKET_TIMEOUT_MS 10000
#define LL_MONGO_SELECT_TIMEOUT_MS 5000
#define LL_MONGO_CONNECT_TIMEOUT_MS 5000
#define LL_MONGO_WTIMEOUT_MS 5000
#define LL_MONGO_DUPLICATE_KEY 11000

typedef struct ll_mongo_conn
{
   mongoc_client_t *client;   /* single-threaded, owned */
   mongoc_collection_t *coll; /* owned; carries the write concern */
   ll_secrets_t secrets;      /* the URI's passwords, scrubbed from messages */
   bool tls;                  /* the URI asks for TLS (see ll_mongo_abandon) */
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

/* BACKEND error "MongoDB <what>: <driver message>", with any occurrence of
 * the URI's password replaced by "***". Returns false. */
static bool ll_mongo_fail (const ll_mongo_conn_t *conn,
                           leaselock_error_t *err,
                           const char *what,
                           const bson_error_t *e)
{
   char msg[sizeof e->message + 16];
   ll_scrub_secrets (e->message, conn ? &conn->secrets : NULL, msg, sizeof msg);
   return ll_error_set (err, LEASELOCK_BACKEND, "MongoDB %s: %s", what, msg);
}

static bool ll_mongo_nomem (leaselock_error_t *err)
{
   return ll_error_set (err, LEASELOCK_NOMEM, "out of memory building a MongoDB command");
}

/* ---- URI --------------------------------------------------------------- */

static int ll_hexval (char c)
{
   if (c >= '0' && c <= '9')
      return c - '0';
   if (c >= 'a' && c <= 'f')
      return c - 'a' + 10;
   if (c >= 'A' && c <= 'F')
      return c - 'A' + 10;
   return -1;
}

/* Percent-decodes src[0..len) into a new string (caller frees with free()).
 * *out_len gets the decoded length (a %00 makes it longer than strlen). */
static char *ll_pct_decode (const char *src, size_t len, size_t *out_len, bool *bad)
{
   char *out = malloc (len + 1);
   size_t o = 0;

   *bad = false;
   if (!out)
      return NULL;
   for (size_t i = 0; i < len; i++) {
      if (src[i] == '%') {
         int hi = i + 2 < len ? ll_hexval (src[i + 1]) : -1;
         int lo = i + 2 < len ? ll_hexval (src[i + 2]) : -1;
         if (hi < 0 || lo < 0) {
            *bad = true;
            out[o++] = src[i];
            continue;
         }
         out[o++] = (char)(hi * 16 + lo);
         i += 2;
      } else {
         out[o++] = src[i];
      }
   }
   out[o] = '\0';
   *out_len = o;
   return out;
}

static bool ll_mongo_option_known (const char *name, size_t len)
{
   for (const char *const *k = ll_mongo_known_options; *k; k++) {
      if (strlen (*k) == len && strncasecmp (*k, name, len) == 0)
         return true;
   }
   return false;
}

/* Collection names MongoDB refuses: empty, a '$', a NUL, a leading '.',
 * the reserved "system." prefix, not UTF-8, or a namespace over 255 bytes.
 * 255 is the limit from MongoDB 4.4 on. MongoDB 4.2 allows only 120 bytes
 * for "db.collection"; the server version is not known here (and may differ
 * between the hosts of a URI), so on 4.2 a namespace of 121 to 255 bytes is
 * accepted at open and the first write that creates the collection fails
 * with BACKEND, carrying the server's message. */
static bool ll_mongo_check_collection (const char *db,
                                       const char *coll,
                                       size_t len,
                                       leaselock_error_t *err)
{
   if (len == 0)
      return ll_error_set (err, LEASELOCK_INVALID, "MongoDB collection name is empty (option %s)",
                           LL_MONGO_COLL_OPTION);
   if (memchr (coll, '\0', len))
      return ll_error_set (err, LEASELOCK_INVALID, "MongoDB collection name contains a NUL byte");
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
   if (strlen (db) + 1 + len > 255)
      return ll_error_set (err, LEASELOCK_INVALID,
                           "MongoDB namespace is longer than 255 bytes (%zu; MongoDB 4.2 allows "
                           "120): \"%.32s.%.32s...\"",
                           strlen (db) + 1 + len, db, coll);
   return true;
}

/*
 * Splits text into the URI for the driver (without leaselockCollection) and
 * the collection name. Refuses options the driver does not know. *drv and
 * *coll are new strings (free()) on success.
 */
static bool ll_mongo_split_uri (const char *text, char **drv, char **coll, leaselock_error_t *err)
{
   const char *sep = strstr (text, "://");
   const char *q = NULL;
   char *out = NULL;
   size_t o = 0, n = strlen (text);

   *drv = NULL;
   *coll = NULL;
   if (sep) {
      /* As the driver splits it: the first '/' after the hosts, then '?'. */
      const char *slash = strchr (sep + 3, '/');
      q = strchr (slash ? slash : sep + 3, '?');
   }
   out = malloc (n + 1);
   if (!out)
      return ll_mongo_nomem (err);
   if (!q) {
      memcpy (out, text, n + 1);
      *drv = out;
      return true;
   }
   memcpy (out, text, (size_t)(q - text) + 1); /* through '?' */
   o = (size_t)(q - text) + 1;

   const char *p = q + 1;
   bool first = true;
   while (*p) {
      const char *end = strchr (p, '&');
      size_t len = end ? (size_t)(end - p) : strlen (p);
      const char *eq = memchr (p, '=', len);
      size_t nlen = eq ? (size_t)(eq - p) : len;

      if (len == 0) {
         /* "a=1&&b=2": let the driver judge it. */
      } else if (nlen == strlen (LL_MONGO_COLL_OPTION) &&
                 strncasecmp (p, LL_MONGO_COLL_OPTION, nlen) == 0) {
         size_t vlen = 0;
         bool bad = false;
         char *v = ll_pct_decode (eq ? eq + 1 : p + len, eq ? len - nlen - 1 : 0, &vlen, &bad);
         if (!v) {
            free (out);
            free (*coll);
            *coll = NULL;
            return ll_mongo_nomem (err);
         }
         if (bad || memchr (v, '\0', vlen)) {
            free (v);
            free (out);
            free (*coll);
            *coll = NULL;
            return ll_error_set (err, LEASELOCK_INVALID,
                                 bad ? "MongoDB URI option %s has a bad percent-escape"
                                     : "MongoDB collection name (option %s) contains a NUL byte",
                                 LL_MONGO_COLL_OPTION);
         }
         free (*coll);
         *coll = v;
         p += len;
         if (*p == '&')
            p++;
         continue;
      } else if (!ll_mongo_option_known (p, nlen)) {
         int shown = nlen > 64 ? 64 : (int)nlen;
         free (out);
         free (*coll);
         *coll = NULL;
         return ll_error_set (err, LEASELOCK_INVALID, "unknown MongoDB URI option \"%.*s\"", shown,
                              p);
      }
      if (!first)
         out[o++] = '&';
      memcpy (out + o, p, len);
      o += len;
      first = false;
      p += len;
      if (*p == '&')
         p++;
   }
   out[o] = '\0';
   if (first) /* no option left: drop the '?' */
      out[o - 1] = '\0';
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

static void ll_mongo_conn_free (ll_mongo_conn_t *conn)
{
   if (!conn)
      return;
   mongoc_collection_destroy (conn->coll);
   mongoc_client_destroy (conn->client);
   ll_secrets_clear (&conn->secrets);
   free (conn);
}

static void *ll_mongo_open (const char *text, leaselock_error_t *err)
{
   char *drv = NULL, *collname = NULL;
   mongoc_uri_t *uri = NULL;
   ll_mongo_conn_t *conn = NULL;
   bson_error_t e;
   const char *db;

   pthread_once (&ll_mongo_once, ll_mongo_init);
   if (!text)
      return ll_error_set (err, LEASELOCK_INVALID, "MongoDB URI is NULL"), NULL;
   if (!ll_uri_check_at (text, err) || !ll_mongo_split_uri (text, &drv, &collname, err))
      return NULL;
   conn = calloc (1, sizeof *conn);
   if (!conn) {
      ll_mongo_nomem (err);
      goto fail;
   }
   /* libmongoc's URI errors quote the password ("Password \"...\" must not
    * have unescaped chars"), so they are scrubbed too. */
   if (!ll_secrets_from_uri (&conn->secrets, text)) {
      ll_mongo_nomem (err);
      goto fail;
   }

   uri = mongoc_uri_new_with_error (drv, &e);
   if (!uri) {
      char shown[512], msg[sizeof e.message];
      ll_uri_redact (text, shown, sizeof shown);
      ll_scrub_secrets (e.message, &conn->secrets, msg, sizeof msg);
      ll_error_set (err, LEASELOCK_INVALID, "invalid MongoDB URI %s: %s", shown, msg);
      goto fail;
   }
   db = mongoc_uri_get_database (uri);
   if (!db || !*db)
      db = LL_MONGO_DEFAULT_DB;
   if (!collname) {
      collname = strdup (LL_MONGO_DEFAULT_COLL);
      if (!collname) {
         ll_mongo_nomem (err);
         goto fail;
      }
   }
   if (!ll_mongo_check_collection (db, collname, strlen (collname), err))
      goto fail;
   /* Unacknowledged writes (w=0, w=-1, or safe=false, which libmongoc turns
    * into w=0) cannot hold a lock: acquire would never learn whether it got
    * the key, nor release whether it let it go. */
   {
      int32_t w = mongoc_write_concern_get_w (mongoc_uri_get_write_concern (uri));
      if (w == MONGOC_WRITE_CONCERN_W_UNACKNOWLEDGED ||
          w == MONGOC_WRITE_CONCERN_W_ERRORS_IGNORED) {
         ll_error_set (err, LEASELOCK_INVALID,
                       "MongoDB URI asks for unacknowledged writes (w=%d): unacknowledged writes "
                       "cannot hold a lock; leave w unset (majority) or use w=1 or more",
                       (int)w);
         goto fail;
      }
   }

   if (!ll_mongo_check_timeouts (uri, err))
      goto fail;
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

   /* The password as libmongoc read it, should that differ. */
   if (mongoc_uri_get_password (uri) &&
       !ll_secrets_add (&conn->secrets, mongoc_uri_get_password (uri),
                        strlen (mongoc_uri_get_password (uri)))) {
      ll_mongo_nomem (err);
      goto fail;
   }
   conn->client = mongoc_client_new_from_uri_with_error (uri, &e);
   if (!conn->client) {
      /* A failed SRV lookup is the network's doing; the rest is the URI. */
      ll_mongo_fail (conn, err, "client", &e);
      if (e.domain != MONGOC_ERROR_STREAM)
         err->code = LEASELOCK_INVALID;
      goto fail;
   }
   conn->tls = mongoc_uri_get_tls (uri);
   mongoc_client_set_error_api (conn->client, MONGOC_ERROR_API_VERSION_2);
   conn->coll = mongoc_client_get_collection (conn->client, db, collname);

   /* The URI's write concern, with w=majority unless the URI sets w itself:
    * journal= and wtimeoutMS= combine with the default. safe=true (which
    * libmongoc turns into w=1) asks for acknowledged writes, which majority
    * is, so it does not lower the default. */
   {
      mongoc_write_concern_t *wc = mongoc_write_concern_copy (mongoc_uri_get_write_concern (uri));
      if (!wc) {
         ll_mongo_nomem (err);
         goto fail;
      }
      if (!mongoc_uri_has_option (uri, MONGOC_URI_W))
         mongoc_write_concern_set_wmajority (
           wc, mongoc_uri_has_option (uri, MONGOC_URI_WTIMEOUTMS)
                 ? (int32_t)mongoc_uri_get_option_as_int32 (uri, MONGOC_URI_WTIMEOUTMS, 0)
                 : LL_MONGO_WTIMEOUT_MS);
      mongoc_collection_set_write_concern (conn->coll, wc);
      mongoc_write_concern_destroy (wc);
   }

   /* Reach the server now, so a wrong host or port fails at open. */
   {
      bson_t ping = BSON_INITIALIZER, reply;
      bool ok;
      BSON_APPEND_INT32 (&ping, "ping", 1);
      ok = mongoc_client_command_simple (conn->client, "admin", &ping, NULL, &reply, &e);
      bson_destroy (&ping);
      bson_destroy (&reply);
      if (!ok) {
         ll_mongo_fail (conn, err, "connect", &e);
         goto fail;
      }
   }

   mongoc_uri_destroy (uri);
   free (drv);
   free (collname);
   return conn;

fail:
   ll_mongo_conn_free (conn);
   mongoc_uri_destroy (uri);
   free (drv);
   free (collname);
   return NULL;
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
      conn->coll = NULL;
      conn->client = NULL; /* leaked on purpose */
   } else {
      mongoc_client_reset (conn->client);
   }
   ll_mongo_conn_free (conn);
}

/* ---- command pieces ---------------------------------------------------- */

/* Appends the expiry expression max(renewedAt + ttlMs, acquiredAt + holdMs)
 * under name to doc. */
static bool ll_mongo_append_expiry (bson_t *doc, const char *name)
{
   bson_t max, arr, add1, add2;
   bool ok = true;

   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (doc, name, &max);
   ok = ok && BSON_APPEND_ARRAY_BEGIN (&max, "$max", &arr);
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (&arr, "0", &add1);
   {
      bson_t a;
      ok = ok && BSON_APPEND_ARRAY_BEGIN (&add1, "$add", &a);
      ok = ok && BSON_APPEND_UTF8 (&a, "0", "$renewedAt");
      ok = ok && BSON_APPEND_UTF8 (&a, "1", "$ttlMs");
      ok = ok && bson_append_array_end (&add1, &a);
   }
   ok = ok && bson_append_document_end (&arr, &add1);
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (&arr, "1", &add2);
   {
      bson_t a;
      ok = ok && BSON_APPEND_ARRAY_BEGIN (&add2, "$add", &a);
      ok = ok && BSON_APPEND_UTF8 (&a, "0", "$acquiredAt");
      ok = ok && BSON_APPEND_UTF8 (&a, "1", "$holdMs");
      ok = ok && bson_append_array_end (&add2, &a);
   }
   ok = ok && bson_append_document_end (&arr, &add2);
   ok = ok && bson_append_array_end (&max, &arr);
   ok = ok && bson_append_document_end (doc, &max);
   return ok;
}

/* Appends {op: [expiry, "$$NOW"]} (op "$lte": expired, "$gt": live) under
 * array index / field name to doc. */
static bool ll_mongo_append_cmp_now (bson_t *doc, const char *name, const char *op)
{
   bson_t cmp, arr;
   bool ok = true;
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (doc, name, &cmp);
   ok = ok && BSON_APPEND_ARRAY_BEGIN (&cmp, op, &arr);
   ok = ok && ll_mongo_append_expiry (&arr, "0");
   ok = ok && BSON_APPEND_UTF8 (&arr, "1", "$$NOW");
   ok = ok && bson_append_array_end (&cmp, &arr);
   ok = ok && bson_append_document_end (doc, &cmp);
   return ok;
}

static bool ll_mongo_append_key (bson_t *doc, const char *key, size_t key_len)
{
   return bson_append_utf8 (doc, "_id", 3, key, (int)key_len);
}

/* The acquire update: owner, ttl, holder, dates from the server, fence+1. */
static bool ll_mongo_acquire_update (bson_t *u,
                                     const char *owner,
                                     int64_t ttl_ms,
                                     const ll_holder_t *holder)
{
   bson_t cd, set, h, inc;
   bool ok = true;

   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (u, "$currentDate", &cd);
   ok = ok && BSON_APPEND_BOOL (&cd, "acquiredAt", true);
   ok = ok && BSON_APPEND_BOOL (&cd, "renewedAt", true);
   ok = ok && bson_append_document_end (u, &cd);
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (u, "$set", &set);
   ok = ok && bson_append_utf8 (&set, "owner", 5, owner, LEASELOCK_OWNER_LEN);
   ok = ok && BSON_APPEND_INT64 (&set, "ttlMs", ttl_ms);
   ok = ok && BSON_APPEND_INT64 (&set, "holdMs", 0);
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (&set, "holder", &h);
   ok = ok && BSON_APPEND_UTF8 (&h, "host", holder && holder->host ? holder->host : "");
   ok = ok && BSON_APPEND_INT64 (&h, "pid", holder ? holder->pid : 0);
   ok = ok && BSON_APPEND_UTF8 (&h, "label", holder && holder->label ? holder->label : "");
   ok = ok && bson_append_document_end (&set, &h);
   ok = ok && bson_append_document_end (u, &set);
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (u, "$inc", &inc);
   ok = ok && BSON_APPEND_INT64 (&inc, "fence", 1);
   ok = ok && bson_append_document_end (u, &inc);
   return ok;
}

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
   mongoc_find_and_modify_opts_t *opts = mongoc_find_and_modify_opts_new ();
   bson_t fields = BSON_INITIALIZER, reply;
   bson_error_t e;
   bson_iter_t it, v;
   bool ok;

   *matched = false;
   if (dup)
      *dup = false;
   if (!opts)
      return ll_mongo_nomem (err);
   BSON_APPEND_INT32 (&fields, "fence", 1);
   mongoc_find_and_modify_opts_set_update (opts, update);
   mongoc_find_and_modify_opts_set_fields (opts, &fields);
   mongoc_find_and_modify_opts_set_flags (opts, MONGOC_FIND_AND_MODIFY_RETURN_NEW |
                                                  (upsert ? MONGOC_FIND_AND_MODIFY_UPSERT : 0));
   ok = mongoc_collection_find_and_modify_with_opts (conn->coll, query, opts, &reply, &e);
   mongoc_find_and_modify_opts_destroy (opts);
   bson_destroy (&fields);
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

/* ---- operations -------------------------------------------------------- */

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
   bson_t q = BSON_INITIALIZER, u = BSON_INITIALIZER, expr, or, eq, arr, ex;
   bool ok = true, matched = false, dup = false;

   /* {_id: key, $expr: {$or: [expired, {$eq: ["$owner", owner]}]}} */
   ok = ok && ll_mongo_append_key (&q, key, key_len);
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (&q, "$expr", &expr);
   ok = ok && BSON_APPEND_ARRAY_BEGIN (&expr, "$or", & or);
   ok = ok && ll_mongo_append_cmp_now (& or, "0", "$lte");
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (& or, "1", &eq);
   ok = ok && BSON_APPEND_ARRAY_BEGIN (&eq, "$eq", &arr);
   ok = ok && BSON_APPEND_UTF8 (&arr, "0", "$owner");
   ok = ok && bson_append_utf8 (&arr, "1", 1, owner, LEASELOCK_OWNER_LEN);
   ok = ok && bson_append_array_end (&eq, &arr);
   ok = ok && bson_append_document_end (& or, &eq);
   ok = ok && bson_append_array_end (&expr, & or);
   ok = ok && bson_append_document_end (&q, &expr);
   ok = ok && ll_mongo_acquire_update (&u, owner, ttl_ms, holder);
   if (!ok) {
      bson_destroy (&q);
      bson_destroy (&u);
      return ll_mongo_nomem (err);
   }
   ok = ll_mongo_fam (conn, &q, &u, false, &matched, fence, NULL, err);
   bson_destroy (&q);
   if (!ok || matched) {
      bson_destroy (&u);
      return ok;
   }

   /* No such record, or a live one of another owner: an upsert whose query
    * matches no existing record. A record that exists answers 11000. */
   bson_init (&q);
   ok = ll_mongo_append_key (&q, key, key_len);
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (&q, "fence", &ex);
   ok = ok && BSON_APPEND_BOOL (&ex, "$exists", false);
   ok = ok && bson_append_document_end (&q, &ex);
   if (!ok) {
      bson_destroy (&q);
      bson_destroy (&u);
      return ll_mongo_nomem (err);
   }
   ok = ll_mongo_fam (conn, &q, &u, true, &matched, fence, &dup, err);
   bson_destroy (&q);
   bson_destroy (&u);
   if (ok && !matched)
      return ll_error_set (err, LEASELOCK_BACKEND,
                           "MongoDB findAndModify upsert returned no document for the key");
   return ok;
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

static bool ll_mongo_renew (void *c,
                            const char *key,
                            size_t key_len,
                            const char *owner,
                            int64_t ttl_ms,
                            leaselock_error_t *err)
{
   ll_mongo_conn_t *conn = c;
   bson_t q = BSON_INITIALIZER, u = BSON_INITIALIZER, d;
   bool ok = true, matched = false;

   /* {_id, owner, $expr: live} -> renewedAt = now, ttlMs = ttl */
   ok = ok && ll_mongo_append_key (&q, key, key_len);
   ok = ok && bson_append_utf8 (&q, "owner", 5, owner, LEASELOCK_OWNER_LEN);
   ok = ok && ll_mongo_append_cmp_now (&q, "$expr", "$gt");
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (&u, "$currentDate", &d);
   ok = ok && BSON_APPEND_BOOL (&d, "renewedAt", true);
   ok = ok && bson_append_document_end (&u, &d);
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (&u, "$set", &d);
   ok = ok && BSON_APPEND_INT64 (&d, "ttlMs", ttl_ms);
   ok = ok && bson_append_document_end (&u, &d);
   if (!ok)
      ll_mongo_nomem (err);
   else if ((ok = ll_mongo_update (conn, &q, &u, &matched, err)) && !matched)
      ok = ll_error_set (err, LEASELOCK_NOT_HELD, "the lease is no longer held by this owner");
   bson_destroy (&q);
   bson_destroy (&u);
   return ok;
}

/* The update that frees a record: owner null, renewedAt = now, ttlMs = 0,
 * holdMs = hold_ms (expiry = max(now, acquiredAt + hold_ms)). */
static bool ll_mongo_free_update (bson_t *u, int64_t hold_ms)
{
   bson_t d;
   bool ok = true;
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (u, "$currentDate", &d);
   ok = ok && BSON_APPEND_BOOL (&d, "renewedAt", true);
   ok = ok && bson_append_document_end (u, &d);
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (u, "$set", &d);
   ok = ok && BSON_APPEND_NULL (&d, "owner");
   ok = ok && BSON_APPEND_INT64 (&d, "ttlMs", 0);
   ok = ok && BSON_APPEND_INT64 (&d, "holdMs", hold_ms);
   ok = ok && bson_append_document_end (u, &d);
   return ok;
}

static bool ll_mongo_release (void *c,
                              const char *key,
                              size_t key_len,
                              const char *owner,
                              int64_t min_hold_ms,
                              leaselock_error_t *err)
{
   ll_mongo_conn_t *conn = c;
   bson_t q = BSON_INITIALIZER, u = BSON_INITIALIZER;
   bool ok = true, matched = false;

   ok = ok && ll_mongo_append_key (&q, key, key_len);
   ok = ok && bson_append_utf8 (&q, "owner", 5, owner, LEASELOCK_OWNER_LEN);
   ok = ok && ll_mongo_free_update (&u, min_hold_ms);
   if (!ok)
      ll_mongo_nomem (err);
   else if ((ok = ll_mongo_update (conn, &q, &u, &matched, err)) && !matched)
      ok = ll_error_set (err, LEASELOCK_NOT_HELD, "the lease is no longer held by this owner");
   bson_destroy (&q);
   bson_destroy (&u);
   return ok;
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
}

/* [{$match: match}, {$sort: {_id: 1}}, {$project: {owner, fence, holder,
 *   leftMs: {$subtract: [expiry, "$$NOW"]}}}] - the time left is computed
 * by the server's clock. */
static bool ll_mongo_record_pipeline (bson_t *p, const bson_t *match)
{
   bson_t st, d, sub, arr;
   bool ok = true;
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (p, "0", &st);
   ok = ok && BSON_APPEND_DOCUMENT (&st, "$match", match);
   ok = ok && bson_append_document_end (p, &st);
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (p, "1", &st);
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (&st, "$sort", &d);
   ok = ok && BSON_APPEND_INT32 (&d, "_id", 1);
   ok = ok && bson_append_document_end (&st, &d);
   ok = ok && bson_append_document_end (p, &st);
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (p, "2", &st);
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (&st, "$project", &d);
   ok = ok && BSON_APPEND_INT32 (&d, "owner", 1);
   ok = ok && BSON_APPEND_INT32 (&d, "fence", 1);
   ok = ok && BSON_APPEND_INT32 (&d, "holder", 1);
   ok = ok && BSON_APPEND_DOCUMENT_BEGIN (&d, "leftMs", &sub);
   ok = ok && BSON_APPEND_ARRAY_BEGIN (&sub, "$subtract", &arr);
   ok = ok && ll_mongo_append_expiry (&arr, "0");
   ok = ok && BSON_APPEND_UTF8 (&arr, "1", "$$NOW");
   ok = ok && bson_append_array_end (&sub, &arr);
   ok = ok && bson_append_document_end (&d, &sub);
   ok = ok && bson_append_document_end (&st, &d);
   ok = ok && bson_append_document_end (p, &st);
   return ok;
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
   char *re;
   size_t o = 0;
   bool ok = true;

   if (prefix_len > 0) {
      /* An anchored regex with every non-alphanumeric ASCII byte escaped:
       * the prefix is text, never a pattern. */
      re = malloc (prefix_len * 2 + 2);
      if (!re) {
         bson_destroy (&match);
         return ll_mongo_nomem (err);
      }
      re[o++] = '^';
      for (size_t i = 0; i < prefix_len; i++) {
         unsigned char ch = (unsigned char)prefix[i];
         if (ch < 0x80 && !isalnum (ch))
            re[o++] = '\\';
         re[o++] = (char)ch;
      }
      re[o] = '\0';
      ok = BSON_APPEND_REGEX (&match, "_id", re, "");
      free (re);
   }
   if (!ok) {
      bson_destroy (&match);
      return ll_mongo_nomem (err);
   }
   ok = ll_mongo_records (c, &match, fn, user_data, err);
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
      bson_t q = BSON_INITIALIZER, u = BSON_INITIALIZER, t;
      bool found = false, matched = false, ok = true, live;

      if (!ll_mongo_inspect (conn, key, key_len, &rec, &found, err))
         return false;
      if (!found)
         return true; /* no record: nothing to release */
      live = rec.owner[0] && rec.expires_in_ms > 0;
      ok = ok && ll_mongo_append_key (&q, key, key_len);
      ok = ok && BSON_APPEND_INT64 (&q, "fence", rec.fence);
      if (rec.owner[0]) {
         ok = ok && BSON_APPEND_DOCUMENT_BEGIN (&q, "owner", &t);
         ok = ok && BSON_APPEND_UTF8 (&t, "$type", "string");
         ok = ok && bson_append_document_end (&q, &t);
      } else {
         ok = ok && BSON_APPEND_NULL (&q, "owner"); /* null or missing */
      }
      if (live)
         ok = ok && ll_mongo_append_cmp_now (&q, "$expr", "$gt");
      ok = ok && ll_mongo_free_update (&u, 0);
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
   return ll_error_set (err, LEASELOCK_BACKEND,
                        "MongoDB force_release: the record kept changing (%d tries)",
                        LL_MONGO_FORCE_TRIES);
}

/* For tests in tests/test_mongo.c: the connection's client (to install APM
 * callbacks) and collection. Borrowed. ll_mongodb_test_set_password gives a
 * connection opened without credentials the password that its error
 * messages must hide (the test server has no authentication). */
mongoc_client_t *ll_mongodb_test_client (void *conn);
mongoc_collection_t *ll_mongodb_test_collection (void *conn);
bool ll_mongodb_test_set_password (void *conn, const char *password);

mongoc_client_t *ll_mongodb_test_client (void *conn)
{
   return ((ll_mongo_conn_t *)conn)->client;
}

mongoc_collection_t *ll_mongodb_test_collection (void *conn)
{
   return ((ll_mongo_conn_t *)conn)->coll;
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
   .renew = ll_mongo_renew,
   .release = ll_mongo_release,
   .inspect = ll_mongo_inspect,
   .list = ll_mongo_list,
   .force_release = ll_mongo_force_release,
};

#else /* !LEASELOCK_WITH_MONGODB */

const ll_backend_t ll_backend_mongodb = {
   .name = "mongodb",
   .schemes = { "mongodb", "mongodb+srv", NULL },
   .available = false,
   .unavailable = "leaselock was built without libmongoc-1.0 (install libmongoc-dev, then rebuild)",
};

#endif /* LEASELOCK_WITH_MONGODB */
