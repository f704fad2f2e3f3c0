"""Live tokens through LangGraph's Python SDK, unchanged: a model's tokens reach the
client while the model is still replying (its step's checkpoint not written yet);
a SIGKILL of the agent mid-reply is taken back in the client's terms (a `values`
part with the state the run was rewound to, a `remove` message part for the reply
that will not be settled) before the re-run's parts, so LangGraph's own
add_messages, applied to the parts, ends with an uninterrupted run's messages, each
once; a resume from a position the rewind took back gets the same; the settled
mode (decision 210) still holds tokens until the checkpoint. Message parts carry
what LangGraph's server's carry (recorded from `langgraph dev`, langgraph-api
0.16.7, on this graph).

The model (graphs/chat.py) waits for one byte from the test's gate before each word
after the first, so "the model is mid-reply" is a state the test holds, not a time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from langchain_core.messages import (
    AIMessageChunk,
    RemoveMessage,
    convert_to_messages,
)
from langgraph.graph.message import add_messages
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.schema import StreamPart
from turnkeeper_server.app import TurnkeeperServer
from turnkeeper_server.main import add_serve_arguments, settings_from_args

from tests.support import reference
from tests.support.agents import PATIENCE
from tests.support.langgraph_host import hosted, hosts_for
from tests.support.nats import NatsServer
from tests.support.node import NO_PROXY_ENV, NODE, npm_ci

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

CHAT = Path(__file__).resolve().parent / "graphs" / "chat.json"
REPLY = "one two three four five six"
WORDS = len(REPLY.split(" "))
MODES: Any = ["values", "updates", "messages-tuple"]

# What `langgraph dev` (langgraph-api 0.16.7) sends for this graph: a chunk's keys,
# and a message part's metadata keys for a model's token and for a message a node
# returned. Left out on purpose (docs/langgraph-api.md, "what differs"): the
# reference server's own version and plan (langgraph_api_version, langgraph_plan),
# which turnkeeper is not.
CHUNK_KEYS = {
    "content",
    "additional_kwargs",
    "response_metadata",
    "type",
    "name",
    "id",
    "tool_calls",
    "invalid_tool_calls",
    "usage_metadata",
    "tool_call_chunks",
    "chunk_position",
}
RUN_KEYS = {
    "created_by",
    "graph_id",
    "assistant_id",
    "run_attempt",
    "langgraph_host",
    "langgraph_version",
    "langgraph_api_url",
    "thread_id",
    "run_id",
    "langgraph_step",
    "langgraph_node",
    "langgraph_triggers",
    "langgraph_path",
    "langgraph_checkpoint_ns",
    "ls_integration",
}
TOKEN_KEYS = RUN_KEYS | {"checkpoint_ns", "ls_provider", "ls_model_type", "lc_versions"}
NOT_SENT = {"langgraph_api_version", "langgraph_plan"}


class Gate:
    """The model's gate: each reply connects once; `release(n)` lets n more words
    of the newest reply through."""

    def __init__(self) -> None:
        self.replies: asyncio.Queue[asyncio.StreamWriter] = asyncio.Queue()
        self.server: asyncio.Server | None = None

    async def start(self) -> str:
        async def accept(_r: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self.replies.put(writer)

        self.server = await asyncio.start_server(accept, "127.0.0.1", 0)
        return f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def next_reply(self) -> asyncio.StreamWriter:
        return await asyncio.wait_for(self.replies.get(), PATIENCE)

    @staticmethod
    async def release(reply: asyncio.StreamWriter, words: int) -> None:
        reply.write(b"x" * words)
        await reply.drain()

    def close(self) -> None:
        if self.server is not None:
            self.server.close()


@pytest.fixture
async def gate() -> AsyncIterator[tuple[Gate, str]]:
    g = Gate()
    address = await g.start()
    try:
        yield g, address
    finally:
        g.close()


@pytest.fixture
async def sdk(service: TurnkeeperServer) -> AsyncIterator[LangGraphClient]:
    assert service.web is not None
    client = get_client(url=service.web.url.rstrip("/"))
    try:
        yield client
    finally:
        await client.http.client.aclose()


QUESTION: Any = {"messages": [{"role": "user", "content": "count", "id": "q-1"}]}


def is_token(part: StreamPart) -> bool:
    return part.event == "messages" and part.data[0].get("type") == "AIMessageChunk"


class Collector:
    """A stream read in a task: its parts, and an event per part count reached."""

    def __init__(self, parts: AsyncIterator[StreamPart]) -> None:
        self.parts: list[StreamPart] = []
        self._source = parts
        self._changed = asyncio.Condition()
        self.task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for part in self._source:
            async with self._changed:
                self.parts.append(part)
                self._changed.notify_all()

    async def tokens(self, n: int) -> None:
        """Until n token parts have arrived."""

        async def enough() -> None:
            async with self._changed:
                await self._changed.wait_for(
                    lambda: sum(is_token(p) for p in self.parts) >= n or self.task.done()
                )

        await asyncio.wait_for(enough(), PATIENCE)
        assert sum(is_token(p) for p in self.parts) >= n, self.parts

    async def end(self) -> list[StreamPart]:
        await asyncio.wait_for(self.task, PATIENCE * 2)
        return self.parts


def as_message(data: dict[str, Any]) -> Any:
    if data["type"] == "AIMessageChunk":
        fields = {k: v for k, v in data.items() if k in ("content", "id", "response_metadata")}
        return AIMessageChunk(
            **fields,
            tool_call_chunks=data.get("tool_call_chunks") or [],
            usage_metadata=data.get("usage_metadata"),
        )
    [message] = convert_to_messages([data])
    return message


def apply(messages: Any, parts: list[StreamPart], *, values: bool) -> list[Any]:
    """The parts applied as a client keeping a conversation does: a chunk merged
    into its message by id, a whole message and a removal through add_messages,
    and (`values`) a `values` part replacing the conversation, as useStream does."""
    streamed: dict[str | None, AIMessageChunk] = {}
    for part in parts:
        if part.event == "values" and values:
            messages = list(convert_to_messages(part.data.get("messages", [])))
        if part.event != "messages":
            continue
        data = part.data[0]
        if data["type"] == "remove":
            messages = add_messages(messages, [RemoveMessage(id=data["id"])])  # type: ignore[arg-type]
            continue
        message = as_message(data)
        if isinstance(message, AIMessageChunk):
            # add_messages keeps a chunk as a message: the chunks so far, merged.
            held = streamed.get(message.id)
            message = streamed[message.id] = message if held is None else held + message
        messages = add_messages(messages, [message])
    return [(m.id, m.type, m.content) for m in messages]


def conversation(state: Any) -> list[Any]:
    return [(m["id"], m["type"], m["content"]) for m in state["messages"]]


async def test_tokens_leave_while_the_model_is_still_replying(
    service: TurnkeeperServer,
    nats_server: NatsServer,
    sdk: LangGraphClient,
    gate: tuple[Gate, str],
) -> None:
    g, address = gate
    async with hosted(
        CHAT, service, nats_server, replica="lg-chat", extra_env={"CHAT_GATE": address}
    ):
        thread = await sdk.threads.create()
        stream = Collector(
            sdk.runs.stream(thread["thread_id"], "chat", input=QUESTION, stream_mode=MODES)
        )
        reply = await g.next_reply()
        # The model said its first word and waits for the gate: that word is here,
        # and nothing of the step's checkpoint is (no update, no state with it).
        await stream.tokens(1)
        assert not any(p.event == "updates" for p in stream.parts)
        state: Any = await sdk.threads.get_state(thread["thread_id"])
        assert [m["id"] for m in state["values"].get("messages", [])] in ([], ["q-1"])
        await g.release(reply, WORDS - 1)
        parts = await stream.end()
        text = "".join(p.data[0]["content"] for p in parts if is_token(p))
        assert text == REPLY
        final = await sdk.threads.get_state(thread["thread_id"])
        assert apply([], parts, values=True) == conversation(final["values"])


async def test_the_settled_mode_holds_tokens_until_their_checkpoint(
    service: TurnkeeperServer,
    nats_server: NatsServer,
    sdk: LangGraphClient,
    gate: tuple[Gate, str],
) -> None:
    g, address = gate
    async with hosted(
        CHAT, service, nats_server, replica="lg-chat", extra_env={"CHAT_GATE": address}
    ):
        thread = await sdk.threads.create()
        stream = Collector(
            sdk.runs.stream(
                thread["thread_id"],
                "chat",
                input=QUESTION,
                stream_mode=MODES,
                headers={"X-Turnkeeper-Stream": "settled"},
            )
        )
        reply = await g.next_reply()
        await g.release(reply, WORDS - 1)
        await stream.tokens(1)
        # Sent once the step's checkpoint was durable: the reply is in the state.
        state: Any = await sdk.threads.get_state(thread["thread_id"])
        assert len(state["values"]["messages"]) >= 2, state["values"]
        parts = await stream.end()
        ids = [int(p.id) for p in parts if p.id]
        assert ids == sorted(ids) and max(ids) < 10**9, "settled ids are the journal's seqs"
        assert "".join(p.data[0]["content"] for p in parts if is_token(p)) == REPLY


async def test_message_parts_carry_what_langgraphs_server_sends(
    service: TurnkeeperServer, nats_server: NatsServer, sdk: LangGraphClient
) -> None:
    async with hosted(CHAT, service, nats_server, replica="lg-chat"):
        thread = await sdk.threads.create()
        parts = [
            p
            async for p in sdk.runs.stream(
                thread["thread_id"], "chat", input=QUESTION, stream_mode=MODES
            )
        ]
        tokens = [p.data for p in parts if is_token(p)]
        for chunk, metadata in tokens:
            assert set(chunk) >= CHUNK_KEYS, set(chunk) ^ CHUNK_KEYS
            assert set(metadata) >= TOKEN_KEYS, TOKEN_KEYS - set(metadata)
            assert not NOT_SENT & set(metadata)
            assert metadata["langgraph_node"] == "chat" and metadata["graph_id"] == "chat"
            assert metadata["thread_id"] == thread["thread_id"]
        # The closing chunks: the tool-call chunk and the usage, as the model sent them.
        [calling] = [c for c, _ in tokens if c["tool_call_chunks"]]
        assert calling["tool_call_chunks"][0]["id"] == "call-1"
        assert calling["usage_metadata"]["total_tokens"] == 9
        assert calling["response_metadata"]["finish_reason"] == "stop"
        # A message the node returned without streaming it: a part of its own, whole.
        [(note, note_meta)] = [
            p.data for p in parts if p.event == "messages" and p.data[0]["type"] == "ai"
        ]
        assert note["id"] == "note-2" and note["content"] == "noted 2 messages"
        assert set(note) >= CHUNK_KEYS - {"tool_call_chunks", "chunk_position"}
        assert set(note_meta) >= RUN_KEYS and note_meta["langgraph_node"] == "note"
        # `updates` carry the messages whole.
        [chat_update] = [p.data["chat"] for p in parts if p.event == "updates" and "chat" in p.data]
        [answer] = chat_update["messages"]
        assert answer["usage_metadata"]["total_tokens"] == 9 and "additional_kwargs" in answer


@pytest.mark.both_backends
async def test_a_sigkill_mid_reply_is_taken_back_before_the_rerun(
    service: TurnkeeperServer,
    nats_server: NatsServer,
    sdk: LangGraphClient,
    gate: tuple[Gate, str],
) -> None:
    g, address = gate
    async with hosts_for(
        CHAT, service, nats_server, replica="lg-chat", extra_env={"CHAT_GATE": address}
    ) as hosts:
        first = await hosts.start()
        # The reference: the same question, uninterrupted, streamed as the run
        # below is (a run that asks for no `messages` mode runs its model
        # unstreamed, decision 770, and this model takes the gate only streaming).
        reference_thread = await sdk.threads.create()

        async def uninterrupted() -> Any:
            values = None
            async for part in sdk.runs.stream(
                reference_thread["thread_id"], "chat", input=QUESTION, stream_mode=MODES
            ):
                if part.event == "values":
                    values = part.data
            return values

        waited = asyncio.create_task(uninterrupted())
        await g.release(await g.next_reply(), WORDS - 1)
        reference = await asyncio.wait_for(waited, PATIENCE)

        thread = await sdk.threads.create()
        stream = Collector(
            sdk.runs.stream(thread["thread_id"], "chat", input=QUESTION, stream_mode=MODES)
        )
        reply = await g.next_reply()
        await g.release(reply, 2)
        await stream.tokens(3)
        # Three words out, the model waits for the fourth: the agent dies.
        await first.kill()
        before_crash = len(stream.parts)
        partial_id = next(p.data[0]["id"] for p in stream.parts if is_token(p))
        last_seen = [p.id for p in stream.parts if p.id][-1]
        await hosts.start()
        await g.release(await g.next_reply(), WORDS - 1)
        parts = await stream.end()

        after = parts[before_crash:]
        rewind = [p for p in after if not is_token(p)][:2]
        assert [p.event for p in rewind] == ["messages", "values"], after
        assert rewind[0].data[0] == {**rewind[0].data[0], "type": "remove", "id": partial_id}
        assert conversation(rewind[1].data) == [("q-1", "human", "count")]
        first_rerun = next(i for i, p in enumerate(after) if is_token(p))
        assert first_rerun > after.index(rewind[1])

        final = await sdk.threads.get_state(thread["thread_id"])
        expected = conversation(final["values"])
        assert [(t, c) for _, t, c in expected] == [(t, c) for _, t, c in conversation(reference)]
        # add_messages over the message parts alone, and useStream's way with
        # `values` too: each ends with the uninterrupted run's messages, each once.
        question = list(convert_to_messages(QUESTION["messages"]))
        assert apply(question, parts, values=False) == expected
        assert apply([], parts, values=True) == expected
        assert partial_id not in {i for i, _, _ in expected}

        # A resume from the last part seen before the crash: that part was taken
        # back, so the stream says so (the rewound-to state, a remove-all and its
        # messages) before the re-run's parts; applied, the same conversation.
        resumed = [
            p
            async for p in sdk.runs.join_stream(
                thread["thread_id"],
                parts[0].data["run_id"],
                stream_mode=MODES,
                last_event_id=last_seen,
            )
        ]
        assert resumed[0].event == "messages" and resumed[0].data[0]["type"] == "remove"
        assert resumed[0].data[0]["id"] == "__remove_all__"
        assert apply(question, resumed, values=False) == expected


async def test_an_unknown_stream_kind_is_refused_before_a_run_starts(
    service: TurnkeeperServer, nats_server: NatsServer, sdk: LangGraphClient
) -> None:
    async with hosted(CHAT, service, nats_server, replica="lg-chat"):
        thread = await sdk.threads.create()
        assert service.web is not None
        async with httpx.AsyncClient(base_url=service.web.url.rstrip("/")) as http:
            refused = await http.post(
                f"/threads/{thread['thread_id']}/runs/stream",
                json={"assistant_id": "chat", "input": QUESTION},
                headers={"X-Turnkeeper-Stream": "eventually"},
            )
        assert refused.status_code == 422
        assert "X-Turnkeeper-Stream" in refused.json()["detail"]
        assert await sdk.runs.list(thread["thread_id"]) == []


# -- the same graph and client under `langgraph dev`, the reference -------------------------


@pytest.fixture
async def langgraph_dev(tmp_path: Path) -> AsyncIterator[str]:
    """`langgraph dev` serving graphs/chat.py, from a copy (it writes its in-memory
    state's flushes beside the config)."""
    reference.require_reference()
    app = tmp_path / "app"
    app.mkdir()
    shutil.copy(CHAT.parent / "chat.py", app / "chat.py")
    (app / "langgraph.json").write_text(
        json.dumps({"dependencies": ["."], "graphs": {"chat": "./chat.py:graph"}})
    )
    async with reference.langgraph_dev(app) as url:
        yield url


def shape(parts: list[StreamPart]) -> list[Any]:
    """What a client can tell of a stream apart from ids and times: each part's
    event and, for a message part, its type, content and keys."""
    shown: list[Any] = []
    for part in parts:
        if part.event == "messages":
            message, metadata = part.data
            keys = sorted(set(metadata) - NOT_SENT)
            shown.append(("messages", message["type"], message["content"], sorted(message), keys))
        elif part.event == "updates":
            [(node, update)] = part.data.items()
            shown.append(("updates", node, [sorted(m) for m in update.get("messages", [])]))
        else:
            shown.append((part.event,))
    return shown


async def test_the_stream_is_the_reference_servers_part_for_part(
    service: TurnkeeperServer, nats_server: NatsServer, sdk: LangGraphClient, langgraph_dev: str
) -> None:
    async with (
        hosted(CHAT, service, nats_server, replica="lg-chat"),
        get_client(url=langgraph_dev) as reference,
    ):
        streams = []
        for client in (reference, sdk):
            thread = await client.threads.create()
            streams.append(
                [
                    p
                    async for p in client.runs.stream(
                        thread["thread_id"], "chat", input=QUESTION, stream_mode=MODES
                    )
                ]
            )
        theirs, ours = (shape(s) for s in streams)
        assert ours == theirs


# -- useStream's engine --------------------------------------------------------------------

JS = Path(__file__).resolve().parent / "js"


@pytest.fixture(scope="module")
def js_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of js/ with its locked packages installed (`npm ci`)."""
    if NODE is None or shutil.which("npm") is None:
        pytest.skip(reason="node and npm are not on PATH: the JS SDK cannot be run")
    package = tmp_path_factory.mktemp("langgraph-js-live") / "js"
    shutil.copytree(JS, package, ignore=shutil.ignore_patterns("node_modules"))
    npm_ci(package)
    return package


async def test_use_streams_engine_shows_the_partial_reply_vanish(
    service: TurnkeeperServer,
    nats_server: NatsServer,
    sdk: LangGraphClient,
    gate: tuple[Gate, str],
    js_package: Path,
) -> None:
    g, address = gate
    assert NODE is not None and service.web is not None
    renders: list[dict[str, Any]] = []

    def replying(render: dict[str, Any]) -> bool:
        return any(text == "one two three" for _, text in render.get("messages", []))

    async with hosts_for(
        CHAT, service, nats_server, replica="lg-chat", extra_env={"CHAT_GATE": address}
    ) as hosts:
        first = await hosts.start()
        proc = await asyncio.create_subprocess_exec(
            NODE,
            str(js_package / "use_stream_rewind.mjs"),
            service.web.url.rstrip("/"),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, **NO_PROXY_ENV},
        )
        assert proc.stdout is not None

        async def until(predicate: Any) -> None:
            while not any(predicate(r) for r in renders):
                raw = await asyncio.wait_for(proc.stdout.readline(), PATIENCE)  # type: ignore[union-attr]
                assert raw, "useStream's engine ended early"
                renders.append(json.loads(raw))

        try:
            reply = await g.next_reply()
            await g.release(reply, 2)
            await until(replying)
            partial_id = next(
                i for i, t in next(filter(replying, renders))["messages"] if t == "one two three"
            )
            await first.kill()
            await hosts.start()
            await g.release(await g.next_reply(), WORDS - 1)
            await until(lambda r: "final" in r)
            assert await asyncio.wait_for(proc.wait(), PATIENCE) == 0
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    shown = [r["messages"] for r in renders if "messages" in r]
    # Each render shows each message once; the partial reply was shown, then gone
    # (before the new reply began), and the end is the thread's conversation.
    for messages in shown:
        ids = [i for i, _ in messages]
        assert len(ids) == len(set(ids)), messages
    with_partial = [k for k, m in enumerate(shown) if partial_id in {i for i, _ in m}]
    gone = with_partial[-1] + 1
    assert [i for i, _ in shown[gone]] == ["q-1"], shown[gone]
    final = renders[-1]
    assert final["final"] == final["state"]
    assert [t for _, t in final["final"]] == ["count", REPLY, "noted 2 messages"]
    assert partial_id not in {i for i, _ in final["final"]}


async def test_a_deployment_may_stream_settled_and_a_stream_ask_for_live(
    make_service: Any, nats_server: NatsServer
) -> None:
    """--langgraph-stream settled: bare-seq ids (nothing taken back); a stream's
    X-Turnkeeper-Stream: live gets the live stream's ids (seq and attempt)."""
    settled: TurnkeeperServer = await make_service(
        nats_url=nats_server.url, http_listen="127.0.0.1:0", langgraph_stream="settled"
    )
    assert settled.web is not None
    async with (
        hosted(CHAT, settled, nats_server, replica="lg-chat"),
        get_client(url=settled.web.url.rstrip("/")) as client,
    ):
        ids: dict[str, list[int]] = {}
        for kind in ("settled", "live"):
            thread = await client.threads.create()
            headers = {"X-Turnkeeper-Stream": "live"} if kind == "live" else None
            ids[kind] = [
                int(p.id)
                async for p in client.runs.stream(
                    thread["thread_id"], "chat", input=QUESTION, stream_mode=MODES, headers=headers
                )
                if p.id
            ]
        assert ids["settled"] and max(ids["settled"]) < 10**9
        assert ids["live"] and min(ids["live"]) > 10**9


def test_the_stream_setting_its_flag_and_its_environment_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    assert (
        settings_from_args(parser.parse_args(["--data-dir", str(tmp_path)]), None).langgraph_stream
        == "live"
    )
    flagged = parser.parse_args(["--data-dir", str(tmp_path), "--langgraph-stream", "settled"])
    assert settings_from_args(flagged, None).langgraph_stream == "settled"
    monkeypatch.setenv("TURNKEEPER_LANGGRAPH_STREAM", "eventually")
    from_env = argparse.ArgumentParser()
    add_serve_arguments(from_env)
    with pytest.raises(ValueError, match="TURNKEEPER_LANGGRAPH_STREAM='eventually'"):
        settings_from_args(from_env.parse_args(["--data-dir", str(tmp_path)]), None)
