"""The report's figures: accuracy per category, by video duration, against the frame budget.

Every series has its own colour and marker (:func:`series_styles`), every bar or point its value and
n, every y-axis runs 0-100, an interval drawn from fewer than
:data:`~k9bench.stats.MIN_INTERVAL_VIDEOS` videos is not drawn (the label says ``CI n/a``), and
every figure carries the report's stamp (:meth:`~k9bench.report.model.Report.stamp`: the demo note,
the runs not comparable to the paper) as a text artist with the gid :data:`STAMP_GID`, so that a PNG
shared alone still says it.
"""

from __future__ import annotations

import textwrap
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from k9bench import CATEGORIES
from k9bench.data.published import FRAME_ABLATION, RANDOM_GUESS, normalize_model_name
from k9bench.report.load import run_name
from k9bench.report.model import CATEGORY_HEADERS, COMPARABLE, Report, RunSummary, Score

SERIES_COLOURS = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf",
    "#000000", "#393b79", "#e7ba52", "#637939", "#7b4173", "#9edae5", "#f7b6d2", "#843c39", "#aec7e8",
)
"""Colours of the series, in order: 18 that can be told apart (no grey: it is the random-guess line)."""

SERIES_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "h", "<", ">", "p", "d", "H", "8")
"""Markers of the series, in order."""

STAMP_GID = "k9bench-stamp"
"""The gid of the stamp's text artist on every figure."""

STAMP_COLOUR = "#b00000"
"""The stamp's colour."""

DPI = 110
"""Resolution of the PNGs."""


def series_styles(n: int) -> list[tuple[str, str]]:
    """``n`` (colour, marker) pairs: distinct colours while there are enough, and never the same pair."""
    out = []
    for i in range(n):
        colour = SERIES_COLOURS[i % len(SERIES_COLOURS)]
        marker = SERIES_MARKERS[(i + i // len(SERIES_COLOURS)) % len(SERIES_MARKERS)]
        out.append((colour, marker))
    return out


@dataclass
class Series:
    """One series of a figure."""

    label: str
    """Legend entry."""
    values: list
    """Accuracy (%) per group (None: no question there)."""
    cis: list
    """95% interval per group, or None (none, or from too few videos)."""
    ns: list
    """Questions per group; None for a published row (no n to give)."""


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def add_stamp(fig, lines: list[str], width_in: float) -> None:
    """The report's stamp above the axes, wrapped to the figure's width (nothing when there is none)."""
    if not lines:
        return
    chars = max(40, int(width_in * 11))
    text = "\n".join(textwrap.fill(line, chars) for line in lines)
    fig.text(0.5, 1.0, text, ha="center", va="bottom", fontsize=8, color=STAMP_COLOUR, fontweight="bold", gid=STAMP_GID, wrap=False)


def _finish(fig, ax, title: str, entries: int, stamp: list[str], width_in: float) -> None:
    ax.axhline(RANDOM_GUESS, color="grey", linestyle="--", linewidth=1, label=f"random guess ({RANDOM_GUESS:.0f}%)")
    ax.set_ylabel("accuracy (%)")
    ax.set_ylim(0, 100)
    ax.set_title(title)
    handles, labels = ax.get_legend_handles_labels()
    # the runs first, then the paper's rows, the guess line last
    order = sorted(range(len(labels)), key=lambda i: (labels[i].startswith("random guess"), "(paper" in labels[i]))
    ax.legend([handles[i] for i in order], [labels[i] for i in order], fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=min(max(entries, 1), 3), frameon=False)
    add_stamp(fig, stamp, width_in)


def _value_label(value: float, n: int | None, thin: bool) -> str:
    text = f"{value:.1f}"
    if n is not None:
        text += f" n={n}"
    if thin and n:
        text += " CI n/a"
    return text


def _label_at(ax, x: float, value: float, top: float, text: str, colour: str) -> None:
    """A vertical value label over a bar and its interval (``top``), or inside the bar's top when the bar
    is tall, so that it stays under 100."""
    inside = top > 72
    at = value if inside else top
    ax.annotate(text, (x, at), xytext=(0, -3 if inside else 3), textcoords="offset points", rotation=90,
                ha="center", va="top" if inside else "bottom", fontsize=6, color="white" if inside and colour == "#000000" else "black")


def grouped_bars(ax, groups: list[str], series: list[Series], thin: list[list[bool]]):
    """Bars per group for each series, a marker on each bar, its interval and its value label with n."""
    import numpy as np

    x = np.arange(len(groups))
    width = 0.82 / max(len(series), 1)
    for i, ((colour, marker), s) in enumerate(zip(series_styles(len(series)), series)):
        pos = x + (i - (len(series) - 1) / 2) * width
        heights = [v if v is not None else 0.0 for v in s.values]
        ax.bar(pos, heights, width, color=colour, edgecolor="white", linewidth=0.3, gid=f"series:{s.label}")
        shown = [(p, v) for p, v in zip(pos, s.values) if v is not None]
        ax.plot([p for p, _ in shown], [v for _, v in shown], linestyle="none", marker=marker, markersize=4, color=colour,
                markeredgecolor="black", markeredgewidth=0.4, label=s.label)
        for p, v, ci in zip(pos, s.values, s.cis):
            if v is not None and ci is not None:
                ax.errorbar([p], [v], yerr=[[max(v - ci[0], 0.0)], [max(ci[1] - v, 0.0)]], fmt="none", ecolor="black",
                            elinewidth=0.7, capsize=1.5)
        for j, (p, v) in enumerate(zip(pos, s.values)):
            n = s.ns[j] if s.ns else None
            if v is None:
                if n is not None:
                    ax.annotate(f"n={n}", (p, 0), xytext=(0, 2), textcoords="offset points", rotation=90, ha="center",
                                va="bottom", fontsize=6)
                continue
            top = max(v, s.cis[j][1]) if s.cis[j] is not None else v
            _label_at(ax, p, v, top, _value_label(v, n, thin[i][j]), colour)
    ax.set_xticks(x)
    ax.set_xticklabels(groups)


def _bar_width(groups: int, series: int) -> float:
    return max(7.0, 0.24 * groups * max(series, 1) + 1.5)


def _thin(scores: list[Score | None]) -> list[bool]:
    return [bool(s is not None and s.too_few_videos) for s in scores]


def category_figure(report: Report):
    """Grouped bars: accuracy per category (and average) for each run and shown paper row."""
    plt = _pyplot()
    groups = [*CATEGORIES, "average"]
    series, thin = [], []
    for run in report.runs:
        scores = [run.categories[c] for c in CATEGORIES] + [run.overall]
        label = f"{run.label} (n={run.overall.total:,})"
        if report.published and run.settings.standing != COMPARABLE:
            label += f", {run.settings.standing} to {run.settings.nearest_table or 'Table 1'}"
        series.append(Series(label, [s.accuracy for s in scores], [s.ci for s in scores], [s.total for s in scores]))
        thin.append(_thin(scores))
    for pub in report.published:
        series.append(Series(f"{pub.model} (paper, {pub.setting})", [pub.categories.get(c) for c in CATEGORIES] + [pub.average],
                             [None] * len(groups), []))
        thin.append([False] * len(groups))
    width = _bar_width(len(groups), len(series))
    fig, ax = plt.subplots(figsize=(width, 5.0))
    grouped_bars(ax, [CATEGORY_HEADERS.get(g, "Average") for g in groups], series, thin)
    _finish(fig, ax, "K9-Bench accuracy per category (95% intervals)", len(series) + 1, report.stamp(), width)
    return fig


def duration_figure(report: Report):
    """Grouped bars: accuracy by video-duration bin for the runs whose records carry durations (None without)."""
    from k9bench.report.model import DURATION_BINS, duration_bin_label

    runs = [r for r in report.runs if r.durations]
    if not runs:
        return None
    plt = _pyplot()
    bins = [b for b in (duration_bin_label(lo, hi) for lo, hi in DURATION_BINS) if any(b in r.durations for r in runs)]
    series, thin = [], []
    for run in runs:
        scores = [run.durations.get(b) for b in bins]
        series.append(Series(f"{run.label} (n={sum(s.total for s in run.durations.values()):,})",
                             [s.accuracy if s else None for s in scores], [None] * len(bins), [s.total if s else 0 for s in scores]))
        thin.append([False] * len(bins))  # no interval is drawn per bin
    width = _bar_width(len(bins), len(series))
    fig, ax = plt.subplots(figsize=(width, 5.0))
    grouped_bars(ax, bins, series, thin)
    ax.set_xlabel("video duration")
    _finish(fig, ax, "K9-Bench accuracy by video duration", len(series) + 1, report.stamp(), width)
    return fig


def frame_series(runs: list[RunSummary]) -> dict[str, list[RunSummary]]:
    """Models run with at least two frame budgets -> their runs, sorted by frames. An audio+video
    model's runs are a series of their own (``<model> (A+V)``), never mixed with its video-only runs."""
    by_model: dict[str, list[RunSummary]] = defaultdict(list)
    for run in runs:
        if run.max_frames and not run.settings.text_only:  # a text-only run has no place on a frame axis
            by_model[run_name(run.model, run.settings.audio)].append(run)
    return {m: sorted(rs, key=lambda r: r.max_frames) for m, rs in by_model.items() if len({r.max_frames for r in rs}) >= 2}


def frames_figure(report: Report, *, labelled: bool):
    """Lines: accuracy against frame budget, one per model run with several MAX_FRAMES (None without).
    ``labelled`` (``--labels`` given): each point carries its run's label and the legend names the runs."""
    series = frame_series(report.runs)
    if not series:
        return None
    plt = _pyplot()
    paper = []
    if report.published_mode != "none":
        for model, model_runs in series.items():
            if model_runs[0].settings.audio:  # the paper's ablation is video only
                continue
            paper += [(name, points) for name, points in FRAME_ABLATION.items() if normalize_model_name(name) == normalize_model_name(model)]
    styles = series_styles(len(series) + len(paper))
    width = 7.5
    fig, ax = plt.subplots(figsize=(width, 5.0))
    for (colour, marker), (model, model_runs) in zip(styles, series.items()):
        xs = [r.max_frames for r in model_runs]
        ys = [r.overall.accuracy or 0.0 for r in model_runs]
        errors = [[(y - r.overall.ci[0]) if r.overall.ci else 0.0 for r, y in zip(model_runs, ys)],
                  [(r.overall.ci[1] - y) if r.overall.ci else 0.0 for r, y in zip(model_runs, ys)]]
        name = " / ".join(r.label for r in model_runs) if labelled else model
        ax.errorbar(xs, ys, yerr=errors, marker=marker, color=colour, capsize=3, markeredgecolor="black", markeredgewidth=0.4, label=name)
        for r, x, y in zip(model_runs, xs, ys):
            text = _value_label(y, r.overall.total, r.overall.too_few_videos)
            ax.annotate(f"{r.label}: {text}" if labelled else text, (x, y), xytext=(4, 5), textcoords="offset points", fontsize=7)
    for (colour, marker), (name, points) in zip(styles[len(series):], paper):
        px = sorted(points)
        ax.plot(px, [points[f] for f in px], linestyle=":", marker=marker, color=colour, label=f"{name} (paper)")
        for f in px:
            ax.annotate(f"{points[f]:.1f}", (f, points[f]), xytext=(4, -10), textcoords="offset points", fontsize=7)
    ax.set_xscale("log", base=2)
    frames = sorted({r.max_frames for rs in series.values() for r in rs} | {f for _, pts in paper for f in pts})
    ax.set_xticks(frames)
    ax.set_xticklabels([str(f) for f in frames])
    ax.minorticks_off()
    ax.set_xlim(frames[0] / 1.5, frames[-1] * 2.0)  # room for the point labels on the right
    ax.set_xlabel("MAX_FRAMES")
    _finish(fig, ax, "K9-Bench accuracy against frame budget", len(series) + len(paper) + 1, report.stamp(), width)
    return fig


def save(fig, path: Path) -> Path | None:
    """Write a figure as PNG (None for no figure)."""
    if fig is None:
        return None
    plt = _pyplot()
    try:
        fig.savefig(path, dpi=DPI, bbox_inches="tight")
    finally:
        plt.close(fig)
    return path


def write_plots(report: Report, folder: Path, *, labelled: bool) -> dict:
    """Every figure of the report into ``folder``: name -> path (None for a figure not drawn)."""
    return {
        "accuracy_by_category": save(category_figure(report), folder / "accuracy_by_category.png"),
        "accuracy_by_duration": save(duration_figure(report), folder / "accuracy_by_duration.png"),
        "accuracy_vs_frames": save(frames_figure(report, labelled=labelled), folder / "accuracy_vs_frames.png"),
    }
