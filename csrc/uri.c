/* uri.c - scheme://[user[:password]@]host[:port][/path][?a=b&c=d] */
#include "ll_internal.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static int hexval (char c)
{
   if (c >= '0' && c <= '9')
      return c - '0';
   c = (char)tolower ((unsigned char)c);
   if (c >= 'a' && c <= 'f')
      return c - 'a' + 10;
   return -1;
}

/* Set by decode when it runs out of memory: ll_uri_parse then fails with
 * NOMEM, not with a bad escape. */
static _Thread_local bool decode_nomem;

/* Percent-decodes [s, s+n) into a new string; NULL on a bad escape or an
 * encoded NUL (which no component may hold), or out of memory. */
static char *decode (const char *s, size_t n, bool plus_is_space)
{
   char *out = malloc (n + 1);
   if (!out) {
      decode_nomem = true;
      return NULL;
   }
   size_t o = 0;
   for (size_t i = 0; i < n; i++) {
      if (s[i] == '%') {
         if (i + 2 >= n) { /* truncated escape */
            free (out);
            return NULL;
         }
         int a = hexval (s[i + 1]), b = hexval (s[i + 2]);
         if (a < 0 || b < 0 || (a == 0 && b == 0)) {
            free (out);
            return NULL;
         }
         out[o++] = (char)(a * 16 + b);
         i += 2;
      } else if (plus_is_space && s[i] == '+') {
         out[o++] = ' ';
      } else {
         out[o++] = s[i];
      }
   }
   out[o] = '\0';
   return out;
}

char *ll_percent_decode (const char *s, size_t n, bool plus_is_space, bool *nomem)
{
   decode_nomem = false;
   char *out = decode (s, n, plus_is_space);
   if (nomem)
      *nomem = decode_nomem;
   return out;
}

bool ll_uri_int_option (const char *backend,
                        const char *name,
                        const char *value,
                        int64_t min,
                        int64_t max,
                        const char *unit,
                        int64_t *out,
                        leaselock_error_t *err)
{
   char *end;
   errno = 0;
   long long n = strtoll (value, &end, 10);
   /* strtoll skips leading blanks and takes a sign: neither is a number
    * a URI should carry. */
   if (!isdigit ((unsigned char)value[0]) || *end || errno || n < min || n > max)
      return ll_error_set (err, LEASELOCK_INVALID,
                           "%s URI option %s=\"%.32s\": expected whole %s from %lld to %lld",
                           backend, name, value, unit, (long long)min, (long long)max);
   *out = (int64_t)n;
   return true;
}

void ll_uri_cleanup (ll_uri_t *uri)
{
   if (!uri)
      return;
   free (uri->scheme);
   free (uri->user);
   free (uri->password);
   free (uri->host);
   free (uri->path);
   for (int i = 0; i < uri->n_params; i++) {
      free (uri->params[i].name);
      free (uri->params[i].value);
   }
   memset (uri, 0, sizeof *uri);
}

#define FAIL(...)                                                                                  \
   do {                                                                                            \
      ll_error_set (err, LEASELOCK_INVALID, __VA_ARGS__);                                          \
      goto fail;                                                                                   \
   } while (0)

bool ll_uri_parse (const char *text, ll_uri_t *uri, leaselock_error_t *err)
{
   memset (uri, 0, sizeof *uri);
   decode_nomem = false;
   if (!text)
      return ll_error_set (err, LEASELOCK_INVALID, "uri is NULL");
   if (!ll_uri_check_at (text, err))
      return false;
   char shown[160];
   ll_uri_redact (text, shown, sizeof shown);

   const char *sep = strstr (text, "://");
   if (!sep || sep == text)
      FAIL ("malformed URI \"%s\": expected scheme://...", shown);
   for (const char *p = text; p < sep; p++)
      if (!isalnum ((unsigned char)*p) && *p != '+' && *p != '-' && *p != '.')
         FAIL ("malformed URI \"%s\": bad character in the scheme", shown);
   uri->scheme = strndup (text, (size_t)(sep - text));
   if (!uri->scheme)
      goto nomem;
   for (char *p = uri->scheme; *p; p++)
      *p = (char)tolower ((unsigned char)*p);

   const char *auth = sep + 3;
   const char *auth_end = auth + strcspn (auth, "/?#");
   /* The first '@', as libpq and libmongoc split it; ll_uri_check_at
    * refused any other '@' before the first '/'. */
   const char *at = memchr (auth, '@', (size_t)(auth_end - auth));
   const char *hostpart = auth;
   if (at) {
      const char *colon = memchr (auth, ':', (size_t)(at - auth));
      const char *uend = colon ? colon : at;
      if (!(uri->user = decode (auth, (size_t)(uend - auth), false)))
         FAIL ("malformed URI \"%s\": bad percent-escape in the user name", shown);
      if (colon && !(uri->password = decode (colon + 1, (size_t)(at - colon - 1), false)))
         FAIL ("malformed URI \"%s\": bad percent-escape in the password", shown);
      hostpart = at + 1;
   }
   const char *port_at = NULL;
   const char *hstart = hostpart, *hend = auth_end;
   if (*hostpart == '[') {
      const char *rb = memchr (hostpart, ']', (size_t)(auth_end - hostpart));
      if (!rb)
         FAIL ("malformed URI \"%s\": unterminated [ in the host", shown);
      hstart = hostpart + 1;
      hend = rb;
      if (rb + 1 < auth_end) {
         if (rb[1] != ':')
            FAIL ("malformed URI \"%s\": unexpected text after ]", shown);
         port_at = rb + 2;
      }
   } else {
      const char *colon = memchr (hostpart, ':', (size_t)(auth_end - hostpart));
      if (colon) {
         hend = colon;
         port_at = colon + 1;
      }
   }
   if (!(uri->host = decode (hstart, (size_t)(hend - hstart), false)))
      FAIL ("malformed URI \"%s\": bad percent-escape in the host", shown);
   if (port_at) {
      long port = 0;
      const char *p = port_at;
      if (p == auth_end)
         FAIL ("malformed URI \"%s\": empty port", shown);
      for (; p < auth_end; p++) {
         if (!isdigit ((unsigned char)*p) || port > 65535)
            FAIL ("malformed URI \"%s\": the port must be a number from 1 to 65535", shown);
         port = port * 10 + (*p - '0');
      }
      if (port < 1 || port > 65535)
         FAIL ("malformed URI \"%s\": the port must be a number from 1 to 65535", shown);
      uri->port = (int)port;
   }

   const char *path = auth_end;
   const char *path_end = path + strcspn (path, "?#");
   if (!(uri->path = decode (path, (size_t)(path_end - path), false)))
      FAIL ("malformed URI \"%s\": bad percent-escape in the path", shown);
   if (*path_end == '?') {
      const char *q = path_end + 1;
      const char *q_end = q + strcspn (q, "#");
      while (q < q_end) {
         const char *amp = memchr (q, '&', (size_t)(q_end - q));
         const char *item_end = amp ? amp : q_end;
         if (item_end > q) {
            if (uri->n_params == LL_URI_MAX_PARAMS)
               FAIL ("malformed URI \"%s\": more than %d options", shown, LL_URI_MAX_PARAMS);
            const char *eq = memchr (q, '=', (size_t)(item_end - q));
            const char *name_end = eq ? eq : item_end;
            ll_uri_param_t *prm = &uri->params[uri->n_params];
            prm->name = decode (q, (size_t)(name_end - q), true);
            prm->value =
              eq ? decode (eq + 1, (size_t)(item_end - eq - 1), true) : decode (q, 0, false);
            if (!prm->name || !prm->value) {
               free (prm->name);
               free (prm->value);
               prm->name = prm->value = NULL;
               FAIL ("malformed URI \"%s\": bad percent-escape in an option", shown);
            }
            uri->n_params++;
         }
         q = amp ? amp + 1 : q_end;
      }
   }
   return true;

fail:
   if (!decode_nomem)
      goto cleanup;
nomem:
   ll_error_set (err, LEASELOCK_NOMEM, "out of memory parsing a URI");
cleanup:
   ll_uri_cleanup (uri);
   return false;
}

const char *ll_uri_param (const ll_uri_t *uri, const char *name)
{
   for (int i = 0; i < uri->n_params; i++)
      if (!strcmp (uri->params[i].name, name))
         return uri->params[i].value;
   return NULL;
}

/* ---- redaction --------------------------------------------------------
 *
 * Each driver reads a URI its own way, so what is secret is the union of
 * their readings (over-hiding is harmless, under-hiding leaks):
 * - libpq (conninfo_uri_parse_options): the user info ends at the first '@'
 *   met before any '/' ('?' and '#' do not stop it); option names and
 *   values are percent-decoded; values end at '&'.
 * - libmongoc 1.23 (mongoc_uri_parse, scan_to_unichar): the same first '@'
 *   before the first '/', but a backslash escapes the next character, even
 *   '/', '@' or '&'; option names are matched without case.
 * - leaselock's own parser (MySQL, SQLite): the user info ends at the first
 *   '@' before any of "/?#".
 * So the password is taken as everything from the first ':' of the user
 * info to the last '@' before the first unescaped '/' (or before the first
 * '=', whichever is later), and a secret option
 * as any name (decoded, without case) starting after a '?' or '&' (or after
 * a space in keyword/value text), its value running to the next unescaped
 * '&'. ll_uri_check_at refuses the URIs where these readings disagree. */

/* URI options whose value is a secret (matched after percent-decoding,
 * without case). */
static bool secret_option (const char *name, size_t len)
{
   static const char *const secrets[] = { "password",
                                          "passwd",
                                          "pwd",
                                          "sslpassword",
                                          "authmechanismproperties",
                                          "tlscertificatekeyfilepassword",
                                          "sslclientcertificatekeypassword" };
   char dec[40];
   size_t n = 0;
   for (size_t i = 0; i < len; i++) {
      if (n == sizeof dec)
         return false; /* longer than any secret name */
      int a, b;
      if (name[i] == '%' && i + 2 < len && (a = hexval (name[i + 1])) >= 0 &&
          (b = hexval (name[i + 2])) >= 0) {
         dec[n++] = (char)(a * 16 + b);
         i += 2;
      } else {
         dec[n++] = name[i];
      }
   }
   for (size_t i = 0; i < sizeof secrets / sizeof secrets[0]; i++)
      if (strlen (secrets[i]) == n && !strncasecmp (dec, secrets[i], n))
         return true;
   return false;
}

/* Sets mask[i] for each byte of text[0..n) that some driver may read as a
 * secret (see above). */
static void mark_secrets (const char *text, size_t n, unsigned char *mask)
{
   memset (mask, 0, n);
   const char *sep = strstr (text, "://");
   size_t start = 0;
   if (sep) {
      size_t a = (size_t)(sep + 3 - text), f = a, at = n;
      while (f < n && text[f] != '/')
         f += (text[f] == '\\' && f + 1 < n) ? 2 : 1;
      if (f > n)
         f = n;
      /* Also up to the last '@' before the first '=' (no option has begun
       * there): a password holding '/', '?' or '#' unescaped, which the
       * drivers misread as host and port, is hidden too. */
      const char *eq = strchr (text + a, '=');
      size_t lim = eq ? (size_t)(eq - text) : n;
      for (size_t i = a; i < (f > lim ? f : lim); i++)
         if (text[i] == '@')
            at = i;
      const char *colon = at < n ? memchr (text + a, ':', at - a) : NULL;
      if (colon)
         memset (mask + (colon + 1 - text), 1, at - (size_t)(colon + 1 - text));
      start = a;
   }
   for (size_t s = start; s < n; s++) {
      bool begins = s > start ? (text[s - 1] == '?' || text[s - 1] == '&')
                              : !sep; /* keyword/value text starts with a name */
      if (!sep && s > 0 && isspace ((unsigned char)text[s - 1]))
         begins = true;
      if (!begins)
         continue;
      size_t e = s;
      while (e < n && text[e] != '=' && text[e] != '&' && text[e] != '?' &&
             !(!sep && isspace ((unsigned char)text[e])))
         e++;
      if (e == n || text[e] != '=' || !secret_option (text + s, e - s))
         continue;
      size_t v = e + 1;
      while (v < n && text[v] != '&')
         v += (text[v] == '\\' && v + 1 < n) ? 2 : 1;
      if (v > n)
         v = n;
      memset (mask + e + 1, 1, v - e - 1);
   }
}

/* Appends n bytes of s to buf (size bytes) at *o, cut to fit; keeps it
 * NUL-terminated. */
static void put (char *buf, size_t size, size_t *o, const char *s, size_t n)
{
   if (*o + n >= size)
      n = size - 1 - *o;
   memcpy (buf + *o, s, n);
   *o += n;
   buf[*o] = '\0';
}

void ll_uri_redact (const char *text, char *buf, size_t size)
{
   if (!size)
      return;
   buf[0] = '\0';
   if (!text) {
      snprintf (buf, size, "(null)");
      return;
   }
   size_t n = strlen (text), o = 0;
   unsigned char small[512];
   unsigned char *mask = n <= sizeof small ? small : malloc (n);
   if (!mask) { /* no room to work out what to hide: hide everything */
      snprintf (buf, size, "(URI hidden)");
      return;
   }
   mark_secrets (text, n, mask);
   for (size_t i = 0; i < n && o + 1 < size;) {
      size_t j = i;
      while (j < n && mask[j] == mask[i])
         j++;
      if (mask[i])
         put (buf, size, &o, "***", 3);
      else
         put (buf, size, &o, text + i, j - i);
      i = j;
   }
   if (mask != small)
      free (mask);
}

/* Adds text[from, to), raw and percent-decoded. */
static bool add_span (ll_secrets_t *s, const char *text, size_t from, size_t to)
{
   if (to <= from)
      return true;
   if (!ll_secrets_add (s, text + from, to - from))
      return false;
   char *dec = malloc (to - from + 1);
   if (!dec)
      return false;
   size_t o = 0;
   for (size_t i = from; i < to; i++) {
      int a, b;
      if (text[i] == '%' && i + 2 < to && (a = hexval (text[i + 1])) >= 0 &&
          (b = hexval (text[i + 2])) >= 0) {
         dec[o++] = (char)(a * 16 + b);
         i += 2;
      } else {
         dec[o++] = text[i];
      }
   }
   bool ok = o == to - from || ll_secrets_add (s, dec, o);
   memset (dec, 0, o);
   free (dec);
   return ok;
}

bool ll_secrets_from_uri (ll_secrets_t *s, const char *text)
{
   if (!text)
      return true;
   size_t n = strlen (text);
   unsigned char *mask = malloc (n + 1);
   if (!mask)
      return false;
   mark_secrets (text, n, mask);
   bool ok = true;
   for (size_t i = 0; i < n && ok;) {
      size_t j = i;
      while (j < n && mask[j] == mask[i])
         j++;
      if (mask[i]) {
         /* The run, and what a driver that stops at the first '@', '&' or
          * '#' inside it reads (the drivers' messages quote those). */
         ok = add_span (s, text, i, j);
         for (const char *stop = "@&#"; *stop && ok; stop++) {
            const char *c = memchr (text + i, *stop, j - i);
            if (c)
               ok = add_span (s, text, i, (size_t)(c - text));
         }
      }
      i = j;
   }
   free (mask);
   return ok;
}

bool ll_uri_check_at (const char *text, leaselock_error_t *err)
{
   const char *sep = text ? strstr (text, "://") : NULL;
   if (!sep)
      return true;
   const char *a = sep + 3;
   const char *f = a + strcspn (a, "/");
   const char *auth_end = a + strcspn (a, "/?#");
   int ats = 0;
   const char *at = NULL;
   for (const char *p = a; p < f; p++)
      if (*p == '@' && !ats++)
         at = p;
   /* "\\@" is no '@' to libmongoc. */
   if (ats > 1 || (ats == 1 && (at > auth_end || (at > a && at[-1] == '\\')))) {
      char shown[160];
      ll_uri_redact (text, shown, sizeof shown);
      return ll_error_set (err, LEASELOCK_INVALID,
                           "ambiguous URI \"%s\": more than one '@', or an '@' after '?', '#' or "
                           "'\\', before the first '/'; write an '@' in a user name, password or "
                           "option as %%40",
                           shown);
   }
   return true;
}
