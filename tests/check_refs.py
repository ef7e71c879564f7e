#!/usr/bin/env python3
"""Every cross-reference in the tree points at something that exists.

- "invariant N" (also "invariants 1, 3 and 6") anywhere in the sources,
  tests and docs names an invariant numbered in docs/contract.md;
- every test that docs/contract.md names (`test_...`) is defined under
  tests/;
- every repository path that README.md or docs/contract.md names in
  backticks exists;
- a citation of a README or contract section ('README.md, "Fencing"')
  names a heading of that file.
Prints one line per broken reference and exits 1 when there is any.
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONTRACT = "docs/contract.md"
TOP_DIRS = ("csrc/", "cli/", "python/", "lua/", "tests/", "bench/", "docs/", "mk/", "tools/",
            "examples/", ".ci/")


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


def headings(path):
    return {m.group(1).strip() for m in re.finditer(r"^#+ (.+)$", read(path), re.M)}


def numbered_invariants():
    text = read(CONTRACT)
    section = text.split("## Invariants", 1)[1].split("\n## ", 1)[0]
    return {int(n) for n in re.findall(r"^(\d+)\. \*\*", section, re.M)}


def main():
    problems = []
    invariants = numbered_invariants()
    files = tracked_files()
    cite = re.compile(r"\b[Ii]nvariants? (\d+(?:(?:, | and | or |, and )\d+)*)")
    for path in files:
        for lineno, line in enumerate(read(path).splitlines(), 1):
            for m in cite.finditer(line):
                for n in map(int, re.findall(r"\d+", m.group(1))):
                    if n not in invariants:
                        problems.append(f"{path}:{lineno}: invariant {n} is not in {CONTRACT}")
            for m in re.finditer(r"(README\.md|contract\.md)(?:'s|,)? \"([^\"]+)\"", line):
                target = "README.md" if m.group(1) == "README.md" else CONTRACT
                if m.group(2) not in headings(target):
                    problems.append(f"{path}:{lineno}: {target} has no section \"{m.group(2)}\"")

    test_text = "\n".join(read(p) for p in files if p.startswith("tests/"))
    for name in sorted(set(re.findall(r"`(test_[a-z0-9_]+)`", read(CONTRACT)))):
        if not re.search(r"(def |void |bool |int )%s\b" % name, test_text):
            problems.append(f"{CONTRACT}: names {name}, which no test under tests/ defines")

    for doc in ("README.md", CONTRACT):
        for m in re.finditer(r"`([A-Za-z0-9_./-]+)`", read(doc)):
            p = m.group(1)
            if p.startswith(TOP_DIRS) and "*" not in p:
                if not os.path.exists(os.path.join(ROOT, p.rstrip("/"))):
                    problems.append(f"{doc}: names {p}, which does not exist")

    for p in problems:
        print(p)
    print(f"refs: {len(invariants)} invariants, {len(files)} files read, "
          f"{len(problems)} broken references")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
