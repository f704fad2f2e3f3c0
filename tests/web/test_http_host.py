"""The Host allow-list on a loopback HTTP port without authentication: a web page
that rebinds its own name to 127.0.0.1 is answered 403, the names of this host are
served (decision 182)."""

from __future__ import annotations

from pathlib import Path

import aiohttp
from turnkeeper_server.app import TurnkeeperServer

from tests.support.security import write_tokens
from tests.support.service import ServiceFactory


async def status_with_host(service: TurnkeeperServer, host: str | None) -> tuple[int, str]:
    assert service.web is not None
    headers = {} if host is None else {"Host": host}
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{service.web.url}turnkeeper.v1.TurnService/TurnStatus",
            json={"turnId": "t1"},
            headers=headers,
        ) as r,
    ):
        return r.status, await r.text()


async def test_only_this_hosts_names_are_served_without_authentication(
    web_service: TurnkeeperServer,
) -> None:
    assert web_service.web is not None
    port = web_service.web.port
    for host in (
        "localhost",
        f"localhost:{port}",
        "127.0.0.1",
        f"127.0.0.1:{port}",
        "[::1]",
        f"[::1]:{port}",
        "LOCALHOST",
    ):
        status, body = await status_with_host(web_service, host)
        assert status == 200, (host, body)
    for host in ("attacker.example", f"attacker.example:{port}", "127.0.0.1.nip.io", "[::2]"):
        status, body = await status_with_host(web_service, host)
        assert status == 403, (host, body)
        assert "--allow-host" in body and "TURNKEEPER_ALLOWED_HOSTS" in body
    # The console's pages and event streams are behind the same rule.
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{web_service.web.url}console/", headers={"Host": "attacker.example"}) as r,
    ):
        assert r.status == 403


async def test_a_name_glued_after_a_bracketed_address_is_not_that_address(
    web_service: TurnkeeperServer,
) -> None:
    # "[::1]evil.example" is no IPv6 literal with a port: its name is all of it
    # (before: read as "[::1]" and served). A port must be digits.
    assert web_service.web is not None
    for host in ("[::1]evil.example", "[::1]evil.example:80", "[::1]:80x", "127.0.0.1:x"):
        status, body = await status_with_host(web_service, host)
        assert status == 403, (host, body)


async def test_names_can_be_added_and_authentication_lifts_the_rule(
    make_service: ServiceFactory, tmp_path: Path
) -> None:
    service = await make_service(
        http_listen="127.0.0.1:0", http_allowed_hosts=("turnkeeper.internal",)
    )
    assert (await status_with_host(service, "turnkeeper.internal:8080"))[0] == 200
    assert (await status_with_host(service, "other.internal"))[0] == 403
    # With tokens nothing rides on the browser's ambient authority: any name is served
    # (and the call needs its token, as always).
    write_tokens(tmp_path / "tokens.jsonl")
    other = tmp_path / "other"
    other.mkdir()
    secured = await make_service(
        http_listen="127.0.0.1:0",
        tokens_file=tmp_path / "tokens.jsonl",
        turns_path=other / "turns.db",
        sessions_path=other / "sessions.db",
    )
    assert (await status_with_host(secured, "attacker.example"))[0] == 401
