#!/usr/bin/env python3
"""Checks the two rules of the mk files (the top of the Makefile):

- order: reads the mk files (MK_FILES) in sorted, then in reversed order
  and compares what make knows each time: every rule's target and
  prerequisites (each list as a set: the order of += lists follows the
  files) and every variable's value (likewise);
- names: the recipe of each suite test-<name> in TEST_SUITES is in
  mk/<name>.mk, or in the mk file of the longest name <name> starts with.

Prints what is wrong and fails on it.

    python3 tools/check_mk_order.py [MAKE]      (make check-mk-order)
"""
import glob
import re
import subprocess
import sys

# Variables that name the order itself, or make's own state.
IGNORED = {"MK_FILES", "MAKEFILE_LIST", "MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES",
           "-*-command-variables-*-", "MAKECMDGOALS", "CURDIR", ".VARIABLES"}
VAR = re.compile(r"^([^\s:=#]+) (:=|=|::=|\?=|\+=) ?(.*)$")
RULE = re.compile(r"^([^#\s=][^=]*?)::? ?(.*)$")
FROM = re.compile(r"^#  recipe to execute \(from '([^']+)', line \d+\):")


def database(make, mk_files):
    """make -p's rules and variables, with mk_files read in that order.

    The goal is deps, which -q finds out of date at once: make then looks
    at no file of the build, so what it prints is the makefiles alone (with
    "all", how far it got depended on what was built)."""
    out = subprocess.run(
        [make, "--no-print-directory", "-pnq", "MK_FILES=" + " ".join(mk_files), "deps"],
        capture_output=True, text=True).stdout
    rules, variables, recipe_file = {}, {}, {}
    target = None
    for line in out.splitlines():
        m = FROM.match(line)
        if m and target:
            recipe_file[target] = m.group(1)
            continue
        m = VAR.match(line)
        if m:
            if m.group(1) not in IGNORED:
                variables[m.group(1)] = frozenset(m.group(3).split())
            continue
        m = RULE.match(line)
        if m and not line.startswith((" ", "\t")):
            # "target: prereqs | order-only": both as one set.
            deps = frozenset(m.group(2).split())
            target = m.group(1)
            rules[target] = rules.get(target, frozenset()) | deps
    return rules, variables, recipe_file


def misplaced_suites(suites, recipe_file, files):
    """Prints each suite whose recipe is not in its file; returns how many."""
    names = [f[len("mk/"):-len(".mk")] for f in files]
    n = 0
    for suite in sorted(suites):
        prefixes = [x for x in names if suite.startswith(x)]
        want = "mk/%s.mk" % max(prefixes, key=len) if prefixes else "mk/%s.mk" % suite
        got = recipe_file.get("test-" + suite, "(none)")
        if got != want:
            n += 1
            print(f"suite {suite}: its recipe is in {got}, not in {want}")
    return n


def compare(kind, a, b):
    """Prints each name whose value differs; returns how many."""
    n = 0
    for name in sorted(set(a) | set(b)):
        if a.get(name) != b.get(name):
            n += 1
            print(f"{kind} {name}:\n  sorted:   {' '.join(sorted(a.get(name, ())))}"
                  f"\n  reversed: {' '.join(sorted(b.get(name, ())))}")
    return n


def main():
    make = sys.argv[1] if len(sys.argv) > 1 else "make"
    files = sorted(glob.glob("mk/*.mk"))
    rules_a, vars_a, recipe_file = database(make, files)
    rules_b, vars_b, _ = database(make, files[::-1])
    bad = compare("rule", rules_a, rules_b) + compare("variable", vars_a, vars_b)
    print(f"mk order: {len(files)} files, {len(rules_a)} rules and {len(vars_a)} variables "
          f"compared, {bad} differ")
    suites = vars_a.get("TEST_SUITES", frozenset())
    misplaced = misplaced_suites(suites, recipe_file, files)
    print(f"mk names: {len(suites)} suites, {misplaced} not in their file")
    return 1 if bad or misplaced or not rules_a or not suites else 0


if __name__ == "__main__":
    sys.exit(main())
