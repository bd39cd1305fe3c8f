"""``python -m k9bench.view RUN_OR_FILE... --output_dir DIR [--thumbnails N]``: the results page of one
or more runs (raw, sim, eval or judge files, or run folders) as DIR/index.html and DIR/frames/."""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import dataclass

from k9bench.settings import add_arguments, from_namespace, setting
from k9bench.validators import non_negative_int
from k9bench.view import DEFAULT_THUMBNAILS


@dataclass(frozen=True)
class ViewSettings:
    """What ``python -m k9bench.view`` is asked for."""

    output_dir: str = setting("k9bench_view", "folder for index.html and frames/ (default: %(default)s)")
    """Where the page goes."""
    thumbnails: int = setting(DEFAULT_THUMBNAILS, "videos given a strip of thumbnails of the frames the model saw, at most 8 each; 0 turns "
                              "them off (default: %(default)s)", type=non_negative_int, metavar="N")
    """Bound on the frames/ folder, in videos."""
    labels: list | None = setting(None, "display names for the runs, in input order", nargs="+", metavar="NAME")
    """Display names."""
    note: list | None = setting(None, "a line shown in bold at the top of the page (repeatable)", action="append", metavar="TEXT")
    """Lines at the top of the page."""
    report_json: str | None = setting(None, "a report.json whose paired_comparison (the report's --baseline) the page shows",
                                      metavar="FILE")
    """Where the paired comparison is read from."""


def build_parser() -> argparse.ArgumentParser:
    from k9bench.cli import ArgumentParser  # the project's one parser: no abbreviated flags
    parser = ArgumentParser(prog="python -m k9bench.view", description=__doc__)
    parser.add_argument("inputs", nargs="+", metavar="RUN_OR_FILE", help="raw/sim/eval/judge JSON files or run folders")
    add_arguments(parser, ViewSettings)
    parser.add_argument("-q", "--quiet", action="store_true", help="warnings and errors only")
    return parser


def main(argv: list[str] | None = None) -> int:
    from k9bench.artifact_io import ArtifactError
    from k9bench.stage import StageError, check_output
    from k9bench.view import build_page

    args = build_parser().parse_args(argv)
    from k9bench.logs import basic_logging
    basic_logging(logging.WARNING if args.quiet else logging.INFO)
    s = from_namespace(ViewSettings, args)
    try:
        check_output(s.output_dir, flag="--output_dir", folder=True)
    except StageError as exc:
        print(f"view: {exc}", file=sys.stderr)
        return 2
    try:
        page = build_page(args.inputs, s.output_dir, thumbnails=s.thumbnails, labels=s.labels, notes=s.note, report_json=s.report_json)
    except ArtifactError as exc:
        print(f"view: {exc}", file=sys.stderr)
        return 2
    print(page)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
