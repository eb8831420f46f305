"""``specmon tap``: a reverse proxy beside one engine that reads each response's per-request
speculation fields and counts them per request class (docs/tap.md)."""
