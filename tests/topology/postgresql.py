"""PostgreSQL primary + one streaming standby on 127.0.0.1 (the topologies
pg-async and pg-sync of tests/topology/base.py).

Node i runs from its own data directory on its own port. Its clients reach
it through a Toxiproxy proxy, and the other node's replication connection
through a second one, so cutting a node off cuts its replication too, and
pausing replication is disabling one proxy. Synchronous: the primary's
synchronous_standby_names names the standby (application_name n<i>) and
synchronous_commit is on; asynchronous: none named (PostgreSQL's default).

A failover kills (SIGKILL, every process of the server; its proxies then
refuse connections as its port would) or cuts off (both proxies disabled)
and stops the primary, then promotes the standby (pg_promote) and waits until
it takes writes. A third way, "partition", cuts it off like "cut", then
points its clients' proxy at an address that accepts connections and never
answers: the old primary's host looks partitioned away, not stopped. restore() rebuilds the old primary as a standby of the new
one with pg_basebackup (the database is tiny: a fresh copy is quicker than
pg_rewind's crash recovery of a killed server) and, when synchronous, names
it in the new primary's synchronous_standby_names.

As root the servers run as the user postgres, their files in a directory
of their own under /dev/shm (or TMPDIR; the work directory's parents may
not be reachable by that user); the work directory's file pgdir names it.
Both nodes start from copies of one cluster made once per process.
Durability settings are off where they only cost time here (fsync,
full_page_writes): a failover is a killed process, never a lost machine.
"""

from __future__ import annotations

import atexit
import glob
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
import time
import urllib.parse

from .base import FailoverTimes, Topology
from .proxies import (Silent, free_port, kill_all_in, set_upstream, start_reaper,
                      start_toxiproxy, stop_reaper)

DB = "leaselock_test"
ROLE = "leaselock"

# Every node; a standby's primary_conninfo and synchronous_standby_names
# are set per node.
SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "fsync": "off",
    "full_page_writes": "off",
    "max_connections": "200",
    "shared_buffers": "16MB",
    "max_wal_senders": "5",
    "wal_keep_size": "64MB",
    # A standby whose sender came back retries within 0.1 s, not 5 s.
    "wal_retrieve_retry_interval": "100ms",
    "wal_receiver_status_interval": "1s",
    # In the data directory, not /dev/shm: a killed server's segments go
    # with its data.
    "dynamic_shared_memory_type": "mmap",
    "log_min_messages": "warning",
    "log_connections": "off",
}


def _tmp() -> str | None:
    """Where the data directories go: memory when the machine has it
    (/dev/shm), so that copying a cluster and a base backup cost no disk
    I/O; LEASELOCK_TOPOLOGY_TMP chooses."""
    env = os.environ.get("LEASELOCK_TOPOLOGY_TMP")
    if env:
        return env
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        return "/dev/shm"
    return os.environ.get("TMPDIR")


def _bindir() -> str:
    env = os.environ.get("PG_BINDIR")
    if env:
        return env
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda d: int(d.split("/")[-2]))
    for d in reversed(dirs):
        if os.access(os.path.join(d, "initdb"), os.X_OK):
            return d
    found = shutil.which("initdb")
    if not found:
        raise RuntimeError("postgresql is not installed (apt-get install postgresql)")
    return os.path.dirname(found)


# One cluster, initdb'd and set up (role, database) once per process and
# per PostgreSQL, copied for every node a topology starts: initdb is the
# slowest part of a start. bindir -> (data directory, the role's password,
# postgres's password).
_TEMPLATES: dict = {}


class _Node:
    def __init__(self, index: int, root: str, name: str = "") -> None:
        self.i = index
        self.name = name or f"n{index}"
        self.dir = os.path.join(root, self.name)  # its socket and log
        self.data = os.path.join(self.dir, "data")
        self.port = free_port()
        self.client = None  # its clients' Toxiproxy proxy
        self.repl = None  # the proxy its standby replicates through


class PgTopology(Topology):
    #: The multi-host URI forms uri() gives (uri_form chooses), the one
    #: users write first: "hosts", postgresql://u:pw@h:p1,h:p2/db?..., and
    #: "query", postgresql:///db?host=h,h&port=p1,p2&user=u&password=pw&...
    uri_forms = ("hosts", "query")

    def __init__(self, workdir: str, sync: bool) -> None:
        # LEASELOCK_PG_URI_FORM chooses for tests/topology/run.py.
        self.uri_form = os.environ.get("LEASELOCK_PG_URI_FORM", "hosts")
        self.workdir = os.path.abspath(workdir)
        self.sync = sync
        self.bin = _bindir()
        self.as_user: list[str] = []
        self.owner = None
        if os.getuid() == 0:
            user = "postgres"
            try:
                self.owner = pwd.getpwnam(user)
            except KeyError:
                user = "nobody"
                self.owner = pwd.getpwnam(user)
            self.as_user = ["runuser", "-u", user, "--"]
        self.root = ""
        self.nodes: list[_Node] = []
        self.tp = None
        self.reaper = None
        self.silent = None
        self.password = ""  # the role leaselock's
        self.su_password = ""  # postgres's, for replication
        self._primary = 0
        self.down: int | None = None  # the node a failover left dead
        self.last: FailoverTimes | None = None

    # ---- running commands -------------------------------------------------

    def _run(self, args: list[str], timeout: float = 60, check: bool = True,
             **kw) -> subprocess.CompletedProcess:
        r = subprocess.run(self.as_user + args, capture_output=True, text=True,
                           timeout=timeout, stdin=subprocess.DEVNULL, **kw)
        if check and r.returncode != 0:
            raise RuntimeError(f"{' '.join(args[:2])} failed ({r.returncode}): "
                               f"{r.stderr.strip() or r.stdout.strip()}")
        return r

    def sql(self, node: int, query: str, db: str = "postgres", timeout: float = 30) -> str:
        """Runs query as postgres on node's socket (no proxy); its output,
        unaligned."""
        return self._psql(self.nodes[node], query, db, timeout)

    def _psql(self, n: _Node, query: str, db: str = "postgres", timeout: float = 30) -> str:
        r = self._run([f"{self.bin}/psql", "-X", "-q", "-At", "-h", n.dir, "-p", str(n.port),
                       "-U", "postgres", "-d", db, "-v", "ON_ERROR_STOP=1", "-c", query],
                      timeout=timeout)
        return r.stdout.strip()

    def _own(self, path: str) -> None:
        if self.owner is not None:
            os.chown(path, self.owner.pw_uid, self.owner.pw_gid)

    def _write(self, path: str, text: str, mode: int = 0o600) -> None:
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, mode)
        self._own(path)

    # ---- one node -----------------------------------------------------------

    def _start_node(self, n: _Node) -> None:
        opts = f"-p {n.port} -k {n.dir}"
        r = self._run([f"{self.bin}/pg_ctl", "-D", n.data, "-l", os.path.join(n.dir, "server.log"),
                       "-w", "-t", "60", "-o", opts, "start"], check=False)
        if r.returncode != 0:
            raise RuntimeError(f"postgres {n.name} did not start: {r.stderr.strip()}\n"
                               + self._log_tail(n))

    def _log_tail(self, n: _Node, lines: int = 20) -> str:
        try:
            with open(os.path.join(n.dir, "server.log"), errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""

    def _postmaster(self, n: _Node) -> tuple:
        """The server's pid and System V shared memory id (postmaster.pid:
        line 1, and line 7 "key id"), each None when unknown."""
        try:
            with open(os.path.join(n.data, "postmaster.pid")) as f:
                lines = f.read().splitlines()
        except OSError:
            return None, None
        pid = int(lines[0]) if lines and lines[0].strip().isdigit() else None
        shm = lines[6].split() if len(lines) > 6 else []
        return pid, int(shm[1]) if len(shm) == 2 and shm[1].isdigit() else None

    def _kill_node(self, n: _Node) -> None:
        if not os.path.isdir(n.data):
            return
        pid, shmid = self._postmaster(n)
        kill_all_in(n.data, pid)
        # A killed server's System V segment (its interlock) outlives it;
        # the next start would remove it, but its data directory goes.
        if shmid is not None:
            subprocess.run(["ipcrm", "-m", str(shmid)], capture_output=True)
        # A killed postmaster's socket lock file stays behind, naming a
        # process that may linger as a zombie for a moment: the next start
        # would take it for a live server.
        for lock in glob.glob(os.path.join(n.dir, ".s.PGSQL.*")):
            os.unlink(lock)

    def _conninfo(self, standby: _Node, primary: _Node) -> str:
        return (f"host=127.0.0.1 port={primary.repl.listen.rsplit(':', 1)[1]} user=postgres "
                f"password={self.su_password} application_name={standby.name} "
                f"connect_timeout=2")

    def _template(self) -> tuple:
        got = _TEMPLATES.get(self.bin)
        if got is not None:
            return got
        root = tempfile.mkdtemp(prefix="leaselock-pgtemplate.", dir=_tmp())
        atexit.register(shutil.rmtree, root, True)
        start_reaper([root], [])  # when this process is killed
        os.chmod(root, 0o755)
        self._own(root)
        t = _Node(-1, root, "template")
        os.mkdir(t.dir, 0o755)
        self._own(t.dir)
        password, su_password = secrets.token_hex(12), secrets.token_hex(12)
        pwfile = os.path.join(root, "pw")
        self._write(pwfile, su_password + "\n")
        self._run([f"{self.bin}/initdb", "-D", t.data, "-U", "postgres", "-E", "UTF8",
                   "--locale=C", "--no-sync", "--wal-segsize=1", "--auth-local=trust",
                   "--auth-host=scram-sha-256", f"--pwfile={pwfile}"])
        os.unlink(pwfile)
        with open(os.path.join(t.data, "postgresql.conf"), "a") as f:
            f.write("".join(f"{k} = {v}\n" for k, v in SETTINGS.items()))
        self._start_node(t)
        try:
            self._psql(t, f"CREATE ROLE {ROLE} LOGIN PASSWORD '{password}'")
            self._psql(t, f"CREATE DATABASE {DB} OWNER {ROLE}")
        finally:
            self._run([f"{self.bin}/pg_ctl", "-D", t.data, "-m", "fast", "-w", "-t", "60", "stop"])
        got = _TEMPLATES[self.bin] = (t.data, password, su_password)
        return got

    def _follow(self, n: _Node, primary: _Node) -> None:
        """Makes n's data, a copy of primary's, a standby's that follows it."""
        # The primary's postgresql.auto.conf came along (its
        # synchronous_standby_names): a standby's names none, so that once
        # promoted it takes writes before its own standby is back.
        self._write(os.path.join(n.data, "postgresql.auto.conf"),
                    f"primary_conninfo = '{self._conninfo(n, primary)}'\n")
        self._write(os.path.join(n.data, "standby.signal"), "")

    def _make_standby(self, n: _Node, primary: _Node) -> None:
        """n's data, copied afresh from primary (running), set to follow it."""
        if os.path.isdir(n.data):
            shutil.rmtree(n.data)
        self._run([f"{self.bin}/pg_basebackup", "-D", n.data, "-h", primary.dir,
                   "-p", str(primary.port), "-U", "postgres", "-c", "fast", "-X", "stream",
                   "--no-sync", "--no-manifest"])
        self._follow(n, primary)

    def _wait_streaming(self, primary: int, standby: int, timeout: float = 30) -> None:
        name = self.nodes[standby].name
        state = "sync" if self.sync else "async"
        end = time.monotonic() + timeout
        while True:
            got = self.sql(primary, "SELECT state || '/' || sync_state FROM pg_stat_replication "
                           f"WHERE application_name = '{name}'")
            if got == f"streaming/{state}":
                return
            if time.monotonic() > end:
                raise RuntimeError(f"{name} does not replicate from n{primary} ({got!r})")
            time.sleep(0.02)

    def _name_standby(self, primary: int, standby: int | None) -> None:
        names = "" if standby is None else self.nodes[standby].name
        self.sql(primary, f"ALTER SYSTEM SET synchronous_standby_names = '{names}'")
        self.sql(primary, "SELECT pg_reload_conf()")

    # ---- the interface ------------------------------------------------------

    def _start(self) -> None:
        os.makedirs(self.workdir, exist_ok=True)
        self.root = tempfile.mkdtemp(prefix="leaselock-pgtopo.", dir=_tmp())
        with open(os.path.join(self.workdir, "pgdir"), "w") as f:
            f.write(self.root + "\n")
        os.chmod(self.root, 0o755)
        self._own(self.root)
        self.tp = start_toxiproxy(self.workdir)
        self.reaper = start_reaper([self.root], [self.tp.proc.pid])
        self.nodes = [_Node(i, self.root) for i in range(2)]
        for n in self.nodes:
            os.mkdir(n.dir, 0o755)
            self._own(n.dir)
            up = f"127.0.0.1:{n.port}"
            n.client = self.tp.proxy(f"{n.name}_client", up)
            n.repl = self.tp.proxy(f"{n.name}_repl", up)
        p, s = self.nodes
        # Both nodes start from copies of one cleanly stopped cluster: the
        # standby's copy is as good as a base backup of the primary's.
        template, self.password, self.su_password = self._template()
        for n in self.nodes:
            subprocess.run(["cp", "-a", template, n.data], check=True)
        self._follow(s, p)
        self._start_node(p)
        self._start_node(s)
        self._primary = 0
        if self.sync:
            self._name_standby(0, 1)
        self._wait_streaming(0, 1)

    def stop(self) -> None:
        stop_reaper(self.reaper)
        self.reaper = None
        if self.silent is not None:
            self.silent.close()
            self.silent = None
        for n in self.nodes:
            self._kill_node(n)
        if self.tp is not None:
            self.tp.close()
            self.tp = None
        if os.environ.get("LEASELOCK_TOPOLOGY_KEEP"):
            return  # the servers' logs, for a post-mortem
        if self.root and os.path.basename(self.root).startswith("leaselock-pgtopo."):
            shutil.rmtree(self.root, ignore_errors=True)
        self.root = ""
        shutil.rmtree(self.workdir, ignore_errors=True)

    def uri(self, **options: str) -> str:
        ports = [n.client.listen.rsplit(":", 1)[1] for n in self.nodes]
        params = {"target_session_attrs": "read-write"}
        params.update(options)
        if self.uri_form == "hosts":
            hosts = ",".join(f"127.0.0.1:{p}" for p in ports)
            return (f"postgresql://{ROLE}:{self.password}@{hosts}/{DB}?"
                    + urllib.parse.urlencode(params, safe=","))
        q = {"host": ",".join("127.0.0.1" for _ in ports), "port": ",".join(ports),
             "user": ROLE, "password": self.password}
        q.update(params)
        return f"postgresql:///{DB}?" + urllib.parse.urlencode(q, safe=",")

    def node_uris(self) -> list[str]:
        return [f"postgresql://{ROLE}:{self.password}@127.0.0.1:{n.port}/{DB}"
                for n in self.nodes]

    def primary(self) -> int:
        return self._primary

    def standby(self) -> int:
        return 1 - self._primary

    def failover(self, how: str = "kill") -> FailoverTimes:
        if how not in ("kill", "cut", "partition"):
            raise ValueError(f"failover how={how!r}: expected 'kill', 'cut' or 'partition'")
        if self.down is not None:
            raise RuntimeError("failover: the last one's old primary is still down (restore())")
        old, new = self._primary, self.standby()
        o = self.nodes[old]
        began = time.monotonic()
        if how == "kill":
            self._kill_node(o)
        # Killed: its port refuses connections from now on, as a dead
        # server's would. The proxy must refuse them too: libpq moves on to
        # the next host when a connection is refused, not when one that was
        # accepted closes during the startup (the proxy's, on a dead
        # upstream). Cut: the network goes first, then the server.
        o.client.enable(False)
        o.repl.enable(False)
        if how != "kill":
            self._kill_node(o)
        if how == "partition":
            if self.silent is None:
                self.silent = Silent()
            set_upstream(o.client, self.silent.address)
        self.down = old
        self.sql(new, "SELECT pg_promote(true, 60)")
        # pg_promote returns once recovery has ended; a write proves it.
        self.sql(new, "CREATE TEMP TABLE promoted_check (x int)")
        self._primary = new
        self.last = FailoverTimes(began=began, promoted=time.monotonic(), restored=0.0, how=how)
        return self.last

    def restore(self) -> None:
        if self.down is None:
            return
        n, new = self.nodes[self.down], self._primary
        self._kill_node(n)
        self._make_standby(n, self.nodes[new])
        set_upstream(n.client, f"127.0.0.1:{n.port}")
        n.repl.enable(True)
        self._start_node(n)
        if self.sync:
            self._name_standby(new, n.i)
        self._wait_streaming(new, n.i)
        self.down = None
        if self.last is not None:
            self.last.restored = time.monotonic()

    # ---- for the tests' own scenarios ---------------------------------------

    def pause_replication(self) -> None:
        """Cuts the standby off the primary (its replication proxy
        disabled): nothing written from now on reaches it, and with sync
        a commit waits for it."""
        self.nodes[self._primary].repl.enable(False)

    def resume_replication(self) -> None:
        self.nodes[self._primary].repl.enable(True)

    def has_everything(self) -> bool:
        """Whether the standby has received all that the primary wrote so
        far (what it received would be replayed before a promotion ends)."""
        lsn = self.sql(self._primary, "SELECT pg_current_wal_lsn()")
        got = self.sql(self.standby(), "SELECT pg_last_wal_receive_lsn() >= "
                       f"'{lsn}'::pg_lsn")
        return got == "t"

    def wait_replicated(self, timeout: float = 30) -> None:
        """Returns once the standby has replayed everything the primary
        wrote so far."""
        lsn = self.sql(self._primary, "SELECT pg_current_wal_lsn()")
        end = time.monotonic() + timeout
        while True:
            if self.sql(self.standby(), "SELECT pg_last_wal_replay_lsn() >= "
                        f"'{lsn}'::pg_lsn") == "t":
                return
            if time.monotonic() > end:
                raise RuntimeError(f"the standby did not replay up to {lsn}")
            time.sleep(0.02)
