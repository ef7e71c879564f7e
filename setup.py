"""Builds leaselock's Python extension from the C core's own sources.

The core sources are the list in csrc/SOURCES (the same list the Makefile
compiles); the backends compiled in are the ones tools/backends.sh finds
with pkg-config, which the Makefile asks too: SQLite always, MongoDB,
MySQL/MariaDB and PostgreSQL when their client library is there.

    pip install .                       # a normal install
    python setup.py build_ext --inplace # development: python/leaselock/_leaselock*.so

LEASELOCK_WERROR=1 adds -Wall -Wextra -Werror (the project's CI build).
"""
import os
import shlex
import subprocess

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))


def core_sources():
    with open(os.path.join(HERE, "csrc", "SOURCES"), encoding="utf-8") as f:
        lines = [line.strip() for line in f]
    return [line for line in lines if line and not line.startswith("#")]


def backends(what):
    """tools/backends.sh's answer (names, cflags or libs), split into words."""
    script = os.path.join(HERE, "tools", "backends.sh")
    try:
        out = subprocess.run(["bash", script, what], check=True, capture_output=True, text=True)
    except OSError as e:
        raise SystemExit(f"leaselock: cannot run {script}: {e}")
    except subprocess.CalledProcessError as e:
        raise SystemExit(e.stderr.strip() or f"leaselock: {script} {what} failed")
    return shlex.split(out.stdout)


pkg_cflags, pkg_libs = backends("cflags"), backends("libs")
extra_compile = ["-std=c11", "-D_GNU_SOURCE", "-fvisibility=hidden", "-pthread", *pkg_cflags]
if os.environ.get("LEASELOCK_WERROR"):
    extra_compile += ["-Wall", "-Wextra", "-Werror"]

ext = Extension(
    "leaselock._leaselock",
    sources=["python/_leaselock.c", *core_sources()],
    include_dirs=["csrc"],
    extra_compile_args=extra_compile,
    extra_link_args=[*pkg_libs, "-pthread", "-lm"],
    depends=["csrc/leaselock.h", "csrc/ll_internal.h", "csrc/SOURCES", "tools/backends.sh"],
)

setup(
    package_dir={"": "python"},
    packages=["leaselock"],
    package_data={"leaselock": ["py.typed", "*.pyi"]},
    ext_modules=[ext],
)
