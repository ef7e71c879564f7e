/*
 * tls_proxy.h - a TLS front for a plain-text test server (tests only): a
 * self-signed certificate for 127.0.0.1, each connection in a thread of
 * its own that decrypts what the client sends and forwards it to the
 * server in plain text, and back (at most 16 connections). It counts how
 * each connection ended from the client's side: a TLS close_notify
 * (SSL_shutdown in the client), another TLS error (e.g. a record whose
 * sequence number was already used, as after a fork), or an open
 * connection.
 */
#ifndef LL_TLS_PROXY_H
#define LL_TLS_PROXY_H

#include <netinet/in.h>
#include <openssl/ssl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

typedef struct tls_proxy tls_proxy_t;

typedef struct
{
   tls_proxy_t *tf;
   int fd;
} tls_proxy_conn_t;

struct tls_proxy
{
   pthread_t thread;
   SSL_CTX *ctx;
   int lfd;
   int port; /* where clients connect (127.0.0.1) */
   struct sockaddr_in up;
   pthread_t conns[16];
   tls_proxy_conn_t args[16];
   int n_conns;
   atomic_bool stop;
   atomic_int accepted, close_notify, tls_errors;
};

/* Starts the front for up on a free port of 127.0.0.1 (tf->port); false
 * when the certificate or the listener cannot be set up. */
bool tls_proxy_start (tls_proxy_t *tf, const struct sockaddr_in *up);
void tls_proxy_stop (tls_proxy_t *tf);

#endif
