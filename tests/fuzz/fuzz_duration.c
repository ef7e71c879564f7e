/* fuzz_duration.c - leaselock_parse_duration: never crashes; a success is
 * [digits][.digits] plus an optional unit and lies in 0 .. 30 days. */
#include "leaselock.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
   char *text = malloc (size + 1);
   if (!text)
      return 0;
   memcpy (text, data, size);
   text[size] = '\0';
   int64_t ms = -1;
   leaselock_error_t err;
   bool ok = leaselock_parse_duration (text, &ms, &err);
   if (ok) {
      static const char *const units[] = { "", "ms", "s", "m", "h", "d" };
      size_t d = strspn (text, "0123456789"), f = 0, n = d;
      if (text[n] == '.')
         n += 1 + (f = strspn (text + n + 1, "0123456789"));
      bool unit = false;
      for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
         unit |= !strcmp (text + n, units[i]);
      if (d + f == 0 || !unit)
         abort ();
      if (ms < 0 || ms > LEASELOCK_TTL_MAX_MS)
         abort ();
   } else if (err.code != LEASELOCK_INVALID || !memchr (err.message, '\0', sizeof err.message)) {
      abort ();
   }
   free (text);
   return 0;
}
