"""The scripts' own parsers as the launcher sees them, and the check of every ``*_ARGS`` before anything runs
(:func:`check_step`: the step's Stage built as the run builds it, :func:`k9bench.pipeline.registry.make_stage`).

Each comes from the package module the stage registry names (:mod:`k9bench.pipeline.registry`): the
launcher never imports the root scripts and never touches ``sys.path``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
from types import ModuleType

from k9bench.pipeline import registry

log = logging.getLogger("k9bench.pipeline")


def script_module(script: str) -> ModuleType:
    """The package module of a script (``eval_video_llm``...) or ``python -m`` tool (``merge``...)."""
    return registry.script_module(script)


def build_parser(script: str) -> argparse.ArgumentParser:
    """The script's own parser."""
    return script_module(script).build_parser()


class ArgsError(ValueError):
    """A ``*_ARGS`` value its script refuses (one line, redacted)."""


def check_step(step, variable: str) -> None:
    """Build the step's Stage as the run will (:func:`k9bench.pipeline.registry.make_stage`: its values and the
    user's ``*_ARGS`` through the stage's own parser and checks, which also check values that need each other);
    raise :class:`ArgsError` naming ``variable``."""
    from k9bench.redact import redact_text
    from k9bench.stage import StageError

    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured), contextlib.redirect_stdout(captured):
            registry.make_stage(step)
    except SystemExit as exc:
        if exc.code in (0, None):
            raise ArgsError(f"{variable}: {step.script}.py printed its help instead of running; remove -h/--help") from None
        lines = [ln.strip() for ln in captured.getvalue().splitlines() if ln.strip() and not ln.startswith("usage:")]
        why = lines[-1] if lines else f"refused (exit {exc.code})"
        raise ArgsError(redact_text(f"{variable}: {why}")) from None
    except StageError as exc:
        raise ArgsError(redact_text(f"{variable}: {exc}")) from None
