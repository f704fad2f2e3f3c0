"""The graph fingerprint and the ``compatible`` rule, on real compiled graphs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from turnkeeper._graph_versions import Stamp, fingerprint, incompatibilities, stamp_of_metadata
from turnkeeper.agent._fingerprint import GraphVersion, graph_shape

from tests.support.versioned_graphs import COMPATIBLE, VARIANTS, build

_PRINT = (
    "from tests.support.versioned_graphs import build;"
    "from turnkeeper.agent._fingerprint import GraphVersion;"
    "import sys; b, label = build(sys.argv[1]);"
    "print(GraphVersion.of(b.compile(), label).fingerprint)"
)


def version(variant: str) -> GraphVersion:
    builder, label = build(variant)
    return GraphVersion.of(builder.compile(), label)


def test_the_fingerprint_is_the_same_in_other_processes_and_hash_seeds() -> None:
    here = version("v1").fingerprint
    for seed in ("1", "2"):
        out = subprocess.run(
            [sys.executable, "-c", _PRINT, "v1"],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        )
        assert out.stdout.strip() == here


def test_every_variant_has_its_own_fingerprint() -> None:
    prints = {variant: version(variant).fingerprint for variant in VARIANTS}
    assert len(set(prints.values())) == len(VARIANTS)


def test_a_label_only_change_keeps_the_shape_and_changes_the_fingerprint() -> None:
    v1, relabelled = version("v1"), version("label")
    assert v1.shape == relabelled.shape
    assert v1.fingerprint != relabelled.fingerprint
    assert fingerprint(v1.shape, "v1") == v1.fingerprint


def test_the_shape_says_nodes_edges_channels_reducers_schema_and_interrupts() -> None:
    builder, _ = build("v1")
    shape = graph_shape(builder.compile(interrupt_before=["publish"]))
    json.dumps(shape)  # plain JSON, nothing else
    assert set(shape["nodes"]) == {"__start__", "draft", "ask", "publish"}
    assert shape["nodes"]["ask"]["triggers"] == ["branch:to:ask"]
    assert ["draft", "ask"] in shape["edges"]
    assert shape["channels"]["log"] == "BinaryOperatorAggregate(operator.add)"
    assert shape["channels"]["answer"] == "LastValue"
    assert shape["state"] == {"answer": "str", "log": "list[str]"}
    assert shape["interrupt_before"] == ["publish"]
    assert shape["interrupt_after"] == []
    assert " at 0x" not in json.dumps(shape)


def test_a_conditional_branch_is_described_by_its_name_and_targets() -> None:
    builder, _ = build("v1")

    def route(state: Any) -> str:
        return "publish"

    builder.add_conditional_edges("publish", route, {"again": "draft", "done": "__end__"})
    shape = graph_shape(builder.compile())
    assert shape["branches"] == {"publish": {"route": ["__end__", "draft"]}}


def parked_stamp() -> Stamp:
    """The stamp v1 writes on the checkpoint of a turn parked in ``ask``."""
    builder, label = build("v1")
    saver = InMemorySaver()
    graph = builder.compile(checkpointer=saver)
    config: Any = {"configurable": {"thread_id": "t"}}
    graph.invoke({"log": []}, config)
    state = graph.get_state(config)
    assert state.next == ("ask",)
    saved = saver.get_tuple(state.config)
    assert saved is not None
    return GraphVersion.of(graph, label).stamp(saved.checkpoint)


def test_a_parked_checkpoint_names_its_next_node_and_the_channels_it_holds() -> None:
    stamp = parked_stamp()
    assert stamp.next == ("ask",)
    assert stamp.channels["log"] == "BinaryOperatorAggregate(operator.add)"
    assert stamp.label == "v1"
    assert Stamp.from_json(json.loads(json.dumps(stamp.to_json()))) == stamp
    metadata = {"source": "loop", "turnkeeper": {"turn_id": "x", "graph": stamp.to_json()}}
    assert stamp_of_metadata(json.dumps(metadata)) == stamp
    assert stamp_of_metadata("{}") is None


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_compatible_rule_matches_what_each_change_does(variant: str) -> None:
    reasons = incompatibilities(parked_stamp(), version(variant).shape)
    assert (not reasons) == (variant in COMPATIBLE), reasons


def test_an_incompatibility_says_what_changed() -> None:
    stamp = parked_stamp()
    assert "node 'ask' is to run next but the new graph has no such node" in (
        incompatibilities(stamp, version("renamed").shape)
    )
    reducer = incompatibilities(stamp, version("reducer").shape)
    assert reducer == [
        "channel 'log' changed its reducer from BinaryOperatorAggregate(operator.add) to LastValue"
    ]
