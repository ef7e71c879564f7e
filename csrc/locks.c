/*
 * locks.c - a lock as its records make it up (leaselock_locks,
 * leaselock_lock_inspect): a semaphore's slots and fair gate, a read-write
 * lock's exclusive record and readers' records, read by one list and
 * shown as one lock under the user's key, so that status, list and the
 * bindings' info tell whether a mode is held. On the public calls only.
 */
#include "ll_internal.h"

#include <stdlib.h>
#include <string.h>

/* What a record is to its lock. */
typedef enum role
{
   ROLE_PLAIN,
   ROLE_SLOT,
   ROLE_GATE,
   ROLE_W,
   ROLE_R
} role_t;

typedef struct rec_entry
{
   leaselock_record_t rec;
   size_t base_len; /* the lock's key: rec.key[0 .. base_len) */
   role_t role;
   size_t order; /* list order, to keep it among equal bases */
} rec_entry_t;

typedef struct rec_all
{
   rec_entry_t *e;
   size_t n, cap;
   bool failed;
   const char *only; /* leaselock_lock_inspect's key, or NULL */
   size_t only_len;
} rec_all_t;

/* Whether key (len bytes) ends with sfx; sets *base_len when it does and
 * leaves a key before it. */
static bool ends_with (const char *key, size_t len, const char *sfx, size_t *base_len)
{
   size_t n = strlen (sfx);
   if (len <= n || memcmp (key + len - n, sfx, n) != 0)
      return false;
   *base_len = len - n;
   return true;
}

/* Whether key ends with sfx followed by between min and max bytes of set
 * (the slot's index, the reader's token); sets *base_len when it does. */
static bool ends_with_tail (const char *key, size_t len, const char *sfx, const char *set,
                            size_t min, size_t max, size_t *base_len)
{
   size_t tail = 0;
   while (tail < len && tail < max && strchr (set, key[len - 1 - tail]) && key[len - 1 - tail])
      tail++;
   return tail >= min && ends_with (key, len - tail, sfx, base_len);
}

/* The role of a record and the length of its lock's key. */
static role_t role_of (const leaselock_record_t *r, size_t *base_len)
{
   const char *k = r->key;
   size_t n = r->key_len;
   if (ends_with (k, n, LL_W_SFX, base_len))
      return ROLE_W;
   if (ends_with (k, n, LL_GATE_SFX, base_len))
      return ROLE_GATE;
   if (ends_with_tail (k, n, LL_SLOT_SFX, "0123456789", 1, 3, base_len))
      return ROLE_SLOT;
   if (ends_with_tail (k, n, LL_R_SFX, "0123456789abcdef", LEASELOCK_OWNER_LEN, LEASELOCK_OWNER_LEN,
                       base_len))
      return ROLE_R;
   *base_len = n;
   return ROLE_PLAIN;
}

static bool rec_add (const leaselock_record_t *rec, void *all_)
{
   rec_all_t *all = all_;
   if (!ll_grow (&all->e, &all->cap, all->n, sizeof *all->e, 16)) {
      all->failed = true;
      return false;
   }
   rec_entry_t *e = &all->e[all->n];
   e->rec = *rec;
   e->role = role_of (rec, &e->base_len);
   /* A mode's record inspected by its own name (a lease's key) is itself. */
   if (all->only && rec->key_len == all->only_len && !memcmp (rec->key, all->only, rec->key_len)) {
      e->role = ROLE_PLAIN;
      e->base_len = rec->key_len;
   }
   e->order = all->n++;
   return true;
}

/* By the lock's key (bytes), then list order. */
static int entry_cmp (const void *a_, const void *b_)
{
   const rec_entry_t *a = a_, *b = b_;
   size_t n = a->base_len < b->base_len ? a->base_len : b->base_len;
   int c = memcmp (a->rec.key, b->rec.key, n);
   if (c == 0 && a->base_len != b->base_len)
      c = a->base_len < b->base_len ? -1 : 1;
   if (c == 0)
      c = a->order < b->order ? -1 : a->order > b->order;
   return c;
}

static bool same_lock (const rec_entry_t *a, const rec_entry_t *b)
{
   return a->base_len == b->base_len && memcmp (a->rec.key, b->rec.key, a->base_len) == 0;
}

static bool live (const leaselock_record_t *r)
{
   return r->expires_in_ms > 0;
}

/* The lock of the n entries e (one lock's, n >= 1) into *info; holders has
 * room for n pointers, key for its key. */
static void lock_fill (const rec_entry_t *e, size_t n, const leaselock_record_t **holders,
                       char *key, leaselock_lock_info_t *info)
{
   memset (info, 0, sizeof *info);
   memcpy (key, e[0].rec.key, e[0].base_len);
   key[e[0].base_len] = '\0';
   info->key = key;
   info->key_len = e[0].base_len;
   info->mode = LEASELOCK_MODE_LOCK;
   info->records = n;
   const leaselock_record_t *plain = NULL, *gate = NULL, *w = NULL;
   for (size_t i = 0; i < n; i++) {
      role_t r = e[i].role;
      if (r == ROLE_W || r == ROLE_R)
         info->mode = LEASELOCK_MODE_RWLOCK;
      else if ((r == ROLE_SLOT || r == ROLE_GATE) && info->mode == LEASELOCK_MODE_LOCK)
         info->mode = LEASELOCK_MODE_SEMAPHORE;
      plain = r == ROLE_PLAIN ? &e[i].rec : plain;
      gate = r == ROLE_GATE ? &e[i].rec : gate;
      w = r == ROLE_W ? &e[i].rec : w;
      info->slots += r == ROLE_SLOT;
   }
   /* The holders, a writer first; the fair gate is no holder. */
   role_t counted[] = { ROLE_PLAIN, ROLE_W, ROLE_R, ROLE_SLOT };
   for (size_t k = info->mode == LEASELOCK_MODE_LOCK ? 0 : 1; k < 4; k++)
      for (size_t i = 0; i < n; i++) {
         const leaselock_record_t *r = &e[i].rec;
         if (e[i].role != counted[k] || !live (r))
            continue;
         info->live++;
         if (r->owner[0])
            holders[info->n_holders++] = r;
         info->readers += e[i].role == ROLE_R && r->owner[0];
      }
   info->holders = holders;
   info->record = info->mode == LEASELOCK_MODE_LOCK ? plain : w;
   info->writer = w && live (w) && w->owner[0];
   info->state = info->n_holders ? "held" : info->live ? "min-hold" : "free";
   const leaselock_record_t *waited = info->mode == LEASELOCK_MODE_SEMAPHORE ? gate : info->record;
   info->next_owner = waited ? waited->next_owner : "";
   /* A semaphore's fair waiter holds the gate while it waits for a slot. */
   if (gate && waited == gate && live (gate) && gate->owner[0])
      info->next_owner = gate->owner;
   info->queued = waited ? waited->queued : e[0].rec.queued < 0 ? -1 : 0;
}

/* Calls fn per lock of the entries (sorted in place); only the lock named
 * only (only_len bytes) when only is not NULL, setting *found. */
static bool locks_report (rec_all_t *all, const char *only, size_t only_len, leaselock_lock_cb fn,
                          void *user_data, bool *found, leaselock_error_t *err)
{
   if (all->n > 1)
      qsort (all->e, all->n, sizeof *all->e, entry_cmp);
   const leaselock_record_t **holders = malloc ((all->n ? all->n : 1) * sizeof *holders);
   if (!holders)
      return ll_error_set (err, LEASELOCK_NOMEM, "out of memory grouping %zu records", all->n);
   char key[LEASELOCK_KEY_MAX + 1];
   for (size_t i = 0, j; i < all->n; i = j) {
      for (j = i + 1; j < all->n && same_lock (&all->e[i], &all->e[j]); j++) {
      }
      if (only && (all->e[i].base_len != only_len || memcmp (all->e[i].rec.key, only, only_len)))
         continue;
      leaselock_lock_info_t info;
      lock_fill (&all->e[i], j - i, holders, key, &info);
      if (found)
         *found = true;
      if (!fn (&info, user_data))
         break;
   }
   free (holders);
   return true;
}

/* The records of the lock named key: its own (inspect) and its mode's,
 * all under key + "/." (a list of that prefix alone, so that a key with
 * many keys under it costs no more than one without). */
static bool lock_records (leaselock_client_t *c, const char *key, size_t key_len, rec_all_t *all,
                          leaselock_error_t *err)
{
   leaselock_record_t rec;
   bool there = false;
   if (!leaselock_inspect (c, key, key_len, &rec, &there, err))
      return false;
   if (there)
      rec_add (&rec, all);
   if (key_len + 2 > LEASELOCK_KEY_MAX)
      return true; /* too long for any mode's records */
   char p[LEASELOCK_KEY_MAX + 1];
   memcpy (p, key, key_len);
   memcpy (p + key_len, "/.", 2);
   return leaselock_list (c, p, key_len + 2, rec_add, all, err);
}

/* The records under prefix (or of the lock only), grouped into locks for
 * fn. */
static bool locks_run (leaselock_client_t *c, const char *prefix, size_t prefix_len,
                       const char *only, leaselock_lock_cb fn, void *user_data, bool *found,
                       leaselock_error_t *err)
{
   if (!fn)
      return ll_error_set (err, LEASELOCK_INVALID, "fn (the lock callback) is NULL");
   rec_all_t all = { .only = only, .only_len = prefix_len };
   bool ok = only ? lock_records (c, only, prefix_len, &all, err)
                  : leaselock_list (c, prefix, prefix_len, rec_add, &all, err);
   if (ok && all.failed)
      ok = ll_error_set (err, LEASELOCK_NOMEM, "out of memory reading %zu records", all.n);
   if (ok)
      ok = locks_report (&all, only, prefix_len, fn, user_data, found, err);
   free (all.e);
   return ok;
}

bool leaselock_locks (leaselock_client_t *c, const char *prefix, size_t prefix_len,
                      leaselock_lock_cb fn, void *user_data, leaselock_error_t *error)
{
   leaselock_error_t *err = LL_ERROR_START (error);
   return locks_run (c, prefix, prefix_len, NULL, fn, user_data, NULL, err);
}

bool leaselock_lock_inspect (leaselock_client_t *c, const char *key, size_t key_len,
                             leaselock_lock_cb fn, void *user_data, bool *found,
                             leaselock_error_t *error)
{
   leaselock_error_t *err = LL_ERROR_START (error);
   if (!found)
      return ll_error_set (err, LEASELOCK_INVALID, "found is NULL");
   *found = false;
   if (!ll_check_key (key, key_len, "key", false, err))
      return false;
   return locks_run (c, key, key_len, key, fn, user_data, found, err);
}
