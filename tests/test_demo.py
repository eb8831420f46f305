"""``specmon demo``: the README's first command, run as a user would."""

from __future__ import annotations

import contextlib
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time

from tests.support.daemon import Exported, get

HEALTHY = ("vllm-eagle", "vllm-ngram", "llamacpp-draft", "trtllm-draft", "sglang-eagle",
           "sglang-router", "tgi-medusa", "vllm-loaded", "tgi-loaded")  # fmt: skip


def test_demo_no_tui_degrading_target_crosses_below_breakeven() -> None:
    """The demo as the README shows it, time-compressed: the degrading target's draft stops
    matching after 4 s instead of 45, so its 30 s primary window is all bad by 36 s; the
    load-aware pairs (vLLM and TGI) go through their load levels (1, 4, 16, 8, 2, 32 requests) in 6 s each,
    and the crossover its load model has by construction (10.9 requests) is found within a
    bucket, with speculation paying at low load and costing time at high load."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "specmon", "demo", "--duration", "42", "--drop-at", "4",
         "--load-phase", "6", "--switch-at", "8", "--no-tui", "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    base = None
    lines: list[str] = []
    while base is None:
        line = proc.stdout.readline()
        assert line, "demo exited before printing its status page"
        lines.append(line)
        match = re.search(r"status page\s+(http://\S+)/", line)
        if match:
            base = match.group(1)
    margins: list[float] = []
    crossovers: list[float] = []
    buckets: dict[str, float] = {}
    tgi_buckets: dict[str, float] = {}
    targets_seen: set[str] = set()
    epochs: dict[str, str] = {}
    deadline = time.monotonic() + 50
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            status, body, _ = get(base + "/metrics", timeout=2)
        except OSError:
            break  # the demo has finished and closed its port
        if status == 200:
            m = Exported.parse(body.decode())
            targets_seen |= {dict(k)["target"] for k in m.series("specmon_up")}
            switched = m.series("specmon_config_epoch_info", target="vllm-switched")
            epochs.update({dict(k)["epoch"]: dict(k)["speculation"] for k in switched})
            margin = m.value("specmon_alpha_margin_ratio", target="vllm-degrading", window="30s")
            if margin is not None:
                margins.append(margin)
            loaded = {"target": "vllm-loaded", "window": "2m"}
            crossover = m.value("specmon_crossover_concurrency", **loaded)
            if crossover is not None:
                crossovers.append(crossover)
            for key, value in m.series("specmon_bucket_realized_speedup_ratio", **loaded).items():
                buckets[dict(key)["concurrency"]] = value
            tgi = {"target": "tgi-loaded", "window": "2m"}
            for key, value in m.series("specmon_bucket_realized_speedup_ratio", **tgi).items():
                tgi_buckets[dict(key)["concurrency"]] = value
            healthy = [
                m.value("specmon_alpha_margin_ratio", target=t, window="30s") for t in HEALTHY
            ]
            assert all(h is None or h > 0 for h in healthy), healthy
        time.sleep(2)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    text = "".join(lines) + out
    assert targets_seen == {
        *HEALTHY,
        "vllm-degrading",
        "vllm-baseline",
        "tgi-baseline",
        "vllm-switched",
    }
    # vllm-switched, restarted with its draft at 8 s: an epoch without speculation, then one with.
    assert epochs == {"1": "false", "2": "true"}, epochs
    # The load-aware verdict against the twin: pays at 1 and 4 requests, costs from 16.
    assert buckets["1"] > 1.5 and buckets["4"] > 1.0, buckets
    assert buckets["16"] < 1.0, buckets
    assert crossovers and 6.0 <= crossovers[-1] <= 16.0, crossovers
    # The TGI pair, read from the router's decode-call timing, tells the same story.
    assert tgi_buckets["1"] > 1.5 and tgi_buckets["4"] > 1.0, tgi_buckets
    assert tgi_buckets["16"] < 1.0, tgi_buckets
    assert margins and margins[0] > 0 and min(margins) < 0, margins
    for name in targets_seen:
        assert name in text
    assert "stopped cleanly" in text
    assert "margin_below_breakeven" in err


def test_demo_tui_redraws_and_stops_on_ctrl_c() -> None:
    pid, fd = pty.fork()
    if pid == 0:  # child: the demo on a terminal
        argv = [
            sys.executable,
            "-m",
            "specmon",
            "demo",
            "--listen",
            "127.0.0.1:0",
            "--refresh",
            "0.5",
        ]
        os.execv(sys.executable, argv)  # noqa: S606
    output = b""
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline and output.count(b"\x1b[H\x1b[J") < 6:
            ready, _, _ = select.select([fd], [], [], 1.0)
            if ready:
                output += os.read(fd, 65536)
        os.kill(pid, signal.SIGINT)
        end = time.monotonic() + 10
        while time.monotonic() < end:
            ready, _, _ = select.select([fd], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(fd, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                output += chunk
        _, status = os.waitpid(pid, 0)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    text = output.decode(errors="replace")
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, text[-2000:]
    assert text.count("\x1b[H\x1b[J") >= 6  # redrawn in place
    assert "\x1b[32m" in text  # coloured margins
    assert "vllm-eagle" in text and "stopped cleanly" in text
