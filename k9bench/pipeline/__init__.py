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

from k9bench.pipeline.flags import build_parser

__all__ = ["build_parser", "main"]


def main(argv: list[str] | None = None) -> int:
    """``python -m k9bench.pipeline [--dry_run | --help]``; the settings are environment variables."""
    from k9bench.pipeline.run import main as launch

    return launch(argv)
