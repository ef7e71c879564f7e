"""Checks a leaselock wheel and what `auditwheel show --json` said about it.

usage: check_wheel.py WHEEL AUDITWHEEL_JSON VERSION "BACKEND..."

- the metadata: the version (csrc/leaselock.h's), the MIT license (a PEP
  639 expression) and its file, authors, project URLs, keywords, Python
  3.11-3.13 classifiers, each classifier a known one (trove-classifiers);
- the contents: the package, its typing files, the extension and the
  `leaselock` command as an executable data file for <prefix>/bin; each
  backend module (every backend but SQLite, built in) inside the package
  (leaselock/leaselock-backends/, for the extension) and as a data file for
  <prefix>/lib/leaselock-backends (for the command);
- the tags: the honest linux_x86_64, never a manylinux one, since the
  extension and the command link the system's client libraries: auditwheel
  must say the same, and list the library of every backend compiled in.

Prints one line per check ("ok: ..." or "FAIL: ...") and exits with the
number of failures.
"""
import email.parser
import json
import re
import stat
import sys
import zipfile

HOMEPAGE = "https://github.com/leaselock/leaselock"
PYTHONS = ("3.11", "3.12", "3.13")
# Backend (tools/backends.sh names) -> the sonames its client library adds.
BACKEND_LIBS = {
    "sqlite": ["libsqlite3.so"],
    "mongodb": ["libmongoc-1.0.so", "libbson-1.0.so"],
    "mysql": ["libmariadb.so"],
    "postgresql": ["libpq.so"],
}

failures = 0


def check(ok, what):
    global failures
    print(("ok: " if ok else "FAIL: ") + what)
    failures += not ok


def main():
    wheel_path, audit_path, version, backends = sys.argv[1:5]
    backends = backends.split()
    with open(audit_path, encoding="utf-8") as f:
        audit = json.load(f)
    name = wheel_path.rsplit("/", 1)[-1]
    tag = re.fullmatch(r"leaselock-(?P<v>[^-]+)-(?P<py>cp3\d+)-(?P<abi>cp3\d+)-(?P<plat>\w+)\.whl", name)
    check(tag is not None, f"wheel file name {name}")
    if not tag:
        return
    check(tag["v"] == version, f"wheel version {tag['v']} is csrc/leaselock.h's {version}")
    check(tag["plat"] == "linux_x86_64", f"wheel platform tag {tag['plat']} (linux_x86_64, not manylinux)")

    zf = zipfile.ZipFile(wheel_path)
    names = set(zf.namelist())
    dist_info = f"leaselock-{version}.dist-info"
    meta = email.parser.Parser().parsestr(zf.read(f"{dist_info}/METADATA").decode())
    wheel_meta = email.parser.Parser().parsestr(zf.read(f"{dist_info}/WHEEL").decode())

    check(meta["Version"] == version, f"Version: {meta['Version']}")
    check(meta["License-Expression"] == "MIT", f"License-Expression: {meta['License-Expression']}")
    check("License" not in meta, "no legacy License field beside the expression")
    lic = f"{dist_info}/licenses/LICENSE"
    check(meta.get_all("License-File") == ["LICENSE"] and lic in names, f"License-File: LICENSE, shipped as {lic}")
    if lic in names:
        text = zf.read(lic).decode()
        check(text.startswith("MIT License") and "Copyright (c) 2026 the leaselock authors" in text,
              "LICENSE: MIT, Copyright (c) 2026 the leaselock authors")
    check(meta["Author"] == "the leaselock authors", f"Author: {meta['Author']}")
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL") or [])
    check(urls.get("Homepage") == HOMEPAGE and urls.get("Source") == HOMEPAGE
          and urls.get("Issues") == HOMEPAGE + "/issues", f"Project-URL: {urls}")
    keywords = (meta["Keywords"] or "").split(",")
    check({"lock", "lease", "distributed-lock"} <= set(keywords), f"Keywords: {meta['Keywords']}")
    check(meta["Requires-Python"] == ">=3.11", f"Requires-Python: {meta['Requires-Python']}")
    classifiers = meta.get_all("Classifier") or []
    for v in PYTHONS:
        check(f"Programming Language :: Python :: {v}" in classifiers, f"Classifier: Python :: {v}")
    check(not any(c.startswith("License ::") for c in classifiers),
          "no License :: classifier (the license expression says it)")
    try:
        from trove_classifiers import classifiers as known
    except ImportError:
        known = None
    if known is not None:
        unknown = [c for c in classifiers if c not in known]
        check(not unknown, f"every classifier is a known one (trove-classifiers){': ' + str(unknown) if unknown else ''}")
    check(wheel_meta["Root-Is-Purelib"] == "false", "Root-Is-Purelib: false")
    check(wheel_meta.get_all("Tag") == [f"{tag['py']}-{tag['abi']}-linux_x86_64"],
          f"WHEEL Tag: {wheel_meta.get_all('Tag')}")

    for f in ("leaselock/__init__.py", "leaselock/py.typed", "leaselock/_leaselock.pyi"):
        check(f in names, f"wheel has {f}")
    check(any(re.fullmatch(r"leaselock/_leaselock\.cpython-3\d+-x86_64-linux-gnu\.so", n) for n in names),
          "wheel has the extension leaselock/_leaselock.cpython-*.so")
    cli = f"leaselock-{version}.data/data/bin/leaselock"
    if cli in names:
        mode = zf.getinfo(cli).external_attr >> 16
        check(stat.S_ISREG(mode) and mode & 0o111 == 0o111, f"wheel has {cli}, mode {oct(mode)}")
        check(zf.read(cli)[:4] == b"\x7fELF", f"{cli} is the compiled command")
    else:
        check(False, f"wheel has {cli}")
    for b in BACKEND_LIBS:
        for where in ("leaselock/leaselock-backends", f"leaselock-{version}.data/data/lib/leaselock-backends"):
            module = f"{where}/leaselock_backend_{b}.so"
            if b == "sqlite":
                continue
            if b in backends:
                check(module in names and zf.read(module)[:4] == b"\x7fELF", f"wheel has {module}")
            else:
                check(module not in names, f"backend {b} not built: no {module}")

    check(audit.get("overall_tag") == "linux_x86_64",
          f"auditwheel: consistent with {audit.get('overall_tag')} (the honest tag)")
    check(not audit.get("pure"), "auditwheel: not a pure wheel")
    libs = audit.get("external_libs") or {}
    for b in backends:
        for soname in BACKEND_LIBS[b]:
            found = sorted(lib for lib in libs if lib.startswith(soname))
            check(bool(found), f"auditwheel lists {soname}* for backend {b}: {found}")
    left_out = [b for b in BACKEND_LIBS if b not in backends]
    for b in left_out:
        stray = sorted(lib for s in BACKEND_LIBS[b] for lib in libs if lib.startswith(s))
        check(not stray, f"backend {b} not compiled in: none of its libraries listed {stray}")
    upgrades = audit.get("policy_upgrades") or {}
    blocking = sorted({lib for p in upgrades.values() for lib in p.get("libs_to_eliminate", [])})
    check(any(lib.startswith("libsqlite3.so") for lib in blocking),
          "auditwheel: a manylinux tag would need the system libraries (libsqlite3...) bundled")


if __name__ == "__main__":
    main()
    sys.exit(min(failures, 100))
