"""The vLLM engine's own reason for dying, read from its log lines.

vLLM's engine core and its workers are child processes; when one fails, the error reaching our process is a
bare ``EngineDeadError`` ("See stack trace (above) for the root cause"): the cause is only in the children's
log, which vLLM writes to standard output (its logging handler) and standard error (tracebacks).
:class:`EngineLog` passes this process's file descriptors 1 and 2, which the children inherit, through pipes,
writing every byte on to where it went before and keeping the last :data:`KEPT_LINES` lines, so that
:meth:`EngineLog.reason` can name the error in one line.
"""

from __future__ import annotations

import collections
import os
import re
import threading
import time

KEPT_LINES = 400
"""Lines of the engines' output kept for :meth:`EngineLog.reason`."""
REASON_WAIT_S = 2.0
"""How long :meth:`EngineLog.reason` waits for the dead engine's last lines (they may trail its death by a moment)."""
LOG_PREFIX = re.compile(r"^(?:\([^)]*\)\s*)?(?:ERROR\s+\S+\s+\S+\s+\[[^\]]*\]\s*)?")
"""vLLM's process tag and log header (``(EngineCore pid=1) ERROR 12-05 00:54:02 [core.py:1512] ``)."""
ERROR_LINE = re.compile(r"^(?:[\w.]+\.)?(\w*(?:Error|Exception)): (.+)$")
"""A Python exception's last traceback line (``RuntimeError: ...``)."""
FDS = (1, 2)
"""The file descriptors passed through: standard output and standard error."""


def reason_in(lines: list[str]) -> str | None:
    """The last exception named in ERROR lines of vLLM's processes (``RuntimeError: ...``), or None."""
    for line in reversed(lines):
        if "ERROR" not in line:
            continue
        found = ERROR_LINE.match(LOG_PREFIX.sub("", line.strip()))
        if found:
            return f"{found.group(1)}: {found.group(2)}"
    return None


class EngineLog:
    """This process's standard output and error passed through pipes, their last lines kept (see the module doc)."""

    def __init__(self) -> None:
        self._lines: collections.deque[str] = collections.deque(maxlen=KEPT_LINES)
        self._lock = threading.Lock()
        self._saved: dict[int, int] = {}
        self._pumps: list[threading.Thread] = []

    @classmethod
    def start(cls) -> "EngineLog":
        """Route :data:`FDS` through pipes (before the engine's processes start, so that they inherit them)."""
        log = cls()
        for fd in FDS:
            original = os.dup(fd)
            read_end, write_end = os.pipe()
            os.dup2(write_end, fd)
            os.close(write_end)
            log._saved[fd] = original
            pump = threading.Thread(target=log._pump, args=(read_end, original), name=f"k9bench-vllm-fd{fd}", daemon=True)
            pump.start()
            log._pumps.append(pump)
        return log

    def _pump(self, read_end: int, original: int) -> None:
        partial = b""
        while True:
            try:
                chunk = os.read(read_end, 65536)
            except OSError:
                break
            if not chunk:  # every process holding the pipe let it go
                break
            try:
                os.write(original, chunk)
            except OSError:  # the terminal went away: keep reading, so that no writer blocks
                pass
            *whole, partial = (partial + chunk).split(b"\n")
            if len(partial) > 65536:  # a line without end: keep its start only
                whole.append(partial[:65536])
                partial = b""
            with self._lock:
                self._lines.extend(line.decode("utf-8", "replace") for line in whole)
        for fd in (read_end, original):
            os.close(fd)

    def lines(self) -> list[str]:
        """The kept lines, oldest first."""
        with self._lock:
            return list(self._lines)

    def reason(self, wait: float = REASON_WAIT_S) -> str | None:
        """The engine's own error (see :func:`reason_in`), waiting up to ``wait`` seconds for its lines to come
        through the pipes; None when its log names none."""
        deadline = time.monotonic() + wait
        while True:
            found = reason_in(self.lines())
            if found or time.monotonic() >= deadline:
                return found
            time.sleep(0.05)

    def stop(self, wait: float = REASON_WAIT_S) -> None:
        """Give the file descriptors back, then wait up to ``wait`` seconds for the pumps to pass on what is left
        (each ends, closing its ends, when the last child holding its pipe lets it go)."""
        for fd, original in self._saved.items():
            os.dup2(original, fd)
        self._saved = {}
        deadline = time.monotonic() + wait
        for pump in self._pumps:
            pump.join(max(0.0, deadline - time.monotonic()))


__all__ = ["EngineLog", "KEPT_LINES", "reason_in"]
