"""The model server's address: the one reading of a base URL (and of OLLAMA_HOST)."""

from __future__ import annotations

import re
from typing import Final

OLLAMA_PORT: Final = 11434
URL_RULE: Final = (
    "must be an http:// or https:// URL with a host and a port from 1 to 65535, "
    "like http://127.0.0.1:11434"
)
_UNSAFE: Final = re.compile(r"[\s\x00-\x1f\x7f]")
_ANY_HOST: Final = frozenset({"", "0.0.0.0", "::"})
# The shape nearly every config writes (http(s), a host name or IPv4 address, a port, a plain
# path like /v1): read here without an HTTP client, since `ouroboros status` starts without
# one. Anything else (IPv6, credentials, escapes, dot segments) is read by the client's parser.
_LABEL: Final = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_PLAIN: Final = re.compile(
    rf"(?P<scheme>https?)://(?P<host>{_LABEL}(?:\.{_LABEL})*)(?::(?P<port>[1-9][0-9]{{0,4}}))?"
    r"(?P<path>(?:/[A-Za-z0-9_~-][A-Za-z0-9._~-]*)*/?)"
)
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
    plain = _plain_normal_form(url)
    return plain if plain is not None else client_normal_form(url)


def client_normal_form(url: str) -> str:
    """normalize_base_url by the HTTP client's own parser, for every shape of URL."""
    import httpx  # here, not at the top: `ouroboros status` and `init` need no HTTP client

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


def shown_url(url: str) -> str:
    """`url` as the harness shows it (in messages, the log, `config show`): its credentials
    hidden, `http://user:***@host:8080` (a token alone in place of a user, `***@`).

        shown_url("http://me:pw@127.0.0.1:1")  # -> "http://me:***@127.0.0.1:1"
    """
    scheme, sep, rest = url.partition("://")
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    userinfo, at, host = rest[:end].rpartition("@")
    if not sep or not at:
        return url
    user, colon, _ = userinfo.partition(":")
    hidden = f"{user}:***" if colon else "***"
    return f"{scheme}://{hidden}@{host}{rest[end:]}"


def is_server_url(url: str) -> bool:
    """Whether a client can connect to `url`: http(s), a host, a port from 1 to 65535, no
    spaces or control characters."""
    return _plain_normal_form(url) is not None or client_accepts(url)


def client_accepts(url: str) -> bool:
    """is_server_url by the HTTP client's own parser, for every shape of URL."""
    import httpx

    if _UNSAFE.search(url):
        return False
    try:
        parsed = httpx.URL(url)  # the parser the client will use
    except httpx.InvalidURL:
        return False
    return (
        parsed.scheme in ("http", "https")
        and bool(parsed.host)
        and (parsed.port is None or 0 < parsed.port < 65536)
    )


def _plain_normal_form(url: str) -> str | None:
    """The normal form of a URL of the plain shape (see _PLAIN), as the client's parser would
    give it; None if `url` is not of that shape, or is not a URL the client could use."""
    match = _PLAIN.fullmatch(url)
    if match is None:
        return None
    scheme, host = match["scheme"], match["host"].lower()
    if host.replace(".", "").isdigit():  # all digits: an IPv4 address, or not one at all
        octets = host.split(".")
        if len(octets) != 4 or any(int(o) > 255 or (len(o) > 1 and o[0] == "0") for o in octets):
            return None
        if host == "0.0.0.0":
            host = "127.0.0.1"
    port = int(match["port"] or _DEFAULT_PORTS[scheme])
    if port > 65535:
        return None
    netloc = host if port == _DEFAULT_PORTS[scheme] else f"{host}:{port}"
    path = match["path"].rstrip("/").removesuffix("/v1").rstrip("/")
    return f"{scheme}://{netloc}{path}"
