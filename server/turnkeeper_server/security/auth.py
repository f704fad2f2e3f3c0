"""Bearer tokens, roles, and the one table of who may call what.

Authentication is on when a tokens file is configured (`--tokens-file`, env
TURNKEEPER_TOKENS_FILE) and off otherwise (local development, the quick start). With
it on, every call except the health service carries `authorization: Bearer <token>`.

The tokens file holds hashes, never tokens: JSON Lines, one token per line,

    {"sha256": "<hex SHA-256 of the token's UTF-8 bytes>", "role": "operator", "name": "alice"}

blank lines and lines starting with `#` skipped. Make a token and its line with

    python -m turnkeeper_server.security.auth new --role agent:support --name support-1 --file tokens.jsonl

which appends the line (creating the file owner-only) and prints the token once, or
hash a token you made yourself with `python -m turnkeeper_server.security.auth hash --role
panel --name panel < token.txt`. A plain SHA-256 is enough because tokens are
random 256-bit strings, not passwords: there is nothing to guess a dictionary for.

Roles (RIGHTS below is the table the interceptor and the servicers both read):

- `agent:<name>`: the executor side of its own agent's turns: StartTurn, Heartbeat,
  AppendEvents, ParkTurn, FinishTurn, ClaimTurn, the startup form of Redrive,
  ResumeDetached and CancelTurn (the bridge answers `responses/resumeDetached` and
  `responses/cancel`), the reads TurnStatus, GetTurn, ListEvents, WatchTurn, and the
  checkpoint RPCs of its own threads; BeginEffect, RecordEffect and ListEffects of
  its own turns (the effect ledger). To an agent another agent's turn does not
  exist: it gets the answer a never-seen turn_id gets (UNKNOWN, or NOT_FOUND).
- `panel`: TurnStatus of any turn; GetTurn, ListEvents, WatchTurn and
  ResumeDetached of the turns on the threads it owns (sees_turn, owner_may).
- `operator`: every read (ListTurns, ListEffects, ListAgents and the checkpoint reads
  too), ResumeDetached, CancelTurn, the operator form of Redrive, and MigrateTurns,
  and EDIT_STATE: editing a thread's state (update_state, a Command's update or
  goto, a fork from a checkpoint), which a panel may not do (decision 283).
- `admin`: everything.

The NATS bridges apply the same table to their JSON-RPC callers (the token in the
NATS header `Authorization`, looked up with OperationsService/Introspect):
`responses/create` is open to every role (for an agent token, its own agent's
bridge only), `responses/turnStatus` to the readers, and `responses/resumeDetached`,
the human-in-the-loop gate, and `responses/cancel` to agent, operator and admin tokens
as ResumeDetached and CancelTurn are.

Threads: a thread belongs to the identity that made it (`identity`; over gRPC and
NATS, StartTurn records the caller a bridge acts for), and an agent token also uses
the threads on which only its own agent's turns run (operations/threads.py's
`ThreadOperations.require`, one rule for both surfaces). An agent may start a turn
on a thread that is new or its own agent's (`require_thread`). Operators and admins
are not bound by threads. Refusals answer PERMISSION_DENIED with one message
whether the thread is unknown or another's.

What remains visible by construction: turn and thread ids are one global namespace,
so StartTurn with an id another agent already used cannot succeed; make ids
unguessable (UUIDs), as the clients do.
"""

from __future__ import annotations

import argparse
import contextlib
import contextvars
import hashlib
import json
import logging
import os
import secrets
import stat
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from turnkeeper._caller_assertion import CallerAssertion

from turnkeeper_server import limits as lim
from turnkeeper_server.errors import NotFound, PermissionDenied, TurnkeeperError, Unauthenticated
from turnkeeper_server.records import TurnRecord

log = logging.getLogger(__name__)

AGENT, PANEL, OPERATOR, ADMIN = "agent", "panel", "operator", "admin"
ROLES = (AGENT, PANEL, OPERATOR, ADMIN)

_TURNS = "/turnkeeper.v1.TurnService/"
_CHECKPOINTS = "/turnkeeper.v1.CheckpointService/"
_OPERATIONS = "/turnkeeper.v1.OperationsService/"
_STORE = "/turnkeeper.v1.StoreService/"
HEALTH_PREFIX = "/grpc.health.v1.Health/"
REFLECTION_PREFIXES = (
    "/grpc.reflection.v1alpha.ServerReflection/",
    "/grpc.reflection.v1.ServerReflection/",
)

# The right to call a method (full gRPC path) or to use one form of it; which roles
# hold it. A method of the two services missing here is admin-only.
REDRIVE_STARTUP = "Redrive (startup form)"
REDRIVE_OPERATOR = "Redrive (operator form)"
JSONRPC_CREATE = "responses/create"
JSONRPC_TURN_STATUS = "responses/turnStatus"
JSONRPC_RESUME_DETACHED = "responses/resumeDetached"
JSONRPC_CANCEL = "responses/cancel"
# What a bridge answers about its graph (the LangGraph API's assistants and state).
JSONRPC_GRAPH_DESCRIBE = "langgraph/describe"
JSONRPC_GRAPH_STATE = "langgraph/state"
JSONRPC_GRAPH_HISTORY = "langgraph/history"
JSONRPC_GRAPH_UPDATE_STATE = "langgraph/updateState"
# Editing a thread's state: update_state, a Command's update or goto, a run from an
# earlier checkpoint (a fork), a rewind. A right of its own (decision 283), which a
# panel does not hold: a panel's edit could approve a human gate it may not answer.
EDIT_STATE = "edit a thread's state"
# Answering any thread's interrupt (a Command's resume, ResumeDetached): operators,
# admins, and an agent on its own turns. A thread's owner answers its own thread's
# (owner_may below): every role may call ResumeDetached, and the servicer checks
# which turns (decision 309).
ANSWER_INTERRUPT = "answer a thread's interrupt"
JSONRPC_METHODS = (
    JSONRPC_CREATE,
    JSONRPC_TURN_STATUS,
    JSONRPC_RESUME_DETACHED,
    JSONRPC_CANCEL,
    JSONRPC_GRAPH_DESCRIBE,
    JSONRPC_GRAPH_STATE,
    JSONRPC_GRAPH_HISTORY,
    JSONRPC_GRAPH_UPDATE_STATE,
)
_ALL = frozenset(ROLES)
_EXECUTOR = frozenset({AGENT, ADMIN})
_READ = frozenset({AGENT, PANEL, OPERATOR, ADMIN})
_OPERATE = frozenset({OPERATOR, ADMIN})
RIGHTS: Mapping[str, frozenset[str]] = {
    _TURNS + "StartTurn": _EXECUTOR,
    _TURNS + "TurnStatus": _READ,
    _TURNS + "GetTurn": _READ,
    _TURNS + "ListTurns": _OPERATE,
    # Graph versions (docs/versions.md): what replicas serve, and moving waiting turns.
    _TURNS + "ListAgents": _OPERATE,
    _TURNS + "MigrateTurns": _OPERATE,
    _TURNS + "ListEvents": _READ,
    _TURNS + "Heartbeat": _EXECUTOR,
    _TURNS + "AppendEvents": _EXECUTOR,
    _TURNS + "ParkTurn": _EXECUTOR,
    _TURNS + "FinishTurn": _EXECUTOR,
    # Every role may call it; whose turns it answers is the servicer's check
    # (ANSWER_INTERRUPT, or the owner of the turn's thread).
    _TURNS + "ResumeDetached": _READ,
    # Which form is checked in the servicer (REDRIVE_* below).
    _TURNS + "Redrive": frozenset({AGENT, OPERATOR, ADMIN}),
    _TURNS + "ClaimTurn": _EXECUTOR,
    _TURNS + "CancelTurn": frozenset({AGENT, OPERATOR, ADMIN}),  # `responses/cancel`
    _TURNS + "WatchTurn": _READ,
    # The effect ledger: an agent writes its own turns' effects; operators read them
    # (their arguments and results may say more than a panel's events do).
    _TURNS + "BeginEffect": _EXECUTOR,
    _TURNS + "RecordEffect": _EXECUTOR,
    _TURNS + "ListEffects": frozenset({AGENT, OPERATOR, ADMIN}),
    _CHECKPOINTS + "GetCheckpoint": frozenset({AGENT, OPERATOR, ADMIN}),
    _CHECKPOINTS + "ListCheckpoints": frozenset({AGENT, OPERATOR, ADMIN}),
    _CHECKPOINTS + "PutCheckpoint": _EXECUTOR,
    _CHECKPOINTS + "PutWrites": _EXECUTOR,
    _CHECKPOINTS + "DeleteThread": _EXECUTOR,
    # LangGraph's extended saver operations: RemoteSaver (own threads), operators.
    # LangGraph's extended saver operations delete or overwrite checkpoints: an
    # agent's saver on its own threads, and admins; not operators, who inspect,
    # resume, cancel and re-drive turns but do not destroy their history.
    _CHECKPOINTS + "PruneThreads": _EXECUTOR,
    _CHECKPOINTS + "CopyThread": _EXECUTOR,
    # Not scoped by thread (run ids span threads): operators and admins only.
    # Run ids cross agents and threads: admins only.
    _CHECKPOINTS + "DeleteForRuns": frozenset({ADMIN}),
    # Each message then also needs its unary RPC's right (rpc/checkpoint_stream.py).
    _CHECKPOINTS + "CheckpointStream": frozenset({AGENT, OPERATOR, ADMIN}),
    # LangGraph's store (a graph's long-term memory): the graphs agents host, and
    # operators and admins; panels reach it through the LangGraph API (decision 315).
    _STORE + "StoreBatch": frozenset({AGENT, OPERATOR, ADMIN}),
    REDRIVE_STARTUP: _EXECUTOR,
    REDRIVE_OPERATOR: _OPERATE,
    # A bridge asks who its JSON-RPC callers are; operators read the audit log.
    _OPERATIONS + "Introspect": _EXECUTOR,
    # Every role may ask for an assertion; issuing it checks the method's right.
    _OPERATIONS + "IssueAssertion": _READ,
    _OPERATIONS + "ListAudit": _OPERATE,
    # The JSON-RPC methods a bridge serves on NATS, checked by the bridge with the
    # answer of Introspect. Starting a turn through an agent is what a chat panel
    # does; answering a parked turn's interrupt (the human-in-the-loop gate) stays
    # with the roles that may ResumeDetached over gRPC.
    JSONRPC_CREATE: frozenset({AGENT, PANEL, OPERATOR, ADMIN}),
    JSONRPC_TURN_STATUS: _READ,
    # Sent by every role; the service answers it only for a caller that holds
    # ANSWER_INTERRUPT or owns the turn's thread (ResumeDetached's own check).
    JSONRPC_RESUME_DETACHED: _READ,
    # Cancelling a turn on NATS: the roles that may CancelTurn over gRPC.
    JSONRPC_CANCEL: frozenset({AGENT, OPERATOR, ADMIN}),
    # Reading a graph and a thread's state is a read; writing a thread's state is
    # an edit (EDIT_STATE).
    JSONRPC_GRAPH_DESCRIBE: _READ,
    JSONRPC_GRAPH_STATE: _READ,
    JSONRPC_GRAPH_HISTORY: _READ,
    JSONRPC_GRAPH_UPDATE_STATE: frozenset({AGENT, OPERATOR, ADMIN}),
    # An agent on its own threads (it writes their checkpoints anyway), operators;
    # a thread's owner too where the deployment says so (--owners-edit-state).
    EDIT_STATE: frozenset({AGENT, OPERATOR, ADMIN}),
    ANSWER_INTERRUPT: frozenset({AGENT, OPERATOR, ADMIN}),
}


def owner_may(right: str, owners_edit_state: bool) -> bool:
    """Whether a thread's owner holds `right` on its own thread without its role
    holding it: answering its interrupt always, editing its state where the
    deployment lets owners (decision 309)."""
    return right == ANSWER_INTERRUPT or (right == EDIT_STATE and owners_edit_state)


def require_jsonrpc_role(role: str, method: str) -> None:
    if role not in RIGHTS[method]:
        raise PermissionDenied(f"the {role} role may not call {method}")


def require_jsonrpc(caller: Caller, agent: str, method: str) -> None:
    """`caller` may send `method` to agent `agent`'s bridge: its role has the method,
    and an agent token reaches its own agent only."""
    if caller.role not in RIGHTS[method]:
        raise PermissionDenied(f"{caller} may not call {method}")
    if caller.role == AGENT and caller.agent != agent:
        raise PermissionDenied(f"{caller} may not act for agent {agent!r}")


def jsonrpc_methods(role: str) -> list[str]:
    """The bridge's JSON-RPC methods `role` may call (an agent token: on its own
    agent's bridge only, which the bridge checks)."""
    return [m for m in JSONRPC_METHODS if role in RIGHTS[m]]


# Longest Authorization value we hash; grpc's metadata cap (8 KiB) bounds it anyway.
MAX_TOKEN_LENGTH = 4096


@dataclass(frozen=True)
class Caller:
    """Who a call comes from: one entry of the tokens file."""

    name: str
    role: str
    # The agent an `agent:<name>` token acts for; None for the other roles.
    agent: str | None = None
    # SHA-256 of the token: which entry of the tokens file, so a reload can tell a
    # revoked token from a new one under the same name.
    digest: str = field(default="", compare=False, repr=False)

    def __str__(self) -> str:
        role = f"agent:{self.agent}" if self.role == AGENT else self.role
        return f"token {self.name!r} ({role})"

    @property
    def quota_key(self) -> str:
        return f"token:{self.name}"


# Set by the interceptor for the duration of each call; None while authentication is
# off, and then every check below allows everything.
_CALLER: contextvars.ContextVar[Caller | None] = contextvars.ContextVar(
    "turnkeeper_caller", default=None
)


def current() -> Caller | None:
    return _CALLER.get()


# Set for the rest of a call by a servicer that verified the caller assertion a
# bridge passed on (security/assertions.py): whom that agent token acts for.
_ACTING_FOR: contextvars.ContextVar[CallerAssertion | None] = contextvars.ContextVar(
    "turnkeeper_acting_for", default=None
)


def acting_for() -> CallerAssertion | None:
    return _ACTING_FOR.get()


def act_for(assertion: CallerAssertion) -> None:
    """This call acts for `assertion`'s caller (verified): its rights apply too, and
    the audit log names it."""
    _ACTING_FOR.set(assertion)


def require_on_behalf(
    right: str, what: str, owner: str | None = None, *, owners_edit_state: bool = False
) -> None:
    """The caller, and whom it acts for, both hold `right` (a RIGHTS key): `what`
    does to another turn or to a thread what that right allows. `owner`: the
    identity that owns the thread acted on ("" none), which holds the rights
    `owner_may` gives owners (the one ownership rule of both surfaces)."""
    caller = current()
    if caller is None:
        return
    owned = bool(owner) and owner_may(right, owners_edit_state)
    if caller.role not in RIGHTS[right] and not (owned and identity(caller) == owner):
        raise PermissionDenied(
            f"{caller} may not {what}: that needs {_words(right)}"
            + (" (or to own the thread)" if owner_may(right, owners_edit_state) else "")
        )
    behalf = acting_for()
    if behalf is None or behalf.role in RIGHTS[right]:
        return
    if owned and identity_of(behalf.role, behalf.name, behalf.caller_agent) == owner:
        return
    holders = "operator, admin, or the agent's own token"
    if owner_may(right, owners_edit_state):
        holders += ", or the thread's owner"
    raise PermissionDenied(
        f"{behalf.who} may not {what} through agent {behalf.agent!r}: that needs "
        f"{_words(right)} ({holders}), which the {behalf.role} role does not have"
        + (" and which it does not own" if owner_may(right, owners_edit_state) else "")
    )


def _words(right: str) -> str:
    """A right as a refusal says it: "the CancelTurn right", "the right to edit a
    thread's state"."""
    return (
        f"the {right.rsplit('/', 1)[-1]} right"
        if right.startswith("/")
        else f"the right to {right}"
    )


@contextlib.contextmanager
def _as_current(caller: Caller) -> Iterator[None]:
    token = _CALLER.set(caller)
    try:
        yield
    finally:
        _CALLER.reset(token)


# -- the checks the servicers make --------------------------------------------------
#
# Method-level rights are checked by the interceptor before the request is even
# parsed; these are the checks that need the request or the journal.


def _turn_not_found(turn_id: str) -> NotFound:
    # Word for word what journal.require_turn says about an id it never saw.
    return NotFound(f"turn {turn_id!r} is not in the journal")


def require_right(right: str) -> None:
    """PERMISSION_DENIED unless the caller's role holds `right` (a RIGHTS key)."""
    caller = current()
    if caller is not None and caller.role not in RIGHTS.get(right, frozenset({ADMIN})):
        raise PermissionDenied(f"{caller} may not call {right.rsplit('/', 1)[-1]}")


def require_agent(agent: str) -> None:
    """An agent token acts for its own agent only (StartTurn, startup Redrive)."""
    caller = current()
    if caller is not None and caller.role == AGENT and caller.agent != agent:
        raise PermissionDenied(f"{caller} may not act for agent {agent!r}")


def sees_agent(agent: str) -> bool:
    """False when the caller is an agent token and `agent` another agent."""
    caller = current()
    return caller is None or caller.role != AGENT or caller.agent == agent


def visible(turn: TurnRecord | None) -> TurnRecord | None:
    """The turn, or None when it is another agent's and the caller an agent token."""
    return turn if turn is not None and sees_agent(turn.agent) else None


def require_turn(turn_id: str, load: Callable[[], TurnRecord | None]) -> TurnRecord | None:
    """NOT_FOUND, worded as for a never-seen id, when an agent token names another
    agent's turn. Loads the turn only for agent tokens; returns it when loaded."""
    caller = current()
    if caller is None or caller.role != AGENT:
        return None
    turn = visible(load())
    if turn is None:
        raise _turn_not_found(turn_id)
    return turn


def require_thread(
    thread_id: str, agents: Callable[[], set[str]], *, starting: bool = False
) -> None:
    """An agent token uses its own threads only (see the module docstring).

    `agents` lists the agents with turns on the thread; it is called only for
    agent tokens. `starting`: StartTurn, which may also open a new thread.
    """
    caller = current()
    if caller is None or caller.role != AGENT:
        return
    if not thread_id:
        raise PermissionDenied(f"{caller} must name a thread_id: it may list its own threads only")
    on_thread = agents()
    own = {caller.agent}
    if on_thread == own or (starting and not on_thread):
        return
    raise PermissionDenied(f"thread {thread_id!r} is not open to {caller}")


# -- thread ownership (issue 47) ------------------------------------------------------
#
# A thread made through the LangGraph API records its creator's identity (its
# `owner`). The rule for who sees a thread is `sees_thread`; what an owner may do
# beyond seeing it is the role's (RIGHTS).


def identity(caller: Caller | None) -> str:
    """Whom a thread `caller` makes belongs to: "agent:<name>" for an agent token,
    "<role>:<token name>" for the others; "" without tokens (no one)."""
    if caller is None:
        return ""
    return identity_of(caller.role, caller.name, caller.agent)


def acting_identity() -> str:
    """Whom the current call acts for: the caller a bridge passed on (its caller
    assertion), else the caller; "" without tokens. What a thread the call makes is
    owned by, on every surface."""
    behalf = acting_for()
    if behalf is not None:
        return identity_of(behalf.role, behalf.name, behalf.caller_agent)
    return identity(current())


def identity_of(role: str, name: str, agent: str | None) -> str:
    """`identity` from a caller's parts (a caller assertion's, which names whom a
    bridge acts for)."""
    return f"agent:{agent}" if role == AGENT else f"{role}:{name}"


def sees_every_thread(caller: Caller | None) -> bool:
    """Operators and admins (and everyone without tokens) see every thread."""
    return caller is None or caller.role in (OPERATOR, ADMIN)


def sees_thread(caller: Caller | None, owner: str, agents: Callable[[], set[str]]) -> bool:
    """`caller` may see (and, by its role's rights, act on) a thread `owner` made.
    A thread is its owner's; an agent token also sees a thread on which only its own
    agent's turns run (it executes them), never one without turns it did not make.
    `agents`: the agents with turns on the thread, asked only for agent tokens."""
    if sees_every_thread(caller):
        return True
    assert caller is not None
    if owner and owner == identity(caller):
        return True
    return caller.role == AGENT and agents() == {caller.agent}


def sees_turn(caller: Caller | None, agent: str, owner: str) -> bool:
    """`caller` may read a turn of `agent` on a thread `owner` owns (its record, its
    events, its stream): operators and admins every turn, an agent token its own
    agent's, the others the turns on the threads they own (decision 311)."""
    if sees_every_thread(caller):
        return True
    assert caller is not None
    if caller.role == AGENT:
        return caller.agent == agent
    return bool(owner) and owner == identity(caller)


class Peer(Protocol):
    """What client_key reads of a call: a gRPC context, or the HTTP side's."""

    def peer(self) -> str: ...


def client_key(context: Peer) -> str:
    """Whose quota a call counts against: the token and the peer's address together,
    or the address alone without authentication. Per (token, address), not per
    token: a token shared by many (a panel's) would otherwise let one of its users
    hold every stream the others are allowed (decision 187)."""
    peer = context.peer() or "unknown"
    # "ipv4:10.0.0.1:53012", "ipv6:[::1]:53012": one client host, any port.
    kind, _, rest = peer.partition(":")
    if kind in ("ipv4", "ipv6"):
        rest = rest.rpartition(":")[0] or rest
    address = f"peer:{kind}:{rest}"
    caller = current()
    return address if caller is None else f"{caller.quota_key} {address}"


# -- the tokens file ----------------------------------------------------------------


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def parse_role(role: str) -> tuple[str, str | None]:
    """("agent", name) for "agent:<name>", (role, None) for the others."""
    if role.startswith("agent:"):
        try:
            return AGENT, lim.check_agent(role.removeprefix("agent:"))
        except TurnkeeperError as exc:
            raise ValueError(str(exc)) from None
    if role in (PANEL, OPERATOR, ADMIN):
        return role, None
    raise ValueError(f"role {role!r} is not agent:<name>, panel, operator or admin")


class TokenStore:
    """Token hashes to callers."""

    def __init__(self, callers: Mapping[str, Caller]) -> None:
        if not callers:
            raise ValueError("no tokens: authentication would refuse every call")
        self._callers = dict(callers)

    def __len__(self) -> int:
        return len(self._callers)

    @classmethod
    def load(cls, path: Path) -> TokenStore:
        try:
            mode = path.stat().st_mode
            text = path.read_text()
        except OSError as exc:
            raise ValueError(f"cannot read the tokens file {path}: {exc}") from None
        if mode & (stat.S_IWGRP | stat.S_IWOTH):
            log.warning(
                "tokens file %s is writable by other users: anyone who can write it can "
                "give themselves admin; chmod 600 it",
                path,
            )
        callers: dict[str, Caller] = {}
        for number, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            where = f"{path}:{number}"
            try:
                entry = json.loads(line)
                if not isinstance(entry, dict):
                    raise ValueError("not a JSON object")
                digest = str(entry["sha256"]).lower()
                if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
                    raise ValueError("sha256 must be 64 hex digits (the hash, not the token)")
                role, agent = parse_role(str(entry["role"]))
                name = str(entry.get("name") or f"{entry['role']}@{number}")
            except (ValueError, KeyError) as exc:
                raise ValueError(f"{where}: {exc}") from None
            if digest in callers:
                raise ValueError(f"{where}: the same token hash appears twice")
            callers[digest] = Caller(name=name, role=role, agent=agent, digest=digest)
        return cls(callers)

    def names(self) -> dict[str, Caller]:
        """Token hash to caller, a copy."""
        return dict(self._callers)

    def replace(self, other: TokenStore) -> None:
        """Take `other`'s tokens: the next call is checked against them."""
        self._callers = dict(other._callers)

    def accepts(self, caller: Caller) -> bool:
        """The token behind `caller` is still accepted, with the same role."""
        return self._callers.get(caller.digest) == caller

    def lookup(self, token: str) -> Caller | None:
        """The caller a bare token stands for, or None."""
        if not token or len(token) > MAX_TOKEN_LENGTH:
            return None
        return self._callers.get(token_hash(token))

    def authenticate(self, metadata: Iterable[tuple[str, str | bytes]] | None) -> Caller:
        values = [v for k, v in metadata or () if k.lower() == "authorization"]
        if not values:
            raise Unauthenticated(
                "this service needs a bearer token: the turnkeeper CLI takes --token or "
                "TURNKEEPER_TOKEN, an agent TURNKEEPER_TOKEN, LangGraph's SDKs api_key "
                "(x-api-key); over gRPC it is the metadata 'authorization: Bearer <token>'"
            )
        if len(values) > 1:
            raise Unauthenticated("send one authorization header, not several")
        value = values[0]
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        scheme, _, token = value.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise Unauthenticated("the authorization header must be 'Bearer <token>'")
        if len(token) > MAX_TOKEN_LENGTH:
            raise Unauthenticated("the bearer token is not one this service accepts")
        if not token.isascii() or not token.isprintable():
            # HTTP headers arrive as latin-1 or with undecodable bytes escaped; no
            # token this service makes or hashes is anything but printable ASCII.
            raise Unauthenticated(
                "the bearer token is not printable ASCII: send 'Bearer <token>' as issued"
            )
        # A dict lookup by hash: timing reveals at most something about the hash,
        # and finding a token from its SHA-256 is a preimage attack.
        caller = self._callers.get(token_hash(token))
        if caller is None:
            raise Unauthenticated(
                "the bearer token is not one this service accepts: check the token "
                "given (--token or TURNKEEPER_TOKEN, an SDK's api_key) against the "
                "service's tokens file (a revoked token is refused too)"
            )
        return caller


# -- `python -m turnkeeper_server.security.auth` -----------------------------------------------


def _line(token: str, role: str, name: str) -> str:
    parse_role(role)
    return json.dumps({"sha256": token_hash(token), "role": role, "name": name})


def _append_private(path: Path, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with os.fdopen(fd, "a") as f:
        f.write(line + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m turnkeeper_server.security.auth",
        description="make entries of a tokens file",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    new = commands.add_parser("new", help="make a random token; print it once")
    hash_ = commands.add_parser("hash", help="the tokens-file line of a token read from stdin")
    for command in (new, hash_):
        command.add_argument("--role", required=True, help="agent:<name>, panel, operator, admin")
        command.add_argument("--name", required=True, help="who holds it (logs, quotas)")
    new.add_argument("--file", type=Path, help="append the line here (created owner-only)")
    args = parser.parse_args(argv)
    try:
        if args.command == "new":
            token = secrets.token_urlsafe(32)
            line = _line(token, args.role, args.name)
            if args.file is not None:
                _append_private(args.file, line)
                print(f"added {args.name} ({args.role}) to {args.file}", file=sys.stderr)
            else:
                print(line, file=sys.stderr)
            print(token)
        else:
            token = sys.stdin.read().strip()
            if not token:
                parser.error("no token on stdin")
            print(_line(token, args.role, args.name))
    except ValueError as exc:
        parser.error(str(exc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
