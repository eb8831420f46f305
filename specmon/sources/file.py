"""Read a saved metrics page from disk, capped like an HTTP response."""

from __future__ import annotations

import errno
from pathlib import Path

from specmon import files

__all__ = ["read_page_file"]


def read_page_file(path: Path, *, max_bytes: int) -> str:
    try:
        data = files.read_capped(path, max_bytes=max_bytes)
    except OSError as exc:
        if exc.errno == errno.EFBIG:
            raise ValueError(f"{path}: larger than the {max_bytes}-byte cap") from None
        raise
    return data.decode("utf-8", errors="replace")
