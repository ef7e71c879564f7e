/*
 * fault_backend.c - forwards each call to the backend the URI names after
 * "faulty+", and fails the call chosen by fault_backend_arm(). Scheme
 * "faulty+fake" and "faulty+sqlite". Not part of the library.
 */
#include "fault_backend.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define PREFIX "faulty+"

typedef struct fault_conn
{
   const ll_backend_t *inner;
   void *conn;
} fault_conn_t;

static atomic_long target;  /* the call to fail, 0: none */
static atomic_int kind;     /* its fault_kind_t */
static atomic_long n_calls; /* started since arm */
static atomic_long n_done;  /* finished since arm */
static const char *_Atomic fired;

void fault_backend_arm (long n, fault_kind_t k)
{
   atomic_store (&target, 0);
   atomic_store (&n_calls, 0);
   atomic_store (&n_done, 0);
   atomic_store (&fired, NULL);
   atomic_store (&kind, (int)k);
   atomic_store (&target, n);
}

long fault_backend_calls (void)
{
   return atomic_load (&n_calls);
}

long fault_backend_done (void)
{
   return atomic_load (&n_done);
}

const char *fault_backend_fired (void)
{
   return atomic_load (&fired);
}

const char *fault_kind_name (fault_kind_t k)
{
   static const char *const names[] = { "BACKEND", "NOMEM", "LOST", "BACKEND x2", "LOST+BACKEND" };
   return (unsigned)k < FAULT_KINDS ? names[k] : "?";
}

/* Counts one call of op. Returns the fault to apply to it, or -1. */
static int enter (const char *op)
{
   long n = atomic_fetch_add (&n_calls, 1) + 1, t = atomic_load (&target);
   int k = atomic_load (&kind);
   if (t && n == t + 1 && (k == FAULT_TWICE || k == FAULT_LOST_THEN_FAIL))
      return FAULT_BACKEND;
   if (!t || n != t)
      return -1;
   atomic_store (&fired, op);
   return k == FAULT_TWICE ? FAULT_BACKEND : k == FAULT_LOST_THEN_FAIL ? FAULT_LOST : k;
}

/* Before the call: BACKEND and NOMEM stop it here. */
static bool fail_before (int f, const char *op, leaselock_error_t *err)
{
   if (f == FAULT_BACKEND)
      return ll_error_set (err, LEASELOCK_BACKEND, "fault backend: injected failure of %s", op);
   if (f == FAULT_NOMEM)
      return ll_error_set (err, LEASELOCK_NOMEM, "fault backend: injected out of memory in %s", op);
   return true;
}

/* After the call: a lost reply turns its answer into BACKEND. */
static bool leave (int f, const char *op, bool ok, leaselock_error_t *err)
{
   if (ok && f == FAULT_LOST)
      ok = ll_error_set (err, LEASELOCK_BACKEND, "fault backend: the reply to %s was lost", op);
   atomic_fetch_add (&n_done, 1);
   return ok;
}

static void fault_close (void *conn);

static void *fault_open (const char *uri, leaselock_error_t *err)
{
   if (strncmp (uri, PREFIX, sizeof PREFIX - 1) != 0)
      return ll_error_set (err, LEASELOCK_INVALID, "not a faulty+ URI"), NULL;
   const char *rest = uri + sizeof PREFIX - 1;
   const ll_backend_t *inner = ll_backend_for_uri (rest, err);
   if (!inner)
      return NULL;
   int f = enter ("open");
   if (!fail_before (f, "open", err)) {
      atomic_fetch_add (&n_done, 1);
      return NULL;
   }
   fault_conn_t *fc = malloc (sizeof *fc);
   if (!fc) {
      atomic_fetch_add (&n_done, 1);
      return ll_error_set (err, LEASELOCK_NOMEM, "fault backend: out of memory"), NULL;
   }
   fc->inner = inner;
   fc->conn = inner->open (rest, err);
   if (!leave (f, "open", fc->conn != NULL, err)) {
      fault_close (fc); /* a connection whose handshake reply was lost is dropped */
      return NULL;
   }
   return fc;
}

static void fault_close (void *conn)
{
   fault_conn_t *fc = conn;
   if (!fc)
      return;
   if (fc->conn)
      fc->inner->close (fc->conn);
   free (fc);
}

static void fault_abandon (void *conn)
{
   fault_conn_t *fc = conn;
   if (fc && fc->conn && fc->inner->abandon)
      fc->inner->abandon (fc->conn);
   free (fc);
}

#define FORWARD(op, call)                                                                          \
   fault_conn_t *fc = conn;                                                                        \
   int f = enter (op);                                                                             \
   if (!fail_before (f, op, err))                                                                  \
      return leave (-1, op, false, err);                                                           \
   return leave (f, op, fc->inner->call, err)

static bool fault_acquire (void *conn, const ll_take_t *t, int64_t *fence, leaselock_error_t *err)
{
   fault_conn_t *fc = conn;
   int f = enter ("acquire");
   if (!fail_before (f, "acquire", err))
      return leave (-1, "acquire", false, err);
   bool ok = ll_backend_acquire (fc->inner, fc->conn, t, fence, err);
   return leave (f, "acquire", ok, err);
}

static bool fault_acquire_wait (void *conn, const ll_take_t *t, ll_taken_t *out,
                                leaselock_error_t *err)
{
   out->reserved = false;
   out->left_ms = -1;
   FORWARD ("acquire", acquire_wait (fc->conn, t, out, err));
}

static bool fault_renew (void *conn, const ll_op_t *op, int64_t ttl_ms, leaselock_error_t *err)
{
   FORWARD ("renew", renew (fc->conn, op, ttl_ms, err));
}

static bool fault_release (void *conn, const ll_op_t *op, int64_t min_hold_ms,
                           leaselock_error_t *err)
{
   FORWARD ("release", release (fc->conn, op, min_hold_ms, err));
}

static bool fault_inspect (void *conn, const ll_op_t *op, leaselock_record_t *rec, bool *found,
                           leaselock_error_t *err)
{
   FORWARD ("inspect", inspect (fc->conn, op, rec, found, err));
}

static bool fault_list (void *conn, const char *prefix, size_t prefix_len, leaselock_record_cb fn,
                        void *user_data, leaselock_error_t *err)
{
   FORWARD ("list", list (fc->conn, prefix, prefix_len, fn, user_data, err));
}

static bool fault_force (void *conn, const ll_op_t *op, bool *took, leaselock_error_t *err)
{
   FORWARD ("force_release", force_release (fc->conn, op, took, err));
}

static bool fault_prune (void *conn, const char *prefix, size_t prefix_len, int64_t older_than_ms,
                         int64_t *count, leaselock_error_t *err)
{
   FORWARD ("prune", prune (fc->conn, prefix, prefix_len, older_than_ms, count, err));
}

/* The queue ops of an inner backend that has none: UNSUPPORTED, as the
 * engine reports for such a backend. */
static bool fault_no_queue (const fault_conn_t *fc, leaselock_error_t *err)
{
   return ll_error_set (err, LEASELOCK_UNSUPPORTED, "%s: no fair mode", fc->inner->name);
}

static bool fault_queue_join (void *conn, const ll_op_t *op, int64_t keep_ms, int64_t *ahead,
                              leaselock_error_t *err)
{
   if (!((fault_conn_t *)conn)->inner->queue_join)
      return fault_no_queue (conn, err);
   FORWARD ("queue_join", queue_join (fc->conn, op, keep_ms, ahead, err));
}

static bool fault_queue_leave (void *conn, const ll_op_t *op, leaselock_error_t *err)
{
   if (!((fault_conn_t *)conn)->inner->queue_leave)
      return fault_no_queue (conn, err);
   FORWARD ("queue_leave", queue_leave (fc->conn, op, err));
}

const ll_backend_t fault_backend = {
   .name = "faulty",
   .schemes = { "faulty+fake", "faulty+sqlite", NULL },
   .open = fault_open,
   .close = fault_close,
   .abandon = fault_abandon,
   .close_before_fork = true, /* SQLite's rule, harmless for the fake one */
   .acquire = fault_acquire,
   .acquire_wait = fault_acquire_wait,
   .renew = fault_renew,
   .release = fault_release,
   .inspect = fault_inspect,
   .list = fault_list,
   .force_release = fault_force,
   .prune = fault_prune,
   .queue_join = fault_queue_join,
   .queue_leave = fault_queue_leave,
};
