"""An agent session: the runs of one thread, with the retry rules of docs/architecture.md §8.

    session = AgentSession(NatsAgentTransport(nc, "pipeline", client=turnkeeper))
    if await session.submit({"messages": [{"role": "user", "content": "Hi"}]}):
        await session.join()                 # the run went out; wait for its end
    if session.error and session.error.kind is ErrorKind.INTERRUPTED:
        await session.check_status()         # the run may have gone on: look first
    elif session.error:
        await session.retry()                # the banner offered Retry: send it again

The rules, each one a method:

- :meth:`~AgentSession.submit` ``(payload)`` sends a new run and remembers the payload
  (the *last payload*). ``submit(None)`` resumes pending work instead: it resumes a
  run parked at ``interrupt()`` (which then returns None), re-attaches to a run still
  going, or asks the agent to continue the thread from its checkpoint; on a finished
  thread it does nothing.
- :meth:`~AgentSession.retry` re-submits the last payload. It has exactly two guards:
  it does nothing while a run is in flight, and nothing without a last payload
  (before the first submit, after switch_thread). Which errors offer a Retry is the
  banner's decision, not retry()'s: a failed or rejected run can be re-submitted
  through it. :attr:`SessionError.retryable` tells a banner which errors are safe to
  resend as they were (a connection failure *before* dispatch); an interrupted run
  is better looked at first (check_status). A submission that never went out (a
  payload, or a submit(None) or regenerate()) is sent again as it was, with its turn
  id; after one that went out, the last payload goes out as a new run.
- :meth:`~AgentSession.reload` is retry that leaves the error in place until the new
  run's outcome replaces it.
- A run whose event stream closes without a terminal event is *interrupted*, not
  ``retryable``: it may have gone on, so a banner offers
  :meth:`~AgentSession.check_status`, the read-only look; what was shown (the
  transcript, a pending approval) stays. check_status clears the error when the run
  turned out finished, and when it cannot confirm the outcome it says so
  (:class:`StatusCheck`), never a bare None.
- :meth:`~AgentSession.regenerate` repositions the thread to the entry node, then
  submits None (the agent does both, on ``regenerate: true``).
- :meth:`~AgentSession.switch_thread` moves to another thread and forgets the last
  payload.

A submission retried because it never went out reuses its turn id, so an agent that
did get it after all (StartTurn is idempotent by turn id) runs it once. The session talks to agents through
an :class:`AgentTransport` (NATS JSON-RPC: :class:`~turnkeeper.panel.agent_rpc.NatsAgentTransport`).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from turnkeeper.panel.follower import Concluded, ConclusionReason, Event, Frame, Transcript
from turnkeeper.states import TurnState

__all__ = [
    "AgentRejected",
    "AgentSession",
    "AgentTransport",
    "Created",
    "ErrorKind",
    "NoAnswer",
    "NotDispatched",
    "RunStatus",
    "SessionBusy",
    "SessionError",
    "StatusCheck",
]

log = logging.getLogger(__name__)


# -- what a transport raises --------------------------------------------------------


class NotDispatched(Exception):
    """The request never reached an agent: no connection, or nobody listening.
    Sending it again is safe."""


class NoAnswer(Exception):
    """The request went out, but no answer came back in time: the run may have
    started. Look before sending again."""


class AgentRejected(Exception):
    """The agent answered with a JSON-RPC error (bad params, a busy thread ...)."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.data = data


@dataclass(frozen=True, slots=True)
class Created:
    """The agent's answer to a new run."""

    #: None when there was nothing to run (``submit(None)`` on a finished thread).
    turn_id: str | None
    thread_id: str
    #: "in_progress", or "completed" when there was nothing to run.
    status: str


@dataclass(frozen=True, slots=True)
class RunStatus:
    """A run's status, as the service (through the agent) reports it."""

    turn_id: str
    state: TurnState
    attempts: int = 0
    last_seq: int = 0
    error: str = ""


@dataclass(frozen=True, slots=True)
class StatusCheck:
    """What :meth:`AgentSession.check_status` learned. ``status`` is None when the
    outcome could not be confirmed (no run to ask about, or no answer); ``message``
    says so in words a panel can show as they are."""

    status: RunStatus | None
    message: str

    @property
    def confirmed(self) -> bool:
        return self.status is not None

    @property
    def state(self) -> TurnState | None:
        """The run's state, or None when it could not be confirmed."""
        return None if self.status is None else self.status.state


class AgentTransport(Protocol):
    """How a session reaches an agent. Each method raises :class:`NotDispatched`,
    :class:`NoAnswer` or :class:`AgentRejected` on failure."""

    async def create(
        self, *, input: Any, thread_id: str, turn_id: str, regenerate: bool = False
    ) -> Created:
        """Start a detached run (``responses/create``, ``background: true``).
        ``input`` None continues the thread from its checkpoint; with
        ``regenerate`` the agent first repositions the thread to its entry node."""
        ...

    async def turn_status(self, turn_id: str) -> RunStatus:
        """``responses/turnStatus``."""
        ...

    async def resume(self, turn_id: str, value: Any) -> None:
        """``responses/resumeDetached``: the value a parked run's interrupt() returns."""
        ...

    def follow(self, turn_id: str) -> AsyncIterator[Frame]:
        """The run's frames (see :mod:`turnkeeper.panel.follower`), ending with a
        :class:`~turnkeeper.panel.follower.Concluded` when the run's end is known."""
        ...


# -- the session ---------------------------------------------------------------------


class ErrorKind(enum.Enum):
    #: Never reached an agent: :meth:`AgentSession.retry` sends it again.
    CONNECTION = "connection"
    #: Sent, then the answer or the event stream was lost before the run's end: the
    #: run may have gone on. :meth:`AgentSession.check_status` tells.
    INTERRUPTED = "interrupted"
    #: The run ended FAILED.
    FAILED = "failed"
    #: The agent refused the request.
    REJECTED = "rejected"


@dataclass(frozen=True, slots=True)
class SessionError:
    kind: ErrorKind
    message: str

    @property
    def retryable(self) -> bool:
        """Safe to resend as it was: only a connection failure before dispatch. A
        hint for the banner; retry() itself re-submits after any error."""
        return self.kind is ErrorKind.CONNECTION


class SessionBusy(RuntimeError):
    """A run is in flight: wait for it (:meth:`AgentSession.join`) first."""


@dataclass(frozen=True, slots=True)
class _Submission:
    payload: Any
    regenerate: bool
    # Reused when the same submission is sent again (retry, reload).
    turn_id: str


class AgentSession:
    """One conversation thread with one agent. Not thread-safe; use it from one
    event loop. ``on_frame`` is called with every frame of every run, in order."""

    def __init__(
        self,
        transport: AgentTransport,
        *,
        thread_id: str | None = None,
        on_frame: Callable[[Frame], None] | None = None,
        new_id: Callable[[], str] = lambda: uuid.uuid4().hex,
    ) -> None:
        self.transport = transport
        self.on_frame = on_frame
        self._new_id = new_id
        self._thread_id = thread_id or new_id()
        self._last_payload: Any = None
        # The submission that failed to go out (retry() sends it again as it was);
        # None once it went out, after another error, and after switch_thread.
        self._unsent: _Submission | None = None
        self._turn_id: str | None = None
        self._state: TurnState | None = None
        self._error: SessionError | None = None
        self._transcript = Transcript()
        self._run: asyncio.Task[None] | None = None
        # Frames the follows applied, all runs together: resume() tells by it whether
        # the stream said more while its answer travelled.
        self._applied = 0

    # -- what a UI shows -------------------------------------------------------------

    @property
    def thread_id(self) -> str:
        return self._thread_id

    @property
    def turn_id(self) -> str | None:
        """The current run's turn, or the last one's."""
        return self._turn_id

    @property
    def state(self) -> TurnState | None:
        """That run's state as last learned; None when not known."""
        return self._state

    @property
    def error(self) -> SessionError | None:
        return self._error

    @property
    def running(self) -> bool:
        """A run is in flight: its events are being followed."""
        return self._run is not None and not self._run.done()

    @property
    def last_payload(self) -> Any:
        """The payload of the last submit(payload); None before the first submit
        and after switch_thread."""
        return self._last_payload

    @property
    def transcript(self) -> Transcript:
        """The current (or last) run's events."""
        return self._transcript

    async def join(self) -> None:
        """Wait until the run in flight (if any) ends."""
        if self._run is not None:
            await asyncio.shield(self._run)

    # -- the rules ---------------------------------------------------------------------

    async def submit(self, payload: Any) -> bool:
        """Send a new run with ``payload``, or with None resume pending work (a run
        parked at ``interrupt()`` is resumed with None, even while it is followed).
        True when a run is now in flight. Raises SessionBusy while one is."""
        if payload is None and self._state is TurnState.PARKED:
            return await self.resume(None)
        self._not_busy()
        if payload is None:
            return await self._resume_pending()
        return await self._dispatch(_Submission(payload, False, self._new_id()), clear_error=True)

    async def retry(self) -> bool:
        """Re-submit the last payload, whatever the error was (offering it is the
        banner's decision). A no-op (False) while a run is in flight or without a
        last payload. True when a run is now in flight."""
        submission = self._resubmission()
        if submission is None:
            return False
        return await self._dispatch(submission, clear_error=True)

    async def reload(self) -> bool:
        """As retry(), but the error stays until the new run's outcome replaces it."""
        submission = self._resubmission()
        if submission is None:
            return False
        return await self._dispatch(submission, clear_error=False)

    async def check_status(self) -> StatusCheck:
        """Read-only: the last run's status from the agent. When there is no run or
        no answer, the check says plainly that the outcome could not be confirmed
        (``confirmed`` False, and why). Clears an interrupted run's error when the
        run finished."""
        if self._turn_id is None:
            return StatusCheck(None, "no run on this thread yet: there is no outcome to check")
        try:
            status = await self.transport.turn_status(self._turn_id)
        except (NotDispatched, NoAnswer, AgentRejected) as exc:
            message = (
                f"the outcome of run {self._turn_id} could not be confirmed: {exc}; "
                "it may still be going on, check again later"
            )
            log.info("check_status: %s", message)
            return StatusCheck(None, message)
        if not self.running:
            self._state = status.state
            if (
                status.state is TurnState.DONE
                and self._error is not None
                and self._error.kind is ErrorKind.INTERRUPTED
            ):
                self._error = None
        return StatusCheck(status, f"run {self._turn_id} is {status.state.word}")

    async def regenerate(self) -> bool:
        """Reposition the thread to the entry node, then submit None: the last
        question is answered again. Raises SessionBusy while a run is in flight."""
        self._not_busy()
        return await self._dispatch(_Submission(None, True, self._new_id()), clear_error=True)

    async def resume(self, value: Any) -> bool:
        """Answer a parked run's interrupt() with ``value``. False when the last run
        is not known to be parked (or the agent refused)."""
        if self._turn_id is None or self._state not in (TurnState.PARKED, TurnState.RUNNING):
            return False
        turn_id, applied = self._turn_id, self._applied
        try:
            await self.transport.resume(turn_id, value)
        except (NotDispatched, NoAnswer, AgentRejected) as exc:
            self._error = _error_of(exc)
            return False
        if (self._turn_id, self._applied) != (turn_id, applied):
            # The run's stream told more while the answer travelled (the resumed
            # run's events, another interrupt, its end): that stands, as on the
            # chat page (decision 640); a follow that concluded told the end.
            return True
        self._error = None
        self._state = TurnState.RUNNING
        if not self.running:
            self._follow(turn_id)
        return True

    def switch_thread(self, thread_id: str | None = None) -> None:
        """Move to ``thread_id`` (a new thread by default). Forgets the last payload,
        the run and its error; a run in flight goes on, unfollowed."""
        if self._run is not None and not self._run.done():
            self._run.cancel()
        self._run = None
        self._thread_id = thread_id or self._new_id()
        self._last_payload = None
        self._unsent = None
        self._turn_id = None
        self._state = None
        self._error = None
        self._transcript = Transcript()

    async def aclose(self) -> None:
        """Stop following (runs go on at the agent). Safe to call twice."""
        run, self._run = self._run, None
        if run is not None and not run.done():
            run.cancel()
            await asyncio.gather(run, return_exceptions=True)

    # -- internals ---------------------------------------------------------------------

    def _not_busy(self) -> None:
        if self.running:
            raise SessionBusy(f"run {self._turn_id} is in flight")

    def _resubmission(self) -> _Submission | None:
        """What retry() sends: the submission that never went out, as it was (its
        turn id too); else the last payload as a new run; None under the guards."""
        if self.running:
            return None
        if self._unsent is not None:
            return self._unsent
        if self._last_payload is None:
            return None
        return _Submission(self._last_payload, False, self._new_id())

    async def _resume_pending(self) -> bool:
        if self._turn_id is not None:
            state = self._state
            if state is None or state.live:
                # We stopped following before its end: ask where it is now.
                state = (await self.check_status()).state
            if state is TurnState.DONE:
                return False  # a finished thread: nothing pending
            if state is TurnState.RUNNING:
                self._error = None
                self._follow(self._turn_id)  # still going: follow it again
                return True
            if state is TurnState.PARKED:
                return await self.resume(None)  # interrupt() returns None
        # FAILED, or nothing known: the agent continues from the checkpoint, if any.
        return await self._dispatch(_Submission(None, False, self._new_id()), clear_error=True)

    async def _dispatch(self, submission: _Submission, *, clear_error: bool) -> bool:
        if clear_error:
            self._error = None
        if submission.payload is not None:
            self._last_payload = submission.payload
        # Until it has gone out, this is what retry() sends again: the same kind
        # of submission (a payload, None, or a regenerate) with the same turn id.
        self._unsent = submission
        try:
            created = await self.transport.create(
                input=submission.payload,
                thread_id=self._thread_id,
                turn_id=submission.turn_id,
                regenerate=submission.regenerate,
            )
        except NotDispatched as exc:
            self._error = _error_of(exc)
            return False
        except NoAnswer as exc:
            # It went out: the run may exist under the id we proposed.
            self._unsent = None
            self._turn_id, self._state = submission.turn_id, None
            self._error = _error_of(exc)
            return False
        except AgentRejected as exc:
            self._unsent = None
            self._error = _error_of(exc)
            return False
        self._unsent = None
        if created.turn_id is None:
            # Nothing to run: the thread has no pending work.
            self._error = None
            if self._turn_id is not None:
                self._state = TurnState.DONE
            return False
        self._thread_id = created.thread_id or self._thread_id
        self._turn_id = created.turn_id
        self._state = TurnState.RUNNING
        self._transcript = Transcript()
        self._follow(created.turn_id)
        return True

    def _follow(self, turn_id: str) -> None:
        self._run = asyncio.create_task(self._watch(turn_id), name=f"session-run:{turn_id}")

    async def _watch(self, turn_id: str) -> None:
        concluded: Concluded | None = None
        try:
            async for frame in self.transport.follow(turn_id):
                self._applied += 1
                self._transcript.apply(frame)
                if isinstance(frame, Event):
                    # Parked at interrupt(): submit(None) and resume() answer it while
                    # it is followed. Any later event (a replay after a reset goes
                    # past the interrupt of a resumed run) means it runs again.
                    if frame.type == "interrupt":
                        self._state = TurnState.PARKED
                    elif self._state is TurnState.PARKED:
                        self._state = TurnState.RUNNING
                if self.on_frame is not None:
                    self.on_frame(frame)
                if isinstance(frame, Concluded):
                    concluded = frame
                    break
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("following run %s failed: %s", turn_id, exc)
        self._conclude(concluded)

    def _conclude(self, concluded: Concluded | None) -> None:
        if concluded is None:
            self._error = SessionError(
                ErrorKind.INTERRUPTED,
                "the run's event stream closed before its end; check_status() tells "
                "whether it went on",
            )
            return
        self._state = concluded.state
        if concluded.reason is ConclusionReason.DEADLINE:
            self._error = SessionError(
                ErrorKind.INTERRUPTED,
                f"no end of the run within the follow deadline (last known state "
                f"{concluded.state.value if concluded.state else 'unknown'}); "
                "check_status() tells whether it finished",
            )
        elif concluded.state is TurnState.DONE:
            self._error = None
        elif concluded.state is TurnState.FAILED:
            self._error = SessionError(ErrorKind.FAILED, concluded.error or "the run failed")
        else:
            self._error = SessionError(
                ErrorKind.INTERRUPTED, "the service does not know this run (UNKNOWN)"
            )


def _error_of(exc: Exception) -> SessionError:
    if isinstance(exc, NotDispatched):
        return SessionError(ErrorKind.CONNECTION, str(exc) or "not dispatched")
    if isinstance(exc, NoAnswer):
        return SessionError(
            ErrorKind.INTERRUPTED,
            f"{exc or 'no answer'}; the run may have started: check_status() tells",
        )
    if isinstance(exc, AgentRejected):
        return SessionError(ErrorKind.REJECTED, exc.message)
    return SessionError(ErrorKind.INTERRUPTED, str(exc))
