/*
 * admin.c - the leaselock CLI's commands that look at or clear records:
 * status (with -v, the database's durability too), list, release --force
 * and prune.
 */
#include "cli.h"

#include <inttypes.h>
#include <string.h>

/* ---- status ----------------------------------------------------------- */

/* What status found about its key: the lock, whatever its mode
 * (leaselock_lock_inspect), printed at once and its exit status kept. */
typedef struct status_ctx
{
   bool json;
   int status;
} status_ctx_t;

/* Prints the lock as a JSON object or one field a line; a lock that blocks
 * an acquire (a live record: held, or inside a min_hold) is held (0). */
static bool status_one (const leaselock_lock_info_t *l, void *user_data)
{
   status_ctx_t *ctx = user_data;
   if (ctx->json) {
      put_lock_json (stdout, l);
      fputc ('\n', stdout);
   } else {
      put_lock_lines (stdout, l);
   }
   ctx->status = l->live > 0 ? EXIT_HELD_OK : EXIT_FREE;
   return false;
}

/* status -v: how the database makes a grant survive a failover, one field
 * a line after the record's (leaselock_client_durability). */
static void put_durability_lines (const leaselock_durability_t *d)
{
   char when[32];
   fprintf (stdout, "durability: %s (durability=%s)\n", d->level, d->policy);
   fputs ("detail:     ", stdout);
   put_text (stdout, d->detail, strlen (d->detail));
   fputs ("\nprimary:    ", stdout);
   if (d->primary[0])
      put_text (stdout, d->primary, strlen (d->primary));
   else
      fputs ("- (none recorded)", stdout);
   if (d->fence_floor > 0)
      fprintf (stdout, "\nfences:     at least %" PRId64 " (the floor after a failover)\n",
               d->fence_floor);
   else
      fputs ("\nfences:     no floor (no failover seen)\n", stdout);
   fmt_ms (d->lock_delay_ms, when, sizeof when);
   if (d->lock_delay_ms > 0)
      fprintf (stdout, "lock-delay: %s left (no key is granted before: a new primary)\n", when);
   else
      fputs ("lock-delay: none\n", stdout);
   fmt_ms (d->max_ttl_ms, when, sizeof when);
   if (d->max_ttl_ms > 0)
      fprintf (stdout, "max_ttl:    %s (the longest TTL granted, and the lock-delay)\n", when);
   else
      fputs ("max_ttl:    none (no bound)\n", stdout);
}

static int status_call (leaselock_client_t *client, const admin_args_t *a)
{
   leaselock_durability_t dur;
   bool found = false;
   leaselock_error_t err;
   /* Read before anything is printed: a failure prints only its message. */
   if (a->verbose && !leaselock_client_durability (client, &dur, &err))
      return fail ("status", &err);
   status_ctx_t ctx = { a->flag, EXIT_NO_RECORD };
   if (!leaselock_lock_inspect (client, a->arg, strlen (a->arg), status_one, &ctx, &found, &err))
      return fail ("status", &err);
   if (!found && a->flag) {
      fputs ("null\n", stdout);
   } else if (!found) {
      fputs ("key:        ", stdout);
      put_text (stdout, a->arg, strlen (a->arg));
      fputs ("\nstate:      free (no record)\n", stdout);
   }
   if (!a->flag)
      put_database (stdout, client);
   if (a->verbose)
      put_durability_lines (&dur);
   return ctx.status;
}

/* ---- list ------------------------------------------------------------- */

typedef struct list_ctx
{
   bool json, held;
   size_t count;
} list_ctx_t;

/* One lock (a mode's records as one), or none with --held when free. */
static bool list_one (const leaselock_lock_info_t *l, void *user_data)
{
   list_ctx_t *ctx = user_data;
   if (ctx->held && l->live == 0)
      return true;
   if (ctx->json) {
      fputs (ctx->count ? ",\n" : "\n", stdout);
      put_lock_json (stdout, l);
   } else {
      put_lock_list_lines (stdout, l);
   }
   ctx->count++;
   return true;
}

static int list_call (leaselock_client_t *client, const admin_args_t *a)
{
   const char *prefix = a->arg;
   list_ctx_t ctx = { a->flag, a->held, 0 };
   leaselock_error_t err;
   if (ctx.json)
      fputc ('[', stdout);
   else
      put_database (stdout, client);
   bool ok = leaselock_locks (client, prefix ? prefix : "", prefix ? strlen (prefix) : 0, list_one,
                              &ctx, &err);
   if (ctx.json)
      fputs (ctx.count ? "\n]\n" : "]\n", stdout);
   return ok ? 0 : fail ("list", &err);
}

/* ---- release ---------------------------------------------------------- */

static int release_call (leaselock_client_t *client, const admin_args_t *a)
{
   bool took = false;
   leaselock_error_t err;
   if (!leaselock_force_release (client, a->arg, strlen (a->arg), &took, &err))
      return fail ("release", &err);
   put_text (stdout, a->arg, strlen (a->arg));
   fputs (took ? ": released (a live lease was taken away)\n" : ": was not held\n", stdout);
   return 0;
}

/* ---- the three commands ----------------------------------------------- */

/* How status, list and release read their arguments, and what they do with
 * the client. */
typedef struct admin_cmd
{
   const char *flag;         /* their one boolean option */
   const char *flag2;        /* list's second: --held */
   bool verbose_ok;          /* -v/--verbose is theirs too */
   const char *takes;        /* for a second positional argument */
   bool needs_key;           /* the positional argument must be there */
   const char *without_flag; /* the usage error when FLAG must be there, or NULL */
   int (*call) (leaselock_client_t *client, const admin_args_t *a);
} admin_cmd_t;

static const admin_cmd_t status_cmd = { .flag = "--json",
                                        .verbose_ok = true,
                                        .takes = "status takes one KEY",
                                        .needs_key = true,
                                        .call = status_call };
static const admin_cmd_t list_cmd = { .flag = "--json",
                                      .flag2 = "--held",
                                      .takes = "list takes one PREFIX",
                                      .call = list_call };
static const admin_cmd_t release_cmd = {
   .flag = "--force",
   .takes = "release takes one KEY",
   .needs_key = true,
   .without_flag = "release needs --force: it clears the lock whoever holds it (a lock held "
                   "by \"leaselock run\" is released when its command ends)",
   .call = release_call
};

/* Parses the arguments, opens the client, runs cmd->call, closes it. */
static int run_admin (const admin_cmd_t *cmd, const char *uri, int argc, char **argv)
{
   admin_args_t a = { .uri = uri };
   int parsed =
     parse_admin_args (argc, argv, cmd->flag, cmd->flag2, cmd->verbose_ok, cmd->takes, &a);
   if (parsed != PARSED)
      return parsed;
   if (a.verbose && a.flag)
      return usage_error ("--verbose adds lines of text: it does not go with --json");
   if (cmd->needs_key && !a.arg)
      return usage_error ("missing KEY");
   if (cmd->without_flag && !a.flag)
      return usage_error ("%s", cmd->without_flag);
   int status = EXIT_INTERNAL;
   leaselock_client_t *client = open_client (a.uri, NULL, &status);
   if (!client)
      return status;
   status = cmd->call (client, &a);
   leaselock_client_destroy (client);
   return status;
}

int cmd_status (const char *uri, int argc, char **argv)
{
   return run_admin (&status_cmd, uri, argc, argv);
}

int cmd_list (const char *uri, int argc, char **argv)
{
   return run_admin (&list_cmd, uri, argc, argv);
}

int cmd_release (const char *uri, int argc, char **argv)
{
   return run_admin (&release_cmd, uri, argc, argv);
}

/* ---- prune ------------------------------------------------------------ */

/* Deletes the expired records under the prefix (leaselock_prune) and says
 * how many. */
int cmd_prune (const char *uri, int argc, char **argv)
{
   prune_args_t a = { .uri = uri };
   int status = parse_prune_args (argc, argv, &a);
   if (status != PARSED)
      return status;
   leaselock_client_t *client = open_client (a.uri, NULL, &status);
   if (!client)
      return status;
   int64_t n = 0;
   leaselock_error_t err;
   const char *prefix = a.prefix ? a.prefix : "";
   if (leaselock_prune (client, prefix, strlen (prefix), a.older_than_ms, &n, &err)) {
      printf ("pruned %" PRId64 " record%s\n", n, n == 1 ? "" : "s");
      status = 0;
   } else {
      status = fail ("prune", &err);
   }
   leaselock_client_destroy (client);
   return status;
}
