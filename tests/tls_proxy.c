/*
 * tls_proxy.c - the tests' TLS front (tls_proxy.h).
 */
#include "tls_proxy.h"

#include "tcp_proxy.h"

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static SSL_CTX *tls_server_ctx (void)
{
   EVP_PKEY *pkey = EVP_EC_gen ("P-256");
   X509 *x = X509_new ();
   SSL_CTX *ctx = SSL_CTX_new (TLS_server_method ());
   bool ok = pkey && x && ctx;
   if (ok) {
      X509_NAME *name = X509_get_subject_name (x);
      ok = X509_set_version (x, 2) && ASN1_INTEGER_set (X509_get_serialNumber (x), 1) &&
           X509_gmtime_adj (X509_getm_notBefore (x), -3600) &&
           X509_gmtime_adj (X509_getm_notAfter (x), 86400) && X509_set_pubkey (x, pkey) &&
           X509_NAME_add_entry_by_txt (name, "CN", MBSTRING_ASC, (const unsigned char *)"127.0.0.1",
                                       -1, -1, 0) &&
           X509_set_issuer_name (x, name) && X509_sign (x, pkey, EVP_sha256 ()) > 0 &&
           SSL_CTX_use_certificate (ctx, x) == 1 && SSL_CTX_use_PrivateKey (ctx, pkey) == 1;
   }
   X509_free (x);
   EVP_PKEY_free (pkey);
   if (!ok) {
      ERR_print_errors_fp (stderr);
      SSL_CTX_free (ctx);
      return NULL;
   }
   return ctx;
}

static bool write_all (int fd, const char *buf, size_t n)
{
   while (n > 0) {
      ssize_t k = write (fd, buf, n);
      if (k <= 0)
         return false;
      buf += k;
      n -= (size_t)k;
   }
   return true;
}

static void *tls_conn_main (void *arg)
{
   tls_proxy_conn_t *a = arg;
   tls_proxy_t *tf = a->tf;
   int cfd = a->fd;
   int sfd = socket (AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
   SSL *ssl = SSL_new (tf->ctx);
   char buf[16384];
   if (!ssl || connect (sfd, (struct sockaddr *)&tf->up, sizeof tf->up) != 0 ||
       !SSL_set_fd (ssl, cfd) || SSL_accept (ssl) != 1) {
      atomic_fetch_add (&tf->tls_errors, 1);
      goto done;
   }
   while (!atomic_load (&tf->stop)) {
      struct pollfd p[2] = { { .fd = cfd, .events = POLLIN }, { .fd = sfd, .events = POLLIN } };
      if (SSL_pending (ssl) == 0 && poll (p, 2, 20) <= 0)
         continue;
      if (SSL_pending (ssl) > 0 || (p[0].revents & (POLLIN | POLLHUP | POLLERR))) {
         int r = SSL_read (ssl, buf, sizeof buf);
         if (r <= 0) {
            int e = SSL_get_error (ssl, r);
            if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
               continue;
            if (e == SSL_ERROR_ZERO_RETURN)
               atomic_fetch_add (&tf->close_notify, 1);
            else if (e != SSL_ERROR_SYSCALL || ERR_peek_error () != 0)
               atomic_fetch_add (&tf->tls_errors, 1);
            break;
         }
         if (!write_all (sfd, buf, (size_t)r))
            break;
      }
      if (p[1].revents & (POLLIN | POLLHUP | POLLERR)) {
         ssize_t r = read (sfd, buf, sizeof buf);
         if (r <= 0 || SSL_write (ssl, buf, (int)r) != (int)r)
            break;
      }
   }
done:
   ERR_clear_error ();
   SSL_free (ssl);
   close (cfd);
   close (sfd);
   return NULL;
}

static void *tls_accept_main (void *arg)
{
   tls_proxy_t *tf = arg;
   while (!atomic_load (&tf->stop)) {
      struct pollfd p = { .fd = tf->lfd, .events = POLLIN };
      if (poll (&p, 1, 20) <= 0)
         continue;
      int cfd = accept4 (tf->lfd, NULL, NULL, SOCK_CLOEXEC);
      if (cfd < 0)
         continue;
      if (tf->n_conns == 16) {
         close (cfd);
         continue;
      }
      tls_proxy_conn_t *a = &tf->args[tf->n_conns];
      *a = (tls_proxy_conn_t){ tf, cfd };
      if (pthread_create (&tf->conns[tf->n_conns], NULL, tls_conn_main, a)) {
         close (cfd);
         continue;
      }
      tf->n_conns++;
      atomic_fetch_add (&tf->accepted, 1);
   }
   for (int i = 0; i < tf->n_conns; i++)
      pthread_join (tf->conns[i], NULL);
   close (tf->lfd);
   return NULL;
}

bool tls_proxy_start (tls_proxy_t *tf, const struct sockaddr_in *up)
{
   memset (tf, 0, sizeof *tf);
   tf->up = *up;
   tf->ctx = tls_server_ctx ();
   tf->lfd = tf->ctx ? tcp_listen (0) : -1;
   if (tf->lfd < 0) {
      SSL_CTX_free (tf->ctx);
      return false;
   }
   tf->port = tcp_port_of (tf->lfd);
   pthread_create (&tf->thread, NULL, tls_accept_main, tf);
   return true;
}

void tls_proxy_stop (tls_proxy_t *tf)
{
   atomic_store (&tf->stop, true);
   pthread_join (tf->thread, NULL);
   SSL_CTX_free (tf->ctx);
}
