"""TokenCounter against respx: which tokenizer it finds, that it asks only that one afterwards,
and that a server without one costs one probe round and then nothing."""

import asyncio
import json

import httpx
import pytest
import respx

from ouroboros.server.kinds.llamacpp import LLAMA_CPP_PYTHON_TOKENIZE, LLAMA_CPP_TOKENIZE
from ouroboros.server.kinds.vllm import VLLM_TOKENIZE
from ouroboros.server.tokenizer import TokenCounter

BASE = "http://127.0.0.1:8080"
EXTRAS = f"{BASE}/extras/tokenize/count"
TOKENIZE = f"{BASE}/tokenize"
TEXTS = ["one two three", "four", "five six"]  # the fake tokenizers give one token per word


def words(text: str) -> int:
    return len(text.split())


def llama_cpp_python(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json={"count": words(json.loads(request.content)["input"])})


def llama_cpp(request: httpx.Request) -> httpx.Response:
    body = json.loads(request.content)
    if "content" not in body:
        return httpx.Response(200, json={"tokens": []})  # what llama.cpp says to other bodies
    return httpx.Response(200, json={"tokens": list(range(words(body["content"])))})


def vllm(request: httpx.Request) -> httpx.Response:
    body = json.loads(request.content)
    if "prompt" not in body:
        error = {
            "object": "error",
            "message": "Field required",
            "type": "BadRequestError",
            "code": 400,
        }
        return httpx.Response(400, json=error)
    n = words(body["prompt"])
    return httpx.Response(200, json={"count": n, "max_model_len": 32768, "tokens": list(range(n))})


def count_all(texts=TEXTS, **options):
    """Count each text in turn with one counter; (counts, counter)."""

    async def go():
        async with TokenCounter(BASE + "/v1", "qwen3-8b", **options) as counter:
            return [await counter.count(text) for text in texts], counter

    return asyncio.run(go())


def bodies(route):
    return [json.loads(call.request.content) for call in route.calls]


# ---- each family is found, then asked alone ---------------------------------------------


def test_llama_cpp_python_is_found_first_and_asked_alone():
    with respx.mock(assert_all_called=False) as router:
        extras = router.post(EXTRAS).mock(side_effect=llama_cpp_python)
        tokenize = router.post(TOKENIZE).mock(side_effect=llama_cpp)
        counts, counter = count_all()
    assert counts == [3, 1, 2]
    assert bodies(extras) == [{"input": text} for text in TEXTS]
    assert tokenize.call_count == 0
    assert (counter.available, counter.endpoint, counter.window) == (
        True,
        LLAMA_CPP_PYTHON_TOKENIZE,
        None,
    )


def test_llama_cpp_server_is_found_after_a_404_and_the_404_is_not_asked_again():
    with respx.mock() as router:
        extras = router.post(EXTRAS).mock(return_value=httpx.Response(404))
        tokenize = router.post(TOKENIZE).mock(side_effect=llama_cpp)
        counts, counter = count_all()
    assert counts == [3, 1, 2]
    assert extras.call_count == 1
    assert bodies(tokenize) == [{"content": text} for text in TEXTS]
    assert (counter.available, counter.endpoint) == (True, LLAMA_CPP_TOKENIZE)


def test_vllm_is_found_when_it_refuses_the_llama_cpp_body_and_tells_the_window():
    with respx.mock() as router:
        extras = router.post(EXTRAS).mock(return_value=httpx.Response(404))
        tokenize = router.post(TOKENIZE).mock(side_effect=vllm)
        counts, counter = count_all()
    assert counts == [3, 1, 2]
    assert extras.call_count == 1
    assert bodies(tokenize) == [{"content": TEXTS[0]}] + [
        {"model": "qwen3-8b", "prompt": text} for text in TEXTS
    ]
    assert (counter.available, counter.endpoint, counter.window) == (True, VLLM_TOKENIZE, 32768)


def test_a_broken_first_probe_does_not_hide_a_later_family():
    with respx.mock() as router:
        extras = router.post(EXTRAS).mock(
            return_value=httpx.Response(500, text="Internal Server Error")
        )
        router.post(TOKENIZE).mock(side_effect=llama_cpp)
        counts, _ = count_all()
    assert counts == [3, 1, 2]
    assert extras.call_count == 1


def test_concurrent_first_calls_probe_once():
    async def go():
        async with TokenCounter(BASE, "m") as counter:
            return await asyncio.gather(*(counter.count(text) for text in TEXTS))

    with respx.mock() as router:
        extras = router.post(EXTRAS).mock(return_value=httpx.Response(404))
        tokenize = router.post(TOKENIZE).mock(side_effect=llama_cpp)
        assert asyncio.run(go()) == [3, 1, 2]
    assert extras.call_count == 1
    assert tokenize.call_count == 3


# ---- no tokenizer: one probe round, then silence ------------------------------------------


@pytest.mark.parametrize("status", [404, 405])
def test_a_server_without_a_tokenizer_costs_one_probe_round(status):
    with respx.mock() as router:  # Ollama: 404 page not found on both
        router.post(EXTRAS).mock(return_value=httpx.Response(status, text="404 page not found"))
        router.post(TOKENIZE).mock(return_value=httpx.Response(status, text="404 page not found"))
        counts, counter = count_all()
        requests = [
            (call.request.url.path, json.loads(call.request.content)) for call in router.calls
        ]
    assert counts == [None, None, None]
    assert requests == [
        ("/extras/tokenize/count", {"input": TEXTS[0]}),
        ("/tokenize", {"content": TEXTS[0]}),
    ]
    assert counter.available is False


def test_available_is_unknown_until_the_first_count():
    counter = TokenCounter(BASE, "m")
    assert counter.available is None
    asyncio.run(counter.aclose())


@pytest.mark.parametrize(
    "extras_answer, tokenize_answer",
    [
        (httpx.Response(200, text="not json"), httpx.Response(200, text="<html>hi</html>")),
        (httpx.Response(200, json={"count": -1}), httpx.Response(200, json={"tokens": "1 2 3"})),
        (httpx.Response(200, json={"count": "3"}), httpx.Response(200, json={"tokens": None})),
        (httpx.Response(200, json={"count": 2.5}), httpx.Response(200, json=[1, 2, 3])),
        (httpx.Response(200, json={"count": True}), httpx.Response(503, json={"tokens": [1, 2]})),
        (httpx.Response(200, json=[3]), httpx.Response(200, content=b"\xff\xfe")),
    ],
)
def test_garbage_answers_mean_no_tokenizer(extras_answer, tokenize_answer):
    with respx.mock() as router:
        router.post(EXTRAS).mock(return_value=extras_answer)
        router.post(TOKENIZE).mock(return_value=tokenize_answer)
        counts, counter = count_all()
        assert len(router.calls) == 2
    assert counts == [None, None, None]
    assert counter.available is False


@pytest.mark.parametrize(
    "vllm_answer",
    [
        httpx.Response(200, json={"count": -5, "max_model_len": 4096}),
        httpx.Response(200, json={"tokens": [1, 2], "max_model_len": 4096}),  # no count
        httpx.Response(400, json={"object": "error", "message": "nope"}),
    ],
)
def test_garbage_from_the_vllm_body_means_no_tokenizer(vllm_answer):
    with respx.mock() as router:
        router.post(EXTRAS).mock(return_value=httpx.Response(404))
        router.post(TOKENIZE).mock(
            side_effect=[httpx.Response(422, json={"detail": "prompt missing"}), vllm_answer]
        )
        counts, counter = count_all()
        assert len(router.calls) == 3
    assert counts == [None, None, None]
    assert (counter.available, counter.window) == (False, None)


@pytest.mark.parametrize(
    "failure", [httpx.ConnectError("Connection refused"), httpx.ReadTimeout("timed out")]
)
def test_an_unreachable_server_is_asked_once(failure):
    with respx.mock() as router:
        router.route().mock(side_effect=failure)
        counts, counter = count_all()
        assert len(router.calls) == 1
    assert counts == [None, None, None]
    assert counter.available is False


# ---- a known endpoint that fails later ---------------------------------------------------


def test_a_failure_of_the_known_endpoint_is_transient():
    answers = [
        httpx.Response(200, json={"tokens": [1, 2, 3]}),
        httpx.Response(503, text="busy"),
        httpx.ConnectError("refused"),
        httpx.Response(200, text="not json"),
        httpx.Response(200, json={"tokens": [1]}),
    ]
    with respx.mock() as router:
        extras = router.post(EXTRAS).mock(return_value=httpx.Response(404))
        tokenize = router.post(TOKENIZE).mock(side_effect=answers)
        counts, counter = count_all(["a b c", "d", "e", "f", "g"])
    assert counts == [3, None, None, None, 1]
    assert (extras.call_count, tokenize.call_count) == (1, 5)
    assert (counter.available, counter.endpoint) == (True, LLAMA_CPP_TOKENIZE)


# ---- the HTTP client --------------------------------------------------------------------


def test_counts_through_a_given_transport():
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        return llama_cpp(request) if request.url.path == "/tokenize" else httpx.Response(404)

    counts, _ = count_all(transport=httpx.MockTransport(handler))
    assert counts == [3, 1, 2]
    assert seen == ["/extras/tokenize/count", "/tokenize", "/tokenize", "/tokenize"]


def test_a_given_client_is_used_and_left_open():
    async def go():
        async with httpx.AsyncClient(headers={"Authorization": "Bearer k"}) as http:
            async with TokenCounter(BASE, "m", http=http) as counter:
                counted = await counter.count("a b")
            return counted, http.is_closed

    with respx.mock() as router:
        extras = router.post(EXTRAS).mock(side_effect=llama_cpp_python)
        assert asyncio.run(go()) == (2, False)
    assert extras.calls.last.request.headers["Authorization"] == "Bearer k"


def dripping_server(body: bytes, gap_secs: float):
    """A server on loopback that answers 200 at once, then its body a byte every `gap_secs`."""
    import socket
    import threading

    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\n\r\n" % len(body)
                )
                for byte in body:
                    if stop.wait(gap_secs):
                        return
                    try:
                        conn.sendall(bytes([byte]))
                    except OSError:
                        break

    threading.Thread(target=serve, daemon=True).start()
    return listener, stop


def test_a_tokenizer_dripping_its_answer_is_given_up_on_within_the_timeout():
    body = b'{"count": 7}' + b" " * 60  # whole after some 15 s at a byte every 0.2 s
    listener, stop = dripping_server(body, 0.2)
    try:

        async def probe() -> tuple[int | None, bool | None]:
            base = "http://127.0.0.1:%d" % listener.getsockname()[1]
            async with TokenCounter(base, "m", timeout_secs=1) as counter:
                return await counter.count("hello"), counter.available

        assert asyncio.run(probe()) == (None, False)
    finally:
        stop.set()
        listener.close()
