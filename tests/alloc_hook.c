/*
 * alloc_hook.c - the llt_* allocator the renamed core calls (see
 * alloc_hook.h). Keeps the set of live blocks, so that a leak shows up
 * right after the run that made it, with its N.
 */
#include "alloc_hook.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define SLOTS 65536 /* open addressing; the core holds a few dozen blocks */
#define TOMB ((void *)1)

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static void *slots[SLOTS];
static long live;
static atomic_long count, target;
static atomic_bool fired, paused;

void alloc_hook_fail_at (long n)
{
   atomic_store (&target, 0);
   atomic_store (&count, 0);
   atomic_store (&fired, false);
   atomic_store (&target, n);
}

long alloc_hook_count (void)
{
   return atomic_load (&count);
}

bool alloc_hook_fired (void)
{
   return atomic_load (&fired);
}

void alloc_hook_pause (bool on)
{
   atomic_store (&paused, on);
}

long alloc_hook_live (void)
{
   pthread_mutex_lock (&mu);
   long n = live;
   pthread_mutex_unlock (&mu);
   return n;
}

static size_t slot_of (void *p)
{
   uintptr_t h = (uintptr_t)p;
   h ^= h >> 17;
   h *= 0x9E3779B97F4A7C15ull;
   return (size_t)(h >> 7) % SLOTS;
}

static void track (void *p)
{
   pthread_mutex_lock (&mu);
   for (size_t i = slot_of (p), n = 0; n < SLOTS; i = (i + 1) % SLOTS, n++)
      if (!slots[i] || slots[i] == TOMB) {
         slots[i] = p;
         live++;
         break;
      }
   pthread_mutex_unlock (&mu);
}

static void untrack (void *p)
{
   pthread_mutex_lock (&mu);
   for (size_t i = slot_of (p), n = 0; n < SLOTS && slots[i]; i = (i + 1) % SLOTS, n++)
      if (slots[i] == p) {
         slots[i] = TOMB;
         live--;
         break;
      }
   pthread_mutex_unlock (&mu);
}

/* Whether this allocation is the one to fail. */
static bool fail_now (void)
{
   if (atomic_load (&paused))
      return false;
   long n = atomic_fetch_add (&count, 1) + 1;
   if (n != atomic_load (&target))
      return false;
   atomic_store (&fired, true);
   errno = ENOMEM;
   return true;
}

void *llt_malloc (size_t n)
{
   void *p = fail_now () ? NULL : malloc (n);
   if (p)
      track (p);
   return p;
}

void *llt_calloc (size_t k, size_t n)
{
   void *p = fail_now () ? NULL : calloc (k, n);
   if (p)
      track (p);
   return p;
}

void *llt_realloc (void *old, size_t n)
{
   if (fail_now ())
      return NULL;
   if (old)
      untrack (old);
   void *p = realloc (old, n);
   if (p)
      track (p);
   else if (old && n)
      track (old); /* failed: the old block stays */
   return p;
}

char *llt_strdup (const char *s)
{
   char *p = fail_now () ? NULL : strdup (s);
   if (p)
      track (p);
   return p;
}

char *llt_strndup (const char *s, size_t n)
{
   char *p = fail_now () ? NULL : strndup (s, n);
   if (p)
      track (p);
   return p;
}

void llt_free (void *p)
{
   if (p)
      untrack (p);
   free (p);
}
