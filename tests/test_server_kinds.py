"""One class per server family behind one protocol: the window questions, the tokenize
endpoints, whether the model takes tools, and the words of hints and fixes, each in its
family's class; a run asks them all through its one HTTP client."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from ouroboros.server import kinds
from ouroboros.server.discovery import WindowQuestions, discover_context_limit
from ouroboros.server.kinds.family import BaseFamily, Situation, Told
from ouroboros.testing import Reply
from tests.helpers import make_project, ouroboros_here


def asking(routes: dict[str, httpx.Response]) -> tuple[httpx.AsyncClient, list[str]]:
    """A client whose server answers `routes` ("GET /props") and 404 elsewhere, and the
    requests it was sent."""
    sent: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(f"{request.method} {request.url.path}")
        return routes.get(sent[-1], httpx.Response(404))

    transport = httpx.MockTransport(answer)
    return httpx.AsyncClient(base_url="http://127.0.0.1:9", transport=transport), sent


@pytest.mark.parametrize(
    "kind, words",
    [
        ("ollama", "OLLAMA_CONTEXT_LENGTH=32768"),
        ("llama.cpp", "-c 32768"),
        ("vllm", "--max-model-len 32768"),
        ("other", "32768"),
    ],
)
def test_each_family_names_its_own_fix_for_a_bigger_window(kind, words):
    fix = kinds.family_named(kind).bigger_window(32768)

    assert words in fix
    assert ("ollama" in fix.lower()) == (kind == "ollama")


def test_the_fix_a_message_names_without_knowing_the_server_names_each_one():
    assert kinds.bigger_window(8192) == (
        "Ollama: `OLLAMA_CONTEXT_LENGTH=8192 ollama serve`, or `PARAMETER num_ctx 8192` in a "
        "Modelfile; llama.cpp: `-c 8192`; vLLM: `--max-model-len 8192`"
    )


def test_each_family_brings_its_own_tokenize_endpoints_in_the_order_they_are_tried():
    assert [e.name for e in kinds.tokenize_endpoints()] == ["llama-cpp-python", "llama.cpp", "vLLM"]
    assert kinds.family_named("ollama").tokenizers == ()


def test_every_family_is_named_once_and_the_generic_one_answers_the_rest():
    names = [family.name for family in kinds.FAMILIES]

    assert names == ["ollama", "llama.cpp", "vllm", "other"]
    assert kinds.family_named("lmstudio") is kinds.family_named("other")


def test_the_questions_go_through_the_client_they_are_given():
    http, sent = asking(
        {"GET /props": httpx.Response(200, json={"default_generation_settings": {"n_ctx": 6144}})}
    )

    async def go() -> tuple[Any, Any, Any]:
        async with http:
            questions = WindowQuestions("http://nowhere.invalid:1", "m", http=http)
            started = await discover_context_limit("http://nowhere.invalid:1", "m", 0, http=http)
            return started, await questions.told(), await questions.allocated()

    assert asyncio.run(go()) == (
        (6144, "n_ctx of the llama.cpp server (/props)"),
        (6144, "n_ctx of the llama.cpp server (/props)"),
        None,
    )
    assert sent[:3] == ["GET /api/ps", "POST /api/show", "GET /props"]


class LmStudio(BaseFamily):
    """A family a newcomer might add: its window in `/api/v0/models/<model>`."""

    name = "lmstudio"
    title = "LM Studio"
    default_port = 1234

    async def window(self, http: httpx.AsyncClient, model: str) -> Told | None:
        answer = await http.get(f"/api/v0/models/{model}")
        length = answer.json().get("max_context_length") if answer.is_success else None
        return (length, "max_context_length of LM Studio") if length else None

    def hint(self, situation: Situation, model: str) -> str:
        return "is LM Studio's server running there?"

    def bigger_window(self, tokens: int) -> str:
        return f"load the model with a context length of {tokens}"


def test_a_new_family_is_one_class_listed_in_families(monkeypatch):
    family = LmStudio()
    monkeypatch.setattr(kinds, "FAMILIES", (*kinds.FAMILIES[:-1], family, kinds.FAMILIES[-1]))
    http, _ = asking(
        {"GET /api/v0/models/m": httpx.Response(200, json={"id": "m", "max_context_length": 12288})}
    )

    async def go() -> Any:
        async with http:
            return await discover_context_limit("http://127.0.0.1:1234", "m", 0, http=http)

    assert asyncio.run(go()) == (12288, "max_context_length of LM Studio")
    assert kinds.kind_from_url("http://127.0.0.1:1234") == "lmstudio"
    assert kinds.hint("lmstudio", "unreachable") == "is LM Studio's server running there?"
    assert kinds.bigger_window(8192).endswith(
        "; LM Studio: load the model with a context length of 8192"
    )


def test_a_run_asks_its_server_everything_over_one_connection(tmp_path, scripted_server):
    """The start's questions (models, window, tools), the chat requests and the questions
    after the first reply share the run's client: one connection, kept alive."""
    server = scripted_server([Reply("", [("list_dir", {"path": "."})]), Reply("Done.")])
    config = make_project(tmp_path, server.base_url)

    ran = ouroboros_here("run", "-c", str(config), "--headless", "--max-turns", "2")

    assert ran.returncode == 3, ran.stderr
    assert len(server.requests) == 2
    assert server.connections_opened == 1
