/* uri.c - scheme://[user[:password]@]host[:port][/path][?a=b&c=d] */
#include "ll_internal.h"

#include <ctype.h>
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
   const char *at = NULL;
   for (const char *p = auth; p < auth_end; p++)
      if (*p == '@')
         at = p; /* the last '@': passwords may hold an unescaped one */
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

/* URI options whose value is a secret (matched without case). */
static bool secret_option (const char *name, size_t len)
{
   static const char *const secrets[] = { "password",
                                          "pwd",
                                          "sslpassword",
                                          "authmechanismproperties",
                                          "tlscertificatekeyfilepassword",
                                          "sslclientcertificatekeypassword" };
   for (size_t i = 0; i < sizeof secrets / sizeof secrets[0]; i++)
      if (strlen (secrets[i]) == len && !strncasecmp (name, secrets[i], len))
         return true;
   return false;
}

void ll_uri_redact (const char *text, char *buf, size_t size)
{
   if (!size)
      return;
   if (!text) {
      snprintf (buf, size, "(null)");
      return;
   }
   size_t o = 0;
   buf[0] = '\0';
   const char *p = text;
   const char *sep = strstr (text, "://");
   if (sep) {
      /* The user info ends at the last '@': a password may hold '/', '?'
       * or '#' unescaped. (An '@' later in the URI only hides more.) */
      const char *auth = sep + 3;
      const char *at = strrchr (auth, '@');
      const char *colon = at ? memchr (auth, ':', (size_t)(at - auth)) : NULL;
      if (colon) {
         put (buf, size, &o, text, (size_t)(colon + 1 - text));
         put (buf, size, &o, "***", 3);
         p = at;
      }
   }
   const char *q = strchr (p, '?');
   put (buf, size, &o, p, q ? (size_t)(q - p) : strlen (p));
   /* Options: name=value pairs after '?', separated by '&'. */
   while (q) {
      put (buf, size, &o, q, 1);
      const char *opt = q + 1;
      q = strchr (opt, '&');
      size_t len = q ? (size_t)(q - opt) : strlen (opt);
      const char *eq = memchr (opt, '=', len);
      if (eq && secret_option (opt, (size_t)(eq - opt))) {
         put (buf, size, &o, opt, (size_t)(eq + 1 - opt));
         put (buf, size, &o, "***", 3);
      } else {
         put (buf, size, &o, opt, len);
      }
   }
}
