"""The engine simulator: metrics pages and OpenAI endpoints of engines whose acceptance we set.

Used by ``specmon simulate``, ``specmon demo``, the tests and the load benchmarks. Pages are
rendered from real captured pages (``templates/``) so their format is the engines' own.
"""
