"""Reading and writing artifact files: the one reader, atomic writes, checkpoints, full-disk messages.

Every file a stage reads (raw, sim, eval, judge files, sidecars, prompt and subset files) goes through
:func:`read_json` or :func:`read_text`. Whatever is wrong with the file, the caller gets one
:class:`ArtifactError` whose message names the file and the fault, never a traceback:

==========================  ========================================================================
missing                     ``x.json: no such file``
a folder                    ``x.json: is a folder, not a file``
under a file                ``a/x.json: a is a file, not a folder``
a symlink loop              ``x.json: a symbolic link loop``
unreadable                  ``x.json: cannot read: Permission denied``
empty                       ``x.json: the file is empty``
not UTF-8                   ``x.json: not UTF-8 text (byte 0xff at offset 12)``
not JSON                    ``x.json: invalid JSON at line 3 column 7: Expecting ','``
too deeply nested           ``x.json: JSON nested too deeply to read (more than ~N levels)``
==========================  ========================================================================

Writes are atomic (:func:`atomic_file`: a temporary file beside the target, fsynced, renamed over it),
and a failed write (a full disk, a read-only file system) is one :class:`WriteFailed` line naming the
file and, for a full disk, the free space left; the earlier file is left as it was.

:class:`CheckpointLog` is the append-only JSON-lines checkpoint of a per-record stage. An append is
one ``write`` of a whole line, fsynced; when it fails (a full disk) the file is cut back to where
the line began, so the checkpoint stays valid and a rerun resumes. On load, a final line torn by a
kill is dropped (logged), and a complete line that is not a record (garbage, NUL bytes) is moved
aside into ``<checkpoint>.rejected`` with its line number: the resume goes on with every valid record
and :attr:`CheckpointLog.rejected` counts what was moved (stages report it in ``run_stats``).
"""

from __future__ import annotations

import contextlib
import glob
import dataclasses
import errno
import json
import logging
import os
import shutil
import stat
import sys
import tempfile
from pathlib import Path
from typing import IO, Any, Callable, Iterator

from k9bench.errors import EXIT_FAILED, EXIT_USAGE, StageError

log = logging.getLogger(__name__)


class ArtifactError(StageError):
    """An artifact or input file is missing, unreadable or has the wrong layout; the message is one line
    naming the file and the fault. A :class:`k9bench.stage.StageError`: ``run_stage`` prints it as one
    line, exit 2 (bad input) unless the stage says otherwise."""

    exit_code = EXIT_USAGE


class WriteFailed(ArtifactError, OSError):
    """A file could not be written (a full disk, a read-only file system...); exit 1. The earlier file
    and the checkpoint are left valid: the rerun resumes. Also an ``OSError`` carrying the original
    ``errno``, so code that tolerates a failed write (a cache entry) still catches it as one."""

    exit_code = EXIT_FAILED


# ---------------------------------------------------------------------------
# Reading


def _nearest_existing(path: Path) -> Path | None:
    for candidate in path.parents:
        if os.path.lexists(candidate):
            return candidate
    return None


def _open_fault(path: Path, exc: OSError) -> str:
    """The one-line reason ``path`` cannot be opened for reading."""
    code = exc.errno
    if code == errno.ENOENT:
        if os.path.lexists(path):
            return "a symbolic link to nothing (its target is missing)"
        return "no such file"
    if code == errno.EISDIR:
        return "is a folder, not a file"
    if code == errno.ENOTDIR:
        anchor = _nearest_existing(path)
        return f"{anchor} is a file, not a folder" if anchor is not None else "a part of the path is not a folder"
    if code == errno.ELOOP:
        return "a symbolic link loop"
    if code == errno.ENAMETOOLONG:
        return "the file name is too long"
    return f"cannot read: {exc.strerror or exc}"


def read_bytes(path: str | os.PathLike) -> bytes:
    """The content of a regular file; :class:`ArtifactError` naming the file for any other kind of path
    (a folder, a pipe or device, which would block or never end, a loop...)."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
        if stat.S_ISDIR(mode):
            raise ArtifactError(f"{path}: is a folder, not a file")
        if not stat.S_ISREG(mode):
            raise ArtifactError(f"{path}: not a regular file (a device, a pipe or a special file)")
        with open(path, "rb") as fh:
            return fh.read()
    except OSError as exc:
        raise ArtifactError(f"{path}: {_open_fault(path, exc)}") from None


def decode_utf8(data: bytes, where: str | os.PathLike) -> str:
    """``data`` as UTF-8 text; :class:`ArtifactError` naming ``where`` and the first bad byte."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ArtifactError(f"{where}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})") from None


def read_text(path: str | os.PathLike, *, allow_empty: bool = False) -> str:
    """A UTF-8 text file (a prompt file, a subset list...). Raises :class:`ArtifactError` naming the file
    for every fault in the module doc's table; an empty (or blank) file too unless ``allow_empty``."""
    text = decode_utf8(read_bytes(path), path)
    if not allow_empty and not text.strip():
        raise ArtifactError(f"{path}: the file is empty" if not text else f"{path}: the file holds only white space")
    return text


def parse_json(text: str, where: str | os.PathLike) -> Any:
    """``json.loads`` with every failure as one :class:`ArtifactError` naming ``where``."""
    if not text.strip():
        raise ArtifactError(f"{where}: the file is empty" if not text else f"{where}: the file holds only white space")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ArtifactError(f"{where}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except RecursionError:
        raise ArtifactError(f"{where}: JSON nested too deeply to read (more than ~{sys.getrecursionlimit()} levels)") from None
    except (ValueError, OverflowError) as exc:  # e.g. an integer with more digits than Python converts
        raise ArtifactError(f"{where}: unreadable JSON value: {str(exc).splitlines()[0]}") from None


def read_json(path: str | os.PathLike) -> Any:
    """THE reader of every JSON artifact and input file: its content, or one :class:`ArtifactError`
    naming the file and the fault (see the module doc). Never a traceback."""
    return parse_json(decode_utf8(read_bytes(path), path), path)


# ---------------------------------------------------------------------------
# Writing


def _json_default(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj):
        return obj.to_dict() if hasattr(obj, "to_dict") else dataclasses.asdict(obj)
    if hasattr(obj, "item"):  # numpy scalars
        return obj.item()
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def dumps(obj: Any, *, indent: int | None = 2) -> str:
    """JSON text as we write it: UTF-8 characters kept, NaN refused."""
    return json.dumps(obj, indent=indent, ensure_ascii=False, default=_json_default, allow_nan=False)


def _human_bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if value < 1024 or unit == "TB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def free_space(path: str | os.PathLike) -> str:
    """``"12.3 MB free in /data"`` for the file system holding ``path`` (or its nearest existing folder)."""
    target = Path(path)
    folder = target if target.is_dir() else (_nearest_existing(target) or Path("."))
    try:
        return f"{_human_bytes(shutil.disk_usage(folder).free)} free in {folder}"
    except OSError:
        return f"free space in {folder} unknown"


def write_error(path: str | os.PathLike, exc: OSError) -> WriteFailed:
    """One :class:`WriteFailed` line for an OSError while writing ``path`` (a full disk names the free space)."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        what = "no space left on device" if exc.errno == errno.ENOSPC else "disk quota exceeded"
        failed = WriteFailed(f"{path}: cannot write: {what} ({free_space(path)}); free some space and rerun the same command")
    else:
        failed = WriteFailed(f"{path}: cannot write: {exc.strerror or exc}")
    failed.errno = exc.errno
    return failed


def _read_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _read_umask()  # read once at import: os.umask is process-wide, so never toggle it in threads


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike, mode: str = "w") -> Iterator[IO]:
    """Open a temporary file beside ``path`` for writing; on success fsync it and rename it over ``path``.

    ``mode`` is ``"w"`` (UTF-8 text) or ``"wb"``. The file gets the mode a plain ``open`` would give it
    (0666 minus the umask, not mkstemp's 0600). On any exception the temporary file is removed and the
    target is left as it was: it is never half-written. An OSError (a full disk) becomes one
    :class:`WriteFailed` line naming ``path``. The one home of atomic writes in this project.
    """
    path = Path(path)
    tmp = None
    fh = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.fchmod(fd, 0o666 & ~_UMASK)
        fh = os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"}))
        yield fh
        fh.flush()
        os.fsync(fh.fileno())
        fh.close()
        fh = None
        os.replace(tmp, path)
        tmp = None
    except WriteFailed:
        raise
    except OSError as exc:
        raise write_error(path, exc) from None
    finally:
        if fh is not None:
            with contextlib.suppress(OSError):  # closing flushes again: a full disk would raise twice
                os.close(fh.fileno())
            with contextlib.suppress(OSError, ValueError):
                fh.close()
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def remove_stale_temps(path: str | os.PathLike) -> list[Path]:
    """Remove the temporary files a killed :func:`atomic_file` left beside ``path`` (``.<name>.*.tmp``: a
    SIGKILL skips its cleanup) and return them. Only for a caller that holds the lock on ``path``: a write
    in flight by another process would lose its temporary file. Files that cannot be removed are left."""
    path = Path(path)
    removed = []
    with contextlib.suppress(OSError):
        for tmp in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
            with contextlib.suppress(OSError):
                tmp.unlink()
                removed.append(tmp)
    return removed


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to ``path`` atomically (see :func:`atomic_file`); any failure raises."""
    with atomic_file(path, "w") as fh:
        fh.write(text)
    return Path(path)


def write_json_atomic(path: str | os.PathLike, obj: Any) -> Path:
    """Serialise ``obj`` (dataclasses welcome) and write it atomically."""
    return write_text_atomic(path, dumps(obj) + "\n")


# ---------------------------------------------------------------------------
# Checkpoints


class CheckpointLog:
    """An append-only JSON-lines checkpoint of finished records (see the module doc).

    Each :meth:`append` writes one whole line, fsynced, so a record that was appended survives a
    SIGKILL. :meth:`load` reads the records back, keeps the last record of each key, drops a final line
    torn by a kill, and moves complete bad lines aside (:attr:`rejected` counts them). Callers skip keys
    already present, so no record is ever produced twice.
    """

    def __init__(self, path: str | os.PathLike, key: Callable[[dict], Any] = lambda r: r["idx"]):
        self.path = Path(path)
        self.key = key
        self._fd: int | None = None
        self.rejected = 0
        """Complete lines of the last :meth:`load` that were not records, moved to :attr:`rejected_path`."""
        self.torn = 0
        """1 when the last :meth:`load` dropped a torn final line, else 0."""

    @property
    def rejected_path(self) -> Path:
        """Where bad lines go: ``<checkpoint>.rejected`` (JSON lines: line number, reason, text)."""
        return self.path.with_name(self.path.name + ".rejected")

    def _record_of(self, line: bytes) -> tuple[Any, dict]:
        if b"\x00" in line:
            raise ValueError("NUL bytes in the line")
        rec = json.loads(line.decode("utf-8"))
        if not isinstance(rec, dict):
            raise ValueError(f"a JSON {type(rec).__name__}, not a record")
        key = self.key(rec)
        hash(key)  # an unhashable key (a list idx) is a bad line too
        return key, rec

    def load(self) -> dict[Any, dict]:
        """Records already checkpointed, by key (empty when there is no file)."""
        self.rejected = self.torn = 0
        self.close()  # a repaired file is a new inode: appends must reopen it
        if not os.path.lexists(self.path):
            return {}
        data = read_bytes(self.path)
        out: dict[Any, dict] = {}
        kept: list[bytes] = []
        bad: list[dict] = []
        lines = data.split(b"\n")
        tail = lines.pop()  # after the last newline: b"" unless the final line was torn
        if tail:
            self.torn = 1
            log.warning("%s: dropping a torn final line (%d bytes) left by an interrupted run", self.path, len(tail))
        for lineno, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                key, rec = self._record_of(line)
            except (ValueError, KeyError, TypeError, RecursionError) as exc:
                reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                bad.append({"line": lineno, "reason": reason, "text": line.decode("utf-8", "backslashreplace")[:10000]})
                continue
            out[key] = rec
            kept.append(line)
        if bad:
            self.rejected = len(bad)
            try:
                with open(self.rejected_path, "a", encoding="utf-8") as fh:
                    for item in bad:
                        fh.write(dumps({"checkpoint": str(self.path), **item}, indent=None) + "\n")
                    fh.flush()
                    os.fsync(fh.fileno())
            except OSError as exc:
                raise write_error(self.rejected_path, exc) from None
            log.warning("%s: %d bad line%s (line %s) moved aside to %s; resuming with the %d valid record%s", self.path,
                        len(bad), "" if len(bad) == 1 else "s", ", ".join(str(b["line"]) for b in bad), self.rejected_path,
                        len(out), "" if len(out) == 1 else "s")
        if bad or tail:
            write_text_atomic(self.path, b"".join(line + b"\n" for line in kept).decode("utf-8"))
        return out

    def append(self, record: dict) -> None:
        """Append one record durably; on a failed write the file is cut back to the last whole line
        and :class:`WriteFailed` names it (the checkpoint stays valid)."""
        line = (dumps(record, indent=None) + "\n").encode("utf-8")
        try:
            if self._fd is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
        except OSError as exc:
            raise write_error(self.path, exc) from None
        start = os.lseek(self._fd, 0, os.SEEK_END)
        try:
            view = memoryview(line)
            while view:
                view = view[os.write(self._fd, view):]
            os.fsync(self._fd)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, start)
            self.close()
            raise write_error(self.path, exc) from None

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    def remove(self) -> None:
        """Delete the checkpoint (after the final artifact is safely written)."""
        self.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    def __enter__(self) -> "CheckpointLog":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
