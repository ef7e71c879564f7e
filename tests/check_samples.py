#!/usr/bin/env python3
"""Runs every sample of README.md and docs/*.md, so that none can drift.

Each fenced block is extracted and run on a temporary SQLite database
(LEASELOCK_URI points at it, HOME at a temporary directory), each in a
process of its own with a timeout (a sample that waits forever fails,
named):

- python: with the built extension; a sample with top-level `await` runs
  in asyncio.run();
- lua: under lua5.4 with the built module;
- c: compiled and linked against the static library, then run. A sample
  without main() is the body of one: it is wrapped in `int main (void)`
  with <stdio.h> and <string.h> included;
- sh: run by bash when it calls `leaselock` (the built CLI first on PATH);
  a crontab line runs its command (the five schedule fields dropped); the
  `*.sh` scripts it names are stubs that exit 0. Any command exiting with
  64 or more fails the sample (usage, backend and internal errors, busy):
  `status`'s 1 and 2 are answers;
- console: a transcript; its `$ ` lines run as sh does;
- any other language (nginx, none) is not run.

A fragment that needs context says so with a marker, an HTML comment on
the line just before its fence (invisible on GitHub and on the site):

    <!-- sample: setup=NAME[,NAME] -->   prepends the setup snippets NAME
                                         (SETUP below, per language)
    <!-- sample: skip REASON -->         not run (parsed only, by the refs
                                         suite), for the reason given:
                                         OpenResty-only code, a server the
                                         sample's point needs

A URI of a server backend in a sample (`$MYSQL_URI`, `mongodb://...`) is
not swapped silently: such a sample runs on SQLite only when it does not
name one, else it carries a skip marker saying why.

    python3 tests/check_samples.py --cli build/leaselock --pylib build/python/lib \\
        --lua-cpath 'build/lua/5.4/?.so' --lib build/libleaselock.a --ldlibs '...'
Prints one line per sample and exits 1 when any failed.
"""
import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
MARKER = re.compile(r"<!--\s*sample:\s*(.*?)\s*-->\s*\n$")
TIMEOUT = 30  # seconds per sample: far more than any needs; a hang fails

# Setup snippets, per language: what a fragment's page introduced earlier.
SETUP = {
    ("python", "client"): "import leaselock\nclient = leaselock.connect()\n",
    ("python", "report"): "def build_report():\n    return 'the report'\n",
    ("lua", "client"): 'local leaselock = require "leaselock"\n'
                       "local client = assert(leaselock.connect())\n",
    ("lua", "catalog"): "local function read_catalog() return {} end\n",
    # OpenResty's ngx, enough for a sample that logs and prints through it
    ("lua", "ngx"): "ngx = { DEBUG = 8, INFO = 7, WARN = 5, ERR = 4,\n"
                    "        log = function(...) end, say = print }\n",
    ("c", "client"): 'leaselock_error_t err;\n'
                     'leaselock_client_t *c = leaselock_client_new (NULL, "sample", &err);\n'
                     'if (!c) { fprintf (stderr, "%s\\n", err.message); return 1; }\n'
                     "leaselock_acquire_opts_t o;\n"
                     "leaselock_acquire_opts_init (&o);\n"
                     "o.timeout_ms = 5000;\n"
                     "leaselock_lease_t *lease = NULL;\n"
                     'const char *key = "jobs/sample";\n'
                     "size_t key_len = strlen (key);\n"
                     "#define loop_sleep(ms) usleep ((useconds_t)(ms) * 1000)\n",
}
C_CLEANUP = {"client": "if (lease) { leaselock_lease_release (lease, &err);"
                       " leaselock_lease_destroy (lease); }\n"
                       "leaselock_client_destroy (c);\n"}


def samples(path):
    """(line, language, code, marker) of each fenced block of path."""
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        text = f.read()
    for m in FENCE.finditer(text):
        before = text[:m.start()]
        mark = MARKER.search(before[before.rfind("\n", 0, len(before) - 1) + 1:])
        yield (text.count("\n", 0, m.start()) + 2, m.group(1), m.group(2),
               mark.group(1) if mark else "")


def setups(lang, marker):
    m = re.match(r"setup=([\w,-]+)", marker)
    names = m.group(1).split(",") if m else []
    for n in names:
        if (lang, n) not in SETUP:
            raise KeyError(f"no {lang} setup snippet named {n!r} (tests/check_samples.py)")
    return names


# argv: the setup file, the sample file, the doc's path, the sample's first
# line (tracebacks name the doc's own lines).
PY_RUNNER = r"""
import ast, asyncio, inspect, sys
ns = {"__name__": "__main__"}
exec(compile(open(sys.argv[1]).read(), "setup", "exec"), ns)
src = "\n" * (int(sys.argv[4]) - 1) + open(sys.argv[2]).read()
code = compile(src, sys.argv[3], "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
r = eval(code, ns)
if inspect.iscoroutine(r):
    asyncio.run(r)
"""


def run(cmd, env, cwd, what):
    """Runs cmd; None when it succeeded, else what went wrong."""
    try:
        r = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True,
                           timeout=TIMEOUT)
    except subprocess.TimeoutExpired as e:
        out = e.stderr or b""  # bytes, even with text=True
        out = (out.decode(errors="replace") if isinstance(out, bytes) else out)[-2000:]
        return f"{what}: still running after {TIMEOUT} s (waits forever?)\n{out}"
    if r.returncode != 0:
        return f"{what}: exit status {r.returncode}\n{(r.stdout + r.stderr)[-3000:]}"
    return None


def shell_script(code, console):
    """The commands of an sh sample or a console transcript, as a bash script
    that fails on the first command exiting with 64 or more."""
    lines = []
    for line in code.splitlines():
        if console:
            if not line.startswith("$ "):
                continue
            line = line[2:]
        # a crontab line: its command
        m = re.match(r"^((?:[\d*/,-]+\s+){5})(.*)$", line)
        if m and not line.lstrip().startswith("#"):
            line = m.group(2)
        lines.append(line)
    return ("set -E\ntrap 'rc=$?; if [ $rc -ge 64 ]; then echo \"exit status $rc: "
            "$BASH_COMMAND\" >&2; exit $rc; fi' ERR\n" + "\n".join(lines) + "\n")


def stub_scripts(code, tmp):
    """Makes each *.sh the sample names a stub that exits 0; returns the
    code with absolute paths of missing ones pointing at their stub."""
    for name in sorted(set(re.findall(r"(?<![\w/.-])((?:\.?/)?[\w./-]*\.sh)\b", code))):
        stub = os.path.join(tmp, os.path.basename(name))
        with open(stub, "w") as f:
            f.write("#!/bin/sh\nexit 0\n")
        os.chmod(stub, 0o755)
        if name.startswith("/") and not os.path.exists(name):
            code = code.replace(name, stub)
    return code


def c_program(code, names):
    if re.search(r"\bmain\s*\(", code):
        return code
    head = [ln for ln in code.splitlines() if ln.startswith("#include")]
    body = [ln for ln in code.splitlines() if not ln.startswith("#include")]
    pre = "".join(SETUP[("c", n)] for n in names)
    post = "".join(C_CLEANUP.get(n, "") for n in names)
    return ("#include <stdio.h>\n#include <string.h>\n#include <unistd.h>\n"
            + "\n".join(head) + "\n#include \"leaselock.h\"\n"
            "int main (void)\n{\n" + pre + "\n".join(body) + "\n" + post + "return 0;\n}\n")


def run_sample(args, path, line, lang, code, names, tmp):
    """None when the sample ran, a string saying why it failed, or False
    when it is not one this runner executes."""
    where = f"{path}:{line}"
    env = dict(os.environ)
    home = os.path.join(tmp, "home")
    os.makedirs(home, exist_ok=True)
    env.update(HOME=home, LEASELOCK_URI="sqlite://" + os.path.join(tmp, "locks.db"),
               PATH=os.path.dirname(os.path.abspath(args.cli)) + os.pathsep + env["PATH"])
    env.pop("XDG_STATE_HOME", None)
    src = os.path.join(tmp, "sample")
    if lang == "python":
        with open(src + ".setup", "w") as f:
            f.write("".join(SETUP[("python", n)] for n in names))
        with open(src, "w") as f:
            f.write(code)
        env["PYTHONPATH"] = os.path.abspath(args.pylib)
        return run([sys.executable, "-c", PY_RUNNER, src + ".setup", src, path, str(line)],
                   env, tmp, where)
    if lang == "lua":
        # errors name the doc and the sample's line (setup lines included)
        src = os.path.join(tmp, f"{path.replace('/', '_')}-{line}.lua")
        with open(src, "w") as f:
            f.write("".join(SETUP[("lua", n)] for n in names) + code)
        env["LUA_CPATH"] = os.path.abspath(args.lua_cpath) + ";;"
        return run([args.lua, src], env, tmp, where)
    if lang == "c":
        with open(src + ".c", "w") as f:
            f.write(c_program(code, names))
        cc = shlex.split(args.cc) + ["-std=c11", "-D_GNU_SOURCE", "-Wall", "-Werror",
                                     "-Wno-unused-variable", "-I", os.path.join(ROOT, "csrc"),
                                     src + ".c", os.path.abspath(args.lib), "-o", src] + shlex.split(args.ldlibs)
        return run(cc, env, tmp, where + " (compiling)") or run([src], env, tmp, where)
    if lang in ("sh", "console") and re.search(r"\bleaselock\b", code):
        code = stub_scripts(code, tmp)
        with open(src, "w") as f:
            f.write(shell_script(code, lang == "console"))
        return run(["bash", src], env, tmp, where)
    return False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--pylib", required=True)
    ap.add_argument("--lua", default="lua5.4")
    ap.add_argument("--lua-cpath", required=True)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--cc", default="cc")
    ap.add_argument("--ldlibs", default="")
    ap.add_argument("docs", nargs="*")
    args = ap.parse_args()
    docs = args.docs or ["README.md"] + sorted(
        os.path.join("docs", p) for p in os.listdir(os.path.join(ROOT, "docs"))
        if p.endswith(".md"))
    failed = ran = skipped = 0
    start = time.monotonic()
    for path in docs:
        for line, lang, code, marker in samples(path):
            where = f"{path}:{line}"
            if marker.startswith("skip"):
                skipped += 1
                print(f"skip {where} [{lang}]: {marker[4:].strip()}")
                continue
            try:
                names = setups(lang, marker)
            except KeyError as e:
                failed += 1
                print(f"FAIL {where}: {e}")
                continue
            with tempfile.TemporaryDirectory(prefix="ll-sample-") as tmp:
                t0 = time.monotonic()
                why = run_sample(args, path, line, lang, code, names, tmp)
            if why is False:
                continue
            ran += 1
            if why:
                failed += 1
                print(f"FAIL {why}")
            else:
                print(f"ok   {where} [{lang}] {time.monotonic() - t0:.1f}s")
    print(f"samples: {ran} run, {skipped} skipped (marked), {failed} failed, "
          f"{time.monotonic() - start:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
