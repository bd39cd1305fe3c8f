"""The launcher's own flags (its settings are environment variables: :mod:`k9bench.pipeline.env`)."""

from __future__ import annotations

import argparse


def build_parser() -> argparse.ArgumentParser:
    """The launcher's only flags (its settings are environment variables: ``--help`` lists them)."""
    from k9bench.cli import ArgumentParser  # the project's one parser: no abbreviated flags
    parser = ArgumentParser(prog="run_eval.sh", add_help=False,
                                     description="K9-Bench evaluation launcher; settings are environment variables.")
    parser.add_argument("-h", "--help", action="store_true", help="every variable, what it does and its default now")
    parser.add_argument("--dry_run", action="store_true", help="print the plan (each stage, and why it will or will not run); run nothing")
    return parser


