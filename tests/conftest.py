"""How the suite is shared between pytest-xdist's workers (``./dev.sh test`` runs two).

Every test gets an ``xdist_group`` for ``--dist loadgroup``: a group runs on one worker, in
collection order. The groups:

- ``realengine``: every test that starts a real llama-server or vLLM, one after another (two
  at once would take each other's cores and time, and several share a session's servers);
  collected first, so the longest group starts at once;
- ``fixed-ports``: the deployment tests and the daemon's default-config test, which bind or
  expect specmon's and the engines' default ports;
- otherwise the test's module, so a module's fixtures are set up once.

Without ``-n`` (or with another ``--dist``) the marks change nothing but the order.
"""

from __future__ import annotations

import pytest

#: Modules whose tests use fixed loopback ports (10920, 8000, 8080).
_FIXED_PORTS = ("tests/deploy/", "tests/daemon/test_daemon_ops.py")


def _group(item: pytest.Item) -> str:
    if item.get_closest_marker("realengine") is not None:
        return "realengine"
    path = item.nodeid.split("::", 1)[0]
    if path.startswith(_FIXED_PORTS):
        return "fixed-ports"
    return path


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(_group(item)))
    # The real engines first: the longest group, started while the other worker takes the
    # rest. sorted() is stable: collection order holds within each part.
    items[:] = sorted(items, key=lambda item: _group(item) != "realengine")
