"""`python -m bench`: run every benchmark and write docs/benchmarks.md.

python -m bench                  # full size, the published figures
python -m bench --smoke          # a few seconds: what CI runs
python -m bench --only saver     # some of them
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from turnkeeper._io_engine import prefer_iomgr

# Before grpc loads: the graph processes here run on the engine the service does
# (turnkeeper/_io_engine.py; docs/operators.md gives an agent's process the same).
prefer_iomgr()

from bench import (  # noqa: E402 - after prefer_iomgr
    agents,
    effects,
    engines,
    ingest,
    langgraph_api,
    memory,
    overload,
    postgres_section,
    recovery,
    redrive,
    report,
    saver,
    status,
    store,
    tracing,
)
from bench.common import FULL, SMOKE, Section, Size  # noqa: E402

BENCHMARKS: dict[str, Callable[[Size], Section]] = {
    "status": status.run,
    "ingest": ingest.run,
    "redrive": redrive.run,
    "memory": memory.run,
    "saver": saver.run,
    "engines": engines.run,
    "recovery": recovery.run,
    "agents": agents.run,
    "tracing": tracing.run,
    "langgraph": langgraph_api.run,
    "effects": effects.run,
    "postgres": postgres_section.run,
    "store": store.run,
    "overload": overload.run,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: checks the suite runs")
    parser.add_argument(
        "--only", nargs="+", choices=list(BENCHMARKS), help="run only these benchmarks"
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="the Markdown report (default: docs/benchmarks.md for a full run of every "
        "benchmark, a file in the temp directory for --smoke or --only)",
    )
    parser.add_argument("--json", type=Path, help="also write the raw figures as JSON here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    size = SMOKE if args.smoke else FULL
    if args.out is None:
        # Only a full run of everything replaces the published figures.
        partial = args.smoke or args.only
        args.out = (
            Path(tempfile.gettempdir()) / "turnkeeper-benchmarks.md"
            if partial
            else report.REPO / "docs" / "benchmarks.md"
        )
    names = args.only or list(BENCHMARKS)
    machine = report.machine()
    started = time.perf_counter()
    sections: list[Section] = []
    failed = False
    for name in names:
        print(f"bench: {name} ...", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        try:
            section = BENCHMARKS[name](size)
        except Exception as exc:
            failed = True
            traceback.print_exc()
            section = Section(key=name, title=name, method="", skipped=f"failed: {exc!r}")
        sections.append(section)
        print(f"bench: {name} done in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        for row in section.rows:
            print(f"  {row.what}: {row.value} | {row.baseline} | {row.ratio} | {row.verdict}")
    command = "python -m bench" + (" --smoke" if args.smoke else "")
    if args.only:
        command += " --only " + " ".join(args.only)
    text = report.render(
        sections,
        size,
        machine,
        report.packages(engines.extra_versions()),
        command,
        time.perf_counter() - started,
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    if args.json:
        args.json.write_text(report.to_json(sections, size), encoding="utf-8")
    print(f"bench: wrote {args.out}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
