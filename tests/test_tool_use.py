"""A model that will not call the tools is named: at the start when the server says so (a
llama.cpp chat template without tools, an Ollama model without the tools capability), and
after the run's first five replies when none held a call."""

from __future__ import annotations

import pytest

from ouroboros.loop.tool_use import no_tools_warning
from ouroboros.server.kinds.llamacpp import tools_from_props
from ouroboros.server.kinds.ollama import tools_from_show
from ouroboros.testing import Reply
from tests.helpers import make_project, ouroboros_here


def test_a_model_without_the_tools_capability_is_named_at_the_start(tmp_path, scripted_server):
    server = scripted_server([Reply("ok")], tools_supported=False)
    config = make_project(tmp_path, server.base_url)
    ran = ouroboros_here("run", "-c", str(config), "--headless", "--max-turns", "1")

    warned = [line for line in ran.stdout.splitlines() if "tools capability" in line]
    assert len(warned) == 1 and "WARNING" in warned[0]
    assert "ollama show scripted" in warned[0]


def test_a_model_with_tools_gets_no_such_warning(tmp_path, scripted_server):
    server = scripted_server([Reply("", [("list_dir", {"path": "."})])])
    config = make_project(tmp_path, server.base_url)
    ran = ouroboros_here("run", "-c", str(config), "--headless", "--max-turns", "1")
    assert ran.returncode == 3
    assert "WARNING" not in ran.stdout


def test_five_replies_without_a_tool_call_are_named_once(tmp_path, scripted_server):
    server = scripted_server([Reply(f"Thinking about step {n}.") for n in range(7)])
    config = make_project(tmp_path, server.base_url)
    ran = ouroboros_here("run", "-c", str(config), "--headless", "--max-turns", "7")

    assert ran.returncode == 3, ran.stdout
    warned = [line for line in ran.stdout.splitlines() if "held no tool call" in line]
    assert len(warned) == 1 and "first 5 replies" in warned[0]
    assert "--jinja" in warned[0]


def test_a_tool_call_among_the_first_replies_silences_the_watch(tmp_path, scripted_server):
    script = [Reply("Looking."), Reply("", [("list_dir", {"path": "."})])]
    script += [Reply(f"Thinking about step {n}.") for n in range(5)]
    server = scripted_server(script)
    config = make_project(tmp_path, server.base_url)
    ran = ouroboros_here("run", "-c", str(config), "--headless", "--max-turns", "7")
    assert ran.returncode == 3
    assert "held no tool call" not in ran.stdout


@pytest.mark.parametrize(
    "body,said",
    [
        ({"chat_template_caps": {"supports_tools": False, "supports_tool_calls": False}}, False),
        ({"chat_template_caps": {"supports_tools": True}}, True),
        ({"default_generation_settings": {"n_ctx": 2048}}, None),
        ({"chat_template_caps": {"supports_tools": "yes"}}, None),
    ],
)
def test_what_llama_cpps_props_say_of_tools(body, said):
    assert tools_from_props(body) is said


def test_what_ollamas_show_says_of_tools():
    assert tools_from_show({"capabilities": ["completion", "tools"]}) is True
    assert tools_from_show({"capabilities": ["completion"]}) is False
    assert tools_from_show({"model_info": {}}) is None


def test_the_start_warning_names_the_fix_for_each_server():
    assert no_tools_warning(True, "llama.cpp", "m") is None
    llama = no_tools_warning(False, "llama.cpp", "m")
    assert "--jinja" in llama and "--chat-template-file" in llama
    assert "`ollama show m`" in no_tools_warning(False, "ollama", "m")


def test_a_llama_cpp_template_without_tools_is_named_at_the_start(tmp_path, scripted_server):
    server = scripted_server([Reply("ok")], template_tools=False)
    config = make_project(tmp_path, server.base_url)
    ran = ouroboros_here("run", "-c", str(config), "--headless", "--max-turns", "1")

    assert ran.returncode == 3, ran.stdout
    warned = [line for line in ran.stdout.splitlines() if "supports_tools is false" in line]
    assert len(warned) == 1 and "`llama-server --jinja`" in warned[0]
