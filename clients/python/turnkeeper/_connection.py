"""How a client reaches the service: target, TLS, token, deadlines, retries.

The target defaults to ``$TURNKEEPER_ADDRESS``, else ``127.0.0.1:50051``. It may name
several replicas: a comma-separated ``host:port`` list, or a DNS name with several
records (:mod:`turnkeeper._targets`). The channel spreads calls over all of them
(round_robin), and a retried call is picked again, so it goes to a replica that is
still up.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from importlib import metadata as _metadata
from pathlib import Path
from typing import Final

import grpc

from turnkeeper._targets import ChannelTarget, parse_addresses, resolve

__all__ = ["ADDRESS_ENV", "DEFAULT_ADDRESS", "ConnectionOptions", "default_address"]

ADDRESS_ENV: Final = "TURNKEEPER_ADDRESS"
DEFAULT_ADDRESS: Final = "127.0.0.1:50051"

_TURNS: Final = "turnkeeper.v1.TurnService"
_CHECKPOINTS: Final = "turnkeeper.v1.CheckpointService"

# The RPCs the client retries on UNAVAILABLE. Only those for which running twice is
# the same as running once:
# - reads: TurnStatus, GetTurn, ListTurns, ListEvents, ListEffects, ListAgents,
#   GetCheckpoint,
#   ListCheckpoints;
# - idempotent by design: StartTurn (by turn_id, for the same request), AppendEvents
#   (by (turn_id, attempt, seq): a batch already stored is skipped), PutCheckpoint
#   (by checkpoint id, replaces the row with the same content), PutWrites (by
#   (task_id, idx)) and RecordEffect (the same outcome again changes nothing).
#
# Never retried automatically, because each is a compare-and-set on the turn's state
# and UNAVAILABLE does not say whether the first try committed (the service may have
# applied it and then lost the connection): a retried ResumeDetached, ParkTurn,
# FinishTurn, ClaimTurn or CancelTurn that had committed finds the turn already moved on and
# reports FAILED_PRECONDITION (or ABORTED) for what was a success, and a retried
# Redrive re-drives a second time (attempts+2, a second rewind). The caller checks
# GetTurn/TurnStatus and decides. BeginEffect neither: a retry of one that recorded
# its intent would find that intent and answer UNCERTAIN for a call never made.
# MigrateTurns is not retried either: the caller checks with ListAgents. Also not
# retried: Heartbeat (the next beat is the
# retry), WatchTurn (the caller reconnects with after_seq, which the stream supports)
# and DeleteThread, PruneThreads, DeleteForRuns, CopyThread (idempotent alone, but a
# late retry could delete or overwrite a checkpoint another writer stored in between).
#
# Why grpc's service-config retry policy rather than a loop of our own: it is one
# declaration shared by the sync and the aio channel; grpc-core applies it with
# jittered exponential backoff, counts every attempt against the call's one deadline
# (so a retried call never outlives its timeout), caps attempts at 5, and retries a
# server stream only until its first message, where a hand-written loop would have
# to re-implement each of these twice.
_POLICIES: Final = ("round_robin", "pick_first")
# A channel's reconnect back-off, first and longest (ms): see channel_options.
RECONNECT_BACKOFF_MS: Final = (250, 2000)
# How long one connection attempt is given, the handshake included (ms): grpc-core's
# own default. grpc reads it from "grpc.min_reconnect_backoff_ms", whose name says
# back-off: set to 250 there, a handshake that took longer on a loaded machine
# failed the first call of a fresh channel with UNAVAILABLE (decision 760).
CONNECT_TIMEOUT_MS: Final = 20_000

_RETRIED: Final[tuple[tuple[str, str], ...]] = (
    (_TURNS, "StartTurn"),
    (_TURNS, "TurnStatus"),
    (_TURNS, "GetTurn"),
    (_TURNS, "ListTurns"),
    (_TURNS, "ListEvents"),
    (_TURNS, "ListAgents"),
    (_TURNS, "AppendEvents"),
    (_TURNS, "ListEffects"),
    (_TURNS, "RecordEffect"),
    (_CHECKPOINTS, "GetCheckpoint"),
    (_CHECKPOINTS, "ListCheckpoints"),
    (_CHECKPOINTS, "PutCheckpoint"),
    (_CHECKPOINTS, "PutWrites"),
)


def default_address() -> str:
    """``$TURNKEEPER_ADDRESS`` if set and not empty, else ``127.0.0.1:50051``."""
    return os.environ.get(ADDRESS_ENV) or DEFAULT_ADDRESS


def _user_agent() -> str:
    try:
        version = _metadata.version("turnkeeper")
    except _metadata.PackageNotFoundError:  # running from a source tree
        version = "0"
    return f"turnkeeper-python/{version}"


def _duration(seconds: float) -> str:
    """A google.protobuf.Duration in its JSON form, as service configs spell it."""
    return f"{seconds:.9f}".rstrip("0").rstrip(".") + "s"


@dataclass(frozen=True, slots=True)
class ConnectionOptions:
    """How to reach the service.

    Plaintext unless ``tls`` is set or a certificate path is given. With TLS and no
    ``root_certificates`` the system's roots are used; ``client_certificate`` and
    ``client_key`` (both or neither) are for mutual TLS. Paths are read when a
    channel is opened.
    """

    target: str = field(default_factory=default_address)
    tls: bool = False
    root_certificates: str | os.PathLike[str] | None = None
    client_certificate: str | os.PathLike[str] | None = None
    client_key: str | os.PathLike[str] | None = None
    # Sent on every call as `authorization: Bearer <token>`.
    bearer_token: str | None = None
    # Deadline of a call that does not give its own timeout. None: no deadline.
    # WatchTurn, which lasts as long as the turn, never gets this default.
    default_timeout: float | None = 30.0
    # Both directions. The service enforces its own (smaller) payload limits and
    # answers INVALID_ARGUMENT; this only keeps grpc's 4 MiB default out of the way.
    max_message_bytes: int = 64 * 1024 * 1024
    # Retry policy of the idempotent RPCs on UNAVAILABLE; grpc caps attempts at 5.
    # max_attempts=1 disables retries.
    retry_max_attempts: int = 5
    retry_initial_backoff: float = 0.1
    retry_max_backoff: float = 2.0
    # How the channel picks among the target's addresses. round_robin: every call
    # goes to the next ready one, and a replica that dies is dropped from the
    # rotation as soon as its connection breaks. pick_first: one connection, to the
    # first address that answers (gRPC's default).
    load_balancing: str = "round_robin"

    def __post_init__(self) -> None:
        if self.load_balancing not in _POLICIES:
            raise ValueError(f"load_balancing must be one of {', '.join(_POLICIES)}")
        # A malformed address list is refused here; names are looked up on open.
        parse_addresses(self.target)
        if (self.client_certificate is None) != (self.client_key is None):
            raise ValueError("client_certificate and client_key go together")
        if self.retry_max_attempts < 1:
            raise ValueError("retry_max_attempts must be at least 1")
        if self.retry_initial_backoff <= 0 or self.retry_max_backoff <= 0:
            raise ValueError("retry backoffs must be positive")
        if self.default_timeout is not None and self.default_timeout <= 0:
            raise ValueError("default_timeout must be positive or None")

    @property
    def secure(self) -> bool:
        return self.tls or self.root_certificates is not None or self.client_certificate is not None

    def credentials(self) -> grpc.ChannelCredentials | None:
        """TLS credentials, or None for a plaintext channel."""
        if not self.secure:
            return None

        def read(path: str | os.PathLike[str] | None) -> bytes | None:
            return None if path is None else Path(path).read_bytes()

        return grpc.ssl_channel_credentials(
            root_certificates=read(self.root_certificates),
            private_key=read(self.client_key),
            certificate_chain=read(self.client_certificate),
        )

    def channel_target(self) -> ChannelTarget:
        """The target a channel is opened with (host names in a list looked up now)."""
        return resolve(self.target)

    def service_config(self) -> str:
        """The channel's service config: the load balancing policy and the retry
        policy of ``_RETRIED``."""
        method_config: list[dict[str, object]] = []
        if self.retry_max_attempts > 1:
            method_config.append(
                {
                    "name": [{"service": s, "method": m} for s, m in _RETRIED],
                    "retryPolicy": {
                        "maxAttempts": self.retry_max_attempts,
                        "initialBackoff": _duration(self.retry_initial_backoff),
                        "maxBackoff": _duration(self.retry_max_backoff),
                        "backoffMultiplier": 2,
                        "retryableStatusCodes": ["UNAVAILABLE"],
                    },
                }
            )
        return json.dumps(
            {
                "loadBalancingConfig": [{self.load_balancing: {}}],
                "methodConfig": method_config,
            }
        )

    def channel_options(self, target: ChannelTarget | None = None) -> list[tuple[str, object]]:
        """Options of a channel opened on ``target`` (its authority, if it has one)."""
        authority = (
            []
            if target is None or target.authority is None
            else [("grpc.default_authority", target.authority)]
        )
        return [
            *authority,
            ("grpc.max_send_message_length", self.max_message_bytes),
            ("grpc.max_receive_message_length", self.max_message_bytes),
            ("grpc.enable_retries", 1),
            ("grpc.service_config", self.service_config()),
            ("grpc.primary_user_agent", _user_agent()),
            # gRPC's own reconnect back-off grows to 120 s: an agent started before
            # its service went on saying "unreachable" for 12 s and more after the
            # service was up (issue 49). A dial every 2 s at most is cheap.
            ("grpc.initial_reconnect_backoff_ms", RECONNECT_BACKOFF_MS[0]),
            ("grpc.max_reconnect_backoff_ms", RECONNECT_BACKOFF_MS[1]),
            ("grpc.min_reconnect_backoff_ms", CONNECT_TIMEOUT_MS),
        ]

    def call_metadata(self) -> tuple[tuple[str, str], ...]:
        if self.bearer_token is None:
            return ()
        return (("authorization", f"Bearer {self.bearer_token}"),)
