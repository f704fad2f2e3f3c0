"""`turnkeeper audit`: the service's audit log, newest first (OperationsService/ListAudit).

turnkeeper audit [--limit N] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable
from typing import Any, Final

from turnkeeper.client import TurnkeeperClient
from turnkeeper.operator import _render as render
from turnkeeper.v1 import operations_pb2

COLUMNS: Final = ("ID", "AT", "ACTOR", "ACTION", "TARGET", "OUTCOME", "DETAIL")
# Records per ListAudit call; the service allows 1000.
PAGE: Final = 100


ClientOf = Callable[[argparse.Namespace], contextlib.AbstractContextManager[TurnkeeperClient]]


def add_command(commands: Any, parents: list[argparse.ArgumentParser], client_of: ClientOf) -> None:
    audit = commands.add_parser(
        "audit", parents=parents, help="operator actions: who resumed, re-drove, deleted what"
    )
    audit.add_argument(
        "--limit", type=int, default=PAGE, metavar="N", help=f"the newest N records ({PAGE})"
    )

    def handler(args: argparse.Namespace) -> int:
        with client_of(args) as client:
            records = read(args, client)
        if args.json:
            print(render.dumps({"records": records}), flush=True)
        else:
            print(table(records) if records else "(none)", flush=True)
        return 0

    audit.set_defaults(handler=handler)


def record_dict(record: operations_pb2.AuditRecord) -> dict[str, Any]:
    return {
        "id": record.id,
        "at": render.time_text(record.at),
        "actor": record.actor,
        "action": record.action,
        "target": record.target,
        "outcome": record.outcome,
        "detail": record.detail,
    }


def read(args: argparse.Namespace, client: TurnkeeperClient) -> list[dict[str, Any]]:
    if args.limit < 1:
        raise ValueError("--limit must be at least 1")
    found: list[operations_pb2.AuditRecord] = []
    request = operations_pb2.ListAuditRequest(page_size=min(args.limit, 1000))
    while len(found) < args.limit:
        page = client.list_audit(request)
        found.extend(page.records)
        if not page.next_page_token:
            break
        request.page_token = page.next_page_token
    return [record_dict(r) for r in found[: args.limit]]


def table(records: list[dict[str, Any]]) -> str:
    rows = [
        [
            str(r["id"]),
            r["at"] or "-",
            r["actor"],
            r["action"],
            r["target"],
            r["outcome"],
            render.compact(r["detail"], 60) if r["detail"] else "",
        ]
        for r in records
    ]
    return render.table(COLUMNS, rows)
