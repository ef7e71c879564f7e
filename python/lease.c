/*
 * lease.c - the Lease type: one leaselock_lease_t, acquired by acquire.c or
 * wait.c; its calls (renew, release, re-entry, the with-block), its
 * getters, and the core's callbacks on it (on_lost, on_renew_failed).
 *
 * The callbacks run on the core's renewal thread: they take the GIL with
 * PyGILState_Ensure unless the interpreter is exiting, and never let the
 * renewal thread drop the last reference to a Lease (that goes through
 * Py_AddPendingCall), so the thread never joins itself.
 *
 * In a forked child a parent's Lease is "foreign" (fork.c's pid): the core
 * refuses to act on it, and the getters say so without asking the core.
 */
#include "module.h"

#include <stdio.h>
#include <structmember.h>

static bool lease_foreign (LeaseObject *self)
{
   return self->pid != pyll_pid ();
}

/* ---- the core's callbacks ---------------------------------------------- */

static int decref_pending (void *arg)
{
   Py_DECREF ((PyObject *)arg);
   return 0;
}

/* Drops the renewal thread's reference to self without ever dropping the
 * last one there (see the top of this file). With the GIL. */
static void lease_decref_from_thread (LeaseObject *self)
{
   if (Py_REFCNT (self) > 1 || Py_AddPendingCall (decref_pending, self) != 0)
      Py_DECREF (self);
}

/* Calls on_lost(self) (err NULL) or on_renew_failed(self, error,
 * seconds_left) from the renewal thread, with the GIL. */
static void lease_callback (LeaseObject *self, leaselock_lease_t *lease,
                            const leaselock_error_t *err, int64_t remaining_ms)
{
   if (pyll_exiting ())
      return;
   PyGILState_STATE g = PyGILState_Ensure ();
   PyObject *cb = err ? self->on_renew_failed : self->on_lost;
   if (!self->dead && cb) {
      if (!self->lease)
         self->lease = lease; /* the loss came before the acquiring thread got back */
      Py_INCREF (cb);
      Py_INCREF (self);
      PyObject *r = NULL;
      if (!err) {
         r = PyObject_CallOneArg (cb, (PyObject *)self);
      } else {
         pyll_state_t *st = pyll_state (self->module);
         PyObject *exc = pyll_new_error (pyll_exc_class (st, err->code), err->code, err->message);
         if (exc)
            r = PyObject_CallFunction (cb, "OOd", (PyObject *)self, exc,
                                       (double)remaining_ms / 1000.0);
         Py_XDECREF (exc);
      }
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

static void lost_trampoline (leaselock_lease_t *lease, void *data)
{
   lease_callback (data, lease, NULL, 0);
}

static void renew_failed_trampoline (leaselock_lease_t *lease, const leaselock_error_t *err,
                                     int64_t remaining_ms, void *data)
{
   lease_callback (data, lease, err, remaining_ms);
}

void pyll_lease_hooks (LeaseObject *lease, leaselock_acquire_opts_t *o)
{
   if (lease->on_lost) {
      o->on_lost = lost_trampoline;
      o->on_lost_data = lease;
   }
   if (lease->on_renew_failed) {
      o->on_renew_failed = renew_failed_trampoline;
      o->on_renew_failed_data = lease;
   }
}

/* ---- creation ---------------------------------------------------------- */

LeaseObject *pyll_lease_new (ClientObject *cl, PyObject *key, PyObject *on_lost,
                             PyObject *on_renew_failed)
{
   pyll_state_t *st = pyll_state (cl->module);
   LeaseObject *l = PyObject_GC_New (LeaseObject, st->lease_type);
   if (!l)
      return NULL;
   l->module = Py_NewRef (cl->module);
   l->client = (ClientObject *)Py_NewRef (cl);
   l->lease = NULL;
   l->key = Py_NewRef (key);
   l->on_lost = on_lost == Py_None ? NULL : Py_NewRef (on_lost);
   l->on_renew_failed = on_renew_failed == Py_None ? NULL : Py_NewRef (on_renew_failed);
   l->pid = pyll_pid ();
   l->dead = false;
   l->weakreflist = NULL;
   PyObject_GC_Track (l);
   return l;
}

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

static void Lease_drop (PyObject *o)
{
   LeaseObject *self = (LeaseObject *)o;
   /* Releases the core lease if this process still holds it and the
    * client is open (the core checks the pid, so a forked child never
    * releases its parent's lease), and waits for an on_lost callback in
    * flight. */
   LL_DESTROY_NOGIL (self->lease, leaselock_lease_destroy);
   Py_CLEAR (self->on_lost);
   Py_CLEAR (self->on_renew_failed);
   Py_CLEAR (self->key);
   Py_CLEAR (self->client);
   Py_CLEAR (self->module);
}

static void Lease_dealloc (PyObject *self)
{
   /* A callback waiting for the GIL now skips it: set before the weak
    * references' callbacks, which may let that thread run. */
   ((LeaseObject *)self)->dead = true;
   pyll_dealloc (self, Lease_drop);
}

/* The core lease for a call on it (NULL with ValueError unless the lease
 * exists and its client is open), the client's log level refreshed. */
static leaselock_lease_t *lease_begin (LeaseObject *self)
{
   if (!self->lease) {
      pyll_raise_invalid ("the lease was never acquired");
      return NULL;
   }
   if (pyll_client_closed (self->client)) {
      pyll_raise_invalid ("I/O operation on a lease of a closed client");
      return NULL;
   }
   pyll_log_refresh (self->client);
   return self->lease;
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

bool pyll_lease_held (PyObject *lease)
{
   return lease_held ((LeaseObject *)lease);
}

bool pyll_lease_lost (PyObject *lease)
{
   LeaseObject *self = (LeaseObject *)lease;
   return !lease_foreign (self) && lease_state (self) == LEASELOCK_STATE_LOST;
}

static PyObject *Lease_renew (LeaseObject *self, PyObject *args, PyObject *kwds)
{
   static char *kwlist[] = { "ttl", "min_hold", NULL };
   PyObject *ttl_o = Py_None, *hold_o = Py_None;
   if (!PyArg_ParseTupleAndKeywords (args, kwds, "|OO:renew", kwlist, &ttl_o, &hold_o))
      return NULL;
   int64_t ttl_ms = 0, hold_ms = -1;
   if ((ttl_o != Py_None && pyll_seconds_arg (ttl_o, "ttl", SECS_TTL, &ttl_ms) < 0) ||
       (hold_o != Py_None && pyll_seconds_arg (hold_o, "min_hold", SECS_DURATION, &hold_ms) < 0))
      return NULL;
   leaselock_lease_t *core = lease_begin (self);
   if (!core)
      return NULL;
   leaselock_error_t err;
   bool ok;
   LL_NOGIL (ok = leaselock_lease_extend (core, ttl_ms, hold_ms, &err));
   if (!ok)
      return pyll_raise_error (pyll_state (self->module), &err);
   Py_RETURN_NONE;
}

/* One call of the core on the lease that makes a round trip of its own
 * (release, reenter), without the GIL. */
static PyObject *lease_call (LeaseObject *self,
                             bool (*fn) (leaselock_lease_t *, leaselock_error_t *))
{
   leaselock_lease_t *core = lease_begin (self);
   if (!core)
      return NULL;
   leaselock_error_t err;
   bool ok;
   LL_NOGIL (ok = fn (core, &err));
   if (!ok && pyll_client_closed (self->client))
      return pyll_raise_invalid ("I/O operation on a lease of a closed client");
   if (!ok)
      return pyll_raise_error (pyll_state (self->module), &err);
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
   return pyll_raise_code (pyll_state (self->module)->LockLost, LEASELOCK_LOST, msg);
}

/* Leaving the with-block: release. A lease that was lost (renewal failed,
 * local deadline passed, or found taken at release) raises LockLost; the
 * body's exception, if any, becomes its __context__. In a forked child the
 * parent's lease is left alone, silently; so is a lease whose client was
 * closed (close() released it). last: see pyll_lease_exit. */
static PyObject *lease_exit (LeaseObject *self, bool last)
{
   if (!self->lease || lease_foreign (self) || pyll_client_closed (self->client))
      Py_RETURN_FALSE;
   pyll_state_t *st = pyll_state (self->module);
   leaselock_state_t s = leaselock_lease_state (self->lease);
   if (s == LEASELOCK_STATE_RELEASED)
      Py_RETURN_FALSE;
   pyll_log_refresh (self->client);
   leaselock_error_t err;
   bool ok;
   leaselock_lease_t *core = self->lease;
   /* The dealloc that follows would destroy the core lease in a wait
    * without the GIL of its own: done in this one instead, unless a
    * callback may still reach the Lease (it sets a NULL lease back). */
   bool destroy = last && !self->on_lost && !self->on_renew_failed;
   if (destroy)
      self->lease = NULL; /* as LL_DESTROY_NOGIL: no other thread sees it half destroyed */
   LL_NOGIL (ok = leaselock_lease_release (core, &err);
             if (destroy) leaselock_lease_destroy (core));
   if (s == LEASELOCK_STATE_LOST)
      return raise_lost_in_block (self);
   if (ok || pyll_client_closed (self->client))
      Py_RETURN_FALSE; /* or close() released it meanwhile */
   if (err.code == LEASELOCK_NOT_HELD)
      return pyll_raise_code (st->LockLost, LEASELOCK_NOT_HELD, err.message);
   return pyll_raise_error (st, &err);
}

static PyObject *Lease_exit (LeaseObject *self, PyObject *const *args, Py_ssize_t nargs)
{
   (void)args;
   (void)nargs;
   return lease_exit (self, false);
}

PyObject *pyll_lease_exit (PyObject *lease, bool last)
{
   return lease_exit ((LeaseObject *)lease, last);
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
   return leaselock_state_name (lease_state (self));
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
   return pyll_raise_type ("cannot create '%s' instances: use Lock.acquire()", type->tp_name);
}

static const PyType_Slot Lease_slots[] = {
   { Py_tp_new, Lease_new_refused },
   { Py_tp_repr, Lease_repr },
   { Py_tp_getset, Lease_getset },
   { Py_tp_members, Lease_members },
   { 0, NULL },
};

int pyll_lease_setup_types (PyObject *m, pyll_state_t *st)
{
   return pyll_add_type (
     m, &st->lease_type, true, "leaselock.Lease",
     "A held lease: what Lock.acquire() returns; a context manager that releases it.",
     sizeof (LeaseObject), 0, Lease_dealloc, Lease_traverse, Lease_clear, Lease_methods,
     Lease_slots);
}
