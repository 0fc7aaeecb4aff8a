"""Classes of 200 lines or more and functions over 50, read with `ast` from every Python file of the
checkout but bench/, migrations and the generated protobuf modules; exits 1 when it finds one.

    PYTHONPATH=. python scripts/unit_sizes.py [ROOT]

Why: a class that owns a service's life should read as a list of its parts, and a function as one
step (issue 31); this is the check that said so.
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

MAX_CLASS, MAX_FUNCTION = 199, 50
SKIP = ("bench/", "m1flow/v1/", ".git/")


def offenders(root: Path) -> tuple[list[tuple[int, str]], tuple[int, str]]:
    """((lines, where) of each unit over its limit, largest first; the largest class)."""
    found, largest = [], (0, "")
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith(SKIP) or "/migrations/" in rel or "/." in f"/{rel}":
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=rel)):
            if not isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            lines = node.end_lineno - node.lineno + 1
            where = f"{rel}:{node.lineno} {'class' if isinstance(node, ast.ClassDef) else 'def'} {node.name}"
            if isinstance(node, ast.ClassDef):
                largest = max(largest, (lines, where))
            if lines > (MAX_CLASS if isinstance(node, ast.ClassDef) else MAX_FUNCTION):
                found.append((lines, where))
    return sorted(found, reverse=True), largest


def main() -> int:
    found, largest = offenders(Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve())
    for lines, where in found:
        print(f"{lines:5} {where}")
    print(f"largest class: {largest[1]} ({largest[0]} lines); over the limits: {len(found)}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
