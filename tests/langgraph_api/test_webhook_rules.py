"""The webhook rules on their own, as tables: which addresses a webhook may reach,
which URLs it may have, how it is signed (checked with HMAC computed here), how
long the retries wait, how large a body may be."""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import json
from pathlib import Path

import pytest
from turnkeeper_server.webhooks.addresses import AddressPolicy, PinnedResolver, Refused, Target
from turnkeeper_server.webhooks.delivery import backoff, bounded_body
from turnkeeper_server.webhooks.settings import WebhookSettings
from turnkeeper_server.webhooks.signing import SecretFile, headers, parse_secrets

DEFAULT = AddressPolicy()


@pytest.mark.parametrize(
    ("address", "allowed"),
    [
        ("93.184.215.14", True),
        ("2606:4700::6810:85e5", True),
        ("127.0.0.1", False),
        ("::1", False),
        ("10.0.0.1", False),
        ("172.16.5.4", False),
        ("192.168.1.1", False),
        ("169.254.169.254", False),  # cloud metadata
        ("fe80::1", False),
        ("fc00::1", False),
        ("100.64.0.1", False),  # carrier-grade NAT
        ("0.0.0.0", False),
        ("224.0.0.1", False),
        ("::ffff:127.0.0.1", False),  # IPv4 loopback written as IPv6
        ("::ffff:8.8.8.8", True),
    ],
)
def test_by_default_only_public_addresses_are_allowed(address: str, allowed: bool) -> None:
    assert DEFAULT.allowed(ipaddress.ip_address(address)) is allowed


def test_the_allow_list_opens_addresses_networks_and_names() -> None:
    policy = AddressPolicy.parse(["127.0.0.1", "10.0.0.0/8", "Hooks.Internal.", " "])
    assert policy.allowed(ipaddress.ip_address("127.0.0.1"))
    assert not policy.allowed(ipaddress.ip_address("127.0.0.2"))
    assert policy.allowed(ipaddress.ip_address("10.200.0.3"))
    assert policy.hosts == frozenset({"hooks.internal"})
    with pytest.raises(ValueError, match="--webhook-allow"):
        AddressPolicy.parse(["10.0.0.0/33"])


@pytest.mark.parametrize(
    ("url", "target"),
    [
        ("https://hooks.example.com/x", Target("https", "hooks.example.com", 443)),
        ("http://hooks.example.com:8080/x?y=1", Target("http", "hooks.example.com", 8080)),
        ("HTTP://[2001:db8::1]/x", Target("http", "2001:db8::1", 80)),
    ],
)
def test_a_webhook_url_names_its_target(url: str, target: Target) -> None:
    assert DEFAULT.target(url) == target


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("ftp://example.com/x", "http:// or https://"),
        ("/relative/path", "http:// or https://"),
        ("https://user:pw@example.com/", "user name or password"),
        ("https:///nohost", "no host"),
        ("https://example.com:99999/", "not a URL"),
        ("https://example.com/" + "a" * 2100, "longer than"),
    ],
)
def test_a_url_no_webhook_may_have_is_refused(url: str, said: str) -> None:
    with pytest.raises(Refused, match=said):
        DEFAULT.target(url)


async def test_a_name_is_refused_when_any_address_it_resolves_to_is() -> None:
    with pytest.raises(Refused, match="--webhook-allow"):
        await DEFAULT.resolve(Target("http", "localhost", 80))
    opened = AddressPolicy.parse(["localhost"])
    assert "127.0.0.1" in await opened.resolve(Target("http", "localhost", 80))


async def test_the_delivery_connects_to_the_addresses_checked_only() -> None:
    resolver = PinnedResolver("hooks.example.com", ["93.184.215.14"])
    [found] = await resolver.resolve("hooks.example.com", 443)
    assert (found["host"], found["port"]) == ("93.184.215.14", 443)
    with pytest.raises(OSError, match="not the host checked"):
        await resolver.resolve("elsewhere.example.com", 443)


def expected(secret: bytes, msg_id: str, timestamp: int, body: bytes) -> str:
    signed = f"{msg_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(secret, signed, hashlib.sha256).digest()).decode()


def test_every_secret_signs_so_a_secret_can_be_rotated(tmp_path: Path) -> None:
    old, new = b"the-old-secret-0123456789", bytes(range(32))
    path = tmp_path / "secret"
    path.write_text(f"# rotating\n{old.decode()}\n\nwhsec_{base64.b64encode(new).decode()}\n")
    secrets = SecretFile(path).current()
    assert secrets == (old, new)
    body = b'{"run_id":"r1"}'
    sent = headers(secrets, "r1", 1_700_000_000, body)
    assert sent["webhook-id"] == sent["Idempotency-Key"] == "r1"
    assert sent["webhook-signature"].split() == [
        expected(old, "r1", 1_700_000_000, body),
        expected(new, "r1", 1_700_000_000, body),
    ]


def test_the_secret_file_is_read_again_when_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    path.write_text("first-secret-0123456789\n")
    secrets = SecretFile(path)
    assert secrets.current() == (b"first-secret-0123456789",)
    path.write_text("second-secret-0123456789-longer\n")
    assert secrets.current() == (b"second-secret-0123456789-longer",)


def test_a_missing_secret_file_is_said_so(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"--webhook-secret-file .*No such file"):
        SecretFile(tmp_path / "absent")


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("short\n", "at least 16 bytes"),
        ("whsec_!!!\n", "base64"),
        ("# nothing\n\n", "no webhook secret"),
    ],
)
def test_a_bad_secret_file_says_what_is_wrong(text: str, said: str) -> None:
    with pytest.raises(ValueError, match=said):
        parse_secrets(text, "secret")


def test_retries_double_up_to_the_cap() -> None:
    settings = WebhookSettings(retry_base=2.0, retry_cap=600.0)
    assert [backoff(settings, n) for n in range(1, 11)] == [
        2.0,
        4.0,
        8.0,
        16.0,
        32.0,
        64.0,
        128.0,
        256.0,
        512.0,
        600.0,
    ]


def test_a_body_over_the_limit_leaves_its_values_out() -> None:
    payload = {"run_id": "r1", "status": "success", "values": {"big": "x" * 5000}}
    assert json.loads(bounded_body(payload, 10_000)) == payload
    trimmed = json.loads(bounded_body(payload, 1000))
    assert trimmed["values"] is None
    assert "1000 bytes" in trimmed["values_omitted"]
    with pytest.raises(ValueError, match="without its values"):
        bounded_body(payload, 20)
