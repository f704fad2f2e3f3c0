"""Recovery: from an agent process that restarted being healthy to the first event
of the step its re-driven turn resumes, through the bridge."""

from __future__ import annotations

import importlib.util

from bench.common import Section, Size


def run(size: Size) -> Section:
    section = Section(
        key="recovery",
        title="Recovery: agent healthy → first event of the resumed step",
        method="Needs the bridge (`turnkeeper.bridge`).",
    )
    if importlib.util.find_spec("turnkeeper.bridge") is None:
        section.skipped = "the bridge (`turnkeeper.bridge`) has not landed yet"
    return section
