/*
 * log.c - the core's log hook, to logging.getLogger("leaselock"): every
 * client's hook is this one, taking the GIL in whatever thread the event
 * happens. The hook is installed at the lowest level the logger is enabled
 * for, read when the client is created and again at each acquire, renew
 * and release (isEnabledFor, cached by logging), so that a disabled level
 * costs the core one load and compare and Python nothing.
 *
 * The logging module is not imported by `import leaselock` (it was a
 * third of its start-up): until the program imports it, no logger can be
 * configured, so the level is the one an unconfigured logging reports
 * (WARNING, the root logger's default) and the first event imports it and
 * goes where logging then sends it (its last-resort handler: stderr).
 */
#include "module.h"

#include <string.h>

/* logging.getLogger("leaselock") and its bound methods, set once logging
 * is imported (by the program, or by the first event) and kept for the
 * life of the process (the logging module keeps the logger alive
 * anyway). */
static PyObject *py_logger_log, *py_logger_enabled;

/* The level last read (pyll_log_level), kept while what isEnabledFor
 * reads is unchanged: the logger's disabled flag and its _cache dict,
 * where logging keeps isEnabledFor's answers and which it empties at
 * every change of level (setLevel, logging.disable, ...). Both are read
 * from the logger's __dict__ at each look (a change of an attribute need
 * not change that dict's stamp: 3.13 keeps attributes beside it), the
 * cache's contents by its stamp (stamp.c), taken before the read: the
 * read fills the cache, so the next look reads once more, and finds it
 * unchanged from then on. */
static PyObject *py_logger_dict;                       /* strong; NULL: not kept */
static PyObject *py_logger_cache, *py_logger_disabled; /* strong, as last read */
static uint64_t level_cache_stamp;
static int level_kept = -1; /* -1: none */

/* Until logging is imported (log_bound): the stamp of sys.modules at the
 * last look that found it missing. */
static uint64_t logging_missing_stamp;
static bool logging_missing;

/* Keeps the logger's __dict__ for pyll_log_level (NULL: the level is read
 * at every look). With the GIL; never leaves an exception set. */
static void log_keep (PyObject *logger)
{
   PyObject *d = PyObject_GenericGetDict (logger, NULL);
   if (d && PyDict_CheckExact (d))
      Py_XSETREF (py_logger_dict, Py_NewRef (d));
   Py_XDECREF (d);
   PyErr_Clear ();
}

/* Binds the logger of the logging module m. With the GIL; 0 or -1 with an
 * exception set. */
static int log_bind (PyObject *m)
{
   if (py_logger_log)
      return 0; /* another thread bound it while the import let go of the GIL */
   PyObject *logger = PyObject_CallMethod (m, "getLogger", "s", "leaselock");
   if (!logger)
      return -1;
   PyObject *log = PyObject_GetAttrString (logger, "log");
   PyObject *enabled = log ? PyObject_GetAttrString (logger, "isEnabledFor") : NULL;
   if (enabled)
      log_keep (logger);
   Py_DECREF (logger);
   if (!enabled) {
      Py_XDECREF (log);
      return -1;
   }
   py_logger_log = log;
   py_logger_enabled = enabled;
   return 0;
}

/* Binds the logger once the program has imported logging (a look-up in
 * sys.modules until then, while sys.modules changes). With the GIL; never
 * leaves an exception set. */
static bool log_bound (void)
{
   static PyObject *name;
   if (py_logger_enabled)
      return true;
   PyObject *mods = PyImport_GetModuleDict ();
   if (logging_missing && pyll_dict_stamp (mods) == logging_missing_stamp)
      return false;
   if (!name && !(name = PyUnicode_InternFromString ("logging"))) {
      PyErr_Clear ();
      return false;
   }
   uint64_t stamp = pyll_dict_stamp (mods);
   PyObject *m = PyImport_GetModule (name);
   if (!m) {
      logging_missing = !PyErr_Occurred () && pyll_dict_watch (mods) == 0;
      logging_missing_stamp = stamp;
      PyErr_Clear ();
      return false;
   }
   int rc = log_bind (m);
   Py_DECREF (m);
   if (rc < 0)
      PyErr_Clear ();
   return rc == 0;
}

/* The level by isEnabledFor (see pyll_log_level). */
static int log_level_read (void)
{
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

/* The lowest of DEBUG, INFO, WARNING, ERROR the logger is enabled for,
 * else LEASELOCK_LOG_OFF. With the GIL; never leaves an exception set. */
int pyll_log_level (void)
{
   static PyObject *s_cache, *s_disabled;
   if (!log_bound ())
      return LEASELOCK_LOG_WARNING; /* logging not imported: not configured */
   if (!py_logger_dict || (!s_cache && !(s_cache = PyUnicode_InternFromString ("_cache"))) ||
       (!s_disabled && !(s_disabled = PyUnicode_InternFromString ("disabled")))) {
      PyErr_Clear ();
      return log_level_read ();
   }
   PyObject *cache = PyDict_GetItemWithError (py_logger_dict, s_cache);
   PyObject *disabled = cache ? PyDict_GetItemWithError (py_logger_dict, s_disabled) : NULL;
   if (!disabled || !PyDict_CheckExact (cache)) {
      PyErr_Clear ();
      return log_level_read ();
   }
   if (level_kept >= 0 && cache == py_logger_cache && disabled == py_logger_disabled &&
       pyll_dict_stamp (cache) == level_cache_stamp)
      return level_kept;
   level_kept = -1;
   if (pyll_dict_watch (cache) < 0)
      return log_level_read ();
   Py_XSETREF (py_logger_cache, Py_NewRef (cache));
   Py_XSETREF (py_logger_disabled, Py_NewRef (disabled));
   uint64_t stamp = pyll_dict_stamp (cache);
   int level = log_level_read ();
   level_kept = level;
   level_cache_stamp = stamp;
   return level;
}

/* Follows the logger's level (with the GIL). */
void pyll_log_refresh (ClientObject *self)
{
   int level = pyll_log_level ();
   if (self->c && level != self->log_level) {
      self->log_level = level;
      leaselock_client_set_log_level (self->c, level);
   }
}

/* The core's log hook: logger.log(level, 'event "key" (fence N): message',
 * extra={"event", "key", "fence"}). Any thread, no leaselock lock held. */
void pyll_log_hook (const leaselock_log_event_t *ev, void *data)
{
   (void)data;
   if (pyll_exiting ())
      return;
   PyGILState_STATE g = PyGILState_Ensure ();
   PyObject *et, *ev_, *tb;
   PyErr_Fetch (&et, &ev_, &tb); /* a caller's exception in flight, if any */
   if (!py_logger_log) {         /* the first event: logging as configured by then */
      PyObject *m = PyImport_ImportModule ("logging");
      if (!m || log_bind (m) < 0)
         PyErr_WriteUnraisable (NULL);
      Py_XDECREF (m);
   }
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
   if (kw && py_logger_log)
      r = PyObject_Call (py_logger_log, args, kw);
   if (!r && PyErr_Occurred ())
      PyErr_WriteUnraisable (py_logger_log);
   Py_XDECREF (r);
   Py_XDECREF (kw);
   Py_XDECREF (args);
   Py_XDECREF (key);
   Py_XDECREF (msg);
   PyErr_Restore (et, ev_, tb);
   PyGILState_Release (g);
}
