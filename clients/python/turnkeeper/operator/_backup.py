"""`turnkeeper backup DEST`: a consistent copy of a running service's SQLite files.

turnkeeper backup DEST [--data-dir DIR | --turns PATH --sessions PATH]

Reads the files directly, on the service's host (or in its container), with
SQLite's online backup API: the service is the only writer and keeps writing while
the copy is taken. Both files are read in one read transaction, turns.db first
and then sessions.db, so the checkpoints are never older than the journal that
points at them (a turn that ended between the two snapshots is RUNNING in the copy
and is re-driven from its newest checkpoint after a restore). The copies are
checked with `PRAGMA integrity_check` before the command succeeds; they are
written owner-only, and an existing file at DEST is never overwritten.

Restore: stop the service, put DEST/turns.db and DEST/sessions.db in its data
directory (without the old -wal and -shm files), start it (docs/operators.md).
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

# Where `turnkeeper serve` keeps its files by default (its own --data-dir, then
# these variables, then /data).
TURNS_ENV: Final = "VYSTAK_TURNS_PATH"
SESSIONS_ENV: Final = "VYSTAK_SESSIONS_PATH"
DEPLOYED_DATA_DIR: Final = Path("/data")


@dataclass(frozen=True)
class Copied:
    turns: Path
    sessions: Path
    # Rows per table of interest, as copied (what a person checks first).
    counts: Mapping[str, int]


def source_paths(
    data_dir: Path | None,
    turns: Path | None,
    sessions: Path | None,
    env: Mapping[str, str] | None = None,
) -> tuple[Path, Path]:
    """The service's two files: the flags, else its variables, else /data."""
    env = os.environ if env is None else env
    if data_dir is not None:
        return data_dir / "turns.db", data_dir / "sessions.db"
    return (
        turns or Path(env.get(TURNS_ENV) or DEPLOYED_DATA_DIR / "turns.db"),
        sessions or Path(env.get(SESSIONS_ENV) or DEPLOYED_DATA_DIR / "sessions.db"),
    )


def _private_target(path: Path) -> sqlite3.Connection:
    # O_EXCL: never write over an earlier backup (or a live database) by mistake.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.close(fd)
    return sqlite3.connect(path)


def _check(conn: sqlite3.Connection, path: Path) -> None:
    result = [row[0] for row in conn.execute("PRAGMA integrity_check")]
    if result != ["ok"]:
        raise RuntimeError(f"the copy {path} fails integrity_check: {'; '.join(result[:5])}")


def backup(turns: Path, sessions: Path, dest: Path) -> Copied:
    for path in (turns, sessions):
        if not path.is_file():
            raise FileNotFoundError(f"{path} does not exist: give --data-dir of the service")
    dest.mkdir(parents=True, exist_ok=True, mode=0o700)
    out_turns, out_sessions = dest / "turns.db", dest / "sessions.db"
    for path in (out_turns, out_sessions):
        if path.exists():
            raise FileExistsError(f"{path} exists: back up into an empty directory")
    source = sqlite3.connect(turns, isolation_level=None, timeout=30.0)
    try:
        # Never write to the service's files; wait out its short write locks.
        source.execute("PRAGMA query_only=ON")
        source.execute("PRAGMA busy_timeout=30000")
        source.execute("ATTACH DATABASE ? AS sessions", (str(sessions),))
        # One read transaction: each file's snapshot is taken at its first read,
        # turns.db first; both backups copy those snapshots.
        source.execute("BEGIN")
        source.execute("SELECT count(*) FROM main.sqlite_master").fetchone()
        source.execute("SELECT count(*) FROM sessions.sqlite_master").fetchone()
        copies: list[tuple[str, Path]] = [("main", out_turns), ("sessions", out_sessions)]
        for name, path in copies:
            target = _private_target(path)
            try:
                source.backup(target, name=name)
                _check(target, path)
            finally:
                target.close()
        counts = {
            table: source.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            for table in ("main.turns", "main.events", "main.audit", "sessions.checkpoints")
            if _has_table(source, table)
        }
        source.execute("COMMIT")
    finally:
        source.close()
    return Copied(out_turns, out_sessions, counts)


def _has_table(conn: sqlite3.Connection, qualified: str) -> bool:
    schema, table = qualified.split(".")
    row = conn.execute(
        f"SELECT 1 FROM {schema}.sqlite_master WHERE type = 'table' AND name = ?", (table,)
    ).fetchone()
    return row is not None


def add_command(commands: Any) -> None:
    parser = commands.add_parser(
        "backup",
        help="consistent copy of a running service's SQLite files (on its host)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("dest", type=Path, metavar="DEST", help="an empty or new directory")
    parser.add_argument(
        "--data-dir", type=Path, help="the service's --data-dir (default: its env, then /data)"
    )
    parser.add_argument("--turns", type=Path, help="turns.db, when not in --data-dir")
    parser.add_argument("--sessions", type=Path, help="sessions.db, when not in --data-dir")
    parser.add_argument("--json", action="store_true", help="print JSON for scripts")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    turns, sessions = source_paths(args.data_dir, args.turns, args.sessions)
    try:
        copied = backup(turns, sessions, args.dest)
    except (OSError, sqlite3.Error, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    summary = {
        "turns": str(copied.turns),
        "sessions": str(copied.sessions),
        "integrity_check": "ok",
        "rows": dict(copied.counts),
    }
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        rows = ", ".join(f"{n} {t.split('.')[-1]}" for t, n in copied.counts.items())
        print(f"backed up to {copied.turns} and {copied.sessions} (integrity_check ok; {rows})")
    return 0
