/*
 * stamp.c - whether a dict changed since it was last read: what lets the
 * per-pair path keep what it read from sys.modules, the logger and asyncio
 * (log.c, with.c) instead of reading it again at every acquire and
 * release. A stamp of a dict is equal to a later one only if the dict did
 * not change in between.
 *
 * CPython 3.11 gives every dict a version, changed by every change
 * (ma_version_tag, PEP 509). 3.12 deprecated it for dict watchers (PEP
 * 699): from 3.12 the dicts stamped are watched, and any change of any of
 * them moves one counter, which is every one's stamp (a change of one
 * makes the others' stamps older too: they are read again, once).
 */
#include "module.h"

#if PY_VERSION_HEX >= 0x030C0000
/* The watcher's id (once per process), -1 when none could be had: then
 * no two stamps are equal (nothing is kept). */
static int watcher = -1;
static uint64_t changes;

static int dict_changed (PyDict_WatchEvent event, PyObject *dict, PyObject *key, PyObject *value)
{
   (void)event;
   (void)dict;
   (void)key;
   (void)value;
   changes++; /* with the GIL: every change of a dict holds it */
   return 0;
}

void pyll_stamp_init (void)
{
   if (watcher < 0 && (watcher = PyDict_AddWatcher (dict_changed)) < 0)
      PyErr_Clear ();
}

int pyll_dict_watch (PyObject *dict)
{
   if (watcher < 0 || PyDict_Watch (watcher, dict) < 0) {
      PyErr_Clear ();
      return -1;
   }
   return 0;
}

uint64_t pyll_dict_stamp (PyObject *dict)
{
   (void)dict;
   return watcher < 0 ? ++changes : changes;
}
#else
void pyll_stamp_init (void)
{
}

int pyll_dict_watch (PyObject *dict)
{
   (void)dict;
   return 0;
}

uint64_t pyll_dict_stamp (PyObject *dict)
{
   return ((PyDictObject *)dict)->ma_version_tag;
}
#endif
