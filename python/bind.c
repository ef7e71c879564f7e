/*
 * bind.c - _LockBase's __enter__ and __exit__, bound to a lock without an
 * allocation.
 *
 * `with lock:` looks both methods up on the lock's type and binds each to
 * the lock (BEFORE_WITH). For a method of a C type, binding makes a new
 * bound method object (a garbage-collected allocation) that is freed after
 * its one call: twice per with-block, an eighth of what the binding costs
 * per acquire+release pair. So _LockBase's two methods are descriptors of
 * their own (_WithMethod): read on the class they give the method itself,
 * as before; bound to an instance they give a _BoundWith, taken from a
 * small free list, which calls the method's C function. Any other use of
 * one (its attributes, repr, comparison, hash) is that of the ordinary
 * bound method, made for it then.
 */
#include "module.h"

#include <stddef.h>
#include <structmember.h>

/* A METH_METHOD | METH_FASTCALL | METH_KEYWORDS method's C function. */
typedef PyObject *(*method_fn) (PyObject *self, PyTypeObject *cls, PyObject *const *args,
                                Py_ssize_t nargs, PyObject *kwnames);

/* _WithMethod: a method of _LockBase, as a descriptor. */
typedef struct
{
   PyObject_HEAD PyObject *func; /* strong: the method (a method descriptor) */
   method_fn fn;                 /* its C function */
   PyTypeObject *cls;            /* strong: _LockBase */
   PyTypeObject *bound_type;     /* strong: _BoundWith */
} WithMethodObject;

/* _BoundWith: a method bound to a lock. */
typedef struct
{
   PyObject_HEAD vectorcallfunc vectorcall;
   WithMethodObject *method; /* strong; NULL once cleared by the GC */
   PyObject *self;           /* strong: a _LockBase */
} BoundWithObject;

/* Freed _BoundWith objects, their references dropped, kept for the next
 * bindings (a with-block has two at a time). With the GIL. */
#define BOUND_FREE_MAX 16
static BoundWithObject *bound_free[BOUND_FREE_MAX];
static int bound_free_n;

/* The ordinary bound method of b (a new reference). */
static PyObject *bound_plain (BoundWithObject *b)
{
   if (!b->method)
      return pyll_raise_type ("a cleared bound method");
   PyObject *func = b->method->func;
   return Py_TYPE (func)->tp_descr_get (func, b->self, (PyObject *)Py_TYPE (b->self));
}

/* A call: the method's C function, as its descriptor would call it. */
static PyObject *bound_call (PyObject *o, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
   BoundWithObject *b = (BoundWithObject *)o;
   if (!b->method)
      return pyll_raise_type ("a cleared bound method");
   return b->method->fn (b->self, b->method->cls, args, PyVectorcall_NARGS (nargsf), kwnames);
}

static PyObject *bound_getattro (PyObject *o, PyObject *name)
{
   PyObject *m = bound_plain ((BoundWithObject *)o);
   PyObject *r = m ? PyObject_GetAttr (m, name) : NULL;
   Py_XDECREF (m);
   return r;
}

static PyObject *bound_repr (PyObject *o)
{
   PyObject *m = bound_plain ((BoundWithObject *)o);
   PyObject *r = m ? PyObject_Repr (m) : NULL;
   Py_XDECREF (m);
   return r;
}

static Py_hash_t bound_hash (PyObject *o)
{
   PyObject *m = bound_plain ((BoundWithObject *)o);
   Py_hash_t h = m ? PyObject_Hash (m) : -1;
   Py_XDECREF (m);
   return h;
}

/* Equal when bound to the same object, as bound methods are. */
static PyObject *bound_richcompare (PyObject *a, PyObject *b, int op)
{
   if ((op != Py_EQ && op != Py_NE) || Py_TYPE (a) != Py_TYPE (b))
      Py_RETURN_NOTIMPLEMENTED;
   BoundWithObject *x = (BoundWithObject *)a, *y = (BoundWithObject *)b;
   bool eq = x->method == y->method && x->self == y->self;
   return Py_NewRef (eq == (op == Py_EQ) ? Py_True : Py_False);
}

static int bound_traverse (BoundWithObject *self, visitproc visit, void *arg)
{
   Py_VISIT (Py_TYPE (self));
   Py_VISIT (self->method);
   Py_VISIT (self->self);
   return 0;
}

static int bound_clear (BoundWithObject *self)
{
   Py_CLEAR (self->method);
   Py_CLEAR (self->self);
   return 0;
}

static void bound_dealloc (PyObject *o)
{
   PyTypeObject *tp = Py_TYPE (o);
   PyObject_GC_UnTrack (o);
   bound_clear ((BoundWithObject *)o); /* may run code (the lock's last reference) */
   if (bound_free_n < BOUND_FREE_MAX)
      bound_free[bound_free_n++] = (BoundWithObject *)o;
   else
      tp->tp_free (o);
   Py_DECREF (tp);
}

/* __get__: on the class, or on what is no _LockBase (its error), the
 * method's own; else a _BoundWith. */
static PyObject *with_method_get (PyObject *o, PyObject *obj, PyObject *type)
{
   WithMethodObject *w = (WithMethodObject *)o;
   if (!obj || !PyObject_TypeCheck (obj, w->cls))
      return Py_TYPE (w->func)->tp_descr_get (w->func, obj, type);
   BoundWithObject *b;
   if (bound_free_n > 0) {
      b = bound_free[--bound_free_n];
      PyObject_Init ((PyObject *)b, w->bound_type); /* as a free list of CPython's */
   } else if (!(b = PyObject_GC_New (BoundWithObject, w->bound_type)))
      return NULL;
   b->vectorcall = bound_call;
   b->method = (WithMethodObject *)Py_NewRef (w);
   b->self = Py_NewRef (obj);
   PyObject_GC_Track (b);
   return (PyObject *)b;
}

static int with_method_traverse (WithMethodObject *self, visitproc visit, void *arg)
{
   Py_VISIT (Py_TYPE (self));
   Py_VISIT (self->func);
   Py_VISIT (self->cls);
   Py_VISIT (self->bound_type);
   return 0;
}

static int with_method_clear (WithMethodObject *self)
{
   Py_CLEAR (self->func);
   Py_CLEAR (self->cls);
   Py_CLEAR (self->bound_type);
   return 0;
}

static void with_method_drop (PyObject *self)
{
   with_method_clear ((WithMethodObject *)self);
}

static void with_method_dealloc (PyObject *self)
{
   pyll_dealloc (self, with_method_drop);
}

static PyMethodDef no_methods[] = { { NULL, NULL, 0, NULL } };

static PyMemberDef bound_members[] = {
   { "__vectorcalloffset__", T_PYSSIZET, offsetof (BoundWithObject, vectorcall), READONLY, NULL },
   { NULL, 0, 0, 0, NULL },
};

static const PyType_Slot bound_slots[] = {
   { Py_tp_call, PyVectorcall_Call },
   { Py_tp_members, bound_members },
   { Py_tp_getattro, bound_getattro },
   { Py_tp_repr, bound_repr },
   { Py_tp_hash, bound_hash },
   { Py_tp_richcompare, bound_richcompare },
   { 0, NULL },
};

static const PyType_Slot with_method_slots[] = { { Py_tp_descr_get, with_method_get },
                                                 { 0, NULL } };

/* Replaces the method name of type (_LockBase), whose C function is fn,
 * with a _WithMethod. */
static int bind_method (pyll_state_t *st, const char *name, method_fn fn)
{
   PyTypeObject *type = st->lockbase_type;
   PyObject *func = PyDict_GetItemString (type->tp_dict, name);
   if (!func || !Py_TYPE (func)->tp_descr_get)
      return pyll_raise_type ("_LockBase has no method %s", name), -1;
   WithMethodObject *w = PyObject_GC_New (WithMethodObject, st->withmethod_type);
   if (!w)
      return -1;
   w->func = Py_NewRef (func);
   w->fn = fn;
   w->cls = (PyTypeObject *)Py_NewRef (type);
   w->bound_type = (PyTypeObject *)Py_NewRef (st->boundwith_type);
   PyObject_GC_Track (w);
   int rc = PyObject_SetAttrString ((PyObject *)type, name, (PyObject *)w);
   Py_DECREF (w);
   return rc;
}

int pyll_with_bind (PyObject *m, pyll_state_t *st)
{
   if (pyll_add_type (m, &st->withmethod_type, false, "leaselock._leaselock._WithMethod", NULL,
                      sizeof (WithMethodObject), 0, with_method_dealloc, with_method_traverse,
                      with_method_clear, no_methods, with_method_slots) < 0 ||
       pyll_add_type (m, &st->boundwith_type, false, "leaselock._leaselock._BoundWith", NULL,
                      sizeof (BoundWithObject), Py_TPFLAGS_HAVE_VECTORCALL, bound_dealloc,
                      bound_traverse, bound_clear, no_methods, bound_slots) < 0 ||
       bind_method (st, "__enter__", pyll_lockbase_enter) < 0 ||
       bind_method (st, "__exit__", pyll_lockbase_exit) < 0)
      return -1;
   return 0;
}
