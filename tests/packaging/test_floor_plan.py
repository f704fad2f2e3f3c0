"""The service's floor plan holds, and every module of both distributions stands alone.

- the import graph of each distribution (import-linter's `grimp` reads it) has no
  cycle between modules: a cycle is what makes a module import only in one order;
- no import of the service runs back up a floor (import-linter's `layers` contract
  in pyproject.toml; the same floors are checked here from the graph, so the test
  fails on a wrong import even if the contract were edited away);
- every module imports on its own in a fresh interpreter.

To check by hand: `lint-imports`, and `pytest tests/packaging/test_floor_plan.py`.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("turnkeeper_server", "turnkeeper")


def cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for other in sorted(graph.find_modules_directly_imported_by(module)):
            if other not in graph.modules:
                continue
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in on_stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return found


@pytest.fixture(scope="module")
def graphs() -> dict[str, grimp.ImportGraph]:
    return {package: grimp.build_graph(package) for package in PACKAGES}


def floors() -> list[list[str]]:
    """The service's floors from the layers contract, top first."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    for contract in config["tool"]["importlinter"]["contracts"]:
        if contract["type"] == "layers":
            return [
                [f"turnkeeper_server.{room.strip()}" for room in floor.split("|")]
                for floor in contract["layers"]
            ]
    raise AssertionError("pyproject.toml has no layers contract for the service")


def floor_of(module: str, plan: list[list[str]]) -> tuple[int, str]:
    for level, rooms in enumerate(plan):
        for room in rooms:
            if module == room or module.startswith(room + "."):
                return level, room
    raise AssertionError(f"{module} is on no floor of the layers contract: add it to one")


def test_the_cycle_check_finds_a_cycle() -> None:
    graph = grimp.ImportGraph()
    for name in ("a", "a.x", "a.y", "a.z"):
        graph.add_module(name)
    graph.add_import(importer="a.x", imported="a.y")
    graph.add_import(importer="a.y", imported="a.x")
    graph.add_import(importer="a.z", imported="a.x")
    assert cycles(graph) == [["a.x", "a.y"]]


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycle_between_modules(
    graphs: dict[str, grimp.ImportGraph], package: str
) -> None:
    assert cycles(graphs[package]) == []


def test_no_import_runs_back_up_a_floor(graphs: dict[str, grimp.ImportGraph]) -> None:
    plan = floors()
    graph = graphs["turnkeeper_server"]
    upward: list[str] = []
    for module in sorted(graph.modules):
        if module == "turnkeeper_server":
            continue
        level, room = floor_of(module, plan)
        for other in sorted(graph.find_modules_directly_imported_by(module)):
            if not other.startswith("turnkeeper_server.") or other == "turnkeeper_server":
                continue
            other_level, other_room = floor_of(other, plan)
            if other_room == room:
                continue
            # Up a floor, or sideways into another room of the same floor (the
            # contract's rooms on one floor are independent: `|`).
            if other_level <= level:
                upward.append(f"{module} -> {other}")
    assert upward == []


def modules_of(package: str) -> list[str]:
    base = {"turnkeeper_server": ROOT / "server", "turnkeeper": ROOT / "clients" / "python"}[
        package
    ]
    names = []
    for path in sorted((base / package).rglob("*.py")):
        relative = path.relative_to(base).with_suffix("")
        parts = list(relative.parts)
        if parts[-1] == "__init__":
            parts.pop()
        name = ".".join(parts)
        if name.endswith("_pb2") or name.endswith("_pb2_grpc") or parts[-1] == "__main__":
            continue
        names.append(name)
    return names


@pytest.mark.parametrize("package", PACKAGES)
def test_every_module_imports_on_its_own(package: str) -> None:
    """One fresh interpreter per module (run in batches of subprocesses)."""
    names = modules_of(package)
    assert len(names) > 20
    script = (
        "import subprocess, sys\n"
        "failed = []\n"
        "procs = [(n, subprocess.Popen([sys.executable, '-c', f'import {n}'],"
        " stderr=subprocess.PIPE)) for n in sys.argv[1:]]\n"
        "for n, p in procs:\n"
        "    err = p.communicate()[1].decode(errors='replace').strip().splitlines()\n"
        "    if p.returncode:\n"
        "        failed.append(f'{n}: {err[-1] if err else p.returncode}')\n"
        "print('\\n'.join(failed))\n"
    )
    failed: list[str] = []
    for start in range(0, len(names), 8):
        batch = names[start : start + 8]
        run = subprocess.run(
            [sys.executable, "-c", script, *batch],
            capture_output=True,
            text=True,
            timeout=300,
            check=True,
        )
        failed += [line for line in run.stdout.splitlines() if line]
    assert failed == []
