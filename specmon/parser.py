"""One parser for Prometheus text format 0.0.4 and OpenMetrics 1.0 pages.

Engines publish hundreds of families and specmon needs a handful, so the parser only
materialises the sample names the caller asks for (``wanted``); every other sample line is
skipped after a cheap check of its first character. Comment lines are read for ``# TYPE`` and
``# EOF``. Lines of wanted families that do not parse are counted and reported, never fatal;
``validate_all=True`` also validates every other sample line (slower; ``specmon inspect``).

Work is bounded per page: sources cap the bytes they read; here a line longer than
``max_line_length`` is refused before any regular expression looks at it, and a page with more
than ``max_samples`` samples of the wanted names stops being materialised (``Page.truncated``).
An exact duplicate of a wanted series (same name, same labels) is kept out of ``samples`` and
listed in ``Page.duplicates``: the caller decides what a duplicate invalidates. No I/O happens
here.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from specmon.records import record

__all__ = [
    "Page",
    "Problem",
    "Sample",
    "parse",
]

#: Keep at most this many problem descriptions per page (the count is always exact).
MAX_PROBLEMS = 10
#: Default longest line examined (bytes of text, labels included).
MAX_LINE_LENGTH = 65536
#: Default most samples of the wanted names materialised from one page.
MAX_SAMPLES = 50_000
_MAX_LINE_ECHO = 160

_NAME_START = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_:")
_NAME_RE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME_RE = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
# Label sets without backslashes (the overwhelmingly common case) parse with one findall.
_SIMPLE_LABELS_RE = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"([^"\\]*)"\s*(?:,|$)')
# A whole sample line, used only for validation of lines nobody asked for.
_SAMPLE_LINE_RE = re.compile(
    r"[a-zA-Z_:][a-zA-Z0-9_:]*"
    r'(?:\{\s*(?:[a-zA-Z_][a-zA-Z0-9_]*\s*=\s*"(?:[^"\\]|\\.)*"\s*(?:,\s*|(?=\})))*\})?'
    r"[ \t]+(\S+)(?:[ \t]+(\S+))?(?:[ \t]+#.*)?[ \t]*"
)


@record
class Sample:
    """One sample line: name, labels, value and optional timestamp (seconds)."""

    name: str
    labels: Mapping[str, str]
    value: float
    timestamp: float | None = None
    #: The value exactly as printed, so callers can judge its precision.
    raw_value: str = ""

    def label(self, key: str, default: str = "") -> str:
        return self.labels.get(key, default)


@record
class Problem:
    """A line that could not be parsed."""

    line_number: int
    line: str
    reason: str

    def __str__(self) -> str:
        return f"line {self.line_number}: {self.reason}: {self.line!r}"


@dataclass(slots=True)
class Page:
    """What the parser extracted from one page."""

    #: Samples of the wanted names, by sample name, in page order.
    samples: dict[str, list[Sample]] = field(default_factory=dict)
    #: ``# TYPE`` declarations seen (family name -> type), for every family on the page.
    types: dict[str, str] = field(default_factory=dict)
    #: Lines that failed to parse (among those examined).
    malformed: int = 0
    problems: list[Problem] = field(default_factory=list)
    #: Valid sample lines seen; zero on a non-empty page means it is not an exposition page.
    valid_lines: int = 0
    openmetrics: bool = False
    saw_eof: bool = False
    #: At least one ``# TYPE`` line was seen (a Prometheus page, even without samples).
    declared: bool = False
    #: More than ``max_samples`` wanted samples: the rest were not materialised.
    truncated: bool = False
    #: Exact repeats of a wanted series already seen (same name and labels), not in samples.
    duplicates: list[Sample] = field(default_factory=list)

    def get(self, name: str) -> list[Sample]:
        return self.samples.get(name, [])

    def has(self, name: str) -> bool:
        return bool(self.samples.get(name))

    def _problem(self, line_number: int, line: str, reason: str) -> None:
        self.malformed += 1
        if len(self.problems) < MAX_PROBLEMS:
            echo = line if len(line) <= _MAX_LINE_ECHO else line[:_MAX_LINE_ECHO] + "..."
            self.problems.append(Problem(line_number, echo, reason))


class _LineError(ValueError):
    pass


#: A series: its sample name and its sorted labels.
_SeriesKey = tuple[str, tuple[tuple[str, str], ...]]
_DUPLICATE = "duplicate series (same name and labels)"


def _keep(page: Page, sample: Sample, seen: set[_SeriesKey], max_samples: int) -> bool:
    """Materialise a wanted sample unless ``max_samples`` series are kept already (the page is
    then truncated). False for a repeat of a kept series: it goes to ``page.duplicates`` and
    the caller reports its line."""
    if len(seen) >= max_samples:
        page.truncated = True
        return True
    key = (sample.name, tuple(sorted(sample.labels.items())))
    if key in seen:
        page.duplicates.append(sample)
        return False
    seen.add(key)
    page.samples.setdefault(sample.name, []).append(sample)
    return True


def parse(
    text: str,
    *,
    wanted: Iterable[str] | None = None,
    openmetrics: bool | None = None,
    validate_all: bool = False,
    max_line_length: int = MAX_LINE_LENGTH,
    max_samples: int = MAX_SAMPLES,
) -> Page:
    """Parse an exposition page.

    ``wanted``: exact sample names to materialise (``None`` = all). ``openmetrics``: the
    format if known from the Content-Type; ``None`` detects it from a ``# EOF`` line.
    Timestamps are returned in seconds for both formats (text format prints milliseconds).
    """
    page = Page()
    if openmetrics is None:
        stripped = text.rstrip()
        openmetrics = stripped.endswith("# EOF")
    page.openmetrics = openmetrics
    if wanted is not None and not validate_all:
        fast = _parse_wanted(page, text, frozenset(wanted), max_line_length, max_samples)
        if fast is not None:
            return fast
        page = Page(openmetrics=openmetrics)  # a page the fast path declines: line by line
    want_all = wanted is None
    wanted_set = frozenset(wanted) if wanted is not None else frozenset()
    # startswith() with a tuple runs in C: a cheap first filter before the exact check.
    prefixes = tuple(sorted(wanted_set))
    first_sample_checked = False
    seen: set[_SeriesKey] = set()

    for index, line in enumerate(text.split("\n")):
        if not line:
            continue
        if len(line) > max_line_length:
            page._problem(index + 1, line, f"line longer than {max_line_length} characters")
            continue
        first = line[0]
        if first == "#":
            _comment(page, line, index + 1)
            continue
        if page.saw_eof:
            page._problem(index + 1, line, "content after # EOF")
            continue
        if line[-1] == "\r":
            line = line[:-1]
            if not line:
                continue
        if want_all or line.startswith(prefixes):
            try:
                sample = _sample(line, openmetrics=openmetrics)
            except _LineError as exc:
                page._problem(index + 1, line, str(exc))
                continue
            page.valid_lines += 1
            if (want_all or sample.name in wanted_set) and not _keep(
                page, sample, seen, max_samples
            ):
                page._problem(index + 1, line, _DUPLICATE)
            continue
        if validate_all or not first_sample_checked:
            # Always validate the first unrelated sample line, so that a page of garbage is
            # recognised even when it contains none of the wanted names.
            first_sample_checked = True
            if first in _NAME_START and _valid_unwanted(line):
                page.valid_lines += 1
            else:
                page._problem(index + 1, line, "not a sample line")
    if page.truncated:
        page._problem(0, "", f"more than {max_samples} samples of the wanted families")
    return page


#: Compiled finders per wanted set (the adapters' sets are few and fixed).
_FINDERS: dict[frozenset[str], tuple[re.Pattern[str], tuple[str, ...]]] = {}
#: The start of the next line that is neither a comment nor empty.
_NEXT_SAMPLE_LINE = re.compile(r"\n(?=[^#\n])")
#: The end marker after "# ": "EOF" and only whitespace to the end of its line (the line
#: loop's ``line.rstrip() == "# EOF"``; "# EOFx" is a comment).
_EOF_REST = r"EOF[^\S\n]*(?=\n|\Z)"
_EOF_LINE = re.compile(rf"\n# {_EOF_REST}")
_FAMILY_SUFFIXES = ("_total", "_created", "_sum", "_count", "_bucket")


def family_names(samples: Iterable[str]) -> set[str]:
    """The names the families of ``samples`` may be declared under (TYPE and HELP lines): each
    sample name as it is and without its ``_total``/``_created``/``_sum``/``_count``/``_bucket``
    suffix."""
    names = set(samples)
    return names | {n.removesuffix(sfx) for n in names for sfx in _FAMILY_SUFFIXES}


def name_trie(words: Iterable[str]) -> str:
    """A regular expression matching exactly ``words``, factored by common prefixes: at each
    line of a page the engine then follows one branch per character instead of trying every
    name (a vLLM page's lines all start ``vllm:``, as do the adapter's 26 names)."""
    tree: dict[str, Any] = {}
    for word in words:
        node = tree
        for ch in word:
            node = node.setdefault(ch, {})
        node[""] = {}

    def build(node: dict[str, Any]) -> str:
        end = "" in node
        branches = [re.escape(ch) + build(child) for ch, child in sorted(node.items()) if ch]
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 and not end else f"(?:{'|'.join(branches)})"
        return body + "?" if end else body

    return build(tree)


def _finders(wanted: frozenset[str]) -> tuple[re.Pattern[str], tuple[str, ...]]:
    """For one wanted set: one pattern finding, in a single pass over the page, the TYPE
    lines of the wanted families (groups 1 and 2), the ``# EOF`` lines (no group) and the
    wanted sample lines (group 3), and the names as a prefix tuple. The pattern starts with a newline (the caller prepends one
    to the page). One pass, not one for TYPE lines and one for samples: each pass over a
    53 KB vLLM page costs about 50 us, most of the parse."""
    found = _FINDERS.get(wanted)
    if found is None:
        names = name_trie(wanted)
        fams = name_trie(family_names(wanted))
        found = (
            re.compile(
                rf"\n(?:# (?:TYPE[ \t]+({fams})[ \t]+(\S+)|{_EOF_REST})"
                rf"|((?:{names})(?=[{{ \t\r\n]|$)[^\n]*))"
            ),
            tuple(sorted(wanted)),
        )
        if len(_FINDERS) < 64:
            _FINDERS[wanted] = found
    return found


def _parse_wanted(
    page: Page, text: str, wanted: frozenset[str], max_line_length: int, max_samples: int
) -> Page | None:
    """The daemon's path: the same result as the line loop, with the scanning done in C, so
    only the wanted lines (a few dozen of a page's hundreds) and the first unrelated one are
    examined in Python. ``Page.types`` holds the wanted families' declarations only. None for
    a page with content after ``# EOF`` (the line loop reports each such line)."""
    framed = "\n" + text
    finder, prefixes = _finders(wanted)
    page.declared = "\n# TYPE " in framed
    seen: set[_SeriesKey] = set()
    types = page.types
    #: Where the first "# EOF" line ends, found by the same pass (a separate search for it
    #: scanned the whole page again whenever it had none: every text-format page).
    eof_end = -1
    for match in finder.finditer(framed) if wanted else ():
        family, line = match.group(1, 3)
        if family is not None:
            types[family] = match.group(2)
            continue
        if line is None:
            if eof_end < 0:
                eof_end = match.end()
            continue
        if len(line) > max_line_length:
            page._problem(
                _line_number(framed, match), line, f"line longer than {max_line_length} characters"
            )
            continue
        if line[-1:] == "\r":
            line = line[:-1]
        try:
            sample = _sample(line, openmetrics=page.openmetrics)
        except _LineError as exc:
            page._problem(_line_number(framed, match), line, str(exc))
            continue
        page.valid_lines += 1
        if sample.name in wanted and not _keep(page, sample, seen, max_samples):
            page._problem(_line_number(framed, match), line, _DUPLICATE)
    if not wanted:
        eof_end = _eof_end(framed)
    if eof_end >= 0 and framed[eof_end:].strip():
        # Content after the end marker (a second one included: the first is the end): the
        # line loop reports each line, and reads none of its samples.
        return None
    page.saw_eof = eof_end >= 0
    # The first unrelated sample line is validated, so that a page of garbage is recognised
    # even when it contains none of the wanted names.
    position = 0
    while (found := _NEXT_SAMPLE_LINE.search(framed, position)) is not None:
        start = found.end()
        end = framed.find("\n", start)
        line = framed[start : len(framed) if end < 0 else end]
        position = start
        if line.startswith(prefixes) if prefixes else False:
            continue
        if line[-1:] == "\r":
            line = line[:-1]
            if not line:
                continue
        number = framed.count("\n", 0, start)
        if len(line) > max_line_length:
            page._problem(number, line, f"line longer than {max_line_length} characters")
        elif line[0] in _NAME_START and _valid_unwanted(line):
            page.valid_lines += 1
        else:
            page._problem(number, line, "not a sample line")
        break
    if page.truncated:
        page._problem(0, "", f"more than {max_samples} samples of the wanted families")
    return page


def _eof_end(framed: str) -> int:
    """Where the first ``# EOF`` line of the newline-framed page ends, or -1."""
    found = _EOF_LINE.search(framed)
    return -1 if found is None else found.end()


def _line_number(framed: str, match: re.Match[str]) -> int:
    """The line number of a match in the newline-framed page (for a problem report: rare)."""
    return framed.count("\n", 0, match.start() + 1)


def _valid_unwanted(line: str) -> bool:
    match = _SAMPLE_LINE_RE.fullmatch(line)
    if match is None:
        return False
    value, timestamp = match.groups()
    try:
        float(value)
        if timestamp is not None:
            float(timestamp)
    except ValueError:
        return False
    return True


def _comment(page: Page, line: str, line_number: int) -> None:
    if line.startswith("# TYPE "):
        page.declared = True
        parts = line.split(None, 3)
        if len(parts) == 4:
            page.types[parts[2]] = parts[3].strip()
        else:
            page._problem(line_number, line, "TYPE line without a name and a type")
    elif line.rstrip() == "# EOF":
        page.saw_eof = True
    # HELP, UNIT and free comments carry nothing specmon needs.


#: The common sample line, whole: a name, a label set seen before (its body is looked up in
#: ``_LABEL_CACHE``), one space and an unsigned decimal value, nothing after. Anything else
#: (timestamps, exemplars, signs, NaN, extra blanks, a label set not parsed before) goes the
#: careful way below, which gives the same result for these lines.
_PLAIN_SAMPLE_RE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^}]*)\})? ([0-9][0-9.eE+-]*)")


def _sample(line: str, *, openmetrics: bool) -> Sample:
    plain = _PLAIN_SAMPLE_RE.fullmatch(line)
    if plain is not None:
        name, body, raw = plain.groups()
        cached = () if body is None else _LABEL_CACHE.get(body)
        if cached is not None:
            try:
                return Sample(name, dict(cached), float(raw), None, raw)
            except ValueError:
                pass  # "1e", "1..2": the careful way names the problem
    return _sample_careful(line, openmetrics=openmetrics)


def _sample_careful(line: str, *, openmetrics: bool) -> Sample:
    match = _NAME_RE.match(line)
    if match is None:
        raise _LineError("invalid metric name")
    name = match.group()
    pos = match.end()
    labels: dict[str, str] = {}
    if pos < len(line) and line[pos] == "{":
        labels, pos = _labels(line, pos + 1)
    rest = line[pos:]
    if not rest or rest[0] not in " \t":
        raise _LineError("expected a space before the value")
    # OpenMetrics exemplars follow " # "; they are not part of the sample.
    hash_at = rest.find(" # ") if openmetrics else -1
    if hash_at >= 0:
        rest = rest[:hash_at]
    fields = rest.split()
    if not fields or len(fields) > 2:
        raise _LineError("expected a value and an optional timestamp")
    raw = fields[0]
    value = _float(raw)
    timestamp: float | None = None
    if len(fields) == 2:
        ts = _float(fields[1])
        if not math.isfinite(ts):
            raise _LineError("timestamp is not a finite number")
        timestamp = ts if openmetrics else ts / 1000.0
    return Sample(name, labels, value, timestamp, raw)


def _float(token: str) -> float:
    try:
        return float(token)
    except ValueError:
        raise _LineError(f"invalid number {token[:40]!r}") from None


#: Label sets parsed before (the same series recur on every page of every target), by
#: their text; bounded in count and length (a hostile page cannot grow it), cleared when full.
_LABEL_CACHE: dict[str, tuple[tuple[str, str], ...]] = {}
_LABEL_CACHE_MAX = 4096
_LABEL_CACHE_BODY = 256


def _labels(line: str, pos: int) -> tuple[dict[str, str], int]:
    """Parse ``name="value",...}`` starting just after ``{``; return labels and end position."""
    close = line.find("}", pos)
    if close < 0:
        raise _LineError("unterminated label set")
    body = line[pos:close]
    cached = _LABEL_CACHE.get(body)
    if cached is not None:
        return dict(cached), close + 1
    if "\\" not in body and body.count('"') % 2 == 0:
        # Fast path: no escapes, and the first "}" is not inside a quoted value.
        labels: dict[str, str] = {}
        consumed = 0
        for m in _SIMPLE_LABELS_RE.finditer(body):
            if m.start() != consumed or m.group(1) in labels:
                break
            labels[m.group(1)] = m.group(2)
            consumed = m.end()
        else:
            if not body[consumed:].strip():
                if len(body) <= _LABEL_CACHE_BODY:
                    if len(_LABEL_CACHE) >= _LABEL_CACHE_MAX:
                        _LABEL_CACHE.clear()
                    _LABEL_CACHE[body] = tuple(labels.items())
                return labels, close + 1
    # Escapes, or something wrong: the careful parser says exactly what.
    return _labels_slow(line, pos)


def _labels_slow(line: str, pos: int) -> tuple[dict[str, str], int]:
    labels: dict[str, str] = {}
    n = len(line)
    while True:
        while pos < n and line[pos] in " \t":
            pos += 1
        if pos < n and line[pos] == "}":
            return labels, pos + 1
        m = _LABEL_NAME_RE.match(line, pos)
        if m is None:
            raise _LineError("invalid label name")
        key = m.group()
        pos = m.end()
        while pos < n and line[pos] in " \t":
            pos += 1
        if pos >= n or line[pos] != "=":
            raise _LineError(f"expected '=' after label {key!r}")
        pos += 1
        while pos < n and line[pos] in " \t":
            pos += 1
        if pos >= n or line[pos] != '"':
            raise _LineError(f"expected a quoted value for label {key!r}")
        pos += 1
        chars: list[str] = []
        while True:
            if pos >= n:
                raise _LineError(f"unterminated value for label {key!r}")
            ch = line[pos]
            if ch == "\\":
                if pos + 1 >= n:
                    raise _LineError(f"unterminated escape in label {key!r}")
                nxt = line[pos + 1]
                if nxt == "n":
                    chars.append("\n")
                elif nxt in '\\"':
                    chars.append(nxt)
                else:
                    # Text format 0.0.4 keeps unknown escapes as written.
                    chars.append("\\" + nxt)
                pos += 2
                continue
            if ch == '"':
                pos += 1
                break
            chars.append(ch)
            pos += 1
        if key in labels:
            raise _LineError(f"duplicate label {key!r}")
        labels[key] = "".join(chars)
        while pos < n and line[pos] in " \t":
            pos += 1
        if pos < n and line[pos] == ",":
            pos += 1
            continue
        if pos < n and line[pos] == "}":
            return labels, pos + 1
        raise _LineError("expected ',' or '}' in label set")
