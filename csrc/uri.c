/* uri.c - scheme://[user[:password]@]host[:port][,...][/path][?a=b&c=d], its
 * one percent-decoder and the one scrubber of secrets (URIs and driver
 * messages). */
#include "ll_internal.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* ---- percent-decoding ------------------------------------------------ */

static int hexval (char c)
{
   if (c >= '0' && c <= '9')
      return c - '0';
   c = (char)tolower ((unsigned char)c);
   if (c >= 'a' && c <= 'f')
      return c - 'a' + 10;
   return -1;
}

/* The one decoder: s[0..n) into out (room for n + 1 bytes, NUL-
 * terminated), '+' as a space when plus_is_space. strict: a bad or cut
 * escape, or %00, fails (false). Otherwise such an escape stays as it
 * stands and %00 decodes to a NUL byte (*len counts past it): the reading
 * of a driver that takes any text. */
static bool decode_into (const char *s, size_t n, bool plus_is_space, bool strict, char *out,
                         size_t *len)
{
   size_t o = 0;
   for (size_t i = 0; i < n; i++) {
      int a = -1, b = -1;
      if (s[i] == '%' && i + 2 < n) {
         a = hexval (s[i + 1]);
         b = hexval (s[i + 2]);
      }
      if (s[i] == '%' && a >= 0 && b >= 0 && !(strict && a == 0 && b == 0)) {
         out[o++] = (char)(a * 16 + b);
         i += 2;
      } else if (s[i] == '%' && strict) {
         return false;
      } else {
         out[o++] = plus_is_space && s[i] == '+' ? ' ' : s[i];
      }
   }
   out[o] = '\0';
   *len = o;
   return true;
}

/* Strictly percent-decodes [s, s+n) into a new string; NULL on a bad
 * escape or an encoded NUL (which no component may hold), or out of
 * memory (then *nomem is set, else left as it is). */
static char *decode (const char *s, size_t n, bool plus_is_space, bool *nomem)
{
   char *out = malloc (n + 1);
   size_t len;
   if (!out)
      *nomem = true;
   else if (!decode_into (s, n, plus_is_space, true, out, &len)) {
      free (out);
      out = NULL;
   }
   return out;
}

char *ll_percent_decode (const char *s, size_t n, bool plus_is_space, bool *nomem)
{
   bool oom = false;
   char *out = decode (s, n, plus_is_space, &oom);
   if (nomem)
      *nomem = oom;
   return out;
}

/* ---- options --------------------------------------------------------- */

bool ll_uri_int_option (const char *backend, const char *name, const char *value, int64_t min,
                        int64_t max, const char *unit, int64_t *out, leaselock_error_t *err)
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

const char *ll_uri_param (const ll_uri_t *uri, const char *name)
{
   for (int i = 0; i < uri->n_params; i++)
      if (!strcmp (uri->params[i].name, name))
         return uri->params[i].value;
   return NULL;
}

/* ---- parsing --------------------------------------------------------- */

void ll_uri_cleanup (ll_uri_t *uri)
{
   if (!uri)
      return;
   free (uri->scheme);
   free (uri->user);
   if (uri->password)
      explicit_bzero (uri->password, strlen (uri->password));
   free (uri->password);
   for (int i = 0; i < uri->n_hosts; i++)
      free (uri->hosts[i]); /* uri->host is hosts[0] */
   free (uri->path);
   for (int i = 0; i < uri->n_params; i++) {
      free (uri->params[i].name);
      free (uri->params[i].value);
   }
   memset (uri, 0, sizeof *uri);
}

/* One ll_uri_parse: the URI it fills and how its failures read. On the
 * parsing thread's stack. */
typedef struct uri_parser
{
   ll_uri_t *uri;          /* borrowed: the caller's, filled */
   const char *shown;      /* the text as messages show it (password hidden) */
   leaselock_error_t *err; /* borrowed: the caller's */
   bool nomem;             /* a copy ran out of memory: NOMEM, not INVALID */
} uri_parser_t;

/* INVALID "malformed URI "<shown>": <why>" unless a copy ran out of
 * memory (ll_uri_parse then says NOMEM). Returns false. */
static bool malformed (uri_parser_t *ps, const char *why)
{
   if (ps->nomem)
      return false;
   return ll_error_set (ps->err, LEASELOCK_INVALID, "malformed URI \"%s\": %s", ps->shown, why);
}

/* The scheme, lower-cased; *rest points past its "://". */
static bool parse_scheme (uri_parser_t *ps, const char *text, const char **rest)
{
   const char *sep = strstr (text, "://");
   if (!sep || sep == text)
      return malformed (ps, "expected scheme://...");
   for (const char *p = text; p < sep; p++)
      if (!isalnum ((unsigned char)*p) && *p != '+' && *p != '-' && *p != '.')
         return malformed (ps, "bad character in the scheme");
   if (!(ps->uri->scheme = strndup (text, (size_t)(sep - text)))) {
      ps->nomem = true;
      return false;
   }
   for (char *p = ps->uri->scheme; *p; p++)
      *p = (char)tolower ((unsigned char)*p);
   *rest = sep + 3;
   return true;
}

/* user[:password] from auth[0..at). */
static bool parse_userinfo (uri_parser_t *ps, const char *auth, const char *at)
{
   const char *colon = memchr (auth, ':', (size_t)(at - auth));
   const char *uend = colon ? colon : at;
   if (!(ps->uri->user = decode (auth, (size_t)(uend - auth), false, &ps->nomem)))
      return malformed (ps, "bad percent-escape in the user name");
   if (colon &&
       !(ps->uri->password = decode (colon + 1, (size_t)(at - colon - 1), false, &ps->nomem)))
      return malformed (ps, "bad percent-escape in the password");
   return true;
}

/* A port of 1..65535 from p[0..end). */
static bool parse_port (uri_parser_t *ps, const char *p, const char *end, int *out)
{
   long port = 0;
   if (p == end)
      return malformed (ps, "empty port");
   for (; p < end && port <= 65535; p++) {
      if (!isdigit ((unsigned char)*p))
         break;
      port = port * 10 + (*p - '0');
   }
   if (p < end || port < 1 || port > 65535)
      return malformed (ps, "the port must be a number from 1 to 65535");
   *out = (int)port;
   return true;
}

/* One host[:port] or [v6][:port] from hp[0..end), as host number i. */
static bool parse_host (uri_parser_t *ps, const char *hp, const char *end, int i)
{
   ll_uri_t *uri = ps->uri;
   const char *port_at = NULL, *hstart = hp, *hend = end;
   if (hp < end && *hp == '[') {
      const char *rb = memchr (hp, ']', (size_t)(end - hp));
      if (!rb)
         return malformed (ps, "unterminated [ in the host");
      hstart = hp + 1;
      hend = rb;
      if (rb + 1 < end && rb[1] != ':')
         return malformed (ps, "unexpected text after ]");
      port_at = rb + 1 < end ? rb + 2 : NULL;
   } else if ((hend = memchr (hp, ':', (size_t)(end - hp)))) {
      port_at = hend + 1;
   } else {
      hend = end;
   }
   if (!(uri->hosts[i] = decode (hstart, (size_t)(hend - hstart), false, &ps->nomem)))
      return malformed (ps, "bad percent-escape in the host");
   uri->n_hosts = i + 1;
   return !port_at || parse_port (ps, port_at, end, &uri->ports[i]);
}

/* The comma-separated host list of the authority, hp[0..end); host and
 * port name the first. An empty authority is one empty host. */
static bool parse_hosts (uri_parser_t *ps, const char *hp, const char *end)
{
   ll_uri_t *uri = ps->uri;
   for (int i = 0;; i++) {
      const char *comma = memchr (hp, ',', (size_t)(end - hp));
      const char *item_end = comma ? comma : end;
      if (i == LL_URI_MAX_HOSTS) {
         char why[48];
         snprintf (why, sizeof why, "more than %d hosts", LL_URI_MAX_HOSTS);
         return malformed (ps, why);
      }
      if (!parse_host (ps, hp, item_end, i))
         return false;
      if (!comma)
         break;
      hp = comma + 1;
   }
   uri->host = uri->hosts[0];
   uri->port = uri->ports[0];
   return true;
}

/* One name[=value] option from q[0..end), percent-decoded, '+' a space. */
static bool parse_param (uri_parser_t *ps, const char *q, const char *end)
{
   ll_uri_t *uri = ps->uri;
   if (uri->n_params == LL_URI_MAX_PARAMS) {
      char why[32];
      snprintf (why, sizeof why, "more than %d options", LL_URI_MAX_PARAMS);
      return malformed (ps, why);
   }
   const char *eq = memchr (q, '=', (size_t)(end - q));
   ll_uri_param_t *prm = &uri->params[uri->n_params];
   prm->name = decode (q, (size_t)((eq ? eq : end) - q), true, &ps->nomem);
   prm->value = eq ? decode (eq + 1, (size_t)(end - eq - 1), true, &ps->nomem)
                   : decode (q, 0, false, &ps->nomem);
   if (!prm->name || !prm->value) {
      free (prm->name);
      free (prm->value);
      prm->name = prm->value = NULL;
      return malformed (ps, "bad percent-escape in an option");
   }
   uri->n_params++;
   return true;
}

/* The path, then the options after '?' (up to a '#'). */
static bool parse_path_query (uri_parser_t *ps, const char *path)
{
   const char *path_end = path + strcspn (path, "?#");
   if (!(ps->uri->path = decode (path, (size_t)(path_end - path), false, &ps->nomem)))
      return malformed (ps, "bad percent-escape in the path");
   if (*path_end != '?')
      return true;
   const char *q = path_end + 1;
   const char *q_end = q + strcspn (q, "#");
   while (q < q_end) {
      const char *amp = memchr (q, '&', (size_t)(q_end - q));
      const char *item_end = amp ? amp : q_end;
      if (item_end > q && !parse_param (ps, q, item_end))
         return false;
      q = amp ? amp + 1 : q_end;
   }
   return true;
}

bool ll_uri_parse (const char *text, ll_uri_t *uri, leaselock_error_t *err)
{
   memset (uri, 0, sizeof *uri);
   if (!text)
      return ll_error_set (err, LEASELOCK_INVALID, "uri is NULL");
   if (!ll_uri_check_at (text, err))
      return false;
   char shown[160];
   ll_uri_redact (text, shown, sizeof shown);
   uri_parser_t ps = { .uri = uri, .shown = shown, .err = err };

   const char *auth = NULL;
   bool ok = parse_scheme (&ps, text, &auth);
   if (ok) {
      const char *auth_end = auth + strcspn (auth, "/?#");
      /* The first '@', as libpq and libmongoc split it; ll_uri_check_at
       * refused any other '@' before the first '/'. */
      const char *at = memchr (auth, '@', (size_t)(auth_end - auth));
      ok = (!at || parse_userinfo (&ps, auth, at)) &&
           parse_hosts (&ps, at ? at + 1 : auth, auth_end) && parse_path_query (&ps, auth_end);
   }
   if (ok)
      return true;
   if (ps.nomem)
      ll_error_set (err, LEASELOCK_NOMEM, "out of memory parsing a URI");
   ll_uri_cleanup (uri);
   return false;
}

/* ---- secrets: what is hidden -------------------------------------------
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
 * '&'. ll_uri_check_at refuses the URIs where these readings disagree.
 *
 * The one rule of the one scrubber (ll_scrub): a byte of a text is hidden
 * when a driver may read it as a secret where it stands (the reading
 * above, for a URI or keyword/value text) or when it is part of a secret
 * the caller knows (the URI's secrets, which a driver message may quote)
 * of LL_SECRET_MIN_LEN bytes or more; each run of hidden bytes shows as
 * "***". */

#define LL_SECRET_MIN_LEN 3

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
   char dec[3 * 40 + 1];
   size_t n;
   if (len >= sizeof dec)
      return false; /* longer than any secret name, even encoded */
   decode_into (name, len, false, false, dec, &n);
   for (size_t i = 0; i < sizeof secrets / sizeof secrets[0]; i++)
      if (strlen (secrets[i]) == n && !strncasecmp (dec, secrets[i], n))
         return true;
   return false;
}

/* Where the password of a URI ends: the last '@' before the first
 * unescaped '/' after a (or before the first '=', whichever is later);
 * n when there is none. */
static size_t userinfo_end (const char *text, size_t n, size_t a)
{
   size_t f = a, at = n;
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
   return at;
}

/* Marks the value of the secret option whose name may begin at s, if any:
 * to the next unescaped '&'. kv: keyword/value text (names also end at
 * blanks). */
static void mark_option (const char *text, size_t n, size_t s, bool kv, unsigned char *mask)
{
   size_t e = s;
   while (e < n && text[e] != '=' && text[e] != '&' && text[e] != '?' &&
          !(kv && isspace ((unsigned char)text[e])))
      e++;
   if (e == n || text[e] != '=' || !secret_option (text + s, e - s))
      return;
   size_t v = e + 1;
   while (v < n && text[v] != '&')
      v += (text[v] == '\\' && v + 1 < n) ? 2 : 1;
   if (v > n)
      v = n;
   memset (mask + e + 1, 1, v - e - 1);
}

/* Sets mask[i] for each byte of text[0..n) that some driver may read as a
 * secret (see above). */
static void mark_secrets (const char *text, size_t n, unsigned char *mask)
{
   const char *sep = strstr (text, "://");
   size_t start = 0;
   if (sep) {
      size_t a = (size_t)(sep + 3 - text), at = userinfo_end (text, n, a);
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
      if (begins)
         mark_option (text, n, s, !sep, mask);
   }
}

/* Sets mask[i] for each byte of text[0..n) inside an occurrence of a
 * secret of s of LL_SECRET_MIN_LEN bytes or more: shorter ones would hide
 * every such letter pair of a message (where they stand in a URI,
 * mark_secrets hides them still). */
static void mark_known (const char *text, size_t n, const ll_secrets_t *s, unsigned char *mask)
{
   for (size_t k = 0; s && k < s->n; k++) {
      size_t len = strlen (s->v[k]);
      if (len < LL_SECRET_MIN_LEN)
         continue;
      for (const char *p = text; (p = memmem (p, n - (size_t)(p - text), s->v[k], len)); p++)
         memset (mask + (p - text), 1, len);
   }
}

/* ---- secrets: the scrubber ------------------------------------------- */

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

/* A mask of text[0..n) by the one rule, in small (n bytes) or allocated;
 * NULL when out of memory. Free with free_mask. */
static unsigned char *new_mask (const char *text, size_t n, const ll_secrets_t *s,
                                unsigned char *small, size_t room)
{
   unsigned char *mask = n <= room ? small : malloc (n);
   if (mask) {
      memset (mask, 0, n);
      mark_secrets (text, n, mask);
      mark_known (text, n, s, mask);
   }
   return mask;
}

static void free_mask (unsigned char *mask, unsigned char *small)
{
   if (mask != small)
      free (mask);
}

/* The one scrubber: text to buf (cut to size) with every run of bytes the
 * rule hides replaced by "***"; everything hidden when out of memory. */
static void scrub (const char *text, const ll_secrets_t *s, char *buf, size_t size)
{
   size_t n = strlen (text), o = 0;
   unsigned char small[1024];
   unsigned char *mask = new_mask (text, n, s, small, sizeof small);
   buf[0] = '\0';
   if (!mask) { /* no room to work out what to hide: hide everything */
      snprintf (buf, size, "(hidden: out of memory)");
      return;
   }
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
   free_mask (mask, small);
}

void ll_uri_redact (const char *text, char *buf, size_t size)
{
   if (size)
      scrub (text ? text : "(null)", NULL, buf, size);
}

void ll_scrub_secrets (const char *msg, const ll_secrets_t *s, char *out, size_t size)
{
   if (size)
      scrub (msg ? msg : "", s, out, size);
}

/* ---- secrets: the set a connection keeps ----------------------------- */

void ll_secrets_init (ll_secrets_t *s)
{
   memset (s, 0, sizeof *s);
}

bool ll_secrets_add (ll_secrets_t *s, const char *secret, size_t len)
{
   if (!len)
      return true;
   for (size_t i = 0; i < s->n; i++)
      if (strlen (s->v[i]) == len && !memcmp (s->v[i], secret, len))
         return true;
   if (!ll_grow (&s->v, &s->cap, s->n, sizeof *s->v, 8))
      return false;
   if (!(s->v[s->n] = strndup (secret, len)))
      return false;
   s->n++;
   return true;
}

void ll_secrets_clear (ll_secrets_t *s)
{
   for (size_t i = 0; i < s->n; i++) {
      /* explicit_bzero: a memset right before free is dropped by -O2. */
      explicit_bzero (s->v[i], strlen (s->v[i]));
      free (s->v[i]);
   }
   free (s->v);
   ll_secrets_init (s);
}

/* Adds text[from, to), raw and as a driver decodes it. */
static bool add_span (ll_secrets_t *s, const char *text, size_t from, size_t to)
{
   if (to <= from)
      return true;
   if (!ll_secrets_add (s, text + from, to - from))
      return false;
   char *dec = malloc (to - from + 1);
   if (!dec)
      return false;
   size_t o;
   decode_into (text + from, to - from, false, false, dec, &o);
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
   unsigned char small[1024];
   unsigned char *mask = new_mask (text, n, NULL, small, sizeof small);
   if (!mask)
      return false;
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
   free_mask (mask, small);
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
