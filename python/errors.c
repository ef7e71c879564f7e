/*
 * errors.c - the extension's errors: a core error code to an exception
 * class of the module (which carries the code's name as .code), and the
 * ValueError / TypeError of a bad argument, with code INVALID as the core
 * names one.
 */
#include "module.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

PyObject *pyll_exc_class (pyll_state_t *st, leaselock_code_t code)
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
PyObject *pyll_new_error (PyObject *cls, leaselock_code_t code, const char *message)
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
PyObject *pyll_raise_code (PyObject *cls, leaselock_code_t code, const char *message)
{
   PyObject *exc = pyll_new_error (cls, code, message);
   if (!exc)
      return NULL;
   PyErr_SetObject ((PyObject *)Py_TYPE (exc), exc);
   Py_DECREF (exc);
   return NULL;
}

/* leaselock.Holder(host, pid, label), from the package (a NamedTuple):
 * a plain tuple if it cannot be had. New reference, or NULL. */
static PyObject *holder_tuple (const leaselock_holder_t *h)
{
   PyObject *t = Py_BuildValue ("(s#Ls#)", h->host, (Py_ssize_t)strnlen (h->host, sizeof h->host),
                                (long long)h->pid, h->label[0] ? h->label : NULL,
                                (Py_ssize_t)strnlen (h->label, sizeof h->label));
   if (!t)
      return NULL;
   PyObject *mod = PyImport_ImportModule ("leaselock._client");
   PyObject *cls = mod ? PyObject_GetAttrString (mod, "Holder") : NULL;
   Py_XDECREF (mod);
   if (!cls) {
      PyErr_Clear ();
      return t;
   }
   PyObject *holder = PyObject_Call (cls, t, NULL);
   Py_DECREF (cls);
   Py_DECREF (t);
   return holder;
}

/* An acquire's BUSY or TIMEOUT that named the holder: exc.holder (Holder),
 * .fence and .expires_in (seconds); LockTimeout's class attributes leave
 * them None otherwise. 0 or -1. */
static int set_holder (PyObject *exc, const leaselock_holder_t *h)
{
   if (!h->known)
      return 0;
   PyObject *holder = holder_tuple (h);
   PyObject *fence = PyLong_FromLongLong (h->fence);
   PyObject *left = PyFloat_FromDouble ((double)h->expires_in_ms / 1000.0);
   int rc = holder && fence && left && PyObject_SetAttrString (exc, "holder", holder) == 0 &&
                PyObject_SetAttrString (exc, "fence", fence) == 0 &&
                PyObject_SetAttrString (exc, "expires_in", left) == 0
              ? 0
              : -1;
   Py_XDECREF (holder);
   Py_XDECREF (fence);
   Py_XDECREF (left);
   return rc;
}

PyObject *pyll_error_object (pyll_state_t *st, const leaselock_error_t *err)
{
   PyObject *exc = pyll_new_error (pyll_exc_class (st, err->code), err->code, err->message);
   if (exc && set_holder (exc, &err->holder) < 0)
      Py_CLEAR (exc);
   return exc;
}

PyObject *pyll_raise_error (pyll_state_t *st, const leaselock_error_t *err)
{
   PyObject *exc = pyll_error_object (st, err);
   if (!exc)
      return NULL;
   PyErr_SetObject ((PyObject *)Py_TYPE (exc), exc);
   Py_DECREF (exc);
   return NULL;
}

/* cls(message) with code INVALID like the core's: the errors of bad
 * arguments (ValueError, TypeError) and of use after close. */
PyObject *pyll_raise_as (PyObject *cls, const char *fmt, ...)
{
   char buf[LEASELOCK_ERROR_MAX];
   va_list ap;
   va_start (ap, fmt);
   vsnprintf (buf, sizeof buf, fmt, ap);
   va_end (ap);
   return pyll_raise_code (cls, LEASELOCK_INVALID, buf);
}
