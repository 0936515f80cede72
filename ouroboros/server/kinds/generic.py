"""Any other OpenAI-compatible server (LM Studio, a hosted API, a proxy): it says nothing of
its window or tools, so the run infers them; hints name the servers it might be.
"""

from __future__ import annotations

from ouroboros.server.kinds.family import BaseFamily


class Generic(BaseFamily):
    """The `ServerFamily` of a server the harness does not know: every answer the base's."""

    name = "other"
