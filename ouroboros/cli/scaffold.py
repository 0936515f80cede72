"""A new project directory, as `ouroboros init` makes it, or what a project is missing, as
`ouroboros init --missing` adds it.

    created = create_project(Path("my-agent"))
    # my-agent/ouroboros.toml, my-agent/SYSTEM_PROMPT.md, my-agent/workspace/
    added = complete_project(Path("my-agent/ouroboros.toml"))   # only what is not there
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from ouroboros.config import CONFIG_FILENAME, render_template
from ouroboros.config.schema import FIELDS
from ouroboros.errors import UsageError

# where the config's defaults look for them, so a fresh project needs no setting
PROMPT_FILENAME: str = FIELDS["agent.system_prompt"].default
WORKSPACE_DIRNAME: str = FIELDS["agent.workspace"].default


def default_system_prompt() -> str:
    """The system prompt shipped with the package (ouroboros/templates/SYSTEM_PROMPT.md)."""
    template = files("ouroboros").joinpath("templates", "SYSTEM_PROMPT.md")
    return template.read_text(encoding="utf-8")


def create_project(directory: Path) -> list[Path]:
    """Write ouroboros.toml (every key commented out with its default), the default
    SYSTEM_PROMPT.md and an empty workspace/ into `directory`, creating it if needed. Refuses,
    changing nothing, when either file is already there. Returns what it created."""
    config, prompt, workspace = (
        directory / CONFIG_FILENAME,
        directory / PROMPT_FILENAME,
        directory / WORKSPACE_DIRNAME,
    )
    if directory.exists() and not directory.is_dir():
        raise UsageError(f"{directory} exists and is not a directory")
    for path in (config, prompt):
        if path.exists():
            raise UsageError(
                f"{path} already exists; not overwriting it (nothing was changed); "
                f"to add only what the project lacks: `{complete_command(directory)}`"
            )
    if workspace.exists() and not workspace.is_dir():
        raise UsageError(f"{workspace} exists and is not a directory (nothing was changed)")
    contents = {config: render_template(), prompt: default_system_prompt()}
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for path, text in contents.items():
            path.write_text(text, encoding="utf-8")
        created = list(contents)
        if not workspace.is_dir():
            workspace.mkdir()
            created.append(workspace)
    except OSError as error:
        raise UsageError(f"cannot create the project in {directory}: {error.strerror}") from None
    return created


def complete_command(directory: Path) -> str:
    """The `init --missing` that completes the project in `directory`, as typed from here."""
    if directory.resolve() == Path.cwd().resolve():
        return "ouroboros init --missing"
    return f"ouroboros init {directory} --missing"


def complete_project(config: Path) -> list[Path]:
    """Add what a project is missing and nothing else: its config file (every key commented
    out), then the system prompt file and the workspace that config names (as `run` reads it,
    environment included). Returns what it created; refuses, creating nothing more, when a
    path is there but of the wrong kind."""
    from ouroboros.config import load_config

    created: list[Path] = []
    try:
        if not config.exists():
            config.parent.mkdir(parents=True, exist_ok=True)
            config.write_text(render_template(), encoding="utf-8")
            created.append(config)
        loaded = load_config(config, {})
        prompt, workspace = loaded.system_prompt_path, loaded.workspace
        if not prompt.exists():
            prompt.parent.mkdir(parents=True, exist_ok=True)
            prompt.write_text(default_system_prompt(), encoding="utf-8")
            created.append(prompt)
        if not workspace.exists():
            workspace.mkdir(parents=True)
            created.append(workspace)
    except OSError as error:
        raise UsageError(f"cannot create {error.filename}: {error.strerror}") from None
    loaded.check_files()  # one that was there but is of the wrong kind
    return created
