"""The configuration epochs' families (specmon.state.epochs), declared beside the metric table
to keep :mod:`specmon.daemon.metrics` small; that table lists them with every other family.
Import them through :mod:`specmon.daemon.metrics`, never from here first."""

from __future__ import annotations

from specmon.daemon.metrics import Kind, MetricDef, Scope

__all__ = ["CONFIG_CHANGE_TIME", "CONFIG_EPOCH_INFO"]

_M = ("target", "engine", "model")

CONFIG_EPOCH_INFO = MetricDef(
    "specmon_config_epoch_info",
    Kind.GAUGE,
    "1 for the current and the previous configuration epoch of a target's model (speculation "
    "on or off and the chain length, detected from its pages or marked by hand with POST "
    "/-/mark); epoch numbers go on across specmon's restarts with a state_dir.",
    (*_M, "epoch", "speculation", "chain_length"),
    Scope.MODEL,
    "1 for the current and the previous configuration epoch of the model (`epoch`: its "
    "number, going on across restarts with a `state_dir`; `speculation`: `true` or `false`; "
    "`chain_length`: the detected or published k, `none` when off or unknown). A new epoch "
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
