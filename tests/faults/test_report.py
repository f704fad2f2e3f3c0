"""docs/reliability.md as the campaign writes it: what the campaigns do and found is
the code's (ABOUT, FINDINGS), and a full run on one backend keeps the other's part
of the page. No cluster: a Result as a run would leave it."""

from __future__ import annotations

from pathlib import Path

from tests.faults.__main__ import OVERLOAD_SECTION, POSTGRES_SECTION, write_report
from tests.faults.campaign import ABOUT, FINDINGS, FULL, Result, report, run_section

DOC = Path(__file__).resolve().parents[2] / "docs" / "reliability.md"


def test_the_page_says_what_the_campaign_code_says() -> None:
    page = DOC.read_text()
    assert ABOUT in page and FINDINGS in page
    assert page.count(ABOUT) == 1, "the intro is written once, not again per backend"
    # The last round's findings (decisions 500 to 504, 553, 560).
    for decision in ("decisions 500 to\n  504", "(decision\n  553)", "(decision 560)"):
        assert decision in FINDINGS


def test_each_backends_full_run_keeps_the_others_part_of_the_page(tmp_path: Path) -> None:
    page = tmp_path / "reliability.md"
    page.write_text(f"old page{OVERLOAD_SECTION}overload table\n")
    sqlite = Result(FULL, seed=11)
    postgres = Result(FULL, seed=22)

    write_report(page, report(sqlite, "sqlite run"), "sqlite")
    write_report(page, run_section(postgres, "postgres run"), "postgres")
    write_report(page, report(sqlite, "sqlite again"), "sqlite")

    text = page.read_text()
    head, _, rest = text.partition(POSTGRES_SECTION)
    section, _, overload = rest.partition(OVERLOAD_SECTION)
    assert "sqlite again" in head and "sqlite run" not in text and "old page" not in text
    assert "postgres run" in section and "| seed | 22 |" in section
    assert ABOUT not in section and text.count(ABOUT) == 1
    assert overload == "overload table\n"
