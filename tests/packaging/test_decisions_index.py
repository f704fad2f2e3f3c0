"""docs/decisions/: one file per topic, and an index page scripts/decisions.py makes from
them. Every entry once across the topic files, each with its anchor and a row in its
file's table, every status naming an entry that exists, the committed index what the
script writes, and every decision the repository cites by number present. Entries are
cited by number all over the code and docs, so a number is never reused or renumbered;
this catches a citation left pointing at nothing.

These checks read the topic files on their own (not through the script's parser), so a
fault in the script's reading shows up here as a disagreement."""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "docs" / "decisions"
SCRIPT = ROOT / "scripts" / "decisions.py"

SKIPPED_DIRS = {"node_modules", ".venv", ".git", "site"}
SUFFIXES = {".py", ".ts", ".md", ".proto", ".yml", ".yaml"}
# The script files a leftover docs/decisions.md, the index it writes says how, and this
# test names it to say it is gone.
NAMES_THE_OLD_LOG = {SCRIPT, FOLDER / "index.md", Path(__file__).resolve()}
# A pointer at the old file; "From docs/decisions.md: entry N" is not one but the name
# of a section of the benchmark reports (moved there whole), which entries quote.
POINTS_AT_OLD_LOG = re.compile(r"decisions\.md(?!:)")

ENTRY = re.compile(r"^(\d+)\. \*\*")
ANCHOR = re.compile(r'^<a id="d(\d+)"></a>\s*$')
TABLE_ROW = re.compile(r"^\|\s*(\d+)\s*\|(.*)\|\s*([^|]*?)\s*\|\s*$")
STATUS = re.compile(r"^(?:active|superseded by (\d+))$")
# "decision 161", "decisions 136 and 144", "Decisions 146 and 149", "decisions 134-167",
# "decisions 180, 185".
CITED = re.compile(r"\bdecisions? (\d+(?:(?:, | and |-|\u2013)\d+)*)", re.IGNORECASE)


def topic_files() -> list[Path]:
    return sorted(p for p in FOLDER.glob("*.md") if p.name != "index.md")


def entry_numbers(text: str) -> list[int]:
    """The number of every entry, in file order, duplicates kept."""
    return [int(m.group(1)) for line in text.splitlines() if (m := ENTRY.match(line))]


def all_entries() -> list[int]:
    return [n for path in topic_files() for n in entry_numbers(path.read_text("utf-8"))]


def table_rows(text: str) -> dict[int, str]:
    """A table's rows, number -> status; the table ends at the first line that is not one.
    A number listed twice fails here."""
    rows: dict[int, str] = {}
    for line in text.splitlines():
        m = TABLE_ROW.match(line)
        if m is None:
            continue
        number = int(m.group(1))
        assert number not in rows, f"entry {number} is in a table twice"
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
    return numbers


def test_every_entry_number_appears_once() -> None:
    assert len(topic_files()) > 10, "the topic files are missing from docs/decisions/"
    numbers = all_entries()
    twice = sorted(n for n, count in Counter(numbers).items() if count > 1)
    assert not twice, f"entry numbers used more than once: {twice}"


def test_every_entry_has_its_anchor() -> None:
    missing = []
    for path in topic_files():
        lines = path.read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            m = ENTRY.match(line)
            if m is None:
                continue
            number = int(m.group(1))
            before = [previous for previous in lines[max(0, i - 2) : i] if previous.strip()]
            anchor = ANCHOR.match(before[-1]) if before else None
            if anchor is None or int(anchor.group(1)) != number:
                missing.append(f"{path.name}: {number}")
    assert not missing, f'entries without their <a id="dN"></a> anchor: {missing}'


def test_each_topic_table_lists_exactly_its_entries() -> None:
    for path in topic_files():
        text = path.read_text(encoding="utf-8")
        assert text.startswith("# "), f"{path.name} does not start with its topic's heading"
        entries = entry_numbers(text)
        rows = table_rows(text)
        assert sorted(entries) == sorted(rows), (
            f"{path.name}: entries without a row {sorted(set(entries) - rows.keys())}, "
            f"rows without an entry {sorted(rows.keys() - set(entries))}"
        )


def test_statuses_name_existing_entries() -> None:
    entries = set(all_entries())
    for path in topic_files():
        for number, status in table_rows(path.read_text(encoding="utf-8")).items():
            m = STATUS.match(status)
            assert m is not None, (
                f"{path.name}, entry {number}: status {status!r} is not active or superseded by N"
            )
            if m.group(1) is not None:
                by = int(m.group(1))
                assert by in entries, f"entry {number} is superseded by {by}, which does not exist"
                assert by != number, f"entry {number} is superseded by itself"


def test_the_committed_index_is_what_the_script_writes() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "index", "--check"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


def test_the_index_lists_every_entry_once_with_its_topic_and_status() -> None:
    index = (FOLDER / "index.md").read_text(encoding="utf-8")
    table = index.split("\n## Index\n", 1)[1]
    rows = table_rows(table)
    statuses: dict[int, str] = {}
    for path in topic_files():
        statuses.update(table_rows(path.read_text(encoding="utf-8")))
    assert rows == statuses
    for path in topic_files():
        for number in entry_numbers(path.read_text(encoding="utf-8")):
            assert f"]({path.name}#d{number}) | [" in table, f"entry {number} not linked"
    assert list(rows) == sorted(rows), "the index is not in number order"


def test_every_cited_decision_exists() -> None:
    entries = set(all_entries())
    dangling = []
    for path in sources():
        text = path.read_text(encoding="utf-8", errors="replace")
        for lineno, line in enumerate(text.splitlines(), 1):
            for number in sorted(citations(line) - entries):
                dangling.append(f"{path.relative_to(ROOT)}:{lineno}: decision {number}")
    assert not dangling, "cited decisions that do not exist:\n" + "\n".join(dangling)


def test_nothing_points_at_the_old_single_file() -> None:
    """docs/decisions.md is gone; a comment or link naming it points at nothing (a
    branch that still appends to it is filed with `scripts/decisions.py file`)."""
    assert not (ROOT / "docs" / "decisions.md").exists(), (
        "docs/decisions.md is back: file it with `python scripts/decisions.py file`"
    )
    stale = []
    for path in sources():
        if path.resolve() in NAMES_THE_OLD_LOG:
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        for lineno, line in enumerate(text.splitlines(), 1):
            if POINTS_AT_OLD_LOG.search(line):
                stale.append(f"{path.relative_to(ROOT)}:{lineno}")
    assert not stale, "references to docs/decisions.md:\n" + "\n".join(stale)


NEW_ENTRY = """
<a id="d{n}"></a>

{n}. **{title}.** Filed by the test; it cites [decision 1](#d1) and
    [the benchmarks](../bench/analysis.md).
"""


def test_a_leftover_log_is_filed_into_its_topics(tmp_path: Path) -> None:
    """A branch started before the split appends to docs/decisions.md; `file` moves its
    new entries into their topic files, renumbers one whose number was taken meanwhile,
    leaves the entries already filed as they are, and writes the index."""
    docs = tmp_path / "docs"
    (docs / "decisions").mkdir(parents=True)
    for path in [*topic_files(), FOLDER / "index.md"]:
        (docs / "decisions" / path.name).write_text(path.read_text("utf-8"), "utf-8")
    top = max(all_entries())
    taken = top  # another branch's entry got this number first
    old = """# Decisions

## Index

| # | Title | Topic | Status |
|---:|---|---|---|
| 1 | [Fencing is `ABORTED`](#d1) | [Contract and states](#contract-and-states) | active |
| {a} | [A new effects rule](#d{a}) | [Effects](#effects) | active |
| {b} | [A rule in a topic of its own](#d{b}) | [Brand new topic](#brand-new-topic) | active |
| {c} | [A rule whose number was taken](#d{c}) | [Effects](#effects) | active |

## Contract and states
""".format(a=top + 1, b=top + 2, c=taken)
    contract = (FOLDER / "contract-and-states.md").read_text("utf-8")
    first = contract[contract.index('<a id="d1"></a>') : contract.index('<a id="d2"></a>')]
    old += "\n" + first.rstrip() + "\n\n## Graph versions\n"
    old += NEW_ENTRY.format(n=top + 1, title="A new effects rule")
    old += NEW_ENTRY.format(n=top + 2, title="A rule in a topic of its own")
    old += NEW_ENTRY.format(n=taken, title="A rule whose number was taken")
    (docs / "decisions.md").write_text(old, "utf-8")

    done = subprocess.run(
        [sys.executable, str(SCRIPT), "file", "--docs", str(docs)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert not (docs / "decisions.md").exists()
    assert f"RENUMBERED {taken} -> {top + 3}" in done.stdout
    assert "filed 1 " not in done.stdout  # already filed, same text
    effects = (docs / "decisions" / "effects.md").read_text("utf-8")
    assert f"| {top + 1} | [A new effects rule](#d{top + 1}) | active |" in effects
    assert f'<a id="d{top + 3}"></a>\n\n{top + 3}. **A rule whose number was taken.**' in effects
    # Links are rewritten for the entry's new place, one folder deeper.
    assert "[decision 1](contract-and-states.md#d1)" in effects
    assert "(../../bench/analysis.md)" in effects
    brand_new = (docs / "decisions" / "brand-new-topic.md").read_text("utf-8")
    assert brand_new.startswith("# Brand new topic\n")
    index = (docs / "decisions" / "index.md").read_text("utf-8")
    assert f"| {top + 2} | [A rule in a topic of its own](brand-new-topic.md#d{top + 2}) " in index
    assert index.count(f"| {taken} | [") == 1
    # The unchanged topic file is byte for byte what it was.
    assert (docs / "decisions" / "contract-and-states.md").read_text("utf-8") == contract
