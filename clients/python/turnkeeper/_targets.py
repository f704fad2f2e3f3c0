"""Several service addresses in one target, for clients that fail over between replicas.

A target is what gRPC accepts (``host:port``, ``dns:///name:port``, ``ipv4:a:p,b:p``,
``unix:path`` ...) or a comma-separated list of ``host:port`` addresses:

- a list of IP literals becomes gRPC's own ``ipv4:`` / ``ipv6:`` target, which the
  channel balances over (round_robin, see :mod:`turnkeeper._connection`);
- a list with host names is resolved when the channel is opened, because gRPC has no
  target scheme for several names. The TLS authority is then the first name, so a
  certificate must cover it. A DNS name with several records needs none of this:
  ``name:port`` (or ``dns:///name:port``) already gives the channel every record.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from typing import Final

__all__ = ["ChannelTarget", "parse_addresses", "resolve"]

# Schemes gRPC resolves itself; a target that starts with one is passed through.
_SCHEMES: Final = ("dns:", "ipv4:", "ipv6:", "unix:", "unix-abstract:", "vsock:")


@dataclass(frozen=True, slots=True)
class ChannelTarget:
    """What a channel is opened with: gRPC's target, and the authority to present
    (None: gRPC's default, the target's own)."""

    target: str
    authority: str | None = None


def _split_host_port(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(
            f"service address {address!r} in a list must be HOST:PORT (IPv6 as [ADDRESS]:PORT)"
        )
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"service address {address!r}: write an IPv6 address as [ADDRESS]:PORT")
    return host, int(port)


def parse_addresses(target: str) -> list[tuple[str, int]] | None:
    """The (host, port) pairs of a comma-separated list; None for a target gRPC takes
    as it is (one address, or one with a scheme). ValueError for a malformed list."""
    if "," not in target or target.startswith(_SCHEMES):
        return None
    parts = [p.strip() for p in target.split(",")]
    if any(not p for p in parts):
        raise ValueError(f"service target {target!r} has an empty address between commas")
    return [_split_host_port(p) for p in parts]


def _ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def _literal_target(version: int, pairs: list[tuple[str, int]]) -> str:
    if version == 4:
        return "ipv4:" + ",".join(f"{h}:{p}" for h, p in pairs)
    return "ipv6:" + ",".join(f"[{h}]:{p}" for h, p in pairs)


def resolve(target: str) -> ChannelTarget:
    """The channel target for ``target`` (see the module's docstring). Host names in a
    list are looked up now; a name that does not resolve raises ValueError."""
    pairs = parse_addresses(target)
    if pairs is None:
        return ChannelTarget(target)
    ips = [_ip(h) for h, _ in pairs]
    versions = {ip.version for ip in ips if ip is not None}
    if all(ip is not None for ip in ips) and len(versions) == 1:
        return ChannelTarget(_literal_target(versions.pop(), pairs))
    # gRPC's ipv4:/ipv6: targets take one family: IPv4 when any address has it (the
    # usual case; an address with IPv6 records only is then left out), else IPv6.
    by_family: dict[int, list[tuple[str, int]]] = {4: [], 6: []}
    for host, port in pairs:
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except socket.gaierror as err:
            raise ValueError(f"service address {host}:{port} does not resolve: {err}") from err
        found: dict[int, list[str]] = {4: [], 6: []}
        for info in infos:
            version = {socket.AF_INET: 4, socket.AF_INET6: 6}.get(info[0], 0)
            address = str(info[4][0])
            if version and address not in found[version]:
                found[version].append(address)
        for version in (4, 6):
            by_family[version] += [(ip, port) for ip in found[version]]
    family = 4 if by_family[4] else 6
    first = next(f"{h}:{p}" for (h, p), ip in zip(pairs, ips, strict=True) if ip is None)
    return ChannelTarget(_literal_target(family, by_family[family]), authority=first)
