"""The Pipeline sidebar, drawn from the graph's ``step`` value.

``step`` holds the step that finished last, and the sidebar reads it the way the
guide describes: steps before it complete, it active, the rest pending. Two
consequences are deliberate and tested:

- when the run ends, ``step`` is the last step, so the last step stays *active*;
- a second question starts from the stale value (the previous run's last step) until
  its first step finishes and writes ``step`` again.

:func:`sidebar_states` is the whole logic, a pure function; :func:`render_sidebar`
and :func:`sidebar_text` only draw its result, each step under its label
(**Analyze**, **Plan**, **Generate**), not its node id.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Final

from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from examples.pipeline.graph import STEPS

#: What the sidebar shows for each node of the graph.
LABELS: Final = {"analyze": "Analyze", "plan": "Plan", "generate": "Generate"}


def label(step: str) -> str:
    return LABELS.get(step, step)


class StepState(enum.Enum):
    COMPLETE = "complete"
    ACTIVE = "active"
    PENDING = "pending"


def sidebar_states(step: str | None, steps: Sequence[str] = STEPS) -> list[tuple[str, StepState]]:
    """Each step's state for the value of ``step``; all pending when ``step`` is
    unset or names no step."""
    if step not in steps:
        return [(name, StepState.PENDING) for name in steps]
    current = steps.index(step)
    return [
        (
            name,
            StepState.COMPLETE
            if i < current
            else StepState.ACTIVE
            if i == current
            else StepState.PENDING,
        )
        for i, name in enumerate(steps)
    ]


_LOOK = {
    StepState.COMPLETE: ("✓", "green"),
    StepState.ACTIVE: ("●", "bold yellow"),
    StepState.PENDING: ("○", "dim"),
}


def render_sidebar(step: str | None, steps: Sequence[str] = STEPS) -> Panel:
    """The sidebar as a rich renderable."""
    table = Table.grid(padding=(0, 1))
    for name, state in sidebar_states(step, steps):
        mark, style = _LOOK[state]
        table.add_row(Text(mark, style=style), Text(label(name), style=style))
    return Panel(table, title="Pipeline", expand=False)


def sidebar_text(step: str | None, steps: Sequence[str] = STEPS) -> str:
    """The sidebar on one line: ``✓ Analyze  ● Plan  ○ Generate``."""
    return "  ".join(
        f"{_LOOK[state][0]} {label(name)}" for name, state in sidebar_states(step, steps)
    )
