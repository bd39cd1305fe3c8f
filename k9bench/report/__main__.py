"""``python -m k9bench.report --frame_sweep EVAL``: print the eval files of EVAL's frame-budget curve
(:func:`k9bench.report.load.frame_sweep_files`), one per line. The report itself is
``evaluate_results.py --mode report``."""

from __future__ import annotations

import logging
import sys


def main(argv: list[str] | None = None) -> int:
    from k9bench.artifact_io import ArtifactError
    from k9bench.report.load import frame_sweep_files

    from k9bench.cli import ArgumentParser  # the project's one parser: no abbreviated flags
    parser = ArgumentParser(prog="python -m k9bench.report", description=__doc__)
    parser.add_argument("--frame_sweep", required=True, metavar="EVAL_JSON", help="an eval file; its folder is searched")
    args = parser.parse_args(argv)
    from k9bench.logs import basic_logging
    basic_logging(logging.WARNING)
    try:
        files = frame_sweep_files(args.frame_sweep)
    except ArtifactError as exc:
        print(f"report: {exc}", file=sys.stderr)
        return 2
    for path in files:
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
