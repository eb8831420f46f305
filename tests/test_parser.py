"""The exposition parser: formats, edge cases, robustness, agreement with prometheus_client."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from specmon.parser import MAX_PROBLEMS, parse

TEXT_PAGE = """\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 1.8432e+06
# HELP vllm:spec_decode_num_drafts_created Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_created gauge
vllm:spec_decode_num_drafts_created{engine="0",model_name="m"} 1.7645e+09
nan_metric NaN
pos_inf +Inf
neg_inf -Inf
with_ts{a="1"} 3 1700000000123
"""


def test_wanted_only_is_materialised() -> None:
    page = parse(TEXT_PAGE, wanted=["vllm:spec_decode_num_drafts_total"])
    assert list(page.samples) == ["vllm:spec_decode_num_drafts_total"]
    (sample,) = page.get("vllm:spec_decode_num_drafts_total")
    assert sample.value == 1843200.0
    assert sample.raw_value == "1.8432e+06"
    assert sample.labels == {"engine": "0", "model_name": "m"}
    # the _created sibling shares the prefix but is not materialised
    assert not page.has("vllm:spec_decode_num_drafts_created")
    assert page.types["vllm:spec_decode_num_drafts_total"] == "counter"
    assert page.malformed == 0


def test_special_values_and_timestamps() -> None:
    page = parse(TEXT_PAGE)
    assert math.isnan(page.get("nan_metric")[0].value)
    assert page.get("pos_inf")[0].value == math.inf
    assert page.get("neg_inf")[0].value == -math.inf
    # text format 0.0.4 timestamps are milliseconds; specmon returns seconds
    assert page.get("with_ts")[0].timestamp == pytest.approx(1700000000.123)
    assert not page.openmetrics


def test_openmetrics_page() -> None:
    text = (
        "# TYPE vllm_spec_decode_num_drafts counter\n"
        "# HELP vllm_spec_decode_num_drafts Number of drafts.\n"
        'vllm_spec_decode_num_drafts_total{model_name="m",engine="0"} 42.0 1700000000.5\n'
        'vllm_spec_decode_num_drafts_created{model_name="m",engine="0"} 1.7e+09\n'
        '# TYPE foo counter\nfoo_total 7 # {trace_id="abc"} 1.0 1700000000\n'
        "# EOF\n"
    )
    page = parse(text, wanted=["vllm_spec_decode_num_drafts_total", "foo_total"])
    assert page.openmetrics and page.saw_eof
    (sample,) = page.get("vllm_spec_decode_num_drafts_total")
    assert sample.value == 42.0
    assert sample.timestamp == 1700000000.5  # OpenMetrics timestamps are seconds
    assert sample.labels == {"engine": "0", "model_name": "m"}  # any label order
    assert page.get("foo_total")[0].value == 7.0  # exemplar stripped
    assert page.malformed == 0


def test_content_after_eof_is_malformed() -> None:
    page = parse("a 1\n# EOF\nb 2\n", wanted=["a", "b"])
    assert page.get("a")[0].value == 1.0
    assert not page.has("b")
    assert page.malformed == 1
    assert "after # EOF" in page.problems[0].reason


def test_escaped_label_values() -> None:
    text = 'm{a="x\\"y",b="back\\\\slash",c="new\\nline",d="}{,="} 1\n'
    page = parse(text, wanted=["m"])
    assert page.malformed == 0
    assert page.get("m")[0].labels == {
        "a": 'x"y',
        "b": "back\\slash",
        "c": "new\nline",
        "d": "}{,=",
    }


def test_metric_names_with_colons_and_crlf() -> None:
    page = parse("llamacpp:n_decode_total 5\r\nsglang:spec_accept_length 2.5\r\n")
    assert page.get("llamacpp:n_decode_total")[0].value == 5.0
    assert page.get("sglang:spec_accept_length")[0].value == 2.5


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("m{a=1} 1", "quoted value"),
        ('m{a="1"', "unterminated"),
        ("m", "space before the value"),
        ("m abc", "invalid number"),
        ("m 1 2 3", "optional timestamp"),
        ('m{a="1",a="2"} 1', "duplicate label"),
        ('m{a="1" b="2"} 1', "expected ',' or '}'"),
        ("m 1 NaN", "timestamp"),
        ("9m 1", "invalid metric name"),
    ],
)
def test_malformed_wanted_lines_are_counted_not_fatal(line: str, reason: str) -> None:
    text = f'm{{i="0"}} 0\n{line}\nm{{i="5"}} 5\n'
    page = parse(text, wanted=["m", "9m"])
    assert page.malformed == 1
    assert reason in page.problems[0].reason
    assert page.problems[0].line_number == 2
    assert [s.value for s in page.get("m")] == [0.0, 5.0]


def test_unwanted_garbage_counted_only_when_validating() -> None:
    text = "good 1\nthis is not a metric line\nother{x=} 2\nm 3\n"
    fast = parse(text, wanted=["m"])
    assert fast.get("m")[0].value == 3.0
    assert fast.malformed == 0  # only the first unrelated line is examined
    full = parse(text, wanted=["m"], validate_all=True)
    assert full.malformed == 2
    assert full.get("m")[0].value == 3.0


def test_garbage_page_has_no_valid_line() -> None:
    page = parse("<html><body>502 Bad Gateway</body></html>\n", wanted=["m"])
    assert page.valid_lines == 0
    assert page.malformed == 1


def test_problem_list_is_bounded_but_count_is_exact() -> None:
    text = "m x\n" * 50
    page = parse(text, wanted=["m"])
    assert page.malformed == 50
    assert len(page.problems) == MAX_PROBLEMS


def _reference(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _ours(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    page = parse(text)
    assert page.malformed == 0, page.problems
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for samples in page.samples.values()
        for s in samples
    }


label_values = st.text(
    alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"), max_size=12
)
finite = st.floats(allow_nan=False, allow_infinity=True, width=64)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@given(
    rows=st.lists(
        st.tuples(
            st.sampled_from(["a_total", "b:c", "vllm:x_total", "llamacpp:y"]),
            st.dictionaries(
                st.sampled_from(["engine", "model_name", "position", "le"]),
                label_values,
                max_size=3,
            ),
            finite,
        ),
        max_size=20,
    )
)
def test_agrees_with_prometheus_client_on_generated_pages(
    rows: list[tuple[str, dict[str, str], float]],
) -> None:
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    lines = []
    for name, labels, value in rows:
        key = (name, tuple(sorted(labels.items())))
        if key in seen:
            continue
        seen.add(key)
        body = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
        lines.append(f"{name}{{{body}}} {value!r}" if labels else f"{name} {value!r}")
    text = "\n".join(lines) + "\n"
    assert _ours(text) == _reference(text)


def test_the_daemons_fast_path_reads_what_the_line_loop_reads() -> None:
    """parse() with wanted names (the daemon's path) scans in C; the line-by-line loop
    (validate_all, what inspect uses) must find the same samples, duplicates and types on
    every captured page, for every adapter's names."""
    from pathlib import Path

    from specmon.engines import ADAPTERS

    pages = Path(__file__).parent / "fixtures" / "pages"
    checked = 0
    for path in sorted(pages.glob("*.txt")):
        if path.name.endswith(".headers.txt"):
            continue
        text = path.read_text(encoding="utf-8")
        for adapter in ADAPTERS.values():
            fast = parse(text, wanted=adapter.wanted)
            slow = parse(text, wanted=adapter.wanted, validate_all=True)
            assert fast.samples == slow.samples, (path.name, adapter.engine)
            assert fast.duplicates == slow.duplicates
            assert (fast.saw_eof, fast.openmetrics, fast.declared) == (
                slow.saw_eof,
                slow.openmetrics,
                slow.declared,
            )
            assert {k: v for k, v in slow.types.items() if k in fast.types} == fast.types
            checked += bool(fast.samples)
    assert checked >= 20


def test_label_sets_parsed_before_come_back_equal_and_independent() -> None:
    """The parse keeps label sets it has seen (the same series recur on every page): a
    second page gets equal labels in dicts of its own, and the cache stays bounded."""
    from specmon import parser as exposition

    page = 'm_total{a="1",b="x y"} 3\n'
    first = parse(page).samples["m_total"][0]
    second = parse(page).samples["m_total"][0]
    assert first.labels == second.labels == {"a": "1", "b": "x y"}
    assert first.labels is not second.labels  # each page's samples own their labels
    many = "".join(f'm_total{{i="{i}"}} 1\n' for i in range(exposition._LABEL_CACHE_MAX + 10))
    assert len(parse(many).samples["m_total"]) == exposition._LABEL_CACHE_MAX + 10
    assert len(exposition._LABEL_CACHE) <= exposition._LABEL_CACHE_MAX
    long_value = "v" * (exposition._LABEL_CACHE_BODY + 1)
    parse(f'm_total{{a="{long_value}"}} 1\n')
    assert all(len(body) <= exposition._LABEL_CACHE_BODY for body in exposition._LABEL_CACHE)


@given(
    st.sets(st.text(alphabet="ab:_.*", min_size=1, max_size=6), min_size=1, max_size=12),
    st.lists(st.text(alphabet="ab:_.*", max_size=8), max_size=20),
)
def test_the_name_trie_matches_exactly_the_names(names: set[str], others: list[str]) -> None:
    """The page pattern's prefix trie (exposition.name_trie) matches a whole name exactly when it
    is one of the names: every name, none of their proper prefixes or extensions that are not
    names themselves, whatever regular-expression characters they hold."""
    import re

    from specmon.parser import name_trie

    pattern = re.compile(f"(?:{name_trie(names)})")
    candidates = {
        *names,
        *others,
        *(n[:i] for n in names for i in range(len(n))),
        *(n + "a" for n in names),
    }
    for candidate in candidates:
        assert (pattern.fullmatch(candidate) is not None) == (candidate in names), candidate


_LINES = [
    "m 1",
    'm{a="1"} 2',
    'm{a="2"} 3 1700000000000',
    "m_total 4",
    "other 5",
    "# EOF",
    "# EOF  ",
    "# EOF\r",
    "# EOFx",
    "#  EOF",
    "# TYPE m counter",
    "# HELP m some help",
    "",
    "   ",
    "not a sample !!",
]


@given(st.lists(st.sampled_from(_LINES), max_size=12), st.booleans())
def test_the_fast_path_finds_the_end_marker_where_the_line_loop_does(
    lines: list[str], trailing_newline: bool
) -> None:
    """The daemon's path finds ``# EOF`` in its one pass over the page; wherever the marker
    is (middle, end, with trailing blanks, ``# EOFx``), it reads what the line loop reads."""
    text = "\n".join(lines) + ("\n" if trailing_newline else "")
    fast = parse(text, wanted=["m", "m_total"])
    slow = parse(text, wanted=["m", "m_total"], validate_all=True)
    assert fast.samples == slow.samples
    assert fast.duplicates == slow.duplicates
    assert fast.saw_eof == slow.saw_eof
    assert fast.openmetrics == slow.openmetrics


_NAMES = ["m", "vllm:x_total", "a_b:c", "9bad", ""]
_BODIES = [None, 'a="1"', 'a="1",b="x y"', "", 'a="1",', 'a="1" , b="2"', 'a="x\\"y"', "a=1",
           'a="}"', 'a="1",a="2"']  # fmt: skip
_VALUES = ["1", "0", "1.5", "1e5", "1e", "1..2", "1.8432e+06", "12e-3", "1-2", "00", "-1", "+Inf",
           "NaN", "1_0", " 1", "1 ", "1\t", "1 2", '1 # {a="b"} 1', "1\x0c", "١"]  # fmt: skip


def _same_reading(line: str, *, openmetrics: bool) -> None:
    from specmon import parser as exposition

    def outcome(read: Callable[..., object]) -> object:
        try:
            return read(line, openmetrics=openmetrics)
        except exposition._LineError as exc:
            return ("refused", str(exc))

    # repr: NaN values compare unequal to themselves
    assert repr(outcome(exposition._sample)) == repr(outcome(exposition._sample_careful)), line


def _warm(body: str | None) -> None:
    """The careful parse caches a label set it parses."""
    from specmon import parser as exposition

    if body is not None:
        with contextlib.suppress(exposition._LineError):
            exposition._sample_careful(f"m{{{body}}} 1", openmetrics=False)


def test_the_plain_line_shortcut_reads_what_the_careful_parse_reads() -> None:
    """A sample line of the common shape (a label set seen before, one space, an unsigned
    number) is read without the careful parse: for every line, the same sample or the same
    refusal, before and after its label set is cached."""
    for warm in (False, True):
        for body in _BODIES:
            if warm:
                _warm(body)
            for name in _NAMES:
                for value in _VALUES:
                    line = name + ("" if body is None else "{" + body + "}") + " " + value
                    for openmetrics in (False, True):
                        _same_reading(line, openmetrics=openmetrics)


@given(st.sampled_from(_BODIES), st.from_regex(r"[0-9][0-9.eE+_ -]{0,8}", fullmatch=True))
def test_the_plain_line_shortcut_on_any_number_like_value(body: str | None, value: str) -> None:
    _warm(body)
    _same_reading("m" + ("" if body is None else "{" + body + "}") + " " + value, openmetrics=False)


def test_the_plain_line_shortcut_is_taken() -> None:
    """The shortcut's pattern matches the daemon's common lines (else the test above proves
    nothing about it)."""
    from specmon import parser as exposition

    for line in ['vllm:x_total{engine="0",model_name="m"} 1.8432e+06', "m 3", "m{} 0.5"]:
        assert exposition._PLAIN_SAMPLE_RE.fullmatch(line) is not None
