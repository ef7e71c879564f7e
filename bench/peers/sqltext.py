"""The SQL backends' statement text, read from the C files the engine
compiles (csrc/stmt_mysql.c, csrc/stmt_postgresql.c) through the C
preprocessor once, so that a peer sends exactly the engine's statements:
what differs is only the client (a Python driver instead of the core)."""
import ast
import os
import subprocess

CSRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "csrc")


def macro(source, name):
    """The string literal macro NAME of csrc/SOURCE, as a Python str."""
    src = f'#include "{source}"\n@@@ {name}\n'
    out = subprocess.run([os.environ.get("CC", "cc"), "-E", "-P", "-x", "c", "-I", CSRC, "-"],
                         input=src, capture_output=True, text=True, check=True).stdout
    text = out.split("@@@", 1)[1].strip()
    return ast.literal_eval(text)
