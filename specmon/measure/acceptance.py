"""The speculative server's acceptance during one run, and where it came from: vLLM's
per-request figures, the server's counter deltas, llama.cpp's per-response timings, or an
engine's gauges. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from specmon import arithmetic
from specmon.engines.model import SpecCounters
from specmon.measure.results import MetricsDelta, Outcome

__all__ = ["Acceptance", "RequestAcceptance", "acceptance_of"]


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
