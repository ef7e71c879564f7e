/* backend.c - finds the backend for a URI's scheme (SQLite built in, the
 * others modules loaded at their first URI: backend_load.c), and the calls
 * every caller makes alike through a backend's table. */
#include "ll_core_api.h"

#include <ctype.h>
#include <pthread.h>
#include <string.h>

#define MAX_EXTRA 4

static const ll_backend_t *const builtin[] = {
   &ll_backend_sqlite,
};

static const ll_backend_t *extra[MAX_EXTRA];
static int n_extra;
static pthread_mutex_t extra_mu = PTHREAD_MUTEX_INITIALIZER;

void ll_backend_register (const ll_backend_t *backend)
{
   pthread_mutex_lock (&extra_mu);
   if (n_extra < MAX_EXTRA)
      extra[n_extra++] = backend;
   pthread_mutex_unlock (&extra_mu);
}

static bool answers (const ll_backend_t *b, const char *scheme, size_t len)
{
   for (int i = 0; i < 4 && b->schemes[i]; i++)
      if (strlen (b->schemes[i]) == len && !strncasecmp (b->schemes[i], scheme, len))
         return true;
   return false;
}

const ll_backend_t *ll_backend_for_uri (const char *uri, leaselock_error_t *err)
{
   if (!uri)
      return ll_error_set (err, LEASELOCK_INVALID, "uri is NULL"), NULL;
   char shown[160];
   ll_uri_redact (uri, shown, sizeof shown);
   const char *sep = strstr (uri, "://");
   size_t len = sep ? (size_t)(sep - uri) : 0;
   for (size_t i = 0; i < len; i++)
      if (!isalnum ((unsigned char)uri[i]) && uri[i] != '+' && uri[i] != '-' && uri[i] != '.')
         len = 0;
   if (!len)
      return ll_error_set (err, LEASELOCK_INVALID,
                           "malformed URI \"%s\": expected scheme://... (sqlite, mongodb, mysql, "
                           "postgresql)",
                           shown),
             NULL;
   const ll_backend_t *found = NULL;
   for (size_t i = 0; i < sizeof builtin / sizeof builtin[0] && !found; i++)
      if (answers (builtin[i], uri, len))
         found = builtin[i];
   if (!found) {
      int module = ll_backend_module_for_scheme (uri, len, &found, err);
      if (module)
         return found;
   }
   pthread_mutex_lock (&extra_mu);
   for (int i = 0; i < n_extra && !found; i++)
      if (answers (extra[i], uri, len))
         found = extra[i];
   pthread_mutex_unlock (&extra_mu);
   if (!found)
      return ll_error_set (err, LEASELOCK_INVALID,
                           "unknown URI scheme \"%.*s\" in \"%s\" (known: sqlite, mongodb, "
                           "mongodb+srv, mysql, mariadb, postgresql, postgres)",
                           (int)(len > 32 ? 32 : len), uri, shown),
             NULL;
   return found;
}

bool ll_backend_acquire (const ll_backend_t *b, void *conn, const ll_take_t *t, int64_t *fence,
                         leaselock_error_t *err)
{
   if (b->acquire)
      return b->acquire (conn, t, fence, err);
   ll_take_t plain = { t->op, t->ttl_ms, t->holder, -1, 0, t->fair, t->queued };
   ll_taken_t out;
   bool ok = b->acquire_wait (conn, &plain, &out, err);
   if (ok)
      *fence = out.fence;
   return ok;
}
