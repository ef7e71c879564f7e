"""Moves the `leaselock` command of a wheel into the package, before
`auditwheel repair`.

usage: wheel_cli_in_package.py WHEEL

`pip wheel .` puts the C command in <name>.data/data/bin/leaselock and its
backend modules in <name>.data/data/lib/leaselock-backends/, which pip
installs outside site-packages: no RUNPATH can reach the libraries
`auditwheel repair` bundles in site-packages/leaselock.libs/ from there and
from inside the wheel alike, so auditwheel would not accept the wheel (and
its shim for ELF scripts runs Python before each command). Here:

- the program becomes leaselock/leaselock-cli, in the package: repair gives
  it the RUNPATH of the extension ($ORIGIN/../leaselock.libs), and it finds
  the extension's modules (leaselock/leaselock-backends/, beside it: see
  csrc/backend_load.c), so the CLI's copies of them are dropped;
- <prefix>/bin/leaselock becomes a POSIX shell script (.data/scripts; pip
  keeps a #!/bin/sh line) that execs it from the site-packages beside that
  bin/, falling back to asking the environment's Python where its platlib is.

The RECORD is rewritten to match.
"""
import base64
import hashlib
import os
import re
import sys
import zipfile

LAUNCHER = """\
#!/bin/sh
# leaselock's command from the manylinux wheel: the program is
# site-packages/leaselock/leaselock-cli, beside its backend modules and the
# libraries the wheel bundles (leaselock.libs). No fork on the usual path.
case $0 in */*) d=${0%/*} ;; *) d=. ;; esac
for p in "$d/../lib/@PY@/site-packages" "$d/../lib/@PY@/dist-packages" "$d/../lib64/@PY@/site-packages"; do
  [ -x "$p/leaselock/leaselock-cli" ] && exec "$p/leaselock/leaselock-cli" "$@"
done
# Another layout, or a symlink to this script: ask the environment's Python.
d=$(dirname -- "$(readlink -f -- "$0")")
py=$d/python3
[ -x "$py" ] || py=python3
p=$("$py" -c 'import sysconfig; print(sysconfig.get_path("platlib"))' 2>/dev/null)
[ -x "$p/leaselock/leaselock-cli" ] && exec "$p/leaselock/leaselock-cli" "$@"
echo "leaselock: cannot find leaselock/leaselock-cli (the leaselock wheel's command) from $0" >&2
exit 127
"""


def record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def main():
    wheel = sys.argv[1]
    m = re.fullmatch(r"(?P<name>[^-]+)-(?P<ver>[^-]+)-cp(?P<major>3)(?P<minor>\d+)-[^-]+-[^-]+\.whl",
                     os.path.basename(wheel))
    if not m:
        sys.exit(f"wheel_cli_in_package: not a CPython wheel name: {wheel}")
    data = f"{m['name']}-{m['ver']}.data"
    cli, cli_mods = f"{data}/data/bin/leaselock", f"{data}/data/lib/leaselock-backends/"
    with zipfile.ZipFile(wheel) as zin:
        infos = zin.infolist()
        contents = {i.filename: zin.read(i) for i in infos}
    if cli not in contents:
        sys.exit(f"wheel_cli_in_package: no {cli} in {wheel}")
    record = next(n for n in contents if n.endswith(".dist-info/RECORD"))
    py = f"python{m['major']}.{m['minor']}"
    added = {
        "leaselock/leaselock-cli": contents[cli],
        f"{data}/scripts/leaselock": LAUNCHER.replace("@PY@", py).encode(),
    }
    gone = {cli, record} | {n for n in contents if n.startswith(cli_mods)}
    out = wheel + ".tmp"
    lines = []
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in infos:
            if info.filename not in gone:
                zout.writestr(info, contents[info.filename])
                lines.append(next(ln for ln in contents[record].decode().splitlines()
                                  if ln.split(",", 1)[0] == info.filename))
        for name, blob in added.items():
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o100755 << 16  # a regular file, executable
            info.compress_type = zipfile.ZIP_DEFLATED
            zout.writestr(info, blob)
            lines.append(record_line(name, blob))
        lines.append(f"{record},,")
        zout.writestr(record, "\n".join(lines) + "\n")
    os.replace(out, wheel)
    print(f"wheel_cli_in_package: {cli} -> leaselock/leaselock-cli; {data}/scripts/leaselock "
          f"launches it; dropped {len(gone) - 2} CLI module copies")


if __name__ == "__main__":
    main()
