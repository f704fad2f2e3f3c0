"""The one parser of "path/to/file.py:name" / "package.module:name" specs
(turnkeeper._object_spec), by table, and its three readers (the host's graphs, the
service's auth, the store's embeddings) refusing a bad spec in its words."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from turnkeeper._object_spec import (
    SpecImportError,
    load_object,
    parse_object_spec,
)
from turnkeeper.agent.host._config import read_config
from turnkeeper_server.engine.store_index import load_embeddings
from turnkeeper_server.web.langgraph.custom_auth import load as load_auth

SHAPE = "must be 'path/to/file.py:name' or 'package.module:name'"


@pytest.mark.parametrize(
    ("text", "module", "attribute", "is_file"),
    [
        ("./graphs/agent.py:graph", "./graphs/agent.py", "graph", True),
        ("agent.py:make_graph", "agent.py", "make_graph", True),
        # A "/" makes a path even without the suffix, as LangGraph's server decides.
        ("./graphs/agent:graph", "./graphs/agent", "graph", True),
        ("/abs/c:/odd.py:g", "/abs/c:/odd.py", "g", True),
        ("package.module:graph", "package.module", "graph", False),
        ("module:graph", "module", "graph", False),
    ],
)
def test_a_spec_is_a_file_or_a_module_and_a_name(
    text: str, module: str, attribute: str, is_file: bool
) -> None:
    spec = parse_object_spec(text, what="graph 'a'")
    assert (spec.text, spec.module, spec.attribute, spec.is_file) == (
        text,
        module,
        attribute,
        is_file,
    )


def test_a_reader_names_its_own_file_suffixes() -> None:
    assert not parse_object_spec("agent.ts:graph", what="graph").is_file
    assert parse_object_spec("agent.ts:graph", what="graph", file_suffixes=(".ts",)).is_file


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("agent.py", SHAPE),
        (":graph", SHAPE),
        ("agent.py:", SHAPE),
        ("agent.py:not-a-name", SHAPE),
        ("package module:graph", "neither a file"),
        ("package..module:graph", "neither a file"),
    ],
)
def test_a_bad_spec_is_refused_saying_the_shape(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=rf"^graph 'a' '{text}'.*{message}"):
        parse_object_spec(text, what="graph 'a'")


def test_a_file_is_loaded_from_its_base_and_its_name_looked_up(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "thing.py").write_text("VALUE = 42\n")
    found = load_object(
        parse_object_spec("./sub/thing.py:VALUE", what="it"), what="it", base=tmp_path
    )
    assert found == 42

    missing_attr = parse_object_spec("./sub/thing.py:OTHER", what="it")
    with pytest.raises(ValueError, match=r"thing\.py has no attribute 'OTHER'"):
        load_object(missing_attr, what="it", base=tmp_path)

    missing_file = parse_object_spec("./sub/nothing.py:VALUE", what="it")
    with pytest.raises(ValueError, match=rf"the file {tmp_path}/sub/nothing\.py does not exist"):
        load_object(missing_file, what="it", base=tmp_path)

    outside = parse_object_spec("../thing.py:VALUE", what="it")
    with pytest.raises(ValueError, match="points outside"):
        load_object(outside, what="it", base=tmp_path / "sub", within=tmp_path / "sub")


def test_a_module_is_imported_and_its_absence_told_apart() -> None:
    assert load_object(parse_object_spec("json:loads", what="it"), what="it") is json.loads
    with pytest.raises(ValueError, match=r"json has no attribute 'nothing'"):
        load_object(parse_object_spec("json:nothing", what="it"), what="it")
    absent = parse_object_spec("turnkeeper_no_such.module:x", what="it")
    with pytest.raises(SpecImportError, match="cannot import the module 'turnkeeper_no_such"):
        load_object(absent, what="it")
    assert "turnkeeper_no_such" not in sys.modules
    # A package that exists without the module is the spec's error too.
    with pytest.raises(SpecImportError, match=r"cannot import the module 'json\.nothing'"):
        load_object(parse_object_spec("json.nothing:x", what="it"), what="it")


def test_an_import_failing_inside_the_module_is_the_modules_own_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "needs_more.py").write_text("import turnkeeper_not_installed\ngraph = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = parse_object_spec("needs_more:graph", what="it")
    with pytest.raises(ModuleNotFoundError) as raised:
        load_object(spec, what="it")
    assert not isinstance(raised.value, SpecImportError)
    assert raised.value.name == "turnkeeper_not_installed"


def _host(tmp_path: Path, spec: str) -> Any:
    config = tmp_path / "langgraph.json"
    config.write_text(json.dumps({"graphs": {"a": spec}}))
    return read_config(config)


@pytest.mark.parametrize(
    ("reader", "prefix"),
    [
        (_host, "graph 'a'"),
        (lambda _tmp, spec: load_auth(spec), "the auth path"),
        (lambda tmp, spec: load_embeddings(spec, base=tmp), "the store's embeddings"),
    ],
    ids=["host", "auth", "embeddings"],
)
def test_each_reader_refuses_a_bad_spec_with_the_parsers_words(
    tmp_path: Path, reader: Callable[[Path, str], Any], prefix: str
) -> None:
    with pytest.raises(ValueError, match=rf"{prefix} '\./agent\.py:not-a-name' {SHAPE}"):
        reader(tmp_path, "./agent.py:not-a-name")
