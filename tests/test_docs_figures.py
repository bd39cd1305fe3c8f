"""Every measured figure lives in one place, docs/measurements.md, with its date, machine and
conditions; the other pages link to it instead of repeating (and contradicting) it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
MEASUREMENTS = REPO / "docs" / "measurements.md"

# A page that states a measurement in its own words: "took 2 min 44 s", "took 115 s", "15 min 38 s".
MEASURED = re.compile(r"\btook (?:about )?\d|\b\d+ min \d+ s\b")
DATE = re.compile(r"^(?:week of )?\d{4}-\d{2}-\d{2}$")


def _pages() -> list[Path]:
    pages = [REPO / "README.md", REPO / ".ci" / "run"]
    pages += sorted(p for p in (REPO / "docs").glob("*.md") if p != MEASUREMENTS)
    return pages


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_no_measured_figure_outside_measurements(page: Path) -> None:
    hits = [
        f"{page.relative_to(REPO)}:{n}: {line.strip()}"
        for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
        if MEASURED.search(line)
    ]
    assert not hits, "measured figures belong in docs/measurements.md:\n" + "\n".join(hits)


def _tables(text: str) -> list[tuple[list[str], list[list[str]]]]:
    """(header cells, data rows) of each Markdown table."""
    tables, rows = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif rows:
            if len(rows) >= 2:
                tables.append((rows[0], rows[2:]))
            rows = []
    return tables


def test_every_measurement_names_its_date_and_machine() -> None:
    tables = [t for t in _tables(MEASUREMENTS.read_text(encoding="utf-8")) if "date" in t[0]]
    assert len(tables) >= 3
    for header, rows in tables:
        assert {"figure", "date", "machine", "conditions"} <= set(header), header
        date, machine, conditions = (header.index(k) for k in ("date", "machine", "conditions"))
        assert rows, header
        for row in rows:
            assert DATE.match(row[date]), f"no date in {row}"
            assert row[machine], f"no machine in {row}"
            assert row[conditions], f"no conditions in {row}"


def _slug(heading: str) -> str:
    slug = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return slug.replace(" ", "-")


def test_links_to_measurements_resolve() -> None:
    anchors = {
        _slug(line.lstrip("#"))
        for line in MEASUREMENTS.read_text(encoding="utf-8").splitlines()
        if line.startswith("#")
    }
    linked = 0
    for page in _pages():
        for anchor in re.findall(r"measurements\.md#([\w\-]+)", page.read_text(encoding="utf-8")):
            linked += 1
            assert anchor in anchors, f"{page.name}: measurements.md#{anchor} is not a heading there"
    assert linked >= 3


def test_readme_speed_figures_are_the_measured_ones() -> None:
    measured = MEASUREMENTS.read_text(encoding="utf-8")
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    figures = re.findall(r"\b(\d+(?:\.\d+)?) questions/s", readme)
    for figure in figures:
        assert f"{figure} questions/s" in measured, f"README quotes {figure} questions/s, not measured"


def test_every_measurement_s_date_has_its_package_versions() -> None:
    """Issue 40 item 11: each row names the package versions it was measured with, through the dated spans of
    the 'Package versions' table (a row measured under new pins needs a new span)."""
    import datetime

    tables = _tables(MEASUREMENTS.read_text(encoding="utf-8"))
    spans = [(datetime.date.fromisoformat(r[0]), datetime.date.fromisoformat(r[1]), r[2]) for h, rows in tables
             if h[:3] == ["from", "to", "versions"] for r in rows]
    assert spans and all(versions for _, _, versions in spans)
    dated = 0
    for header, rows in (t for t in tables if "date" in t[0]):
        for row in rows:
            day = datetime.date.fromisoformat(row[header.index("date")].removeprefix("week of "))
            dated += 1
            assert any(start <= day <= end for start, end, _ in spans), f"no package versions for the date of {row}"
    assert dated >= 20


def test_the_retired_batch_agreement_table_says_so() -> None:
    text = MEASUREMENTS.read_text(encoding="utf-8")
    section = text.split("## Batched answers against batch 1", 1)[1]
    assert section.lstrip().startswith("**Retired, see `bench_vllm`**")
