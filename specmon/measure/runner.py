"""Run a measurement: the same requests through both servers, level by level (I/O).

For each level and each workload, the baseline server gets every request (times the
level's repeats, each repeat with its own seed), then the speculative server gets the same
requests, with its metrics page read just before and just after so the counter increase
belongs to that workload alone. At a concurrency level at most ``concurrency`` requests are
in flight (a semaphore); at a rate the requests are sent on a Poisson schedule, the same for
both servers, whatever the server does (open loop; at most MAX_IN_FLIGHT at once). The two
servers are never loaded at the same time: on one machine they would slow each other down.
Requests are streamed unless ``Settings.stream`` is off. Synthetic workloads get their
prompts first, calibrated against the baseline server's own token counts.
"""

from __future__ import annotations

import asyncio
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from specmon.engines.model import SpecCounters
from specmon.load import LoadCounters, LoadInterval, interval, load_counters
from specmon.measure.client import Client, MetricsRead, RequestError, open_session
from specmon.measure.endpoints import (
    Endpoint,
    ServerInfo,
    engine_from_props,
    engine_from_version,
    models_from_list,
)
from specmon.measure.levels import LoadLevel, poisson_arrivals, repeats_at
from specmon.measure.prompts import Conversation, Workload
from specmon.measure.results import (
    MetricsDelta,
    Outcome,
    RawMeasurement,
    Settings,
    SideRun,
    WorkloadRun,
)
from specmon.measure.synthetic import PROBE_WORDS, fit, synthetic_text, words_for
from specmon.windows import increase

__all__ = ["Plan", "ProgressFn", "Unreachable", "load_of", "measure", "request_payload"]

#: progress(done, total, what)
ProgressFn = Callable[[int, int, str], None]

WARMUP_PROMPT = "Say hello."
#: How long to wait for counters to catch up with the answers (engines that update them a
#: moment after the response).
SETTLE_SECONDS = 2.0
SETTLE_STEP = 0.1
#: Open loop: requests in flight at most (a bound on a rate the server cannot follow).
MAX_IN_FLIGHT = 256


class Unreachable(Exception):
    """A server could not be used at all; the message says which and why."""


@dataclass(frozen=True, slots=True)
class Plan:
    baseline: Endpoint
    speculative: Endpoint
    settings: Settings
    workloads: tuple[Workload, ...]
    #: The API key's value (from the environment); never stored in results.
    api_key: str | None = None


def request_payload(
    settings: Settings,
    prompt: str | Conversation,
    *,
    max_tokens: int | None = None,
    seed: int | None = None,
    stream: bool | None = None,
) -> dict[str, Any]:
    """The request body both servers get: temperature 0, the same seed and limits; streamed
    with the usage in its last chunk unless ``stream`` (default: the settings') is off."""
    messages = [("user", prompt)] if isinstance(prompt, str) else list(prompt)
    streamed = settings.stream if stream is None else stream
    body: dict[str, Any] = {
        "model": settings.model,
        "messages": [{"role": role, "content": content} for role, content in messages],
        "max_tokens": settings.max_tokens if max_tokens is None else max_tokens,
        "temperature": 0,
        "top_p": 1,
        "seed": settings.seed if seed is None else seed,
        "stream": streamed,
    }
    if streamed:
        body["stream_options"] = {"include_usage": True}
    if settings.ignore_eos:
        body["ignore_eos"] = True
    return body


def _now_iso() -> str:
    return datetime.now().astimezone().isoformat(timespec="seconds")


class _Progress:
    def __init__(self, callback: ProgressFn | None, total: int) -> None:
        self._callback = callback
        self.total = total
        self.done = 0

    def step(self, what: str) -> None:
        self.done += 1
        if self._callback is not None:
            self._callback(self.done, self.total, what)

    def show(self, what: str) -> None:
        if self._callback is not None:
            self._callback(self.done, self.total, what)


async def _one(
    client: Client, endpoint: Endpoint, settings: Settings, workload: str, index: int,
    repeat: int, messages: Conversation, run_started: float,
) -> Outcome:  # fmt: skip
    """One request; its repeat has its own seed (repeats are distinct requests)."""
    payload = request_payload(settings, messages, seed=settings.seed + repeat)
    started = time.perf_counter()
    sent_at = started - run_started
    try:
        if settings.stream:
            streamed = await client.chat_stream(endpoint, payload, timeout=settings.timeout)
        else:
            answer = await client.chat(endpoint, payload, timeout=settings.timeout)
    except RequestError as exc:
        return Outcome(workload, index, repeat, time.perf_counter() - started, error=str(exc),
                       sent_at=sent_at)  # fmt: skip
    latency = time.perf_counter() - started
    if settings.stream:
        return Outcome(workload, index, repeat, latency, answer=streamed.answer,
                       first_token=streamed.first_token, last_token=streamed.last_token,
                       sent_at=sent_at)  # fmt: skip
    return Outcome(workload, index, repeat, latency, answer=answer, sent_at=sent_at)


def arrival_seed(settings: Settings, level: LoadLevel, workload: str) -> int:
    """The Poisson schedule's seed: the same for both servers, another per level and
    workload (crc32: Python's str hash changes from run to run)."""
    return zlib.crc32(f"{settings.seed}/{level.rate!r}/{workload}".encode())


async def _run_side(
    client: Client,
    endpoint: Endpoint,
    workload: Workload,
    plan: Plan,
    level: LoadLevel,
    repeats: int,
    progress: _Progress,
    what: str,
) -> SideRun:
    settings = plan.settings
    requests = [
        (index, repeat, messages)
        for repeat in range(repeats)
        for index, messages in enumerate(workload.requests)
    ]
    gate = asyncio.Semaphore(level.concurrency or MAX_IN_FLIGHT)

    async def gated(index: int, repeat: int, messages: Conversation) -> Outcome:
        async with gate:
            outcome = await _one(client, endpoint, settings, workload.name, index, repeat,
                                 messages, started)  # fmt: skip
        progress.step(what)
        return outcome

    progress.show(what)
    started = time.perf_counter()
    delayed = 0
    resent = client.resent
    if level.rate is None:
        outcomes = await asyncio.gather(*(gated(*request) for request in requests))
    else:
        arrivals = poisson_arrivals(
            level.rate, len(requests), seed=arrival_seed(settings, level, workload.name)
        )
        tasks: list[asyncio.Task[Outcome]] = []
        for request, at in zip(requests, arrivals, strict=True):
            wait = started + at - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)
            delayed += gate.locked()
            tasks.append(asyncio.ensure_future(gated(*request)))
        outcomes = await asyncio.gather(*tasks)
    return SideRun(tuple(outcomes), time.perf_counter() - started, delayed=delayed,
                   resent=client.resent - resent)  # fmt: skip


async def _prompt_tokens(client: Client, plan: Plan, text: str) -> int:
    """The baseline server's prompt_tokens for ``text`` as a one-message request."""
    payload = request_payload(plan.settings, text, max_tokens=1, stream=False)
    try:
        answer = await client.chat(plan.baseline, payload, timeout=plan.settings.timeout)
    except RequestError as exc:
        raise Unreachable(f"--input-tokens: a calibration request failed: {exc}") from None
    if answer.prompt_tokens is None:
        raise Unreachable(
            "--input-tokens: the baseline server reports no usage.prompt_tokens, which "
            "specmon needs to make prompts of a given length (it has no tokenizer)"
        )
    return answer.prompt_tokens


async def _synthetic(client: Client, plan: Plan, workload: Workload) -> Workload:
    """The workload's prompts, each about ``input_tokens`` long as the baseline server
    counts them (specmon.measure.synthetic): two probes fit the template's overhead and
    the tokens per word; each prompt is then made, probed and corrected once."""
    target = workload.input_tokens
    assert target is not None
    seed = plan.settings.seed
    points = [
        (n, await _prompt_tokens(client, plan, synthetic_text(n, seed=seed - 1 - i)))
        for i, n in enumerate(PROBE_WORDS)
    ]
    try:
        overhead, per_word = fit(points)
    except ValueError as exc:
        raise Unreachable(f"--input-tokens: {exc}") from None
    if target <= overhead + 1:
        raise Unreachable(
            f"--input-tokens {target}: the chat template alone takes about {overhead:.0f} "
            "prompt tokens on this server; ask for more"
        )
    requests: list[Conversation] = []
    measured: list[int] = []
    for index in range(workload.synthetic_count):
        words = words_for(target, overhead=overhead, per_word=per_word)
        text = synthetic_text(words, seed=seed * 1000 + index)
        got = await _prompt_tokens(client, plan, text)
        if got != target:
            words = max(1, words + round((target - got) / per_word))
            text = synthetic_text(words, seed=seed * 1000 + index)
            got = await _prompt_tokens(client, plan, text)
        requests.append((("user", text),))
        measured.append(got)
    mean = sum(measured) / len(measured)
    note = (
        f"{len(requests)} synthetic prompts of {target} prompt tokens asked, "
        f"{min(measured)}-{max(measured)} made (mean {mean:.1f}, the baseline server's count, "
        f"its chat template included: about {overhead:.0f}); {per_word:.2f} tokens per word"
    )
    return replace(workload, requests=tuple(requests), note=note)


def _delta(before: MetricsRead, after: MetricsRead) -> MetricsDelta:
    """The counter increase between two reads, through a reset-aware history."""
    engine = None
    if after.page is not None and after.page.engine is not None:
        engine = after.page.engine.value
    if after.error or before.error:
        return MetricsDelta(engine=engine, error=after.error or before.error)
    assert after.page is not None and before.page is not None
    notes = tuple(after.page.notes)
    reading = after.model
    if reading is None or (reading.counters is None and reading.gauges is None):
        return MetricsDelta(engine=engine, error=after.page.message or "no speculative data")
    if reading.counters is None:
        return MetricsDelta(gauges=reading.gauges, engine=engine, notes=notes)
    previous = before.model.counters if before.model is not None else None
    zero = SpecCounters(0, 0, 0, unknown=reading.counters.unknown, derived=reading.counters.derived)
    if previous is None:
        # The page was readable but had no counters yet: they started from zero.
        previous = zero
    elif set(reading.counters.unknown) < set(previous.unknown):
        # Counters the engine did not publish before the run appeared during it
        # (TensorRT-LLM's per-position family: created when the first request finishes), so
        # they were zero before it.
        previous = zero
        notes = (
            *notes,
            "the engine's per-position counters appeared during this run: counted from zero",
        )
    try:
        window = increase(previous, reading.counters)
    except ValueError as exc:
        return MetricsDelta(engine=engine, error=f"counters: {exc} (before and after the run)")
    counters = replace(window.as_counters(), rounded=reading.counters.rounded)
    return MetricsDelta(counters=counters, engine=engine, resets=window.resets, notes=notes)


def load_of(read: MetricsRead, model: str) -> LoadCounters | None:
    """The load counters of ``model`` on a page read (speculating or not), or None."""
    page = read.page
    if read.error or page is None:
        return None
    context = page.context_of(model)
    if context is None:
        everything = (*page.models, *page.plain_models)
        if len(everything) != 1:
            return None
        context = everything[0].context
    counters = read.model.counters if read.model is not None else None
    return load_counters(context, counters)


def _load_delta(before: MetricsRead, after: MetricsRead, model: str) -> LoadInterval | None:
    first, last = load_of(before, model), load_of(after, model)
    if first is None or last is None:
        return None
    return interval(first, last, seconds=after.time - before.time)


def _generated(read: MetricsRead, model: str) -> int | None:
    if read.page is None or read.error:
        return None
    context = read.page.context_of(model)
    return None if context is None else context.generation_tokens


#: What a side's run takes besides its client, endpoint and name: the workload, the plan, the
#: level, the repeats and the progress line (:func:`_run_side`'s arguments, in order).
_Side = tuple[Workload, Plan, LoadLevel, int, _Progress]


async def _measured_side(
    client: Client, endpoint: Endpoint, side: _Side, what: str, *, model: str
) -> tuple[MetricsRead, SideRun, MetricsRead]:
    """One side's run of a workload at a level between two reads of its page, the second once
    its counters show what the answers carried (:func:`_settled_after`)."""
    before = await client.metrics(endpoint.metrics_url, model=model)
    run = await _run_side(client, endpoint, *side, what)
    return before, run, await _settled_after(client, endpoint.metrics_url, model, before, run)


async def _settled_after(
    client: Client, url: str, model: str, before: MetricsRead, run: SideRun
) -> MetricsRead:
    """Read the page after a run; while the counters show fewer generated tokens (or, with
    per-response timings, fewer draft tokens) than the answers carried, read again for a
    moment (engines that update their counters a moment after the answer)."""
    after = await client.metrics(url, model=model)
    answers = [o.answer for o in run.outcomes if o.answer is not None]
    if not answers:
        return after
    drafted = (
        None
        if any(a.draft_tokens is None for a in answers)
        else sum(a.draft_tokens or 0 for a in answers)
    )
    counted = [a.completion_tokens for a in answers]
    tokens = None if any(c is None for c in counted) else sum(c or 0 for c in counted)
    start = _generated(before, model)
    deadline = time.monotonic() + SETTLE_SECONDS
    while time.monotonic() < deadline:
        waiting = False
        if drafted is not None:
            delta = _delta(before, after)
            waiting = delta.counters is not None and delta.counters.draft_tokens < drafted
        now = _generated(after, model)
        if tokens is not None and start is not None and now is not None and now >= start:
            waiting = waiting or now - start < tokens
        if not waiting:
            break
        await asyncio.sleep(SETTLE_STEP)
        after = await client.metrics(url, model=model)
    return after


async def _probe(client: Client, endpoint: Endpoint, what: str) -> ServerInfo:
    """Engine, version and served models; :class:`Unreachable` when the server is unusable."""
    try:
        status, body = await client.get_json(endpoint.models_url)
    except RequestError as exc:
        raise Unreachable(f"{what} server {endpoint.base_url}: {exc}") from None
    if status in (401, 403):
        raise Unreachable(
            f"{what} server {endpoint.base_url}: HTTP {status} from {endpoint.models_url}: it "
            "wants an API key; put it in an environment variable and name it with --api-key-env"
        )
    models = models_from_list(body)
    found: list[str] = []
    engine = version = None
    try:
        status, body = await client.get_json(endpoint.props_url)
        build = engine_from_props(body)
        if build is not None:
            engine, version = "llamacpp", build
            found.append("GET /props build_info")
        else:
            status, body = await client.get_json(endpoint.version_url)
            version = engine_from_version(body)
            if version is not None:
                found.append("GET /version")
    except RequestError:
        pass
    return ServerInfo(engine=engine, version=version, found_by=tuple(found), models=models)


def _with_page_engine(info: ServerInfo, read: MetricsRead) -> ServerInfo:
    if read.page is None or read.page.engine is None:
        return info
    page_engine = read.page.engine.value
    if info.engine is None:
        return replace(info, engine=page_engine, found_by=(*info.found_by, "/metrics page"))
    return info


def _with_fingerprint(info: ServerInfo, runs: Sequence[SideRun]) -> ServerInfo:
    if info.version is not None:
        return info
    for run in runs:
        for outcome in run.outcomes:
            if outcome.answer is not None and outcome.answer.fingerprint:
                return replace(
                    info,
                    version=outcome.answer.fingerprint,
                    found_by=(*info.found_by, "system_fingerprint"),
                )
    return info


async def measure(plan: Plan, *, progress: ProgressFn | None = None) -> RawMeasurement:
    """Run every level and workload; raise :class:`Unreachable` when a server cannot be used."""
    settings = plan.settings
    started = _now_iso()
    warnings: list[str] = []
    levels = settings.levels
    total = sum(
        w.size * repeats_at(level, prompts=w.size, repeats=settings.repeats)
        for level in levels
        for w in plan.workloads
    )
    ticker = _Progress(progress, 2 * total)
    connections = max((lv.concurrency or MAX_IN_FLIGHT for lv in levels), default=1)
    workloads = list(plan.workloads)
    async with open_session(connections) as session:
        client = Client(session, api_key=plan.api_key)
        base_info = await _probe(client, plan.baseline, "baseline")
        spec_info = await _probe(client, plan.speculative, "speculative")
        for label, info in (("baseline", base_info), ("with-draft", spec_info)):
            if info.models is not None and settings.model not in info.models:
                warnings.append(
                    f"the {label} server lists models {', '.join(info.models) or '(none)'}, "
                    f"not {settings.model}"
                )
        base_first = await client.metrics(plan.baseline.metrics_url, model=settings.model)
        spec_first = await client.metrics(plan.speculative.metrics_url, model=settings.model)
        base_info = _with_page_engine(base_info, base_first)
        spec_info = _with_page_engine(spec_info, spec_first)
        if spec_first.error:
            warnings.append(
                f"acceptance counters unavailable ({spec_first.error}); per-response timings are "
                "used where the server sends them"
            )
        elif spec_first.page is not None and not spec_first.page.speculation:
            warnings.append(f"with-draft server metrics: {spec_first.page.message}")
        for _ in range(settings.warmup):
            for endpoint in (plan.baseline, plan.speculative):
                ticker.show("warm-up")
                try:
                    await client.chat(
                        endpoint,
                        request_payload(
                            settings,
                            WARMUP_PROMPT,
                            max_tokens=min(16, settings.max_tokens),
                            stream=False,
                        ),
                        timeout=settings.timeout,
                    )
                except RequestError as exc:
                    warnings.append(f"warm-up request to {endpoint.base_url} failed: {exc}")
        for i, workload in enumerate(workloads):
            if workload.input_tokens is not None and not workload.requests:
                ticker.show(f"making the {workload.name} prompts")
                workloads[i] = await _synthetic(client, plan, workload)
        runs: list[WorkloadRun] = []
        model = settings.model
        for level in levels:
            for workload in workloads:
                what = f"{level.short()} {workload.name}"
                repeats = repeats_at(level, prompts=workload.size, repeats=settings.repeats)
                side: _Side = (workload, plan, level, repeats, ticker)
                base_before, baseline, base_after = await _measured_side(
                    client, plan.baseline, side, what + " baseline", model=model
                )
                before, speculative, after = await _measured_side(
                    client, plan.speculative, side, what + " with draft", model=model
                )
                runs.append(
                    WorkloadRun(
                        workload=workload.name,
                        level=level,
                        prompts=workload.size,
                        baseline=baseline,
                        speculative=speculative,
                        metrics=_delta(before, after),
                        baseline_load=_load_delta(base_before, base_after, model),
                        speculative_load=_load_delta(before, after, model),
                        repeats=repeats,
                    )
                )
        base_last = await client.metrics(plan.baseline.metrics_url, model=settings.model)
    baseline_drafts = None
    if base_first.model is not None and base_first.model.counters is not None:
        delta = _delta(base_first, base_last)
        baseline_drafts = delta.counters.drafts if delta.counters is not None else None
    base_info = _with_fingerprint(base_info, [r.baseline for r in runs])
    spec_info = _with_fingerprint(spec_info, [r.speculative for r in runs])
    differs = [
        f"{what}: baseline {getattr(base_info, what)}, with draft {getattr(spec_info, what)}"
        for what in ("engine", "version")
        if None not in (getattr(base_info, what), getattr(spec_info, what))
        and getattr(base_info, what) != getattr(spec_info, what)
    ]
    if differs:
        warnings.append(
            "the two servers differ (" + "; ".join(differs) + "): the comparison assumes the "
            "same engine and build, differing only in the draft"
        )
    notes = [f"{w.name}: {w.note}" for w in workloads if w.note]
    return RawMeasurement(
        settings=settings,
        baseline=plan.baseline,
        speculative=plan.speculative,
        baseline_info=base_info,
        speculative_info=spec_info,
        runs=tuple(runs),
        started=started,
        finished=_now_iso(),
        baseline_drafts=baseline_drafts,
        warnings=tuple(warnings),
        workload_notes=tuple(notes),
    )
