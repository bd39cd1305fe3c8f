"""The report's figures are readable (issue 25): a colour and marker per series, value labels with n,
y-axes 0-100, the demo / not-comparable stamp on every figure, the frames plot under --labels."""

from __future__ import annotations

from pathlib import Path

import pytest
from matplotlib.container import BarContainer

from k9bench import CATEGORIES
from k9bench.data.published import PUBLISHED_ACCURACY
from k9bench.report import build_report, write_report
from k9bench.report.markdown import judge_markdown, leaderboard_markdown
from k9bench.report.plots import STAMP_GID, category_figure, duration_figure, frames_figure, series_styles
from tests.test_report import make_eval

DEMO_NOTE = "DEMO run: a tiny random-weight model; these scores are MEANINGLESS (chance is 20%)."


def stamp_text(fig) -> str:
    """The text of the figure's stamp artist ('' when it has none)."""
    texts = [t.get_text() for t in fig.texts if t.get_gid() == STAMP_GID]
    assert len(texts) <= 1
    return " ".join(texts[0].split()) if texts else ""


def series_of(ax) -> tuple[list, list]:
    """Face colours of each bar series, and the markers of the labelled marker lines."""
    colours = [tuple(c.patches[0].get_facecolor()) for c in ax.containers if isinstance(c, BarContainer)]
    markers = [ln.get_marker() for ln in ax.get_lines() if not ln.get_label().startswith(("_", "random guess"))]
    return colours, markers


@pytest.fixture
def two_runs(tmp_path) -> list[str]:
    return [str(make_eval(tmp_path / f"eval_{m}_mf32_n20.json", model=m, hits={c: h for c in CATEGORIES}))
            for m, h in (("demo4", 1), ("demo8", 3))]


def test_thirteen_series_have_thirteen_colours_and_markers(two_runs):
    """--published all with two runs: 13 series, no two share a colour (nor a marker)."""
    report = build_report(two_runs, published="all")
    fig = category_figure(report)
    colours, markers = series_of(fig.axes[0])
    assert len(colours) == 2 + len(PUBLISHED_ACCURACY) == 13
    assert len(set(colours)) == len(colours)
    assert len(markers) == 13 and len(set(markers)) == 13
    assert len(set(series_styles(40))) == 40  # beyond the palette, pairs still differ


def test_stamp_is_a_text_artist_on_every_figure(tmp_path):
    files = [str(make_eval(tmp_path / f"eval_m_mf{f}_n20.json", model="m", frames=f)) for f in (4, 8)]
    report = build_report(files, notes=[DEMO_NOTE], published="matching")
    figures = [category_figure(report), duration_figure(report), frames_figure(report, labelled=False)]
    assert all(fig is not None for fig in figures)
    for fig in figures:
        text = stamp_text(fig)
        assert DEMO_NOTE in text
        assert "not comparable to the paper's Table 1: m @4f, m @8f" in text
        assert fig.axes[0].get_ylim() == (0.0, 100.0)
    written = write_report(report, tmp_path / "rep")
    for name in ("accuracy_by_category", "accuracy_by_duration", "accuracy_vs_frames"):
        assert Path(written[name]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_comparable_run_without_notes_has_no_stamp(tmp_path, monkeypatch):
    report = build_report([str(make_eval(tmp_path / "eval_m_mf32_n20.json"))])
    for run in report.runs:
        run.settings.differences, run.settings.unconfirmed = [], []
    assert report.stamp() == [] and stamp_text(category_figure(report)) == ""


def test_value_labels_carry_n_and_thin_intervals_say_na(two_runs):
    report = build_report(two_runs)
    ax = category_figure(report).axes[0]
    labels = [t.get_text() for t in ax.texts]
    # 2 runs x (5 categories + average); 4 questions per category from 2 videos: no interval
    assert len(labels) == 12
    assert "25.0 n=4 CI n/a" in labels and "75.0 n=20" in labels
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "demo4 (n=20)" in legend and legend[-1] == "random guess (20%)"


def test_frames_plot_honours_labels(tmp_path):
    files = [str(make_eval(tmp_path / f"eval_m_mf{f}_n20.json", model="m", frames=f)) for f in (4, 8, 16)]
    report = build_report(files, labels=["four", "eight", "sixteen"])
    ax = frames_figure(report, labelled=True).axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()][0] == "four / eight / sixteen"
    points = [t.get_text() for t in ax.texts]
    assert any(p.startswith("four: ") and "n=20" in p for p in points)
    unlabelled = frames_figure(build_report(files), labelled=False).axes[0]
    assert [t.get_text() for t in unlabelled.get_legend().get_texts()][0] == "m"


def test_a_lone_run_has_no_rank(tmp_path, two_runs):
    alone = build_report(two_runs[:1])
    row = leaderboard_markdown(alone.runs, alone.published).splitlines()[2]
    assert row.startswith("| — | demo4 |")
    ranked = build_report(two_runs)
    rows = leaderboard_markdown(ranked.runs, ranked.published).splitlines()[2:]
    assert [r.split("|")[1].strip() for r in rows] == ["1", "2"]
    assert "| — |" not in judge_markdown([], "none")
