"""The `turnkeeper` command: `serve` runs the service, `dev` the service with a
langgraph.json's graphs; the rest talk to one.

turnkeeper dev [langgraph.json]   service, NATS and graphs; LangGraph API on :2024

turnkeeper turns list [--status S] [--agent A] [--thread T] [--all] [--json]
turnkeeper turns show ID          the record and its retained events
turnkeeper turns effects ID       the turn's effect ledger (docs/effects.md)
turnkeeper turns status ID        TurnStatus (UNKNOWN for an id never seen)
turnkeeper turns resume ID --value JSON
turnkeeper turns redrive ID [--force]
turnkeeper turns watch ID         live events; a rewind shows a RESET line
turnkeeper audit [--limit N]      operator actions: who, what, when, outcome
turnkeeper agents [--agent A]     replicas, their graph versions, turns waiting for one
turnkeeper agents migrate AGENT --to VERSION [--dry-run]   move waiting turns on purpose
turnkeeper threads export --agent A [-o FILE]    threads with their graph versions
turnkeeper replay-check --graph M:ATTR (--threads FILE | --agent A)   for CI; exit 1
                                  when the new graph cannot continue a stored thread
turnkeeper backup DEST [--data-dir DIR]   consistent copy of the SQLite files
turnkeeper health                 exit 0 only when the service is SERVING and,
                                  unless it runs without NATS, NATS is connected
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import grpc

from turnkeeper.client import ConnectionOptions, TurnkeeperClient, default_address
from turnkeeper.errors import TurnkeeperError, from_rpc_error
from turnkeeper.operator import _agents as agents
from turnkeeper.operator import _args as argtypes
from turnkeeper.operator import _audit as audit
from turnkeeper.operator import _backup as backup
from turnkeeper.operator import _lifecycle_cli as lifecycle_cli
from turnkeeper.operator import _plugins as plugins
from turnkeeper.operator import _render as render
from turnkeeper.operator import _replay as replay
from turnkeeper.v1 import turns_pb2

# Exit codes. Scripts can tell "no such turn" and "not in that state" apart from
# an unreachable service. `health` uses 0 and 1 only, as Docker's HEALTHCHECK
# reserves 2.
EXIT_OK: Final = 0
EXIT_ERROR: Final = 1
EXIT_USAGE: Final = 2
EXIT_NOT_FOUND: Final = 3
EXIT_WRONG_STATE: Final = 4
EXIT_UNAVAILABLE: Final = 5
EXIT_INTERRUPTED: Final = 130

_EXIT_BY_CODE: Final = {
    grpc.StatusCode.INVALID_ARGUMENT: EXIT_USAGE,
    grpc.StatusCode.NOT_FOUND: EXIT_NOT_FOUND,
    grpc.StatusCode.FAILED_PRECONDITION: EXIT_WRONG_STATE,
    grpc.StatusCode.UNAVAILABLE: EXIT_UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED: EXIT_UNAVAILABLE,
}

EPILOG: Final = """\
exit status: 0 ok, 1 other error, 2 usage or INVALID_ARGUMENT, 3 NOT_FOUND,
4 FAILED_PRECONDITION (the turn is not in a state that allows it), 5 UNAVAILABLE or
DEADLINE_EXCEEDED (service unreachable), 130 interrupted. `health` exits 0 or 1.
Errors print `error: <STATUS>: <message>` on stderr."""

ADDRESS_HELP: Final = "host:port of the service (env TURNKEEPER_ADDRESS; default 127.0.0.1:50051)"
# Turns per ListTurns call; the service allows 1000.
PAGE_SIZE: Final = 100
# ListEvents page size for `turns show` (the service's maximum).
EVENTS_PAGE: Final = 1000
DEFAULT_TIMEOUT: Final = 30.0
# Under the Dockerfile HEALTHCHECK's --timeout=5s, so the probe reports its own error.
HEALTH_TIMEOUT: Final = 3.0

# -- arguments ---------------------------------------------------------------------


def _connection_parser() -> argparse.ArgumentParser:
    env = os.environ.get
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group("connection")
    group.add_argument("--address", default=default_address(), help=ADDRESS_HELP)
    group.add_argument(
        "--tls",
        action="store_true",
        default=(env("TURNKEEPER_TLS") or "").strip().lower() in ("1", "true", "yes", "on"),
        help="use TLS with the system's roots (implied by --tls-ca and --tls-cert; "
        "env TURNKEEPER_TLS=1)",
    )
    group.add_argument(
        "--tls-ca",
        type=Path,
        default=env("TURNKEEPER_TLS_CA") or None,
        metavar="PEM",
        help="CA bundle that signed the service's certificate (env TURNKEEPER_TLS_CA)",
    )
    group.add_argument(
        "--tls-cert",
        type=Path,
        default=env("TURNKEEPER_TLS_CLIENT_CERT") or None,
        metavar="PEM",
        help="client certificate for mutual TLS, with --tls-key (env TURNKEEPER_TLS_CLIENT_CERT)",
    )
    group.add_argument(
        "--tls-key",
        type=Path,
        default=env("TURNKEEPER_TLS_CLIENT_KEY") or None,
        metavar="PEM",
        help="client private key for mutual TLS (env TURNKEEPER_TLS_CLIENT_KEY)",
    )
    group.add_argument(
        "--token",
        default=env("TURNKEEPER_TOKEN") or None,
        help="bearer token, sent as `authorization: Bearer <token>` (env TURNKEEPER_TOKEN)",
    )
    group.add_argument(
        "--timeout",
        type=argtypes.positive_float,
        default=None,
        metavar="SECONDS",
        help=f"deadline of each call (default {DEFAULT_TIMEOUT:g}; "
        f"{HEALTH_TIMEOUT:g} for health; none for watch)",
    )
    return parent


def build_parser(serve_arguments: bool = True) -> argparse.ArgumentParser:
    """The whole command line. `serve_arguments=False` leaves out the flags of
    `serve`, which need the server package: importing it costs more than the rest
    of a client command (and `health` runs every few seconds in a container)."""
    parser = argparse.ArgumentParser(
        prog="turnkeeper",
        description=__doc__,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = commands.add_parser("serve", help="run the turnkeeper gRPC service")
    dev = commands.add_parser(
        "dev",
        help="the service, NATS and a langgraph.json's graphs in one command, for "
        "development (LangGraph API and console on port 2024)",
    )
    if serve_arguments:
        for name, sub in (("serve", serve), ("dev", dev)):
            server = plugins.server_command(name)
            if server is not None:
                server.add_arguments(sub)

    agent = commands.add_parser(
        "agent",
        help="serve the graphs of a langgraph.json durably (needs turnkeeper[agent])",
        add_help=False,
    )
    # Its arguments are the host's own (main() hands them over unparsed).
    agent.add_argument("agent_args", nargs=argparse.REMAINDER)

    conn = _connection_parser()
    output = argparse.ArgumentParser(add_help=False)
    output.add_argument("--json", action="store_true", help="print JSON for scripts")

    turns = commands.add_parser("turns", help="look at and act on turns")
    verbs = turns.add_subparsers(dest="verb", required=True, metavar="VERB")

    listing = verbs.add_parser(
        "list", parents=[conn, output], help="turns, newest first, filtered and paged"
    )
    listing.add_argument(
        "--status",
        "--state",
        dest="state",
        type=argtypes.state,
        metavar="STATE",
        help="RUNNING, PARKED, DONE, FAILED, CANCELLED or QUEUED",
    )
    listing.add_argument("--agent", default="", help="only turns of this agent")
    listing.add_argument("--thread", default="", help="only turns on this thread")
    listing.add_argument(
        "--page-size", type=argtypes.page_size, default=PAGE_SIZE, help=f"default {PAGE_SIZE}"
    )
    listing.add_argument("--page-token", default="", help="continue a previous listing")
    listing.add_argument("--all", action="store_true", help="follow every page")
    listing.set_defaults(handler=turns_list)

    show = verbs.add_parser("show", parents=[conn, output], help="a turn's record and events")
    show.add_argument("turn_id", metavar="ID")
    show.set_defaults(handler=turns_show)

    effects = verbs.add_parser(
        "effects",
        parents=[conn, output],
        help="a turn's effects: each call, its state, arguments and outcome",
    )
    effects.add_argument("turn_id", metavar="ID")
    effects.set_defaults(handler=turns_effects)

    status = verbs.add_parser(
        "status", parents=[conn, output], help="TurnStatus: what the panel asks"
    )
    status.add_argument("turn_id", metavar="ID")
    status.set_defaults(handler=turns_status)

    resume = verbs.add_parser(
        "resume", parents=[conn, output], help="resume a PARKED turn with a value"
    )
    resume.add_argument("turn_id", metavar="ID")
    resume.add_argument(
        "--value",
        type=argtypes.json_value,
        required=True,
        metavar="JSON",
        help="the resume value, as JSON (e.g. '{\"approved\": true}')",
    )
    resume.set_defaults(handler=turns_resume)

    redrive = verbs.add_parser(
        "redrive", parents=[conn, output], help="re-drive a RUNNING turn whose executor died"
    )
    redrive.add_argument("turn_id", metavar="ID")
    redrive.add_argument(
        "--force", action="store_true", help="even while its owner holds a live lease"
    )
    redrive.set_defaults(handler=turns_redrive)

    watch = verbs.add_parser(
        "watch", parents=[conn, output], help="follow a turn's events until it ends"
    )
    watch.add_argument("turn_id", metavar="ID")
    watch.add_argument(
        "--after-seq", type=int, default=0, metavar="SEQ", help="start after this seq"
    )
    watch.set_defaults(handler=turns_watch)
    thread_verbs = lifecycle_cli.add_commands(commands, verbs, [conn, output])

    audit.add_command(commands, [conn, output], _client)
    agents.add_command(commands, [conn, output], _client)
    replay.add_commands(commands, thread_verbs, [conn, output], _client)
    backup.add_command(commands)

    health = commands.add_parser(
        "health",
        parents=[conn],
        help="gRPC health check: exit 0 only when SERVING (and NATS connected, unless off)",
    )
    health.add_argument(
        "--service", default="", help="a service name (default: the server as a whole)"
    )
    health.set_defaults(handler=health_check)
    return parser


# -- plumbing ----------------------------------------------------------------------


def connection_options(
    args: argparse.Namespace, default_timeout: float | None
) -> ConnectionOptions:
    return ConnectionOptions(
        target=args.address,
        tls=args.tls,
        root_certificates=args.tls_ca,
        client_certificate=args.tls_cert,
        client_key=args.tls_key,
        bearer_token=args.token,
        default_timeout=args.timeout or default_timeout,
    )


@contextlib.contextmanager
def _client(args: argparse.Namespace) -> Iterator[TurnkeeperClient]:
    with TurnkeeperClient(connection_options(args, DEFAULT_TIMEOUT)) as client:
        yield client


def _out(text: str = "") -> None:
    print(text, flush=True)


def _json_out(obj: Any) -> None:
    _out(render.dumps(obj))


# -- commands ------------------------------------------------------------------------


def turns_list(args: argparse.Namespace) -> int:
    request = turns_pb2.ListTurnsRequest(
        state=turns_pb2.TurnState.Value(f"{render.STATE_PREFIX}{args.state}")
        if args.state
        else turns_pb2.TURN_STATE_UNSPECIFIED,
        agent=args.agent,
        thread_id=args.thread,
        page_size=args.page_size,
        page_token=args.page_token,
    )
    found: list[turns_pb2.Turn] = []
    with _client(args) as client:
        while True:
            page = client.list_turns(request)
            found.extend(page.turns)
            if not (args.all and page.next_page_token):
                break
            request.page_token = page.next_page_token
    next_token = page.next_page_token
    if args.json:
        _json_out({"turns": [render.turn_dict(t) for t in found], "next_page_token": next_token})
        return EXIT_OK
    if found:
        _out(render.table(render.TURN_COLUMNS, [render.turn_row(t) for t in found]))
    else:
        _out("no turns")
    if next_token:
        print(f"more: add --page-token {next_token} (or --all)", file=sys.stderr)
    return EXIT_OK


def turns_show(args: argparse.Namespace) -> int:
    with _client(args) as client:
        turn = client.get_turn(turns_pb2.GetTurnRequest(turn_id=args.turn_id)).turn
        events: list[turns_pb2.Event] = []
        while True:
            after = events[-1].seq if events else 0
            page = client.list_events(
                turns_pb2.ListEventsRequest(
                    turn_id=args.turn_id, after_seq=after, page_size=EVENTS_PAGE
                )
            )
            events.extend(page.events)
            if len(page.events) < EVENTS_PAGE:
                break
    if args.json:
        _json_out(
            {"turn": render.turn_dict(turn), "events": [render.event_dict(e) for e in events]}
        )
        return EXIT_OK
    _out(render.turn_record(turn))
    _out()
    if events:
        _out(render.table(render.EVENT_COLUMNS, [render.event_row(e) for e in events]))
    else:
        _out("no retained events")
    return EXIT_OK


def turns_effects(args: argparse.Namespace) -> int:
    found: list[turns_pb2.Effect] = []
    with _client(args) as client:
        token = ""
        while True:
            page = client.list_effects(
                turns_pb2.ListEffectsRequest(turn_id=args.turn_id, page_token=token)
            )
            found.extend(page.effects)
            token = page.next_page_token
            if not token:
                break
    if args.json:
        _json_out({"effects": [render.effect_dict(e) for e in found]})
        return EXIT_OK
    if found:
        _out(render.table(render.EFFECT_COLUMNS, [render.effect_row(e) for e in found]))
    else:
        _out("no effects recorded")
    return EXIT_OK


def turns_status(args: argparse.Namespace) -> int:
    with _client(args) as client:
        status = client.turn_status(turns_pb2.TurnStatusRequest(turn_id=args.turn_id))
    if args.json:
        _json_out(render.status_dict(status))
        return EXIT_OK
    d = render.status_dict(status)
    if status.state == turns_pb2.TURN_STATE_UNKNOWN:
        _out(f"{d['turn_id']}  UNKNOWN (the journal never saw this turn)")
        return EXIT_OK
    line = f"{d['turn_id']}  {d['state']}  attempts={d['attempts']}  last_seq={d['last_seq']}"
    line += f"  end_reason={d['end_reason']}" if d.get("end_reason") else ""
    _out(line + (f"  error={d['error']}" if d["error"] else ""))
    if d.get("detail"):
        _out(f"  {d['detail']}")
    return EXIT_OK


def turns_resume(args: argparse.Namespace) -> int:
    value = render.value_of(args.value)
    with _client(args) as client:
        # Not retried by the client: it is a compare-and-set (see client._RETRIED).
        response = client.resume_detached(
            turns_pb2.ResumeDetachedRequest(turn_id=args.turn_id, resume=value)
        )
    if args.json:
        _json_out({"turn": render.turn_dict(response.turn), "dispatched": response.dispatched})
        return EXIT_OK
    where = (
        "a replica took it"
        if response.dispatched
        else "no replica took it yet; it waits RUNNING without an owner and is handed "
        "out again (or taken by the agent's next startup re-drive)"
    )
    _out(f"resumed {response.turn.turn_id}: {render.state_name(response.turn.state)}, {where}")
    return EXIT_OK


def turns_redrive(args: argparse.Namespace) -> int:
    with _client(args) as client:
        response = client.redrive(turns_pb2.RedriveRequest(turn_id=args.turn_id, force=args.force))
    if args.json:
        _json_out(
            {
                "turns": [render.redriven_dict(r) for r in response.turns],
                "dispatched": response.dispatched,
            }
        )
        return EXIT_OK
    for r in response.turns:
        turn = r.turn
        if r.failed_at_cap:
            _out(
                f"{turn.turn_id}: FAILED at the re-drive cap after {turn.crashes_charged} re-drives "
                f"({turn.error})"
            )
            continue
        checkpoint = r.checkpoint_id or "none: restarts from the journaled input"
        where = "a replica took it" if response.dispatched else "no replica took it yet"
        _out(
            f"re-drove {turn.turn_id}: attempt {turn.attempts}, rewound to seq "
            f"{r.rewind_seq} (checkpoint {checkpoint}); {where}"
        )
    return EXIT_OK


def turns_watch(args: argparse.Namespace) -> int:
    if args.after_seq < 0:
        raise _Usage("--after-seq must not be negative")
    # No default deadline: the stream lasts as long as the turn (--timeout bounds it).
    with TurnkeeperClient(connection_options(args, None)) as client:
        stream = client.watch_turn(
            turns_pb2.WatchTurnRequest(turn_id=args.turn_id, after_seq=args.after_seq),
            timeout=args.timeout,
        )
        for frame in stream:
            if frame.HasField("reset"):
                if args.json:
                    _json_out({"reset": render.reset_dict(frame.reset)})
                else:
                    _out(render.reset_line(frame.reset))
            elif args.json:
                _json_out({"event": render.event_dict(frame.event)})
            else:
                _out(render.event_line(frame.event))
    return EXIT_OK


# The health entry that follows the service's NATS link (turnkeeper_server.app).
NATS_HEALTH_NAME = "turnkeeper.nats"


def health_check(args: argparse.Namespace) -> int:
    # Imported here: only this command needs the health stubs (the `operator` extra).
    try:
        from grpc_health.v1 import health_pb2, health_pb2_grpc
    except ImportError:
        raise _Usage("`turnkeeper health` needs pip install 'turnkeeper[operator]'") from None

    options = connection_options(args, HEALTH_TIMEOUT)
    credentials = options.credentials()
    target = options.channel_target()
    channel_options = options.channel_options(target)
    channel = (
        grpc.insecure_channel(target.target, options=channel_options)
        if credentials is None
        else grpc.secure_channel(target.target, credentials, options=channel_options)
    )
    with channel:
        try:
            response = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=args.service),
                timeout=options.default_timeout,
                metadata=options.call_metadata(),
            )
        except grpc.RpcError as err:
            error = from_rpc_error(err, rpc="Check")
            if error.code == grpc.StatusCode.NOT_FOUND:
                message = f"the server has no health status for service {args.service!r}"
                error = type(error)(error.code, message, rpc="Check")
            raise error from err
        status = health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)
        serving = response.status == health_pb2.HealthCheckResponse.SERVING
        if serving and not args.service:
            # The overall check also asks for the NATS link's entry (decision 322): a
            # service that cannot reach NATS hands no turn to an agent. A service with
            # NATS off, or one older than the entry, has none.
            try:
                nats = health_pb2_grpc.HealthStub(channel).Check(
                    health_pb2.HealthCheckRequest(service=NATS_HEALTH_NAME),
                    timeout=options.default_timeout,
                    metadata=options.call_metadata(),
                )
            except grpc.RpcError as err:
                if err.code() != grpc.StatusCode.NOT_FOUND:
                    raise from_rpc_error(err, rpc="Check") from err
            else:
                if nats.status != health_pb2.HealthCheckResponse.SERVING:
                    status, serving = "NOT_SERVING: NATS down", False
    _out(status)
    return EXIT_OK if serving else EXIT_ERROR


# -- entry point ---------------------------------------------------------------------


class _Usage(Exception):
    """A usage error found after parsing (argparse's own exit 2 covers the rest)."""


def _agent(argv: list[str]) -> int:
    """`turnkeeper agent langgraph.json`: the host lives with the agent extra."""
    try:
        from turnkeeper.agent.host._run import main as host_main
    except ImportError as exc:
        print(
            f"error: `turnkeeper agent` needs the agent extra ({exc.name} is missing): "
            "pip install 'turnkeeper[agent]' (from a clone: "
            "pip install -e './clients/python[agent]')",
            file=sys.stderr,
        )
        return EXIT_USAGE
    return host_main(argv)


def next_step(code: grpc.StatusCode, args: argparse.Namespace) -> str | None:
    """What a person does about an error the service (or its absence) answered."""
    address = getattr(args, "address", None) or default_address()
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        return (
            f"no turnkeeper service answered at {address}: start one (`turnkeeper serve`, "
            "or `turnkeeper dev langgraph.json`, which prints its address), or point "
            "at yours with --address HOST:PORT or TURNKEEPER_ADDRESS"
        )
    if code == grpc.StatusCode.UNAUTHENTICATED:
        if getattr(args, "token", None):
            return (
                f"the service at {address} did not accept the token given: pass one of "
                "its tokens file with --token TOKEN or TURNKEEPER_TOKEN"
            )
        return (
            f"the service at {address} needs a token: pass one with --token TOKEN or "
            "TURNKEEPER_TOKEN"
        )
    if code == grpc.StatusCode.PERMISSION_DENIED:
        return (
            "the token (--token or TURNKEEPER_TOKEN) is accepted, but its role may not "
            "do this: an operator or admin token may"
        )
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["agent"]:
        return _agent(argv[1:])
    serving = argv[:1] in (["serve"], ["dev"])
    if serving and plugins.server_command(argv[0]) is None:
        print(
            f"error: `turnkeeper {argv[0]}` needs the server: {plugins.SERVER_INSTALL}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    args = build_parser(serve_arguments=serving).parse_args(argv)
    if args.command in ("serve", "dev"):
        served: int = plugins.server_command(args.command).run(args)
        return served
    is_health = args.command == "health"
    try:
        code: int = args.handler(args)
        return code
    except TurnkeeperError as err:
        print(f"error: {err.code.name}: {err.message}", file=sys.stderr)
        hint = next_step(err.code, args)
        if hint:
            print(hint, file=sys.stderr)
        return EXIT_ERROR if is_health else _EXIT_BY_CODE.get(err.code, EXIT_ERROR)
    except (_Usage, ValueError) as err:
        # ValueError: ConnectionOptions refusing a flag combination.
        print(f"error: {err}", file=sys.stderr)
        return EXIT_ERROR if is_health else EXIT_USAGE
    except OSError as err:
        # An unreadable --tls-* file, or a closed stdout (`turnkeeper turns list | head`).
        if isinstance(err, BrokenPipeError):
            _quiet_stdout()
            return EXIT_OK
        print(f"error: {err}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return EXIT_ERROR if is_health else EXIT_INTERRUPTED


def _quiet_stdout() -> None:
    """After a broken pipe, point stdout at /dev/null so the interpreter's final
    flush does not fail again."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


if __name__ == "__main__":
    sys.exit(main())
