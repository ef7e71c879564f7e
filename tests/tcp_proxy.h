/*
 * tcp_proxy.h - a TCP proxy a test puts between a client and its server
 * (tests only): on 127.0.0.1, one thread, at most 64 connections. While
 * it runs the test can take the server away (down: the listener and every
 * connection closed), make it hang (hang: what either side sends is
 * swallowed) or lose the server's next reply (drop_reply: the connection
 * it came on is closed instead; dropped counts them).
 */
#ifndef LL_TCP_PROXY_H
#define LL_TCP_PROXY_H

#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

typedef struct
{
   pthread_t thread;
   pthread_mutex_t mu;
   int port;              /* our listening port (kept across down/up) */
   struct sockaddr_in up; /* the server */
   int lfd;               /* listener, -1 while down */
   int pairs[64][2];      /* client fd, server fd; -1 when free */
   atomic_bool stop, down, hang, drop_reply;
   atomic_int dropped;
} tcp_proxy_t;

/* Starts forwarding a free port of 127.0.0.1 (px->port) to up. */
bool tcp_proxy_start (tcp_proxy_t *px, const struct sockaddr_in *up);
void tcp_proxy_stop (tcp_proxy_t *px);

/* A listening socket on 127.0.0.1:port (0: a free port), or -1. */
int tcp_listen (int port);
/* The port a listening socket is bound to. */
int tcp_port_of (int fd);

#endif
