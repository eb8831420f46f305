"""The simulator's streamed chat completions (vLLM's and llama.cpp's chunk shapes) through the
tap: the tap's counts equal the per-request objects the streams carry."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp

from specmon.sim.engine import SimSettings
from specmon.sim.pages import PageKind
from specmon.sim.server import make_target
from specmon.tap.app import Tap
from specmon.tap.config import parse_tap_config
from specmon.tap.fields import Unparsed
from tests.support.fake_engines import running


def _events(body: bytes) -> list[dict[str, Any]]:
    return [
        json.loads(line[5:])
        for line in body.split(b"\n")
        if line.startswith(b"data:") and line.strip() != b"data: [DONE]"
    ]


def test_simulated_streams_are_counted_from_their_last_chunks() -> None:
    targets = [
        make_target(name=name, kind=kind, seed=7, per_request_spec_metrics="summary",
                    settings=SimSettings(survival=(0.8, 0.5, 0.2), drafts_per_second=0.0))
        for name, kind in (("v", PageKind.VLLM), ("l", PageKind.LLAMACPP))
    ]  # fmt: skip
    with running(targets) as engines:

        async def main() -> None:
            for name, read in (("v", "metrics"), ("l", "timings")):
                upstream = engines.url(name).removesuffix("/metrics")
                tap = Tap(parse_tap_config(None, overrides={"upstream": upstream}),
                          listen=("127.0.0.1", 0))  # fmt: skip
                port = await tap.start()
                drafted = accepted = 0
                try:
                    async with aiohttp.ClientSession() as s:
                        for usage in (True, True, False):
                            body: dict[str, Any] = {
                                "model": "m", "max_tokens": 40, "stream": True,
                                "messages": [{"role": "user", "content": "a b a b"}],
                            }  # fmt: skip
                            if usage:
                                body["stream_options"] = {"include_usage": True}
                            url = f"http://127.0.0.1:{port}/v1/chat/completions"
                            async with s.post(url, json=body) as resp:
                                raw = await resp.read()
                            assert raw.endswith(b"data: [DONE]\n\n")
                            events = _events(raw)
                            carrier = next((e for e in events if read in e), None)
                            if read == "metrics" and not usage:
                                assert carrier is None
                                continue
                            assert carrier is not None
                            if read == "metrics":
                                spec = carrier["metrics"]["speculative_decoding"]
                                drafted += spec["num_draft_tokens"]
                                accepted += spec["num_accepted_draft_tokens"]
                            else:
                                drafted += carrier["timings"]["draft_n"]
                                accepted += carrier["timings"]["draft_n_accepted"]
                    requests, d, a, _ = tap.counts.totals("all")
                    assert (d, a) == (drafted, accepted) and drafted > 0
                    assert requests == (2 if read == "metrics" else 3)
                    assert tap.counts.unparsed[Unparsed.NO_FIELDS] == (read == "metrics")
                finally:
                    await tap.stop()

        asyncio.run(main())
