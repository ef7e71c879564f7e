/*
 * view.c - a lock as status, list and top show it (leaselock_lock_info_t,
 * which aggregates a semaphore's or read-write lock's records): text lines
 * and JSON.
 */
#include "cli.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

const leaselock_record_t *lock_lead (const leaselock_lock_info_t *l)
{
   if (l->mode != LEASELOCK_MODE_LOCK && l->n_holders)
      return l->holders[0]; /* a read-write lock's writer comes first */
   return l->record;
}

const char *lock_mode_name (leaselock_lock_mode_t m)
{
   return m == LEASELOCK_MODE_SEMAPHORE ? "semaphore"
          : m == LEASELOCK_MODE_RWLOCK  ? "rwlock"
                                        : "lock";
}

bool holder_dead (const leaselock_record_t *r)
{
   char me[256] = "";
   if (!r->owner[0] || r->pid <= 0 || r->pid > INT32_MAX || gethostname (me, sizeof me - 1) != 0)
      return false;
   if (strncmp (me, r->host, sizeof r->host) != 0)
      return false; /* another host's process: not ours to judge */
   return kill ((pid_t)r->pid, 0) != 0 && errno == ESRCH;
}

void fmt_waiters (const leaselock_lock_info_t *l, char *buf, size_t size)
{
   if (l->queued < 0 && !l->next_owner[0])
      snprintf (buf, size, "unknown");
   else if (!l->next_owner[0] && l->queued <= 0)
      snprintf (buf, size, "none");
   else if (l->queued <= 0)
      snprintf (buf, size, "next %.8s", l->next_owner);
   else if (!l->next_owner[0])
      snprintf (buf, size, "%" PRId64 " queued", l->queued);
   else
      snprintf (buf, size, "next %.8s, %" PRId64 " queued", l->next_owner, l->queued);
}

/* A record's fields and whether its holder is dead, as JSON members
 * (after the opening brace's first member). */
static void put_record_members (FILE *f, const leaselock_record_t *r)
{
   fputs (",\"owner\":", f);
   if (r && r->owner[0])
      put_json_string (f, r->owner, strlen (r->owner));
   else
      fputs ("null", f);
   fprintf (f, ",\"fence\":%" PRId64 ",\"holds\":%" PRId64 ",\"expires_in_ms\":%" PRId64,
            r ? r->fence : 0, r ? r->holds : 0, r ? r->expires_in_ms : 0);
   fputs (",\"host\":", f);
   put_json_string (f, r ? r->host : "", r ? strnlen (r->host, sizeof r->host) : 0);
   fprintf (f, ",\"pid\":%" PRId64 ",\"label\":", r ? r->pid : 0);
   put_json_string (f, r ? r->label : "", r ? strnlen (r->label, sizeof r->label) : 0);
   if (r && r->held_ms >= 0)
      fprintf (f, ",\"held_ms\":%" PRId64, r->held_ms);
   else
      fputs (",\"held_ms\":null", f);
   fprintf (f, ",\"dead\":%s", r && holder_dead (r) ? "true" : "false");
}

void put_lock_json (FILE *f, const leaselock_lock_info_t *l)
{
   fputs ("{\"key\":", f);
   put_json_string (f, l->key, l->key_len);
   fprintf (f, ",\"mode\":\"%s\",\"state\":\"%s\"", lock_mode_name (l->mode), l->state);
   put_record_members (f, lock_lead (l));
   fprintf (f, ",\"live\":%" PRId64 ",\"next_owner\":", l->live);
   if (l->next_owner[0])
      put_json_string (f, l->next_owner, strlen (l->next_owner));
   else
      fputs ("null", f);
   if (l->queued >= 0)
      fprintf (f, ",\"queued\":%" PRId64, l->queued);
   else
      fputs (",\"queued\":null", f);
   if (l->mode == LEASELOCK_MODE_SEMAPHORE)
      fprintf (f, ",\"used\":%zu,\"slots\":%" PRId64, l->n_holders, l->slots);
   if (l->mode == LEASELOCK_MODE_RWLOCK)
      fprintf (f, ",\"readers\":%" PRId64 ",\"writer\":%s", l->readers,
               l->writer ? "true" : "false");
   fputs (",\"holders\":[", f);
   for (size_t i = 0; i < l->n_holders; i++) {
      fputs (i ? ",{\"key\":" : "{\"key\":", f);
      put_json_string (f, l->holders[i]->key, l->holders[i]->key_len);
      put_record_members (f, l->holders[i]);
      fputc ('}', f);
   }
   fputs ("]}", f);
}

/* "12.3s (since 14:02:11)" for how long r has been held. */
static void put_held_since (FILE *f, const leaselock_record_t *r)
{
   char d[32], clock[16] = "";
   fmt_ms (r->held_ms, d, sizeof d);
   time_t since = time (NULL) - (time_t)(r->held_ms / 1000);
   struct tm tm;
   if (localtime_r (&since, &tm))
      strftime (clock, sizeof clock, "%H:%M:%S", &tm);
   fprintf (f, "%s (since %s)", d, clock);
}

/* One holder of a mode: "KEY fence N, expires in X, held Y, host pid P (label)". */
static void put_holder_line (FILE *f, const char *name, const leaselock_record_t *r)
{
   char when[32];
   fmt_ms (r->expires_in_ms, when, sizeof when);
   fprintf (f, "%s", name);
   put_text (f, r->key, r->key_len);
   fprintf (f, "  fence %" PRId64 ", expires in %s, ", r->fence, when);
   put_holder (f, r);
   fputs (holder_dead (r) ? " (dead)\n" : "\n", f);
}

/* status of a semaphore or read-write lock: what its records add up to. */
static void put_mode_lines (FILE *f, const leaselock_lock_info_t *l)
{
   if (l->mode == LEASELOCK_MODE_SEMAPHORE)
      fprintf (f,
               "slots:      %zu used (the limit is at least %" PRId64 ", the slots used so far)\n",
               l->n_holders, l->slots);
   else
      fprintf (f, "readers:    %" PRId64 "\nwriter:     %s\n", l->readers,
               l->writer ? "held (new readers wait)" : "-");
   for (size_t i = 0; i < l->n_holders; i++)
      put_holder_line (f, "holder:     ", l->holders[i]);
   if (l->record && l->record->fence)
      fprintf (f, "fence:      %" PRId64 " (the writers')\n", l->record->fence);
}

void put_lock_lines (FILE *f, const leaselock_lock_info_t *l)
{
   const leaselock_record_t *lead = lock_lead (l);
   char when[32], w[64];
   fputs ("key:        ", f);
   put_text (f, l->key, l->key_len);
   if (l->mode != LEASELOCK_MODE_LOCK)
      fprintf (f, "\nmode:       %s", lock_mode_name (l->mode));
   fprintf (f, "\nstate:      %s\n", l->state);
   if (l->mode != LEASELOCK_MODE_LOCK) {
      put_mode_lines (f, l);
   } else {
      fmt_ms (lead->expires_in_ms, when, sizeof when);
      fprintf (f, "owner:      %s\n", lead->owner[0] ? lead->owner : "-");
      fprintf (f, "fence:      %" PRId64 "\n", lead->fence);
      if (lead->holds > 1)
         fprintf (f, "holds:      %" PRId64 " (entered again by leaselock run --reentrant)\n",
                  lead->holds);
      if (lead->expires_in_ms > 0)
         fprintf (f, "expires in: %s\n", when);
      else
         fprintf (f, "expired:    %s ago\n", when);
      fputs ("holder:     ", f);
      put_holder (f, lead);
      fputs (holder_dead (lead) ? " (dead: no such process)\n" : "\n", f);
   }
   if (lead && lead->held_ms >= 0 && lead->owner[0]) {
      fputs ("held for:   ", f);
      put_held_since (f, lead);
      fputc ('\n', f);
   }
   fmt_waiters (l, w, sizeof w);
   fprintf (f, "waiters:    %s\n", w);
}

/* A record as list has always shown it: KEY STATE fence expires owner holder. */
static void put_record_line (FILE *f, const char *indent, const leaselock_record_t *r)
{
   char when[32] = "-";
   if (r->expires_in_ms > 0)
      fmt_ms (r->expires_in_ms, when, sizeof when);
   fputs (indent, f);
   put_text (f, r->key, r->key_len);
   fprintf (f, "  %s  fence=%" PRId64 "  expires_in=%s  owner=%s  holder=", record_state (r),
            r->fence, when, r->owner[0] ? r->owner : "-");
   put_holder (f, r);
   if (holder_dead (r))
      fputs (" (dead)", f);
}

void put_lock_list_lines (FILE *f, const leaselock_lock_info_t *l)
{
   char w[64];
   fmt_waiters (l, w, sizeof w);
   bool waiting = strcmp (w, "none") != 0 && strcmp (w, "unknown") != 0;
   if (l->mode == LEASELOCK_MODE_LOCK) {
      put_record_line (f, "", l->record);
      fprintf (f, waiting ? "  waiters=%s\n" : "\n", w);
      return;
   }
   put_text (f, l->key, l->key_len);
   fprintf (f, "  %s  %s", l->state, lock_mode_name (l->mode));
   if (l->mode == LEASELOCK_MODE_SEMAPHORE)
      fprintf (f, "  used=%zu  slots=%" PRId64, l->n_holders, l->slots);
   else
      fprintf (f, "  readers=%" PRId64 "  writer=%s", l->readers, l->writer ? "yes" : "no");
   fprintf (f, waiting ? "  waiters=%s\n" : "\n", w);
   for (size_t i = 0; i < l->n_holders; i++) {
      put_record_line (f, "  ", l->holders[i]);
      fputc ('\n', f);
   }
}
