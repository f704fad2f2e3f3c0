"""docs/architecture.md's module maps (§10) name every module of the service and the
Python client, and nothing that no longer exists.

Each map is a Markdown table between `<!-- module map: <package dir> -->` and
`<!-- end of module map -->`; its `module` column holds one path per row, relative to
the package directory: `engine/turns.py` for a module, `engine/` for a package (its
`__init__.py`), `__init__.py` for the top package itself. Generated stubs are not
listed: `v1/` stands for the whole generated package.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
PACKAGES = ("server/turnkeeper_server", "clients/python/turnkeeper")
GENERATED = "v1/"

MAP = re.compile(
    r"^<!-- module map: (?P<package>\S+) -->$(?P<body>.*?)^<!-- end of module map -->$",
    re.MULTILINE | re.DOTALL,
)
ENTRY = re.compile(r"^`([\w./]+)`$")


def modules_on_disk(package: Path) -> set[str]:
    """Every module as the map names it: `a/b.py`, `a/` for `a/__init__.py`."""
    names: set[str] = set()
    for path in package.rglob("*.py"):
        relative = path.relative_to(package).as_posix()
        if relative.startswith(GENERATED):
            if relative == GENERATED + "__init__.py":
                names.add(GENERATED)
            continue
        if path.name.endswith(("_pb2.py", "_pb2_grpc.py")):
            continue
        if path.name == "__init__.py" and relative != "__init__.py":
            relative = relative.removesuffix("__init__.py")
        names.add(relative)
    return names


def cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def modules_in_map(body: str) -> list[str]:
    """The `module` column of the table in one map, in order, duplicates kept."""
    rows = [line for line in body.splitlines() if line.strip().startswith("|")]
    assert len(rows) > 2, "the module map has no table"
    header = cells(rows[0])
    assert "module" in header, f"the module map's table has no `module` column: {header}"
    column = header.index("module")
    entries: list[str] = []
    for row in rows[2:]:  # after the header and its separator
        cell = cells(row)[column]
        match = ENTRY.match(cell)
        assert match, f"not one backquoted path in the module column: {row.strip()}"
        entries.append(match.group(1))
    return entries


def maps() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for match in MAP.finditer(ARCHITECTURE.read_text()):
        package = match.group("package").rstrip("/")
        assert package not in found, f"two module maps for {package}"
        found[package] = modules_in_map(match.group("body"))
    return found


def test_every_package_has_a_map() -> None:
    assert sorted(maps()) == sorted(PACKAGES)


@pytest.mark.parametrize("package", PACKAGES)
def test_the_map_names_every_module_once(package: str) -> None:
    on_disk = modules_on_disk(ROOT / package)
    assert len(on_disk) > 20
    listed = maps().get(package, [])
    twice = sorted({name for name in listed if listed.count(name) > 1})
    missing = sorted(on_disk - set(listed))
    gone = sorted(set(listed) - on_disk)
    problems = (
        [f"not in docs/architecture.md's map: {package}/{name}" for name in missing]
        + [f"in the map but not in the tree: {package}/{name}" for name in gone]
        + [f"in the map twice: {package}/{name}" for name in twice]
    )
    assert not problems, "\n".join(problems)


def test_the_rule_for_names() -> None:
    """A package is its folder, the top package its `__init__.py`, stubs are `v1/`."""
    on_disk = modules_on_disk(ROOT / "clients/python/turnkeeper")
    assert {"__init__.py", "agent/", "agent/bridge/", "client.py", "v1/"} <= on_disk
    assert not [name for name in on_disk if name.startswith("v1/") and name != "v1/"]
    assert not [name for name in on_disk if name.endswith("__init__.py") and "/" in name]
