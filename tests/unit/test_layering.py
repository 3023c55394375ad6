"""The agent and the control plane only meet over the Kubernetes API: neither imports the other."""

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "pykubelet"


def imported_modules(package: str) -> set[tuple[str, str]]:
    found = set()
    for path in (SRC / package).rglob("*.py"):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found |= {(str(path), a.name) for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add((str(path), node.module))
    return found


def test_agent_does_not_import_server() -> None:
    bad = [(p, m) for p, m in imported_modules("agent") if m.startswith("pykubelet.server")]
    assert bad == []


def test_server_does_not_import_agent() -> None:
    bad = [(p, m) for p, m in imported_modules("server") if m.startswith("pykubelet.agent")]
    assert bad == []
