"""Builds leaselock's Python extension and the `leaselock` command.

The metadata is in pyproject.toml; this file adds the two fields it leaves
dynamic (the version from csrc/leaselock.h, and the license) and the build:

- the extension leaselock._leaselock, from python/*.c (module.c and a file
  per type and concern; any new file there is compiled) and the C core's
  own sources (the list in csrc/SOURCES, which the Makefile compiles
  too), with SQLite built in;
- the backend modules tools/backends.sh finds with pkg-config, which the
  Makefile asks too (MongoDB, MySQL/MariaDB and PostgreSQL when their client
  library is there): leaselock_backend_<name>.so from csrc/SOURCES.<name>,
  installed inside the package (leaselock/leaselock-backends/, where the
  extension's core looks, beside it) and as data files in
  <prefix>/lib/leaselock-backends (where the command, in <prefix>/bin,
  looks); the core loads one at the first URI of its scheme, so `import
  leaselock` on SQLite maps none of their client libraries;
- the `leaselock` command line tool, from cli/*.c linked with the same core
  objects (same flags, same backends) as the extension, installed into the
  environment's bin/ (a data file of the wheel: <name>.data/data/bin), with
  its manual page docs/leaselock.1 in share/man/man1 (`man leaselock` finds
  it there once the environment's bin/ is on PATH).

    pip install .                       # the package, bin/leaselock and its man page
    python setup.py build_ext --inplace # development: python/leaselock/_leaselock*.so

LEASELOCK_WERROR=1 adds -Wall -Wextra -Werror (the project's CI build).
Sources are compiled in parallel: build_ext's -j N, else LEASELOCK_BUILD_JOBS,
else one job per CPU.
"""
import glob
import os
import re
import shlex
import subprocess
from concurrent.futures import ThreadPoolExecutor

import setuptools
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
CLI_NAME = "leaselock"
MAN_PAGE = "docs/leaselock.1"  # the command's manual page, beside it in <prefix>/share/man


def core_sources(name="SOURCES"):
    """csrc/SOURCES (the core's), or csrc/SOURCES.<backend> (a module's)."""
    with open(os.path.join(HERE, "csrc", name), encoding="utf-8") as f:
        lines = [line.strip() for line in f]
    return [line for line in lines if line and not line.startswith("#")]


def cli_sources():
    return sorted(os.path.relpath(p, HERE) for p in glob.glob(os.path.join(HERE, "cli", "*.c")))


def header_version():
    """LEASELOCK_VERSION from csrc/leaselock.h: the one version of the project."""
    with open(os.path.join(HERE, "csrc", "leaselock.h"), encoding="utf-8") as f:
        m = re.search(r'^#define LEASELOCK_VERSION "([^"]+)"', f.read(), re.M)
    if not m:
        raise SystemExit("leaselock: no LEASELOCK_VERSION in csrc/leaselock.h")
    return m.group(1)


def license_metadata():
    """MIT, as a PEP 639 license expression where setuptools writes one (77+);
    older setuptools (such as the one `make test-python` may build with) know
    only the License field, and refuse the expression form in pyproject.toml."""
    major = int(re.match(r"\d+", setuptools.__version__).group())
    return {"license_expression": "MIT"} if major >= 77 else {"license": "MIT"}


def backends(*what):
    """tools/backends.sh's answer (names, modules, cflags, libs [NAME]), split into words."""
    script = os.path.join(HERE, "tools", "backends.sh")
    try:
        out = subprocess.run(["bash", script, *what], check=True, capture_output=True, text=True)
    except OSError as e:
        raise SystemExit(f"leaselock: cannot run {script}: {e}")
    except subprocess.CalledProcessError as e:
        raise SystemExit(e.stderr.strip() or f"leaselock: {script} {' '.join(what)} failed")
    return shlex.split(out.stdout)


class build_ext_with_cli(build_ext):
    """build_ext that compiles each source in parallel, then links the CLI.

    The CLI reuses the extension's core objects (compiling any that are
    missing, e.g. when the extension itself was up to date and the objects
    were cleaned) and is relinked only when a source, a header or an object
    is newer than it. Its path is handed to install_data (data_files), so
    that `install` and `bdist_wheel` put it in <prefix>/bin.
    """

    def jobs(self):
        if isinstance(self.parallel, int) and not isinstance(self.parallel, bool) and self.parallel > 0:
            return self.parallel
        env = os.environ.get("LEASELOCK_BUILD_JOBS", "")
        return int(env) if env.isdigit() and int(env) > 0 else (os.cpu_count() or 1)

    def build_extensions(self):
        # Objects and the extension built with other flags (another set of
        # backends found, LEASELOCK_WERROR) are rebuilt: setuptools alone
        # would keep them while no source is newer, so that installing
        # libmongoc-dev and running `pip install .` again in the same tree
        # would still leave MongoDB out.
        stamp = os.path.join(self.build_temp, "leaselock-flags.txt")
        flags = "\n".join(
            [*self.extensions[0].extra_compile_args, "--", *self.extensions[0].extra_link_args, ""]
        )
        try:
            with open(stamp, encoding="utf-8") as f:
                if f.read() != flags:
                    self.force = True
        except FileNotFoundError:
            self.force = True
        serial = self.compiler.compile
        jobs = self.jobs()

        def compile_parallel(sources, *args, **kwargs):
            if jobs < 2 or len(sources) < 2:
                return serial(sources, *args, **kwargs)
            with ThreadPoolExecutor(jobs) as pool:
                done = pool.map(lambda src: serial([src], *args, **kwargs), sources)
                return [obj for objs in done for obj in objs]

        self.compiler.compile = compile_parallel
        super().build_extensions()
        modules = [self.build_module(self.extensions[0], name) for name in MODULES]
        self.build_cli(self.extensions[0])
        if modules:
            self.distribution.data_files.append(("lib/" + MODULE_DIR, modules))
        os.makedirs(self.build_temp, exist_ok=True)
        with open(stamp, "w", encoding="utf-8") as f:
            f.write(flags)

    def build_module(self, ext, name):
        """leaselock_backend_<name>.so into the package's leaselock-backends/
        (the build's, or the source tree's with --inplace); returns its path.
        Compiled with LL_MODULE (core calls through the table the core hands
        it: csrc/ll_core_api.h); -z defs names any core call left outside it."""
        out_dir = os.path.join(os.path.dirname(self.get_ext_fullpath(ext.name)), MODULE_DIR)
        target = os.path.join(out_dir, f"leaselock_backend_{name}.so")
        temp = os.path.join(self.build_temp, f"module-{name}")
        args = dict(output_dir=temp, include_dirs=ext.include_dirs, debug=self.debug,
                    depends=ext.depends)
        objs = self.compiler.compile(
            core_sources(f"SOURCES.{name}"),
            extra_postargs=[*ext.extra_compile_args, "-DLL_MODULE", "-include", "csrc/ll_core_api.h"],
            **args,
        )
        objs += self.compiler.compile(
            ["csrc/backend_module.c"],
            macros=[("LL_MODULE", None), ("LL_MODULE_BACKEND", f"ll_backend_{name}")],
            extra_postargs=ext.extra_compile_args,
            **args,
        )
        os.makedirs(out_dir, exist_ok=True)
        self.compiler.link_shared_object(
            objs, target, extra_postargs=["-Wl,-z,defs", *backends("libs", name), "-pthread"],
            target_lang="c",
        )
        return target

    def build_cli(self, ext):
        core = core_sources()
        core_objs = self.compiler.object_filenames(core, output_dir=self.build_temp)
        missing = [src for src, obj in zip(core, core_objs) if not os.path.exists(obj)]
        compile_args = dict(
            output_dir=self.build_temp,
            macros=ext.define_macros,
            include_dirs=ext.include_dirs,
            debug=self.debug,
            extra_postargs=ext.extra_compile_args,
            depends=ext.depends,
        )
        if missing:
            self.compiler.compile(missing, **compile_args)
        srcs = cli_sources()
        if not srcs:
            raise SystemExit("leaselock: no cli/*.c to build the leaselock command from")
        exe = os.path.join(self.build_temp, "bin", CLI_NAME)
        inputs = [*srcs, *glob.glob("cli/*.h"), *core_objs, *ext.depends]
        if self.force or not os.path.exists(exe) or any(
            os.path.getmtime(p) > os.path.getmtime(exe) for p in inputs if os.path.exists(p)
        ):
            cli_objs = self.compiler.compile(srcs, **compile_args)
            self.compiler.link_executable(
                [*cli_objs, *core_objs],
                CLI_NAME,
                output_dir=os.path.dirname(exe),
                extra_postargs=ext.extra_link_args,
                target_lang="c",
            )
        else:
            print(f"leaselock: {exe} is up to date")
        self.distribution.data_files = [("bin", [exe])]
        if os.path.exists(MAN_PAGE):
            self.distribution.data_files.append(("share/man/man1", [MAN_PAGE]))


pkg_cflags, pkg_libs = backends("cflags"), backends("libs")
MODULES = backends("modules")
MODULE_DIR = "leaselock-backends"  # beside the file that holds the core (csrc/backend_load.c)
extra_compile = ["-std=c11", "-D_GNU_SOURCE", "-fvisibility=hidden", "-pthread", *pkg_cflags]
if os.environ.get("LEASELOCK_WERROR"):
    extra_compile += ["-Wall", "-Wextra", "-Werror"]

ext = Extension(
    "leaselock._leaselock",
    sources=[*sorted(glob.glob("python/*.c")), *core_sources()],
    include_dirs=["csrc"],
    extra_compile_args=extra_compile,
    extra_link_args=[*pkg_libs, "-pthread", "-lm"],
    depends=[*sorted(glob.glob("csrc/*.h")), *sorted(glob.glob("python/*.h")), "csrc/SOURCES",
             *sorted(glob.glob("csrc/SOURCES.*")), "tools/backends.sh"],
)

setup(
    version=header_version(),
    **license_metadata(),
    package_dir={"": "python"},
    packages=["leaselock"],
    package_data={"leaselock": ["py.typed", "*.pyi"]},
    ext_modules=[ext],
    cmdclass={"build_ext": build_ext_with_cli},
)
