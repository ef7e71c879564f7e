"""The "mariadb-semisync" topology: a MariaDB primary and one replica on
127.0.0.1 with GTID replication made semi-synchronous (AFTER_SYNC), each
client port behind a Toxiproxy proxy, and a failover driver that promotes
the replica the way a failover tool does (stop replication, make it
writable) and brings the old primary back as its replica.

It also holds what the Galera topology (galera.py) shares: one mariadbd
node (Node), the credentials and stop_topology(); the Toxiproxy server,
free ports and the reaper are tests/topology/proxies.py's.

Every server runs as mysql.sh's does (tests/servers/mysql.sh): its own data
directory, socket and port, the user leaselock with a password on the
database leaselock_test. The tests' own SQL goes as root over the unix
socket, through the mariadb client.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import time

from .base import FailoverTimes, Topology
from .proxies import (free_port, kill_all_in, set_upstream, start_reaper, start_toxiproxy,
                      stop_reaper)

DATABASE = "leaselock_test"
USER = "leaselock"


def _which(*names: str) -> str:
    for n in names:
        p = shutil.which(n) or (f"/usr/sbin/{n}" if os.access(f"/usr/sbin/{n}", os.X_OK) else None)
        if p:
            return p
    raise RuntimeError(f"{names[0]} is missing (apt-get install mariadb-server)")


MARIADBD = _which("mariadbd", "mysqld")
CLIENT = _which("mariadb", "mysql")
INSTALL_DB = _which("mariadb-install-db", "mysql_install_db")
DUMP = _which("mariadb-dump", "mysqldump")


def wait_until(pred, timeout: float, what: str, step: float = 0.02):
    """pred()'s first true value; an error naming `what` after timeout s."""
    end = time.monotonic() + timeout
    while True:
        try:
            v = pred()
        except SqlError:
            v = None
        if v:
            return v
        if time.monotonic() > end:
            raise RuntimeError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(step)


def _cnf_line(arg: str) -> str:
    """--name=value as an option file's line."""
    name, eq, value = arg[2:].partition("=")
    return f'{name}="{value}"\n' if eq else f"{name}\n"


def stop_topology(topo) -> None:
    """stop() of this module's topologies and galera.py's: every node and
    what it started (state transfer scripts) killed, the proxies, the work
    directory removed (kept with LEASELOCK_TOPOLOGY_KEEP, for the logs)."""
    stop_reaper(topo.reaper)
    topo.reaper = None
    for n in topo.nodes:
        kill_all_in(n.dir, n.proc.pid if n.alive() else None, below=True)
    if topo.tp is not None:
        topo.tp.close()
        topo.tp = None
    if not os.environ.get("LEASELOCK_TOPOLOGY_KEEP"):
        shutil.rmtree(topo.workdir, ignore_errors=True)


class SqlError(RuntimeError):
    pass


class Node:
    """One mariadbd: its data directory, socket, port and process."""

    def __init__(self, topdir: str, index: int, args: list[str], cnf: str = "") -> None:
        self.index = index
        self.dir = os.path.join(topdir, f"node{index}")
        self.data = os.path.join(self.dir, "data")
        self.sock = os.path.join(self.dir, "mysqld.sock")
        self.args = args  # what every start of this node adds
        # An option file, for what reads one rather than the command line
        # (Galera's state transfer scripts); none: --no-defaults.
        self.cnf = cnf
        self.port = 0
        self.proc: subprocess.Popen | None = None
        self.log = os.path.join(self.dir, "mysqld.log")

    def install(self) -> subprocess.Popen:
        os.makedirs(self.dir, exist_ok=True)
        return subprocess.Popen(
            [INSTALL_DB, "--no-defaults", "--user=root", f"--datadir={self.data}",
             "--auth-root-authentication-method=normal", "--skip-test-db",
             "--innodb-log-file-size=16M", f"--tmpdir={self.dir}"],
            stdout=open(os.path.join(self.dir, "install.log"), "wb"),
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def launch(self, extra: list[str] | None = None) -> None:
        """Starts mariadbd (on a free port the first time, then the same
        one: the proxy's upstream); ready() waits for it."""
        if not self.port:
            self.port = free_port()
        try:
            os.unlink(self.sock)
        except FileNotFoundError:
            pass
        args = ["--user=root", f"--datadir={self.data}",
                "--bind-address=127.0.0.1", f"--port={self.port}", f"--socket={self.sock}",
                f"--pid-file={self.dir}/mysqld.pid", f"--log-error={self.log}",
                "--skip-name-resolve", "--innodb-buffer-pool-size=32M",
                "--innodb-log-file-size=16M", "--innodb-flush-log-at-trx-commit=2",
                "--max-connections=200", f"--tmpdir={self.dir}"] + self.args
        if self.cnf:
            # Every option in the file: the state transfer scripts pass the
            # command line on to mariadb-backup, which refuses the server
            # options it does not know, but reads them from a file.
            cnf = os.path.join(self.dir, "my.cnf")
            with open(cnf, "w") as f:
                f.write("[mysqld]\n" + "".join(_cnf_line(a) for a in args) + self.cnf)
            cmd = [MARIADBD, f"--defaults-file={cnf}"] + (extra or [])
        else:
            cmd = [MARIADBD, "--no-defaults"] + args + (extra or [])
        with open(os.path.join(self.dir, "mysqld.out"), "ab") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)

    def ready(self, timeout: float = 60) -> None:
        def up() -> bool:
            if self.proc is None or self.proc.poll() is not None:
                raise RuntimeError(f"mariadbd node{self.index} exited (see {self.log})")
            return os.path.exists(self.sock) and self.try_sql("SELECT 1") == "1"

        try:
            wait_until(up, timeout, f"mariadbd node{self.index} to start (see {self.log})")
        except RuntimeError as e:
            # The log goes with pytest's temporary directory: its end, here.
            raise RuntimeError(f"{e}; its log ends:\n{self.log_tail()}") from None

    def log_tail(self, lines: int = 25) -> str:
        try:
            with open(self.log, errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError as e:
            return f"(no log: {e})"

    def first_ready(self, extra: list[str] | None = None) -> None:
        """ready() after the first launch(), which may lose its free port
        to another process before binding it: then on another port."""
        for attempt in range(3):
            try:
                self.ready()
                return
            except RuntimeError:
                with open(self.log, errors="replace") as f:
                    lost = "Address already in use" in f.read()
                if not lost or attempt == 2:
                    raise
            self.kill()
            self.port = 0
            self.launch(extra)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def sql(self, query: str, timeout: float = 30) -> str:
        """The result of query as root over the socket, tab-separated rows
        without headers; SqlError when it fails."""
        try:
            r = subprocess.run([CLIENT, "--no-defaults", "-uroot", f"--socket={self.sock}",
                                "-N", "-B", "-e", query], capture_output=True, text=True,
                               timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise SqlError(f"node{self.index}: no answer in {timeout} s to {query!r}") from None
        if r.returncode != 0:
            raise SqlError(f"node{self.index}: {query!r}: {r.stderr.strip()}")
        return r.stdout.strip()

    def try_sql(self, query: str) -> str | None:
        try:
            return self.sql(query, timeout=5)
        except SqlError:
            return None

    def var(self, name: str) -> str:
        return self.sql(f"SELECT @@{name}")

    def status(self, name: str) -> str:
        out = self.sql(f"SHOW GLOBAL STATUS LIKE '{name}'")
        return out.split("\t", 1)[1] if "\t" in out else ""

    def slave_status(self) -> dict:
        """SHOW SLAVE STATUS as a dict ({} when none is configured)."""
        r = subprocess.run([CLIENT, "--no-defaults", "-uroot", f"--socket={self.sock}", "-B",
                            "-e", "SHOW SLAVE STATUS"], capture_output=True, text=True,
                           timeout=30, stdin=subprocess.DEVNULL)
        if r.returncode != 0:
            raise SqlError(f"node{self.index}: SHOW SLAVE STATUS: {r.stderr.strip()}")
        lines = r.stdout.rstrip("\n").split("\n")
        if len(lines) < 2:
            return {}
        return dict(zip(lines[0].split("\t"), lines[1].split("\t")))

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        if self.alive():
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)

    def shutdown(self, timeout: float = 30) -> None:
        if self.alive():
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()


class MariaDBTopology(Topology):
    """Node 0 starts as the primary, node 1 as its semi-synchronous
    replica; they swap at each failover.

    The replica follows the primary through the primary's proxy, so that
    cutting the primary off cuts replication too, by GTID (slave_pos,
    strict mode). The replica is read-only, as is an old primary from the
    moment it starts again: clients tell the primary by @@read_only. Its
    data is rebuilt from a dump of the new primary's (the tests' database
    and the driver's own) when it committed what the new primary never
    received, which is what the tests make happen; the users, created
    before any failover, are the same on both. vip_uri() offers the other
    form clients use: one address that failover() moves."""

    name = "mariadb-semisync"

    # How long a commit waits for the replica's acknowledgement before the
    # primary falls back to asynchronous replication (MariaDB's default is
    # 10 s): once the replica's replication is stopped, the next commit
    # waits this long, the ones after it do not (until the replica is back).
    SEMISYNC_TIMEOUT_MS = 1000

    def __init__(self, workdir: str, semisync_timeout_ms: int | None = None) -> None:
        self.workdir = os.path.abspath(workdir)
        self.timeout_ms = semisync_timeout_ms or self.SEMISYNC_TIMEOUT_MS
        self.password = secrets.token_hex(12)
        self.repl_password = secrets.token_hex(12)
        self.nodes: list[Node] = []
        self.proxies: list = []
        self.vip = None  # a proxy that failover() points at the new primary
        self.tp = None
        self.reaper = None
        self._primary = 0
        self.promoted_at_pos = ""  # the new primary's GTID position when promoted
        self.down: int | None = None  # the old primary until restore()
        self.down_how = ""
        self.last: FailoverTimes | None = None

    # ---- the interface -------------------------------------------------------

    def _start(self) -> None:
        os.makedirs(self.workdir, exist_ok=True)
        self.tp = start_toxiproxy(self.workdir)
        self.reaper = start_reaper([self.workdir], [self.tp.proc.pid])
        self.nodes = [Node(self.workdir, i, self._node_args(i)) for i in range(2)]
        for p in [n.install() for n in self.nodes]:
            if p.wait(120) != 0:
                raise RuntimeError("mariadb-install-db failed "
                                   f"(see {self.workdir}/node*/install.log)")
        for n in self.nodes:
            n.launch(self._role_args(n.index == 0))
        for n in self.nodes:
            n.first_ready(self._role_args(n.index == 0))
            self.proxies.append(self.tp.proxy(f"mariadb{n.index}", f"127.0.0.1:{n.port}"))
        self.vip = self.tp.proxy("mariadb_vip", f"127.0.0.1:{self.nodes[0].port}")
        self.nodes[0].sql(
            f"CREATE DATABASE {DATABASE};"
            f"CREATE USER '{USER}'@'%' IDENTIFIED BY '{self.password}';"
            f"CREATE USER '{USER}'@'localhost' IDENTIFIED BY '{self.password}';"
            f"GRANT ALL ON {DATABASE}.* TO '{USER}'@'%';"
            f"GRANT ALL ON {DATABASE}.* TO '{USER}'@'localhost';"
            f"CREATE USER 'repl'@'%' IDENTIFIED BY '{self.repl_password}';"
            "GRANT REPLICATION SLAVE ON *.* TO 'repl'@'%';"
            # The driver's own heartbeat, outside the tests' database.
            "CREATE DATABASE topology;"
            "CREATE TABLE topology.beat (id INT PRIMARY KEY, n BIGINT) ENGINE=InnoDB;"
            "INSERT INTO topology.beat VALUES (1, 0)")
        self._follow(1, 0)
        self._wait_semisync(0)

    def stop(self) -> None:
        stop_topology(self)

    def uri(self, **options: str) -> str:
        hosts = ",".join(p.listen for p in self.proxies)
        q = "&".join(f"{k}={v}" for k, v in options.items())
        return f"mysql://{USER}:{self.password}@{hosts}/{DATABASE}" + (f"?{q}" if q else "")

    def node_uris(self) -> list[str]:
        return [f"mysql://{USER}:{self.password}@127.0.0.1:{n.port}/{DATABASE}"
                for n in self.nodes]

    def vip_uri(self, **options: str) -> str:
        """A single-host URI whose address follows the primary, as a
        virtual IP or a proxy moved by the failover tool does: the client
        sees the same address before and after, another server behind it."""
        q = "&".join(f"{k}={v}" for k, v in options.items())
        return (f"mysql://{USER}:{self.password}@{self.vip.listen}/{DATABASE}"
                + (f"?{q}" if q else ""))

    def primary(self) -> int:
        return self._primary

    def replica(self) -> int:
        return 1 - self._primary

    def failover(self, how: str = "kill") -> FailoverTimes:
        if how not in ("kill", "cut"):
            raise ValueError(f"failover how={how!r}: expected 'kill' or 'cut'")
        if self.down is not None:
            raise RuntimeError("failover before restore(): the old primary is still down")
        old, new = self._primary, 1 - self._primary
        began = time.monotonic()
        if how == "kill":
            self.nodes[old].kill()
        else:
            # Cut off (clients and the replica's connection both go
            # through its proxy), then fenced the way a failover tool
            # does: read-only, so nothing more commits there.
            self.proxies[old].enable(False)
            self.nodes[old].sql("SET GLOBAL read_only=1; "
                                "SET GLOBAL rpl_semi_sync_master_enabled=OFF")
        self._promote(new)
        self._move_vip(new)
        self._primary, self.down, self.down_how = new, old, how
        self.last = FailoverTimes(began=began, promoted=time.monotonic(), restored=0.0, how=how)
        return self.last

    def restore(self) -> None:
        if self.down is None:
            return
        old, new = self.down, self._primary
        node = self.nodes[old]
        if not node.alive():
            # Read-only from its first moment: no client write can land
            # on the old primary before it follows the new one.
            node.launch(self._role_args(False))
            node.ready()
        node.sql("STOP SLAVE; SET GLOBAL read_only=1; "
                 "SET GLOBAL rpl_semi_sync_master_enabled=OFF")
        if node.var("gtid_binlog_pos") == self.promoted_at_pos:
            node.sql("RESET SLAVE ALL; SET GLOBAL gtid_slave_pos=@@gtid_binlog_pos")
        else:
            self._rebuild(old, new)
        self.nodes[new].sql("SET GLOBAL rpl_semi_sync_master_enabled=ON")
        self._follow(old, new)
        self.proxies[old].enable(True)
        self._wait_semisync(new)
        self.down = None
        if self.last is not None:
            self.last.restored = time.monotonic()

    # ---- what a failover tool does -------------------------------------------

    def _node_args(self, i: int) -> list[str]:
        return [f"--server-id={i + 1}", "--log-bin=mysql-bin", "--relay-log=relay-bin",
                "--binlog-format=ROW", "--log-slave-updates", "--gtid-strict-mode=ON",
                "--skip-slave-start", "--slave-net-timeout=5",
                "--rpl-semi-sync-slave-enabled=ON",
                "--rpl-semi-sync-master-wait-point=AFTER_SYNC",
                f"--rpl-semi-sync-master-timeout={self.timeout_ms}"]

    @staticmethod
    def _role_args(primary: bool) -> list[str]:
        if primary:
            return ["--rpl-semi-sync-master-enabled=ON", "--read-only=OFF"]
        return ["--rpl-semi-sync-master-enabled=OFF", "--read-only=ON"]

    def _follow(self, replica: int, primary: int) -> None:
        """Makes node replica follow node primary through the primary's
        proxy (so cutting it off cuts replication too), by GTID."""
        p = self.proxies[primary].listen.rsplit(":", 1)[1]
        self.nodes[replica].sql(
            "CHANGE MASTER TO MASTER_HOST='127.0.0.1', "
            f"MASTER_PORT={p}, MASTER_USER='repl', MASTER_PASSWORD='{self.repl_password}', "
            "MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1, MASTER_HEARTBEAT_PERIOD=1; "
            "START SLAVE")

    def _promote(self, i: int) -> None:
        """Stops the replica's replication once it has applied what it
        received (semi-sync acknowledged it: it must not be lost), then
        makes it writable. Its commits wait for a replica again once
        restore() has given it one: with semi-sync on and no replica, the
        first commit would wait the whole timeout, then go on without."""
        n = self.nodes[i]
        n.sql("STOP SLAVE IO_THREAD")
        st = n.slave_status()
        if st.get("Slave_SQL_Running") == "Yes":
            wait_until(lambda: "read all relay log" in n.slave_status().get(
                "Slave_SQL_Running_State", "") or n.slave_status().get(
                "Slave_SQL_Running") != "Yes", 30, f"node{i} to apply its relay log")
        n.sql("STOP SLAVE; RESET SLAVE ALL; SET GLOBAL read_only=0")
        self.promoted_at_pos = n.var("gtid_binlog_pos")

    def _move_vip(self, i: int) -> None:
        """Points the virtual address at node i; the connections it held
        to the old primary are closed, as a moved address leaves them."""
        self.vip.enable(False)
        set_upstream(self.vip, f"127.0.0.1:{self.nodes[i].port}")

    def _rebuild(self, old: int, new: int) -> None:
        """The old primary committed what the new one never received:
        its copy of the database is replaced by a dump of the new
        primary's, taken with the GTID position it matches, and its binary
        log is emptied (in strict mode, a replica whose log holds GTIDs
        the primary lacks stops with an error)."""
        node, src = self.nodes[old], self.nodes[new]
        dump = subprocess.run(
            [DUMP, "--no-defaults", "-uroot", f"--socket={src.sock}", "--single-transaction",
             "--gtid", "--master-data=1", "--databases", DATABASE, "topology"],
            capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        if dump.returncode != 0:
            raise RuntimeError(f"mariadb-dump of node{new} failed: {dump.stderr.strip()}")
        node.sql(f"RESET SLAVE ALL; DROP DATABASE IF EXISTS {DATABASE}; "
                 "DROP DATABASE IF EXISTS topology; RESET MASTER")
        r = subprocess.run([CLIENT, "--no-defaults", "-uroot", f"--socket={node.sock}"],
                           input="SET SESSION sql_log_bin=0;\n" + dump.stdout,
                           capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            raise RuntimeError(f"loading node{new}'s dump into node{old} failed: "
                               f"{r.stderr.strip()}")

    def _wait_semisync(self, primary: int, timeout: float = 60) -> None:
        """Returns once the replica has everything the primary has and
        the primary's commits wait for it again (semi-sync back on: it
        switches on at the first commit after the replica caught up, so
        one is made here, in the driver's own table)."""
        p, r = self.nodes[primary], self.nodes[1 - primary]

        def synced() -> bool:
            p.sql("UPDATE topology.beat SET n = n + 1 WHERE id = 1")
            return (p.status("Rpl_semi_sync_master_status") == "ON"
                    and p.status("Rpl_semi_sync_master_clients") == "1"
                    and r.var("gtid_slave_pos") == p.var("gtid_binlog_pos"))

        wait_until(synced, timeout, f"node{1 - primary} to catch up, semi-synchronous", 0.05)

    # ---- for the tests -------------------------------------------------------

    def standby(self) -> int:
        return self.replica()

    def pause_replication(self) -> None:
        """Stops the replica's I/O and SQL threads: what the primary
        commits from now on stays there (the next commit first waits the
        semi-sync timeout, then the primary goes on asynchronously)."""
        self.nodes[self.replica()].sql("STOP SLAVE")

    def resume_replication(self) -> None:
        """Undoes pause_replication() when no failover followed it."""
        if self.down is None:
            self.nodes[self.replica()].sql("START SLAVE")
            self._wait_semisync(self._primary)

    def has_everything(self) -> bool:
        """Whether the replica has received all that the primary logged so
        far (a promotion applies what it received before it ends)."""
        p, r = self.nodes[self._primary], self.nodes[self.replica()]
        pos = p.var("gtid_binlog_pos")
        return pos in (r.slave_status().get("Gtid_IO_Pos"), r.var("gtid_slave_pos"))

    def replicated(self) -> bool:
        """Whether the replica has applied all that the primary logged."""
        p, r = self.nodes[self._primary], self.nodes[self.replica()]
        return r.var("gtid_slave_pos") == p.var("gtid_binlog_pos")

    def wait_replicated(self, timeout: float = 30) -> None:
        wait_until(self.replicated, timeout, "the replica to catch up")

    def settings(self) -> dict:
        """What the primary and replica run with, read from the servers."""
        p, r = self.nodes[self._primary], self.nodes[self.replica()]
        names = ["rpl_semi_sync_master_enabled", "rpl_semi_sync_master_wait_point",
                 "rpl_semi_sync_master_timeout", "rpl_semi_sync_master_wait_no_slave",
                 "rpl_semi_sync_slave_enabled", "gtid_strict_mode", "log_bin",
                 "binlog_format", "log_slave_updates", "read_only", "server_id",
                 "gtid_domain_id", "sync_binlog", "innodb_flush_log_at_trx_commit"]
        out = {"primary": {n: p.var(n) for n in names}, "replica": {n: r.var(n) for n in names}}
        out["primary"]["Rpl_semi_sync_master_status"] = p.status("Rpl_semi_sync_master_status")
        st = r.slave_status()
        out["replica"]["Using_Gtid"] = st.get("Using_Gtid", "")
        out["replica"]["Rpl_semi_sync_slave_status"] = r.status("Rpl_semi_sync_slave_status")
        return out
