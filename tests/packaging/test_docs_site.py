"""The documentation site (mkdocs.yml) builds with warnings as errors: every page of
docs/ in the nav, every link between pages and every anchor right, the Python client
reference made from the docstrings of names that exist (decision 205), and the
TypeScript client reference TypeDoc makes from the package's TSDoc, committed under
docs/reference/typescript (decision 250: .ci/run's `npm run check-docs` checks it is what
TypeDoc makes now; here, that the check refuses a broken link)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[2]


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value is None:
                continue
            if name in ("id", "name") and not (tag == "meta" and name == "name"):
                self.ids.add(value)
            if (name == "href" and tag in ("a", "link")) or (
                name == "src" and tag in ("img", "script")
            ):
                self.links.append(value)


def dead_links(site: Path) -> list[str]:
    """Every link of the built HTML that leads nowhere: a file the site does not have
    (a dead page, a repository file not published), or an anchor the page lacks."""
    pages: dict[Path, _Page] = {}
    for html in sorted(site.rglob("*.html")):
        page = _Page()
        page.feed(html.read_text(encoding="utf-8"))
        pages[html.resolve()] = page
    dead = []
    for html, page in pages.items():
        for link in page.links:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc or link.startswith(("mailto:", "javascript:")):
                continue
            # The 404 page's links are from the site's root (no site_url): served there.
            base = site.resolve() if parts.path.startswith("/") else html.parent
            path = (
                unquote(parts.path).lstrip("/")
                if parts.path.startswith("/")
                else unquote(parts.path)
            )
            target = (base / path).resolve() if parts.path else html
            if target.is_dir():
                target = target / "index.html"
            if not target.is_file() or not target.is_relative_to(site.resolve()):
                dead.append(f"{html.relative_to(site.resolve())}: {link}")
                continue
            fragment = unquote(parts.fragment)
            if fragment and target.suffix == ".html" and fragment not in pages[target].ids:
                dead.append(f"{html.relative_to(site.resolve())}: {link} (no #{fragment})")
    return dead


def build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        cwd=config.parent,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_site_builds_strictly_with_the_python_reference(tmp_path: Path) -> None:
    done = build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert done.returncode == 0, done.stderr
    reference = (tmp_path / "site" / "reference" / "python" / "index.html").read_text()
    for name in ("AsyncTurnkeeperClient", "RemoteSaver", "TurnFollower", "BridgeConfig"):
        assert name in reference
    typescript = tmp_path / "site" / "reference" / "typescript" / "@turnkeeper" / "client"
    for page, names in {
        "index.html": ("TurnkeeperClient", "followTurn", "StatusFrame"),
        "agent/index.html": ("TurnRunner", "TurnkeeperSaver", "idempotencyKey"),
    }.items():
        text = (typescript / page).read_text()
        for name in names:
            assert name in text, f"{name} not in the TypeScript reference's {page}"
    index = (tmp_path / "site" / "index.html").read_text()
    for page in (
        "architecture/",
        "reference/python/",
        "reference/typescript/",
        "guides/langgraph-json/",
        "guides/durable-agent-typescript/",
        "langgraph-api/",
    ):
        assert page in index
    # The home page's quick start is `turnkeeper dev` (the README's first command).
    assert "turnkeeper dev examples/quickstart/langgraph.json" in index
    # No dead link on the built site: the HTML's, not the Markdown's (links to the
    # repository's files outside docs/ point at the copies the hook publishes).
    assert dead_links(tmp_path / "site") == []
    assert (tmp_path / "site" / "repo" / "bench" / "analysis.md").is_file()


def test_the_link_check_finds_a_dead_page_and_a_missing_anchor(tmp_path: Path) -> None:
    site = tmp_path / "site"
    (site / "a").mkdir(parents=True)
    (site / "a" / "index.html").write_text('<h1 id="top">A</h1>')
    (site / "index.html").write_text(
        '<a href="a/">ok</a> <a href="a/#top">ok</a> <a href="https://x.org/">out</a>'
        ' <a href="b/">dead</a> <a href="a/#nowhere">no anchor</a>'
        ' <a href="../README.md">outside</a> <a href="/a/">root</a>'
    )
    assert dead_links(site) == [
        "index.html: b/",
        "index.html: a/#nowhere (no #nowhere)",
        "index.html: ../README.md",
    ]


def test_a_broken_anchor_or_a_missing_name_fails_the_build(tmp_path: Path) -> None:
    """The build is strict: what it must refuse, it refuses."""
    copy = tmp_path / "repo"
    shutil.copytree(ROOT / "docs", copy / "docs")
    shutil.copytree(ROOT / "clients" / "python", copy / "clients" / "python")
    shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
    (copy / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "docs_repo_links.py", copy / "scripts")
    index = copy / "docs" / "index.md"
    index.write_text(index.read_text() + "\nSee [nothing](architecture.md#no-such-section).\n")
    done = build(copy / "mkdocs.yml", tmp_path / "site1")
    assert done.returncode != 0 and "no-such-section" in done.stderr

    index.write_text(index.read_text().replace("[nothing](architecture.md#no-such-section)", ""))
    reference = copy / "docs" / "reference" / "python.md"
    reference.write_text(reference.read_text() + "\n::: turnkeeper.client.NoSuchClient\n")
    done = build(copy / "mkdocs.yml", tmp_path / "site2")
    assert done.returncode != 0 and "NoSuchClient" in done.stderr


@pytest.mark.slow
def test_a_broken_link_in_the_typescript_docs_fails_check_docs(built_node_package: Path) -> None:
    """`npm run check-docs` (.ci/run runs it on the tree: the committed reference is
    what TypeDoc makes now) refuses a {@link} to nothing. In the session's built copy
    of clients/node, put back after (decision 326)."""
    follow = built_node_package / "src" / "follow.ts"
    source = follow.read_text()
    assert "export interface StatusFrame {" in source
    try:
        follow.write_text(
            source.replace(
                "export interface StatusFrame {",
                "/** See {@link NoSuchThing}. */\nexport interface StatusFrame {",
                1,
            )
        )
        done = subprocess.run(
            ["npm", "run", "check-docs"],
            cwd=built_node_package,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        follow.write_text(source)
    assert done.returncode != 0 and "NoSuchThing" in done.stdout + done.stderr
