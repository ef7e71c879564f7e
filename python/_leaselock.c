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
 * One file rather than one per type: the two types are small.
 *
 * Threads. The GIL is released around every core call that does I/O or may
 * block (client new/destroy, acquire, renew, release, lease destroy,
 * inspect, list, force_release). The lease getters (state, remaining time,
 * ttl) keep it: they take a core mutex that is never held across I/O or a
 * callback, and releasing the GIL would cost more than they do.
 *
 * Closing is the core's: close() is leaselock_client_close(release_held =
 * true), after which the core refuses every call (a blocking acquire in
 * another thread ends at once); the core client is freed by the Client's
 * dealloc (leaselock_client_destroy, which releases nothing), which no
 * call in flight can race: each holds a reference to the Client, and
 * every Lease holds one too.
 *
 * on_lost and on_renew_failed run on the core's renewal thread: they take
 * the GIL with PyGILState_Ensure unless the interpreter is finalizing, and
 * never let the renewal thread drop the last reference to a Lease (that
 * goes through Py_AddPendingCall), so the thread never joins itself.
 *
 * Logging: every client's core log hook goes to logging.getLogger
 * ("leaselock"), taking the GIL in whatever thread the event happens. The
 * hook is installed at the lowest level the logger is enabled for, read
 * when the client is created and again at each acquire, renew and release
 * (isEnabledFor, cached by logging), so that a disabled level costs the
 * core one load and compare and Python nothing.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <datetime.h>
#include <structmember.h>

#include "leaselock.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/types.h>
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
   PyTypeObject *wait_type;
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

typedef struct
{
   PyObject_HEAD PyObject *module; /* strong: keeps the state alive */
   leaselock_client_t *c;          /* owned; NULL before __init__ */
   PyObject *uri;                  /* str, password replaced by the core */
   PyObject *backend;              /* str */
   PyObject *label;                /* str or None */
   int log_level;                  /* the level its core log hook is at */
   PyObject *weakreflist;
} ClientObject;

typedef struct
{
   PyObject_HEAD PyObject *module;
   ClientObject *client;      /* strong */
   leaselock_lease_t *lease;  /* NULL until the acquire succeeded */
   PyObject *key;             /* str */
   PyObject *on_lost;         /* callable or NULL */
   PyObject *on_renew_failed; /* callable or NULL */
   pid_t pid;                 /* process that acquired it */
   bool dead;                 /* dealloc started: no callback may use it */
   PyObject *weakreflist;
} LeaseObject;

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

/* A new cls(message) with .code = the core's name for code, or NULL. */
static PyObject *new_error (PyObject *cls, leaselock_code_t code, const char *message)
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
   return exc;
}

/* Raises cls(message) with .code = the core's name for code. Returns NULL. */
static PyObject *raise_code (PyObject *cls, leaselock_code_t code, const char *message)
{
   PyObject *exc = new_error (cls, code, message);
   if (!exc)
      return NULL;
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
static int seconds_value (PyObject *v, const char *name, secs_kind_t kind, int64_t *ms)
{
   if (kind == SECS_TIMEOUT && v == Py_None) {
      *ms = -1;
      return 0;
   }
   if (PyBool_Check (v) || !(PyFloat_Check (v) || PyLong_Check (v))) {
      raise_type ("%s must be a number of seconds (int or float) or a datetime.timedelta%s, "
                  "not %.100s",
                  name, kind == SECS_TIMEOUT ? " or None" : "", Py_TYPE (v)->tp_name);
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

/* A duration argument in milliseconds: seconds (int or float) or a
 * datetime.timedelta, checked for kind (seconds_value says how). */
static int seconds_arg (PyObject *v, const char *name, secs_kind_t kind, int64_t *ms)
{
   if (!PyDelta_Check (v))
      return seconds_value (v, name, kind, ms);
   PyObject *secs = PyObject_CallMethod (v, "total_seconds", NULL);
   if (!secs)
      return -1;
   int rc = seconds_value (secs, name, kind, ms);
   Py_DECREF (secs);
   return rc;
}

/* ---- client: open or closed ------------------------------------------- */

static PyObject *raise_closed (ClientObject *self)
{
   if (!self->c)
      return raise_invalid ("the client is not initialised (call Client(uri) or connect())");
   return raise_invalid ("I/O operation on a closed client");
}

static bool client_closed (ClientObject *self)
{
   return leaselock_client_closed (self->c); /* true for NULL */
}

/* 0 when the client can take a call, else -1 with ValueError. */
static int client_check (ClientObject *self)
{
   if (!client_closed (self))
      return 0;
   raise_closed (self);
   return -1;
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

/* Drops the renewal thread's reference to self without ever dropping the
 * last one there (see the top of the file). With the GIL. */
static void lease_decref_from_thread (LeaseObject *self)
{
   if (Py_REFCNT (self) > 1 || Py_AddPendingCall (decref_pending, self) != 0)
      Py_DECREF (self);
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
      PyObject *r = PyObject_CallOneArg (cb, (PyObject *)self);
      if (!r)
         PyErr_WriteUnraisable (cb);
      Py_XDECREF (r);
      Py_DECREF (cb);
      /* Never drop the last reference here: the Lease's dealloc would
       * destroy the core lease (and maybe the client) from its own
       * renewal thread. */
      lease_decref_from_thread (self);
   }
   PyGILState_Release (g);
}

static void renew_failed_trampoline (leaselock_lease_t *lease,
                                     const leaselock_error_t *err,
                                     int64_t remaining_ms,
                                     void *data)
{
   if (atomic_load (&finalizing) || ll_py_finalizing ())
      return;
   PyGILState_STATE g = PyGILState_Ensure ();
   LeaseObject *self = data;
   if (!self->dead && self->on_renew_failed) {
      if (!self->lease)
         self->lease = lease;
      PyObject *cb = Py_NewRef (self->on_renew_failed);
      Py_INCREF (self);
      ll_state *st = get_state (self->module);
      PyObject *exc = new_error (exc_class (st, err->code), err->code, err->message);
      PyObject *r = exc ? PyObject_CallFunction (cb, "OOd", (PyObject *)self, exc,
                                                 (double)remaining_ms / 1000.0)
                        : NULL;
      if (!r)
         PyErr_WriteUnraisable (cb);
      Py_XDECREF (r);
      Py_XDECREF (exc);
      Py_DECREF (cb);
      lease_decref_from_thread (self);
   }
   PyGILState_Release (g);
}

/* ---- logging ------------------------------------------------------------ */

/* logging.getLogger("leaselock") and its bound methods, set once by the
 * first module exec and kept for the life of the process (the logging
 * module keeps the logger alive anyway). */
static PyObject *py_logger_log, *py_logger_enabled;

/* The lowest of DEBUG, INFO, WARNING, ERROR the logger is enabled for,
 * else LEASELOCK_LOG_OFF. With the GIL; never leaves an exception set. */
static int py_log_level (void)
{
   if (!py_logger_enabled)
      return LEASELOCK_LOG_OFF;
   for (int level = LEASELOCK_LOG_DEBUG; level <= LEASELOCK_LOG_ERROR; level += 10) {
      PyObject *lv = PyLong_FromLong (level);
      PyObject *r = lv ? PyObject_CallOneArg (py_logger_enabled, lv) : NULL;
      Py_XDECREF (lv);
      int on = r ? PyObject_IsTrue (r) : -1;
      Py_XDECREF (r);
      if (on < 0) {
         PyErr_Clear ();
         return LEASELOCK_LOG_OFF;
      }
      if (on)
         return level;
   }
   return LEASELOCK_LOG_OFF;
}

/* Follows the logger's level (with the GIL). */
static void log_refresh (ClientObject *self)
{
   int level = py_log_level ();
   if (self->c && level != self->log_level) {
      self->log_level = level;
      leaselock_client_set_log_level (self->c, level);
   }
}

/* The core's log hook: logger.log(level, 'event "key" (fence N): message',
 * extra={"event", "key", "fence"}). Any thread, no leaselock lock held. */
static void log_trampoline (const leaselock_log_event_t *ev, void *data)
{
   (void)data;
   if (atomic_load (&finalizing) || ll_py_finalizing ())
      return;
   PyGILState_STATE g = PyGILState_Ensure ();
   PyObject *et, *ev_, *tb;
   PyErr_Fetch (&et, &ev_, &tb); /* a caller's exception in flight, if any */
   PyObject *key = ev->key ? PyUnicode_DecodeUTF8 (ev->key, (Py_ssize_t)ev->key_len, "replace")
                           : Py_NewRef (Py_None);
   PyObject *msg = PyUnicode_DecodeUTF8 (ev->message, (Py_ssize_t)strlen (ev->message), "replace");
   PyObject *args = NULL, *kw = NULL, *r = NULL;
   if (key && msg && ev->key)
      args = Py_BuildValue ("(issOLO)", ev->level, "%s \"%s\" (fence %d): %s", ev->event, key,
                            (long long)ev->fence, msg);
   else if (key && msg)
      args = Py_BuildValue ("(issO)", ev->level, "%s: %s", ev->event, msg);
   if (args)
      kw = Py_BuildValue ("{s{sssOsL}}", "extra", "event", ev->event, "key", key, "fence",
                          (long long)ev->fence);
   if (kw)
      r = PyObject_Call (py_logger_log, args, kw);
   if (!r)
      PyErr_WriteUnraisable (py_logger_log);
   Py_XDECREF (r);
   Py_XDECREF (kw);
   Py_XDECREF (args);
   Py_XDECREF (key);
   Py_XDECREF (msg);
   PyErr_Restore (et, ev_, tb);
   PyGILState_Release (g);
}

typedef struct
{
   PyThreadState *ts;
   PyObject *cancel; /* object with is_set(), or NULL */
   PyObject *exc_type, *exc_value, *exc_tb;
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

static PyModuleDef module_def;

static int Client_init (ClientObject *self, PyObject *args, PyObject *kwds)
{
   static char *kwlist[] = { "uri", "label", NULL };
   PyObject *uri_o = Py_None, *label_o = Py_None;
   if (!PyArg_ParseTupleAndKeywords (args, kwds, "|O$O:Client", kwlist, &uri_o, &label_o))
      return -1;
   if (self->c) {
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
   self->log_level = py_log_level ();
   leaselock_client_set_log (c, self->log_level, log_trampoline, NULL);
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
      return raise_error (get_state (self->module), &err);
   Py_RETURN_NONE;
}

static void Client_dealloc (ClientObject *self)
{
   PyTypeObject *tp = Py_TYPE (self);
   PyObject_GC_UnTrack (self);
   if (self->weakreflist)
      PyObject_ClearWeakRefs ((PyObject *)self);
   /* No Lease object is alive (each holds a reference), and no call is in
    * flight (it would hold one too). Releases nothing. */
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
   if (client_check (self) < 0)
      return NULL;
   return Py_NewRef (self);
}

static PyObject *Client_exit (ClientObject *self, PyObject *args)
{
   (void)args;
   return Client_close (self, NULL);
}

static LeaseObject *lease_alloc (ClientObject *cl,
                                 PyObject *key,
                                 PyObject *on_lost,
                                 PyObject *on_renew_failed)
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
   l->on_renew_failed = on_renew_failed == Py_None ? NULL : Py_NewRef (on_renew_failed);
   l->pid = current_pid ();
   l->dead = false;
   l->weakreflist = NULL;
   PyObject_GC_Track (l);
   return l;
}

/* The arguments of _acquire. */
typedef struct
{
   PyObject *key;
   leaselock_acquire_opts_t o;
   PyObject *on_lost;         /* callable or None */
   PyObject *cancel;          /* None or an object with is_set() */
   PyObject *on_renew_failed; /* callable or None */
   PyObject *mode;            /* _acquire_mode only: "semaphore", "shared", "exclusive" */
   int64_t limit;             /* _acquire_mode only: the semaphore's limit */
} acquire_args_t;

/* The value of keyword argument kw, one of names[n] (values[i] gets it). */
static int keyword_arg (PyObject *kw,
                        PyObject *value,
                        const char *const *names,
                        PyObject **values,
                        int n,
                        const char *fn)
{
   for (int i = 0; i < n; i++)
      if (PyUnicode_Check (kw) && PyUnicode_CompareWithASCIIString (kw, names[i]) == 0) {
         values[i] = value;
         return 0;
      }
   const char *name = PyUnicode_Check (kw) ? PyUnicode_AsUTF8 (kw) : NULL;
   raise_type ("%s() got an unexpected keyword argument '%.100s'", fn, name ? name : "?");
   return -1;
}

/* _acquire(key, *, ttl_ms, timeout_ms, min_hold_ms=0, auto_renew=True,
 *          on_lost=None, cancel=None, on_renew_failed=None, fair=False): the key
 * positional, the rest by keyword only (METH_FASTCALL | METH_KEYWORDS).
 * fn names the method for its messages; _acquire_mode (modes) also takes
 * mode (required) and limit (0 unless given). */
static int parse_acquire (PyObject *const *args,
                          Py_ssize_t nargs,
                          PyObject *kwnames,
                          const char *fn,
                          bool modes,
                          acquire_args_t *a)
{
   static const char *const names[] = { "ttl_ms",  "timeout_ms", "min_hold_ms",     "auto_renew",
                                        "on_lost", "cancel",     "on_renew_failed", "fair",
                                        "mode",    "limit" };
   PyObject *v[10] = { NULL, NULL, NULL, Py_True, Py_None, Py_None, Py_None, Py_False, NULL, NULL };
   Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE (kwnames) : 0;
   if (nargs != 1) {
      raise_type ("%s() takes the key as its one positional argument (%zd given)", fn, nargs);
      return -1;
   }
   for (Py_ssize_t i = 0; i < nkw; i++)
      if (keyword_arg (PyTuple_GET_ITEM (kwnames, i), args[nargs + i], names, v, modes ? 10 : 8,
                       fn) < 0)
         return -1;
   if (!v[0] || !v[1] || (modes && !v[8])) {
      raise_type (modes ? "%s() needs the keyword arguments ttl_ms, timeout_ms and mode"
                        : "%s() needs the keyword arguments ttl_ms and timeout_ms",
                  fn);
      return -1;
   }
   a->mode = v[8];
   a->limit = 0;
   if (v[9]) {
      if (!PyLong_Check (v[9]) || PyBool_Check (v[9])) {
         raise_type ("limit must be an int, not %.100s", Py_TYPE (v[9])->tp_name);
         return -1;
      }
      int overflow = 0;
      long long limit = PyLong_AsLongLongAndOverflow (v[9], &overflow);
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
   a->on_lost = v[4];
   a->cancel = v[5];
   a->on_renew_failed = v[6];
   if (a->on_lost != Py_None && !PyCallable_Check (a->on_lost)) {
      raise_type ("on_lost must be callable or None, not %.100s", Py_TYPE (a->on_lost)->tp_name);
      return -1;
   }
   if (a->on_renew_failed != Py_None && !PyCallable_Check (a->on_renew_failed)) {
      raise_type ("on_renew_failed must be callable or None, not %.100s",
                  Py_TYPE (a->on_renew_failed)->tp_name);
      return -1;
   }
   return 0;
}

/* The failure of an acquire as Python sees it: None for BUSY on one try,
 * the exception of should_stop, or the core's error. */
static PyObject *acquire_failed (ll_state *st,
                                 const acquire_args_t *a,
                                 stop_ctx_t *stop,
                                 const leaselock_error_t *err)
{
   if (stop->why == STOP_ERROR) {
      PyErr_Restore (stop->exc_type, stop->exc_value, stop->exc_tb);
      return NULL;
   }
   Py_XDECREF (stop->exc_type);
   Py_XDECREF (stop->exc_value);
   Py_XDECREF (stop->exc_tb);
   if (err->code == LEASELOCK_BUSY && a->o.timeout_ms == 0)
      Py_RETURN_NONE;
   return raise_error (st, err);
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
      raise_invalid ("mode must be 'semaphore', 'shared' or 'exclusive', not '%.100s'", m);
   else if (!PyErr_Occurred ())
      raise_type ("mode must be a str, not %.100s", Py_TYPE (mode)->tp_name);
   return -1;
}

/* The body of _acquire and _acquire_mode: the core's blocking call runs
 * without the GIL, asking should_stop (Ctrl-C, the cancel flag) between
 * its waits. A mode's lease is named by its record (the core's
 * leaselock_lease_key: key/.slot/<i>, key/.rw/w, key/.rw/r/<token>),
 * whose fence it carries. */
static PyObject *acquire_impl (ClientObject *self,
                               PyObject *const *args,
                               Py_ssize_t nargs,
                               PyObject *kwnames,
                               bool modes)
{
   acquire_args_t a;
   const char *key;
   Py_ssize_t key_len;
   acquire_kind_t kind = ACQ_LOCK;
   if (parse_acquire (args, nargs, kwnames, modes ? "_acquire_mode" : "_acquire", modes, &a) < 0 ||
       (modes && mode_arg (a.mode, &kind) < 0) ||
       key_arg (a.key, "key", false, &key, &key_len) < 0 || client_check (self) < 0)
      return NULL;
   LeaseObject *lease = lease_alloc (self, a.key, a.on_lost, a.on_renew_failed);
   if (!lease)
      return NULL;
   if (lease->on_lost) {
      a.o.on_lost = lost_trampoline;
      a.o.on_lost_data = lease;
   }
   if (lease->on_renew_failed) {
      a.o.on_renew_failed = renew_failed_trampoline;
      a.o.on_renew_failed_data = lease;
   }
   log_refresh (self);
   stop_ctx_t stop = { NULL, a.cancel == Py_None ? NULL : a.cancel, NULL, NULL, NULL, STOP_NONE };
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
      return acquire_failed (get_state (self->module), &a, &stop, &err);
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

/* _acquire(...) -> Lease | None (see parse_acquire). None when one try
 * (timeout_ms == 0) found the key busy. The public layer checks the
 * arguments first (leaselock.Lock); the core checks them again. */
static PyObject *Client_acquire (ClientObject *self,
                                 PyObject *const *args,
                                 Py_ssize_t nargs,
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
static PyObject *Client_acquire_mode (ClientObject *self,
                                      PyObject *const *args,
                                      Py_ssize_t nargs,
                                      PyObject *kwnames)
{
   return acquire_impl (self, args, nargs, kwnames, true);
}

/* ---- _Wait: a waiting acquire driven one try at a time ------------------ */

/* Client._wait(key, **_acquire's keywords but cancel) -> _Wait, the core's
 * leaselock_wait_t for the asyncio wait: its try_() runs one try without
 * the GIL (on the package's thread pool) and returns (Lease, 0.0) or
 * (None, seconds to sleep before the next try); close() gives the wait up
 * (in fair mode it leaves the key's queue: a round trip). */
typedef struct
{
   PyObject_HEAD ClientObject *client; /* strong */
   LeaseObject *lease;                 /* strong; what a success returns, NULL after */
   leaselock_wait_t *w;                /* owned; NULL once closed */
   bool busy;                          /* a try_ runs without the GIL */
   bool close_after;                   /* close() came during it */
} WaitObject;

static void wait_destroy_nogil (WaitObject *self)
{
   leaselock_wait_t *w = self->w;
   self->w = NULL;
   if (!w)
      return;
   Py_BEGIN_ALLOW_THREADS leaselock_wait_destroy (w);
   Py_END_ALLOW_THREADS
}

static PyObject *Client_wait (ClientObject *self,
                              PyObject *const *args,
                              Py_ssize_t nargs,
                              PyObject *kwnames)
{
   acquire_args_t a;
   const char *key;
   Py_ssize_t key_len;
   if (parse_acquire (args, nargs, kwnames, "_wait", false, &a) < 0 ||
       key_arg (a.key, "key", false, &key, &key_len) < 0 || client_check (self) < 0)
      return NULL;
   ll_state *st = get_state (self->module);
   WaitObject *wo = PyObject_GC_New (WaitObject, st->wait_type);
   if (!wo)
      return NULL;
   wo->client = (ClientObject *)Py_NewRef (self);
   wo->w = NULL;
   wo->busy = wo->close_after = false;
   wo->lease = lease_alloc (self, a.key, a.on_lost, a.on_renew_failed);
   PyObject_GC_Track (wo);
   if (!wo->lease) {
      Py_DECREF (wo);
      return NULL;
   }
   if (wo->lease->on_lost) {
      a.o.on_lost = lost_trampoline;
      a.o.on_lost_data = wo->lease;
   }
   if (wo->lease->on_renew_failed) {
      a.o.on_renew_failed = renew_failed_trampoline;
      a.o.on_renew_failed_data = wo->lease;
   }
   log_refresh (self);
   leaselock_error_t err;
   wo->w = leaselock_wait_new (self->c, key, (size_t)key_len, &a.o, &err);
   if (!wo->w) {
      Py_DECREF (wo);
      return raise_error (st, &err);
   }
   return (PyObject *)wo;
}

static PyObject *Wait_try (WaitObject *self, PyObject *unused)
{
   (void)unused;
   ll_state *st = get_state (self->client->module);
   if (!self->w)
      return raise_invalid ("the wait is closed");
   if (client_check (self->client) < 0)
      return NULL;
   if (self->busy)
      return PyErr_Format (PyExc_RuntimeError, "a try of this wait is already running");
   leaselock_error_t err;
   leaselock_lease_t *core = NULL;
   int64_t sleep_ms = 0;
   self->busy = true;
   bool ok;
   Py_BEGIN_ALLOW_THREADS ok = leaselock_wait_try (self->w, &core, &sleep_ms, &err);
   Py_END_ALLOW_THREADS self->busy = false;
   if (ok) {
      LeaseObject *lease = self->lease;
      self->lease = NULL;
      lease->lease = core;
      if (self->close_after)
         wait_destroy_nogil (self);
      PyObject *r = Py_BuildValue ("(Od)", lease, 0.0);
      Py_DECREF (lease);
      return r;
   }
   if (self->close_after)
      wait_destroy_nogil (self);
   if (err.code == LEASELOCK_BUSY)
      return Py_BuildValue ("(Od)", Py_None, (double)sleep_ms / 1000.0);
   return raise_error (st, &err);
}

static PyObject *Wait_close (WaitObject *self, PyObject *unused)
{
   (void)unused;
   if (self->busy)
      self->close_after = true; /* the running try_ closes it when it ends */
   else
      wait_destroy_nogil (self);
   Py_RETURN_NONE;
}

static int Wait_traverse (WaitObject *self, visitproc visit, void *arg)
{
   Py_VISIT (Py_TYPE (self));
   Py_VISIT (self->client);
   Py_VISIT (self->lease);
   return 0;
}

static int Wait_clear (WaitObject *self)
{
   Py_CLEAR (self->lease);
   return 0;
}

static void Wait_dealloc (WaitObject *self)
{
   PyTypeObject *tp = Py_TYPE (self);
   PyObject_GC_UnTrack (self);
   wait_destroy_nogil (self); /* a try_ holds a reference: none runs now */
   Py_CLEAR (self->lease);
   Py_CLEAR (self->client);
   PyObject_GC_Del (self);
   Py_DECREF (tp);
}

static PyMethodDef Wait_methods[] = {
   { "try_", (PyCFunction)Wait_try, METH_NOARGS, NULL },
   { "close", (PyCFunction)Wait_close, METH_NOARGS, NULL },
   { NULL, NULL, 0, NULL },
};

static PyType_Slot Wait_slots[] = {
   { Py_tp_doc, "A waiting acquire driven one try at a time (Client._wait)." },
   { Py_tp_dealloc, Wait_dealloc },
   { Py_tp_traverse, Wait_traverse },
   { Py_tp_clear, Wait_clear },
   { Py_tp_methods, Wait_methods },
   { 0, NULL },
};

static PyType_Spec Wait_spec = {
   .name = "leaselock._leaselock._Wait",
   .basicsize = sizeof (WaitObject),
   .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_DISALLOW_INSTANTIATION,
   .slots = Wait_slots,
};

/* A record as a tuple: (key, owner|None, fence, expires_in_ms, host, pid,
 * label|None). The one conversion of a record (the package makes it a
 * dict). */
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
      t = Py_BuildValue ("(OOLLOLOL)", key, owner, (long long)r->fence, (long long)r->expires_in_ms,
                         host, (long long)r->pid, label, (long long)r->holds);
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
   if (key_arg (key_o, "key", false, &key, &n) < 0 || client_check (self) < 0)
      return NULL;
   leaselock_record_t *rec = PyMem_RawMalloc (sizeof *rec);
   if (!rec)
      return PyErr_NoMemory ();
   leaselock_error_t err;
   bool found = false, ok;
   LL_NOGIL (ok = leaselock_inspect (self->c, key, (size_t)n, rec, &found, &err));
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

/* The list being built by leaselock_list's callback. The core calls it
 * with no connection held, on this thread: it takes the GIL back for
 * each record. */
typedef struct
{
   PyThreadState *ts;
   PyObject *list;
   bool failed; /* a Python exception is set */
} list_ctx_t;

static bool list_append (const leaselock_record_t *r, void *data)
{
   list_ctx_t *x = data;
   PyEval_RestoreThread (x->ts);
   PyObject *t = record_tuple (r);
   x->failed = !t || PyList_Append (x->list, t) < 0;
   Py_XDECREF (t);
   x->ts = PyEval_SaveThread ();
   return !x->failed;
}

static PyObject *Client_list (ClientObject *self, PyObject *prefix_o)
{
   const char *prefix;
   Py_ssize_t n;
   if (key_arg (prefix_o, "prefix", true, &prefix, &n) < 0 || client_check (self) < 0)
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
         raise_error (get_state (self->module), &err);
   }
   return x.list;
}

static PyObject *Client_force_release (ClientObject *self, PyObject *key_o)
{
   const char *key;
   Py_ssize_t n;
   if (key_arg (key_o, "key", false, &key, &n) < 0 || client_check (self) < 0)
      return NULL;
   leaselock_error_t err;
   bool took = false, ok;
   LL_NOGIL (ok = leaselock_force_release (self->c, key, (size_t)n, &took, &err));
   if (!ok)
      return raise_error (get_state (self->module), &err);
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
   if ((prefix_o && key_arg (prefix_o, "prefix", true, &prefix, &n) < 0) ||
       (older_o && seconds_arg (older_o, "older_than", SECS_DURATION, &older_ms) < 0) ||
       client_check (self) < 0)
      return NULL;
   leaselock_error_t err;
   int64_t count = 0;
   bool ok;
   LL_NOGIL (ok = leaselock_prune (self->c, prefix, (size_t)n, older_ms, &count, &err));
   if (!ok)
      return raise_error (get_state (self->module), &err);
   return PyLong_FromLongLong (count);
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
   F (acquires),         F (busy),        F (waits),    F (timeouts),         F (renewals),
   F (renewal_failures), F (losses),      F (releases), F (release_failures), F (backend_errors),
   F (requests),         F (leases_held),
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
      raise_error (get_state (self->module), &err);
      return -1;
   }
   return 0;
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
      PyObject *o = PyLong_FromUnsignedLongLong (v);
      if (!o || PyDict_SetItemString (d, stat_fields[i].name, o) < 0)
         Py_CLEAR (d);
      Py_XDECREF (o);
   }
   PyObject *wait = PyFloat_FromDouble ((double)st.wait_ms / 1000.0);
   PyObject *held = PyFloat_FromDouble ((double)st.held_ms / 1000.0);
   PyObject *sum = PyFloat_FromDouble ((double)st.latency_sum_us / 1e6);
   PyObject *lat = latency_list (&st);
   if (d && (!wait || !held || !sum || !lat || PyDict_SetItemString (d, "wait_seconds", wait) < 0 ||
             PyDict_SetItemString (d, "held_seconds", held) < 0 ||
             PyDict_SetItemString (d, "latency_sum_seconds", sum) < 0 ||
             PyDict_SetItemString (d, "latency_buckets", lat) < 0))
      Py_CLEAR (d);
   Py_XDECREF (wait);
   Py_XDECREF (held);
   Py_XDECREF (sum);
   Py_XDECREF (lat);
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
                                self->backend, client_closed (self) ? "closed" : "open");
}

static PyObject *Client_get_closed (ClientObject *self, void *c)
{
   (void)c;
   return PyBool_FromLong (client_closed (self));
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
   { "_acquire", (PyCFunction)(void (*) (void))Client_acquire, METH_FASTCALL | METH_KEYWORDS,
     NULL },
   { "_acquire_mode", (PyCFunction)(void (*) (void))Client_acquire_mode,
     METH_FASTCALL | METH_KEYWORDS, NULL },
   { "_wait", (PyCFunction)(void (*) (void))Client_wait, METH_FASTCALL | METH_KEYWORDS, NULL },
   { "_inspect", (PyCFunction)Client_inspect, METH_O, NULL },
   { "_list", (PyCFunction)Client_list, METH_O, NULL },
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
     "(statements sent), leases_held (now), wait_seconds and held_seconds (totals), "
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
   Py_VISIT (self->on_renew_failed);
   Py_VISIT (self->client);
   return 0;
}

/* Breaks cycles through the callback only: the client must outlive the
 * lease (dealloc uses it). */
static int Lease_clear (LeaseObject *self)
{
   Py_CLEAR (self->on_lost);
   Py_CLEAR (self->on_renew_failed);
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
      /* Releases it if this process still holds it and the client is
       * open (the core checks the pid, so a forked child never releases
       * its parent's lease), and waits for an on_lost callback in
       * flight. */
      leaselock_lease_t *core = self->lease;
      self->lease = NULL;
      LL_NOGIL (leaselock_lease_destroy (core));
   }
   Py_CLEAR (self->on_lost);
   Py_CLEAR (self->on_renew_failed);
   Py_CLEAR (self->key);
   Py_CLEAR (self->client);
   Py_CLEAR (self->module);
   PyObject_GC_Del (self);
   Py_DECREF (tp);
}

/* A core call on the lease: the lease exists and its client is open. */
static int lease_check (LeaseObject *self)
{
   if (!self->lease) {
      raise_invalid ("the lease was never acquired");
      return -1;
   }
   if (client_closed (self->client)) {
      raise_invalid ("I/O operation on a lease of a closed client");
      return -1;
   }
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
   return !lease_foreign (self) && lease_state (self) == LEASELOCK_STATE_HELD;
}

static PyObject *Lease_renew (LeaseObject *self, PyObject *args, PyObject *kwds)
{
   static char *kwlist[] = { "ttl", "min_hold", NULL };
   PyObject *ttl_o = Py_None, *hold_o = Py_None;
   if (!PyArg_ParseTupleAndKeywords (args, kwds, "|OO:renew", kwlist, &ttl_o, &hold_o))
      return NULL;
   int64_t ttl_ms = 0, hold_ms = -1;
   if ((ttl_o != Py_None && seconds_arg (ttl_o, "ttl", SECS_TTL, &ttl_ms) < 0) ||
       (hold_o != Py_None && seconds_arg (hold_o, "min_hold", SECS_DURATION, &hold_ms) < 0))
      return NULL;
   if (lease_check (self) < 0)
      return NULL;
   log_refresh (self->client);
   leaselock_error_t err;
   bool ok;
   leaselock_lease_t *core = self->lease;
   LL_NOGIL (ok = leaselock_lease_extend (core, ttl_ms, hold_ms, &err));
   if (!ok)
      return raise_error (get_state (self->module), &err);
   Py_RETURN_NONE;
}

/* One call of the core on the lease that makes a round trip of its own
 * (release, reenter), without the GIL. */
static PyObject *lease_call (LeaseObject *self,
                             bool (*fn) (leaselock_lease_t *, leaselock_error_t *))
{
   if (lease_check (self) < 0)
      return NULL;
   log_refresh (self->client);
   leaselock_error_t err;
   bool ok;
   leaselock_lease_t *core = self->lease;
   LL_NOGIL (ok = fn (core, &err));
   if (!ok && client_closed (self->client))
      return raise_invalid ("I/O operation on a lease of a closed client");
   if (!ok)
      return raise_error (get_state (self->module), &err);
   Py_RETURN_NONE;
}

static PyObject *Lease_release (LeaseObject *self, PyObject *unused)
{
   (void)unused;
   return lease_call (self, leaselock_lease_release);
}

/* _reenter(): the holder enters once more (leaselock_lease_reenter). */
static PyObject *Lease_reenter (LeaseObject *self, PyObject *unused)
{
   (void)unused;
   return lease_call (self, leaselock_lease_reenter);
}

static PyObject *Lease_enter (LeaseObject *self, PyObject *unused)
{
   (void)unused;
   return Py_NewRef (self);
}

/* LockLost for a lease found lost when its with-block ended. */
static PyObject *raise_lost_in_block (LeaseObject *self)
{
   char msg[LEASELOCK_ERROR_MAX + 64];
   Py_ssize_t n;
   const char *k = PyUnicode_AsUTF8AndSize (self->key, &n);
   snprintf (msg, sizeof msg,
             "the lease on \"%.64s\" was lost before the block ended (taken over, or not "
             "renewed before its deadline)",
             k ? k : "?");
   return raise_code (get_state (self->module)->LockLost, LEASELOCK_LOST, msg);
}

/* Leaving the with-block: release. A lease that was lost (renewal failed,
 * local deadline passed, or found taken at release) raises LockLost; the
 * body's exception, if any, becomes its __context__. In a forked child the
 * parent's lease is left alone, silently; so is a lease whose client was
 * closed (close() released it). */
static PyObject *Lease_exit (LeaseObject *self, PyObject *const *args, Py_ssize_t nargs)
{
   (void)args;
   (void)nargs;
   if (!self->lease || lease_foreign (self) || client_closed (self->client))
      Py_RETURN_FALSE;
   ll_state *st = get_state (self->module);
   leaselock_state_t s = leaselock_lease_state (self->lease);
   if (s == LEASELOCK_STATE_RELEASED)
      Py_RETURN_FALSE;
   log_refresh (self->client);
   leaselock_error_t err;
   bool ok;
   leaselock_lease_t *core = self->lease;
   LL_NOGIL (ok = leaselock_lease_release (core, &err));
   if (s == LEASELOCK_STATE_LOST)
      return raise_lost_in_block (self);
   if (ok || client_closed (self->client))
      Py_RETURN_FALSE; /* or close() released it meanwhile */
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

static PyObject *Lease_get_holds (LeaseObject *self, void *c)
{
   (void)c;
   return PyLong_FromLongLong (self->lease ? leaselock_lease_holds (self->lease) : 0);
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

/* The core's state by name; "foreign" in a forked child for its parent's
 * lease. */
static const char *lease_state_name (LeaseObject *self)
{
   if (lease_foreign (self))
      return "foreign";
   switch (lease_state (self)) {
      case LEASELOCK_STATE_HELD:
         return "held";
      case LEASELOCK_STATE_LOST:
         return "lost";
      case LEASELOCK_STATE_CLOSED:
         return "closed";
      case LEASELOCK_STATE_RELEASED:
      default:
         return "released";
   }
}

static PyObject *Lease_get_state (LeaseObject *self, void *c)
{
   (void)c;
   return PyUnicode_FromString (lease_state_name (self));
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
   return PyUnicode_FromFormat ("<%s %R fence=%lld %s>", tp, self->key, fence,
                                lease_state_name (self));
}

static PyMethodDef Lease_methods[] = {
   { "renew", (PyCFunction)(void (*) (void))Lease_renew, METH_VARARGS | METH_KEYWORDS,
     "renew($self, /, ttl=None, min_hold=None)\n--\n\nExtends the lease to ttl seconds from now "
     "(database clock); None keeps its TTL. With min_hold, a release then keeps the key taken "
     "until at least min_hold seconds after this renew (a minimum hold is only ever lengthened). "
     "Raises NotHeld or LockLost when it is no longer ours." },
   { "release", (PyCFunction)Lease_release, METH_NOARGS,
     "release($self, /)\n--\n\nReleases the lease. Raises NotHeld when this owner no longer holds "
     "it." },
   { "_reenter", (PyCFunction)Lease_reenter, METH_NOARGS, NULL },
   { "__enter__", (PyCFunction)Lease_enter, METH_NOARGS, NULL },
   { "__exit__", (PyCFunction)(void (*) (void))Lease_exit, METH_FASTCALL, NULL },
   { NULL, NULL, 0, NULL },
};

static PyGetSetDef Lease_getset[] = {
   { "key", (getter)Lease_get_key, NULL,
     "The lock's name; for a holder of a semaphore or read-write lock, its record's "
     "(key/.slot/<i>, key/.rw/w, key/.rw/r/<token>).",
     NULL },
   { "owner", (getter)Lease_get_owner, NULL, "This acquisition's owner token (32 hex).", NULL },
   { "fence", (getter)Lease_get_fence, NULL, "The fencing token: grows on every acquire.", NULL },
   { "ttl", (getter)Lease_get_ttl, NULL, "The lease duration in seconds.", NULL },
   { "holds", (getter)Lease_get_holds, NULL,
     "Reentrant holds: 1 once acquired, one more per re-entry, 0 once released or lost.", NULL },
   { "held", (getter)Lease_get_held, NULL, "True while this process holds the lease.", NULL },
   { "lost", (getter)Lease_get_lost, NULL, "True once the lease was declared lost.", NULL },
   { "state", (getter)Lease_get_state, NULL,
     "\"held\", \"released\", \"lost\", \"closed\" (held when its client was closed "
     "without releasing it), or \"foreign\" (a parent's lease in a forked child).",
     NULL },
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

static PyMethodDef module_methods[] = {
   { "_check_key", (PyCFunction)(void (*) (void))mod_check_key, METH_FASTCALL, NULL },
   { "_seconds", (PyCFunction)(void (*) (void))mod_seconds, METH_FASTCALL, NULL },
   { "default_uri", (PyCFunction)mod_default_uri, METH_NOARGS,
     "default_uri($module, /)\n--\n\nThe embedded SQLite URI used when no URI and no "
     "$LEASELOCK_URI are given." },
   { "_shutdown", (PyCFunction)mod_shutdown, METH_NOARGS, NULL },
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

/* logging.getLogger("leaselock").log and .isEnabledFor, once. */
static int logger_init (void)
{
   if (py_logger_log)
      return 0;
   PyObject *logging = PyImport_ImportModule ("logging");
   PyObject *logger = logging ? PyObject_CallMethod (logging, "getLogger", "s", "leaselock") : NULL;
   Py_XDECREF (logging);
   if (!logger)
      return -1;
   py_logger_log = PyObject_GetAttrString (logger, "log");
   py_logger_enabled = PyObject_GetAttrString (logger, "isEnabledFor");
   Py_DECREF (logger);
   return py_logger_log && py_logger_enabled ? 0 : -1;
}

static int module_exec (PyObject *m)
{
   PyDateTime_IMPORT; /* seconds_arg takes datetime.timedelta */
   if (!PyDateTimeAPI)
      return -1;
   pthread_once (&pid_once, pid_init);
   if (logger_init () < 0)
      return -1;
   ll_state *st = get_state (m);
   st->client_type = (PyTypeObject *)PyType_FromModuleAndSpec (m, &Client_spec, NULL);
   if (!st->client_type || PyModule_AddType (m, st->client_type) < 0)
      return -1;
   st->lease_type = (PyTypeObject *)PyType_FromModuleAndSpec (m, &Lease_spec, NULL);
   if (!st->lease_type || PyModule_AddType (m, st->lease_type) < 0)
      return -1;
   st->wait_type = (PyTypeObject *)PyType_FromModuleAndSpec (m, &Wait_spec, NULL);
   if (!st->wait_type)
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
   Py_VISIT (st->wait_type);
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
   Py_CLEAR (st->wait_type);
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
