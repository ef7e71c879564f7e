#!/usr/bin/env python3
"""No C function of the shipped code (csrc/, cli/, python/, lua/) is longer
than 80 lines, so that each reads at one level.

The code is clang-formatted: a function body opens with "{" alone in
column 0 right after its signature and closes with "}" alone in column 0.
Prints the functions over the limit and exits 1 when there is any.
"""
import glob
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIMIT = 80
DIRS = ("csrc", "cli", "python", "lua")


def functions(path):
    lines = open(path, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        if lines[i] == "{":
            # The signature: the lines above up to a blank line, comment or
            # preprocessor line.
            j = i
            while j > 0 and lines[j - 1].strip() and not lines[j - 1].lstrip().startswith(
                    ("/*", "*", "//", "#", "}")) and not lines[j - 1].endswith(";"):
                j -= 1
            head = " ".join(lines[j:i])
            k = i + 1
            while k < len(lines) and lines[k] != "}" and not lines[k].startswith("};"):
                k += 1
            if "(" in head and "=" not in head.split("(")[0] and not re.match(
                    r"\s*(typedef\s+)?(struct|enum|union)\b", head):
                name = re.findall(r"([A-Za-z_]\w*)\s*\(", head)
                yield (name[0] if name else head[:40]), j + 1, k - j + 1
            i = k
        i += 1


def main():
    long_ones = []
    count = 0
    for d in DIRS:
        for path in sorted(glob.glob(os.path.join(ROOT, d, "**", "*.c"), recursive=True)):
            for name, line, n in functions(path):
                count += 1
                if n > LIMIT:
                    long_ones.append(f"{os.path.relpath(path, ROOT)}:{line}: {name} is {n} lines "
                                     f"(at most {LIMIT})")
    for l in long_ones:
        print(l)
    print(f"shape: {count} functions, {len(long_ones)} over {LIMIT} lines")
    return 1 if long_ones else 0


if __name__ == "__main__":
    sys.exit(main())
