/*
 * with.c - what Lock's `with lock:` does per acquire/release pair around
 * the core's calls, in C: the self-wait check, the acquire, the note of
 * the hold and the push on the caller's stack on entry; the pop, the
 * release and the wake-up of this process's asyncio waiters on exit
 * (_lock.py keeps the same steps in Python for asyncio tasks, re-entry and
 * the lock kinds of _modes.py, and calls these for a thread's plain Lock).
 *
 * The holds registry (_holds_note, _holds_find): what one holder (a
 * thread, or an asyncio task) took through the lock objects of any
 * client, as a dict {name: [(weakref to the Lease, mode)], None:
 * prune threshold}, kept in the holder's own storage (_lock.py), so a
 * gone thread or task holds nothing. The leases are weak: a dropped
 * Lease is released.
 */
#include "module.h"

#include <stddef.h>
#include <structmember.h>

/* _LockBase: Lock's base, with the fields its with-block reads (Lock's
 * attributes of the same names, set by Lock.__init__; strong, NULL until
 * set), so that the block reads them without an attribute lookup. */
typedef struct
{
   PyObject_HEAD PyObject *client; /* _client: the Client */
   PyObject *key;                  /* _key: str */
   PyObject *wake;                 /* _wake: str, the name of its records */
   PyObject *ttl_ms;               /* _ttl_ms: int */
   PyObject *min_hold_ms;          /* _min_hold_ms: int */
   PyObject *auto_renew;           /* _auto_renew: bool */
   PyObject *on_lost;              /* _on_lost: callable or None */
   PyObject *on_renew_failed;      /* _on_renew_failed: callable or None */
   PyObject *fair;                 /* _fair: bool */
   PyObject *reentrant;            /* _reentrant: bool */
   PyObject *threads;              /* _threads: threading.local, .stack per thread */
   /* The last thread's stack, so that its with-blocks skip the
    * threading.local look-up (thread_stack): the stack of the thread whose
    * PyThreadState_GetID is stack_tid, read from stack_threads (strong: a
    * live object, so an equal pointer is the same local). The stack is
    * borrowed: that local keeps it while that thread lives (_lock.py sets
    * a thread's .stack only when it has none), and a thread id is never
    * reused, so a gone thread's is never read again. */
   PyObject *stack_threads;
   uint64_t stack_tid;
   PyObject *stack;
   /* A stack entry's tuple, (None, True), kept by the last pop for the
    * next push (strong, the only reference; NULL: none). */
   PyObject *spare;
   /* The holds registry of the thread of id reg_tid (lock_registry):
    * borrowed, as its thread state's dict keeps it while the thread lives,
    * unless a reset (holds_resets) dropped it. */
   PyObject *reg;
   uint64_t reg_tid, reg_resets;
} LockBaseObject;

/* A field of lock (a _LockBase) as a new reference; AttributeError when
 * unset, as its attribute would raise. */
static PyObject *field (PyObject *lock, size_t offset, const char *name)
{
   PyObject *v = *(PyObject **)((char *)lock + offset);
   if (v)
      return Py_NewRef (v);
   PyErr_Format (PyExc_AttributeError, "'%.100s' object has no attribute '%s'",
                 Py_TYPE (lock)->tp_name, name);
   return NULL;
}
#define FIELD(lock, f) field ((lock), offsetof (LockBaseObject, f), "_" #f)

/* sys.modules[name] as a new reference, NULL (no error) when missing. */
static PyObject *sys_module (PyObject *name)
{
   PyObject *mods = PyImport_GetModuleDict ();
   PyObject *m = mods ? PyDict_GetItemWithError (mods, name) : NULL;
   return Py_XNewRef (m);
}

/* Interned names, made once (pyll_with_init). */
#define WITH_NAMES(X)                                                                              \
   X (stack)                                                                                       \
   X (by_name)                                                                                     \
   X (_exit_py)                                                                                    \
   X (_get_running_loop)                                                                           \
   X (_notify)                                                                                     \
   X (__exit__)                                                                                    \
   X (_busy_error)                                                                                 \
   X (lock)

#define WITH_NAME_VAR(n) static PyObject *s##n;
WITH_NAMES (WITH_NAME_VAR)
#undef WITH_NAME_VAR

/* The key of a thread's registry in its thread state's dict. */
static PyObject *sholds_key;

int pyll_with_init (void)
{
#define WITH_NAME_MAKE(n)                                                                          \
   if (!s##n && !(s##n = PyUnicode_InternFromString (#n)))                                         \
      return -1;
   WITH_NAMES (WITH_NAME_MAKE)
#undef WITH_NAME_MAKE
   if (!sholds_key && !(sholds_key = PyUnicode_InternFromString ("leaselock._holds")))
      return -1;
   return 0;
}

/* The Lease an entry (weakref, mode) points to when it is alive and held,
 * else NULL. Borrowed: a live referent has other references, and the
 * callers run no Python code before they are done with it. */
static PyObject *entry_held (PyObject *entry)
{
   PyObject *ref = PyTuple_GET_ITEM (entry, 0), *lease;
#if PY_VERSION_HEX >= 0x030D0000
   if (PyWeakref_GetRef (ref, &lease) <= 0) {
      PyErr_Clear ();
      return NULL;
   }
   Py_DECREF (lease);
#else
   lease = PyWeakref_GetObject (ref);
   if (lease == Py_None)
      return NULL;
#endif
   return pyll_lease_held (lease) ? lease : NULL;
}

static bool nargs_ok (const char *fn, Py_ssize_t nargs, Py_ssize_t want)
{
   if (nargs == want)
      return true;
   PyErr_Format (PyExc_TypeError, "%s expected %zd arguments, got %zd", fn, want, nargs);
   return false;
}

/* Drops the entries of names whose leases are all gone, once the registry
 * grew past its threshold (then twice what is left, at least 64). */
static int holds_prune (PyObject *reg)
{
   if (PyDict_GET_SIZE (reg) <= 65) /* within the least threshold (and its None) */
      return 0;
   PyObject *at = PyDict_GetItemWithError (reg, Py_None);
   if (!at && PyErr_Occurred ())
      return -1;
   Py_ssize_t limit = at ? PyLong_AsSsize_t (at) : 64;
   if (limit < 0 && PyErr_Occurred ())
      return -1;
   if (PyDict_GET_SIZE (reg) - 1 <= limit)
      return 0;
   PyObject *names = PyDict_Keys (reg);
   if (!names)
      return -1;
   int rc = 0;
   for (Py_ssize_t i = 0; rc == 0 && i < PyList_GET_SIZE (names); i++) {
      PyObject *name = PyList_GET_ITEM (names, i);
      if (name == Py_None)
         continue;
      PyObject *entries = PyDict_GetItemWithError (reg, name);
      bool live = false;
      for (Py_ssize_t j = 0; entries && !live && j < PyList_GET_SIZE (entries); j++)
         live = entry_held (PyList_GET_ITEM (entries, j)) != NULL;
      if (entries && !live)
         rc = PyDict_DelItem (reg, name);
   }
   Py_DECREF (names);
   if (rc < 0)
      return -1;
   Py_ssize_t left = PyDict_GET_SIZE (reg) - 1;
   PyObject *next = PyLong_FromSsize_t (left * 2 > 64 ? left * 2 : 64);
   if (!next)
      return -1;
   rc = PyDict_SetItem (reg, Py_None, next);
   Py_DECREF (next);
   return rc;
}

/* Puts the entry (ref, mode) at index i of entries, a dead one's place
 * (i < its size) or a new one's (i == its size). The dead entry's tuple is
 * reused when the list alone holds it (one allocation less per acquire:
 * no one else can see it change). Takes ref's reference. */
static int entry_put (PyObject *entries, Py_ssize_t i, PyObject *ref, PyObject *mode)
{
   if (i < PyList_GET_SIZE (entries) && Py_REFCNT (PyList_GET_ITEM (entries, i)) == 1) {
      PyObject *e = PyList_GET_ITEM (entries, i);
      PyObject *old_ref = PyTuple_GET_ITEM (e, 0), *old_mode = PyTuple_GET_ITEM (e, 1);
      PyTuple_SET_ITEM (e, 0, ref);
      PyTuple_SET_ITEM (e, 1, Py_NewRef (mode));
      Py_DECREF (old_ref); /* a weak reference and a str, dropped once the tuple is whole */
      Py_DECREF (old_mode);
      if (!PyObject_GC_IsTracked (e)) /* as a new tuple of a weak reference is */
         PyObject_GC_Track (e);
      return 0;
   }
   PyObject *e = PyTuple_Pack (2, ref, mode);
   Py_DECREF (ref);
   int rc = !e                              ? -1
            : i < PyList_GET_SIZE (entries) ? PyList_SetItem (entries, i, Py_NewRef (e))
                                            : PyList_Append (entries, e);
   Py_XDECREF (e);
   return rc;
}

/* Notes in reg (a holder's registry) that it holds lease on the records
 * name in mode; the entries of leases no longer held are dropped, the
 * first's place (at the end, the order kept) taking the new entry. */
static int holds_note (PyObject *reg, PyObject *name, PyObject *lease, PyObject *mode)
{
   PyObject *entries = PyDict_GetItemWithError (reg, name);
   if (!entries && PyErr_Occurred ())
      return -1;
   if (entries && PyList_Check (entries))
      Py_INCREF (entries);
   else if (!(entries = PyList_New (0)) || PyDict_SetItem (reg, name, entries) < 0)
      goto fail;
   /* The held entries move to the front, in their order, and the dead
    * ones behind them (swapped: the list stays whole, nothing freed). */
   Py_ssize_t n = PyList_GET_SIZE (entries), kept = 0;
   for (Py_ssize_t i = 0; i < n; i++) {
      PyObject *e = PyList_GET_ITEM (entries, i);
      if (!entry_held (e))
         continue;
      PyList_SET_ITEM (entries, i, PyList_GET_ITEM (entries, kept));
      PyList_SET_ITEM (entries, kept++, e);
   }
   if (kept + 1 < n && PyList_SetSlice (entries, kept + 1, n, NULL) < 0)
      goto fail;
   PyObject *ref = PyWeakref_NewRef (lease, NULL);
   if (!ref || entry_put (entries, kept, ref, mode) < 0)
      goto fail;
   Py_DECREF (entries);
   return holds_prune (reg);
fail:
   Py_XDECREF (entries);
   return -1;
}

/* True (1) when reg notes a held lease of client on name; -1 on error. */
static int holds_any (PyObject *reg, PyObject *client, PyObject *name)
{
   PyObject *entries = PyDict_GetItemWithError (reg, name);
   if (!entries)
      return PyErr_Occurred () ? -1 : 0;
   for (Py_ssize_t i = 0; i < PyList_GET_SIZE (entries); i++) {
      PyObject *lease = entry_held (PyList_GET_ITEM (entries, i));
      if (lease && (PyObject *)((LeaseObject *)lease)->client == client)
         return 1;
   }
   return 0;
}

/* _holds_note(reg, name, lease, mode) */
static PyObject *mod_holds_note (PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
   if (!nargs_ok ("_holds_note", nargs, 4))
      return NULL;
   if (!PyDict_Check (args[0]) || !PyObject_TypeCheck (args[2], pyll_state (m)->lease_type))
      return pyll_raise_type ("_holds_note(dict, str, Lease, str)");
   if (holds_note (args[0], args[1], args[2], args[3]) < 0)
      return NULL;
   Py_RETURN_NONE;
}

/* _holds_find(reg, client, name): [(lease, mode)] of the held leases of
 * client on name in reg, the last taken first. */
static PyObject *mod_holds_find (PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
   (void)m;
   if (!nargs_ok ("_holds_find", nargs, 3))
      return NULL;
   if (!PyDict_Check (args[0]))
      return pyll_raise_type ("_holds_find(dict, Client, str)");
   PyObject *out = PyList_New (0);
   PyObject *entries = out ? PyDict_GetItemWithError (args[0], args[2]) : NULL;
   if (!entries)
      return out && PyErr_Occurred () ? (Py_DECREF (out), NULL) : out;
   for (Py_ssize_t i = PyList_GET_SIZE (entries) - 1; i >= 0; i--) {
      PyObject *e = PyList_GET_ITEM (entries, i);
      PyObject *lease = entry_held (e);
      if (!lease || (PyObject *)((LeaseObject *)lease)->client != args[1])
         continue;
      PyObject *t = PyTuple_Pack (2, lease, PyTuple_GET_ITEM (e, 1));
      if (!t || PyList_Append (out, t) < 0) {
         Py_XDECREF (t);
         Py_DECREF (out);
         return NULL;
      }
      Py_DECREF (t);
   }
   return out;
}

/* What loop_running read last, kept while it is unchanged (stamp.c): the
 * stamp of sys.modules when asyncio was missing from it; or, once
 * imported, asyncio._get_running_loop (strong) while both sys.modules and
 * asyncio's dict keep their stamps. */
static enum { AIO_UNREAD, AIO_MISSING, AIO_FOUND } aio_kept;
static uint64_t aio_mods_stamp, aio_dict_stamp;
static PyObject *aio_dict, *aio_get_loop;

/* asyncio._get_running_loop, borrowed (NULL without error when asyncio
 * is not imported), read from sys.modules mods; kept when both dicts can
 * be watched. */
static PyObject *aio_get_loop_read (PyObject *mods)
{
   static PyObject *name;
   if (!name && !(name = PyUnicode_InternFromString ("asyncio")))
      return NULL;
   aio_kept = AIO_UNREAD;
   uint64_t stamp = pyll_dict_stamp (mods);
   PyObject *aio = sys_module (name);
   if (!aio) {
      if (!PyErr_Occurred () && pyll_dict_watch (mods) == 0) {
         aio_kept = AIO_MISSING;
         aio_mods_stamp = stamp;
      }
      return NULL;
   }
   PyObject *fn = PyObject_GetAttr (aio, s_get_running_loop);
   PyObject *d = fn ? PyObject_GenericGetDict (aio, NULL) : NULL;
   Py_DECREF (aio);
   if (!d) {
      Py_XDECREF (fn);
      return NULL;
   }
   Py_XSETREF (aio_get_loop, fn);
   Py_XSETREF (aio_dict, d);
   if (pyll_dict_watch (mods) == 0 && pyll_dict_watch (d) == 0) {
      aio_kept = AIO_FOUND;
      aio_mods_stamp = stamp;
      aio_dict_stamp = pyll_dict_stamp (d);
   }
   return aio_get_loop;
}

/* 1 when an asyncio event loop runs on this thread (the caller may be a
 * task: _lock.py's path), 0 when none does, -1 on error. A program that
 * never imported asyncio runs none. */
static int loop_running (void)
{
   PyObject *mods = PyImport_GetModuleDict ();
   PyObject *fn = NULL;
   if (aio_kept != AIO_UNREAD && pyll_dict_stamp (mods) == aio_mods_stamp &&
       (aio_kept == AIO_MISSING || pyll_dict_stamp (aio_dict) == aio_dict_stamp))
      fn = aio_kept == AIO_FOUND ? aio_get_loop : NULL;
   else if (!(fn = aio_get_loop_read (mods)))
      return PyErr_Occurred () ? -1 : 0;
   if (!fn)
      return 0;
   PyObject *loop = PyObject_CallNoArgs (fn);
   if (!loop)
      return -1;
   int running = loop != Py_None;
   Py_DECREF (loop);
   return running;
}

/* getattr(o, name, None) as a new reference (NULL on another error). */
static PyObject *attr_or_none (PyObject *o, PyObject *name)
{
   PyObject *v = PyObject_GetAttr (o, name);
   if (v || !PyErr_ExceptionMatches (PyExc_AttributeError))
      return v;
   PyErr_Clear ();
   return Py_NewRef (Py_None);
}

/* Caches stack as the calling thread's on lock, read from threads. */
static void stack_cache_set (LockBaseObject *lock, PyObject *threads, PyObject *stack)
{
   lock->stack = stack;
   lock->stack_tid = PyThreadState_GetID (PyThreadState_Get ());
   /* Last: dropping an old local may run code that reads the cache. */
   Py_XSETREF (lock->stack_threads, Py_NewRef (threads));
}

/* The calling thread's stack on lock (its _threads.stack: a list of
 * (lease, block)), None when it has none yet; a new reference. */
static PyObject *thread_stack (PyObject *o)
{
   LockBaseObject *lock = (LockBaseObject *)o;
   if (lock->stack && lock->threads == lock->stack_threads &&
       lock->stack_tid == PyThreadState_GetID (PyThreadState_Get ()))
      return Py_NewRef (lock->stack);
   PyObject *threads = FIELD (o, threads);
   PyObject *stack = threads ? attr_or_none (threads, sstack) : NULL;
   if (stack && PyList_Check (stack))
      stack_cache_set (lock, threads, stack);
   Py_XDECREF (threads);
   return stack;
}

/* 1 when a lease of stack (a list of (lease, block)) is held. */
static int stack_holds (PyObject *stack)
{
   for (Py_ssize_t i = 0; PyList_Check (stack) && i < PyList_GET_SIZE (stack); i++)
      if (pyll_lease_held (PyTuple_GET_ITEM (PyList_GET_ITEM (stack, i), 0)))
         return 1;
   return 0;
}

/* The registry of the calling thread, in its thread state's dict (which
 * threading.local also keeps its values in: it goes with the thread),
 * made when missing (new reference). */
static PyObject *thread_registry (void)
{
   PyObject *tsd = PyThreadState_GetDict ();
   if (!tsd)
      return pyll_raise_type ("no thread state dict");
   PyObject *reg = PyDict_GetItemWithError (tsd, sholds_key);
   if (reg || PyErr_Occurred ())
      return Py_XNewRef (reg);
   reg = PyDict_New ();
   if (reg && PyDict_SetItem (tsd, sholds_key, reg) < 0)
      Py_CLEAR (reg);
   return reg;
}

/* Counts the resets of a thread's registry (_thread_holds_reset): one
 * kept by a lock from before one is not read again. */
static uint64_t holds_resets;

/* thread_registry(), kept by lock for the next with-block of the thread
 * (new reference). */
static PyObject *lock_registry (PyObject *o)
{
   LockBaseObject *lock = (LockBaseObject *)o;
   uint64_t tid = PyThreadState_GetID (PyThreadState_Get ());
   if (lock->reg && lock->reg_tid == tid && lock->reg_resets == holds_resets)
      return Py_NewRef (lock->reg);
   PyObject *reg = thread_registry ();
   if (reg) {
      lock->reg = reg;
      lock->reg_tid = tid;
      lock->reg_resets = holds_resets;
   }
   return reg;
}

/* _thread_holds(): the calling thread's registry. */
static PyObject *mod_thread_holds (PyObject *m, PyObject *unused)
{
   (void)m;
   (void)unused;
   return thread_registry ();
}

/* _thread_holds_reset(): a forked child's thread forgets its registry
 * (the other threads are not in the child). */
static PyObject *mod_thread_holds_reset (PyObject *m, PyObject *unused)
{
   (void)m;
   (void)unused;
   PyObject *tsd = PyThreadState_GetDict ();
   holds_resets++;
   int has = tsd ? PyDict_Contains (tsd, sholds_key) : 0;
   if (has < 0 || (has && PyDict_DelItem (tsd, sholds_key) < 0))
      return NULL;
   Py_RETURN_NONE;
}

/* The int field o (a new reference, or NULL) into *v. */
static int int_field (PyObject *o, int64_t *v)
{
   if (!o)
      return -1;
   *v = PyLong_AsLongLong (o);
   Py_DECREF (o);
   return *v == -1 && PyErr_Occurred () ? -1 : 0;
}

/* The bool field o (a new reference, or NULL) into *v. */
static int bool_field (PyObject *o, bool *v)
{
   int t = o ? PyObject_IsTrue (o) : -1;
   Py_XDECREF (o);
   *v = t > 0;
   return t < 0 ? -1 : 0;
}

/* Lock._acquire_ms(-1, None, True): the core's blocking acquire, with the
 * arguments _acquire would get, checked as it checks them. */
static PyObject *lock_acquire (PyObject *m, PyObject *lock, PyObject *client)
{
   pyll_acquire_args_t a = { 0 };
   leaselock_acquire_opts_init (&a.o);
   a.cancel = a.mode = Py_None;
   a.busy_raises = true;
   a.o.timeout_ms = -1; /* wait without end */
   PyObject *result = NULL;
   if (!PyObject_TypeCheck (client, pyll_state (m)->client_type))
      return pyll_raise_type ("_acquire needs a leaselock.Client");
   if (!(a.key = FIELD (lock, key)) || !(a.on_lost = FIELD (lock, on_lost)) ||
       !(a.on_renew_failed = FIELD (lock, on_renew_failed)) ||
       int_field (FIELD (lock, ttl_ms), &a.o.ttl_ms) < 0 ||
       int_field (FIELD (lock, min_hold_ms), &a.o.min_hold_ms) < 0 ||
       bool_field (FIELD (lock, auto_renew), &a.o.auto_renew) < 0 ||
       bool_field (FIELD (lock, fair), &a.o.fair) < 0)
      goto done;
   if (a.on_lost != Py_None && !PyCallable_Check (a.on_lost))
      pyll_raise_type ("on_lost must be callable or None, not %.100s",
                       Py_TYPE (a.on_lost)->tp_name);
   else if (a.on_renew_failed != Py_None && !PyCallable_Check (a.on_renew_failed))
      pyll_raise_type ("on_renew_failed must be callable or None, not %.100s",
                       Py_TYPE (a.on_renew_failed)->tp_name);
   else
      result = pyll_acquire_lock ((ClientObject *)client, &a);
done:
   Py_XDECREF (a.key);
   Py_XDECREF (a.on_lost);
   Py_XDECREF (a.on_renew_failed);
   return result;
}

/* Pushes (lease, True) on the calling thread's stack of lock (made when
 * missing), after forgetting the leases released meanwhile (neither held
 * nor lost), as Lock._push. */
static int stack_push (PyObject *lock, PyObject *stack, PyObject *lease)
{
   if (stack == Py_None) {
      PyObject *threads = FIELD (lock, threads);
      PyObject *made = threads ? PyList_New (0) : NULL;
      int rc = made ? PyObject_SetAttr (threads, sstack, made) : -1;
      if (rc == 0) {
         stack_cache_set ((LockBaseObject *)lock, threads, made);
         rc = stack_push (lock, made, lease);
      }
      Py_XDECREF (threads);
      Py_XDECREF (made);
      return rc;
   }
   if (!PyList_Check (stack))
      return pyll_raise_type ("Lock stack must be a list"), -1;
   Py_ssize_t n = PyList_GET_SIZE (stack);
   for (Py_ssize_t i = n - 1; i >= 0; i--) {
      PyObject *l = PyTuple_GET_ITEM (PyList_GET_ITEM (stack, i), 0);
      if (!pyll_lease_held (l) && !pyll_lease_lost (l) &&
          PyList_SetSlice (stack, i, i + 1, NULL) < 0)
         return -1;
   }
   PyObject *e = ((LockBaseObject *)lock)->spare;
   if (e) {
      ((LockBaseObject *)lock)->spare = NULL;
      PyTuple_SET_ITEM (e, 0, Py_NewRef (lease)); /* in place of None */
      Py_DECREF (Py_None);
      if (!PyObject_GC_IsTracked (e)) /* the GC untracks a tuple of None and True */
         PyObject_GC_Track (e);
   } else
      e = PyTuple_Pack (2, lease, Py_True);
   int rc = e ? PyList_Append (stack, e) : -1;
   Py_XDECREF (e);
   return rc;
}

/* 1 when `with lock:` takes the Python path (an event loop runs here, the
 * lock is reentrant, or the caller holds the key: the path re-enters or
 * raises the self-wait error), 0 when it takes the fast path, -1 error. */
static int enter_slow (PyObject *lock, PyObject *stack, PyObject *reg, PyObject *client,
                       PyObject *wake)
{
   int r = loop_running ();
   if (r != 0)
      return r;
   PyObject *re = FIELD (lock, reentrant);
   if (!re)
      return -1;
   r = PyObject_IsTrue (re);
   Py_DECREF (re);
   if (r != 0)
      return r;
   if (stack_holds (stack))
      return 1;
   return holds_any (reg, client, wake);
}

/* Lock.__enter__ (m: the extension's module): _take(-1, True) in C for a
 * thread's plain Lock; its Python path for the rest (enter_slow). */
static PyObject *lock_enter (PyObject *m, PyObject *lock)
{
   PyObject *lease = NULL, *reg = NULL, *client = NULL, *wake = NULL;
   PyObject *stack = thread_stack (lock);
   if (!stack || !(reg = lock_registry (lock)) || !(client = FIELD (lock, client)) ||
       !(wake = FIELD (lock, wake)))
      goto done;
   int slow = PyDict_Check (reg) ? enter_slow (lock, stack, reg, client, wake) : 1;
   if (slow > 0)
      lease = PyObject_CallMethod (lock, "_take", "iO", -1, Py_True);
   else if (slow == 0 && (lease = lock_acquire (m, lock, client)) != NULL &&
            !PyObject_TypeCheck (lease, pyll_state (m)->lease_type)) {
      /* None (busy) cannot come from a wait without end; as _take would. */
      PyObject *e = PyObject_CallMethodNoArgs (lock, s_busy_error);
      if (e)
         PyErr_SetObject ((PyObject *)Py_TYPE (e), e);
      Py_XDECREF (e);
      Py_CLEAR (lease);
   } else if (lease &&
              (holds_note (reg, wake, lease, slock) < 0 || stack_push (lock, stack, lease) < 0))
      Py_CLEAR (lease);
done:
   Py_XDECREF (stack);
   Py_XDECREF (reg);
   Py_XDECREF (client);
   Py_XDECREF (wake);
   return lease;
}

/* Drops e, a stack entry popped (its reference ours), or keeps it as the
 * lock's spare for the next push when no one else holds it. */
static void spare_keep (LockBaseObject *lock, PyObject *e)
{
   if (lock->spare || Py_REFCNT (e) != 1 || PyTuple_GET_ITEM (e, 1) != Py_True) {
      Py_DECREF (e);
      return;
   }
   PyObject *lease = PyTuple_GET_ITEM (e, 0);
   PyTuple_SET_ITEM (e, 0, Py_NewRef (Py_None));
   lock->spare = e;
   Py_DECREF (lease); /* last: may run code (the caller holds a reference, though) */
}

/* Takes the lease of the calling thread's innermost with-block on lock
 * off its stack (NULL without error when there is none). */
static PyObject *stack_pop_block (PyObject *lock)
{
   PyObject *stack = thread_stack (lock);
   PyObject *lease = NULL;
   for (Py_ssize_t i = stack && PyList_Check (stack) ? PyList_GET_SIZE (stack) - 1 : -1; i >= 0;
        i--) {
      PyObject *e = PyList_GET_ITEM (stack, i);
      if (PyTuple_GET_ITEM (e, 1) != Py_True)
         continue;
      lease = Py_NewRef (PyTuple_GET_ITEM (e, 0));
      if (i == PyList_GET_SIZE (stack) - 1 && ((PyListObject *)stack)->allocated > (i + 1) / 2) {
         /* list.pop() of the last item, as Cython's does it (no call, no
          * copy): the list's reference becomes ours. The allocation stays
          * (while over half used, as list_resize would keep it). */
         Py_SET_SIZE (stack, i);
         spare_keep ((LockBaseObject *)lock, e);
      } else if (PyList_SetSlice (stack, i, i + 1, NULL) < 0)
         Py_CLEAR (lease);
      break;
   }
   Py_XDECREF (stack);
   return lease;
}

/* _aio._wakers (key -> the tasks polling for it), which _aio hands over
 * when imported (_aio_wakers), so that each exit reads it without looking
 * the module up; NULL until then: no task polls. */
static PyObject *aio_wakers;

/* _aio_wakers(wakers): _aio's import registers its _wakers dict. */
static PyObject *mod_aio_wakers (PyObject *m, PyObject *wakers)
{
   (void)m;
   if (!PyDict_Check (wakers))
      return pyll_raise_type ("_aio_wakers(dict)");
   Py_XSETREF (aio_wakers, Py_NewRef (wakers));
   Py_RETURN_NONE;
}

/* _aio._notify(wake) when a task of this process polls for wake (a
 * release wakes it); nothing to do, and no call, when none does. */
static int notify_waiters (PyObject *wake)
{
   if (!aio_wakers || PyDict_GET_SIZE (aio_wakers) == 0)
      return 0; /* no task polls, for any key */
   int rc = PyDict_Contains (aio_wakers, wake);
   if (rc <= 0)
      return rc;
   static PyObject *name;
   if (!name && !(name = PyUnicode_InternFromString ("leaselock._aio")))
      return -1;
   PyObject *aio = sys_module (name);
   if (!aio)
      return PyErr_Occurred () ? -1 : 0; /* taken out of sys.modules: as not imported */
   PyObject *r = PyObject_CallMethodOneArg (aio, s_notify, wake);
   Py_DECREF (aio);
   rc = r ? 0 : -1;
   Py_XDECREF (r);
   return rc;
}

/* notify_waiters(wake) once the release raised, as a finally block: the
 * waiters are woken all the same; an error of the wake-up itself replaces
 * the release's (wake NULL: that error). */
static int notify_after_error (PyObject *wake)
{
#if PY_VERSION_HEX >= 0x030C0000
   PyObject *raised = PyErr_GetRaisedException ();
#else
   PyObject *et, *ev, *tb;
   PyErr_Fetch (&et, &ev, &tb);
#endif
   int rc = wake ? notify_waiters (wake) : -1;
#if PY_VERSION_HEX >= 0x030C0000
   if (rc < 0)
      Py_XDECREF (raised);
   else
      PyErr_SetRaisedException (raised);
#else
   if (rc < 0) {
      Py_XDECREF (et);
      Py_XDECREF (ev);
      Py_XDECREF (tb);
   } else
      PyErr_Restore (et, ev, tb);
#endif
   return rc;
}

/* Lock.__exit__(et, ev, tb) (args[0] the lock): _exit_py in C outside an
 * event loop. */
static PyObject *lock_exit (pyll_state_t *st, PyObject *const *args)
{
   int r = loop_running ();
   if (r != 0)
      return r < 0 ? NULL : PyObject_VectorcallMethod (s_exit_py, args, 4, NULL);
   PyObject *lease = stack_pop_block (args[0]);
   if (!lease)
      return PyErr_Occurred () ? NULL : Py_NewRef (Py_None);
   /* Lease.__exit__ reads none of its arguments: the extension's own. */
   PyObject *res = PyObject_TypeCheck (lease, st->lease_type)
                     ? pyll_lease_exit (lease, Py_REFCNT (lease) == 1)
                     : PyObject_VectorcallMethod (
                         s__exit__, (PyObject *[]){ lease, args[1], args[2], args[3] }, 4, NULL);
   Py_DECREF (lease);
   PyObject *wake = FIELD (args[0], wake);
   int rc = res ? (wake ? notify_waiters (wake) : -1) : notify_after_error (wake);
   Py_XDECREF (wake);
   if (rc < 0) {
      Py_XDECREF (res);
      return NULL;
   }
   if (!res)
      return NULL;
   Py_DECREF (res);
   Py_RETURN_NONE;
}

PyMethodDef pyll_with_methods[] = {
   { "_holds_note", (PyCFunction)(void (*) (void))mod_holds_note, METH_FASTCALL, NULL },
   { "_holds_find", (PyCFunction)(void (*) (void))mod_holds_find, METH_FASTCALL, NULL },
   { "_thread_holds", mod_thread_holds, METH_NOARGS, NULL },
   { "_thread_holds_reset", mod_thread_holds_reset, METH_NOARGS, NULL },
   { "_aio_wakers", mod_aio_wakers, METH_O, NULL },
   { NULL, NULL, 0, NULL },
};

/* _LockBase: the with-block of Lock (its base), as methods of a type, so
 * that `with lock:` runs no Python code of the package. */
PyObject *pyll_lockbase_enter (PyObject *self, PyTypeObject *cls, PyObject *const *args,
                               Py_ssize_t nargs, PyObject *kwnames)
{
   (void)args;
   if (nargs || (kwnames && PyTuple_GET_SIZE (kwnames)))
      return pyll_raise_type ("__enter__() takes no arguments");
   PyObject *m = PyType_GetModule (cls);
   return m ? lock_enter (m, self) : NULL;
}

PyObject *pyll_lockbase_exit (PyObject *self, PyTypeObject *cls, PyObject *const *args,
                              Py_ssize_t nargs, PyObject *kwnames)
{
   if (nargs != 3 || (kwnames && PyTuple_GET_SIZE (kwnames)))
      return pyll_raise_type ("__exit__() takes 3 positional arguments");
   PyObject *m = PyType_GetModule (cls);
   PyObject *v[4] = { self, args[0], args[1], args[2] };
   return m ? lock_exit (pyll_state (m), v) : NULL;
}

static PyMethodDef LockBase_methods[] = {
   { "__enter__", (PyCFunction)(void (*) (void))pyll_lockbase_enter,
     METH_METHOD | METH_FASTCALL | METH_KEYWORDS, NULL },
   { "__exit__", (PyCFunction)(void (*) (void))pyll_lockbase_exit,
     METH_METHOD | METH_FASTCALL | METH_KEYWORDS, NULL },
   { NULL, NULL, 0, NULL },
};

#define LOCKBASE_MEMBER(f) { "_" #f, T_OBJECT_EX, offsetof (LockBaseObject, f), 0, NULL },
#define LOCKBASE_FIELDS(X)                                                                         \
   X (client)                                                                                      \
   X (key)                                                                                         \
   X (wake)                                                                                        \
   X (ttl_ms)                                                                                      \
   X (min_hold_ms)                                                                                 \
   X (auto_renew)                                                                                  \
   X (on_lost)                                                                                     \
   X (on_renew_failed)                                                                             \
   X (fair)                                                                                        \
   X (reentrant)                                                                                   \
   X (threads)

static PyMemberDef LockBase_members[] = { LOCKBASE_FIELDS (LOCKBASE_MEMBER){ NULL } };

static int LockBase_traverse (LockBaseObject *self, visitproc visit, void *arg)
{
   Py_VISIT (Py_TYPE (self));
#define LOCKBASE_VISIT(f) Py_VISIT (self->f);
   LOCKBASE_FIELDS (LOCKBASE_VISIT)
#undef LOCKBASE_VISIT
   Py_VISIT (self->stack_threads);
   Py_VISIT (self->spare);
   return 0;
}

static int LockBase_clear (LockBaseObject *self)
{
#define LOCKBASE_CLEAR(f) Py_CLEAR (self->f);
   LOCKBASE_FIELDS (LOCKBASE_CLEAR)
#undef LOCKBASE_CLEAR
   self->stack = NULL;
   Py_CLEAR (self->stack_threads);
   Py_CLEAR (self->spare);
   self->reg = NULL;
   return 0;
}

static void LockBase_drop (PyObject *self)
{
   LockBase_clear ((LockBaseObject *)self);
}

static void LockBase_dealloc (PyObject *self)
{
   pyll_dealloc (self, LockBase_drop);
}

static const PyType_Slot LockBase_slots[] = { { Py_tp_members, LockBase_members }, { 0, NULL } };

int pyll_with_setup_types (PyObject *m, pyll_state_t *st)
{
   return pyll_add_type (m, &st->lockbase_type, true, "leaselock._leaselock._LockBase", NULL,
                         sizeof (LockBaseObject), Py_TPFLAGS_BASETYPE, LockBase_dealloc,
                         LockBase_traverse, LockBase_clear, LockBase_methods, LockBase_slots);
}
