"""The configuration epochs' families (specmon.state.epochs), declared beside the metric table
to keep :mod:`specmon.daemon.metrics` small; that table lists them with every other family.
Import them through :mod:`specmon.daemon.metrics`, never from here first."""

from __future__ import annotations

from specmon.daemon.metric_def import Kind, MetricDef, Scope

__all__ = [
    "CHANGE_KEPT_SPEEDUP",
    "CHANGE_SPEEDUP",
    "CHANGE_SPEEDUP_LOWER",
    "CHANGE_SPEEDUP_UPPER",
    "CONFIG_CHANGE_TIME",
    "CONFIG_EPOCH_INFO",
    "EPOCH_FAMILIES",
    "STATE_FAMILIES",
    "STATE_WRITE_OK",
    "STATE_WRITE_TIME",
]

_M = ("target", "engine", "model")

CONFIG_EPOCH_INFO = MetricDef(
    "specmon_config_epoch_info",
    Kind.GAUGE,
    "1 for the current and the previous configuration epoch of a target's model (speculation "
    "on, off or unknown before the first evidence, and the chain length, detected from its "
    "pages or marked by hand with POST /-/mark, and the mark's note); epoch numbers go on "
    "across specmon's restarts with a state_dir.",
    (*_M, "epoch", "speculation", "chain_length", "note"),
    Scope.MODEL,
    "1 for the current and the previous configuration epoch of the model (`epoch`: its "
    "number, going on across restarts with a `state_dir`; `speculation`: `true`, `false`, "
    "or `unknown` for a first epoch before its first draft or 400 tokens without one; "
    "`chain_length`: the detected or published k, `none` when off or unknown; `note`: what "
    "`specmon mark` said of it, at most 200 characters, empty otherwise). A new epoch "
    "starts when speculation stops (no drafts over 5 scrapes while 400 tokens are generated, "
    "or its series gone from 2 pages), starts, when k changes (3 scrapes), or by hand "
    "(`specmon mark`); an engine restart alone is no epoch "
    "([history](history.md))",
)
CONFIG_CHANGE_TIME = MetricDef(
    "specmon_config_change_timestamp_seconds",
    Kind.GAUGE,
    "Unix time the model's current configuration epoch began (when the change was first "
    "seen); absent before a first change.",
    _M,
    Scope.MODEL,
    "Unix time the current configuration epoch began, when the change was first seen (not "
    "when it was confirmed); absent while the model has had one epoch only. The dashboards' "
    "annotations mark it",
)

_CHANGE = (
    "the newest configuration change's speed-up at matched load: the previous epoch's time per "
    "output token over the current epoch's, in a concurrency bucket both epochs measured "
    "enough of (200 engine steps and 3 scrape intervals each); above 1 the change made the "
    "server faster there. From the epochs' own sums (kept across restarts with a state_dir)."
)
_ABSENT = "Like the load figures, absent for SGLang and TensorRT-LLM (no step timing)"
_CHANGE_DOC = (
    "the newest configuration change's speed-up at the same load, by `concurrency` bucket: "
    "the previous epoch's time per output token over the current one's, in a bucket both "
    "epochs measured enough of; above 1 the change made the server faster "
    "([history](history.md#did-the-change-help)). " + _ABSENT
)
_BOUND = (
    "bound of the 95 % interval of specmon_change_speedup_ratio (a normal approximation on "
    "its log: both epochs' per-interval spreads of step time and tokens per step)."
)
CHANGE_SPEEDUP = MetricDef(
    "specmon_change_speedup_ratio", Kind.GAUGE, "The " + _CHANGE,
    (*_M, "concurrency"), Scope.MODEL, _CHANGE_DOC,
)  # fmt: skip
CHANGE_SPEEDUP_LOWER = MetricDef(
    "specmon_change_speedup_lower_ratio", Kind.GAUGE, "Lower " + _BOUND,
    (*_M, "concurrency"), Scope.MODEL,
    "lower bound of the 95 % interval of `specmon_change_speedup_ratio`. " + _ABSENT,
)  # fmt: skip
CHANGE_SPEEDUP_UPPER = MetricDef(
    "specmon_change_speedup_upper_ratio", Kind.GAUGE, "Upper " + _BOUND,
    (*_M, "concurrency"), Scope.MODEL,
    "upper bound of the 95 % interval of `specmon_change_speedup_ratio`: below 1, the change "
    "made the server slower there with certainty; below 0.95 for 30 minutes, "
    "`SpecmonChangeRegressed`. " + _ABSENT,
)  # fmt: skip
CHANGE_KEPT_SPEEDUP = MetricDef(
    "specmon_change_kept_speedup_ratio", Kind.GAUGE,
    "Every kept configuration change's speed-up at matched load (the last 20 changes of a "
    "target, each frozen at its last answer when a newer change or a mark came; change: its "
    "epochs, before->after), by concurrency bucket both epochs measured; above 1 the change "
    "made the server faster there.",
    (*_M, "change", "concurrency"), Scope.MODEL,
    "every kept change's speed-up at matched load, by `concurrency` bucket, `change` its "
    "epochs (`1->2`): the newest change of each model as in `specmon_change_speedup_ratio`, "
    "and up to 20 older ones a target keeps, each frozen at its last answer when a newer "
    "change or a `specmon mark` came (kept in the state file; never erased by a mark) "
    "([history](history.md#every-change-kept)). " + _ABSENT,
)  # fmt: skip
#: In the order the metric table lists them.
EPOCH_FAMILIES = (
    CONFIG_EPOCH_INFO, CONFIG_CHANGE_TIME, CHANGE_SPEEDUP, CHANGE_SPEEDUP_LOWER,
    CHANGE_SPEEDUP_UPPER, CHANGE_KEPT_SPEEDUP,
)  # fmt: skip

# The state directory's own (specmon/daemon/persist.py): only with a state_dir.
STATE_WRITE_OK = MetricDef(
    "specmon_state_last_write_successful",
    Kind.GAUGE,
    "1 if the last attempt to write the state file (state_dir: the configuration epochs and "
    "their cost curves) succeeded, or none failed yet; 0 if it failed or the directory cannot "
    "be used (its owner or mode, the lock file). Only with a state_dir.",
    ("file",),
    Scope.OWN,
    "1 if the last write of the state file succeeded (or none failed yet); 0: it failed, or "
    "the state directory cannot be used. Only with a `state_dir` "
    "([history](history.md#the-state-directory))",
)
STATE_WRITE_TIME = MetricDef(
    "specmon_state_last_write_success_timestamp_seconds",
    Kind.GAUGE,
    "Unix time of the last successful write of the state file (0 before the first, every 30 "
    "s after). Old: the epochs are not being kept (SpecmonStateNotWritten). Only with a "
    "state_dir.",
    ("file",),
    Scope.OWN,
    "Unix time of the last successful write of the state file (0 before the first; written "
    "every 30 s): `SpecmonStateNotWritten` fires when it is 10 minutes old "
    "([runbook](runbook.md#specmonstatenotwritten))",
)
#: In the order the metric table lists them.
STATE_FAMILIES = (STATE_WRITE_OK, STATE_WRITE_TIME)
