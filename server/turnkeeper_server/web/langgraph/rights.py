"""Which right a LangGraph API request needs beyond its endpoint's, checked with its
caller and audited under it (decision 283).

Answering an interrupt (a Command's ``resume``) is ResumeDetached's right; editing
a thread's state (``update_state``, a Command's ``update`` or ``goto``) and running
from an earlier checkpoint (a fork) are EDIT_STATE's. A panel holds neither, so the
human-in-the-loop gate an operator answers is not answered, edited or skipped by a
panel. A refusal here is audited here; what goes on to an agent is audited where the
service does it (StartTurn, ResumeDetached), naming the caller the agent acts for.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from turnkeeper_server import audit as audit_log
from turnkeeper_server.errors import PermissionDenied, status_for
from turnkeeper_server.security import auth
from turnkeeper_server.security.auth import Caller
from turnkeeper_server.web import auth as web_auth
from turnkeeper_server.web.langgraph.api import Deps
from turnkeeper_server.web.relay import AgentRefused


@dataclass(frozen=True)
class Needed:
    """An audit action and the rights (RIGHTS keys) a request needs for it."""

    action: str
    rights: tuple[str, ...]


def of_run(options: dict[str, Any]) -> Needed | None:
    """What a run needs beyond starting one: `options` as the run request parsed
    them (turnkeeper._run_request)."""
    command = options.get("command") or {}
    if command.keys() & {"update", "goto"}:
        answers = (auth.ANSWER_INTERRUPT,) if "resume" in command else ()
        return Needed(audit_log.EDIT_STATE, (auth.EDIT_STATE, *answers))
    if options.get("checkpoint_id") is not None:
        return Needed(audit_log.FORK, (auth.EDIT_STATE,))
    if "resume" in command:
        return Needed(audit_log.RESUME, (auth.ANSWER_INTERRUPT,))
    return None


async def refuse_unless(
    deps: Deps, caller: Caller | None, needed: Needed | None, target: str
) -> None:
    """PERMISSION_DENIED, audited under the caller, unless it holds every right (what
    it then does is audited by the service, which does it)."""
    if caller is None or needed is None:
        return
    with web_auth.acting_as(caller):
        try:
            for right in needed.rights:
                auth.require_right(right)
        except PermissionDenied as exc:
            if deps.operations.audit is not None:
                await deps.operations.audit.safely(
                    needed.action, target, "PERMISSION_DENIED", str(exc), audit_log.actor()
                )
            raise


@contextlib.asynccontextmanager
async def audited(
    deps: Deps, caller: Caller | None, action: str, target: str
) -> AsyncIterator[None]:
    """Audit the block under the caller, with its outcome: a refusal an agent relayed
    back by the status the service gave it."""
    log = deps.operations.audit
    with web_auth.acting_as(caller):
        who = audit_log.actor()
    try:
        yield
    except Exception as exc:
        if log is not None:
            if isinstance(exc, AgentRefused):
                code, message = exc.service_code or "INTERNAL", exc.message
            else:
                status, message = status_for(exc)
                code = status.name
            await log.safely(action, target, code, message, who)
        raise
    if log is not None:
        await log.safely(action, target, audit_log.OK, "", who)
