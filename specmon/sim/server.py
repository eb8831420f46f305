"""The simulator's HTTP side: metrics pages, failure modes and OpenAI-shaped endpoints.

One :class:`VirtualTarget` is one simulated engine. A :class:`SimServer` serves many of them,
either one port each (``/metrics``, ``/v1/...``, as a real engine) or all on one port under
``/t/NAME/`` (cheap for load tests).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from specmon import jsontext
from specmon.sim.batch import Batcher
from specmon.sim.engine import Mode, SimEngine, SimSettings
from specmon.sim.pages import PageKind, PageTemplate, load_template, restrict_page
from specmon.sim.scenario import Scenario
from specmon.sim.streaming import SimAnswer, finish_stream, open_stream, send_chunk, send_words

__all__ = ["SimServer", "VirtualTarget", "completion_text"]

LLAMACPP_501_BODY = (
    '{"error":{"code":501,"message":"This server does not support metrics endpoint. '
    'Start it with `--metrics`","type":"not_supported_error"}}'
)
_GARBAGE = (
    "<html><head><title>502 Bad Gateway</title></head>\n<body>\n"
    "<center><h1>502 Bad Gateway</h1></center>\n<hr><center>nginx</center>\n</body></html>\n"
)
_WORDS = [
    "the",
    "draft",
    "proposes",
    "tokens",
    "and",
    "the",
    "target",
    "verifies",
    "them",
    "in",
    "one",
    "pass",
    "while",
    "acceptance",
    "falls",
    "along",
    "the",
    "chain",
    "so",
    "a",
    "shorter",
    "chain",
    "often",
    "pays",
    "better",
    "than",
    "a",
    "longer",
    "one",
    "when",
    "the",
    "draft",
    "costs",
    "more",
    "than",
    "it",
    "saves",
    "for",
    "every",
    "token",
    "kept",
]


def completion_text(model: str, prompt: str, max_tokens: int, seed: int) -> list[str]:
    """Deterministic output: the same words for the same model, prompt and seed (0 for a
    greedy request), whether or not speculation is on (as real greedy speculative decoding
    guarantees)."""
    digest = hashlib.sha256(f"{model}\0{prompt}\0{seed}".encode()).digest()
    rng = random.Random(digest)  # noqa: S311 - text generation, not security
    prompt_words = prompt.split() or _WORDS
    out = []
    for _ in range(max_tokens):
        # Copy-heavy behaviour: often repeat a word of the prompt.
        source = prompt_words if rng.random() < 0.5 else _WORDS
        out.append(source[rng.randrange(len(source))])
    return out


@dataclass
class VirtualTarget:
    name: str
    kind: PageKind
    model: str
    engine: SimEngine
    scenario: Scenario | None = None
    #: Simulated seconds per target decode step in chat completions (0: answer at once).
    step_seconds: float = 0.0
    #: Draft cost used to time speculative steps: a step costs (1 + k c) target steps.
    draft_cost: float = 0.1
    usage: bool = True
    #: vLLM's --per-request-spec-decode-metrics: "none" or "summary" (vLLM kinds only).
    per_request_spec_metrics: str = "none"
    fail_every: int = 0
    diverge_every: int = 0
    hang_seconds: float = 3600.0
    #: Wall seconds per simulated second for chat completions under a load model.
    time_scale: float = 1.0
    #: Sequences decoded at once under a load model (vLLM's max_num_seqs, llama.cpp's -np
    #: slots); more requests wait in a queue, as an engine's do.
    max_batch: int = 256
    started: float = field(default_factory=time.monotonic)
    requests: int = 0
    _applied: int = 0
    _cycle: int = 0
    _template: PageTemplate | None = None
    _batcher: Batcher | None = None

    @property
    def batcher(self) -> Batcher:
        """The continuous-batching loop for chat completions (with a load model)."""
        if self._batcher is None or self._batcher.engine is not self.engine:
            self._batcher = Batcher(
                self.engine, time_scale=self.time_scale, max_batch=self.max_batch
            )
        return self._batcher

    def __post_init__(self) -> None:
        self._template = load_template(self.kind)
        if self.scenario is not None:
            self.tick(self.started)

    @property
    def template(self) -> PageTemplate:
        assert self._template is not None
        return self._template

    @property
    def mode(self) -> Mode:
        return self.engine.settings.mode

    def tick(self, now: float | None = None) -> None:
        """Apply due scenario phases (advancing the counters up to each phase's time), then
        advance to ``now``."""
        now = time.monotonic() if now is None else now
        scenario = self.scenario
        if scenario is not None:
            elapsed = now - self.started
            if scenario.repeat and scenario.period:
                cycle = int(elapsed // scenario.period)
                if cycle != self._cycle:
                    self._cycle = cycle
                    self._applied = 0
                elapsed -= cycle * scenario.period
            base = now - elapsed
            phases = scenario.phases
            while self._applied < len(phases) and phases[self._applied].at <= elapsed:
                phase = phases[self._applied]
                at = base + phase.at
                wall = time.time() - (now - at)
                self.engine.advance(at)
                self.engine.configure(phase.apply(self.engine.settings), now=at, wall=wall)
                if phase.restart:
                    self.engine.restart(now=at, wall=wall)
                self._applied += 1
        self.engine.advance(now)

    def page(self) -> str:
        return self.template.render(self.engine, model=self.model, draft_cost=self.draft_cost)


class SimServer:
    def __init__(self, targets: list[VirtualTarget]) -> None:
        self.targets = {t.name: t for t in targets}
        self._runners: list[web.AppRunner] = []
        self._hangs: set[asyncio.Task[Any]] = set()
        self.addresses: dict[str, str] = {}
        self.metrics_requests = 0
        self.last_metrics_headers: dict[str, str] = {}

    # -- apps -------------------------------------------------------------------------------

    def app_for(self, target: VirtualTarget) -> web.Application:
        app = web.Application()
        self._routes(app, "", lambda request: target)
        return app

    def shared_app(self) -> web.Application:
        app = web.Application()

        def pick(request: web.Request) -> VirtualTarget:
            name = request.match_info["name"]
            if name not in self.targets:
                raise web.HTTPNotFound(text=f"no simulated target {name!r}\n")
            return self.targets[name]

        self._routes(app, "/t/{name}", pick)
        app.router.add_get("/targets", self._list)
        return app

    def _routes(
        self, app: web.Application, prefix: str, pick: Callable[[web.Request], VirtualTarget]
    ) -> None:
        async def metrics(request: web.Request) -> web.StreamResponse:
            return await self._metrics(pick(request), request)

        async def models(request: web.Request) -> web.Response:
            return self._models(pick(request))

        async def chat(request: web.Request) -> web.StreamResponse:
            return await self._chat(pick(request), request)

        async def health(request: web.Request) -> web.Response:
            return web.json_response({"status": "ok"}, dumps=jsontext.dumps)

        app.router.add_get(prefix + "/metrics", metrics)
        app.router.add_get(prefix + "/metrics/", metrics)
        # trtllm-serve's Prometheus page; sgl-router's aggregated engine page. (The simulator
        # serves every page on /metrics too; trtllm-serve's real /metrics is JSON.)
        app.router.add_get(prefix + "/prometheus/metrics", metrics)
        app.router.add_get(prefix + "/engine_metrics", metrics)
        app.router.add_get(prefix + "/v1/models", models)
        app.router.add_post(prefix + "/v1/chat/completions", chat)
        app.router.add_get(prefix + "/health", health)

    async def _list(self, request: web.Request) -> web.Response:
        return web.json_response(
            [
                {"name": t.name, "kind": t.kind.value, "model": t.model, "mode": t.mode.value}
                for t in self.targets.values()
            ],
            dumps=jsontext.dumps,
        )

    # -- handlers ---------------------------------------------------------------------------

    async def _metrics(self, target: VirtualTarget, request: web.Request) -> web.StreamResponse:
        target.tick()
        mode = target.mode
        if mode is Mode.ERROR:
            return web.Response(status=500, text="Internal Server Error\n")
        if mode is Mode.NO_METRICS:
            return web.Response(status=501, text=LLAMACPP_501_BODY, content_type="application/json")
        if mode is Mode.GARBAGE:
            return web.Response(text=_GARBAGE, content_type="text/html")
        if mode is Mode.HANG:
            task = asyncio.current_task()
            if task is not None:
                self._hangs.add(task)
            try:
                await asyncio.sleep(target.hang_seconds)
            finally:
                if task is not None:
                    self._hangs.discard(task)
            return web.Response(status=504, text="hung\n")
        kind = target.kind
        body = target.page()
        content_type = target.template.content_type
        # vLLM's /metrics/ negotiates OpenMetrics; serve the same page in that format then.
        if request.path.endswith("/metrics/") and kind is PageKind.VLLM:
            accept = request.headers.get("Accept", "")
            if "openmetrics" in accept:
                om = load_template(PageKind.VLLM_OPENMETRICS)
                body = om.render(target.engine, model=target.model)
                content_type = om.content_type
            else:
                # ... and is prometheus_client's own app, which honours ?name[]= (vLLM's
                # /metrics, prometheus-fastapi-instrumentator, ignores it): checked on vLLM
                # 0.32.0 in the classic format (the OpenMetrics case is not simulated).
                names = request.query.getall("name[]", [])
                if names:
                    body = restrict_page(body, names)
        response = web.Response(body=body.encode("utf-8"))
        response.headers["Content-Type"] = content_type
        if target.template.family in ("vllm", "sglang", "trtllm") and "gzip" in request.headers.get(
            "Accept-Encoding", ""
        ):
            # vLLM, SGLang and trtllm-serve serve /metrics through prometheus_client, which
            # gzips on request.
            response.enable_compression(web.ContentCoding.gzip)
        self.metrics_requests += 1
        self.last_metrics_headers = dict(request.headers)
        return response

    def _models(self, target: VirtualTarget) -> web.Response:
        created = int(target.engine.started_wall)
        if target.kind is PageKind.LLAMACPP:
            body: dict[str, Any] = {
                "models": [{"name": target.model, "model": target.model, "type": "model"}],
                "object": "list",
                "data": [
                    {"id": target.model, "object": "model", "created": created,
                     "owned_by": "llamacpp"}
                ],
            }  # fmt: skip
        else:
            body = {
                "object": "list",
                "data": [
                    {"id": target.model, "object": "model", "created": created,
                     "owned_by": "vllm", "root": target.model, "parent": None,
                     "max_model_len": 4096}
                ],
            }  # fmt: skip
        return web.json_response(body, dumps=jsontext.dumps)

    async def _chat(self, target: VirtualTarget, request: web.Request) -> web.StreamResponse:
        try:
            payload = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return web.json_response(
                {"error": {"message": "invalid JSON"}}, status=400, dumps=jsontext.dumps
            )
        if not isinstance(payload, dict):
            return web.json_response(
                {"error": {"message": "expected an object"}}, status=400, dumps=jsontext.dumps
            )
        target.tick()
        target.requests += 1
        if target.fail_every and target.requests % target.fail_every == 0:
            return web.json_response(
                {"error": {"code": 500, "message": "simulated failure"}},
                status=500,
                dumps=jsontext.dumps,
            )
        messages = payload.get("messages") or []
        prompt = "\n".join(str(m.get("content", "")) for m in messages if isinstance(m, dict))
        max_tokens = int(payload.get("max_tokens") or 16)
        # Greedy decoding (temperature 0) ignores the seed, as real engines' does: repeats of
        # a prompt with distinct seeds (specmon measure) get the same text.
        greedy = payload.get("temperature") == 0
        seed = 0 if greedy else int(payload.get("seed") or 0)
        stream = payload.get("stream") is True
        options = payload.get("stream_options")
        include_usage = isinstance(options, dict) and options.get("include_usage") is True
        words = completion_text(target.model, prompt, max_tokens, seed)
        digest = int(hashlib.sha256(prompt.encode()).hexdigest(), 16)
        settings: SimSettings = target.engine.settings
        if target.diverge_every and settings.speculation and digest % target.diverge_every == 0:
            # A batch-shape floating-point difference: the tail changes from some point on.
            cut = max(1, len(words) // 2)
            words = words[:cut] + [w[::-1] for w in words[cut:]]
        answer = SimAnswer(
            ident=f"chatcmpl-{digest % 10**12:012d}{target.requests}",
            model=target.model,
            words=words,
            prompt_tokens=len(prompt.split()),
        )
        if stream:
            return await self._streamed(target, request, answer, include_usage=include_usage)
        decode_seconds: float | None = None
        spec_metrics: dict[str, Any] | None = None
        if settings.load_model is not None:
            # Continuous batching at the load model's speed (specmon.sim.batch). Requests
            # interleave here, so no per-request speculative metrics are made up for them.
            result = await target.batcher.submit(max_tokens)
            steps, draft_tokens, accepted = result.steps, result.draft_tokens, result.accepted
            decode_seconds = result.decode_seconds
        else:
            steps, draft_tokens, accepted, spec_metrics = self._run_at_once(target, max_tokens)
            if target.step_seconds > 0:
                await asyncio.sleep(steps * _step_wall(target))
        body: dict[str, Any] = {
            "id": answer.ident,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": target.model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": " ".join(words)},
                    "finish_reason": "length",
                }
            ],
        }
        body.update(
            _answer_extras(
                target, answer, steps=steps, draft_tokens=draft_tokens, accepted=accepted,
                decode_seconds=decode_seconds, spec_metrics=spec_metrics,
            )
        )  # fmt: skip
        return web.json_response(body, dumps=jsontext.dumps)

    def _run_at_once(
        self, target: VirtualTarget, max_tokens: int
    ) -> tuple[int, int, int, dict[str, Any] | None]:
        """Without a load model: the request's steps at once (nothing else moves the counters
        between the two snapshots); vLLM's per-request metrics when asked for."""
        settings = target.engine.settings
        before = _snapshot(target.engine)
        steps, _drafts, draft_tokens, accepted = target.engine.run_request(max_tokens)
        spec_metrics = None
        if (
            target.per_request_spec_metrics != "none"
            and target.template.family == "vllm"
            and settings.speculation
        ):
            spec_metrics = _vllm_spec_metrics(
                before, _snapshot(target.engine), settings.chain_length
            )
        return steps, draft_tokens, accepted, spec_metrics

    async def _streamed(
        self, target: VirtualTarget, request: web.Request, answer: SimAnswer, *,
        include_usage: bool,
    ) -> web.StreamResponse:  # fmt: skip
        """The same answer as server-sent events (specmon.sim.streaming): with a load model,
        each engine step's tokens as the step ends; without one, the request's steps spread
        over the time a non-streamed answer takes, the tokens evenly over them."""
        response = await open_stream(request)
        await send_chunk(response, answer, delta={"role": "assistant", "content": ""})
        max_tokens = len(answer.words)
        settings = target.engine.settings
        decode_seconds: float | None = None
        spec_metrics: dict[str, Any] | None = None
        sent = 0
        if settings.load_model is not None:
            queue: asyncio.Queue[int] = asyncio.Queue()
            task = asyncio.ensure_future(target.batcher.submit(max_tokens, progress=queue))
            while sent < max_tokens:
                count = await queue.get()
                sent = await send_words(response, answer, sent, count)
            result = await task
            steps, draft_tokens, accepted = result.steps, result.draft_tokens, result.accepted
            decode_seconds = result.decode_seconds
        else:
            steps, draft_tokens, accepted, spec_metrics = self._run_at_once(target, max_tokens)
            wall = _step_wall(target)
            for index in range(max(steps, 1)):
                if wall > 0:
                    await asyncio.sleep(wall)
                sent = await send_words(
                    response, answer, sent, round((index + 1) * max_tokens / max(steps, 1))
                )
        extras = _answer_extras(
            target, answer, steps=steps, draft_tokens=draft_tokens, accepted=accepted,
            decode_seconds=decode_seconds, spec_metrics=spec_metrics,
        )  # fmt: skip
        await finish_stream(response, answer, extras, include_usage=include_usage,
                            llamacpp=target.kind is PageKind.LLAMACPP)  # fmt: skip
        return response

    # -- lifecycle --------------------------------------------------------------------------

    async def _serve(self, app: web.Application, host: str, port: int) -> int:
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await runner.setup()
        site = web.TCPSite(runner, host, port, reuse_address=True)
        await site.start()
        self._runners.append(runner)
        server = getattr(site, "_server", None)
        sockets = getattr(server, "sockets", None) or []
        return int(sockets[0].getsockname()[1]) if sockets else port

    async def start_each(self, host: str = "127.0.0.1", ports: list[int] | None = None) -> None:
        """One port per target (0 = any free port)."""
        for index, target in enumerate(self.targets.values()):
            port = ports[index] if ports else 0
            bound = await self._serve(self.app_for(target), host, port)
            self.addresses[target.name] = f"http://{host}:{bound}"

    async def start_shared(self, host: str = "127.0.0.1", port: int = 0) -> int:
        """All targets on one port, under /t/NAME/."""
        bound = await self._serve(self.shared_app(), host, port)
        for name in self.targets:
            self.addresses[name] = f"http://{host}:{bound}/t/{name}"
        return bound

    async def stop(self) -> None:
        for task in list(self._hangs):
            task.cancel()
        for target in self.targets.values():
            if target._batcher is not None:
                await target._batcher.close()
        for runner in self._runners:
            await runner.cleanup()
        self._runners.clear()


def _step_wall(target: VirtualTarget) -> float:
    """Wall seconds of one step without a load model: the target step, times 1 + k c with
    speculation."""
    settings = target.engine.settings
    cost = 1.0 + settings.chain_length * target.draft_cost if settings.speculation else 1.0
    return target.step_seconds * cost


def _answer_extras(
    target: VirtualTarget, answer: SimAnswer, *, steps: int, draft_tokens: int, accepted: int,
    decode_seconds: float | None, spec_metrics: dict[str, Any] | None,
) -> dict[str, Any]:  # fmt: skip
    """usage, vLLM's per-request metrics and llama.cpp's timings of an answer: the body's
    fields beside ``choices`` (the last streamed chunk's)."""
    max_tokens = len(answer.words)
    extras: dict[str, Any] = {}
    if target.usage:
        extras["usage"] = {
            "completion_tokens": max_tokens,
            "prompt_tokens": answer.prompt_tokens,
            "total_tokens": max_tokens + answer.prompt_tokens,
        }
    if spec_metrics is not None:
        # vLLM 0.32.0's PerRequestMetrics, as its non-streaming response serialises it
        # (captured: tests/fixtures/pages/vllm-chat-completion-spec-metrics.json).
        extras["metrics"] = {
            "time_to_first_token_ms": None,
            "generation_time_ms": None,
            "queue_time_ms": None,
            "mean_itl_ms": None,
            "tokens_per_second": None,
            "speculative_decoding": spec_metrics,
        }
    if target.kind is PageKind.LLAMACPP:
        predicted_ms = (
            decode_seconds * 1000.0
            if decode_seconds is not None
            else steps * target.step_seconds * 1000.0
        )
        extras["timings"] = {
            "prompt_n": answer.prompt_tokens,
            "predicted_n": max_tokens,
            "predicted_ms": predicted_ms,
            "predicted_per_second": (max_tokens / (predicted_ms / 1000.0))
            if predicted_ms > 0
            else None,
        }
        if target.engine.settings.speculation:
            extras["timings"]["draft_n"] = draft_tokens
            extras["timings"]["draft_n_accepted"] = accepted
    return extras


def _snapshot(engine: SimEngine) -> tuple[int, int, tuple[int, ...]]:
    c = engine.counters
    return c.drafts, c.draft_tokens, tuple(c.per_pos)


def _vllm_spec_metrics(
    before: tuple[int, int, tuple[int, ...]], after: tuple[int, int, tuple[int, ...]], k: int
) -> dict[str, Any]:
    """vLLM's ``metrics.speculative_decoding`` of one request (``RequestSpecDecodeMetrics.
    to_dict``), from the counters' increase over the request. ``run_request`` runs without
    an await, so no other request's steps can interleave."""
    steps = after[0] - before[0]
    draft_tokens = after[1] - before[1]
    per_pos = [a - b for a, b in zip(after[2], before[2], strict=True)]
    reached = [steps, *per_pos, 0]
    histogram = [reached[j] - reached[j + 1] for j in range(k + 1)]
    accepted = sum(per_pos)
    return {
        "mean_acceptance_length": 1.0 + accepted / steps if steps else 1.0,
        "draft_acceptance_rate": accepted / draft_tokens if draft_tokens else 0.0,
        "acceptance_histogram": histogram,
        "num_spec_steps": steps,
        "num_accepted_draft_tokens": accepted,
        "num_draft_tokens": draft_tokens,
        "num_spec_tokens": k,
        "per_step_accepted": None,
        "per_step_drafted": None,
    }


_LUMPY = frozenset(
    {PageKind.LLAMACPP, PageKind.SGLANG_CURRENT, PageKind.SGLANG_ROUTER, PageKind.TRTLLM}
)


def make_target(
    *,
    name: str,
    kind: PageKind,
    settings: SimSettings,
    model: str | None = None,
    scenario: Scenario | None = None,
    seed: int | None = None,
    **options: Any,
) -> VirtualTarget:
    now = time.monotonic()
    engine = SimEngine(
        settings=settings,
        seed=seed,
        now=now,
        wall=time.time(),
        # Engines whose counters move when a request finishes (llama.cpp; SGLang's tokenizer
        # counters; TensorRT-LLM's per-position counters).
        lumpy=kind in _LUMPY,
    )
    default_model = {
        PageKind.LLAMACPP: "tiny-llama",
        PageKind.SGLANG: "qwen",
        PageKind.SGLANG_CURRENT: "qwen3-32b",
        PageKind.SGLANG_ROUTER: "qwen3-32b",
        PageKind.TRTLLM: "Qwen3-8B",
        PageKind.TGI: "tgi",
        PageKind.TGI_HISTOGRAM: "tgi",
    }.get(kind, "tiny-llama")
    return VirtualTarget(
        name=name,
        kind=kind,
        model=model or default_model,
        engine=engine,
        scenario=scenario,
        started=now,
        **options,
    )
