"""Logging, set up once from a script's ``main`` (:func:`setup_logging`): the line format, the level from
``-v``/``-q``, the redacting filter on every line, and a handler that writes to the ``sys.stderr`` of the
moment (:class:`StderrHandler`). Imports nothing of the package at module level, so any ``main`` may use it."""

from __future__ import annotations

import logging
import sys

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
"""The scripts' line format (:func:`setup_logging`)."""
SHORT_FORMAT = "%(levelname)s %(name)s: %(message)s"
"""The helper commands' line format (:func:`basic_logging`)."""


class StderrHandler(logging.StreamHandler):
    """A stream handler that writes to whatever ``sys.stderr`` is when a line is logged, not the object
    it was when logging was set up: a ``main()`` called under a capture that is later closed (a test, an
    embedding tool) leaves no handler behind that fails on a closed file."""

    @property
    def stream(self):  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:
        pass


def setup_logging(verbose: int = 0, quiet: bool = False) -> None:
    """Configure the root logger once, from a script's ``main``.

    Level INFO by default, DEBUG with ``-v``, WARNING with ``-q``. Noisy
    third-party loggers stay at WARNING unless ``-vv``. Every line passes the redacting filter
    (:mod:`k9bench.redact`): no entry point can forget it.
    """
    from k9bench.redact import install_log_filter

    level = logging.WARNING if quiet else (logging.DEBUG if verbose else logging.INFO)
    logging.basicConfig(level=level, format=LOG_FORMAT, datefmt="%H:%M:%S", handlers=[StderrHandler()], force=True)
    install_log_filter()
    for name in ("httpx", "httpcore", "httpx2", "httpcore2", "openai", "urllib3", "filelock", "huggingface_hub", "datasets", "PIL", "matplotlib"):
        # NOTSET with -vv, so an earlier call in the same process does not keep them quiet
        logging.getLogger(name).setLevel(logging.WARNING if verbose < 2 else logging.NOTSET)


def basic_logging(level: int, fmt: str = SHORT_FORMAT) -> None:
    """Logging for a helper command's ``main`` (``python -m k9bench.<tool>``): ``level`` and ``fmt`` on the root
    logger through :class:`StderrHandler`, unless something configured the root logger already (then it is
    left as it is)."""
    logging.basicConfig(level=level, format=fmt, handlers=[StderrHandler()])
