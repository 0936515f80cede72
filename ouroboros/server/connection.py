"""Opening an HTTP client to the model server: the one place the harness makes one."""

from __future__ import annotations

import functools
import ssl

import httpx


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The TLS settings every client of the process shares (httpx's defaults, the environment's
    SSL_CERT_FILE or SSL_CERT_DIR included): loading the CA bundle costs more CPU than a whole
    turn of the harness, so it is done once, not once a client."""
    return httpx.create_ssl_context()


def http_client(
    base_url: str = "",
    *,
    api_key: str | None = None,
    timeout: float | httpx.Timeout = 5.0,
    transport: httpx.AsyncBaseTransport | None = None,
) -> httpx.AsyncClient:
    """A new client for the server at `base_url`, sending `api_key` as a bearer token with
    every request; `transport` stands in for the network."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    return httpx.AsyncClient(
        base_url=base_url,
        headers=headers,
        timeout=timeout,
        transport=transport,
        verify=tls_context(),
    )
