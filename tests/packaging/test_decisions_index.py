"""docs/decisions.md: every entry once, every entry in the index and only those, every
status naming an entry that exists, and every decision the repository cites by number
present. Entries are cited by number all over the code and docs, so a number is never
reused or renumbered; this catches a citation left pointing at nothing."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DECISIONS = ROOT / "docs" / "decisions.md"

SKIPPED_DIRS = {"node_modules", ".venv", ".git"}
SUFFIXES = {".py", ".ts", ".md"}

# An entry: `N. **Title**`, optionally with its anchor on the same line.
ENTRY = re.compile(r'^(\d+)\. (?:<a id="d(\d+)"></a>)?\*\*')
ANCHOR = re.compile(r'^<a id="d(\d+)"></a>\s*$')
INDEX_ROW = re.compile(r"^\|\s*(\d+)\s*\|(.*)\|\s*([^|]*?)\s*\|\s*$")
STATUS = re.compile(r"^(?:active|superseded by (\d+))$")
# "decision 161", "decisions 136 and 144", "Decisions 146 and 149", "decisions 134-167".
CITED = re.compile(r"\bdecisions? (\d+(?:(?:, | and |-|\u2013)\d+)*)", re.IGNORECASE)
# "docs/decisions.md, entry 154", "docs/decisions.md entry 141", "(docs/decisions.md, 163)".
ENTRY_CITED = re.compile(r"\bentry (\d+)")
FILE_CITED = re.compile(r"decisions\.md,? (\d+)\b")


def entry_numbers(text: str) -> list[int]:
    """The number of every entry, in file order, duplicates kept."""
    return [int(m.group(1)) for line in text.splitlines() if (m := ENTRY.match(line))]


def index_rows(text: str) -> dict[int, str]:
    """The index table's rows: number -> status. A number listed twice fails here."""
    section = text.split("\n## Index\n", 1)[1].split("\n## ", 1)[0]
    rows: dict[int, str] = {}
    for line in section.splitlines():
        m = INDEX_ROW.match(line)
        if m is None:
            continue
        number = int(m.group(1))
        assert number not in rows, f"entry {number} is in the index twice"
        rows[number] = m.group(3)
    return rows


def sources() -> Iterator[Path]:
    for path in ROOT.rglob("*"):
        if path.suffix not in SUFFIXES or not path.is_file():
            continue
        if SKIPPED_DIRS.intersection(path.relative_to(ROOT).parts):
            continue
        yield path


def citations(line: str) -> set[int]:
    """The decision numbers a line cites."""
    numbers: set[int] = set()
    for m in CITED.finditer(line):
        numbers.update(int(n) for n in re.findall(r"\d+", m.group(1)))
    if "decisions.md" in line:
        numbers.update(int(n) for n in ENTRY_CITED.findall(line))
        numbers.update(int(n) for n in FILE_CITED.findall(line))
    return numbers


def test_every_entry_number_appears_once() -> None:
    numbers = entry_numbers(DECISIONS.read_text(encoding="utf-8"))
    assert numbers, "no entries found in docs/decisions.md"
    twice = sorted(n for n, count in Counter(numbers).items() if count > 1)
    assert not twice, f"entry numbers used more than once: {twice}"


def test_every_entry_has_its_anchor() -> None:
    lines = DECISIONS.read_text(encoding="utf-8").splitlines()
    missing = []
    for i, line in enumerate(lines):
        m = ENTRY.match(line)
        if m is None:
            continue
        number = int(m.group(1))
        if m.group(2) is not None:
            if int(m.group(2)) != number:
                missing.append(number)
            continue
        before = [previous for previous in lines[max(0, i - 2) : i] if previous.strip()]
        anchor = ANCHOR.match(before[-1]) if before else None
        if anchor is None or int(anchor.group(1)) != number:
            missing.append(number)
    assert not missing, f'entries without their <a id="dN"></a> anchor: {missing}'


def test_the_index_lists_exactly_the_entries() -> None:
    text = DECISIONS.read_text(encoding="utf-8")
    entries = set(entry_numbers(text))
    rows = index_rows(text)
    assert not entries - rows.keys(), (
        f"entries missing from the index: {sorted(entries - rows.keys())}"
    )
    assert not rows.keys() - entries, f"index rows with no entry: {sorted(rows.keys() - entries)}"


def test_statuses_name_existing_entries() -> None:
    text = DECISIONS.read_text(encoding="utf-8")
    entries = set(entry_numbers(text))
    for number, status in index_rows(text).items():
        m = STATUS.match(status)
        assert m is not None, f"entry {number}: status {status!r} is not active or superseded by N"
        if m.group(1) is not None:
            by = int(m.group(1))
            assert by in entries, f"entry {number} is superseded by {by}, which does not exist"
            assert by != number, f"entry {number} is superseded by itself"


def test_every_cited_decision_exists() -> None:
    entries = set(entry_numbers(DECISIONS.read_text(encoding="utf-8")))
    dangling = []
    for path in sources():
        text = path.read_text(encoding="utf-8", errors="replace")
        for lineno, line in enumerate(text.splitlines(), 1):
            for number in sorted(citations(line) - entries):
                dangling.append(f"{path.relative_to(ROOT)}:{lineno}: decision {number}")
    assert not dangling, "cited decisions that do not exist:\n" + "\n".join(dangling)
