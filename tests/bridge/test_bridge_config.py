"""The bridge's settings, graph hand-over, JSON conversions and idempotency key:
small checks that need no service."""

from __future__ import annotations

import dataclasses
import operator
from typing import Annotated, Any, TypedDict

import pytest
from google.protobuf import struct_pb2
from langchain_core.messages import AIMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Interrupt
from pydantic import BaseModel
from turnkeeper._values import py_to_value, value_to_py
from turnkeeper.agent.bridge import Bridge, BridgeConfig, idempotency_key
from turnkeeper.agent.bridge._convert import to_jsonable


class State(TypedDict):
    results: Annotated[list[str], operator.add]


def builder() -> StateGraph[Any, Any, Any, Any]:
    graph = StateGraph(State)
    graph.add_node("only", lambda state: {"results": ["x"]})
    graph.add_edge(START, "only")
    graph.add_edge("only", END)
    return graph


def test_config_names_the_subject_and_queue_group_of_the_agent() -> None:
    config = BridgeConfig(agent="writer", replica="host-1", subject_prefix="acme", namespace="prod")
    assert config.subject == "acme.prod.agents.writer.tasks"
    assert config.queue_group == "agents.writer"
    assert config.health_address == ("127.0.0.1", 8080)
    # A new incarnation for every process start (every config).
    assert BridgeConfig(agent="writer").incarnation != BridgeConfig(agent="writer").incarnation


@pytest.mark.parametrize(
    "bad",
    [
        {"agent": "has.dot"},
        {"agent": ""},
        {"agent": "ok", "replica": "white space"},
        {"agent": "ok", "health_listen": "nowhere"},
    ],
)
def test_config_refuses_names_the_service_or_nats_would_refuse(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"agent|replica|health_listen"):
        BridgeConfig(**bad)


def test_config_from_the_environment() -> None:
    env = {
        "TURNKEEPER_AGENT": "writer",
        "TURNKEEPER_ADDRESS": "svc:50051",
        "NATS_URL": "nats://bus:4222",
        "TURNKEEPER_NAMESPACE": "prod",
        "TURNKEEPER_REPLICA": "pod-7",
        "TURNKEEPER_HEALTH_LISTEN": "0.0.0.0:9000",
        "TURNKEEPER_SHUTDOWN_GRACE": "2.5",
    }
    config = BridgeConfig.from_env(env=env)
    assert (config.agent, config.service.target, config.nats_url) == (
        "writer",
        "svc:50051",
        "nats://bus:4222",
    )
    assert (config.namespace, config.replica, config.shutdown_grace) == ("prod", "pod-7", 2.5)
    assert config.health_address == ("0.0.0.0", 9000)
    assert BridgeConfig.from_env("other", env=env, replica="r9").agent == "other"
    assert BridgeConfig.from_env("other", env=env, replica="r9").replica == "r9"
    with pytest.raises(ValueError, match="TURNKEEPER_AGENT"):
        BridgeConfig.from_env(env={})
    # No security settings: plaintext, no token.
    assert not config.service.secure and config.service.bearer_token is None


def test_config_reads_the_clis_tls_and_token_variables() -> None:
    env = {
        "TURNKEEPER_AGENT": "writer",
        "TURNKEEPER_ADDRESS": "svc:50051",
        "TURNKEEPER_TLS_CA": "/secrets/ca.pem",
        "TURNKEEPER_TLS_CLIENT_CERT": "/secrets/agent.pem",
        "TURNKEEPER_TLS_CLIENT_KEY": "/secrets/agent.key",
        "TURNKEEPER_TOKEN": "tk-writer",
    }
    service = BridgeConfig.from_env(env=env).service
    assert (service.target, service.bearer_token) == ("svc:50051", "tk-writer")
    assert (service.root_certificates, service.client_certificate, service.client_key) == (
        "/secrets/ca.pem",
        "/secrets/agent.pem",
        "/secrets/agent.key",
    )
    assert service.secure
    system_roots = BridgeConfig.from_env(env={"TURNKEEPER_AGENT": "w", "TURNKEEPER_TLS": "1"})
    assert system_roots.service.tls and system_roots.service.root_certificates is None
    # Half a client certificate is a configuration error, found at once.
    half = {**env, "TURNKEEPER_TLS_CLIENT_KEY": ""}
    with pytest.raises(ValueError, match="client_certificate and client_key"):
        BridgeConfig.from_env(env=half)


async def test_the_bridge_puts_its_own_checkpointer_in_the_graph() -> None:
    config = BridgeConfig(agent="writer", replica="host-1", health_listen="127.0.0.1:0")
    from_builder = Bridge(builder(), config)
    assert from_builder.graph.checkpointer is from_builder.saver
    compiled = builder().compile(checkpointer=InMemorySaver())
    from_compiled = Bridge(compiled, dataclasses.replace(config))
    assert from_compiled.graph.checkpointer is from_compiled.saver
    assert compiled.checkpointer is not from_compiled.saver  # the caller's graph is untouched
    with pytest.raises(TypeError):
        Bridge(object(), config)  # type: ignore[arg-type]
    # Never started: shutting down is still fine, twice.
    await from_builder.shutdown()
    await from_builder.shutdown()


def test_values_round_trip_with_integers_kept() -> None:
    data = {"n": 3, "f": 1.5, "list": [1, "two", None, True], "nested": {"k": -4}}
    assert value_to_py(py_to_value(data)) == data
    assert value_to_py(py_to_value("text")) == "text"
    assert value_to_py(struct_pb2.Value()) is None


def test_graph_objects_become_plain_json() -> None:
    class Model(BaseModel):
        name: str

    @dataclasses.dataclass
    class Point:
        x: int

    message = AIMessage(content="hi", id="m1", tool_calls=[{"name": "t", "args": {}, "id": "c1"}])
    out = to_jsonable(
        {
            "message": message,
            "model": Model(name="a"),
            "point": Point(1),
            "bytes": b"\x00",
            "interrupt": Interrupt(value={"q": 1}, id="i1"),
            "nan": float("nan"),
            "set": {1},
        }
    )
    assert out["message"]["type"] == "ai" and out["message"]["content"] == "hi"
    assert out["message"]["tool_calls"][0]["id"] == "c1"
    assert out["model"] == {"name": "a"} and out["point"] == {"x": 1}
    assert out["bytes"] == {"base64": "AA=="}
    assert out["interrupt"]["value"] == {"q": 1} and out["interrupt"]["id"] == "i1"
    assert out["nan"] == "nan" and out["set"] == [1]


def test_idempotency_key_needs_a_turn() -> None:
    config: Any = {
        "configurable": {"turn_id": "t1", "attempt": 2},
        "metadata": {"langgraph_step": 3},
    }
    assert idempotency_key(config) == "t1:3:2"
    with pytest.raises(RuntimeError, match="idempotency_key"):
        idempotency_key({"configurable": {"thread_id": "x"}, "metadata": {}})
