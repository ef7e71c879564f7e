/*
 * _leaselock.c - the CPython extension over the leaselock C core.
 *
 * Imported as leaselock._leaselock; the public package (python/leaselock)
 * is pure Python over it. No lease logic lives here: every decision is the
 * core's (leaselock.h). This file holds:
 *
 *  - the module state (types and exception classes), multi-phase init;
 *  - Client: one leaselock_client_t; Lease: one leaselock_lease_t;
 *  - argument checks (key, seconds -> milliseconds) whose messages name the
 *    argument, and the map from a core error code to an exception class,
 *    which carries the code name as `.code`.
 *
 * One file rather than one per type: the two types share the "calls in
 * flight" bookkeeping below and are small.
 *
 * Threads. The GIL is released around every core call that does I/O or may
 * block (client new/destroy, acquire, renew, release, lease destroy,
 * inspect, list, force_release). The lease getters (state, remaining time,
 * ttl) keep it: they take a core mutex that is never held across I/O or a
 * callback, and releasing the GIL would cost more than they do.
 *
 * A client counts the core calls in flight with the GIL released (`ops`).
 * close() marks it closing, releases what its Lease objects still hold,
 * and the last call in flight destroys the core client, so a close racing
 * other threads never frees what they use. Blocking acquires notice the
 * close through should_stop and return.
 *
 * on_lost runs on the core's renewal thread: it takes the GIL with
 * PyGILState_Ensure unless the interpreter is finalizing, and never lets
 * the renewal thread drop the last reference to a Lease (that goes through
 * Py_AddPendingCall), so the thread never joins itself.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include "leaselock.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

/* Runs stmt with the GIL released. */
#define LL_NOGIL(stmt)                                                                             \
   do {                                                                                            \
      PyThreadState *_ts = PyEval_SaveThread ();                                                   \
      stmt;                                                                                        \
      PyEval_RestoreThread (_ts);                                                                  \
   } while (0)

#define TTL_MAX_S ((double)LEASELOCK_TTL_MAX_MS / 1000.0)

typedef struct
{
   PyTypeObject *client_type;
   PyTypeObject *lease_type;
   PyObject *LockError;
   PyObject *LockTimeout;
   PyObject *NotHeld;
   PyObject *LockLost;
   PyObject *BackendError;
} ll_state;

/* Set by _shutdown() (an atexit hook of the package): from then on the
 * renewal thread calls no Python code. Process-wide on purpose: it is
 * about the interpreter's exit, not one module object. */
static atomic_int finalizing;
/* True on the renewal thread while it runs an on_lost callback. */
static _Thread_local bool in_lost_callback;

/* getpid() without a system call per lease operation: refreshed in the
 * child of every fork() by a pthread_atfork handler. */
static pid_t current_pid_value;
static pthread_once_t pid_once = PTHREAD_ONCE_INIT;

static void pid_refresh (void)
{
   current_pid_value = getpid ();
}

static void pid_init (void)
{
   pid_refresh ();
   pthread_atfork (NULL, NULL, pid_refresh);
}

static inline pid_t current_pid (void)
{
   return current_pid_value;
}

static inline ll_state *get_state (PyObject *module)
{
   return (ll_state *)PyModule_GetState (module);
}

typedef struct lease_obj LeaseObject;

typedef struct
{
   PyObject_HEAD PyObject *module; /* strong: keeps the state alive */
   leaselock_client_t *c;          /* NULL before __init__ and once closed */
   int ops;                        /* core calls in flight without the GIL */
   bool closing;                   /* close() was called */
   bool inited;
   PyObject *uri;       /* str, password replaced by the core */
   PyObject *backend;   /* str */
   PyObject *label;     /* str or None */
   LeaseObject *leases; /* live Lease objects of this client (borrowed) */
   PyObject *weakreflist;
} ClientObject;

struct lease_obj
{
   PyObject_HEAD PyObject *module;
   ClientObject *client;     /* strong */
   leaselock_lease_t *lease; /* NULL until the acquire succeeded */
   PyObject *key;            /* str */
   PyObject *on_lost;        /* callable or NULL */
   pid_t pid;                /* process that acquired it */
   bool dead;                /* dealloc started: no callback may use it */
   LeaseObject *prev, *next; /* in client->leases */
   PyObject *weakreflist;
};

/* ---- errors ------------------------------------------------------------ */

static PyObject *exc_class (ll_state *st, leaselock_code_t code)
{
   switch (code) {
      case LEASELOCK_BUSY:
      case LEASELOCK_TIMEOUT:
         return st->LockTimeout;
      case LEASELOCK_NOT_HELD:
         return st->NotHeld;
      case LEASELOCK_LOST:
         return st->LockLost;
      case LEASELOCK_INVALID:
         return PyExc_ValueError;
      case LEASELOCK_BACKEND:
      case LEASELOCK_UNSUPPORTED:
         return st->BackendError;
      case LEASELOCK_NOMEM:
         return PyExc_MemoryError;
      default:
         return st->LockError;
   }
}

/* Raises cls(message) with .code = the core's name for code. Returns NULL. */
static PyObject *raise_code (PyObject *cls, leaselock_code_t code, const char *message)
{
   /* The core truncates messages to a fixed size, possibly inside a UTF-8
    * sequence: decode with replacement. */
   PyObject *text = PyUnicode_DecodeUTF8 (message, (Py_ssize_t)strlen (message), "replace");
   if (!text)
      return NULL;
   PyObject *exc = PyObject_CallOneArg (cls, text);
   Py_DECREF (text);
   if (!exc)
      return NULL;
   PyObject *name = PyUnicode_FromString (leaselock_code_name (code));
   if (!name || PyObject_SetAttrString (exc, "code", name) < 0) {
      Py_XDECREF (name);
      Py_DECREF (exc);
      return NULL;
   }
   Py_DECREF (name);
   PyErr_SetObject ((PyObject *)Py_TYPE (exc), exc);
   Py_DECREF (exc);
   return NULL;
}

static PyObject *raise_error (ll_state *st, const leaselock_error_t *err)
{
   return raise_code (exc_class (st, err->code), err->code, err->message);
}

/* cls(message) with code INVALID like the core's: the errors of bad
 * arguments (ValueError, TypeError) and of use after close. */
static PyObject *raise_invalid_as (PyObject *cls, const char *fmt, va_list ap)
{
   char buf[LEASELOCK_ERROR_MAX];
   vsnprintf (buf, sizeof buf, fmt, ap);
   return raise_code (cls, LEASELOCK_INVALID, buf);
}

/* ValueError naming the argument, with code INVALID. */
__attribute__ ((format (printf, 1, 2))) static PyObject *raise_invalid (const char *fmt, ...)
{
   va_list ap;
   va_start (ap, fmt);
   raise_invalid_as (PyExc_ValueError, fmt, ap);
   va_end (ap);
   return NULL;
}

/* TypeError naming the argument, with code INVALID. */
__attribute__ ((format (printf, 1, 2))) static PyObject *raise_type (const char *fmt, ...)
{
   va_list ap;
   va_start (ap, fmt);
   raise_invalid_as (PyExc_TypeError, fmt, ap);
   va_end (ap);
   return NULL;
}

/* ---- argument checks ----------------------------------------------------- */

/* The UTF-8 of str s, or NULL with ValueError (code INVALID) naming the
 * argument when it holds a lone surrogate. */
static const char *utf8_arg (PyObject *s, const char *name, Py_ssize_t *n)
{
   const char *u = PyUnicode_AsUTF8AndSize (s, n);
   if (!u && PyErr_ExceptionMatches (PyExc_UnicodeEncodeError)) {
      PyErr_Clear ();
      raise_invalid ("%s must be valid UTF-8 text (it holds a lone surrogate)", name);
   }
   return u;
}

/* A key or prefix: str, valid UTF-8 (no lone surrogate), 1..255 bytes (0
 * allowed for a prefix), no NUL. *s points into the str's UTF-8 cache. */
static int key_arg (PyObject *key,
                    const char *name,
                    bool allow_empty,
                    const char **s,
                    Py_ssize_t *n)
{
   if (!PyUnicode_Check (key)) {
      raise_type ("%s must be a str, not %.100s", name, Py_TYPE (key)->tp_name);
      return -1;
   }
   if (!(*s = utf8_arg (key, name, n)))
      return -1;
   if (*n == 0 && !allow_empty) {
      raise_invalid ("%s must not be empty", name);
      return -1;
   }
   if (*n > LEASELOCK_KEY_MAX) {
      raise_invalid ("%s is %zd bytes long in UTF-8 (at most %d)", name, *n, LEASELOCK_KEY_MAX);
      return -1;
   }
   if (memchr (*s, '\0', (size_t)*n)) {
      raise_invalid ("%s must not contain a NUL character", name);
      return -1;
   }
   return 0;
}

typedef enum
{
   SECS_TTL,
   SECS_DURATION,
   SECS_TIMEOUT
} secs_kind_t;

/* Seconds (int or float) to milliseconds, range-checked for kind:
 * TTL 0.001 .. 30 days (the contract's 1 ms to 30 days: shorter is
 * refused); DURATION 0 .. 30 days; TIMEOUT None/inf (forever, -1) or 0 ..
 * 30 days, 0 meaning one try. A DURATION or TIMEOUT above 0 but below
 * 1 ms rounds up to 1 ms. */
static int seconds_arg (PyObject *v, const char *name, secs_kind_t kind, int64_t *ms)
{
   if (kind == SECS_TIMEOUT && v == Py_None) {
      *ms = -1;
      return 0;
   }
   if (PyBool_Check (v) || !(PyFloat_Check (v) || PyLong_Check (v))) {
      raise_type ("%s must be a number of seconds (int or float)%s, not %.100s", name,
                  kind == SECS_TIMEOUT ? " or None" : "", Py_TYPE (v)->tp_name);
      return -1;
   }
   double d = PyFloat_AsDouble (v);
   if (d == -1.0 && PyErr_Occurred ()) {
      if (!PyErr_ExceptionMatches (PyExc_OverflowError))
         return -1;
      PyErr_Clear ();
      /* An int too large for a double: only its sign matters. */
      PyObject *zero = PyLong_FromLong (0);
      int negative = zero ? PyObject_RichCompareBool (v, zero, Py_LT) : -1;
      Py_XDECREF (zero);
      if (negative < 0)
         return -1;
      d = negative ? -INFINITY : INFINITY;
   }
   if (isnan (d)) {
      raise_invalid ("%s must be a number of seconds, not NaN", name);
      return -1;
   }
   if (kind == SECS_TIMEOUT && isinf (d) && d > 0) {
      *ms = -1;
      return 0;
   }
   if (d < 0) {
      raise_invalid ("%s must not be negative (got %g s)", name, d);
      return -1;
   }
   if (kind == SECS_TTL && d == 0) {
      raise_invalid ("%s must be greater than 0 (got 0 s)", name);
      return -1;
   }
   if (kind == SECS_TTL && d < 0.001) {
      raise_invalid ("%s must be at least 0.001 s (1 ms), got %g s", name, d);
      return -1;
   }
   if (!(d <= TTL_MAX_S)) {
      raise_invalid ("%s must be at most 30 days (2592000 s), got %g s", name, d);
      return -1;
   }
   int64_t v_ms = (int64_t)llround (d * 1000.0);
   if (v_ms == 0 && d > 0)
      v_ms = 1;
   *ms = v_ms;
   return 0;
}

/* ---- client: calls in flight and close --------------------------------- */

static PyObject *raise_closed (ClientObject *self)
{
   if (!self->inited)
      return raise_invalid ("the client is not initialised (call Client(uri) or connect())");
   return raise_invalid ("I/O operation on a closed client");
}

/* Starts a core call on the client (GIL held). */
static int client_begin (ClientObject *self)
{
   if (!self->c || self->closing) {
      raise_closed (self);
      return -1;
   }
   self->ops++;
   return 0;
}

static int finish_pending (void *arg);

/* Destroys the core client (GIL held; released around the destroy). */
static void client_finish (ClientObject *self)
{
   if (in_lost_callback) {
      /* The destroy joins the renewal thread: not from that thread. */
      Py_INCREF (self);
      if (Py_AddPendingCall (finish_pending, self) == 0)
         return;
      Py_DECREF (self); /* queue full: the client's dealloc destroys it */
      return;
   }
   leaselock_client_t *c = self->c;
   self->c = NULL;
   if (!c)
      return;
   LL_NOGIL (leaselock_client_destroy (c));
}

static int finish_pending (void *arg)
{
   ClientObject *self = arg;
   if (self->ops == 0)
      client_finish (self);
   Py_DECREF (self);
   return 0;
}

/* Ends a core call started by client_begin. */
static void client_end (ClientObject *self)
{
   if (--self->ops == 0 && self->closing && self->c)
      client_finish (self);
}

/* ---- lease object basics ----------------------------------------------- */

static void lease_link (ClientObject *cl, LeaseObject *l)
{
   l->prev = NULL;
   l->next = cl->leases;
   if (cl->leases)
      cl->leases->prev = l;
   cl->leases = l;
}

static void lease_unlink (LeaseObject *l)
{
   ClientObject *cl = l->client;
   if (!cl)
      return;
   if (l->prev)
      l->prev->next = l->next;
   else if (cl->leases == l)
      cl->leases = l->next;
   if (l->next)
      l->next->prev = l->prev;
   l->prev = l->next = NULL;
}

static bool lease_foreign (LeaseObject *self)
{
   return self->pid != current_pid ();
}

/* ---- the core's callbacks --------------------------------------------- */

/* Py_IsFinalizing() is public from 3.13, which removed _Py_IsFinalizing(). */
#if PY_VERSION_HEX >= 0x030D0000
#define ll_py_finalizing() Py_IsFinalizing ()
#else
#define ll_py_finalizing() _Py_IsFinalizing ()
#endif

static int decref_pending (void *arg)
{
   Py_DECREF ((PyObject *)arg);
   return 0;
}

static void lost_trampoline (leaselock_lease_t *lease, void *data)
{
   if (atomic_load (&finalizing) || ll_py_finalizing ())
      return;
   PyGILState_STATE g = PyGILState_Ensure ();
   LeaseObject *self = data;
   if (!self->dead && self->on_lost) {
      if (!self->lease)
         self->lease = lease; /* lost before the acquiring thread got back */
      PyObject *cb = self->on_lost;
      Py_INCREF (cb);
      Py_INCREF (self);
      in_lost_callback = true;
      PyObject *r = PyObject_CallOneArg (cb, (PyObject *)self);
      if (!r)
         PyErr_WriteUnraisable (cb);
      Py_XDECREF (r);
      Py_DECREF (cb);
      in_lost_callback = false;
      /* Never drop the last reference here: the Lease's dealloc would
       * destroy the core lease (and maybe the client) from its own
       * renewal thread. */
      if (Py_REFCNT (self) > 1 || Py_AddPendingCall (decref_pending, self) != 0)
         Py_DECREF (self);
   }
   PyGILState_Release (g);
}

typedef struct
{
   PyThreadState *ts;
   ClientObject *client;
   PyObject *cancel; /* object with is_set(), or NULL */
   PyObject *exc_type, *exc_value, *exc_tb;
   enum
   {
      STOP_NONE,
      STOP_CLOSED,
      STOP_ERROR,
      STOP_CANCELLED
   } why;
} stop_ctx_t;

/* should_stop for a blocking acquire: runs on the waiting thread, takes
 * the GIL back briefly to run signal handlers (Ctrl-C), and looks at the
 * client's close and the caller's cancel flag. */
static bool stop_trampoline (void *data)
{
   stop_ctx_t *x = data;
   PyEval_RestoreThread (x->ts);
   if (x->client->closing) {
      x->why = STOP_CLOSED;
   } else if (PyErr_CheckSignals () < 0) {
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
   return (PyObject *)self;
}

static PyModuleDef module_def;

static int Client_init (ClientObject *self, PyObject *args, PyObject *kwds)
{
   static char *kwlist[] = { "uri", "label", NULL };
   PyObject *uri_o = Py_None, *label_o = Py_None;
   if (!PyArg_ParseTupleAndKeywords (args, kwds, "|O$O:Client", kwlist, &uri_o, &label_o))
      return -1;
   if (self->inited) {
      raise_type ("Client.__init__ may be called only once");
      return -1;
   }
   PyObject *module = PyType_GetModuleByDef (Py_TYPE (self), &module_def);
   if (!module)
      return -1;
   const char *uri = NULL, *label = NULL;
   Py_ssize_t n;
   if (uri_o != Py_None) {
      if (!PyUnicode_Check (uri_o)) {
         raise_type ("uri must be a str or None, not %.100s", Py_TYPE (uri_o)->tp_name);
         return -1;
      }
      if (!(uri = utf8_arg (uri_o, "uri", &n)))
         return -1;
      if (n == 0) {
         raise_invalid ("uri must not be empty (pass None for $LEASELOCK_URI or the default)");
         return -1;
      }
      if (memchr (uri, '\0', (size_t)n)) {
         raise_invalid ("uri must not contain a NUL character");
         return -1;
      }
   }
   if (label_o != Py_None) {
      if (!PyUnicode_Check (label_o)) {
         raise_type ("label must be a str or None, not %.100s", Py_TYPE (label_o)->tp_name);
         return -1;
      }
      if (!(label = utf8_arg (label_o, "label", &n)))
         return -1;
      if (n > 255) {
         raise_invalid ("label is %zd bytes long in UTF-8 (at most 255)", n);
         return -1;
      }
      if (memchr (label, '\0', (size_t)n)) {
         raise_invalid ("label must not contain a NUL character");
         return -1;
      }
   }
   leaselock_error_t err;
   leaselock_client_t *c;
   LL_NOGIL (c = leaselock_client_new (uri, label, &err));
   if (!c) {
      raise_error (get_state (module), &err);
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
   self->inited = true;
   return 0;
}

/* Releases what the client's Lease objects still hold (GIL held). */
static void client_release_leases (ClientObject *self)
{
   PyObject *held = PyList_New (0);
   if (!held) {
      PyErr_Clear ();
      return;
   }
   for (LeaseObject *l = self->leases; l; l = l->next)
      if (l->lease && !l->dead && !lease_foreign (l) &&
          leaselock_lease_state (l->lease) != LEASELOCK_STATE_RELEASED)
         if (PyList_Append (held, (PyObject *)l) < 0)
            PyErr_Clear ();
   for (Py_ssize_t i = 0; i < PyList_GET_SIZE (held); i++) {
      LeaseObject *l = (LeaseObject *)PyList_GET_ITEM (held, i);
      leaselock_lease_t *core = l->lease;
      self->ops++;
      LL_NOGIL (leaselock_lease_release (core, NULL));
      self->ops--;
   }
   Py_DECREF (held);
}

static PyObject *Client_close (ClientObject *self, PyObject *unused)
{
   (void)unused;
   if (!self->c || self->closing)
      Py_RETURN_NONE;
   self->closing = true;
   client_release_leases (self);
   if (self->ops == 0)
      client_finish (self);
   Py_RETURN_NONE;
}

static void Client_dealloc (ClientObject *self)
{
   PyTypeObject *tp = Py_TYPE (self);
   PyObject_GC_UnTrack (self);
   if (self->weakreflist)
      PyObject_ClearWeakRefs ((PyObject *)self);
   /* No Lease object is alive (each holds a reference), and no call is in
    * flight (it would hold one too). */
   if (self->c) {
      leaselock_client_t *c = self->c;
      self->c = NULL;
      LL_NOGIL (leaselock_client_destroy (c));
   }
   Py_CLEAR (self->uri);
   Py_CLEAR (self->backend);
   Py_CLEAR (self->label);
   Py_CLEAR (self->module);
   tp->tp_free ((PyObject *)self);
   Py_DECREF (tp);
}

static PyObject *Client_enter (ClientObject *self, PyObject *unused)
{
   (void)unused;
   if (!self->c || self->closing)
      return raise_closed (self);
   return Py_NewRef (self);
}

static PyObject *Client_exit (ClientObject *self, PyObject *args)
{
   (void)args;
   return Client_close (self, NULL);
}

static LeaseObject *lease_alloc (ClientObject *cl, PyObject *key, PyObject *on_lost)
{
   ll_state *st = get_state (cl->module);
   LeaseObject *l = PyObject_GC_New (LeaseObject, st->lease_type);
   if (!l)
      return NULL;
   l->module = Py_NewRef (cl->module);
   l->client = (ClientObject *)Py_NewRef (cl);
   l->lease = NULL;
   l->key = Py_NewRef (key);
   l->on_lost = on_lost == Py_None ? NULL : Py_NewRef (on_lost);
   l->pid = current_pid ();
   l->dead = false;
   l->weakreflist = NULL;
   lease_link (cl, l);
   PyObject_GC_Track (l);
   return l;
}

/* _acquire(key, ttl_ms, timeout_ms, min_hold_ms, auto_renew, on_lost,
 *          cancel) -> Lease | None
 * None when one try (timeout_ms == 0) found the key busy. The public
 * layer checks the arguments first (leaselock.Lock); the core checks them
 * again. cancel: None or an object with is_set() (threading.Event). */
static PyObject *Client_acquire (ClientObject *self, PyObject *const *args, Py_ssize_t nargs)
{
   if (nargs != 7) {
      raise_type ("_acquire takes 7 positional arguments");
      return NULL;
   }
   const char *key;
   Py_ssize_t key_len;
   if (key_arg (args[0], "key", false, &key, &key_len) < 0)
      return NULL;
   leaselock_acquire_opts_t o;
   leaselock_acquire_opts_init (&o);
   o.ttl_ms = PyLong_AsLongLong (args[1]);
   o.timeout_ms = PyLong_AsLongLong (args[2]);
   o.min_hold_ms = PyLong_AsLongLong (args[3]);
   if (PyErr_Occurred ())
      return NULL;
   int ar = PyObject_IsTrue (args[4]);
   if (ar < 0)
      return NULL;
   o.auto_renew = ar;
   PyObject *on_lost = args[5];
   if (on_lost != Py_None && !PyCallable_Check (on_lost)) {
      raise_type ("on_lost must be callable or None, not %.100s", Py_TYPE (on_lost)->tp_name);
      return NULL;
   }
   if (client_begin (self) < 0)
      return NULL;
   ll_state *st = get_state (self->module);
   LeaseObject *lease = lease_alloc (self, args[0], on_lost);
   if (!lease) {
      client_end (self);
      return NULL;
   }
   if (lease->on_lost) {
      o.on_lost = lost_trampoline;
      o.on_lost_data = lease;
   }
   stop_ctx_t stop = {
      NULL, self, args[6] == Py_None ? NULL : args[6], NULL, NULL, NULL, STOP_NONE
   };
   if (o.timeout_ms != 0) {
      o.should_stop = stop_trampoline;
      o.should_stop_data = &stop;
   }
   leaselock_error_t err;
   leaselock_lease_t *core = NULL;
   stop.ts = PyEval_SaveThread ();
   bool ok = leaselock_acquire (self->c, key, (size_t)key_len, &o, &core, &err);
   PyEval_RestoreThread (stop.ts);

   if (ok) {
      lease->lease = core;
      if (self->closing) {
         /* close() ran meanwhile and did not see this lease. */
         Py_DECREF (lease);
         client_end (self);
         return raise_closed (self);
      }
      client_end (self);
      return (PyObject *)lease;
   }
   Py_DECREF (lease);
   client_end (self);
   if (stop.why == STOP_ERROR) {
      PyErr_Restore (stop.exc_type, stop.exc_value, stop.exc_tb);
      return NULL;
   }
   Py_XDECREF (stop.exc_type);
   Py_XDECREF (stop.exc_value);
   Py_XDECREF (stop.exc_tb);
   if (err.code == LEASELOCK_BUSY && o.timeout_ms == 0)
      Py_RETURN_NONE;
   if (err.code == LEASELOCK_INTERRUPTED && stop.why == STOP_CLOSED)
      return raise_invalid ("the client was closed while waiting for the lock");
   return raise_error (st, &err);
}

/* A record as a tuple: (key, owner|None, fence, expires_in_ms, host, pid,
 * label|None). */
static PyObject *record_tuple (const leaselock_record_t *r)
{
   PyObject *key = PyUnicode_DecodeUTF8 (r->key, (Py_ssize_t)r->key_len, "replace");
   PyObject *owner = r->owner[0] ? PyUnicode_FromString (r->owner) : Py_NewRef (Py_None);
   PyObject *host = PyUnicode_DecodeUTF8 (r->host, (Py_ssize_t)strlen (r->host), "replace");
   PyObject *label = r->label[0]
                       ? PyUnicode_DecodeUTF8 (r->label, (Py_ssize_t)strlen (r->label), "replace")
                       : Py_NewRef (Py_None);
   PyObject *t = NULL;
   if (key && owner && host && label)
      t = Py_BuildValue ("(OOLLOLO)", key, owner, (long long)r->fence, (long long)r->expires_in_ms,
                         host, (long long)r->pid, label);
   Py_XDECREF (key);
   Py_XDECREF (owner);
   Py_XDECREF (host);
   Py_XDECREF (label);
   return t;
}

static PyObject *Client_inspect (ClientObject *self, PyObject *key_o)
{
   const char *key;
   Py_ssize_t n;
   if (key_arg (key_o, "key", false, &key, &n) < 0 || client_begin (self) < 0)
      return NULL;
   leaselock_record_t *rec = PyMem_RawMalloc (sizeof *rec);
   if (!rec) {
      client_end (self);
      return PyErr_NoMemory ();
   }
   leaselock_error_t err;
   bool found = false, ok;
   LL_NOGIL (ok = leaselock_inspect (self->c, key, (size_t)n, rec, &found, &err));
   client_end (self);
   PyObject *res;
   if (!ok)
      res = raise_error (get_state (self->module), &err);
   else if (!found)
      res = Py_NewRef (Py_None);
   else
      res = record_tuple (rec);
   PyMem_RawFree (rec);
   return res;
}

typedef struct
{
   leaselock_record_t *recs;
   size_t n, cap;
   bool nomem;
} rec_vec_t;

/* Runs without the GIL: copies each record. */
static bool collect_record (const leaselock_record_t *r, void *data)
{
   rec_vec_t *v = data;
   if (v->n == v->cap) {
      size_t cap = v->cap ? v->cap * 2 : 16;
      leaselock_record_t *p = PyMem_RawRealloc (v->recs, cap * sizeof *p);
      if (!p) {
         v->nomem = true;
         return false;
      }
      v->recs = p;
      v->cap = cap;
   }
   v->recs[v->n++] = *r;
   return true;
}

static PyObject *Client_list (ClientObject *self, PyObject *prefix_o)
{
   const char *prefix;
   Py_ssize_t n;
   if (key_arg (prefix_o, "prefix", true, &prefix, &n) < 0 || client_begin (self) < 0)
      return NULL;
   rec_vec_t v = { NULL, 0, 0, false };
   leaselock_error_t err;
   bool ok;
   LL_NOGIL (ok = leaselock_list (self->c, prefix, (size_t)n, collect_record, &v, &err));
   client_end (self);
   PyObject *res = NULL;
   if (v.nomem)
      PyErr_NoMemory ();
   else if (!ok)
      raise_error (get_state (self->module), &err);
   else if ((res = PyList_New ((Py_ssize_t)v.n)))
      for (size_t i = 0; i < v.n; i++) {
         PyObject *t = record_tuple (&v.recs[i]);
         if (!t) {
            Py_CLEAR (res);
            break;
         }
         PyList_SET_ITEM (res, (Py_ssize_t)i, t);
      }
   PyMem_RawFree (v.recs);
   return res;
}

static PyObject *Client_force_release (ClientObject *self, PyObject *key_o)
{
   const char *key;
   Py_ssize_t n;
   if (key_arg (key_o, "key", false, &key, &n) < 0 || client_begin (self) < 0)
      return NULL;
   leaselock_error_t err;
   bool took = false, ok;
   LL_NOGIL (ok = leaselock_force_release (self->c, key, (size_t)n, &took, &err));
   client_end (self);
   if (!ok)
      return raise_error (get_state (self->module), &err);
   return PyBool_FromLong (took);
}

static PyObject *Client_repr (ClientObject *self)
{
   const char *state = !self->inited               ? "uninitialised"
                       : self->c && !self->closing ? "open"
                                                   : "closed";
   if (!self->inited)
      return PyUnicode_FromFormat ("<%s %s>", Py_TYPE (self)->tp_name, state);
   return PyUnicode_FromFormat ("<%s %U (%U) %s>", Py_TYPE (self)->tp_name, self->uri,
                                self->backend, state);
}

static PyObject *Client_get_closed (ClientObject *self, void *c)
{
   (void)c;
   return PyBool_FromLong (!self->c || self->closing);
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
   { "_acquire", (PyCFunction)(void (*) (void))Client_acquire, METH_FASTCALL, NULL },
   { "_inspect", (PyCFunction)Client_inspect, METH_O, NULL },
   { "_list", (PyCFunction)Client_list, METH_O, NULL },
   { "force_release", (PyCFunction)Client_force_release, METH_O,
     "force_release($self, key, /)\n--\n\nClears the owner of key whoever holds it and makes it "
     "free now (the fence survives). Returns True when a live lease was taken away." },
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

static PyType_Slot Client_slots[] = {
   { Py_tp_doc, "Client(uri=None, *, label=None)\n--\n\n"
                "A connection to one lock database (the C core's client)." },
   { Py_tp_new, Client_new },
   { Py_tp_init, Client_init },
   { Py_tp_dealloc, Client_dealloc },
   { Py_tp_traverse, Client_traverse },
   { Py_tp_clear, Client_clear },
   { Py_tp_repr, Client_repr },
   { Py_tp_methods, Client_methods },
   { Py_tp_getset, Client_getset },
   { Py_tp_members, Client_members },
   { 0, NULL },
};

static PyType_Spec Client_spec = {
   .name = "leaselock._leaselock.Client",
   .basicsize = sizeof (ClientObject),
   .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
   .slots = Client_slots,
};

/* ---- Lease ----------------------------------------------------------------- */

static int Lease_traverse (LeaseObject *self, visitproc visit, void *arg)
{
   Py_VISIT (Py_TYPE (self));
   Py_VISIT (self->on_lost);
   Py_VISIT (self->client);
   return 0;
}

/* Breaks cycles through the callback only: the client must outlive the
 * lease (dealloc uses it). */
static int Lease_clear (LeaseObject *self)
{
   Py_CLEAR (self->on_lost);
   return 0;
}

static void Lease_dealloc (LeaseObject *self)
{
   PyTypeObject *tp = Py_TYPE (self);
   PyObject_GC_UnTrack (self);
   self->dead = true; /* a callback waiting for the GIL now skips it */
   if (self->weakreflist)
      PyObject_ClearWeakRefs ((PyObject *)self);
   if (self->lease) {
      /* Releases it if this process still holds it (the core checks the
       * pid, so a forked child never releases its parent's lease), and
       * waits for an on_lost callback in flight. */
      leaselock_lease_t *core = self->lease;
      ClientObject *cl = self->client;
      bool counted = cl->c != NULL;
      self->lease = NULL;
      if (counted)
         cl->ops++;
      LL_NOGIL (leaselock_lease_destroy (core));
      if (counted)
         client_end (cl);
   }
   lease_unlink (self);
   Py_CLEAR (self->on_lost);
   Py_CLEAR (self->key);
   Py_CLEAR (self->client);
   Py_CLEAR (self->module);
   PyObject_GC_Del (self);
   Py_DECREF (tp);
}

/* A core call on the lease: the lease exists and its client is open. */
static int lease_begin (LeaseObject *self)
{
   if (!self->lease) {
      raise_invalid ("the lease was never acquired");
      return -1;
   }
   if (!self->client->c || self->client->closing) {
      raise_invalid ("I/O operation on a lease of a closed client");
      return -1;
   }
   self->client->ops++;
   return 0;
}

static leaselock_state_t lease_state (LeaseObject *self)
{
   if (!self->lease)
      return LEASELOCK_STATE_RELEASED;
   return leaselock_lease_state (self->lease);
}

static bool lease_held (LeaseObject *self)
{
   return self->lease && !lease_foreign (self) && self->client->c && !self->client->closing &&
          leaselock_lease_state (self->lease) == LEASELOCK_STATE_HELD;
}

static PyObject *Lease_renew (LeaseObject *self, PyObject *args, PyObject *kwds)
{
   static char *kwlist[] = { "ttl", NULL };
   PyObject *ttl_o = Py_None;
   if (!PyArg_ParseTupleAndKeywords (args, kwds, "|O:renew", kwlist, &ttl_o))
      return NULL;
   int64_t ttl_ms = 0;
   if (ttl_o != Py_None && seconds_arg (ttl_o, "ttl", SECS_TTL, &ttl_ms) < 0)
      return NULL;
   if (lease_begin (self) < 0)
      return NULL;
   leaselock_error_t err;
   bool ok;
   leaselock_lease_t *core = self->lease;
   LL_NOGIL (ok = leaselock_lease_renew (core, ttl_ms, &err));
   client_end (self->client);
   if (!ok)
      return raise_error (get_state (self->module), &err);
   Py_RETURN_NONE;
}

static PyObject *Lease_release (LeaseObject *self, PyObject *unused)
{
   (void)unused;
   if (lease_begin (self) < 0)
      return NULL;
   leaselock_error_t err;
   bool ok;
   leaselock_lease_t *core = self->lease;
   LL_NOGIL (ok = leaselock_lease_release (core, &err));
   client_end (self->client);
   if (!ok && self->client->closing)
      return raise_invalid ("I/O operation on a lease of a closed client");
   if (!ok)
      return raise_error (get_state (self->module), &err);
   Py_RETURN_NONE;
}

static PyObject *Lease_enter (LeaseObject *self, PyObject *unused)
{
   (void)unused;
   return Py_NewRef (self);
}

/* Leaving the with-block: release. A lease that was lost (renewal failed,
 * local deadline passed, or found taken at release) raises LockLost; the
 * body's exception, if any, becomes its __context__. In a forked child the
 * parent's lease is left alone, silently. */
static PyObject *Lease_exit (LeaseObject *self, PyObject *const *args, Py_ssize_t nargs)
{
   (void)args;
   (void)nargs;
   if (!self->lease || lease_foreign (self) || !self->client->c || self->client->closing)
      Py_RETURN_FALSE;
   ll_state *st = get_state (self->module);
   leaselock_state_t s = leaselock_lease_state (self->lease);
   if (s == LEASELOCK_STATE_RELEASED)
      Py_RETURN_FALSE;
   leaselock_error_t err;
   bool ok;
   leaselock_lease_t *core = self->lease;
   self->client->ops++;
   LL_NOGIL (ok = leaselock_lease_release (core, &err));
   client_end (self->client);
   if (s == LEASELOCK_STATE_LOST) {
      char msg[LEASELOCK_ERROR_MAX + 64];
      Py_ssize_t n;
      const char *k = PyUnicode_AsUTF8AndSize (self->key, &n);
      snprintf (msg, sizeof msg,
                "the lease on \"%.64s\" was lost before the block ended (taken over, or not "
                "renewed before its deadline)",
                k ? k : "?");
      return raise_code (st->LockLost, LEASELOCK_LOST, msg);
   }
   if (ok)
      Py_RETURN_FALSE;
   if (self->client->closing)
      Py_RETURN_FALSE; /* close() released it meanwhile */
   if (err.code == LEASELOCK_NOT_HELD)
      return raise_code (st->LockLost, LEASELOCK_NOT_HELD, err.message);
   return raise_error (st, &err);
}

static PyObject *Lease_get_key (LeaseObject *self, void *c)
{
   (void)c;
   return Py_NewRef (self->key);
}

static PyObject *Lease_get_owner (LeaseObject *self, void *c)
{
   (void)c;
   if (!self->lease)
      Py_RETURN_NONE;
   return PyUnicode_FromString (leaselock_lease_owner (self->lease));
}

static PyObject *Lease_get_fence (LeaseObject *self, void *c)
{
   (void)c;
   return PyLong_FromLongLong (self->lease ? leaselock_lease_fence (self->lease) : 0);
}

static PyObject *Lease_get_ttl (LeaseObject *self, void *c)
{
   (void)c;
   return PyFloat_FromDouble (self->lease ? (double)leaselock_lease_ttl_ms (self->lease) / 1000.0
                                          : 0.0);
}

static PyObject *Lease_get_held (LeaseObject *self, void *c)
{
   (void)c;
   return PyBool_FromLong (lease_held (self));
}

static PyObject *Lease_get_lost (LeaseObject *self, void *c)
{
   (void)c;
   return PyBool_FromLong (!lease_foreign (self) && lease_state (self) == LEASELOCK_STATE_LOST);
}

static PyObject *Lease_get_expires_in (LeaseObject *self, void *c)
{
   (void)c;
   if (!lease_held (self))
      return PyFloat_FromDouble (0.0);
   return PyFloat_FromDouble ((double)leaselock_lease_remaining_ms (self->lease) / 1000.0);
}

static PyObject *Lease_repr (LeaseObject *self)
{
   const char *tp = Py_TYPE (self)->tp_name;
   long long fence = self->lease ? (long long)leaselock_lease_fence (self->lease) : 0;
   if (lease_foreign (self))
      return PyUnicode_FromFormat ("<%s %R fence=%lld, held by parent process %d, not this one>",
                                   tp, self->key, fence, (int)self->pid);
   if (lease_held (self)) {
      char left[32];
      snprintf (left, sizeof left, "%.1f",
                (double)leaselock_lease_remaining_ms (self->lease) / 1000.0);
      return PyUnicode_FromFormat ("<%s %R fence=%lld held, expires in %ss>", tp, self->key, fence,
                                   left);
   }
   const char *what = lease_state (self) == LEASELOCK_STATE_LOST ? "lost" : "released";
   if (self->lease && (!self->client->c || self->client->closing) &&
       leaselock_lease_state (self->lease) == LEASELOCK_STATE_HELD)
      what = "client closed";
   return PyUnicode_FromFormat ("<%s %R fence=%lld %s>", tp, self->key, fence, what);
}

static PyMethodDef Lease_methods[] = {
   { "renew", (PyCFunction)(void (*) (void))Lease_renew, METH_VARARGS | METH_KEYWORDS,
     "renew($self, /, ttl=None)\n--\n\nExtends the lease to ttl seconds from now (database "
     "clock); None keeps its TTL. Raises NotHeld or LockLost when it is no longer ours." },
   { "release", (PyCFunction)Lease_release, METH_NOARGS,
     "release($self, /)\n--\n\nReleases the lease. Raises NotHeld when this owner no longer holds "
     "it." },
   { "__enter__", (PyCFunction)Lease_enter, METH_NOARGS, NULL },
   { "__exit__", (PyCFunction)(void (*) (void))Lease_exit, METH_FASTCALL, NULL },
   { NULL, NULL, 0, NULL },
};

static PyGetSetDef Lease_getset[] = {
   { "key", (getter)Lease_get_key, NULL, "The lock's name.", NULL },
   { "owner", (getter)Lease_get_owner, NULL, "This acquisition's owner token (32 hex).", NULL },
   { "fence", (getter)Lease_get_fence, NULL, "The fencing token: grows on every acquire.", NULL },
   { "ttl", (getter)Lease_get_ttl, NULL, "The lease duration in seconds.", NULL },
   { "held", (getter)Lease_get_held, NULL, "True while this process holds the lease.", NULL },
   { "lost", (getter)Lease_get_lost, NULL, "True once the lease was declared lost.", NULL },
   { "expires_in", (getter)Lease_get_expires_in, NULL,
     "Seconds left before the holder's local deadline (0 once passed or released).", NULL },
   { NULL, NULL, NULL, NULL, NULL },
};

static PyMemberDef Lease_members[] = {
   { "__weaklistoffset__", T_PYSSIZET, offsetof (LeaseObject, weakreflist), READONLY, NULL },
   { NULL, 0, 0, 0, NULL },
};

static PyObject *Lease_new_refused (PyTypeObject *type, PyObject *args, PyObject *kwds)
{
   (void)args;
   (void)kwds;
   return raise_type ("cannot create '%s' instances: use Lock.acquire()", type->tp_name);
}

static PyType_Slot Lease_slots[] = {
   { Py_tp_doc, "A held lease: what Lock.acquire() returns; a context manager that releases it." },
   { Py_tp_new, Lease_new_refused },
   { Py_tp_dealloc, Lease_dealloc },
   { Py_tp_traverse, Lease_traverse },
   { Py_tp_clear, Lease_clear },
   { Py_tp_repr, Lease_repr },
   { Py_tp_methods, Lease_methods },
   { Py_tp_getset, Lease_getset },
   { Py_tp_members, Lease_members },
   { 0, NULL },
};

static PyType_Spec Lease_spec = {
   .name = "leaselock.Lease",
   .basicsize = sizeof (LeaseObject),
   .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
   .slots = Lease_slots,
};

/* ---- module functions ------------------------------------------------------ */

static PyObject *mod_check_key (PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
   (void)m;
   const char *s, *name = "key";
   Py_ssize_t n;
   if (nargs < 1 || nargs > 2) {
      raise_type ("_check_key(key, name='key')");
      return NULL;
   }
   if (nargs == 2 && !(name = PyUnicode_AsUTF8 (args[1])))
      return NULL;
   if (key_arg (args[0], name, false, &s, &n) < 0)
      return NULL;
   return Py_NewRef (args[0]);
}

static PyObject *mod_seconds (PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
   (void)m;
   if (nargs != 3) {
      raise_type ("_seconds(value, name, kind)");
      return NULL;
   }
   const char *name = PyUnicode_AsUTF8 (args[1]);
   const char *kind = PyUnicode_AsUTF8 (args[2]);
   if (!name || !kind)
      return NULL;
   secs_kind_t k;
   if (!strcmp (kind, "ttl"))
      k = SECS_TTL;
   else if (!strcmp (kind, "duration"))
      k = SECS_DURATION;
   else if (!strcmp (kind, "timeout"))
      k = SECS_TIMEOUT;
   else {
      raise_invalid ("unknown kind %s", kind);
      return NULL;
   }
   int64_t ms;
   if (seconds_arg (args[0], name, k, &ms) < 0)
      return NULL;
   return PyLong_FromLongLong (ms);
}

static PyObject *mod_default_uri (PyObject *m, PyObject *unused)
{
   (void)unused;
   char buf[4096];
   leaselock_error_t err;
   if (!leaselock_default_uri (buf, sizeof buf, &err))
      return raise_error (get_state (m), &err);
   return PyUnicode_DecodeFSDefault (buf);
}

static PyObject *mod_shutdown (PyObject *m, PyObject *unused)
{
   (void)m;
   (void)unused;
   atomic_store (&finalizing, 1);
   Py_RETURN_NONE;
}

/* n acquire + release pairs through the core alone, with the options
 * `with lock:` uses, on a client of its own. Runs without the GIL. */
static bool bench_loop (const char *uri,
                        const char *key,
                        size_t key_len,
                        long long n,
                        double *seconds,
                        leaselock_error_t *err)
{
   leaselock_client_t *c = leaselock_client_new (uri, NULL, err);
   if (!c)
      return false;
   leaselock_acquire_opts_t o;
   leaselock_acquire_opts_init (&o);
   o.ttl_ms = 30000;
   o.timeout_ms = -1;
   bool ok = true;
   /* Warm the new client's connection (prepared statements, page cache)
    * outside the timing, as the binding's long-lived client is. */
   for (int i = 0; ok && i < 20; i++) {
      leaselock_lease_t *l = NULL;
      ok = leaselock_acquire (c, key, key_len, &o, &l, err) && leaselock_lease_release (l, err);
      leaselock_lease_destroy (l);
   }
   struct timespec t0, t1;
   clock_gettime (CLOCK_MONOTONIC, &t0);
   for (long long i = 0; ok && i < n; i++) {
      leaselock_lease_t *l = NULL;
      ok = leaselock_acquire (c, key, key_len, &o, &l, err) && leaselock_lease_release (l, err);
      leaselock_lease_destroy (l);
   }
   clock_gettime (CLOCK_MONOTONIC, &t1);
   leaselock_client_destroy (c);
   *seconds = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
   return ok;
}

/* _bench_core(uri, key, n) -> seconds taken by bench_loop. For
 * bench/python only. */
static PyObject *mod_bench_core (PyObject *m, PyObject *args)
{
   const char *uri, *key;
   Py_ssize_t key_len;
   long long n;
   if (!PyArg_ParseTuple (args, "ss#L:_bench_core", &uri, &key, &key_len, &n))
      return NULL;
   leaselock_error_t err;
   bool ok;
   double seconds = 0;
   LL_NOGIL (ok = bench_loop (uri, key, (size_t)key_len, n, &seconds, &err));
   if (!ok)
      return raise_error (get_state (m), &err);
   return PyFloat_FromDouble (seconds);
}

static PyMethodDef module_methods[] = {
   { "_check_key", (PyCFunction)(void (*) (void))mod_check_key, METH_FASTCALL, NULL },
   { "_seconds", (PyCFunction)(void (*) (void))mod_seconds, METH_FASTCALL, NULL },
   { "default_uri", (PyCFunction)mod_default_uri, METH_NOARGS,
     "default_uri($module, /)\n--\n\nThe embedded SQLite URI used when no URI and no "
     "$LEASELOCK_URI are given." },
   { "_shutdown", (PyCFunction)mod_shutdown, METH_NOARGS, NULL },
   { "_bench_core", (PyCFunction)mod_bench_core, METH_VARARGS, NULL },
   { NULL, NULL, 0, NULL },
};

/* ---- module: exceptions, types, multi-phase init -------------------------- */

static PyObject *new_exception (PyObject *m, const char *name, PyObject *bases, const char *doc)
{
   PyObject *dict = PyDict_New ();
   if (!dict || PyDict_SetItemString (dict, "code", Py_None) < 0) {
      Py_XDECREF (dict);
      return NULL;
   }
   char full[64];
   snprintf (full, sizeof full, "leaselock.%s", name);
   PyObject *e = PyErr_NewExceptionWithDoc (full, doc, bases, dict);
   Py_DECREF (dict);
   if (!e)
      return NULL;
   if (PyModule_AddObjectRef (m, name, e) < 0) {
      Py_DECREF (e);
      return NULL;
   }
   return e;
}

static int module_exec (PyObject *m)
{
   pthread_once (&pid_once, pid_init);
   ll_state *st = get_state (m);
   st->client_type = (PyTypeObject *)PyType_FromModuleAndSpec (m, &Client_spec, NULL);
   if (!st->client_type || PyModule_AddType (m, st->client_type) < 0)
      return -1;
   st->lease_type = (PyTypeObject *)PyType_FromModuleAndSpec (m, &Lease_spec, NULL);
   if (!st->lease_type || PyModule_AddType (m, st->lease_type) < 0)
      return -1;

   st->LockError = new_exception (m, "LockError", NULL,
                                  "Base class of leaselock's errors; .code is the core's error "
                                  "name (\"TIMEOUT\", \"NOT_HELD\", ...).");
   if (!st->LockError)
      return -1;
   PyObject *bases = PyTuple_Pack (2, st->LockError, PyExc_TimeoutError);
   if (!bases)
      return -1;
   st->LockTimeout = new_exception (m, "LockTimeout", bases,
                                    "The lock stayed busy until the timeout ran out (code "
                                    "TIMEOUT, or BUSY for a single try).");
   Py_DECREF (bases);
   if (!st->LockTimeout)
      return -1;
   st->NotHeld = new_exception (m, "NotHeld", st->LockError,
                                "This owner no longer holds the lease (released, expired and "
                                "taken, or force-released).");
   st->LockLost = new_exception (m, "LockLost", st->LockError,
                                 "The lease was lost while it was in use (renewal failed or it was "
                                 "taken).");
   st->BackendError = new_exception (m, "BackendError", st->LockError,
                                     "The database or its driver failed, or the backend is not "
                                     "built in (code BACKEND or UNSUPPORTED).");
   if (!st->NotHeld || !st->LockLost || !st->BackendError)
      return -1;
   if (PyModule_AddStringConstant (m, "__version__", LEASELOCK_VERSION) < 0)
      return -1;
   for (int code = LEASELOCK_OK; code <= LEASELOCK_INTERRUPTED; code++) {
      const char *name = leaselock_code_name ((leaselock_code_t)code);
      if (PyModule_AddIntConstant (m, name, code) < 0)
         return -1;
   }
   return 0;
}

static int module_traverse (PyObject *m, visitproc visit, void *arg)
{
   ll_state *st = get_state (m);
   Py_VISIT (st->client_type);
   Py_VISIT (st->lease_type);
   Py_VISIT (st->LockError);
   Py_VISIT (st->LockTimeout);
   Py_VISIT (st->NotHeld);
   Py_VISIT (st->LockLost);
   Py_VISIT (st->BackendError);
   return 0;
}

static int module_clear (PyObject *m)
{
   ll_state *st = get_state (m);
   Py_CLEAR (st->client_type);
   Py_CLEAR (st->lease_type);
   Py_CLEAR (st->LockError);
   Py_CLEAR (st->LockTimeout);
   Py_CLEAR (st->NotHeld);
   Py_CLEAR (st->LockLost);
   Py_CLEAR (st->BackendError);
   return 0;
}

static void module_free (void *m)
{
   module_clear ((PyObject *)m);
}

static PyModuleDef_Slot module_slots[] = {
   { Py_mod_exec, module_exec },
   { 0, NULL },
};

static PyModuleDef module_def = {
   PyModuleDef_HEAD_INIT,
   .m_name = "leaselock._leaselock",
   .m_doc = "The C core of leaselock; use the leaselock package.",
   .m_size = sizeof (ll_state),
   .m_methods = module_methods,
   .m_slots = module_slots,
   .m_traverse = module_traverse,
   .m_clear = module_clear,
   .m_free = module_free,
};

PyMODINIT_FUNC PyInit__leaselock (void)
{
   return PyModuleDef_Init (&module_def);
}
