"""The CLI's commands for the end of a turn's life: `turns cancel` and
`threads delete` (erasure). Wired into the parser by `turnkeeper.operator._cli`."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from turnkeeper.client import ConnectionOptions, TurnkeeperClient
from turnkeeper.operator import _render as render
from turnkeeper.v1 import checkpoints_pb2, turns_pb2

_TIMEOUT = 30.0


def add_commands(commands: Any, turn_verbs: Any, parents: Sequence[argparse.ArgumentParser]) -> Any:
    """`turns cancel` under `turn_verbs`; a `threads` command with `delete`. Returns
    the verbs of `threads`, for the commands other modules add to it."""
    cancel = turn_verbs.add_parser(
        "cancel",
        parents=list(parents),
        help="cancel a RUNNING, PARKED or QUEUED turn (its executor stops)",
    )
    cancel.add_argument("turn_id", metavar="ID")
    cancel.add_argument(
        "--rollback",
        action="store_true",
        help="also remove the checkpoints the turn wrote (the thread goes back to before it)",
    )
    cancel.add_argument("--reason", default="", help="free text kept with the turn.cancelled event")
    cancel.set_defaults(handler=turns_cancel)

    threads = commands.add_parser("threads", help="act on whole threads")
    verbs = threads.add_subparsers(dest="verb", required=True, metavar="VERB")
    delete = verbs.add_parser(
        "delete",
        parents=list(parents),
        help="erase a thread: its turns, inputs, events, outbox rows and checkpoints",
    )
    delete.add_argument("thread_id", metavar="THREAD")
    delete.add_argument(
        "--cancel",
        action="store_true",
        help="cancel the thread's live turn first (otherwise a live turn refuses the erasure)",
    )
    delete.set_defaults(handler=threads_delete)
    return verbs


@contextlib.contextmanager
def _client(args: argparse.Namespace) -> Iterator[TurnkeeperClient]:
    # The same flags as every other command (cli.connection_options), without
    # importing cli (which imports this module).
    options = ConnectionOptions(
        target=args.address,
        tls=args.tls,
        root_certificates=args.tls_ca,
        client_certificate=args.tls_cert,
        client_key=args.tls_key,
        bearer_token=args.token,
        default_timeout=args.timeout or _TIMEOUT,
    )
    with TurnkeeperClient(options) as client:
        yield client


def turns_cancel(args: argparse.Namespace) -> int:
    with _client(args) as client:
        # Not retried by the client: a compare-and-set (see client._RETRIED).
        response = client.cancel_turn(
            turns_pb2.CancelTurnRequest(
                turn_id=args.turn_id, rollback=args.rollback, reason=args.reason
            )
        )
    if args.json:
        print(
            render.dumps(
                {
                    "turn": render.turn_dict(response.turn),
                    "checkpoints_removed": response.checkpoints_removed,
                }
            ),
            flush=True,
        )
        return 0
    removed = f"; {response.checkpoints_removed} checkpoints removed" if args.rollback else ""
    print(
        f"cancelled {response.turn.turn_id}: {render.state_name(response.turn.state)} "
        f"at seq {response.turn.last_seq}{removed}",
        flush=True,
    )
    return 0


def threads_delete(args: argparse.Namespace) -> int:
    with _client(args) as client:
        response = client.delete_thread(
            checkpoints_pb2.DeleteThreadRequest(thread_id=args.thread_id, cancel=args.cancel)
        )
    if args.json:
        print(
            render.dumps(
                {
                    "thread_id": args.thread_id,
                    "turns_deleted": response.turns_deleted,
                    "cancelled_turn_id": response.cancelled_turn_id,
                }
            ),
            flush=True,
        )
        return 0
    cancelled = (
        f" (cancelled live turn {response.cancelled_turn_id} first)"
        if response.cancelled_turn_id
        else ""
    )
    print(
        f"deleted thread {args.thread_id}: {response.turns_deleted} turns erased{cancelled}",
        flush=True,
    )
    return 0
