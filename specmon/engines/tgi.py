"""Hugging Face Text Generation Inference (the router's ``GET /metrics``).

Written from TGI's ``backends/v3/src/backend.rs`` (``send_responses``) and
``router/src/server.rs`` (the Prometheus recorder); where each name comes from is recorded in
``tests/fixtures/pages/README.md``. No labels: the model is "default" unless configured.

``tgi_request_skipped_tokens`` gets one observation per request per generation step: n - 1,
where n is the number of tokens the step emitted, i.e. the draft tokens that step accepted
(0..speculate). So its ``_count`` is a number of steps (a sample size: specmon's drafts) and its
``_sum`` the accepted draft tokens. Each request's prefill step is observed too, as 0 (it emits
one token), which biases acceptance slightly low. There is no draft-token counter.

- Releases that set buckets for it (``0, 1, ..., speculate``) render a histogram: the
  cumulative buckets give the distribution of accepted length, hence per-position survival
  directly: P(accepted >= i) = 1 - bucket(le = i - 1) / count, and the chain length (the
  largest finite bucket).
- Newer releases leave its buckets unset (commented out in ``router/src/server.rs``), so
  metrics-exporter-prometheus renders a **summary**: ``_sum`` and ``_count`` only (its
  quantiles cover a short recent window and are not used); no per-position data and no k.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping

from specmon.engines._common import AdapterError, count, labels_by_name
from specmon.engines.model import (
    Context,
    Engine,
    ModelReading,
    Rejection,
    RejectReason,
    SpecCounters,
)
from specmon.parser import Page, Sample

__all__ = ["TgiAdapter"]

_NAME = "tgi_request_skipped_tokens"
_COUNT = _NAME + "_count"
_SUM = _NAME + "_sum"
_BUCKET = _NAME + "_bucket"
_RUNNING = "tgi_batch_current_size"
_GENERATED = "tgi_request_generated_tokens_sum"
#: One observation per engine step, ``method="decode"`` or ``"prefill"``: the router's wall
#: time of the whole call (forward, token decoding, filtering) in ``backends/v3/src/backend.rs``.
_STEP_SUM = "tgi_batch_inference_duration_sum"
_STEP_COUNT = "tgi_batch_inference_duration_count"
#: One observation per new batch taken from the queue (``queue.rs``): its size, so the ``_sum``
#: counts the requests that went through a prefill step.
_PREFILLED = "tgi_batch_next_size_sum"
_MAX_K = 64

NOTE = (
    "TGI: drafts = tgi_request_skipped_tokens_count (one observation per request per step, "
    "including each request's prefill step as 0, which biases acceptance slightly low); "
    "accepted tokens = its _sum; no draft-token counter"
)
NOTE_HISTOGRAM = (
    "TGI: per-position survival from the histogram's cumulative buckets: "
    "P(accepted >= i) = 1 - bucket(le=i-1) / count; chain length = the largest bucket"
)
NOTE_OFF = (
    "TGI observes tgi_request_skipped_tokens on every step, speculating or not; this page "
    "shows no accepted speculative token (speculation off, --speculate 0, or nothing accepted "
    "yet)"
)
NOTE_LOAD = (
    "TGI load: concurrency = request-steps (tgi_request_skipped_tokens_count less the "
    "requests prefilled, tgi_batch_next_size_sum) / decode steps "
    "(tgi_batch_inference_duration_count{method=decode}); step time = the decode steps' mean "
    "wall time (its _sum / _count), each interval's requests weighted by its mean batch; "
    "prefill calls that stall running requests are not in it"
)
NOTE_SUMMARY = (
    "TGI renders tgi_request_skipped_tokens as a summary (no buckets): no per-position data "
    "and no chain length (configure chain_length = TGI's --speculate, shown by GET /info)"
)


def _bucket_counts(samples: list[Sample]) -> dict[float, float] | None:
    """Cumulative counts by upper bound, or None when the buckets are not the integer steps
    0, 1, ..., K that TGI sets (then no per-position data can be read from them)."""
    out: dict[float, float] = {}
    for sample in samples:
        raw = sample.labels.get("le")
        if raw is None:
            return None
        try:
            bound = float(raw)
        except ValueError:
            return None
        out[bound] = out.get(bound, 0.0) + sample.value
    finite = sorted(b for b in out if math.isfinite(b))
    if not finite or finite != [float(i) for i in range(len(finite))]:
        return None
    if len(finite) - 1 > _MAX_K:
        return None
    return out


class TgiAdapter:
    engine = Engine.TGI
    wanted: tuple[str, ...] = (
        _COUNT,
        _SUM,
        _BUCKET,
        _RUNNING,
        _GENERATED,
        _STEP_SUM,
        _STEP_COUNT,
        _PREFILLED,
    )
    markers: tuple[str, ...] = (_NAME,)
    series_labels: Mapping[str, tuple[str, ...]] = labels_by_name(
        wanted, by_name={_BUCKET: ("le",), _STEP_SUM: ("method",), _STEP_COUNT: ("method",)}
    )

    def read(self, page: Page) -> tuple[list[ModelReading | Rejection], list[str]]:
        if not page.has(_COUNT):
            return [], []
        drafts = count(sum(s.value for s in page.get(_COUNT)), "skipped_tokens_count")
        total = sum(s.value for s in page.get(_SUM))
        accepted = count(total, "skipped_tokens_sum")
        notes = [NOTE]
        per_pos: tuple[int, ...] = ()
        chain: int | None = None
        buckets = _bucket_counts(page.get(_BUCKET)) if page.has(_BUCKET) else None
        if buckets is not None:
            k = len([b for b in buckets if math.isfinite(b)]) - 1
            cumulative = [count(buckets[float(i)], f"bucket le={i}") for i in range(k + 1)]
            if any(b < a for a, b in itertools.pairwise(cumulative)) or (
                cumulative and cumulative[-1] > drafts
            ):
                raise AdapterError(
                    RejectReason.POSITIONS_RISE,
                    "tgi_request_skipped_tokens buckets are not cumulative or exceed _count",
                )
            if k == 0:
                return _plain(page, drafts), [NOTE_OFF]
            per_pos = tuple(drafts - cumulative[i] for i in range(k))
            chain = k
            exact = sum(per_pos)
            if cumulative and cumulative[-1] == drafts and exact != accepted:
                notes.append(
                    f"TGI: _sum ({accepted}) differs from the buckets' total ({exact}); "
                    "the buckets' exact integer total is used"
                )
            accepted = exact if cumulative and cumulative[-1] == drafts else accepted
            notes.append(NOTE_HISTOGRAM)
        else:
            if accepted == 0:
                # TGI observes 0 on every step when it does not speculate: a page that never
                # accepted a token cannot be told apart from speculation switched off.
                return _plain(page, drafts), [NOTE_OFF]
            notes.append(NOTE_SUMMARY)
        context, refused = _context(page, drafts)
        reading = ModelReading(
            model="default",
            counters=SpecCounters(
                drafts=drafts,
                draft_tokens=0,
                accepted_tokens=accepted,
                accepted_per_position=per_pos,
                unknown=("draft_tokens",),
            ),
            context=context,
            chain_length=chain,
        )
        if reading.context.engine_step_seconds is not None:
            notes.append(NOTE_LOAD)
        return [reading, *refused], notes


def _plain(page: Page, observations: int) -> list[ModelReading | Rejection]:
    """A TGI server that does not speculate (a twin): its load series alone."""
    context, refused = _context(page, observations)
    return [ModelReading(model="default", context=context), *refused]


def _decode(samples: list[Sample]) -> float | None:
    values = [s.value for s in samples if s.labels.get("method") == "decode"]
    return sum(values) if values else None


def _context(page: Page, observations: int) -> tuple[Context, list[Rejection]]:
    """The load series: the batch gauge, generated tokens, and the step timing that gives
    concurrency, step time and time per output token (all three present, or none used; none
    when more requests were prefilled than steps observed: a Rejection of the load alone)."""
    refused: list[Rejection] = []
    running = page.get(_RUNNING)
    generated = page.get(_GENERATED)
    step_seconds = _decode(page.get(_STEP_SUM))
    steps = _decode(page.get(_STEP_COUNT))
    prefilled = page.get(_PREFILLED)
    engine_steps = request_steps = None
    if step_seconds is not None and steps is not None and prefilled:
        try:
            engine_steps = count(steps, "batch_inference_duration_count")
            entered = count(sum(s.value for s in prefilled), "batch_next_size_sum")
        except AdapterError:
            step_seconds = None
        else:
            if entered > observations:
                refused.append(
                    Rejection(
                        "default",
                        RejectReason.PREFILLS_ABOVE_OBSERVATIONS,
                        f"tgi_batch_next_size_sum ({entered}) above the step observations "
                        f"tgi_request_skipped_tokens_count ({observations}): no load figures",
                        whole_model=False,
                    )
                )
                step_seconds = engine_steps = None
            else:
                request_steps = observations - entered
    else:
        step_seconds = None
    context = Context(
        requests_running=sum(s.value for s in running) if running else None,
        generation_tokens=(
            count(sum(s.value for s in generated), "generated_tokens_sum") if generated else None
        ),
        engine_steps=engine_steps,
        engine_step_seconds=step_seconds,
        request_steps=request_steps,
    )
    return context, refused
