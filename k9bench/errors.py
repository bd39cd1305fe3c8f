"""The exit codes every script and stage shares, and :class:`StageError`, the one-line refusal.

Kept apart from :mod:`k9bench.stage` (which uses them, and whose lock code reports a full disk through
:mod:`k9bench.artifact_io`) so that the low layers (``artifact_io``) can raise a :class:`StageError`
without importing the stage contract: no import circle.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 75
"""EX_TEMPFAIL: stopped by a signal with the progress saved; rerun the same command to resume."""


class StageError(Exception):
    """A problem the user must fix, told in one line (no traceback); ``exit_code`` is the script's exit."""

    exit_code = EXIT_USAGE

    def __init__(self, message: str, exit_code: int | None = None):
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


__all__ = ["EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE", "StageError"]
