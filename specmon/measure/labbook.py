"""Lab-notebook lines: one JSON object per table row, appended to a file.

:func:`labbook_records` is pure; :func:`append_labbook` writes. A line is self-contained
(engine, version, model, date and settings on every line), so a notebook can be grepped or
loaded with any JSON-lines reader. Completions are evidence, not record: only the first
difference is kept. No line ever holds an API key (:class:`Settings` has only the variable's
name).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specmon import __version__, jsontext
from specmon.measure.analysis import MeasureReport

__all__ = ["LAB", "append_labbook", "labbook_records"]

LAB = "specmon/measure"


def labbook_records(report: MeasureReport) -> list[dict[str, Any]]:
    s = report.settings
    common: dict[str, Any] = {
        "lab": LAB,
        "recorded_at": report.finished,
        "run_started": report.started,
        "specmon_version": __version__,
        "label": s.label,
        "engine": report.speculative_info.engine,
        "engine_version": report.speculative_info.version,
        "baseline_engine": report.baseline_info.engine,
        "baseline_engine_version": report.baseline_info.version,
        "model": s.model,
        "baseline_url": report.baseline.base_url,
        "speculative_url": report.speculative.base_url,
        "settings": s.as_dict(),
    }
    records: list[dict[str, Any]] = []
    held = {id(row): level.held for level in report.levels for row in level.rows}
    for row in report.rows():
        b = row.breakeven
        level_held = held.get(id(row))
        a = row.acceptance
        c = row.comparison
        records.append(
            {
                **common,
                "concurrency": row.concurrency,
                "rate_per_second": row.level.rate,
                "level_held": None if level_held is None else level_held.ok,
                "workload": row.workload,
                "prompts": row.prompts,
                "repeats": row.repeats,
                "prompt_tokens_mean": row.baseline.prompt_tokens_mean,
                "completion_tokens_mean": row.baseline.completion_tokens_mean,
                "timing": {
                    "baseline": row.baseline.timing.as_dict(),
                    "speculative": row.speculative.timing.as_dict(),
                    "ratio": row.timing_ratios,
                },
                "baseline_tokens_per_s": row.baseline.tokens_per_second,
                "speculative_tokens_per_s": row.speculative.tokens_per_second,
                "speed_ratio": row.speed_ratio,
                "acceptance": a.ratio,
                "acceptance_source": a.source,
                "acceptance_histogram": list(a.per_request_histogram) or None,
                "per_request": [r.as_dict() for r in a.requests] or None,
                "per_request_agrees_with_counters": a.per_request_agree,
                "counters": None if a.counters is None else a.counters.counts_dict(),
                "mean_acceptance_length": a.mean_acceptance_length,
                "drafted_per_iteration": a.drafted_per_iteration,
                "implied_draft_cost": None if b is None else b.implied_draft_cost,
                "breakeven_alpha": None if b is None else b.breakeven_alpha,
                "completions_identical": c.all_identical,
                "completions_compared": c.compared,
                "completions_differing": c.differing,
                "first_difference": c.differences[0].as_dict() if c.differences else None,
                "requests": {
                    "baseline": row.baseline.requests,
                    "speculative": row.speculative.requests,
                },
                "failed": {"baseline": row.baseline.failed, "speculative": row.speculative.failed},
                "completion_tokens": {
                    "baseline": row.baseline.tokens,
                    "speculative": row.speculative.tokens,
                },
                "latency_p50_s": {
                    "baseline": row.baseline.latency_p50,
                    "speculative": row.speculative.latency_p50,
                },
                "latency_p95_s": {
                    "baseline": row.baseline.latency_p95,
                    "speculative": row.speculative.latency_p95,
                },
                "notes": [*row.notes, *a.notes],
                "warnings": list(report.warnings),
            }
        )
    return records


def append_labbook(path: Path, records: Sequence[dict[str, Any]]) -> None:
    """Append one JSON line per record (created if missing)."""
    with path.open("a", encoding="utf-8") as handle:
        for record in records:
            handle.write(jsontext.dumps(record, sort_keys=True, ensure_ascii=False) + "\n")
