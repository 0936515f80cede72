"""A table of malformed configs, each through the real `run`, `resume` and `status`: never a
traceback, always exit 2 and one line naming the key (or file) and what is allowed.

The commands run in-process (typer's CliRunner keeps any exception that escapes the command,
so an uncaught one is a failure here as it would be a traceback in a shell); a few of the
cases that once gave tracebacks also run as real processes, to show both agree.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, get_origin

import pytest
import tomli_w
from annotated_types import Ge, Gt, Le, Lt
from typer.testing import CliRunner

from ouroboros.cli import app
from ouroboros.config import KEYS
from ouroboros.config.schema import FIELDS
from ouroboros.config.urls import is_server_url
from tests.crash_helpers import WAIT_SECS
from tests.helpers import clean_env, ouroboros_forked

DEAD_URL = "http://127.0.0.1:9"  # nothing listens: a config that passes would fail with exit 1
ALLOWED = re.compile(
    r"must|did you mean|takes|tables are|not found|not a |not valid|not UTF-8|"
    r"cannot|outside|allowed|is a directory|unknown|no such"
)
Commands = tuple[str, ...]
ALL: Commands = ("run", "resume", "status")
# the prompt and workspace matter only to a run (a resume with no run to resume says so)
STARTS: Commands = ("run",)


@dataclass
class Case:
    id: str
    says: str  # the key or file the one line must name
    config: dict[str, Any] | bytes | None = None  # tables to merge, or the file's raw bytes
    env: dict[str, str] = field(default_factory=dict)
    setup: Callable[[Path], None] | None = None
    args: tuple[str, ...] = ()  # extra flags (run only)
    commands: Commands = ALL


def base_config() -> dict[str, Any]:
    return {"model": {"base_url": DEAD_URL, "name": "scripted", "max_retry_secs": 0}}


def wrong_type(key: str) -> Any:
    annotation = FIELDS[key].annotation
    if annotation is str:
        return 5
    if annotation is bool:
        return "yes"
    if annotation in (int, float):
        return "ten"
    if get_origin(annotation) is list:
        return "not a list"
    if get_origin(annotation) is Literal:
        return "middle"
    raise AssertionError(f"no wrong value for {key}: {annotation}")


def out_of_range(key: str) -> list[Any]:
    """A value just past each bound the field declares."""
    info = FIELDS[key]
    step = 1 if info.annotation is int else 0.5
    values = []
    for bound in info.metadata:
        if isinstance(bound, Ge):
            values.append(bound.ge - step)
        elif isinstance(bound, Gt):
            values.append(bound.gt)
        elif isinstance(bound, Le):
            values.append(bound.le + step)
        elif isinstance(bound, Lt):
            values.append(bound.lt)
    return values


def setting(key: str, value: Any) -> dict[str, Any]:
    table, name = key.split(".")
    return {table: {name: value}}


def write(path: str, data: bytes) -> Callable[[Path], None]:
    def make(root: Path) -> None:
        target = root / path
        if target.is_dir():
            target.rmdir()
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)

    return make


def make_dir(path: str) -> Callable[[Path], None]:
    def make(root: Path) -> None:
        target = root / path
        target.unlink(missing_ok=True)
        target.mkdir(parents=True, exist_ok=True)

    return make


def remove(path: str) -> Callable[[Path], None]:
    def make(root: Path) -> None:
        target = root / path
        target.rmdir() if target.is_dir() else target.unlink()

    return make


def typed_cases() -> list[Case]:
    cases = [Case(f"type-{key}", key, setting(key, wrong_type(key))) for key in KEYS]
    for key in KEYS:
        cases += [
            Case(f"range-{key}={value}", key, setting(key, value)) for value in out_of_range(key)
        ]
    for key in ("model.temperature", "model.request_timeout_secs", "safety.shell_timeout_secs"):
        cases += [
            Case(f"nonfinite-{key}={value}", key, setting(key, value))
            for value in (math.nan, math.inf)
        ]
    return cases


BAD_URLS = [
    "http://127.0.0.1:99999",
    "http://127.0.0.1:abc",
    "http://localhost:99999/v1",
    "http://127.0.0.1:-1",
    "http://127.0.0.1:0",
    "https://[::1",
    "http://[zz]:80",
    "http://:8080",
    "ftp://127.0.0.1:11434",
    "127.0.0.1:11434",
    "",
    "   ",
    "http://",
    "http://exa mple.com",
    "http://127.0.0.1:11434\n/v1",
    "http://h\x00st:80",
]
BAD_OLLAMA_HOSTS = [
    "127.0.0.1:99999",
    "localhost:abc",
    "http://0.0.0.0:99999",
    ":abc",
    "[::1]:99999",
    "ftp://host:1",
    "exa mple:1",
]


def url_cases() -> list[Case]:
    cases = [
        Case(f"base_url={url!r}", "model.base_url", setting("model.base_url", url))
        for url in BAD_URLS
    ]
    cases += [
        Case(f"OLLAMA_HOST={host!r}", "OLLAMA_HOST", env={"OLLAMA_HOST": host})
        for host in BAD_OLLAMA_HOSTS
    ]
    cases += [
        Case(
            f"--base-url {url!r}", "--base-url", args=("--base-url", url), commands=("run",)
        )  # a bare "abc" is read as OLLAMA_HOST is: http://abc:11434
        for url in ("http://127.0.0.1:99999", "abc:99999", "http://[::1")
    ]
    return cases


def env_cases() -> list[Case]:
    bad = {
        "OUROBOROS_MODEL_TEMPERATURE": "hot",
        "OUROBOROS_AGENT_MAX_TURNS": "-1",
        "OUROBOROS_MODEL_NAMEE": "x",
        "OUROBOROS_SAFETY_BLOCKED_PATTERNS": "rm",
        "OUROBOROS_CONTEXT_SOFT_THRESHOLD_PCT": "2",
        "OUROBOROS_MODEL_BASE_URL": "abc:99999",
        "OUROBOROS_LOGGING_STATE_DIR": "",
    }
    return [Case(f"env-{name}", name, env={name: value}) for name, value in bad.items()]


def file_cases() -> list[Case]:
    prompt, toml = "SYSTEM_PROMPT.md", "ouroboros.toml"
    return [
        Case(
            "prompt-latin1",
            prompt,
            setup=write(prompt, "Tu es un agent élevé.".encode("latin-1")),
            commands=STARTS,
        ),
        Case(
            "prompt-binary", prompt, setup=write(prompt, b"\xff\xfe\x00\x81" * 64), commands=STARTS
        ),
        Case("prompt-missing", prompt, setup=remove(prompt), commands=STARTS),
        Case("prompt-is-a-dir", prompt, setup=make_dir(prompt), commands=STARTS),
        Case("prompt-setting-empty", "agent.system_prompt", setting("agent.system_prompt", "")),
        Case("workspace-is-a-file", "workspace", setup=write("workspace", b"x"), commands=STARTS),
        Case("workspace-missing", "workspace", setup=remove("workspace"), commands=STARTS),
        Case(
            "--workspace a file",
            "workspace",
            args=("--workspace", "SYSTEM_PROMPT.md"),
            commands=("run",),
        ),
        Case(
            "state_dir-is-a-file",
            "logging.state_dir",
            setting("logging.state_dir", "sd"),
            setup=write("sd", b"not a directory"),
        ),
        Case(
            "state_dir-under-a-file",
            "logging.state_dir",
            setting("logging.state_dir", "sd/inner"),
            setup=write("sd", b"x"),
        ),
        Case("default-state_dir-is-a-file", "logging.state_dir", setup=write(".ouroboros", b"x")),
        Case("config-not-toml", toml, b"this is not toml\n"),
        Case("config-unclosed-table", toml, b"[model\nname = 'x'\n"),
        Case("config-binary", toml, b"\x00\xff\xfe garbage \x81\x82"),
        Case("config-latin1", toml, "[model]\nname = 'modèle'\n".encode("latin-1")),
        Case("config-json", toml, b'{"model": {"name": "x"}}'),
        Case("config-duplicate-key", toml, b"[model]\nname = 'a'\nname = 'b'\n"),
        Case("config-is-a-dir", toml, setup=make_dir("ouroboros.toml")),
        Case(
            "config-dangling-symlink",
            toml,
            setup=lambda root: (root / toml).unlink() or (root / toml).symlink_to("gone"),
        ),
        Case("unknown-key", "model.nmae", {"model": {"nmae": "x"}}),
        Case("unknown-table", "[modle]", {"modle": {"name": "x"}}),
        Case("key-outside-table", "temperature", b"temperature = 0.5\n"),
        Case("table-not-a-table", "model", b"model = 3\n"),
        Case(
            "threshold-order",
            "soft_threshold_pct",
            {"context": {"soft_threshold_pct": 0.9, "hard_threshold_pct": 0.8}},
        ),
        Case("bad-regex", "safety.blocked_patterns", setting("safety.blocked_patterns", ["(["])),
        Case("api-key-as-env-name", "model.api_key_env", setting("model.api_key_env", "sk-abc123")),
        Case(
            "user-file-not-toml",
            "ouroboros.toml",
            env={"XDG_CONFIG_HOME": "{root}/xdg"},
            setup=write("xdg/ouroboros/ouroboros.toml", b"[[["),
        ),
        Case(
            "user-file-bad-value",
            "model.temperature",
            env={"XDG_CONFIG_HOME": "{root}/xdg"},
            setup=write("xdg/ouroboros/ouroboros.toml", b"[model]\ntemperature = 9\n"),
        ),
    ]


CASES = typed_cases() + url_cases() + env_cases() + file_cases()


def test_the_table_has_at_least_80_configs():
    assert len(CASES) >= 80, len(CASES)
    assert len({case.id for case in CASES}) == len(CASES)


def build(root: Path, case: Case) -> Path:
    config = base_config()
    if isinstance(case.config, dict):
        for table, values in case.config.items():
            config.setdefault(table, {}).update(values)
    root.mkdir(parents=True, exist_ok=True)
    path = root / "ouroboros.toml"
    path.write_bytes(
        case.config if isinstance(case.config, bytes) else tomli_w.dumps(config).encode()
    )
    (root / "SYSTEM_PROMPT.md").write_text("You are a test agent.")
    (root / "workspace").mkdir(exist_ok=True)
    if case.setup is not None:
        case.setup(root)
    return path


def environment(root: Path, case: Case) -> dict[str, str | None]:
    env: dict[str, str | None] = {
        name: None for name in os.environ if name.startswith("OUROBOROS_") or name == "OLLAMA_HOST"
    }
    env["XDG_CONFIG_HOME"] = str(root / "no-user-config")
    env.update({k: v.replace("{root}", str(root)) for k, v in case.env.items()})
    return env


def check(case: Case, command: str, code: int, out: str, err: str) -> list[str]:
    """What is wrong with one command's answer to a bad config (nothing: []). A read-only
    command (`status`) needs only the state dir: it warns and goes on, exit 0, unless the
    state dir itself is what is wrong."""
    problems = []
    if "Traceback" in out + err:
        problems.append("a traceback")
    lines = err.splitlines()
    warned = (
        command == "status" and code == 0 and lines[:1] != [] and lines[0].startswith("warning: ")
    )
    if code != 2 and not warned:
        problems.append(f"exit {code}")
    if len(lines) != 1 or not lines[0].startswith("warning: " if warned else "error: "):
        problems.append(f"{len(lines)} lines on stderr")
    elif case.says.lower() not in lines[0].lower() or not ALLOWED.search(lines[0]):
        problems.append("the line does not name the key and what is allowed")
    return [f"{case.id} / {command}: {', '.join(problems)}: {err[-300:]!r}"] if problems else []


@pytest.mark.parametrize("group", range(4))
def test_no_malformed_config_gives_a_traceback(tmp_path, group):
    """Every case, through run, resume and status, in four groups (one report each)."""
    failures = []
    for index, case in enumerate(CASES[group::4]):
        root = tmp_path / f"c{index}"
        config = build(root, case)
        runner = CliRunner(env=environment(root, case))
        for command in case.commands:
            extra = ("--headless", *case.args) if command != "status" else ()
            result = runner.invoke(
                app, [command, "--config", str(config), *extra], catch_exceptions=True
            )
            code = result.exit_code
            if result.exception is not None and not isinstance(result.exception, SystemExit):
                code, problem = -1, f"Traceback: {type(result.exception).__name__}"
                failures.append(f"{case.id} / {command}: {problem}: {result.exception}")
                continue
            failures += check(case, command, code, result.stdout, result.stderr)
    assert not failures, f"{len(failures)} failures:\n" + "\n".join(failures)


ONCE_TRACEBACKS = [
    "base_url='http://127.0.0.1:abc'",
    "OLLAMA_HOST='127.0.0.1:99999'",
    "prompt-latin1",
    "state_dir-is-a-file",
]


def test_real_processes_agree(tmp_path):
    """The cases that once ended in a traceback, as a user runs them: each in a process of its
    own, through the `ouroboros` entry point (forked from this one, so with its exit code and
    its own stdout and stderr, not CliRunner's)."""
    cases = [case for case in CASES if case.id in ONCE_TRACEBACKS]
    assert len(cases) == len(ONCE_TRACEBACKS)
    running = []
    for index, case in enumerate(cases):
        root = tmp_path / f"p{index}"
        config = build(root, case)
        env = clean_env(**{k: v.replace("{root}", str(root)) for k, v in case.env.items()})
        out, err = tmp_path / f"p{index}.out", tmp_path / f"p{index}.err"
        running.append(
            (
                case,
                out,
                err,
                ouroboros_forked(
                    "run", "--config", str(config), "--headless", out=out, err=err, env=env
                ),
            )
        )
    failures = []
    try:
        for case, out, err, process in running:
            code = process.wait(WAIT_SECS)  # below the per-test timeout: fails saying so
            failures += check(case, "run", code, out.read_text(), err.read_text())
    finally:  # none left running (a copy of this process each) when one hangs
        for *_, process in running:
            process.kill()
            process.wait()
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:11434",
        "https://ollama.example.com",
        "http://[::1]:8080",
        "http://user:pw@gpu:65535/prefix",
    ],
)
def test_a_server_url_a_client_can_reach_is_accepted(url):
    assert is_server_url(url)


@pytest.mark.parametrize("url", [u.strip().removesuffix("/v1") for u in BAD_URLS])
def test_every_bad_url_of_the_table_is_refused(url):
    assert not is_server_url(url)
