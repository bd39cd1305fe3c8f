"""Leaderboard report from eval (and judge) artifacts: ``evaluate_results.py --mode report``.

Contract with evaluate_results.py (which owns the parser): it calls
``add_report_args(parser)`` while building its parser and ``run_report(args)`` for
``--mode report``. ``args.input_file`` is a list of eval JSON paths. Options added
here must not collide with evaluate_results.py's own flags (--mode, --input_file,
--output_file, --threshold, --embedding_model, --batch_size, --device, -v, -q).

Work in progress (issue 8): the implementation lands with the launcher.
"""

from __future__ import annotations

import argparse


def add_report_args(parser: argparse.ArgumentParser) -> None:
    """Options used by ``--mode report`` only."""
    group = parser.add_argument_group("report mode (--mode report)")
    group.add_argument("--report_dir", default=None, help="folder for the Markdown leaderboard and PNG plots")


def run_report(args: argparse.Namespace) -> int:
    """Write the report; returns the exit code."""
    raise NotImplementedError("--mode report is not implemented yet")
