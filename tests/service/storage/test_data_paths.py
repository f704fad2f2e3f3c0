"""Where the two SQLite files live, and which source chose each path.

Per file, first match wins: ``--data-dir``, the file's env override
(``VYSTAK_TURNS_PATH`` / ``VYSTAK_SESSIONS_PATH``), the deployed data dir
(``TURNKEEPER_DATA_DIR``, ``/data`` when unset) when writable, then the temp dir with
a warning. The deployed data dir is injected through ``TURNKEEPER_DATA_DIR`` (a
directory under tmp_path), so no test touches a real ``/data``. The last test runs
the image's own ENTRYPOINT, CMD and ENV from the Dockerfile as a real process: the
env overrides must win there too.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sysconfig
from pathlib import Path

import pytest
from turnkeeper_server.config import DATA_DIR_ENV, SESSIONS_ENV, TURNS_ENV, resolve_paths

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[3]


def chosen_by(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "(chosen by " in r.getMessage()]


def test_each_env_override_wins_over_the_deployed_data_dir(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    deployed = tmp_path / "data"
    deployed.mkdir()
    turns, sessions = tmp_path / "elsewhere" / "t.db", tmp_path / "other" / "s.db"
    caplog.set_level(logging.INFO, logger="turnkeeper_server.config")

    only_turns = {DATA_DIR_ENV: str(deployed), TURNS_ENV: str(turns)}
    assert resolve_paths(env=only_turns) == (turns, deployed / "sessions.db")
    only_sessions = {DATA_DIR_ENV: str(deployed), SESSIONS_ENV: str(sessions)}
    assert resolve_paths(env=only_sessions) == (deployed / "turns.db", sessions)

    assert chosen_by(caplog) == [
        f"turn journal: {turns} (chosen by {TURNS_ENV})",
        f"checkpointer: {deployed / 'sessions.db'} (chosen by {DATA_DIR_ENV})",
        f"turn journal: {deployed / 'turns.db'} (chosen by {DATA_DIR_ENV})",
        f"checkpointer: {sessions} (chosen by {SESSIONS_ENV})",
    ]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_an_explicit_data_dir_flag_wins_over_the_env(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="turnkeeper_server.config")
    env = {TURNS_ENV: str(tmp_path / "t.db"), SESSIONS_ENV: str(tmp_path / "s.db")}
    flag = tmp_path / "flagged"
    assert resolve_paths(flag, env) == (flag / "turns.db", flag / "sessions.db")
    assert flag.is_dir()
    assert all(m.endswith("(chosen by --data-dir)") for m in chosen_by(caplog))


def test_the_deployed_data_dir_is_the_default_when_writable(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.INFO, logger="turnkeeper_server.config")
    deployed = tmp_path / "data"
    deployed.mkdir()
    assert resolve_paths(env={DATA_DIR_ENV: str(deployed)}) == (
        deployed / "turns.db",
        deployed / "sessions.db",
    )
    # Unset, the deployed default is the module's constant (/data in the image).
    monkeypatch.setattr("turnkeeper_server.config.DEPLOYED_DATA_DIR", deployed)
    assert resolve_paths(env={}) == (deployed / "turns.db", deployed / "sessions.db")
    assert chosen_by(caplog)[-2:] == [
        f"turn journal: {deployed / 'turns.db'} (chosen by the deployed default)",
        f"checkpointer: {deployed / 'sessions.db'} (chosen by the deployed default)",
    ]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_without_a_writable_data_dir_the_temp_dir_is_used_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.INFO, logger="turnkeeper_server.config")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(scratch))
    missing = tmp_path / "no-such-dir"
    assert resolve_paths(env={DATA_DIR_ENV: str(missing)}) == (
        scratch / "vystak-turns.db",
        scratch / "vystak-sessions.db",
    )
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2
    assert all(str(missing) in w and "does not survive a reboot" in w for w in warnings)
    assert TURNS_ENV in warnings[0] and SESSIONS_ENV in warnings[1]
    assert all(m.endswith("(chosen by the temp-dir fallback)") for m in chosen_by(caplog))


def dockerfile_exec_form(keyword: str) -> list[str]:
    """The JSON array of a Dockerfile instruction written on one line."""
    found = re.findall(rf"^{keyword} (\[.*\])$", (ROOT / "Dockerfile").read_text(), re.MULTILINE)
    assert len(found) == 1, f"expected one {keyword} in exec form"
    return list(json.loads(found[0]))


def dockerfile_env() -> dict[str, str]:
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    pairs: dict[str, str] = {}
    for line in re.findall(r"^ENV (.*)$", text, re.MULTILINE):
        pairs.update(item.split("=", 1) for item in line.split())
    return pairs


def test_the_images_command_lets_the_env_overrides_win(tmp_path: Path) -> None:
    """The image's ENTRYPOINT + CMD with its ENV, as `docker run -e VYSTAK_...` runs
    it: the files land where the env says, and the log says who chose them."""
    image_env = dockerfile_env()
    assert image_env[DATA_DIR_ENV] == "/data"
    volume = tmp_path / "volume"  # what the container mounts at /data
    volume.mkdir()
    turns, sessions = tmp_path / "mine" / "turns.db", tmp_path / "mine" / "sessions.db"
    turns.parent.mkdir()
    command = dockerfile_exec_form("ENTRYPOINT") + dockerfile_exec_form("CMD")
    assert command[:2] == ["turnkeeper", "serve"]
    scripts = Path(sysconfig.get_path("scripts"))
    argv = [str(scripts / "turnkeeper"), *command[1:]]
    # Loopback on a free port instead of the image's 0.0.0.0:50051; no NATS.
    argv[argv.index("--listen") + 1] = "127.0.0.1:0"
    env = {
        **os.environ,
        **image_env,
        DATA_DIR_ENV: str(volume),
        "TURNKEEPER_METRICS_LISTEN": "127.0.0.1:0",
        TURNS_ENV: str(turns),
        SESSIONS_ENV: str(sessions),
    }
    proc = subprocess.Popen(
        [*argv, "--no-nats"],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith("turnkeeper listening on 127.0.0.1:"), first
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert turns.exists() and sessions.exists()
    assert list(volume.iterdir()) == []
    assert f"turn journal: {turns} (chosen by {TURNS_ENV})" in err
    assert f"checkpointer: {sessions} (chosen by {SESSIONS_ENV})" in err
