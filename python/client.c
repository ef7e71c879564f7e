/*
 * client.c - the Client type: one leaselock_client_t, opened by __init__,
 * closed by close() (which releases what it still holds), freed by its
 * dealloc; the administrative calls (inspect, list, force_release, prune,
 * durability) and the counters (stats, prometheus). Its acquires are in
 * acquire.c and wait.c.
 */
#include "module.h"

#include <math.h>
#include <stddef.h>
#include <string.h>
#include <structmember.h>

/* ---- open or closed ---------------------------------------------------- */

static PyObject *raise_closed (ClientObject *self)
{
   if (!self->c)
      return pyll_raise_invalid ("the client is not initialised (call Client(uri) or connect())");
   return pyll_raise_invalid ("I/O operation on a closed client");
}

bool pyll_client_closed (ClientObject *self)
{
   return leaselock_client_closed (self->c); /* true for NULL */
}

/* 0 when the client can take a call, else -1 with ValueError. */
int pyll_client_check (ClientObject *self)
{
   if (!pyll_client_closed (self))
      return 0;
   raise_closed (self);
   return -1;
}

/* ---- Client -------------------------------------------------------------- */

static int Client_traverse (ClientObject *self, visitproc visit, void *arg)
{
   Py_VISIT (Py_TYPE (self));
   Py_VISIT (self->module);
   return 0;
}

static int Client_clear (ClientObject *self)
{
   (void)self;
   return 0;
}

static PyObject *Client_new (PyTypeObject *type, PyObject *args, PyObject *kwds)
{
   (void)args;
   (void)kwds;
   ClientObject *self = (ClientObject *)type->tp_alloc (type, 0);
   if (!self)
      return NULL;
   self->uri = Py_NewRef (Py_None);
   self->backend = Py_NewRef (Py_None);
   self->label = Py_NewRef (Py_None);
   self->log_level = LEASELOCK_LOG_OFF;
   return (PyObject *)self;
}

/* A text argument of Client(): None (*s NULL), or a str of valid UTF-8
 * without NUL, at most max bytes, not empty when empty_hint says why. *s
 * points into the str's UTF-8 cache. 0, or -1 naming the argument. */
static int text_arg (PyObject *o, const char *name, const char *empty_hint, Py_ssize_t max,
                     const char **s)
{
   Py_ssize_t n;
   *s = NULL;
   if (o == Py_None)
      return 0;
   if (!PyUnicode_Check (o)) {
      pyll_raise_type ("%s must be a str or None, not %.100s", name, Py_TYPE (o)->tp_name);
      return -1;
   }
   if (!(*s = pyll_utf8_arg (o, name, &n)))
      return -1;
   if (n == 0 && empty_hint)
      pyll_raise_invalid ("%s must not be empty (%s)", name, empty_hint);
   else if (n > max)
      pyll_raise_invalid ("%s is %zd bytes long in UTF-8 (at most %zd)", name, n, max);
   else if (memchr (*s, '\0', (size_t)n))
      pyll_raise_invalid ("%s must not contain a NUL character", name);
   else
      return 0;
   return -1;
}

static int Client_init (ClientObject *self, PyObject *args, PyObject *kwds)
{
   static char *kwlist[] = { "uri", "label", NULL };
   PyObject *uri_o = Py_None, *label_o = Py_None;
   if (!PyArg_ParseTupleAndKeywords (args, kwds, "|O$O:Client", kwlist, &uri_o, &label_o))
      return -1;
   if (self->c) {
      pyll_raise_type ("Client.__init__ may be called only once");
      return -1;
   }
   PyObject *module = PyType_GetModuleByDef (Py_TYPE (self), &pyll_module_def);
   if (!module)
      return -1;
   const char *uri, *label;
   if (text_arg (uri_o, "uri", "pass None for $LEASELOCK_URI or the default", PY_SSIZE_T_MAX,
                 &uri) < 0 ||
       text_arg (label_o, "label", NULL, 255, &label) < 0)
      return -1;
   leaselock_error_t err;
   leaselock_client_t *c;
   LL_NOGIL (c = leaselock_client_new (uri, label, &err));
   if (!c) {
      pyll_raise_error (pyll_state (module), &err);
      return -1;
   }
   PyObject *u = PyUnicode_DecodeUTF8 (leaselock_client_uri (c),
                                       (Py_ssize_t)strlen (leaselock_client_uri (c)), "replace");
   PyObject *b = PyUnicode_FromString (leaselock_client_backend (c));
   if (!u || !b) {
      Py_XDECREF (u);
      Py_XDECREF (b);
      LL_NOGIL (leaselock_client_destroy (c));
      return -1;
   }
   Py_XSETREF (self->uri, u);
   Py_XSETREF (self->backend, b);
   Py_XSETREF (self->label, Py_NewRef (label_o));
   Py_XSETREF (self->module, Py_NewRef (module));
   self->c = c;
   self->log_level = pyll_log_level ();
   leaselock_client_set_log (c, self->log_level, pyll_log_hook, NULL);
   return 0;
}

/* close(): leaselock_client_close releasing what the client still
 * holds. Idempotent; a failed release is raised once the client is
 * closed. */
static PyObject *Client_close (ClientObject *self, PyObject *unused)
{
   (void)unused;
   if (!self->c)
      Py_RETURN_NONE;
   leaselock_client_t *c = self->c;
   leaselock_error_t err;
   bool ok;
   LL_NOGIL (ok = leaselock_client_close (c, true, &err));
   if (!ok)
      return pyll_raise_error (pyll_state (self->module), &err);
   Py_RETURN_NONE;
}

static void Client_drop (PyObject *o)
{
   ClientObject *self = (ClientObject *)o;
   /* No Lease object is alive (each holds a reference), and no call is in
    * flight (it would hold one too). Releases nothing. */
   LL_DESTROY_NOGIL (self->c, leaselock_client_destroy);
   Py_CLEAR (self->uri);
   Py_CLEAR (self->backend);
   Py_CLEAR (self->label);
   Py_CLEAR (self->module);
}

static void Client_dealloc (PyObject *self)
{
   pyll_dealloc (self, Client_drop);
}

static PyObject *Client_enter (ClientObject *self, PyObject *unused)
{
   (void)unused;
   if (pyll_client_check (self) < 0)
      return NULL;
   return Py_NewRef (self);
}

static PyObject *Client_exit (ClientObject *self, PyObject *args)
{
   (void)args;
   return Client_close (self, NULL);
}

/* -1 (not known) as None. */
static PyObject *known_i64 (int64_t v)
{
   return v < 0 ? Py_NewRef (Py_None) : PyLong_FromLongLong ((long long)v);
}

/* A record as a tuple: (key, owner|None, fence, expires_in_ms, host, pid,
 * label|None, holds, next_owner|None, queued|None, held_ms|None). The one
 * conversion of a record (the package makes it a dict). */
static PyObject *record_tuple (const leaselock_record_t *r)
{
   PyObject *key = PyUnicode_DecodeUTF8 (r->key, (Py_ssize_t)r->key_len, "replace");
   PyObject *owner = r->owner[0] ? PyUnicode_FromString (r->owner) : Py_NewRef (Py_None);
   PyObject *host = PyUnicode_DecodeUTF8 (r->host, (Py_ssize_t)strlen (r->host), "replace");
   PyObject *label = r->label[0]
                       ? PyUnicode_DecodeUTF8 (r->label, (Py_ssize_t)strlen (r->label), "replace")
                       : Py_NewRef (Py_None);
   PyObject *next = r->next_owner[0] ? PyUnicode_FromString (r->next_owner) : Py_NewRef (Py_None);
   PyObject *queued = known_i64 (r->queued), *held = known_i64 (r->held_ms);
   PyObject *t = NULL;
   if (key && owner && host && label && next && queued && held)
      t = Py_BuildValue ("(OOLLOLOLOOO)", key, owner, (long long)r->fence,
                         (long long)r->expires_in_ms, host, (long long)r->pid, label,
                         (long long)r->holds, next, queued, held);
   Py_XDECREF (key);
   Py_XDECREF (owner);
   Py_XDECREF (host);
   Py_XDECREF (label);
   Py_XDECREF (next);
   Py_XDECREF (queued);
   Py_XDECREF (held);
   return t;
}

/* A lock (a mode's records as one) as a tuple: (key, mode, state, live,
 * record|None, [holder record...], slots, readers, writer,
 * next_owner|None, queued|None). */
static PyObject *lock_tuple (const leaselock_lock_info_t *l)
{
   static const char *const modes[] = { [LEASELOCK_MODE_LOCK] = "lock",
                                        [LEASELOCK_MODE_SEMAPHORE] = "semaphore",
                                        [LEASELOCK_MODE_RWLOCK] = "rwlock" };
   PyObject *holders = PyList_New ((Py_ssize_t)l->n_holders);
   for (size_t i = 0; holders && i < l->n_holders; i++) {
      PyObject *h = record_tuple (l->holders[i]);
      if (!h)
         Py_CLEAR (holders);
      else
         PyList_SET_ITEM (holders, (Py_ssize_t)i, h);
   }
   PyObject *rec = l->record ? record_tuple (l->record) : Py_NewRef (Py_None);
   PyObject *key = PyUnicode_DecodeUTF8 (l->key, (Py_ssize_t)l->key_len, "replace");
   PyObject *next = l->next_owner[0] ? PyUnicode_FromString (l->next_owner) : Py_NewRef (Py_None);
   PyObject *queued = known_i64 (l->queued);
   if (!holders || !rec || !key || !next || !queued) {
      Py_XDECREF (holders);
      Py_XDECREF (rec);
      Py_XDECREF (key);
      Py_XDECREF (next);
      Py_XDECREF (queued);
      return NULL;
   }
   return Py_BuildValue ("(NssLNNLLONN)", key, modes[l->mode], l->state, (long long)l->live, rec,
                         holders, (long long)l->slots, (long long)l->readers,
                         l->writer ? Py_True : Py_False, next, queued);
}

static PyObject *Client_inspect (ClientObject *self, PyObject *key_o)
{
   const char *key;
   Py_ssize_t n;
   if (pyll_key_arg (key_o, "key", false, &key, &n) < 0 || pyll_client_check (self) < 0)
      return NULL;
   leaselock_record_t *rec = PyMem_RawMalloc (sizeof *rec);
   if (!rec)
      return PyErr_NoMemory ();
   leaselock_error_t err;
   bool found = false, ok;
   LL_NOGIL (ok = leaselock_inspect (self->c, key, (size_t)n, rec, &found, &err));
   PyObject *res;
   if (!ok)
      res = pyll_raise_error (pyll_state (self->module), &err);
   else if (!found)
      res = Py_NewRef (Py_None);
   else
      res = record_tuple (rec);
   PyMem_RawFree (rec);
   return res;
}

/* _explain(key, timed_out, waited_ms, message) -> LockTimeout (not raised):
 * the error of an acquire that gave up after tries of the package's own
 * (asyncio), code TIMEOUT or BUSY, naming the key's holder as the core's
 * acquires do (leaselock_explain_busy: one read); message is kept when no
 * holder is found. */
static PyObject *Client_explain (ClientObject *self, PyObject *args)
{
   PyObject *key_o;
   int timed_out;
   long long waited_ms;
   const char *message;
   const char *key;
   Py_ssize_t n;
   if (!PyArg_ParseTuple (args, "OpLs:_explain", &key_o, &timed_out, &waited_ms, &message) ||
       pyll_key_arg (key_o, "key", false, &key, &n) < 0 || pyll_client_check (self) < 0)
      return NULL;
   leaselock_error_t err = { .code = timed_out ? LEASELOCK_TIMEOUT : LEASELOCK_BUSY };
   snprintf (err.message, sizeof err.message, "%s", message);
   LL_NOGIL (leaselock_explain_busy (self->c, key, (size_t)n, (int64_t)waited_ms, &err));
   return pyll_error_object (pyll_state (self->module), &err);
}

/* The list being built by leaselock_list's callback. The core calls it
 * with no connection held, on this thread: it takes the GIL back for
 * each record. */
typedef struct
{
   PyThreadState *ts;
   PyObject *list;
   bool failed; /* a Python exception is set */
} list_ctx_t;

/* The end of each callback below, which took the GIL back to make t (a
 * new reference, or NULL): appends it and lets the GIL go again. */
static bool list_append_tuple (list_ctx_t *x, PyObject *t)
{
   x->failed = !t || PyList_Append (x->list, t) < 0;
   Py_XDECREF (t);
   x->ts = PyEval_SaveThread ();
   return !x->failed;
}

static bool list_append (const leaselock_record_t *r, void *data)
{
   list_ctx_t *x = data;
   PyEval_RestoreThread (x->ts);
   return list_append_tuple (x, record_tuple (r));
}

static PyObject *Client_list (ClientObject *self, PyObject *prefix_o)
{
   const char *prefix;
   Py_ssize_t n;
   if (pyll_key_arg (prefix_o, "prefix", true, &prefix, &n) < 0 || pyll_client_check (self) < 0)
      return NULL;
   list_ctx_t x = { NULL, PyList_New (0), false };
   if (!x.list)
      return NULL;
   leaselock_error_t err;
   x.ts = PyEval_SaveThread ();
   bool ok = leaselock_list (self->c, prefix, (size_t)n, list_append, &x, &err);
   PyEval_RestoreThread (x.ts);
   if (x.failed || !ok) {
      Py_CLEAR (x.list);
      if (!x.failed)
         pyll_raise_error (pyll_state (self->module), &err);
   }
   return x.list;
}

/* leaselock_lock_cb: appends the lock's tuple, with the GIL, to the list
 * (found is set for _lock_info). */
static bool lock_append (const leaselock_lock_info_t *l, void *data)
{
   list_ctx_t *x = data;
   PyEval_RestoreThread (x->ts);
   return list_append_tuple (x, lock_tuple (l));
}

/* _locks(prefix) -> [lock tuple], or _lock_info(key) -> lock tuple | None
 * (inspect). */
static PyObject *locks_call (ClientObject *self, PyObject *arg_o, bool inspect)
{
   const char *arg;
   Py_ssize_t n;
   if (pyll_key_arg (arg_o, inspect ? "key" : "prefix", !inspect, &arg, &n) < 0 ||
       pyll_client_check (self) < 0)
      return NULL;
   list_ctx_t x = { NULL, PyList_New (0), false };
   if (!x.list)
      return NULL;
   leaselock_error_t err;
   bool found = false, ok;
   x.ts = PyEval_SaveThread ();
   if (inspect)
      ok = leaselock_lock_inspect (self->c, arg, (size_t)n, lock_append, &x, &found, &err);
   else
      ok = leaselock_locks (self->c, arg, (size_t)n, lock_append, &x, &err);
   PyEval_RestoreThread (x.ts);
   if (x.failed || !ok) {
      Py_CLEAR (x.list);
      return x.failed ? NULL : pyll_raise_error (pyll_state (self->module), &err);
   }
   if (!inspect)
      return x.list;
   PyObject *res =
     PyList_GET_SIZE (x.list) ? Py_NewRef (PyList_GET_ITEM (x.list, 0)) : Py_NewRef (Py_None);
   Py_DECREF (x.list);
   return res;
}

static PyObject *Client_lock_info (ClientObject *self, PyObject *key_o)
{
   return locks_call (self, key_o, true);
}

static PyObject *Client_locks (ClientObject *self, PyObject *prefix_o)
{
   return locks_call (self, prefix_o, false);
}

static PyObject *Client_force_release (ClientObject *self, PyObject *key_o)
{
   const char *key;
   Py_ssize_t n;
   if (pyll_key_arg (key_o, "key", false, &key, &n) < 0 || pyll_client_check (self) < 0)
      return NULL;
   leaselock_error_t err;
   bool took = false, ok;
   LL_NOGIL (ok = leaselock_force_release (self->c, key, (size_t)n, &took, &err));
   if (!ok)
      return pyll_raise_error (pyll_state (self->module), &err);
   return PyBool_FromLong (took);
}

/* prune(prefix="", older_than=0) -> int: deletes the expired records whose
 * key starts with prefix, expired at least older_than seconds ago
 * (leaselock_prune); returns how many. */
static PyObject *Client_prune (ClientObject *self, PyObject *args, PyObject *kwds)
{
   static char *kwlist[] = { "prefix", "older_than", NULL };
   PyObject *prefix_o = NULL, *older_o = NULL;
   if (!PyArg_ParseTupleAndKeywords (args, kwds, "|OO:prune", kwlist, &prefix_o, &older_o))
      return NULL;
   const char *prefix = "";
   Py_ssize_t n = 0;
   int64_t older_ms = 0;
   if ((prefix_o && pyll_key_arg (prefix_o, "prefix", true, &prefix, &n) < 0) ||
       (older_o && pyll_seconds_arg (older_o, "older_than", SECS_DURATION, &older_ms) < 0) ||
       pyll_client_check (self) < 0)
      return NULL;
   leaselock_error_t err;
   int64_t count = 0;
   bool ok;
   LL_NOGIL (ok = leaselock_prune (self->c, prefix, (size_t)n, older_ms, &count, &err));
   if (!ok)
      return pyll_raise_error (pyll_state (self->module), &err);
   return PyLong_FromLongLong (count);
}

/* _durability() -> (level, policy, detail, primary, fence_floor,
 * lock_delay_ms, max_ttl_ms): leaselock_client_durability as a tuple (the
 * package makes it a dict in seconds). May connect: the GIL is released. */
static PyObject *Client_durability (ClientObject *self, PyObject *unused)
{
   (void)unused;
   if (pyll_client_check (self) < 0)
      return NULL;
   leaselock_durability_t d;
   leaselock_error_t err;
   bool ok;
   LL_NOGIL (ok = leaselock_client_durability (self->c, &d, &err));
   if (!ok)
      return pyll_raise_error (pyll_state (self->module), &err);
   PyObject *detail = PyUnicode_DecodeUTF8 (d.detail, (Py_ssize_t)strlen (d.detail), "replace");
   PyObject *primary = PyUnicode_DecodeUTF8 (d.primary, (Py_ssize_t)strlen (d.primary), "replace");
   PyObject *t = NULL;
   if (detail && primary)
      t = Py_BuildValue ("(ssOOLLL)", d.level, d.policy, detail, primary, (long long)d.fence_floor,
                         (long long)d.lock_delay_ms, (long long)d.max_ttl_ms);
   Py_XDECREF (detail);
   Py_XDECREF (primary);
   return t;
}

/* The counters of stats(), by name. */
static const struct
{
   const char *name;
   size_t offset;
} stat_fields[] = {
#define F(f)                                                                                       \
   {                                                                                               \
#f, offsetof(leaselock_stats_t, f)                                                           \
   }
   F (acquires),
   F (busy),
   F (waits),
   F (timeouts),
   F (renewals),
   F (renewal_failures),
   F (losses),
   F (releases),
   F (release_failures),
   F (backend_errors),
   F (requests),
   F (leases_held),
   F (failovers),
   F (durability_warnings),
#undef F
};

/* The latency histogram as [(upper bound in seconds, count), ...]. */
static PyObject *latency_list (const leaselock_stats_t *st)
{
   PyObject *list = PyList_New (LEASELOCK_LATENCY_BUCKETS);
   for (int i = 0; list && i < LEASELOCK_LATENCY_BUCKETS; i++) {
      double le =
        st->latency_le_us[i] == UINT64_MAX ? INFINITY : (double)st->latency_le_us[i] / 1e6;
      PyObject *t = Py_BuildValue ("(dK)", le, (unsigned long long)st->latency_count[i]);
      if (!t) {
         Py_CLEAR (list);
         break;
      }
      PyList_SET_ITEM (list, i, t);
   }
   return list;
}

static int stats_fill (ClientObject *self, leaselock_stats_t *st)
{
   leaselock_error_t err;
   if (!self->c) {
      raise_closed (self);
      return -1;
   }
   if (!leaselock_client_stats (self->c, st, &err)) {
      pyll_raise_error (pyll_state (self->module), &err);
      return -1;
   }
   return 0;
}

/* d[name] = v, taking v (a new reference, or NULL after a failure).
 * 0, or -1 with an exception. */
static int dict_set_new (PyObject *d, const char *name, PyObject *v)
{
   int rc = v ? PyDict_SetItemString (d, name, v) : -1;
   Py_XDECREF (v);
   return rc;
}

/* stats() -> dict: the client's counters (see the method's doc). */
static PyObject *Client_stats (ClientObject *self, PyObject *unused)
{
   (void)unused;
   leaselock_stats_t st;
   if (stats_fill (self, &st) < 0)
      return NULL;
   PyObject *d = PyDict_New ();
   for (size_t i = 0; d && i < sizeof stat_fields / sizeof stat_fields[0]; i++) {
      uint64_t v = *(const uint64_t *)((const char *)&st + stat_fields[i].offset);
      if (dict_set_new (d, stat_fields[i].name, PyLong_FromUnsignedLongLong (v)) < 0)
         Py_CLEAR (d);
   }
   if (d &&
       (dict_set_new (d, "wait_seconds", PyFloat_FromDouble ((double)st.wait_ms / 1000.0)) < 0 ||
        dict_set_new (d, "held_seconds", PyFloat_FromDouble ((double)st.held_ms / 1000.0)) < 0 ||
        dict_set_new (d, "latency_sum_seconds",
                      PyFloat_FromDouble ((double)st.latency_sum_us / 1e6)) < 0 ||
        dict_set_new (d, "latency_buckets", latency_list (&st)) < 0))
      Py_CLEAR (d);
   return d;
}

/* prometheus(labels="") -> str: stats() in the Prometheus text format. */
static PyObject *Client_prometheus (ClientObject *self, PyObject *args)
{
   const char *labels = "";
   if (!PyArg_ParseTuple (args, "|s:prometheus", &labels))
      return NULL;
   leaselock_stats_t st;
   if (stats_fill (self, &st) < 0)
      return NULL;
   size_t need = leaselock_stats_prometheus (&st, labels, NULL, 0);
   char *buf = PyMem_Malloc (need + 1);
   if (!buf)
      return PyErr_NoMemory ();
   leaselock_stats_prometheus (&st, labels, buf, need + 1);
   PyObject *r = PyUnicode_DecodeUTF8 (buf, (Py_ssize_t)need, "replace");
   PyMem_Free (buf);
   return r;
}

static PyObject *Client_repr (ClientObject *self)
{
   if (!self->c)
      return PyUnicode_FromFormat ("<%s uninitialised>", Py_TYPE (self)->tp_name);
   return PyUnicode_FromFormat ("<%s %U (%U) %s>", Py_TYPE (self)->tp_name, self->uri,
                                self->backend, pyll_client_closed (self) ? "closed" : "open");
}

static PyObject *Client_get_closed (ClientObject *self, void *c)
{
   (void)c;
   return PyBool_FromLong (pyll_client_closed (self));
}

static PyObject *Client_get_uri (ClientObject *self, void *c)
{
   (void)c;
   return Py_NewRef (self->uri);
}

static PyObject *Client_get_backend (ClientObject *self, void *c)
{
   (void)c;
   return Py_NewRef (self->backend);
}

static PyObject *Client_get_label (ClientObject *self, void *c)
{
   (void)c;
   return Py_NewRef (self->label);
}

static PyMethodDef Client_methods[] = {
   { "close", (PyCFunction)Client_close, METH_NOARGS,
     "close($self, /)\n--\n\nReleases the leases this client still holds and closes its "
     "connections. Idempotent; any later use raises ValueError." },
   { "_acquire", (PyCFunction)(void (*) (void))pyll_client_acquire, METH_FASTCALL | METH_KEYWORDS,
     NULL },
   { "_acquire_mode", (PyCFunction)(void (*) (void))pyll_client_acquire_mode,
     METH_FASTCALL | METH_KEYWORDS, NULL },
   { "_wait", (PyCFunction)(void (*) (void))pyll_client_wait, METH_FASTCALL | METH_KEYWORDS, NULL },
   { "_inspect", (PyCFunction)Client_inspect, METH_O, NULL },
   { "_explain", (PyCFunction)Client_explain, METH_VARARGS, NULL },
   { "_list", (PyCFunction)Client_list, METH_O, NULL },
   { "_lock_info", (PyCFunction)Client_lock_info, METH_O, NULL },
   { "_locks", (PyCFunction)Client_locks, METH_O, NULL },
   { "_durability", (PyCFunction)Client_durability, METH_NOARGS, NULL },
   { "force_release", (PyCFunction)Client_force_release, METH_O,
     "force_release($self, key, /)\n--\n\nClears the owner of key whoever holds it and makes it "
     "free now (the fence survives). Returns True when a live lease was taken away." },
   { "prune", (PyCFunction)(void (*) (void))Client_prune, METH_VARARGS | METH_KEYWORDS,
     "prune($self, /, prefix='', older_than=0)\n--\n\nDeletes the free records whose key starts "
     "with prefix: those expired at least older_than seconds ago by the database clock, never a "
     "live lease or one kept by min_hold. Returns how many. A pruned key's fence starts again "
     "at 1." },
   { "stats", (PyCFunction)Client_stats, METH_NOARGS,
     "stats($self, /)\n--\n\nThe client's counters since it was created, as a dict: acquires, "
     "busy (one-try acquires found busy), waits (blocking acquires that waited), timeouts, "
     "renewals, renewal_failures, losses, releases, release_failures, backend_errors, requests "
     "(statements sent), failovers (connections that found a new primary), "
     "durability_warnings (connections whose grants may not survive a failover), leases_held "
     "(now), wait_seconds and held_seconds (totals), "
     "latency_sum_seconds and latency_buckets: [(upper bound in seconds, count of requests), "
     "...], not cumulative, the last bound inf. Works on a closed client." },
   { "prometheus", (PyCFunction)Client_prometheus, METH_VARARGS,
     "prometheus($self, labels='', /)\n--\n\nstats() in the Prometheus text format; labels "
     "(e.g. 'app=\"jobs\"', values escaped by the caller) go in every sample." },
   { "__enter__", (PyCFunction)Client_enter, METH_NOARGS, NULL },
   { "__exit__", (PyCFunction)Client_exit, METH_VARARGS, NULL },
   { NULL, NULL, 0, NULL },
};

static PyGetSetDef Client_getset[] = {
   { "closed", (getter)Client_get_closed, NULL, "True once close() was called.", NULL },
   { "uri", (getter)Client_get_uri, NULL, "The URI in use, password replaced by ***.", NULL },
   { "backend", (getter)Client_get_backend, NULL, "sqlite, mongodb, mysql or postgresql.", NULL },
   { "label", (getter)Client_get_label, NULL, "The label stored with every lease, or None.", NULL },
   { NULL, NULL, NULL, NULL, NULL },
};

static PyMemberDef Client_members[] = {
   { "__weaklistoffset__", T_PYSSIZET, offsetof (ClientObject, weakreflist), READONLY, NULL },
   { NULL, 0, 0, 0, NULL },
};

static const PyType_Slot Client_slots[] = {
   { Py_tp_new, Client_new },       { Py_tp_init, Client_init },       { Py_tp_repr, Client_repr },
   { Py_tp_getset, Client_getset }, { Py_tp_members, Client_members }, { 0, NULL },
};

int pyll_client_setup_types (PyObject *m, pyll_state_t *st)
{
   return pyll_add_type (m, &st->client_type, true, "leaselock._leaselock.Client",
                         "Client(uri=None, *, label=None)\n--\n\nA connection to one lock database "
                         "(the C core's client).",
                         sizeof (ClientObject), Py_TPFLAGS_BASETYPE, Client_dealloc,
                         Client_traverse, Client_clear, Client_methods, Client_slots);
}
