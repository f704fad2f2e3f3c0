"""Which transport each API of RemoteSaver takes: the environment variable sets
both; without it the async API (the bridge's) streams and the blocking API makes
unary calls (its stream would cost the graph process a thread hop per message);
the constructor's argument wins over both."""

from __future__ import annotations

import pytest
from turnkeeper.agent.saver import STREAM_ENV, RemoteSaver

NOWHERE = "127.0.0.1:1"  # nothing is called: channels open on first use


def _transports(saver: RemoteSaver) -> tuple[bool, bool]:
    try:
        return saver.stream, saver.sync_stream
    finally:
        saver.close()


def test_the_variable_sets_both_apis(saver_transport: str) -> None:
    streams = saver_transport == "stream"
    assert _transports(RemoteSaver(NOWHERE)) == (streams, streams)


def test_without_the_variable_only_the_async_api_streams(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(STREAM_ENV)
    assert _transports(RemoteSaver(NOWHERE)) == (True, False)


@pytest.mark.parametrize("stream", [True, False])
def test_the_argument_wins(stream: bool) -> None:
    assert _transports(RemoteSaver(NOWHERE, stream=stream)) == (stream, stream)
