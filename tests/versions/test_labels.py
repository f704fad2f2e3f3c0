"""Where an author sets a graph's version label: BridgeConfig (or its environment) and
the object form of a ``langgraph.json`` graph."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from turnkeeper.agent.bridge import BridgeConfig
from turnkeeper.agent.host._config import read_config
from turnkeeper.agent.host._run import bridge_configs


def test_the_bridge_reads_its_label_from_the_environment() -> None:
    config = BridgeConfig.from_env("writer", {"TURNKEEPER_VERSION_LABEL": "2026-12-03"})
    assert config.version_label == "2026-12-03"
    assert BridgeConfig.from_env("writer", {}).version_label == ""
    assert config.version_subject("ab" * 32).endswith(".agents.writer.versions." + "ab" * 32)


def test_a_label_a_subject_or_a_list_could_not_show_is_refused() -> None:
    with pytest.raises(ValueError, match="at most 128 printable characters"):
        BridgeConfig("writer", version_label="v1\nv2")


def test_a_langgraph_json_graph_names_its_label_in_its_object_form(tmp_path: Path) -> None:
    (tmp_path / "agent.py").write_text("graph = None\n")
    path = tmp_path / "langgraph.json"
    path.write_text(
        json.dumps(
            {
                "graphs": {
                    "writer": {"path": "./agent.py:graph", "version_label": "v2"},
                    "reader": "./agent.py:graph",
                }
            }
        )
    )
    config = read_config(path)
    assert [(g.name, g.version_label) for g in config.graphs] == [("writer", "v2"), ("reader", "")]
    bridges = bridge_configs(config, {})
    assert [b.version_label for b in bridges] == ["v2", ""]
    path.write_text(
        json.dumps({"graphs": {"writer": {"path": "./agent.py:graph", "version_label": 2}}})
    )
    with pytest.raises(ValueError, match='"version_label" must be a string'):
        read_config(path)
