"""Unit tests of tests/dashboards/queries.py, the query extractor the end-to-end test uses."""

from __future__ import annotations

from typing import Any

import pytest

from tests.dashboards.queries import (
    duration_seconds,
    iter_panels,
    panel_queries,
    substitute,
    variable_queries,
)


def test_plain_and_braced_variables() -> None:
    assert substitute('x{a="$a", b="${b}"}', {"a": "1", "b": "2"}) == 'x{a="1", b="2"}'


def test_longest_name_wins() -> None:
    # $target_model is its own variable, not $target followed by "_model".
    assert substitute("$target_model $target", {"target": "t", "target_model": "tm"}) == "tm t"


def test_builtins() -> None:
    expr = "rate(x[$__rate_interval]) + rate(x[${__interval}]) + $__interval_ms + $__range_s"
    out = substitute(expr, {}, interval="30s", rate_interval="2m", range_="1h")
    assert out == "rate(x[2m]) + rate(x[30s]) + 30000 + 3600"


def test_defaults_match_grafana_for_a_15s_scrape_interval() -> None:
    out = substitute("[$__rate_interval] [$__interval] [$__range]", {})
    assert out == "[1m] [20s] [6h]"


def test_multi_values_become_an_escaped_regex_group() -> None:
    assert substitute('t=~"$t"', {"t": ["a.b", "c"]}) == 't=~"(a\\.b|c)"'
    assert substitute('t=~"$t"', {"t": ["a.b"]}) == 't=~"a\\.b"'
    # A plain string is inserted as it is (a single-value variable, or a custom "All" value).
    assert substitute('t=~"$t"', {"t": ".+"}) == 't=~".+"'


def test_formats() -> None:
    assert substitute("${t:pipe}", {"t": ["a", "b"]}) == "a|b"
    assert substitute("${t:csv}", {"t": ["a", "b"]}) == "a,b"
    assert substitute("[[t]]", {"t": "x"}) == "x"


def test_unknown_variable_is_an_error() -> None:
    with pytest.raises(KeyError, match="nope"):
        substitute('x{a="$nope"}', {})


def test_duration_seconds() -> None:
    assert duration_seconds("1m30s") == 90
    assert duration_seconds("1h") == 3600
    assert duration_seconds("250ms") == 0.25
    for bad in ("", "1x", "m", "1m 30s"):
        with pytest.raises(ValueError, match="duration"):
            duration_seconds(bad)


BOARD: dict[str, Any] = {
    "uid": "u",
    "annotations": {"list": [{"name": "alerts", "expr": 'ALERTS{t="$t"}', "enable": True}]},
    "templating": {
        "list": [
            {"name": "datasource", "type": "datasource", "query": "prometheus"},
            {"name": "t", "type": "query", "query": 'label_values(up{job="$j"}, t)'},
            {"name": "j", "type": "query", "query": {"query": "label_values(job)"}},
        ]
    },
    "panels": [
        {"id": 1, "type": "timeseries", "title": "one", "targets": [{"refId": "A", "expr": "a"}]},
        {
            "id": 2,
            "type": "row",
            "title": "collapsed",
            "collapsed": True,
            "panels": [
                {
                    "id": 3,
                    "type": "stat",
                    "title": "nested",
                    "targets": [
                        {"refId": "A", "expr": 'b{t="$t"}', "instant": True, "range": False},
                        {"refId": "B", "expr": "hidden", "hide": True},
                    ],
                }
            ],
        },
    ],
}


def test_panel_queries_walks_rows_and_skips_hidden() -> None:
    queries = panel_queries(BOARD, {"t": "x"})
    assert [(q.panel_id, q.ref_id, q.expr, q.instant) for q in queries] == [
        (1, "A", "a", False),
        (3, "A", 'b{t="x"}', True),
    ]
    assert queries[1].raw_expr == 'b{t="$t"}'
    assert queries[1].panel_title == "nested"
    assert [q.expr for q in panel_queries(BOARD, {"t": "x"}, include_hidden=True)][-1] == "hidden"
    with_annotations = panel_queries(BOARD, {"t": "x"}, include_annotations=True)
    assert with_annotations[-1].panel_type == "annotation"
    assert with_annotations[-1].expr == 'ALERTS{t="x"}'
    assert [p["id"] for p in iter_panels(BOARD)] == [1, 2, 3]


def test_variable_queries() -> None:
    parsed = variable_queries(BOARD)
    assert [(v.name, v.selector, v.label) for v in parsed] == [
        ("t", 'up{job="$j"}', "t"),
        ("j", None, "job"),
    ]
    bad = {"templating": {"list": [{"name": "x", "type": "query", "query": "query_result(up)"}]}}
    with pytest.raises(ValueError, match="label_values"):
        variable_queries(bad)
