"""From a raw run to the A/B table: per concurrency level, per workload. Pure."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from specmon import arithmetic
from specmon.engines.model import SpecCounters, add_counters
from specmon.load import LoadInterval
from specmon.measure.breakeven import BreakEvenReading, breakeven_reading
from specmon.measure.compare import Comparison, compare
from specmon.measure.endpoints import Endpoint, ServerInfo
from specmon.measure.results import MetricsDelta, Outcome, RawMeasurement, Settings, SideRun
from specmon.measure.stats import percentile, rate, ratio

__all__ = [
    "EXIT_DIVERGED",
    "EXIT_NOTHING_COMPLETED",
    "EXIT_OK",
    "EXIT_USAGE",
    "Acceptance",
    "Level",
    "LevelLoad",
    "MeasureReport",
    "RequestAcceptance",
    "Row",
    "SideSummary",
    "acceptance_of",
    "add_counters",
    "analyse",
    "summarize_side",
]

EXIT_OK = 0
#: Completions differed between the servers (and --allow-divergence was not given).
EXIT_DIVERGED = 1
#: Bad arguments or prompts file.
EXIT_USAGE = 2
#: A server could not be reached, or a workload completed no request on one side.
EXIT_NOTHING_COMPLETED = 3

ALL = "all"


@dataclass(frozen=True, slots=True)
class SideSummary:
    requests: int
    completed: int
    failed: int
    first_error: str | None
    #: Completion tokens from ``usage``; None unless every completed response carried it.
    tokens: int | None
    #: Completed responses without ``usage.completion_tokens``.
    usage_missing: int
    seconds: float
    tokens_per_second: float | None
    latency_p50: float | None
    latency_p95: float | None
    latency_mean: float | None
    latency_max: float | None

    def as_dict(self) -> dict[str, object]:
        return {
            "requests": self.requests,
            "completed": self.completed,
            "failed": self.failed,
            "first_error": self.first_error,
            "completion_tokens": self.tokens,
            "usage_missing": self.usage_missing,
            "seconds": self.seconds,
            "tokens_per_second": self.tokens_per_second,
            "latency_seconds": {
                "p50": self.latency_p50,
                "p95": self.latency_p95,
                "mean": self.latency_mean,
                "max": self.latency_max,
            },
        }


def summarize_side(outcomes: Sequence[Outcome], seconds: float) -> SideSummary:
    """Counts, tokens per second and latency of one side's requests."""
    done = [o for o in outcomes if o.answer is not None]
    failed = [o for o in outcomes if o.answer is None]
    counts = [o.answer.completion_tokens for o in done if o.answer is not None]
    missing = sum(1 for c in counts if c is None)
    tokens = sum(c for c in counts if c is not None) if done and missing == 0 else None
    latencies = [o.latency for o in done]
    return SideSummary(
        requests=len(outcomes),
        completed=len(done),
        failed=len(failed),
        first_error=failed[0].error if failed else None,
        tokens=tokens,
        usage_missing=missing,
        seconds=seconds,
        tokens_per_second=rate(tokens, seconds),
        latency_p50=percentile(latencies, 50),
        latency_p95=percentile(latencies, 95),
        latency_mean=statistics.fmean(latencies) if latencies else None,
        latency_max=max(latencies) if latencies else None,
    )


@dataclass(frozen=True, slots=True)
class RequestAcceptance:
    """One response's own speculative counts (vLLM's per-request metrics)."""

    prompt_index: int
    repeat: int
    histogram: tuple[int, ...]
    draft_tokens: int

    def as_dict(self) -> dict[str, object]:
        return {
            "prompt_index": self.prompt_index,
            "repeat": self.repeat,
            "acceptance_histogram": list(self.histogram),
            "num_draft_tokens": self.draft_tokens,
        }


@dataclass(frozen=True, slots=True)
class Acceptance:
    """Acceptance of the speculative server during one run, and where it came from."""

    #: "per-request" (vLLM's metrics.speculative_decoding in every response, summed),
    #: "counters" (the server's /metrics, deltas around the run), "timings" (llama.cpp's
    #: per-response timings), "gauges" (engines without counters), or None.
    source: str | None
    #: Accepted draft tokens / drafted tokens, from ``source``.
    ratio: float | None
    #: The server's counter deltas around the run (whatever the source).
    counters: SpecCounters | None
    #: K = 1 + accepted / drafts (per-request or counters).
    mean_acceptance_length: float | None
    #: k̄ = draft tokens / drafts (per-request or counters).
    drafted_per_iteration: float | None
    survival: tuple[float, ...]
    counters_ratio: float | None
    timings_draft_tokens: int | None
    timings_accepted: int | None
    timings_ratio: float | None
    #: Counters and timings counted the same tokens (None: not both available).
    sources_agree: bool | None
    notes: tuple[str, ...] = ()
    #: The responses' per-request counts summed (vLLM), or None.
    per_request: SpecCounters | None = None
    #: The summed acceptance histogram: steps that accepted exactly j draft tokens.
    per_request_histogram: tuple[int, ...] = ()
    #: Per-request sums equal the counter deltas (None: not both available).
    per_request_agree: bool | None = None
    #: Every response's own counts, for the lab notebook.
    requests: tuple[RequestAcceptance, ...] = ()

    @property
    def used(self) -> SpecCounters | None:
        """The counts behind the figures: the per-request sums when they are the source,
        else the counter deltas."""
        return self.per_request if self.source == "per-request" else self.counters

    def as_dict(self) -> dict[str, object]:
        return {
            "source": self.source,
            "ratio": self.ratio,
            "counters": None if self.counters is None else self.counters.counts_dict(),
            "mean_acceptance_length": self.mean_acceptance_length,
            "drafted_per_iteration": self.drafted_per_iteration,
            "survival": list(self.survival),
            "counters_ratio": self.counters_ratio,
            "timings": None
            if self.timings_draft_tokens is None
            else {
                "draft_tokens": self.timings_draft_tokens,
                "accepted_tokens": self.timings_accepted,
                "ratio": self.timings_ratio,
            },
            "sources_agree": self.sources_agree,
            "per_request": None
            if self.per_request is None
            else {
                **self.per_request.counts_dict(),
                "acceptance_histogram": list(self.per_request_histogram),
                "agrees_with_counters": self.per_request_agree,
                "requests": [r.as_dict() for r in self.requests],
            },
            "notes": list(self.notes),
        }


def _timings(outcomes: Sequence[Outcome]) -> tuple[int, int] | None:
    answers = [o.answer for o in outcomes if o.answer is not None]
    if not answers or any(a.draft_tokens is None for a in answers):
        return None
    drafted = sum(a.draft_tokens or 0 for a in answers)
    accepted = sum(a.draft_accepted or 0 for a in answers)
    return drafted, accepted


def _per_request(
    outcomes: Sequence[Outcome], notes: list[str]
) -> tuple[SpecCounters, tuple[int, ...], tuple[RequestAcceptance, ...]] | None:
    """The responses' per-request speculative counts summed, when every completed response
    carries them (a partial sum would describe some of the requests only)."""
    done = [o for o in outcomes if o.answer is not None]
    problems = [o.answer.spec_problem for o in done if o.answer and o.answer.spec_problem]
    if problems:
        notes.append(
            f"{len(problems)} response(s) carried per-request speculative metrics that were "
            f"not self-consistent and were not used; first: {problems[0]}"
        )
    with_spec = [(o, o.answer.spec) for o in done if o.answer and o.answer.spec is not None]
    if not with_spec:
        return None
    if len(with_spec) < len(done):
        notes.append(
            f"per-request speculative metrics in {len(with_spec)} of {len(done)} responses "
            "only: not used"
        )
        return None
    width = max(len(spec.histogram) for _, spec in with_spec)
    histogram = [0] * width
    for _, spec in with_spec:
        for j, n in enumerate(spec.histogram):
            histogram[j] += n
    per_pos: list[int] = []
    remaining = sum(histogram)
    for n in histogram[:-1]:
        remaining -= n
        per_pos.append(remaining)
    counters = SpecCounters(
        drafts=sum(histogram),
        draft_tokens=sum(spec.draft_tokens for _, spec in with_spec),
        accepted_tokens=sum(j * n for j, n in enumerate(histogram)),
        accepted_per_position=tuple(per_pos),
    )
    requests = tuple(
        RequestAcceptance(o.prompt_index, o.repeat, spec.histogram, spec.draft_tokens)
        for o, spec in with_spec
    )
    return counters, tuple(histogram), requests


def acceptance_of(metrics: MetricsDelta | None, outcomes: Sequence[Outcome]) -> Acceptance:
    """Per-request metrics first (each response's own counts: this workload's alone), then
    counters (the server's count), then per-response timings, then gauges."""
    notes: list[str] = []
    counters = metrics.counters if metrics is not None else None
    if metrics is not None:
        notes.extend(metrics.notes)
        if metrics.error and counters is None:
            notes.append(f"counters: {metrics.error}")
        if metrics.resets:
            notes.append(
                "the speculative server's counters went down during the run (a restart): "
                "acceptance covers only the time since"
            )
    counters_ratio = None
    if counters is not None:
        if counters.draft_tokens > 0 and counters.knows("draft_tokens"):
            counters_ratio = counters.accepted_tokens / counters.draft_tokens
        elif counters.drafts == 0 and any(o.ok for o in outcomes):
            notes.append(
                "the speculative server counted no draft tokens during this run: is "
                "speculation on (and --metrics given)?"
            )
        if counters.rounded:
            notes.append(
                "the engine printed some counters with reduced precision: "
                + ", ".join(counters.rounded)
            )
    per_request = _per_request(outcomes, notes)
    agree_pr: bool | None = None
    if per_request is not None and counters is not None:
        pr = per_request[0]
        agree_pr = (pr.drafts, pr.draft_tokens, pr.accepted_tokens) == (
            counters.drafts,
            counters.draft_tokens,
            counters.accepted_tokens,
        ) and pr.accepted_per_position == counters.accepted_per_position[
            : len(pr.accepted_per_position)
        ]
        if not agree_pr:
            notes.append(
                f"per-request metrics ({pr.accepted_tokens} accepted of {pr.draft_tokens} in "
                f"{pr.drafts} steps) and counters ({counters.accepted_tokens} of "
                f"{counters.draft_tokens} in {counters.drafts}) differ: other traffic reached "
                "the speculative server, or some counts landed outside the run"
            )
    timed = _timings(outcomes)
    timings_ratio = None
    agree: bool | None = None
    if timed is not None:
        timings_ratio = timed[1] / timed[0] if timed[0] > 0 else None
        if counters is not None:
            agree = (counters.draft_tokens, counters.accepted_tokens) == timed
            if not agree:
                notes.append(
                    f"counters ({counters.accepted_tokens}/{counters.draft_tokens} accepted) and "
                    f"per-response timings ({timed[1]}/{timed[0]}) differ: other traffic "
                    "reached the speculative server, or some counts landed outside the run"
                )
    source: str | None
    value: float | None
    used: SpecCounters | None = None
    if per_request is not None:
        used = per_request[0]
        source = "per-request"
        value = used.accepted_tokens / used.draft_tokens if used.draft_tokens > 0 else None
    elif counters is not None and (counters_ratio is not None or timings_ratio is None):
        used = counters
        source, value = "counters", counters_ratio
    elif timings_ratio is not None:
        source, value = "timings", timings_ratio
    elif metrics is not None and metrics.gauges is not None:
        source, value = "gauges", metrics.gauges.acceptance_rate
    else:
        source, value = None, None
    mean_len = drafted = None
    survival: tuple[float, ...] = ()
    if used is not None and used.drafts > 0 and used.knows("drafts"):
        mean_len = 1.0 + used.accepted_tokens / used.drafts
        if used.knows("draft_tokens"):
            drafted = used.draft_tokens / used.drafts
        survival = tuple(arithmetic.survival(used.accepted_per_position, used.drafts) or ())
    if source == "gauges" and metrics is not None and metrics.gauges is not None:
        mean_len = metrics.gauges.mean_acceptance_length
        notes.append(
            f"this engine publishes gauges over its {metrics.gauges.scope}, not counters: the "
            "figure is not this workload's alone"
        )
    return Acceptance(
        source=source,
        ratio=value,
        counters=counters,
        mean_acceptance_length=mean_len,
        drafted_per_iteration=drafted,
        survival=survival,
        counters_ratio=counters_ratio,
        timings_draft_tokens=None if timed is None else timed[0],
        timings_accepted=None if timed is None else timed[1],
        timings_ratio=timings_ratio,
        sources_agree=agree,
        notes=tuple(notes),
        per_request=per_request[0] if per_request else None,
        per_request_histogram=per_request[1] if per_request else (),
        per_request_agree=agree_pr,
        requests=per_request[2] if per_request else (),
    )


@dataclass(frozen=True, slots=True)
class Row:
    workload: str
    concurrency: int
    prompts: int
    baseline: SideSummary
    speculative: SideSummary
    #: Tokens/s with the draft / tokens/s without (None when either is unknown).
    speed_ratio: float | None
    acceptance: Acceptance
    comparison: Comparison
    breakeven: BreakEvenReading | None
    notes: tuple[str, ...] = ()

    @property
    def nothing_completed(self) -> bool:
        return self.baseline.completed == 0 or self.speculative.completed == 0

    def as_dict(self) -> dict[str, object]:
        return {
            "workload": self.workload,
            "concurrency": self.concurrency,
            "prompts": self.prompts,
            "baseline": self.baseline.as_dict(),
            "speculative": self.speculative.as_dict(),
            "speed_ratio": self.speed_ratio,
            "acceptance": self.acceptance.as_dict(),
            "completions": self.comparison.as_dict(),
            "breakeven": None if self.breakeven is None else self.breakeven.as_dict(),
            "notes": list(self.notes),
        }


def _side_notes(label: str, summary: SideSummary) -> list[str]:
    notes: list[str] = []
    if summary.failed:
        notes.append(
            f"{summary.failed} of {summary.requests} {label} requests failed"
            + (f"; first: {summary.first_error}" if summary.first_error else "")
        )
    if summary.usage_missing:
        notes.append(
            f"the {label} server returned no usage in {summary.usage_missing} of "
            f"{summary.completed} responses: its tokens/s is not computed "
            "(specmon never estimates token counts)"
        )
    return notes


def _row(
    workload: str,
    concurrency: int,
    prompts: int,
    baseline: tuple[Sequence[Outcome], float],
    speculative: tuple[Sequence[Outcome], float],
    metrics: MetricsDelta | None,
    extra_notes: Sequence[str] = (),
) -> Row:
    base = summarize_side(*baseline)
    spec = summarize_side(*speculative)
    speed = ratio(spec.tokens_per_second, base.tokens_per_second)
    acceptance = acceptance_of(metrics, speculative[0])
    comparison = compare(
        {o.key: (o.answer.text if o.answer else None) for o in baseline[0]},
        {o.key: (o.answer.text if o.answer else None) for o in speculative[0]},
    )
    reading = breakeven_reading(acceptance.used, speed) if acceptance.used is not None else None
    notes = [*_side_notes("baseline", base), *_side_notes("with-draft", spec), *extra_notes]
    if (base.failed or spec.failed) and speed is not None:
        notes.append("tokens/s count the completed requests only")
    return Row(
        workload=workload,
        concurrency=concurrency,
        prompts=prompts,
        baseline=base,
        speculative=spec,
        speed_ratio=speed,
        acceptance=acceptance,
        comparison=comparison,
        breakeven=reading,
        notes=tuple(notes),
    )


def _side_load(load: LoadInterval | None) -> dict[str, object] | None:
    if load is None:
        return None
    return {
        "concurrency": load.concurrency,
        "step_seconds": load.step_seconds,
        "time_per_output_token_seconds": load.time_per_output_token_seconds,
        "tokens_per_step": load.tokens_per_step,
        "drafted_tokens_per_step": load.drafted_per_step,
        "request_steps": load.request_steps,
        "engine_steps": load.engine_steps,
        "decode_seconds": load.decode_seconds,
        "decode_tokens": load.decode_tokens,
        "resets": load.resets,
    }


@dataclass(frozen=True, slots=True)
class LevelLoad:
    """Both servers' load counters over a level (all workloads), docs/load-signals.md."""

    baseline: LoadInterval | None
    speculative: LoadInterval | None

    @property
    def step_ratio(self) -> float | None:
        b = self.baseline.step_seconds if self.baseline else None
        s = self.speculative.step_seconds if self.speculative else None
        return None if b is None or s is None or b <= 0 else s / b

    @property
    def draft_cost(self) -> float | None:
        """c = (T_step(with draft) / T_step(baseline) - 1) / k̄ (specmon.load's definition)."""
        ratio = self.step_ratio
        drafted = self.speculative.drafted_per_step if self.speculative else None
        if ratio is None or drafted is None or drafted <= 0:
            return None
        return (ratio - 1.0) / drafted

    @property
    def realized_speedup(self) -> float | None:
        """TPOT(baseline) / TPOT(with draft), from the servers' counters."""
        b = self.baseline.time_per_output_token_seconds if self.baseline else None
        s = self.speculative.time_per_output_token_seconds if self.speculative else None
        return None if b is None or s is None or s <= 0 else b / s

    def as_dict(self) -> dict[str, object]:
        return {
            "baseline": _side_load(self.baseline),
            "speculative": _side_load(self.speculative),
            "step_ratio": self.step_ratio,
            "draft_cost_from_step_times": self.draft_cost,
            "realized_speedup": self.realized_speedup,
        }


def _sum_loads(loads: Sequence[LoadInterval | None]) -> LoadInterval | None:
    total: LoadInterval | None = None
    for load in loads:
        if load is None:
            return None
        total = load if total is None else total + load
    return total


@dataclass(frozen=True, slots=True)
class Level:
    concurrency: int
    #: One row per workload, then the "all" row (when there is more than one workload).
    rows: tuple[Row, ...]
    load: LevelLoad = LevelLoad(None, None)

    @property
    def summary(self) -> Row:
        """The row that stands for the whole level: "all", or the only workload's."""
        return next((r for r in self.rows if r.workload == ALL), self.rows[0])

    def as_dict(self) -> dict[str, object]:
        return {
            "concurrency": self.concurrency,
            "rows": [r.as_dict() for r in self.rows],
            "load": self.load.as_dict(),
        }


def _all_row(concurrency: int, runs: Sequence[tuple[SideRun, SideRun, MetricsDelta, int]]) -> Row:
    base_out = [o for b, _s, _m, _p in runs for o in b.outcomes]
    spec_out = [o for _b, s, _m, _p in runs for o in s.outcomes]
    base_s = math.fsum(b.seconds for b, _s, _m, _p in runs)
    spec_s = math.fsum(s.seconds for _b, s, _m, _p in runs)
    deltas = [m for _b, _s, m, _p in runs]
    metrics: MetricsDelta | None
    extra: list[str] = []
    if all(m.counters is not None for m in deltas):
        metrics = MetricsDelta(
            counters=add_counters(m.counters for m in deltas if m.counters is not None),
            resets=sum(m.resets for m in deltas),
        )
    else:
        metrics = MetricsDelta(error="not every workload has counter readings")
    extra.append("all workloads together: tokens and seconds summed over the runs above")
    return _row(
        ALL,
        concurrency,
        sum(p for _b, _s, _m, p in runs),
        (base_out, base_s),
        (spec_out, spec_s),
        metrics,
        extra,
    )


@dataclass(frozen=True, slots=True)
class MeasureReport:
    settings: Settings
    baseline: Endpoint
    speculative: Endpoint
    baseline_info: ServerInfo
    speculative_info: ServerInfo
    levels: tuple[Level, ...]
    started: str
    finished: str
    warnings: tuple[str, ...] = ()

    def rows(self, *, include_all: bool = True) -> list[Row]:
        return [r for lv in self.levels for r in lv.rows if include_all or r.workload != ALL]

    @property
    def comparison(self) -> Comparison:
        return Comparison.combine(r.comparison for r in self.rows(include_all=False))

    @property
    def diverged(self) -> bool:
        return self.comparison.differing > 0

    @property
    def nothing_completed(self) -> list[Row]:
        return [r for r in self.rows(include_all=False) if r.nothing_completed]

    def exit_code(self, *, allow_divergence: bool) -> int:
        if self.nothing_completed:
            return EXIT_NOTHING_COMPLETED
        if self.diverged and not allow_divergence:
            return EXIT_DIVERGED
        return EXIT_OK

    def as_dict(self) -> dict[str, object]:
        total = self.comparison
        return {
            "tool": "specmon measure",
            "started": self.started,
            "finished": self.finished,
            "settings": self.settings.as_dict(),
            "baseline": {"url": self.baseline.base_url, **self.baseline_info.as_dict()},
            "speculative": {
                "url": self.speculative.base_url,
                "metrics_url": self.speculative.metrics_url,
                **self.speculative_info.as_dict(),
            },
            "levels": [lv.as_dict() for lv in self.levels],
            "completions": {
                "compared": total.compared,
                "identical": total.identical,
                "differing": total.differing,
                "not_compared": total.not_compared,
                "all_identical": total.all_identical,
            },
            "warnings": list(self.warnings),
        }


def analyse(raw: RawMeasurement) -> MeasureReport:
    """Every figure of the run, grouped by concurrency level in the order measured."""
    warnings = list(raw.warnings)
    if raw.baseline_drafts:
        warnings.append(
            f"the baseline server counted {raw.baseline_drafts} drafts during the run: it is "
            "speculating too, so this is not a comparison with speculation off"
        )
    levels: list[Level] = []
    for concurrency in dict.fromkeys(r.concurrency for r in raw.runs):
        runs = [r for r in raw.runs if r.concurrency == concurrency]
        rows = [
            _row(
                r.workload,
                concurrency,
                r.prompts,
                (r.baseline.outcomes, r.baseline.seconds),
                (r.speculative.outcomes, r.speculative.seconds),
                r.metrics,
            )
            for r in runs
        ]
        if len(runs) > 1:
            rows.append(
                _all_row(
                    concurrency, [(r.baseline, r.speculative, r.metrics, r.prompts) for r in runs]
                )
            )
        load = LevelLoad(
            baseline=_sum_loads([r.baseline_load for r in runs]),
            speculative=_sum_loads([r.speculative_load for r in runs]),
        )
        levels.append(Level(concurrency, tuple(rows), load))
    return MeasureReport(
        settings=raw.settings,
        baseline=raw.baseline,
        speculative=raw.speculative,
        baseline_info=raw.baseline_info,
        speculative_info=raw.speculative_info,
        levels=tuple(levels),
        started=raw.started,
        finished=raw.finished,
        warnings=tuple(warnings),
    )
