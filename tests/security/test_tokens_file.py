"""The tokens file and what an agent token does end to end: the file's refusals, the
token helper, authentication off without a file, reflection off by setting, and an
agent's graph checkpointing through RemoteSaver with its own token only. A real
service on port 0 with a real tokens file."""

from __future__ import annotations

import json
import operator
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypedDict

import grpc
import pytest
from grpc import aio
from grpc_reflection.v1alpha import reflection_pb2_grpc
from turnkeeper.v1 import turns_pb2, turns_pb2_grpc
from turnkeeper_server.app import TurnkeeperServer
from turnkeeper_server.security import auth

from tests.support.security import bearer, write_tokens
from tests.support.service import ServiceFactory
from tests.support.turns import value

if TYPE_CHECKING:
    from turnkeeper.v1.turns_pb2_grpc import TurnServiceAsyncStub

pytestmark = [pytest.mark.timeout(60), pytest.mark.both_backends]


@dataclass
class Env:
    server: TurnkeeperServer
    tokens: dict[str, str]
    turns: TurnServiceAsyncStub


@pytest.fixture
async def env(make_service: ServiceFactory, tmp_path: Path) -> AsyncIterator[Env]:
    tokens = write_tokens(tmp_path / "tokens.jsonl")
    server = await make_service(tokens_file=tmp_path / "tokens.jsonl")
    async with aio.insecure_channel(server.address) as channel:
        stub: TurnServiceAsyncStub = turns_pb2_grpc.TurnServiceStub(channel)
        yield Env(server, tokens, stub)


async def test_reflection_off_by_setting(make_service: ServiceFactory) -> None:
    server = await make_service(reflection=False)
    async with aio.insecure_channel(server.address) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        # No message: the call is refused when it opens, and grpc's client, sending
        # into a call already ended, can report its own INTERNAL instead
        # (test_security_auth.py's reflection test).
        call = stub.ServerReflectionInfo(iter([]))
        with pytest.raises(aio.AioRpcError) as info:
            async for _ in call:
                pass
        assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED


async def test_without_a_tokens_file_authentication_is_off(make_service: ServiceFactory) -> None:
    server = await make_service()
    async with aio.insecure_channel(server.address) as channel:
        turns = turns_pb2_grpc.TurnServiceStub(channel)
        await turns.StartTurn(
            turns_pb2.StartTurnRequest(
                turn_id="t-alpha", thread_id="th-alpha", agent="alpha", input=value({})
            )
        )
        listed = await turns.ListTurns(turns_pb2.ListTurnsRequest())
        assert [t.turn_id for t in listed.turns] == ["t-alpha"]


def test_tokens_file_refuses_plain_tokens_unknown_roles_and_duplicates(tmp_path: Path) -> None:
    path = tmp_path / "tokens.jsonl"
    bad_lines = [
        '{"sha256": "my-secret-token", "role": "admin"}',
        json.dumps({"sha256": "a" * 64, "role": "root"}),
        json.dumps({"sha256": "a" * 64, "role": "agent:has.dot"}),
        json.dumps({"role": "admin"}),
        "not json",
        json.dumps({"sha256": "a" * 64, "role": "admin"}) * 2,
    ]
    for line in bad_lines:
        path.write_text(line + "\n")
        with pytest.raises(ValueError, match=r"tokens\.jsonl:1"):
            auth.TokenStore.load(path)
    twice = json.dumps({"sha256": "a" * 64, "role": "admin"})
    path.write_text(f"{twice}\n{twice}\n")
    with pytest.raises(ValueError, match="twice"):
        auth.TokenStore.load(path)
    path.write_text("# nothing but a comment\n")
    with pytest.raises(ValueError, match="no tokens"):
        auth.TokenStore.load(path)


def test_token_helper_appends_a_hash_and_prints_the_token_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "tokens.jsonl"
    assert (
        auth.main(["new", "--role", "agent:support", "--name", "support-1", "--file", str(path)])
        == 0
    )
    token = capsys.readouterr().out.strip()
    assert path.stat().st_mode & 0o777 == 0o600
    text = path.read_text()
    assert token not in text
    entry = json.loads(text)
    assert entry == {"sha256": auth.token_hash(token), "role": "agent:support", "name": "support-1"}
    caller = auth.TokenStore.load(path).authenticate([("authorization", f"Bearer {token}")])
    assert (caller.role, caller.agent, caller.name) == ("agent", "support", "support-1")


class _Log(TypedDict):
    log: Annotated[list[str], operator.add]


async def test_an_agents_graph_checkpoints_its_own_turn_and_nobody_elses(env: Env) -> None:
    # What the bridge does with an agent token: StartTurn, then the graph runs with
    # RemoteSaver, fenced by the turn. Another agent's saver cannot read the thread.
    from langgraph.graph import END, START, StateGraph
    from turnkeeper import errors
    from turnkeeper.agent.saver import RemoteSaver, durable_config, durable_run_kwargs
    from turnkeeper.client import ConnectionOptions

    builder = StateGraph(_Log)
    builder.add_node("step", lambda state: {"log": ["step"]})
    builder.add_edge(START, "step")
    builder.add_edge("step", END)

    def saver(name: str) -> RemoteSaver:
        return RemoteSaver(
            options=ConnectionOptions(target=env.server.address, bearer_token=env.tokens[name])
        )

    alpha = bearer(env.tokens["alpha"])
    await env.turns.StartTurn(
        turns_pb2.StartTurnRequest(
            turn_id="t-graph", thread_id="th-graph", agent="alpha", input=value({})
        ),
        metadata=alpha,
    )
    config = durable_config("th-graph", "t-graph", 0)
    own = saver("alpha")
    graph = builder.compile(checkpointer=own)
    done = await graph.ainvoke({"log": ["in"]}, config, **durable_run_kwargs())
    assert done["log"] == ["in", "step"]
    assert await own.aget_tuple({"configurable": {"thread_id": "th-graph"}}) is not None

    other = saver("beta")
    with pytest.raises(errors.PermissionDenied):
        await other.aget_tuple({"configurable": {"thread_id": "th-graph"}})
    with pytest.raises(errors.PermissionDenied):
        await builder.compile(checkpointer=other).ainvoke(
            {"log": ["in"]}, {"configurable": {"thread_id": "th-graph"}}
        )
    operator_view = saver("operator")
    assert await operator_view.aget_tuple({"configurable": {"thread_id": "th-graph"}}) is not None
    for s in (own, other, operator_view):
        await s.aclose()
