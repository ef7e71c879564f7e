/*
 * backend_mongodb_private.h - what the MongoDB backend's files share: the
 * connection struct and the functions one file gives the others. Included
 * only by backend_mongodb*.c, and only with LEASELOCK_WITH_MONGODB (it
 * brings in libmongoc's headers).
 *
 *   backend_mongodb.c        the vtable and the lease operations
 *   backend_mongodb_uri.c    the URI: leaselock's options, checks, defaults
 *   backend_mongodb_conn.c   open, close, abandon, errors, the round trips
 *   backend_mongodb_queue.c  the fair mode's queue
 *   backend_mongodb_primary.c  failover: the primary, durability, the meta
 *                            document, the fence floor
 *   stmt_mongodb.c           the commands' shapes (stmt_mongodb.h)
 *
 * Every function taking err fills it on failure (it is the caller's).
 */
#ifndef LL_BACKEND_MONGODB_PRIVATE_H
#define LL_BACKEND_MONGODB_PRIVATE_H

#include "ll_internal.h"
#include "stmt_mongodb.h"

/* One connection: used by one thread at a time (the engine pools them).
 * Owns everything it points to; ll_mongo_close frees it all,
 * ll_mongo_abandon frees what it can without I/O. */
typedef struct ll_mongo_conn
{
   mongoc_client_t *client;    /* single-threaded, owned */
   mongoc_collection_t *coll;  /* owned; carries the write concern */
   mongoc_collection_t *queue; /* "<coll>.queue", the fair mode's; the same */
   mongoc_collection_t *meta;  /* "<coll>.meta", the failover record; the same */
   ll_secrets_t secrets;       /* the URI's passwords, scrubbed from messages */
   bool tls;                   /* the URI asks for TLS (see ll_mongo_abandon) */
   ll_primary_t primary;       /* failover.c's view, from the URI and the meta document */
   char identity[80];          /* the driver's primary when primary was last recorded */
   ll_wake_toucher_t wake;     /* this machine's release channel (wake_file.c) */
   /* The queue mark this connection last set (ll_mongo_queue_mark; end:
    * ms since 1970). */
   ll_queue_mark_t mark;
   /* The last hello reply read for the primary's identity
    * (ll_mongo_read_identity) and what it said: the driver keeps a reply
    * until its next heartbeat, so a grant finds the same bytes and skips
    * parsing them again. hello_len 0: none kept (or too long to keep). */
   uint8_t hello[1024];
   uint32_t hello_len;
   char hello_host[300];
   char hello_id[80], hello_about[160];
   int hello_topo; /* an ll_mongo_topology_t */
} ll_mongo_conn_t;

/* ---- backend_mongodb_uri.c ------------------------------------------------ */

/* Splits text (borrowed) into the URI for the driver (without
 * leaselock's options) and the collection name (NULL when the URI names
 * none); the options max_ttl= and durability= go to p (the caller's).
 * Refuses options the driver does not know. *drv and *coll are new
 * strings the caller frees (free()) on success; both NULL on failure. */
bool ll_mongo_split_uri (const char *text, char **drv, char **coll, ll_primary_t *p,
                         leaselock_error_t *err);

/* The driver's reading of drv (text without leaselock's options; both
 * borrowed), or NULL with INVALID; the password as libmongoc read it joins
 * conn's secrets. A new URI the caller destroys (mongoc_uri_destroy). */
mongoc_uri_t *ll_mongo_read_uri (ll_mongo_conn_t *conn, const char *text, const char *drv,
                                 leaselock_error_t *err);

/* Checks what uri asks for (the collection, acknowledged writes, bounded
 * timeouts) and sets leaselock's defaults where it has none. *collname:
 * the caller's malloc()ed name or NULL, replaced by a strdup() of the
 * default when NULL (the caller frees it either way). */
bool ll_mongo_settle_uri (mongoc_uri_t *uri, char **collname, leaselock_error_t *err);

/* The database: uri's path, or the default. Borrowed from uri (or static). */
const char *ll_mongo_db (const mongoc_uri_t *uri);

/* ---- backend_mongodb_conn.c ----------------------------------------------- */

/* BACKEND "mongodb: <what>: <driver message> (error <domain>.<code>)", the
 * one format of a driver failure, without conn's secrets (conn NULL: none
 * known). Returns false. */
bool ll_mongo_fail (const ll_mongo_conn_t *conn, leaselock_error_t *err, const char *what,
                    const bson_error_t *e);

/* NOMEM "out of memory building a MongoDB command". Returns false. */
bool ll_mongo_nomem (leaselock_error_t *err);

/* The vtable's open, close and abandon: open returns a new
 * ll_mongo_conn_t (text borrowed) or NULL; close and abandon free it. */
void *ll_mongo_open (const char *text, leaselock_error_t *err);
void ll_mongo_close (void *conn);
void ll_mongo_abandon (void *conn);

/* Runs a findAndModify of q (borrowed) on coll (conn's coll or queue,
 * borrowed) with opts (from ll_mongo_fam_opts*; owned: destroyed here,
 * NULL reads as out of memory). *doc: a copy of the document that came
 * back, which the caller destroys (bson_destroy), or NULL when none did
 * (nothing matched). On the records, a duplicate key answer (acquire's
 * upsert found the key there) fails with BUSY. */
bool ll_mongo_fam_run (ll_mongo_conn_t *conn, mongoc_collection_t *coll, const bson_t *q,
                       mongoc_find_and_modify_opts_t *opts, bson_t **doc, leaselock_error_t *err);

/* updateOne(q, u) on conn's records (q, u borrowed); *matched from the
 * reply's matchedCount. */
bool ll_mongo_update (ll_mongo_conn_t *conn, const bson_t *q, const bson_t *u, bool *matched,
                      leaselock_error_t *err);

/* ll_mongo_update for an owner's record, built (ok) into q and u, which it
 * destroys (owned): NOT_HELD when nothing matched. */
bool ll_mongo_update_owned (ll_mongo_conn_t *conn, bson_t *q, bson_t *u, bool ok,
                            leaselock_error_t *err);

/* deleteMany(q) on coll (conn's coll or queue; q borrowed); count non-NULL
 * gets the reply's deletedCount. */
bool ll_mongo_delete_many (ll_mongo_conn_t *conn, mongoc_collection_t *coll, const bson_t *q,
                           int64_t *count, leaselock_error_t *err);

/* For tests/test_mongodb.c: the connection's client (to install APM
 * callbacks) and collections, borrowed from conn.
 * ll_mongo_test_set_password gives a connection opened without credentials
 * the password (borrowed; copied) that its error messages must hide (the
 * test server has no authentication). */
mongoc_client_t *ll_mongo_test_client (void *conn);
mongoc_collection_t *ll_mongo_test_collection (void *conn);
mongoc_collection_t *ll_mongo_test_queue (void *conn);
bool ll_mongo_test_set_password (void *conn, const char *password);

/* ---- backend_mongodb_primary.c -------------------------------------------- */

/* What the server a write goes to is, from its hello (or isMaster) reply. */
typedef enum ll_mongo_topology
{
   LL_MONGO_TOPO_UNKNOWN = 0, /* no reply to read (a load balancer in front) */
   LL_MONGO_TOPO_STANDALONE,
   LL_MONGO_TOPO_REPLSET, /* a replica set's primary */
   LL_MONGO_TOPO_SHARDED, /* a mongos */
} ll_mongo_topology_t;

/* Reads hello (borrowed; NULL or empty: unknown): the primary's identity
 * into id ("rs/<setName>/<electionId>", "standalone", "sharded",
 * "unknown") and, for people, what it is into about (host: the driver's
 * address of the server, borrowed, for when the reply has no "me"). */
ll_mongo_topology_t ll_mongo_hello_identity (const bson_t *hello, const char *host, char *id,
                                             size_t id_size, char *about, size_t about_size);

/* Sets p's durability and its text from the topology, about (borrowed)
 * and the write concern wc (borrowed) the grants are sent with. */
void ll_mongo_durability (ll_primary_t *p, ll_mongo_topology_t topo, const char *about,
                          const mongoc_write_concern_t *wc);

/* At open: reads the primary the driver writes to and records it in the
 * meta document (a new one raises the fence floor and starts the
 * lock-delay), filling conn->primary through ll_primary_seen. */
bool ll_mongo_check_primary (ll_mongo_conn_t *conn, leaselock_error_t *err);

/* Before a grant: TTL over max_ttl: INVALID; a primary other than the one
 * recorded (the driver followed a failover): ll_mongo_check_primary
 * again; then ll_primary_grant_ok (BUSY in the lock-delay). */
bool ll_mongo_grant_ready (ll_mongo_conn_t *conn, int64_t ttl_ms, leaselock_error_t *err);

/* After a take of op's key that returned *fence: below the fence floor,
 * a second findAndModify raises the record's fence to the floor and
 * *fence with it. */
bool ll_mongo_fence_floor (ll_mongo_conn_t *conn, const ll_op_t *op, int64_t *fence,
                           leaselock_error_t *err);

/* The vtable's primary: conn's ll_primary_t. */
struct ll_primary *ll_mongo_primary (void *conn);

/* ---- backend_mongodb_queue.c ---------------------------------------------- */

/* The vtable's queue_join (conn: an ll_mongo_conn_t): makes op's owner's
 * entry of its key's queue live for keep_ms (a new one arrives now);
 * *ahead: the live entries ahead of it. op is borrowed. */
bool ll_mongo_queue_join (void *conn, const ll_op_t *op, int64_t keep_ms, int64_t *ahead,
                          leaselock_error_t *err);

/* A fair acquire's first take asks first (one round trip): *any, whether
 * op's key has a live queue entry of another owner than op's. */
bool ll_mongo_queue_others (ll_mongo_conn_t *conn, const ll_op_t *op, bool *any,
                            leaselock_error_t *err);

/* The vtable's queue_leave: deletes op's owner's entry of its key's queue,
 * if any. op is borrowed. */
bool ll_mongo_queue_leave (void *conn, const ll_op_t *op, leaselock_error_t *err);

/* prune's second half: deletes the queue entries under prefix (borrowed)
 * that ran out at least older_than_ms ago (not counted: not records). */
bool ll_mongo_queue_prune (ll_mongo_conn_t *conn, const char *prefix, size_t prefix_len,
                           int64_t older_than_ms, leaselock_error_t *err);

#endif /* LL_BACKEND_MONGODB_PRIVATE_H */
