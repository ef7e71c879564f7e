"""Replicated test topologies: what every one offers the failover tests.

A topology is a set of database servers on 127.0.0.1 (private ports and
data directories under one work directory) that replicate, each client
port behind a Toxiproxy proxy so that a node can be cut off while it runs.
The failover tests, the history checker's failover driver and `make
stress` drive them only through this interface; each kind of topology
(tests/topology/postgresql.py, mariadb.py, galera.py) implements it.
"""

from __future__ import annotations

import abc
import dataclasses


@dataclasses.dataclass
class FailoverTimes:
    """What one failover took, in time.monotonic() seconds."""

    began: float  # the primary was killed or cut off
    promoted: float  # the new primary accepts writes
    restored: float  # a standby follows the new primary again (0: not yet)
    how: str  # "kill" or "cut"


class Topology(abc.ABC):
    """One replicated database: a primary and its standbys (or, for
    Galera, nodes of one cluster). start() before anything else, stop()
    always (it also stops what a failed start left running)."""

    #: "pg-async", "pg-sync", "mariadb-semisync", "galera"
    name: str = ""

    def start(self) -> None:
        """Starts every node, waits until replication runs; a start that
        fails stops what it started."""
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    @abc.abstractmethod
    def _start(self) -> None:
        """start()'s work, in each kind of topology."""

    @abc.abstractmethod
    def stop(self) -> None:
        """Stops every node and proxy and removes the work directory."""

    @abc.abstractmethod
    def uri(self, **options: str) -> str:
        """A leaselock URI naming every node (through its proxy), in the
        form users write for a replicated database (a multi-host URI), the
        options added as query parameters."""

    @abc.abstractmethod
    def node_uris(self) -> list[str]:
        """One single-host URI per node, straight to the server (no proxy),
        in node order: for the tests' own checks."""

    @abc.abstractmethod
    def primary(self) -> int:
        """The index of the node that takes writes now."""

    @abc.abstractmethod
    def failover(self, how: str = "kill") -> FailoverTimes:
        """Kills (SIGKILL) or cuts off (Toxiproxy: clients and replication)
        the primary, promotes a standby the way a failover tool would, and
        returns once the new primary takes writes. The old primary is left
        dead (or cut off and stopped); restore() brings it back."""

    @abc.abstractmethod
    def restore(self) -> None:
        """Brings the old primary back as a standby of the new one (its
        data rebuilt from the new primary when it diverged), so that the
        next failover can run."""
