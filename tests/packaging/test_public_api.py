"""The public API of the Python client, pinned (docs/architecture.md; STYLE: "A small
public surface").

Public are the modules of `clients/python/turnkeeper` with no path part starting with
`_` (the generated `turnkeeper.v1` included), each package's and module's names are
its `__all__`, and the command-line entry points are those of
`clients/python/pyproject.toml`. The lists below are the whole of it: a module or a
name added, removed or renamed fails here. That is on purpose. A rename is a
decision: if you mean it, change the list here, and the docs that show the import
(README.md, docs/*.md, docs/reference/python.md, examples/); a module that users need
not import starts with `_` instead (scripts/private_modules.py keeps the map of the
old names).
"""

from __future__ import annotations

import importlib
import importlib.util
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "clients" / "python"
PACKAGE = CLIENT / "turnkeeper"

DECISION = (
    "the public API of the `turnkeeper` distribution changed. A rename is a decision: "
    "if you mean it, update tests/packaging/test_public_api.py and the docs that show "
    "the import (README.md, docs/, docs/reference/python.md, examples/); if not, make "
    "the module private (a leading `_`) or leave the name out of `__all__`."
)

GENERATED = (
    "turnkeeper.v1.checkpoints_pb2",
    "turnkeeper.v1.checkpoints_pb2_grpc",
    "turnkeeper.v1.operations_pb2",
    "turnkeeper.v1.operations_pb2_grpc",
    "turnkeeper.v1.store_pb2",
    "turnkeeper.v1.store_pb2_grpc",
    "turnkeeper.v1.turns_pb2",
    "turnkeeper.v1.turns_pb2_grpc",
)

ENTRY_POINTS = {
    "turnkeeper": "turnkeeper.operator.__main__:main",
}
# `python -m ...`: the host of a langgraph.json and the command line.
MAIN_MODULES = ("turnkeeper.agent.host.__main__", "turnkeeper.operator.__main__")

# Every public module (not generated, not `__main__`) and its `__all__`, sorted.
EXPORTS: dict[str, list[str]] = {
    "turnkeeper": [
        "AsyncTurnkeeperClient",
        "ConnectionOptions",
        "TurnState",
        "TurnkeeperClient",
        "TurnkeeperError",
    ],
    "turnkeeper.agent": [
        "Bridge",
        "BridgeConfig",
        "EffectError",
        "EffectFailed",
        "EffectUncertain",
        "RemoteSaver",
        "durable_config",
        "durable_run_kwargs",
        "effect_key",
        "idempotency_key",
        "journal_replies",
    ],
    "turnkeeper.agent.bridge": ["BoundarySaver", "Bridge", "BridgeConfig", "idempotency_key"],
    "turnkeeper.agent.effect": [
        "EffectError",
        "EffectFailed",
        "EffectOutsideRemoteSaver",
        "EffectUncertain",
        "ModelReplies",
        "Policy",
        "UNCERTAIN_INTERRUPT",
        "effect",
        "effect_key",
        "journal_replies",
    ],
    "turnkeeper.agent.host": ["GraphSpec", "HostConfig", "host", "load_graph", "read_config"],
    "turnkeeper.agent.saver": [
        "ATTEMPT_KEY",
        "DURABILITY",
        "DurableRunKwargs",
        "RemoteSaver",
        "SHARE_ENV",
        "STREAM_ENV",
        "TURN_ID_KEY",
        "durable_config",
        "durable_run_kwargs",
    ],
    "turnkeeper.client": [
        "ADDRESS_ENV",
        "AsyncTurnkeeperClient",
        "ConnectionOptions",
        "DEFAULT_ADDRESS",
        "TurnkeeperClient",
        "default_address",
    ],
    "turnkeeper.errors": [
        "AlreadyExists",
        "InvalidArgument",
        "PermissionDenied",
        "ResourceExhausted",
        "StaleAttempt",
        "TurnNotFound",
        "TurnkeeperError",
        "Unauthenticated",
        "Unavailable",
        "WrongState",
        "from_rpc_error",
        "from_status",
    ],
    "turnkeeper.operator": [],
    "turnkeeper.panel": [
        "AgentSession",
        "Concluded",
        "Event",
        "FollowOptions",
        "Frame",
        "NatsAgentTransport",
        "Reset",
        "Transcript",
        "TurnFollower",
    ],
    "turnkeeper.panel.agent_rpc": [
        "CREATE",
        "NatsAgentTransport",
        "RESUME_DETACHED",
        "TURN_STATUS",
        "agent_subject",
    ],
    "turnkeeper.panel.follower": [
        "Concluded",
        "ConclusionReason",
        "Event",
        "FollowOptions",
        "Frame",
        "Reset",
        "TERMINAL_EVENT_TYPES",
        "Transcript",
        "TurnFollower",
        "TurnState",
        "is_transient",
    ],
    "turnkeeper.panel.session": [
        "AgentRejected",
        "AgentSession",
        "AgentTransport",
        "Created",
        "ErrorKind",
        "NoAnswer",
        "NotDispatched",
        "RunStatus",
        "SessionBusy",
        "SessionError",
        "StatusCheck",
    ],
    "turnkeeper.states": [
        "JOURNAL_STATES",
        "STATE_NAMES",
        "TERMINAL_EVENT_TYPES",
        "TurnState",
        "WIRE_WORDS",
    ],
    # Generated (protos/generate.py): its modules are its API.
    "turnkeeper.v1": [],
}


def public_modules_on_disk() -> list[str]:
    """Every module of the package whose dotted path has no part starting with `_`
    (`__main__` counts as public: `python -m`)."""
    found = []
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(CLIENT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        if any(part.startswith("_") and part != "__main__" for part in parts):
            continue
        found.append(".".join(parts))
    return sorted(found)


def test_the_public_modules_are_pinned() -> None:
    pinned = sorted([*EXPORTS, *GENERATED, *MAIN_MODULES])
    on_disk = public_modules_on_disk()
    added = sorted(set(on_disk) - set(pinned))
    removed = sorted(set(pinned) - set(on_disk))
    assert not added and not removed, (
        f"public modules added: {added}; removed or renamed: {removed}. {DECISION}"
    )


@pytest.mark.parametrize("module_name", sorted(EXPORTS))
def test_each_public_module_exports_its_pinned_names(module_name: str) -> None:
    module = importlib.import_module(module_name)
    exported = getattr(module, "__all__", None)
    if module_name == "turnkeeper.v1":
        assert exported is None, "turnkeeper.v1 is generated; its modules are its API"
        return
    assert exported is not None, f"{module_name} has no __all__. {DECISION}"
    assert len(exported) == len(set(exported)), f"{module_name}.__all__ names one twice"
    expected = EXPORTS[module_name]
    assert expected == sorted(expected), f"keep the list of {module_name} sorted"
    added = sorted(set(exported) - set(expected))
    removed = sorted(set(expected) - set(exported))
    assert not added and not removed, (
        f"{module_name}.__all__: added {added}, removed {removed}. {DECISION}"
    )
    for name in exported:  # every name resolves, the lazy ones too
        assert hasattr(module, name), f"{module_name}.{name} is exported but not there"


def test_star_imports_bring_exactly_the_exports() -> None:
    for module_name in ("turnkeeper", "turnkeeper.agent", "turnkeeper.panel"):
        namespace: dict[str, object] = {}
        exec(f"from {module_name} import *", namespace)
        namespace.pop("__builtins__")
        assert sorted(namespace) == sorted(EXPORTS[module_name]), module_name


def test_the_entry_points_are_pinned_and_resolve() -> None:
    project = tomllib.loads((CLIENT / "pyproject.toml").read_text())["project"]
    assert project["scripts"] == ENTRY_POINTS, f"the command-line entry points changed. {DECISION}"
    for target in ENTRY_POINTS.values():
        module_name, _, attribute = target.partition(":")
        assert callable(getattr(importlib.import_module(module_name), attribute)), target
    for module_name in MAIN_MODULES:
        assert importlib.util.find_spec(module_name) is not None, module_name


@pytest.mark.parametrize(
    ("imports", "not_loaded"),
    [
        # prefer_iomgr (turnkeeper._io_engine) must run before grpc is first imported.
        ("import turnkeeper, turnkeeper._io_engine", "grpc"),
        ("import turnkeeper.panel.follower; from turnkeeper.panel import TurnFollower", "nats"),
        ("from turnkeeper.agent import RemoteSaver, effect_key, journal_replies", "nats"),
    ],
)
def test_the_package_exports_are_lazy(imports: str, not_loaded: str) -> None:
    check = f"import sys; {imports}; assert {not_loaded!r} not in sys.modules"
    subprocess.run([sys.executable, "-c", check], check=True, timeout=120)
