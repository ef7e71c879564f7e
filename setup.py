"""Builds leaselock's Python extension from the C core's own sources.

The core sources are the list in csrc/SOURCES (the same list the Makefile
compiles); optional backends are detected with pkg-config exactly as the
Makefile does: libmongoc-1.0, libmariadb and libpq when found, SQLite always.

    pip install .                       # a normal install
    python setup.py build_ext --inplace # development: python/leaselock/_leaselock*.so

LEASELOCK_WERROR=1 adds -Wall -Wextra -Werror (the project's CI build).
"""
import os
import shlex
import subprocess

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
PKG_CONFIG = os.environ.get("PKG_CONFIG", "pkg-config")

# Optional backend: (pkg-config name, macro that compiles it in).
OPTIONAL = [
    ("libmongoc-1.0", "LEASELOCK_WITH_MONGODB"),
    ("libmariadb", "LEASELOCK_WITH_MYSQL"),
    ("libpq", "LEASELOCK_WITH_POSTGRESQL"),
]


def core_sources():
    with open(os.path.join(HERE, "csrc", "SOURCES"), encoding="utf-8") as f:
        lines = [line.strip() for line in f]
    return [line for line in lines if line and not line.startswith("#")]


def pkg_config(*args):
    try:
        out = subprocess.run([PKG_CONFIG, *args], check=True, capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout


def backend_flags():
    pkgs, macros = ["sqlite3"], []
    if pkg_config("--exists", "sqlite3") is None:
        raise SystemExit("leaselock needs SQLite 3 (pkg-config sqlite3; Debian: libsqlite3-dev)")
    for pkg, macro in OPTIONAL:
        if pkg_config("--exists", pkg) is not None:
            pkgs.append(pkg)
            macros.append((macro, None))
    cflags = shlex.split(pkg_config("--cflags", *pkgs) or "")
    libs = shlex.split(pkg_config("--libs", *pkgs) or "")
    return macros, cflags, libs


macros, pkg_cflags, pkg_libs = backend_flags()
extra_compile = ["-std=c11", "-D_GNU_SOURCE", "-fvisibility=hidden", "-pthread", *pkg_cflags]
if os.environ.get("LEASELOCK_WERROR"):
    extra_compile += ["-Wall", "-Wextra", "-Werror"]

ext = Extension(
    "leaselock._leaselock",
    sources=["python/_leaselock.c", *core_sources()],
    include_dirs=["csrc"],
    define_macros=macros,
    extra_compile_args=extra_compile,
    extra_link_args=[*pkg_libs, "-pthread", "-lm"],
    depends=["csrc/leaselock.h", "csrc/ll_internal.h", "csrc/SOURCES"],
)

setup(
    package_dir={"": "python"},
    packages=["leaselock"],
    package_data={"leaselock": ["py.typed", "*.pyi"]},
    ext_modules=[ext],
)
