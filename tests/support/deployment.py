"""A LangGraph API deployment (nats-server, the service with its HTTP port, and a
langgraph.json hosted by `turnkeeper agent`) that many tests share: started once,
on an event loop of its own in a thread, and stopped at the end of the session.
`SharedDeployments` holds one per langgraph.json and host options, on one backend.

A test reaches it over HTTP alone (its `url`): the service lives on the thread's
loop, so no test's loop may call into it. What a shared deployment's tests must not
do: kill, restart or reconfigure any part of it, or count what the whole service
holds (every test on the worker writes to the same service); each works on threads,
runs and assistants of its own."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from turnkeeper_server.app import create_server
from typing_extensions import Unpack

from tests.support.langgraph_host import HostOptions, hosted
from tests.support.nats import NatsServer
from tests.support.service import make_settings
from tests.support.service_thread import LoopThread


class SharedDeployment(LoopThread[tuple[str, str]]):
    """Started by `start()`, ended by `stop()`; `url` is its LangGraph API's,
    `address` its gRPC services'."""

    def __init__(
        self,
        config: Path,
        data_dir: Path,
        *,
        database_url: str | None,
        replica: str,
        **options: Unpack[HostOptions],
    ) -> None:
        super().__init__("shared-deployment", timeout=120)
        self._config = config
        self._data_dir = data_dir
        self._database_url = database_url
        self._replica = replica
        self._options = options
        self._nats = NatsServer()
        self.url = ""
        self.address = ""

    def start(self) -> tuple[str, str]:
        """Returns once the host serves (its startup Redrive done)."""
        self._nats.start()
        self.url, self.address = super().start()
        return self.url, self.address

    def stop(self) -> None:
        super().stop()
        self._nats.stop()

    @asynccontextmanager
    async def serving(self) -> AsyncIterator[tuple[str, str]]:
        settings = make_settings(
            self._data_dir,
            nats_url=self._nats.url,
            http_listen="127.0.0.1:0",
            database_url=self._database_url,
        )
        service = await create_server(settings)
        try:
            assert service.web is not None
            async with hosted(
                self._config, service, self._nats, replica=self._replica, **self._options
            ):
                yield service.web.url.rstrip("/"), service.address
        finally:
            await service.stop(0)


class SharedDeployments:
    """The deployments of one backend, each started by the first test that asks for
    its langgraph.json and host options; `stop()` ends them all."""

    def __init__(self, data_dir: Path, database_url: Callable[[], str | None]) -> None:
        self._data_dir = data_dir
        self._database_url = database_url
        self._started: dict[tuple[Path, str, tuple[tuple[str, object], ...]], SharedDeployment] = {}

    def get(
        self, config: Path, *, replica: str, **options: Unpack[HostOptions]
    ) -> SharedDeployment:
        key = (config, replica, tuple(sorted(options.items())))
        deployment = self._started.get(key)
        if deployment is None:
            data_dir = self._data_dir / f"deployment-{len(self._started)}"
            data_dir.mkdir()
            deployment = SharedDeployment(
                config, data_dir, database_url=self._database_url(), replica=replica, **options
            )
            deployment.start()
            self._started[key] = deployment
        return deployment

    def stop(self) -> None:
        for deployment in self._started.values():
            deployment.stop()
