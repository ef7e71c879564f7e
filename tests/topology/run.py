"""Drives a replicated test topology from the shell (tests/topology/base.py
says what one is):

    python3 tests/topology/run.py start NAME DIR [OPTION=VALUE ...]
        starts topology NAME (pg-async, pg-sync, ...) with its files under
        DIR, prints URI=<the multi-host URI, the options added> and
        NODE_URI_<i>=<node i, straight>, and returns; a process of its own
        keeps the topology until stop, or until the process it watches
        ends: LEASELOCK_TOPOLOGY_WATCH=PID (0: none), else
        LEASELOCK_SERVERS_PID (tests/with-servers.sh), else the process
        that ran start (in make, one recipe line's shell)
    python3 tests/topology/run.py failover NAME DIR [kill|cut|partition]
        prints FAILOVER_SECONDS=<kill or cut to writes taken> and PRIMARY=<i>
        (partition: PostgreSQL only, see tests/topology/postgresql.py)
    python3 tests/topology/run.py restore NAME DIR     prints RESTORE_SECONDS=
    python3 tests/topology/run.py uri NAME DIR [OPTION=VALUE ...]
    python3 tests/topology/run.py stop NAME DIR

The keeper answers one JSON request per connection on DIR/control.sock;
its log is DIR/keeper.log.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from topology import KINDS, make_topology  # noqa: E402

USAGE = "usage: run.py start|failover|restore|uri|stop NAME DIR [ARGS]"


def options(args: list[str]) -> dict:
    out = {}
    for a in args:
        k, eq, v = a.partition("=")
        if not eq or not k:
            raise SystemExit(f"run.py: expected OPTION=VALUE, not {a!r}")
        out[k] = v
    return out


def serve(name: str, topo, sock: socket.socket, watch: int) -> None:
    """Answers requests until stop, or until `watch` ends."""
    while True:
        if watch and not _alive(watch):
            return
        ready, _, _ = select.select([sock], [], [], 0.5)
        if not ready:
            continue
        conn, _ = sock.accept()
        with conn:
            req = json.loads(conn.makefile().readline())
            try:
                if req.get("name") != name:
                    raise ValueError(f"this topology is {name}, not {req.get('name')}")
                reply = {"ok": True, **handle(topo, req)}
            except Exception as e:  # the driver reports it and carries on
                traceback.print_exc()
                reply = {"ok": False, "error": f"{type(e).__name__}: {e}"}
            conn.sendall((json.dumps(reply) + "\n").encode())
            if req.get("op") == "stop":
                return


def handle(topo, req: dict) -> dict:
    op = req.get("op")
    if op == "failover":
        t = topo.failover(req.get("how", "kill"))
        return {"lines": [f"FAILOVER_SECONDS={t.promoted - t.began:.3f}",
                          f"PRIMARY={topo.primary()}"]}
    if op == "restore":
        t0 = time.monotonic()
        topo.restore()
        return {"lines": [f"RESTORE_SECONDS={time.monotonic() - t0:.3f}"]}
    if op == "uri":
        return {"lines": [f"URI={topo.uri(**req.get('options', {}))}"]}
    if op == "stop":
        return {"lines": []}
    raise ValueError(f"unknown request {op!r}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def start(name: str, d: str, opts: dict) -> int:
    if name not in KINDS:
        print(f"run.py: no topology {name!r} (known: {', '.join(KINDS)})", file=sys.stderr)
        return 2
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "control.sock")
    watch = int(os.environ.get("LEASELOCK_TOPOLOGY_WATCH") or
                os.environ.get("LEASELOCK_SERVERS_PID") or os.getppid())
    r, w = os.pipe()
    if os.fork():
        os.close(w)
        with os.fdopen(r) as f:
            text = f.read()
        if not text.startswith("OK\n"):
            print(f"run.py: {name} did not start: {text.strip()} (see {d}/keeper.log)",
                  file=sys.stderr)
            return 1
        sys.stdout.write(text[3:])
        return 0
    # The keeper: its own session, so that the caller's end or Ctrl-C
    # reaches it only through the watch.
    os.close(r)
    os.setsid()
    log = os.open(os.path.join(d, "keeper.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    topo = make_topology(name, os.path.join(d, "topology"))
    code = 0
    try:
        try:
            topo.start()
            if os.path.exists(path):
                os.unlink(path)
            sock = socket.socket(socket.AF_UNIX)
            sock.bind(path)
            sock.listen(4)
            lines = [f"URI={topo.uri(**opts)}"]
            lines += [f"NODE_URI_{i}={u}" for i, u in enumerate(topo.node_uris())]
            os.write(w, ("OK\n" + "\n".join(lines) + "\n").encode())
        except BaseException as e:
            os.write(w, f"{type(e).__name__}: {e}".encode())
            raise
        finally:
            os.close(w)
        serve(name, topo, sock, watch)
    except SystemExit:
        pass  # SIGTERM
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        topo.stop()
        try:
            os.unlink(path)
        except OSError:
            pass
    # sys.exit, not os._exit: the topology's atexit handlers run.
    sys.exit(code)


def request(name: str, d: str, req: dict, timeout: float = 300) -> int:
    req["name"] = name
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(timeout)
        try:
            s.connect(os.path.join(d, "control.sock"))
        except OSError as e:
            print(f"run.py: no topology runs in {d} ({e})", file=sys.stderr)
            return 1
        s.sendall((json.dumps(req) + "\n").encode())
        reply = json.loads(s.makefile().readline() or '{"ok": false, "error": "no reply"}')
    if not reply["ok"]:
        print(f"run.py: {req['op']}: {reply['error']}", file=sys.stderr)
        return 1
    for line in reply.get("lines", []):
        print(line)
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] in (["-h"], ["--help"]):
        print(__doc__)
        return 0
    if len(argv) < 3:
        print(USAGE, file=sys.stderr)
        return 2
    cmd, name, d = argv[0], argv[1], os.path.abspath(argv[2])
    rest = argv[3:]
    if cmd == "start":
        return start(name, d, options(rest))
    if cmd == "failover":
        return request(name, d, {"op": "failover", "how": rest[0] if rest else "kill"})
    if cmd == "restore":
        return request(name, d, {"op": "restore"})
    if cmd == "uri":
        return request(name, d, {"op": "uri", "options": options(rest)})
    if cmd == "stop":
        rc = request(name, d, {"op": "stop"})
        # The keeper stops the servers after its reply: wait for it.
        end = time.monotonic() + 30
        while os.path.exists(os.path.join(d, "control.sock")) and time.monotonic() < end:
            time.sleep(0.05)
        return rc
    print(USAGE, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
