"""Regenerate the Python stubs from protos/ — the one command for it.

    python protos/generate.py          # write clients/python/turnkeeper/v1/
    python protos/generate.py --check  # fail if the committed stubs are stale

The stubs land in the `turnkeeper.v1` package, mirroring the proto package
`turnkeeper.v1`, so the imports protoc writes (`from turnkeeper.v1 import ...`)
resolve as they are: no import rewriting, no sys.path tricks.
"""

from __future__ import annotations

import argparse
import filecmp
import re
import shutil
import sys
import tempfile
import tomllib
from importlib import resources
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTOS = ROOT / "protos"
OUT = ROOT / "clients" / "python"
PACKAGE = Path("turnkeeper") / "v1"
INIT = '"""Generated from protos/turnkeeper/v1 by protos/generate.py. Do not edit."""\n'
# The grpc stubs' stamp: the grpcio they refuse to import below.
STAMP = re.compile(r"^GRPC_GENERATED_VERSION = '[^']*'$", re.M)


def grpcio_floor() -> str:
    """The lowest grpcio the client package accepts (clients/python/pyproject.toml).
    The stubs are stamped with it, not with the grpcio-tools that generated them: a
    patch release of the tools (1.85.1 -> 1.85.4) changes nothing else in them, and
    must not make the stubs stale or refuse a grpcio the package allows."""
    project = tomllib.loads((OUT / "pyproject.toml").read_text())["project"]
    for requirement in project["dependencies"]:
        if found := re.fullmatch(r"grpcio>=([0-9.]+)(,.*)?", requirement.replace(" ", "")):
            return found.group(1)
    raise SystemExit("clients/python/pyproject.toml names no grpcio>= floor")


def generate(out: Path) -> None:
    well_known = str(resources.files("grpc_tools") / "_proto")
    sources = sorted(str(p.relative_to(PROTOS)) for p in (PROTOS / PACKAGE).glob("*.proto"))
    args = [
        "protoc",
        f"-I{PROTOS}",
        f"-I{well_known}",
        f"--python_out={out}",
        f"--grpc_python_out={out}",
        f"--mypy_out={out}",
        f"--mypy_grpc_out={out}",
        *sources,
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    floor = grpcio_floor()
    for stub in (out / PACKAGE).glob("*_pb2_grpc.py"):
        text = stub.read_text()
        stub.write_text(STAMP.sub(f"GRPC_GENERATED_VERSION = '{floor}'", text))
    (out / PACKAGE / "__init__.py").write_text(INIT)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    args = parser.parse_args()
    if not args.check:
        target = OUT / PACKAGE
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        generate(OUT)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / PACKAGE).mkdir(parents=True)
        generate(Path(tmp))
        fresh, committed = Path(tmp) / PACKAGE, OUT / PACKAGE
        names = {p.name for p in fresh.iterdir()} | {
            p.name for p in committed.iterdir() if p.is_file()
        }
        stale = [
            n
            for n in sorted(names)
            if not (fresh / n).exists()
            or not (committed / n).exists()
            or not filecmp.cmp(fresh / n, committed / n, shallow=False)
        ]
    if stale:
        print("stale generated stubs (run python protos/generate.py):", *stale, file=sys.stderr)
        return 1
    print("generated stubs are up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
