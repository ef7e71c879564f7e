/*
 * alloc_hook.h - counts the core's heap allocations and fails the Nth one
 * (tests only).
 *
 * The test links a copy of libleaselock.a whose calls to malloc, calloc,
 * realloc, strdup, strndup and free were renamed to llt_* (objcopy
 * --redefine-syms, see mk/faults-inproc.mk): only the core's own
 * allocations pass here, not the test's, nor those of SQLite or libc.
 */
#ifndef LL_ALLOC_HOOK_H
#define LL_ALLOC_HOOK_H

#include <stdbool.h>

/* Counts allocations from 0 again; number n (1-based) fails, 0: none. */
void alloc_hook_fail_at (long n);
/* Allocations asked for since the last alloc_hook_fail_at. */
long alloc_hook_count (void);
/* Whether the chosen allocation was reached and failed. */
bool alloc_hook_fired (void);
/* While paused, allocations are neither counted nor failed. */
void alloc_hook_pause (bool on);
/* The core's allocations not freed yet. */
long alloc_hook_live (void);

#endif
