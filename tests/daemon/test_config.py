"""Configuration: every bad file paired with its exact errors; file_sd; check-config."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specmon.config_values import ConfigError, format_duration, parse_duration
from specmon.daemon.config import FileSDConfig, GlobalConfig, parse_config
from specmon.daemon.file_sd import load_file_sd
from specmon.engines import Engine

GOOD = """\
global:
  scrape_interval: 5s
  scrape_timeout: 3s
  windows: [1m, 5m, 15m]
  draft_cost: 0.1
targets:
  - name: vllm-a
    url: http://127.0.0.1:8000/metrics
    engine: auto          # vllm | vllm_v0 | llamacpp | sglang | auto
    draft_cost: 0.12
    chain_length: 3       # optional; detected from the position series by default
"""


def test_the_issue_example_parses() -> None:
    config = parse_config(GOOD, environ={})
    (target,) = config.targets
    assert target.engine is None  # auto
    assert target.draft_cost == 0.12 and target.draft_cost_configured
    assert target.chain_length == 3
    assert config.global_.windows == (60.0, 300.0, 900.0)
    assert target.scrape_interval == 5.0 and target.scrape_timeout == 3.0


def test_defaults() -> None:
    config = parse_config(
        "targets:\n  - {name: a, url: 'http://h:1/metrics', engine: sglang}\n", environ={}
    )
    g = config.global_
    assert (g.scrape_interval, g.scrape_timeout, g.windows, g.draft_cost) == (
        5.0,
        3.0,
        (60.0, 300.0, 900.0),
        None,  # not configured: targets fall back to the default guess, and say so
    )
    assert config.targets[0].draft_cost == 0.1
    assert config.targets[0].draft_cost_configured is False
    assert g.max_response_bytes == 10 * 2**20
    assert g.enable_compression is False
    assert config.targets[0].engine is Engine.SGLANG
    assert config.targets[0].chain_length is None
    assert config.targets[0].enable_compression is None  # the global's


@pytest.mark.parametrize("key", ["enable_compression", "name_filter"])
def test_a_switch_global_and_per_target(key: str) -> None:
    """The global switches a target may override: off by default, the target's None means
    the global's, and a value that is not a YAML boolean is an error wherever it stands."""
    default = parse_config("targets: [{name: a, url: 'http://h:1/'}]", environ={})
    assert getattr(default.global_, key) is False
    config = parse_config(
        f"global: {{{key}: true}}\n"
        "targets:\n"
        "  - {name: a, url: 'http://h:1/metrics/'}\n"
        f"  - {{name: b, url: 'http://h:2/metrics', {key}: false}}\n",
        environ={},
    )
    assert getattr(config.global_, key) is True
    assert [getattr(t, key) for t in config.targets] == [None, False]
    with pytest.raises(ConfigError) as info:
        parse_config(
            f"global: {{{key}: 'true'}}\n"
            "targets:\n"
            f"  - {{name: a, url: 'http://h:1/metrics', {key}: [x]}}\n"
            f"  - {{name: b, url: 'http://h:2/metrics', {key}: 1}}\n",
            environ={},
        )
    assert info.value.problems == [
        f"global.{key}: must be true or false, not a string",
        f"targets[0].{key}: must be true or false, not a list",
        f"targets[1].{key}: must be true or false, not int",
    ]


BAD_CASES = [
    ("empty", "", ["targets: no targets, file_sd_configs or sources: nothing to watch"]),
    (
        "not a mapping",
        "- a\n- b\n",
        ["the file must be a mapping (global:, targets:, file_sd_configs:, sources:), not a list"],
    ),
    (
        "yaml syntax",
        "global: [1, 2\n",
        ["line 2, column 1: invalid YAML: expected ',' or ']', but got '<stream end>'"],
    ),
    (
        "everything wrong at once",
        """\
global:
  scrape_interval: 5s
  scrape_timeout: 10s
  windows: [1m, 5s, bogus, 1m]
  draft_cost: 0.1
  colour: blue
  max_response_bytes: 12
targets:
  - name: vllm-a
    url: http://127.0.0.1:8000/metrics
    engine: vllmm
  - name: vllm-a
    url: ftp://x
  - name: c
    url: http://x/metrics
    draft_cost: 1.5
    chain_length: 0
    labels: {target: x, "bad-name": y}
    headers: {X-Api-Key: 5, Authorization: "Bearer x"}
    bearer_token_env: NOPE_NOT_SET
    drafcost: 1
  - url: http://user:pw@x/metrics
  - just a string
""",
        [
            "global.colour: unknown key",
            "global.scrape_timeout: must not exceed scrape_interval",
            "global.windows[1]: must be at least twice the scrape interval (10s)",
            "global.windows[2]: 'bogus' is not a duration like 5s, 1m30s or 500ms",
            "global.windows[3]: duplicate window",
            "global.max_response_bytes: must be at least 1KiB",
            "targets[0].engine: must be one of auto, vllm, vllm_v0, llamacpp, sglang, trtllm, tgi",
            "targets[1].url: 'ftp://x' is not an http(s) URL with a host",
            "targets[1].name: duplicate target name 'vllm-a' (also targets[0])",
            "targets[2].drafcost: unknown key (did you mean 'draft_cost'?)",
            "targets[2].draft_cost: must be between 0 and 1",
            "targets[2].chain_length: must be between 1 and 64",
            "targets[2].labels.target: label 'target' is set by specmon and cannot be overridden",
            "targets[2].labels.bad-name: invalid label name",
            "targets[2].headers.X-Api-Key: header values must be single-line strings",
            "targets[2].headers.Authorization: use bearer_token_env, bearer_token_file or basic_auth for Authorization",
            "targets[2].bearer_token_env: environment variable NOPE_NOT_SET is not set or empty",
            "targets[3].name: is required",
            "targets[3].url: credentials in the URL are not allowed; use basic_auth or a bearer token",
            "targets[4]: must be a mapping, not a string",
        ],
    ),
    (
        "types",
        """\
global: {scrape_interval: true, draft_cost: "0.1", chain_length: 2.5, windows: 5m, enable_compression: "yes"}
targets: {name: a}
file_sd_configs: [{files: []}]
""",
        [
            "global.scrape_interval: expected a duration like 5s or 1m",
            "global.windows: must be a non-empty list of durations",
            "global.draft_cost: must be a number between 0 and 1, not a string",
            "global.chain_length: must be an integer between 1 and 64, not float",
            "global.enable_compression: must be true or false, not a string",
            "targets: must be a list, not a mapping",
            "file_sd_configs[0].files: must be a non-empty list of file paths or globs",
        ],
    ),
    (
        "token sources",
        """\
targets:
  - name: a
    url: http://h/metrics
    bearer_token_env: X
    bearer_token_file: f
  - name: b
    url: http://h/metrics
    bearer_token_file: does-not-exist
""",
        [
            "targets[0]: set one of bearer_token_env, bearer_token_file, not several",
            "targets[0].bearer_token_env: environment variable X is not set or empty",
            "targets[0].bearer_token_file: cannot read {dir}/f: No such file or directory",
            "targets[1].bearer_token_file: cannot read {dir}/does-not-exist: No such file or directory",
        ],
    ),
]


@pytest.mark.parametrize(("name", "text", "expected"), BAD_CASES, ids=[c[0] for c in BAD_CASES])
def test_bad_config_names_every_problem(
    name: str, text: str, expected: list[str], tmp_path: Path
) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(text, base_dir=tmp_path, environ={})
    assert info.value.problems == [e.format(dir=tmp_path) for e in expected]


def test_secrets_never_echoed_in_errors(tmp_path: Path) -> None:
    text = (
        "targets:\n  - name: a\n    url: http://h/metrics\n"
        '    headers: {X-Key: "line1\\nsecret-value"}\n    bogus: 1\n'
    )
    with pytest.raises(ConfigError) as info:
        parse_config(text, base_dir=tmp_path, environ={})
    assert "secret-value" not in str(info.value)


def test_token_from_env_and_file(tmp_path: Path) -> None:
    (tmp_path / "tok").write_text("  file-token \n")
    config = parse_config(
        "targets:\n"
        "  - {name: a, url: 'http://h/metrics', bearer_token_env: T}\n"
        "  - {name: b, url: 'http://h/metrics', bearer_token_file: tok}\n",
        base_dir=tmp_path,
        environ={"T": "env-token"},
    )
    a, b = config.targets
    assert a.client.credentials().headers == {"Authorization": "Bearer env-token"}
    assert b.client.credentials().headers == {"Authorization": "Bearer file-token"}
    assert "env-token" not in repr(a) and "file-token" not in repr(b)


@pytest.mark.parametrize(
    ("text", "seconds"), [("5s", 5), ("1m30s", 90), ("500ms", 0.5), ("1h", 3600), (2, 2)]
)
def test_durations(text: str | int, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    ("seconds", "text"), [(60, "1m"), (90, "1m30s"), (900, "15m"), (0.5, "500ms"), (3600, "1h")]
)
def test_duration_labels(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_file_sd_json_and_yaml(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text(json.dumps([
        {"targets": ["10.0.0.1:8000", "10.0.0.2:8000"], "labels": {"cluster": "eu", "__specmon_engine__": "vllm"}},
        {"targets": ["10.0.0.3:8080"], "labels": {"__specmon_name__": "llama", "__metrics_path__": "/m", "__specmon_chain_length__": "4"}},
    ]))  # fmt: skip
    sd = FileSDConfig(files=(str(tmp_path / "*.json"),), draft_cost=0.2)
    targets, problems = load_file_sd(tmp_path / "a.json", sd, GlobalConfig())
    assert problems == []
    assert [
        (t.name, t.url, t.engine, t.chain_length, t.draft_cost, dict(t.labels)) for t in targets
    ] == [
        (
            "10.0.0.1:8000",
            "http://10.0.0.1:8000/metrics",
            Engine.VLLM,
            None,
            0.2,
            {"cluster": "eu"},
        ),
        (
            "10.0.0.2:8000",
            "http://10.0.0.2:8000/metrics",
            Engine.VLLM,
            None,
            0.2,
            {"cluster": "eu"},
        ),
        ("llama", "http://10.0.0.3:8080/m", None, 4, 0.2, {}),
    ]
    (tmp_path / "b.yaml").write_text("- targets: ['h:1']\n  labels: {target: x}\n")
    targets, problems = load_file_sd(tmp_path / "b.yaml", sd, GlobalConfig())
    assert targets == []
    assert problems == [
        f"{tmp_path}/b.yaml: [0].labels.target: label 'target' is set by specmon and cannot be overridden"
    ]


def _check_config(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specmon", "check-config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_check_config_command(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(GOOD)
    result = _check_config(good)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "OK" in result.stdout and "windows 1m, 5m, 15m" in result.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text("targets:\n  - name: a\n    url: http://h/metrics\n    draft_cost: 2\n")
    result = _check_config(bad)
    assert result.returncode == 1
    assert "targets[0].draft_cost: must be between 0 and 1" in result.stdout
    missing = _check_config(tmp_path / "nope.yaml")
    assert missing.returncode == 1
    assert "cannot read the file: No such file or directory" in missing.stdout


def test_run_refuses_to_start_on_a_bad_config_or_address(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "targets:\n  - name: a\n    url: http://h/metrics\n    chain_length: 99\n    x: 1\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "specmon", "run", "--config.file", str(bad), "--log.format", "json"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 1
    (line,) = [json.loads(x) for x in result.stderr.splitlines() if '"config_invalid"' in x]
    assert line["problems"] == [
        "targets[0].x: unknown key",
        "targets[0].chain_length: must be between 1 and 64",
    ]
    result = subprocess.run(
        [sys.executable, "-m", "specmon", "run", "--web.listen-address", "localhost"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 2
    assert "expected HOST:PORT or :PORT" in result.stderr


def test_run_exits_1_when_the_port_is_taken(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        good = tmp_path / "good.yaml"
        good.write_text(GOOD)
        result = subprocess.run(
            [sys.executable, "-m", "specmon", "run", "--config.file", str(good),
             "--web.listen-address", f"127.0.0.1:{port}", "--log.format", "json"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    assert result.returncode == 1
    assert '"listen_failed"' in result.stderr


def test_limits_block_covers_every_page_limit() -> None:
    from specmon.daemon.config import LIMIT_BOUNDS, config_keys
    from specmon.engines import PageLimits

    assert set(LIMIT_BOUNDS) == set(config_keys(PageLimits))
    config = parse_config(
        "global:\n  limits: {max_position: 8, max_line_length: 1MiB}\n"
        "targets: [{name: a, url: 'http://h:1/metrics'}]\n",
        environ={},
    )
    assert config.global_.limits == PageLimits(max_position=8, max_line_length=2**20)
    with pytest.raises(ConfigError) as info:
        parse_config(
            "global:\n  limits: {max_position: 0, max_models: x, colour: 1}\n"
            "targets: [{name: a, url: 'http://h:1/metrics'}]\n",
            environ={},
        )
    assert info.value.problems == [
        "global.limits.colour: unknown key",
        "global.limits.max_position: must be an integer between 1 and 4096",
        "global.limits.max_models: must be an integer between 1 and 100000",
    ]


ALIAS_BOMB = """\
a0: &a0 [x, x, x, x, x, x, x, x, x, x]
a1: &a1 [*a0, *a0, *a0, *a0, *a0, *a0, *a0, *a0, *a0, *a0]
a2: &a2 [*a1, *a1, *a1, *a1, *a1, *a1, *a1, *a1, *a1, *a1]
a3: &a3 [*a2, *a2, *a2, *a2, *a2, *a2, *a2, *a2, *a2, *a2]
a4: &a4 [*a3, *a3, *a3, *a3, *a3, *a3, *a3, *a3, *a3, *a3]
a5: &a5 [*a4, *a4, *a4, *a4, *a4, *a4, *a4, *a4, *a4, *a4]
a6: &a6 [*a5, *a5, *a5, *a5, *a5, *a5, *a5, *a5, *a5, *a5]
a7: &a7 [*a6, *a6, *a6, *a6, *a6, *a6, *a6, *a6, *a6, *a6]
a8: &a8 [*a7, *a7, *a7, *a7, *a7, *a7, *a7, *a7, *a7, *a7]
a9: &a9 [*a8, *a8, *a8, *a8, *a8, *a8, *a8, *a8, *a8, *a8]
global:
  max_response_bytes: *a9
targets: [{name: a, url: 'http://h:1/metrics'}]
"""


def test_an_alias_bomb_is_refused_at_once() -> None:
    """A 612-byte alias bomb ran check-config 51 s into a MemoryError at 2.2 GB."""
    assert len(ALIAS_BOMB) < 1000
    with pytest.raises(ConfigError) as info:
        parse_config(ALIAS_BOMB, environ={})
    [problem] = info.value.problems
    assert "aliases are resolved (an alias bomb?)" in problem


def test_deep_nesting_is_refused_without_a_recursion_error() -> None:
    """100,000-deep nesting gave a RecursionError traceback from check-config."""
    deep = "targets: " + "[" * 100_000 + "]" * 100_000 + "\n"
    with pytest.raises(ConfigError) as info:
        parse_config(deep, environ={})
    assert info.value.problems == ["line 1: nested deeper than 32 levels"]


def test_anchors_of_normal_size_still_work() -> None:
    config = parse_config(
        "targets:\n"
        "  - &t {name: a, url: 'http://h:1/metrics', labels: &l {team: x}}\n"
        "  - {name: b, url: 'http://h:2/metrics', labels: *l}\n",
        environ={},
    )
    assert [dict(t.labels) for t in config.targets] == [{"team": "x"}, {"team": "x"}]


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("http://[::1]:99999/metrics", "has an invalid port (0-65535)"),
        ("http://host:1/metrics with spaces", "contains whitespace or control characters"),
        ("http://ho st:1/metrics", "contains whitespace or control characters"),
        ("ftp://host/metrics", "is not an http(s) URL with a host"),
    ],
)
def test_urls_that_cannot_work_fail_check_config(url: str, problem: str) -> None:
    """Http://[::1]:99999 and URLs with spaces passed check-config."""
    with pytest.raises(ConfigError) as info:
        parse_config(f"targets: [{{name: a, url: '{url}'}}]\n", environ={})
    [found] = info.value.problems
    assert found.startswith("targets[0].url: ") and problem in found


def test_a_huge_value_is_never_quoted_whole() -> None:
    text = (
        "global:\n  scrape_interval: '"
        + "9" * 500_000
        + "s'\ntargets: [{name: a, url: 'http://h:1/m'}]\n"
    )
    with pytest.raises(ConfigError) as info:
        parse_config(text, environ={})
    assert len(str(info.value)) < 500


def test_a_config_file_over_the_size_limit_is_refused(tmp_path: Path) -> None:
    from specmon.daemon.config import MAX_CONFIG_BYTES, load_config

    big = tmp_path / "big.yaml"
    big.write_text("# " + "x" * MAX_CONFIG_BYTES + "\n")
    with pytest.raises(ConfigError) as info:
        load_config(big)
    assert info.value.problems == [f"the file is larger than the {MAX_CONFIG_BYTES}-byte limit"]


def test_state_dir_and_its_max_age() -> None:
    """Unset: nothing is kept (None). Set: a path, and epochs older than state_max_age go."""
    target = "targets: [{name: a, url: 'http://h:1/'}]\n"
    default = parse_config(target, environ={}).global_
    assert default.state_dir is None and default.state_max_age == 30 * 86400.0
    config = parse_config(
        "global: {state_dir: /var/lib/specmon, state_max_age: 7d}\n" + target, environ={}
    )
    assert config.global_.state_dir == Path("/var/lib/specmon")
    assert config.global_.state_max_age == 7 * 86400.0
    for bad, says in (("state_dir: 3", "global.state_dir"), ("state_dir: ''", "global.state_dir"),
                      ("state_max_age: soon", "global.state_max_age")):  # fmt: skip
        with pytest.raises(ConfigError) as caught:
            parse_config(f"global: {{{bad}}}\n" + target, environ={})
        assert any(says in p for p in caught.value.problems), caught.value.problems


def test_curve_retention_is_a_bounded_duration(tmp_path: Path) -> None:
    """``global.curve_retention`` (the cost curve's memory, issue 54): default 1h, a duration
    from 1m to 7d, and what a target's state gives its load histories."""
    from specmon.daemon.config import load_config
    from specmon.daemon.target import TargetState

    path = tmp_path / "c.yml"
    path.write_text(
        "global: {curve_retention: 2h}\ntargets: [{name: a, url: 'http://x/metrics'}]\n"
    )
    config = load_config(path)
    assert config.global_.curve_retention == 7200.0
    for bad in ("10s", "8d", "soon"):
        path.write_text(f"global: {{curve_retention: {bad}}}\ntargets: []\n")
        with pytest.raises(ConfigError, match="curve_retention"):
            load_config(path)
    state = TargetState(config.targets[0], windows=(60.0,), retention=70.0, curve_retention=7200.0)
    assert state._curve_retention == 7200.0


def _state_dir_setup(kind: str, root: Path) -> Path:
    """A state_dir of ``kind`` under ``root``."""
    d = root / "state"
    if kind == "a file":
        d.write_text("not a directory\n")
    elif kind == "writable by every user":
        d.mkdir()
        d.chmod(0o777)
    elif kind == "a FIFO lock file":
        d.mkdir(mode=0o700)
        os.mkfifo(d / "specmon-state.json.lock")
    elif kind == "under a file":
        (root / "plain").write_text("x\n")
        d = root / "plain" / "state"
    elif kind in ("usable", "not made yet"):
        if kind == "usable":
            d.mkdir(mode=0o700)
        else:
            d = root / "new" / "state"
    return d


@pytest.mark.parametrize(
    ("kind", "says"),
    [
        ("a file", "not a directory"),
        ("writable by every user", "writable by every user"),
        ("a FIFO lock file", "specmon-state.json.lock is a FIFO"),
        ("under a file", "a parent of it is a file"),
        ("usable", None),
        ("not made yet", None),
    ],
)
def test_check_config_refuses_a_state_dir_specmon_could_not_use(
    tmp_path: Path, kind: str, says: str | None
) -> None:
    """check-config accepted any state_dir: a file, a directory anyone can write in, one
    holding a FIFO as its lock file. It checks what `specmon run` checks at start now."""
    import argparse
    import io

    from specmon.cli.run import _check

    state_dir = _state_dir_setup(kind, tmp_path)
    path = tmp_path / "specmon.yml"
    path.write_text(GOOD.replace("global:\n", f"global:\n  state_dir: '{state_dir}'\n", 1))
    out = io.StringIO()
    code = _check(argparse.Namespace(file=path), out)
    if says is None:
        assert code == 0 and out.getvalue().startswith("OK"), out.getvalue()
        assert not (tmp_path / "new").exists()  # checked, not made
    else:
        assert code == 1, out.getvalue()
        assert f"global.state_dir: {state_dir}: " in out.getvalue() and says in out.getvalue()


def test_check_config_warns_when_curve_retention_passes_its_memory_budget(tmp_path: Path) -> None:
    """curve_retention 7d cost about 8 MB a compared target, 8 GB at 1,000, without a word.
    Past CURVE_MEMORY_BUDGET (estimated at one bucket a slot) check-config warns, and still
    passes the file; the daemon logs the same (curve_retention_memory)."""
    import argparse
    import io

    from specmon.cli.run import _check

    lines = []
    for i in range(500):  # 500 compared targets and their 500 twins
        lines += [f"  - {{name: s{i}, url: 'http://h{i}:8000/metrics', baseline: b{i}}}",
                  f"  - {{name: b{i}, url: 'http://h{i}:8001/metrics'}}"]  # fmt: skip
    for retention, warned in (("7d", True), ("1h", False)):
        path = tmp_path / f"specmon-{retention}.yml"
        path.write_text(f"global: {{curve_retention: {retention}}}\ntargets:\n" + "\n".join(lines))
        out = io.StringIO()
        assert _check(argparse.Namespace(file=path), out) == 0
        text = out.getvalue()
        assert ("warning: curve_retention 7d keeps about" in text) is warned, text
        if warned:
            assert "1000 compared targets and twins" in text and "MiB budget" in text
