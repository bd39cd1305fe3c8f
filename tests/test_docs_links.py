"""Issue 40 item 11: every relative link between the docs pages (README.md and docs/*.md) resolves: the file
exists, and an anchor names a heading of that page (GitHub's rule: lower case, punctuation dropped, spaces
to hyphens, a repeated heading numbered ``-1``, ``-2``...). Pointers to a table the README no longer has
failed here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^ *```")


def prose(text: str) -> list[str]:
    """The page's lines outside fenced code blocks."""
    lines, inside = [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            inside = not inside
            continue
        if not inside:
            lines.append(line)
    return lines


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in prose(page.read_text(encoding="utf-8")):
        if not re.match(r"#{1,6} ", line):
            continue
        slug = re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def links(page: Path) -> list[str]:
    found = []
    for line in prose(page.read_text(encoding="utf-8")):
        line = re.sub(r"`[^`]*`", "", line)  # code spans are not links
        found.extend(t for t in _LINK.findall(line) if not re.match(r"[a-z]+:", t))
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_relative_link_and_anchor_resolves(page):
    bad = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            bad.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            bad.append(f"{target}: no heading #{anchor} in {file.relative_to(REPO)}")
    assert not bad, f"{page.relative_to(REPO)}: " + "; ".join(bad)


def test_the_pages_link_to_each_other():
    assert sum(len(links(p)) for p in PAGES) >= 50


def test_no_page_points_to_a_table_the_readme_no_longer_has():
    for page in PAGES:
        assert not re.search(r"table in the \[?README", page.read_text(encoding="utf-8")), page.name
