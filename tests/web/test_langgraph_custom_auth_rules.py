"""The rules of a langgraph.json's auth, as LangGraph's server reads them: filters on
metadata, what `authenticate` may return, which handler answers, and where the auth
file may be (web/langgraph/custom_auth.py, end_users.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import make_mocked_request
from langgraph_sdk import Auth
from turnkeeper_server.web.langgraph.custom_auth import (
    CustomAuth,
    EndUser,
    end_user,
    load,
    load_setting,
    matches,
)
from turnkeeper_server.web.langgraph.end_users import narrowed
from turnkeeper_server.web.langgraph.errors import ApiError

OWNED = {"owner": "alice", "tags": ["a", "b"], "team": "x"}


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        (None, True),
        ({}, True),
        ({"owner": "alice"}, True),
        ({"owner": "bob"}, False),
        ({"missing": None}, False),
        ({"owner": {"$eq": "alice"}}, True),
        ({"owner": {"$eq": "bob"}}, False),
        ({"tags": {"$contains": "a"}}, True),
        ({"tags": {"$contains": ["a", "b"]}}, True),
        ({"tags": {"$contains": "c"}}, False),
        ({"owner": {"$contains": "a"}}, False),  # not a list
        ({"$or": [{"owner": "bob"}, {"team": "x"}]}, True),
        ({"$or": [{"owner": "bob"}, {"team": "y"}]}, False),
        ({"$and": [{"owner": "alice"}, {"team": "x"}]}, True),
        ({"$and": [{"owner": "alice"}, {"team": "y"}]}, False),
        ({"$or": [{"owner": "bob"}, {"team": "x"}], "owner": "bob"}, False),
    ],
)
def test_a_filter_matches_metadata_as_langgraphs_server_does(
    filters: dict[str, Any] | None, expected: bool
) -> None:
    assert matches(OWNED, filters) is expected


def test_a_malformed_or_too_deep_filter_is_the_handlers_error() -> None:
    with pytest.raises(ApiError) as exc:
        matches(OWNED, {"$or": [{"owner": "alice"}]})
    assert exc.value.status == 500
    deep = {"$or": [{"$or": [{"$or": [{"a": 1}, {"b": 2}]}, {"c": 3}]}, {"d": 4}]}
    with pytest.raises(ApiError):
        matches(OWNED, deep)


@pytest.mark.parametrize(
    ("search", "filters", "expected"),
    [
        ({"topic": "a"}, None, ({"topic": "a"}, None)),
        ({}, {"owner": "alice"}, ({"owner": "alice"}, None)),
        ({}, {"owner": {"$eq": "alice"}}, ({"owner": "alice"}, None)),
        ({"owner": "bob"}, {"owner": "alice"}, (None, None)),
        (
            {"topic": "a"},
            {"owner": "alice", "tags": {"$contains": "a"}},
            ({"topic": "a", "owner": "alice"}, {"tags": {"$contains": "a"}}),
        ),
    ],
)
def test_a_search_takes_the_filters_equalities_into_its_metadata(
    search: dict[str, Any], filters: dict[str, Any] | None, expected: Any
) -> None:
    assert narrowed(search, filters) == expected


class Person:
    def __init__(self) -> None:
        self.identity = "carol"
        self.org = "acme"


def test_what_authenticate_returns_becomes_a_user() -> None:
    assert end_user("alice").identity == "alice"
    user = end_user({"identity": "bob", "permissions": ["read"], "org": "acme"})
    assert (user.identity, tuple(user.permissions), user["org"], user.org) == (
        "bob",
        ("read",),
        "acme",
        "acme",
    )
    assert user.is_authenticated and user.display_name == "bob"
    carol = end_user(Person())
    assert (carol.identity, carol["org"]) == ("carol", "acme")
    with pytest.raises(ValueError, match="identity"):
        end_user({"name": "no identity"})


async def test_the_most_specific_handler_answers() -> None:
    auth = Auth()
    seen: list[str] = []

    @auth.on
    async def everything(ctx: Auth.types.AuthContext, value: Any) -> bool:
        seen.append("global")
        return False

    @auth.on.threads
    async def threads(ctx: Auth.types.AuthContext, value: Any) -> dict[str, Any]:
        seen.append("threads")
        return {"owner": ctx.user.identity}

    @auth.on.threads.create
    async def create(ctx: Auth.types.AuthContext, value: Any) -> None:
        seen.append("threads.create")
        value["metadata"]["owner"] = ctx.user.identity

    custom = CustomAuth(auth, "test")
    user = EndUser("alice", (), {})
    value: dict[str, Any] = {"metadata": {}}
    assert await custom.authorize(user, "threads", "create", value) is None
    assert value["metadata"] == {"owner": "alice"}
    assert await custom.authorize(user, "threads", "read", {}) == {"owner": "alice"}
    with pytest.raises(ApiError) as exc:
        await custom.authorize(user, "assistants", "read", {})
    assert exc.value.status == 403
    assert seen == ["threads.create", "threads", "global"]


AUTH_PY = """
from langgraph_sdk import Auth
auth = Auth()

@auth.authenticate
async def authenticate(authorization: str | None) -> str:
    return "someone"
"""


def test_a_langgraph_json_names_its_auth_file_within_its_folder(tmp_path: Path) -> None:
    app = tmp_path / "app"
    app.mkdir()
    (app / "auth.py").write_text(AUTH_PY)
    (tmp_path / "outside.py").write_text(AUTH_PY)
    config = app / "langgraph.json"

    config.write_text(json.dumps({"graphs": {}, "auth": {"path": "./auth.py:auth"}}))
    loaded = load_setting(None, config)
    assert loaded is not None and loaded.spec == "./auth.py:auth"

    config.write_text(json.dumps({"graphs": {}, "auth": {"path": "../outside.py:auth"}}))
    with pytest.raises(ValueError, match="outside"):
        load_setting(None, config)

    config.write_text(json.dumps({"graphs": {}}))
    assert load_setting(None, config) is None
    assert load_setting(None, None) is None


def test_an_auth_object_is_refused_without_authenticate_or_with_unknown_parameters(
    tmp_path: Path,
) -> None:
    (tmp_path / "none.py").write_text("from langgraph_sdk import Auth\nauth = Auth()\n")
    with pytest.raises(ValueError, match="authenticate"):
        load(f"{tmp_path}/none.py:auth")
    (tmp_path / "odd.py").write_text(AUTH_PY.replace("authorization: str | None", "cookie"))
    with pytest.raises(ValueError, match="cookie"):
        load(f"{tmp_path}/odd.py:auth")
    (tmp_path / "fine.py").write_text(AUTH_PY.replace("authorization: str | None", "cookie=None"))
    assert load(f"{tmp_path}/fine.py:auth").spec.endswith("fine.py:auth")
    with pytest.raises(ValueError, match=r"not a langgraph_sdk\.Auth"):
        load(f"{tmp_path}/none.py:Auth")
    with pytest.raises(ValueError, match=r"none\.py has no attribute 'nope'"):
        load(f"{tmp_path}/none.py:nope")


async def test_authenticate_is_given_what_it_names_and_its_refusal_is_the_answer() -> None:
    auth = Auth()
    given: dict[str, Any] = {}

    # The SDK types only async handlers; LangGraph's server runs plain ones too.
    @auth.authenticate  # type: ignore[type-var]
    def authenticate(headers: dict[bytes, bytes], path: str, method: str) -> dict[str, Any]:
        # A plain function, as LangGraph's server allows (run off the event loop).
        given.update(path=path, method=method)
        user = headers.get(b"x-user", b"").decode()
        if user == "banned":
            raise Auth.exceptions.HTTPException(status_code=403, detail="banned")
        if not user:
            raise Auth.exceptions.HTTPException(detail="who are you?")
        return {"identity": user, "permissions": ["read"]}

    custom = CustomAuth(auth, "test")

    async def no_body() -> dict[str, Any]:
        raise AssertionError("authenticate did not ask for the body")

    request = make_mocked_request("GET", "/threads/t1", headers={"X-User": "dora"})
    user = await custom.authenticate(request, no_body)
    assert (user.identity, tuple(user.permissions)) == ("dora", ("read",))
    assert given == {"path": "/threads/t1", "method": "GET"}
    for headers, status in (({"X-User": "banned"}, 403), ({}, 401)):
        with pytest.raises(ApiError) as exc:
            await custom.authenticate(make_mocked_request("GET", "/", headers=headers), no_body)
        assert exc.value.status == status


@pytest.mark.parametrize(
    "sent", [{"assistant_id": "a"}, [{"assistant_id": "a"}]], ids=["object", "batch"]
)
async def test_authenticate_asking_for_the_body_gets_what_was_sent(sent: Any) -> None:
    """An object as a copy; a batch's array (POST /runs/batch) as it came."""
    auth = Auth()
    seen: list[Any] = []

    @auth.authenticate
    async def authenticate(body: dict[str, Any]) -> str:
        seen.append(body)
        return "dora"

    async def body() -> Any:
        return sent

    custom = CustomAuth(auth, "test")
    user = await custom.authenticate(make_mocked_request("POST", "/runs/batch"), body)
    assert user.identity == "dora" and seen == [sent]
