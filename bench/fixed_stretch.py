"""The daemon with its stretch fixed, for the sweep of ``bench overload --fixed-stretch``.

Run: python -m bench.fixed_stretch STRETCH run [specmon run's arguments]

Issue 58 asks that the governed stretch settle at most 1.5x the smallest stretch at which the
daemon keeps up, and that this smallest stretch be measured by a sweep of fixed stretches.
The product has no setting for a fixed stretch (an operator sets a longer ``scrape_interval``
instead), so the bench replaces the daemon's governor, in this process only, by one whose
stretch never moves; everything else (the in-flight limit, excuses, probes) is the daemon's
own.
"""

from __future__ import annotations

import sys
from typing import Any

from specmon.cli.main import main as specmon_main
from specmon.daemon import app
from specmon.daemon.governor import Governor, Period


def fixed(stretch: float) -> type[Governor]:
    """A governor whose stretch is ``stretch`` from the start and stays there."""

    class Fixed(Governor):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.stretch = stretch

        def close(self) -> Period:
            period = super().close()
            self.stretch = stretch
            return period

    return Fixed


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    stretch = float(argv[0])
    if not 1.0 <= stretch <= 64.0:
        print("STRETCH: 1..64", file=sys.stderr)
        return 2
    setattr(app, "Governor", fixed(stretch))  # noqa: B010 (the daemon module's name)
    return specmon_main(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
