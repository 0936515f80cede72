"""How a scripted model server behaves: one setting per way real servers differ.

ScriptedServer(script, context_length=4096, overflow="error", usage="zero")
ModelSettings(context_length=4096, overflow="error", usage="zero")   # the same settings
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Sequence

from ouroboros.testing.tokenizer import TOKENIZERS, ServerTokenizer
from ouroboros.testing.wire import UsageMode, Wire

Overflow = Literal["truncate", "error", "empty", "named"]
TokenizeFamily = Literal["llama.cpp", "llama-cpp-python", "vllm"]
Create = Literal["works", "missing", "fails"]


@dataclass(frozen=True)
class ModelSettings:
    """The scripted model's name, wire dialect, window and way of counting; `ScriptedServer`
    takes each field as a keyword argument."""

    model: str = "scripted"
    """Its name; a request for any other model gets Ollama's 404."""
    wire: Wire = "current"
    """The dialect of its streamed answers (see wire.Wire)."""
    fragment_tool_calls: bool = False
    """Stream tool-call arguments a few characters at a time, as llama.cpp and vLLM do,
    instead of each call whole in one chunk as Ollama does."""
    send_usage: bool = True
    """Send the usage chunk when a streamed request asks for it (`include_usage`)."""
    context_length: int | None = 8192
    """The window in tokens, advertised as `num_ctx` in /api/show and /api/ps; None: no
    limit, none advertised."""
    allocated: int | None = None
    """Ollama started with a smaller window than the model advertises (num_ctx in
    /api/show): the window it really holds, cuts or refuses at, and lists in /api/ps. None:
    `context_length`."""
    api_ps: Literal["honest", "silent"] = "honest"
    """"silent": /api/ps lists no loaded model (an older Ollama, a proxy in front of it, a
    server that is not Ollama), so the window must be inferred from what it does."""
    grows: tuple[int, int] | None = None
    """(n, window): after n chat requests the server is restarted with this window (a user
    who fixed OLLAMA_CONTEXT_LENGTH mid-run)."""
    overflow: Overflow = "truncate"
    """A prompt over the window: "truncate" (Ollama: whole messages dropped from the front),
    "error" (Ollama's 400), "empty" (llama.cpp: an empty 200 when streaming, else a 400),
    "named" (vLLM: a 400 naming the window, streaming or not)."""
    rejects_unparsed_arguments: bool = False
    """Answer 500 to a request whose history holds a tool call with arguments that are not a
    JSON object, every time, as llama.cpp's server does ("Failed to parse tool call arguments
    as JSON")."""
    template_tools: bool | None = None
    """Answer `/props` as llama.cpp's server does, its chat template taking tools
    (`chat_template_caps.supports_tools`) or not; None: no `/props` (Ollama)."""
    tools_supported: bool = True
    """False: a request with tools gets a 400, and /api/show lists no "tools" capability."""
    tokenizer: ServerTokenizer = TOKENIZERS["words"]
    """How it counts prompts and replies."""
    usage: UsageMode = "whole"
    """How it reports `prompt_tokens` (see wire.UsageMode)."""
    miscount: tuple[float, int] | None = None
    """(factor, n): from the nth chat request on, every prompt count it reports (streamed,
    or asked for in a one-token request) is the true count times `factor`: a server whose
    counts are off (0.6: 40 % low) while it cuts or refuses at its true window."""
    report_cached: bool = False
    """With usage "whole": add `prompt_tokens_details.cached_tokens` (vLLM with prefix
    caching, hosted APIs), the tokens the prompt shares with the previous one."""
    timings: bool = False
    """Send llama.cpp's `timings` (in the usage chunk, else in the finish chunk; at the top of
    a non-streamed answer): `cache_n`, the tokens the prompt shares with the previous one in
    the tokenizer's tokens (all but the last), and `prompt_n`, the rest."""
    bad_timings: dict[str, Any] | None = None
    """Fields that replace the counts of `timings` (`{"cache_n": -3}`): a server that says
    nonsense of its cache."""
    tokenize: TokenizeFamily | None = None
    """Serve the tokenize endpoint of this family of servers (endpoints.TOKENIZE_PATHS)."""
    extra_models: Sequence[str] = ()
    """More names it lists and answers to."""
    create: Create = "works"
    """How `/api/create` answers a model made `from` one it has with `parameters`: "works"
    (JSON lines ending in `success`; the new model is listed, served, shown with its
    `num_ctx`, and holds that window once a request loads it), "missing" (404, as a proxy
    or an Ollama without the endpoint answers), "fails" (an `error` line in the stream)."""
    serves_any_name: bool = False
    """Be llama.cpp: a chat request for any model name is answered by its one model, each
    chunk's `model` naming that one (`model`), not the name asked for; its window is told by
    `/props`, and Ollama's own endpoints are not there."""

    @property
    def window(self) -> int | None:
        """The window the server really holds."""
        return self.allocated if self.allocated is not None else self.context_length

    @property
    def models(self) -> list[str]:
        """Every name it answers to, its own first."""
        return [self.model, *self.extra_models]
