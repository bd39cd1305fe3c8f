"""Leaderboard report from eval (and judge) artifacts: ``evaluate_results.py --mode report``.

What it writes into ``--report_dir`` (default ``report``):

=============================  ===================================================
``report.md``                  the leaderboard in the layout of the paper's Table 1
                               (rank, average, five categories, 95% intervals), the
                               runs on their common questions, each run's settings,
                               the judge table in the layout of Table 3 (with each
                               judge file's skipped entries), and the plots.
                               ``--output_file`` puts the Markdown elsewhere.
``report.json``                the same figures, machine-readable, and the stage block
``accuracy_by_category.png``   accuracy per category for each run
``accuracy_by_duration.png``   accuracy by video-duration bin
``accuracy_vs_frames.png``     accuracy against the frame budget, when one model
                               was run with several MAX_FRAMES
=============================  ===================================================

Accuracy counts failed samples as wrong, like the paper. Intervals are read from the eval file when it
carries them, otherwise computed by a seeded bootstrap over videos; one drawn from fewer than 10 videos
is shown as n/a. A run's settings are read from the file's contents and compared with the paper's rows
(:mod:`k9bench.data.published`: Tables 1 to 4 and Figure 3(a), each with its own setup) by
:mod:`~k9bench.report.paper`: the rows whose setup the run followed, or what differs from the nearest one;
``--subset`` restricts every run, and the judge table, to some questions (:mod:`k9bench.data.subset`).

The package: :mod:`~k9bench.report.model` (what a report holds, the comparison with the paper),
:mod:`~k9bench.report.paper` (a run's standing against the paper's rows), :mod:`~k9bench.report.load` (reading eval
and judge files), :mod:`~k9bench.report.markdown`,
:mod:`~k9bench.report.plots`, :mod:`~k9bench.report.stage` (settings, flags, :class:`ReportStage`).
``python -m k9bench.report --frame_sweep EVAL`` lists the launcher's frame-sweep inputs.
"""

from k9bench.report.load import bootstrap_intervals, frame_sweep_files, load_judge, load_run
from k9bench.report.model import NOT_COMPARABLE_MARK, Report, ReportError
from k9bench.report.plots import frame_series
from k9bench.report.stage import (
    ReportSettings,
    ReportStage,
    add_report_args,
    build_parser,
    build_report,
    config_from_argv,
    run_report,
    write_report,
)

__all__ = [
    "NOT_COMPARABLE_MARK", "Report", "ReportError", "ReportSettings", "ReportStage", "add_report_args", "bootstrap_intervals",
    "build_parser", "build_report", "config_from_argv", "frame_series", "frame_sweep_files", "load_judge", "load_run",
    "run_report", "write_report",
]
