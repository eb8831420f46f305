"""specmon's own HTTP surface, secured the Prometheus way: ``--web.config.file`` (TLS, client
certificates, basic auth, headers, in exporter-toolkit's format), header read timeouts and a
connection limit. See docs/security.md."""

from specmon.web.config import WebConfig, WebConfigError, parse_web_config, read_web_config
from specmon.web.server import WebOptions, WebServer, WebSettings, load_web_settings

__all__ = [
    "WebConfig",
    "WebConfigError",
    "WebOptions",
    "WebServer",
    "WebSettings",
    "load_web_settings",
    "parse_web_config",
    "read_web_config",
]
