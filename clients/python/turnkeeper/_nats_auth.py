"""How a NATS connection authenticates and encrypts, beside its URL.

Every NATS connection turnkeeper makes (the service's outbox and hand-offs, a
bridge's subscription) takes these, as flags of ``turnkeeper serve`` or from the
environment:

==================================  =========================================
``TURNKEEPER_NATS_CREDS``           credentials file (JWT and nkey seed, ``.creds``)
``TURNKEEPER_NATS_NKEY_SEED``       nkey seed file (needs the ``nkeys`` package)
``TURNKEEPER_NATS_TOKEN_FILE``      file holding a token (the bundled server's:
                                    ``nats.token`` in the service's data dir)
``TURNKEEPER_NATS_TLS_CA``          CA bundle the server's certificate chains to
``TURNKEEPER_NATS_TLS_CERT``        client certificate (mutual TLS) ...
``TURNKEEPER_NATS_TLS_KEY``         ... and its key (both or neither)
==================================  =========================================

A URL may still carry ``user:password@`` or a ``tls://`` scheme; these add what a URL
cannot say safely. With none of the three ways above, a process that holds a
turnkeeper token connects as that token's own NATS identity
(:mod:`turnkeeper._nats_identity`: what the service's bundled nats-server expects). Files are read at each connect, so a rotated token or
certificate is picked up by the next connection. This module does not import
nats-py: it builds the keyword arguments of ``nats.connect``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from turnkeeper._nats_identity import NatsIdentity, identity_of

ENV: Final = {
    "credentials": "TURNKEEPER_NATS_CREDS",
    "nkey_seed": "TURNKEEPER_NATS_NKEY_SEED",
    "token_file": "TURNKEEPER_NATS_TOKEN_FILE",
    "tls_ca": "TURNKEEPER_NATS_TLS_CA",
    "tls_cert": "TURNKEEPER_NATS_TLS_CERT",
    "tls_key": "TURNKEEPER_NATS_TLS_KEY",
}
_HELP: Final = {
    "credentials": "NATS credentials file (.creds: JWT and nkey seed)",
    "nkey_seed": "NATS nkey seed file",
    "token_file": "file holding the NATS token",
    "tls_ca": "CA bundle of the NATS server's certificate (turns on TLS)",
    "tls_cert": "client certificate for NATS mutual TLS",
    "tls_key": "key of --nats-tls-cert",
}


@dataclass(frozen=True)
class NatsAuth:
    credentials: Path | None = None
    nkey_seed: Path | None = None
    token_file: Path | None = None
    tls_ca: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    # A user derived from a turnkeeper token (turnkeeper._nats_identity), or the
    # service's own user of its bundled server; never from the environment.
    identity: NatsIdentity | None = None

    def __post_init__(self) -> None:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("the NATS TLS client certificate and key go together")
        ways = ("credentials", "nkey_seed", "token_file", "identity")
        given = [n for n in ways if getattr(self, n)]
        if len(given) > 1:
            raise ValueError(f"give one way to authenticate to NATS, not {' and '.join(given)}")

    @property
    def tls(self) -> bool:
        return self.tls_ca is not None or self.tls_cert is not None

    def connect_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``nats.connect`` (besides the URL)."""
        kwargs: dict[str, Any] = {}
        if self.credentials is not None:
            kwargs["user_credentials"] = str(self.credentials)
        if self.nkey_seed is not None:
            kwargs["nkeys_seed"] = str(self.nkey_seed)
        if self.token_file is not None:
            try:
                token = self.token_file.read_text().strip()
            except OSError as exc:
                raise ValueError(
                    f"cannot read the NATS token file {self.token_file}: {exc}"
                ) from None
            if not token:
                raise ValueError(f"the NATS token file {self.token_file} is empty")
            kwargs["token"] = token
        if self.identity is not None:
            kwargs.update(self.identity.connect_kwargs())
        if self.tls:
            context = ssl.create_default_context(
                cafile=str(self.tls_ca) if self.tls_ca is not None else None
            )
            if self.tls_cert is not None and self.tls_key is not None:
                context.load_cert_chain(str(self.tls_cert), str(self.tls_key))
            kwargs["tls"] = context
        return kwargs

    @property
    def authenticates(self) -> bool:
        """Whether one of the ways to authenticate is set."""
        return any((self.credentials, self.nkey_seed, self.token_file, self.identity))

    def or_token_identity(self, token: str | None) -> NatsAuth:
        """These settings, or where none authenticates, the identity of `token`."""
        if self.authenticates or not token:
            return self
        return dataclasses.replace(self, identity=identity_of(token))

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> NatsAuth:
        env = os.environ if env is None else env
        return _from_paths(lambda name: Path(env[ENV[name]]) if env.get(ENV[name]) else None)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--nats-creds`` and the rest, defaulting to the environment."""
    env = os.environ.get
    for name, var in ENV.items():
        flag = "--nats-" + {"credentials": "creds"}.get(name, name).replace("_", "-")
        value = env(var)
        parser.add_argument(
            flag,
            dest=f"nats_{name}",
            type=Path,
            default=Path(value) if value else None,
            help=f"{_HELP[name]} (env {var})",
        )


def from_args(args: argparse.Namespace) -> NatsAuth:
    return _from_paths(lambda name: getattr(args, f"nats_{name}"))


def _from_paths(path: Callable[[str], Path | None]) -> NatsAuth:
    """The settings whose files `path` names (by the fields' names, ENV's keys)."""
    return NatsAuth(
        credentials=path("credentials"),
        nkey_seed=path("nkey_seed"),
        token_file=path("token_file"),
        tls_ca=path("tls_ca"),
        tls_cert=path("tls_cert"),
        tls_key=path("tls_key"),
    )
