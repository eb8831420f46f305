"""What a scrape or a query sends besides its URL, checked the same way for directly scraped
targets and for Prometheus sources."""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any

from specmon.config_values import Checker, join_path, kind_of
from specmon.secrets import Secret

__all__ = ["check_headers"]

#: An HTTP header name (RFC 9110's token), bounded.
HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}$")


def check_headers(
    checker: Checker, value: Any, path: str, *, reserved: Collection[str], hint: str
) -> dict[str, Secret]:
    """Extra request headers: names that are tokens, single-line values kept as secrets (a
    value is never echoed in a problem), none of the ``reserved`` names (lower case), which
    specmon sets itself (``hint`` says how to set them)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        checker.add(path, f"must be a mapping of header names to strings, not {kind_of(value)}")
        return {}
    headers: dict[str, Secret] = {}
    for key, item in value.items():
        where = join_path(path, str(key))
        if not isinstance(key, str) or not HEADER_NAME.match(key):
            checker.add(where, "invalid header name")
        elif key.lower() in reserved:
            checker.add(where, hint)
        elif not isinstance(item, str) or "\n" in item or "\r" in item:
            checker.add(where, "header values must be single-line strings")
        else:
            headers[key] = Secret(item)
    return headers
