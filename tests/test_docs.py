"""The README and the manual (docs/, an MkDocs site that CI builds with `mkdocs build --strict`):
the README stays a short front page whose quick start is true, every page is in the site's
navigation, every link lands, every source file named exists, and the failure-family table
says what the code does."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ouroboros.server.errors import classify

ROOT = Path(__file__).parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
MAX_README_LINES = 300
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_SOURCE = re.compile(r"`((?:[\w.]+/)*[\w]+\.py)`")
_NAV_PAGE = re.compile(r"^\s*-\s*[^:]+:\s*(\S+\.md)\s*$", re.M)


def _pages() -> list[Path]:
    return sorted(DOCS.glob("*.md"))


def test_the_readme_is_a_front_page_with_the_quick_start_and_the_way_to_the_manual():
    text = README.read_text(encoding="utf-8")

    assert len(text.splitlines()) <= MAX_README_LINES
    assert "pip install . && ouroboros demo && ouroboros run" in text
    assert "pip install '.[test]' && python -m pytest" in text
    for page in _pages():
        assert f"(docs/{page.name})" in text, f"the README does not point at docs/{page.name}"


def test_every_page_is_in_the_sites_navigation_and_every_nav_entry_is_a_page():
    nav = set(_NAV_PAGE.findall((ROOT / "mkdocs.yml").read_text(encoding="utf-8")))

    assert nav == {page.name for page in _pages()}


def test_ci_builds_the_manual_strictly():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")

    assert "pip install --quiet -r docs/requirements.txt" in ci
    assert "mkdocs build --strict" in ci
    assert re.search(r"^mkdocs==\d", (DOCS / "requirements.txt").read_text(), re.M)


def _anchors(page: Path) -> set[str]:
    heads = re.findall(r"^#+ (.+)$", page.read_text(encoding="utf-8"), re.M)
    return {re.sub(r"[^\w\- ]", "", h.lower()).strip().replace(" ", "-") for h in heads}


@pytest.mark.parametrize("source", [README, *_pages()], ids=lambda p: p.name)
def test_every_relative_link_lands_on_a_file_and_heading_that_exist(source: Path):
    for target in _LINK.findall(source.read_text(encoding="utf-8")):
        if target.startswith(("http://", "https://")):
            continue
        path, _, anchor = target.partition("#")
        landed = (source.parent / path) if path else source
        assert landed.exists(), f"{source.name} links to {target}, which does not exist"
        if anchor:
            assert anchor in _anchors(landed), f"{source.name} links to a missing {target}"


def _exists(name: str) -> bool:
    if "/" in name:
        return any((base / name).exists() for base in (ROOT, ROOT / "ouroboros"))
    return any(any((ROOT / top).rglob(name)) for top in ("ouroboros", "tests", "benchmarks"))


@pytest.mark.parametrize("source", [README, *_pages()], ids=lambda p: p.name)
def test_every_source_file_the_docs_name_exists(source: Path):
    stale = [
        name for name in _SOURCE.findall(source.read_text(encoding="utf-8")) if not _exists(name)
    ]

    assert not stale, f"{source.name} names files that are not in the repository: {stale}"


def _retry_table() -> list[tuple[str, str]]:
    text = (DOCS / "server.md").read_text(encoding="utf-8")
    return re.findall(r"^\| ([^|]*\d{3}[^|]*) \| (yes|no)\b[^|]*\|$", text, re.M)


def test_the_manuals_failure_families_say_what_the_code_does():
    rows = _retry_table()
    statuses = [
        (int(code), retried == "yes")
        for what, retried in rows
        for code in re.findall(r"\b([45]\d\d)\b", what)
    ]

    assert {408, 429, 500, 501, 503, 505, 401, 403} <= {code for code, _ in statuses}
    for code, retried in statuses:
        assert (classify(code, "some failure") == "transient") == retried, code
