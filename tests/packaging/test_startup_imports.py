"""The service's start-up imports what every deployment uses, not what only some
configure (decision 791): psycopg is the PostgreSQL store's, langgraph_sdk a
langgraph.json `auth`'s. Each cost a process 0.1-0.15 s of CPU at start, paid by every
replica, every `turnkeeper serve` and every test that starts a service."""

from __future__ import annotations

import json
import subprocess
import sys


def loaded_after(module: str) -> set[str]:
    """The modules a fresh interpreter holds once it imported `module`."""
    done = subprocess.run(
        [sys.executable, "-c", f"import json, sys, {module}; print(json.dumps(list(sys.modules)))"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return set(json.loads(done.stdout))


def test_the_service_loads_neither_postgresql_nor_the_auth_sdk_until_configured() -> None:
    loaded = loaded_after("turnkeeper_server.app")
    # The modules that use them are loaded; the libraries wait for their first use.
    assert {"turnkeeper_server.web.langgraph.custom_auth", "turnkeeper_server.metrics"} <= loaded
    optional = {name for name in loaded if name.split(".")[0] in ("psycopg", "langgraph_sdk")}
    assert not optional, f"imported at start: {sorted(optional)}"
