"""OpenTelemetry: one trace for one turn across the panel, the bridge, the agent's
client and the service (tests/support/traced_turn.py, in a process of its own with
the SDK's in-memory exporter); and nothing at all while tracing is off."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from turnkeeper import _tracing as tracing

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

ROOT = Path(__file__).resolve().parents[3]


async def traced_turn(
    workdir: Path, database_url: str | None, transport: str = "stream"
) -> list[dict[str, Any]]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.support.traced_turn",
        str(workdir),
        *([database_url] if database_url else []),
        cwd=ROOT,
        # Unary: each of the run's calls is a span of its own. Stream: the run's
        # checkpoint stream is one span, its messages (appends, puts) inside it.
        env={**os.environ, "TURNKEEPER_SAVER_STREAM": "1" if transport == "stream" else "0"},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 90)
    assert proc.returncode == 0, err.decode()[-3000:]
    return [json.loads(line) for line in out.decode().splitlines() if line.startswith("{")]


def mirrored(lines: list[dict[str, Any]]) -> list[dict[str, str]]:
    return [line["mirrored"] for line in lines if "mirrored" in line]


# The outbox rows keep their trace context in either store's transaction.
@pytest.mark.both_backends
@pytest.mark.parametrize("transport", ["stream", "unary"])
async def test_one_turn_is_one_trace_across_panel_bridge_agent_and_service(
    tmp_path: Path, database_url: str | None, transport: str
) -> None:
    lines = await traced_turn(tmp_path, database_url, transport)
    spans = [line for line in lines if "name" in line]
    by_id = {s["span_id"]: s for s in spans}
    (root,) = [s for s in spans if s["name"] == "panel"]
    trace_id = root["trace_id"]
    turn = [s for s in spans if s["trace_id"] == trace_id]

    def one(name: str, kind: str) -> dict[str, Any]:
        found = [s for s in turn if s["name"] == name and s["kind"] == kind]
        assert found, f"no {kind} span {name} in the turn's trace: {turn}"
        return found[0]

    # The panel's request, handled by the bridge as a child of it ...
    sent = one("responses/create", "CLIENT")
    handled = one("responses/create", "SERVER")
    assert sent["parent"] == root["span_id"]
    assert handled["parent"] == sent["span_id"]
    # ... whose gRPC calls (the agent's client) the service continues, through the
    # turn's whole run to its FinishTurn.
    for rpc in ("TurnService/StartTurn", "TurnService/FinishTurn"):
        client = one(f"turnkeeper.v1.{rpc}", "CLIENT")
        server = one(f"turnkeeper.v1.{rpc}", "SERVER")
        assert server["parent"] == client["span_id"], rpc
        assert by_id[client["parent"]] is handled, rpc
    # The run's events and checkpoints: a call each (unary), or the messages of the
    # run's one checkpoint stream, opened inside the bridge's handling of the turn.
    rpcs = (
        ("TurnService/AppendEvents", "CheckpointService/PutCheckpoint")
        if transport == "unary"
        else ("CheckpointService/CheckpointStream",)
    )
    for rpc in rpcs:
        client = one(f"turnkeeper.v1.{rpc}", "CLIENT")
        server = one(f"turnkeeper.v1.{rpc}", "SERVER")
        assert server["parent"] == client["span_id"], rpc
        ancestors = []
        node = client
        while node.get("parent") in by_id:
            node = by_id[node["parent"]]
            ancestors.append(node)
        assert handled in ancestors, rpc

    # The events the outbox mirrored to NATS carry the trace context of the call
    # that wrote them: this turn's trace, a span of the service.
    headers = mirrored(lines)
    assert headers, "no event was mirrored"
    for header in headers:
        version, trace, span, _flags = header["traceparent"].split("-")
        assert (version, trace) == ("00", trace_id), header
        assert by_id[span]["kind"] == "SERVER", header
        assert header["Nats-Msg-Id"].isdigit()

    # An operator's ResumeDetached: the service hands the turn to the bridge over
    # NATS (turnkeeper/execute, trace context in the headers), and the bridge's claim
    # and the rest of the run continue the operator's trace.
    (operator,) = [s for s in spans if s["name"] == "operator"]
    resumed = [s for s in spans if s["trace_id"] == operator["trace_id"]]
    names = {(s["name"], s["kind"]) for s in resumed}
    assert ("turnkeeper.v1.TurnService/ResumeDetached", "SERVER") in names, resumed
    (execute,) = [s for s in resumed if s["name"] == "turnkeeper/execute"]
    assert by_id[execute["parent"]]["name"] == "turnkeeper.v1.TurnService/ResumeDetached"
    for rpc in ("TurnService/ClaimTurn", "TurnService/FinishTurn"):
        assert (f"turnkeeper.v1.{rpc}", "SERVER") in names, rpc


def test_traced_outbox_frames_are_what_nats_py_publish_sends() -> None:
    from nats.protocol.command import hpub_cmd
    from turnkeeper_server.messaging.link import _hpub_frames

    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    payload = b'{"seq":1}'
    header = bytearray(
        b"NATS/1.0\r\nNats-Msg-Id: 7\r\ntraceparent: " + parent.encode() + b"\r\n\r\n"
    )
    assert _hpub_frames("vystak.turn.events.t1", [(7, payload)], parent, 1 << 20) == [
        hpub_cmd("vystak.turn.events.t1", "", header, payload)
    ]


def test_tracing_is_off_without_an_sdk_provider() -> None:
    # The suite's process installs none: no interceptor, no span, nothing per call.
    assert not tracing.active()
    assert tracing.client_interceptors() == []
    with tracing.client_span("responses/create") as headers:
        assert headers is None
    assert not tracing.enabled_by_env({})
    assert tracing.enabled_by_env({"OTEL_TRACES_EXPORTER": "otlp"})
    assert not tracing.enabled_by_env({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"})
