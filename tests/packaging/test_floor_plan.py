"""The service's floor plan holds, and every module of both distributions stands alone.

- the import graph of each distribution (import-linter's `grimp` reads it) has no
  cycle between modules: a cycle is what makes a module import only in one order;
- no import of the service runs back up a floor (import-linter's `layers` contract
  in pyproject.toml; the same floors are checked here from the graph, so the test
  fails on a wrong import even if the contract were edited away);
- every module imports on its own: in a process that has imported no other module of
  ours (a child forked from an interpreter that imported only the third-party and
  standard modules the package uses, decision 326).

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


# Run by a fresh interpreter per package (see test_every_module_imports_on_its_own).
# Step 1 (`--third-party`): import every module of the package, print the third-party
# and standard-library modules that pulled in. Step 2: import those (none of ours), then
# fork a child per module of ours; each child imports its one module into a process
# that holds none of ours, as `python -c "import <module>"` would, without paying again
# for gRPC, LangGraph, pydantic... (a fresh interpreter each took about 0.7 s of CPU).
IMPORT_EACH = r"""
import importlib, os, sys, threading, traceback

OURS = ("turnkeeper", "turnkeeper_server")


def ours(name):
    return name.partition(".")[0] in OURS


def loaded_elsewhere():
    return sorted(n for n in sys.modules if not ours(n) and not n.startswith("__"))


if sys.argv[1] == "--third-party":
    for name in sys.argv[2:]:
        try:
            importlib.import_module(name)
        except Exception:
            pass  # step 2 tells which module fails, and why
    print("\n".join(loaded_elsewhere()))
    sys.exit(0)

preload, names = sys.argv[1].split(), sys.argv[2:]
for name in preload:
    try:
        importlib.import_module(name)
    except Exception:
        pass  # a module only importable as a side effect of another: the child will tell
assert not [n for n in sys.modules if ours(n)], "a third-party module imported one of ours"
assert threading.active_count() == 1, "a third-party import started a thread: fork is unsafe"
failed = []
for name in names:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        os.dup2(write, 2)
        code = 0
        try:
            importlib.import_module(name)
        except BaseException:
            traceback.print_exc()
            code = 1
        sys.stderr.flush()
        os._exit(code)
    os.close(write)
    with os.fdopen(read, errors="replace") as pipe:
        err = pipe.read().strip().splitlines()
    _, status = os.waitpid(pid, 0)
    if status:
        failed.append(f"{name}: {err[-1] if err else status}")
print("\n".join(failed))
"""


@pytest.mark.parametrize("package", PACKAGES)
def test_every_module_imports_on_its_own(package: str) -> None:
    """Each module imports in a process that has imported no other module of ours
    (a child forked from one that imported only third-party and standard modules)."""
    names = modules_of(package)
    assert len(names) > 20
    third_party = subprocess.run(
        [sys.executable, "-c", IMPORT_EACH, "--third-party", *names],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout.split()
    assert "grpc" in third_party and not [n for n in third_party if n.startswith(PACKAGES)]
    run = subprocess.run(
        [sys.executable, "-c", IMPORT_EACH, " ".join(third_party), *names],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert [line for line in run.stdout.splitlines() if line] == []
