"""One resumable stage: a final artifact, its checkpoint log, retry of failed entries, and the
refusal to mix entries made with other settings. Used by the inference runner; written so that any
stage that produces one entry per key (the judge: one entry per idx) can adopt it.

The life of a stage::

    stage = ResumableStage(final_path, read_final=my_reader)       # key: entry["idx"]
    check_output_location(final_path, inputs=[input_path])          # before any expensive work
    done = stage.load(selected=wanted_keys, retry_failed=True)      # final file, then checkpoint
    stage.check(done, expected_fingerprint, fingerprint_of=...)     # raises ResumeRefused
    for entry in work(pending):                                     # each finished entry, at once
        stage.append(entry)                                         # fsynced: survives SIGKILL
    stage.finish(final_artifact_dict)                               # atomic write, then the log goes

Fingerprints are nested dicts of the settings that change an entry (see
:func:`k9bench.settings.result_fingerprint`). :func:`fingerprint_mismatch` compares an entry's
with the run's, key by key, recursing into dicts present on both sides; a top-level key the entry
lacks is not compared (files written before a setting existed stay resumable), and only the keys of
``expected`` are compared, so a partial fingerprint (what is known before a model loads) checks
part of the settings early and the full one checks the rest later.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Container, Iterable

from k9bench.artifacts import ArtifactError, CheckpointLog, write_json_atomic
from k9bench.layout import checkpoint_path
from k9bench.settings import fingerprint_differences

log = logging.getLogger(__name__)


class ResumeRefused(ValueError):
    """Earlier files of this stage cannot be reused (unreadable, or made with other settings); the
    message names the file, the entry and what differs."""


class OutputLocationError(ValueError):
    """The output path cannot be written (a folder, under a file, read-only, the input itself)."""


def _first_existing(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if candidate.exists() or candidate.is_symlink():
            return candidate
    return Path(".")


def check_output_location(path: str | os.PathLike, *, inputs: Iterable[str | os.PathLike] = (), flag: str = "--output_file") -> Path:
    """Raise :class:`OutputLocationError` unless ``path`` (and a checkpoint beside it) can be written:
    not a folder, no file where a folder must be, a writable folder, not one of ``inputs``.
    Nothing is created (a probe file is made and removed at once in the nearest existing folder)."""
    out = Path(path)
    if str(path).endswith(("/", os.sep)) or (out.exists() and out.is_dir()):
        raise OutputLocationError(f"{flag} {path} is a folder; give the path of the file to write")
    for given in inputs:
        try:
            if given and out.exists() and Path(given).exists() and out.samefile(given):
                raise OutputLocationError(f"{flag} {path} is the input file {given}; writing it would destroy the input")
        except OSError:
            pass
    parent = out.parent if str(out.parent) else Path(".")
    anchor = _first_existing(parent)
    if not anchor.is_dir():
        raise OutputLocationError(f"{flag} {path}: {anchor} is a file, not a folder, so nothing can be written under it")
    if out.exists() and not os.access(out, os.W_OK):
        raise OutputLocationError(f"{flag} {path} exists and is not writable")
    _probe_writable(anchor, flag, path)
    return out



def _probe_writable(anchor: Path, flag: str, path: Any) -> None:
    """Raise :class:`OutputLocationError` unless a file can be created in ``anchor`` (made and removed at once)."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".k9bench-write-probe-", dir=anchor)
    except OSError as exc:
        raise OutputLocationError(f"{flag} {path}: the folder {anchor} is not writable ({exc.strerror or exc})") from None
    os.close(fd)
    os.unlink(probe)

def check_output_folder(path: str | os.PathLike, *, flag: str) -> Path:
    """Raise :class:`OutputLocationError` unless ``path`` is, or can become, a writable folder
    (nothing is created; a probe file is made and removed at once in the nearest existing folder)."""
    folder = Path(path)
    anchor = _first_existing(folder)
    if not anchor.is_dir():
        raise OutputLocationError(f"{flag} {path}: {anchor} is a file, not a folder")
    _probe_writable(anchor, flag, path)
    return folder


def _normal(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def _walk(have: Any, want: Any, path: str, prior: dict, current: dict) -> None:
    if isinstance(want, dict) and isinstance(have, dict):
        for key in want:
            _walk(have.get(key), want[key], f"{path}.{key}", prior, current)
        return
    prior[path], current[path] = have, want


def fingerprint_mismatch(entry: dict, expected: dict) -> list[str]:
    """The differences between an entry's fingerprint and the run's (see the module doc): only the
    keys of ``expected``; a top-level key the entry lacks is not compared, inside a dict present on
    both sides a missing key counts as None."""
    prior: dict[str, Any] = {}
    current: dict[str, Any] = {}
    have, want = _normal(entry), _normal(expected)
    for key in want:
        if key in have:
            _walk(have[key], want[key], key, prior, current)
    return fingerprint_differences(prior, current)


@dataclass
class ResumableStage:
    """A stage's final file and the checkpoint log beside it (see the module doc)."""

    final: Path
    """The final artifact (written atomically by :meth:`finish`)."""
    read_final: Callable[[Path], Iterable[dict]]
    """Reads the entries of an existing final file; raises ``ArtifactError``/``ValueError`` when it cannot."""
    key: Callable[[dict], Any] = lambda entry: entry["idx"]
    """An entry's key (one entry per key; the last one wins)."""
    is_failed: Callable[[dict], bool] = lambda entry: entry.get("error") is not None
    """Entries to redo on a rerun unless ``retry_failed`` is False."""
    log: CheckpointLog = field(init=False)
    """The append-only checkpoint (``<final>.partial.jsonl``)."""

    def __post_init__(self) -> None:
        self.final = Path(self.final)
        self.log = CheckpointLog(checkpoint_path(self.final), key=self.key)

    @property
    def checkpoint(self) -> Path:
        return self.log.path

    @property
    def where(self) -> Path:
        """The file earlier entries come from, for messages: the checkpoint when there is one."""
        return self.checkpoint if self.checkpoint.exists() else self.final

    def load(self, *, selected: Container | None = None, retry_failed: bool = True) -> dict[Any, dict]:
        """Finished entries by key: the final file's, then the checkpoint's (later wins), restricted to
        ``selected``; failed ones are dropped (to be redone) when ``retry_failed``."""
        done: dict[Any, dict] = {}
        if self.final.exists():
            try:
                for entry in self.read_final(self.final):
                    done[self.key(entry)] = entry
            except (ArtifactError, ValueError, KeyError, TypeError) as exc:
                raise ResumeRefused(f"{self.final}: exists but cannot be resumed from ({exc}); move it away or pick another output") from None
        try:
            done.update(self.log.load())
        except Exception as exc:  # a corrupt line, an unreadable file
            raise ResumeRefused(f"{self.checkpoint}: cannot be resumed from ({exc}); move it away to start over") from None
        if selected is not None:
            done = {k: v for k, v in done.items() if k in selected}
        if retry_failed:
            failed = [k for k, v in done.items() if self.is_failed(v)]
            if failed:
                log.info("retrying %d failed entr%s from the previous run", len(failed), "y" if len(failed) == 1 else "ies")
            for k in failed:
                del done[k]
        return done

    def check(self, done: dict[Any, dict], expected: dict, *, fingerprint_of: Callable[[dict], dict] = lambda entry: entry) -> None:
        """Raise :class:`ResumeRefused` when an entry was made with settings other than ``expected``."""
        for key in sorted(done, key=str):
            diffs = fingerprint_mismatch(fingerprint_of(done[key]), expected)
            if diffs:
                raise ResumeRefused(f"{self.where}: idx {key} was produced with other settings ({'; '.join(diffs)})")

    def append(self, entry: dict) -> None:
        """Checkpoint one finished entry (flushed and fsynced)."""
        self.log.append(entry)

    def close(self) -> None:
        """Close the checkpoint (it stays on disk until :meth:`finish`)."""
        self.log.close()

    def finish(self, artifact: Any) -> Path:
        """Write the final artifact atomically, then remove the checkpoint."""
        self.log.close()
        write_json_atomic(self.final, artifact)
        self.log.remove()
        return self.final


__all__ = ["OutputLocationError", "ResumableStage", "ResumeRefused", "check_output_folder", "check_output_location", "fingerprint_mismatch"]
