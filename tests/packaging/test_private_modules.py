"""scripts/private_modules.py, the rename map of the client's private modules (issue
46): what it rewrites, and that no old name is left in the repository (code merged
from a branch that still uses one: run the script)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "private_modules.py"


def script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("private_modules", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_rewrite_of_old_names() -> None:
    rewrite = script().rewrite
    old = (
        "from turnkeeper.agent.bridge.intent import RunIntent\n"
        "from turnkeeper import errors, tracing\n"
        "from turnkeeper.operator import args as argtypes\n"
        "from turnkeeper.agent.saver import (\n    RemoteSaver,  # the wire\n    wire,\n)\n"
        'mock.patch("turnkeeper.agent.bridge.bridge.Bridge.run")\n'
        "see clients/python/turnkeeper/nats_identity.py and turnkeeper.agent.bridge.Bridge\n"
    )
    new = (
        "from turnkeeper.agent.bridge._intent import RunIntent\n"
        "from turnkeeper import errors, _tracing as tracing\n"
        "from turnkeeper.operator import _args as argtypes\n"
        "from turnkeeper.agent.saver import (\n    RemoteSaver,  # the wire\n    _wire as wire,\n)\n"
        'mock.patch("turnkeeper.agent.bridge._bridge.Bridge.run")\n'
        "see clients/python/turnkeeper/_nats_identity.py and turnkeeper.agent.bridge.Bridge\n"
    )
    assert rewrite(old) == new
    assert rewrite(new) == new  # idempotent


def test_no_old_module_name_is_left() -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, (
        "old module names are back (code from before issue 46?): run "
        f"`python scripts/private_modules.py`, then `ruff check --fix .`\n{result.stdout}"
    )
