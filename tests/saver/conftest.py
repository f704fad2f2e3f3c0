"""Every saver test runs on both of RemoteSaver's transports: the checkpoint stream
per run and one unary call per operation. The switch is the environment variable,
so savers built inside the tests, and agents started as subprocesses, follow it."""

from __future__ import annotations

import pytest
from turnkeeper.agent.saver import STREAM_ENV


@pytest.fixture(autouse=True, params=["stream", "unary"])
def saver_transport(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(STREAM_ENV, "1" if request.param == "stream" else "0")
    return str(request.param)
