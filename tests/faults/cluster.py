"""The system under test, all real processes: a nats-server, the service (a
SIGKILL-able subprocess restarted on the same port and data dir; on PostgreSQL,
several replicas of it on one database, which the clients and agents are given all
of), and a pool of agent replicas (tests/faults/agent.py) that a supervisor
restarts whenever one dies, from a warm spare that already imported everything.
The service serves its HTTP side too (the LangGraph API, for the crons) and
delivers webhooks, signed, to a receiver process on the loopback address.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import re
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import nats
from grpc import aio
from nats.aio.client import Client
from turnkeeper._connection import CONNECT_TIMEOUT_MS
from turnkeeper._targets import ChannelTarget, resolve
from turnkeeper.client import AsyncTurnkeeperClient, ConnectionOptions
from turnkeeper.v1 import checkpoints_pb2_grpc, store_pb2, store_pb2_grpc, turns_pb2_grpc
from turnkeeper_server.messaging.credentials import write_config
from turnkeeper_server.security.auth import parse_role, token_hash

from tests.faults.mirror import PREFIX, Mirror
from tests.faults.storage import PostgresStorage, SqliteStorage, Storage
from tests.support.agents import Agent
from tests.support.nats import NatsServer
from tests.support.postgres import PostgresCluster
from tests.support.procs import ServiceProcess, spawn_python, start_listener, stop_listener
from tests.support.relay import Relay
from tests.support.security import bearer_interceptors, write_tokens
from tests.support.webhook_receiver import service_flags

REPO = Path(__file__).resolve().parents[2]
AGENT = "faults"
# The deployment's webhook secret (the receiver checks every signature with it).
WEBHOOK_SECRET = "turnkeeper-faults-webhook-secret-0123"
_HTTP = re.compile(r"console and HTTP API on (http://\S+?)/?$")

# The harness reconnects fast after a service restart (grpc's default backoff
# grows to minutes); the agents keep the client's defaults, as deployed. grpc reads
# "min_reconnect_backoff_ms" as a connection attempt's timeout: the client's own
# (decision 760), so a slow handshake under load is not taken for a dead service.
FAST_RECONNECT: list[tuple[str, object]] = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", CONNECT_TIMEOUT_MS),
    ("grpc.max_reconnect_backoff_ms", 500),
]


@dataclass(frozen=True)
class HarnessOptions(ConnectionOptions):
    def channel_options(self, target: ChannelTarget | None = None) -> list[tuple[str, object]]:
        return [*ConnectionOptions.channel_options(self, target), *FAST_RECONNECT]


class _Relay(Relay):
    """The relay, plus a stop that waits for the links it cut to wind down (a
    handler task still running when the loop closes is reported as an error)."""

    def __init__(self, upstream_port: int) -> None:
        super().__init__(upstream_port)
        self._handlers: set[asyncio.Task[object]] = set()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            await super()._accept(reader, writer)
        finally:
            self._handlers.discard(task)

    async def stop(self) -> None:
        await super().stop()
        if self._handlers:
            await asyncio.wait(self._handlers, timeout=5)


@dataclass
class Slot:
    """One replica name; its process changes with every restart."""

    replica: str
    current: Agent | None = None
    spare: Agent | None = None
    up: asyncio.Event = field(default_factory=asyncio.Event)
    paused: bool = False
    # Set by a kill from the harness (not by a poison turn), with how long the
    # replica then stays down.
    killed: bool = False
    restart_after: float = 0.0
    supervisor: asyncio.Task[None] | None = None
    # The graph version label its processes serve (a rolling upgrade changes it),
    # and whether the harness is replacing it with a new version now.
    label: str = "v1"
    upgrading: bool = False


@dataclass
class Deaths:
    harness: int = 0
    poison: int = 0
    other: list[str] = field(default_factory=list)


class AgentPool:
    def __init__(self, cluster: Cluster, replicas: int) -> None:
        self.cluster = cluster
        self.slots = [Slot(f"r{i}") for i in range(replicas)]
        self.deaths = Deaths()
        self.closing = False
        self.processes = 0
        self._changed = asyncio.Event()

    async def _spawn(self, slot: Slot) -> Agent:
        c = self.cluster
        env = {
            **os.environ,
            "TURNKEEPER_ADDRESS": c.address,
            "NATS_URL": c.nats.url,
            "TURNKEEPER_AGENT": AGENT,
            # Its token is all an agent is given: its NATS user derives from it.
            "TURNKEEPER_TOKEN": c.tokens["agent"],
            "TURNKEEPER_REPLICA": slot.replica,
            "TURNKEEPER_VERSION_LABEL": slot.label,
            "TURNKEEPER_HEALTH_LISTEN": "127.0.0.1:0",
            "TURNKEEPER_SHUTDOWN_GRACE": "1",
            "FAULT_DIR": str(c.records),
            "FAULT_RECEIVER_URL": c.receiver_url,
            "FAULT_STEP_SECONDS": str(c.step_seconds),
            "WAIT_FOR_GO": "1",
            "PYTHONUNBUFFERED": "1",
        }
        child = await spawn_python("-m", "tests.faults.agent", cwd=REPO, env=env)
        self.processes += 1
        return Agent(child, slot.replica)

    async def _go(self, slot: Slot) -> None:
        agent = slot.spare if slot.spare is not None else await self._spawn(slot)
        slot.spare = None
        await agent.go()
        slot.current = agent
        slot.spare = await self._spawn(slot)  # warms while this one works
        slot.up.set()
        self._changed.set()

    async def start(self) -> None:
        await asyncio.gather(*(self._go(slot) for slot in self.slots))
        for slot in self.slots:
            assert slot.current is not None
            await slot.current.ready()
            slot.supervisor = asyncio.create_task(self._supervise(slot))

    async def _supervise(self, slot: Slot) -> None:
        while not self.closing:
            agent = slot.current
            assert agent is not None
            rc = await agent.wait_exited()
            slot.up.clear()
            self._changed.set()
            await agent.wait_exit()
            self.cluster.archive(agent)
            if self.closing:
                return
            if slot.upgrading:
                slot.upgrading = False  # stopped for its upgrade: expected
            elif slot.killed:
                self.deaths.harness += 1
            elif rc == -signal.SIGKILL:
                self.deaths.poison += 1  # the only other SIGKILL: a poison turn's own
            else:
                self.deaths.other.append(f"{slot.replica} pid {agent.proc.pid} exited {rc}")
            delay, slot.restart_after, slot.killed = slot.restart_after, 0.0, False
            if delay:
                await asyncio.sleep(delay)  # the injection: the replica stays down
            await self._go(slot)

    def killable(self) -> list[Slot]:
        return [
            s
            for s in self.slots
            if s.up.is_set() and not s.paused and not s.killed and not s.upgrading
        ]

    async def any_killable(self) -> list[Slot]:
        while not (live := self.killable()):
            self._changed.clear()
            await self._changed.wait()
        return live

    async def upgrade(self, slot: Slot, label: str) -> Agent:
        """Replace the slot's replica with one serving version `label`, as a rolling
        deploy with a surge does: its warm spare of the old version dropped, one of
        version `label` started and imported while the old process still serves,
        then the old one stopped (SIGTERM, its shutdown grace); the supervisor starts
        the new one from that spare. A replica killed meanwhile (by the injector or
        a poison turn) comes back on `label` first, and is the one replaced."""
        assert slot.current is not None
        slot.label = label
        if slot.spare is not None:
            spare, slot.spare = slot.spare, None
            await spare.close()
            self.cluster.archive(spare)
        new = await self._spawn(slot)
        await new.wait_line(lambda line: line == "imported")
        await slot.up.wait()
        # No await from here to the SIGTERM: the supervisor cannot move in between.
        stale, slot.spare = slot.spare, new
        slot.upgrading = True
        old = slot.current
        assert old is not None
        old.signal(signal.SIGTERM)
        if stale is not None:  # the supervisor's, made when it restarted a killed one
            await stale.close()
            self.cluster.archive(stale)
        return old

    async def replaced(self, slot: Slot, old: Agent) -> None:
        """Until the slot runs a process other than `old`, and it is up."""
        while slot.current is old or not slot.up.is_set():
            self._changed.clear()
            await self._changed.wait()

    def kill(self, slot: Slot, restart_after: float) -> None:
        """SIGKILL the slot's process; its supervisor restarts the replica."""
        assert slot.current is not None
        slot.killed = True
        slot.restart_after = restart_after
        slot.current.signal(signal.SIGKILL)

    async def all_up(self, timeout: float) -> None:
        await asyncio.wait_for(asyncio.gather(*(s.up.wait() for s in self.slots)), timeout)

    async def close(self) -> None:
        self.closing = True
        agents = [a for s in self.slots for a in (s.current, s.spare) if a is not None]
        await asyncio.gather(*(a.close() for a in agents), return_exceptions=True)
        for slot in self.slots:
            if slot.supervisor is not None:
                slot.supervisor.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await slot.supervisor
        for agent in agents:
            self.cluster.archive(agent)


class Cluster:
    """NATS (with the service's relay), the service, the agents, and the harness's
    own connections to them."""

    def __init__(
        self,
        workdir: Path,
        *,
        replicas: int,
        lease_seconds: float,
        step_seconds: float,
        backend: str = "sqlite",
        services: int = 2,
        version_policy: str = "",
    ) -> None:
        self.workdir = workdir
        self.data_dir = workdir / "data"
        self.records = workdir / "records"
        self.logs = workdir / "logs"
        for d in (self.data_dir, self.records, self.logs):
            d.mkdir(parents=True, exist_ok=True)
        self.step_seconds = step_seconds
        # The agent's version policy (docs/versions.md); empty: the service's default.
        self.version_policy = version_policy
        # Deployed as production is secured: tokens on every surface, and on NATS a
        # user per token allowed only its own subjects (decisions 174 and 175). The
        # harness is an admin; the agents hold the one agent token.
        self.tokens = write_tokens(
            workdir / "tokens.jsonl", {"harness": "admin", "agent": f"agent:{AGENT}"}
        )
        nats_config, service_user = write_config(
            workdir / "nats",
            {token_hash(t): parse_role(role) for t, role in self._roles().items()},
            prefix=PREFIX,
            namespace="default",
        )
        self.service_nats = service_user
        self.nats = NatsServer(config_file=nats_config, log_file=self.logs / "nats-server.log")
        self.relay: Relay | None = None
        self.backend = backend
        # SQLite: one service (one writer). PostgreSQL: `services` replicas.
        self.service_count = services if backend == "postgres" else 1
        self.services: list[ServiceProcess] = []
        self.postgres: PostgresCluster | None = None
        self._postgres_stack = contextlib.ExitStack()
        self.storage: Storage = SqliteStorage(self.turns_db, self.sessions_db)
        self.lease_seconds = lease_seconds
        self.pool = AgentPool(self, replicas)
        self.mirror = Mirror(order_by_id=backend == "postgres")
        self.nc: Client | None = None
        self.client: AsyncTurnkeeperClient | None = None
        self.channel: aio.Channel | None = None
        self.turns: turns_pb2_grpc.TurnServiceAsyncStub | None = None
        self.checkpoints: checkpoints_pb2_grpc.CheckpointServiceAsyncStub | None = None
        self._archived: set[Agent] = set()
        # The receiver step3's effect acts on (tests/support/receiver.py).
        self.receiver_log = workdir / "receiver.log"
        self.receiver: asyncio.subprocess.Process | None = None
        self.receiver_url = ""
        # The webhooks' receiver (tests/support/webhook_receiver.py).
        self.hooks: asyncio.subprocess.Process | None = None
        self.hooks_url = ""
        self.store: store_pb2_grpc.StoreServiceAsyncStub | None = None

    def _roles(self) -> dict[str, str]:
        """Each token of the tokens file and its role."""
        return {self.tokens["harness"]: "admin", self.tokens["agent"]: f"agent:{AGENT}"}

    @property
    def service(self) -> ServiceProcess | None:
        """The first (on SQLite the only) service process."""
        return self.services[0] if self.services else None

    @property
    def address(self) -> str:
        """Every service replica's address, for clients that fail over."""
        assert self.services
        return ",".join(s.address for s in self.services)

    @property
    def turns_db(self) -> Path:
        return self.data_dir / "turns.db"

    @property
    def sessions_db(self) -> Path:
        return self.data_dir / "sessions.db"

    async def start_receiver(self) -> None:
        self.receiver, self.receiver_url = await start_listener(
            "tests.support.receiver", str(self.receiver_log)
        )

    async def start_hooks(self) -> None:
        self.hooks, self.hooks_url = await start_listener(
            "tests.support.webhook_receiver", WEBHOOK_SECRET
        )

    def http_urls(self) -> list[str]:
        """The HTTP side of each service replica running, as its latest start said."""
        urls = []
        for service in self.services:
            if service.process is None or service.process.poll() is not None:
                continue
            for line in reversed(service.log):
                if found := _HTTP.search(line):
                    urls.append(found.group(1))
                    break
        return urls

    async def store_items(self, namespace: tuple[str, ...]) -> dict[str, dict[str, object]]:
        """The store's items in `namespace`, key -> value (the harness is an admin)."""
        assert self.store is not None
        search = store_pb2.StoreSearch(namespace_prefix=list(namespace), limit=1000)
        response = await self.store.StoreBatch(
            store_pb2.StoreBatchRequest(operations=[store_pb2.StoreOperation(search=search)])
        )
        return {i.key: json.loads(i.value_json) for i in response.results[0].items}

    async def start(self) -> None:
        secret = self.workdir / "webhook-secret"
        secret.write_text(WEBHOOK_SECRET + "\n")
        self.nats.start()
        self.relay = _Relay(self.nats.port)
        await self.relay.start()
        database_url = None
        if self.backend == "postgres":
            self.postgres = self._postgres_stack.enter_context(PostgresCluster.temporary())
            database_url = self.postgres.new_database()
            self.storage = PostgresStorage(database_url)
        for i in range(self.service_count):
            user = self.service_nats
            service = ServiceProcess(
                self.data_dir / f"s{i}" if database_url else self.data_dir,
                # The service's own NATS user (the one that may publish events).
                nats_url=self.relay.url.replace("nats://", f"nats://{user.user}:{user.password}@"),
                extra=[
                    "--lease-seconds",
                    str(self.lease_seconds),
                    "--tokens-file",
                    str(self.workdir / "tokens.jsonl"),
                    # The LangGraph API (crons), and webhooks to the loopback receiver.
                    "--http-port",
                    "0",
                    *service_flags(secret),
                    *(
                        ["--version-policy", f"{AGENT}={self.version_policy}"]
                        if self.version_policy
                        else []
                    ),
                ],
                database_url=database_url,
            )
            self.services.append(service)
        # The receivers start while the first service does: neither needs the other
        # (a webhook's URL comes with its cron, the effect's with the agents). The
        # other replicas start after it, once it has made the database's schema.
        first, *others = self.services
        await asyncio.gather(
            self.start_receiver(), self.start_hooks(), asyncio.to_thread(first.start)
        )
        for service in others:
            await asyncio.to_thread(service.start)
        self.nc = await nats.connect(
            self.nats.url,
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.1,
            error_cb=self._nats_error,
            # The harness watches NATS as the service's user: it publishes its own
            # routing probes on the turns' subjects (tests/faults/mirror.py).
            **self.service_nats.connect_kwargs(),
        )
        await self.mirror.subscribe(self.nc)
        self.client = AsyncTurnkeeperClient(
            HarnessOptions(target=self.address, bearer_token=self.tokens["harness"])
        )
        # The harness's own stubs, balanced over the replicas like the typed client.
        target = resolve(self.address)
        balance = (
            "grpc.service_config",
            json.dumps({"loadBalancingConfig": [{"round_robin": {}}]}),
        )
        self.channel = aio.insecure_channel(
            target.target,
            options=[*FAST_RECONNECT, balance],
            interceptors=bearer_interceptors(self.tokens["harness"]),
        )
        self.turns = turns_pb2_grpc.TurnServiceStub(self.channel)
        self.checkpoints = checkpoints_pb2_grpc.CheckpointServiceStub(self.channel)
        self.store = store_pb2_grpc.StoreServiceStub(self.channel)
        await self.pool.start()

    async def _nats_error(self, exc: Exception) -> None:
        """Connection errors while NATS is down are the fault at work, not news."""

    # -- faults that concern the whole cluster ------------------------------------------

    def kill_service(self, index: int = 0) -> None:
        self.services[index].kill()

    async def restart_service(self, index: int = 0) -> None:
        await asyncio.to_thread(self.services[index].start)

    async def stop_postgres(self) -> None:
        assert self.postgres is not None
        await asyncio.to_thread(self.postgres.stop_server)

    async def start_postgres(self) -> None:
        assert self.postgres is not None
        await asyncio.to_thread(self.postgres.start_server)

    async def stop_nats(self, kill: bool) -> None:
        """Cut the service off NATS, make sure we received all it published, then
        stop (or SIGKILL) the server. The cut catches a flush in flight: the relay
        holds from the service's next PING (an outbox batch's or a notice's) and
        cuts once it holds one, or after a second without. A flush waiting when its
        connection was cut is what once stopped the outbox for good (decision 500)."""
        assert self.relay is not None and self.nc is not None
        self.relay.hold(until=b"PING\r\n")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.relay.holding.wait(), 1.0)
        self.relay.shut()
        await self.mirror.routed(self.nc)
        if kill:
            self.nats.kill()
        else:
            self.nats.stop()

    async def start_nats(self) -> None:
        """Start NATS on the same port; let the service back in once we are."""
        assert self.relay is not None and self.nc is not None
        # On this thread: nats-server dies with the thread that started it (PDEATHSIG).
        self.nats.start()
        await self.mirror.routed(self.nc)
        self.relay.open()

    # -- reading the files ------------------------------------------------------------------

    async def until(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Until ``predicate()`` holds, for a state of another process that offers
        nothing to await (a table of the service's files): a bounded poll."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not predicate():
            if loop.time() > deadline:
                return False
            await asyncio.sleep(0.05)
        return True

    # -- logs -------------------------------------------------------------------------------

    def archive(self, agent: Agent) -> None:
        """Keep an agent process's output under logs/ (once per process). By the
        process, not its pid: a campaign starts hundreds of processes, and on a busy
        machine the pids come round again within one run."""
        if agent in self._archived:
            return
        self._archived.add(agent)
        path = self.logs / f"agent-{agent.name}-{agent.proc.pid}.log"
        again = itertools.count(2)
        while path.exists():
            path = self.logs / f"agent-{agent.name}-{agent.proc.pid}-{next(again)}.log"
        path.write_text("\n".join(agent.lines) + "\n")

    async def close(self) -> None:
        await self.pool.close()
        if self.client is not None:
            await self.client.close()
        if self.channel is not None:
            await self.channel.close(None)
        if self.nc is not None:
            with contextlib.suppress(Exception):
                await self.nc.close()
        for i, service in enumerate(self.services):
            if service.process is not None:
                with contextlib.suppress(Exception):
                    service.terminate()
                service.kill()
            name = "service.log" if len(self.services) == 1 else f"service-{i}.log"
            (self.logs / name).write_text("\n".join(service.log) + "\n")
        self.storage.close()
        if self.relay is not None:
            await self.relay.stop()
        self.nats.stop()
        self._postgres_stack.close()
        for proc in (self.receiver, self.hooks):
            await stop_listener(proc)
