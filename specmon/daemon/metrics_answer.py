"""The answer's families (specmon.answer: the verdict and every figure beside it, the
comparison with a baseline per load), declared beside the metric table to keep
:mod:`specmon.daemon.metrics` small; that table lists them with every other family. Import them
through :mod:`specmon.daemon.metrics`."""

from __future__ import annotations

from specmon.daemon.metric_def import ONLY_LOAD_ENGINES, Scope
from specmon.daemon.metric_def import gauge as _g

__all__ = [
    "ANSWER_FAMILIES",
    "BUCKET_BEST_CHAIN",
    "BUCKET_BEST_SPEEDUP",
    "BUCKET_DRAFT_COST",
    "BUCKET_SPEEDUP",
    "CROSSOVER",
    "CROSSOVER_LOWER",
    "CROSSOVER_UPPER",
    "MEASURED_BREAKEVEN",
    "MEASURED_MARGIN",
    "REALIZED_SPEEDUP",
    "VERDICT_BREAKEVEN",
    "VERDICT_DRAFT_COST",
    "VERDICT_INFO",
    "VERDICT_MARGIN",
    "VERDICT_SPEEDUP",
    "VERDICT_SPEEDUP_LOWER",
    "VERDICT_SPEEDUP_UPPER",
]

_M = ("target", "engine", "model")
_W = (*_M, "window")
_AGAINST_BASELINE = (
    "Only for a target with a `baseline` or `cost_profile` (label `baseline`: the twin's name "
    "or `profile`) where the bucket has enough data on both sides, or one read against its "
    'own past (`baseline="history"`: the newest epoch without speculation, docs/history.md); '
    f"from {ONLY_LOAD_ENGINES}; for TGI, which counts no drafted tokens, only the realized "
    "speed-ups."
)
_B = (*_W, "baseline")
_BC = (*_B, "concurrency")
REALIZED_SPEEDUP = _g(
    "specmon_realized_speedup_ratio",
    "Realized speed-up at the window's concurrency: the baseline's time per output token / "
    "this target's, in the same concurrency bucket (baseline: the twin target, profile, or "
    "history: this server before the change).",
    _B,
    Scope.WINDOW,
    note=_AGAINST_BASELINE,
)
MEASURED_BREAKEVEN = _g(
    "specmon_measured_breakeven_alpha_ratio",
    "Break-even alpha at the draft cost measured against the baseline at the window's "
    'concurrency (specmon_draft_cost_ratio{source="measured"}).',
    _B,
    Scope.WINDOW,
    note=_AGAINST_BASELINE,
)
MEASURED_MARGIN = _g(
    "specmon_measured_alpha_margin_ratio",
    "Effective alpha minus the break-even alpha at the measured draft cost, at the window's "
    "concurrency; negative means speculation costs time at this load.",
    _B,
    Scope.WINDOW,
    note=_AGAINST_BASELINE,
)
CROSSOVER = _g(
    "specmon_crossover_concurrency",
    "Lowest concurrency at which speculation stops paying at the window's acceptance, read off "
    "the cost curve where measured buckets bracket it (the lowest measured load when it pays "
    "at none); absent when it pays over the whole measured range (never extrapolated).",
    _B,
    Scope.WINDOW,
    note=_AGAINST_BASELINE,
)
_RANGE = (
    "The crossover's 95 % range: where the lower (upper) bound of the speed-up read off the "
    "cost curve falls through 1; present with specmon_crossover_concurrency when it comes from "
    "the curve."
)
CROSSOVER_LOWER = _g("specmon_crossover_lower_concurrency", _RANGE, _B, Scope.WINDOW,
                     note=_AGAINST_BASELINE)  # fmt: skip
CROSSOVER_UPPER = _g("specmon_crossover_upper_concurrency", _RANGE, _B, Scope.WINDOW,
                     note=_AGAINST_BASELINE)  # fmt: skip
BUCKET_SPEEDUP = _g(
    "specmon_bucket_realized_speedup_ratio",
    "Realized speed-up in one concurrency bucket of the window (label concurrency: the "
    "bucket, 1 = below 1.5, 2 = [1.5, 3), 4 = [3, 6), ...) against the baseline.",
    _BC,
    Scope.WINDOW,
    note=_AGAINST_BASELINE,
)
BUCKET_DRAFT_COST = _g(
    "specmon_bucket_draft_cost_ratio",
    "Draft cost c measured against the baseline in one concurrency bucket of the window.",
    _BC,
    Scope.WINDOW,
    note=_AGAINST_BASELINE,
)
BUCKET_BEST_CHAIN = _g(
    "specmon_bucket_best_chain_length",
    "Best chain length (0 = speculation off) in one concurrency bucket of the window, at the "
    "draft cost measured there and the window's per-position survival.",
    _BC,
    Scope.WINDOW,
    note=_AGAINST_BASELINE,
)
BUCKET_BEST_SPEEDUP = _g(
    "specmon_bucket_best_speedup_ratio",
    "Expected speed-up at the best chain length in one concurrency bucket of the window.",
    _BC,
    Scope.WINDOW,
    note=_AGAINST_BASELINE,
)
_VERDICT = "On the best evidence: the basis is specmon_verdict_info's."
VERDICT_INFO = _g(
    "specmon_verdict_info",
    "1 for the basis the window's verdict rests on, best first: twin, canary (its group's "
    "pods without speculation, pooled), profile, history, engine, "
    "configured, default (no draft_cost configured: the default c, a guess); state: how it "
    "was read: measured, interpolated (off the cost curve), measuring (a new load: no figure "
    "yet), modelled (the engine's c), guess (configured or default c).",
    (*_W, "basis", "state"),
    Scope.WINDOW,
    "1 for what the window's `specmon_verdict_*` figures rest on, best first: `twin` "
    "(realized against the baseline twin at the current load), `canary` (against the pods "
    "of its group still without speculation, their sums pooled: a rollout or a canary), "
    "`profile`, `history` (against "
    "this server's own epoch without speculation at the same load), `engine` (the "
    "engine's measured c: TensorRT-LLM), `configured`, `default` (no `draft_cost`: 0.1, a "
    "guess); `state`: how it was read: `measured` (this window's load bucket), "
    "`interpolated` (off the cost curve, in a bucket its last hour measured), `measuring` "
    "(the load moved to a bucket nothing has measured yet: no `specmon_verdict_*` figure "
    "until it is, never a guess in its place), `modelled` (the engine's c), `guess` "
    "(configured or default c, for a target where nothing was measured). A series apart, so "
    "a change of basis does not restart an alert's `for:`",
)
VERDICT_SPEEDUP = _g(
    "specmon_verdict_speedup_ratio",
    "Speed-up over no speculation specmon believes now: realized against the twin, profile or "
    "own past at the current load, else at the engine's, configured or default c; absent "
    "while measuring a new load (specmon_verdict_info's state). " + _VERDICT,
    _W,
    Scope.WINDOW,
)
_BOUND = (
    "bound of the 95 % interval of specmon_verdict_speedup_ratio: on twin, profile, history: "
    "the acceptance's uncertainty (a chain per draft) and the step times' spread, or where "
    "larger their drift between the cost curve's minute slots (the bucket's, else pooled "
    "over the buckets), a baseline read at the "
    "target's load off its curve, and (off the cost curve) its fit; on engine, configured or "
    "default, the acceptance alone. " + _VERDICT
)
VERDICT_SPEEDUP_LOWER = _g("specmon_verdict_speedup_lower_ratio", "Lower " + _BOUND, _W,
                           Scope.WINDOW)  # fmt: skip
VERDICT_SPEEDUP_UPPER = _g("specmon_verdict_speedup_upper_ratio", "Upper " + _BOUND, _W,
                           Scope.WINDOW)  # fmt: skip
VERDICT_MARGIN = _g(
    "specmon_verdict_alpha_margin_ratio",
    "Effective alpha minus the break-even alpha, on the same basis as "
    "specmon_verdict_speedup_ratio; negative means speculation costs time. " + _VERDICT,
    _W,
    Scope.WINDOW,
)
VERDICT_BREAKEVEN = _g(
    "specmon_verdict_breakeven_alpha_ratio",
    "Break-even alpha on the same basis as specmon_verdict_speedup_ratio. " + _VERDICT,
    _W,
    Scope.WINDOW,
)
VERDICT_DRAFT_COST = _g(
    "specmon_verdict_draft_cost_ratio",
    "Draft cost c the verdict rests on (measured against the twin, profile, own past; the "
    "engine's, the configured or the default one). " + _VERDICT,
    _W,
    Scope.WINDOW,
)

#: In the order /metrics serves them and the docs list them.
ANSWER_FAMILIES = (
    REALIZED_SPEEDUP,
    MEASURED_BREAKEVEN,
    MEASURED_MARGIN,
    CROSSOVER,
    CROSSOVER_LOWER,
    CROSSOVER_UPPER,
    BUCKET_SPEEDUP,
    BUCKET_DRAFT_COST,
    BUCKET_BEST_CHAIN,
    BUCKET_BEST_SPEEDUP,
    VERDICT_INFO,
    VERDICT_SPEEDUP,
    VERDICT_SPEEDUP_LOWER,
    VERDICT_SPEEDUP_UPPER,
    VERDICT_MARGIN,
    VERDICT_BREAKEVEN,
    VERDICT_DRAFT_COST,
)
