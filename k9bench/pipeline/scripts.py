"""The scripts' own parsers as the launcher sees them: to check every ``*_ARGS`` before anything runs
(the stages themselves run as Stage objects: :func:`k9bench.pipeline.registry.make_stage`).

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


def check_argv(script: str, argv: list[str], variable: str) -> None:
    """Parse ``argv`` as the stage will (its package's ``config_from_argv``, which also checks values that
    need each other); raise :class:`ArgsError` naming ``variable``."""
    from k9bench.redact import redact_text
    from k9bench.stage import StageError

    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured), contextlib.redirect_stdout(captured):
            script_module(script).config_from_argv(list(argv))
    except SystemExit as exc:
        if exc.code in (0, None):
            raise ArgsError(f"{variable}: {script}.py printed its help instead of running; remove -h/--help") from None
        lines = [ln.strip() for ln in captured.getvalue().splitlines() if ln.strip() and not ln.startswith("usage:")]
        why = lines[-1] if lines else f"refused (exit {exc.code})"
        raise ArgsError(redact_text(f"{variable}: {why}")) from None
    except StageError as exc:
        raise ArgsError(redact_text(f"{variable}: {exc}")) from None
