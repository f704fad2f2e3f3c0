"""An object named the way langgraph.json names one: ``"path/to/file.py:name"`` (a
file, relative to the langgraph.json's folder) or ``"package.module:name"`` (an
importable module), parsed and loaded once for every reader (decision 461): the
host's graphs, the service's `auth` and the store's embeddings.

A spec is a file when its module part holds a "/" or ends with a file suffix (".py",
or LangGraph.js's for the host), as LangGraph's server decides; else a dotted module.
Every error is a ValueError naming what was being loaded (`what`), the spec as
written and what to change. Standard library only: the service imports it too.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any


class SpecImportError(ValueError):
    """A dotted module that does not exist (the ModuleNotFoundError is its cause): a
    reader for which a spec may be something else (the store's provider strings)
    tells this from the other errors."""


@dataclass(frozen=True)
class ObjectSpec:
    """A parsed spec: `module` is the file path as written or the dotted module."""

    text: str
    module: str
    attribute: str
    is_file: bool

    def file(self, base: Path | None = None) -> Path:
        """The file a file spec names: relative paths taken from `base`."""
        path = Path(self.module)
        if base is not None and not path.is_absolute():
            path = base / path
        return path.resolve()


def names_a_file(module: str, file_suffixes: Sequence[str] = (".py",)) -> bool:
    """Whether a spec's module part is a file's path rather than a dotted module."""
    return "/" in module or "\\" in module or module.endswith(tuple(file_suffixes))


def parse_object_spec(
    text: str, *, what: str, file_suffixes: Sequence[str] = (".py",)
) -> ObjectSpec:
    """`text` split into its module (or file) and attribute; ValueError when it is
    not '<file or module>:<name>' with a Python name after the last colon."""
    module, colon, attribute = text.rpartition(":")
    if not colon or not module.strip() or not attribute.isidentifier():
        raise ValueError(
            f"{what} {text!r} must be 'path/to/file.py:name' or 'package.module:name' "
            "(a file or module, a colon, then the name of the object in it)"
        )
    is_file = names_a_file(module, file_suffixes)
    if not is_file and not all(part.isidentifier() for part in module.split(".")):
        raise ValueError(
            f"{what} {text!r}: {module!r} is neither a file (path/to/file.py) nor a "
            "dotted module name (package.module)"
        )
    return ObjectSpec(text, module, attribute, is_file)


def load_module(
    spec: ObjectSpec,
    *,
    what: str,
    base: Path | None = None,
    within: Path | None = None,
    name: str | None = None,
) -> ModuleType:
    """The module `spec` names: a file executed as a module (registered in
    sys.modules under `name`, else one made from its path), or a module imported.
    `within`: a file must lie inside that folder. SpecImportError when a dotted
    module (or its package) does not exist."""
    if not spec.is_file:
        try:
            return importlib.import_module(spec.module)
        except ModuleNotFoundError as exc:
            # The module itself (or its package) is missing; an import failing inside
            # the module's own code is that code's error, and propagates as it is.
            missing = exc.name or ""
            if not missing or not (spec.module + ".").startswith(missing + "."):
                raise
            raise SpecImportError(
                f"{what} {spec.text!r}: cannot import the module {spec.module!r} ({exc}); "
                "is it installed, or did you mean a file ('./path/to/file.py:name')?"
            ) from exc
    path = spec.file(base)
    if within is not None and not path.is_relative_to(within.resolve()):
        raise ValueError(f"{what} {spec.text!r} points outside {within.resolve()}")
    if not path.is_file():
        raise ValueError(f"{what} {spec.text!r}: the file {path} does not exist")
    if name is None:
        digest = hashlib.sha256(str(path).encode()).hexdigest()[:12]
        name = f"turnkeeper_loaded_{path.stem}_{digest}"
    found = importlib.util.spec_from_file_location(name, path)
    if found is None or found.loader is None:
        raise ValueError(f"{what} {spec.text!r}: the file {path} cannot be loaded as Python")
    module = importlib.util.module_from_spec(found)
    sys.modules[name] = module
    found.loader.exec_module(module)
    return module


def load_object(
    spec: ObjectSpec,
    *,
    what: str,
    base: Path | None = None,
    within: Path | None = None,
    name: str | None = None,
) -> Any:
    """The object `spec` names (see load_module); ValueError when the module has no
    such attribute."""
    module = load_module(spec, what=what, base=base, within=within, name=name)
    try:
        return getattr(module, spec.attribute)
    except AttributeError:
        where = spec.file(base) if spec.is_file else spec.module
        raise ValueError(
            f"{what} {spec.text!r}: {where} has no attribute {spec.attribute!r}"
        ) from None
