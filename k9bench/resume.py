"""One resumable stage: a final artifact, its checkpoint log, retry of failed entries, and the
refusal to mix entries made with other settings. Used by the inference runner and the judge: any
stage that produces one entry per key (the judge: one entry per idx) can adopt it.

The life of a stage::

    stage = ResumableStage(final_path, read_final=my_reader)       # key: entry["idx"]
    check_output(final_path, flag=..., inputs=[input_path])         # k9bench.stage, before expensive work
    done = stage.load(selected=wanted_keys, retry_failed=True)      # final file, then checkpoint
    stage.check(done, expected_fingerprint, fingerprint_of=...)     # raises ResumeRefused
    for entry in work(pending):                                     # each finished entry, at once
        stage.append(entry)                                         # fsynced: survives SIGKILL
    stage.finish(final_artifact_dict)                               # atomic write, then the log goes

A damaged checkpoint does not stop a resume: a torn final line is dropped and complete bad lines are
moved aside to ``<checkpoint>.rejected`` (:class:`k9bench.artifact_io.CheckpointLog`);
:attr:`ResumableStage.rejected` is their count, for the stage's ``run_stats``. A full disk during an
append or the final write is one :class:`k9bench.artifact_io.WriteFailed` line; the checkpoint stays
valid.

Fingerprints are nested dicts of the settings that change an entry (see
:func:`k9bench.settings.result_fingerprint`), compared by the project's one comparison,
:func:`k9bench.settings.fingerprint_differences` with ``partial=True``: only the keys of
``expected``, a top-level key the entry lacks not compared (files written before a setting existed
stay resumable), so a partial fingerprint (what is known before a model loads) checks part of the
settings early and the full one checks the rest later.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Container, Iterable

from k9bench.artifact_io import ArtifactError, CheckpointLog, write_json_atomic
from k9bench.layout import checkpoint_path
from k9bench.settings import fingerprint_differences

log = logging.getLogger(__name__)


class ResumeRefused(ArtifactError):
    """Earlier files of this stage cannot be reused (unreadable, or made with other settings); the
    message names the file, the entry and what differs (exit 2)."""


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

    @property
    def rejected(self) -> int:
        """Bad checkpoint lines the last :meth:`load` moved aside (``<checkpoint>.rejected``): for ``run_stats``."""
        return self.log.rejected

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
        done.update(self.log.load())  # bad lines are moved aside, a torn last line dropped; an unreadable file raises
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
            diffs = fingerprint_differences(fingerprint_of(done[key]), expected, partial=True)
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


__all__ = ["ResumableStage", "ResumeRefused"]
