"""The target half of ``/metrics``: each target rendered into text, joined per fetch.

A target's new view (its scrape, a failure, a reload) is turned into text (one string of
sample lines per family) when it arrives, or, with :attr:`Exposition.defer` set, when
``/metrics`` is next fetched: a target scraped every 5 s under a Prometheus fetching every
15 s is then rendered once in three scrapes (side by side at 1,000 targets every 5 s: 0.858
of the CPU per scrape; bench/results/HISTORY.md, 2026-12-05). The daemon defers while the
overload governor's last period had every target on schedule with room to spare
(:func:`specmon.daemon.governor.defers`), and renders at each scrape otherwise. A fetch
renders the views that waited, in slices with the event loop turning between them
(:meth:`Exposition.refresh`), then joins the ready strings under each family's HELP and TYPE lines, in the metric table's
order; the compressed target half (gzip, either format) is kept until the next change. The
bytes are those prometheus_client would write for the same samples: sample lines are the
same in both formats (label names sorted, values with prometheus_client's own number
format); the header lines come from prometheus_client itself.
tests/daemon/test_metrics_contract.py holds the output to the golden pages.

The gzip stream is built so that the cached target half is never compressed again for a new
fetch: the target half is a raw deflate stream ended by a full flush (no final block, no
back-references into it), the per-fetch half (specmon's own instruments) follows as a second
raw deflate stream with the final block, and the gzip trailer's CRC-32 continues from the
cached half's. One gzip member, valid for every decoder.
"""

from __future__ import annotations

import asyncio
import struct
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache

import orjson
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.utils import floatToGoString

from specmon.daemon.collector import (
    Sample,
    check_labels,
    emit_target,
    health_samples,
)
from specmon.daemon.metrics import FAMILIES, Kind, MetricDef
from specmon.daemon.target import TargetView

__all__ = ["GZIP_LEVEL", "Exposition", "render_target"]

#: Views rendered between two turns of the event loop when a fetch renders the changed ones
#: (0.1-0.25 ms each with the default windows: a slice holds the loop for 10-25 ms, where
#: 1,000 targets rendered in one turn held it for about a quarter of a second).
RENDER_SLICE = 100

#: Fast compression: the page is mostly repeated label text, and level 1 keeps a 6 MB page
#: well under a tenth of a second.
GZIP_LEVEL = 1

#: Family name -> its sample lines for one target.
Fragment = Mapping[str, str]


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


#: A target's rendered series names with their labels ("name{a=\"1\",b=\"2\"} "), by
#: family and label values: the same series recur at every scrape, only their values change.
Prefixes = dict[tuple[str, tuple[str | None, ...]], str]
#: Past this many cached prefixes per target (series come and go: windows, positions,
#: models), the cache starts again.
_MAX_PREFIXES = 4096


def _prefix(sample: Sample) -> str:
    """A sample line up to its value, as both of prometheus_client's encoders write it:
    label names sorted, values escaped (no timestamps, no exemplars: specmon has neither)."""
    labels = sample.labels
    if not labels:
        return f"{sample.family.sample_name} "
    body = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items()))
    return f"{sample.family.sample_name}{{{body}}} "


def _go_float(value: float) -> str:
    """``prometheus_client.utils.floatToGoString`` for the finite values specmon exports
    (the collector drops the others): Python's shortest repr, handed to prometheus_client
    only where Go writes an exponent and Python does not (positive values with seven or
    more digits before the point), so the text is byte-for-byte what its encoders write."""
    text = repr(value)
    if value >= 1e6 and text.find(".") > 6:  # seven digits before the point: >= 1e6
        return str(floatToGoString(value))  # type: ignore[no-untyped-call]
    return text


#: Where orjson writes a float exactly as ``repr`` does: zero and magnitudes in [1e-4, 1e16)
#: (2,000,000 values checked when this was written, random bit patterns among them;
#: tests/daemon/test_metrics_contract.py checks 500,000 on every run). Outside it orjson
#: writes exponents its own way ("1e-5" for Python's "1e-05"), and from 1e6 up Go may write an
#: exponent where Python does not: ``_FAST_TOP`` keeps those values on :func:`_go_float`.
_FAST_BOTTOM = 1e-4
_FAST_TOP = 1e6


def _numbers(values: list[float]) -> list[str]:
    """Each value as prometheus_client writes it (``floatToGoString``), for finite values.

    Why orjson: Python's ``repr`` of a float is its shortest round-trip text but costs about
    0.5 us for the 16-17 digits of a ratio, and a target's scrape renders 70-150 of them;
    orjson writes the same shortest text for the whole list in one call (about 2 us for 74
    values), then the split (bench/results/HISTORY.md)."""
    if not values:
        return []
    texts = orjson.dumps(values)[1:-1].decode("ascii").split(",")
    for index, value in enumerate(values):
        if not (_FAST_BOTTOM <= value < _FAST_TOP) and value != 0.0:
            texts[index] = _go_float(value)
    return texts


class _Text:
    """A :class:`~specmon.daemon.collector.Sink` that keeps each series' rendered name and
    labels and its value, with no :class:`Sample` in between (a target scrape's 70-150
    series); :meth:`joined` writes every value at once (:func:`_numbers`). The label check
    runs when a series' prefix is first made: the prefix cache is keyed by the exact label
    values, so a cached prefix is one that passed it."""

    __slots__ = ("_constant", "_families", "_heads", "_prefixes", "_values")

    def __init__(self, constant: Mapping[str, str], prefixes: Prefixes) -> None:
        self._constant = constant
        self._prefixes = prefixes
        self._families: list[str] = []
        self._heads: list[str] = []
        self._values: list[float] = []

    def add(
        self, family: MetricDef, values: tuple[str | None, ...], value: float | int | None
    ) -> None:
        # exportable() written out: this runs for each of a target's 70-150 series on every
        # scrape (side by side at 1,000 targets, the call was about 1 % of a scrape;
        # bench/results/HISTORY.md).
        if value is None:
            return
        number = float(value)  # OverflowError for an int beyond a double: the caller drops all
        if number - number != 0.0:  # NaN or infinite: never exported
            return
        name = family.name
        key = (name, values)
        prefix = self._prefixes.get(key)
        if prefix is None:
            check_labels(family, values)
            prefix = self._prefixes[key] = _prefix(Sample(family, values, number, self._constant))
        self._families.append(name)
        self._heads.append(prefix)
        self._values.append(number)

    def joined(self) -> dict[str, str]:
        """Every family's sample lines as one string, each family's lines in the order they
        were added."""
        lines: dict[str, list[str]] = {}
        texts = _numbers(self._values)
        for name, head, text in zip(self._families, self._heads, texts, strict=True):
            found = lines.get(name)
            if found is None:
                lines[name] = [head, text, "\n"]
            else:
                found += (head, text, "\n")
        return {name: "".join(found) for name, found in lines.items()}


def render_target(view: TargetView, prefixes: Prefixes | None = None) -> dict[str, str]:
    """Every family's sample lines for one target (raises on a view that cannot be
    exported; the caller keeps the target's health lines only). ``prefixes``: the target's
    cache of rendered series names (keep one per target; its constant labels are fixed)."""
    if prefixes is None:
        prefixes = {}
    elif len(prefixes) > _MAX_PREFIXES:
        prefixes.clear()
    out = _Text(view.labels, prefixes)
    emit_target(view, out)
    return out.joined()


def _health_fragment(view: TargetView) -> dict[str, str]:
    out = _Text(view.labels, {})
    for sample in health_samples(view):
        out.add(sample.family, sample.values, sample.value)
    return out.joined()


@cache
def _headers(openmetrics: bool) -> dict[str, str]:
    """HELP and TYPE lines of every family, written by prometheus_client itself."""

    class _One:
        def __init__(self, metric: Metric) -> None:
            self._metric = metric

        def collect(self) -> list[Metric]:
            return [self._metric]

    out: dict[str, str] = {}
    for definition in FAMILIES:
        if definition.kind is Kind.HISTOGRAM:  # specmon's own: encoded by its registry
            continue
        metric: Metric = (
            CounterMetricFamily(definition.name, definition.help)
            if definition.kind is Kind.COUNTER
            else GaugeMetricFamily(definition.name, definition.help)
        )
        if openmetrics:
            text = generate_openmetrics(_One(metric)).decode()  # type: ignore[no-untyped-call]
            text = text.removesuffix("# EOF\n")
        else:
            text = generate_latest(_One(metric)).decode()
        out[definition.name] = text
    return out


@dataclass(slots=True)
class _Built:
    """A generation's target half, compressed: made when a compressed page is first asked
    for in the generation (a plain request does not pay for compressing megabytes it does
    not send: in-process, 1,000 targets, the default windows, 4.6 ms to join the 7 MB target
    half, 8.4 ms more to deflate it) and kept until the generation changes. The plain text
    is never kept: at fleet size a change comes every few milliseconds, so a kept page was
    almost never served twice, but it held 7.6 MB until the next scrape (to save memory,
    right after a fetch)."""

    deflated: bytes
    crc: int
    size: int


@dataclass(slots=True)
class Exposition:
    """Every target's rendered fragment, and the joined target half of ``/metrics``.

    ``on_error(target, exc)`` hears of a view that could not be exported (a bug), when it is
    rendered: that target keeps its ``specmon_up`` and scrape duration, every other target
    is unaffected.
    """

    on_error: Callable[[str, BaseException], None] | None = None
    _fragments: dict[str, Fragment] = field(default_factory=dict)
    _prefixes: dict[str, tuple[Mapping[str, str], Prefixes]] = field(default_factory=dict)
    #: True: a view waits to be rendered until the page is built (once per fetch at most);
    #: False: rendered when it arrives (at the scrape). The daemon defers only while the
    #: overload governor keeps every target on schedule (specmon/daemon/app.py): under
    #: overload the renders of a whole fleet at one fetch starved scrapes in flight without
    #: the loop ever looking late (bench/RESULTS.md, "Past the core").
    defer: bool = False
    #: Each target's newest view not rendered yet (its fragment is the previous view's).
    _pending: dict[str, TargetView] = field(default_factory=dict)
    _generation: int = 0
    _built: dict[bool, tuple[int, _Built]] = field(default_factory=dict)

    @property
    def generation(self) -> int:
        """Increases with every change of any target's series."""
        return self._generation

    def update(self, view: TargetView) -> None:
        """``view`` replaces the target's series: rendered now, or when the page is next
        built while :attr:`defer` is set."""
        if self.defer:
            self._pending[view.name] = view
        else:
            self._pending.pop(view.name, None)
            self._render(view)
        self._changed()

    def render_pending(self, limit: int | None = None) -> int:
        """Render up to ``limit`` (None: all) waiting views, oldest first; returns how many
        still wait."""
        pending = self._pending
        count = len(pending) if limit is None else min(limit, len(pending))
        for _ in range(count):
            name = next(iter(pending))
            self._render(pending.pop(name))
        return len(pending)

    async def refresh(self, *, slice_size: int = RENDER_SLICE) -> None:
        """Render every view waiting now, ``slice_size`` at a time with a turn of the event
        loop between slices (scrapes go on while a large fleet renders). Views that arrive
        meanwhile are rendered by the page itself; a steady stream of new ones cannot keep
        this going: it renders at most as many as waited when it was called."""
        left = len(self._pending)
        while left > 0 and self._pending:
            self.render_pending(min(slice_size, left))
            left -= slice_size
            if left > 0:
                await asyncio.sleep(0)

    def _render(self, view: TargetView) -> None:
        cached = self._prefixes.get(view.name)
        if cached is None or cached[0] != view.labels:  # new constant labels: start again
            cached = self._prefixes[view.name] = (dict(view.labels), {})
        try:
            fragment: Fragment = render_target(view, cached[1])
        except Exception as exc:  # one bad view must not cost the others their series
            if self.on_error is not None:
                self.on_error(view.name, exc)
            try:
                fragment = _health_fragment(view)
            except Exception:  # labels themselves unusable: nothing at all
                fragment = {}
        self._fragments[view.name] = fragment

    def remove(self, name: str) -> None:
        self._prefixes.pop(name, None)
        waited = self._pending.pop(name, None)
        if self._fragments.pop(name, None) is not None or waited is not None:
            self._changed()

    def _changed(self) -> None:
        """A new generation: the joined pages of the old one are let go now, not when the
        next fetch replaces them (at 1,000 targets, the default windows, a 7 MB plain page
        and its compressed form were otherwise held between fetches)."""
        self._generation += 1
        self._built.clear()

    def targets(self) -> list[str]:
        return sorted(self._fragments.keys() | self._pending.keys())

    def text(self, *, openmetrics: bool = False) -> bytes:
        """The target families, joined (without OpenMetrics' ``# EOF``)."""
        return self._join(openmetrics)

    def page(self, own: bytes, *, openmetrics: bool = False) -> bytes:
        """The whole page: the target families, then ``own`` (the registry's encoding of
        specmon's own instruments, ending in ``# EOF`` for OpenMetrics), joined in one
        piece (no second copy of the megabytes to append ``own``)."""
        return self._join(openmetrics, own.decode("utf-8"))

    def gzip_page(self, own: bytes, *, openmetrics: bool = False) -> bytes:
        """:meth:`page` as one gzip member, the target half compressed once per generation."""
        built = self._deflated(openmetrics)
        deflated_own = _deflate(own, last=True)
        crc = zlib.crc32(own, built.crc)
        size = built.size + len(own)
        header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
        trailer = struct.pack("<II", crc & 0xFFFFFFFF, size & 0xFFFFFFFF)
        return header + built.deflated + deflated_own + trailer

    def _deflated(self, openmetrics: bool) -> _Built:
        """The current generation's target half, compressed (see :class:`_Built`)."""
        cached = self._built.get(openmetrics)
        if cached is not None and cached[0] == self._generation:
            return cached[1]
        # Compressed a family at a time: the whole text is never held (at 10,000 instances
        # it is about 100 MB, twice over while it was joined and encoded, on top of the
        # daemon's resident set at every scrape of /metrics). The stream is the one a single
        # call over the joined text gives (no flush in between).
        stream = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS)
        parts: list[bytes] = []
        crc = size = 0
        for chunk in self._families(openmetrics):
            crc = zlib.crc32(chunk, crc)
            size += len(chunk)
            parts.append(stream.compress(chunk))
        parts.append(stream.flush(zlib.Z_FULL_FLUSH))
        built = _Built(b"".join(parts), crc, size)
        self._built[openmetrics] = (self._generation, built)
        return built

    def _families(self, openmetrics: bool) -> Iterator[bytes]:
        """The target half, one family (its HELP and TYPE, every target's lines) a piece."""
        self.render_pending()
        headers = _headers(openmetrics)
        fragments = [self._fragments[name] for name in sorted(self._fragments)]
        for definition in FAMILIES:
            name = definition.name
            lines = [f[name] for f in fragments if name in f]
            if lines:
                lines.insert(0, headers[name])
                yield "".join(lines).encode("utf-8")

    def _join(self, openmetrics: bool, tail: str = "") -> bytes:
        self.render_pending()
        headers = _headers(openmetrics)
        fragments = [self._fragments[name] for name in sorted(self._fragments)]
        pieces: list[str] = []
        for definition in FAMILIES:
            name = definition.name
            lines = [f[name] for f in fragments if name in f]
            if lines:
                pieces.append(headers[name])
                pieces.extend(lines)
        pieces.append(tail)
        return "".join(pieces).encode("utf-8")


def _deflate(data: bytes, *, last: bool = False) -> bytes:
    """``data`` as raw deflate blocks: ending on a byte boundary (a full flush), so that the
    target half compressed once per generation can be followed by the tail (specmon's own
    instruments) compressed per fetch; ``last``: the final block of the member."""
    stream = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS)
    return stream.compress(data) + stream.flush(zlib.Z_FINISH if last else zlib.Z_FULL_FLUSH)
