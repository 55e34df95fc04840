"""Readable units: no module of the package over 600 lines, no function over 80 (issue 17). A longer one is a
sign that two ideas share a place; split it rather than raise the limit."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "looped"
MAX_FILE_LINES, MAX_FUNCTION_LINES = 600, 80


def too_long(source: str, name: str) -> list[str]:
    found = []
    if len(source.splitlines()) > MAX_FILE_LINES:
        found.append(f"{name}: {len(source.splitlines())} lines")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = node.end_lineno - node.lineno + 1
            if length > MAX_FUNCTION_LINES:
                found.append(f"{name}:{node.lineno} {node.name}: {length} lines")
    return found


def test_no_module_or_function_is_too_long():
    found = [hit for path in sorted(PACKAGE.rglob("*.py")) for hit in too_long(path.read_text(), str(path))]
    assert not found, "\n".join(found)


def test_the_check_finds_a_long_function_and_a_long_file():
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    assert too_long(f"def f():\n{body}\n", "m.py") == ["m.py:1 f: 81 lines"]
    assert too_long("x = 1\n" * (MAX_FILE_LINES + 1), "m.py") == [f"m.py: {MAX_FILE_LINES + 1} lines"]
    assert too_long("def f():\n    return 1\n", "m.py") == []
