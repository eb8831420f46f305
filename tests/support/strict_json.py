"""A JSON parser that refuses what is not JSON: ``Infinity``, ``-Infinity`` and ``NaN``
(Python's ``json`` accepts them; browsers, jq and Go do not)."""

from __future__ import annotations

import json
from typing import Any


def _refuse(word: str) -> Any:
    raise ValueError(f"not JSON: {word}")


def strict_loads(text: str | bytes) -> Any:
    return json.loads(text, parse_constant=_refuse)
