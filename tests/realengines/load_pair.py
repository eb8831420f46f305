"""A real llama.cpp pair for load profiles: a 29 M-parameter target and its twin with a tiny
draft (several hundred times smaller) whose acceptance ``--spec-synth-rates`` fixes.

    python -m tests.realengines.load_pair [--levels 1,2,4,8,16] [--repeats 4] \\
        [--max-tokens 32] [--threads 1] [--profile-out FILE]

starts both servers, runs ``specmon measure --profile-out`` against them and prints its
table (the recorded run in docs/measure.md). Both servers stop at the end.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specmon.engines import read_page
from specmon.load import LoadCounters, LoadInterval, interval, load_counters
from tests.realengines import load_evidence, models, servers

#: Synthetic per-position survival: K = 1 + 2.4 = 3.4 tokens per verification step.
RATES = (0.9, 0.7, 0.5, 0.3)
#: Short prompts: with a byte-level vocabulary, a long prompt's prefill would dominate.
PROMPTS = ("Say hello.", "Count to ten.", "Name a colour.", "Spell cat.")
N_PARALLEL = 16


@contextmanager
def load_pair(*, threads: int = 1) -> Iterator[tuple[servers.LlamaServer, servers.LlamaServer]]:
    """(baseline, speculative), started; the same target model, -np 16."""
    target = models.ensure_shaped_gguf(models.LOAD_TARGET)
    draft = models.ensure_shaped_gguf(models.LOAD_DRAFT)
    with ExitStack() as stack:
        base = stack.enter_context(
            servers.llama_server(target, n_parallel=N_PARALLEL, threads=threads)
        )
        spec = stack.enter_context(
            servers.llama_server(
                target, draft=draft, n_max=len(RATES), synth_rates=RATES,
                n_parallel=N_PARALLEL, threads=threads,
            )
        )  # fmt: skip
        yield base, spec


def measure_argv(
    base: servers.LlamaServer,
    spec: servers.LlamaServer,
    *,
    prompts_file: Path,
    levels: Sequence[int],
    repeats: int,
    max_tokens: int,
    profile_out: Path,
) -> list[str]:
    return [
        "measure",
        "--baseline", base.base_url + "/v1",
        "--speculative", spec.base_url + "/v1",
        "--model", servers.TINY_GGUF_NAME,
        "--prompts", str(prompts_file),
        "--workloads", "short",
        "--concurrency", ",".join(str(n) for n in levels),
        "--repeats", str(repeats),
        "--max-tokens", str(max_tokens),
        "--ignore-eos",
        # --spec-synth-rates accepts by fiat: the output is not the target's (llama.cpp
        # says so at start-up), so completions differ by design.
        "--allow-divergence",
        "--warmup", "1",
        "--profile-out", str(profile_out),
    ]  # fmt: skip


def level_argv(
    base: servers.LlamaServer,
    spec: servers.LlamaServer,
    *,
    prompts_file: Path,
    level: int,
    repeats: int,
    max_tokens: int,
    warmup: bool,
) -> list[str]:
    """``measure_argv`` for one level, its profile left to the caller (run_measure_level
    names one), with or without measure's warm-up request."""
    argv = measure_argv(
        base, spec, prompts_file=prompts_file, levels=[level], repeats=repeats,
        max_tokens=max_tokens, profile_out=Path("unused.json"),
    )  # fmt: skip
    cut = argv.index("--profile-out")
    argv = argv[:cut] + argv[cut + 2 :]
    argv[argv.index("--warmup") + 1] = "1" if warmup else "0"
    return argv


@dataclass(frozen=True)
class Run:
    """One run of one server: its load counters over it and the client's own timing."""

    load: LoadInterval
    client: dict[str, Any]

    @property
    def client_tpot(self) -> float | None:
        value = self.client.get("tpot_seconds")
        return float(value) if value is not None else None


def run_once(
    srv: servers.LlamaServer, *, concurrency: int, n_requests: int, max_tokens: int
) -> Run:
    """``n_requests`` streamed requests at ``concurrency``; the server's load counters over
    them (specmon's adapter and :mod:`specmon.load`) and the client's timing of every chunk
    (tests/realengines/load_evidence.py)."""

    def read() -> LoadCounters:
        page = read_page(srv.metrics().text, model=servers.TINY_GGUF_NAME)
        context = page.context_of(servers.TINY_GGUF_NAME)
        assert context is not None
        model = next(iter(page.models), None)
        counters = load_counters(context, model.counters if model is not None else None)
        assert counters is not None
        return counters

    before = read()
    records = load_evidence.drive(
        srv.port, n=n_requests, concurrency=concurrency, max_tokens=max_tokens, prompts=PROMPTS
    )
    errors = [r.error for r in records if r.error]
    if errors:
        raise servers.ServerError(f"{len(errors)} requests failed: {errors[0]}")
    return Run(interval(before, read()), load_evidence.client_figures(records))


def best_runs(
    base: servers.LlamaServer,
    spec: servers.LlamaServer,
    *,
    concurrency: int,
    rounds: int = 3,
    max_tokens: int = 48,
) -> tuple[Run, Run]:
    """The fastest of ``rounds`` alternating runs of each server at ``concurrency`` (by the
    step time its counters give): other work on a shared machine only ever adds time, so the
    minimum is the closest to the engines' own speed."""
    n = max(concurrency, 8)
    runs: dict[str, list[Run]] = {"base": [], "spec": []}
    for _ in range(rounds):
        for name, srv in (("base", base), ("spec", spec)):
            runs[name].append(
                run_once(srv, concurrency=concurrency, n_requests=n, max_tokens=max_tokens)
            )

    def fastest(items: list[Run]) -> Run:
        return min(items, key=lambda r: r.load.step_seconds or float("inf"))

    return fastest(runs["base"]), fastest(runs["spec"])


def write_prompts(directory: Path) -> Path:
    path = directory / "prompts.jsonl"
    path.write_text("".join(f'{{"workload": "short", "prompt": "{p}"}}\n' for p in PROMPTS))
    return path


def main(argv: list[str] | None = None) -> int:
    from specmon.cli.main import main as specmon

    parser = argparse.ArgumentParser(prog="python -m tests.realengines.load_pair")
    parser.add_argument("--levels", default="1,2,4,8,16")
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--profile-out", type=Path, default=Path("load-profile.json"))
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--best-of",
        type=int,
        default=0,
        metavar="N",
        help="instead of specmon measure: per level, the fastest of N alternating streamed "
        "runs per server, counters against the client's timing",
    )
    args = parser.parse_args(argv)
    levels = [int(x) for x in args.levels.split(",")]
    with tempfile.TemporaryDirectory() as tmp, load_pair(threads=args.threads) as (base, spec):
        print(f"baseline:    {' '.join(base.argv)}", flush=True)
        print(f"speculative: {' '.join(spec.argv)}", flush=True)
        if args.best_of:
            return _best_of_table(base, spec, levels, args.best_of, args.max_tokens)
        command = measure_argv(
            base, spec, prompts_file=write_prompts(Path(tmp)), levels=levels,
            repeats=args.repeats, max_tokens=args.max_tokens, profile_out=args.profile_out,
        )  # fmt: skip
        return specmon([*command, *(["--json"] if args.json else [])])


def _best_of_table(
    base: servers.LlamaServer,
    spec: servers.LlamaServer,
    levels: Sequence[int],
    rounds: int,
    max_tokens: int,
) -> int:
    print(
        "level  engine conc. base  spec  step ms base   spec  TPOT ms base   spec  "
        "realized  client TPOT ratio  k̄     c"
    )
    for level in levels:
        b, s = best_runs(base, spec, concurrency=level, rounds=rounds, max_tokens=max_tokens)
        bl, sl = b.load, s.load
        assert bl.step_seconds and sl.step_seconds and sl.drafted_per_step
        assert bl.time_per_output_token_seconds and sl.time_per_output_token_seconds
        realized = bl.time_per_output_token_seconds / sl.time_per_output_token_seconds
        client = b.client_tpot / s.client_tpot if b.client_tpot and s.client_tpot else float("nan")
        cost = (sl.step_seconds / bl.step_seconds - 1) / sl.drafted_per_step
        print(
            f"{level:>5}  {bl.concurrency or 0:>17.2f}  {sl.concurrency or 0:>4.2f}  "
            f"{bl.step_seconds * 1e3:>12.2f}  {sl.step_seconds * 1e3:>5.2f}  "
            f"{bl.time_per_output_token_seconds * 1e3:>12.2f}  "
            f"{sl.time_per_output_token_seconds * 1e3:>5.2f}  {realized:>8.2f}x  "
            f"{client:>16.2f}x  {sl.drafted_per_step:.2f}  {cost:.3f}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
