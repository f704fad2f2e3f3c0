"""Several service addresses in one client target: how a list becomes gRPC's target,
what a malformed one is told, and a client whose first address is dead working
through the next one against the real service."""

from __future__ import annotations

import asyncio
import json
import socket

import pytest
from turnkeeper._targets import ChannelTarget, resolve
from turnkeeper.client import AsyncTurnkeeperClient, ConnectionOptions, TurnkeeperClient
from turnkeeper.v1 import turns_pb2 as pb
from turnkeeper_server.app import TurnkeeperServer

from tests.support.turns import value


def dead_address() -> str:
    """A local port nobody listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("127.0.0.1:50051", ChannelTarget("127.0.0.1:50051")),
        ("dns:///turnkeeper:50051", ChannelTarget("dns:///turnkeeper:50051")),
        ("ipv4:10.0.0.1:1,10.0.0.2:2", ChannelTarget("ipv4:10.0.0.1:1,10.0.0.2:2")),
        ("10.0.0.1:1, 10.0.0.2:2", ChannelTarget("ipv4:10.0.0.1:1,10.0.0.2:2")),
        ("[::1]:1,[fe80::2]:2", ChannelTarget("ipv6:[::1]:1,[fe80::2]:2")),
    ],
)
def test_an_address_list_becomes_grpcs_own_target(target: str, expected: ChannelTarget) -> None:
    assert resolve(target) == expected


def test_host_names_in_a_list_are_resolved_and_the_first_is_the_authority() -> None:
    got = resolve("localhost:7001,127.0.0.2:7002")
    assert got.authority == "localhost:7001"
    assert got.target.startswith(("ipv4:", "ipv6:"))
    assert got.target.endswith(":7002") and ":7001" in got.target


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("127.0.0.1:1,", "empty address"),
        ("127.0.0.1:1,127.0.0.2", "must be HOST:PORT"),
        ("127.0.0.1:1,::1:2", "[ADDRESS]:PORT"),
        ("127.0.0.1:1,127.0.0.2:99999", "must be HOST:PORT"),
    ],
)
def test_a_malformed_list_is_refused_saying_why(target: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        ConnectionOptions(target=target)


def test_a_name_that_does_not_resolve_is_refused_when_the_channel_opens() -> None:
    options = ConnectionOptions(target="127.0.0.1:1,no-such-host.invalid:2")
    with pytest.raises(ValueError, match="does not resolve"):
        TurnkeeperClient(options)


def test_the_channel_balances_round_robin_unless_told_otherwise() -> None:
    config = json.loads(ConnectionOptions().service_config())
    assert config["loadBalancingConfig"] == [{"round_robin": {}}]
    config = json.loads(ConnectionOptions(load_balancing="pick_first").service_config())
    assert config["loadBalancingConfig"] == [{"pick_first": {}}]
    with pytest.raises(ValueError, match="load_balancing"):
        ConnectionOptions(load_balancing="random")


async def test_a_client_whose_first_address_is_dead_works_through_the_next(
    service: TurnkeeperServer,
) -> None:
    options = ConnectionOptions(target=f"{dead_address()},{service.address}", default_timeout=10)
    async with AsyncTurnkeeperClient(options) as client:
        for i in range(6):
            started = await client.start_turn(
                pb.StartTurnRequest(turn_id=f"t{i}", thread_id=f"th{i}", agent="a", input=value({}))
            )
            assert started.created
            # Not retried, so it must have gone to the live address the first time.
            await client.finish_turn(
                pb.FinishTurnRequest(turn_id=f"t{i}", attempt=0, outcome=pb.OUTCOME_DONE)
            )

    def blocking() -> int:
        with TurnkeeperClient(options) as client:
            return client.turn_status(pb.TurnStatusRequest(turn_id="t5")).state

    # In a thread: the service runs on this test's event loop.
    assert await asyncio.to_thread(blocking) == pb.TURN_STATE_DONE
