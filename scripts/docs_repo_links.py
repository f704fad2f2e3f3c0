"""MkDocs hook (mkdocs.yml `hooks:`): links from a page to a file of the repository
outside docs/ (the TypeScript package's README, compose.yaml, bench/analysis.md) are
right on a checkout and dead on the built site. The hook copies each such file into
the site under `repo/`, as written, and points the link there, so every link of the
built site resolves (tests/packaging/test_docs_site.py checks the HTML)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from mkdocs.utils import get_relative_url

_HREF = re.compile(r'(href|src)="([^"#?:]+)((?:[#?][^"]*)?)"')
_published: dict[str, Path] = {}


def on_page_content(html: str, page: Any, config: Any, files: Any) -> str:
    docs = Path(config["docs_dir"]).resolve()
    root = Path(config["config_file_path"]).resolve().parent
    source = (docs / page.file.src_uri).parent

    def rewrite(match: re.Match[str]) -> str:
        attribute, link, tail = match.groups()
        if urlsplit(link).scheme or link.startswith("/"):
            return match.group(0)
        target = (source / unquote(link)).resolve()
        if target.is_relative_to(docs) or not target.is_relative_to(root):
            return match.group(0)
        if not target.is_file():
            return match.group(0)  # left for the link check to name
        published = "repo/" + target.relative_to(root).as_posix()
        _published[published] = target
        return f'{attribute}="{get_relative_url(published, page.url)}{tail}"'

    return _HREF.sub(rewrite, html)


def on_post_build(config: Any) -> None:
    site = Path(config["site_dir"])
    for published, target in _published.items():
        destination = site / published
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(target, destination)
