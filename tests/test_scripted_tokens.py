"""How the scripted server counts tokens (pure) and reports them (over loopback)."""

import asyncio
import hashlib
import json
from itertools import combinations

import httpx
import pytest

from ouroboros.server.client import ChatClient
from ouroboros.testing import Fault, Reply, ScriptedServer
from ouroboros.testing.tokenizer import (
    TOKENIZERS,
    ServerTokenizer,
    by_content,
    ratio,
    words_and_punctuation,
)

PROSE = (
    "The harness keeps the agent going for hours while the window fills up and then it "
    "starts a fresh session with the notes the agent wrote for itself before it stopped "
) * 4
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "file_read",
            "description": "Read a text file from the workspace.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string", "description": "Relative path"}},
                "required": ["path"],
            },
        },
    }
]
JSON = json.dumps(TOOLS * 3)
HEX = " ".join(hashlib.sha256(str(n).encode()).hexdigest() for n in range(6))


def density(counter, text: str) -> float:
    return len(text) / counter(text)


# ---- text counters ------------------------------------------------------------------------


def test_words_and_punctuation_counts_words_and_marks_not_characters():
    assert words_and_punctuation("") == 0
    assert words_and_punctuation("Hello, world!") == 4
    assert words_and_punctuation('{"a": [1, 2]}') == 11
    assert words_and_punctuation("extraordinary") == words_and_punctuation("a b") == 2
    assert words_and_punctuation("x" * 100) == 9  # a long run is several tokens, not one


def test_ratio_is_ceil_of_characters_over_the_ratio():
    four = ratio(4)
    assert [four(""), four("abcd"), four("abcde")] == [0, 1, 2]
    assert ratio(2.5)("x" * 10) == 4
    assert four.__name__ == "ratio(4)"


def test_by_content_density_follows_the_content():
    assert 4.5 <= density(by_content, PROSE) <= 5.0
    assert 2.8 <= density(by_content, JSON) <= 3.6
    assert 1.9 <= density(by_content, HEX) <= 2.1
    assert by_content("") == 0


def test_by_content_hex_runs_need_eight_characters_and_a_digit():
    assert by_content("deadbee1") == 4  # hex: 2 characters a token
    assert by_content("deadbeef") == 2  # no digit: a word, 5 characters a token
    assert by_content("dead1") == 1  # too short for hex
    assert by_content("id 0123456789abcdef done") == 1 + 8 + 1


def test_no_default_counter_is_a_fixed_ratio():
    for counter in (words_and_punctuation, by_content):
        densities = [density(counter, text) for text in (PROSE, JSON, HEX)]
        assert max(densities) / min(densities) > 1.5, counter


@pytest.mark.parametrize(
    "a, b",
    list(combinations([words_and_punctuation, ratio(4), by_content], 2)),
    ids=lambda counter: counter.__qualname__,
)
def test_every_counter_weighs_prose_json_and_hex_differently_from_the_others(a, b):
    relative = [a(text) / b(text) for text in (PROSE, JSON, HEX)]
    assert max(relative) / min(relative) > 1.2


# ---- ServerTokenizer ----------------------------------------------------------------------

CONVERSATION = [
    {"role": "system", "content": "You are careful."},
    {"role": "user", "content": "Read a.txt please."},
    {
        "role": "assistant",
        "content": "<think>The user wants the file read, so I call the tool.</think>Reading.",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "file_read", "arguments": '{"path":"a.txt"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "hello there"}]},
    {"role": "user", "content": "Thanks."},
]


def test_count_is_every_text_plus_the_tools_plus_the_template():
    tokenizer = ServerTokenizer("t")
    texts = [
        "You are careful.",
        "Read a.txt please.",
        CONVERSATION[2]["content"],
        "file_read",
        '{"path":"a.txt"}',
        "hello there",
        "Thanks.",
        json.dumps(TOOLS),
    ]
    expected = sum(words_and_punctuation(text) for text in texts) + 3 * len(CONVERSATION)
    assert tokenizer.count(CONVERSATION, TOOLS) == expected
    assert tokenizer.count([], None) == 0
    assert tokenizer.count([], TOOLS) == words_and_punctuation(json.dumps(TOOLS))


def test_dict_arguments_and_missing_contents_count_too():
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": {"k": "v"}}}
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    assert (
        ServerTokenizer("t").count([message], None) == 1 + words_and_punctuation('{"k": "v"}') + 3
    )


def test_count_text_is_the_text_counter_alone():
    for tokenizer in TOKENIZERS.values():
        assert tokenizer.count_text(PROSE) == tokenizer.text(PROSE)
        assert tokenizer.count_text("") == 0


def test_per_message_adds_template_tokens_for_each_message():
    words, heavy = TOKENIZERS["words"], TOKENIZERS["template-heavy"]
    assert heavy.count(CONVERSATION, TOOLS) - words.count(CONVERSATION, TOOLS) == 9 * len(
        CONVERSATION
    )


def test_count_tools_false_leaves_the_schemas_out():
    words, no_tools = TOKENIZERS["words"], TOKENIZERS["no-tools"]
    assert no_tools.count(CONVERSATION, TOOLS) == no_tools.count(CONVERSATION, None)
    assert no_tools.count(CONVERSATION, TOOLS) == words.count(CONVERSATION, None)
    assert words.count(CONVERSATION, TOOLS) - words.count(
        CONVERSATION, None
    ) == words_and_punctuation(json.dumps(TOOLS))


def test_strip_reasoning_drops_think_blocks_before_the_last_user_message_only():
    words, strip = TOKENIZERS["words"], TOKENIZERS["strip-reasoning"]
    think = "<think>The user wants the file read, so I call the tool.</think>"
    assert words.count(CONVERSATION, None) - strip.count(
        CONVERSATION, None
    ) == words_and_punctuation(think)
    latest = CONVERSATION[:4]  # the assistant turn comes after the last user message: kept
    assert strip.count(latest, None) == words.count(latest, None)
    user_only = [m for m in CONVERSATION if m["role"] != "assistant"]
    assert strip.count(user_only, None) == words.count(user_only, None)


def test_the_matrix_names_every_kind_of_server():
    assert set(TOKENIZERS) >= {
        "words",
        "cpt-2.5",
        "cpt-4",
        "cpt-6.5",
        "by-content",
        "template-heavy",
        "no-tools",
        "strip-reasoning",
    }
    assert all(name == tokenizer.name for name, tokenizer in TOKENIZERS.items())
    assert TOKENIZERS["words"].text is words_and_punctuation
    assert TOKENIZERS["by-content"].text is by_content
    assert [TOKENIZERS[f"cpt-{r}"].count_text("x" * 13) for r in ("2.5", "4", "6.5")] == [6, 4, 2]
    assert ScriptedServer([]).settings.tokenizer is TOKENIZERS["words"]
    counts = {tokenizer.count(CONVERSATION, TOOLS) for tokenizer in TOKENIZERS.values()}
    assert len(counts) == len(TOKENIZERS)  # each one disagrees with every other


# ---- the server over loopback -------------------------------------------------------------

USER = [{"role": "user", "content": "Start with the notes, please."}]


def post(server, path, body):
    return httpx.post(server.base_url + path, json=body, timeout=30)


def post_chat(server, messages, *, tools=None, stream=True, include_usage=True):
    body = {"model": "scripted", "messages": messages, "stream": stream}
    if include_usage:
        body["stream_options"] = {"include_usage": True}
    if tools:
        body["tools"] = tools
    response = httpx.post(server.base_url + "/v1/chat/completions", json=body, timeout=30)
    assert response.status_code == 200
    return response


def usage_frame(response) -> tuple[str, dict | None]:
    """The raw `data:` line carrying usage, and its usage object (None if there is none)."""
    frames = [f for f in response.text.split("\n\n") if f.startswith("data: {")]
    carrying = [f for f in frames if '"usage"' in f]
    if not carrying:
        return "", None
    (raw,) = carrying
    assert raw == frames[-1] and response.text.endswith(raw + "\n\ndata: [DONE]\n\n")
    chunk = json.loads(raw[6:])
    assert chunk["choices"] == []
    return raw, chunk["usage"]


def complete(server, messages, tools=()):
    async def go():
        async with ChatClient(server.base_url, "scripted") as client:
            return await client.complete(messages, list(tools), lambda piece: None)

    return asyncio.run(go())


@pytest.mark.parametrize("name", list(TOKENIZERS))
def test_every_tokenizer_reports_its_own_whole_count_to_the_client(scripted_server, name):
    tokenizer = TOKENIZERS[name]
    server = scripted_server([Reply("Done, see notes.")], tokenizer=tokenizer)
    result = complete(server, CONVERSATION, TOOLS)
    assert result.text == "Done, see notes."
    assert server.prompt_tokens == [tokenizer.count(CONVERSATION, TOOLS)]
    assert result.usage.prompt_tokens == server.prompt_tokens[0]
    assert result.usage.completion_tokens == tokenizer.count_text("Done, see notes.")


def test_completion_tokens_count_the_text_and_the_tool_calls(scripted_server):
    server = scripted_server([Reply("Reading it.", [("file_read", {"path": "a.txt"})]), Reply()])
    _, usage = usage_frame(post_chat(server, USER))
    assert usage["completion_tokens"] == 3 + 1 + words_and_punctuation('{"path":"a.txt"}')
    _, usage = usage_frame(post_chat(server, USER))
    assert usage["completion_tokens"] == 1  # never zero


def test_usage_whole_is_the_true_prompt(scripted_server):
    server = scripted_server([Reply("Hello, world!")])
    raw, usage = usage_frame(post_chat(server, USER, tools=TOOLS))
    prompt = server.count_tokens(USER, TOOLS)
    assert server.prompt_tokens == [prompt]
    assert usage == {"prompt_tokens": prompt, "completion_tokens": 4, "total_tokens": prompt + 4}
    assert "prompt_tokens_details" not in raw


@pytest.mark.parametrize(
    "mode, raw_prompt",
    [("zero", '"prompt_tokens":0,'), ("null", '"prompt_tokens":null,'), ("absent", None)],
)
def test_broken_usage_modes_on_the_wire(scripted_server, mode, raw_prompt):
    server = scripted_server([Reply("Hello, world!"), Reply("Hello, world!")], usage=mode)
    raw, usage = usage_frame(post_chat(server, USER))
    assert server.prompt_tokens == [server.count_tokens(USER, None)]  # the truth is still recorded
    if raw_prompt is None:
        assert "prompt_tokens" not in raw
        assert usage == {"completion_tokens": 4, "total_tokens": 4}
    else:
        assert raw_prompt in raw
        assert usage["completion_tokens"] == usage["total_tokens"] == 4
    whole = post_chat(server, USER, stream=False, include_usage=False).json()["usage"]
    assert whole == usage  # a non-streaming answer reports the same way


@pytest.mark.parametrize("mode", ["whole", "zero", "null", "absent", "uncached"])
def test_no_usage_unless_asked_and_enabled_in_every_mode(scripted_server, mode):
    server = scripted_server([Reply("a"), Reply("b")], usage=mode)
    assert usage_frame(post_chat(server, USER, include_usage=False)) == ("", None)
    quiet = scripted_server([Reply("a")], usage=mode, send_usage=False)
    assert usage_frame(post_chat(quiet, USER)) == ("", None)


@pytest.mark.parametrize("mode", ["zero", "null", "absent", "uncached"])
def test_the_client_still_gets_the_reply_in_every_mode(scripted_server, mode):
    server = scripted_server([Reply("first"), Reply("second")], usage=mode)
    assert complete(server, USER).text == "first"
    grown = USER + [{"role": "assistant", "content": "first"}, {"role": "user", "content": "More."}]
    assert complete(server, grown).text == "second"


def grown(messages, n):
    return messages + [
        {"role": "assistant", "content": f"Reply number {n}."},
        {"role": "user", "content": f"Now do step {n}, carefully."},
    ]


def test_uncached_reports_only_what_follows_the_common_prefix(scripted_server):
    tokenizer = TOKENIZERS["template-heavy"]
    server = scripted_server([], usage="uncached", tokenizer=tokenizer)
    first, second = USER, grown(USER, 1)
    _, usage = usage_frame(post_chat(server, first, tools=TOOLS))
    assert usage["prompt_tokens"] == server.prompt_tokens[0]  # nothing cached yet: the whole
    _, usage = usage_frame(post_chat(server, second, tools=TOOLS))
    assert usage["prompt_tokens"] == tokenizer.count(second[1:], None) == 2 * 12 + 4 + 7
    assert server.prompt_tokens[1] == tokenizer.count(second, TOOLS) > usage["prompt_tokens"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_uncached_after_an_edit_a_retry_or_new_tools(scripted_server):
    server = scripted_server([], usage="uncached")
    base = grown(USER, 1)
    post_chat(server, base)
    edited = [{"role": "user", "content": "Something else."}] + base[1:]
    _, usage = usage_frame(post_chat(server, edited))
    assert usage["prompt_tokens"] == server.prompt_tokens[-1]  # nothing in common: the whole
    _, usage = usage_frame(post_chat(server, edited))
    assert usage["prompt_tokens"] == 1  # all cached: Ollama still evaluates one token
    _, usage = usage_frame(post_chat(server, edited, tools=TOOLS))
    assert usage["prompt_tokens"] == server.prompt_tokens[-1]  # the tools come first: all new


def test_uncached_compares_with_the_last_prompt_the_model_read(scripted_server):
    server = scripted_server([], usage="uncached")
    post_chat(server, USER)
    server.inject(Fault("status", 503))
    longer = grown(USER, 1)
    body = {"model": "scripted", "messages": longer}
    assert post(server, "/v1/chat/completions", body).status_code == 503  # never reached the model
    _, usage = usage_frame(post_chat(server, longer))
    assert usage["prompt_tokens"] == server.count_tokens(longer[1:], None)


def test_report_cached_adds_the_common_prefix_and_keeps_the_whole_count(scripted_server):
    server = scripted_server([], report_cached=True)
    _, usage = usage_frame(post_chat(server, USER, tools=TOOLS))
    assert usage["prompt_tokens_details"] == {"cached_tokens": 0}
    longer = grown(USER, 1)
    _, usage = usage_frame(post_chat(server, longer, tools=TOOLS))
    cached = usage["prompt_tokens_details"]["cached_tokens"]
    assert cached == server.count_tokens(USER, TOOLS)
    assert (
        usage["prompt_tokens"]
        == server.prompt_tokens[-1]
        == cached + server.count_tokens(longer[1:], None)
    )
    whole = post_chat(server, longer, tools=TOOLS, stream=False).json()["usage"]
    assert whole["prompt_tokens_details"]["cached_tokens"] == server.prompt_tokens[-1]


def test_report_cached_only_with_whole_usage(scripted_server):
    server = scripted_server([], report_cached=True, usage="zero")
    post_chat(server, USER)
    raw, usage = usage_frame(post_chat(server, grown(USER, 1)))
    assert usage["prompt_tokens"] == 0 and "prompt_tokens_details" not in raw


# ---- tokenize endpoints -------------------------------------------------------------------

TEXT = "Count me, please: 3 words and marks."


def test_llama_cpp_tokenize_answers_that_many_tokens(scripted_server):
    server = scripted_server([], tokenize="llama.cpp")
    response = post(server, "/tokenize", {"content": TEXT})
    assert response.status_code == 200
    tokens = response.json()["tokens"]
    assert len(tokens) == words_and_punctuation(TEXT) == 10
    assert all(isinstance(token, int) for token in tokens)
    assert post(server, "/extras/tokenize/count", {"input": TEXT}).status_code == 404
    assert server.tokenize_requests == 1


def test_llama_cpp_python_tokenize_count(scripted_server):
    server = scripted_server([], tokenize="llama-cpp-python", tokenizer=TOKENIZERS["cpt-4"])
    response = post(server, "/extras/tokenize/count", {"input": TEXT})
    assert response.json() == {"count": -(-len(TEXT) // 4)}
    assert post(server, "/tokenize", {"content": TEXT}).status_code == 404
    assert server.tokenize_requests == 1


def test_vllm_tokenize_answers_count_tokens_and_the_window(scripted_server):
    server = scripted_server(
        [], tokenize="vllm", context_length=6000, tokenizer=TOKENIZERS["by-content"]
    )
    answer = post(server, "/tokenize", {"model": "scripted", "prompt": TEXT}).json()
    assert answer["count"] == by_content(TEXT) == len(answer["tokens"])
    assert answer["max_model_len"] == 6000
    chat_form = post(server, "/tokenize", {"model": "scripted", "messages": CONVERSATION}).json()
    assert chat_form["count"] == server.count_tokens(CONVERSATION, None)
    assert server.tokenize_requests == 2
    assert server.requests == [] and server.prompt_tokens == []


@pytest.mark.parametrize(
    "family, path, field",
    [
        ("llama.cpp", "/tokenize", "content"),
        ("llama-cpp-python", "/extras/tokenize/count", "input"),
        ("vllm", "/tokenize", "prompt"),
    ],
)
def test_tokenize_without_text_is_a_400(scripted_server, family, path, field):
    server = scripted_server([], tokenize=family)
    response = post(server, path, {field: 42})
    assert response.status_code == 400
    assert field in response.json()["error"]["message"]


def test_no_tokenize_endpoint_by_default(scripted_server):
    server = scripted_server([Reply("x")])
    assert post(server, "/tokenize", {"content": TEXT}).status_code == 404
    assert post(server, "/extras/tokenize/count", {"input": TEXT}).status_code == 404
    assert httpx.get(server.base_url + "/tokenize").status_code == 404
    assert server.tokenize_requests == 0


def test_bpe_bytes_splits_what_is_not_ascii_by_its_bytes():
    from ouroboros.testing.tokenizer import bpe_bytes

    assert bpe_bytes("plain words here") == by_content("plain words here")
    assert bpe_bytes("上下文窗口") == 8  # 15 bytes
    assert bpe_bytes("ok 📦📦") == by_content("ok ") + 4


def test_content_kinds_differ_in_density_as_real_files_do():
    import random

    from ouroboros.testing.content import CONTENT_KINDS

    bpe = TOKENIZERS["bpe-bytes"]
    per_char = {
        kind: bpe.count_text(make(6000, random.Random(1))) / 6000
        for kind, make in CONTENT_KINDS.items()
    }
    assert per_char["cjk"] > 1 and per_char["emoji"] > 1  # denser than a token a character
    assert per_char["hex"] > 2 * per_char["prose"]
    assert "\n" not in CONTENT_KINDS["long-line"](6000, random.Random(1))
