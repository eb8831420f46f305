"""Metrics pages rendered from real captured pages (``templates/``).

A template is a page captured verbatim from a real server. At load time its lines are split
into static text and slots (the speculative-decoding counters, their ``_created`` siblings,
requests running, generated tokens); rendering fills the slots from a :class:`SimEngine`'s
counters in the engine's own number format and keeps every other family exactly as the real
server printed it. The per-position block is regenerated for the simulated chain length.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from importlib import resources

from prometheus_client.utils import floatToGoString as _float_to_go_string

from specmon.sim.engine import SimEngine

__all__ = ["PAGE_KINDS", "PageKind", "PageTemplate", "load_template"]


class PageKind(StrEnum):
    VLLM = "vllm"  # GET /metrics, single API server
    VLLM_MULTIPROC = "vllm-multiproc"  # --api-server-count 2 (multiprocess mode)
    VLLM_OPENMETRICS = "vllm-openmetrics"  # GET /metrics/ with OpenMetrics negotiated
    LLAMACPP = "llamacpp"
    SGLANG = "sglang"


@dataclass(frozen=True, slots=True)
class _TemplateInfo:
    file: str
    content_type: str
    model: str | None  # model name in the template, replaced by the simulated one
    engine_family: str  # vllm | llamacpp | sglang


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
}

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^\n]*\})?[ \t]+(\S+)(.*)$")
_POSITION = re.compile(r'position="\d+"')

# slot kinds
_DRAFTS, _DRAFT_TOKENS, _ACCEPTED = "drafts", "draft_tokens", "accepted"
_PER_POS, _CREATED, _PER_POS_CREATED = "per_pos", "created", "per_pos_created"
_RUNNING, _GENERATED, _SPEC_TEXT = "running", "generated", "spec_text"
_ACCEPT_LENGTH, _ACCEPT_RATE = "accept_length", "accept_rate"
# Load series (docs/load-signals.md): counters and the bucket/sum/count of vLLM histograms.
_WAITING, _STEPS, _BUSY_RATIO, _DECODE_SECONDS = "waiting", "steps", "busy_ratio", "decode_s"
_HISTOGRAMS = {
    "inter_token_latency_seconds": "itl",
    "time_to_first_token_seconds": "ttft",
    "iteration_tokens_total": "iteration",
    "request_time_per_output_token_seconds": "tpot",
}
_LE = re.compile(r'le="([^"]*)"')

_SPEC_SLOTS = {
    _DRAFTS, _DRAFT_TOKENS, _ACCEPTED, _PER_POS, _CREATED, _PER_POS_CREATED, _SPEC_TEXT,
    _ACCEPT_LENGTH, _ACCEPT_RATE,
}  # fmt: skip


def go_float(value: float) -> str:
    """Python prometheus_client's number format, which vLLM and SGLang print with."""
    return str(_float_to_go_string(value))  # type: ignore[no-untyped-call]


def _base(name: str) -> str:
    for prefix in ("vllm:", "vllm_", "llamacpp:", "sglang:"):
        if name.startswith(prefix):
            return name[len(prefix) :]
    return name


def _classify(base: str) -> str | None:
    if base.startswith("spec_decode_num_accepted_tokens_per_pos"):
        return _PER_POS_CREATED if base.endswith("_created") else _PER_POS
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
        return _STEPS
    if base == "n_busy_slots_per_decode":
        return _BUSY_RATIO
    if base in ("tokens_predicted_seconds_total", "tokens_predicted_seconds"):
        return _DECODE_SECONDS
    for family, short in _HISTOGRAMS.items():
        for part in ("bucket", "sum", "count"):
            if base == f"{family}_{part}":
                return f"hist:{short}:{part}"
    return None


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
            if slot in (_PER_POS, _PER_POS_CREATED):
                if slot in seen_pos:
                    continue  # the block is regenerated from its first line
                seen_pos.add(slot)
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

    def render(self, engine: SimEngine, *, model: str, running: float | None = None) -> str:
        c = engine.counters
        s = engine.settings
        spec = s.speculation
        out: list[str] = []
        values = {
            _DRAFTS: float(c.drafts),
            _DRAFT_TOKENS: float(c.draft_tokens),
            _ACCEPTED: float(c.accepted),
            _RUNNING: float(
                running if running is not None else s.requests_running + engine.active_requests
            ),
            _GENERATED: float(c.generation_tokens),
            _WAITING: 0.0,
            _STEPS: float(c.engine_steps),
            _BUSY_RATIO: c.busy_slots / max(c.engine_steps, 1),
            _DECODE_SECONDS: c.decode_seconds,
        }
        histograms = {"itl": c.itl, "ttft": c.ttft, "iteration": c.iteration, "tpot": c.tpot}
        for part in self._parts_for(model):
            if isinstance(part, str):
                out.append(part)
                continue
            kind = part.kind
            if kind in _SPEC_SLOTS and not spec and self.family != "llamacpp":
                # vLLM and SGLang drop the families; llama-server always prints its
                # speculative counters (at 0 when no draft model is loaded).
                continue
            if kind == _SPEC_TEXT:
                if (
                    part.tail == _PER_POS
                    and self.family == "llamacpp"
                    and not c.positions_published
                ):
                    continue
                out.append(part.head)
            elif kind in values:
                out.append(f"{part.head}{self._number(values[kind])}{part.tail}\n")
            elif kind == _CREATED:
                out.append(f"{part.head}{go_float(engine.started_wall)}{part.tail}\n")
            elif kind == _PER_POS:
                if self.family == "llamacpp" and not c.positions_published:
                    continue
                for i, count in enumerate(c.per_pos):
                    line_head = _POSITION.sub(f'position="{i}"', part.head)
                    out.append(f"{line_head}{self._per_pos_number(float(count))}{part.tail}\n")
            elif kind == _PER_POS_CREATED:
                for i in range(len(c.per_pos)):
                    line_head = _POSITION.sub(f'position="{i}"', part.head)
                    out.append(f"{line_head}{go_float(engine.started_wall)}{part.tail}\n")
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
            elif kind == _ACCEPT_LENGTH:
                out.append(f"{part.head}{self._number(_sglang_length(engine))}{part.tail}\n")
            elif kind == _ACCEPT_RATE:
                out.append(f"{part.head}{self._number(_sglang_rate(engine))}{part.tail}\n")
        return "".join(out)


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
        text, content_type=info.content_type, model=info.model, family=info.engine_family
    )
