"""Writing config files and expecting a config error, for the config tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from ouroboros.config import load_config
from ouroboros.errors import ConfigError


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def config_error(**kwargs) -> str:
    """Load, expect a ConfigError, check it is one line with exit code 2, return the message."""
    kwargs.setdefault("env", {})
    kwargs.setdefault("user_file", None)
    with pytest.raises(ConfigError) as caught:
        load_config(**kwargs)
    assert caught.value.exit_code == 2
    message = str(caught.value)
    assert message == caught.value.message
    assert "\n" not in message
    return message
