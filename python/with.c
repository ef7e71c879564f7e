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

/* Interned names, made once (pyll_with_init). */
#define WITH_NAMES(X)                                                                              \
   X (_reentrant)                                                                                  \
   X (_threads)                                                                                    \
   X (stack)                                                                                       \
   X (by_name)                                                                                     \
   X (_client)                                                                                     \
   X (_key)                                                                                        \
   X (_wake)                                                                                       \
   X (_ttl_ms)                                                                                     \
   X (_min_hold_ms)                                                                                \
   X (_auto_renew)                                                                                 \
   X (_on_lost)                                                                                    \
   X (_on_renew_failed)                                                                            \
   X (_fair)                                                                                       \
   X (_take)                                                                                       \
   X (_exit_py)                                                                                    \
   X (_acquire)                                                                                    \
   X (_get_running_loop)                                                                           \
   X (_wakers)                                                                                     \
   X (_notify)                                                                                     \
   X (__exit__)                                                                                    \
   X (_busy_error)                                                                                 \
   X (lock)

#define WITH_NAME_VAR(n) static PyObject *s##n;
WITH_NAMES (WITH_NAME_VAR)
#undef WITH_NAME_VAR

/* The keywords of Client._acquire as Lock._acquire_ms passes them. */
static PyObject *acquire_kwnames;

int pyll_with_init (void)
{
#define WITH_NAME_MAKE(n)                                                                          \
   if (!s##n && !(s##n = PyUnicode_InternFromString (#n)))                                         \
      return -1;
   WITH_NAMES (WITH_NAME_MAKE)
#undef WITH_NAME_MAKE
   if (!acquire_kwnames)
      acquire_kwnames =
        Py_BuildValue ("(sssssssss)", "ttl_ms", "timeout_ms", "min_hold_ms", "auto_renew",
                       "on_lost", "cancel", "on_renew_failed", "fair", "busy_raises");
   return acquire_kwnames ? 0 : -1;
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

/* Notes in reg (a holder's registry) that it holds lease on the records
 * name in mode; the entries of leases no longer held are dropped. */
static int holds_note (PyObject *reg, PyObject *name, PyObject *lease, PyObject *mode)
{
   PyObject *old = PyDict_GetItemWithError (reg, name);
   if (!old && PyErr_Occurred ())
      return -1;
   PyObject *entries = PyList_New (0);
   if (!entries)
      return -1;
   for (Py_ssize_t i = 0; old && i < PyList_GET_SIZE (old); i++) {
      PyObject *e = PyList_GET_ITEM (old, i);
      if (entry_held (e) && PyList_Append (entries, e) < 0)
         goto fail;
   }
   PyObject *ref = PyWeakref_NewRef (lease, NULL);
   PyObject *e = ref ? PyTuple_Pack (2, ref, mode) : NULL;
   Py_XDECREF (ref);
   if (!e || PyList_Append (entries, e) < 0) {
      Py_XDECREF (e);
      goto fail;
   }
   Py_DECREF (e);
   if (PyDict_SetItem (reg, name, entries) < 0)
      goto fail;
   Py_DECREF (entries);
   return holds_prune (reg);
fail:
   Py_DECREF (entries);
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

/* 1 when an asyncio event loop runs on this thread (the caller may be a
 * task: _lock.py's path), 0 when none does, -1 on error. A program that
 * never imported asyncio runs none. */
static int loop_running (void)
{
   static PyObject *name;
   if (!name && !(name = PyUnicode_InternFromString ("asyncio")))
      return -1;
   PyObject *aio = PyImport_GetModule (name);
   if (!aio)
      return PyErr_Occurred () ? -1 : 0;
   PyObject *loop = PyObject_CallMethodNoArgs (aio, s_get_running_loop);
   Py_DECREF (aio);
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

/* 1 when a lease of stack (a list of (lease, block)) is held. */
static int stack_holds (PyObject *stack)
{
   for (Py_ssize_t i = 0; PyList_Check (stack) && i < PyList_GET_SIZE (stack); i++)
      if (pyll_lease_held (PyTuple_GET_ITEM (PyList_GET_ITEM (stack, i), 0)))
         return 1;
   return 0;
}

/* The registry of the calling thread: holds.by_name, made when missing. */
static PyObject *thread_registry (PyObject *holds)
{
   PyObject *reg = attr_or_none (holds, sby_name);
   if (!reg || reg != Py_None)
      return reg;
   Py_DECREF (reg);
   reg = PyDict_New ();
   if (reg && PyObject_SetAttr (holds, sby_name, reg) < 0)
      Py_CLEAR (reg);
   return reg;
}

/* Lock._acquire_ms(-1, None, True): the core's blocking acquire. */
static PyObject *lock_acquire (PyObject *lock, PyObject *client)
{
   PyObject *v[12] = { NULL, client };
   PyObject *const names[] = { s_key,         s_ttl_ms,          NULL,
                               s_min_hold_ms, s_auto_renew,      s_on_lost,
                               NULL,          s_on_renew_failed, s_fair };
   PyObject *result = NULL;
   int n = 2;
   for (size_t i = 0; i < sizeof names / sizeof names[0]; i++, n++) {
      if (!names[i])
         v[n] = Py_NewRef (Py_None);
      else if (!(v[n] = PyObject_GetAttr (lock, names[i])))
         goto done;
   }
   Py_SETREF (v[4], PyLong_FromLong (-1)); /* timeout_ms: wait without end */
   v[n++] = Py_NewRef (Py_True);           /* busy_raises */
   if (v[4])
      result = PyObject_VectorcallMethod (s_acquire, v + 1, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                          acquire_kwnames);
done:
   for (int i = 2; i < n; i++)
      Py_XDECREF (v[i]);
   return result;
}

/* Pushes (lease, True) on the calling thread's stack of lock (made when
 * missing), after forgetting the leases released meanwhile (neither held
 * nor lost), as Lock._push. */
static int stack_push (PyObject *threads, PyObject *stack, PyObject *lease)
{
   if (stack == Py_None) {
      PyObject *made = PyList_New (0);
      int rc = made ? PyObject_SetAttr (threads, sstack, made) : -1;
      if (rc == 0)
         rc = stack_push (threads, made, lease);
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
   PyObject *e = PyTuple_Pack (2, lease, Py_True);
   int rc = e ? PyList_Append (stack, e) : -1;
   Py_XDECREF (e);
   return rc;
}

/* 1 when `with lock:` takes the Python path (an event loop runs here, the
 * lock is reentrant, or the caller holds the key: the path re-enters or
 * raises the self-wait error), 0 when it takes the fast path, -1 error. */
static int enter_slow (PyObject *lock,
                       PyObject *stack,
                       PyObject *reg,
                       PyObject *client,
                       PyObject *wake)
{
   int r = loop_running ();
   if (r != 0)
      return r;
   PyObject *re = PyObject_GetAttr (lock, s_reentrant);
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

/* _lock_enter(lock, holds): Lock.__enter__ for a plain Lock (holds: the
 * thread-local storage of the thread registries, _lock._thread_holds). */
static PyObject *mod_lock_enter (PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
   if (!nargs_ok ("_lock_enter", nargs, 2))
      return NULL;
   PyObject *lock = args[0], *lease = NULL, *stack = NULL, *reg = NULL, *client = NULL;
   PyObject *wake = NULL, *threads = PyObject_GetAttr (lock, s_threads);
   if (!threads || !(stack = attr_or_none (threads, sstack)) ||
       !(reg = thread_registry (args[1])) || !(client = PyObject_GetAttr (lock, s_client)) ||
       !(wake = PyObject_GetAttr (lock, s_wake)))
      goto done;
   int slow = PyDict_Check (reg) ? enter_slow (lock, stack, reg, client, wake) : 1;
   if (slow > 0)
      lease = PyObject_CallMethod (lock, "_take", "iO", -1, Py_True);
   else if (slow == 0 && (lease = lock_acquire (lock, client)) != NULL &&
            !PyObject_TypeCheck (lease, pyll_state (m)->lease_type)) {
      /* None (busy) cannot come from a wait without end; as _take would. */
      PyObject *e = PyObject_CallMethodNoArgs (lock, s_busy_error);
      if (e)
         PyErr_SetObject ((PyObject *)Py_TYPE (e), e);
      Py_XDECREF (e);
      Py_CLEAR (lease);
   } else if (lease &&
              (holds_note (reg, wake, lease, slock) < 0 || stack_push (threads, stack, lease) < 0))
      Py_CLEAR (lease);
done:
   Py_XDECREF (threads);
   Py_XDECREF (stack);
   Py_XDECREF (reg);
   Py_XDECREF (client);
   Py_XDECREF (wake);
   return lease;
}

/* Takes the lease of the calling thread's innermost with-block on lock
 * off its stack (NULL without error when there is none). */
static PyObject *stack_pop_block (PyObject *lock)
{
   PyObject *threads = PyObject_GetAttr (lock, s_threads);
   PyObject *stack = threads ? attr_or_none (threads, sstack) : NULL;
   PyObject *lease = NULL;
   Py_XDECREF (threads);
   for (Py_ssize_t i = stack && PyList_Check (stack) ? PyList_GET_SIZE (stack) - 1 : -1; i >= 0;
        i--) {
      PyObject *e = PyList_GET_ITEM (stack, i);
      if (PyTuple_GET_ITEM (e, 1) == Py_True) {
         lease = Py_NewRef (PyTuple_GET_ITEM (e, 0));
         if (PyList_SetSlice (stack, i, i + 1, NULL) < 0)
            Py_CLEAR (lease);
         break;
      }
   }
   Py_XDECREF (stack);
   return lease;
}

/* _aio._notify(wake) when a task of this process polls for wake (a
 * release wakes it); nothing to do, and no call, when none does. */
static int notify_waiters (PyObject *wake)
{
   static PyObject *name;
   if (!name && !(name = PyUnicode_InternFromString ("leaselock._aio")))
      return -1;
   PyObject *aio = PyImport_GetModule (name);
   PyObject *wakers = aio ? PyObject_GetAttr (aio, s_wakers) : NULL;
   int rc = wakers ? 0 : -1;
   if (wakers && PyDict_Check (wakers) && PyDict_GET_SIZE (wakers) > 0) {
      rc = PyDict_Contains (wakers, wake);
      PyObject *r = rc > 0 ? PyObject_CallMethodOneArg (aio, s_notify, wake) : NULL;
      rc = rc > 0 ? (r ? 0 : -1) : rc;
      Py_XDECREF (r);
   }
   Py_XDECREF (wakers);
   Py_XDECREF (aio);
   return rc;
}

/* _lock_exit(lock, et, ev, tb): Lock.__exit__ outside an event loop. */
static PyObject *mod_lock_exit (PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
   (void)m;
   if (!nargs_ok ("_lock_exit", nargs, 4))
      return NULL;
   int r = loop_running ();
   if (r != 0)
      return r < 0 ? NULL : PyObject_VectorcallMethod (s_exit_py, args, 4, NULL);
   PyObject *lease = stack_pop_block (args[0]);
   if (!lease)
      return PyErr_Occurred () ? NULL : Py_NewRef (Py_None);
   PyObject *v[4] = { lease, args[1], args[2], args[3] };
   PyObject *res = PyObject_VectorcallMethod (s__exit__, v, 4, NULL);
   Py_DECREF (lease);
   PyObject *wake = PyObject_GetAttr (args[0], s_wake);
   /* finally: the waiters are woken whether the release raised or not;
    * an error of the wake-up itself replaces the release's. */
#if PY_VERSION_HEX >= 0x030C0000
   PyObject *raised = PyErr_GetRaisedException ();
#else
   PyObject *et, *ev, *tb;
   PyErr_Fetch (&et, &ev, &tb);
#endif
   int rc = wake ? notify_waiters (wake) : -1;
   Py_XDECREF (wake);
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
   { "_lock_enter", (PyCFunction)(void (*) (void))mod_lock_enter, METH_FASTCALL, NULL },
   { "_lock_exit", (PyCFunction)(void (*) (void))mod_lock_exit, METH_FASTCALL, NULL },
   { NULL, NULL, 0, NULL },
};
