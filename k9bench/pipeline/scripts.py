"""The scripts as the launcher sees them: their own parsers (to check every ``*_ARGS`` before anything
runs) and their ``main()`` (to run a stage in this process; no shell, no new interpreter).

A script's parser and ``config_from_argv`` come from the package module its stage owner exposes
(``k9bench.download``, ``k9bench.inference.stage``, ``k9bench.scoring``, ``k9bench.judge``); while a
module does not expose them yet, the root script's own ``build_parser``/``main`` are used (the repository
root is on ``sys.path``: the launcher puts it there).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import logging
from types import ModuleType

log = logging.getLogger("k9bench.pipeline")

PACKAGE_MODULES = {
    "download_videos": "k9bench.download",
    "eval_video_llm": "k9bench.inference.stage",
    "evaluate_results": "k9bench.scoring",
    "subjective_evals": "k9bench.judge",
}
"""Root script -> the package module that holds its parser and ``config_from_argv``."""

ENTRY_POINTS = {"merge": "k9bench.merge", "tiny_model": "k9bench.tiny_model", "demo": "k9bench.demo"}
"""The ``python -m`` tools the launcher runs besides the four scripts."""


def _package(script: str) -> ModuleType | None:
    name = PACKAGE_MODULES.get(script)
    if not name:
        return None
    try:
        module = importlib.import_module(name)
    except ImportError:
        return None
    return module if hasattr(module, "build_parser") else None


def script_module(script: str) -> ModuleType:
    """The root script (``eval_video_llm``...) or ``python -m`` tool (``merge``...) as a module."""
    return importlib.import_module(ENTRY_POINTS.get(script, script))


def build_parser(script: str) -> argparse.ArgumentParser:
    """The script's own parser."""
    module = _package(script) or script_module(script)
    return module.build_parser()


class ArgsError(ValueError):
    """A ``*_ARGS`` value its script refuses (one line, redacted)."""


def check_argv(script: str, argv: list[str], variable: str) -> None:
    """Parse ``argv`` as ``script`` will (``config_from_argv`` where the package has it, which also checks
    values that need each other; else the parser); raise :class:`ArgsError` naming ``variable``."""
    from k9bench.redact import redact_text
    from k9bench.stage import StageError

    module = _package(script)
    parse = getattr(module, "config_from_argv", None) if module is not None else None
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured), contextlib.redirect_stdout(captured):
            if parse is not None:
                parse(list(argv))
            else:
                build_parser(script).parse_args(list(argv))
    except SystemExit as exc:
        if exc.code in (0, None):
            raise ArgsError(f"{variable}: {script}.py printed its help instead of running; remove -h/--help") from None
        lines = [ln.strip() for ln in captured.getvalue().splitlines() if ln.strip() and not ln.startswith("usage:")]
        why = lines[-1] if lines else f"refused (exit {exc.code})"
        raise ArgsError(redact_text(f"{variable}: {why}")) from None
    except StageError as exc:
        raise ArgsError(redact_text(f"{variable}: {exc}")) from None


def run_main(script: str, argv: list[str]) -> int:
    """``script``'s ``main(argv)`` in this process; its exit code (a ``SystemExit`` is one too)."""
    module = script_module(script)
    try:
        code = module.main(list(argv))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    return int(code or 0)
