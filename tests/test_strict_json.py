"""Strict JSON everywhere (issue 53): what the package writes never holds ``Infinity`` or
``NaN`` (a profile with a baseline time per token of 1e308 made ``/api/v1/targets`` emit a bare
``Infinity``). A figure that is not finite is absent: ``null``. Each writer is parsed here, and
in the tests of each command (``--json``), with a parser that refuses them."""

from __future__ import annotations

import io
import math
from dataclasses import replace
from pathlib import Path

import pytest
import structlog

from specmon import jsontext
from specmon.cli.main import main
from specmon.logs import RateLimit, configure_logging, get_logger
from specmon.measure.labbook import append_labbook
from specmon.surfaces.status import StatusCache, views_json
from tests.support.strict_json import strict_loads
from tests.support.views import fleet_views


def test_the_parser_refuses_what_python_writes() -> None:
    import json

    with pytest.raises(ValueError, match="Infinity"):
        strict_loads(json.dumps({"x": math.inf}))
    assert strict_loads(jsontext.dumps({"x": math.inf, "y": [math.nan, 1.5], "z": (2,)})) == {
        "x": None, "y": [None, 1.5], "z": [2],
    }  # fmt: skip


def _view_with_infinite_figures() -> object:
    views = fleet_views()
    view = next(v for v in views if v.name == "vllm-loaded")
    model = view.models[0]
    window = model.windows[0]
    assert window.load is not None and window.answer is not None
    load = replace(window.load, step_seconds=math.nan)
    answer = replace(window.answer, speedup=math.inf)
    windows = (replace(window, load=load, answer=answer), *model.windows[1:])
    return replace(view, models=(replace(model, windows=windows), *view.models[1:]))


def test_the_api_document_is_strict_json() -> None:
    view = _view_with_infinite_figures()
    text = StatusCache().json(view)  # type: ignore[arg-type]
    document = strict_loads(text)
    window = document["models"][0]["windows"][0]
    assert window["verdict"]["speedup"] is None and window["load"]["step_seconds"] is None
    assert strict_loads(jsontext.dumps(views_json([view])))  # type: ignore[list-item]


def test_json_log_lines_are_strict() -> None:
    out = io.StringIO()
    configure_logging(level="info", fmt="json", stream=out, limit=RateLimit())
    try:
        get_logger().info("figure", speedup=math.inf, cost=math.nan, nested={"c": -math.inf})
    finally:
        structlog.reset_defaults()
    (line,) = [strict_loads(x) for x in out.getvalue().splitlines()]
    assert line["speedup"] is None and line["nested"] == {"c": None}


def test_the_lab_book_is_strict(tmp_path: Path) -> None:
    book = tmp_path / "lab.jsonl"
    append_labbook(book, [{"speedup": math.inf, "tpot": [math.nan, 0.01]}])
    (record,) = [strict_loads(x) for x in book.read_text().splitlines()]
    assert record == {"speedup": None, "tpot": [None, 0.01]}


def test_breakeven_json_is_strict(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["breakeven", "-k", "4", "-c", "0.2", "--json"]) == 0
    assert strict_loads(capsys.readouterr().out)["rows"]
