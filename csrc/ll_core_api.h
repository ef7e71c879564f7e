/*
 * ll_core_api.h - the core's functions a backend module calls, as one
 * versioned table of function pointers (ll_core_api_t).
 *
 * MongoDB, MySQL/MariaDB and PostgreSQL are modules: shared objects
 * (leaselock_backend_<name>.so, csrc/SOURCES.<name>) that the core loads
 * with dlopen at the first URI of their scheme (backend_load.c). The core
 * is linked with -fvisibility=hidden and sits inside the CLI, libleaselock,
 * the Python extension and the Lua module (the last two loaded
 * RTLD_LOCAL), so a module cannot find core functions by name: the core
 * hands it this table when it loads it, through the module's one exported
 * symbol (LL_MODULE_ENTRY). Compiled with LL_MODULE, a backend's sources
 * keep calling the ll_* names below, which this header maps to the table;
 * so the per-thread state those functions keep (clock.c's call bound and
 * unsent mark) stays the core's one copy.
 *
 * A backend source that calls another core function: add it to
 * LL_CORE_API and a #define below (the module's link, -z defs, names any
 * function missing), and bump LL_CORE_API_VERSION.
 */
#ifndef LL_CORE_API_H
#define LL_CORE_API_H

#include "ll_internal.h"

#include <stddef.h>

#define LL_CORE_API_VERSION 3
/* The one symbol a module exports (see ll_module_entry_fn). */
#define LL_MODULE_ENTRY "leaselock_backend_module_v1"

#define LL_CORE_API(X)                                                                             \
   X (ll_error_set)                                                                                \
   X (leaselock_parse_duration)                                                                    \
   X (ll_real_now_ms)                                                                              \
   X (ll_call_bound)                                                                               \
   X (ll_call_bound_cap)                                                                           \
   X (ll_call_unsent_mark)                                                                         \
   X (ll_uri_parse)                                                                                \
   X (ll_uri_cleanup)                                                                              \
   X (ll_uri_param)                                                                                \
   X (ll_uri_int_option)                                                                           \
   X (ll_uri_check_at)                                                                             \
   X (ll_uri_redact)                                                                               \
   X (ll_percent_decode)                                                                           \
   X (ll_secrets_add)                                                                              \
   X (ll_secrets_clear)                                                                            \
   X (ll_secrets_from_uri)                                                                         \
   X (ll_backend_fail)                                                                             \
   X (ll_host_failure_add)                                                                         \
   X (ll_host_failures_fail)                                                                       \
   X (ll_valid_identifier)                                                                         \
   X (ll_sql_format_all)                                                                           \
   X (ll_fd_looks_closed)                                                                          \
   X (ll_fd_point_at_devnull)                                                                      \
   X (ll_prefix_upper)                                                                             \
   X (ll_copy_clipped)                                                                             \
   X (ll_us_to_left_ms)                                                                            \
   X (ll_record_take_one)                                                                          \
   X (ll_primary_option)                                                                           \
   X (ll_primary_seen)                                                                             \
   X (ll_primary_grant_ok)                                                                         \
   X (ll_primary_ttl_ok)                                                                           \
   X (ll_wake_touch)                                                                               \
   X (ll_wake_touch_queue)                                                                         \
   X (ll_wake_toucher_free)                                                                        \
   X (ll_wake_host_toucher)                                                                        \
   X (ll_wake_host_listen)                                                                         \
   X (ll_wake_listener_fd)                                                                         \
   X (ll_wake_listener_drain)                                                                      \
   X (ll_wake_listener_close)

#define LL_CORE_API_FIELD(f) __typeof__ (f) *f;

/* What the core hands a module (static, lives as long as the process).
 * version, size, backend_size and leaselock_version let a module built
 * from another tree refuse to run (its entry returns NULL). */
typedef struct ll_core_api
{
   int version;                   /* LL_CORE_API_VERSION */
   size_t size;                   /* sizeof (ll_core_api_t) */
   size_t backend_size;           /* sizeof (ll_backend_t) */
   const char *leaselock_version; /* LEASELOCK_VERSION */
   LL_CORE_API (LL_CORE_API_FIELD)
} ll_core_api_t;

/* A module's entry: checks core and keeps it (borrowed for the process's
 * life), then returns its backend table (static), or NULL when core is not
 * the one it was built for. */
typedef const ll_backend_t *(*ll_module_entry_fn) (const ll_core_api_t *core);

/* The core's side (backend_load.c): when scheme[0..len) is a module's,
 * loads the module once per process and returns 1 with *backend set, or
 * -1 with UNSUPPORTED in err (the module or its client library missing,
 * with the package to install); 0 when no module answers the scheme. */
int ll_backend_module_for_scheme (const char *scheme, size_t len, const ll_backend_t **backend,
                                  leaselock_error_t *err);

#ifdef LL_MODULE
/* The table the core handed this module (backend_module.c). */
extern const ll_core_api_t *ll_module_core;

#define ll_error_set (*ll_module_core->ll_error_set)
#define leaselock_parse_duration (*ll_module_core->leaselock_parse_duration)
#define ll_real_now_ms (*ll_module_core->ll_real_now_ms)
#define ll_call_bound (*ll_module_core->ll_call_bound)
#define ll_call_bound_cap (*ll_module_core->ll_call_bound_cap)
#define ll_call_unsent_mark (*ll_module_core->ll_call_unsent_mark)
#define ll_uri_parse (*ll_module_core->ll_uri_parse)
#define ll_uri_cleanup (*ll_module_core->ll_uri_cleanup)
#define ll_uri_param (*ll_module_core->ll_uri_param)
#define ll_uri_int_option (*ll_module_core->ll_uri_int_option)
#define ll_uri_check_at (*ll_module_core->ll_uri_check_at)
#define ll_uri_redact (*ll_module_core->ll_uri_redact)
#define ll_percent_decode (*ll_module_core->ll_percent_decode)
#define ll_secrets_add (*ll_module_core->ll_secrets_add)
#define ll_secrets_clear (*ll_module_core->ll_secrets_clear)
#define ll_secrets_from_uri (*ll_module_core->ll_secrets_from_uri)
#define ll_backend_fail (*ll_module_core->ll_backend_fail)
#define ll_host_failure_add (*ll_module_core->ll_host_failure_add)
#define ll_host_failures_fail (*ll_module_core->ll_host_failures_fail)
#define ll_valid_identifier (*ll_module_core->ll_valid_identifier)
#define ll_sql_format_all (*ll_module_core->ll_sql_format_all)
#define ll_fd_looks_closed (*ll_module_core->ll_fd_looks_closed)
#define ll_fd_point_at_devnull (*ll_module_core->ll_fd_point_at_devnull)
#define ll_prefix_upper (*ll_module_core->ll_prefix_upper)
#define ll_copy_clipped (*ll_module_core->ll_copy_clipped)
#define ll_us_to_left_ms (*ll_module_core->ll_us_to_left_ms)
#define ll_record_take_one (*ll_module_core->ll_record_take_one)
#define ll_primary_option (*ll_module_core->ll_primary_option)
#define ll_primary_seen (*ll_module_core->ll_primary_seen)
#define ll_primary_grant_ok (*ll_module_core->ll_primary_grant_ok)
#define ll_primary_ttl_ok (*ll_module_core->ll_primary_ttl_ok)
#define ll_wake_touch (*ll_module_core->ll_wake_touch)
#define ll_wake_touch_queue (*ll_module_core->ll_wake_touch_queue)
#define ll_wake_toucher_free (*ll_module_core->ll_wake_toucher_free)
#define ll_wake_host_toucher (*ll_module_core->ll_wake_host_toucher)
#define ll_wake_host_listen (*ll_module_core->ll_wake_host_listen)
#define ll_wake_listener_fd (*ll_module_core->ll_wake_listener_fd)
#define ll_wake_listener_drain (*ll_module_core->ll_wake_listener_drain)
#define ll_wake_listener_close (*ll_module_core->ll_wake_listener_close)
#endif /* LL_MODULE */

#endif /* LL_CORE_API_H */
