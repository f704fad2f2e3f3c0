"""Which right a LangGraph API request needs beyond its endpoint's, checked with its
caller and audited under it (decision 283).

Answering an interrupt (a Command's ``resume``) is ANSWER_INTERRUPT's right, which
the thread's owner holds on its own thread (decision 309); editing a thread's state
(``update_state``, a Command's ``update`` or ``goto``) and running from an earlier
checkpoint (a fork) are EDIT_STATE's, which an owner holds only where the deployment
says so (``--owners-edit-state``). So a panel answers the interrupts of the threads
it made (under a langgraph.json's auth: its end user, whose filter hides the others)
but does not edit, skip or answer another's. The rule is the service's one
(auth.require_on_behalf with the thread's owner), which StartTurn and ResumeDetached
apply again to what goes on to an agent. A refusal here is audited here; what goes
on to an agent is audited where the service does it, naming the caller.
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
    what: str


def of_run(options: dict[str, Any]) -> Needed | None:
    """What a run needs beyond starting one: `options` as the run request parsed
    them (turnkeeper._run_request)."""
    answer = Needed(audit_log.RESUME, (auth.ANSWER_INTERRUPT,), "answer the thread's interrupt")
    command = options.get("command") or {}
    if command.keys() & {"update", "goto"}:
        answers = (auth.ANSWER_INTERRUPT,) if "resume" in command else ()
        return Needed(
            audit_log.EDIT_STATE,
            (auth.EDIT_STATE, *answers),
            "run a Command that edits the thread's state",
        )
    if options.get("checkpoint_id") is not None:
        return Needed(
            audit_log.FORK, (auth.EDIT_STATE,), "run the thread from an earlier checkpoint"
        )
    if "resume" in command:
        return answer
    return None


def require(deps: Deps, caller: Caller | None, right: str, owner: str, what: str) -> None:
    """PERMISSION_DENIED unless `caller` holds `right` on a thread `owner` owns:
    by role, or as its owner where owners hold it (the service's one rule)."""
    with web_auth.acting_as(caller):
        auth.require_on_behalf(
            right, what, owner, owners_edit_state=deps.operations.turns.owners_edit_state
        )


def by_role(caller: Caller | None, right: str) -> bool:
    """Whether `caller`'s role holds `right` on any thread (not as an owner)."""
    return caller is None or caller.role in auth.RIGHTS[right]


async def refuse_unless(
    deps: Deps, caller: Caller | None, needed: Needed | None, target: str, owner: str
) -> None:
    """PERMISSION_DENIED, audited under the caller, unless it holds every right on
    the thread `owner` owns (what it then does is audited by the service, which
    does it)."""
    if caller is None or needed is None:
        return
    with web_auth.acting_as(caller):
        try:
            for right in needed.rights:
                require(deps, caller, right, owner, needed.what)
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
