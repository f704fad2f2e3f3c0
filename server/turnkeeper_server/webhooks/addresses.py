"""Where a webhook may go: never into the service's own network unless the operator
says so (server-side request forgery).

A webhook URL is http or https with a host, no user info, at most
MAX_URL_CHARS long. Its host is resolved, and every address it resolves to must be
allowed: a public (globally routable) unicast address, or one inside a network of
the operator's allow-list (`--webhook-allow`). Loopback, private (RFC 1918, unique
local), link-local (the cloud metadata address 169.254.169.254 among them), carrier
NAT, multicast, unspecified and reserved addresses are refused by default, IPv4
ones written as IPv6 (``::ffff:127.0.0.1``) too. A host name on the allow-list
opens that name whatever it resolves to. The delivery connects to the addresses
checked here and no others (`PinnedResolver`): a name that resolves elsewhere the
second time (DNS rebinding) cannot move it.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

from aiohttp.abc import AbstractResolver, ResolveResult

MAX_URL_CHARS: Final = 2048

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class Refused(ValueError):
    """A webhook URL or address the policy does not allow; the message says why and
    what the operator can do."""


@dataclass(frozen=True)
class Target:
    scheme: str
    host: str
    port: int


@dataclass(frozen=True)
class AddressPolicy:
    # Host names opened whatever they resolve to (lower case, no trailing dot).
    hosts: frozenset[str] = frozenset()
    # Networks opened (a single address is a /32 or /128).
    networks: tuple[IPNetwork, ...] = ()

    @classmethod
    def parse(cls, entries: Iterable[str]) -> AddressPolicy:
        """`--webhook-allow` entries: an address, a network (CIDR) or a host name."""
        hosts: set[str] = set()
        networks: list[IPNetwork] = []
        for raw in entries:
            entry = raw.strip()
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
            except ValueError:
                if "/" in entry or ":" in entry or " " in entry:
                    raise ValueError(
                        f"--webhook-allow {entry!r}: not an address, a network (CIDR) "
                        "or a host name"
                    ) from None
                hosts.add(entry.lower().rstrip("."))
        return cls(frozenset(hosts), tuple(networks))

    def target(self, url: str) -> Target:
        """The URL's scheme, host and port, or Refused for one no webhook may have."""
        if len(url) > MAX_URL_CHARS:
            raise Refused(f"webhook: the URL is longer than {MAX_URL_CHARS} characters")
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as exc:
            raise Refused(f"webhook: {url!r} is not a URL ({exc})") from None
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https"):
            raise Refused("webhook: the URL must be http:// or https://")
        if parts.username is not None or parts.password is not None:
            raise Refused("webhook: the URL may not carry a user name or password")
        host = (parts.hostname or "").rstrip(".")
        if not host:
            raise Refused("webhook: the URL has no host")
        return Target(scheme, host, port or (443 if scheme == "https" else 80))

    def allowed(self, address: IPAddress) -> bool:
        mapped = getattr(address, "ipv4_mapped", None)
        if mapped is not None:
            address = mapped
        if any(address.version == n.version and address in n for n in self.networks):
            return True
        return address.is_global and not address.is_multicast

    async def resolve(self, target: Target) -> list[str]:
        """The addresses to connect to for `target`, each allowed; Refused when any
        address it resolves to is not (or it resolves to none)."""
        try:
            literal: IPAddress | None = ipaddress.ip_address(target.host)
        except ValueError:
            literal = None
        if literal is not None:
            found = [literal]
        else:
            try:
                infos = await asyncio.get_running_loop().getaddrinfo(
                    target.host, target.port, type=socket.SOCK_STREAM
                )
            except OSError as exc:
                raise LookupError(f"webhook host {target.host!r} did not resolve: {exc}") from exc
            found = list(dict.fromkeys(ipaddress.ip_address(str(i[4][0])) for i in infos))
        if target.host.lower() in self.hosts:
            return [str(a) for a in found]
        refused = [a for a in found if not self.allowed(a)]
        if refused or not found:
            raise Refused(
                f"webhook host {target.host!r} resolves to {', '.join(map(str, refused))}, "
                "an address of the service's own or a private network, which webhooks may "
                "not reach unless the service's operator allows it (--webhook-allow, "
                "docs/operators.md)"
            )
        return [str(a) for a in found]


class PinnedResolver(AbstractResolver):
    """aiohttp's resolver for one delivery: the host resolves to the addresses the
    policy checked, and to nothing else."""

    def __init__(self, host: str, addresses: list[str]) -> None:
        self.host = host
        self.addresses = addresses

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        if host.rstrip(".").lower() != self.host.lower():
            raise OSError(f"webhook delivery: {host!r} is not the host checked")
        return [
            ResolveResult(
                hostname=host,
                host=address,
                port=port,
                family=socket.AF_INET6 if ":" in address else socket.AF_INET,
                proto=0,
                flags=socket.AI_NUMERICHOST,
            )
            for address in self.addresses
        ]

    async def close(self) -> None:
        return None
