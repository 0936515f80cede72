import asyncio

import httpx
import pytest
import respx

from ouroboros.server.discovery import (
    allocated_context,
    context_from_name,
    discover_context_limit,
    model_supports_tools,
)
from ouroboros.server.kinds import same_model
from ouroboros.server.kinds.llamacpp import context_from_props
from ouroboros.server.kinds.vllm import context_from_models

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


def discover(model="llama3.2", configured=0, **answers):
    """(what discovery found, the bodies sent to /api/show); every endpoint not given answers 404."""
    found, asked = discover_asking(model, configured, **answers)
    return found, [content for path, content in asked if path == "/api/show"]


def discover_asking(
    model="llama3.2",
    configured=0,
    *,
    ps_answer=None,
    show_answer=None,
    props_answer=None,
    models_answer=None,
):
    """(what discovery found, every (path, body) it sent, in order)."""
    with respx.mock(assert_all_called=False) as router:
        router.get(f"{BASE}/api/ps").mock(return_value=ps_answer or httpx.Response(404))
        router.post(f"{BASE}/api/show").mock(return_value=show_answer or httpx.Response(404))
        router.get(f"{BASE}/props").mock(return_value=props_answer or httpx.Response(404))
        router.get(f"{BASE}/v1/models").mock(return_value=models_answer or httpx.Response(404))
        found = asyncio.run(discover_context_limit(BASE + "/v1", model, configured))
        return found, [(call.request.url.path, call.request.content) for call in router.calls]


def props(n_ctx=8192):
    body = {
        "default_generation_settings": {
            "id": 0,
            "id_task": -1,
            "n_ctx": n_ctx,
            "is_processing": False,
            "params": {},
        },
        "total_slots": 1,
        "model_path": "/models/Qwen3-8B-Q4_K_M.gguf",
        "chat_template": "{{ messages }}",
    }
    return httpx.Response(200, json=body)


def models(*entries):
    return httpx.Response(200, json={"object": "list", "data": list(entries)})


def vllm_model(model_id, max_model_len=32768):
    return {
        "id": model_id,
        "object": "model",
        "owned_by": "vllm",
        "root": model_id,
        "parent": None,
        "max_model_len": max_model_len,
    }


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


def test_the_model_named_in_another_case_is_found_in_api_ps():
    # Ollama matches names without regard to case: `Llama3.2` in the config runs
    # llama3.2:latest, and /api/ps lists it in lower case.
    found, _ = discover(
        model="Llama3.2",
        ps_answer=ps(
            {"name": "llama3.2:latest", "model": "llama3.2:latest", "context_length": 8192}
        ),
    )
    assert found == (8192, "allocated by Ollama (/api/ps)")


def test_api_ps_without_the_model_falls_through_to_the_modelfile_num_ctx():
    found, asked = discover(
        ps_answer=ps({"name": "qwen3:8b", "model": "qwen3:8b", "context_length": 40960}),
        show_answer=show(
            'num_ctx                        16384\nstop                           "<|eot_id|>"'
        ),
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
    body = {
        "model_info": {
            "general.architecture": "qwen3",
            "qwen3.context_length": 40960,
            "llama.context_length": 1,
        }
    }
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
    assert found == (
        131072,
        "typical for the llama3.2 family (the server did not say); set model.context_limit to be sure",
    )


def test_an_unreachable_server_falls_back_to_the_name_table():
    with respx.mock() as router:
        router.route().mock(side_effect=httpx.ConnectError("refused"))
        found = asyncio.run(discover_context_limit(BASE, "qwen2.5-coder:7b", 0))
    assert found[0] == 32768


@pytest.mark.parametrize(
    "name, expected",
    [
        ("llama3.3:70b", 131072),
        ("llama3:8b", 8192),
        ("hf.co/bartowski/Qwen3-8B-GGUF:Q4_K_M", 40960),
        ("gemma2", 8192),
    ],
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


# ---- llama.cpp's /props and vLLM's /v1/models ---------------------------------------------


def test_llama_cpp_server_context_from_props():
    found, asked = discover_asking("qwen3-8b", props_answer=props(n_ctx=6144))
    assert found == (6144, "n_ctx of the llama.cpp server (/props)")
    assert [path for path, _ in asked] == ["/api/ps", "/api/show", "/props"]


def test_vllm_context_from_the_model_listing():
    found, asked = discover_asking(
        "Qwen/Qwen3-8B",
        models_answer=models(
            vllm_model("Qwen/Qwen3-0.6B", 40960), vllm_model("Qwen/Qwen3-8B", 16384)
        ),
    )
    assert found == (16384, "max_model_len of the vLLM server (/v1/models)")
    assert [path for path, _ in asked] == ["/api/ps", "/api/show", "/props", "/v1/models"]


def test_vllm_serving_one_model_under_another_name_is_taken_at_its_word():
    found, _ = discover("my-agent", models_answer=models(vllm_model("/models/llama-3.1-8b", 8192)))
    assert found == (8192, "max_model_len of the vLLM server (/v1/models)")


def test_vllm_listing_several_other_models_falls_back_to_the_name_table():
    found, _ = discover(
        "qwen2.5:7b", models_answer=models(vllm_model("a", 1000), vllm_model("b", 2000))
    )
    assert found[0] == 32768 and "qwen2.5" in found[1]


def test_ollama_answers_stop_discovery_before_the_other_servers_endpoints():
    found, asked = discover_asking(
        show_answer=show("num_ctx 2048"),
        props_answer=props(),
        models_answer=models(vllm_model("llama3.2")),
    )
    assert found == (2048, "num_ctx in the model's Modelfile (/api/show)")
    assert [path for path, _ in asked] == ["/api/ps", "/api/show"]


def test_a_broken_props_moves_on_to_the_vllm_listing():
    found, _ = discover(
        props_answer=httpx.Response(200, json={"default_generation_settings": {"n_ctx": 0}}),
        models_answer=models(vllm_model("llama3.2:latest", 4096)),
    )
    assert found == (4096, "max_model_len of the vLLM server (/v1/models)")


@pytest.mark.parametrize(
    "props_answer",
    [
        httpx.Response(200, text="<html>llama.cpp web ui</html>"),
        httpx.Response(200, json=[8192]),
        httpx.Response(200, json={"n_ctx": 8192}),  # not under default_generation_settings
        httpx.Response(200, json={"default_generation_settings": None}),
        httpx.Response(200, json={"default_generation_settings": {"n_ctx": "8192"}}),
        httpx.Response(200, json={"default_generation_settings": {"n_ctx": -1}}),
        httpx.Response(200, json={"default_generation_settings": {"n_ctx": True}}),
        httpx.Response(500, json={"default_generation_settings": {"n_ctx": 8192}}),
    ],
)
def test_malformed_props_fall_back_to_the_name_table(props_answer):
    found, _ = discover("my-finetune", props_answer=props_answer)
    assert found == (4096, "default for an unknown server; set model.context_limit")


@pytest.mark.parametrize(
    "models_answer",
    [
        httpx.Response(200, text="not json"),
        httpx.Response(200, json={"data": None}),
        httpx.Response(200, json={"data": 5}),
        httpx.Response(200, json={"data": ["my-finetune"]}),
        httpx.Response(200, json={"data": {"id": "my-finetune", "max_model_len": 8192}}),
        models(vllm_model("my-finetune", "8192")),
        models(vllm_model("my-finetune", -1)),
        models(vllm_model("my-finetune", None)),
        models(
            {"id": "my-finetune:latest", "object": "model", "owned_by": "library"}
        ),  # Ollama's listing
    ],
)
def test_malformed_model_listings_fall_back_to_the_name_table(models_answer):
    found, _ = discover("my-finetune", models_answer=models_answer)
    assert found == (4096, "default for an unknown server; set model.context_limit")


@pytest.mark.parametrize(
    "body, expected",
    [
        ({"default_generation_settings": {"n_ctx": 4096}, "total_slots": 4}, 4096),
        ({"default_generation_settings": {"n_ctx": 0}}, None),
        ({"default_generation_settings": {"n_ctx": 4096.0}}, None),
        ({"default_generation_settings": []}, None),
        ({}, None),
    ],
)
def test_context_from_props(body, expected):
    assert context_from_props(body) == expected


@pytest.mark.parametrize(
    "body, model, expected",
    [
        ({"data": [vllm_model("m", 2048)]}, "m", 2048),
        ({"data": [vllm_model("m", 2048)]}, "other", 2048),  # the only model served
        ({"data": [vllm_model("a", 1), vllm_model("m", 2048)]}, "m", 2048),
        ({"data": [vllm_model("a", 1), vllm_model("b", 2)]}, "m", None),
        ({"data": [vllm_model("m:latest", 2048), vllm_model("x", 9)]}, "m", 2048),
        ({"data": [{"id": 7, "max_model_len": 2048}, vllm_model("x", 9)]}, "m", None),
        ({"data": [vllm_model("m", 0)]}, "m", None),
        ({"data": []}, "m", None),
        ({"models": [vllm_model("m", 2048)]}, "m", None),
    ],
)
def test_context_from_models(body, model, expected):
    assert context_from_models(body, model) == expected


def test_the_questions_carry_the_api_key_behind_an_authenticating_proxy():
    def answer(request):
        if request.headers.get("authorization") != "Bearer sk-proxy":
            return httpx.Response(401, json={"error": "unauthorized"})
        return ps({"name": "llama3.2:latest", "model": "llama3.2:latest", "context_length": 8192})

    with respx.mock(assert_all_called=False) as router:
        router.get(BASE + "/api/ps").mock(side_effect=answer)
        router.route().mock(return_value=httpx.Response(404))
        limit = asyncio.run(discover_context_limit(BASE, "llama3.2", 0, api_key="sk-proxy"))
        allocated = asyncio.run(allocated_context(BASE, "llama3.2", api_key="sk-proxy"))
    assert limit == (8192, "allocated by Ollama (/api/ps)")
    assert allocated == 8192
