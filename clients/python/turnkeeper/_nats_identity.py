"""A NATS identity per turnkeeper token, for the service's bundled nats-server.

When the service has tokens, the bundled nats-server gets one user per token of the
tokens file (and one for the service itself), each with subject permissions by the
token's role (messaging/credentials.py in the server):

- an ``agent:<name>`` token subscribes to its own agent's request and control
  subjects only, and publishes only its replies (and its readiness probe to its own
  request subject): it cannot read another agent's requests, hand-offs or events,
  and cannot forge events or control notices;
- any other token (panel, operator, admin) publishes requests to agents and
  subscribes to the turns' mirrored events and rewinds;
- the service alone publishes control notices and mirrored events.

Each user's name and password are derived from the token, so a process that holds
its turnkeeper token (``TURNKEEPER_TOKEN``) connects as itself with nothing else to
configure, and the service derives the same from the token's SHA-256 in the tokens
file::

    key      = HMAC-SHA256(key=SHA-256(token), msg="turnkeeper caller assertion v1")
    user     = "tk-" + key id (turnkeeper._caller_assertion.key_id)
    password = base64url(HMAC-SHA256(key, "turnkeeper nats password v1"))

A user's replies come back on its own inbox prefix (``_INBOX_<key id>``), which only
it may subscribe to. Pure standard library, like the rest of the client core.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from dataclasses import dataclass
from typing import Any, Final

from turnkeeper._caller_assertion import key_id, key_of, token_digest

_PASSWORD_LABEL: Final = b"turnkeeper nats password v1"


@dataclass(frozen=True)
class NatsIdentity:
    user: str
    password: str
    inbox_prefix: str

    def connect_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``nats.connect``."""
        return {"user": self.user, "password": self.password, "inbox_prefix": self.inbox_prefix}


def identity_of_digest(digest: str) -> NatsIdentity:
    """The identity of the token whose SHA-256 (hex) is `digest`."""
    key = key_of(digest)
    kid = key_id(key)
    password = base64.urlsafe_b64encode(hmac.new(key, _PASSWORD_LABEL, hashlib.sha256).digest())
    return NatsIdentity(
        user=f"tk-{kid}", password=password.rstrip(b"=").decode(), inbox_prefix=f"_INBOX_{kid}"
    )


def identity_of(token: str) -> NatsIdentity:
    """The identity a holder of `token` connects to the bundled nats-server as."""
    return identity_of_digest(token_digest(token))
