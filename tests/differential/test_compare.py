"""The differential suite's comparison and allow-list (compare.py), on small inputs:
what is normalised, what counts as a difference, and that a row no longer observed is
as much a failure as a difference no row allows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.differential import compare

RUN_ID = "01a245bb-9c33-722a-857e-50b27d9f46a4"


def observation(parts: list[list[Any]], values: Any, statuses: list[str]) -> dict[str, Any]:
    return {
        "chat": {
            "runs": {"first": {"parts": parts, "error": None}},
            "state": {"values": values, "next": [], "tasks": []},
            "thread_status": "idle",
            "run_statuses": statuses,
        }
    }


def test_ids_and_timestamps_are_normalised_in_keys_and_values() -> None:
    raw = {
        f"updates|inner:{RUN_ID}": [f"lc_run--{RUN_ID}", "2026-12-05T10:24:02.282119Z"],
        "interrupt": "78f2b3657453ccbd5efa50431f14ea5b",
        "langgraph_api_url": "http://127.0.0.1:18123",
    }
    assert compare.normalise(raw) == {
        "updates|inner:<id>": ["lc_run--<id>", "<ts>"],
        "interrupt": "<id>",
        "langgraph_api_url": "<server>",
    }


def test_key_paths_are_the_payloads_shape() -> None:
    data = [{"content": "hi", "tool_calls": [], "meta": {}}, {"run_id": RUN_ID, "path": ["a"]}]
    assert compare.key_paths(data) == {
        "[].content",
        "[].tool_calls[]",
        "[].meta{}",
        "[].run_id",
        "[].path[]",
    }
    assert compare.key_paths({"split": None}) != compare.key_paths({"split": {}})


def test_same_shapes_with_other_ids_and_words_do_not_differ() -> None:
    ref = observation([["metadata", {"run_id": RUN_ID}]], {"n": 1}, ["success"])
    other = RUN_ID.replace("9", "8")
    ours = observation([["metadata", {"run_id": other}]], {"n": 1}, ["success"])
    assert compare.differences(compare.reduce(ref), compare.reduce(ours)) == {}


def test_each_kind_of_difference_is_named() -> None:
    ref = observation(
        [["metadata", {"run_id": RUN_ID}], ["messages", [{"content": "a", "id": "x"}, {}]]],
        {"n": 1},
        ["success", "success"],
    )
    ours = observation(
        [["metadata", {"run_id": RUN_ID}], ["values", {}], ["messages", [{"content": "a"}, {}]]],
        {"n": 2},
        ["success"],
    )
    found = compare.differences(compare.reduce(ref), compare.reduce(ours))
    assert set(found) == {
        ("chat", "first: events"),
        ("chat", "first: keys missing from messages"),
        ("chat", "state"),
        ("chat", "run statuses"),
    }
    assert found[("chat", "first: keys missing from messages")] == "[].id"
    assert found[("chat", "first: events")] == "metadata messages vs metadata values messages"


def write_doc(tmp_path: Path, rows: str) -> Path:
    doc = tmp_path / "doc.md"
    doc.write_text(
        f"# x\n\n{compare.MARKER}\n| scenario | client | difference | why |\n|---|---|---|---|\n"
        f"{rows}\n\nafter the table\n"
    )
    return doc


SCENARIOS = {"chat": ["first"], "ask": ["ask", "resume"], "ask-twice": ["ask", "again"]}


def test_a_difference_not_on_the_list_and_a_row_no_longer_differing_both_fail(
    tmp_path: Path,
) -> None:
    allowed = compare.allow_list(
        write_doc(
            tmp_path,
            "| chat | both | `state` | issue 48 item 3, being fixed |\n"
            "| chat | js | `first: events` | a reason |",
        )
    )
    assert [(a.scenario, a.client, a.difference) for a in allowed] == [
        ("chat", "both", "state"),
        ("chat", "js", "first: events"),
    ]
    observed = {
        "python": {("chat", "state"): "…", ("chat", "first: error"): "None vs HTTP 422"},
        "js": {("chat", "state"): "…"},
    }
    verdict = compare.judge(observed, allowed, SCENARIOS)
    assert verdict.unexpected == {("python", "chat", "first: error"): "None vs HTTP 422"}
    assert verdict.stale == {allowed[1]: ["js chat"]}
    # Fixed on one client only: a `both` row is stale.
    verdict = compare.judge({"python": {("chat", "state"): "…"}, "js": {}}, allowed[:1], SCENARIOS)
    assert verdict.stale == {allowed[0]: ["js chat"]} and not verdict.ok()
    # A client that did not run (no node) leaves its rows unjudged.
    assert compare.judge({"python": {("chat", "state"): "…"}}, allowed, SCENARIOS).ok()


def test_a_pattern_row_must_still_differ_in_every_scenario_it_matches(tmp_path: Path) -> None:
    allowed = compare.allow_list(
        write_doc(
            tmp_path,
            "| ask* | python | `ask: events` | the extra values part |\n"
            "| ask* | python | `resume: error` | a 409 |\n"
            "| nothing* | python | `state` | a row that matches no scenario |",
        )
    )
    both = {("ask", "ask: events"): "…", ("ask-twice", "ask: events"): "…"}
    # `resume` is a run of `ask` alone: the row speaks of that scenario only.
    found = {**both, ("ask", "resume: error"): "None vs HTTP 409"}
    verdict = compare.judge({"python": found}, allowed, SCENARIOS)
    assert not verdict.unexpected
    assert verdict.stale == {allowed[2]: ["(no scenario)"]}
    # Fixed in one of the scenarios the pattern matches: stale, naming where.
    del found[("ask-twice", "ask: events")]
    verdict = compare.judge({"python": found}, allowed[:2], SCENARIOS)
    assert verdict.stale == {allowed[0]: ["python ask-twice"]}
    # The report prints a pattern row once, with each difference it stands for.
    assert compare.rows({"python": {**both}}, allowed) == [
        "| ask* | python | `ask: events` | the extra values part |",
        "    python ask: …",
        "    python ask-twice: …",
    ]


def test_a_row_without_its_reason_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="without its reason"):
        compare.allow_list(write_doc(tmp_path, "| chat | both | `state` |  |"))


@pytest.mark.parametrize("marker", [compare.MARKER, compare.MARKER_TS], ids=["python", "ts"])
def test_the_docs_allow_list_is_well_formed(marker: str) -> None:
    rows = compare.allow_list(marker=marker)
    assert rows
    assert len({(r.scenario, r.client, r.difference) for r in rows}) == len(rows)
    assert all(r.why for r in rows)
    # Each row speaks of a scenario of scenarios.json (else it is stale at once).
    assert all(r.targets(compare.scenario_runs()) for r in rows)


def test_a_created_assistant_is_compared_by_its_answer_and_shape() -> None:
    ref = observation([], {}, [])
    ours = observation([], {}, [])
    ref["chat"]["assistant"] = {"data": {"assistant_id": RUN_ID, "context": {}}, "error": None}
    ours["chat"]["assistant"] = {"data": None, "error": "HTTP 404"}
    found = compare.differences(compare.reduce(ref), compare.reduce(ours))
    assert found == {("chat", "create assistant: error"): "None vs HTTP 404"}
    ours["chat"]["assistant"] = {"data": {"assistant_id": RUN_ID, "version": 1}, "error": None}
    found = compare.differences(compare.reduce(ref), compare.reduce(ours))
    assert found == {
        ("chat", "create assistant: keys missing"): "context{}",
        ("chat", "create assistant: keys extra"): "version",
    }


def test_a_namespaced_part_in_a_row_is_one_cell(tmp_path: Path) -> None:
    # `messages|talk:<id>` is one event's name: written `\|` in the table, it stays
    # in its cell.
    rows = compare.allow_list(
        write_doc(tmp_path, "| sub | both | `run: keys missing from messages\\|talk:<id>` | why |")
    )
    assert [r.difference for r in rows] == ["run: keys missing from messages|talk:<id>"]
