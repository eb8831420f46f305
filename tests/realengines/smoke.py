"""Exercise every server variant once and print what it exported (a manual check).

    python -m tests.realengines.smoke [--vllm] [--json OUT]

llama.cpp variants: draft model (k=4), synthetic rates for k = 2, 4, 6, draft = target,
no draft, no ``--metrics`` (501), and kill + restart on the same port. With ``--vllm`` also
vLLM single API server (n-gram k=3), ``--api-server-count 2``, and kill + restart.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

from tests.realengines import servers

SAMPLE = re.compile(r'^(\w+:spec_decode_\w+?)(?:\{[^}]*position="(\d+)"[^}]*\}|\{[^}]*\})? (\S+)$')


def spec_counters(page: str) -> dict[str, Any]:
    """drafts / draft_tokens / accepted / per_pos summed over every label but ``position``."""
    out: dict[str, Any] = {"drafts": 0.0, "draft_tokens": 0.0, "accepted": 0.0, "per_pos": {}}
    for line in page.splitlines():
        m = SAMPLE.match(line)
        if not m:
            continue
        name, pos, value = m.group(1), m.group(2), float(m.group(3))
        if name.endswith("_created"):
            continue
        if name.endswith("num_accepted_tokens_per_pos_total"):
            out["per_pos"][int(pos)] = out["per_pos"].get(int(pos), 0.0) + value
        elif name.endswith("num_drafts_total"):
            out["drafts"] += value
        elif name.endswith("num_draft_tokens_total"):
            out["draft_tokens"] += value
        elif name.endswith("num_accepted_tokens_total"):
            out["accepted"] += value
    d = out["drafts"] or 1.0
    out["survival"] = [round(out["per_pos"][i] / d, 3) for i in sorted(out["per_pos"])]
    return out


def run_llama(report: dict[str, Any]) -> None:
    variants: dict[str, servers.LlamaServer] = {
        "draft k=4": servers.llama_spec_server(),
        "synth k=2 (0.8,0.4)": servers.llama_synth_server((0.8, 0.4)),
        "synth k=4 (0.9,0.7,0.5,0.3)": servers.llama_synth_server(),
        "synth k=6 (0.95,0.85,0.7,0.5,0.35,0.2)": servers.llama_synth_server(
            (0.95, 0.85, 0.7, 0.5, 0.35, 0.2)
        ),
        "self-draft k=4": servers.llama_self_draft_server(),
        "baseline (no draft)": servers.llama_baseline_server(),
    }
    for name, srv in variants.items():
        with srv:
            res = servers.drive_load(srv.base_url, n_requests=8, concurrency=2, max_tokens=300)
            timings = res.responses[0].get("timings", {})
            page = srv.metrics()
            report[f"llama {name}"] = {
                "seconds": round(res.seconds, 2),
                "tokens_per_s": round(res.completion_tokens / res.seconds, 1),
                "first_response_timings_draft": [
                    timings.get("draft_n"),
                    timings.get("draft_n_accepted"),
                ],
                "counters": spec_counters(page.text),
            }
            print(name, json.dumps(report[f"llama {name}"]), flush=True)
    with servers.llama_no_metrics_server() as srv:
        resp = srv.metrics()
        report["llama no --metrics"] = {"status": resp.status, "body": resp.text}
        print("no --metrics:", resp.status, resp.text, flush=True)
    with servers.llama_spec_server() as srv:
        port, pid = srv.port, srv.pid
        hdr1 = srv.metrics().header("Process-Start-Time-Unix")
        srv.kill()
        t = time.monotonic()
        srv.restart()
        hdr2 = srv.metrics().header("Process-Start-Time-Unix")
        report["llama kill+restart"] = {
            "same_port": srv.port == port,
            "new_pid": srv.pid != pid,
            "restart_seconds": round(time.monotonic() - t, 2),
            "process_start_time_header": [hdr1, hdr2],
        }
        print("kill+restart:", report["llama kill+restart"], flush=True)


def run_vllm(report: dict[str, Any]) -> None:
    for name, srv in {
        "single k=3": servers.vllm_server(),
        "api-server-count 2": servers.vllm_server(api_server_count=2),
    }.items():
        t = time.monotonic()
        with srv:
            startup = time.monotonic() - t
            res = servers.drive_load(
                srv.base_url, n_requests=8, concurrency=4, max_tokens=200, model="tiny-llama"
            )
            entry: dict[str, Any] = {
                "startup_seconds": round(startup, 1),
                "seconds": round(res.seconds, 2),
                "counters": spec_counters(srv.metrics().text),
            }
            if name == "single k=3":
                pid = srv.pid
                srv.kill()
                t = time.monotonic()
                srv.restart()
                entry["kill+restart"] = {
                    "restart_seconds": round(time.monotonic() - t, 1),
                    "new_pid": srv.pid != pid,
                    "counters_after_restart": spec_counters(srv.metrics().text),
                }
            report[f"vllm {name}"] = entry
            print(name, json.dumps(entry), flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.realengines.smoke")
    parser.add_argument("--vllm", action="store_true")
    parser.add_argument("--no-llama", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    report: dict[str, Any] = {}
    if not args.no_llama:
        run_llama(report)
    if args.vllm:
        run_vllm(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
