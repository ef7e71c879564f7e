/*
 * module.h - private header of the CPython extension leaselock._leaselock:
 * the module state, the objects' structs and what the files of the
 * extension share. Not installed; the public package (python/leaselock) is
 * pure Python over the module.
 *
 * The files, one concern each:
 *   module.c   PyInit__leaselock, the module state, exceptions, functions
 *   errors.c   a core error code to an exception, and raising it
 *   args.c     argument checks (key, seconds -> milliseconds)
 *   log.c      the core's log hook to logging.getLogger("leaselock")
 *   fork.c     the process id a Lease compares with (pthread_atfork)
 *   client.c   the Client type
 *   acquire.c  Client._acquire and _acquire_mode: the arguments, the call
 *   lease.c    the Lease type and the core's callbacks on a lease
 *   wait.c     the _Wait type (Client._wait) for the asyncio wait
 *   with.c     Lock's with-block (_LockBase) and the holds registry
 *   stamp.c    whether a dict changed (what the with-block keeps)
 *   bind.c     _LockBase's __enter__ and __exit__ bound without an allocation
 *
 * No lease logic lives here: every decision is the core's (leaselock.h).
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
 * References. Unless a comment says otherwise, a PyObject * argument is
 * borrowed, and a returned PyObject * is a new reference (NULL with an
 * exception set).
 */
#ifndef PYLL_MODULE_H
#define PYLL_MODULE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "leaselock.h"

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* Runs stmt with the GIL released. */
#define LL_NOGIL(stmt)                                                                             \
   do {                                                                                            \
      PyThreadState *_ts = PyEval_SaveThread ();                                                   \
      stmt;                                                                                        \
      PyEval_RestoreThread (_ts);                                                                  \
   } while (0)

/* Destroys the object field points at (if any) with destroy, with the GIL
 * released, after setting field to NULL: no other thread sees it half
 * destroyed. */
#define LL_DESTROY_NOGIL(field, destroy)                                                           \
   do {                                                                                            \
      __typeof__ (field) _obj = (field);                                                           \
      (field) = NULL;                                                                              \
      if (_obj)                                                                                    \
         LL_NOGIL (destroy (_obj));                                                                \
   } while (0)

/* ---- module.c ------------------------------------------------------------ */

/* The module's state: every member a strong reference, visited and
 * cleared by the module (module.c), each named once here. */
#define PYLL_STATE_MEMBERS(X)                                                                      \
   X (PyTypeObject, client_type)                                                                   \
   X (PyTypeObject, lease_type)                                                                    \
   X (PyTypeObject, wait_type)                                                                     \
   X (PyTypeObject, lockbase_type)                                                                 \
   X (PyTypeObject, withmethod_type)                                                               \
   X (PyTypeObject, boundwith_type)                                                                \
   X (PyObject, LockError)                                                                         \
   X (PyObject, LockTimeout)                                                                       \
   X (PyObject, NotHeld)                                                                           \
   X (PyObject, LockLost)                                                                          \
   X (PyObject, BackendError)

#define PYLL_STATE_MEMBER(type, name) type *name;
typedef struct
{
   PYLL_STATE_MEMBERS (PYLL_STATE_MEMBER)
} pyll_state_t;
#undef PYLL_STATE_MEMBER

/* The module's definition: PyType_GetModuleByDef finds the module (and
 * its state) from a type with it. */
extern PyModuleDef pyll_module_def;

/* The state of module (borrowed; the pointer lives as long as module). */
static inline pyll_state_t *pyll_state (PyObject *module)
{
   return (pyll_state_t *)PyModule_GetState (module);
}

/* True once the interpreter exits (the package's atexit hook called
 * _shutdown(), or Python finalizes): a thread of the core must then call
 * no Python code. Any thread, GIL or not. */
bool pyll_exiting (void);

/* Creates a type of module m into *type (a new reference, which the state
 * keeps), and adds it to the module when public. 0 or -1. Every type of
 * the extension is a GC type (Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC |
 * flags) with a doc (or NULL), a dealloc, traverse, clear and methods;
 * extra holds its other slots (ended by { 0, NULL }), or is NULL. The
 * pointers are to static data (the type keeps name and members). */
int pyll_add_type (PyObject *m, PyTypeObject **type, bool public, const char *name, const char *doc,
                   Py_ssize_t basicsize, unsigned int flags, void *dealloc, void *traverse,
                   void *clear, PyMethodDef *methods, const PyType_Slot *extra);

/* What every type's dealloc does around drop, which drops what self owns
 * (its references, its core object): untracks self, clears its weak
 * references (a type with __weaklistoffset__), frees it and drops its
 * reference to its heap type. */
void pyll_dealloc (PyObject *self, void (*drop) (PyObject *self));

/* ---- the objects ------------------------------------------------------- */

/* leaselock._leaselock.Client: one leaselock_client_t. */
typedef struct
{
   PyObject_HEAD PyObject *module; /* strong: keeps the state alive */
   leaselock_client_t *c;          /* owned; NULL before __init__ */
   PyObject *uri;                  /* strong str, password replaced by the core */
   PyObject *backend;              /* strong str */
   PyObject *label;                /* strong str or None */
   int log_level;                  /* the level its core log hook is at */
   PyObject *weakreflist;
} ClientObject;

/* leaselock.Lease: one leaselock_lease_t, once acquired. */
typedef struct
{
   PyObject_HEAD PyObject *module; /* strong */
   ClientObject *client;           /* strong: the core client outlives the lease */
   leaselock_lease_t *lease;       /* owned; NULL until the acquire succeeded */
   PyObject *key;                  /* strong str */
   PyObject *on_lost;              /* strong callable, or NULL */
   PyObject *on_renew_failed;      /* strong callable, or NULL */
   pid_t pid;                      /* process that acquired it */
   bool dead;                      /* dealloc started: no callback may use it */
   PyObject *weakreflist;
} LeaseObject;

/* ---- errors.c ------------------------------------------------------------ */

/* The exception class for a core error code: borrowed (the state's, or a
 * builtin). */
PyObject *pyll_exc_class (pyll_state_t *st, leaselock_code_t code);

/* A new cls(message) with .code = the core's name for code, or NULL. cls
 * borrowed; message may end inside a UTF-8 sequence (decoded with
 * replacement). */
PyObject *pyll_new_error (PyObject *cls, leaselock_code_t code, const char *message);

/* Raise cls(message) with .code = the core's name for code; the error's
 * class and message; or cls (pyll_raise_invalid: ValueError,
 * pyll_raise_type: TypeError) with a printf message and code INVALID, as
 * the core names a bad argument. Each returns NULL. */
PyObject *pyll_raise_code (PyObject *cls, leaselock_code_t code, const char *message);
/* The exception object (not raised) of err, as pyll_raise_error raises it. */
PyObject *pyll_error_object (pyll_state_t *st, const leaselock_error_t *err);
PyObject *pyll_raise_error (pyll_state_t *st, const leaselock_error_t *err);
__attribute__ ((format (printf, 2, 3))) PyObject *pyll_raise_as (PyObject *cls, const char *fmt,
                                                                 ...);
#define pyll_raise_invalid(...) pyll_raise_as (PyExc_ValueError, __VA_ARGS__)
#define pyll_raise_type(...) pyll_raise_as (PyExc_TypeError, __VA_ARGS__)

/* ---- args.c -------------------------------------------------------------- */

/* The UTF-8 of str s (a pointer into s's own cache: valid while s lives),
 * its length in *n; NULL with ValueError naming the argument when s holds a
 * lone surrogate. */
const char *pyll_utf8_arg (PyObject *s, const char *name, Py_ssize_t *n);

/* A key or prefix (key borrowed): str, valid UTF-8, 1..255 bytes (0 also
 * with allow_empty), no NUL. *s points into the str's UTF-8 cache.
 * 0, or -1 with TypeError / ValueError naming the argument. */
int pyll_key_arg (PyObject *key, const char *name, bool allow_empty, const char **s, Py_ssize_t *n);

/* What a duration argument may be (args.c says the ranges). */
typedef enum
{
   SECS_TTL,
   SECS_DURATION,
   SECS_TIMEOUT
} pyll_secs_t;

/* A duration argument v (borrowed: int or float seconds, or a
 * datetime.timedelta) in milliseconds, range-checked for kind (-1: a
 * TIMEOUT of None or inf, forever). 0, or -1 with an exception. Imports
 * datetime the first time v is neither a number nor None. */
int pyll_seconds_arg (PyObject *v, const char *name, pyll_secs_t kind, int64_t *ms);

/* ---- fork.c -------------------------------------------------------------- */

/* Sets the cached process id up, once per process (module exec). */
void pyll_fork_init (void);

/* with.c: Lock's with-block bookkeeping (the per-pair path of _lock.py in
 * C) and the holds registry. */
int pyll_with_init (void);
extern PyMethodDef pyll_with_methods[];

/* The held / lost state of a Lease (lease must be a LeaseObject; borrowed). */
bool pyll_lease_held (PyObject *lease);
bool pyll_lease_lost (PyObject *lease);

/* Lease.__exit__ of a LeaseObject: releases it (see lease.c). last: the
 * caller's reference is the Lease's last one, which it drops next (the
 * core lease is then destroyed with the release, in one wait without the
 * GIL, instead of by the dealloc). */
PyObject *pyll_lease_exit (PyObject *lease, bool last);

/* This process's id, without a system call (refreshed in every child). */
pid_t pyll_pid (void);

/* ---- stamp.c ------------------------------------------------------------- */

/* Sets stamps up, once per process (module exec; never fails: without
 * them nothing is kept). */
void pyll_stamp_init (void);

/* Lets pyll_dict_stamp see changes of dict (borrowed; the caller keeps it
 * alive while it compares its stamps). 0, or -1 (no exception) when it
 * cannot: then compare no stamps of it. */
int pyll_dict_watch (PyObject *dict);

/* A stamp of dict (watched, borrowed): equal to an earlier stamp of it
 * only if dict did not change in between. With the GIL. */
uint64_t pyll_dict_stamp (PyObject *dict);

/* ---- log.c --------------------------------------------------------------- */

/* The lowest of DEBUG, INFO, WARNING, ERROR the logger is enabled for, else
 * LEASELOCK_LOG_OFF. With the GIL; never leaves an exception set. */
int pyll_log_level (void);

/* Moves self's core log hook to the logger's level (with the GIL). */
void pyll_log_refresh (ClientObject *self);

/* The core's log hook (leaselock_client_set_log): any thread, takes the
 * GIL. data unused. */
void pyll_log_hook (const leaselock_log_event_t *ev, void *data);

/* ---- client.c ------------------------------------------------------------ */

/* Creates the Client type into st->client_type (a new reference, kept by
 * the state) and adds it to module m. 0 or -1. */
int pyll_client_setup_types (PyObject *m, pyll_state_t *st);

/* True when self has no open core client (not initialised, or closed). */
bool pyll_client_closed (ClientObject *self);

/* 0 when self can take a call, else -1 with ValueError. */
int pyll_client_check (ClientObject *self);

/* ---- acquire.c ----------------------------------------------------------- */

/* The arguments of _acquire, _acquire_mode and _wait: every PyObject *
 * borrowed from the call's arguments (valid for the call). */
typedef struct
{
   PyObject *key;
   leaselock_acquire_opts_t o;
   PyObject *on_lost;         /* callable or None */
   PyObject *cancel;          /* None or an object with is_set() */
   PyObject *on_renew_failed; /* callable or None */
   PyObject *mode;            /* _acquire_mode only: "semaphore", "shared", "exclusive" */
   int64_t limit;             /* _acquire_mode only: the semaphore's limit */
   bool busy_raises;          /* a one try's BUSY raises (naming the holder), not None */
} pyll_acquire_args_t;

/* Parses a vectorcall's (args, nargs, kwnames) into *a; fn names the
 * method in messages, modes adds mode and limit. 0 or -1. */
int pyll_acquire_parse (PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, const char *fn,
                        bool modes, pyll_acquire_args_t *a);

/* Client._acquire with its arguments in *a (checked as pyll_acquire_parse
 * checks them): a new Lease, or NULL with the exception set. */
PyObject *pyll_acquire_lock (ClientObject *self, pyll_acquire_args_t *a);

/* Client._acquire and Client._acquire_mode (METH_FASTCALL|METH_KEYWORDS):
 * a new Lease, None (one try found the key busy), or NULL. */
PyObject *pyll_client_acquire (ClientObject *self, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames);
PyObject *pyll_client_acquire_mode (ClientObject *self, PyObject *const *args, Py_ssize_t nargs,
                                    PyObject *kwnames);

/* ---- lease.c ------------------------------------------------------------- */

/* Creates the Lease type into st->lease_type (a new reference, kept by the
 * state) and adds it to module m. 0 or -1. */
int pyll_lease_setup_types (PyObject *m, pyll_state_t *st);

/* A new Lease of client cl on key, not acquired yet (its lease NULL); it
 * takes references to cl, key and the callbacks (None: no callback). */
LeaseObject *pyll_lease_new (ClientObject *cl, PyObject *key, PyObject *on_lost,
                             PyObject *on_renew_failed);

/* Points the core's on_lost and on_renew_failed of o at lease's callbacks
 * (those it has). o keeps lease borrowed: the Lease must outlive the core
 * lease, which its dealloc destroys. */
void pyll_lease_hooks (LeaseObject *lease, leaselock_acquire_opts_t *o);

/* ---- wait.c -------------------------------------------------------------- */

/* Creates the _Wait type into st->wait_type (a new reference, kept by the
 * state; not added to the module: only Client._wait makes one). 0 or -1. */
int pyll_wait_setup_types (PyObject *m, pyll_state_t *st);

/* Creates the _LockBase type (with.c: Lock's with-block) into
 * st->lockbase_type (a new reference, kept by the state). */
int pyll_with_setup_types (PyObject *m, pyll_state_t *st);

/* _LockBase's __enter__ and __exit__ (METH_METHOD | METH_FASTCALL |
 * METH_KEYWORDS, cls: _LockBase), which bind.c calls directly. */
PyObject *pyll_lockbase_enter (PyObject *self, PyTypeObject *cls, PyObject *const *args,
                               Py_ssize_t nargs, PyObject *kwnames);
PyObject *pyll_lockbase_exit (PyObject *self, PyTypeObject *cls, PyObject *const *args,
                              Py_ssize_t nargs, PyObject *kwnames);

/* bind.c: makes _LockBase's __enter__ and __exit__ (st->lockbase_type
 * made) descriptors that bind without an allocation; creates their types
 * into st->withmethod_type and st->boundwith_type. 0 or -1. */
int pyll_with_bind (PyObject *m, pyll_state_t *st);

/* Client._wait (METH_FASTCALL|METH_KEYWORDS): a new _Wait, or NULL. */
PyObject *pyll_client_wait (ClientObject *self, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames);

#endif
