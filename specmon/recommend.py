"""The chain length per load level: from measured draft costs to engine settings. Pure.

Input (:class:`RecommendInput`): draft costs c measured at several concurrencies (a profile
written by ``specmon measure --profile-out``, or a running daemon's per-bucket figures from
``/api/v1/targets``), the per-position survival to judge them at, and the longest chain the
engine runs. Output (:class:`Recommendation`): per concurrency bucket the best chain length
k' (0 = speculation off) maximising (1 + s_1 + ... + s_k') / (1 + k' c) at that bucket's c,
its expected speed-up, vLLM's ``num_speculative_tokens_per_batch_size`` schedule and
llama.cpp's ``--spec-draft-n-max``. A chain of k' < k is assumed to draft k' x (k̄ / k) tokens
per step, the proportion measured at k (1 for a draft model, less for n-gram proposers that
sometimes find fewer tokens), so that at k' = k the figure equals the measured speed-up.

vLLM's schedule (vLLM 0.32.0, ``vllm/v1/spec_decode/dynamic/utils.py``; documented at
docs.vllm.ai, features/speculative_decoding/dynamic_speculative_decoding): a list of
``[range_start, range_end, num_speculative_tokens]`` entries with inclusive batch-size
ranges, sorted, non-overlapping, the first starting at 1; values above
``num_speculative_tokens`` are capped to it, 0 turns speculation off for that range, gaps
carry the previous value forward and batch sizes past the last range keep the last value.

TensorRT-LLM's schedule (``speculative_config.draft_len_schedule`` in the YAML given to
``trtllm-serve --extra_llm_api_options``; ``DecodingBaseConfig`` in
``tensorrt_llm/llmapi/llm_args.py``, NVIDIA/TensorRT-LLM @ fcd3f31682808ae56118ae43c1d7864a3a945e6f):
``{batch size: draft length}`` where a key is the *largest* batch size of its range (``{4: 4,
8: 2, 32: 1}``: 1-4 draft 4, 5-8 draft 2, 9-32 draft 1, 33 and more 0: speculation off).
Keys >= 1, lengths >= 0 and <= ``max_draft_len``; the smallest key's length must equal
``max_draft_len`` (older releases instead require a key 1 equal to it: the schedule written
here has both); mutually exclusive with ``max_concurrency``.

SGLang's per-batch-size adaptive speculation (``--speculative-adaptive
--speculative-adaptive-config FILE``; ``load_bs_config`` in
``python/sglang/srt/speculative/adaptive_spec_params.py``): a JSON object whose integer keys
are the *smallest* batch size of their range (``{"1": {...}, "64": {...}}``: 1-63, 64 and
more), each with ``"steps"``, the candidate ``speculative_num_steps`` the adaptive controller
may pick from there; a single candidate pins the chain length. Steps are >= 1: SGLang cannot
switch speculation off by batch size (its source: "TODO: add step=0 (nospec fallback)").
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specmon import arithmetic
from specmon.answer import Crossover, crossover, profile_crossover
from specmon.engines.model import SpecCounters
from specmon.load import DEFAULT_SCHEME, Bucket, BucketScheme, Profile
from specmon.report import best_chain

__all__ = [
    "BucketAdvice",
    "CostPoint",
    "RecommendError",
    "RecommendInput",
    "Recommendation",
    "input_from_profile",
    "input_from_targets",
    "recommend",
    "survival_of",
]


class RecommendError(ValueError):
    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = tuple(problems)
        super().__init__("; ".join(self.problems))


@dataclass(frozen=True, slots=True)
class CostPoint:
    """A draft cost measured at one concurrency."""

    concurrency: float
    draft_cost: float
    #: Where it came from: "profile level 4", "twin bucket 4", ...
    source: str


@dataclass(frozen=True, slots=True)
class RecommendInput:
    points: tuple[CostPoint, ...]
    #: Per-position survival s_1 >= s_2 >= ... to judge at.
    survival: tuple[float, ...]
    #: The longest chain to consider (the engine's configured k); default len(survival).
    chain_length: int | None = None
    #: Where the acceptance came from, in words.
    acceptance_source: str = ""
    scheme: BucketScheme = DEFAULT_SCHEME
    notes: tuple[str, ...] = ()
    #: Drafted tokens per draft at the current chain length (below k for n-gram proposers);
    #: default: the chain length.
    drafted_per_draft: float | None = None
    #: Where speculation stops paying, as the source read it (the daemon's answer; a
    #: profile's curve: :func:`specmon.answer.profile_crossover`); None with ``given``: none
    #: in the measured range. Not given: read here through the points' speed-ups.
    crossover: Crossover | None = None
    crossover_given: bool = False


@dataclass(frozen=True, slots=True)
class BucketAdvice:
    bucket: Bucket
    #: The concurrency c was taken at, and how ("measured" or "interpolated").
    concurrency: float
    draft_cost: float
    draft_cost_how: str
    best_chain_length: int
    expected_speedup: float
    #: The expected speed-up of the chain length the engine runs now.
    current_speedup: float


@dataclass(frozen=True, slots=True)
class Recommendation:
    buckets: tuple[BucketAdvice, ...]
    chain_length: int
    survival: tuple[float, ...]
    acceptance_source: str
    measured_from: float
    measured_to: float
    crossover: Crossover | None
    notes: tuple[str, ...] = ()

    def vllm_schedule(self) -> list[list[int]]:
        """``num_speculative_tokens_per_batch_size`` entries, adjacent equal values merged;
        the first range starts at 1 (vLLM requires it)."""
        out: list[list[int]] = []
        for advice in self.buckets:
            first, last = advice.bucket.batch_sizes
            if not out:
                first = 1
            end = last if last is not None else first
            if out and out[-1][2] == advice.best_chain_length and out[-1][1] + 1 >= first:
                out[-1][1] = end
            else:
                out.append([first, end, advice.best_chain_length])
        return out

    def trtllm_schedule(self) -> dict[int, int] | None:
        """TensorRT-LLM's ``draft_len_schedule``: each range's last batch size to its chain
        length, with a key 1 (older releases require it) and adjacent equal values merged;
        the open last bucket ends at the highest measured concurrency (TensorRT-LLM drafts 0
        above the largest key); trailing zeros are left out (implicit); a length above the
        first range's is capped to it (``max_draft_len``). None when the first range's length
        is 0: ``max_draft_len`` must equal it, so speculation belongs off."""
        ranges = self.vllm_schedule()
        if not ranges or ranges[0][2] == 0:
            return None
        top = max(ranges[-1][0], math.floor(self.measured_to))
        ranges[-1][1] = max(ranges[-1][1], top)
        cap = ranges[0][2]
        out: dict[int, int] = {1: cap}
        for _first, last, k in ranges:
            out[last] = min(k, cap)
        while len(out) > 1 and out[max(out)] == 0:
            del out[max(out)]
        return out

    def trtllm_config(self) -> dict[str, Any] | None:
        """The ``speculative_config`` entries to merge into ``--extra_llm_api_options``."""
        schedule = self.trtllm_schedule()
        if schedule is None:
            return None
        return {"max_draft_len": schedule[1], "draft_len_schedule": schedule}

    def sglang_adaptive_config(self) -> dict[str, dict[str, list[int]]]:
        """SGLang's ``--speculative-adaptive-config`` JSON: each range's first batch size (as
        a string key, as JSON has them) to ``{"steps": [k]}``, adjacent equal values merged;
        a range whose best length is 0 gets 1, the least SGLang can run."""
        out: dict[str, dict[str, list[int]]] = {}
        previous: int | None = None
        for first, _last, k in self.vllm_schedule():
            steps = max(k, 1)
            if steps != previous:
                out[str(first)] = {"steps": [steps]}
            previous = steps
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "chain_length": self.chain_length,
            "survival": list(self.survival),
            "acceptance_source": self.acceptance_source,
            "measured_concurrency": [self.measured_from, self.measured_to],
            "buckets": [
                {
                    "bucket": a.bucket.label,
                    "batch_sizes": list(a.bucket.batch_sizes),
                    "concurrency": a.concurrency,
                    "draft_cost": a.draft_cost,
                    "draft_cost_how": a.draft_cost_how,
                    "best_chain_length": a.best_chain_length,
                    "expected_speedup": a.expected_speedup,
                    "current_chain_length_speedup": a.current_speedup,
                }
                for a in self.buckets
            ],
            "vllm": {"num_speculative_tokens_per_batch_size": self.vllm_schedule()},
            "llamacpp": [
                {"bucket": a.bucket.label, "spec_draft_n_max": a.best_chain_length}
                for a in self.buckets
            ],
            "trtllm": {"speculative_config": self.trtllm_config()},
            "sglang": {"speculative_adaptive_config": self.sglang_adaptive_config()},
            "crossover": None
            if self.crossover is None
            else {
                "concurrency": self.crossover.concurrency,
                "pays_up_to": self.crossover.pays_up_to,
                "costs_from": self.crossover.costs_from,
                "cost_percent": self.crossover.cost_percent,
            },
            "notes": list(self.notes),
        }


def _interpolate(points: Sequence[CostPoint], x: float) -> tuple[float, str] | None:
    ordered = sorted(points, key=lambda p: p.concurrency)
    if not ordered or x < ordered[0].concurrency - 1e-9 or x > ordered[-1].concurrency + 1e-9:
        return None
    same = [p.draft_cost for p in ordered if abs(p.concurrency - x) < 1e-9]
    if same:
        return math.fsum(same) / len(same), "measured"
    for a, b in itertools.pairwise(ordered):
        if a.concurrency < x < b.concurrency:
            share = (x - a.concurrency) / (b.concurrency - a.concurrency)
            return a.draft_cost + share * (b.draft_cost - a.draft_cost), "interpolated"
    return None


def _nominal(bucket: Bucket) -> float:
    """The concurrency a bucket stands for: its label's number, else its midpoint."""
    try:
        return float(bucket.label)
    except ValueError:
        if math.isinf(bucket.high):
            return bucket.low
        return (bucket.low + bucket.high) / 2.0


def recommend(data: RecommendInput) -> Recommendation:
    """Per bucket of the measured range, the best chain length and its expected speed-up.

    A bucket's c is the mean of the costs measured inside it, else the cost interpolated at
    the bucket's nominal concurrency, clamped into the measured range. Buckets entirely
    outside the measured concurrencies get no advice (nothing is extrapolated)."""
    if not data.points:
        raise RecommendError(["no draft cost measured at any concurrency", *data.notes])
    if not data.survival:
        raise RecommendError(["no per-position acceptance to judge the chain lengths at"])
    k = min(data.chain_length or len(data.survival), len(data.survival))
    survival = data.survival[:k]
    drafted = data.drafted_per_draft if data.drafted_per_draft is not None else float(k)
    drafted = min(max(drafted, 0.0), float(k))
    lo = min(p.concurrency for p in data.points)
    hi = max(p.concurrency for p in data.points)
    advice: list[BucketAdvice] = []
    for bucket in data.scheme.buckets:
        if bucket.high <= lo or bucket.low > hi:
            continue
        inside = [p for p in data.points if bucket.contains(p.concurrency)]
        if inside:
            at = math.fsum(p.concurrency for p in inside) / len(inside)
            cost, how = math.fsum(p.draft_cost for p in inside) / len(inside), "measured"
        else:
            at = min(max(_nominal(bucket), lo), hi)
            got = _interpolate(data.points, at)
            if got is None:
                continue
            cost, how = got
        # A chain of k' drafts k' x (drafted / k) tokens per step: the proportion measured at
        # k carried to shorter chains (1 for draft models, below 1 for n-gram proposers).
        best = best_chain(
            draft_cost=cost, chain_length=k, survival=survival, drafted_per_draft=drafted
        )
        assert best is not None
        current = arithmetic.measured_speedup(math.fsum(survival), max(cost, 0.0), drafted)
        advice.append(BucketAdvice(bucket, at, cost, how, best.chain_length, best.speedup, current))
    notes = list(data.notes)
    if advice and advice[0].bucket.batch_sizes[0] > 1:
        notes.append(
            f"nothing was measured below concurrency {lo:.1f}: the vLLM schedule's first range "
            "starts at 1 because vLLM requires it, with the lowest measured bucket's value"
        )
    notes.append(
        f"measured up to concurrency {hi:.1f}: vLLM keeps the last range's value for larger "
        "batch sizes; specmon has no figure there"
    )
    notes.append(
        f"TensorRT-LLM drafts nothing above its schedule's largest key (here up to "
        f"concurrency {math.floor(hi):d} at most); SGLang keeps its last entry's steps for "
        "larger batch sizes"
    )
    if any(a.best_chain_length == 0 for a in advice):
        notes.append(
            "SGLang's adaptive configuration cannot switch speculation off by batch size "
            "(steps >= 1): where the best chain length is 0 it is given 1 step"
        )
    if advice and advice[0].best_chain_length == 0:
        notes.append(
            "speculation does not pay even at the lowest load measured: no TensorRT-LLM "
            "schedule (its smallest key must equal max_draft_len); switch speculation off"
        )
    points = [
        (
            p.concurrency,
            arithmetic.measured_speedup(math.fsum(survival), max(p.draft_cost, 0.0), drafted),
        )
        for p in data.points
    ]
    return Recommendation(
        buckets=tuple(advice),
        chain_length=k,
        survival=survival,
        acceptance_source=data.acceptance_source,
        measured_from=lo,
        measured_to=hi,
        crossover=data.crossover if data.crossover_given else crossover(points),
        notes=tuple(notes),
    )


def survival_of(counters: SpecCounters, chain_length: int | None = None) -> tuple[float, ...]:
    """Per-position survival from counters; without per-position data, alpha^i from the
    effective alpha at ``chain_length`` (the cost model's independence assumption)."""
    if counters.drafts <= 0:
        return ()
    if counters.accepted_per_position:
        return tuple(p / counters.drafts for p in counters.accepted_per_position)
    k = chain_length
    if not k:
        return ()
    alpha = arithmetic.effective_alpha(counters.accepted_tokens / counters.drafts, k)
    return () if alpha is None else tuple(alpha**i for i in range(1, k + 1))


def input_from_profile(
    profile: Profile, *, scheme: BucketScheme = DEFAULT_SCHEME
) -> RecommendInput:
    """The profile's levels (c from step times where both servers' counters gave it, else
    the implied c) at the profile's own acceptance (all levels pooled)."""
    points = tuple(
        CostPoint(
            lv.position, lv.draft_cost, f"profile level {lv.concurrency} ({lv.draft_cost_source})"
        )
        for lv in profile.levels
        if lv.draft_cost is not None
    )
    acceptance = profile.acceptance()
    survival = survival_of(acceptance, profile.chain_length) if acceptance else ()
    notes = []
    if acceptance is not None and not acceptance.accepted_per_position and survival:
        notes.append("no per-position counts in the profile: survival assumes independent alpha")
    drafted = (
        acceptance.draft_tokens / acceptance.drafts
        if acceptance is not None and acceptance.drafts > 0
        else None
    )
    return RecommendInput(
        points=points,
        survival=survival,
        chain_length=profile.chain_length,
        acceptance_source=f"the profile's acceptance, {len(profile.levels)} levels pooled",
        scheme=scheme,
        notes=tuple(notes),
        drafted_per_draft=drafted,
        crossover=profile_crossover(profile),
        crossover_given=True,
    )


def _float(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


#: A label or reason from the document, as shown: this many characters at most.
MAX_TEXT = 200


def _text(value: object) -> str:
    """A string from the document as it may be printed: control characters (terminal
    escapes) replaced, at most MAX_TEXT characters; "" for anything else."""
    if not isinstance(value, str):
        return ""
    shown = "".join(ch if ch.isprintable() else "?" for ch in value[: MAX_TEXT + 1])
    return shown if len(shown) <= MAX_TEXT else shown[: MAX_TEXT - 3] + "..."


#: Bounded work per document.
MAX_BUCKETS = 64
MAX_POSITIONS = 64


def input_from_targets(
    document: object,
    *,
    target: str,
    model: str | None = None,
    window: str | None = None,
    scheme: BucketScheme = DEFAULT_SCHEME,
) -> RecommendInput:
    """A running daemon's figures (``GET /api/v1/targets``) for one target as input.

    Expected shape (the daemon's document: each window's answer, ``verdict``, with its
    figures per load; see docs/recommend.md)::

        {"targets": [{"target": NAME, "models": [{"model": M, "chain_length": k,
          "windows": [{"window": "15m",
                       "report": {"positions": [{"position": 1, "survival": 0.9}, ...]},
                       "verdict": {"against": "twin-name" | "profile" | "history",
                                   "crossover": {...} | null,
                                   "per_load": [{"label": "4", "concurrency": 3.9,
                                                 "draft_cost": 0.12}, ...]}}]}]}]}

    ``window`` picks a window by name; default: the longest with figures per load.
    """
    problems: list[str] = []
    if not isinstance(document, Mapping) or not isinstance(document.get("targets"), list):
        raise RecommendError(["the document has no 'targets' list (is this a specmon daemon?)"])
    found = [t for t in document["targets"] if isinstance(t, Mapping) and t.get("target") == target]
    if not found:
        names = [str(t.get("target")) for t in document["targets"] if isinstance(t, Mapping)][:20]
        raise RecommendError([f"no target {target!r} (targets: {', '.join(names) or 'none'})"])
    models = [m for m in found[0].get("models") or [] if isinstance(m, Mapping)]
    if model is not None:
        models = [m for m in models if m.get("model") == model]
    if len(models) != 1:
        raise RecommendError(
            [f"target {target!r} has {len(models)} matching models; name one with --model"]
        )
    chosen_model = models[0]
    windows = [w for w in chosen_model.get("windows") or [] if isinstance(w, Mapping)]
    compared = [w for w in windows if _per_load(w) is not None]
    if window is not None:
        compared = [w for w in compared if w.get("window") == window]
    if not compared:
        raise RecommendError(
            [
                f"target {target!r}: no window with figures per load"
                + (f" named {window!r}" if window else "")
                + " (the daemon needs a baseline twin, a cost_profile, or this server's own "
                "past without speculation for this target)"
            ]
        )
    chosen = max(compared, key=lambda w: _float(w.get("seconds")) or 0.0)
    verdict = chosen["verdict"]
    raw_buckets = _per_load(chosen)
    points: list[CostPoint] = []
    if not isinstance(raw_buckets, list) or len(raw_buckets) > MAX_BUCKETS:
        problems.append(f"verdict.per_load: must be a list of at most {MAX_BUCKETS}")
        raw_buckets = []
    baseline = verdict.get("against")
    notes: list[str] = []
    for i, item in enumerate(raw_buckets):
        if not isinstance(item, Mapping):
            problems.append(f"verdict.per_load[{i}]: must be an object")
            continue
        label = _text(item.get("label")) or str(i)
        reason = _text(item.get("reason"))
        if item.get("concurrency") is None and reason:
            # A bucket the daemon has no figures for yet (too little data, no matching
            # baseline bucket): nothing to advise from there, and no reason to refuse the rest.
            notes.append(f"bucket {label} skipped: {reason}")
            continue
        n, c = _float(item.get("concurrency")), _float(item.get("draft_cost"))
        if n is None or n < 0:
            problems.append(f"verdict.per_load[{i}].concurrency: must be a number >= 0")
            continue
        if c is None:
            notes.append(f"bucket {label} skipped: {reason or 'no measured draft cost'}")
            continue
        points.append(CostPoint(n, c, f"{_text(baseline) or 'baseline'} bucket {label}"))
    stops = _crossover(verdict.get("crossover"))
    report = chosen.get("report")
    survival: tuple[float, ...] = ()
    if isinstance(report, Mapping) and isinstance(report.get("positions"), list):
        values = [
            _float(p.get("survival"))
            for p in report["positions"][:MAX_POSITIONS]
            if isinstance(p, Mapping)
        ]
        if values and all(v is not None and 0.0 <= v <= 1.0 for v in values):
            survival = tuple(v for v in values if v is not None)
        else:
            problems.append("report.positions: survival must be numbers within [0, 1]")
    drafted = None
    if isinstance(report, Mapping):
        drafts, tokens = _float(report.get("drafts")), _float(report.get("draft_tokens"))
        if drafts and tokens is not None and drafts > 0 and tokens >= 0:
            drafted = tokens / drafts
    chain = chosen_model.get("chain_length")
    if problems:
        raise RecommendError(problems)
    return RecommendInput(
        points=tuple(points),
        survival=survival,
        chain_length=chain if isinstance(chain, int) and not isinstance(chain, bool) else None,
        acceptance_source=f"the daemon's {chosen.get('window')} window of {target}",
        scheme=scheme,
        notes=tuple(notes),
        drafted_per_draft=drafted,
        crossover=stops,
        crossover_given=True,
    )


def _per_load(window: Mapping[str, Any]) -> object:
    """A window's ``verdict.per_load`` (None: no answer compared with a baseline)."""
    verdict = window.get("verdict")
    if not isinstance(verdict, Mapping) or not verdict.get("per_load"):
        return None
    return verdict["per_load"]


def _crossover(value: object) -> Crossover | None:
    """The answer's crossover as the daemon gave it (None: none, or not a crossover)."""
    if not isinstance(value, Mapping):
        return None
    at, costs = _float(value.get("concurrency")), _float(value.get("costs_from"))
    low, high = _float(value.get("measured_from")), _float(value.get("measured_to"))
    speedup, cost = _float(value.get("speedup_at")), _float(value.get("cost_percent"))
    if None in (at, costs, low, high, speedup, cost):
        return None
    assert at is not None and costs is not None and low is not None and high is not None
    assert speedup is not None and cost is not None
    return Crossover(at, _float(value.get("pays_up_to")), costs, speedup, cost, low, high,
                     low=_float(value.get("low")), high=_float(value.get("high")))  # fmt: skip
