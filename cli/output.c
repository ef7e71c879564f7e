/*
 * output.c - what the leaselock CLI writes: its messages and exit statuses
 * for failed calls, durations that parse back, text for a terminal, JSON.
 */
#include "cli.h"

#include <inttypes.h>
#include <stdarg.h>
#include <string.h>

const char *cmd_name = "leaselock";
bool verbose;

/* --verbose: one line per event of the core, from whatever thread. */
void print_log_event (const leaselock_log_event_t *ev, void *user_data)
{
   (void)user_data;
   flockfile (stderr);
   fprintf (stderr, "%s: %s %s", cmd_name, leaselock_log_level_name (ev->level), ev->event);
   if (ev->key) {
      fputs (" \"", stderr);
      put_text (stderr, ev->key, ev->key_len);
      fprintf (stderr, "\" (fence %" PRId64 ")", ev->fence);
   }
   fprintf (stderr, ": %s\n", ev->message);
   funlockfile (stderr);
}

/* Prints "leaselock[ SUBCOMMAND]: message" on stderr. */
static void vsay (const char *fmt, va_list ap)
{
   fprintf (stderr, "%s: ", cmd_name);
   vfprintf (stderr, fmt, ap);
   fputc ('\n', stderr);
}

void say (const char *fmt, ...)
{
   va_list ap;
   va_start (ap, fmt);
   vsay (fmt, ap);
   va_end (ap);
}

/* A usage error: the message, a hint, EXIT_USAGE. */
int usage_error (const char *fmt, ...)
{
   va_list ap;
   va_start (ap, fmt);
   vsay (fmt, ap);
   va_end (ap);
   fputs ("Try 'leaselock --help'.\n", stderr);
   return EXIT_USAGE;
}

/* The exit status for a failed call's error code. */
static int exit_for (const leaselock_error_t *err)
{
   switch (err->code) {
      case LEASELOCK_INVALID:
         return EXIT_USAGE;
      case LEASELOCK_BACKEND:
      case LEASELOCK_UNSUPPORTED:
         return EXIT_BACKEND;
      case LEASELOCK_BUSY:
      case LEASELOCK_TIMEOUT:
         return EXIT_BUSY;
      case LEASELOCK_NOT_HELD:
      case LEASELOCK_LOST:
         return EXIT_LOST;
      default:
         return EXIT_INTERNAL;
   }
}

/* Reports a failed call ("what: CODE: message") and gives its exit status. */
int fail (const char *what, const leaselock_error_t *err)
{
   say ("%s: %s: %s", what, leaselock_code_name (err->code), err->message);
   return exit_for (err);
}

/* A duration as the core shows it (leaselock_format_duration: one number
 * and one unit, which the CLI reads back), rounded to the nearest step. */
void fmt_ms (int64_t ms, char *buf, size_t size)
{
   leaselock_format_duration (ms, buf, size);
}

/* A limit, shown so that it is still accepted when typed back: rounded to
 * the nearest step unless that went over it, then in whole ms. */
void fmt_limit (int64_t ms, char *buf, size_t size)
{
   int64_t back;
   leaselock_format_duration (ms, buf, size);
   if (!leaselock_parse_duration (buf, &back, NULL) || back > ms)
      snprintf (buf, size, "%" PRId64 "ms", ms);
}

/* Writes s (len bytes) for a terminal: control bytes become \xNN. */
void put_text (FILE *f, const char *s, size_t len)
{
   for (size_t i = 0; i < len; i++) {
      unsigned char c = (unsigned char)s[i];
      if (c < 0x20 || c == 0x7f)
         fprintf (f, "\\x%02x", c);
      else
         fputc (c, f);
   }
}

/* The JSON escape of the ASCII byte c (written into buf when numeric), or
 * NULL when c stands for itself. */
static const char *json_escape (unsigned char c, char buf[8])
{
   static const char *const named[] = {
      ['"'] = "\\\"", ['\\'] = "\\\\", ['\n'] = "\\n", ['\r'] = "\\r",
      ['\t'] = "\\t", ['\b'] = "\\b",  ['\f'] = "\\f",
   };
   if (c < sizeof named / sizeof named[0] && named[c])
      return named[c];
   if (c < 0x20 || c == 0x7f) {
      snprintf (buf, 8, "\\u%04x", c);
      return buf;
   }
   return NULL;
}

/* Writes s as a JSON string: escapes quotes, backslashes and control
 * characters; each byte that is not part of valid UTF-8 (as the core
 * judges it) becomes U+FFFD. */
void put_json_string (FILE *f, const char *s, size_t len)
{
   fputc ('"', f);
   for (size_t i = 0; i < len;) {
      size_t end = i + leaselock_utf8_valid_len (s + i, len - i);
      for (; i < end; i++) {
         char buf[8];
         const char *esc = json_escape ((unsigned char)s[i], buf);
         if (esc)
            fputs (esc, f);
         else
            fputc (s[i], f);
      }
      if (i < len) {
         fputs ("\\ufffd", f);
         i++;
      }
   }
   fputc ('"', f);
}

/* "held", "min-hold" (released, but min_hold keeps it blocked) or "free". */
const char *record_state (const leaselock_record_t *r)
{
   if (r->expires_in_ms <= 0)
      return "free";
   return r->owner[0] ? "held" : "min-hold";
}

void put_record_json (FILE *f, const leaselock_record_t *r)
{
   fputs ("{\"key\":", f);
   put_json_string (f, r->key, r->key_len);
   fprintf (f, ",\"state\":\"%s\",\"owner\":", record_state (r));
   if (r->owner[0])
      put_json_string (f, r->owner, strlen (r->owner));
   else
      fputs ("null", f);
   fprintf (f,
            ",\"fence\":%" PRId64 ",\"holds\":%" PRId64 ",\"expires_in_ms\":%" PRId64 ",\"host\":",
            r->fence, r->holds, r->expires_in_ms);
   put_json_string (f, r->host, strnlen (r->host, sizeof r->host));
   fprintf (f, ",\"pid\":%" PRId64 ",\"label\":", r->pid);
   put_json_string (f, r->label, strnlen (r->label, sizeof r->label));
   fputc ('}', f);
}

/* "host pid 123 (label)" */
void put_holder (FILE *f, const leaselock_record_t *r)
{
   put_text (f, r->host, strnlen (r->host, sizeof r->host));
   fprintf (f, " pid %" PRId64, r->pid);
   if (r->label[0]) {
      fputs (" (", f);
      put_text (f, r->label, strnlen (r->label, sizeof r->label));
      fputc (')', f);
   }
}
