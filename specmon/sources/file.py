"""Read a saved metrics page from disk, capped like an HTTP response."""

from __future__ import annotations

from pathlib import Path

__all__ = ["read_page_file"]


def read_page_file(path: Path, *, max_bytes: int) -> str:
    with path.open("rb") as handle:
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ValueError(f"{path}: larger than the {max_bytes}-byte cap")
    return data.decode("utf-8", errors="replace")
