"""`python -m tests.differential --report`: the differential suite run once (one
backend, both clients) and what differs from `langgraph dev` printed as the rows
docs/langgraph-api.md's allow-list should hold, each with what differs, reasons kept
from the rows already there. `--project ts`: the TypeScript project (graphs_ts/)
against LangGraph.js's dev server, and its allow-list."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.differential import compare

HERE = Path(__file__).resolve().parent


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.differential", description=__doc__)
    parser.add_argument("--report", action="store_true", help="print what differs today")
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument(
        "--project",
        choices=("python", "ts"),
        default="python",
        help="the Python graphs against `langgraph dev`, or the TypeScript ones against "
        "LangGraph.js's dev server",
    )
    parser.add_argument(
        "--raw",
        type=Path,
        metavar="DIR",
        help="also write what each side showed each client, unnormalised, as JSON files",
    )
    args = parser.parse_args()
    if not args.report:
        parser.print_help()
        return 2
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "report.jsonl"
        report.touch()
        test, name, marker = {
            "python": (
                HERE / "test_differential.py",
                "test_turnkeeper_shows_the_clients_what_langgraph_dev_shows",
                compare.MARKER,
            ),
            "ts": (
                HERE / "test_differential_ts.py",
                "test_turnkeeper_shows_the_clients_what_langgraphjs_dev_shows",
                compare.MARKER_TS,
            ),
        }[args.project]
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-n",
                "0",
                "-q",
                "-p",
                "no:cacheprovider",
                # The variant named runs even where the default run leaves it out.
                "--full",
                f"{test}::{name}[{args.backend}]",
            ],
            cwd=HERE.parents[1],
            env={**os.environ, "TURNKEEPER_DIFFERENTIAL_REPORT": str(report)},
            capture_output=True,
            text=True,
            check=False,
        )
        lines = report.read_text().splitlines()
        if not lines:
            print(done.stdout[-4000:], done.stderr[-4000:], sep="\n", file=sys.stderr)
            return 1
    found = json.loads(lines[-1])
    if args.raw is not None:
        args.raw.mkdir(parents=True, exist_ok=True)
        for side, by_client in found["raw"].items():
            for client, seen in by_client.items():
                (args.raw / f"{side}-{client}.json").write_text(json.dumps(seen, indent=1))
    observed = {
        client: {(s, d): detail for s, d, detail in diffs}
        for client, diffs in found["observed"].items()
    }
    reference = "LangGraph.js's dev server" if args.project == "ts" else "`langgraph dev`"
    print(
        f"# what differs from {reference} on {found['backend']}, clients: "
        + ", ".join(sorted(observed))
    )
    for line in compare.rows(observed, compare.allow_list(marker=marker)):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
