/* validate.c - argument checks from the contract and owner tokens. */
#include "ll_internal.h"

#include <errno.h>
#include <math.h>
#include <string.h>

size_t leaselock_utf8_valid_len (const char *text, size_t len)
{
   const unsigned char *s = (const unsigned char *)text;
   size_t i = 0;
   while (i < len) {
      unsigned char c = s[i];
      size_t n;
      unsigned cp;
      if (c < 0x80) {
         i++;
         continue;
      } else if (c >= 0xC2 && c <= 0xDF) {
         n = 1, cp = c & 0x1F;
      } else if (c >= 0xE0 && c <= 0xEF) {
         n = 2, cp = c & 0x0F;
      } else if (c >= 0xF0 && c <= 0xF4) {
         n = 3, cp = c & 0x07;
      } else {
         return i;
      }
      if (i + n >= len) /* truncated sequence */
         return i;
      for (size_t k = 1; k <= n; k++) {
         if ((s[i + k] & 0xC0) != 0x80)
            return i;
         cp = (cp << 6) | (s[i + k] & 0x3F);
      }
      if ((n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10FFFF ||
          (cp >= 0xD800 && cp <= 0xDFFF))
         return i;
      i += n + 1;
   }
   return len;
}

bool ll_check_key (const char *key, size_t len, const char *what, bool allow_empty,
                   leaselock_error_t *err)
{
   if (!key)
      return ll_error_set (err, LEASELOCK_INVALID, "%s is NULL", what);
   if (len == 0 && !allow_empty)
      return ll_error_set (err, LEASELOCK_INVALID, "%s is empty (1 to %d bytes of UTF-8)", what,
                           LEASELOCK_KEY_MAX);
   if (len > LEASELOCK_KEY_MAX)
      return ll_error_set (err, LEASELOCK_INVALID, "%s is %zu bytes long (at most %d)", what, len,
                           LEASELOCK_KEY_MAX);
   const char *nul = memchr (key, '\0', len);
   if (nul)
      return ll_error_set (err, LEASELOCK_INVALID, "%s contains a NUL byte at offset %zu", what,
                           (size_t)(nul - key));
   size_t bad = leaselock_utf8_valid_len (key, len);
   if (bad != len)
      return ll_error_set (err, LEASELOCK_INVALID, "%s is not valid UTF-8 (bad byte at offset %zu)",
                           what, bad);
   return true;
}

bool leaselock_check_key (const char *key, size_t key_len, leaselock_error_t *error)
{
   return ll_check_key (key, key_len, "key", false, error);
}

bool ll_check_duration (int64_t ms, const char *what, leaselock_error_t *err)
{
   if (ms < 0)
      return ll_error_set (err, LEASELOCK_INVALID, "%s must not be negative (got %lld ms)", what,
                           (long long)ms);
   if (ms > LEASELOCK_TTL_MAX_MS)
      return ll_error_set (err, LEASELOCK_INVALID, "%s must be at most 30 days (got %lld ms)", what,
                           (long long)ms);
   return true;
}

/* A duration that is not 0. */
bool ll_check_ttl (int64_t ms, const char *what, leaselock_error_t *err)
{
   if (ms < 1)
      return ll_error_set (err, LEASELOCK_INVALID, "%s must be at least 1 ms (got %lld ms)", what,
                           (long long)ms);
   return ll_check_duration (ms, what, err);
}

bool ll_owner_new (char out[LEASELOCK_OWNER_LEN + 1], leaselock_error_t *err)
{
   unsigned char raw[16];
   if (!ll_random_bytes (raw, sizeof raw))
      return ll_error_set (err, LEASELOCK_BACKEND, "getrandom failed: %s", strerror (errno));
   static const char hex[] = "0123456789abcdef";
   for (size_t i = 0; i < sizeof raw; i++) {
      out[2 * i] = hex[raw[i] >> 4];
      out[2 * i + 1] = hex[raw[i] & 15];
   }
   out[LEASELOCK_OWNER_LEN] = '\0';
   return true;
}
