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

PyObject *pyll_raise_error (pyll_state_t *st, const leaselock_error_t *err)
{
   return pyll_raise_code (pyll_exc_class (st, err->code), err->code, err->message);
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
