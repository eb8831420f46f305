"""Every metric family the daemon serves, declared once: name, type, help, labels, and the
longer meaning docs/metrics.md shows.

The collector builds its families from these declarations, specmon's own instruments are
created from them, docs/metrics.md's tables are generated from them
(``python -m specmon.daemon.metrics`` rewrites the generated part), and a test fails when the
daemon serves a family that is not declared here.
"""

from __future__ import annotations

from specmon.daemon.metric_def import ONLY_LOAD_ENGINES, InstanceState, Kind, MetricDef, Scope
from specmon.daemon.metric_def import counter as _c
from specmon.daemon.metric_def import gauge as _g
from specmon.daemon.metric_def import histogram as _h
from specmon.daemon.metrics_answer import ANSWER_FAMILIES
from specmon.engines import RejectReason
from specmon.sources import ScrapeResult
from specmon.sources.prometheus import ReadStatus

__all__ = [
    "FAMILIES",
    "STANDARD_PREFIXES",
    "InstanceState",
    "Kind",
    "MetricDef",
    "Scope",
    "by_name",
]


_T = ("target",)
_TE = ("target", "engine")
_M = ("target", "engine", "model")
_W = (*_M, "window")
_P = (*_W, "position")
_SRC = "specmon's window over the engine's spec_decode counters"


UP = _g(
    "specmon_up",
    "1 if specmon's last scrape of the target succeeded (HTTP 200, a parseable page).",
    _T,
    Scope.TARGET,
    "1 if the last scrape of the target succeeded (HTTP 200 and a parseable page), else 0",
)
SCRAPE_DURATION = _g(
    "specmon_scrape_duration_seconds",
    "Duration of specmon's last scrape of the target, successful or not.",
    _T,
    Scope.TARGET,
    "Duration of the last scrape, successful or not, from the request to the parsed page; it "
    "includes waiting for the event loop behind the targets due in the same 0.1 s tick "
    "(measured at 1,000 targets every 5 s: median 14 ms, 99th percentile 30-43 ms)",
)
LAST_SUCCESS = _g(
    "specmon_last_success_timestamp_seconds",
    "Unix time of specmon's last successful scrape of the target.",
    _T,
    Scope.TARGET,
    "Unix time of the last successful scrape (absent before the first)",
)
SPECULATION_ENABLED = _g(
    "specmon_speculation_enabled",
    "1 when the target's page carries speculative-decoding series, 0 when it is up "
    "without them (speculation off, or metrics renamed).",
    _TE,
    Scope.TARGET,
)
BASELINE_INFO = _g(
    "specmon_baseline_info",
    "1 for a target compared with another target as its baseline (`baseline: NAME` in the "
    "config; label baseline: that target's name), whether or not figures exist yet.",
    ("target", "baseline"),
    Scope.TARGET,
    "1 for a target compared with a twin (`baseline: NAME`; label `baseline`: the twin's "
    "name), from the configuration, so present before any figure against it exists; absent "
    "without one and with `cost_profile`. The twin itself runs without speculation on "
    "purpose: the alert rules leave it out of SpecmonSpeculationMissing by this series",
)
BASELINE_USABLE = _g(
    "specmon_baseline_usable",
    "1 when the baseline twin may be compared with, 0 when it is refused (the verdict falls to "
    "the next basis); reason: same_model, model_not_checked (pages and model: name none), "
    "speculates (its drafts counter rose in the window) or other_model.",
    ("target", "baseline", "reason"),
    Scope.TARGET,
)
MALFORMED_LINES = _g(
    "specmon_page_malformed_lines",
    "Lines of the target's last page that specmon examined and could not parse "
    "(only the speculative-decoding families and the first line are examined).",
    _T,
    Scope.TARGET,
    "lines of the last page that specmon examined and could not parse (an engine upgrade that "
    "changed the format shows here)",
)
CHAIN_LENGTH = _g(
    "specmon_chain_length",
    "Chain length k in use: the configured chain_length, else the number of position "
    "series the engine publishes (or the k it publishes as configuration).",
    _M,
    Scope.MODEL,
    "k in use: configured `chain_length`, else the larger of the number of `position` series "
    "and the k the engine publishes (SGLang `spec_num_steps`, TensorRT-LLM "
    "`speculative_config_info{spec_num_tokens}`, TGI's largest histogram bucket)",
)
DRAFT_COST = _g(
    "specmon_draft_cost_ratio",
    "Draft cost c: one drafted token's cost as a fraction of a target step "
    "(source=configured: from specmon's config; source=measured: (T_step / T_step(baseline) "
    "- 1) / drafted tokens per step against the baseline at the middle window's "
    "concurrency; source=engine: TensorRT-LLM's spec_decode_draft_overhead o averaged over "
    "the middle window's scrapes where o > 0, converted as c = o / (k (1 - o))).",
    (*_M, "source"),
    Scope.MODEL,
    'c; `source="configured"`: from the config, used for every verdict; `source="engine"`: '
    "measured by the engine (TensorRT-LLM only: its `spec_decode_draft_overhead` o averaged "
    "over the middle window's scrapes where o > 0 (0: no drafter timed in that iteration), "
    'c = o / (k (1 - o)); absent when the engine timed no drafter); `source="measured"`: '
    "against the target's `baseline` (label: the twin's name, `profile`, or `history`: the "
    "server's own epoch without speculation) at the middle window's concurrency: c = (T_step / "
    "T_step(baseline) - 1) / drafted tokens per step (docs/load-signals.md)",
    optional=("baseline",),
)
REQUESTS_RUNNING = _g(
    "specmon_requests_running",
    "Requests the engine is running now (vllm:num_requests_running, "
    "llamacpp:requests_processing, sglang:num_running_reqs, trtllm_num_requests_running, "
    "tgi_batch_current_size): concurrency, which eats speculation's gain.",
    _M,
    Scope.MODEL,
    "requests the engine runs now (`vllm:num_requests_running`, "
    "`llamacpp:requests_processing`, `sglang:num_running_reqs`, "
    "`trtllm_num_requests_running`, `tgi_batch_current_size`)",
)
BREAKEVEN = _g(
    "specmon_breakeven_alpha_ratio",
    "Break-even alpha for (k, c): S(alpha) = (1 - alpha^(k+1)) / ((1 - alpha)(1 + k c)) "
    "= 1. Below it speculation costs time.",
    _M,
    Scope.MODEL,
    "alpha at which S(alpha, k, c) = 1",
)
DRAFTS = _c(
    "specmon_drafts",
    "Increase of the engine's drafts (num_drafts) counter seen by specmon since it started; "
    "engine restarts are not counted as decreases.",
    _M,
    Scope.MODEL,
    "drafts seen by specmon since it started (sum of non-negative counter increases; engine "
    "restarts are not counted as decreases); absent for engines that count no drafts "
    "(TensorRT-LLM without per-position series)",
)
DRAFT_TOKENS = _c(
    "specmon_draft_tokens",
    "Increase of the engine's draft tokens (num_draft_tokens) counter seen by specmon since it "
    "started; engine restarts are not counted as decreases.",
    _M,
    Scope.MODEL,
    "draft tokens seen by specmon since it started, likewise; absent for engines that count "
    "no draft tokens (SGLang, TGI)",
)
ACCEPTED_TOKENS = _c(
    "specmon_accepted_tokens",
    "Increase of the engine's accepted draft tokens (num_accepted_tokens) counter seen by "
    "specmon since it started; engine restarts are not counted as decreases.",
    _M,
    Scope.MODEL,
    "accepted draft tokens seen by specmon since it started, likewise",
)
ENGINE_RESETS = _c(
    "specmon_engine_resets",
    "Engine counter resets (restarts) detected by specmon since it started.",
    _M,
    Scope.MODEL,
)
WINDOW_DRAFTS = _g(
    "specmon_window_drafts",
    "Drafts counted in the window: the increase of the engine's num_drafts counter "
    "(SGLang: spec_verify_calls, TGI: tgi_request_skipped_tokens_count, TensorRT-LLM: "
    "drafted tokens at position 0; the sample size behind every ratio). Absent for "
    "engines that count no drafts.",
    _W,
    Scope.WINDOW,
)
WINDOW_GENERATED = _g(
    "specmon_window_generated_tokens",
    "Tokens the engine generated in the window (vllm:generation_tokens_total, "
    "llamacpp:tokens_predicted_total increase): traffic, with or without drafts.",
    _W,
    Scope.WINDOW,
    "tokens the engine generated in the window (`vllm:generation_tokens_total`, "
    '`llamacpp:tokens_predicted_total`); with `specmon_window_drafts` 0 it means "busy, but '
    'nothing drafted" (llama.cpp publishes its speculative counters at 0 even with no draft '
    "model, so this is how speculation being off shows there)",
)
WINDOW_SECONDS = _g(
    "specmon_window_seconds",
    "Time covered by the window's data (oldest to newest scrape inside the window; from "
    "the model's configuration change when one falls inside it: docs/history.md).",
    _W,
    Scope.WINDOW,
    "time actually covered by the window's data (less than the window while it fills, or "
    "since a configuration change inside it: every figure of the window is the new "
    "configuration's)",
)
DRAFT_ACCEPTANCE = _g(
    "specmon_draft_acceptance_ratio",
    f"Accepted / drafted tokens in the window ({_SRC}: num_accepted_tokens / "
    "num_draft_tokens increases).",
    _W,
    Scope.WINDOW,
    "accepted / drafted tokens",
)
MEAN_ACCEPTANCE_LENGTH = _g(
    "specmon_mean_acceptance_length",
    f"Tokens per verification step including the bonus token: 1 + accepted / drafts ({_SRC}).",
    _W,
    Scope.WINDOW,
    "1 + accepted / drafts (tokens per verification step, with the bonus token)",
)
POSITION_SURVIVAL = _g(
    "specmon_position_survival_ratio",
    "Share of drafts accepted at least this deep: per_pos[i] / drafts over the "
    f"window ({_SRC}; position 1 = first drafted token).",
    _P,
    Scope.WINDOW,
    "per_pos[i] / drafts: share of drafts accepted at least this far",
)
POSITION_CONDITIONAL = _g(
    "specmon_position_conditional_ratio",
    "Acceptance at this position given the previous one was accepted: "
    f"per_pos[i] / per_pos[i-1] over the window ({_SRC}).",
    _P,
    Scope.WINDOW,
    "per_pos[i] / per_pos[i-1] (position 1: per_pos[0] / drafts)",
)
ALPHA = _g(
    "specmon_alpha_ratio",
    "Effective per-token acceptance rate alpha: solves alpha + ... + alpha^k = accepted / "
    f"drafts in the window ({_SRC}; k = specmon_chain_length).",
    _W,
    Scope.WINDOW,
    "effective alpha: solves alpha + ... + alpha^k = accepted / drafts",
)
ALPHA_MARGIN = _g(
    "specmon_alpha_margin_ratio",
    "Effective alpha minus break-even alpha in the window at the configured draft cost "
    '(specmon_draft_cost_ratio{source="configured"}: a guess wherever the verdict measured '
    "its own c; the verdict's margin is specmon_verdict_alpha_margin_ratio).",
    _W,
    Scope.WINDOW,
    "effective alpha minus break-even alpha at the configured c (a guess where anything was "
    "measured: the verdict's own is `specmon_verdict_alpha_margin_ratio`)",
)
EXPECTED_SPEEDUP = _g(
    "specmon_expected_speedup_ratio",
    "Expected speed-up over no speculation in the window at the configured draft cost: "
    f"(1 + accepted / drafts) / (1 + c * draft_tokens / drafts) ({_SRC}; "
    'c = specmon_draft_cost_ratio{source="configured"}: a guess; the verdict is '
    "specmon_verdict_speedup_ratio).",
    _W,
    Scope.WINDOW,
    "(1 + accepted / drafts) / (1 + c * draft tokens / drafts) at the configured c (a guess "
    "where anything was measured: the verdict is `specmon_verdict_speedup_ratio`)",
)
BEST_CHAIN_LENGTH = _g(
    "specmon_best_chain_length",
    "Chain length k' in 0..k maximising (1 + s_1 + ... + s_k') / (1 + k' c) from measured "
    "per-position survival s_i in the window, at the draft cost the verdict rests on "
    "(specmon_verdict_draft_cost_ratio); 0 means speculation does not pay. Absent while the "
    "verdict is measuring a new load.",
    _W,
    Scope.WINDOW,
    "k' in 0..k maximising (1 + s_1 + ... + s_k') / (1 + k' c) at the verdict's c "
    "(`specmon_verdict_draft_cost_ratio`); 0 = speculation does not pay; absent while "
    '`state="measuring"`',
)
BEST_SPEEDUP = _g(
    "specmon_best_speedup_ratio",
    "Expected speed-up at the best chain length at the verdict's c (see "
    "specmon_best_chain_length).",
    _W,
    Scope.WINDOW,
    "expected speed-up at the best k'",
)
_LOAD = "the engine's own counters over the window (docs/load-signals.md)"
CONCURRENCY = _g(
    "specmon_concurrency",
    "Mean requests the engine ran per decoding step in the window, from "
    f"{_LOAD}: vLLM (ITL count + TTFT count) / iterations, llama.cpp busy slots per decode; "
    "else the mean of requests running over the window's scrapes.",
    _W,
    Scope.WINDOW,
    note=ONLY_LOAD_ENGINES,
)
STEP_SECONDS = _g(
    "specmon_step_seconds",
    f"Mean decoding step as a request sees it in the window, from {_LOAD}: vLLM ITL sum / "
    "count, llama.cpp predicted seconds / (tokens - accepted).",
    _W,
    Scope.WINDOW,
    note=ONLY_LOAD_ENGINES,
)
TPOT = _g(
    "specmon_time_per_output_token_seconds",
    f"Mean time per output token in the window, from {_LOAD}: decode seconds / decode tokens.",
    _W,
    Scope.WINDOW,
    note=ONLY_LOAD_ENGINES,
)
MEAN_DRAFT_LENGTH = _g(
    "specmon_mean_draft_length",
    "Drafted tokens per draft in the window (num_draft_tokens / num_drafts increases); below "
    "specmon_chain_length when the engine varies its draft length.",
    _W,
    Scope.WINDOW,
    note=f"Computed with the load figures: {ONLY_LOAD_ENGINES}; TensorRT-LLM without drafts "
    "counter or k: (L - 1) / acceptance ratio from its acceptance length L, an estimate.",
)
SCRAPES = _c(
    "specmon_scrapes",
    "Scrapes of each target by specmon, by result ("
    + ", ".join(r.value for r in ScrapeResult)
    + ").",
    ("target", "result"),
    Scope.OWN,
    "scrapes by result: "
    + ", ".join(f"`{r.value}`" for r in ScrapeResult)
    + " (`internal_error` is a bug in specmon: logged with its traceback, the target keeps "
    "being scraped; `query_error`, `partial`, `credentials_error`, `stale` and `bad_series` "
    "only for instances of a Prometheus source: [fleet](fleet.md#when-the-source-fails))",
)
REJECTED = _c(
    "specmon_rejected_readings",
    "Readings of a target's page that specmon refused, by reason (a value no real engine can "
    "publish: non-finite, negative, beyond 2^53, counts rising along the chain, more accepted "
    "than drafted, duplicated series, limits exceeded, a partial decrease).",
    ("target", "reason"),
    Scope.OWN,
    "readings refused by validation, by reason: "
    + ", ".join(f"`{r.value}`" for r in RejectReason)
    + "; a refused model's figures are left out of that scrape, the page's other models stay "
    "(docs/security.md)",
)
BUILD_INFO = _g(
    "specmon_build_info",
    "specmon's version and Python version; always 1.",
    ("version", "python"),
    Scope.OWN,
)
RELOAD_OK = _g(
    "specmon_config_last_reload_successful",
    "1 if the last configuration (re)load succeeded; 0 means the old config is still in use.",
    (),
    Scope.OWN,
)
RELOAD_TIME = _g(
    "specmon_config_last_reload_success_timestamp_seconds",
    "Unix time of the last successful configuration (re)load.",
    (),
    Scope.OWN,
)
TARGETS = _g(
    "specmon_targets",
    "Targets specmon currently scrapes, or reads through a Prometheus source (its shard's "
    "only, with --shard).",
    (),
    Scope.OWN,
)
WEB_RELOAD_OK = _g(
    "specmon_web_config_last_reload_successful",
    "1 if the last load of --web.config.file succeeded (1 without one); 0 means the "
    "previous web config (TLS, users, headers) is still in use.",
    (),
    Scope.OWN,
    "1 if the last load of `--web.config.file` succeeded (1 without one); 0: the previous web "
    "config is in use ([security](security.md#reloading))",
)
WEB_RELOAD_TIME = _g(
    "specmon_web_config_last_reload_success_timestamp_seconds",
    "Unix time of the last successful load of --web.config.file.",
    (),
    Scope.OWN,
)
WEB_REJECTIONS = _c(
    "specmon_web_rejections",
    "Requests and connections refused by specmon's HTTP server, by reason: "
    "unauthorized (401), auth_busy (503: too many password checks waiting), "
    "header_timeout (request head not received in time), too_many_connections, "
    "client_san (client certificate without an allowed SAN), lifecycle_disabled "
    "(POST /-/reload without --web.enable-lifecycle).",
    ("reason",),
    Scope.OWN,
    "requests and connections refused by specmon's HTTP server: `unauthorized`, `auth_busy`, "
    "`header_timeout`, `too_many_connections`, `client_san`, `lifecycle_disabled` "
    "([security](security.md#what-specmon-reports-about-its-own-surface))",
)
LOOP_LAG = _h(
    "specmon_event_loop_lag_seconds",
    "How late specmon's event loop woke a 0.1 s timer: while the loop is held (a collection, "
    "a large answer, a starved core) every scrape due waits, and a lag near the scrape "
    "timeout ends scrapes as timeouts that are specmon's, not the targets'.",
    (),
    "how late specmon's event loop woke a 0.1 s timer, observed ten times a second: while "
    "the loop is held (a collection, a large answer, a starved core) every scrape due waits; "
    "a lag near `scrape_timeout` turns into timeouts that are specmon's, not the targets'. "
    "A lag of 0.5 s or more is also logged (`event_loop_stalled`, with the collector's share)",
)
GC_PAUSE = _h(
    "specmon_gc_pause_seconds",
    "Pauses of Python's cycle collector in specmon, by generation (the daemon runs a full "
    "collection a minute itself; the event loop is held for each pause).",
    ("generation",),
    "pauses of Python's cycle collector in specmon, by generation (`0`, `1`, `2`), timed "
    "through `gc.callbacks`; `specmon run` runs a full collection (`2`) once a minute, the "
    "younger ones are rare; the event loop is held for each pause",
)
SCRAPE_STRETCH = _g(
    "specmon_scrape_interval_stretch",
    "The factor specmon's overload governor multiplies every target's scrape interval by: "
    "1 on schedule, more when the process is short of CPU (its event loop never idles) and "
    "its schedule falls behind (achieved gaps over asked).",
    (),
    Scope.OWN,
    "the factor the overload governor multiplies every directly scraped target's interval by: "
    "`1` on schedule; above 1 the process was short of CPU (`specmon_event_loop_busy_ratio` "
    "0.9 or more) while its schedule fell behind, and scrapes every target less often, "
    "evenly, instead of letting some time out (at most 16; "
    "[runbook](runbook.md#specmonoverloaded))",
)
SCRAPE_DELAY = _g(
    "specmon_scrape_delay_seconds",
    "How far behind specmon is: the 90th percentile of how late scrapes started after their "
    "wake-up in the governor's last 5 s period (milliseconds when the process keeps up).",
    (),
    Scope.OWN,
    "how far behind specmon is: the 90th percentile of how late scrapes started after their "
    "wake-up, over the overload governor's last 5-second period (a few milliseconds when the "
    "process keeps up; a wait at the in-flight limit counts; targets whose last scrape timed "
    "out are left out)",
)
SCRAPE_INTERVAL_ACHIEVED = _g(
    "specmon_scrape_interval_achieved_seconds",
    "The interval specmon actually achieves between two successful reads of a target, by "
    "configured interval: the median over the reads completed in the governor's last period "
    "of the time since the same target's previous successful read.",
    ("interval",),
    Scope.OWN,
    "the interval specmon actually achieves between two successful reads of one target, per "
    "configured interval (`interval`, e.g. `5s`): the median, over the reads completed in the "
    "overload governor's last period with such reads, of the time since the same target's "
    "previous successful read (timeouts, excused or not, lengthen it). The data resolution "
    "every window has: a window shorter than two of these holds too few readings",
)
SCRAPE_EXCUSED = _c(
    "specmon_scrape_timeouts_excused",
    "Scrape timeouts not counted against their target because specmon itself was behind "
    "while the scrape ran (its event loop woke, or was held in all, at least a fifth of the "
    "scrape timeout late); once in a row: the next scrape is judged.",
    (),
    Scope.OWN,
    "scrape timeouts not counted against their target: specmon itself was behind while the "
    "scrape ran (a wake-up in the scrape's span started, or the loop was held in all, at "
    "least a fifth of `scrape_timeout` late); the target's `specmon_up` and "
    "`specmon_scrapes_total` are left as they were. Once in a row: the target's next scrape, "
    "one configured interval later, is judged on specmon's own running time "
    "([runbook](runbook.md#specmonoverloaded))",
)
SCRAPE_LIMIT = _g(
    "specmon_scrapes_in_flight_limit",
    "Scrapes specmon lets run at once (the overload governor's in-flight limit: cut when "
    "timeouts are excused, to what completes inside the timeout; grown while scrapes wait).",
    (),
    Scope.OWN,
    "the overload governor's in-flight limit: scrapes allowed to run at once (256, the client "
    "session's connections, while nothing is excused); cut when timeouts are excused to what "
    "the measured completion rate finishes inside the timeout (Little's law), grown slowly "
    "while scrapes wait ([runbook](runbook.md#specmonoverloaded))",
)
SCRAPE_DEFERRED = _c(
    "specmon_scrapes_deferred",
    "Scrapes that waited for a place under the in-flight limit before they started (their "
    "timeout had not begun; their target was read later, as the achieved interval shows).",
    (),
    Scope.OWN,
    "scrapes that waited for a place under `specmon_scrapes_in_flight_limit` before they "
    "started: not timed out, not excused; their target is read later, which "
    "`specmon_scrape_interval_achieved_seconds` includes",
)
_S = ("source",)
SOURCE_UP = _g(
    "specmon_source_up",
    "1 if specmon's last read of the Prometheus source was usable (answered, and complete "
    "or accept_partial); 0 means every instance of the source is down (specmon_up 0) and "
    "exports nothing derived.",
    _S,
    Scope.SOURCE,
    "1 if the last read of the source was usable (status `ok`, or `partial` with "
    "`accept_partial`); 0: every instance of the source has `specmon_up 0` and no figures",
)
SOURCE_READS = _c(
    "specmon_source_reads",
    "Reads of the Prometheus source (one batch of instant queries for the whole fleet), by "
    "result (" + ", ".join(r.value for r in ReadStatus) + ").",
    ("source", "result"),
    Scope.SOURCE,
    "reads by result: "
    + ", ".join(f"`{r.value}`" for r in ReadStatus)
    + " ([fleet](fleet.md#when-the-source-fails) says what each means for the instances)",
)
SOURCE_QUERIES = _c(
    "specmon_source_queries",
    "Instant queries specmon sent to the Prometheus source (a few per read, whatever the "
    "number of instances).",
    _S,
    Scope.SOURCE,
)
SOURCE_READ_DURATION = _g(
    "specmon_source_read_duration_seconds",
    "Duration of specmon's last read of the Prometheus source (every query of the read, "
    "sent concurrently, and the decoding), successful or not.",
    _S,
    Scope.SOURCE,
)
SOURCE_LAST_SUCCESS = _g(
    "specmon_source_last_success_timestamp_seconds",
    "Unix time of specmon's last usable read of the Prometheus source.",
    _S,
    Scope.SOURCE,
    "Unix time of the last usable read (absent before the first)",
)
SOURCE_RESPONSE_BYTES = _g(
    "specmon_source_response_bytes",
    "Decoded size of the answers of specmon's last read of the Prometheus source, all "
    "queries together (capped by max_response_bytes).",
    _S,
    Scope.SOURCE,
)
SOURCE_INSTANCES = _g(
    "specmon_source_instances",
    "Instances the Prometheus source's last usable read returned, by what specmon made of "
    "them (" + ", ".join(s.value for s in InstanceState) + ").",
    ("source", "state"),
    Scope.SOURCE,
    "instances of the last usable read by state: `current` (a new sample, read), `unchanged` "
    "(no sample since the previous read, kept), `stale` (newest sample older than "
    "`stale_after`: down), `bad_series` (unusable series: down), `other_shard` (another "
    "replica's, `--shard`), `name_taken` (a configured target or an earlier source has the "
    "name)",
)
SHARD_INFO = _g(
    "specmon_shard_info",
    "Which shard of the target list this specmon keeps (--shard I/N; shard 0 of 1 when not "
    "sharded); always 1.",
    ("shard", "shards"),
    Scope.OWN,
    "which shard of the targets and instances this replica keeps (`--shard I/N`; `0` of `1` "
    "when not sharded); always 1",
)
FILE_SD_ERRORS = _c(
    "specmon_file_sd_read_errors",
    "Failed reads of file_sd files (the targets from the last good read are kept).",
    (),
    Scope.OWN,
)
LOG_LINES_DROPPED = _c(
    "specmon_log_lines_dropped",
    "Log lines specmon did not write because one event wrote more than 100 lines at once or "
    "10 a second, by event; each event's drops are summed up in a log_lines_dropped line.",
    ("event",),
    Scope.OWN,
)

# Declared beside this table; listed in it.
from specmon.daemon.metrics_classes import CLASS_FAMILIES  # noqa: E402
from specmon.daemon.metrics_epochs import CONFIG_EPOCH_INFO as CONFIG_EPOCH_INFO  # noqa: E402
from specmon.daemon.metrics_epochs import EPOCH_FAMILIES, STATE_FAMILIES  # noqa: E402
from specmon.daemon.metrics_epochs import STATE_WRITE_OK as STATE_WRITE_OK  # noqa: E402
from specmon.daemon.metrics_epochs import STATE_WRITE_TIME as STATE_WRITE_TIME  # noqa: E402
from specmon.daemon.metrics_governor import LOOP_BUSY as LOOP_BUSY  # noqa: E402

#: Every family, in the order /metrics serves the target families and the docs list them.
FAMILIES: tuple[MetricDef, ...] = (
    UP,
    SCRAPE_DURATION,
    LAST_SUCCESS,
    MALFORMED_LINES,
    SPECULATION_ENABLED,
    BASELINE_INFO,
    BASELINE_USABLE,
    *EPOCH_FAMILIES,
    CHAIN_LENGTH,
    DRAFT_COST,
    REQUESTS_RUNNING,
    BREAKEVEN,
    DRAFTS,
    DRAFT_TOKENS,
    ACCEPTED_TOKENS,
    ENGINE_RESETS,
    WINDOW_DRAFTS,
    WINDOW_SECONDS,
    WINDOW_GENERATED,
    DRAFT_ACCEPTANCE,
    MEAN_ACCEPTANCE_LENGTH,
    POSITION_SURVIVAL,
    POSITION_CONDITIONAL,
    ALPHA,
    ALPHA_MARGIN,
    EXPECTED_SPEEDUP,
    BEST_CHAIN_LENGTH,
    BEST_SPEEDUP,
    CONCURRENCY,
    STEP_SECONDS,
    TPOT,
    MEAN_DRAFT_LENGTH,
    *ANSWER_FAMILIES,
    *CLASS_FAMILIES,
    SOURCE_UP,
    SOURCE_READS,
    SOURCE_QUERIES,
    SOURCE_READ_DURATION,
    SOURCE_LAST_SUCCESS,
    SOURCE_RESPONSE_BYTES,
    SOURCE_INSTANCES,
    SCRAPES,
    REJECTED,
    BUILD_INFO,
    SHARD_INFO,
    RELOAD_OK,
    RELOAD_TIME,
    *STATE_FAMILIES,
    TARGETS,
    FILE_SD_ERRORS,
    LOG_LINES_DROPPED,
    WEB_RELOAD_OK,
    WEB_RELOAD_TIME,
    WEB_REJECTIONS,
    LOOP_LAG,
    GC_PAUSE,
    SCRAPE_STRETCH,
    SCRAPE_DELAY,
    SCRAPE_INTERVAL_ACHIEVED,
    SCRAPE_EXCUSED,
    SCRAPE_LIMIT,
    SCRAPE_DEFERRED,
    LOOP_BUSY,
)

#: Families prometheus_client's standard collectors add (process, platform, garbage
#: collector); documented as a group, not one by one.
STANDARD_PREFIXES = ("process_", "python_")


def by_name(name: str) -> MetricDef | None:
    """The declaration of a family (or of a counter's ``_total`` sample name)."""
    for definition in FAMILIES:
        if name == definition.name or name in definition.sample_names:
            return definition
    return None
