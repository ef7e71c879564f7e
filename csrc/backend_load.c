/*
 * backend_load.c - the backends that are modules of the library (MongoDB,
 * MySQL/MariaDB, PostgreSQL: ll_core_api.h), loaded with dlopen at the
 * first URI of their scheme, so that a process on SQLite (built in) never
 * maps their client libraries.
 *
 * Where: LEASELOCK_BACKEND_PATH (directories, ':'-separated) first, then
 * beside the file that holds the core (the CLI, libleaselock.so, the Python
 * extension, the Lua module): <dir>/leaselock-backends/, then
 * <dir>/../lib/leaselock-backends/ (a program in <prefix>/bin with its
 * modules in <prefix>/lib). Each module is loaded once per process
 * (pthread_once, which glibc restarts in a child forked during a load) and
 * never unloaded: its tables and connections live as long as the process.
 *
 * A program linked with a backend's own objects (the white-box tests and
 * benchmarks: build/libleaselock_<name>.a) uses that table instead: the
 * core names each table as a weak, hidden symbol, NULL unless linked in.
 */
#include "ll_core_api.h"

#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* NULL unless a white-box program links the backend in; hidden, so that
 * no other object of the process can stand in for them. */
extern const ll_backend_t ll_backend_mongodb __attribute__ ((weak, visibility ("hidden")));
extern const ll_backend_t ll_backend_mysql __attribute__ ((weak, visibility ("hidden")));
extern const ll_backend_t ll_backend_postgresql __attribute__ ((weak, visibility ("hidden")));

#define LL_CORE_API_INIT(f) .f = f,
static const ll_core_api_t core_api = { .version = LL_CORE_API_VERSION,
                                        .size = sizeof (ll_core_api_t),
                                        .backend_size = sizeof (ll_backend_t),
                                        .leaselock_version = LEASELOCK_VERSION,
                                        LL_CORE_API (LL_CORE_API_INIT) };

typedef struct ll_module
{
   const char *name;       /* "mongodb": leaselock_backend_mongodb.so */
   const char *label;      /* "MongoDB" */
   const char *schemes[3]; /* NULL-terminated */
   /* {soname, the Debian package that ships it}: the client library, and
    * one of its own it needs (NULL: none), each named when missing. */
   const char *libraries[2][2];
   const char *dev_pkg; /* the one the build needs */
   const ll_backend_t *linked;
   pthread_once_t once;
   const ll_backend_t *backend; /* once loaded; NULL: why says why */
   char why[LEASELOCK_ERROR_MAX];
} ll_module_t;

static ll_module_t modules[] = {
   { "mongodb",
     "MongoDB",
     { "mongodb", "mongodb+srv", NULL },
     { { "libmongoc-1.0.so.0", "libmongoc-1.0-0" }, { "libbson-1.0.so.0", "libbson-1.0-0" } },
     "libmongoc-dev",
     &ll_backend_mongodb,
     PTHREAD_ONCE_INIT,
     NULL,
     "" },
   { "mysql",
     "MySQL/MariaDB",
     { "mysql", "mariadb", NULL },
     { { "libmariadb.so.3", "libmariadb3" }, { NULL, NULL } },
     "libmariadb-dev",
     &ll_backend_mysql,
     PTHREAD_ONCE_INIT,
     NULL,
     "" },
   { "postgresql",
     "PostgreSQL",
     { "postgresql", "postgres", NULL },
     { { "libpq.so.5", "libpq5" }, { NULL, NULL } },
     "libpq-dev",
     &ll_backend_postgresql,
     PTHREAD_ONCE_INIT,
     NULL,
     "" },
};

/* The directory of the file that holds this code, into dir (PATH_MAX):
 * the main program's through /proc/self/exe (dladdr gives it argv[0]). */
static bool core_dir (char *dir)
{
   Dl_info info;
   struct link_map *map = NULL;
   const char *file = "/proc/self/exe";
   if (dladdr1 ((void *)ll_backend_for_uri, &info, (void **)&map, RTLD_DL_LINKMAP) && map &&
       map->l_name && map->l_name[0])
      file = map->l_name;
   if (!realpath (file, dir))
      return false;
   char *slash = strrchr (dir, '/');
   if (!slash)
      return false;
   *slash = '\0';
   return true;
}

/* Writes the directories to search into dirs, ':'-separated. */
static void search_dirs (char *dirs, size_t size)
{
   /* Not in a setuid or setgid program: no library from the caller's say. */
   const char *env = secure_getenv ("LEASELOCK_BACKEND_PATH");
   char dir[PATH_MAX];
   size_t n = 0;
   dirs[0] = '\0';
   if (env && *env)
      n = ll_copy_clipped (dirs, size, env, strlen (env));
   if (n + 1 < size && core_dir (dir)) {
      const char *tail[] = { n ? ":" : "", dir, "/leaselock-backends:", dir,
                             "/../lib/leaselock-backends" };
      for (size_t i = 0; i < sizeof tail / sizeof tail[0]; i++)
         n += ll_copy_clipped (dirs + n, size - n, tail[i], strlen (tail[i]));
   }
}

/* Sets m->why (cut to fit: the hint comes first, the paths last). */
static void module_why (ll_module_t *m, const char *fmt, ...)
  __attribute__ ((format (printf, 2, 3)));
static void module_why (ll_module_t *m, const char *fmt, ...)
{
   va_list ap;
   va_start (ap, fmt);
   vsnprintf (m->why, sizeof m->why, fmt, ap);
   va_end (ap);
}

/* dlopen's answer for the module at path: the backend, or NULL with why. */
static const ll_backend_t *module_open (ll_module_t *m, const char *path)
{
   void *h = dlopen (path, RTLD_NOW | RTLD_LOCAL);
   if (!h) {
      const char *e = dlerror ();
      module_why (m, "cannot load the %s backend: %s", m->label, e ? e : path);
      for (int i = 0; i < 2 && e; i++)
         if (m->libraries[i][0] && strstr (e, m->libraries[i][0]))
            module_why (m, "%s needs its client library %s: install %s (Debian/Ubuntu) [%s]",
                        m->label, m->libraries[i][0], m->libraries[i][1], e);
      return NULL;
   }
   ll_module_entry_fn entry;
   *(void **)&entry = dlsym (h, LL_MODULE_ENTRY);
   const ll_backend_t *b = entry ? entry (&core_api) : NULL;
   if (!b) /* left loaded: never unloaded, like the others */
      module_why (
        m, "the %s backend belongs to another build of leaselock: reinstall leaselock %s (%s)",
        m->label, LEASELOCK_VERSION, path);
   return b;
}

static void module_load (ll_module_t *m)
{
   if (m->linked) {
      m->backend = m->linked;
      return;
   }
   char dirs[3 * PATH_MAX + 64], path[PATH_MAX + 64];
   search_dirs (dirs, sizeof dirs);
   for (char *save = NULL, *d = strtok_r (dirs, ":", &save); d; d = strtok_r (NULL, ":", &save)) {
      snprintf (path, sizeof path, "%s/leaselock_backend_%s.so", d, m->name);
      if (access (path, F_OK) == 0) {
         m->backend = module_open (m, path);
         return;
      }
   }
   search_dirs (dirs, sizeof dirs);
   module_why (m,
               "leaselock was built without %s: install %s (Debian/Ubuntu), then rebuild "
               "leaselock (no leaselock_backend_%s.so in %s)",
               m->label, m->dev_pkg, m->name, dirs);
}

/* pthread_once's routine takes no argument: the module the calling
 * thread asked for (pthread_once runs it in that thread) is passed here. */
static _Thread_local ll_module_t *loading;

static void load_asked (void)
{
   module_load (loading);
}

int ll_backend_module_for_scheme (const char *scheme, size_t len, const ll_backend_t **backend,
                                  leaselock_error_t *err)
{
   for (size_t i = 0; i < sizeof modules / sizeof modules[0]; i++) {
      ll_module_t *m = &modules[i];
      for (int s = 0; m->schemes[s]; s++) {
         if (strlen (m->schemes[s]) != len || strncasecmp (m->schemes[s], scheme, len) != 0)
            continue;
         loading = m;
         pthread_once (&m->once, load_asked);
         *backend = m->backend;
         if (!m->backend)
            ll_error_set (err, LEASELOCK_UNSUPPORTED, "%s", m->why);
         return m->backend ? 1 : -1;
      }
   }
   return 0;
}
