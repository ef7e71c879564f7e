/*
 * wait.c - the _Wait type: a waiting acquire driven one try at a time (the
 * core's leaselock_wait_t), made by Client._wait for the package's asyncio
 * wait, whose tries run on its thread pool without the GIL.
 */
#include "module.h"

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
   LL_DESTROY_NOGIL (self->w, leaselock_wait_destroy);
}

PyObject *pyll_client_wait (ClientObject *self, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames)
{
   pyll_acquire_args_t a;
   const char *key;
   Py_ssize_t key_len;
   if (pyll_acquire_parse (args, nargs, kwnames, "_wait", false, &a) < 0 ||
       pyll_key_arg (a.key, "key", false, &key, &key_len) < 0 || pyll_client_check (self) < 0)
      return NULL;
   pyll_state_t *st = pyll_state (self->module);
   WaitObject *wo = PyObject_GC_New (WaitObject, st->wait_type);
   if (!wo)
      return NULL;
   wo->client = (ClientObject *)Py_NewRef (self);
   wo->w = NULL;
   wo->busy = wo->close_after = false;
   wo->lease = pyll_lease_new (self, a.key, a.on_lost, a.on_renew_failed);
   PyObject_GC_Track (wo);
   if (!wo->lease) {
      Py_DECREF (wo);
      return NULL;
   }
   pyll_lease_hooks (wo->lease, &a.o);
   pyll_log_refresh (self);
   leaselock_error_t err;
   wo->w = leaselock_wait_new (self->c, key, (size_t)key_len, &a.o, &err);
   if (!wo->w) {
      Py_DECREF (wo);
      return pyll_raise_error (st, &err);
   }
   return (PyObject *)wo;
}

static PyObject *Wait_try (WaitObject *self, PyObject *unused)
{
   (void)unused;
   pyll_state_t *st = pyll_state (self->client->module);
   if (!self->w)
      return pyll_raise_invalid ("the wait is closed");
   if (pyll_client_check (self->client) < 0)
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
   return pyll_raise_error (st, &err);
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

static void Wait_drop (PyObject *o)
{
   WaitObject *self = (WaitObject *)o;
   wait_destroy_nogil (self); /* a try_ holds a reference: none runs now */
   Py_CLEAR (self->lease);
   Py_CLEAR (self->client);
}

static void Wait_dealloc (PyObject *self)
{
   pyll_dealloc (self, Wait_drop);
}

static PyMethodDef Wait_methods[] = {
   { "try_", (PyCFunction)Wait_try, METH_NOARGS, NULL },
   { "close", (PyCFunction)Wait_close, METH_NOARGS, NULL },
   { NULL, NULL, 0, NULL },
};

int pyll_wait_setup_types (PyObject *m, pyll_state_t *st)
{
   return pyll_add_type (m, &st->wait_type, false, "leaselock._leaselock._Wait",
                         "A waiting acquire driven one try at a time (Client._wait).",
                         sizeof (WaitObject), Py_TPFLAGS_DISALLOW_INSTANTIATION, Wait_dealloc,
                         Wait_traverse, Wait_clear, Wait_methods, NULL);
}
