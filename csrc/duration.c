/* duration.c - "30s", "500ms", "1.5" (seconds) -> milliseconds. */
#include "ll_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool leaselock_parse_duration (const char *text, int64_t *ms, leaselock_error_t *error)
{
   if (!text)
      return ll_error_set (error, LEASELOCK_INVALID, "duration is NULL");
   if (!ms)
      return ll_error_set (error, LEASELOCK_INVALID, "ms is NULL");
   const char *p = text;
   if (!*p)
      return ll_error_set (error, LEASELOCK_INVALID, "duration is empty");
   /* Plain decimal only, [digits][.digits]: strtod alone would also take
    * hex ("0x10"), exponents, "inf" and "nan". What follows is the unit. */
   size_t digits = strspn (p, "0123456789"), frac = 0, len = digits;
   if (p[len] == '.') {
      frac = strspn (p + len + 1, "0123456789");
      len += 1 + frac;
   }
   char num[64];
   if (digits + frac == 0 || len >= sizeof num)
      return ll_error_set (error, LEASELOCK_INVALID,
                           "invalid duration \"%.64s\": expected a number and a unit such as 30s, "
                           "500ms, 2m, 1h, 1d",
                           text);
   memcpy (num, p, len);
   num[len] = '\0';
   double v = strtod (num, NULL);
   const char *end = p + len;
   double scale;
   if (!strcmp (end, "") || !strcmp (end, "s"))
      scale = 1000;
   else if (!strcmp (end, "ms"))
      scale = 1;
   else if (!strcmp (end, "m"))
      scale = 60000;
   else if (!strcmp (end, "h"))
      scale = 3600000;
   else if (!strcmp (end, "d"))
      scale = 86400000;
   else
      return ll_error_set (
        error, LEASELOCK_INVALID,
        "invalid duration \"%.64s\": unknown unit \"%.16s\" (use ms, s, m, h or d)", text, end);
   /* Every duration leaselock takes (TTL, wait, min_hold, grace) is at most
    * 30 days; rounding first so that "720h" is exactly the maximum. */
   double total = round (v * scale);
   if (!(total <= (double)LEASELOCK_TTL_MAX_MS))
      return ll_error_set (error, LEASELOCK_INVALID,
                           "duration \"%.64s\" is too long: at most 30 days (30d, %lld ms)", text,
                           (long long)LEASELOCK_TTL_MAX_MS);
   *ms = (int64_t)total;
   return true;
}

/* The CLI's way (cli/output.c, fmt_duration, which also rounds down for
 * limits typed back); see leaselock.h. */
void leaselock_format_duration (int64_t ms, char *buf, size_t size)
{
   static const struct
   {
      int64_t below, step, per_unit; /* per_unit: steps in one unit */
      const char *unit;
   } units[] = {
      { 1000, 1, 1, "ms" },          { 60000, 100, 10, "s" },         { 3600000, 600, 100, "m" },
      { 86400000, 36000, 100, "h" }, { INT64_MAX, 864000, 100, "d" },
   };
   if (ms < 0)
      ms = ms == INT64_MIN ? INT64_MAX : -ms;
   size_t u = 0;
   while (ms >= units[u].below)
      u++;
   int64_t q = ms / units[u].step;
   if (ms % units[u].step >= (units[u].step + 1) / 2)
      q++;
   int64_t whole = q / units[u].per_unit, frac = q % units[u].per_unit;
   if (frac == 0)
      snprintf (buf, size, "%lld%s", (long long)whole, units[u].unit);
   else if (units[u].per_unit == 10)
      snprintf (buf, size, "%lld.%lld%s", (long long)whole, (long long)frac, units[u].unit);
   else if (frac % 10 == 0)
      snprintf (buf, size, "%lld.%lld%s", (long long)whole, (long long)(frac / 10), units[u].unit);
   else
      snprintf (buf, size, "%lld.%02lld%s", (long long)whole, (long long)frac, units[u].unit);
}
