"""What a server's failure means (server_errors.py, pure) and what the client makes of it:
which statuses are retried, the server's Retry-After, and one line of its words, never a
whole page."""

import asyncio
from datetime import datetime, timezone

import httpx
import pytest
import respx

from ouroboros.errors import (
    ContextOverflowError,
    NotAnLLMServerError,
    PermanentModelError,
    ServerUnreachableError,
    TransientModelError,
)
from ouroboros.server.client import ChatClient
from ouroboros.server.errors import (
    MAX_QUOTE,
    body_line,
    classify,
    error_details,
    is_transient_status,
    parse_retry_after,
)

BASE = "http://127.0.0.1:8000"
CHAT = f"{BASE}/v1/chat/completions"
NOW = datetime(2026, 11, 26, 8, 0, 0, tzinfo=timezone.utc)
APACHE_400 = """<!DOCTYPE HTML PUBLIC "-//IETF//DTD HTML 2.0//EN">
<html><head>
<title>400 Bad Request</title>
<style>h1 { color: red }</style>
</head><body>
<h1>Bad Request</h1>
<p>Your browser sent a request that this server could not understand.<br />
</p>
<hr>
<address>Apache/2.4.41 (Ubuntu) Server at 127.0.0.1 Port 8000</address>
</body></html>
"""
PYTHON_501 = """<!DOCTYPE HTML>
<html lang="en">
    <head>
        <meta charset="utf-8">
        <title>Error response</title>
    </head>
    <body>
        <h1>Error response</h1>
        <p>Error code: 501</p>
        <p>Message: Unsupported method (&#x27;POST&#x27;).</p>
    </body>
</html>
"""


# ---- which statuses are retried --------------------------------------------------------


@pytest.mark.parametrize("status", [408, 429, 500, 502, 503, 504, 507, 529, 599])
def test_timeouts_rate_limits_and_server_errors_are_transient(status):
    assert is_transient_status(status)


@pytest.mark.parametrize("status", [400, 401, 403, 404, 405, 409, 413, 422, 501, 505, 600, 302])
def test_everything_else_is_permanent_501_and_505_included(status):
    assert not is_transient_status(status)


# ---- Retry-After ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "status, message, code, failure",
    [
        (503, "server busy", None, "transient"),
        (429, "slow down", None, "transient"),
        (500, "the request exceeds the available context size", None, "overflow"),
        (400, "bad", "context_length_exceeded", "overflow"),
        (400, "the prompt is longer than the context length", None, "overflow"),
        (401, "the prompt is too long", None, "auth"),
        (405, "method not allowed", None, "not_an_api"),
        (501, "not implemented", None, "not_an_api"),
        (400, "llama2 does not support tools", None, "no_tools"),
        (404, "page not found", None, "model_not_found"),
        (400, "model 'x' not found, try pulling it first", None, "model_not_found"),
        (422, "bad request", None, "rejected"),
        (505, "http version", None, "rejected"),
    ],
)
def test_each_failure_has_one_classification(status, message, code, failure):
    assert classify(status, message, code) == failure


@pytest.mark.parametrize(
    "value, seconds",
    [
        ("7", 7.0),
        (" 120 ", 120.0),
        ("0", 0.0),
        ("1.5", 1.5),
        ("Thu, 26 Nov 2026 08:00:09 GMT", 9.0),
        ("Thursday, 26-Nov-26 08:00:30 GMT", 30.0),  # RFC 850, still allowed
        ("Thu, 26 Nov 2026 07:59:00 GMT", 0.0),  # already past: go now
    ],
)
def test_retry_after_is_seconds_or_an_http_date(value, seconds):
    assert parse_retry_after(value, NOW) == pytest.approx(seconds)


@pytest.mark.parametrize("value", [None, "", "soon", "-5", "nan", "inf", "Thu, 99 Foo 2026"])
def test_a_missing_or_unreadable_retry_after_says_nothing(value):
    assert parse_retry_after(value, NOW) is None


# ---- one line of the body -------------------------------------------------------------------


def test_an_html_page_is_quoted_by_its_first_line_of_text_without_tags_or_styles():
    assert body_line(APACHE_400) == "Bad Request"
    assert body_line(PYTHON_501) == "Error response"
    assert (
        body_line(
            "<html><head><title>502 Bad Gateway</title></head><body><center><h1>502 "
            "Bad Gateway</h1></center><hr><center>nginx</center></body></html>"
        )
        == "502 Bad Gateway"
    )


def test_a_page_with_only_a_title_is_quoted_by_its_title():
    assert (
        body_line("<html><head><title>Gone &amp; done</title></head><body></body></html>")
        == "Gone & done"
    )


def test_plain_text_is_quoted_by_its_first_non_empty_line_capped():
    assert body_line("\n\n  upstream   timed out \nsecond line") == "upstream timed out"
    assert body_line("") == ""
    long = body_line("y" * 5000)
    assert len(long) == MAX_QUOTE and long.endswith("...")


def test_error_details_reads_json_messages_and_quotes_one_line_of_anything_else():
    assert error_details('{"error": {"message": "bad\\n  tool", "code": 400}}') == (
        "bad tool",
        "400",
    )
    assert error_details(APACHE_400) == ("Bad Request", None)
    assert error_details('{"detail": "x\\ud800y"}') == ("x\ufffdy", None)  # loggable


# ---- what the client makes of it ----------------------------------------------------------


def complete(respond):
    """One completion against a chat endpoint answering `respond` (a Response, or a list of
    them for the listing requests too); the error it raised."""

    async def go():
        async with ChatClient(BASE, "m") as client:
            return await client.complete([{"role": "user", "content": "hi"}], [])

    with respx.mock(assert_all_called=False) as router:
        router.post(CHAT).mock(return_value=respond)
        router.get(f"{BASE}/v1/models").mock(return_value=httpx.Response(200, json={"data": []}))
        with pytest.raises(Exception) as info:
            asyncio.run(go())
    return info.value


def test_a_429_carries_the_servers_retry_after():
    error = complete(httpx.Response(429, headers={"Retry-After": "7"}, json={"error": "slow down"}))
    assert type(error) is TransientModelError
    assert error.retry_after == 7.0
    assert "it asked to wait 7 s" in error.message


def test_a_503_with_a_date_carries_the_seconds_until_it():
    when = "Wed, 01 Jan 2099 00:00:00 GMT"
    error = complete(httpx.Response(503, headers={"Retry-After": when}, text="busy"))
    assert isinstance(error, TransientModelError) and error.retry_after > 10**8


@pytest.mark.parametrize(
    "status, kind, said",
    [
        (501, NotAnLLMServerError, "POST /v1/chat/completions answered 501 (nope)"),
        (505, PermanentModelError, "rejected the request (505: nope)"),
    ],
)
def test_501_and_505_are_not_retried(status, kind, said):
    error = complete(httpx.Response(status, text="nope"))
    assert type(error) is kind and said in error.message


def test_a_501_page_names_a_server_that_is_not_an_llm_server_in_one_line():
    error = complete(httpx.Response(501, html=PYTHON_501))
    assert isinstance(error, NotAnLLMServerError)
    assert error.message.startswith(
        f"{BASE} answers HTTP but is not an OpenAI-compatible LLM "
        "server: POST /v1/chat/completions answered 501 (Error "
        "response)"
    )
    assert "<" not in error.message and "\n" not in error.message


def test_a_permanent_error_page_is_quoted_by_one_line():
    error = complete(httpx.Response(400, html=APACHE_400 * 50))
    assert type(error) is PermanentModelError
    assert error.message == f"the model server at {BASE} rejected the request (400: Bad Request)"


def test_a_200_html_page_is_not_a_stream():
    error = complete(httpx.Response(200, html="<html><body><p>Welcome to nginx!</p></body></html>"))
    assert isinstance(error, NotAnLLMServerError)
    assert "answered 200 with an HTML page (Welcome to nginx!)" in error.message


def test_an_overflow_in_a_500_is_still_a_context_overflow_and_400_too():
    for status in (400, 500):
        error = complete(
            httpx.Response(
                status,
                json={"error": {"message": "the request exceeds the available context size"}},
            )
        )
        assert isinstance(error, ContextOverflowError)


# ---- naming a server that is not an LLM server at start ----------------------------------


def listed(routes):
    async def go():
        async with ChatClient(BASE, "m") as client:
            return await client.listed_models()

    with respx.mock(assert_all_called=False) as router:
        for (method, path), response in routes.items():
            route = router.route(method=method, url=BASE + path)
            if isinstance(response, Exception):
                route.mock(side_effect=response)
            else:
                route.mock(return_value=response)
        return asyncio.run(go())


NOT_FOUND = httpx.Response(404, html=PYTHON_501.replace("501", "404"))


def test_404_on_both_lists_and_501_on_post_is_not_an_llm_server():
    with pytest.raises(NotAnLLMServerError) as info:
        listed(
            {
                ("GET", "/v1/models"): NOT_FOUND,
                ("GET", "/api/tags"): NOT_FOUND,
                ("POST", "/v1/chat/completions"): httpx.Response(501, html=PYTHON_501),
            }
        )
    assert info.value.message.startswith(
        f"{BASE} answers HTTP but is not an OpenAI-compatible LLM server: GET /v1/models "
        "answered 404 (Error response), GET /api/tags answered 404 (Error response), POST "
        "/v1/chat/completions answered 501 (Error response); set model.base_url"
    )


def test_a_catch_all_web_page_is_not_an_llm_server():
    page = httpx.Response(200, html="<html><body>My blog</body></html>")
    with pytest.raises(NotAnLLMServerError, match="answered 200 with an HTML page"):
        listed(
            {
                ("GET", "/v1/models"): page,
                ("GET", "/api/tags"): page,
                ("POST", "/v1/chat/completions"): page,
            }
        )


@pytest.mark.parametrize(
    "chat",
    [
        httpx.Response(422, json={"detail": "field required"}),  # an LLM server without lists
        httpx.Response(400, json={"error": "messages is required"}),
        httpx.Response(401, json={"error": "no key"}),
        httpx.ReadTimeout("slow"),
    ],
)
def test_a_server_whose_chat_endpoint_exists_is_given_the_benefit_of_the_doubt(chat):
    assert (
        listed(
            {
                ("GET", "/v1/models"): NOT_FOUND,
                ("GET", "/api/tags"): NOT_FOUND,
                ("POST", "/v1/chat/completions"): chat,
            }
        )
        is None
    )


def test_lists_that_fail_otherwise_are_no_verdict_and_a_list_is_the_answer():
    assert (
        listed({("GET", "/v1/models"): httpx.Response(503), ("GET", "/api/tags"): NOT_FOUND})
        is None
    )
    assert listed(
        {
            ("GET", "/v1/models"): NOT_FOUND,
            ("GET", "/api/tags"): httpx.Response(200, json={"models": [{"name": "qwen3:8b"}]}),
        }
    ) == ["qwen3:8b"]


def test_nothing_listening_is_unreachable():
    with pytest.raises(ServerUnreachableError):
        listed({("GET", "/v1/models"): httpx.ConnectError("refused")})
