/*
 * module.c - the module leaselock._leaselock: PyInit__leaselock (multi-phase
 * init), its state (the types and exception classes), the exception
 * classes, the module-level functions, and the flag that keeps the core's
 * threads out of Python once the interpreter exits.
 *
 * module.h says which file holds what, and how threads, closing and
 * references go.
 */
#include "module.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

/* Set by _shutdown() (an atexit hook of the package): from then on the
 * renewal thread calls no Python code. Process-wide on purpose: it is
 * about the interpreter's exit, not one module object. */
static atomic_int finalizing;

/* Py_IsFinalizing() is public from 3.13, which removed _Py_IsFinalizing(). */
#if PY_VERSION_HEX >= 0x030D0000
#define ll_py_finalizing() Py_IsFinalizing ()
#else
#define ll_py_finalizing() _Py_IsFinalizing ()
#endif

bool pyll_exiting (void)
{
   return atomic_load (&finalizing) || ll_py_finalizing ();
}

int pyll_add_type (PyObject *m, PyTypeObject **type, bool public, const char *name, const char *doc,
                   Py_ssize_t basicsize, unsigned int flags, void *dealloc, void *traverse,
                   void *clear, PyMethodDef *methods, const PyType_Slot *extra)
{
   PyType_Slot slots[16] = { { Py_tp_doc, (void *)doc },
                             { Py_tp_dealloc, dealloc },
                             { Py_tp_traverse, traverse },
                             { Py_tp_clear, clear },
                             { Py_tp_methods, methods } };
   size_t n = 5;
   for (const PyType_Slot *x = extra; x && x->slot; x++) {
      if (n + 1 >= sizeof slots / sizeof *slots) {
         PyErr_SetString (PyExc_SystemError, "leaselock: a type with too many slots");
         return -1;
      }
      slots[n++] = *x;
   }
   /* the type keeps none of spec and slots, only what they point at */
   PyType_Spec spec = { name, (int)basicsize, 0, Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | flags,
                        slots };
   *type = (PyTypeObject *)PyType_FromModuleAndSpec (m, &spec, NULL);
   if (!*type || (public && PyModule_AddType (m, *type) < 0))
      return -1;
   return 0;
}

void pyll_dealloc (PyObject *self, void (*drop) (PyObject *self))
{
   PyTypeObject *tp = Py_TYPE (self);
   PyObject_GC_UnTrack (self);
   if (tp->tp_weaklistoffset && *(PyObject **)((char *)self + tp->tp_weaklistoffset))
      PyObject_ClearWeakRefs (self);
   drop (self);
   tp->tp_free (self);
   Py_DECREF (tp);
}

/* ---- module functions ------------------------------------------------------ */

static PyObject *mod_check_key (PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
   (void)m;
   const char *s, *name = "key";
   Py_ssize_t n;
   if (nargs < 1 || nargs > 2) {
      pyll_raise_type ("_check_key(key, name='key')");
      return NULL;
   }
   if (nargs == 2 && !(name = PyUnicode_AsUTF8 (args[1])))
      return NULL;
   if (pyll_key_arg (args[0], name, false, &s, &n) < 0)
      return NULL;
   return Py_NewRef (args[0]);
}

static PyObject *mod_seconds (PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
   (void)m;
   if (nargs != 3) {
      pyll_raise_type ("_seconds(value, name, kind)");
      return NULL;
   }
   const char *name = PyUnicode_AsUTF8 (args[1]);
   const char *kind = PyUnicode_AsUTF8 (args[2]);
   if (!name || !kind)
      return NULL;
   pyll_secs_t k;
   if (!strcmp (kind, "ttl"))
      k = SECS_TTL;
   else if (!strcmp (kind, "duration"))
      k = SECS_DURATION;
   else if (!strcmp (kind, "timeout"))
      k = SECS_TIMEOUT;
   else {
      pyll_raise_invalid ("unknown kind %s", kind);
      return NULL;
   }
   int64_t ms;
   if (pyll_seconds_arg (args[0], name, k, &ms) < 0)
      return NULL;
   return PyLong_FromLongLong (ms);
}

static PyObject *mod_default_uri (PyObject *m, PyObject *unused)
{
   (void)unused;
   char buf[4096];
   leaselock_error_t err;
   if (!leaselock_default_uri (buf, sizeof buf, &err))
      return pyll_raise_error (pyll_state (m), &err);
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
     "$LEASELOCK_URI are given: ~/.local/state/leaselock/locks.db in the home directory of "
     "the process's account (not $HOME)." },
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

static int module_exec (PyObject *m)
{
   if (pyll_with_init () < 0 || PyModule_AddFunctions (m, pyll_with_methods) < 0)
      return -1;
   pyll_fork_init ();
   pyll_stamp_init ();
   pyll_state_t *st = pyll_state (m);
   if (pyll_client_setup_types (m, st) < 0 || pyll_lease_setup_types (m, st) < 0 ||
       pyll_wait_setup_types (m, st) < 0 || pyll_with_setup_types (m, st) < 0 ||
       pyll_with_bind (m, st) < 0)
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
                                    "TIMEOUT, or BUSY for a single try). holder (a Holder: "
                                    "host, pid, label), fence and expires_in (seconds) say who "
                                    "held the key then, when known (else None).");
   Py_DECREF (bases);
   if (!st->LockTimeout)
      return -1;
   /* Who held the key, when the core could tell (errors.c sets them). */
   static const char *const holder_attrs[] = { "holder", "fence", "expires_in" };
   for (size_t i = 0; i < 3; i++)
      if (PyObject_SetAttrString (st->LockTimeout, holder_attrs[i], Py_None) < 0)
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

/* Each member of the state, visited or cleared (PYLL_STATE_MEMBERS). */
#define VISIT_MEMBER(type, name) Py_VISIT (pyll_state (m)->name);
#define CLEAR_MEMBER(type, name) Py_CLEAR (pyll_state (m)->name);

static int module_traverse (PyObject *m, visitproc visit, void *arg)
{
   PYLL_STATE_MEMBERS (VISIT_MEMBER)
   return 0;
}

static int module_clear (PyObject *m)
{
   PYLL_STATE_MEMBERS (CLEAR_MEMBER)
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

PyModuleDef pyll_module_def = {
   PyModuleDef_HEAD_INIT,
   .m_name = "leaselock._leaselock",
   .m_doc = "The C core of leaselock; use the leaselock package.",
   .m_size = sizeof (pyll_state_t),
   .m_methods = module_methods,
   .m_slots = module_slots,
   .m_traverse = module_traverse,
   .m_clear = module_clear,
   .m_free = module_free,
};

PyMODINIT_FUNC PyInit__leaselock (void)
{
   return PyModuleDef_Init (&pyll_module_def);
}
