"""tests/support/npm_cache.py: an install is made once per lockfile and linked into
each copy; a changed lockfile makes a new one; a build is kept per tree of sources and
copied, so a copy's edits never reach the cache. With stand-ins for npm (no network,
no node)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import npm_cache


@pytest.fixture(autouse=True)
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache"


def package(root: Path, lock: str) -> Path:
    root.mkdir(parents=True)
    (root / "package.json").write_text('{"name": "p"}')
    (root / "package-lock.json").write_text(lock)
    (root / "src").mkdir()
    (root / "src" / "index.ts").write_text("export const a = 1;\n")
    return root


def test_an_install_is_made_once_per_lockfile_and_linked(tmp_path: Path) -> None:
    installs: list[str] = []

    def install(scratch: Path) -> None:
        lock = (scratch / "package-lock.json").read_text()
        installs.append(lock)
        (scratch / "node_modules" / ".bin").mkdir(parents=True)
        (scratch / "node_modules" / "dep.js").write_text(f"// from {lock}\n")
        (scratch / "node_modules" / ".bin" / "dep").symlink_to("../dep.js")

    first, second = package(tmp_path / "a", "v1"), package(tmp_path / "b", "v1")
    npm_cache.link_node_modules(first, "node 1", install)
    npm_cache.link_node_modules(second, "node 1", install)
    assert installs == ["v1"]
    dep = second / "node_modules" / "dep.js"
    assert dep.read_text() == "// from v1\n" and dep.stat().st_nlink >= 3
    assert (second / "node_modules" / ".bin" / "dep").is_symlink()
    # What a copy adds stays the copy's.
    (first / "node_modules" / ".vite").mkdir()
    assert not (second / "node_modules" / ".vite").exists()

    npm_cache.link_node_modules(package(tmp_path / "c", "v2"), "node 1", install)
    npm_cache.link_node_modules(package(tmp_path / "d", "v2"), "node 2", install)
    assert installs == ["v1", "v2", "v2"]


def test_a_failed_install_leaves_nothing_behind(tmp_path: Path, cache_home: Path) -> None:
    def broken(scratch: Path) -> None:
        (scratch / "node_modules").mkdir()
        raise AssertionError("npm ci failed")

    with pytest.raises(AssertionError, match="npm ci failed"):
        npm_cache.link_node_modules(package(tmp_path / "a", "v1"), "node 1", broken)
    assert [p.name for p in (cache_home / "turnkeeper-tests" / "node_modules").iterdir()] == [
        f".{npm_cache.cache_key(tmp_path / 'a', 'node 1')}.lock"
    ]


def test_a_build_is_kept_per_tree_of_sources_and_copied(tmp_path: Path) -> None:
    builds: list[str] = []

    def build(built: Path) -> None:
        source = (built / "src" / "index.ts").read_text()
        builds.append(source)
        (built / "dist").mkdir(exist_ok=True)
        (built / "dist" / "index.js").write_text(source.replace("export const", "export var"))

    first, second = package(tmp_path / "a", "v1"), package(tmp_path / "b", "v1")
    npm_cache.cached_output(first, "node 1", build)
    npm_cache.cached_output(second, "node 1", build)
    assert len(builds) == 1
    built = second / "dist" / "index.js"
    assert built.read_text() == "export var a = 1;\n" and built.stat().st_nlink == 1
    # An edit of a copy's output is the copy's alone.
    built.write_text("edited")
    third = package(tmp_path / "c", "v1")
    npm_cache.cached_output(third, "node 1", build)
    assert (third / "dist" / "index.js").read_text() == "export var a = 1;\n"

    (third / "src" / "index.ts").write_text("export const a = 2;\n")
    npm_cache.cached_output(third, "node 1", build)
    assert len(builds) == 2
    assert (third / "dist" / "index.js").read_text() == "export var a = 2;\n"
