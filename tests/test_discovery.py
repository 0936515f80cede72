import asyncio

import httpx
import pytest
import respx

from ouroboros.discovery import (
    context_from_name,
    discover_context_limit,
    model_supports_tools,
    same_model,
)

BASE = "http://127.0.0.1:11434"


def ps(*entries):
    return httpx.Response(200, json={"models": list(entries)})


def show(parameters="", context_length=131072, capabilities=("completion", "tools")):
    body = {
        "parameters": parameters,
        "model_info": {"general.architecture": "llama", "llama.context_length": context_length},
        "capabilities": list(capabilities),
    }
    return httpx.Response(200, json=body)


def discover(model="llama3.2", configured=0, *, ps_answer=None, show_answer=None):
    with respx.mock(assert_all_called=False) as router:
        router.get(f"{BASE}/api/ps").mock(return_value=ps_answer or httpx.Response(404))
        show_route = router.post(f"{BASE}/api/show").mock(return_value=show_answer or httpx.Response(404))
        found = asyncio.run(discover_context_limit(BASE + "/v1", model, configured))
        asked_show = [r.request.content for r in show_route.calls]
        return found, asked_show


def test_configured_limit_wins_without_asking_the_server():
    with respx.mock() as router:  # any request would fail: nothing is mocked
        found = asyncio.run(discover_context_limit(BASE, "llama3.2", 16000))
        assert not router.calls
    assert found == (16000, "model.context_limit in config")


def test_allocated_context_from_api_ps_accepting_the_latest_tag():
    found, _ = discover(
        ps_answer=ps(
            {"name": "qwen3:8b", "model": "qwen3:8b", "context_length": 40960},
            {"name": "llama3.2:latest", "model": "llama3.2:latest", "context_length": 8192},
        ),
        show_answer=show("num_ctx 2048"),
    )
    assert found == (8192, "allocated by Ollama (/api/ps)")


def test_api_ps_without_the_model_falls_through_to_the_modelfile_num_ctx():
    found, asked = discover(
        ps_answer=ps({"name": "qwen3:8b", "model": "qwen3:8b", "context_length": 40960}),
        show_answer=show('num_ctx                        16384\nstop                           "<|eot_id|>"'),
    )
    assert found == (16384, "num_ctx in the model's Modelfile (/api/show)")
    assert asked == [b'{"model":"llama3.2"}']


def test_api_ps_entry_without_context_length_is_skipped():
    found, _ = discover(
        ps_answer=ps({"name": "llama3.2:latest", "model": "llama3.2:latest"}),
        show_answer=show('stop "<|eot_id|>"'),
    )
    assert found == (131072, "trained context length (/api/show)")


def test_trained_length_uses_the_named_architecture():
    body = {"model_info": {"general.architecture": "qwen3", "qwen3.context_length": 40960, "llama.context_length": 1}}
    found, _ = discover(show_answer=httpx.Response(200, json=body))
    assert found == (40960, "trained context length (/api/show)")


def test_a_server_that_is_not_ollama_gets_the_name_table():
    found, _ = discover("llama3.1:8b-instruct-q4_K_M")
    assert found[0] == 131072
    assert "llama3.1" in found[1] and "model.context_limit" in found[1]


def test_an_unknown_model_on_an_unknown_server_gets_a_conservative_default():
    found, _ = discover("my-finetune")
    assert found == (4096, "default for an unknown server; set model.context_limit")


def test_broken_answers_move_on_to_the_next_source():
    found, _ = discover(
        ps_answer=httpx.Response(200, text="not json"),
        show_answer=httpx.Response(200, json={"model_info": None, "parameters": 5}),
    )
    assert found == (131072, "typical for the llama3.2 family (the server did not say); set model.context_limit to be sure")


def test_an_unreachable_server_falls_back_to_the_name_table():
    with respx.mock() as router:
        router.route().mock(side_effect=httpx.ConnectError("refused"))
        found = asyncio.run(discover_context_limit(BASE, "qwen2.5-coder:7b", 0))
    assert found[0] == 32768


@pytest.mark.parametrize(
    "name, expected",
    [("llama3.3:70b", 131072), ("llama3:8b", 8192), ("hf.co/bartowski/Qwen3-8B-GGUF:Q4_K_M", 40960), ("gemma2", 8192)],
)
def test_context_from_name_prefers_the_longest_family(name, expected):
    assert context_from_name(name)[0] == expected


def test_same_model():
    assert same_model("llama3.2", "llama3.2:latest")
    assert same_model("llama3.2:latest", "llama3.2")
    assert not same_model("llama3.2", "llama3.2:1b")
    assert same_model("registry:5000/team/model", "registry:5000/team/model:latest")


@pytest.mark.parametrize(
    "answer, expected",
    [
        (show(capabilities=("completion", "tools")), True),
        (show(capabilities=("completion",)), False),
        (httpx.Response(200, json={"parameters": ""}), None),  # older Ollama: no capabilities
        (httpx.Response(404), None),
    ],
)
def test_model_supports_tools(answer, expected):
    with respx.mock() as router:
        router.post(f"{BASE}/api/show").mock(return_value=answer)
        assert asyncio.run(model_supports_tools(BASE, "llama3.2")) is expected
