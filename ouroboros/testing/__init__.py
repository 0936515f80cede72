"""The scripted model server: a real HTTP server on 127.0.0.1 that speaks Ollama's API.

It answers from a script instead of a model, with the bytes Ollama sends, and can inject
each failure a real server shows. `ouroboros demo`, the tests and the benchmarks run
against it.

    with ScriptedServer([Reply("Reading it.", [("file_read", {"path": "a.txt"})]),
                         Fault("status", 503),
                         Reply("Done.")]) as server:
        client = ChatClient(server.base_url, "scripted")
        ...
        server.requests[0]["messages"]      # what the client sent

Where things are:
- script.py: `Reply`, `Fault`, a `Brain`, and the order they come in (injected faults first)
- wire.py: the bytes, as pure functions: SSE frames, completions, error bodies, usage
- settings.py: `ModelSettings`, each way servers differ (window, overflow, usage reporting)
- model.py: `ScriptedModel`, how each chat request is counted, recorded and answered
- endpoints.py: the rest of Ollama's API (tags, show, ps) and other servers' tokenize
- server.py: `ScriptedServer`, the model on a socket, with outages
- tokenizer.py: `ServerTokenizer`, how a server counts tokens, unlike the harness's estimate
- agents.py: brains that read literally, as small local models do (`LiteralAgent`, ...),
  and the figures of a run of their task (`run_figures`)

May import `store` (the figures of a run, read from its log) and the base modules; it stands
in for the server, so it shares no code with it.
"""

from ouroboros.testing.agents import (
    LITERAL_AGENTS,
    LastWordAgent,
    LiteralAgent,
    RunFigures,
    WindowAgent,
    WordyAgent,
    run_figures,
)
from ouroboros.testing.model import ScriptedModel
from ouroboros.testing.script import SCRIPT_FINISHED, Brain, Fault, Reply
from ouroboros.testing.server import ScriptedServer
from ouroboros.testing.settings import ModelSettings
from ouroboros.testing.tokenizer import TOKENIZERS, ServerTokenizer
from ouroboros.testing.wire import (
    DONE_FRAME,
    GARBAGE_FRAME,
    OVERFLOW_MESSAGE,
    UsageMode,
    error_body,
    frame,
    render_completion,
    render_deltas,
    render_stream,
    split_text,
    usage_wire,
)

__all__ = [
    "DONE_FRAME",
    "GARBAGE_FRAME",
    "LITERAL_AGENTS",
    "OVERFLOW_MESSAGE",
    "SCRIPT_FINISHED",
    "TOKENIZERS",
    "Brain",
    "Fault",
    "LastWordAgent",
    "LiteralAgent",
    "ModelSettings",
    "Reply",
    "RunFigures",
    "ScriptedModel",
    "ScriptedServer",
    "ServerTokenizer",
    "UsageMode",
    "WindowAgent",
    "WordyAgent",
    "error_body",
    "frame",
    "render_completion",
    "render_deltas",
    "render_stream",
    "run_figures",
    "split_text",
    "usage_wire",
]
