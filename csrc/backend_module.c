/*
 * backend_module.c - the entry of a backend module (ll_core_api.h):
 * compiled into each leaselock_backend_<name>.so with LL_MODULE and
 * LL_MODULE_BACKEND naming its table (ll_backend_mongodb, ...). Never
 * part of the core.
 */
#include "ll_core_api.h"

#include <string.h>

#if !defined(LL_MODULE) || !defined(LL_MODULE_BACKEND)
#error                                                                                             \
  "backend_module.c is compiled only into a module: -DLL_MODULE -DLL_MODULE_BACKEND=ll_backend_<name>"
#endif

const ll_core_api_t *ll_module_core;

__attribute__ ((visibility ("default"))) const ll_backend_t *leaselock_backend_module_v1 (
  const ll_core_api_t *core);

/* The core calls this once per process, under its once-only load, before
 * any other function of the module: ll_module_core is set before the
 * table that reaches the module's code is returned. */
const ll_backend_t *leaselock_backend_module_v1 (const ll_core_api_t *core)
{
   if (!core || core->version != LL_CORE_API_VERSION || core->size != sizeof *core ||
       core->backend_size != sizeof (ll_backend_t) || !core->leaselock_version ||
       strcmp (core->leaselock_version, LEASELOCK_VERSION) != 0)
      return NULL;
   ll_module_core = core;
   return &LL_MODULE_BACKEND;
}
