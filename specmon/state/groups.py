"""Groups: the set of targets that are one server role (one Deployment, one StatefulSet, one
systemd unit across hosts), which a server's past belongs to (issue 64). Pure: no I/O.

A pod replaced by a rollout comes back under another name and address; its group's labels
(``group_labels``, on a ``file_sd_configs`` entry or a Prometheus source) stay. A member that
starts without a past of its own (none saved under its name) takes a copy of its group's: a
live member's, else the last departed member's; each member keeps its own name, row and
verdict. A group is named by its labels' values (``namespace=llm,service=llama``).

Unset, ``group_labels`` follows the labels Kubernetes' usual setups give a target: the
``namespace``, with the first of :data:`ROLE_LABELS` present (the kube-prometheus-stack's
ServiceMonitor targets carry ``namespace`` and ``service``; a relabelled pod its
``app_kubernetes_io_instance`` or ``app``). A target with none of them is in no group: its past
is its name's. ``group_labels: []`` turns groups off.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = [
    "MAX_DEPARTED",
    "MAX_GROUP_LABELS",
    "POD_LABELS",
    "ROLE_LABELS",
    "Groups",
    "check_group_labels",
    "group_of",
]

#: The labels that name a server role, most specific first: the default group is the
#: namespace with the first of these a target carries. Not ``job``: outside Kubernetes one job
#: often scrapes many different servers, and a PodMonitor's job covers every pod it selects.
ROLE_LABELS = (
    "deployment",
    "statefulset",
    "app_kubernetes_io_instance",
    "app_kubernetes_io_name",
    "app",
    "service",
)
#: Labels that name one pod or one address: a group named by them would die with its pod.
POD_LABELS = frozenset({"instance", "pod", "pod_name", "__address__", "pod_ip"})
MAX_GROUP_LABELS = 8
#: Groups whose members all left, each keeping its last member's past (the oldest let go):
#: a past is a target's epochs, curves and changes, tens of KB; with a state_dir the state
#: file keeps them too, until state_max_age.
MAX_DEPARTED = 1_000
#: The longest group name kept (label values are capped by the config already).
MAX_GROUP_NAME = 1024

_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def check_group_labels(
    value: object, *, instance_labels: Sequence[str] = ()
) -> tuple[str, ...] | None:
    """``group_labels`` as configured (None: unset, the default rule); raises ValueError with
    one sentence. Refused: not a list of label names; more than :data:`MAX_GROUP_LABELS`; a
    name twice; a label that names one pod (:data:`POD_LABELS`); every one of a Prometheus
    source's ``instance_labels`` among them (each instance would be a group of its own)."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise ValueError("must be a list of label names (or [] for no groups)")
    if len(value) > MAX_GROUP_LABELS:
        raise ValueError(f"at most {MAX_GROUP_LABELS} labels")
    out: list[str] = []
    for item in value:
        if not isinstance(item, str) or not _LABEL_NAME.fullmatch(item):
            raise ValueError(f"{item!r} is not a label name")
        if item in out:
            raise ValueError(f"{item!r} is listed twice")
        if item in POD_LABELS:
            raise ValueError(
                f"{item!r} names one pod or address: a group outlives its pods (use the "
                "labels of the Deployment or Service, e.g. [namespace, service])"
            )
        out.append(item)
    if out and instance_labels and set(instance_labels) <= set(out):
        raise ValueError(
            "holds every one of instance_labels: each instance would be a group of its own"
        )
    return tuple(out)


def group_of(labels: Mapping[str, str], group_labels: tuple[str, ...] | None) -> str:
    """The group a target with ``labels`` belongs to ("": none). Configured labels must all
    be present with a value; unset (None), the default rule (module docstring)."""
    if group_labels is None:
        role = next((k for k in ROLE_LABELS if labels.get(k)), None)
        if role is None:
            return ""
        chosen: tuple[str, ...] = ("namespace", role) if labels.get("namespace") else (role,)
    else:
        if not group_labels or not all(labels.get(k) for k in group_labels):
            return ""
        chosen = group_labels
    return ",".join(f"{k}={labels[k]}" for k in chosen)[:MAX_GROUP_NAME]


T = TypeVar("T")


@dataclass(slots=True)
class _Group(Generic[T]):
    #: Live members by name, in the order they joined.
    live: dict[str, T]
    #: The last member to leave, while none is live.
    departed: T | None = None


class Groups(Generic[T]):
    """Live members by group, and each group's last departed member while none is live (at
    most :data:`MAX_DEPARTED` such groups, the oldest let go): where a new member finds the
    past it takes a copy of (:meth:`donor`)."""

    def __init__(self, *, max_departed: int = MAX_DEPARTED) -> None:
        self._groups: dict[str, _Group[T]] = {}
        self._member: dict[str, str] = {}
        self._departed: OrderedDict[str, None] = OrderedDict()
        self.max_departed = max_departed

    def donor(self, group: str, *, name: str) -> T | None:
        """What a new member ``name`` of ``group`` takes its past from: the newest live
        member other than itself, else the last departed one (None: the group is new)."""
        found = self._groups.get(group)
        if found is None:
            return None
        others = [item for member, item in found.live.items() if member != name]
        return others[-1] if others else found.departed

    def join(self, group: str, name: str, item: T) -> None:
        """``name`` is live in ``group`` (leaving the group it was in, if another)."""
        if self._member.get(name) not in (None, group):
            self.leave(name)
        found = self._groups.get(group)
        if found is None:
            found = self._groups[group] = _Group({})
        found.live[name] = item
        self._member[name] = group
        self._departed.pop(group, None)

    def leave(self, name: str, *, keep: Callable[[T], T] | None = None) -> str | None:
        """``name`` stopped (removed, or its pod gone); its group, if it had one. The last
        member to leave is kept as the group's past (``keep(item)``: what of it is kept)."""
        group = self._member.pop(name, None)
        if group is None:
            return None
        found = self._groups[group]
        item = found.live.pop(name)
        if not found.live:
            found.departed = item if keep is None else keep(item)
            self._departed[group] = None
            self._departed.move_to_end(group)
            while len(self._departed) > self.max_departed:
                oldest, _ = self._departed.popitem(last=False)
                del self._groups[oldest]
        return group

    def live_groups(self) -> frozenset[str]:
        """The groups with a live member."""
        return frozenset(g for g, found in self._groups.items() if found.live)

    def group(self, name: str) -> str | None:
        return self._member.get(name)
