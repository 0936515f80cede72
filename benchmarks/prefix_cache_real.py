"""The prefix cache on a real server: the demo task, shortened, against llama.cpp's own server.

The benchmark `context_efficiency.py` estimates, from the requests the harness sent, what a
server keeping the previous prompt's prefix cache processes again (characters after the
longest prefix shared with the request before). Here the same task runs against the real
`llama-server` of ../shared/bin with SmolLM2-135M (tests/real/llama.py starts it), and the
server's own `timings` say what it really did: `prompt_n` (tokens processed) and `cache_n`
(tokens taken from its cache), summed over the run, beside the estimate.

A 135M model cannot do the task, so the scripted demo agent writes the replies: a proxy on
loopback sends each chat request to llama-server as it came (one token of reply, so the
server reads the whole prompt through its chat template and cache), then streams back the
agent's reply with the server's own `usage` and `timings`. Everything else (`/props`,
`/tokenize`, counting requests) goes to llama-server unchanged: the harness sees llama.cpp.

    PYTHONPATH=. python benchmarks/prefix_cache_real.py [--parts 12] [--tokens-per-file 200]
                                                        [--window 4096] [--keep DIR]

Slow on purpose: SmolLM2 processes about 50-100 prompt tokens a second on one busy core.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.context_efficiency import PrefixCache, prefix_cache  # noqa: E402
from ouroboros.config import load_config  # noqa: E402
from ouroboros.demo import (  # noqa: E402
    RecordingAgent,
    expected_results,
    make_workspace,
    write_demo_project,
)
from ouroboros.loop.runner import run_agent  # noqa: E402
from ouroboros.protocols import RunHooks  # noqa: E402
from ouroboros.store.log import list_runs, read_events  # noqa: E402
from ouroboros.store.summary import RunSummary  # noqa: E402
from ouroboros.testing import Reply  # noqa: E402
from ouroboros.testing.wire import render_stream  # noqa: E402
from tests.real.llama import (  # noqa: E402
    NO_SERVER,
    TOOLS_TEMPLATE,
    LlamaServer,
    cache_dir,
    fetch_model,
    find_binary,
    runnable,
)

CHAT = "/v1/chat/completions"
CHARS_PER_TOKEN_GUESS = 4  # only to size the data files; the figures are the server's


@dataclass
class Exchange:
    """One chat request the harness sent, and what the server said of its prompt."""

    body: dict[str, Any]
    timings: dict[str, Any]
    usage: dict[str, Any]


@dataclass
class Proxy:
    """Loopback HTTP in front of llama-server: chat requests are read by the server and
    answered by `agent`; anything else is the server's own answer."""

    upstream: str
    agent: RecordingAgent
    exchanges: list[Exchange] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.client = httpx.Client(base_url=self.upstream, timeout=600)
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                self.relay(proxy.client.get(self.path))

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                body = json.loads(raw or b"{}")
                if self.path == CHAT and body.get("stream"):
                    status, data, kind = proxy.chat(body)
                    self.send(status, data, kind)
                else:
                    self.relay(
                        proxy.client.post(
                            self.path, content=raw, headers={"content-type": "application/json"}
                        )
                    )

            def relay(self, response: httpx.Response) -> None:
                self.send(
                    response.status_code,
                    response.content,
                    response.headers.get("content-type", "application/json"),
                )

            def send(self, status: int, data: bytes, kind: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def chat(self, body: dict[str, Any]) -> tuple[int, bytes, str]:
        """The server reads the prompt (one token of reply); the agent answers it."""
        asked = {
            key: value for key, value in body.items() if key not in ("stream", "stream_options")
        }
        response = self.client.post(CHAT, json={**asked, "max_tokens": 1})
        if response.status_code != 200:
            self.errors.append(f"{response.status_code}: {response.text[:200]}")
            return response.status_code, response.content, "application/json"
        answer = response.json()
        exchange = Exchange(body, answer.get("timings") or {}, answer.get("usage") or {})
        self.exchanges.append(exchange)
        reply: Reply = self.agent(body.get("messages") or [])
        frames = render_stream(
            reply,
            model=str(answer.get("model", "")),
            usage=exchange.usage,
            timings=exchange.timings,
            request_number=len(self.exchanges),
        )
        return 200, b"".join(frames), "text/event-stream"

    def close(self) -> None:
        self.server.shutdown()
        self.client.close()


@dataclass
class Outcome:
    requests: int
    files_done: int
    parts: int
    restarts: int
    masks: int
    prompt_n: int  # the server's sums
    cache_n: int
    prompt_chars: int  # the requests' characters, as the estimate counts them
    estimate: PrefixCache
    logged_cached: int  # what the harness logged (token_usage)
    logged_processed: int
    summary_hit: float | None
    seconds: float
    errors: list[str]

    @property
    def server_hit(self) -> float:
        whole = self.prompt_n + self.cache_n
        return self.cache_n / whole if whole else 0.0

    @property
    def chars_per_token(self) -> float:
        whole = self.prompt_n + self.cache_n
        return self.prompt_chars / whole if whole else float("nan")


def run(args: argparse.Namespace, binary: Path, model: Path, root: Path) -> Outcome:
    agent = RecordingAgent(args.parts)
    log = root / "llama-server.log"
    with LlamaServer(binary, model, TOOLS_TEMPLATE, ctx=args.window, log=log) as llama:
        proxy = Proxy(llama.base_url, agent)
        try:
            project = root / "project"
            project.mkdir()
            write_demo_project(project, proxy.url, 0)
            keys = make_workspace(
                project / "workspace",
                args.parts,
                chars_per_part=args.tokens_per_file * CHARS_PER_TOKEN_GUESS,
            )
            flags = {
                "model.context_limit": args.window,
                "model.max_output_tokens": 256,
                "agent.max_turns": 20 * args.parts + 50,
                "model.ensure_window": False,
            }
            loaded = load_config(project / "ouroboros.toml", flags, env={}, user_file=None)
            started = time.perf_counter()
            asyncio.run(run_agent(loaded, RunHooks()))
            seconds = time.perf_counter() - started
        finally:
            proxy.close()
    state = project / ".ouroboros"
    events = read_events(state / "runs" / list_runs(state)[-1] / "events.jsonl").events
    summary = RunSummary()
    for event in events:
        summary.add_record(event)
    usages = [e for e in events if e["type"] == "token_usage"]
    results = project / "workspace/results.txt"
    written = set(results.read_text().splitlines()) if results.is_file() else set()
    exchanges = proxy.exchanges
    requests = [x.body for x in exchanges]
    outcome = Outcome(
        requests=len(exchanges),
        files_done=len(set(expected_results(keys).splitlines()) & written),
        parts=args.parts,
        restarts=sum(e["type"] == "session_restart" for e in events),
        masks=sum(e["type"] == "context_mask" for e in events),
        prompt_n=sum(int(x.timings.get("prompt_n", 0)) for x in exchanges),
        cache_n=sum(int(x.timings.get("cache_n", 0)) for x in exchanges),
        prompt_chars=sum(
            len(json.dumps([r.get("tools"), r.get("messages")], sort_keys=True)) for r in requests
        ),
        estimate=prefix_cache(requests),
        logged_cached=sum(u.get("cached_tokens") or 0 for u in usages),
        logged_processed=sum(u.get("processed_tokens") or 0 for u in usages),
        summary_hit=summary.cache_hit_pct,
        seconds=seconds,
        errors=proxy.errors,
    )
    if args.keep:
        shutil.rmtree(args.keep, ignore_errors=True)
        shutil.copytree(project, args.keep)
        shutil.copy(log, args.keep / "llama-server.log")
    return outcome


def report(o: Outcome, args: argparse.Namespace) -> None:
    cpt = o.chars_per_token
    print(
        f"demo task, {o.parts} parts of ~{args.tokens_per_file} tokens, {args.window}-token "
        f"window, llama-server + SmolLM2-135M (one slot), replies by the demo agent\n"
    )
    print(
        f"files done {o.files_done}/{o.parts}, {o.requests} requests, {o.restarts} restarts, "
        f"{o.masks} masking rounds, {o.seconds:.0f} s\n"
    )
    print(f"{'':44}{'processed':>12}{'cached':>10}{'hit':>7}")
    print(
        f"{'the server (sum of timings.prompt_n/cache_n)':44}{o.prompt_n:>12,}"
        f"{o.cache_n:>10,}{o.server_hit:>7.2f}"
    )
    again = o.estimate.again / cpt
    print(
        f"{'the estimate from the requests (chars/' + format(cpt, '.2f') + ')':44}"
        f"{again:>12,.0f}{o.prompt_chars / cpt - again:>10,.0f}{o.estimate.hit:>7.2f}"
    )
    print(f"{'appended-only lower bound (estimate)':44}{o.estimate.bound / cpt:>12,.0f}")
    logged = o.logged_processed + o.logged_cached
    print(
        f"{'the harness logged (token_usage)':44}{o.logged_processed:>12,}"
        f"{o.logged_cached:>10,}{o.logged_cached / logged if logged else 0:>7.2f}"
    )
    print(f"\nstats / status --json cache hit: {o.summary_hit}%")
    print(
        f"estimate in characters: again {o.estimate.again:,}, bound {o.estimate.bound:,}, "
        f"all prompts {o.prompt_chars:,}"
    )
    if o.errors:
        print(f"\nthe server refused {len(o.errors)} request(s); first: {o.errors[0]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", type=int, default=12)
    parser.add_argument("--tokens-per-file", type=int, default=200)
    parser.add_argument("--window", type=int, default=4096)
    parser.add_argument("--keep", type=Path, default=None, help="copy the project here after")
    args = parser.parse_args()
    found = find_binary(os.environ)
    if found is None:
        print(NO_SERVER)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        binary = runnable(found, root)
        model = fetch_model(cache_dir())
        report(run(args, binary, model, root), args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
