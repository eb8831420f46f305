"""The ``canary`` basis (issue 64): when the members of one group (one Deployment, one
StatefulSet: specmon.state.groups) run different configurations at the same time, a rollout
in progress or a deliberate canary, the members still running without speculation are a live
twin for a member that speculates, behind the same balancer at matched load. Pure: the
members' configurations and windows in, the decision out.

The decision, for a speculating member of a group:

- the members on ``k = 0`` (their current epoch runs without speculation, no change being
  confirmed) are the candidates; each passes a twin's checks (specmon.daemon.twins:
  not speculating in the compared window, the same model) or is left out, with why;
- no member on ``k = 0``: no canary (a group all on one configuration, or a rollout done:
  the new configuration's answer rests on the group's past, the ``history`` basis);
- members on ``k = 0`` but none passes: the basis is refused, with the first one's reason;
- else the passing members' windows are pooled (:func:`specmon.load.pool.pool_windows`:
  their sums per load bucket and their curves) and compared with as a twin's window is,
  with a twin's bridge between loads (specmon.answer.reads: loads further apart than the
  curve can bridge read ``measuring``).

Ranked below an explicit ``baseline:`` twin (configured on purpose, it wins) and above a
cost profile and the server's own past (a live baseline at today's load and request mix).
Only a baseline without speculation is pooled: a rollout from k = 2 to k = 4 has no canary
basis (each member's answer rests on the group's past, and the change's own effect is the
change log's, per bucket).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from specmon.answer.model import Evidence, Refusal
from specmon.load import LoadWindow
from specmon.load.pool import pool_windows
from specmon.records import record

__all__ = ["Canary", "Member", "canary", "canary_words"]


@record
class Member:
    """One member of the group, as the canary decision reads it."""

    name: str
    #: Its chain length now: 0 runs without speculation; None: not known (no page yet, a
    #: change being confirmed, a speculating server whose k is unknown reads -1).
    k: int | None
    #: For a member on k = 0: its window of the compared model (None: no load data yet).
    window: LoadWindow | None = None
    #: Why it cannot be a baseline (the twin's check refused it), or None.
    refused: str | None = None
    #: What its check says of it though usable ("model not checked: ...").
    note: str | None = None


@record
class Canary:
    """The pooled baseline of a canary, and what it is in words."""

    window: LoadWindow
    #: The members pooled, by name.
    old: tuple[str, ...]
    #: "canary: 1 of 4 pods on k = 4, compared with the 3 on k = 0".
    words: str
    notes: tuple[str, ...] = ()


def canary_words(*, on_k: int, total: int, k: int | None, old: int) -> str:
    """The canary in words ("canary: 1 of 4 pods on k = 4, compared with the 3 on k = 0")."""
    config = f"k = {k}" if k else "speculation (k unknown)"
    return f"canary: {on_k} of {total} pods on {config}, compared with the {old} on k = 0"


def canary(
    *,
    k: int | None,
    members: Sequence[Member],
    pool: Callable[[Sequence[LoadWindow]], LoadWindow] = pool_windows,
) -> Canary | Refusal | None:
    """The canary baseline of a speculating member with chain length ``k`` (None: unknown),
    ``members``: every live member of its group, itself included (module docstring).
    ``pool``: how the chosen windows are pooled (the daemon keeps a pool while its members'
    windows stay the same)."""
    old = [m for m in members if m.k == 0]
    if not old:
        return None
    usable = [m for m in old if m.refused is None and m.window is not None]
    if not usable:
        first = next((m for m in old if m.refused is not None), None)
        if first is not None:
            reason = first.refused or ""
        else:
            reason = f"no load data yet from the {len(old)} pods on k = 0"
        return Refusal(Evidence.CANARY, reason)
    want = k or -1  # this member's configuration (-1: speculating, k unknown)
    on_k = sum(1 for m in members if m.k == want)
    words = canary_words(on_k=max(on_k, 1), total=len(members), k=k, old=len(usable))
    noted = [m.note for m in usable if m.note]
    notes: tuple[str, ...] = ()
    if noted:  # one note for the pool, not one per pod ("model not checked: ...")
        more = f" (and {len(noted) - 1} more pods alike)" if len(noted) > 1 else ""
        notes = (noted[0] + more,)
    left = [m for m in old if m.refused is not None or m.window is None]
    if left:
        notes += (
            "left out of the canary's baseline: "
            + "; ".join(f"{m.name}: {m.refused or 'no load data yet'}" for m in left[:3]),
        )
    windows = [m.window for m in usable if m.window is not None]
    return Canary(pool(windows), tuple(m.name for m in usable), words, notes)
