"""Makes the Python client's non-public modules private (issue 46), re-runnably.

    python scripts/private_modules.py            # from the repository root
    python scripts/private_modules.py --check    # list what would change, change nothing

Each entry of RENAMES maps an old dotted module path to its new one (a leading `_` on
the last part). The script moves the files that still have their old names (`git mv`)
and rewrites every tracked text file of the repository:

- dotted paths, `turnkeeper.agent.bridge.runtime` → `turnkeeper.agent.bridge._runtime`
  (imports, `mock.patch` targets, logger names, docs, pyproject's contracts);
- `from <package> import <module>` of a renamed module → `from <package> import
  _<module> as <module>`, so the code that uses it stays as it was;
- file paths, `clients/python/turnkeeper/agent/bridge/runtime.py` → `.../_runtime.py`,
  and the rows of docs/architecture.md's module map of the client.

It is idempotent: run it again on code merged from a branch that still uses the old
names. Afterwards run `ruff check --fix . && ruff format .` (imports re-sorted).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLIENT = "clients/python"

_PRIVATE: dict[str, tuple[str, ...]] = {
    "turnkeeper": (
        "caller_assertion",
        "connection",
        "graph_versions",
        "io_engine",
        "nats_auth",
        "nats_identity",
        "targets",
        "thread_state",
        "tracing",
    ),
    "turnkeeper.agent": ("fingerprint", "reposition"),
    "turnkeeper.agent.bridge": (
        "announce",
        "boundary",
        "bridge",
        "caller_auth",
        "config",
        "events",
        "graph_api",
        "health",
        "idempotency",
        "intent",
        "jsonrpc",
        "methods",
        "runtime",
        "subscriber",
    ),
    "turnkeeper.agent.effect": ("decorator", "errors", "key", "model", "snapshot"),
    "turnkeeper.agent.host": ("config", "loader", "run"),
    "turnkeeper.agent.saver": (
        "channels",
        "executions",
        "extended",
        "identity",
        "remote",
        "stream",
        "wire",
    ),
    "turnkeeper.operator": (
        "agents",
        "args",
        "audit",
        "backup",
        "cli",
        "lifecycle_cli",
        "plugins",
        "render",
        "replay",
    ),
}

# old dotted path -> new dotted path
RENAMES: dict[str, str] = {
    f"{package}.{name}": f"{package}._{name}"
    for package, names in _PRIVATE.items()
    for name in names
}

TEXT_SUFFIXES = (".py", ".pyi", ".md", ".toml", ".yaml", ".yml", ".json", ".cfg", ".ini", ".txt")
TEXT_NAMES = ("Dockerfile",)
SKIP = ("scripts/private_modules.py", "tests/packaging/test_private_modules.py")

MAP_START = "<!-- module map: clients/python/turnkeeper -->"
MAP_END = "<!-- end of module map -->"


def _dotted(old: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![\w.]){re.escape(old)}(?!\w)")


def _path(old: str) -> tuple[re.Pattern[str], str]:
    old_path = old.replace(".", "/")
    head, _, last = old_path.rpartition("/")
    return re.compile(rf"(?<![\w]){re.escape(old_path)}\.py(?!\w)"), f"{head}/_{last}.py"


_FROM_IMPORT = re.compile(
    r"^(?P<indent>[ \t]*)from (?P<package>turnkeeper(?:\.\w+)*) import "
    r"(?:\((?P<group>[^)]*)\)|(?P<line>[^\n(]*?))(?P<tail>[ \t]*(?:#[^\n]*)?)$",
    re.MULTILINE,
)


def _rewrite_names(package: str, names: str) -> str:
    """`a, b as c` with the renamed modules of `package` as `_a as a`."""
    renamed = set(_PRIVATE.get(package, ()))

    def one(match: re.Match[str]) -> str:
        name, alias = match.group("name"), match.group("alias")
        if name not in renamed:
            return match.group(0)
        return f"_{name} as {alias or name}"

    return re.sub(r"(?<![\w.])(?P<name>\w+)(?:[ \t]+as[ \t]+(?P<alias>\w+))?", one, names)


def _from_imports(text: str) -> str:
    def one(match: re.Match[str]) -> str:
        package = match.group("package")
        if package not in _PRIVATE:
            return match.group(0)
        prefix = f"{match.group('indent')}from {package} import "
        if match.group("group") is None:
            names = _rewrite_names(package, match.group("line"))
            return f"{prefix}{names}{match.group('tail')}"
        lines = []
        for line in match.group("group").split("\n"):
            code, hash_, comment = line.partition("#")  # comments keep their words
            lines.append(_rewrite_names(package, code) + hash_ + comment)
        return f"{prefix}({chr(10).join(lines)}){match.group('tail')}"

    return _FROM_IMPORT.sub(one, text)


def _module_map(text: str) -> str:
    start = text.find(MAP_START)
    end = text.find(MAP_END, start)
    if start < 0 or end < 0:
        return text
    body = text[start:end]
    for old in RENAMES:
        relative = old.removeprefix("turnkeeper.").replace(".", "/")
        head, _, last = relative.rpartition("/")
        new = f"{head}/_{last}" if head else f"_{last}"
        body = body.replace(f"`{relative}.py`", f"`{new}.py`")
    return text[:start] + body + text[end:]


def rewrite(text: str) -> str:
    text = _from_imports(text)
    for old, new in RENAMES.items():
        # Each pattern needs its literal: `in` first, the regex scan only where it is.
        if old in text:
            text = _dotted(old).sub(new, text)
        if old.replace(".", "/") + ".py" in text:
            pattern, replacement = _path(old)
            text = pattern.sub(replacement, text)
    return _module_map(text)


def tracked_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.split("\0")
    return [
        ROOT / name
        for name in listed
        if name
        and name not in SKIP
        and "node_modules/" not in name
        and (name.endswith(TEXT_SUFFIXES) or Path(name).name in TEXT_NAMES)
        and (ROOT / name).is_file()
    ]


def move_files(check: bool) -> list[str]:
    moved = []
    for old, new in RENAMES.items():
        source = ROOT / CLIENT / (old.replace(".", "/") + ".py")
        target = ROOT / CLIENT / (new.replace(".", "/") + ".py")
        if source.exists():
            moved.append(f"{source.relative_to(ROOT)} -> {target.relative_to(ROOT)}")
            if not check:
                if target.exists():
                    sys.exit(f"both {source} and {target} exist: merge them by hand")
                subprocess.run(["git", "mv", str(source), str(target)], cwd=ROOT, check=True)
    return moved


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing, list the changes")
    parser.add_argument("--print-map", action="store_true", help="print the rename map")
    options = parser.parse_args()
    if options.print_map:
        for old, new in RENAMES.items():
            print(f"{old} -> {new}")
        return 0
    changes = move_files(options.check)
    for path in tracked_files():
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        new_text = rewrite(text)
        if new_text != text:
            changes.append(f"rewritten {path.relative_to(ROOT)}")
            if not options.check:
                path.write_text(new_text)
    print("\n".join(changes) or "nothing to change")
    return 1 if options.check and changes else 0


if __name__ == "__main__":
    sys.exit(main())
