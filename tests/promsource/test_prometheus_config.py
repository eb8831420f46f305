"""The sources: validator: every bad block paired with its exact problems; selectors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from specmon.engines import Engine
from specmon.secrets import Secret
from specmon.sources.prometheus_config import (
    MatchOp,
    QueryMethod,
    Selector,
    SelectorError,
    check_sources,
    parse_selector,
    quote,
)

ISSUE_EXAMPLE = """\
sources:
  - prometheus:
      url: http://prometheus:9090
      selector: '{job=~"vllm.*"}'
      instance_labels: [namespace, pod]
      bearer_token_file: token
      headers: {X-Scope-OrgID: team-a}
      interval: 30s
      timeout: 10s
      overrides:
        - match: '{pod=~"vllm-eagle-.*"}'
          draft_cost: 0.12
          chain_length: 5
        - match: '{namespace="team-a", pod="vllm-plain-0"}'
          model: qwen3-8b
          baseline: team-a/vllm-plain-1
"""


def check(raw: Any, tmp: Path | None = None, **kwargs: Any) -> tuple[Any, list[str]]:
    return check_sources(raw, base_dir=tmp, environ=kwargs.pop("environ", {}), **kwargs)


def test_the_issue_example(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("abc\n")
    raw = yaml.safe_load(ISSUE_EXAMPLE)["sources"]
    (source,), problems = check(raw, tmp_path, draft_cost=0.2, chain_length=4)
    assert problems == []
    assert source.url == "http://prometheus:9090"
    assert source.api_url == "http://prometheus:9090/api/v1/query"
    assert str(source.selector) == '{job=~"vllm.*"}'
    assert source.instance_labels == ("namespace", "pod")
    assert source.client.bearer_token_file == tmp_path / "token"
    assert source.client.headers == {"X-Scope-OrgID": Secret("team-a")}
    assert "'X-Scope-OrgID': Secret('<hidden>')" in repr(source)
    assert (source.interval, source.timeout, source.stale_after) == (30.0, 10.0, 120.0)
    assert source.method is QueryMethod.POST
    assert source.origin == "sources[0].prometheus"
    eagle = source.settings_for({"namespace": "x", "pod": "vllm-eagle-7"})
    assert (eagle.draft_cost, eagle.chain_length, eagle.model) == (0.12, 5, None)
    plain = source.settings_for({"namespace": "team-a", "pod": "vllm-plain-0"})
    assert (plain.draft_cost, plain.chain_length) == (0.2, 4)  # the global defaults
    assert (plain.model, plain.baseline) == ("qwen3-8b", "team-a/vllm-plain-1")


def test_defaults() -> None:
    (source,), problems = check([{"prometheus": {"url": "https://thanos:10902/"}}])
    assert problems == []
    assert source.selector == Selector()
    assert source.instance_labels == ("instance",)
    assert source.api_url == "https://thanos:10902/api/v1/query"
    assert (source.interval, source.timeout) == (30.0, 10.0)
    assert (source.max_response_bytes, source.max_series, source.max_instances) == (
        64 * 2**20,
        200_000,
        10_000,
    )
    assert source.engine is None and not source.accept_partial and source.overrides == ()
    assert (
        source.client.bearer_token is None
        and source.client.basic_auth is None
        and source.client.tls is None
    )
    assert check(None) == ((), [])


def test_every_problem_at_once_with_its_path(tmp_path: Path) -> None:
    raw = [
        {
            "prometheus": {
                "url": "ftp://user:pw@x",
                "selector": 'up{job="a"}',
                "instance_labels": ["pod", "model_name", "pod", "9bad"],
                "interval": "10s",
                "timeout": "20s",
                "engine": "ollama",
                "draft_cost": 2,
                "headers": {"Authorization": "x", "X-Ok": "line\nbreak", "bad header": "v"},
                "bearer_token_file": "missing-token",
                "basic_auth": {"username": "u", "password_env": "NOPE"},
                "tls": {"ca_file": "missing.pem", "key_file": "k.pem"},
                "method": "PUT",
                "stale_after": "-1s",
                "accept_partial": "yes",
                "max_series": 0,
                "max_response_bytes": "5",
                "overrides": [
                    {"match": "{pod=~'('}", "draft_cost": 0.1},
                    {"match": '{pod="a"}'},
                    {"draft_cost": 0.1},
                    {"match": "{}", "model": "m"},
                    {"match": '{pod="a"}', "chain_length": 0, "colour": "red"},
                ],
                "intervall": "5s",
            }
        },
        {"promethues": {}},
        {"prometheus": {}, "file": {}},
        "nonsense",
        {"prometheus": None},
    ]
    _, problems = check(raw, tmp_path)
    p = "sources[0].prometheus"
    expected = [
        f"{p}.intervall: unknown key (did you mean 'interval'?)",
        f"{p}.url: 'ftp://user:pw@x' is not an http(s) URL with a host",
        f"{p}.timeout: must not exceed interval",
        f"{p}.headers.Authorization: use bearer_token_env, bearer_token_file or basic_auth for Authorization",
        f"{p}.headers.X-Ok: header values must be single-line strings",
        f"{p}.headers.bad header: invalid header name",
        f"{p}: set one of bearer_token_file, basic_auth, not several",
        f"{p}.bearer_token_file: cannot read {tmp_path / 'missing-token'}: No such file or directory",
        f"{p}.basic_auth.password_env: environment variable NOPE is not set or empty",
        f"{p}.tls.ca_file: cannot read {tmp_path / 'missing.pem'}: No such file or directory",
        f"{p}.tls.key_file: cannot read {tmp_path / 'k.pem'}: No such file or directory",
        f"{p}.tls: cert_file and key_file go together",
        f"{p}.overrides[0].match: invalid regular expression for 'pod': missing ), unterminated subpattern at position 0",
        f"{p}.overrides[1]: sets nothing (give draft_cost, chain_length, baseline or model)",
        f"{p}.overrides[2].match: is required",
        f"{p}.overrides[3].match: must have at least one matcher (an empty match would match everything)",
        f"{p}.overrides[4].colour: unknown key",
        f"{p}.overrides[4].chain_length: must be between 1 and 64",
        f"{p}.selector: must be label matchers in braces, like '{{job=~\"vllm.*\"}}' (metric names are chosen by specmon)",
        f"{p}.instance_labels[1]: 'model_name' is a label the engine adapters read; it cannot identify an instance",
        f"{p}.instance_labels[2]: duplicate label 'pod'",
        f"{p}.instance_labels[3]: must be a label name",
        f"{p}.engine: must be one of auto, vllm, vllm_v0, llamacpp, sglang, trtllm, tgi",
        f"{p}.draft_cost: must be between 0 and 1",
        f"{p}.method: must be POST or GET",
        f"{p}.stale_after: '-1s' is not a duration like 5s, 1m30s or 500ms",
        f"{p}.accept_partial: must be true or false, not a string",
        f"{p}.max_response_bytes: must be at least 1KiB",
        f"{p}.max_series: must be between 1 and 10000000",
        "sources[1].promethues: unknown source kind (did you mean 'prometheus'?)",
        "sources[2]: must be a mapping with one key: prometheus",
        "sources[3]: must be a mapping with one key: prometheus",
        "sources[4].prometheus.url: is required",
    ]
    assert problems == expected
    # Secrets never appear in problems.
    assert not any("line\nbreak" in q or "user:pw" in q for q in problems[2:])


def test_credentials_and_tls_forms(tmp_path: Path) -> None:
    (tmp_path / "pw").write_text("hunter2")
    (tmp_path / "empty").write_text("\n")
    ok, problems = check(
        [
            {"prometheus": {"url": "http://p:9090", "bearer_token_env": "TOKEN"}},
            {"prometheus": {"url": "http://p:9090", "name": "by-file",
                            "basic_auth": {"username": "u", "password_file": "pw"}}},
            {"prometheus": {"url": "http://p:9090", "name": "by-env",
                            "basic_auth": {"username": "u", "password_env": "PW"}}},
        ],
        tmp_path,
        environ={"TOKEN": " t0k3n \n", "PW": "pw-from-env"},
    )  # fmt: skip
    assert problems == []
    assert ok[0].client.bearer_token == Secret("t0k3n")
    by_file, by_env = ok[1].client.basic_auth, ok[2].client.basic_auth
    assert by_file is not None and by_file.password_file == tmp_path / "pw"
    assert by_env is not None and by_env.password == Secret("pw-from-env")
    _, problems = check(
        [
            {"prometheus": {"url": "http://p:9090", "bearer_token_file": "empty"}},
            {"prometheus": {"url": "http://p:9090", "basic_auth": {"username": "a:b",
                            "password_file": "pw", "password_env": "PW"}}},
            {"prometheus": {"url": "http://p:9090", "basic_auth": {"password_file": "pw"}}},
            {"prometheus": {"url": "http://p:9090", "tls": {"insecure_skip_verify": True}}},
            {"prometheus": {"url": "https://p:9090/api/v1/query"}},
            {"prometheus": {"url": "https://p:9090/?x=1"}},
            {"prometheus": {"url": "https://p:9090", "instance_labels": []}},
            {"prometheus": {"url": "https://p:9090", "instance_labels": ["specmon_freshness"]}},
        ],
        tmp_path,
        environ={"PW": "x"},
    )  # fmt: skip
    assert problems == [
        f"sources[0].prometheus.bearer_token_file: {tmp_path / 'empty'} is empty",
        "sources[1].prometheus.basic_auth.username: must not contain ':'",
        "sources[1].prometheus.basic_auth: set password_file or password_env (exactly one)",
        "sources[2].prometheus.basic_auth.username: is required",
        "sources[3].prometheus.tls: set for an http:// URL (use https:// or drop tls)",
        "sources[4].prometheus.url: give the base URL (e.g. http://prometheus:9090 or "
        "http://mimir/prometheus); specmon appends /api/v1/query",
        "sources[5].prometheus.url: must not have a query string or fragment (the base URL of "
        "the API)",
        "sources[6].prometheus.instance_labels: must be a non-empty list of label names",
        "sources[7].prometheus.instance_labels[0]: 'specmon_freshness' is used by specmon's "
        "own queries",
    ]


def test_source_names_are_derived_from_the_url_or_given_and_unique(tmp_path: Path) -> None:
    ok, problems = check(
        [
            {"prometheus": {"url": "http://prometheus:9090"}},
            {"prometheus": {"url": "https://mimir.example:8080/prometheus/"}},
            {"prometheus": {"url": "http://prometheus:9090", "name": "second"}},
        ],
        tmp_path,
    )
    assert problems == []
    assert [s.name for s in ok] == ["prometheus:9090", "mimir.example:8080/prometheus", "second"]
    _, problems = check(
        [
            {"prometheus": {"url": "http://p:9090"}},
            {"prometheus": {"url": "http://p:9090/"}},
            {"prometheus": {"url": "http://q:9090", "name": "p:9090"}},
            {"prometheus": {"url": "http://r:9090", "name": ""}},
            {"prometheus": {"url": "http://r:9090", "name": "a\nb"}},
            {"prometheus": {"url": "http://r:9090", "name": 7}},
        ],
        tmp_path,
    )
    assert problems == [
        "sources[1].prometheus.name: duplicate source name 'p:9090' (also sources[0]); set "
        "name to tell the sources apart",
        "sources[2].prometheus.name: duplicate source name 'p:9090' (also sources[0])",
        "sources[3].prometheus.name: must be a non-empty string",
        "sources[4].prometheus.name: must be at most 128 printable characters",
        "sources[5].prometheus.name: must be a non-empty string, not int",
    ]


def test_overrides_apply_in_order() -> None:
    (source,), problems = check(
        [
            {
                "prometheus": {
                    "url": "http://p:9090",
                    "engine": "llamacpp",
                    "overrides": [
                        {"match": '{job=~"llama.*"}', "draft_cost": 0.3, "model": "a"},
                        {"match": '{job="llamacpp", pod!="x"}', "model": "b"},
                        {"match": '{zone!~"eu-.*"}', "chain_length": 2},
                    ],
                }
            }
        ]
    )
    assert problems == []
    s = source.settings_for({"job": "llamacpp", "pod": "p"})
    assert (s.draft_cost, s.model, s.chain_length, s.engine) == (0.3, "b", 2, Engine.LLAMACPP)
    s = source.settings_for({"job": "llamacpp", "pod": "x", "zone": "eu-1"})
    assert (s.draft_cost, s.model, s.chain_length) == (0.3, "a", None)
    s = source.settings_for({"job": "vllm", "zone": "eu-2"})
    assert (s.draft_cost, s.model, s.chain_length) == (0.1, None, None)


# --------------------------------------------------------------------------- selectors


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("{}", "{}"),
        ("  { }  ", "{}"),
        ('{job="vllm"}', '{job="vllm"}'),
        ("{job='vllm', pod!=\"a\",}", '{job="vllm",pod!="a"}'),
        ('{ job =~ "vllm.*" , ns !~ `kube-.*` }', '{job=~"vllm.*",ns!~"kube-.*"}'),
        (r'{a="x\"y\\z\n\t\u00e9\x41\101"}', r'{a="x\"y\\z\n\x09éAA"}'),
        ('{path=~"/v1/.+\\\\.json"}', r'{path=~"/v1/.+\\.json"}'),
        ("{a=`raw \\d+`}", r'{a="raw \\d+"}'),
    ],
)
def test_selector_forms(text: str, canonical: str) -> None:
    selector = parse_selector(text)
    assert str(selector) == canonical
    assert parse_selector(str(selector)) == selector


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('job="vllm"', "must be label matchers in braces"),
        ('up{job="vllm"}', "must be label matchers in braces"),
        ('{job="vllm"', "missing the closing '}'"),
        ('{job="vllm}', "unterminated"),
        ("{job}", "expected =, !=, =~ or !~ after 'job'"),
        ('{job=="a"}', "expected a quoted value for 'job'"),
        ('{job="a" pod="b"}', "expected ',' or '}' after the matcher on 'job'"),
        ('{9job="a"}', "expected a label name at position 2"),
        ('{job="a\\q"}', "unknown escape \\q"),
        ('{job="a\\x4"}', "invalid \\x escape"),
        ('{job="a\\ud800"}', "invalid \\u escape"),
        ("{job=`a}", "unterminated `string`"),
        ('{job="a\nb"}', "newline inside a string"),
        ("{" + 'a="b",' * 1000 + "}", "longer than 4096 characters"),
    ],
)
def test_selector_errors(text: str, message: str) -> None:
    with pytest.raises(SelectorError) as caught:
        parse_selector(text)
    assert message in str(caught.value)


def test_matchers_follow_promql_semantics() -> None:
    selector = parse_selector('{a="1", b!="2", c=~"x|y", d!~"z.*"}', compile_regex=True)
    assert [m.op for m in selector.matchers] == [MatchOp.EQ, MatchOp.NE, MatchOp.RE, MatchOp.NRE]
    assert selector.matches({"a": "1", "c": "x"})
    assert not selector.matches({"a": "1", "c": "xx"})  # anchored
    assert not selector.matches({"a": "1", "c": "x", "b": "2"})
    assert not selector.matches({"a": "1", "c": "y", "d": "zz"})
    assert parse_selector('{a=~".*"}', compile_regex=True).matches({})  # missing label = ""
    assert not parse_selector('{a=~".+"}', compile_regex=True).matches({})


@given(st.text(max_size=40))
def test_quoting_round_trips_any_value(value: str) -> None:
    if any(0xD800 <= ord(c) <= 0xDFFF for c in value):
        return
    (matcher,) = parse_selector("{a=" + quote(value) + "}").matchers
    assert matcher.value == value
