/*
 * tcp_proxy.c - the tests' TCP proxy (tcp_proxy.h).
 */
#include "tcp_proxy.h"

#include <arpa/inet.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int tcp_listen (int port)
{
   int fd = socket (AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
   struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons ((uint16_t)port) };
   a.sin_addr.s_addr = htonl (INADDR_LOOPBACK);
   setsockopt (fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
   if (bind (fd, (struct sockaddr *)&a, sizeof a) != 0 || listen (fd, 16) != 0) {
      close (fd);
      return -1;
   }
   return fd;
}

static void close_pair (tcp_proxy_t *px, int i)
{
   for (int j = 0; j < 2; j++) {
      if (px->pairs[i][j] >= 0)
         close (px->pairs[i][j]);
      px->pairs[i][j] = -1;
   }
}

static void *proxy_main (void *arg)
{
   tcp_proxy_t *px = arg;
   char buf[65536];
   while (!atomic_load (&px->stop)) {
      struct pollfd fds[1 + 64 * 2];
      int map[1 + 64 * 2], n = 0;
      pthread_mutex_lock (&px->mu);
      if (atomic_load (&px->down)) {
         if (px->lfd >= 0) {
            close (px->lfd);
            px->lfd = -1;
         }
         for (int i = 0; i < 64; i++)
            close_pair (px, i);
      } else if (px->lfd < 0) {
         px->lfd = tcp_listen (px->port);
      }
      if (px->lfd >= 0) {
         fds[n] = (struct pollfd){ .fd = px->lfd, .events = POLLIN };
         map[n++] = -1;
      }
      for (int i = 0; i < 64; i++) {
         if (px->pairs[i][0] < 0)
            continue;
         fds[n] = (struct pollfd){ .fd = px->pairs[i][0], .events = POLLIN };
         map[n++] = i * 2;
         fds[n] = (struct pollfd){ .fd = px->pairs[i][1], .events = POLLIN };
         map[n++] = i * 2 + 1;
      }
      pthread_mutex_unlock (&px->mu);
      if (poll (fds, (nfds_t)n, 20) <= 0)
         continue;
      pthread_mutex_lock (&px->mu);
      for (int f = 0; f < n; f++) {
         if (!fds[f].revents || atomic_load (&px->down))
            continue;
         if (map[f] < 0) {
            int cfd = accept4 (px->lfd, NULL, NULL, SOCK_CLOEXEC);
            if (cfd < 0)
               continue;
            int sfd = socket (AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
            if (connect (sfd, (struct sockaddr *)&px->up, sizeof px->up) != 0) {
               close (cfd);
               close (sfd);
               continue;
            }
            int i = 0;
            while (i < 64 && px->pairs[i][0] >= 0)
               i++;
            if (i == 64) {
               close (cfd);
               close (sfd);
               continue;
            }
            px->pairs[i][0] = cfd;
            px->pairs[i][1] = sfd;
            continue;
         }
         int i = map[f] / 2, side = map[f] % 2;
         if (px->pairs[i][side] != fds[f].fd)
            continue; /* closed meanwhile */
         ssize_t r = read (fds[f].fd, buf, sizeof buf);
         if (r <= 0) {
            close_pair (px, i);
            continue;
         }
         if (atomic_load (&px->hang))
            continue; /* swallowed: the peer waits for an answer */
         if (side == 1 && atomic_exchange (&px->drop_reply, false)) {
            /* The server answered; the client never hears it. */
            atomic_fetch_add (&px->dropped, 1);
            close_pair (px, i);
            continue;
         }
         int to = px->pairs[i][1 - side];
         for (ssize_t w = 0; w < r;) {
            ssize_t k = write (to, buf + w, (size_t)(r - w));
            if (k <= 0) {
               close_pair (px, i);
               break;
            }
            w += k;
         }
      }
      pthread_mutex_unlock (&px->mu);
   }
   pthread_mutex_lock (&px->mu);
   if (px->lfd >= 0)
      close (px->lfd);
   for (int i = 0; i < 64; i++)
      close_pair (px, i);
   pthread_mutex_unlock (&px->mu);
   return NULL;
}

int tcp_port_of (int fd)
{
   struct sockaddr_in a;
   socklen_t al = sizeof a;
   if (getsockname (fd, (struct sockaddr *)&a, &al) != 0)
      return -1;
   return ntohs (a.sin_port);
}

bool tcp_proxy_start (tcp_proxy_t *px, const struct sockaddr_in *up)
{
   memset (px, 0, sizeof *px);
   px->up = *up;
   for (int i = 0; i < 64; i++)
      px->pairs[i][0] = px->pairs[i][1] = -1;
   px->lfd = tcp_listen (0);
   if (px->lfd < 0)
      return false;
   px->port = tcp_port_of (px->lfd);
   pthread_mutex_init (&px->mu, NULL);
   pthread_create (&px->thread, NULL, proxy_main, px);
   return true;
}

void tcp_proxy_stop (tcp_proxy_t *px)
{
   atomic_store (&px->stop, true);
   pthread_join (px->thread, NULL);
   pthread_mutex_destroy (&px->mu);
}
