"""The documentation site (mkdocs.yml) builds with warnings as errors: every page of
docs/ in the nav, every link between pages and every anchor right, the Python client
reference made from the docstrings of names that exist (decision 205), and the
TypeScript client reference TypeDoc makes from the package's TSDoc, committed under
docs/reference/typescript and checked to be what TypeDoc makes now (decision 250)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.node import npm_run, prepare_package

ROOT = Path(__file__).resolve().parents[2]


def build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        cwd=config.parent,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_site_builds_strictly_with_the_python_reference(tmp_path: Path) -> None:
    done = build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert done.returncode == 0, done.stderr
    reference = (tmp_path / "site" / "reference" / "python" / "index.html").read_text()
    for name in ("AsyncTurnkeeperClient", "RemoteSaver", "TurnFollower", "BridgeConfig"):
        assert name in reference
    typescript = tmp_path / "site" / "reference" / "typescript" / "@turnkeeper" / "client"
    for page, names in {
        "index.html": ("TurnkeeperClient", "followTurn", "StatusFrame"),
        "agent/index.html": ("TurnRunner", "TurnkeeperSaver", "idempotencyKey"),
    }.items():
        text = (typescript / page).read_text()
        for name in names:
            assert name in text, f"{name} not in the TypeScript reference's {page}"
    index = (tmp_path / "site" / "index.html").read_text()
    for page in ("architecture/", "reference/python/", "reference/typescript/"):
        assert page in index


def test_a_broken_anchor_or_a_missing_name_fails_the_build(tmp_path: Path) -> None:
    """The build is strict: what it must refuse, it refuses."""
    copy = tmp_path / "repo"
    shutil.copytree(ROOT / "docs", copy / "docs")
    shutil.copytree(ROOT / "clients" / "python", copy / "clients" / "python")
    shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
    index = copy / "docs" / "index.md"
    index.write_text(index.read_text() + "\nSee [nothing](architecture.md#no-such-section).\n")
    done = build(copy / "mkdocs.yml", tmp_path / "site1")
    assert done.returncode != 0 and "no-such-section" in done.stderr

    index.write_text(index.read_text().replace("[nothing](architecture.md#no-such-section)", ""))
    reference = copy / "docs" / "reference" / "python.md"
    reference.write_text(reference.read_text() + "\n::: turnkeeper.client.NoSuchClient\n")
    done = build(copy / "mkdocs.yml", tmp_path / "site2")
    assert done.returncode != 0 and "NoSuchClient" in done.stderr


@pytest.mark.slow
def test_the_typescript_reference_is_what_typedoc_makes_and_a_broken_link_fails(
    tmp_path: Path,
) -> None:
    package = prepare_package(tmp_path)
    shutil.copytree(
        ROOT / "docs" / "reference" / "typescript", tmp_path / "docs" / "reference" / "typescript"
    )
    npm_run(["run", "check-docs"], package)

    follow = package / "src" / "follow.ts"
    follow.write_text(
        follow.read_text().replace(
            "export interface StatusFrame {",
            "/** See {@link NoSuchThing}. */\nexport interface StatusFrame {",
            1,
        )
    )
    done = subprocess.run(
        ["npm", "run", "check-docs"], cwd=package, capture_output=True, text=True, timeout=300
    )
    assert done.returncode != 0 and "NoSuchThing" in done.stdout + done.stderr
