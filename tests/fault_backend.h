/*
 * fault_backend.h - a backend that forwards every call to a real one and
 * fails the Nth call on purpose (tests only).
 *
 * URIs: "faulty+fake://..." forwards to the fake backend (fake://...),
 * "faulty+sqlite:///path" to SQLite (sqlite:///path): the prefix is cut and
 * the rest goes to the backend that answers it. Calls counted: open,
 * acquire, renew, release, inspect, list, force_release (close never fails).
 */
#ifndef LL_FAULT_BACKEND_H
#define LL_FAULT_BACKEND_H

#include "ll_internal.h"

typedef enum
{
   FAULT_BACKEND,        /* fails before the call reaches the database: BACKEND */
   FAULT_NOMEM,          /* fails before the call reaches the database: NOMEM */
   FAULT_LOST,           /* the call is applied, then reports BACKEND (a lost reply) */
   FAULT_TWICE,          /* calls N and N + 1 fail with BACKEND (the retry fails too) */
   FAULT_LOST_THEN_FAIL, /* call N's reply is lost, call N + 1 fails with BACKEND */
   FAULT_KINDS
} fault_kind_t;

extern const ll_backend_t fault_backend;

/* Counts calls from 0 again and makes call number n (1-based) fail with
 * kind (and n + 1 for the two-call kinds); n = 0 injects nothing. */
void fault_backend_arm (long n, fault_kind_t kind);
/* Calls started / finished since the last arm. */
long fault_backend_calls (void);
long fault_backend_done (void);
/* The op the (first) fault hit ("acquire", ...), or NULL while none was. */
const char *fault_backend_fired (void);
const char *fault_kind_name (fault_kind_t kind);

#endif
