/*
 * client.c - the one way every command of the leaselock CLI opens its
 * client: status, list, release and prune (admin.c), run (run.c) and run
 * --reentrant (reenter.c). --verbose hooks the client's log here.
 */
#include "cli.h"

/* The client is the caller's to destroy; on failure the message is printed
 * and *status holds the exit status. */
leaselock_client_t *open_client (const char *uri, const char *label, int *status)
{
   leaselock_error_t err;
   leaselock_client_t *client = leaselock_client_new (uri, label, &err);
   if (!client)
      *status = fail ("cannot open the lock database", &err);
   else if (verbose)
      leaselock_client_set_log (client, LEASELOCK_LOG_DEBUG, print_log_event, NULL);
   return client;
}
