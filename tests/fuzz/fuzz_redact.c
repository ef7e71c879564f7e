/* fuzz_redact.c - ll_uri_redact and ll_uri_parse on any text. Property:
 * no password that libpq, libmongoc or leaselock's parser reads from the
 * URI survives redaction. The redacted text is the URI's own bytes with
 * runs replaced by "***", so each occurrence of the password in it is one
 * in the URI outside what was hidden: it must show at least one
 * occurrence fewer than the URI (the password's own). With a '%' in the
 * URI, or a '+' (a space in leaselock's query values), the password may be
 * encoded there, so only "no more" is required. */
#include "fuzz_drivers.h"

#include <stdint.h>

static void check (const char *uri)
{
   char shown[2048];
   ll_uri_redact (uri, shown, sizeof shown);
   if (strlen (uri) + 1 > sizeof shown / 2)
      return; /* cut: the counts below would not hold */
   fz_list_t pw = { 0 };
   fz_driver_passwords (uri, &pw);
   bool encoded = strpbrk (uri, "%+") != NULL;
   for (int i = 0; i < pw.n; i++) {
      const char *p = pw.v[i];
      if (strchr (p, '*'))
         continue;
      size_t in_uri = fz_count (uri, p), in_shown = fz_count (shown, p);
      if (encoded ? in_shown > in_uri : (in_uri > 0 && in_shown >= in_uri)) {
         fprintf (stderr, "password \"%s\" survives: \"%s\" -> \"%s\"\n", p, uri, shown);
         abort ();
      }
   }
   fz_free (&pw);
}

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
   char *text = fz_string (data, size);
   if (!text)
      return 0;
   check (text);
   static const char *const schemes[] = { "postgresql", "mongodb", "mysql" };
   for (size_t i = 0; i < sizeof schemes / sizeof schemes[0]; i++) {
      char *u = fz_with_scheme (text, schemes[i], "");
      if (u)
         check (u);
      free (u);
   }
   free (text);
   return 0;
}
