"""The K9-Bench launcher in Python: ``python -m k9bench.pipeline`` (what ``run_eval.sh`` execs).

It reads the launcher's environment variables (:mod:`k9bench.pipeline.env`), checks every value
before anything runs (each ``*_ARGS`` through its script's own parser), builds the plan of stages
(:mod:`k9bench.pipeline.stages`, :mod:`k9bench.pipeline.plan`) and runs download -> inference
(shards, merge) -> calculate -> evaluate -> judge -> report in this one process
(:mod:`k9bench.pipeline.run`), under one lock per run tag, with SLURM's array, merge job and
requeue handled by :mod:`k9bench.pipeline.slurm`.

A stage runs when its outputs are missing, when the settings or input files it was made with
differ from today's, or when an earlier stage it depends on runs; ``--dry_run`` prints that plan.
"""

from __future__ import annotations

import argparse


def build_parser() -> argparse.ArgumentParser:
    """The launcher's only flags (its settings are environment variables: ``--help`` lists them)."""
    parser = argparse.ArgumentParser(prog="run_eval.sh", add_help=False,
                                     description="K9-Bench evaluation launcher; settings are environment variables.")
    parser.add_argument("-h", "--help", action="store_true", help="every variable, what it does and its default now")
    parser.add_argument("--dry_run", action="store_true", help="print the plan (each stage, and why it will or will not run); run nothing")
    return parser


def main(argv: list[str] | None = None) -> int:
    """``python -m k9bench.pipeline [--dry_run | --help]``; the settings are environment variables."""
    from k9bench.pipeline.run import main as run_main

    return run_main(argv)
