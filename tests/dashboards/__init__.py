"""Grafana dashboards: static checks and the query extractor the end-to-end test uses."""
