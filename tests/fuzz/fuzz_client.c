/* fuzz_client.c - leaselock_client_new on mongodb://, mysql://,
 * postgresql:// and sqlite:// forms of the input, each failing before any
 * server is contacted: PostgreSQL and MySQL are sent to a socket in a
 * directory that does not exist (a query option appended), MongoDB and
 * SQLite are tried only when the URI fails to parse. This runs each
 * backend's option parsing and the scrubbing of driver messages.
 * Property: where the input holds the byte 0x01 once, it stands for a
 * marker found nowhere else; when a driver reads a password that holds
 * the marker, no error message shows the marker. */
#include "fuzz_drivers.h"

#include <ctype.h>
#include <stdint.h>

#define MARKER "Qz7SECRETmk"

static bool contains_ci (const char *s, const char *word)
{
   for (; *s; s++)
      if (!strncasecmp (s, word, strlen (word)))
         return true;
   return false;
}

static void try_uri (const char *uri, bool marked)
{
   fz_list_t pw = { 0 };
   fz_driver_passwords (uri, &pw);
   bool secret = false;
   for (int i = 0; i < pw.n; i++)
      secret |= strstr (pw.v[i], MARKER) != NULL;
   fz_free (&pw);
   leaselock_error_t err;
   memset (&err, 0, sizeof err);
   leaselock_client_t *c = leaselock_client_new (uri, NULL, &err);
   if (c) {
      leaselock_client_destroy (c);
      return;
   }
   if (!memchr (err.message, '\0', sizeof err.message))
      abort ();
   if (marked && secret && strstr (err.message, MARKER)) {
      fprintf (stderr, "the password shows: \"%s\" -> \"%s\"\n", uri, err.message);
      abort ();
   }
}

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
   if (size > 512)
      return 0;
   char *raw = fz_string (data, size);
   if (!raw)
      return 0;
   /* The marker in place of 0x01 (once); inputs that could spell it, or
    * name a network address or a service file, are left out. */
   char *one = strchr (raw, 1);
   bool marked = one && !strchr (one + 1, 1);
   char dec[600];
   size_t o = 0;
   for (size_t i = 0; raw[i] && o + 1 < sizeof dec; i++) {
      unsigned v;
      if (raw[i] == '%' && isxdigit ((unsigned char)raw[i + 1]) &&
          isxdigit ((unsigned char)raw[i + 2]) && sscanf (raw + i + 1, "%2x", &v) == 1 && v) {
         dec[o++] = (char)v;
         i += 2;
      } else {
         dec[o++] = raw[i];
      }
   }
   dec[o] = '\0';
   if (contains_ci (dec, "qz7") || contains_ci (dec, "addr") || contains_ci (dec, "service") ||
       contains_ci (dec, "leaselockcollection")) {
      free (raw);
      return 0;
   }
   char text[1200];
   if (marked)
      snprintf (text, sizeof text, "%.*s%s%s", (int)(one - raw), raw, MARKER, one + 1);
   else
      snprintf (text, sizeof text, "%s", raw);
   free (raw);

   const char *q = strchr (text, '?') ? "&" : "?";
   char suffix[64];
   snprintf (suffix, sizeof suffix, "%shost=/nonexistent-ll-fuzz", q);
   char *u = fz_with_scheme (text, "postgresql", suffix);
   if (u)
      try_uri (u, marked);
   free (u);
   snprintf (suffix, sizeof suffix, "%ssocket=/nonexistent-ll-fuzz/x.sock", q);
   u = fz_with_scheme (text, "mysql", suffix);
   if (u)
      try_uri (u, marked);
   free (u);
   /* Only when it cannot connect: a URI that parses would reach a server
    * (MongoDB) or create a file (SQLite). */
   u = fz_with_scheme (text, "mongodb", "");
#ifdef LEASELOCK_WITH_MONGODB
   if (u) {
      fz_list_t none = { 0 };
      fz_driver_passwords ("mongodb://x", &none); /* initializes libmongoc */
      bson_error_t be;
      mongoc_uri_t *mu = mongoc_uri_new_with_error (u, &be);
      if (!mu)
         try_uri (u, marked);
      mongoc_uri_destroy (mu);
   }
#endif
   free (u);
   u = fz_with_scheme (text, "sqlite", "");
   if (u) {
      ll_uri_t parsed;
      leaselock_error_t e;
      bool parsed_ok = ll_uri_parse (u, &parsed, &e);
      bool refused = !parsed_ok || parsed.user || parsed.password || parsed.port;
      if (parsed_ok)
         ll_uri_cleanup (&parsed);
      if (refused)
         try_uri (u, marked);
   }
   free (u);
   return 0;
}
