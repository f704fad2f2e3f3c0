"""The operator CLI against a real in-process service.

`main([...])` runs in a worker thread (it makes blocking gRPC calls, and the service
answers on this test's event loop); its output is read with capsys. Where the exit
status is the point (health, as Docker runs it), the real console script runs as a
subprocess.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from turnkeeper.operator._cli import (
    EXIT_NOT_FOUND,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    EXIT_WRONG_STATE,
    build_parser,
    connection_options,
    main,
)
from turnkeeper.v1 import turns_pb2 as pb
from turnkeeper_server.app import TurnkeeperServer

from tests.support.relay import Relay
from tests.support.turns import events, start, value

if TYPE_CHECKING:
    # Only in the stubs' .pyi: what TurnServiceStub(aio channel) returns.
    from turnkeeper.v1.turns_pb2_grpc import TurnServiceAsyncStub as TurnStub

    from tests.support.nats import NatsServer
    from tests.support.service import ServiceFactory
CONSOLE_SCRIPT = Path(sys.executable).parent / "turnkeeper"
# Nothing listens on port 1: connections are refused at once.
DEAD_ADDRESS = "127.0.0.1:1"
# The turns here are written by the test in r1/i1's name, and no agent renews them:
# the CLI's calls between two writes outlast a 2 s lease on a loaded machine.
pytestmark = pytest.mark.unrenewed


async def cli(capsys: pytest.CaptureFixture[str], address: str, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = await asyncio.to_thread(main, [*argv, "--address", address])
    out, err = capsys.readouterr()
    return code, out, err


async def run_script(*argv: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        str(CONSOLE_SCRIPT),
        *argv,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def three_turns(turns: TurnStub) -> None:
    """t1 RUNNING (agent a), t2 DONE (agent b), t3 PARKED (agent a); t3 is newest."""
    await start(turns, "t1", "th1", "a")
    await turns.AppendEvents(
        pb.AppendEventsRequest(turn_id="t1", attempt=0, events=events(1, "token", "step"))
    )
    await start(turns, "t2", "th2", "b")
    await turns.FinishTurn(pb.FinishTurnRequest(turn_id="t2", attempt=0, outcome=pb.OUTCOME_DONE))
    await start(turns, "t3", "th3", "a")
    await turns.ParkTurn(
        pb.ParkTurnRequest(turn_id="t3", attempt=0, interrupt=value({"ask": "approve?"}))
    )


def ids(table: str) -> list[str]:
    return [line.split()[0] for line in table.strip().splitlines()[1:]]


# -- turns list ------------------------------------------------------------------------


async def test_list_filters_and_pages(
    service: TurnkeeperServer, turns: TurnStub, capsys: pytest.CaptureFixture[str]
) -> None:
    await three_turns(turns)
    code, out, _ = await cli(capsys, service.address, "turns", "list")
    assert code == 0
    header = out.splitlines()[0].split()
    assert header == ["TURN", "THREAD", "AGENT", "STATE", "ATTEMPTS", "SEQ", "UPDATED", "ERROR"]
    assert ids(out) == ["t3", "t2", "t1"]
    assert out.splitlines()[1].split()[:6] == ["t3", "th3", "a", "PARKED", "0", "0"]

    for flags, expected in [
        (["--status", "parked"], ["t3"]),
        (["--status", "RUNNING"], ["t1"]),
        (["--agent", "a"], ["t3", "t1"]),
        (["--thread", "th2"], ["t2"]),
        (["--agent", "b", "--status", "failed"], []),
    ]:
        code, out, _ = await cli(capsys, service.address, "turns", "list", *flags)
        assert code == 0
        assert (ids(out) if expected else out.strip()) == (expected or "no turns"), flags

    code, out, err = await cli(capsys, service.address, "turns", "list", "--page-size", "2")
    assert ids(out) == ["t3", "t2"]
    token = err.split("--page-token ")[1].split()[0]
    code, out, err = await cli(
        capsys, service.address, "turns", "list", "--page-size", "2", "--page-token", token
    )
    assert (ids(out), err) == (["t1"], "")
    code, out, _ = await cli(capsys, service.address, "turns", "list", "--page-size", "1", "--all")
    assert ids(out) == ["t3", "t2", "t1"]


async def test_list_json_is_for_scripts(
    service: TurnkeeperServer, turns: TurnStub, capsys: pytest.CaptureFixture[str]
) -> None:
    await three_turns(turns)
    code, out, _ = await cli(capsys, service.address, "turns", "list", "--json", "--page-size", "2")
    listing = json.loads(out)
    assert code == 0
    assert [t["turn_id"] for t in listing["turns"]] == ["t3", "t2"]
    assert listing["next_page_token"]
    parked = listing["turns"][0]
    assert parked["state"] == "PARKED"
    assert parked["interrupt"] == {"ask": "approve?"}
    assert parked["input"] == {"q": "hello"}
    assert parked["owner"] is None
    assert parked["created_at"].endswith("Z")
    done = listing["turns"][1]
    assert (done["state"], done["last_seq"]) == ("DONE", 1)


async def test_list_refuses_an_unknown_state(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["turns", "list", "--status", "sleeping"])
    assert exit_.value.code == EXIT_USAGE
    assert "RUNNING, PARKED, DONE, FAILED" in capsys.readouterr().err


# -- turns show / status -----------------------------------------------------------------


async def test_show_prints_the_record_and_its_events(
    service: TurnkeeperServer, turns: TurnStub, capsys: pytest.CaptureFixture[str]
) -> None:
    await three_turns(turns)
    code, out, _ = await cli(capsys, service.address, "turns", "show", "t1")
    assert code == 0
    record, table = out.split("\n\n")
    fields = dict(line.split(": ", 1) for line in record.splitlines())
    assert fields["state"].strip() == "RUNNING"
    assert fields["owner"].strip().startswith("r1/i1 (lease until ")
    assert fields["input"].strip() == '{"q":"hello"}'
    assert table.splitlines()[0].split() == ["SEQ", "ATTEMPT", "TYPE", "DATA"]
    assert [r.split() for r in table.strip().splitlines()[1:]] == [
        ["1", "0", "token", '{"n":1}'],
        ["2", "0", "step", '{"n":2}'],
    ]

    code, out, _ = await cli(capsys, service.address, "turns", "show", "t2", "--json")
    shown = json.loads(out)
    assert shown["turn"]["state"] == "DONE"
    assert [(e["seq"], e["type"], e["data"]) for e in shown["events"]] == [(1, "turn.done", {})]


async def test_show_prints_whole_numbers_as_they_were_sent(
    service: TurnkeeperServer, turns: TurnStub, capsys: pytest.CaptureFixture[str]
) -> None:
    # A protobuf Value holds every number as a double; the CLI shows 3, not 3.0.
    await start(turns, "tn", "thn", "a", input={"n": 3, "ratio": 1.5, "big": [2**60]})
    code, out, _ = await cli(capsys, service.address, "turns", "show", "tn")
    assert code == 0
    fields = dict(line.split(": ", 1) for line in out.split("\n\n")[0].splitlines())
    # (a Struct's keys come in a map's order)
    assert json.loads(fields["input"]) == {"n": 3, "ratio": 1.5, "big": [2.0**60]}
    assert '"n":3' in fields["input"].replace(" ", "")
    code, out, _ = await cli(capsys, service.address, "turns", "show", "tn", "--json")
    assert json.loads(out)["turn"]["input"] == {"n": 3, "ratio": 1.5, "big": [2.0**60]}


async def test_show_of_an_unknown_turn_is_not_found(
    service: TurnkeeperServer, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = await cli(capsys, service.address, "turns", "show", "nope")
    assert code == EXIT_NOT_FOUND
    assert out == ""
    assert err == "error: NOT_FOUND: turn 'nope' is not in the journal\n"


async def test_status(
    service: TurnkeeperServer, turns: TurnStub, capsys: pytest.CaptureFixture[str]
) -> None:
    await three_turns(turns)
    code, out, _ = await cli(capsys, service.address, "turns", "status", "t1")
    assert (code, out.split()) == (0, ["t1", "RUNNING", "attempts=0", "last_seq=2"])
    code, out, _ = await cli(capsys, service.address, "turns", "status", "t2", "--json")
    assert json.loads(out) == {
        "turn_id": "t2",
        "state": "DONE",
        "attempts": 0,
        "last_seq": 1,
        "error": "",
    }
    # TurnStatus answers UNKNOWN for an id it never saw: an answer, not an error.
    code, out, _ = await cli(capsys, service.address, "turns", "status", "nope")
    assert code == 0
    assert out.startswith("nope  UNKNOWN")
    code, _, err = await cli(capsys, service.address, "turns", "status", "bad id")
    assert code == EXIT_USAGE
    assert err.startswith("error: INVALID_ARGUMENT: turn_id 'bad id' has characters outside")


# -- turns resume / redrive ---------------------------------------------------------------


async def test_resume_a_parked_turn_once(
    service: TurnkeeperServer, turns: TurnStub, capsys: pytest.CaptureFixture[str]
) -> None:
    await three_turns(turns)
    code, out, _ = await cli(
        capsys, service.address, "turns", "resume", "t3", "--value", '{"approved": true}'
    )
    assert code == 0
    assert out.startswith("resumed t3: RUNNING, no replica took it yet")
    got = await turns.GetTurn(pb.GetTurnRequest(turn_id="t3"))
    assert got.turn.resume.struct_value["approved"] is True

    code, out, err = await cli(capsys, service.address, "turns", "resume", "t3", "--value", "1")
    assert (code, out) == (EXIT_WRONG_STATE, "")
    assert err == (
        "error: FAILED_PRECONDITION: turn 't3' is RUNNING, not PARKED (it was already resumed)\n"
    )
    code, _, err = await cli(capsys, service.address, "turns", "resume", "t1", "--value", "1")
    assert code == EXIT_WRONG_STATE
    assert err.startswith("error: FAILED_PRECONDITION: turn 't1' is RUNNING, not PARKED")
    code, _, err = await cli(capsys, service.address, "turns", "resume", "nope", "--value", "1")
    assert (code, err) == (EXIT_NOT_FOUND, "error: NOT_FOUND: turn 'nope' is not in the journal\n")


async def test_resume_json_and_a_value_that_is_not_json(
    service: TurnkeeperServer, turns: TurnStub, capsys: pytest.CaptureFixture[str]
) -> None:
    await three_turns(turns)
    with pytest.raises(SystemExit) as exit_:
        main(["turns", "resume", "t3", "--value", "{approved"])
    assert exit_.value.code == EXIT_USAGE
    assert "argument --value: not JSON" in capsys.readouterr().err
    code, out, _ = await cli(
        capsys, service.address, "turns", "resume", "t3", "--value", '["yes", 2]', "--json"
    )
    resumed = json.loads(out)
    assert code == 0
    assert resumed["dispatched"] is False
    assert (resumed["turn"]["state"], resumed["turn"]["resume"]) == ("RUNNING", ["yes", 2])


async def test_redrive_needs_force_while_the_lease_is_live_and_stops_at_the_cap(
    service: TurnkeeperServer, turns: TurnStub, capsys: pytest.CaptureFixture[str]
) -> None:
    await three_turns(turns)
    code, out, err = await cli(capsys, service.address, "turns", "redrive", "t1")
    assert (code, out) == (EXIT_WRONG_STATE, "")
    assert err.startswith("error: FAILED_PRECONDITION: turn 't1' is owned by r1/i1 whose lease")
    assert "pass force" in err

    code, out, _ = await cli(capsys, service.address, "turns", "redrive", "t1", "--force")
    assert code == 0
    assert out.startswith(
        "re-drove t1: attempt 1, rewound to seq 0 (checkpoint none: restarts from the "
        "journaled input); no replica took it yet"
    )
    for attempt in (2, 3):
        code, out, _ = await cli(capsys, service.address, "turns", "redrive", "t1", "--json")
        redriven = json.loads(out)["turns"][0]
        assert (code, redriven["turn"]["attempts"], redriven["failed_at_cap"]) == (
            0,
            attempt,
            False,
        )
    # The default cap is 3 re-drives: the next one fails the turn instead.
    code, out, _ = await cli(capsys, service.address, "turns", "redrive", "t1")
    assert code == 0
    assert out.startswith("t1: FAILED at the re-drive cap after 3 re-drives")

    for turn_id, state in (("t1", "FAILED"), ("t2", "DONE"), ("t3", "PARKED")):
        code, _, err = await cli(capsys, service.address, "turns", "redrive", turn_id)
        assert code == EXIT_WRONG_STATE
        assert err.startswith(f"error: FAILED_PRECONDITION: turn '{turn_id}' is {state}")
    assert "use ResumeDetached for a parked turn" in err


# -- turns watch ------------------------------------------------------------------------


async def wait_for_watchers(service: TurnkeeperServer, count: int) -> None:
    for _ in range(200):
        if service.metrics.registry.get_sample_value("turnkeeper_watchers") == count:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"never saw {count} watchers")


@pytest.mark.parametrize("as_json", [False, True])
async def test_watch_shows_the_reset_of_a_redrive(
    service: TurnkeeperServer,
    turns: TurnStub,
    capsys: pytest.CaptureFixture[str],
    as_json: bool,
) -> None:
    await start(turns, "t1", "th1", "a")
    await turns.AppendEvents(
        pb.AppendEventsRequest(
            turn_id="t1", attempt=0, events=events(1, "token", "tool_call_start")
        )
    )
    capsys.readouterr()
    flags = ["--json"] if as_json else []
    watching = asyncio.create_task(
        asyncio.to_thread(main, ["turns", "watch", "t1", "--address", service.address, *flags])
    )
    await wait_for_watchers(service, 1)
    # The agent process restarts: its startup re-drive rewinds the turn to seq 0.
    await turns.Redrive(pb.RedriveRequest(agent="a", replica="r1", incarnation="i2"))
    await turns.AppendEvents(
        pb.AppendEventsRequest(turn_id="t1", attempt=1, events=events(1, "token"))
    )
    await turns.FinishTurn(pb.FinishTurnRequest(turn_id="t1", attempt=1, outcome=pb.OUTCOME_DONE))
    assert await asyncio.wait_for(watching, 10) == 0
    out = capsys.readouterr().out
    if as_json:
        frames = [json.loads(line) for line in out.splitlines()]
        seen = [
            ("reset", f["reset"]["seq"])
            if "reset" in f
            else (f["event"]["type"], f["event"]["seq"])
            for f in frames
        ]
        assert seen == [
            ("token", 1),
            ("tool_call_start", 2),
            ("reset", 0),
            ("token", 1),
            ("turn.done", 2),
        ]
        assert frames[3]["event"]["attempt"] == 1
        assert frames[2]["reset"] == {"seq": 0, "attempt": 1, "checkpoint_id": ""}
        return
    lines = out.splitlines()
    assert [line.split()[:4] for line in lines[:2]] == [
        ["1", "attempt", "0", "token"],
        ["2", "attempt", "0", "tool_call_start"],
    ]
    assert lines[2].startswith("----- RESET: rewound to seq 0 (attempt 1, checkpoint none)")
    assert [line.split()[:4] for line in lines[3:]] == [
        ["1", "attempt", "1", "token"],
        ["2", "attempt", "1", "turn.done"],
    ]


async def test_watch_of_an_unknown_turn(
    service: TurnkeeperServer, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = await cli(capsys, service.address, "turns", "watch", "nope")
    assert (code, out) == (EXIT_NOT_FOUND, "")
    assert err == "error: NOT_FOUND: turn 'nope' is not in the journal\n"


async def test_a_slow_handshake_is_waited_for_not_taken_for_an_unreachable_service(
    service: TurnkeeperServer, capsys: pytest.CaptureFixture[str]
) -> None:
    # WatchTurn is not retried: a fresh channel's first attempt to connect is all it
    # has. Under load the handshake outlasted the 250 ms grpc gave it (its connect
    # timeout, set as "min_reconnect_backoff_ms") and `watch` exited 5, not 3.
    relay = Relay(service.port)
    await relay.start()
    try:
        relay.hold()  # the handshake: read, not forwarded
        watching = asyncio.create_task(
            asyncio.to_thread(
                main, ["turns", "watch", "nope", "--address", f"127.0.0.1:{relay.port}"]
            )
        )
        await asyncio.wait_for(relay.holding.wait(), 10)
        # A service that takes a second to answer the handshake (what the fault is,
        # not a wait for something to happen).
        await asyncio.wait({watching}, timeout=1)
        relay.release()
        assert await asyncio.wait_for(watching, 30) == EXIT_NOT_FOUND
    finally:
        await relay.stop()


# -- health and connection ------------------------------------------------------------------


async def test_health_exit_status_as_docker_sees_it(service: TurnkeeperServer) -> None:
    assert await service.link.wait_connected(30)
    assert await run_script("health", "--address", service.address) == (0, "SERVING\n", "")
    code, out, err = await run_script(
        "health", "--address", service.address, "--service", "turnkeeper.v1.TurnService"
    )
    assert (code, out) == (0, "SERVING\n")
    code, _, err = await run_script("health", "--address", service.address, "--service", "x.Y")
    assert code == 1
    assert err == "error: NOT_FOUND: the server has no health status for service 'x.Y'\n"
    # Docker reserves exit status 2, so an unreachable service is 1 too.
    code, _, err = await run_script("health", "--address", DEAD_ADDRESS)
    assert code == 1
    assert err.startswith("error: UNAVAILABLE: ")
    # Shutting down: NOT_SERVING first, so probes fail before the port closes.
    await service.health.enter_graceful_shutdown()
    assert await run_script("health", "--address", service.address) == (1, "NOT_SERVING\n", "")


async def test_health_says_not_serving_while_nats_is_down(
    make_service: ServiceFactory, nats_server: NatsServer
) -> None:
    """A wrong or dead NATS URL: the overall check fails with a line a script can
    tell from a plain NOT_SERVING; the NATS entry can be asked for alone."""
    down = await make_service(nats_url="nats://127.0.0.1:1")
    assert await run_script("health", "--address", down.address) == (
        1,
        "NOT_SERVING: NATS down\n",
        "",
    )
    assert await run_script(
        "health", "--address", down.address, "--service", "turnkeeper.nats"
    ) == (1, "NOT_SERVING\n", "")
    # Per service, the gRPC services themselves still serve (load balancers see them).
    code, out, _ = await run_script(
        "health", "--address", down.address, "--service", "turnkeeper.v1.TurnService"
    )
    assert (code, out) == (0, "SERVING\n")
    # With NATS off there is no entry, and the service is SERVING.
    await down.stop(0)
    off = await make_service(nats_url=None)
    assert await run_script("health", "--address", off.address) == (0, "SERVING\n", "")


async def test_an_unreachable_service(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = await cli(capsys, DEAD_ADDRESS, "turns", "status", "t1", "--timeout", "2")
    assert (code, out) == (EXIT_UNAVAILABLE, "")
    assert err.startswith("error: UNAVAILABLE: ")


def test_connection_flags_and_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TURNKEEPER_ADDRESS", "svc:7000")
    monkeypatch.setenv("TURNKEEPER_TOKEN", "s3cret")
    monkeypatch.setenv("TURNKEEPER_TLS", "0")
    args = build_parser(serve_arguments=False).parse_args(["turns", "status", "t1"])
    options = connection_options(args, 30.0)
    assert options.target == "svc:7000"
    assert options.call_metadata() == (("authorization", "Bearer s3cret"),)
    assert not options.secure
    assert options.default_timeout == 30.0

    ca, cert, key = (tmp_path / name for name in ("ca.pem", "cert.pem", "key.pem"))
    args = build_parser(serve_arguments=False).parse_args(
        [
            *("health", "--address", "h:1", "--token", "t", "--tls-ca", str(ca)),
            *("--tls-cert", str(cert), "--tls-key", str(key), "--timeout", "3"),
        ]
    )
    options = connection_options(args, 5.0)
    assert (options.target, options.bearer_token, options.default_timeout) == ("h:1", "t", 3.0)
    assert (options.root_certificates, options.client_certificate, options.client_key) == (
        ca,
        cert,
        key,
    )
    assert options.secure
    monkeypatch.setenv("TURNKEEPER_TLS", "1")
    args = build_parser(serve_arguments=False).parse_args(["health"])
    assert connection_options(args, 5.0).tls


def test_bad_connection_flags_are_usage_errors(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    cert = str(tmp_path / "cert.pem")
    assert main(["turns", "status", "t1", "--tls-cert", cert]) == EXIT_USAGE
    assert capsys.readouterr().err == "error: client_certificate and client_key go together\n"
    # A CA file that is not there: reported, not a traceback.
    code = main(["turns", "status", "t1", "--tls-ca", str(tmp_path / "missing.pem")])
    assert code == 1
    assert capsys.readouterr().err.startswith("error: [Errno 2] No such file or directory")


def test_serve_flags_still_parse() -> None:
    args: Any = build_parser().parse_args(
        ["serve", "--listen", "127.0.0.1:0", "--no-nats", "--log-format", "json"]
    )
    assert (args.command, args.listen, args.no_nats, args.log_format) == (
        "serve",
        "127.0.0.1:0",
        True,
        "json",
    )


async def test_serve_as_the_container_runs_it(tmp_path: Path) -> None:
    """`turnkeeper serve` in a process of its own: JSON logs, health from another
    process, and SIGTERM (what `docker stop` sends) ends it cleanly."""
    proc = await asyncio.create_subprocess_exec(
        str(CONSOLE_SCRIPT),
        *("serve", "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path), "--no-nats"),
        *("--metrics-listen", "127.0.0.1:0", "--log-format", "json"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    try:
        first = await proc.stdout.readline()
        address = first.decode().split()[-1]
        assert first.decode().startswith("turnkeeper listening on 127.0.0.1:")
        assert await run_script("health", "--address", address) == (0, "SERVING\n", "")
    finally:
        proc.terminate()
        _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0
    # Only Python's logging is JSON; grpc's C core may write a plain line of its own.
    lines = [json.loads(line) for line in err.decode().splitlines() if line.startswith("{")]
    assert {"ts", "level", "logger", "msg"} <= set(lines[0])
    messages = [line["msg"] for line in lines]
    assert any(m.startswith("metrics on http://127.0.0.1:") for m in messages)
    assert messages[-1] == "turnkeeper stopped"


async def test_effects_lists_the_turn_s_ledger(
    service: TurnkeeperServer, turns: TurnStub, capsys: pytest.CaptureFixture[str]
) -> None:
    await start(turns)
    code, out, _ = await cli(capsys, service.address, "turns", "effects", "t1")
    assert (code, out) == (0, "no effects recorded\n")
    send = pb.EffectCall(
        turn_id="t1",
        attempt=0,
        key="k1",
        name="send_invoice",
        args_json='{"order": 7}',
        policy=pb.EFFECT_POLICY_PARK,
        task_id="task-1",
    )
    await turns.RecordEffect(
        pb.RecordEffectRequest(call=send, state=pb.EFFECT_STATE_DONE, outcome_json='"inv-1"')
    )
    code, out, _ = await cli(capsys, service.address, "turns", "effects", "t1")
    header, row = out.strip().splitlines()
    assert header.split() == ["KEY", "NAME", "STATE", "POLICY", "ATTEMPT", "ARGS", "OUTCOME"]
    assert row.split() == ["k1", "send_invoice", "DONE", "park", "0", '{"order":7}', "inv-1"]
    code, out, _ = await cli(capsys, service.address, "turns", "effects", "t1", "--json")
    [shown] = json.loads(out)["effects"]
    assert (shown["key"], shown["state"], shown["args"], shown["outcome"]) == (
        "k1",
        "DONE",
        {"order": 7},
        "inv-1",
    )
    code, _, err = await cli(capsys, service.address, "turns", "effects", "nope")
    assert code == EXIT_NOT_FOUND and "NOT_FOUND" in err
