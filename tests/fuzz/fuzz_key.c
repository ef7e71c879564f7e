/* fuzz_key.c - key, prefix and label validation (ll_check_key) agrees with
 * a plain reference: 1 (0 for prefixes and labels) to 255 bytes, no NUL,
 * well-formed UTF-8 as Unicode's table 3-7 lists it. */
#include "leaselock.h"
#include "ll_internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Table 3-7, "Well-Formed UTF-8 Byte Sequences", one row at a time. */
static bool reference_utf8 (const uint8_t *s, size_t n)
{
   static const struct
   {
      uint8_t lo[4], hi[4];
      int len;
   } rows[] = {
      { { 0x00 }, { 0x7F }, 1 },
      { { 0xC2, 0x80 }, { 0xDF, 0xBF }, 2 },
      { { 0xE0, 0xA0, 0x80 }, { 0xE0, 0xBF, 0xBF }, 3 },
      { { 0xE1, 0x80, 0x80 }, { 0xEC, 0xBF, 0xBF }, 3 },
      { { 0xED, 0x80, 0x80 }, { 0xED, 0x9F, 0xBF }, 3 },
      { { 0xEE, 0x80, 0x80 }, { 0xEF, 0xBF, 0xBF }, 3 },
      { { 0xF0, 0x90, 0x80, 0x80 }, { 0xF0, 0xBF, 0xBF, 0xBF }, 4 },
      { { 0xF1, 0x80, 0x80, 0x80 }, { 0xF3, 0xBF, 0xBF, 0xBF }, 4 },
      { { 0xF4, 0x80, 0x80, 0x80 }, { 0xF4, 0x8F, 0xBF, 0xBF }, 4 },
   };
   size_t i = 0;
   while (i < n) {
      bool matched = false;
      for (size_t r = 0; r < sizeof rows / sizeof rows[0] && !matched; r++) {
         int len = rows[r].len;
         if (i + (size_t)len > n)
            continue;
         bool ok = true;
         for (int k = 0; k < len && ok; k++)
            ok = s[i + k] >= rows[r].lo[k] && s[i + k] <= rows[r].hi[k];
         if (ok) {
            matched = true;
            i += (size_t)len;
         }
      }
      if (!matched)
         return false;
   }
   return true;
}

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
   bool no_nul = !memchr (data, 0, size), utf8 = reference_utf8 (data, size);
   for (int allow_empty = 0; allow_empty < 2; allow_empty++) {
      leaselock_error_t err;
      bool want = (size >= 1 || allow_empty) && size <= 255 && no_nul && utf8;
      bool got = ll_check_key ((const char *)data, size, "key", allow_empty, &err);
      if (got != want)
         abort ();
      if (!got && err.code != LEASELOCK_INVALID)
         abort ();
   }
   return 0;
}
