"""Metrics pages rendered from real captured pages (``templates/``).

A template is a page captured verbatim from a real server. At load time its lines are split
into static text and slots (the speculative-decoding counters, their ``_created`` siblings,
requests running, generated tokens); rendering fills the slots from a :class:`SimEngine`'s
counters in the engine's own number format and keeps every other family exactly as the real
server printed it. The per-position block is regenerated for the simulated chain length.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass
from enum import StrEnum
from importlib import resources

from prometheus_client.utils import floatToGoString as _float_to_go_string

from specmon.parser import family_names, name_trie
from specmon.sim.engine import SimEngine

__all__ = ["PAGE_KINDS", "PageKind", "PageTemplate", "load_template", "restrict_page"]


class PageKind(StrEnum):
    VLLM = "vllm"  # GET /metrics, single API server
    VLLM_MULTIPROC = "vllm-multiproc"  # --api-server-count 2 (multiprocess mode)
    VLLM_OPENMETRICS = "vllm-openmetrics"  # GET /metrics/ with OpenMetrics negotiated
    LLAMACPP = "llamacpp"
    SGLANG = "sglang"  # the early gauges-only page (sglang-synthetic.txt)
    SGLANG_CURRENT = "sglang-current"  # today's SGLang: new gauges and the verify counter
    SGLANG_ROUTER = "sglang-router"  # sgl-router /engine_metrics, sglang_ prefix
    TRTLLM = "trtllm"  # trtllm-serve /prometheus/metrics with per-position counters
    TGI = "tgi"  # TGI, tgi_request_skipped_tokens as a summary (newest releases)
    TGI_HISTOGRAM = "tgi-histogram"  # TGI releases that gave it buckets 0..speculate


@dataclass(frozen=True, slots=True)
class _TemplateInfo:
    file: str
    content_type: str
    model: str | None  # model name in the template, replaced by the simulated one
    engine_family: str  # vllm | llamacpp | sglang | trtllm | tgi
    #: Number format of the engine's exporter (prometheus_client, llama.cpp's %g, Rust).
    number: str = "go"


PAGE_KINDS: dict[PageKind, _TemplateInfo] = {
    PageKind.VLLM: _TemplateInfo(
        "vllm-0.32.0.txt", "text/plain; version=1.0.0; charset=utf-8", "tiny-llama", "vllm"
    ),
    PageKind.VLLM_MULTIPROC: _TemplateInfo(
        "vllm-0.32.0-multiproc.txt",
        "text/plain; version=1.0.0; charset=utf-8",
        "tiny-llama",
        "vllm",
    ),
    PageKind.VLLM_OPENMETRICS: _TemplateInfo(
        "vllm-0.32.0-openmetrics.txt",
        "application/openmetrics-text; version=1.0.0; charset=utf-8; escaping=underscores",
        "tiny-llama",
        "vllm",
    ),
    PageKind.LLAMACPP: _TemplateInfo(
        "llamacpp-b11434.txt", "text/plain; version=0.0.4", None, "llamacpp"
    ),
    PageKind.SGLANG: _TemplateInfo(
        "sglang-synthetic.txt", "text/plain; version=0.0.4; charset=utf-8", "qwen", "sglang"
    ),
    # Written from the engines' source, not captured (see templates/README.md).
    PageKind.SGLANG_CURRENT: _TemplateInfo(
        "sglang-current.txt", "text/plain; version=1.0.0; charset=utf-8", "qwen3-32b", "sglang"
    ),
    PageKind.SGLANG_ROUTER: _TemplateInfo(
        "sglang-router.txt", "text/plain; charset=utf-8", "qwen3-32b", "sglang", number="rust"
    ),
    PageKind.TRTLLM: _TemplateInfo(
        "trtllm-serve.txt", "text/plain; version=1.0.0; charset=utf-8", "Qwen3-8B", "trtllm"
    ),
    PageKind.TGI: _TemplateInfo(
        "tgi-summary.txt", "text/plain; charset=utf-8", None, "tgi", number="rust"
    ),
    PageKind.TGI_HISTOGRAM: _TemplateInfo(
        "tgi-histogram.txt", "text/plain; charset=utf-8", None, "tgi", number="rust"
    ),
}

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^\n]*\})?[ \t]+(\S+)(.*)$")
_POSITION = re.compile(r'position="\d+"')

# slot kinds
_DRAFTS, _DRAFT_TOKENS, _ACCEPTED = "drafts", "draft_tokens", "accepted"
_PER_POS, _CREATED, _PER_POS_CREATED = "per_pos", "created", "per_pos_created"
_RUNNING, _GENERATED, _SPEC_TEXT = "running", "generated", "spec_text"
_ACCEPT_LENGTH, _ACCEPT_RATE = "accept_length", "accept_rate"
# SGLang (today's)
_STEPS, _STEPS_ROOT, _VERIFY, _REQUESTS = "steps", "steps_root", "verify", "requests"
# TensorRT-LLM
_TRT_DRAFTED_POS, _TRT_LENGTH, _TRT_OVERHEAD, _TRT_INFO = (
    "trt_drafted_pos", "trt_length", "trt_overhead", "trt_info",
)  # fmt: skip
# TGI
_TGI_BUCKET, _TGI_QUANTILE, _TGI_SUM, _TGI_COUNT = (
    "tgi_bucket",
    "tgi_quantile",
    "tgi_sum",
    "tgi_count",
)
#: TGI's load series (``backends/v3/src/backend.rs``, ``queue.rs``): the router's wall time of
#: each prefill and decode call, and the size of each new batch.
_TGI_CALL_BUCKET, _TGI_NEXT_BUCKET = "tgi_call_bucket", "tgi_next_bucket"
#: The buckets TGI's router sets (``router/src/server.rs``): every ``*duration`` histogram
#: 0.0001 x 1.5^i for i = 1..35 (computed by repeated multiplication, as there), and
#: ``tgi_batch_next_size`` 1..1024.
_TGI_DURATION_BOUNDS: tuple[float, ...] = tuple(
    itertools.accumulate(range(35), lambda v, _: v * 1.5, initial=0.0001)
)[1:]
_TGI_NEXT_BOUNDS: tuple[float, ...] = tuple(float(x) for x in range(1, 1025))
#: Slots regenerated as a block (one line per position or bucket) from their first line.
_BLOCKS = {
    _PER_POS, _PER_POS_CREATED, _TRT_DRAFTED_POS, _TGI_BUCKET, _TGI_QUANTILE, _TGI_CALL_BUCKET,
    _TGI_NEXT_BUCKET,
}  # fmt: skip
#: Blocks with one block per label set (TGI's ``method``), not one per family.
_LABELLED_BLOCKS = {_TGI_CALL_BUCKET}
# Load series (docs/load-signals.md): counters and the bucket/sum/count of vLLM histograms.
_WAITING, _ENGINE_STEPS, _BUSY_RATIO, _DECODE_SECONDS = (
    "waiting", "engine_steps", "busy_ratio", "decode_s",
)  # fmt: skip
_HISTOGRAMS = {
    "inter_token_latency_seconds": "itl",
    "time_to_first_token_seconds": "ttft",
    "iteration_tokens_total": "iteration",
    "request_time_per_output_token_seconds": "tpot",
}
_LE = re.compile(r'le="([^"]*)"')

_SPEC_SLOTS = {
    _DRAFTS, _DRAFT_TOKENS, _ACCEPTED, _PER_POS, _CREATED, _PER_POS_CREATED, _SPEC_TEXT,
    _ACCEPT_LENGTH, _ACCEPT_RATE, _STEPS, _STEPS_ROOT, _VERIFY, _TRT_DRAFTED_POS, _TRT_LENGTH,
    _TRT_OVERHEAD, _TRT_INFO,
}  # fmt: skip
_SPEC_INFO = re.compile(r'spec_num_tokens="\d+"')
_QUANTILE = re.compile(r'quantile="[^"]*"')
#: metrics-exporter-prometheus's default summary quantiles.
_QUANTILES = ("0", "0.5", "0.9", "0.95", "0.99", "0.999", "1")


def go_float(value: float) -> str:
    """Python prometheus_client's number format, which vLLM and SGLang print with."""
    return str(_float_to_go_string(value))  # type: ignore[no-untyped-call]


_RESTRICTERS: dict[frozenset[str], re.Pattern[str]] = {}


def _restricter(wanted: frozenset[str]) -> re.Pattern[str]:
    """One pattern finding, in page order, the wanted sample lines and the HELP/TYPE lines of
    every family they may belong to (group 1: the line, group 2: a comment's family)."""
    pattern = _RESTRICTERS.get(wanted)
    if pattern is None:
        families = family_names(wanted)
        families |= {
            n.removesuffix("_created") + "_total" for n in wanted if n.endswith("_created")
        }

        # Each match starts at a newline (the page is framed with one): a literal the
        # engine searches for quickly, where ``^`` would be tried at every character.
        pattern = re.compile(
            rf"\n((?:# (?:HELP|TYPE) ({name_trie(families)})(?= |\n|$)"
            rf"|(?:{name_trie(wanted)})(?=[{{ ]))[^\n]*)"
        )
        if len(_RESTRICTERS) < 64:
            _RESTRICTERS[wanted] = pattern
    return pattern


def restrict_page(text: str, names: Collection[str]) -> str:
    """``text`` (a classic-format page) as prometheus_client serves it for ``?name[]=...``
    (``RestrictedRegistry``): only the samples whose name is one of ``names``, and the
    ``# HELP``/``# TYPE`` lines of the families that keep at least one. One quirk kept: the
    classic format prints a counter's ``_created`` samples as a family of their own, and a
    counter restricted to its ``_created`` samples still prints the ``_total`` header. (A real
    server may also reorder the families, since it walks a set of collectors; readers do not
    depend on the order.) The scanning is one regular expression, so that the light fleet
    can serve a thousand filtered pages cheaply."""
    out: list[str] = []
    header: list[str] = []  # the comments of the family being read, until a sample is kept
    dropped: list[str] = []  # the comments of the family before it, if it kept no sample
    family = ""
    for match in _restricter(frozenset(names)).finditer("\n" + text):
        line, name = match.group(1) + "\n", match.group(2)
        if name is not None:
            if header and name == family:
                header.append(line)
            else:
                dropped, header, family = header, [line], name
            continue
        if header:
            counter = family.removesuffix("_created") + "_total"
            if family.endswith("_created") and dropped and dropped[0].split(" ", 3)[2] == counter:
                out.extend(dropped)
            out.extend(header)
        header = dropped = []
        out.append(line)
    return "".join(out)


def _base(name: str) -> str:
    for prefix in ("vllm:", "vllm_", "llamacpp:", "sglang:", "sglang_", "trtllm_"):
        if name.startswith(prefix):
            return name[len(prefix) :]
    return name


def _classify(base: str) -> str | None:
    if base.startswith("spec_decode_num_accepted_tokens_per_pos"):
        return _PER_POS_CREATED if base.endswith("_created") else _PER_POS
    newer = {
        # TensorRT-LLM's per-position counters (the accepted ones fill the per-position slot)
        "spec_decode_accepted_tokens_total": _PER_POS,
        "spec_decode_drafted_tokens_total": _TRT_DRAFTED_POS,
        "spec_decode_acceptance_length": _TRT_LENGTH,
        "spec_decode_draft_overhead": _TRT_OVERHEAD,
        "speculative_config_info": _TRT_INFO,
        # today's SGLang
        "spec_num_steps": _STEPS,
        "spec_num_draft_tokens": _STEPS_ROOT,
        "spec_verify_calls_total": _VERIFY,
        "num_requests_total": _REQUESTS,
        "num_running_reqs": _RUNNING,
        # TGI
        "tgi_request_skipped_tokens_bucket": _TGI_BUCKET,
        "tgi_request_skipped_tokens": _TGI_QUANTILE,
        "tgi_request_skipped_tokens_sum": _TGI_SUM,
        "tgi_request_skipped_tokens_count": _TGI_COUNT,
        "tgi_batch_current_size": _RUNNING,
        "tgi_request_generated_tokens_sum": _GENERATED,
        "tgi_batch_inference_duration_bucket": _TGI_CALL_BUCKET,
        "tgi_batch_inference_duration_sum": "tgi_call:sum",
        "tgi_batch_inference_duration_count": "tgi_call:count",
        "tgi_batch_next_size_bucket": _TGI_NEXT_BUCKET,
        "tgi_batch_next_size_sum": "tgi_next:sum",
        "tgi_batch_next_size_count": "tgi_next:count",
    }
    if base in newer:
        return newer[base]
    table = {
        "spec_decode_num_drafts": _DRAFTS,
        "spec_decode_num_draft_tokens": _DRAFT_TOKENS,
        "spec_decode_num_accepted_tokens": _ACCEPTED,
    }
    for stem, slot in table.items():
        if base in (stem, stem + "_total"):
            return slot
        if base == stem + "_created":
            return _CREATED
    if base == "num_requests_running" or base == "requests_processing":
        return _RUNNING
    if base in ("generation_tokens_total", "tokens_predicted_total", "tokens_predicted"):
        return _GENERATED
    if base == "spec_accept_length":
        return _ACCEPT_LENGTH
    if base == "spec_accept_rate":
        return _ACCEPT_RATE
    if base in ("num_requests_waiting", "requests_deferred"):
        return _WAITING
    if base in ("n_decode_total", "n_decode"):
        return _ENGINE_STEPS
    if base == "n_busy_slots_per_decode":
        return _BUSY_RATIO
    if base in ("tokens_predicted_seconds_total", "tokens_predicted_seconds"):
        return _DECODE_SECONDS
    for family, short in _HISTOGRAMS.items():
        for part in ("bucket", "sum", "count"):
            if base == f"{family}_{part}":
                return f"hist:{short}:{part}"
    return None


def rust_number(value: float) -> str:
    """Rust's f64 display (metrics-exporter-prometheus, openmetrics_parser): 1780, 0.5."""
    if value.is_integer():
        return str(int(value))
    return repr(value)


def llamacpp_number(value: float) -> str:
    """llama-server prints counters like C's %g with 6 significant digits (1.23457e+06)."""
    return f"{value:g}"


@dataclass(frozen=True, slots=True)
class _Slot:
    kind: str
    head: str  # the line up to the value, with the simulated model name
    tail: str  # anything after the value (timestamps), usually ""


class PageTemplate:
    def __init__(
        self,
        text: str,
        *,
        content_type: str,
        model: str | None,
        family: str,
        number: Callable[[float], str] = go_float,
        per_pos_number: Callable[[float], str] | None = None,
    ) -> None:
        self.content_type = content_type
        self.family = family
        self._template_model = model
        self._number = number
        self._per_pos_number = per_pos_number or number
        self._parts: list[str | _Slot] = []
        self._by_model: dict[str, list[str | _Slot]] = {}
        seen_pos: set[str] = set()
        buffer: list[str] = []

        def flush() -> None:
            if buffer:
                self._parts.append("".join(buffer))
                buffer.clear()

        for line in text.splitlines(keepends=True):
            stripped = line.rstrip("\n")
            if stripped.startswith("#"):
                words = stripped.split(None, 3)
                family_slot = _classify(_base(words[2])) if len(words) >= 3 else None
                if (
                    words[1:2]
                    and words[1] in ("HELP", "TYPE", "UNIT")
                    and family_slot in _SPEC_SLOTS
                ):
                    flush()
                    # tail records which family the header belongs to
                    self._parts.append(_Slot(_SPEC_TEXT, line, family_slot or ""))
                    continue
                buffer.append(line)
                continue
            match = _SAMPLE.match(stripped)
            slot = _classify(_base(match.group(1))) if match else None
            if match is None or slot is None:
                buffer.append(line)
                continue
            head = stripped[: match.start(3)]
            if slot in _BLOCKS:
                key = slot + _LE.sub("", head) if slot in _LABELLED_BLOCKS else slot
                if key in seen_pos:
                    continue  # the block is regenerated from its first line
                seen_pos.add(key)
            flush()
            self._parts.append(_Slot(slot, head, match.group(4)))
        flush()

    def _parts_for(self, model: str) -> list[str | _Slot]:
        """The template's parts with the simulated model's name, computed once per model."""
        parts = self._by_model.get(model)
        if parts is None:
            tm = self._template_model
            if tm is None:
                parts = self._parts
            else:
                label = model.replace("\\", "\\\\").replace('"', '\\"')
                old, new = f'model_name="{tm}"', f'model_name="{label}"'
                parts = [
                    p.replace(old, new)
                    if isinstance(p, str)
                    else _Slot(p.kind, p.head.replace(old, new), p.tail)
                    for p in self._parts
                ]
            self._by_model[model] = parts
        return parts

    def render(
        self,
        engine: SimEngine,
        *,
        model: str,
        running: float | None = None,
        draft_cost: float | None = None,
    ) -> str:
        """The page for ``engine``'s counters now. ``draft_cost``: the simulated c behind
        TensorRT-LLM's draft overhead gauge (o = k c / (1 + k c)); default 0.1."""
        c = engine.counters
        s = engine.settings
        spec = s.speculation
        k = s.chain_length
        out: list[str] = []
        generated = float(c.generation_tokens)
        if self.family == "sglang":
            # SGLang counts each request's first token (from prefill) too.
            generated += c.requests_finished
        values = {
            _DRAFTS: float(c.drafts),
            _DRAFT_TOKENS: float(c.draft_tokens),
            _ACCEPTED: float(c.accepted),
            _RUNNING: float(
                running if running is not None else s.requests_running + engine.active_requests
            ),
            _GENERATED: generated,
            _STEPS: float(k),
            _STEPS_ROOT: float(k + 1),
            _VERIFY: float(c.drafts),
            _REQUESTS: float(c.requests_finished),
            _WAITING: 0.0,
            _ENGINE_STEPS: float(c.engine_steps),
            _BUSY_RATIO: c.busy_slots / max(c.engine_steps, 1),
            _DECODE_SECONDS: c.decode_seconds,
        }
        histograms = {"itl": c.itl, "ttft": c.ttft, "iteration": c.iteration, "tpot": c.tpot}
        # Per-position families that appear only with the first finished request.
        lazy = self.family in ("llamacpp", "trtllm")
        hidden = not c.positions_published
        for part in self._parts_for(model):
            if isinstance(part, str):
                out.append(part)
                continue
            kind = part.kind
            if kind in _SPEC_SLOTS and not spec and self.family != "llamacpp":
                # vLLM, SGLang and TensorRT-LLM drop the families; llama-server always
                # prints its speculative counters (at 0 when no draft model is loaded).
                continue
            if kind == _SPEC_TEXT:
                if lazy and hidden and part.tail in (_PER_POS, _TRT_DRAFTED_POS):
                    continue
                if self.family == "sglang" and hidden and part.tail == _VERIFY:
                    continue
                out.append(part.head)
            elif kind == _VERIFY and hidden:
                continue  # SGLang creates the child when the first request finishes
            elif kind in values:
                out.append(f"{part.head}{self._number(values[kind])}{part.tail}\n")
            elif kind == _CREATED:
                out.append(f"{part.head}{go_float(engine.started_wall)}{part.tail}\n")
            elif kind == _PER_POS:
                if lazy and hidden:
                    continue
                for i, count in enumerate(c.per_pos):
                    line_head = _POSITION.sub(f'position="{i}"', part.head)
                    out.append(f"{line_head}{self._per_pos_number(float(count))}{part.tail}\n")
            elif kind == _PER_POS_CREATED:
                for i in range(len(c.per_pos)):
                    line_head = _POSITION.sub(f'position="{i}"', part.head)
                    out.append(f"{line_head}{go_float(engine.started_wall)}{part.tail}\n")
            elif kind == _TRT_DRAFTED_POS:
                if hidden:
                    continue
                # Every simulated draft is a full chain: k tokens, one at each position.
                for i in range(k):
                    line_head = _POSITION.sub(f'position="{i}"', part.head)
                    out.append(f"{line_head}{self._number(float(c.drafts))}{part.tail}\n")
            elif kind.startswith("hist:"):
                _, short, piece = kind.split(":")
                hist = histograms[short]
                if piece == "sum":
                    value = hist.sum
                elif piece == "count":
                    value = float(hist.count)
                else:
                    found = _LE.search(part.head)
                    le = float(found.group(1)) if found else math.inf
                    value = float(hist.cumulative(le))
                out.append(f"{part.head}{self._number(value)}{part.tail}\n")
            elif kind in (_ACCEPT_LENGTH, _TRT_LENGTH):
                out.append(f"{part.head}{self._number(_sglang_length(engine))}{part.tail}\n")
            elif kind == _ACCEPT_RATE:
                out.append(f"{part.head}{self._number(_sglang_rate(engine))}{part.tail}\n")
            elif kind == _TRT_OVERHEAD:
                cost = 0.1 if draft_cost is None else draft_cost
                overhead = k * cost / (1.0 + k * cost)
                out.append(f"{part.head}{self._number(overhead)}{part.tail}\n")
            elif kind == _TRT_INFO:
                head = _SPEC_INFO.sub(f'spec_num_tokens="{k}"', part.head)
                out.append(f"{head}{self._number(1.0)}{part.tail}\n")
            elif kind in (_TGI_BUCKET, _TGI_QUANTILE, _TGI_SUM, _TGI_COUNT):
                out.extend(self._tgi(kind, part, engine))
            elif kind in (_TGI_CALL_BUCKET, _TGI_NEXT_BUCKET) or kind.startswith("tgi_"):
                out.extend(self._tgi_load(kind, part, engine))
        return "".join(out)

    def _tgi_load(self, kind: str, part: _Slot, engine: SimEngine) -> list[str]:
        """TGI's call timing (``method="decode"`` or ``"prefill"``: one observation per call,
        its wall time) and new-batch sizes, from the simulator's histograms."""
        c = engine.counters
        if kind in (_TGI_NEXT_BUCKET, "tgi_next:sum", "tgi_next:count"):
            hist, bounds = c.new_batches, _TGI_NEXT_BOUNDS
        else:
            hist = c.prefill_calls if 'method="prefill"' in part.head else c.decode_calls
            bounds = _TGI_DURATION_BOUNDS
        if kind.endswith(":sum"):
            return [f"{part.head}{self._number(hist.sum)}{part.tail}\n"]
        if kind.endswith(":count"):
            return [f"{part.head}{self._number(float(hist.count))}{part.tail}\n"]
        lines = []
        for bound in (*bounds, math.inf):
            label = "+Inf" if math.isinf(bound) else self._number(bound)
            head = _LE.sub(f'le="{label}"', part.head)
            lines.append(f"{head}{self._number(float(hist.cumulative(bound)))}{part.tail}\n")
        return lines

    def _tgi(self, kind: str, part: _Slot, engine: SimEngine) -> list[str]:
        """TGI's tgi_request_skipped_tokens: one observation per request per generation
        step, the accepted draft tokens (0..k); each request's prefill step is observed as 0,
        and without speculation every step is."""
        c = engine.counters
        spec = engine.settings.speculation
        k = engine.settings.chain_length if spec else 0
        # Decode request-steps: every one drafts when speculating; the ITL histogram holds one
        # observation per decode request-step either way.
        prefilled = round(c.new_batches.sum)
        count = (c.drafts if spec else c.itl.count) + prefilled
        # cumulative[j] = steps that accepted at most j tokens = count - per_pos[j]
        cumulative = [count - (c.per_pos[j] if spec else 0) for j in range(k)] + [count]
        total = c.accepted if spec else 0
        if kind == _TGI_SUM:
            return [f"{part.head}{self._number(float(total))}{part.tail}\n"]
        if kind == _TGI_COUNT:
            return [f"{part.head}{self._number(float(count))}{part.tail}\n"]
        lines = []
        if kind == _TGI_BUCKET:
            bounds = [*(str(j) for j in range(k + 1)), "+Inf"]
            for bound, value in zip(bounds, [*cumulative, count], strict=True):
                head = _LE.sub(f'le="{bound}"', part.head)
                lines.append(f"{head}{self._number(float(value))}{part.tail}\n")
            return lines
        for q in _QUANTILES:
            rank = float(q) * count
            value = next((j for j, cum in enumerate(cumulative) if cum >= max(rank, 1)), k)
            head = _QUANTILE.sub(f'quantile="{q}"', part.head)
            lines.append(f"{head}{self._number(float(value if count else 0))}{part.tail}\n")
        return lines


def _sglang_length(engine: SimEngine) -> float:
    """SGLang's gauge: mean acceptance length over its last logging interval (here: the
    configured survival's expectation, which is what a long interval converges to)."""
    return 1.0 + sum(engine.settings.survival)


def _sglang_rate(engine: SimEngine) -> float:
    s = engine.settings
    return sum(s.survival) / s.chain_length


def load_template(kind: PageKind) -> PageTemplate:
    info = PAGE_KINDS[kind]
    text = resources.files("specmon.sim").joinpath("templates", info.file).read_text("utf-8")
    if info.engine_family == "llamacpp":
        return PageTemplate(
            text,
            content_type=info.content_type,
            model=None,
            family="llamacpp",
            number=llamacpp_number,
            per_pos_number=lambda v: str(int(v)),
        )
    return PageTemplate(
        text,
        content_type=info.content_type,
        model=info.model,
        family=info.engine_family,
        number=rust_number if info.number == "rust" else go_float,
    )
