"""The import graph has no circles: between `aah`'s packages, and between its files.

Edges come from every `import aah.x` / `from aah.x import y` statement, function-level ones
included (a lazy import is still a dependency). Each subpackage also imports alone in a fresh
interpreter, so no package works only because another one happened to load first.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import aah

ROOT = Path(aah.__file__).parent
TOP = sorted(
    p.stem if p.is_file() else p.name
    for p in ROOT.iterdir()
    if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()
)


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in ROOT.rglob("*.py")}


def imported(path: Path) -> Iterator[str]:
    """Every aah module a file imports (a `from package import name` that names a submodule
    counts as that submodule)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.split(".")[0] == "aah")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] != "aah":
                continue
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                yield sub if sub in MODULES else node.module


def package_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "aah"


def cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One circle of the directed graph `edges` as a path that ends where it starts, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = 2
        path.pop()
        return None

    for node in sorted(edges):
        if node not in state and (found := visit(node)):
            return found
    return None


def graph(granularity: Callable[[str], str]) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        src = granularity(name)
        for target in imported(path):
            # Python runs aah/__init__.py before any submodule, so reading `aah.__version__`
            # can never be circular; the package's own lazy `aah.load` still counts.
            if target == "aah":
                continue
            dst = granularity(target)
            if dst != src:
                edges.setdefault(src, set()).add(dst)
    return edges


def test_packages_import_one_way():
    found = cycle(graph(package_of))
    assert found is None, "package import circle: " + " -> ".join(found or [])


def test_files_import_one_way():
    found = cycle(graph(lambda m: m))
    assert found is None, "file import circle: " + " -> ".join(found or [])


def test_the_cycle_finder_sees_a_circle():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b", "c"}, "b": {"c"}}) is None


@pytest.mark.parametrize("name", TOP)
def test_each_package_imports_alone(name):
    done = subprocess.run(
        [sys.executable, "-c", f"import aah.{name}"], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
