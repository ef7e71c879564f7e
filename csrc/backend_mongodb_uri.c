/*
 * backend_mongodb_uri.c - the MongoDB backend's URI: a standard MongoDB
 * connection string, read by libmongoc, with leaselock's own option taken
 * out, the options the driver does not know refused, and leaselock's
 * defaults set.
 *
 * The database is the URI path (default "leaselock"); the collection is the
 * leaselock-only option leaselockCollection (default "leaselock"), removed
 * before the URI reaches the driver, as are max_ttl= and durability=
 * (failover.c). Any other option the driver does not know is refused (the
 * driver itself would only log a warning and ignore it). Defaults that
 * differ from the driver's, each kept when the URI sets its own:
 *   socketTimeoutMS=10000          (driver: 5 minutes; a lock op must not hang)
 *   serverSelectionTimeoutMS=5000  (driver: 30 s)
 *   connectTimeoutMS=5000          (driver: 10 s)
 *   w=majority, wtimeoutMS=5000    for every write (unless the URI sets w;
 *                                  its journal= is kept, and a w that waits
 *                                  for replicas gets wtimeoutMS=5000 unless
 *                                  the URI sets it; w=0, w=-1 and
 *                                  safe=false refused; set by
 *                                  backend_mongodb_conn.c)
 *   appname=leaselock
 * and one the URI cannot change: retryWrites=false. A retryable write that
 * failed on the old primary would be sent again by the driver to a new
 * one, granting there before leaselock saw the new primary and its
 * lock-delay (backend_mongodb_primary.c); the engine resends a failed
 * acquire itself, on a fresh connection that checks the primary first.
 * A URI's own socketTimeoutMS, serverSelectionTimeoutMS and
 * connectTimeoutMS must be 1 ms to 1 day: 0 (which libmongoc turns into its
 * own default) and negative values (a negative socket timeout waits
 * forever) are refused. A call therefore waits at most
 * serverSelectionTimeoutMS (which covers connecting) + socketTimeoutMS per
 * command (acquire may send two, acquire_wait three: 3 x (5 s + 10 s) by
 * default; a replica set's retryable write may add one more).
 */
#include <stdbool.h>

#ifdef LEASELOCK_WITH_MONGODB

#include "backend_mongodb_private.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define LL_MONGO_SOCKET_TIMEOUT_MS 10000
#define LL_MONGO_SELECT_TIMEOUT_MS 5000
#define LL_MONGO_CONNECT_TIMEOUT_MS 5000

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
 * accepted here and open's first write, the failover record's in
 * "db.collection.meta" (backend_mongodb_primary.c), fails with BACKEND,
 * carrying the server's message. */
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

/* The value of the option name, item[0..len) (name length nlen),
 * percent-decoded into *value (the caller frees it). */
static bool ll_mongo_option_value (const char *item, size_t len, size_t nlen, const char *name,
                                   char **value, leaselock_error_t *err)
{
   bool nomem = false;
   const char *v = item + nlen + (nlen < len);
   *value = ll_percent_decode (v, (size_t)(item + len - v), false, &nomem);
   if (!*value)
      return nomem ? ll_mongo_nomem (err)
                   : ll_error_set (err, LEASELOCK_INVALID,
                                   "MongoDB URI option %s has a bad percent-escape or an encoded "
                                   "NUL byte",
                                   name);
   return true;
}

/* The value of the leaselockCollection option item[0..len) (name length
 * nlen), percent-decoded, into *coll (the last one wins). */
static bool ll_mongo_take_collection (const char *item, size_t len, size_t nlen, char **coll,
                                      leaselock_error_t *err)
{
   char *dec;
   if (!ll_mongo_option_value (item, len, nlen, LL_MONGO_COLL_OPTION, &dec, err))
      return false;
   free (*coll);
   *coll = dec;
   return true;
}

/* The options max_ttl= and durability= (failover.c) of item[0..len)
 * (name length nlen) into p: *taken when item is one of them. */
static bool ll_mongo_take_failover (const char *item, size_t len, size_t nlen, ll_primary_t *p,
                                    bool *taken, leaselock_error_t *err)
{
   static const char *const names[] = { "max_ttl", "durability" };
   *taken = false;
   for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
      if (nlen != strlen (names[i]) || strncasecmp (item, names[i], nlen))
         continue;
      char *dec;
      if (!ll_mongo_option_value (item, len, nlen, names[i], &dec, err))
         return false;
      bool ok = ll_primary_option (p, "mongodb", names[i], dec, taken, err);
      free (dec);
      return ok;
   }
   return true;
}

/* Copies the options p (after the '?') to out at *o, leaving out
 * leaselockCollection (its value goes to *coll), max_ttl and durability
 * (into prim), and the '?' too when no option is left. Refuses options
 * the driver does not know. */
static bool ll_mongo_filter_options (const char *p, char *out, size_t *o, char **coll,
                                     ll_primary_t *prim, leaselock_error_t *err)
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
      bool taken = false;
      if (len && !ll_mongo_take_failover (item, len, nlen, prim, &taken, err))
         return false;
      if (taken)
         continue;
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
 * Splits text into the URI for the driver (without leaselock's options) and
 * the collection name (NULL when the URI names none); max_ttl= and
 * durability= go to p. Refuses options the driver does not know. *drv and
 * *coll are new strings (free()) on success.
 */
bool ll_mongo_split_uri (const char *text, char **drv, char **coll, ll_primary_t *p,
                         leaselock_error_t *err)
{
   const char *q = ll_mongo_query (text);
   size_t n = strlen (text), o = q ? (size_t)(q - text) + 1 : n; /* through '?' */
   char *out = malloc (n + 1);

   *drv = NULL;
   *coll = NULL;
   if (!out)
      return ll_mongo_nomem (err);
   memcpy (out, text, o);
   if (q && !ll_mongo_filter_options (q + 1, out, &o, coll, p, err)) {
      free (out);
      free (*coll);
      *coll = NULL;
      return false;
   }
   out[o] = '\0';
   *drv = out;
   return true;
}

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
const char *ll_mongo_db (const mongoc_uri_t *uri)
{
   const char *db = mongoc_uri_get_database (uri);
   return db && *db ? db : LL_MONGO_DEFAULT_DB;
}

/* Checks what the URI asks for (the collection, acknowledged writes,
 * bounded timeouts; *collname gets the default when NULL) and sets
 * leaselock's defaults where the URI has none. */
bool ll_mongo_settle_uri (mongoc_uri_t *uri, char **collname, leaselock_error_t *err)
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
   /* Always (the top comment says why). */
   mongoc_uri_set_option_as_bool (uri, MONGOC_URI_RETRYWRITES, false);
   return true;
}

/* The driver's reading of drv (text without leaselock's options), or NULL
 * with INVALID; the password as libmongoc read it joins the secrets. */
mongoc_uri_t *ll_mongo_read_uri (ll_mongo_conn_t *conn, const char *text, const char *drv,
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

#endif /* LEASELOCK_WITH_MONGODB */
