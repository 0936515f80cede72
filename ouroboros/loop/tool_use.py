"""Whether the model uses the tools it is offered: the server's word at the start (a chat
template or a model without tools), and the run's first replies after it.

    warning = no_tools_warning(False, "llama.cpp", "qwen3")   # one line naming the fix
    watch = ToolUseWatch(lambda key, text: state.warn_once(log, key, text))
    log.subscribe(watch.take)   # after FIRST_REPLIES replies without a call: one warning
"""

from __future__ import annotations

from ouroboros.protocols import Warn
from ouroboros.store import events as ev

FIRST_REPLIES = 5  # replies without a tool call, from the run's start, before saying so


def no_tools_warning(takes_tools: bool, server: str, model: str) -> str | None:
    """The one line for a server that says, before any request, that the model will not be
    shown the tools; None when it takes them. `server` is the family that said so
    ("llama.cpp" or "ollama")."""
    if takes_tools:
        return None
    if server == "llama.cpp":
        return (
            "the llama.cpp server's chat template does not take tools (/props: "
            "chat_template_caps.supports_tools is false): the model is never shown them "
            "and cannot call one; start `llama-server --jinja` with a chat template that has "
            "tools (`--chat-template-file`), or a model whose own template has them"
        )
    return (
        f"{model} does not list the tools capability (/api/show): the server will refuse "
        "requests with tools; use a model with the tools capability (`ollama show "
        f"{model}` lists them)"
    )


def no_calls_warning(replies: int) -> str:
    return (
        f"the run's first {replies} replies held no tool call, though tools were offered: "
        "the model may not be able to call them (a chat template without tools: "
        "`llama-server --jinja` and a template that has them; a model without the "
        "tools capability), or it was not asked clearly enough (SYSTEM_PROMPT.md)"
    )


class ToolUseWatch:
    """Counts the run's first replies (assistant events) until one holds a tool call; at
    FIRST_REPLIES without one, warns once. Subscribe it last: it may emit."""

    def __init__(self, warn: Warn, first: int = FIRST_REPLIES) -> None:
        self.warn = warn
        self.first = first
        self.replies = 0
        self.done = False

    def take(self, event: ev.EventBase) -> None:
        if self.done or not isinstance(event, ev.Assistant):
            return
        if event.tool_calls:
            self.done = True
            return
        self.replies += 1
        if self.replies >= self.first:
            self.done = True
            self.warn("no_tool_calls", no_calls_warning(self.replies))
