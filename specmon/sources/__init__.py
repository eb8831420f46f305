"""Where pages come from: HTTP endpoints and files. Nothing downstream knows which."""
