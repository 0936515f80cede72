import asyncio
import os
import random
from pathlib import Path
from typing import Any

import pytest

from ouroboros.protocols import ToolResult
from ouroboros.tools import FileRead, FileWrite, ListDir
from ouroboros.tools.excerpt import Excerpt, LineScanner, excerpt, excerpt_note
from ouroboros.tools.safety import PathEscape
from ouroboros.tools.workspace import given_parts

Events = list[dict[str, Any]]


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    directory = tmp_path / "outside"
    directory.mkdir()
    (directory / "secret.txt").write_text("TOP SECRET\n")
    return directory


@pytest.fixture
def events() -> Events:
    return []


def run(tool: Any, **arguments: Any) -> ToolResult:
    return asyncio.run(tool.run(arguments))


def reader(workspace: Path, events: Events, max_read_bytes: int = 10_000) -> FileRead:
    return FileRead(workspace, max_read_bytes=max_read_bytes, on_security=events.append)


def writer(workspace: Path, events: Events) -> FileWrite:
    return FileWrite(workspace, on_security=events.append)


def lister(workspace: Path, events: Events, max_entries: int = 500) -> ListDir:
    return ListDir(workspace, on_security=events.append, max_entries=max_entries)


def numbered(count: int) -> str:
    return "".join(f"line {n}\n" for n in range(1, count + 1))


# paths


def test_given_parts_are_relative_to_the_workspace(workspace: Path) -> None:
    assert given_parts(workspace, "notes/a.md") == ["notes", "a.md"]
    assert given_parts(workspace, str(workspace / "b.md")) == ["b.md"]
    assert given_parts(workspace, str(workspace)) == []


@pytest.mark.parametrize("path", ["/etc/passwd", "/"])
def test_given_parts_refuse_absolute_paths_outside(workspace: Path, path: str) -> None:
    with pytest.raises(PathEscape, match="outside the workspace"):
        given_parts(workspace, path)


def test_dotdot_inside_the_workspace_works_and_paths_show_resolved(
    workspace: Path, events: Events
) -> None:
    (workspace / "real").mkdir()
    (workspace / "alias").symlink_to("real", target_is_directory=True)
    written = run(writer(workspace, events), path="x/../alias/c.md", content="c")
    assert written.content == "wrote 1 bytes (1 lines) to real/c.md"
    assert run(reader(workspace, events), path="real/./../alias/c.md").content == "c"
    assert not (workspace / "x").exists()
    assert events == []


def test_a_loop_of_links_is_an_error(workspace: Path, events: Events) -> None:
    (workspace / "a").symlink_to("b")
    (workspace / "b").symlink_to("a")
    result = run(reader(workspace, events), path="a")
    assert result.content.startswith("error: path 'a' cannot be resolved: too many levels")


# every file tool refuses every kind of escape and reports it


def _escape_paths(workspace: Path, outside: Path) -> dict[str, str]:
    (workspace / "file_link").symlink_to(outside / "secret.txt")
    (workspace / "dir_link").symlink_to(outside, target_is_directory=True)
    return {
        "dotdot": "../outside/secret.txt",
        "absolute": str(outside / "secret.txt"),
        "file_symlink": "file_link",
        "dir_symlink": "dir_link/secret.txt",
    }


ESCAPES = ["dotdot", "absolute", "file_symlink", "dir_symlink"]


@pytest.mark.parametrize("escape", ESCAPES)
def test_file_read_refuses_paths_outside_the_workspace(
    workspace: Path, outside: Path, events: Events, escape: str
) -> None:
    path = _escape_paths(workspace, outside)[escape]
    result = run(reader(workspace, events), path=path)
    assert not result.ok
    assert result.content.startswith(f"error: path {path!r} is outside the workspace")
    assert "TOP SECRET" not in result.content
    assert result.meta == {"path": path}
    assert events == [{"kind": "path_escape", "tool": "file_read", "path": path}]


@pytest.mark.parametrize("escape", ESCAPES)
def test_file_write_refuses_paths_outside_the_workspace(
    workspace: Path, outside: Path, events: Events, escape: str
) -> None:
    path = _escape_paths(workspace, outside)[escape]
    result = run(writer(workspace, events), path=path, content="pwned")
    assert not result.ok
    assert "outside the workspace" in result.content
    assert (outside / "secret.txt").read_text() == "TOP SECRET\n"
    assert events == [{"kind": "path_escape", "tool": "file_write", "path": path}]


@pytest.mark.parametrize("path", ["..", "../outside", "dir_link", "/"])
def test_list_dir_refuses_paths_outside_the_workspace(
    workspace: Path, outside: Path, events: Events, path: str
) -> None:
    _escape_paths(workspace, outside)
    result = run(lister(workspace, events), path=path)
    assert not result.ok
    assert "outside the workspace" in result.content
    assert "secret.txt" not in result.content
    assert events == [{"kind": "path_escape", "tool": "list_dir", "path": path}]


def test_writing_through_a_new_file_under_a_symlinked_dir_outside_is_refused(
    workspace: Path, outside: Path, events: Events
) -> None:
    (workspace / "dir_link").symlink_to(outside, target_is_directory=True)
    result = run(writer(workspace, events), path="dir_link/new/x.txt", content="x")
    assert not result.ok
    assert not (outside / "new").exists()


def test_symlinks_inside_the_workspace_work_for_every_tool(workspace: Path, events: Events) -> None:
    (workspace / "real").mkdir()
    (workspace / "real" / "a.txt").write_text("alpha\n")
    (workspace / "dir_alias").symlink_to(workspace / "real", target_is_directory=True)
    (workspace / "file_alias").symlink_to(workspace / "real" / "a.txt")

    assert run(reader(workspace, events), path="file_alias").content == "alpha\n"
    listed = run(lister(workspace, events), path="dir_alias")
    assert listed.content == "a.txt (6 bytes)"
    written = run(writer(workspace, events), path="dir_alias/b.txt", content="beta")
    assert written.ok
    assert (workspace / "real" / "b.txt").read_text() == "beta"
    assert events == []


def test_absolute_path_inside_the_workspace_is_allowed(workspace: Path, events: Events) -> None:
    (workspace / "a.txt").write_text("alpha\n")
    result = run(reader(workspace, events), path=str(workspace / "a.txt"))
    assert result.ok
    assert result.content == "alpha\n"
    assert result.meta["path"] == "a.txt"


# file_read


def test_file_read_returns_the_whole_file_with_meta(workspace: Path, events: Events) -> None:
    (workspace / "notes").mkdir()
    (workspace / "notes" / "a.md").write_text("KEY: 9f2c\nsecond\n")
    result = run(reader(workspace, events), path="notes/a.md")
    assert result.ok
    assert result.content == "KEY: 9f2c\nsecond\n"
    assert result.meta == {"path": "notes/a.md", "lines": 2, "bytes": 17, "total_lines": 2}


def test_file_read_offset_and_limit_select_lines_and_say_how_to_continue(
    workspace: Path, events: Events
) -> None:
    (workspace / "big.txt").write_text(numbered(1000))
    tool = reader(workspace, events, max_read_bytes=100_000)
    result = run(tool, path="big.txt", offset=201, limit=3)
    assert result.content == (
        "line 201\nline 202\nline 203\n"
        "[lines 201-203 of 1000 shown; call file_read with offset=204 to read more]"
    )
    assert result.meta["lines"] == 3
    assert result.meta["total_lines"] == 1000


def test_file_read_of_the_last_lines_has_no_read_more_hint(workspace: Path, events: Events) -> None:
    (workspace / "a.txt").write_text(numbered(5))
    result = run(reader(workspace, events), path="a.txt", offset=4)
    assert result.content == "line 4\nline 5\n[lines 4-5 of 5 shown]"


def test_file_read_caps_bytes_and_the_hinted_offset_continues_where_it_stopped(
    workspace: Path, events: Events
) -> None:
    (workspace / "big.txt").write_text(numbered(1000))
    tool = reader(workspace, events, max_read_bytes=100)
    first = run(tool, path="big.txt")
    assert first.content.startswith("line 1\nline 2\n")
    assert first.content.endswith(
        "line 13\n[lines 1-13 of 1000 shown; output capped at 100 bytes; "
        "call file_read with offset=14 to read more]"
    )
    assert first.meta["bytes"] == 95
    second = run(tool, path="big.txt", offset=14)
    assert second.content.startswith("line 14\n")


def test_file_read_cuts_a_single_line_longer_than_the_cap(workspace: Path, events: Events) -> None:
    (workspace / "wide.txt").write_text("x" * 500 + "\nnext\n")
    result = run(reader(workspace, events, max_read_bytes=50), path="wide.txt")
    assert result.content.startswith("x" * 50 + "\n[line 1 is longer than 50 bytes")
    assert "offset=2" in result.content


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"path": "missing.txt"}, "error: file not found: missing.txt"),
        ({"path": "sub"}, "error: sub is a directory; use list_dir"),
        ({"path": "blob.bin"}, "error: blob.bin looks like a binary file"),
        ({"path": "a.txt", "offset": 9}, "error: offset 9 is past the end of a.txt, which has 3"),
    ],
)
def test_file_read_errors_tell_the_model_what_to_do(
    workspace: Path, events: Events, arguments: dict[str, Any], message: str
) -> None:
    (workspace / "sub").mkdir()
    (workspace / "blob.bin").write_bytes(b"\x7fELF\x00\x01\x02")
    (workspace / "a.txt").write_text(numbered(3))
    result = run(reader(workspace, events), **arguments)
    assert not result.ok
    assert result.content.startswith(message)
    assert result.meta["path"] == arguments["path"]
    assert events == []


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"path": "a.txt", "offset": 0}, "argument 'offset' must be at least 1, got 0"),
        ({"path": "a.txt", "limit": 0}, "argument 'limit' must be at least 1, got 0"),
        ({"path": "a.txt", "offset": "2"}, "argument 'offset' must be integer, got string"),
        ({"path": 7}, "argument 'path' must be string, got integer"),
        (
            {"path": "a.txt", "lines": 5},
            "unknown argument 'lines'; the arguments are: path, offset, limit",
        ),
    ],
)
def test_file_read_refuses_arguments_outside_its_schema(
    workspace: Path, events: Events, arguments: dict[str, Any], message: str
) -> None:
    (workspace / "a.txt").write_text(numbered(3))
    tool = reader(workspace, events)
    result = run(tool, **arguments)
    assert (result.ok, result.content) == (False, f"error: file_read: {message}")
    parameters = tool.schema()["function"]["parameters"]
    assert parameters["properties"]["offset"]["minimum"] == 1
    assert parameters["properties"]["limit"] == {
        "type": "integer",
        "minimum": 1,
        "description": "Number of lines to read. Default: to the end.",
    }


def test_file_read_replaces_undecodable_bytes(workspace: Path, events: Events) -> None:
    (workspace / "latin1.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    result = run(reader(workspace, events), path="latin1.txt")
    assert result.ok
    assert result.content == "caf\ufffd\n"


def test_file_read_of_an_empty_file_says_so(workspace: Path, events: Events) -> None:
    (workspace / "empty.txt").write_text("")
    result = run(reader(workspace, events), path="empty.txt")
    assert result.ok
    assert result.content == "[empty.txt is empty]"
    assert result.meta["lines"] == 0


# file_write


def test_file_write_creates_parent_directories(workspace: Path, events: Events) -> None:
    result = run(writer(workspace, events), path="notes/deep/a.md", content="one\ntwo\n")
    assert result.ok
    assert result.content == "wrote 8 bytes (2 lines) to notes/deep/a.md"
    assert result.meta == {"path": "notes/deep/a.md", "bytes": 8, "lines": 2}
    assert (workspace / "notes" / "deep" / "a.md").read_text() == "one\ntwo\n"


def test_file_write_replaces_content_keeps_mode_and_leaves_no_temporary_files(
    workspace: Path, events: Events
) -> None:
    script = workspace / "run.sh"
    script.write_text("old")
    script.chmod(0o755)
    result = run(writer(workspace, events), path="run.sh", content="echo h\u00e9")
    assert result.meta["bytes"] == len("echo h\u00e9".encode())
    assert script.read_text() == "echo h\u00e9"
    assert script.stat().st_mode & 0o777 == 0o755
    assert sorted(os.listdir(workspace)) == ["run.sh"]


def test_file_write_to_a_directory_or_under_a_file_is_an_error(
    workspace: Path, events: Events
) -> None:
    (workspace / "sub").mkdir()
    (workspace / "plain.txt").write_text("keep")
    tool = writer(workspace, events)

    into_dir = run(tool, path="sub", content="x")
    assert not into_dir.ok
    assert into_dir.content == "error: sub is a directory; give the path of a file to write"

    under_file = run(tool, path="plain.txt/x.md", content="x")
    assert not under_file.ok
    assert "plain.txt is a file, not a directory" in under_file.content
    assert (workspace / "plain.txt").read_text() == "keep"


# list_dir


def test_list_dir_sorts_entries_marks_directories_and_shows_sizes(
    workspace: Path, events: Events
) -> None:
    (workspace / "b.txt").write_text("12345")
    (workspace / "a").mkdir()
    (workspace / "c.md").write_text("")
    result = run(lister(workspace, events))
    assert result.ok
    assert result.content == "a/\nb.txt (5 bytes)\nc.md (0 bytes)"
    assert result.meta == {"path": ".", "entries": 3}


def test_list_dir_caps_the_number_of_entries(workspace: Path, events: Events) -> None:
    for n in range(5):
        (workspace / f"f{n}").write_text("")
    result = run(lister(workspace, events, max_entries=3))
    assert result.content.splitlines()[:3] == ["f0 (0 bytes)", "f1 (0 bytes)", "f2 (0 bytes)"]
    assert "[first 3 of 5 entries shown" in result.content
    assert "f3" not in result.content
    assert result.meta["entries"] == 5


def test_list_dir_errors(workspace: Path, events: Events) -> None:
    (workspace / "a.txt").write_text("x")
    tool = lister(workspace, events)
    missing = run(tool, path="nope")
    assert not missing.ok
    assert missing.content == "error: directory not found: nope"
    a_file = run(tool, path="a.txt")
    assert not a_file.ok
    assert "use file_read" in a_file.content


# the excerpt, fed in chunks


def reference_excerpt(data: bytes, offset: int, limit: int | None, max_bytes: int) -> Excerpt:
    """What file_read showed when it read whole lines at a time."""
    lines = data.splitlines(keepends=True)
    end = None if limit is None else offset + limit - 1
    shown: list[bytes] = []
    size, capped, cut = 0, False, False
    for number, line in enumerate(lines, start=1):
        if number < offset or (end is not None and number > end) or capped:
            continue
        if size + len(line) > max_bytes:
            capped = True
            if not shown:
                shown, size, cut = [line[:max_bytes]], max_bytes, True
            continue
        shown.append(line)
        size += len(line)
    text = b"".join(shown).decode("utf-8", errors="replace")
    return Excerpt(text, offset, offset + len(shown) - 1, len(lines), size, capped, cut)


def test_the_excerpt_is_the_same_whatever_the_chunks() -> None:
    rng = random.Random(7)
    for _ in range(400):
        data = b"".join(
            rng.choice([b"\n", b"ab\n", b"x" * rng.randint(1, 40) + b"\n", b"tail"])
            for _ in range(rng.randint(0, 30))
        )
        offset, limit = rng.randint(1, 8), rng.choice([None, 1, 3, 10])
        max_bytes = rng.randint(1, 120)
        cuts = sorted(rng.sample(range(len(data) + 1), min(len(data) + 1, rng.randint(0, 6))))
        chunks = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)])]
        assert excerpt(chunks, offset, limit, max_bytes) == reference_excerpt(
            data, offset, limit, max_bytes
        ), (data, offset, limit, max_bytes)


def test_a_read_that_stops_counting_says_at_least() -> None:
    scanner = LineScanner(1, 2, 100)
    scanner.feed(b"one\ntwo\nthree\nfour")
    shown = scanner.finish(counted=False)
    assert excerpt_note(shown, 100) == (
        "[lines 1-2 of at least 4 shown; call file_read with offset=3 to read more]"
    )
