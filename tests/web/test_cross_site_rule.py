"""The cross-site rule (web/cross_site.py, decision 273) as a table: which requests
a page of another site could send are refused, and with what status."""

from __future__ import annotations

import pytest
from turnkeeper_server.web.cross_site import refusal

OWN = {"Host": "127.0.0.1:2024"}
JSON = {"Content-Type": "application/json"}
CONFIGURED = frozenset({"https://panel.example"})

CASES = [
    # (method, path, headers, has_body, status or None)
    ("GET", "/threads/t/runs", {**OWN, "Origin": "https://evil.example"}, False, None),
    ("POST", "/threads/t/runs", {**OWN, **JSON}, True, None),
    ("POST", "/threads/t/runs", {**OWN, "Content-Type": "text/plain"}, True, 415),
    ("POST", "/runs", {**OWN, "Content-Type": "application/x-www-form-urlencoded"}, True, 415),
    ("POST", "/runs", {**OWN, "Content-Type": "multipart/form-data; boundary=x"}, True, 415),
    ("POST", "/threads/t/runs", {**OWN}, True, 415),
    ("POST", "/threads/t/runs/r/cancel", {**OWN}, False, None),
    ("POST", "/threads/t/runs/r/cancel", {**OWN, "Content-Type": "text/plain"}, False, 415),
    ("POST", "/runs", {**OWN, "Content-Type": "application/json; charset=utf-8"}, True, None),
    ("POST", "/runs", {**OWN, **JSON, "Origin": "https://evil.example"}, True, 403),
    ("POST", "/runs", {**OWN, **JSON, "Origin": "null"}, True, 403),
    ("POST", "/runs", {**OWN, **JSON, "Origin": "http://127.0.0.1:2024"}, True, None),
    ("POST", "/runs", {**OWN, **JSON, "Origin": "https://127.0.0.1:2024"}, True, None),
    ("POST", "/runs", {**OWN, **JSON, "Origin": "http://127.0.0.1:3000"}, True, 403),
    ("POST", "/runs", {**OWN, **JSON, "Origin": "https://panel.example"}, True, None),
    ("POST", "/runs", {**OWN, **JSON, "Origin": "https://panel.example/"}, True, None),
    ("POST", "/runs", {**OWN, **JSON, "Sec-Fetch-Site": "cross-site"}, True, 403),
    ("POST", "/runs", {**OWN, **JSON, "Sec-Fetch-Site": "same-origin"}, True, None),
    ("DELETE", "/threads/t", {**OWN, "Origin": "https://evil.example"}, False, 403),
    ("PATCH", "/assistants/a", {**OWN, "Content-Type": "text/plain"}, True, 415),
    ("PUT", "/threads/t/state", {**OWN, **JSON}, True, None),
    # Connect routes: the origin rule; their content type is their own (400).
    ("POST", "/turnkeeper.v1.TurnService/TurnStatus", {**OWN, "Origin": "https://e.x"}, True, 403),
    (
        "POST",
        "/turnkeeper.v1.TurnService/TurnStatus",
        {**OWN, "Content-Type": "text/plain"},
        True,
        None,
    ),
]


@pytest.mark.parametrize(("method", "path", "headers", "has_body", "status"), CASES)
def test_what_a_page_of_another_site_could_send_is_refused(
    method: str, path: str, headers: dict[str, str], has_body: bool, status: int | None
) -> None:
    found = refusal(
        method=method, path=path, headers=headers, has_body=has_body, allowed=CONFIGURED
    )
    assert (found and found.status) == status, found


def test_any_origin_is_served_when_configured() -> None:
    headers = {**OWN, **JSON, "Origin": "https://anyone.example"}
    for allowed, refused in ((frozenset({"*"}), False), (frozenset(), True)):
        found = refusal(
            method="POST", path="/runs", headers=headers, has_body=True, allowed=allowed
        )
        assert (found is not None) == refused
