"""The measurement as text: the A/B table per concurrency level, then the readings. Pure."""

from __future__ import annotations

import textwrap
import unicodedata
from collections.abc import Sequence

from specmon.formatting import number
from specmon.measure.analysis import ALL, Level, MeasureReport, Row, SideSummary
from specmon.measure.breakeven import IMPLIED_COST_CAVEAT
from specmon.measure.compare import DIVERGENCE_CAVEAT, Comparison, escape
from specmon.measure.endpoints import ServerInfo
from specmon.measure.levels import HELD_SHARE
from specmon.measure.profile import crossover_line
from specmon.measure.timing import QUANTILES

__all__ = ["progress_line", "render_text"]

_NEVER_NOTE = "each drafted token cost more than a whole target step"
#: Differences printed in full; the rest are in --json.
SHOW_DIFFERENCES = 5
_WRAP = 96


def _width(text: str) -> int:
    """Display width: combining marks (the bar of k̄) take no column."""
    return sum(0 if unicodedata.combining(ch) else 1 for ch in text)


def _table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], align: str = "", indent: str = "  "
) -> list[str]:
    """Aligned columns; ``align`` has one letter per column, ``l`` or ``r`` (default: the first
    column left, the others right)."""
    align = align or "l" + "r" * (len(headers) - 1)
    widths = [_width(h) for h in headers]
    for row in rows:
        widths = [max(w, _width(cell)) for w, cell in zip(widths, row, strict=True)]

    def line(cells: Sequence[str]) -> str:
        parts = [
            cell + " " * (width - _width(cell))
            if side == "l"
            else " " * (width - _width(cell)) + cell
            for cell, width, side in zip(cells, widths, align, strict=True)
        ]
        return (indent + "  ".join(parts)).rstrip()

    return [line(headers), *(line(r) for r in rows)]


def _num(value: float | None, digits: int = 1, suffix: str = "") -> str:
    return number(value, digits, suffix=suffix)


def _tps(side: SideSummary) -> str:
    if side.completed == 0:
        return "all failed"
    if side.tokens_per_second is None:
        return "no usage" if side.usage_missing else "-"
    return f"{side.tokens_per_second:.1f}"


def _identical(c: Comparison) -> str:
    if c.compared == 0:
        return "n/a"
    word = "yes" if c.differing == 0 else "NO"
    extra = f" (+{c.not_compared} failed)" if c.not_compared else ""
    return f"{word} {c.identical}/{c.compared}{extra}"


def _acceptance(row: Row) -> str:
    a = row.acceptance
    if a.ratio is None:
        if a.mean_acceptance_length is not None and a.source is not None:
            # engines that count no draft tokens (SGLang, TGI): the mean acceptance length
            return f"K {a.mean_acceptance_length:.2f} ({a.source})"
        return "n/a"
    return f"{a.ratio:.3f} ({a.source})"


def _server(label: str, url: str, info: ServerInfo) -> str:
    engine = info.engine or "engine unknown"
    version = info.version or "version unknown"
    return f"  {label:<11} {url}  {engine} {version}"


def _wrap(text: str, indent: str = "  ") -> list[str]:
    return textwrap.wrap(text, _WRAP, initial_indent=indent, subsequent_indent=indent + "  ")


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.2f}"


def _load_section(report: MeasureReport) -> list[str]:
    """Per level, both servers' concurrency, step time and TPOT from their own counters, the
    realized speed-up and the draft costs; then the crossover line."""
    lines = ["", "Load (each server's own counters, all workloads; docs/load-signals.md)"]
    rows = []
    for level in report.levels:
        b, sp = level.load.baseline, level.load.speculative
        implied = level.summary.breakeven.implied_draft_cost if level.summary.breakeven else None
        rows.append(
            [
                _level_cell(level),
                _num(b.concurrency if b else None, 2),
                _num(sp.concurrency if sp else None, 2),
                _ms(b.step_seconds if b else None),
                _ms(sp.step_seconds if sp else None),
                _ms(b.time_per_output_token_seconds if b else None),
                _ms(sp.time_per_output_token_seconds if sp else None),
                _num(level.load.realized_speedup, 2, "x"),
                _num(level.load.draft_cost, 3),
                _num(implied, 3),
            ]
        )
    lines += _table(
        ["level", "engine conc. base", "spec", "step ms base", "spec", "TPOT ms base",
         "spec", "realized", "c (steps)", "c (implied)"],
        rows,
    )  # fmt: skip
    if any(lv.not_held for lv in report.levels):
        lines += _wrap(
            f"- 'not held': the level's measured concurrency stayed below {HELD_SHARE:.0%} "
            "of it; the crossover and the profile leave it out"
        )
    if any(lv.load.baseline is None or lv.load.speculative is None for lv in report.levels):
        lines += _wrap(
            "- '-': that server's page lacks the load series (or could not be read); the "
            "profile then falls back to the implied c"
        )
    line = crossover_line(report)
    if line is not None:
        lines += ["", f"Crossover: {line}"]
    return lines


def _level_cell(level: Level) -> str:
    """A level in the load table: ``4``, ``16 not held``, ``2/s``."""
    if level.level.rate is not None:
        return f"{level.level.rate:g}/s"
    return f"{level.concurrency}" + (" not held" if level.not_held else "")


def _level_header(level: Level) -> list[str]:
    lv = level.level
    if lv.rate is not None:
        r = level.summary
        lines = [f"Rate {lv.rate:g} requests/s (Poisson arrivals, open loop)"]
        lines.append(
            f"  requests in flight (mean, client): baseline {_num(r.baseline.in_flight, 2)}, "
            f"with draft {_num(r.speculative.in_flight, 2)}"
        )
        return lines
    lines = [f"Concurrency {lv.concurrency}"]
    if level.held is not None:
        reason = level.held.reason()
        if reason is not None:
            lines += _wrap(f"NOT HELD: {reason}")
    return lines


def _ms_q(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.1f}"


def _timing_tables(level: Level, mark: str) -> list[str]:
    """TTFT and ITL percentiles per side and their ratio, when the requests were streamed."""
    rows = [r for r in level.rows if r.baseline.timing.streamed or r.speculative.timing.streamed]
    if not rows:
        return []
    lines: list[str] = []
    for key, title in (("ttft", "time to first token (ms)"), ("itl", "inter-token latency (ms)")):
        table = []
        for r in rows:
            base = getattr(r.baseline.timing, key)
            spec = getattr(r.speculative.timing, key)
            ratios = r.timing_ratios[key]
            table.append(
                [r.workload, *(_ms_q(base[q]) for q in QUANTILES),
                 *(_ms_q(spec[q]) for q in QUANTILES),
                 _num(ratios["p50"], 2, "x"), _num(ratios["p99"], 2, "x")]
            )  # fmt: skip
        lines += [""]
        lines += _table(
            [title + mark, "baseline p50", "p90", "p99", "with draft p50", "p90", "p99",
             "ratio p50", "p99"],
            table,
        )  # fmt: skip
    return lines


def _tokens(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def render_text(report: MeasureReport, *, allow_divergence: bool = False) -> str:
    s = report.settings
    lines = [f"specmon measure · model {s.model} · {report.started}"]
    lines.append(_server("baseline", report.baseline.base_url, report.baseline_info))
    lines.append(_server("with draft", report.speculative.base_url, report.speculative_info))
    lines.append(f"  {'':<11} acceptance counters from {report.speculative.metrics_url}")
    if any(r.acceptance.source == "per-request" for r in report.rows()):
        lines.append(f"  {'':<11} and from each response's metrics.speculative_decoding (vLLM)")
    prompts = (
        sum(r.prompts for r in report.levels[0].rows if r.workload != ALL) if report.levels else 0
    )
    if s.repeats is None:
        per_level = ", ".join(
            f"{lv.level.label()}: {max(r.repeats for r in lv.rows)}" for lv in report.levels
        )
        repeats = f"auto repeats ({per_level})"
    else:
        repeats = f"{s.repeats} repeat{'' if s.repeats == 1 else 's'}"
    lines.append(
        f"  {'requests':<11} temperature 0, seed {s.seed} + the repeat's index, "
        f"max_tokens {s.max_tokens}"
        + (", ignore_eos" if s.ignore_eos else "")
        + (", streamed" if s.stream else ", not streamed")
        + f"; {prompts} prompts x {repeats} per server and level; warm-up {s.warmup}"
    )
    for note in report.workload_notes:
        lines += _wrap(f"workload {note}")
    for warning in report.warnings:
        lines += _wrap(f"warning: {warning}")
    any_usage_missing = never_pays = False
    for level in report.levels:
        lines += ["", *_level_header(level)]
        mark = " (not held)" if level.not_held else ""
        table_rows = [
            [
                r.workload,
                _tokens(r.baseline.prompt_tokens_mean),
                _tokens(r.baseline.completion_tokens_mean),
                _tps(r.baseline),
                _tps(r.speculative),
                _num(r.speed_ratio, 2, "x"),
                _acceptance(r),
                _identical(r.comparison),
            ]
            for r in level.rows
        ]
        lines += _table(
            ["workload" + mark, "in tok", "out tok", "baseline tok/s", "with draft tok/s",
             "ratio", "acceptance", "completions identical"],
            table_rows,
            "lrrrrrll",
        )  # fmt: skip
        lines += _timing_tables(level, mark)
        lines.append("")
        lines += _table(
            ["latency (s)" + mark, "baseline p50", "p95", "with draft p50", "p95", "failed"],
            [
                [
                    r.workload,
                    _num(r.baseline.latency_p50, 3),
                    _num(r.baseline.latency_p95, 3),
                    _num(r.speculative.latency_p50, 3),
                    _num(r.speculative.latency_p95, 3),
                    f"{r.baseline.failed}+{r.speculative.failed}",
                ]
                for r in level.rows
            ],
        )
        readings = [r for r in level.rows if r.breakeven is not None]
        if readings:
            lines.append("")
            lines += _table(
                ["measured break-even" + mark, "K kept/iter", "k̄ drafted/iter", "implied c",
                 "needs K >", "alpha", "break-even alpha", "best k"],
                [
                    [
                        r.workload,
                        _num(b.tokens_per_iteration, 3),
                        _num(b.drafted_per_iteration, 2),
                        _num(b.implied_draft_cost, 3),
                        _num(b.breakeven_tokens_per_iteration, 2),
                        _num(b.alpha, 3),
                        "never"
                        if b.breakeven_alpha is None and b.implied_draft_cost is not None
                        and b.implied_draft_cost > 1
                        else _num(b.breakeven_alpha, 3),
                        "-" if b.best_chain_length is None else str(b.best_chain_length),
                    ]
                    for r in readings
                    if (b := r.breakeven) is not None
                ],
            )  # fmt: skip
        elif level.level.rate is not None:
            lines += [""]
            lines += _wrap(
                "measured break-even: none at a rate. Both servers answered what arrived, so "
                "tokens/s follow the arrivals and their ratio is no speed-up; read the "
                "inter-token latency ratio, and the load table's realized speed-up and c (steps)"
            )
        else:
            lines += ["", "  measured break-even: needs the with-draft server's draft counters "
                      "and both token rates"]  # fmt: skip
        notes: dict[str, None] = {}
        for r in level.rows:
            any_usage_missing |= bool(r.baseline.usage_missing or r.speculative.usage_missing)
            if r.breakeven is not None and (r.breakeven.implied_draft_cost or 0.0) > 1.0:
                never_pays = True
            if r.workload == ALL:
                continue  # the same notes again, summed: they are in --json
            for note in (
                *r.notes,
                *r.acceptance.notes,
                *(r.breakeven.notes if r.breakeven else ()),
            ):
                if not note.startswith(_NEVER_NOTE):
                    notes[f"{r.workload}: {note}"] = None
        for note in notes:
            lines += _wrap(f"- {note}")
    lines += _load_section(report)
    lines += ["", "Completions"]
    total = report.comparison
    if total.compared == 0:
        lines.append("  nothing could be compared: no prompt was answered by both servers")
    elif total.differing == 0:
        lines.append(
            f"  {total.identical} of {total.compared} identical, byte for byte"
            + (
                f" ({total.not_compared} not compared: a request failed)"
                if total.not_compared
                else ""
            )
        )
    else:
        lines.append(
            f"  {total.differing} of {total.compared} DIFFER between the servers"
            + (
                f" ({total.not_compared} not compared: a request failed)"
                if total.not_compared
                else ""
            )
        )
        shown = 0
        for r in report.rows(include_all=False):
            for d in r.comparison.differences:
                if shown >= SHOW_DIFFERENCES:
                    break
                shown += 1
                lines.append(
                    f"  {d.workload} prompt {d.prompt_index + 1} repeat {d.repeat + 1} at "
                    f"{r.level.label()}: first difference at byte {d.byte_offset} "
                    f"(character {d.char_offset}); lengths {d.baseline_bytes} / "
                    f"{d.speculative_bytes} bytes"
                )
                cut = "…" if d.excerpt_cut else ""
                lines.append(f"    baseline:   {cut}{escape(d.baseline_excerpt)}")
                lines.append(f"    with draft: {cut}{escape(d.speculative_excerpt)}")
        if total.differing > shown:
            lines.append(f"  ... and {total.differing - shown} more (all of them in --json)")
        lines.append("")
        lines += _wrap("Why completions can differ: " + DIVERGENCE_CAVEAT)
    if total.baseline_unstable or total.speculative_unstable:
        lines += _wrap(
            f"- repeats of the same prompt did not always agree on the same server (baseline: "
            f"{total.baseline_unstable} prompts, with draft: {total.speculative_unstable}): that "
            "non-determinism has nothing to do with the draft when the baseline shows it"
        )
    lines += ["", "Reading the table"]
    lines += _wrap(
        "- tokens/s: completion tokens from the servers' own usage objects over the wall time of "
        "each run (all requests of the workload, at that concurrency); ratio = with draft / "
        "baseline."
    )
    if any_usage_missing:
        lines += _wrap(
            "- 'no usage': that server's responses carried no usage object, so there is no token "
            "count to divide; specmon does not estimate one, and leaves the ratio out."
        )
    lines += _wrap(
        "- in tok, out tok: the mean prompt and completion tokens per request, from the "
        "baseline's usage (the prompt's with its chat template): how long the workload's "
        "requests are, beside what they did to acceptance."
    )
    if s.stream:
        lines += _wrap(
            "- time to first token: from sending a request to its first streamed chunk with "
            "content; inter-token latency: (last chunk - first chunk) / (completion tokens - 1) "
            "per request (AIPerf's and GuideLLM's definition); p50, p90, p99 over the "
            "requests; ratio = with draft / baseline (below 1: faster with the draft)."
        )
    if s.rates:
        lines += _wrap(
            "- rate levels: requests sent at Poisson arrival times of that mean rate, the same "
            "schedule on both servers, whether or not earlier answers came back (open loop); "
            "in flight = the requests' seconds over the run's. Tokens/s there follow the "
            "arrivals on both servers (a ratio near 1 says nothing of speed; inter-token "
            "latency does), and they have no concurrency to stand at: the crossover and the "
            "profile read the concurrency levels."
        )
    lines += _wrap(
        "- acceptance: accepted draft tokens / drafted tokens during the workload's run; "
        "(per-request) = sum of vLLM's per-response metrics.speculative_decoding (this "
        "workload's requests alone; --per-request-spec-decode-metrics on the server), "
        "(counters) = increase of the with-draft server's own /metrics counters around the run, "
        "(timings) = sum of llama.cpp's per-response timings.draft_n_accepted / draft_n."
    )
    compared = [r.acceptance.per_request_agree for r in report.rows(include_all=False)]
    if compared and all(v is not None for v in compared):
        if all(compared):
            lines += _wrap(
                "- in every run, the per-request metrics summed to exactly the counters' "
                "increase (drafts, draft tokens, accepted tokens, every position)."
            )
        else:
            lines += _wrap("- per-request metrics and counters differ in some runs: see the notes.")
    histograms = [
        r for r in report.rows() if r.acceptance.per_request_histogram and r.workload == ALL
    ] or [r for r in report.rows() if r.acceptance.per_request_histogram]
    for row in histograms[:1] if histograms else []:
        hist = row.acceptance.per_request_histogram
        steps = sum(hist) or 1
        shares = "  ".join(f"{j}: {n / steps:.3f}" for j, n in enumerate(hist))
        lines += _wrap(
            f"- accepted draft tokens per step ({row.workload}, {row.level.label()}, "
            f"per-request histogram): {shares}"
        )
    checked = [r.acceptance.sources_agree for r in report.rows(include_all=False)]
    if checked and all(checked):
        lines += _wrap(
            "- in every run, llama.cpp's per-response timings counted exactly the draft and "
            "accepted tokens its counters did."
        )
    lines += _wrap(
        "- measured break-even: K = 1 + accepted / drafts and k̄ = drafted / drafts from the "
        "counters; implied c = (K / ratio - 1) / k̄; speculation pays while K > 1 + k̄ c. "
        + IMPLIED_COST_CAVEAT
    )
    lines += _wrap(
        "- alpha: the effective per-token acceptance (the alpha whose expected yield under the "
        "independence model (docs/background.md) equals K - 1); break-even alpha: where S = 1 at the chain "
        "length k (the engine's position series) and the implied c; best k: the chain length "
        "that would do best at that c from the measured per-position survival (0 = off)."
    )
    if never_pays:
        lines += _wrap(
            "- break-even alpha 'never': the implied c is above 1, each drafted token cost more "
            "than a whole target step, so no acceptance rate can make this draft pay here."
        )
    code = report.exit_code(allow_divergence=allow_divergence)
    lines.append("")
    if report.nothing_completed:
        names = ", ".join(f"{r.workload} at {r.level.label()}" for r in report.nothing_completed)
        lines += _wrap(f"Result: no request completed on one server for {names} (exit {code})", "")
    elif report.diverged:
        if allow_divergence:
            lines.append("Result: completions differ; accepted with --allow-divergence (exit 0)")
        else:
            lines.append(
                f"Result: completions differ (exit {code}); investigate before publishing, or "
                "pass --allow-divergence"
            )
    else:
        lines.append("Result: completions identical (exit 0)")
    return "\n".join(lines) + "\n"


def progress_line(done: int, total: int, what: str, *, width: int = 28) -> str:
    """One progress-bar line (no newline): ``[#####.....]  12/48  c=1 copy baseline``."""
    total = max(total, 1)
    done = min(max(done, 0), total)
    filled = round(width * done / total)
    return f"[{'#' * filled}{'.' * (width - filled)}] {done:>{len(str(total))}}/{total}  {what}"
