"""The model server's address: the one reading of a base URL (and of OLLAMA_HOST)."""

from __future__ import annotations

import re
from typing import Final

OLLAMA_PORT: Final = 11434
URL_RULE: Final = ("must be an http:// or https:// URL with a host and a port from 1 to 65535, "
                   "like http://127.0.0.1:11434")
_UNSAFE: Final = re.compile(r"[\s\x00-\x1f\x7f]")
_ANY_HOST: Final = frozenset({"", "0.0.0.0", "::"})
# A URL already in the form normalize_base_url gives (http(s), a lowercase name or an IPv4
# address other than 0.0.0.0, a port that is not the scheme's default, no path): it is its own
# normal form, and reading it needs no HTTP client (`ouroboros status` starts without one).
_LABEL: Final = r"[a-z0-9](?:[a-z0-9-]*[a-z0-9])?"
_CANONICAL: Final = re.compile(
    rf"(?P<scheme>https?)://(?P<host>{_LABEL}(?:\.{_LABEL})*):(?P<port>[1-9][0-9]{{0,4}})")
_DEFAULT_PORTS: Final = {"http": 80, "https": 443}


class BadURL(ValueError):
    """A base URL no client could connect to."""


def normalize_base_url(url: str) -> str:
    """The server's root URL, read the way Ollama reads OLLAMA_HOST.

    `localhost` -> `http://localhost:11434` (no scheme means Ollama's default port);
    `0.0.0.0:8080` -> `http://127.0.0.1:8080`; `http://host:8080/v1/` -> `http://host:8080`;
    `https://example.com` keeps the scheme's own default port.
    """
    url = url.strip()
    if is_canonical(url):
        return url
    import httpx  # here, not at the top: `ouroboros init` and `--version` need no HTTP client

    if _UNSAFE.search(url):
        raise BadURL(f"{url!r} has spaces or control characters")
    had_scheme = "://" in url
    if not had_scheme and url.count(":") > 1 and not url.startswith("["):
        url = f"[{url}]"  # a bare IPv6 address
    try:
        parsed = httpx.URL(url if had_scheme else f"http://{url}")
    except httpx.InvalidURL as error:
        raise BadURL(str(error)) from None
    host = "127.0.0.1" if parsed.host in _ANY_HOST else parsed.host
    port = parsed.port if parsed.port is not None or had_scheme else OLLAMA_PORT
    path = parsed.path.rstrip("/").removesuffix("/v1").rstrip("/")
    netloc = f"[{host}]" if ":" in host else host
    if port is not None:
        netloc = f"{netloc}:{port}"
    if parsed.userinfo:  # credentials in the URL: httpx sends them as basic auth
        netloc = f"{parsed.userinfo.decode('ascii')}@{netloc}"
    return f"{parsed.scheme}://{netloc}{path}"


def is_server_url(url: str) -> bool:
    """Whether a client can connect to `url`: http(s), a host, a port from 1 to 65535, no
    spaces or control characters."""
    if is_canonical(url):
        return True
    import httpx

    if _UNSAFE.search(url):
        return False
    try:
        parsed = httpx.URL(url)  # the parser the client will use
    except httpx.InvalidURL:
        return False
    return (parsed.scheme in ("http", "https") and bool(parsed.host)
            and (parsed.port is None or 0 < parsed.port < 65536))


def is_canonical(url: str) -> bool:
    """Whether `url` is already in normal form (see _CANONICAL): httpx would read it as it is."""
    match = _CANONICAL.fullmatch(url)
    if match is None:
        return False
    host, port = match["host"], int(match["port"])
    if host.replace(".", "").isdigit():  # all digits: an IPv4 address, or not one at all
        octets = host.split(".")
        if len(octets) != 4 or any(int(o) > 255 or (len(o) > 1 and o[0] == "0") for o in octets) \
                or host == "0.0.0.0":
            return False
    return port < 65536 and port != _DEFAULT_PORTS[match["scheme"]]
