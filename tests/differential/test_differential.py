"""The same client script (Python and JS SDKs) against `langgraph dev` and against
turnkeeper on each backend: every difference in what the clients were shown must be
on docs/langgraph-api.md's allow-list, and every row of it must still differ."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from turnkeeper_server.app import TurnkeeperServer

from tests.differential import compare
from tests.differential.conftest import (
    DRIVER_TIMEOUT,
    GRAPHS,
    REPO,
    js_driver,
    parse,
    python_driver,
)
from tests.support.langgraph_host import hosted
from tests.support.nats import NatsServer
from tests.support.node import NO_PROXY_ENV
from tests.support.service import ServiceFactory

# One worker runs them all: `langgraph dev` and the npm install are made once.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(600),
    pytest.mark.both_backends,
    pytest.mark.xdist_group("differential"),
]

# Set by `python -m tests.differential --report`: where the test writes what differs.
REPORT = os.environ.get("TURNKEEPER_DIFFERENTIAL_REPORT")


@pytest.fixture
async def api_url(make_service: ServiceFactory, nats_server: NatsServer) -> AsyncIterator[str]:
    """Turnkeeper (the test's backend) with graphs/ hosted by `turnkeeper agent`."""
    service: TurnkeeperServer = await make_service(
        nats_url=nats_server.url, http_listen="127.0.0.1:0"
    )
    assert service.web is not None
    async with hosted(GRAPHS / "langgraph.json", service, nats_server, replica="differential"):
        yield service.web.url.rstrip("/")


async def observe(commands: dict[str, list[str]]) -> dict[str, Any]:
    """Each client's drivers at once, as subprocesses (the service runs in this loop)."""

    async def one(client: str, cmd: list[str]) -> Any:
        proc = await asyncio.create_subprocess_exec(
            *cmd,
            cwd=REPO,
            env={**os.environ, **NO_PROXY_ENV},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), DRIVER_TIMEOUT)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        return parse(client, out, err, proc.returncode)

    seen = await asyncio.gather(*(one(c, cmd) for c, cmd in commands.items()))
    return dict(zip(commands, seen, strict=True))


def record(
    report: Path,
    backend: str,
    observed: dict[str, dict[tuple[str, str], str]],
    raw: dict[str, Any],
) -> None:
    """What differs, and what each side showed, for `python -m tests.differential`."""
    found = {c: [[*k, v] for k, v in d.items()] for c, d in observed.items()}
    with report.open("a") as out:
        out.write(json.dumps({"backend": backend, "observed": found, "raw": raw}) + "\n")


async def test_turnkeeper_shows_the_clients_what_langgraph_dev_shows(
    reference: Future[dict[str, Any]], api_url: str, js_package: Path | None, backend: str
) -> None:
    seen = await asyncio.wrap_future(reference)
    sound(seen, "langgraph dev")
    commands = {"python": python_driver(api_url)}
    if js_package is not None:
        commands["js"] = js_driver(js_package, api_url)
    ours = await observe(commands)
    verdict_on(seen, ours, compare.allow_list(), backend)


def sound(reference: dict[str, Any], server: str) -> None:
    """The script itself is sound: the reference answers every run of it, and shows
    both SDKs the same."""
    refused = [
        f"{client} {name} {run}: {r['error']}"
        for client, seen in reference.items()
        for name, scenario in seen.items()
        for run, r in scenario["runs"].items()
        if r["error"] is not None
    ] + [
        f"{client} {name} create assistant: {scenario['assistant']['error']}"
        for client, seen in reference.items()
        for name, scenario in seen.items()
        if scenario["assistant"] is not None and scenario["assistant"]["error"] is not None
    ]
    assert not refused, f"{server} refused runs of scenarios.json: {refused}"
    # The two drivers are one script.
    if "js" in reference:
        apart = compare.differences(
            compare.reduce(reference["python"]), compare.reduce(reference["js"])
        )
        assert not apart, f"driver.py and js/driver.mjs were shown different things: {apart}"


def verdict_on(
    reference: dict[str, Any], ours: dict[str, Any], allowed: list[compare.Allowed], backend: str
) -> None:
    """Fails on a difference `allowed` does not list, or a row of it that no longer
    differs, with the allow-list this run calls for."""
    observed = {
        client: compare.differences(compare.reduce(reference[client]), compare.reduce(seen))
        for client, seen in ours.items()
    }
    if REPORT:
        record(Path(REPORT), backend, observed, {"reference": reference, "turnkeeper": ours})
    verdict = compare.judge(observed, allowed)
    message = []
    if verdict.unexpected:
        message.append("differences not on docs/langgraph-api.md's allow-list:")
        message += [
            f"  {c} {s} `{d}`: {detail}" for (c, s, d), detail in verdict.unexpected.items()
        ]
    if verdict.stale:
        message.append("allow-list rows that no longer differ (remove them):")
        message += [
            f"  | {a.scenario} | {a.client} | `{a.difference}` | no longer on {', '.join(where)}"
            for a, where in verdict.stale.items()
        ]
    if message:
        message.append("the allow-list this run calls for (python -m tests.differential --report):")
        message += compare.rows(observed, allowed)
    assert verdict.ok(), "\n".join(message)
