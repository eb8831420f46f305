"""The daemon's own process: how its event loop keeps time (``loopwatch``), how its memory and
Python's cycle collector are managed (``memory``), and its open-files limit (``nofile``). They
know nothing of targets; ``specmon run`` and the daemon wire them in."""
