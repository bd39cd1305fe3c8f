"""Progress that reaches a person: a bar on a terminal, periodic log lines in a batch log.

Every long stage (download, inference, calculate, judge) reports through :class:`ProgressLog`. On a
terminal it draws a tqdm bar (unless ``K9BENCH_NO_PROGRESS`` is set). Anywhere else (a SLURM log, a
pipe, a file) it writes a log line at least every ``K9BENCH_PROGRESS_INTERVAL`` seconds (default 60)
and at each tenth of the work::

    inference: 120/4744 (2%), 1.3 questions/s, ETA 59 min, 3 failed

Library progress bars (transformers' weight loading, the Hub's downloads) are turned off where ours
are, so that no bar fragments land in a log.
"""

from __future__ import annotations

import logging
import math
import os
import sys
import time
from typing import Any, Callable

log = logging.getLogger("k9bench.progress")

DEFAULT_INTERVAL = 60.0
"""Seconds between two progress lines in a batch log (``K9BENCH_PROGRESS_INTERVAL`` overrides)."""


def progress_enabled() -> bool | None:
    """``disable`` value for tqdm: None lets tqdm stay quiet when stderr is not a terminal."""
    return True if os.environ.get("K9BENCH_NO_PROGRESS") else None


def on_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def bars_shown() -> bool:
    """True when a progress bar would be drawn: stderr is a terminal and ``K9BENCH_NO_PROGRESS`` is unset."""
    return on_terminal() and progress_enabled() is None


def progress_interval() -> float:
    """Seconds between progress lines: ``K9BENCH_PROGRESS_INTERVAL`` if it is a positive number, else 60."""
    text = os.environ.get("K9BENCH_PROGRESS_INTERVAL", "")
    try:
        value = float(text)
    except ValueError:
        return DEFAULT_INTERVAL
    return value if math.isfinite(value) and value > 0 else DEFAULT_INTERVAL


def quiet_library_progress_bars() -> None:
    """Turn off the libraries' own bars (transformers' "Loading weights", the Hub's downloads) where ours
    are off. Call after importing transformers, before loading a model."""
    if bars_shown():
        return
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    except ImportError:  # pragma: no cover - transformers is a runtime requirement
        pass
    try:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
    except ImportError:  # pragma: no cover
        pass


def format_duration(seconds: float) -> str:
    """``45 s``, ``12 min``, ``3 h 05 min``."""
    if not math.isfinite(seconds) or seconds < 0:
        return "unknown"
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = seconds / 60
    if minutes < 90:
        return f"{minutes:.0f} min"
    hours, rest = divmod(int(round(minutes)), 60)
    return f"{hours} h {rest:02d} min"


class ProgressLog:
    """Progress of one stage over ``total`` units (see the module doc).

    ``update(n, failed=k)`` after each finished unit (``failed`` counts those of the ``n`` that failed);
    ``close()`` at the end writes the last line. Safe to use as a context manager."""

    def __init__(self, stage: str, total: int, *, unit: str = "questions", interval: float | None = None,
                 logger: logging.Logger | None = None, clock: Callable[[], float] = time.monotonic, bar: bool | None = None):
        self.stage = stage
        self.total = max(0, int(total))
        self.unit = unit
        self.interval = progress_interval() if interval is None else float(interval)
        self.log = logger or log
        self.clock = clock
        self.done = 0
        self.failed = 0
        self.started = clock()
        self._last_line = self.started
        self._next_tenth = 1
        self._closed = False
        self._bar: Any = None
        if bars_shown() if bar is None else bar:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=self.total, unit=unit[:1] or "it", desc=stage, dynamic_ncols=True)

    def __enter__(self) -> "ProgressLog":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def line(self) -> str:
        """The progress line as it stands."""
        elapsed = max(self.clock() - self.started, 1e-9)
        rate = self.done / elapsed
        pct = 100.0 * self.done / self.total if self.total else 100.0
        parts = [f"{self.stage}: {self.done}/{self.total} ({pct:.0f}%)"]
        parts.append(f"{rate:.2f} {self.unit}/s" if rate < 10 else f"{rate:.1f} {self.unit}/s")
        left = self.total - self.done
        if left > 0:
            parts.append(f"ETA {format_duration(left / rate) if rate > 0 else 'unknown'}")
        else:
            parts.append(f"took {format_duration(elapsed)}")
        parts.append(f"{self.failed} failed")
        return ", ".join(parts)

    def update(self, n: int = 1, *, failed: int = 0) -> None:
        self.done += n
        self.failed += failed
        if self._bar is not None:
            self._bar.update(n)
            if self.failed:
                self._bar.set_postfix(failed=self.failed, refresh=False)
            return
        now = self.clock()
        tenth_reached = False
        if self.total:
            while self._next_tenth <= 10 and self.done * 10 >= self._next_tenth * self.total:
                self._next_tenth += 1
                tenth_reached = True
        if tenth_reached or now - self._last_line >= self.interval:
            self._last_line = now
            if self.done < self.total or not self._closed:
                self.log.info("%s", self.line())

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._bar is not None:
            self._bar.close()
            return
        if self.total and self._next_tenth <= 10:
            self.log.info("%s", self.line())
