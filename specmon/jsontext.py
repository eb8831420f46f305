"""The one way specmon writes JSON: strict JSON (RFC 8259), never ``Infinity`` or ``NaN``.

Python's ``json`` writes a float that is not finite as the bare words ``Infinity``/``NaN``,
which strict parsers (browsers' ``JSON.parse``, jq, Go) refuse. Every document the package
writes (``/api/v1/targets``, every ``--json``, the measure lab book, profiles, JSON log lines)
goes through :func:`dumps`: a figure that is not finite is absent (``null``), as it is absent
from ``/metrics``, and ``allow_nan=False`` makes any other path an error, not bad output.
"""

from __future__ import annotations

import json
import math
from typing import IO, Any

__all__ = ["dump", "dumps", "finite"]


def finite(value: Any) -> Any:
    """``value`` with every float that is not finite, at any depth of dicts, lists and
    tuples, replaced by None (the value itself when it holds none: no copy)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        items = {k: finite(v) for k, v in value.items()}
        return value if all(items[k] is v for k, v in value.items()) else items
    if isinstance(value, list | tuple):
        out = [finite(v) for v in value]
        return value if all(a is b for a, b in zip(out, value, strict=True)) else out
    return value


def dumps(value: Any, **kwargs: Any) -> str:
    """``json.dumps`` of :func:`finite` ``(value)``, strict (``allow_nan=False``)."""
    return json.dumps(finite(value), allow_nan=False, **kwargs)


def dump(value: Any, out: IO[str], **kwargs: Any) -> None:
    """:func:`dumps` to ``out``."""
    out.write(dumps(value, **kwargs))
