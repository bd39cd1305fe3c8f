"""The report stage: settings, flags, and :class:`ReportStage` (the :class:`k9bench.stage.Stage` contract).

``evaluate_results.py --mode report`` calls :func:`add_report_args` while building its parser, builds
:class:`ReportSettings` with :func:`k9bench.settings.from_namespace` (``input_file`` and ``output_file``
are its own flags) and calls :func:`run_report`. The launcher uses :func:`build_parser` /
:func:`config_from_argv` (the same argv as ``evaluate_results.py --mode report``) and :class:`ReportStage`.

The stage's outputs are the report folder and ``report.md``; its inputs, by content, are the eval files,
the judge files with their skipped lists and meta sidecars, and the ``--subset`` file; its fingerprint is
the report settings. The stage block goes into ``report.json``, so an unchanged rerun is ``done()``.
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass
from pathlib import Path

from k9bench.artifacts import now_iso
from k9bench.artifact_io import ArtifactError, write_json_atomic, write_text_atomic
from k9bench.headers.files import NewerSchema, stamped
from k9bench.report.load import common_questions, disambiguate, judge_side_files, load_judge, load_run, match_judge_to_run
from k9bench.report.markdown import judge_markdown, leaderboard_markdown, published_rows_for, report_markdown
from k9bench.report.model import Report, ReportError
from k9bench.settings import add_arguments, from_namespace, result_fingerprint, setting
from k9bench.stage import EXIT_FAILED, EXIT_OK, EXIT_USAGE, Stage, StageError, run_stage

log = logging.getLogger("k9bench.report")

PUBLISHED_MODES = ("none", "matching", "all")
"""``--published``: no paper rows, those of the runs' models, or all of Table 1."""


@dataclass(frozen=True)
class ReportSettings:
    """What ``--mode report`` is asked for (built once in evaluate_results.py's ``main``)."""

    input_file: list | tuple | str | None = setting(None, cli=False, result=True)
    """The eval JSON files (evaluate_results.py's own ``--input_file``; one path is accepted too)."""
    output_file: str | None = setting(None, cli=False)
    """Where report.md goes instead of ``report_dir`` (evaluate_results.py's own ``--output_file``)."""
    report_dir: str = setting("report", "folder for report.md, report.json and the PNG plots (default: %(default)s)")
    """Folder of the report."""
    judge_files: list | None = setting(None, "judge JSON files (subjective_evals.py output) for the Table 3 judge table",
                                       nargs="+", metavar="JUDGE_JSON", result=True)
    """Judge files for the Table 3 layout."""
    published: str = setting("none", "show the paper's published numbers beside the runs: those of the same models, or all "
                             "(default: %(default)s)", choices=PUBLISHED_MODES, result=True)
    """Paper rows shown beside the runs."""
    labels: list | None = setting(None, "display names for the eval files, in --input_file order", nargs="+", metavar="NAME",
                                  result=True)
    """Display names, one per eval file."""
    note: list | None = setting(None, "a line shown in bold at the top of report.md and on every plot, kept in report.json "
                                "(repeatable), e.g. that a run is a smoke test whose scores mean nothing", action="append",
                                metavar="TEXT", result=True)
    """Lines shown at the top of the report and on every figure."""
    subset: str | None = setting(None, "restrict to these questions: a subset file (python -m k9bench.data.subset), a JSON file listing idx, "
                                 "or another run's raw/sim/eval file (the questions whose video it had)", metavar="FILE",
                                 result=True)
    """The ``--subset`` file (:func:`k9bench.data.subset.read_subset`)."""
    baseline: str | None = setting(None, "another model's run to compare the first --input_file with, question by question: its "
                                   "eval file or its run folder (one eval_*.json). On the common questions: the accuracy difference "
                                   "with a cluster-robust interval and the clustered McNemar test", metavar="RUN",
                                   result=True)
    """The baseline run (:mod:`k9bench.report.paired`)."""
    failure_labels: list | None = setting(None, "failure-labels files (python -m k9bench.people label / llm-label) for the failure-mode "
                                          "chart and the labellers' agreement (docs/people.md)", nargs="+", metavar="LABELS_JSON",
                                          result=True)
    """Labels files of people and of the LLM labeller (:mod:`k9bench.report.people`)."""

    @property
    def inputs(self) -> list[str]:
        """The eval files as a list."""
        given = self.input_file
        return [p for p in ([given] if isinstance(given, str) else list(given or [])) if p]

    @property
    def markdown_path(self) -> Path:
        """Where report.md goes."""
        return Path(self.output_file) if self.output_file else Path(self.report_dir) / "report.md"


def add_report_args(parser: argparse.ArgumentParser) -> None:
    """Options used by ``--mode report`` only (generated from :class:`ReportSettings`) on a
    :class:`k9bench.cli.ArgumentParser`. ``--subset`` is left out when the parser already has it (scoring's
    own ``--subset`` then serves the report too)."""
    group = parser.add_argument_group("report mode (--mode report; --input_file takes one or more eval JSON files)")
    add_arguments(group, ReportSettings, exclude=("subset",) if parser.accepts("--subset") else ())


def build_parser() -> argparse.ArgumentParser:
    """The report's own flags, as ``evaluate_results.py --mode report`` takes them."""
    from k9bench.cli import ArgumentParser  # it answers which flags it has (add_report_args asks)

    parser = ArgumentParser(prog="evaluate_results.py --mode report", description="The K9-Bench report (Table 1 and 3 layouts, plots).")
    parser.add_argument("--mode", choices=("report",), default="report", help="always report (accepted for the same argv)")
    parser.add_argument("--input_file", nargs="+", required=True, metavar="EVAL_JSON", help="eval JSON files")
    parser.add_argument("--output_file", metavar="MD", help="report.md elsewhere than --report_dir")
    add_report_args(parser)
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log lines")
    parser.add_argument("-q", "--quiet", action="store_true", help="warnings and errors only")
    return parser


def config_from_argv(argv: list[str]) -> ReportSettings:
    """:class:`ReportSettings` from the report's argv (argparse's usage errors exit 2; a bad value is a
    :class:`~k9bench.stage.StageError`)."""
    return config_from_namespace(build_parser().parse_args(argv))


def config_from_namespace(args: argparse.Namespace) -> ReportSettings:
    """The one step from parsed flags to :class:`ReportSettings` (see :func:`config_from_argv`)."""
    try:
        return from_namespace(ReportSettings, args)
    except ValueError as exc:
        raise StageError(f"report: {exc}") from None


def _baseline_input(baseline: str) -> Path:
    """The baseline's eval file (a run folder's one ``eval_*.json``), or the path as given when it is none."""
    from k9bench.report.paired import resolve_baseline

    try:
        return resolve_baseline(baseline)
    except ReportError:
        return Path(baseline)


def build_report(eval_files: list[str], judge_files: list[str] | None = None, *, published: str = "none", labels: list[str] | None = None,
                 notes: list[str] | None = None, subset: str | None = None, baseline: str | None = None,
                 failure_labels: list[str] | None = None) -> Report:
    """Load every input (raising :class:`ReportError` on the first bad one)."""
    from k9bench.report.paired import paired_comparison, resolve_baseline
    from k9bench.data.subset import read_subset
    from k9bench.report.people import people_report

    if not eval_files:
        raise ReportError("no eval file given (--input_file eval_A.json [eval_B.json ...])")
    if labels and len(labels) != len(eval_files):
        raise ReportError(f"--labels gives {len(labels)} names for {len(eval_files)} eval files")
    chosen = read_subset(subset) if subset else None
    runs = [load_run(p, chosen.idx if chosen else None, chosen.description if chosen else None) for p in eval_files]
    disambiguate(runs, labels)
    judges = [load_judge(p, chosen.idx if chosen else None) for p in (judge_files or [])]
    for judge in judges:
        match_judge_to_run(judge, runs)
    paired = None
    if baseline:
        base = load_run(resolve_baseline(baseline), chosen.idx if chosen else None, chosen.description if chosen else None)
        if base.label == runs[0].label:
            base.label = f"{base.label} [baseline {Path(base.path).stem}]"
        paired = paired_comparison(runs[0], base)
    return Report(runs=runs, judges=judges, published=published_rows_for(runs, published), published_mode=published,
                  notes=[n for n in (notes or []) if n.strip()], subset=chosen.summary() if chosen else None,
                  common=common_questions(runs), paired=paired, people=people_report(judges, failure_labels))


def _plot_notes(report: Report, plots: dict) -> list[str]:
    notes = []
    text_only = [r.label for r in report.runs if r.settings.text_only]
    if text_only:
        notes.append(f"Text-only run{'' if len(text_only) == 1 else 's'} (MAX_FRAMES 0, no video): {', '.join(text_only)}; "
                     "not part of the duration plot or the short-video table.")
    with_video = [r for r in report.runs if not r.settings.text_only]
    if plots["accuracy_by_duration"] is None:
        if with_video:
            notes.append("No record carries a video duration (eval_video_llm.py writes one), so the duration plot is skipped.")
    else:
        partial = [r for r in with_video if r.missing_durations]
        if partial:
            notes.append("Records without a video duration are left out of the duration plot: " + ", ".join(
                f"{r.label} ({r.missing_durations})" for r in partial) + ".")
    if plots["accuracy_vs_frames"] is None:
        notes.append("The frame-count plot needs one model run with at least two MAX_FRAMES values (eval files of the same model "
                     "and questions); skipped.")
    return notes


def write_report(report: Report, report_dir: str | Path, markdown_path: str | Path | None = None, *, labelled: bool = False,
                 stage_block: dict | None = None) -> dict:
    """Write report.md, report.json and the plots; return ``{name: path}`` of what was written."""
    from k9bench.report.people import write_people_plots
    from k9bench.report.plots import write_plots

    report_dir = Path(report_dir)
    report_dir.mkdir(parents=True, exist_ok=True)
    md_path = Path(markdown_path) if markdown_path else report_dir / "report.md"
    plots = write_plots(report, report_dir, labelled=labelled)
    plots.update(write_people_plots(report.people, report_dir, report.stamp()))
    notes = _plot_notes(report, plots)
    written = {name: str(path) for name, path in plots.items() if path is not None}
    written["markdown"] = str(write_text_atomic(md_path, report_markdown(report, plots, notes, md_path)))
    summary = {
        "generated_at": now_iso(),
        "runs": [r.to_dict() for r in report.runs],
        "common_questions": report.common.to_dict() if report.common else None,
        "paired_comparison": report.paired.to_dict() if report.paired else None,
        "people": report.people.to_dict() if report.people else None,
        "subset": report.subset,
        "judges": [vars(j) for j in report.judges],
        "published": [vars(p) for p in report.published],
        "plots": {k: (str(v) if v else None) for k, v in plots.items()},
        "stamp": report.stamp(),
        "notes": notes,
        "caller_notes": list(report.notes),
    }
    if stage_block is not None:
        summary["stage"] = stage_block
    written["json"] = str(write_json_atomic(report_dir / "report.json", stamped("report", "report", summary)))
    from k9bench.view import report_page  # the results page beside report.md (docs/view.md)

    written["page"] = str(report_page(report, report_dir))
    return written


class ReportStage(Stage):
    """``evaluate_results.py --mode report`` behind the stage contract."""

    name = "report"

    def __init__(self, settings: ReportSettings):
        self.settings = settings

    def outputs(self) -> list[Path]:
        return [Path(self.settings.report_dir), self.settings.markdown_path]

    def output_flags(self) -> list[str]:
        return ["--report_dir", "--output_file" if self.settings.output_file else "--report_dir"]

    def folder_outputs(self) -> set[Path]:
        return {Path(self.settings.report_dir)}

    def _given_inputs(self) -> list[Path]:
        s = self.settings
        return [Path(p) for p in (*s.inputs, *(s.judge_files or []), *([s.subset] if s.subset else []),
                                  *([_baseline_input(s.baseline)] if s.baseline else []), *(s.failure_labels or []))]

    def inputs(self) -> list[Path]:
        out = [p for p in self._given_inputs() if p.is_file()]
        for judge in self.settings.judge_files or []:
            out += judge_side_files(judge)
        return out

    def fingerprint(self) -> dict:
        return result_fingerprint(self.settings)

    def record_file(self) -> Path:
        return Path(self.settings.report_dir) / "report.json"

    def done(self) -> str | None:
        missing = [p for p in self._given_inputs() if not p.is_file()]
        if missing:
            return f"input {missing[0]} is missing"
        return super().done()

    def run(self) -> int:
        from k9bench.data.subset import SubsetError

        s = self.settings
        try:
            report = build_report(s.inputs, s.judge_files, published=s.published, labels=s.labels, notes=s.note, subset=s.subset,
                                  baseline=s.baseline, failure_labels=s.failure_labels)
            written = write_report(report, s.report_dir, s.output_file, labelled=bool(s.labels), stage_block=self.stage_block())
        except SubsetError as exc:  # a bad --subset is a bad flag value, as in scoring
            log.error("report: %s", exc)
            return EXIT_USAGE
        except ArtifactError as exc:
            log.error("report: %s", exc)
            from k9bench.view.data import ViewError  # a bad input of the results page (docs/view.md): exit 2

            return EXIT_USAGE if isinstance(exc, (NewerSchema, ViewError)) else EXIT_FAILED  # a file of a newer k9bench: exit 2
        print(leaderboard_markdown(report.runs, report.published))
        if report.judges:
            print()
            print(judge_markdown(report.judges, report.published_mode))
        if report.paired is not None:
            from k9bench.report.paired import paired_line

            print()
            print(paired_line(report.paired))
        for name, path in written.items():
            log.info("wrote %s: %s", name, path)
        return EXIT_OK


def run_report(settings: ReportSettings) -> int:
    """Write the report; returns the exit code (1 with a message naming the file on a bad eval or judge
    file; 2 for a bad ``--subset`` file, or, before any input is read, when the report cannot be written
    where asked or another report is writing it)."""
    return run_stage(ReportStage(settings))
