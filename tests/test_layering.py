"""The layers, read from the source with `ast`:

* the library (`m1flow/`) imports no service and not the operator layer (`ops/`); its one exception
  is `m1flow/__main__.py`, the `python -m m1flow` script kept for older commands, which may import
  `ops.cli` and nothing else of the project (nothing imports that script: it is not the library);
* a service imports another service only through its `client` module, and never the operator layer;
* the operator layer imports a service only through its `client` module;
* no circle of imports anywhere in the library, in a service package or in the operator layer.

Every import counts, wherever it is written (module level, inside a function, under
`if TYPE_CHECKING:`): a lazy or type-only import is still a dependency, and a circle of them is
one a refactor will trip over. An import of a package's submodule does not count as an import of
the package's `__init__` (Python runs it first, but the package does not depend on it for that).
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GENERATED = ("m1flow/v1/",)  # protobuf modules written by m1flow.protogen


@dataclass(frozen=True)
class Import:
    source: str  # importing module
    target: str  # imported module (a submodule where `from pkg import name` names one)
    where: str  # file:line


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def python_files(root: Path, top: str) -> list[Path]:
    return sorted(p for p in (root / top).rglob("*.py")
                  if not any(p.relative_to(root).as_posix().startswith(g) for g in GENERATED))


def modules_of(root: Path, tops: list[str]) -> dict[str, Path]:
    return {module_name(root, p): p for top in tops for p in python_files(root, top)}


def imports_of(root: Path, path: Path, known: set[str]) -> list[Import]:
    """Every import in one file, resolved to absolute module names."""
    source = module_name(root, path)
    package = source if path.name == "__init__.py" else source.rpartition(".")[0]
    rel = path.relative_to(root).as_posix()
    found: list[Import] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [Import(source, alias.name, f"{rel}:{node.lineno}") for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:
                sub = f"{module}.{alias.name}"
                found.append(Import(source, sub if sub in known else module, f"{rel}:{node.lineno}"))
    return found


def service_packages(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name.startswith("svc_") and (p / "__init__.py").exists())


LIBRARY = "m1flow"
OPERATOR = "ops"  # the operator's layer, beside the services
ENTRY = "m1flow.__main__"  # `python -m m1flow`: a script handing over to the operator's CLI
ENTRY_MAY_IMPORT = frozenset({"ops.cli"})


def all_imports(root: Path) -> list[Import]:
    tops = [LIBRARY, *([OPERATOR] if (root / OPERATOR).is_dir() else []), *service_packages(root)]
    modules = modules_of(root, tops)
    found = [imp for path in modules.values() for imp in imports_of(root, path, set(modules))]
    return list(dict.fromkeys(found))  # `from x import a, b` is one import of x


def _top(module: str) -> str:
    return module.split(".", 1)[0]


def _is_ops(module: str) -> bool:
    return _top(module) == OPERATOR


def _is_service(module: str) -> bool:
    return _top(module).startswith("svc_")


def _is_library(module: str) -> bool:
    return _top(module) == LIBRARY and module != ENTRY


def _is_client(module: str) -> bool:
    """A service's `client` module (or a module inside a `client` package)."""
    top = _top(module)
    return module == f"{top}.client" or module.startswith(f"{top}.client.")


def _project(module: str) -> bool:
    return _top(module) in (LIBRARY, OPERATOR) or _is_service(module)


def library_violations(imports: list[Import]) -> list[str]:
    """The library importing a service or the operator layer; the entry script importing more than
    its hand-over."""
    bad = [f"{i.where}: the library imports {i.target}" for i in imports
           if _is_library(i.source) and (_is_service(i.target) or _is_ops(i.target))]
    bad += [f"{i.where}: {ENTRY} may hand over to {', '.join(sorted(ENTRY_MAY_IMPORT))} only, not import {i.target}"
            for i in imports if i.source == ENTRY and _project(i.target) and i.target not in ENTRY_MAY_IMPORT]
    return bad


def service_violations(imports: list[Import]) -> list[str]:
    """A service importing another service's internals (anything but its `client`) or the operator layer."""
    bad = []
    for i in imports:
        own = _top(i.source)
        if not own.startswith("svc_"):
            continue
        other = _top(i.target)
        if _is_ops(i.target):
            bad.append(f"{i.where}: service {own} imports the operator layer ({i.target})")
        elif _is_service(i.target) and other != own and not _is_client(i.target):
            bad.append(f"{i.where}: service {own} imports {i.target}, not {other}.client")
    return bad


def operator_violations(imports: list[Import]) -> list[str]:
    """The operator layer importing a service's internals: it uses a service through its `client`."""
    return [f"{i.where}: the operator layer imports {i.target}, not {_top(i.target)}.client" for i in imports
            if _is_ops(i.source) and _is_service(i.target) and not _is_client(i.target)]


def cycles(imports: list[Import], package: str) -> list[list[str]]:
    """The circles of imports among one package's modules (strongly connected components, Tarjan)."""
    inside = lambda m: m == package or m.startswith(package + ".")  # noqa: E731
    graph: dict[str, set[str]] = {}
    for i in imports:
        if inside(i.source) and inside(i.target) and i.source != i.target \
                and not i.source.startswith(i.target + "."):  # a submodule naming its own package's __init__
            graph.setdefault(i.source, set()).add(i.target)
            graph.setdefault(i.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _describe(imports: list[Import], component: list[str]) -> str:
    members = set(component)
    edges = sorted({f"{i.source} -> {i.target} ({i.where})" for i in imports
                    if i.source in members and i.target in members})
    return "circle " + " <-> ".join(component) + ":\n    " + "\n    ".join(edges)


# ---------------------------------------------------------------------------------- the tree
@pytest.fixture(scope="module")
def tree_imports() -> list[Import]:
    return all_imports(ROOT)


def test_the_library_imports_no_service_and_not_the_operator_layer(tree_imports):
    assert library_violations(tree_imports) == []


def test_a_service_imports_other_services_only_through_their_client(tree_imports):
    assert service_violations(tree_imports) == []


def test_the_operator_layer_uses_services_only_through_their_client(tree_imports):
    assert operator_violations(tree_imports) == []


@pytest.mark.parametrize("package", [LIBRARY, OPERATOR, *service_packages(ROOT)])
def test_no_circle_of_imports_in_the_library_the_operator_layer_or_a_service(tree_imports, package):
    found = cycles(tree_imports, package)
    assert not found, "\n".join(_describe(tree_imports, c) for c in found)


# ------------------------------------------------------------- the checks can fail (a made-up tree)
def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_checks_find_what_they_forbid(tmp_path):
    _write(tmp_path, {
        "m1flow/__init__.py": "",
        "m1flow/__main__.py": "import sys\nfrom ops.cli import main\nfrom ops.stack import Stack\n",  # one too many
        "m1flow/lib.py": "def f():\n    from svc_a.service import X\n",  # lazy, still counted
        "m1flow/typed.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ops import cli\n",
        "m1flow/data/__init__.py": "from m1flow.data import record\n",  # a package naming its submodule
        "m1flow/data/record.py": "def check():\n    from m1flow.data.specs import check\n",  # hidden: a lazy import
        "m1flow/data/specs.py": "from m1flow.data.record import Verifier\nfrom m1flow.tasks import logic\n",
        "m1flow/tasks/__init__.py": "",
        "m1flow/tasks/logic.py": "from m1flow.data import record\n",  # the circle closes through another folder
        "ops/__init__.py": "",
        "ops/cli.py": "from svc_a import client\nfrom svc_b.client import C\nfrom svc_a.service import X\n",
        "ops/stack.py": "from ops.cli import main\n",
        "ops/demo.py": "from ops import stack\nfrom ops.stack import Stack\n",
        "svc_a/__init__.py": "",
        "svc_a/client.py": "",
        "svc_a/service.py": "from . import report\nfrom svc_b import client\nfrom svc_b.client import C\n",
        "svc_a/report.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from svc_a.service import S\n",
        "svc_a/engines/__init__.py": "from svc_a.engines import base\n",
        "svc_a/engines/base.py": "from svc_a.engines import helpers\n",  # a submodule beside it: no circle
        "svc_a/engines/helpers.py": "",
        "svc_b/__init__.py": "",
        "svc_b/client.py": "",
        "svc_b/service.py": "from svc_a.report import R\nfrom ops.stack import Stack\n",
    })
    imports = all_imports(tmp_path)
    assert library_violations(imports) == [
        "m1flow/lib.py:2: the library imports svc_a.service",
        "m1flow/typed.py:3: the library imports ops.cli",
        "m1flow/__main__.py:3: m1flow.__main__ may hand over to ops.cli only, not import ops.stack"]
    assert service_violations(imports) == ["svc_b/service.py:1: service svc_b imports svc_a.report, not svc_a.client",
                                           "svc_b/service.py:2: service svc_b imports the operator layer (ops.stack)"]
    assert operator_violations(imports) == ["ops/cli.py:3: the operator layer imports svc_a.service, not svc_a.client"]
    assert cycles(imports, "m1flow") == [["m1flow.data.record", "m1flow.data.specs", "m1flow.tasks.logic"]]
    assert cycles(imports, "ops") == []
    assert cycles(imports, "svc_a") == [["svc_a.report", "svc_a.service"]]
    assert cycles(imports, "svc_b") == []
