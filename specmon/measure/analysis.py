"""From a raw run to the A/B table: per level (a concurrency or a rate), per workload. Pure."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from specmon.engines.model import add_counters
from specmon.load import LoadInterval
from specmon.measure.acceptance import Acceptance, RequestAcceptance, acceptance_of
from specmon.measure.breakeven import BreakEvenReading, breakeven_reading
from specmon.measure.compare import Comparison, compare
from specmon.measure.endpoints import Endpoint, ServerInfo
from specmon.measure.levels import Held, LoadLevel, held_level
from specmon.measure.results import MetricsDelta, Outcome, RawMeasurement, Settings, SideRun
from specmon.measure.stats import percentile, rate, ratio
from specmon.measure.timing import TokenTiming, timing_of, timing_ratio

__all__ = [
    "EXIT_DIVERGED",
    "EXIT_NOTHING_COMPLETED",
    "EXIT_NOT_HELD",
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
#: --profile-out was asked and no concurrency level held its load: nothing to profile.
EXIT_NOT_HELD = 4

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
    timing: TokenTiming
    #: Mean requests in flight (request seconds over wall seconds: Little's law).
    in_flight: float | None
    #: Mean prompt and completion tokens per completed request, from usage (None: not every
    #: response carried it).
    prompt_tokens_mean: float | None
    completion_tokens_mean: float | None
    #: Open loop: requests sent late because MAX_IN_FLIGHT were in flight.
    delayed: int = 0
    #: Requests sent again after the server had closed an idle connection.
    resent: int = 0

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
            **self.timing.as_dict(),
            "mean_in_flight": self.in_flight,
            "prompt_tokens_mean": self.prompt_tokens_mean,
            "completion_tokens_mean": self.completion_tokens_mean,
            "delayed_sends": self.delayed,
            "resent_requests": self.resent,
        }


def _mean(values: Sequence[int | None]) -> float | None:
    if not values or any(v is None for v in values):
        return None
    return statistics.fmean(v for v in values if v is not None)


def summarize_side(
    outcomes: Sequence[Outcome], seconds: float, delayed: int = 0, resent: int = 0
) -> SideSummary:
    """Counts, tokens per second, latency and token timing of one side's requests."""
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
        timing=timing_of(outcomes),
        in_flight=rate_of_seconds(outcomes, seconds),
        prompt_tokens_mean=_mean([o.answer.prompt_tokens for o in done if o.answer]),
        completion_tokens_mean=_mean(counts),
        delayed=delayed,
        resent=resent,
    )


def rate_of_seconds(outcomes: Sequence[Outcome], seconds: float) -> float | None:
    """Mean requests in flight over a run: the requests' seconds over the run's."""
    if not outcomes or not math.isfinite(seconds) or seconds <= 0:
        return None
    return math.fsum(o.latency for o in outcomes) / seconds


@dataclass(frozen=True, slots=True)
class Row:
    workload: str
    level: LoadLevel
    prompts: int
    baseline: SideSummary
    speculative: SideSummary
    #: Tokens/s with the draft / tokens/s without (None when either is unknown).
    speed_ratio: float | None
    acceptance: Acceptance
    comparison: Comparison
    breakeven: BreakEvenReading | None
    notes: tuple[str, ...] = ()
    #: Times each prompt was sent on each side at this level.
    repeats: int = 1

    @property
    def concurrency(self) -> int | None:
        return self.level.concurrency

    @property
    def nothing_completed(self) -> bool:
        return self.baseline.completed == 0 or self.speculative.completed == 0

    @property
    def timing_ratios(self) -> dict[str, dict[str, float | None]]:
        return timing_ratio(self.speculative.timing, self.baseline.timing)

    def as_dict(self) -> dict[str, object]:
        return {
            "workload": self.workload,
            **self.level.as_dict(),
            "prompts": self.prompts,
            "repeats": self.repeats,
            "baseline": self.baseline.as_dict(),
            "speculative": self.speculative.as_dict(),
            "speed_ratio": self.speed_ratio,
            "timing_ratio": self.timing_ratios,
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
    level: LoadLevel,
    prompts: int,
    baseline: tuple[Sequence[Outcome], float, int, int],
    speculative: tuple[Sequence[Outcome], float, int, int],
    metrics: MetricsDelta | None,
    extra_notes: Sequence[str] = (),
    repeats: int = 1,
) -> Row:
    base = summarize_side(*baseline)
    spec = summarize_side(*speculative)
    speed = ratio(spec.tokens_per_second, base.tokens_per_second)
    acceptance = acceptance_of(metrics, speculative[0])
    comparison = compare(
        {o.key: (o.answer.text if o.answer else None) for o in baseline[0]},
        {o.key: (o.answer.text if o.answer else None) for o in speculative[0]},
    )
    # At a rate both servers finish what arrives: tokens/s follow the arrivals, and their
    # ratio is no speed-up to read a draft cost from (the load table's counters still are).
    reading = (
        breakeven_reading(acceptance.used, speed)
        if acceptance.used is not None and level.rate is None
        else None
    )
    notes = [*_side_notes("baseline", base), *_side_notes("with-draft", spec), *extra_notes]
    if (base.failed or spec.failed) and speed is not None:
        notes.append("tokens/s count the completed requests only")
    for label, side in (("baseline", base), ("with-draft", spec)):
        if side.delayed:
            notes.append(
                f"{side.delayed} {label} request(s) were sent late: the open loop's limit of "
                "requests in flight was reached (the server could not follow the rate)"
            )
        if side.resent:
            notes.append(
                f"{side.resent} {label} request(s) were sent again on a new connection: the "
                "server had closed the one they first went out on before anything came back"
            )
    return Row(
        workload=workload,
        level=level,
        prompts=prompts,
        repeats=repeats,
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
    level: LoadLevel
    #: One row per workload, then the "all" row (when there is more than one workload).
    rows: tuple[Row, ...]
    load: LevelLoad = LevelLoad(None, None)
    #: A concurrency level: whether its measured concurrency held it (levels.Held); None at
    #: a rate.
    held: Held | None = None

    @property
    def concurrency(self) -> int | None:
        return self.level.concurrency

    @property
    def not_held(self) -> bool:
        return self.held is not None and not self.held.ok

    @property
    def summary(self) -> Row:
        """The row that stands for the whole level: "all", or the only workload's."""
        return next((r for r in self.rows if r.workload == ALL), self.rows[0])

    def as_dict(self) -> dict[str, object]:
        return {
            **self.level.as_dict(),
            "held": None if self.held is None else self.held.as_dict(),
            "rows": [r.as_dict() for r in self.rows],
            "load": self.load.as_dict(),
        }


def _all_row(level: LoadLevel, runs: Sequence[tuple[SideRun, SideRun, MetricsDelta, int]]) -> Row:
    base_out = [o for b, _s, _m, _p in runs for o in b.outcomes]
    spec_out = [o for _b, s, _m, _p in runs for o in s.outcomes]
    base_s = math.fsum(b.seconds for b, _s, _m, _p in runs)
    spec_s = math.fsum(s.seconds for _b, s, _m, _p in runs)
    base_late = sum(b.delayed for b, _s, _m, _p in runs)
    spec_late = sum(s.delayed for _b, s, _m, _p in runs)
    base_resent = sum(b.resent for b, _s, _m, _p in runs)
    spec_resent = sum(s.resent for _b, s, _m, _p in runs)
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
        level,
        sum(p for _b, _s, _m, p in runs),
        (base_out, base_s, base_late, base_resent),
        (spec_out, spec_s, spec_late, spec_resent),
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
    workload_notes: tuple[str, ...] = ()

    @property
    def held_levels(self) -> list[Level]:
        """The concurrency levels whose load was held: what the crossover and the profile
        read (a rate's level has no concurrency to stand at)."""
        return [lv for lv in self.levels if lv.held is not None and lv.held.ok]

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
            "workload_notes": list(self.workload_notes),
            "levels_not_held": [lv.concurrency for lv in self.levels if lv.not_held],
        }


def busy_concurrency(outcomes: Sequence[Outcome]) -> float | None:
    """Mean requests in flight while any was (the requests' seconds over the time covered by
    at least one): as an engine counts its concurrency, per step, so idle gaps between
    requests do not count. None without send times."""
    spans = sorted((o.sent_at, o.sent_at + o.latency) for o in outcomes if o.sent_at is not None)
    if not spans or len(spans) < len(outcomes):
        return None
    covered = 0.0
    start, end = spans[0]
    for s0, s1 in spans[1:]:
        if s0 > end:
            covered += end - start
            start, end = s0, s1
        else:
            end = max(end, s1)
    covered += end - start
    if covered <= 0:
        return None
    return math.fsum(b - a for a, b in spans) / covered


def _in_flight(runs: Sequence[SideRun]) -> float | None:
    """The client's measure of a level's concurrency over its workloads' runs (each run's
    busy time weighted by its length)."""
    total = covered = 0.0
    for run in runs:
        value = busy_concurrency(run.outcomes)
        if value is None:
            return None
        seconds = math.fsum(o.latency for o in run.outcomes)
        total += seconds
        covered += seconds / value
    return total / covered if covered > 0 else None


def analyse(raw: RawMeasurement) -> MeasureReport:
    """Every figure of the run, grouped by concurrency level in the order measured."""
    warnings = list(raw.warnings)
    if raw.baseline_drafts:
        warnings.append(
            f"the baseline server counted {raw.baseline_drafts} drafts during the run: it is "
            "speculating too, so this is not a comparison with speculation off"
        )
    levels: list[Level] = []
    for level in dict.fromkeys(r.level for r in raw.runs):
        runs = [r for r in raw.runs if r.level == level]
        rows = [
            _row(
                r.workload,
                level,
                r.prompts,
                (r.baseline.outcomes, r.baseline.seconds, r.baseline.delayed, r.baseline.resent),
                (
                    r.speculative.outcomes,
                    r.speculative.seconds,
                    r.speculative.delayed,
                    r.speculative.resent,
                ),
                r.metrics,
                repeats=r.repeats,
            )
            for r in runs
        ]
        if len(runs) > 1:
            rows.append(
                _all_row(level, [(r.baseline, r.speculative, r.metrics, r.prompts) for r in runs])
            )
        load = LevelLoad(
            baseline=_sum_loads([r.baseline_load for r in runs]),
            speculative=_sum_loads([r.speculative_load for r in runs]),
        )
        held = None
        if level.concurrency is not None:
            held = held_level(
                level.concurrency,
                engine=(
                    load.baseline.concurrency if load.baseline else None,
                    load.speculative.concurrency if load.speculative else None,
                ),
                client=(
                    _in_flight([r.baseline for r in runs]),
                    _in_flight([r.speculative for r in runs]),
                ),
            )
        levels.append(Level(level, tuple(rows), load, held))
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
        workload_notes=raw.workload_notes,
    )
