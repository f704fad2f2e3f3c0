"""docs/langgraph-api.md says an option turnkeeper does not support is refused with
422, never ignored. This walks every option of LangGraph's own client (its runs,
threads and assistants methods, read from the SDK's signatures) and holds each to
one of: honoured (a named test shows it), refused (sent here: 422), the SDK's own
(never sent, or the call's identity), as the reference (a LangSmith option both
servers ignore without LangSmith), or a known gap (`Ignored`: accepted and not
applied, with who owns it). A new SDK option fails the walk until it is
classified; `test_no_option_is_silently_ignored` is the claim itself: it fails while
any option is an `Ignored` gap."""

from __future__ import annotations

import ast
import inspect
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.errors import APIStatusError
from turnkeeper_server.app import TurnkeeperServer

from tests.support.langgraph_host import THREADPLANE, hosted
from tests.support.nats import NatsServer

ASSISTANT = "durable-execution"
QUESTION: Any = {"messages": [{"role": "user", "content": "hi"}]}
HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Honoured:
    """Applied; `test` ("file.py::name") shows it, and names `evidence` (default:
    the option passed by keyword)."""

    test: str
    evidence: str | None = None


@dataclass(frozen=True)
class Refused:
    """Answered 422 when sent with this value."""

    value: Any


@dataclass(frozen=True)
class Ignored:
    """Accepted and not applied today: a gap, with its owner this round."""

    owner: str
    value: Any
    why: str


@dataclass(frozen=True)
class Own:
    """The SDK's own (a callback, a client-side format, how the call is made) or the
    call's identity (the ids in its path)."""

    why: str


@dataclass(frozen=True)
class AsReference:
    """Ignored by `langgraph dev` too, in the same conditions, for the reason given."""

    why: str


@dataclass(frozen=True)
class NoRoute:
    """The method's route is not served: the call is answered 404 or 405 with a
    `detail` (never a silent success)."""

    why: str


Entry = Honoured | Refused | Ignored | Own | AsReference | NoRoute

ID = Own("the call's identity")


def _shown(test: str, *names: str) -> dict[str, Entry]:
    return {name: Honoured(test) for name in names}


def _nowhere(route: str, *names: str) -> dict[str, Entry]:
    return {name: NoRoute(route) for name in names}


HEADERS = {"headers": Own("sent as headers"), "params": Own("sent as query parameters")}
LANGSMITH = AsReference(
    "LangSmith's: /info says flags.langsmith false, as langgraph dev without a LangSmith key"
)
BASICS = "test_sdk_basics.py"
LIFECYCLE = "test_sdk_lifecycle.py"
LISTS = "test_sdk_thread_lists.py"
THIS = "test_sdk_options.py"
RUNS = "test_sdk_runs.py"
ASSISTANTS = "test_sdk_assistants.py"
SUBGRAPHS = "test_sdk_subgraphs.py"

# What every run method takes, as runs.create, runs.stream and runs.wait share it.
_RUN: dict[str, Entry] = {
    "thread_id": ID,
    "assistant_id": ID,
    "input": Honoured(f"{BASICS}::test_wait_join_and_a_threadless_run"),
    "command": Honoured(f"{LIFECYCLE}::test_a_command_with_update_and_goto"),
    "metadata": Honoured(f"{RUNS}::test_a_run_keeps_its_metadata_kwargs_and_strategy"),
    "config": Honoured(f"{ASSISTANTS}::test_a_runs_context_and_config_reach_the_graph"),
    "context": Honoured(f"{ASSISTANTS}::test_a_runs_context_and_config_reach_the_graph"),
    "checkpoint": Honoured(f"{THIS}::test_runs_from_a_checkpoint_and_interrupt_after"),
    "checkpoint_id": Honoured(
        f"{LIFECYCLE}::test_a_run_from_an_earlier_checkpoint_forks_the_thread"
    ),
    # Every step is checkpointed before the next (decision 325): what asks for less
    # is refused; "sync" and "async" are met.
    "checkpoint_during": Refused(False),
    "durability": Refused("exit"),
    "interrupt_before": Honoured(
        f"{LIFECYCLE}::test_interrupt_before_stops_the_run_and_a_null_run_goes_on"
    ),
    "interrupt_after": Honoured(f"{THIS}::test_runs_from_a_checkpoint_and_interrupt_after"),
    "webhook": Honoured("test_webhooks.py::test_a_run_is_delivered_signed_with_its_body_and_key"),
    # A run started later is runs.create's (test_sdk_crons.py); a stream or a wait
    # starts now.
    "after_seconds": Refused(5),
    "multitask_strategy": Honoured(
        f"{LIFECYCLE}::test_enqueue_on_an_interrupted_thread_runs_at_once"
    ),
    "if_not_exists": Honoured("test_sdk_errors.py::test_unknown_assistant_and_thread"),
    # A thread-less run keeps its thread (docs/langgraph-api.md): "delete" is refused.
    "on_completion": Refused("delete"),
    "langsmith_tracing": LANGSMITH,
    "strict_resume": AsReference(
        "the SDK's own words: it takes effect only where /info reports strict_resume; "
        "neither server does"
    ),
    "on_run_created": Own("a callback the SDK calls with the Content-Location header"),
    **HEADERS,
}
_STREAMED: dict[str, Entry] = {
    "stream_mode": Honoured(f"{BASICS}::test_a_streamed_run_ends_with_the_graphs_state"),
    "stream_subgraphs": Honoured(f"{SUBGRAPHS}::test_stream_subgraphs_names_a_subgraphs_parts"),
    "stream_resumable": Honoured(
        f"{BASICS}::test_join_stream_resumes_after_the_last_event_id", "last_event_id"
    ),
}
OPTIONS: dict[str, dict[str, Entry]] = {
    "runs.create": {
        **_RUN,
        **_STREAMED,
        "after_seconds": Honoured("test_sdk_crons.py::test_a_run_started_later_survives_a_restart"),
        "stream_mode": Honoured(f"{RUNS}::test_a_run_keeps_its_metadata_kwargs_and_strategy"),
        "stream_resumable": Honoured(
            f"{BASICS}::test_join_stream_resumes_after_the_last_event_id", "last_event_id"
        ),
    },
    "runs.stream": {
        **_RUN,
        **_STREAMED,
        "on_disconnect": Honoured(
            "test_sdk_disconnect.py::test_a_client_gone_cancels_only_when_asked", "on_disconnect"
        ),
        "feedback_keys": LANGSMITH,
        "version": Own("the SDK's format of the parts (v1 tuples, v2 dicts), not sent"),
    },
    "runs.wait": {
        **_RUN,
        "on_disconnect": Honoured(
            "test_sdk_disconnect.py::test_a_client_gone_cancels_only_when_asked", "on_disconnect"
        ),
        "raise_error": Own("the SDK raises on a run's error itself"),
    },
    "runs.list": {
        "thread_id": ID,
        "limit": Honoured(f"{THIS}::test_runs_list_pages_and_filters"),
        "offset": Honoured(f"{THIS}::test_runs_list_pages_and_filters"),
        "status": Honoured(f"{THIS}::test_runs_list_pages_and_filters"),
        "select": Honoured(f"{THIS}::test_runs_list_selects_fields"),
        **HEADERS,
    },
    "runs.get": {"thread_id": ID, "run_id": ID, **HEADERS},
    "runs.join": {"thread_id": ID, "run_id": ID, **HEADERS},
    "runs.delete": {"thread_id": ID, "run_id": ID, **HEADERS},
    "runs.cancel": {
        "thread_id": ID,
        "run_id": ID,
        "wait": Honoured(f"{LIFECYCLE}::test_cancel_a_run"),
        "action": Honoured(f"{LIFECYCLE}::test_cancel_a_run"),
        **HEADERS,
    },
    "runs.join_stream": {
        "thread_id": ID,
        "run_id": ID,
        "stream_mode": Honoured(f"{BASICS}::test_join_stream_resumes_after_the_last_event_id"),
        "last_event_id": Honoured(f"{BASICS}::test_join_stream_resumes_after_the_last_event_id"),
        "cancel_on_disconnect": Honoured(f"{THIS}::test_join_stream_cancel_on_disconnect"),
        **HEADERS,
    },
    "runs.cancel_many": {
        **_shown(
            "test_sdk_cancel_many.py::test_by_status_then_by_ids",
            "thread_id",
            "run_ids",
            "status",
            "action",
        ),
        **HEADERS,
    },
    "runs.create_batch": {
        "payloads": Honoured(
            "test_sdk_create_batch.py::test_each_run_starts_on_a_thread_of_its_own",
            "create_batch(",
        ),
        **HEADERS,
    },
    "threads.create": {
        "metadata": Honoured("test_sdk_threads.py::test_create_get_search_and_update"),
        "thread_id": Honoured("test_sdk_threads.py::test_create_get_search_and_update"),
        "if_exists": Honoured("test_sdk_threads.py::test_create_get_search_and_update"),
        "graph_id": Honoured(f"{THIS}::test_a_thread_made_for_a_graph_has_its_state"),
        "supersteps": Refused([{"updates": [{"values": {}, "as_node": "plan"}]}]),
        "ttl": Refused(60),
        **HEADERS,
    },
    "threads.get": {"thread_id": ID, "include": Refused(["ttl"]), **HEADERS},
    "threads.update": {
        "thread_id": ID,
        "metadata": Honoured("test_sdk_threads.py::test_create_get_search_and_update"),
        "ttl": Refused(60),
        "return_minimal": Honoured(
            f"{LISTS}::test_ttl_and_include_are_refused_and_return_minimal_is_honoured"
        ),
        **HEADERS,
    },
    "threads.delete": {"thread_id": ID, **HEADERS},
    "threads.copy": {"thread_id": ID, **HEADERS},
    "threads.search": {
        **_shown(
            f"{LISTS}::test_search_sorts_selects_extracts_and_narrows",
            "metadata",
            "ids",
            "status",
            "sort_by",
            "sort_order",
            "select",
            "extract",
        ),
        **_shown(f"{LISTS}::test_count_is_every_match_not_a_page", "limit", "offset"),
        "values": Honoured(f"{LISTS}::test_search_by_values_and_status_of_runs"),
        **HEADERS,
    },
    "threads.count": {
        "metadata": Honoured(f"{LISTS}::test_count_is_every_match_not_a_page"),
        "status": Honoured(f"{LISTS}::test_count_is_every_match_not_a_page"),
        "values": Honoured(f"{LISTS}::test_search_by_values_and_status_of_runs"),
        **HEADERS,
    },
    "threads.prune": {
        "thread_ids": Honoured(f"{LISTS}::test_prune_erases_the_threads_named", "prune("),
        "strategy": Honoured(f"{LISTS}::test_prune_erases_the_threads_named"),
        **HEADERS,
    },
    "threads.get_state": {
        "thread_id": ID,
        "checkpoint": Honoured(f"{THIS}::test_state_and_history_options"),
        "checkpoint_id": Honoured(f"{LISTS}::test_state_and_history_select"),
        "select": Honoured(f"{LISTS}::test_state_and_history_select"),
        "subgraphs": Honoured(f"{SUBGRAPHS}::test_state_with_subgraphs_holds_the_subgraphs_own"),
        **HEADERS,
    },
    "threads.update_state": {
        "thread_id": ID,
        "values": Honoured("test_sdk_threads.py::test_state_history_and_an_edit_as_a_node", "{"),
        "as_node": Honoured("test_sdk_threads.py::test_state_history_and_an_edit_as_a_node"),
        "checkpoint": Honoured(f"{THIS}::test_state_and_history_options"),
        "checkpoint_id": Honoured(f"{THIS}::test_state_and_history_options"),
        **HEADERS,
    },
    "threads.get_history": {
        "thread_id": ID,
        "limit": Honoured(f"{LISTS}::test_state_and_history_select"),
        "before": Honoured(f"{THIS}::test_state_and_history_options"),
        "metadata": Honoured(f"{THIS}::test_state_and_history_options"),
        "checkpoint": Honoured(f"{THIS}::test_state_and_history_options"),
        "select": Honoured(f"{LISTS}::test_state_and_history_select"),
        **HEADERS,
    },
    "threads.join_stream": {
        "thread_id": NoRoute("GET /threads/{thread_id}/stream"),
        "last_event_id": NoRoute("GET /threads/{thread_id}/stream"),
        "stream_mode": NoRoute("GET /threads/{thread_id}/stream"),
        **HEADERS,
    },
    "threads.stream": {
        **_nowhere(
            "the thread stream protocol: POST /threads/{thread_id}/commands",
            "thread_id",
            "assistant_id",
            "run_start_timeout",
            "transport",
        ),
        "headers": HEADERS["headers"],
    },
    "assistants.search": {
        "metadata": Honoured(f"{THIS}::test_assistant_lists_page_and_filter"),
        "graph_id": Honoured(f"{BASICS}::test_assistants_are_the_hosted_graphs"),
        "name": Honoured(f"{THIS}::test_assistant_lists_page_and_filter"),
        "limit": Honoured(f"{THIS}::test_assistant_lists_page_and_filter"),
        "offset": Honoured(f"{THIS}::test_assistant_lists_page_and_filter"),
        "sort_by": Honoured(f"{ASSISTANTS}::test_search_and_count_filter_sort_and_page"),
        "sort_order": Honoured(f"{ASSISTANTS}::test_search_and_count_filter_sort_and_page"),
        "select": Honoured(f"{ASSISTANTS}::test_search_and_count_filter_sort_and_page"),
        "response_format": Honoured(f"{ASSISTANTS}::test_search_and_count_filter_sort_and_page"),
        **HEADERS,
    },
    "assistants.count": {
        "metadata": Honoured(f"{THIS}::test_assistant_lists_page_and_filter"),
        "graph_id": Honoured(f"{THIS}::test_assistant_lists_page_and_filter"),
        "name": Honoured(f"{THIS}::test_assistant_lists_page_and_filter"),
        **HEADERS,
    },
    "assistants.create": {
        **_shown(
            f"{ASSISTANTS}::test_create_update_versions_set_latest_delete",
            "graph_id",
            "context",
            "metadata",
            "assistant_id",
            "if_exists",
            "name",
            "description",
        ),
        "config": Honoured(f"{THIS}::test_an_assistants_config_graph_and_description_change"),
        **HEADERS,
    },
    "assistants.update": {
        "assistant_id": ID,
        **_shown(
            f"{ASSISTANTS}::test_create_update_versions_set_latest_delete",
            "context",
            "metadata",
            "name",
        ),
        **_shown(
            f"{THIS}::test_an_assistants_config_graph_and_description_change",
            "graph_id",
            "config",
            "description",
        ),
        **HEADERS,
    },
    "assistants.delete": {
        "assistant_id": ID,
        "delete_threads": Honoured(
            f"{ASSISTANTS}::test_deleting_an_assistant_cancels_its_runs_and_may_take_its_threads"
        ),
        **HEADERS,
    },
    "assistants.get_versions": {
        "assistant_id": ID,
        **_shown(
            f"{ASSISTANTS}::test_create_update_versions_set_latest_delete",
            "metadata",
            "limit",
            "offset",
        ),
        **HEADERS,
    },
    "assistants.set_latest": {
        "assistant_id": ID,
        "version": Honoured(f"{ASSISTANTS}::test_create_update_versions_set_latest_delete", "1)"),
        **HEADERS,
    },
    "assistants.get": {"assistant_id": ID, **HEADERS},
    "assistants.get_schemas": {"assistant_id": ID, **HEADERS},
    "assistants.get_graph": {
        "assistant_id": ID,
        "xray": Honoured(f"{SUBGRAPHS}::test_subgraphs_and_the_graph_drawn_with_them"),
        **HEADERS,
    },
    "assistants.get_subgraphs": {
        "assistant_id": ID,
        "namespace": Honoured(f"{SUBGRAPHS}::test_subgraphs_and_the_graph_drawn_with_them"),
        "recurse": Honoured(f"{SUBGRAPHS}::test_subgraphs_and_the_graph_drawn_with_them"),
        **HEADERS,
    },
}


def _sdk_options() -> dict[str, set[str]]:
    from langgraph_sdk._async.assistants import AssistantsClient
    from langgraph_sdk._async.runs import RunsClient
    from langgraph_sdk._async.threads import ThreadsClient

    out = {}
    for prefix, cls in (("runs", RunsClient), ("threads", ThreadsClient)):
        for name, fn in inspect.getmembers(cls, inspect.isfunction):
            if not name.startswith("_"):
                out[f"{prefix}.{name}"] = set(inspect.signature(fn).parameters) - {"self"}
    for name, fn in inspect.getmembers(AssistantsClient, inspect.isfunction):
        if not name.startswith("_"):
            out[f"assistants.{name}"] = set(inspect.signature(fn).parameters) - {"self"}
    return out


def test_every_option_of_the_sdk_is_classified() -> None:
    sdk = _sdk_options()
    assert set(sdk) == set(OPTIONS), "a method of the SDK is not walked"
    unwalked = {m: sdk[m] ^ set(o) for m, o in OPTIONS.items() if sdk[m] != set(o)}
    assert unwalked == {}


def _test_source(ref: str) -> str:
    file, _, name = ref.partition("::")
    source = (HERE / file).read_text()
    for node in ast.parse(source).body:
        if isinstance(node, ast.AsyncFunctionDef | ast.FunctionDef) and node.name == name:
            return ast.get_source_segment(source, node) or ""
    raise AssertionError(f"{ref}: no such test")


def test_each_honoured_option_names_the_test_that_shows_it() -> None:
    unshown = [
        (method, option, entry.test)
        for method, options in OPTIONS.items()
        for option, entry in options.items()
        if isinstance(entry, Honoured)
        and (entry.evidence or f"{option}=") not in _test_source(entry.test)
    ]
    assert unshown == []


def _ignored() -> list[str]:
    return [
        f"{method}({option}=...): {entry.why} [{entry.owner}]"
        for method, options in OPTIONS.items()
        for option, entry in options.items()
        if isinstance(entry, Ignored)
    ]


def test_no_option_is_silently_ignored() -> None:
    assert _ignored() == []


Call = Callable[[LangGraphClient, dict[str, Any]], Awaitable[Any]]


async def _stream(sdk: LangGraphClient, kwargs: dict[str, Any]) -> None:
    async for _ in sdk.runs.stream(None, ASSISTANT, input=QUESTION, **kwargs):
        pass


async def _with_thread(sdk: LangGraphClient, method: str, kwargs: dict[str, Any]) -> Any:
    thread = await sdk.threads.create()
    return await getattr(sdk.threads, method)(thread["thread_id"], **kwargs)


CALLS: dict[str, Call] = {
    "runs.create": lambda sdk, kw: sdk.runs.create(None, ASSISTANT, input=QUESTION, **kw),
    "runs.stream": _stream,
    "runs.wait": lambda sdk, kw: sdk.runs.wait(None, ASSISTANT, input=QUESTION, **kw),
    "runs.list": lambda sdk, kw: _runs_list(sdk, kw),
    "assistants.delete": lambda sdk, kw: _made_assistant(sdk, "delete", kw),
    "threads.create": lambda sdk, kw: sdk.threads.create(**kw),
    "threads.get": lambda sdk, kw: _with_thread(sdk, "get", kw),
    "threads.update": lambda sdk, kw: _with_thread(sdk, "update", {"metadata": {}, **kw}),
    "threads.get_state": lambda sdk, kw: _with_thread(sdk, "get_state", kw),
    "threads.join_stream": lambda sdk, kw: _thread_stream(sdk),
    # What AsyncThreadStream sends first.
    "threads.stream": lambda sdk, kw: sdk.http.post(
        f"/threads/{uuid.uuid4()}/commands", json={"method": "run.start"}
    ),
    "assistants.search": lambda sdk, kw: sdk.assistants.search(**kw),
    "assistants.get_graph": lambda sdk, kw: sdk.assistants.get_graph(ASSISTANT, **kw),
    "assistants.get_subgraphs": lambda sdk, kw: sdk.assistants.get_subgraphs(ASSISTANT, **kw),
}


async def _made_assistant(sdk: LangGraphClient, method: str, kwargs: dict[str, Any]) -> Any:
    made = await sdk.assistants.create(graph_id=ASSISTANT)
    return await getattr(sdk.assistants, method)(made["assistant_id"], **kwargs)


async def _runs_list(sdk: LangGraphClient, kwargs: dict[str, Any]) -> Any:
    run = await sdk.runs.create(None, ASSISTANT, input=QUESTION)
    return await sdk.runs.list(run["thread_id"], **kwargs)


async def _thread_stream(sdk: LangGraphClient) -> None:
    thread = await sdk.threads.create()
    async for _ in await sdk.threads.join_stream(thread["thread_id"]):
        pass


@pytest.mark.slow
# The SDK warns of `checkpoint_during` as it sends it: this test sends it to see it refused.
@pytest.mark.filterwarnings("ignore:`checkpoint_during` is deprecated:DeprecationWarning")
async def test_refused_options_answer_422_and_the_known_gaps_are_as_listed(
    sdk: LangGraphClient,
) -> None:
    """Each Refused value is a 422; each NoRoute method a 404 or 405 with a detail;
    each Ignored value is accepted (when one is refused or fails instead, move it)."""
    checked: set[str] = set()
    for method, options in OPTIONS.items():
        routeless = [o for o, e in options.items() if isinstance(e, NoRoute)]
        if routeless:
            with pytest.raises(APIStatusError) as missing:
                await CALLS[method](sdk, {})
            assert missing.value.status_code in (404, 405), method
            assert isinstance(missing.value.body, dict) and missing.value.body["detail"]
            checked.add(method)
        for option, entry in options.items():
            if isinstance(entry, Refused):
                # (runs.wait raises httpx's own error, not the SDK's typed one)
                with pytest.raises(httpx.HTTPStatusError) as refusal:
                    await CALLS[method](sdk, {option: entry.value})
                assert refusal.value.response.status_code == 422, (method, option)
                checked.add(method)
            elif isinstance(entry, Ignored):
                # Accepted: a gap, not a refusal (a 422 here: move it to Refused).
                await CALLS[method](sdk, {option: entry.value})
                checked.add(method)
    assert checked <= set(CALLS)


# The proofs of what this walk found honoured with no test of its own yet.


@pytest.mark.shared_deployment
async def test_runs_from_a_checkpoint_and_interrupt_after(sdk: LangGraphClient) -> None:
    thread = await sdk.threads.create()
    thread_id = thread["thread_id"]
    stopped: Any = await sdk.runs.wait(
        thread_id, ASSISTANT, input=QUESTION, interrupt_after=["analyze"]
    )
    assert stopped["step"] == "analyze"
    assert (await sdk.threads.get_state(thread_id))["next"] == ["plan"]
    done: Any = await sdk.runs.wait(thread_id, ASSISTANT, input=None)
    assert done["step"] == "generate"
    history: Any = await sdk.threads.get_history(thread_id, limit=20)
    after_analyze = next(h for h in history if h["values"].get("step") == "analyze")
    # A fork named by the whole checkpoint, as RemoteGraph sends it.
    forked: Any = await sdk.runs.wait(
        thread_id, ASSISTANT, input=None, checkpoint=after_analyze["checkpoint"]
    )
    assert forked["step"] == "generate"
    newest: Any = await sdk.threads.get_state(thread_id)
    assert newest["parent_checkpoint"]["checkpoint_id"] != done.get("checkpoint_id")
    assert len(await sdk.threads.get_history(thread_id, limit=50)) > len(history)


@pytest.mark.shared_deployment
async def test_runs_list_pages_and_filters(sdk: LangGraphClient) -> None:
    thread = await sdk.threads.create()
    thread_id = thread["thread_id"]
    first: Any = await sdk.runs.wait(thread_id, ASSISTANT, input=QUESTION)
    assert first["step"] == "generate"
    await sdk.runs.wait(thread_id, ASSISTANT, input=QUESTION)
    every = await sdk.runs.list(thread_id)
    assert len(every) == 2
    assert [r["run_id"] for r in await sdk.runs.list(thread_id, limit=1)] == [every[0]["run_id"]]
    assert [r["run_id"] for r in await sdk.runs.list(thread_id, limit=1, offset=1)] == [
        every[1]["run_id"]
    ]
    assert len(await sdk.runs.list(thread_id, status="success")) == 2
    assert await sdk.runs.list(thread_id, status="pending") == []


async def test_join_stream_cancel_on_disconnect(
    service: TurnkeeperServer, nats_server: NatsServer, api_url: str
) -> None:
    # Each step takes a second: the client leaves long before the run ends.
    async with (
        hosted(THREADPLANE, service, nats_server, replica="lg-join-leave", step_delay=1.0),
        get_client(url=api_url) as sdk,
    ):
        for cancel, ended in ((True, "interrupted"), (False, "success")):
            run = await sdk.runs.create(None, ASSISTANT, input=QUESTION)
            joined = sdk.runs.join_stream(
                run["thread_id"], run["run_id"], cancel_on_disconnect=cancel
            )
            async for _ in joined:
                break
            await joined.aclose()  # type: ignore[attr-defined]
            await sdk.runs.join(run["thread_id"], run["run_id"])
            final = await sdk.runs.get(run["thread_id"], run["run_id"])
            assert final["status"] == ended, cancel


@pytest.mark.shared_deployment
async def test_state_and_history_options(sdk: LangGraphClient) -> None:
    thread = await sdk.threads.create()
    thread_id = thread["thread_id"]
    await sdk.runs.wait(thread_id, ASSISTANT, input=QUESTION)
    history: Any = await sdk.threads.get_history(thread_id, limit=20)
    assert len(history) > 2
    # before: the states older than a checkpoint.
    older: Any = await sdk.threads.get_history(thread_id, limit=20, before=history[1]["checkpoint"])
    assert [h["checkpoint"] for h in older] == [h["checkpoint"] for h in history[2:]]
    # metadata: the states whose checkpoint metadata holds it.
    step = history[1]["metadata"]["step"]
    found: Any = await sdk.threads.get_history(thread_id, limit=20, metadata={"step": step})
    assert [h["checkpoint"] for h in found] == [history[1]["checkpoint"]]
    # checkpoint: that checkpoint's state (the saver's list by id, as the reference's).
    back: Any = await sdk.threads.get_history(
        thread_id, limit=20, checkpoint=history[1]["checkpoint"]
    )
    assert [h["checkpoint"] for h in back] == [history[1]["checkpoint"]]
    at: Any = await sdk.threads.get_state(thread_id, checkpoint=history[1]["checkpoint"])
    assert at["checkpoint"] == history[1]["checkpoint"]
    assert at["values"] == history[1]["values"]
    # An edit from an earlier checkpoint (a fork), by id and by the whole checkpoint.
    edited: Any = await sdk.threads.update_state(
        thread_id,
        {"step": "edited"},
        as_node="plan",
        checkpoint_id=history[2]["checkpoint"]["checkpoint_id"],
    )
    branch: Any = await sdk.threads.get_state(thread_id)
    assert branch["values"]["step"] == "edited"
    assert branch["parent_checkpoint"]["checkpoint_id"] == history[2]["checkpoint"]["checkpoint_id"]
    assert edited["checkpoint"]["checkpoint_id"] == branch["checkpoint"]["checkpoint_id"]
    await sdk.threads.update_state(
        thread_id, {"step": "again"}, as_node="plan", checkpoint=history[1]["checkpoint"]
    )
    again: Any = await sdk.threads.get_state(thread_id)
    assert again["values"]["step"] == "again"
    assert again["parent_checkpoint"]["checkpoint_id"] == history[1]["checkpoint"]["checkpoint_id"]


@pytest.mark.shared_deployment
async def test_a_thread_made_for_a_graph_has_its_state(sdk: LangGraphClient) -> None:
    thread: Any = await sdk.threads.create(graph_id=ASSISTANT)
    assert thread["metadata"]["graph_id"] == ASSISTANT
    # The graph is known before any run: its state can be written and read.
    await sdk.threads.update_state(thread["thread_id"], {"step": "seeded"}, as_node="analyze")
    state: Any = await sdk.threads.get_state(thread["thread_id"])
    assert state["values"]["step"] == "seeded" and state["next"] == ["plan"]


async def test_assistant_lists_page_and_filter(sdk: LangGraphClient) -> None:
    every = await sdk.assistants.search(limit=10)
    assert len(every) == 3
    page = await sdk.assistants.search(limit=1, offset=1)
    assert [a["assistant_id"] for a in page] == [every[1]["assistant_id"]]
    assert [a["name"] for a in await sdk.assistants.search(name="approval")] == ["approval"]
    system = await sdk.assistants.search(metadata={"created_by": "system"})
    assert len(system) == 3
    assert await sdk.assistants.search(metadata={"created_by": "someone"}) == []
    assert await sdk.assistants.count(metadata={"created_by": "system"}) == 3
    assert await sdk.assistants.count(graph_id="approval") == 1
    assert await sdk.assistants.count(name="nobody") == 0


@pytest.mark.shared_deployment
async def test_runs_list_selects_fields(sdk: LangGraphClient) -> None:
    run = await sdk.runs.create(None, ASSISTANT, input=QUESTION)
    await sdk.runs.join(run["thread_id"], run["run_id"])
    listed: Any = await sdk.runs.list(run["thread_id"], select=["run_id", "status"])
    assert listed == [{"run_id": run["run_id"], "status": "success"}]
    with pytest.raises(APIStatusError) as refused:
        await sdk.runs.list(run["thread_id"], select=cast(Any, ["no_such_field"]))
    assert refused.value.status_code == 422


async def test_an_assistants_config_graph_and_description_change(sdk: LangGraphClient) -> None:
    made = await sdk.assistants.create(
        graph_id=ASSISTANT, config={"tags": ["first"]}, description="one"
    )
    assert made["config"]["tags"] == ["first"] and made["description"] == "one"
    changed = await sdk.assistants.update(
        made["assistant_id"],
        graph_id=ASSISTANT,
        config={"tags": ["second"]},
        description="two",
    )
    assert changed["version"] == 2
    assert changed["config"]["tags"] == ["second"] and changed["description"] == "two"
    with pytest.raises(APIStatusError) as unknown:
        await sdk.assistants.update(made["assistant_id"], graph_id="no-such-graph")
    assert unknown.value.status_code in (404, 422)
