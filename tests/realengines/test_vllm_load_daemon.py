"""The daemon's load-aware verdict on real vLLM 0.32.0 CPU (issue 13, "What it must show"): a
vLLM server with n-gram speculation (k = 3) and its twin without speculation, both running at
once, watched by ``specmon run`` (the speculative target configured ``baseline: vllm-base``),
while ``specmon measure`` drives them at concurrency 1 and 4 (tests/realengines/daemon_ab.py).

Per level, as on llama.cpp (``check_levels``): the daemon's bucket has figures, its realized
speed-up is within 15 % of measure's tokens/s ratio, its c agrees with measure's step-time c
(the same counters: ``STEP_RATIO_AGREEMENT``) and implied c (the c-equivalent of 15 %), and
the exported crossover equals the hand computation. And what this CPU does with n-gram
speculation, measured in docs/load-signals.md (c about 1.5: the speculative code path makes
every step slower, and the few drafted tokens are charged for it): speculation does not pay
at any measured concurrency, so every bucket's realized speed-up is below 1 and the crossover
is the lowest measured concurrency, with nothing below it that paid.

Two vLLM servers at once on the 2-core machine: each with ``VLLM_CPU_KVCACHE_SPACE=1`` (1 GiB
of KV cache, tests/realengines/provision.py) and ``--max-num-seqs 4``; the test prints how long
they took to start together and their resident memory (every process of each server).
"""

from __future__ import annotations

import json
import os
import time
from contextlib import ExitStack
from pathlib import Path

import pytest

from specmon.load import ProfileLevel
from tests.realengines import servers
from tests.realengines.conftest import wait_target_up, write_config
from tests.realengines.daemon_ab import check_levels, report_table, run_measure_level, scraped_after
from tests.support.daemon import Exported, daemon

pytestmark = pytest.mark.realengine

#: (requests in flight, measure --repeats); four prompts per repeat, 64 tokens each. A vLLM
#: engine step takes 5-10 ms here, so a level gives each server several hundred steps.
LEVELS = ((1, 2), (4, 8))
MAX_TOKENS = 64
MAX_NUM_SEQS = 4
#: vLLM's counters move at every engine step (no lumps, unlike llama.cpp): a short interval
#: is fine.
INTERVAL = 1.0
BASE, SPEC = "vllm-base", "vllm-spec"
#: As on llama.cpp: the daemon's bucket leaves out the end of each level (fewer requests, a
#: lower bucket) that measure's level keeps.
STEP_RATIO_AGREEMENT = 0.08


def group_rss_mib(pid: int) -> float:
    """Resident memory of every process in the session ``pid`` leads (the server, vLLM's
    engine core and workers), from /proc."""
    total_kib = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[3]) != pid:  # the process group (servers run in their own session)
                continue
            for line in Path(f"/proc/{entry}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total_kib += int(line.split()[1])
        except (OSError, ValueError, IndexError):
            continue
    return total_kib / 1024


def write_prompts(directory: Path) -> Path:
    path = directory / "prompts.jsonl"
    path.write_text(
        "".join(
            json.dumps({"workload": "repetitive", "prompt": p}) + "\n"
            for p in servers.REPETITIVE_PROMPTS
        )
    )
    return path


def test_daemon_buckets_agree_with_measure_on_vllm(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    levels: list[ProfileLevel] = []
    with ExitStack() as stack:
        base = servers.vllm_server(k=None, max_num_seqs=MAX_NUM_SEQS)
        spec = servers.vllm_server(max_num_seqs=MAX_NUM_SEQS)
        began = time.monotonic()
        for srv in (base, spec):
            stack.callback(srv.close)
            srv.start(wait=False)
        for srv in (base, spec):
            srv.wait_ready()
        started = time.monotonic() - began
        assert base.pid is not None and spec.pid is not None
        memory = (group_rss_mib(base.pid), group_rss_mib(spec.pid))

        config = write_config(
            tmp_path / "specmon.yml",
            [(BASE, base.metrics_url, {}), (SPEC, spec.metrics_url, {"baseline": BASE})],
            windows=["10m"],
            interval=f"{INTERVAL:g}s",
        )
        prompts = write_prompts(tmp_path)
        with daemon(config, tmp_path) as d:
            wait_target_up(d, BASE)
            wait_target_up(d, SPEC)
            for index, (n, repeats) in enumerate(LEVELS):
                if index:
                    time.sleep(INTERVAL + 0.5)  # no interval of a server holds two levels
                argv = [
                    "measure", "--baseline", base.base_url + "/v1",
                    "--speculative", spec.base_url + "/v1", "--model", servers.TINY_HF_NAME,
                    "--prompts", str(prompts), "--workloads", "repetitive",
                    "--concurrency", str(n), "--repeats", str(repeats),
                    "--max-tokens", str(MAX_TOKENS), "--ignore-eos", "--allow-divergence",
                    "--warmup", "0" if index else "1",
                ]  # fmt: skip
                levels.append(run_measure_level(argv, tmp_path / f"profile-{n}.json"))
            capsys.readouterr()
            end = time.time()
            m: Exported = d.wait_for(lambda: scraped_after(d, (BASE, SPEC), end), timeout=20)
            api = d.targets()

    outcome = check_levels(
        levels, api=api, metrics=m, target=SPEC, baseline=BASE, window="10m",
        step_ratio_agreement=STEP_RATIO_AGREEMENT,
    )  # fmt: skip
    # n-gram speculation does not pay on this CPU at any measured concurrency.
    for row in outcome.rows:
        assert row.bucket["realized_speedup"] < 1.0, row
    assert outcome.crossover is not None
    lowest = min(n for n, _ in outcome.points)
    at, paid_below = outcome.crossover
    assert at == pytest.approx(lowest) and not paid_below
    with capsys.disabled():
        print(
            f"\ntwo vLLM servers started together in {started:.0f} s; resident memory "
            f"{memory[0]:.0f} MiB (baseline) + {memory[1]:.0f} MiB (n-gram)"
        )
        report_table(outcome)
