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

import re
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
# Ours are the top-level packages of the names given. Step 1 (`--third-party`): import
# every module named, print the third-party and standard-library modules that pulled in.
# Step 2: import those (none of ours), then fork a child per module of ours; each child
# imports its one module into a process that holds none of ours, as `python -c "import
# <module>"` would, without paying again for gRPC, LangGraph, pydantic... (a fresh
# interpreter each took about 0.7 s of CPU). Packages go before their modules, and a
# child that imported its package reports which of the package's modules that loaded:
# those get no child of their own (decision 730). `import a.b.m` imports `a`, then `a.b`,
# then `a.b.m`; when importing the package `a.b` already loaded `a.b.m`, a child importing
# `a.b.m` would run the same code in the same order and end the same way. The last line
# says how many children were forked.
IMPORT_EACH = r"""
import importlib, os, sys, threading, traceback

LOADED = "\0loaded "


def loaded_elsewhere(ours):
    return sorted(n for n in sys.modules if not ours(n) and not n.startswith("__"))


if sys.argv[1] == "--third-party":
    OURS = {n.partition(".")[0] for n in sys.argv[2:]}
    for name in sys.argv[2:]:
        try:
            importlib.import_module(name)
        except Exception:
            pass  # step 2 tells which module fails, and why
    print("\n".join(loaded_elsewhere(lambda n: n.partition(".")[0] in OURS)))
    sys.exit(0)

preload = sys.argv[1].split()
# Each package before its modules (a stable sort keeps the given order within a depth).
names = sorted(sys.argv[2:], key=lambda n: n.count("."))
OURS = {n.partition(".")[0] for n in names}


def ours(name):
    return name.partition(".")[0] in OURS


for name in preload:
    try:
        importlib.import_module(name)
    except Exception:
        pass  # a module only importable as a side effect of another: the child will tell
assert not [n for n in sys.modules if ours(n)], "a third-party module imported one of ours"
assert threading.active_count() == 1, "a third-party import started a thread: fork is unsafe"
failed = []
covered = set()
forked = 0
for name in names:
    if name in covered:
        continue  # its package's child imported it, in the order `import name` would
    forked += 1
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        os.dup2(write, 2)
        code = 0
        try:
            importlib.import_module(name)
            below = [n for n in sys.modules if n.startswith(name + ".")]
            sys.stderr.write(LOADED + " ".join(below) + "\n")
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
    elif err and err[-1].startswith(LOADED):
        covered.update(err[-1].removeprefix(LOADED).split())
print("\n".join(failed))
print(f"forked {forked} of {len(names)}")
"""


def import_each(names: list[str], cwd: Path | None = None) -> tuple[list[str], int, list[str]]:
    """Each module imported as IMPORT_EACH does: the failures, the children forked, and
    the third-party and standard modules the parent imported first."""
    third_party = subprocess.run(
        [sys.executable, "-c", IMPORT_EACH, "--third-party", *names],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        cwd=cwd,
    ).stdout.split()
    assert not [
        n for n in third_party if n.partition(".")[0] in {m.partition(".")[0] for m in names}
    ]
    run = subprocess.run(
        [sys.executable, "-c", IMPORT_EACH, " ".join(third_party), *names],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=cwd,
    )
    assert run.returncode == 0, run.stderr
    *failed, last = run.stdout.splitlines()
    match = re.fullmatch(rf"forked (\d+) of {len(names)}", last)
    assert match, run.stdout
    return [line for line in failed if line], int(match.group(1)), third_party


@pytest.mark.parametrize("package", PACKAGES)
def test_every_module_imports_on_its_own(package: str) -> None:
    """Each module imports in a process that has imported no other module of ours
    (a child forked from one that imported only third-party and standard modules)."""
    names = modules_of(package)
    assert len(names) > 20
    failed, forked, third_party = import_each(names)
    assert "grpc" in third_party
    assert failed == []
    assert forked < len(names)


def test_a_module_its_package_loads_shares_the_packages_child(tmp_path: Path) -> None:
    """`pkg/__init__.py` imports `pkg.a`, so `pkg.a` gets no child of its own; `pkg.b`,
    which reads `pkg.sub.x` without importing it, fails on its own, and `pkg.sub.x`,
    which `pkg.sub` does not load, is imported by a child of its own."""
    files = {
        "pkg/__init__.py": "from pkg import a\n",
        "pkg/a.py": "VALUE = 1\n",
        "pkg/b.py": "import pkg.sub\n\nVALUE = pkg.sub.x.VALUE\n",
        "pkg/sub/__init__.py": "",
        "pkg/sub/x.py": "VALUE = 2\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    failed, forked, _ = import_each(["pkg", "pkg.a", "pkg.b", "pkg.sub", "pkg.sub.x"], tmp_path)
    assert [line.split(":")[0] for line in failed] == ["pkg.b"], failed
    assert "has no attribute 'x'" in failed[0], failed
    assert forked == 4
