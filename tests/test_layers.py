"""The package's import floors (layers.json at the repository root): a module imports only its own floor and
the floors below, and no two modules import each other, directly or through others. Checked here with our
own reading of the imports, so the rule holds wherever the tests run."""

from __future__ import annotations

import ast
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "looped"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_files(path: Path, modules: dict[str, Path]) -> set[Path]:
    """Files of the package that `path` imports anywhere (top level or inside functions)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            candidates = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        else:
            continue
        for candidate in candidates:
            while candidate and candidate not in modules:  # `looped.models.registry.register` -> the module
                candidate = candidate.rpartition(".")[0]
            if candidate and modules[candidate] != path:
                targets.add(modules[candidate])
    return targets


def import_graph() -> dict[Path, set[Path]]:
    modules = {module_name(f): f for f in sorted(PACKAGE.rglob("*.py"))}
    return {f: imported_files(f, modules) for f in modules.values()}


def floors() -> list[list[str]]:
    return json.loads((ROOT / "layers.json").read_text())["layers"]


def floor_of(path: Path, layers: list[list[str]]) -> int | None:
    """The floor of the longest prefix that matches the file's repository path."""
    rel = path.relative_to(ROOT).as_posix()
    hits = [(len(prefix), i) for i, prefixes in enumerate(layers) for prefix in prefixes if rel.startswith(prefix)]
    return max(hits)[1] if hits else None


def cycle_from(graph: dict[Path, set[Path]]) -> list[Path] | None:
    """One import cycle of the graph, or None (iterative depth-first search, colours white/grey/black)."""
    colour: dict[Path, int] = {}
    for start in graph:
        if colour.get(start):
            continue
        stack, path = [(start, iter(sorted(graph[start])))], [start]
        colour[start] = 1
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                colour[node] = 2
                stack.pop()
                path.pop()
            elif colour.get(child) == 1:
                return path[path.index(child):] + [child]
            elif not colour.get(child):
                colour[child] = 1
                stack.append((child, iter(sorted(graph[child]))))
                path.append(child)
    return None


def test_every_module_has_a_floor():
    layers = floors()
    homeless = [str(f.relative_to(ROOT)) for f in import_graph() if floor_of(f, layers) is None]
    assert not homeless, f"add these files to a floor of layers.json: {homeless}"


def test_no_module_imports_a_higher_floor():
    layers = floors()
    upward = [f"{f.relative_to(ROOT)} (floor {floor_of(f, layers)}) imports {t.relative_to(ROOT)} "
              f"(floor {floor_of(t, layers)})"
              for f, targets in import_graph().items() for t in sorted(targets)
              if floor_of(t, layers) is not None and floor_of(f, layers) is not None
              and floor_of(t, layers) > floor_of(f, layers)]
    assert not upward, "\n".join(upward)


def test_no_import_cycles():
    cycle = cycle_from(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(str(f.relative_to(ROOT)) for f in cycle)


def test_the_checks_catch_an_upward_import_and_a_cycle(tmp_path):
    # the checks themselves can fail: a two-file cycle is found, and a higher-floor import is placed correctly
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    assert cycle_from({a: {b}, b: {a}}) == [a, b, a]
    assert cycle_from({a: {b}, b: set()}) is None
    layers = [["looped/io.py"], ["looped/train/"]]
    assert floor_of(ROOT / "looped/train/checkpoint.py", layers) == 1
    assert floor_of(ROOT / "looped/io.py", layers) == 0
