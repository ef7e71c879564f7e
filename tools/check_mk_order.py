#!/usr/bin/env python3
"""Reads the mk files (MK_FILES) in sorted, then in reversed order and
compares what make knows each time: every rule's target and prerequisites
(each list as a set: the order of += lists follows the files) and every
variable's value (likewise). The mk files must not depend on their order
(the rule at the top of the Makefile); this prints what differs and fails
on a difference.

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


def database(make, mk_files):
    """make -p's rules and variables, with mk_files read in that order."""
    out = subprocess.run(
        [make, "--no-print-directory", "-pnq", "MK_FILES=" + " ".join(mk_files), "all"],
        capture_output=True, text=True).stdout
    rules, variables = {}, {}
    for line in out.splitlines():
        m = VAR.match(line)
        if m:
            if m.group(1) not in IGNORED:
                variables[m.group(1)] = frozenset(m.group(3).split())
            continue
        m = RULE.match(line)
        if m and not line.startswith((" ", "\t")):
            # "target: prereqs | order-only": both as one set.
            deps = frozenset(m.group(2).split())
            rules[m.group(1)] = rules.get(m.group(1), frozenset()) | deps
    return rules, variables


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
    rules_a, vars_a = database(make, files)
    rules_b, vars_b = database(make, files[::-1])
    bad = compare("rule", rules_a, rules_b) + compare("variable", vars_a, vars_b)
    print(f"mk order: {len(files)} files, {len(rules_a)} rules and {len(vars_a)} variables "
          f"compared, {bad} differ")
    return 1 if bad or not rules_a else 0


if __name__ == "__main__":
    sys.exit(main())
