"""A health probe for the container image: ``python -m specmon.web.probe URL``.

Exit 0 when ``URL`` answers 2xx, 1 otherwise. When the port speaks TLS (specmon runs with a
``--web.config.file`` that has ``tls_server_config``), an ``http://`` URL is retried as
``https://`` without verifying the certificate: the probe runs beside the server on its
loopback, where the question is "is it alive", not "is it who it claims to be". The probes
(/healthz, /readyz) need no password. A server that requires client certificates
(RequireAndVerifyClientCert) refuses the probe: give it another health command.
"""

from __future__ import annotations

import http.client
import ssl
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence

__all__ = ["main", "probe"]

DEFAULT_URL = "http://127.0.0.1:10920/healthz"


def _get(url: str, timeout: float, context: ssl.SSLContext | None) -> int:
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=context) as response:  # noqa: S310 - the URL is the operator's
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def probe(url: str = DEFAULT_URL, *, timeout: float = 4.0) -> tuple[bool, str]:
    """(healthy, what happened)."""
    try:
        status = _get(url, timeout, None)
    except (urllib.error.URLError, http.client.HTTPException, ConnectionError) as exc:
        if not url.startswith("http://"):
            return False, f"{url}: {exc}"
        # A TLS port closes on a plain HTTP request: ask it over TLS.
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        tls_url = "https://" + url.removeprefix("http://")
        try:
            status = _get(tls_url, timeout, context)
        except (urllib.error.URLError, http.client.HTTPException, OSError) as tls_exc:
            return False, f"{url}: {exc}; {tls_url}: {tls_exc}"
        url = tls_url
    except OSError as exc:
        return False, f"{url}: {exc}"
    return 200 <= status < 300, f"{url}: HTTP {status}"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    healthy, message = probe(args[0] if args else DEFAULT_URL)
    if not healthy:
        sys.stderr.write(message + "\n")
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())
