/*
 * client.c - the one way every command of the leaselock CLI opens its
 * client: status, list, release and prune (admin.c), run (run.c) and run
 * --reentrant (reenter.c). --verbose hooks the client's log here, and
 * says which database the client works on and where that came from: the
 * same job run by cron, a shell and sudo may otherwise pick different
 * ones without a word.
 */
#include "cli.h"

#include <pwd.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <unistd.h>

/* Where the URI came from, for -v and for the messages of a failed open. */
static const char *uri_source (const char *uri, char *buf, size_t size)
{
   const char *env = getenv ("LEASELOCK_URI");
   if (uri && *uri)
      return "--uri";
   if (env && *env)
      return "LEASELOCK_URI";
   struct passwd *pw = getpwuid (geteuid ());
   snprintf (buf, size, "the default, in the home directory of user %s",
             pw && pw->pw_name ? pw->pw_name : "?");
   return buf;
}

/* A command is a short process that opens one database and runs a few
 * statements: SQLite's per-connection memory set up ahead (120 KiB of
 * lookaside slots, a first bulk of 20 page-cache lines), each slot
 * written at the open, costs it more page faults than it saves. This
 * process is ours to configure (the library never calls sqlite3_config):
 * before SQLite's initialization, so before the first client. */
static void tune_sqlite (void)
{
   sqlite3_config (SQLITE_CONFIG_LOOKASIDE, 0, 0);
   sqlite3_config (SQLITE_CONFIG_PAGECACHE, NULL, 0, 0);
}

/* The client is the caller's to destroy; on failure the message is printed
 * and *status holds the exit status. */
leaselock_client_t *open_client (const char *uri, const char *label, int *status)
{
   leaselock_error_t err;
   char source[128];
   static bool tuned;
   if (!tuned) {
      tune_sqlite ();
      tuned = true;
   }
   leaselock_client_t *client = leaselock_client_new (uri, label, &err);
   if (!client) {
      char dflt[4096], what[4096 + 200];
      leaselock_error_t ignored;
      /* The default is the one its user did not choose: name it. */
      if ((!uri || !*uri) && !getenv ("LEASELOCK_URI") &&
          leaselock_default_uri (dflt, sizeof dflt, &ignored))
         snprintf (what, sizeof what, "cannot open the lock database %s (%s)", dflt,
                   uri_source (uri, source, sizeof source));
      else
         snprintf (what, sizeof what, "cannot open the lock database");
      *status = fail (what, &err);
   } else if (verbose) {
      say ("DEBUG database %s (%s)", leaselock_client_uri (client),
           uri_source (uri, source, sizeof source));
      leaselock_client_set_log (client, LEASELOCK_LOG_DEBUG, print_log_event, NULL);
   }
   return client;
}

/* "database:  URI" on out (status and list show which database they read). */
void put_database (FILE *out, leaselock_client_t *client)
{
   fprintf (out, "database:   %s\n", leaselock_client_uri (client));
}
