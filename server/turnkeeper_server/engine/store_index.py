"""The store's semantic index: `store.index` of a langgraph.json, as LangGraph's
server reads it (`embed`: "path/to/file.py:fn", "package.module:fn" or a LangChain
provider string such as "openai:text-embedding-3-small"; `dims`; `fields`, default
["$"], the whole value), and the texts of an item it embeds, as InMemoryStore
picks them (a put's `index` paths replace the configured fields; `index=False`
embeds nothing; a path reaching several texts gives one vector each, "path.i").
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from turnkeeper._object_spec import (
    SpecImportError,
    load_object,
    names_a_file,
    parse_object_spec,
)

# LangChain's embeddings and LangGraph's path helpers are imported where an index is
# configured or used: langchain_core is a fifth of the service's start-up (about
# 0.2 s of CPU a process), and most deployments configure no index.
if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings


@dataclass(frozen=True)
class IndexConfig:
    """A configured index: the embedding function, its dimensions, and the fields
    (with their tokenized paths) a put embeds unless it names its own."""

    embed: str
    dims: int
    fields: tuple[str, ...]
    embeddings: Embeddings

    def texts(
        self, value: Mapping[str, Any], index: Sequence[str] | Literal[False] | None
    ) -> list[tuple[str, str]]:
        """(path, text) pairs to embed for an item put with `index`."""
        from langgraph.store.base.embed import get_text_at_path, tokenize_path

        if index is False:
            return []
        paths: list[tuple[str, str | list[str]]]
        if index is None:
            paths = [(p, p if p == "$" else tokenize_path(p)) for p in self.fields]
        else:
            paths = [(p, tokenize_path(p)) for p in index]
        out: list[tuple[str, str]] = []
        for path, tokens in paths:
            found = get_text_at_path(value, tokens)
            if len(found) > 1:
                out.extend((f"{path}.{i}", text) for i, text in enumerate(found))
            elif found:
                out.append((path, found[0]))
        return out

    def checked(self, vectors: Sequence[Sequence[float]]) -> list[list[float]]:
        """The embedding function's vectors, refused unless each has `dims` numbers."""
        for vector in vectors:
            if len(vector) != self.dims:
                raise RuntimeError(
                    f"the store's embedding function {self.embed!r} returned a vector of "
                    f"{len(vector)} numbers where store.index.dims says {self.dims}: "
                    "correct dims in the langgraph.json"
                )
        return [[float(x) for x in v] for v in vectors]


def index_of_config(config: Path | None) -> IndexConfig | None:
    """The `store.index` of a langgraph.json (None without one); its embedding
    function loaded. A bad entry is a ValueError that says what to write."""
    if config is None:
        return None
    data = json.loads(config.read_text(encoding="utf-8"))
    store = data.get("store") if isinstance(data, dict) else None
    index = store.get("index") if isinstance(store, dict) else None
    if index is None:
        return None
    where = f"{config}: store.index"
    if not isinstance(index, dict):
        raise ValueError(f"{where} must be an object with embed, dims and fields")
    embed, dims, fields = index.get("embed"), index.get("dims"), index.get("fields")
    if not isinstance(embed, str) or not embed:
        raise ValueError(
            f"{where}.embed must name an embedding function: 'path/to/file.py:fn', "
            "'package.module:fn' or a provider string such as 'openai:text-embedding-3-small'"
        )
    if isinstance(dims, bool) or not isinstance(dims, int) or dims < 1:
        raise ValueError(f"{where}.dims must be the embedding's number of dimensions")
    if fields is None:
        fields = ["$"]
    if not isinstance(fields, list) or not all(isinstance(f, str) and f for f in fields):
        raise ValueError(f"{where}.fields must be a list of paths into the value, such as '$'")
    return IndexConfig(embed, dims, tuple(fields), load_embeddings(embed, base=config.parent))


def load_embeddings(spec: str, *, base: Path | None = None) -> Embeddings:
    """The embeddings `spec` names, as LangGraph's server resolves it: a function
    (or an Embeddings object) in a file ("./embed.py:fn", relative to `base`, the
    langgraph.json's folder) or a module ("package.module:fn"), else a provider
    string handed to LangChain's `init_embeddings`."""
    what = "the store's embeddings"
    if names_a_file(spec.rpartition(":")[0]):
        named = parse_object_spec(spec, what=what)
        return _embeddings(load_object(named, what=what, base=base), spec)
    try:
        named = parse_object_spec(spec, what=what)
    except ValueError:
        pass  # not a module's name: a provider string ("openai:text-embedding-3-small")
    else:
        if "." in named.module:
            try:
                return _embeddings(load_object(named, what=what), spec)
            except SpecImportError:
                pass  # no such module: a provider string after all
    try:
        langchain = importlib.import_module("langchain.embeddings")
    except ImportError:
        raise ValueError(
            f"the store's embeddings {spec!r} is a provider string, which needs the "
            "langchain package (pip install 'langchain>=0.3.9'); or name a function "
            "in a file, 'path/to/file.py:fn'"
        ) from None
    return _embeddings(langchain.init_embeddings(spec), spec)


def _embeddings(found: Any, spec: str) -> Embeddings:
    from langchain_core.embeddings import Embeddings
    from langgraph.store.base.embed import ensure_embeddings

    if isinstance(found, Embeddings):
        return found
    if found is None or not callable(found):
        raise ValueError(f"{spec!r} names no embedding function (a callable or Embeddings)")
    return ensure_embeddings(found)
