"""Terminal control characters from the model or a tool, shown instead of obeyed.

A reply or a tool's output may hold escape sequences (`ESC ] 0 ; title BEL` retitles the
window, `ESC ] 52 ; c ; ...` writes the clipboard, CSI sequences move the cursor or clear the
screen). Every view that prints such text (headless lines, `logs`, `watch` and the dashboard)
passes it through here first, so each control character but newline and tab is printed in
caret notation (`ESC` as `^[`, `BEL` as `^G`, `DEL` as `^?`) or, for the C1 controls, as a
`\\x9b`-style escape. The event log keeps the raw text.

    neutralise("\\x1b]0;pwned\\x07ok")  # -> "^[]0;pwned^Gok"
"""

from __future__ import annotations

from typing import TypeVar

KEPT = "\n\t"

_VISIBLE: dict[int, str] = {
    **{code: f"^{chr(code + 64)}" for code in range(0x20) if chr(code) not in KEPT},
    0x7F: "^?",
    **{code: f"\\x{code:02x}" for code in range(0x80, 0xA0)},
}

T = TypeVar("T")


def neutralise(text: str) -> str:
    """`text` with every control character but newline and tab made visible; a CR before
    a newline is dropped (a CRLF line end is a line end)."""
    return text.replace("\r\n", "\n").translate(_VISIBLE)


def neutralise_all(value: T) -> T:
    """`value` (an event, or anything JSON) with every string in it neutralised, keys
    included; the original is left alone."""
    if isinstance(value, str):
        return neutralise(value)  # type: ignore[return-value]
    if isinstance(value, dict):
        return {
            neutralise_all(key): neutralise_all(item)  # type: ignore[return-value]
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [neutralise_all(item) for item in value]  # type: ignore[return-value]
    return value
