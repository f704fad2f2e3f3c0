"""How `turnkeeper agent langgraph.json` tells a LangGraph.js graph from a Python one,
finds the TypeScript runner for it, and refuses, saying what to install, when it
cannot (turnkeeper.agent.host._node). No service, no Node.js process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from turnkeeper.agent.bridge import BridgeConfig
from turnkeeper.agent.host._config import read_config
from turnkeeper.agent.host._node import RUNNER_VARIABLE, node_runner, runner_env
from turnkeeper.agent.host._run import host


def project(tmp_path: Path, graphs: dict[str, object]) -> Path:
    config = tmp_path / "langgraph.json"
    config.write_text(json.dumps({"graphs": graphs}), encoding="utf-8")
    return config


def test_a_typescript_or_javascript_file_is_a_langgraph_js_graph(tmp_path: Path) -> None:
    config = read_config(
        project(
            tmp_path,
            {"a": "./src/a.ts:graph", "b": "./b.mjs:graph", "c": "./c.py:graph", "d": "pkg.mod:g"},
        )
    )
    by_name = {g.name: g for g in config.graphs}
    assert [n for n, g in by_name.items() if g.is_node] == ["a", "b"]
    assert by_name["a"].module == str(tmp_path / "src" / "a.ts")
    assert by_name["a"].attribute == "graph"


def test_the_runner_named_in_the_environment_is_taken_and_a_missing_one_refused(
    tmp_path: Path,
) -> None:
    config = read_config(project(tmp_path, {"a": "./a.ts:graph"}))
    runner = tmp_path / "graph.js"
    runner.write_text("", encoding="utf-8")
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", RUNNER_VARIABLE: str(runner)}
    node, found = node_runner(config, env)
    assert found == runner and Path(node).name == "node"
    with pytest.raises(ValueError, match=f"{RUNNER_VARIABLE}=.*: no such file"):
        node_runner(config, {**env, RUNNER_VARIABLE: str(tmp_path / "gone.js")})


def test_the_projects_own_installed_runner_is_found(tmp_path: Path) -> None:
    (tmp_path / "app").mkdir()
    config = read_config(project(tmp_path / "app", {"a": "./a.ts:graph"}))
    installed = tmp_path / "node_modules" / "@turnkeeper" / "client" / "dist" / "cli" / "graph.js"
    installed.parent.mkdir(parents=True)
    installed.write_text("", encoding="utf-8")
    _, found = node_runner(config, {"PATH": "/usr/local/bin:/usr/bin:/bin"})
    assert found == installed


def test_no_node_on_path_is_refused_saying_what_is_needed(tmp_path: Path) -> None:
    config = read_config(project(tmp_path, {"a": "./a.ts:graph"}))
    with pytest.raises(ValueError, match=r"need Node\.js \(20 or newer\) on PATH"):
        node_runner(config, {"PATH": str(tmp_path)})


def test_the_runner_gets_the_variables_a_bridge_of_the_graph_would_have(tmp_path: Path) -> None:
    config = read_config(project(tmp_path, {"a": {"path": "./a.ts:graph", "version_label": "v2"}}))
    bridge = BridgeConfig.from_env(
        "a", {"TURNKEEPER_NATS_URL": "nats://10.0.0.1:4222", "TURNKEEPER_REPLICA": "r1"}
    )
    env = runner_env(config.graphs[0], bridge, {"TURNKEEPER_TOKEN": "t"})
    assert env["TURNKEEPER_AGENT"] == "a"
    assert env["TURNKEEPER_NATS_URL"] == "nats://10.0.0.1:4222"
    assert env["TURNKEEPER_REPLICA"] == "r1"
    assert env["TURNKEEPER_VERSION_LABEL"] == "v2"
    assert env["TURNKEEPER_LANGGRAPH_API"] == "1"
    assert env["TURNKEEPER_TOKEN"] == "t"


async def test_the_host_refuses_a_typescript_project_it_has_no_runner_for(
    tmp_path: Path,
) -> None:
    config = project(tmp_path, {"a": "./a.ts:graph"})
    env = {"PATH": str(tmp_path), "TURNKEEPER_HEALTH_LISTEN": "127.0.0.1:0"}
    with pytest.raises(ValueError, match=r"LangGraph\.js files, which need Node\.js"):
        await host(config, env=env)
