"""The "galera" topology: a 3-node MariaDB Galera cluster (Debian's
galera-4) on 127.0.0.1, each node's client port behind a Toxiproxy proxy.

Every node takes writes; the one the failover tests call the primary is
the first in the URI's order that is alive and in the Primary component.
A failover kills that node (SIGKILL) or cuts it off: its proxy disabled
and its group communication isolated (Galera's gmcast.isolate, so it
drops out of the cluster exactly as a partitioned node does, while the
process keeps running). The other two keep quorum (2 of 3).
"""

from __future__ import annotations

import os
import secrets
import shutil
import time

from .base import FailoverTimes, Topology
from .mariadb import DATABASE, USER, Node, SqlError, stop_topology, wait_until
from .proxies import free_port, start_reaper, start_toxiproxy

PROVIDER = "/usr/lib/galera/libgalera_smm.so"

# Failure detection in step with the tests (Galera's defaults suit a WAN:
# a silent node is suspected after 5 s and evicted after 15 s). On one
# machine a node is only ever silent because it was killed or cut off;
# the margin still covers a loaded two-core machine.
EVS = ("evs.keepalive_period=PT0.3S;evs.inactive_check_period=PT0.3S;"
       "evs.suspect_timeout=PT1.5S;evs.inactive_timeout=PT3S;evs.install_timeout=PT3S;"
       "evs.join_retrans_period=PT0.3S")


class GaleraTopology(Topology):
    name = "galera"
    N = 3

    def __init__(self, workdir: str) -> None:
        self.workdir = os.path.abspath(workdir)
        self.password = secrets.token_hex(12)
        self.nodes: list[Node] = []
        self.proxies: list = []
        self.tp = None
        self.reaper = None
        self.gports: list[int] = []
        self.down: int | None = None
        self.down_how = ""
        self.last: FailoverTimes | None = None

    # ---- the interface -------------------------------------------------------

    def _start(self) -> None:
        if not os.path.exists(PROVIDER):
            raise RuntimeError(f"{PROVIDER} is missing (apt-get install galera-4)")
        for tool, pkg in (("mariadb-backup", "mariadb-backup"), ("socat", "socat")):
            if shutil.which(tool) is None:
                raise RuntimeError(f"{tool} is missing (apt-get install {pkg}): "
                                   "the nodes' state transfers use it")
        os.makedirs(self.workdir, exist_ok=True)
        self.tp = start_toxiproxy(self.workdir)
        self.reaper = start_reaper([self.workdir], [self.tp.proc.pid])
        # gcomm, IST and SST ports per node.
        self.gports = [free_port() for _ in range(self.N)]
        # The state transfer scripts read this file, not the command line:
        # their log goes to the data directory (Debian's own my.cnf, which
        # they would otherwise read, sends it to syslog).
        cnf = "[sst]\nsst-syslog=-1\nsst-log-archive=0\n"
        self.nodes = [Node(self.workdir, i, self._node_args(i), cnf) for i in range(self.N)]
        first = self.nodes[0]
        if first.install().wait(120) != 0:
            raise RuntimeError(f"mariadb-install-db failed (see {first.dir}/install.log)")
        first.launch(["--wsrep-new-cluster"])
        first.first_ready(["--wsrep-new-cluster"])
        self._wait_synced(0)
        first.sql(
            f"CREATE DATABASE {DATABASE};"
            f"CREATE USER '{USER}'@'%' IDENTIFIED BY '{self.password}';"
            f"CREATE USER '{USER}'@'localhost' IDENTIFIED BY '{self.password}';"
            f"GRANT ALL ON {DATABASE}.* TO '{USER}'@'%';"
            f"GRANT ALL ON {DATABASE}.* TO '{USER}'@'localhost';"
            "CREATE DATABASE topology;"
            "CREATE TABLE topology.beat (id INT PRIMARY KEY, n BIGINT) ENGINE=InnoDB;"
            "INSERT INTO topology.beat VALUES (1, 0)")
        # The other nodes start from a copy of the first one's data, cleanly
        # shut down: they join at its position and need no full state
        # transfer (mariadb-backup's, the one that works as root here,
        # sleeps 10 s before it sends anything).
        first.shutdown()
        for n in self.nodes[1:]:
            shutil.copytree(first.data, n.data,
                            ignore=shutil.ignore_patterns("galera.cache", "gvwstate.dat", "*.pid"))
        first.launch(["--wsrep-new-cluster"])
        first.ready()
        self._wait_synced(0)
        for n in self.nodes[1:]:
            n.launch()
        for n in self.nodes[1:]:
            n.first_ready()
            self._wait_synced(n.index)
        for n in self.nodes:
            self.proxies.append(self.tp.proxy(f"galera{n.index}", f"127.0.0.1:{n.port}"))
        wait_until(lambda: self.nodes[0].status("wsrep_cluster_size") == str(self.N), 30,
                   "the cluster to have 3 nodes")

    def stop(self) -> None:
        stop_topology(self)

    def uri(self, **options: str) -> str:
        hosts = ",".join(p.listen for p in self.proxies)
        q = "&".join(f"{k}={v}" for k, v in options.items())
        return f"mysql://{USER}:{self.password}@{hosts}/{DATABASE}" + (f"?{q}" if q else "")

    def node_uris(self) -> list[str]:
        return [f"mysql://{USER}:{self.password}@127.0.0.1:{n.port}/{DATABASE}"
                for n in self.nodes]

    def primary(self) -> int:
        for n in self.nodes:
            if n.index != self.down and n.alive() and self._in_primary(n):
                return n.index
        raise RuntimeError("no node of the cluster is in the Primary component")

    def failover(self, how: str = "kill") -> FailoverTimes:
        if how not in ("kill", "cut"):
            raise ValueError(f"failover how={how!r}: expected 'kill' or 'cut'")
        if self.down is not None:
            raise RuntimeError("failover before restore(): a node is still down")
        old = self.primary()
        began = time.monotonic()
        if how == "kill":
            self.nodes[old].kill()
        else:
            self.proxies[old].enable(False)
            self.nodes[old].sql("SET GLOBAL wsrep_provider_options='gmcast.isolate=1'")
        self.down, self.down_how = old, how
        rest = [n for n in self.nodes if n.index != old]

        def writable() -> bool:
            for n in rest:
                if n.try_sql("UPDATE topology.beat SET n = n + 1 WHERE id = 1; SELECT 1") == "1":
                    return True
            return False

        wait_until(writable, 60, "a remaining node to take writes", 0.05)
        self.last = FailoverTimes(began=began, promoted=time.monotonic(), restored=0.0, how=how)
        return self.last

    def restore(self) -> None:
        if self.down is None:
            return
        n = self.nodes[self.down]
        if n.alive() and self.down_how == "cut":
            n.sql("SET GLOBAL wsrep_provider_options='gmcast.isolate=0'")
        if not self._rejoins(n):
            # Killed (or evicted for good): restarted, it rejoins by an
            # incremental transfer from its recovered position.
            n.kill()
            self._relaunch(n)
        self._wait_whole()
        self.proxies[n.index].enable(True)
        self.down = None
        if self.last is not None:
            self.last.restored = time.monotonic()

    # ---- the nodes -----------------------------------------------------------

    def _node_args(self, i: int) -> list[str]:
        d = os.path.join(self.workdir, f"node{i}")
        g = self.gports[i]
        ist, sst = free_port(), free_port()
        peers = ",".join(f"127.0.0.1:{p}" for p in self.gports)
        opts = (f"base_host=127.0.0.1;base_port={g};gmcast.listen_addr=tcp://127.0.0.1:{g};"
                f"ist.recv_addr=127.0.0.1:{ist};gcache.size=32M;gcache.dir={d}/data;" + EVS)
        return [f"--server-id={i + 1}", "--binlog-format=ROW",
                "--default-storage-engine=InnoDB", "--innodb-autoinc-lock-mode=2",
                "--wsrep-on=ON", f"--wsrep-provider={PROVIDER}",
                "--wsrep-cluster-name=leaselock_test",
                f"--wsrep-cluster-address=gcomm://{peers}",
                f"--wsrep-node-name=node{i}", "--wsrep-node-address=127.0.0.1",
                f"--wsrep-provider-options={opts}",
                # Not rsync: its daemon, started as root, runs as nobody,
                # which cannot write a data directory private to root.
                "--wsrep-sst-method=mariabackup", "--wsrep-sst-auth=root:",
                f"--wsrep-sst-receive-address=127.0.0.1:{sst}"]

    @staticmethod
    def _relaunch(n: Node) -> None:
        """Starts a node that was killed at the position its storage
        recovers (what Debian's galera_recovery does before systemd starts
        it): without it, a killed node's position is unknown and it would
        take a full state transfer."""
        log = os.path.join(n.dir, "recover.log")
        if os.path.exists(log):
            os.unlink(log)
        n.launch(["--wsrep-recover", f"--log-error={log}"])
        n.proc.wait(120)
        pos = ""
        with open(log, errors="replace") as f:
            for line in f:
                if "WSREP: Recovered position:" in line:
                    pos = line.rsplit("Recovered position:", 1)[1].strip()
        n.launch([f"--wsrep-start-position={pos}"] if pos else [])
        n.ready(120)

    @staticmethod
    def _in_primary(n: Node) -> bool:
        try:
            return (n.status("wsrep_cluster_status") == "Primary"
                    and n.status("wsrep_ready") == "ON")
        except SqlError:
            return False

    def _wait_synced(self, i: int, timeout: float = 120) -> None:
        n = self.nodes[i]
        wait_until(lambda: n.status("wsrep_local_state_comment") == "Synced"
                   and self._in_primary(n), timeout,
                   f"galera node{i} to be Synced (see {n.log})", 0.05)

    def _whole(self) -> bool:
        """Whether every node is Synced in one Primary component of 3."""
        return all(n.status("wsrep_local_state_comment") == "Synced" and self._in_primary(n)
                   and n.status("wsrep_cluster_size") == str(self.N) for n in self.nodes)

    def _wait_whole(self, steady: float = 1.0, timeout: float = 120) -> None:
        """Waits until the cluster has been whole for `steady` seconds: a
        node back from isolation was seen Synced, then dropped out of the
        Primary component again a moment later, as the others finished
        evicting it (seen once in about 30 cut-off failovers)."""
        end = time.monotonic() + timeout
        since = None
        while True:
            try:
                whole = self._whole()
            except SqlError:
                whole = False
            now = time.monotonic()
            if not whole:
                since = None
            elif since is None:
                since = now
            elif now - since >= steady:
                return
            if now > end:
                raise RuntimeError(f"the cluster was not whole for {steady} s within {timeout} s "
                                   f"(see {self.workdir}/node*/mysqld.log)")
            time.sleep(0.1)

    def _rejoins(self, n: Node, timeout: float = 15) -> bool:
        """After the isolation is lifted, whether the node gets back into
        the Primary component by itself."""
        if not n.alive():
            return False
        try:
            wait_until(lambda: self._in_primary(n), timeout, "the node to rejoin", 0.1)
            return True
        except RuntimeError:
            return False

    def settings(self) -> dict:
        n = self.nodes[self.primary()]
        return {k: n.status(k) for k in ("wsrep_cluster_size", "wsrep_cluster_status",
                                         "wsrep_local_state_comment", "wsrep_provider_version")} | {
            "wsrep_sst_method": n.var("wsrep_sst_method"),
            "wsrep_sync_wait": n.var("wsrep_sync_wait"),
            "read_only": n.var("read_only")}
