"""Where a service on this machine says its NATS is (turnkeeper._local_services,
decision 306): only a live service's own file, for an address on this machine."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from turnkeeper import _local_services as local_services


@pytest.fixture(autouse=True)
def runtime_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    return tmp_path / "turnkeeper"


def test_published_for_a_loopback_address_and_withdrawn() -> None:
    path = local_services.publish("127.0.0.1:40123", "nats://127.0.0.1:41000")
    assert path is not None and path.stat().st_mode & 0o777 == 0o600
    for target in ("127.0.0.1:40123", "localhost:40123", "dns:///localhost:40123"):
        assert local_services.nats_url_for(target) == "nats://127.0.0.1:41000"
    assert local_services.nats_url_for("10.0.0.7:40123") is None
    assert local_services.nats_url_for("127.0.0.1:40124") is None
    local_services.withdraw(path)
    assert local_services.nats_url_for("127.0.0.1:40123") is None


def test_a_file_whose_process_is_gone_is_ignored(runtime_dir: Path) -> None:
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    path = local_services.publish("127.0.0.1:40125", "nats://127.0.0.1:41001")
    assert path is not None
    path.write_text(json.dumps({"nats_url": "nats://x:1", "pid": int(dead.stdout)}))
    assert local_services.nats_url_for("127.0.0.1:40125") is None


def test_a_file_others_may_write_is_ignored(runtime_dir: Path) -> None:
    path = local_services.publish("127.0.0.1:40126", "nats://127.0.0.1:41002")
    assert path is not None
    path.chmod(0o666)
    assert local_services.nats_url_for("127.0.0.1:40126") is None
