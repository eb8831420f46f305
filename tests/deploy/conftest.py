"""Fixtures for the deployment tests: the image's install steps, run once per session."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.deploy.dockerfile import Image, run_build
from tests.deploy.sandbox import world_traversable
from tests.deploy.tools import REPO


@pytest.fixture(scope="session")
def image() -> Iterator[Image]:
    """The Dockerfile's build carried out under a temporary root (tests/deploy/dockerfile.py).

    The root lies under the repository's .tmp/ (not /tmp, which the sandboxed runs cover with
    a tmpfs) and is readable by every user, like an image's files. When the checkout itself
    sits in a directory other users cannot enter (a `mktemp -d` clone), /var/tmp is used
    instead, so the unprivileged runs still reach the image."""
    base = REPO / ".tmp"
    base.mkdir(exist_ok=True)
    if not world_traversable(base) and world_traversable(Path("/var/tmp")):
        base = Path("/var/tmp")
    root = Path(tempfile.mkdtemp(prefix="deploy-image-", dir=base))
    root.chmod(0o755)
    try:
        yield run_build(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
