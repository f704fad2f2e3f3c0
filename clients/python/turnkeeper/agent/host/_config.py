"""``langgraph.json`` as LangGraph's CLI reads it, the parts a host needs:

- ``graphs``: ``{"name": "./path/to/file.py:attribute"}`` (or ``"package.module:attr"``);
  the name is the agent's and the assistant's id; the object form ``{"path": ...,
  "version_label": "v2"}`` also names the graph's version (docs/versions.md); a
  ``.ts``/``.js`` file is a LangGraph.js graph, served by the TypeScript runner
  (``turnkeeper.agent.host._node``);
- ``dependencies``: local directories put on ``sys.path`` (``"."`` included), so the
  graphs' own imports resolve; package names (installed with pip) are not installed
  here, they must be installed already;
- ``env``: a mapping of variables, or the path of a ``.env`` file, set before the
  graphs load (variables already set win, as with LangGraph's CLI).

Other keys (``python_version``, ``dockerfile_lines``, ``http`` ...) are for building
images and are ignored. A path is relative to the file's directory.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from turnkeeper._object_spec import names_a_file, parse_object_spec

_NAME: Final = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


#: The files of LangGraph.js graphs (TypeScript or JavaScript).
NODE_SUFFIXES: Final = (".ts", ".mts", ".cts", ".js", ".mjs", ".cjs")


@dataclass(frozen=True)
class GraphSpec:
    name: str
    # A file (absolute) or a dotted module, and the attribute in it.
    module: str
    attribute: str
    # The graph's version label (docs/versions.md): ``"version_label"`` of the graph's
    # object form, ``{"path": ..., "version_label": "v2"}``.
    version_label: str = ""

    @property
    def is_file(self) -> bool:
        """A Python file (else a dotted module or a LangGraph.js file)."""
        return names_a_file(self.module) and not self.is_node

    @property
    def is_node(self) -> bool:
        """A LangGraph.js graph: served by the TypeScript runner (host._node)."""
        return self.module.endswith(NODE_SUFFIXES)


@dataclass(frozen=True)
class HostConfig:
    path: Path
    graphs: tuple[GraphSpec, ...]
    dependencies: tuple[Path, ...] = ()
    env: dict[str, str] = field(default_factory=dict)


def _fail(path: Path, message: str) -> ValueError:
    return ValueError(f"{path}: {message}")


def read_config(path: Path | str) -> HostConfig:
    """The file's graphs, dependencies and environment; ValueError saying what is
    wrong with it."""
    path = Path(path).resolve()
    try:
        raw: Any = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise _fail(path, f"cannot read it: {exc.strerror}") from None
    except ValueError as exc:
        raise _fail(path, f"not JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise _fail(path, "must be a JSON object")
    base = path.parent
    graphs = raw.get("graphs")
    if not isinstance(graphs, dict) or not graphs:
        raise _fail(path, 'needs "graphs": {"name": "./file.py:graph", ...}')
    specs = []
    for name, target in graphs.items():
        if not _NAME.match(name):
            raise _fail(path, f"graph name {name!r}: letters, digits, '_' and '-' only")
        label = ""
        if isinstance(target, dict):
            label = target.get("version_label", "")
            if not isinstance(label, str):
                raise _fail(path, f'graph {name!r}: "version_label" must be a string')
            target = target.get("path")
        if not isinstance(target, str):
            raise _fail(path, f"graph {name!r}: expected 'path/to/file.py:attribute'")
        try:
            named = parse_object_spec(
                target, what=f"graph {name!r}", file_suffixes=(".py", *NODE_SUFFIXES)
            )
        except ValueError as exc:
            raise _fail(path, str(exc)) from None
        module = str(named.file(base)) if named.is_file else named.module
        specs.append(GraphSpec(name, module, named.attribute, label))
    dependencies = raw.get("dependencies", [])
    if not isinstance(dependencies, list) or not all(isinstance(d, str) for d in dependencies):
        raise _fail(path, '"dependencies" must be a list of strings')
    local = tuple(
        (base / d).resolve() for d in dependencies if d.startswith((".", "/")) or d == "."
    )
    return HostConfig(path, tuple(specs), local, _env(path, raw.get("env")))


def _env(path: Path, env: Any) -> dict[str, str]:
    if env is None:
        return {}
    if isinstance(env, dict):
        return {str(k): str(v) for k, v in env.items()}
    if isinstance(env, str):
        return read_dotenv(path.parent / env)
    raise _fail(path, '"env" must be an object or the path of a .env file')


def read_dotenv(path: Path) -> dict[str, str]:
    """``KEY=value`` lines; ``#`` comments, ``export`` and quotes as .env files have them."""
    out: dict[str, str] = {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise _fail(path, f"cannot read the env file: {exc.strerror}") from None
    for line in lines:
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.removeprefix("export ").partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        out[key.strip()] = value
    return out
