/*
 * admin.c - the leaselock CLI's commands that look at or clear records:
 * status, list and release --force.
 */
#include "cli.h"

#include <inttypes.h>
#include <string.h>

leaselock_client_t *open_client (const char *uri, const char *label, int *status)
{
   leaselock_error_t err;
   leaselock_client_t *client = leaselock_client_new (uri, label, &err);
   if (!client)
      *status = fail ("cannot open the lock database", &err);
   return client;
}

/* ---- status ----------------------------------------------------------- */

/* One field a line, for a record that was found. */
static void put_status_lines (const leaselock_record_t *rec)
{
   char when[32];
   fmt_ms (rec->expires_in_ms, when, sizeof when);
   fputs ("key:        ", stdout);
   put_text (stdout, rec->key, rec->key_len);
   fprintf (stdout, "\nstate:      %s\n", record_state (rec));
   fprintf (stdout, "owner:      %s\n", rec->owner[0] ? rec->owner : "-");
   fprintf (stdout, "fence:      %" PRId64 "\n", rec->fence);
   if (rec->expires_in_ms > 0)
      fprintf (stdout, "expires in: %s\n", when);
   else
      fprintf (stdout, "expired:    %s ago\n", when);
   fputs ("holder:     ", stdout);
   put_holder (stdout, rec);
   fputc ('\n', stdout);
}

/* Prints what status found about key (rec is read only when found): a JSON
 * object (null without a record) or one field a line. Returns status's exit
 * status. */
static int print_status (const char *key, const leaselock_record_t *rec, bool found, bool json)
{
   if (json) {
      if (found)
         put_record_json (stdout, rec);
      else
         fputs ("null", stdout);
      fputc ('\n', stdout);
   } else if (!found) {
      fputs ("key:        ", stdout);
      put_text (stdout, key, strlen (key));
      fputs ("\nstate:      free (no record)\n", stdout);
   } else {
      put_status_lines (rec);
   }
   return !found ? EXIT_NO_RECORD : rec->expires_in_ms > 0 ? EXIT_HELD_OK : EXIT_FREE;
}

int cmd_status (const char *uri, int argc, char **argv)
{
   const char *key = NULL;
   bool json = false;
   int parsed =
     parse_flag_and_arg (argc, argv, &uri, "--json", &json, &key, "status takes one KEY");
   if (parsed != PARSED)
      return parsed;
   if (!key)
      return usage_error ("missing KEY");

   int status = EXIT_INTERNAL;
   leaselock_client_t *client = open_client (uri, NULL, &status);
   if (!client)
      return status;
   leaselock_record_t rec;
   bool found = false;
   leaselock_error_t err;
   if (!leaselock_inspect (client, key, strlen (key), &rec, &found, &err))
      status = fail ("status", &err);
   else
      status = print_status (key, &rec, found, json);
   leaselock_client_destroy (client);
   return status;
}

/* ---- list ------------------------------------------------------------- */

typedef struct list_ctx
{
   bool json;
   size_t count;
} list_ctx_t;

static bool list_one (const leaselock_record_t *r, void *user_data)
{
   list_ctx_t *ctx = user_data;
   if (ctx->json) {
      fputs (ctx->count ? ",\n" : "\n", stdout);
      put_record_json (stdout, r);
   } else {
      char when[32] = "-";
      if (r->expires_in_ms > 0)
         fmt_ms (r->expires_in_ms, when, sizeof when);
      put_text (stdout, r->key, r->key_len);
      fprintf (stdout,
               "  %s  fence=%" PRId64 "  expires_in=%s  owner=%s  holder=", record_state (r),
               r->fence, when, r->owner[0] ? r->owner : "-");
      put_holder (stdout, r);
      fputc ('\n', stdout);
   }
   ctx->count++;
   return true;
}

int cmd_list (const char *uri, int argc, char **argv)
{
   const char *prefix = NULL;
   list_ctx_t ctx = { false, 0 };
   int parsed =
     parse_flag_and_arg (argc, argv, &uri, "--json", &ctx.json, &prefix, "list takes one PREFIX");
   if (parsed != PARSED)
      return parsed;
   int status = EXIT_INTERNAL;
   leaselock_client_t *client = open_client (uri, NULL, &status);
   if (!client)
      return status;
   leaselock_error_t err;
   if (ctx.json)
      fputc ('[', stdout);
   bool ok = leaselock_list (client, prefix ? prefix : "", prefix ? strlen (prefix) : 0, list_one,
                             &ctx, &err);
   if (ctx.json)
      fputs (ctx.count ? "\n]\n" : "]\n", stdout);
   status = ok ? 0 : fail ("list", &err);
   leaselock_client_destroy (client);
   return status;
}

/* ---- release ---------------------------------------------------------- */

int cmd_release (const char *uri, int argc, char **argv)
{
   const char *key = NULL;
   bool force = false;
   int parsed =
     parse_flag_and_arg (argc, argv, &uri, "--force", &force, &key, "release takes one KEY");
   if (parsed != PARSED)
      return parsed;
   if (!key)
      return usage_error ("missing KEY");
   if (!force)
      return usage_error ("release needs --force: it clears the lock whoever holds it "
                          "(a lock held by \"leaselock run\" is released when its command ends)");
   int status = EXIT_INTERNAL;
   leaselock_client_t *client = open_client (uri, NULL, &status);
   if (!client)
      return status;
   bool took = false;
   leaselock_error_t err;
   if (leaselock_force_release (client, key, strlen (key), &took, &err)) {
      put_text (stdout, key, strlen (key));
      fputs (took ? ": released (a live lease was taken away)\n" : ": was not held\n", stdout);
      status = 0;
   } else {
      status = fail ("release", &err);
   }
   leaselock_client_destroy (client);
   return status;
}
