"""Every test checks something: a test function without an assertion passes whatever the code does.

A test counts as asserting when its body (or a helper function of the same module it calls, followed
transitively) contains an ``assert``, ``pytest.raises``, ``pytest.warns`` or ``pytest.fail``.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

# Tests known to lack an assertion, to be fixed by their owners; do not add to this list.
KNOWN_WITHOUT_ASSERT: set[str] = set()


def _asserts(node: ast.AST, helpers: dict[str, ast.AST], seen: set[str]) -> bool:
    for n in ast.walk(node):
        if isinstance(n, ast.Assert):
            return True
        if not isinstance(n, ast.Call):
            continue
        f = n.func
        if (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "pytest"
                and f.attr in ("raises", "warns", "fail")):
            return True
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
        if name in helpers and name not in seen:
            seen.add(name)
            if _asserts(helpers[name], helpers, seen):
                return True
    return False


def find_tests_without_assertions() -> list[str]:
    found = []
    for path in sorted(TESTS.rglob("test_*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        funcs = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
        helpers: dict[str, ast.AST] = {}
        for f in funcs:
            helpers.setdefault(f.name, f)
        for f in funcs:
            if f.name.startswith("test_") and not _asserts(f, helpers, set()):
                found.append(f"{path.relative_to(TESTS)}::{f.name}")
    return found


def test_every_test_function_asserts_something() -> None:
    missing = [t for t in find_tests_without_assertions() if t not in KNOWN_WITHOUT_ASSERT]
    assert missing == [], "tests without any assertion (assert what the user would see):\n" + "\n".join(missing)


def test_the_scan_sees_a_test_without_assertion() -> None:
    tree = ast.parse("def helper():\n    assert True\n\ndef test_a():\n    helper()\n\ndef test_b():\n    pass\n")
    funcs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert _asserts(funcs["test_a"], funcs, set())
    assert not _asserts(funcs["test_b"], funcs, set())
