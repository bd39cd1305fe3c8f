"""The static results page: ``report_<tag>/index.html`` (written by the report stage) and
``python -m k9bench.view RUN_OR_FILE... --output_dir DIR`` for one or more runs.

One self-contained HTML file (data inline, small hand-written JavaScript and CSS, no network) and a
``frames/`` folder of thumbnails of the frames the model saw. :mod:`~k9bench.view.data` reads the runs,
:mod:`~k9bench.view.thumbs` makes the strips through the frame cache, :mod:`~k9bench.view.page` writes
the HTML; docs/view.md describes the page.
"""

from __future__ import annotations

from pathlib import Path

DEFAULT_THUMBNAILS = 200
"""Videos given a thumbnail strip by ``python -m k9bench.view`` unless ``--thumbnails`` says otherwise (at most 8
small JPEGs per video)."""

REPORT_THUMBNAILS = 50
"""Videos given a strip on the report stage's page: each strip decodes its video once (as long as the inference
stage's decode of it, bench_video.py in docs/measurements.md, unless the run's frame store holds it), so the report
stays quick; ``python -m k9bench.view RUN --thumbnails N`` makes a page with more."""


def build_page(inputs: list, output_dir: str | Path, *, thumbnails: int | None = DEFAULT_THUMBNAILS, labels: list | None = None,
               notes: list | None = None, report_json: str | Path | None = None, title: str = "K9-Bench results",
               strict_judges: bool = True, judged: list | None = None, failure_labels: dict | None = None) -> Path:
    """Read ``inputs`` (files or folders), write ``output_dir/index.html`` and its ``frames/``; return the page's path.
    Raises :class:`k9bench.artifacts.ArtifactError` (naming the file) on an unusable input."""
    from k9bench.view.data import build_data, load_inputs, read_paired
    from k9bench.view.page import write_page
    from k9bench.view.thumbs import make_strips

    paired = read_paired(report_json)
    runs = load_inputs(inputs, labels, strict_judges=strict_judges, judged=judged)
    for run in runs:  # model name -> idx -> the failure labels' text (k9bench.report.people.page_labels)
        run.failure_labels = (failure_labels or {}).get(next((r.model_name for r in run.records if r.model_name), None), {})
    data = build_data(runs, notes=notes, paired=paired)
    make_strips(runs, data, Path(output_dir), thumbnails)
    return write_page(data, output_dir, title)


def report_page(report, report_dir: str | Path) -> Path:
    """``report_<tag>/index.html``: the page of every run the report compares (its eval files and the
    ``--baseline``'s, its judge files, its notes and report.json's paired comparison), written by the report
    stage beside report.md. Judge files are shown beside the run the report matched them to; one it matched to
    none is left off the page with a warning (the report's own table has it)."""
    report_dir = Path(report_dir)
    paths, labels = [r.path for r in report.runs], [r.label for r in report.runs]
    paired = report.paired
    if paired is not None and str(Path(paired.baseline_path).resolve()) not in {str(Path(p).resolve()) for p in paths}:
        paths.append(paired.baseline_path)
        labels.append(paired.baseline_label)
    return build_page(paths, report_dir, judged=[(j.path, j.label) for j in report.judges], thumbnails=REPORT_THUMBNAILS,
                      labels=labels, notes=list(report.notes), report_json=report_dir / "report.json",
                      title=f"K9-Bench results: {report_dir.name}",
                      failure_labels=report.people.page_labels() if report.people else None)


__all__ = ["DEFAULT_THUMBNAILS", "REPORT_THUMBNAILS", "build_page", "report_page"]
