/* fuzz_drivers.h - the passwords each driver itself reads from a URI
 * (libpq's PQconninfoParse, libmongoc's mongoc_uri_new_with_error and
 * leaselock's own parser for MySQL and SQLite): the truth the redaction
 * and the scrubbing are checked against. */
#ifndef LL_FUZZ_DRIVERS_H
#define LL_FUZZ_DRIVERS_H

#include "ll_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#ifdef LEASELOCK_WITH_POSTGRESQL
#include <libpq-fe.h>
#endif
#ifdef LEASELOCK_WITH_MONGODB
#include <mongoc/mongoc.h>
#endif

#define FZ_MAX 16

typedef struct
{
   char *v[FZ_MAX];
   int n;
} fz_list_t;

static void fz_add (fz_list_t *l, const char *s)
{
   if (s && *s && l->n < FZ_MAX)
      l->v[l->n++] = strdup (s);
}

static void fz_free (fz_list_t *l)
{
   for (int i = 0; i < l->n; i++)
      free (l->v[i]);
   l->n = 0;
}

#ifdef LEASELOCK_WITH_MONGODB
static void fz_quiet_log (mongoc_log_level_t l, const char *d, const char *m, void *u)
{
   (void)l, (void)d, (void)m, (void)u;
}
#endif

/* Adds to l every password the drivers read from uri. */
static void fz_driver_passwords (const char *uri, fz_list_t *l)
{
#ifdef LEASELOCK_WITH_POSTGRESQL
   if (!strncmp (uri, "postgresql://", 13) || !strncmp (uri, "postgres://", 11)) {
      PQconninfoOption *o = PQconninfoParse (uri, NULL);
      for (PQconninfoOption *p = o; p && p->keyword; p++)
         if (p->val && (!strcmp (p->keyword, "password") || !strcmp (p->keyword, "sslpassword")))
            fz_add (l, p->val);
      PQconninfoFree (o);
   }
#endif
#ifdef LEASELOCK_WITH_MONGODB
   if (!strncmp (uri, "mongodb://", 10)) {
      static bool init;
      if (!init) {
         mongoc_init ();
         mongoc_log_set_handler (fz_quiet_log, NULL);
         init = true;
      }
      bson_error_t e;
      mongoc_uri_t *u = mongoc_uri_new_with_error (uri, &e);
      if (u) {
         fz_add (l, mongoc_uri_get_password (u));
         fz_add (l,
                 mongoc_uri_get_option_as_utf8 (u, MONGOC_URI_TLSCERTIFICATEKEYFILEPASSWORD, NULL));
         mongoc_uri_destroy (u);
      }
   }
#endif
   ll_uri_t u;
   leaselock_error_t err;
   if (ll_uri_parse (uri, &u, &err)) {
      fz_add (l, u.password);
      for (int i = 0; i < u.n_params; i++)
         if (!strcasecmp (u.params[i].name, "password") ||
             !strcasecmp (u.params[i].name, "sslpassword"))
            fz_add (l, u.params[i].value);
      ll_uri_cleanup (&u);
   }
}

/* Overlapping occurrences of needle in hay. */
static size_t fz_count (const char *hay, const char *needle)
{
   size_t n = 0, len = strlen (needle);
   if (!len)
      return 0;
   for (const char *p = hay; (p = strstr (p, needle)); p++)
      n++;
   (void)len;
   return n;
}

/* The input as a C string, or NULL when it holds a NUL byte. */
static char *fz_string (const uint8_t *data, size_t size)
{
   if (memchr (data, 0, size))
      return NULL;
   char *s = malloc (size + 1);
   if (s) {
      memcpy (s, data, size);
      s[size] = '\0';
   }
   return s;
}

/* The input's text after "scheme://" (all of it when there is none) under
 * the scheme given, as a new string. */
static char *fz_with_scheme (const char *text, const char *scheme, const char *suffix)
{
   const char *sep = strstr (text, "://");
   const char *rest = sep ? sep + 3 : text;
   size_t n = strlen (scheme) + 3 + strlen (rest) + strlen (suffix) + 1;
   char *s = malloc (n);
   if (s)
      snprintf (s, n, "%s://%s%s", scheme, rest, suffix);
   return s;
}

#endif
