/* error.c - error codes, names and the one truncating setter. */
#include "ll_internal.h"

#include <stdio.h>
#include <string.h>

static const char *const names[] = {
   "OK",      "BUSY",    "TIMEOUT",     "NOT_HELD", "LOST",
   "INVALID", "BACKEND", "UNSUPPORTED", "NOMEM",    "INTERRUPTED",
};

static const char *const messages[] = {
   "success",
   "the lock is held by another owner",
   "timed out waiting for the lock",
   "the lease is not held by this owner",
   "the lease was lost",
   "invalid argument",
   "database backend error",
   "not supported",
   "out of memory",
   "the wait was interrupted",
};

const char *leaselock_code_name (leaselock_code_t code)
{
   if ((unsigned)code < sizeof names / sizeof names[0])
      return names[code];
   return "UNKNOWN";
}

const char *leaselock_code_message (leaselock_code_t code)
{
   if ((unsigned)code < sizeof messages / sizeof messages[0])
      return messages[code];
   return "unknown error code";
}

bool ll_error_set (leaselock_error_t *err, leaselock_code_t code, const char *fmt, ...)
{
   if (!err)
      return false;
   err->code = code;
   err->holder.known = false; /* a new error names no holder until one is read */
   va_list ap;
   va_start (ap, fmt);
   int n = vsnprintf (err->message, sizeof err->message, fmt, ap);
   va_end (ap);
   if (n < 0)
      snprintf (err->message, sizeof err->message, "%s", leaselock_code_message (code));
   return false;
}

void ll_error_clear (leaselock_error_t *err)
{
   if (err) {
      err->code = LEASELOCK_OK;
      err->message[0] = '\0';
      err->holder.known = false;
   }
}

leaselock_error_t *ll_error_start (leaselock_error_t *error, leaselock_error_t *local)
{
   leaselock_error_t *err = error ? error : local;
   ll_error_clear (err);
   return err;
}

const char *ll_key_shown (const char *key, size_t len, char buf[LL_KEY_SHOWN_SIZE])
{
   if (!key)
      len = 0;
   size_t n = len;
   if (n > LL_KEY_SHOWN_BYTES) {
      n = LL_KEY_SHOWN_BYTES;
      /* Back up over continuation bytes so no character is cut in two. */
      while (n > 0 && ((unsigned char)key[n] & 0xC0) == 0x80)
         n--;
   }
   if (n)
      memcpy (buf, key, n);
   if (n < len)
      memcpy (buf + n, "...", 3), n += 3;
   buf[n] = '\0';
   return buf;
}
