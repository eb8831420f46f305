"""specmon: watch speculative decoding's acceptance live and say when it stops paying."""

__version__ = "0.1.0"
