/*
 * watchdog.c - the process that SIGKILLs run's command when leaselock dies
 * or is stopped past the lease's deadline, and the CLOCK_BOOTTIME timer that
 * leaselock keeps at that deadline (see the design note at the top of run.c).
 */
#include "cli.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

int64_t mono_ms (void)
{
   struct timespec ts;
   clock_gettime (CLOCK_MONOTONIC, &ts);
   return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t boot_ms (void)
{
   struct timespec ts;
   clock_gettime (CLOCK_BOOTTIME, &ts);
   return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The watchdog, forked: SIGKILLs target when leaselock dies (its socket
 * ends without an 'X') or its timer runs out. Async-signal-safe calls only. */
static _Noreturn void watchdog_main (int watch_fd, int timer_fd, pid_t target)
{
   /* The signals leaselock forwards stay blocked (the mask is inherited);
    * job control must not stop it either. */
   struct sigaction ign;
   memset (&ign, 0, sizeof ign);
   ign.sa_handler = SIG_IGN;
   sigaction (SIGTSTP, &ign, NULL);
   sigaction (SIGTTIN, &ign, NULL);
   sigaction (SIGTTOU, &ign, NULL);
   /* Keep no terminal, pipe or database connection of leaselock's open. */
   unsigned lo = (unsigned)(watch_fd < timer_fd ? watch_fd : timer_fd);
   unsigned hi = (unsigned)(watch_fd < timer_fd ? timer_fd : watch_fd);
   if (lo > 0)
      close_range (0, lo - 1, 0);
   if (hi > lo + 1)
      close_range (lo + 1, hi - 1, 0);
   close_range (hi + 1, ~0U, 0);
   for (;;) {
      struct pollfd pfd[2] = { { watch_fd, POLLIN, 0 }, { timer_fd, POLLIN, 0 } };
      if (poll (pfd, 2, -1) < 0) {
         if (errno == EINTR)
            continue;
         break;
      }
      if (pfd[1].revents)
         break; /* the lease's deadline */
      char c;
      ssize_t n = read (watch_fd, &c, 1);
      if (n == 1 && c == 'X')
         _exit (0);
      if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN))
         break; /* leaselock died */
   }
   kill (target, SIGKILL);
   _exit (0);
}

/* Sets the watchdog's SIGKILL to at_mono (CLOCK_MONOTONIC ms), counted on
 * CLOCK_BOOTTIME. */
void arm_watchdog (const child_t *ch, int64_t at_mono)
{
   int64_t at = boot_ms () + (at_mono - mono_ms ());
   struct itimerspec its;
   memset (&its, 0, sizeof its);
   at = at > 1 ? at : 1; /* zero would disarm it */
   its.it_value.tv_sec = at / 1000;
   its.it_value.tv_nsec = at % 1000 * 1000000;
   timerfd_settime (ch->timer_fd, TFD_TIMER_ABSTIME, &its, NULL);
}

/* Tells the watchdog to end without killing anything. (A socket, not a
 * pipe: MSG_NOSIGNAL, when the watchdog has already gone, spares us a
 * SIGPIPE that we may not ignore, for the command would inherit that.) */
void watchdog_done (child_t *ch)
{
   if (ch->watch_fd >= 0) {
      ssize_t n = send (ch->watch_fd, "X", 1, MSG_NOSIGNAL);
      (void)n;
   }
   close_fd (&ch->watch_fd);
}

/* Forks the watchdog of ch, its timer set to the lease's deadline. */
bool start_watchdog (child_t *ch, leaselock_lease_t *lease, int64_t margin)
{
   int watch[2];
   ch->timer_fd = timerfd_create (CLOCK_BOOTTIME, TFD_CLOEXEC);
   if (ch->timer_fd < 0 || socketpair (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, watch) < 0)
      return false;
   arm_watchdog (ch, mono_ms () + leaselock_lease_remaining_ms (lease) - margin);
   pid_t pid = _Fork ();
   if (pid == 0)
      watchdog_main (watch[0], ch->timer_fd, ch->target);
   close (watch[0]);
   if (pid < 0) {
      close (watch[1]);
      return false;
   }
   ch->watchdog = pid;
   ch->watch_fd = watch[1];
   return true;
}
