/*
 * acquire.c - Client._acquire and Client._acquire_mode: their arguments
 * (also _wait's, wait.c), and the core's blocking acquire of a lock, a
 * semaphore slot or a side of a read-write lock, run without the GIL;
 * between its waits the core asks should_stop, which takes the GIL back to
 * run signal handlers (Ctrl-C) and read the caller's cancel flag.
 */
#include "module.h"

/* should_stop's state for one blocking acquire, on the caller's stack. */
typedef struct
{
   PyThreadState *ts;                       /* the waiting thread's, while without the GIL */
   PyObject *cancel;                        /* borrowed: object with is_set(), or NULL */
   PyObject *exc_type, *exc_value, *exc_tb; /* owned: the exception should_stop met */
   enum
   {
      STOP_NONE,
      STOP_ERROR,
      STOP_CANCELLED
   } why;
} stop_ctx_t;

/* should_stop for a blocking acquire: runs on the waiting thread, takes
 * the GIL back briefly to run signal handlers (Ctrl-C), and looks at the
 * caller's cancel flag. (The core itself ends the wait when the client is
 * closed.) */
static bool stop_trampoline (void *data)
{
   stop_ctx_t *x = data;
   PyEval_RestoreThread (x->ts);
   if (PyErr_CheckSignals () < 0) {
      x->why = STOP_ERROR;
      PyErr_Fetch (&x->exc_type, &x->exc_value, &x->exc_tb);
   } else if (x->cancel) {
      PyObject *r = PyObject_CallMethod (x->cancel, "is_set", NULL);
      int t = r ? PyObject_IsTrue (r) : -1;
      Py_XDECREF (r);
      if (t < 0) {
         x->why = STOP_ERROR;
         PyErr_Fetch (&x->exc_type, &x->exc_value, &x->exc_tb);
      } else if (t) {
         x->why = STOP_CANCELLED;
      }
   }
   bool stop = x->why != STOP_NONE;
   x->ts = PyEval_SaveThread ();
   return stop;
}

/* The value of keyword argument kw, one of names[n] (values[i] gets it). */
static int keyword_arg (PyObject *kw, PyObject *value, const char *const *names, PyObject **values,
                        int n, const char *fn)
{
   for (int i = 0; i < n; i++)
      if (PyUnicode_Check (kw) && PyUnicode_CompareWithASCIIString (kw, names[i]) == 0) {
         values[i] = value;
         return 0;
      }
   const char *name = PyUnicode_Check (kw) ? PyUnicode_AsUTF8 (kw) : NULL;
   pyll_raise_type ("%s() got an unexpected keyword argument '%.100s'", fn, name ? name : "?");
   return -1;
}

/* _acquire(key, *, ttl_ms, timeout_ms, min_hold_ms=0, auto_renew=True,
 *          on_lost=None, cancel=None, on_renew_failed=None, fair=False,
 *          busy_raises=False): the key
 * positional, the rest by keyword only (METH_FASTCALL | METH_KEYWORDS).
 * fn names the method for its messages; _acquire_mode (modes) also takes
 * mode (required) and limit (0 unless given). */
int pyll_acquire_parse (PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, const char *fn,
                        bool modes, pyll_acquire_args_t *a)
{
   static const char *const names[] = {
      "ttl_ms",          "timeout_ms", "min_hold_ms", "auto_renew", "on_lost", "cancel",
      "on_renew_failed", "fair",       "busy_raises", "mode",       "limit"
   };
   PyObject *v[11] = { NULL,    NULL,     NULL,     Py_True, Py_None, Py_None,
                       Py_None, Py_False, Py_False, NULL,    NULL };
   Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE (kwnames) : 0;
   if (nargs != 1) {
      pyll_raise_type ("%s() takes the key as its one positional argument (%zd given)", fn, nargs);
      return -1;
   }
   for (Py_ssize_t i = 0; i < nkw; i++)
      if (keyword_arg (PyTuple_GET_ITEM (kwnames, i), args[nargs + i], names, v, modes ? 11 : 9,
                       fn) < 0)
         return -1;
   if (!v[0] || !v[1] || (modes && !v[9])) {
      pyll_raise_type (modes ? "%s() needs the keyword arguments ttl_ms, timeout_ms and mode"
                             : "%s() needs the keyword arguments ttl_ms and timeout_ms",
                       fn);
      return -1;
   }
   a->mode = v[9];
   a->limit = 0;
   if (v[10]) {
      if (!PyLong_Check (v[10]) || PyBool_Check (v[10])) {
         pyll_raise_type ("limit must be an int, not %.100s", Py_TYPE (v[10])->tp_name);
         return -1;
      }
      int overflow = 0;
      long long limit = PyLong_AsLongLongAndOverflow (v[10], &overflow);
      if (limit == -1 && PyErr_Occurred ())
         return -1;
      /* Out of range either way: the core says so with its own message. */
      a->limit = overflow > 0 ? INT64_MAX : overflow < 0 ? INT64_MIN : (int64_t)limit;
   }
   a->key = args[0];
   leaselock_acquire_opts_init (&a->o);
   a->o.ttl_ms = PyLong_AsLongLong (v[0]);
   a->o.timeout_ms = PyLong_AsLongLong (v[1]);
   a->o.min_hold_ms = v[2] ? PyLong_AsLongLong (v[2]) : 0;
   int ar = PyErr_Occurred () ? -1 : PyObject_IsTrue (v[3]);
   if (ar < 0)
      return -1;
   a->o.auto_renew = ar;
   int fair = PyObject_IsTrue (v[7]);
   if (fair < 0)
      return -1;
   a->o.fair = fair;
   int busy_raises = PyObject_IsTrue (v[8]);
   if (busy_raises < 0)
      return -1;
   a->busy_raises = busy_raises;
   a->on_lost = v[4];
   a->cancel = v[5];
   a->on_renew_failed = v[6];
   if (a->on_lost != Py_None && !PyCallable_Check (a->on_lost)) {
      pyll_raise_type ("on_lost must be callable or None, not %.100s",
                       Py_TYPE (a->on_lost)->tp_name);
      return -1;
   }
   if (a->on_renew_failed != Py_None && !PyCallable_Check (a->on_renew_failed)) {
      pyll_raise_type ("on_renew_failed must be callable or None, not %.100s",
                       Py_TYPE (a->on_renew_failed)->tp_name);
      return -1;
   }
   return 0;
}

/* The failure of an acquire as Python sees it: None for BUSY on one try,
 * the exception of should_stop, or the core's error. */
static PyObject *acquire_failed (pyll_state_t *st, const pyll_acquire_args_t *a, stop_ctx_t *stop,
                                 const leaselock_error_t *err)
{
   if (stop->why == STOP_ERROR) {
      PyErr_Restore (stop->exc_type, stop->exc_value, stop->exc_tb);
      return NULL;
   }
   Py_XDECREF (stop->exc_type);
   Py_XDECREF (stop->exc_value);
   Py_XDECREF (stop->exc_tb);
   if (err->code == LEASELOCK_BUSY && a->o.timeout_ms == 0 && !a->busy_raises)
      Py_RETURN_NONE;
   return pyll_raise_error (st, err);
}

/* What an acquire asks the core for: a plain lease, or a mode's. */
typedef enum
{
   ACQ_LOCK,
   ACQ_SEMAPHORE,
   ACQ_SHARED,
   ACQ_EXCLUSIVE
} acquire_kind_t;

/* The mode argument of _acquire_mode. */
static int mode_arg (PyObject *mode, acquire_kind_t *kind)
{
   static const struct
   {
      const char *name;
      acquire_kind_t kind;
   } modes[] = { { "semaphore", ACQ_SEMAPHORE },
                 { "shared", ACQ_SHARED },
                 { "exclusive", ACQ_EXCLUSIVE } };
   if (PyUnicode_Check (mode))
      for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++)
         if (PyUnicode_CompareWithASCIIString (mode, modes[i].name) == 0) {
            *kind = modes[i].kind;
            return 0;
         }
   const char *m = PyUnicode_Check (mode) ? PyUnicode_AsUTF8 (mode) : NULL;
   if (m)
      pyll_raise_invalid ("mode must be 'semaphore', 'shared' or 'exclusive', not '%.100s'", m);
   else if (!PyErr_Occurred ())
      pyll_raise_type ("mode must be a str, not %.100s", Py_TYPE (mode)->tp_name);
   return -1;
}

/* The body of _acquire and _acquire_mode: the core's blocking call runs
 * without the GIL, asking should_stop (Ctrl-C, the cancel flag) between
 * its waits. A mode's lease is named by its record (the core's
 * leaselock_lease_key: key/.slot/<i>, key/.rw/w, key/.rw/r/<token>),
 * whose fence it carries. */
static PyObject *acquire_run (ClientObject *self, pyll_acquire_args_t *ap, acquire_kind_t kind)
{
   pyll_acquire_args_t a = *ap;
   const char *key;
   Py_ssize_t key_len;
   if (pyll_key_arg (a.key, "key", false, &key, &key_len) < 0 || pyll_client_check (self) < 0)
      return NULL;
   LeaseObject *lease = pyll_lease_new (self, a.key, a.on_lost, a.on_renew_failed);
   if (!lease)
      return NULL;
   pyll_lease_hooks (lease, &a.o);
   pyll_log_refresh (self);
   stop_ctx_t stop = { NULL, a.cancel == Py_None ? NULL : a.cancel, NULL, NULL, NULL, STOP_NONE };
   /* try_acquire's None shows nobody the holder: no read for it */
   a.o.no_holder = a.o.timeout_ms == 0 && !a.busy_raises;
   if (a.o.timeout_ms != 0) {
      a.o.should_stop = stop_trampoline;
      a.o.should_stop_data = &stop;
   }
   leaselock_error_t err;
   leaselock_lease_t *core = NULL;
   bool ok = false;
   stop.ts = PyEval_SaveThread ();
   switch (kind) {
      case ACQ_LOCK:
         ok = leaselock_acquire (self->c, key, (size_t)key_len, &a.o, &core, &err);
         break;
      case ACQ_SEMAPHORE:
         ok =
           leaselock_semaphore_acquire (self->c, key, (size_t)key_len, a.limit, &a.o, &core, &err);
         break;
      case ACQ_SHARED:
      case ACQ_EXCLUSIVE:
         ok = leaselock_rwlock_acquire (self->c, key, (size_t)key_len,
                                        kind == ACQ_SHARED ? LEASELOCK_SHARED : LEASELOCK_EXCLUSIVE,
                                        &a.o, &core, &err);
         break;
   }
   PyEval_RestoreThread (stop.ts);
   if (!ok) {
      Py_DECREF (lease);
      return acquire_failed (pyll_state (self->module), &a, &stop, &err);
   }
   lease->lease = core; /* from here its dealloc releases it */
   if (kind != ACQ_LOCK) {
      PyObject *rk = PyUnicode_DecodeUTF8 (leaselock_lease_key (core),
                                           (Py_ssize_t)leaselock_lease_key_len (core), NULL);
      if (!rk) {
         Py_DECREF (lease);
         return NULL;
      }
      Py_SETREF (lease->key, rk);
   }
   return (PyObject *)lease;
}

static PyObject *acquire_impl (ClientObject *self, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames, bool modes)
{
   pyll_acquire_args_t a;
   acquire_kind_t kind = ACQ_LOCK;
   if (pyll_acquire_parse (args, nargs, kwnames, modes ? "_acquire_mode" : "_acquire", modes, &a) <
         0 ||
       (modes && mode_arg (a.mode, &kind) < 0))
      return NULL;
   return acquire_run (self, &a, kind);
}

/* A lock's acquire from arguments already in *a (with.c: Lock's with-block). */
PyObject *pyll_acquire_lock (ClientObject *self, pyll_acquire_args_t *a)
{
   return acquire_run (self, a, ACQ_LOCK);
}

/* _acquire(...) -> Lease | None (see pyll_acquire_parse). None when one try
 * (timeout_ms == 0) found the key busy. The public layer checks the
 * arguments first (leaselock.Lock); the core checks them again. */
PyObject *pyll_client_acquire (ClientObject *self, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames)
{
   return acquire_impl (self, args, nargs, kwnames, false);
}

/* _acquire_mode(key, *, mode, limit=0, and _acquire's keywords) -> Lease |
 * None: a semaphore slot (mode "semaphore", limit 1 .. 1000) or a side of
 * a read-write lock ("shared", "exclusive"), by the core's
 * leaselock_semaphore_acquire and leaselock_rwlock_acquire. None when one
 * try found no room. The package checks the arguments first (its
 * Semaphore and RWLock); the core checks them again. */
PyObject *pyll_client_acquire_mode (ClientObject *self, PyObject *const *args, Py_ssize_t nargs,
                                    PyObject *kwnames)
{
   return acquire_impl (self, args, nargs, kwnames, true);
}
