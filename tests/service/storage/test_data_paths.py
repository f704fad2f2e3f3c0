"""Where the two SQLite files live, and which source chose each path.

Per file, first match wins: ``--data-dir``, the file's env override
(``VYSTAK_TURNS_PATH`` / ``VYSTAK_SESSIONS_PATH``), the deployed data dir
(``TURNKEEPER_DATA_DIR``, ``/data`` when unset) when writable, then a private
directory in the temp dir (``turnkeeper-<uid>``, 0700) with a warning; a fallback
directory or kept file another user could have planted is refused (decision 183). The deployed data dir is injected through ``TURNKEEPER_DATA_DIR`` (a
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
import stat
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from turnkeeper_server.config import (
    DATA_DIR_ENV,
    SESSIONS_ENV,
    TURNS_ENV,
    private_fallback_dir,
    resolve_paths,
)

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
    private = scratch / f"turnkeeper-{os.geteuid()}"
    assert resolve_paths(env={DATA_DIR_ENV: str(missing)}) == (
        private / "turns.db",
        private / "sessions.db",
    )
    assert stat.S_IMODE(private.stat().st_mode) == 0o700
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2
    assert all(str(missing) in w and "does not survive a reboot" in w for w in warnings)
    assert TURNS_ENV in warnings[0] and SESSIONS_ENV in warnings[1]
    assert all(m.endswith("(chosen by the temp-dir fallback)") for m in chosen_by(caplog))


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temp dir of the test's own, and no writable deployed data dir."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(scratch))
    monkeypatch.setattr("turnkeeper_server.config.DEPLOYED_DATA_DIR", tmp_path / "no-data")
    return scratch


def test_a_fresh_fallback_is_created_owner_only_whatever_the_umask(scratch: Path) -> None:
    old = os.umask(0)
    try:
        turns, _ = resolve_paths(env={})
    finally:
        os.umask(old)
    assert turns.parent == scratch / f"turnkeeper-{os.geteuid()}"
    assert stat.S_IMODE(turns.parent.stat().st_mode) == 0o700
    # Used again as it is on the next start.
    assert resolve_paths(env={})[0] == turns


@pytest.mark.parametrize(
    "planted", ["turns.db", "sessions.db-wal", "nats-service.password", "nats-server.conf"]
)
def test_a_planted_file_others_can_write_is_refused(scratch: Path, planted: str) -> None:
    private = private_fallback_dir()
    (private / planted).write_text("planted")
    (private / planted).chmod(0o666)
    with pytest.raises(ValueError, match="in the temp-dir fallback") as info:
        resolve_paths(env={})
    message = str(info.value)
    assert f"refusing {private / planted} in the temp-dir fallback" in message
    assert "mode 0666" in message and "--data-dir" in message
    # Owner-only, the same file is the service's own.
    (private / planted).chmod(0o600)
    assert resolve_paths(env={})[0] == private / "turns.db"


def test_a_fallback_others_may_enter_or_a_symlink_is_refused(scratch: Path) -> None:
    private = private_fallback_dir()
    private.chmod(0o777)
    with pytest.raises(ValueError, match=r"its mode is 0777.*chmod 700"):
        resolve_paths(env={})
    private.chmod(0o750)
    with pytest.raises(ValueError, match="its mode is 0750"):
        resolve_paths(env={})
    private.rmdir()
    elsewhere = scratch / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    private.symlink_to(elsewhere)
    with pytest.raises(ValueError, match="it is not a directory"):
        resolve_paths(env={})


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
def test_a_fallback_owned_by_another_user_is_refused(scratch: Path) -> None:
    private = scratch / f"turnkeeper-{os.geteuid()}"
    private.mkdir(mode=0o700)
    os.chown(private, 65534, 65534)
    with pytest.raises(ValueError, match="refusing the temp-dir fallback") as info:
        resolve_paths(env={})
    assert f"owned by uid 65534, not by this user (uid {os.geteuid()})" in str(info.value)
    # A kept file of another user's in our own directory is refused too.
    os.chown(private, os.geteuid(), os.getegid())
    (private / "nats.token").write_text("planted")
    (private / "nats.token").chmod(0o600)
    os.chown(private / "nats.token", 65534, 65534)
    with pytest.raises(ValueError, match="owner uid 65534"):
        resolve_paths(env={})


def test_the_cli_refuses_a_planted_fallback_with_a_message(scratch: Path) -> None:
    private = private_fallback_dir()
    (private / "turns.db").write_text("planted")
    (private / "turns.db").chmod(0o666)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TURNKEEPER_", "VYSTAK_"))}
    env.update(TMPDIR=str(scratch), TURNKEEPER_DATA_DIR=str(scratch / "no-data"))
    done = subprocess.run(
        [sys.executable, "-m", "turnkeeper_server", "--listen", "127.0.0.1:0", "--no-nats"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert f"refusing {private / 'turns.db'} in the temp-dir fallback" in done.stderr
    assert "Traceback" not in done.stderr
    assert (private / "turns.db").read_text() == "planted"


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
