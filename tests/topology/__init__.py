"""Replicated test topologies (tests/topology/base.py says what each offers).

make_topology("pg-async", workdir) builds one by name; each kind lives in
its own module, imported only when asked for.
"""

from __future__ import annotations

import importlib

from .base import FailoverTimes, Topology

# name -> (module, class, keyword arguments)
KINDS = {
    "pg-async": ("postgresql", "PgTopology", {"sync": False}),
    "pg-sync": ("postgresql", "PgTopology", {"sync": True}),
    "mariadb-semisync": ("mariadb", "MariaDBTopology", {}),
    "galera": ("galera", "GaleraTopology", {}),
}


def make_topology(name: str, workdir: str) -> Topology:
    """A stopped topology of that kind, its files under workdir."""
    module, cls, kwargs = KINDS[name]
    mod = importlib.import_module(f"{__name__}.{module}")
    topo: Topology = getattr(mod, cls)(workdir=workdir, **kwargs)
    topo.name = name
    return topo


__all__ = ["KINDS", "FailoverTimes", "Topology", "make_topology"]
