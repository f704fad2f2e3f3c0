"""A LangGraph thread's state with no checkpoint yet, as LangGraph's API answers
``GET /threads/{id}/state`` for it. Written once for both sides that answer it: a
bridge asked for a thread it has no checkpoint of, and the service for a thread no
graph has run on yet."""

from __future__ import annotations

from typing import Any


def empty_thread_state(thread_id: str) -> dict[str, Any]:
    return {
        "values": {},
        "next": [],
        "tasks": [],
        "metadata": {},
        "created_at": None,
        "checkpoint": {
            "thread_id": thread_id,
            "checkpoint_ns": "",
            "checkpoint_id": None,
            "checkpoint_map": None,
        },
        "parent_checkpoint": None,
        "checkpoint_id": None,
        "parent_checkpoint_id": None,
        "interrupts": [],
    }
