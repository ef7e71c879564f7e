#!/usr/bin/env python3
"""Every cross-reference in the tree points at something that exists.

- "invariant N" (also "invariants 1, 3 and 6") anywhere in the sources,
  tests and docs names an invariant numbered in docs/contract.md;
- every test that docs/contract.md names (`test_...`) is defined under
  tests/;
- a citation of a section of a Markdown file anywhere in the tree
  ('README.md, "The contract in brief"', 'docs/cli.md, "Exit statuses"',
  'contract.md\'s "Invariants"') names a heading of that file;
- in the docs (README.md, CONTRIBUTING.md, docs/**/*.md): every repository
  path named in backticks exists, every relative link reaches a file and
  its #anchor a heading of it (the docs site checks its own pages again,
  strictly; README.md and CONTRIBUTING.md are not part of it), and every
  Python and Lua sample parses (Python with top-level await allowed, Lua
  by luac when it is installed; tests/check_samples.py, the samples suite,
  runs them);
- the benchmark's pure-Python peers (bench/peers/) bind every parameter of
  the engine's acquire statement they send (MySQL, PostgreSQL).
Prints one line per broken reference and exits 1 when there is any.
"""
import ast
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unicodedata

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONTRACT = "docs/contract.md"
TOP_DIRS = ("csrc/", "cli/", "python/", "lua/", "tests/", "bench/", "docs/", "mk/", "tools/",
            "examples/", ".ci/")
SECTION_CITE = re.compile(r"((?:[A-Za-z0-9_.-]+/)*[A-Za-z0-9_.-]+\.md)(?:'s|,)? \"([^\"]+)\"")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)


def read(path):
    with open(os.path.join(ROOT, path), encoding="utf-8", errors="replace") as f:
        return f.read()


def tracked_files():
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    return [p for p in out.splitlines()
            if os.path.isfile(os.path.join(ROOT, p))
            and p.endswith((".c", ".h", ".py", ".lua", ".md", ".sh", ".mk", ".pyi"))
            or p in ("Makefile", ".ci/run")]


def doc_files(files):
    """The user's and contributor's docs: what the links and paths rules cover."""
    return [p for p in files
            if p in ("README.md", "CONTRIBUTING.md") or p.startswith("docs/") and p.endswith(".md")]


def without_code(text):
    """The text with its fenced code blocks blanked (line numbers kept)."""
    return FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)


_headings = {}


def headings(path):
    """A file's headings as written, without backticks, and as anchors."""
    if path not in _headings:
        names, anchors = set(), set()
        for m in re.finditer(r"^#+ (.+?)\s*$", without_code(read(path)), re.M):
            text = m.group(1).strip()
            plain = text.replace("`", "")
            names.update((text, plain))
            anchors.update(slugs(plain))
        _headings[path] = (names, anchors)
    return _headings[path]


def slugs(title):
    """The anchors a heading gets: Python-Markdown's toc (the docs site)
    and GitHub's, which differ only in how they fold runs of spaces."""
    t = unicodedata.normalize("NFKD", title).lower()
    t = re.sub(r"[^\w\s-]", "", t).strip()
    return {re.sub(r"[-\s]+", "-", t), re.sub(r"\s", "-", t)}


def resolve(citing, name):
    """The file a citation or link names: beside the citing file, else from
    the top, else under docs/ ('contract.md')."""
    for cand in (os.path.normpath(os.path.join(os.path.dirname(citing), name)), name,
                 os.path.join("docs", name)):
        if os.path.isfile(os.path.join(ROOT, cand)):
            return cand
    return None


def check_citations(path, problems):
    for lineno, line in enumerate(read(path).splitlines(), 1):
        for m in SECTION_CITE.finditer(line):
            target = resolve(path, m.group(1))
            if target is None:
                problems.append(f"{path}:{lineno}: cites {m.group(1)}, which does not exist")
            elif m.group(2) not in headings(target)[0]:
                problems.append(f"{path}:{lineno}: {target} has no section \"{m.group(2)}\"")


def check_links(path, problems):
    for lineno, line in enumerate(without_code(read(path)).splitlines(), 1):
        for m in LINK.finditer(line):
            url = m.group(1)
            if re.match(r"[a-z][a-z0-9+.-]*:", url):
                continue
            name, _, anchor = url.partition("#")
            target = resolve(path, name) if name else path
            if target is None:
                problems.append(f"{path}:{lineno}: links to {name}, which does not exist")
            elif anchor and target.endswith(".md") and anchor not in headings(target)[1]:
                problems.append(f"{path}:{lineno}: {target} has no anchor #{anchor}")


def check_paths(path, problems):
    for m in re.finditer(r"`([A-Za-z0-9_./-]+)`", without_code(read(path))):
        p = m.group(1)
        if p.startswith(TOP_DIRS) and "*" not in p:
            if not os.path.exists(os.path.join(ROOT, p.rstrip("/"))):
                problems.append(f"{path}: names {p}, which does not exist")


def check_samples(path, problems, luac):
    """Python and Lua samples parse; returns how many were checked."""
    n = 0
    text = read(path)
    for m in FENCE.finditer(text):
        lang, code = m.group(1), m.group(2)
        lineno = text.count("\n", 0, m.start()) + 2
        if lang == "python":
            n += 1
            try:
                compile(code, f"{path}:{lineno}", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT,
                        dont_inherit=True)
            except SyntaxError as e:
                problems.append(f"{path}:{lineno + (e.lineno or 1) - 1}: Python sample: {e.msg}")
        elif lang == "lua" and luac:
            n += 1
            with tempfile.NamedTemporaryFile("w", suffix=".lua") as f:
                f.write(code)
                f.flush()
                r = subprocess.run([luac, "-p", f.name], capture_output=True, text=True)
            if r.returncode != 0:
                msg = r.stderr.strip().replace(f.name, f"{path}:{lineno}+")
                problems.append(f"{path}:{lineno}: Lua sample: {msg}")
    return n


def numbered_invariants():
    text = read(CONTRACT)
    section = text.split("## Invariants", 1)[1].split("\n## ", 1)[0]
    return {int(n) for n in re.findall(r"^(\d+)\. \*\*", section, re.M)}


def dict_keys(path, name):
    """The keys of the dict literals in PATH (a Python file) assigned to NAME
    or passed with self.NAME (a statement) to a call."""
    keys = set()
    for node in ast.walk(ast.parse(read(path))):
        dicts = []
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == name for t in node.targets):
            dicts = [node.value]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Attribute) \
                and node.args[0].attr == name:
            dicts = node.args[1:]
        for d in dicts:
            if isinstance(d, ast.Dict):
                keys |= {k.value for k in d.keys if isinstance(k, ast.Constant)}
    return keys


def check_peers(problems):
    """The pure-Python peers of the benchmark (bench/peers/) bind every
    parameter of the engine's acquire they send: MySQL's letters of
    LL_MYSQL_ACQUIRE_PARAMS, PostgreSQL's $n of LL_POSTGRESQL_ACQUIRE
    (read through the C preprocessor, as the peers read them)."""
    if not shutil.which(os.environ.get("CC", "cc")):
        return
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    from peers.sqltext import macro
    letters = set(macro("stmt_mysql.c", "LL_MYSQL_ACQUIRE_PARAMS").replace(" ", ""))
    missing = letters - dict_keys("bench/peers/mysql.py", "values")
    if missing:
        problems.append(f"bench/peers/mysql.py: binds no value for LL_MYSQL_ACQUIRE_PARAMS's "
                        f"{', '.join(sorted(missing))}")
    sql = macro("stmt_postgresql.c", "LL_POSTGRESQL_ACQUIRE")
    wanted = {f"p{n}" for n in re.findall(r"\$(\d+)", sql)}
    missing = wanted - dict_keys("bench/peers/postgresql.py", "acquire_sql")
    if missing:
        problems.append(f"bench/peers/postgresql.py: binds no value for LL_POSTGRESQL_ACQUIRE's "
                        f"{', '.join(sorted(missing))}")


def main():
    problems = []
    check_peers(problems)
    invariants = numbered_invariants()
    files = tracked_files()
    cite = re.compile(r"\b[Ii]nvariants? (\d+(?:(?:, | and | or |, and )\d+)*)")
    for path in files:
        for lineno, line in enumerate(read(path).splitlines(), 1):
            for m in cite.finditer(line):
                for n in map(int, re.findall(r"\d+", m.group(1))):
                    if n not in invariants:
                        problems.append(f"{path}:{lineno}: invariant {n} is not in {CONTRACT}")
        check_citations(path, problems)

    test_text = "\n".join(read(p) for p in files if p.startswith("tests/"))
    for name in sorted(set(re.findall(r"`(test_[a-z0-9_]+)`", read(CONTRACT)))):
        if not re.search(r"(def |void |bool |int )%s\b" % name, test_text):
            problems.append(f"{CONTRACT}: names {name}, which no test under tests/ defines")

    docs = doc_files(files)
    luac = shutil.which("luac5.4") or shutil.which("luac")
    samples = 0
    for doc in docs:
        check_paths(doc, problems)
        check_links(doc, problems)
        samples += check_samples(doc, problems, luac)

    for p in problems:
        print(p)
    print(f"refs: {len(invariants)} invariants, {len(files)} files read, {len(docs)} docs, "
          f"{samples} samples parsed{'' if luac else ' (no luac: Lua samples skipped)'}, "
          f"{len(problems)} broken references")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
