"""The one contract every stage implements, and the rules every stage shares.

A stage (download, inference, merge, calculate, evaluate, judge, report) is an object with

- ``outputs()``: the files (or folders) it writes;
- ``inputs()``: the files whose *content* its result depends on;
- ``fingerprint()``: the settings that change its result (:func:`k9bench.settings.result_fingerprint`);
- ``done()``: None when its outputs exist and were made from these inputs with these settings, else the
  reason it must run (judged by content and fingerprint, never by modification time);
- ``run()``: the work, resuming from its own checkpoint; returns an exit code;
- ``preflight()``: the quick checks run before any stage of a run starts (default: none).

A stage writes :meth:`Stage.stage_block` into its artifact (top-level key ``"stage"``) each time it
writes it, which is what ``done()`` reads back. This module also owns the rules that are the same for
every stage, so that no stage carries its own copy:

- :func:`check_output`: the one writable-output check (before any expensive work);
- :func:`output_lock`: one lock per output; a second run on the same output refuses at once (exit 2,
  naming the holder's pid and host); a lock whose holder died is taken over;
- :func:`stop_on_signals`: SIGTERM, SIGUSR1 and SIGINT stop the stage: the unit in flight is abandoned
  (or finished, inside :meth:`StopState.deferred`), the checkpoint stays, the exit code is 75;
- :func:`run_stage`: all of the above around ``stage.run()``.

Typical use in a script::

    config = config_from_argv(argv)            # exit 2 on a bad flag, before anything else
    return run_stage(InferenceStage(config))   # outputs checked, locked, signals handled
"""

from __future__ import annotations

import abc
import contextlib
import errno
import fcntl
import hashlib
import json
import logging
import os
import signal
import socket
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

from k9bench.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, StageError
from k9bench.settings import fingerprint_differences

log = logging.getLogger("k9bench.stage")

STOP_SIGNALS = ("SIGTERM", "SIGUSR1", "SIGINT")

REDELIVER_AFTER = 0.02
"""Seconds before a stop signal that a finalizer swallowed is delivered again (:meth:`StopState._unraisable`)."""


class OutputError(StageError):
    """An output path that cannot be written: a folder, under a file, read-only, the input itself."""


class LockHeld(StageError):
    """Another live process is writing the same output."""


class Interrupted(BaseException):
    """Raised in the main thread by the first stop signal (not an ``Exception``: ``except Exception``
    clean-up code in a stage does not swallow it)."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(signal.Signals(signum).name)

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


# --------------------------------------------------------------------------- the writable-output check


def _nearest_existing(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if candidate.exists() or candidate.is_symlink():
            return candidate
    return Path(".")


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and a.samefile(b)
    except OSError:
        return False


def _probe(folder: Path, flag: str, path: Any) -> None:
    try:
        fd, probe = tempfile.mkstemp(prefix=".k9bench-write-probe-", dir=folder)
    except OSError as exc:
        raise OutputError(f"{flag} {path}: the folder {folder} is not writable: no file can be created there "
                          f"({exc.strerror or exc})") from None
    os.close(fd)
    os.unlink(probe)


def check_output(path: str | os.PathLike, *, flag: str, inputs: Iterable[str | os.PathLike | None] = (), folder: bool = False) -> Path:
    """Raise :class:`OutputError` unless ``path`` can be written: for a file, not a folder, not under a
    file, not a special file, writable, not one of ``inputs``; for a folder (``folder=True``), a folder
    or creatable as one. Nothing is created (a probe file is made and removed at once in the nearest
    existing folder)."""
    out = Path(path)
    text = os.fspath(path)
    anchor = _nearest_existing(out)
    if folder:
        if anchor.exists() and not anchor.is_dir():
            raise OutputError(f"{flag} {path}: {anchor} is a file, not a folder")
        _probe(anchor, flag, path)
        return out
    if text.endswith(("/", os.sep)) or out.is_dir():
        raise OutputError(f"{flag} {path} is a folder; give the path of the file to write")
    for given in inputs:
        if given and _same_file(out, Path(given)):
            raise OutputError(f"{flag} {path} is the input file {given}; writing it would destroy the input")
    if out.exists() and not out.is_file():
        raise OutputError(f"{flag} {path} is not a regular file (a device, a pipe or a special file); give a file path")
    if anchor != out and not anchor.is_dir():
        raise OutputError(f"{flag} {path}: {anchor} is a file, not a folder, so nothing can be written under it")
    if out.exists() and not os.access(out, os.W_OK):
        raise OutputError(f"{flag} {path} exists and is not writable")
    _probe(out.parent if anchor == out else anchor, flag, path)
    return out


# --------------------------------------------------------------------------- locks


def lock_path(path: str | os.PathLike) -> Path:
    """The lock file of an output: ``<output>.lock`` beside it (for a folder, beside the folder)."""
    out = Path(path)
    return out.with_name(out.name + ".lock")


def _holder(fd: int) -> str:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        info = json.loads(os.read(fd, 4096).decode() or "{}")
        return f"pid {info.get('pid', '?')} on host {info.get('host', '?')}"
    except (OSError, ValueError):
        return "another process"


def _acquire(target: Path, on_busy) -> int:
    """An fd holding the ``flock`` on ``target`` (made if missing). When another process holds it,
    ``on_busy(fd)`` is called: it raises (refuse) or blocks until the lock is had (wait). The file may have
    been removed, and a new one made, between open and flock: then the lock is taken again on that one."""
    target.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(target, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                os.close(fd)
                raise
            try:
                on_busy(fd)
            except BaseException:
                os.close(fd)
                raise
        try:
            same = os.fstat(fd).st_ino == os.stat(target).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)  # the holder removed the file as it let go: take the lock on a fresh one


@contextlib.contextmanager
def output_lock(path: str | os.PathLike, *, flag: str | None = None, what: str | None = None) -> Iterator[Path]:
    """Hold the lock of one output for the block. A second process asking for the same output gets
    :class:`LockHeld` at once. The lock is an ``flock`` on ``<output>.lock``, so a holder that died (even
    by SIGKILL) holds nothing: its lock file is taken over. The file is removed on release. The refusal
    names ``what`` (else ``flag path``; ``what`` for a ``path`` that is only a lock's name, not a file)."""
    target = lock_path(path)

    def refuse(fd: int) -> None:
        what_held = what or (f"{flag} {path}" if flag else str(path))
        raise LockHeld(f"{what_held} is being written by {_holder(fd)} (lock {target}); wait for that run or stop it") from None

    yield from _held(_acquire(target, refuse), target)


@contextlib.contextmanager
def build_lock(lock: str | os.PathLike, *, what: str, say=None) -> Iterator[Path]:
    """Hold the lock of a shared build product (the demo's tiny model, a video cache) for the block,
    *waiting* for it when another process holds it: that one builds, this one then finds the result.
    ``say`` (default: the log) is told once, ``waiting for <what>: built by pid N on host H (lock ...)``.
    An ``flock`` on the file ``lock``, so a holder that died holds nothing."""
    target = Path(lock)
    told = False

    def wait(fd: int) -> None:
        nonlocal told
        if not told:
            (say or log.info)(f"waiting for {what}: being built by {_holder(fd)} (lock {target})")
            told = True
        fcntl.flock(fd, fcntl.LOCK_EX)

    yield from _held(_acquire(target, wait), target)

def _held(fd: int, target: Path) -> Iterator[Path]:
    """The common end of both locks, once ``fd`` holds the flock on ``target``: write the holder (pid,
    host) into it, yield, and remove it on the way out. A full disk while writing the holder is one
    line naming the lock file (artifact_io's full-disk message), never a traceback."""
    try:
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname()}).encode())
    except OSError as exc:
        from k9bench.artifact_io import write_error

        with contextlib.suppress(OSError):
            os.unlink(target)
        os.close(fd)
        raise write_error(target, exc) from None
    try:
        yield target
    finally:
        with contextlib.suppress(OSError):
            os.unlink(target)
        os.close(fd)


# --------------------------------------------------------------------------- signals


@dataclass
class StopState:
    """What :func:`stop_on_signals` yields: the signal received (if any) and a way to hold it back."""

    received: int | None = None
    """The first stop signal received, or None."""
    _depth: int = 0
    _pending: int | None = None
    _previous: dict = field(default_factory=dict)
    _redeliver: bool = False
    _previous_hook: Any = None

    @property
    def requested(self) -> bool:
        return self.received is not None

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        """A signal arriving inside the block is raised when the block ends (never inside a checkpoint
        append or a final write)."""
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            if self._depth == 0 and self._pending is not None:
                signum, self._pending = self._pending, None
                raise Interrupted(signum)

    def _handle(self, signum: int, frame: Any) -> None:
        # Raise once: SLURM signals every process of a job and a launcher may forward the signal too,
        # so a second one must not interrupt the clean-up of the first (a redelivery is the first again).
        if self.received is not None and not self._redeliver:
            return
        if self.received is None:
            log.warning("received %s: stopping after saving the progress", signal.Signals(signum).name)
        self.received, self._redeliver = self.received or signum, False
        if self._depth:
            self._pending = self.received
            return
        raise Interrupted(self.received)

    def _unraisable(self, unraisable: Any) -> None:
        """``sys.unraisablehook`` inside the block. A signal that lands while a finalizer runs (an object's
        ``__del__``, a weakref callback, run by the garbage collector between any two lines) raises
        :class:`Interrupted` where Python prints "Exception ignored" with a traceback and drops it: the
        stop would be lost. Instead it is delivered again to the main thread a moment later, until it
        lands in the stage's own code; anything else goes to the hook that was there before."""
        if not isinstance(unraisable.exc_value, Interrupted) or self.received is None:
            self._previous_hook(unraisable)
            return
        self._redeliver = True
        main = threading.main_thread().ident
        signum = self.received

        def again() -> None:
            if self in _active and self._redeliver:
                signal.pthread_kill(main, signum)

        timer = threading.Timer(REDELIVER_AFTER, again)
        timer.daemon = True
        timer.start()


_active: list[StopState] = []


@contextlib.contextmanager
def stop_on_signals(names: Iterable[str] = STOP_SIGNALS) -> Iterator[StopState]:
    """Install the stop policy for the block (main thread only; elsewhere the block runs without it).
    Nested use shares the outer policy."""
    if _active:
        yield _active[-1]
        return
    state = StopState()
    if threading.current_thread() is not threading.main_thread():
        yield state
        return
    for name in names:
        sig = getattr(signal, name, None)
        if sig is not None:
            state._previous[sig] = signal.signal(sig, state._handle)
    state._previous_hook, sys.unraisablehook = sys.unraisablehook, state._unraisable
    _active.append(state)
    try:
        yield state
    finally:
        _active.pop()
        sys.unraisablehook = state._previous_hook
        for sig, handler in state._previous.items():
            signal.signal(sig, handler)


def current_stop() -> StopState | None:
    """The stop policy in force, if any (for code deep in a stage that wants ``deferred()``)."""
    return _active[-1] if _active else None


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """:meth:`StopState.deferred` of the policy in force, or nothing when none is."""
    state = current_stop()
    if state is None:
        yield
        return
    with state.deferred():
        yield


# --------------------------------------------------------------------------- content digests

_digests: dict[tuple, str] = {}


def file_digest(path: str | os.PathLike) -> str:
    """SHA-256 of a file's content (cached within the process by path, size and change time)."""
    p = Path(path)
    st = p.stat()
    key = (str(p.resolve()), st.st_size, st.st_mtime_ns, st.st_ino)
    if key not in _digests:
        h = hashlib.sha256()
        with p.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        _digests[key] = h.hexdigest()
    return _digests[key]


# --------------------------------------------------------------------------- the contract


class Stage(abc.ABC):
    """One stage of the pipeline (see the module doc)."""

    name: str = "stage"
    """Short name used in plans and log lines: download, inference, merge, calculate, evaluate, judge, report."""

    @abc.abstractmethod
    def outputs(self) -> list[Path]:
        """The files (or folders) this stage writes; the first holds the stage block by default."""

    def output_flags(self) -> list[str]:
        """The flag naming each output, for messages (default ``--output_file``)."""
        return ["--output_file"] * len(self.outputs())

    def folder_outputs(self) -> set[Path]:
        """Those outputs that are folders (checked as folders)."""
        return set()

    def inputs(self) -> list[Path]:
        """Files whose content the result depends on."""
        return []

    @abc.abstractmethod
    def fingerprint(self) -> dict:
        """The settings that change the result."""

    @abc.abstractmethod
    def run(self) -> int:
        """The work; returns an exit code."""

    def preflight(self) -> None:
        """Checks that need no model weights and no long work (a source that must be in the cache, an
        environment that must import): raise :class:`StageError` (one line) to refuse before *any* stage
        of a run starts. The launcher calls every stage's preflight first (and ``--dry_run`` does);
        the default checks nothing."""

    def input_digests(self) -> dict[str, str]:
        return {str(p): file_digest(p) for p in self.inputs()}

    def stage_block(self) -> dict:
        """What to store in the artifact (top-level ``"stage"``) so that :meth:`done` can judge a rerun."""
        return {"name": self.name, "fingerprint": self.fingerprint(), "inputs": self.input_digests()}

    def record_file(self) -> Path:
        """The output whose header holds this stage's block (default: the first output)."""
        return Path(self.outputs()[0])

    def recorded(self) -> dict | None:
        """The stage block the last complete run stored: the ``stage`` block of the typed header of
        :meth:`record_file` (:func:`k9bench.headers.files.read_header`, the one reader). None when there is none
        or the file cannot be read; a file written by a newer k9bench is refused
        (:class:`k9bench.headers.files.NewerSchema`, one line, exit 2)."""
        from k9bench.artifact_io import ArtifactError
        from k9bench.headers.files import NewerSchema, read_header

        try:
            block = read_header(self.record_file()).stage_block
        except NewerSchema:
            raise
        except ArtifactError:
            return None
        return block if isinstance(block, dict) else None

    def done(self) -> str | None:
        """None when every output exists and was made with these settings from these inputs; else why
        this stage must run."""
        for out in self.outputs():
            if not out.exists():
                return f"{out} is missing"
        block = self.recorded()
        if block is None:
            return f"{self.outputs()[0]} records no stage settings (written by another tool or an older version)"
        diffs = fingerprint_differences(block.get("fingerprint") or {}, self.fingerprint())
        if diffs:
            return "settings differ: " + "; ".join(diffs)
        before = block.get("inputs") or {}
        for path, digest in self.input_digests().items():
            if before.get(path) != digest:
                return f"input {path} changed" if path in before else f"input {path} is not the one it was made from"
        return None

    def describe(self) -> str:
        return f"{self.name} -> {', '.join(str(p) for p in self.outputs())}"


def run_stage(stage: Stage, *, lock: bool = True, check: bool = True) -> int:
    """Check the outputs, take their locks, install the stop policy and run ``stage``.

    A :class:`StageError` becomes one error line and its exit code; a stop signal becomes "stopped by
    SIGTERM ..." and exit 75. Other exceptions propagate (a bug, shown as one)."""
    outputs = stage.outputs()
    try:
        if check:
            folders = stage.folder_outputs()
            inputs = stage.inputs()
            for out, flag in zip(outputs, stage.output_flags()):
                check_output(out, flag=flag, inputs=inputs, folder=out in folders)
        with contextlib.ExitStack() as stack:
            if lock:
                for out, flag in zip(outputs, stage.output_flags()):
                    stack.enter_context(output_lock(out, flag=flag))
            stack.enter_context(stop_on_signals())
            return stage.run()
    except StageError as exc:
        log.error("%s", exc)
        return exc.exit_code
    except Interrupted as stop:
        log.warning("%s: stopped by %s; finished work is saved; rerun the same command to resume", stage.name, stop.name)
        return EXIT_INTERRUPTED


__all__ = [
    "EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE", "Interrupted", "LockHeld", "OutputError", "Stage", "build_lock",
    "StageError", "StopState", "check_output", "current_stop", "deferred", "file_digest", "lock_path", "output_lock",
    "run_stage", "stop_on_signals",
]
