"""The differential suite's client script through langgraph-sdk (Python): every
scenario of scenarios.json on a new thread, its runs one after another, and what the
server showed, printed as one JSON line. `python -m tests.differential.driver URL`.

It records raw answers; compare.py normalises them. js/driver.mjs is the same script
through LangGraph's JS SDK."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import httpx
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient

SCENARIOS = Path(__file__).resolve().parent / "scenarios.json"


def scenarios() -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = json.loads(SCENARIOS.read_text())["scenarios"]
    return found


def failure(exc: Exception) -> str:
    """What a failed call is recorded as: its HTTP status, else its kind."""
    if isinstance(exc, httpx.HTTPStatusError):
        return f"HTTP {exc.response.status_code}"
    return type(exc).__name__


async def run_once(client: LangGraphClient, thread_id: str, spec: dict[str, Any], run: Any) -> Any:
    parts: list[list[Any]] = []
    try:
        async for part in client.runs.stream(
            thread_id,
            spec["assistant"],
            input=run.get("input"),
            command=run.get("command"),
            stream_mode=run["stream_mode"],
            stream_subgraphs=run.get("stream_subgraphs", False),
            context=run.get("context"),
            config=run.get("config"),
        ):
            parts.append([part.event, part.data])
    except Exception as exc:  # recorded: a refusal is an observation like any other
        return {"parts": parts, "error": failure(exc)}
    return {"parts": parts, "error": None}


async def create_assistant(client: LangGraphClient, spec: dict[str, Any]) -> Any:
    """The scenario's own assistant, if it names one to create: its runs then use it
    (the graph's, if the server refuses to create one)."""
    made = spec["create_assistant"]
    try:
        created: Any = await client.assistants.create(
            made["graph_id"],
            context=made.get("context"),
            config=made.get("config"),
            metadata=made.get("metadata"),
            if_exists=made.get("if_exists"),
            name=made.get("name"),
            description=made.get("description"),
        )
    except Exception as exc:  # recorded, as a refused run is
        return {"data": None, "error": failure(exc)}
    spec["assistant"] = created["assistant_id"]
    return {"data": created, "error": None}


async def scenario(client: LangGraphClient, spec: dict[str, Any]) -> dict[str, Any]:
    spec = dict(spec)
    made = await create_assistant(client, spec) if "create_assistant" in spec else None
    thread = await client.threads.create()
    tid = thread["thread_id"]
    runs = {run["name"]: await run_once(client, tid, spec, run) for run in spec["runs"]}
    state: Any = await client.threads.get_state(tid)
    listed = await client.runs.list(tid)
    return {
        "assistant": made,
        "runs": runs,
        "state": state,
        "thread_status": (await client.threads.get(tid))["status"],
        # Newest first, as both servers list them.
        "run_statuses": [r["status"] for r in reversed(listed)],
    }


async def observe(url: str) -> dict[str, Any]:
    client = get_client(url=url, api_key=None)
    try:
        return {spec["name"]: await scenario(client, spec) for spec in scenarios()}
    finally:
        await client.http.client.aclose()


if __name__ == "__main__":
    print(json.dumps(asyncio.run(observe(sys.argv[1]))))
