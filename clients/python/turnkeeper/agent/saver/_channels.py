"""RemoteSaver's connections: one blocking client, one aio client per event loop,
and the checkpoint streams of each (turnkeeper.agent.saver._stream)."""

from __future__ import annotations

import asyncio
import threading
import weakref

from turnkeeper.agent.saver._stream import AsyncRunStream, LoopStreams, RunKey, RunStreams
from turnkeeper.client import AsyncTurnkeeperClient, ConnectionOptions, TurnkeeperClient


class Channels:
    """The connections of one saver (shared by its ``with_allowlist`` clones): one
    blocking client, and one aio client per event loop."""

    def __init__(self, options: ConnectionOptions, shared: bool = False) -> None:
        self.options = options
        # One checkpoint stream per event loop for every run, not one per run.
        self.shared = shared
        self._lock = threading.Lock()
        self._sync: TurnkeeperClient | None = None
        # Weak keys: a loop that is garbage-collected takes its client with it, and
        # grpc closes the core channel of a collected aio channel.
        self._async: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncTurnkeeperClient]
        self._async = weakref.WeakKeyDictionary()
        self._sync_streams: LoopStreams | None = None
        self._async_streams: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, RunStreams[AsyncRunStream]
        ] = weakref.WeakKeyDictionary()
        self._closed = False

    def _check_open(self) -> None:
        """Under the lock: a closed saver opens no more clients or streams."""
        if self._closed:
            raise RuntimeError("RemoteSaver is closed")

    def sync(self) -> TurnkeeperClient:
        with self._lock:
            self._check_open()
            if self._sync is None:
                self._sync = TurnkeeperClient(self.options)
            return self._sync

    def aio(self) -> AsyncTurnkeeperClient:
        loop = asyncio.get_running_loop()
        with self._lock:
            self._check_open()
            client = self._async.get(loop)
            if client is None:
                client = self._async[loop] = AsyncTurnkeeperClient(self.options)
            return client

    def sync_streams(self) -> LoopStreams:
        with self._lock:
            self._check_open()
            if self._sync_streams is None:
                self._sync_streams = LoopStreams(self.options, self.shared)
            return self._sync_streams

    def aio_stream(self, key: RunKey) -> AsyncRunStream:
        loop = asyncio.get_running_loop()
        # Every message of a run asks: the loop's streams, once made, without the
        # lock (close() empties the map, so a closed saver takes the path below).
        streams = self._async_streams.get(loop)
        if streams is not None:
            return streams.get(key)
        client = self.aio()
        with self._lock:
            streams = self._async_streams.get(loop)
            if streams is None:
                streams = self._async_streams[loop] = RunStreams(
                    lambda: AsyncRunStream(client, self.shared), self.shared
                )
        return streams.get(key)

    async def aclose_streams(self) -> None:
        """Close this loop's streams and wait until grpc has finished with them."""
        with self._lock:
            streams = self._async_streams.pop(asyncio.get_running_loop(), None)
        if streams is not None:
            await streams.aclose()

    def drop_aio_stream(self, key: RunKey) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        with self._lock:
            streams = self._async_streams.get(loop)
        if streams is not None:
            streams.drop(key)

    def close(self) -> list[AsyncTurnkeeperClient]:
        """Close the blocking client and every aio client that can be closed from
        here; return the current loop's aio client for the caller to await."""
        with self._lock:
            self._closed = True
            loop_streams = self._sync_streams
            run_streams = list(self._async_streams.items())
            self._sync_streams = None
            self._async_streams.clear()
        if loop_streams is not None:
            loop_streams.close()
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        for loop, streams in run_streams:
            # A grpc.aio call is cancelled on its own loop; the readers then end.
            if loop is running:
                streams.close()
            elif loop.is_running():
                loop.call_soon_threadsafe(streams.close)
        with self._lock:
            sync, self._sync = self._sync, None
            clients = list(self._async.items())
            self._async.clear()
        if sync is not None:
            sync.close()
        try:
            current: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            current = None
        mine: list[AsyncTurnkeeperClient] = []
        for loop, client in clients:
            if loop is current:
                mine.append(client)
            elif loop.is_running():
                # A loop in another thread: close there, without waiting for it.
                asyncio.run_coroutine_threadsafe(client.close(), loop)
            # A loop that is not running has no call in flight on the channel, and
            # is not ours to run; dropping the client lets grpc close the core
            # channel when it is collected (grpc.aio.Channel.__del__).
        return mine
