"""Where people's work is kept: each answer or label durable the moment it is submitted.

A :class:`Book` is an append-only checkpoint (:class:`k9bench.artifact_io.CheckpointLog`: one whole
fsynced line per record, a line torn by a kill dropped on load) plus an exported file rewritten
atomically after every record (:func:`k9bench.artifact_io.write_json_atomic`). Closing the tab, killing
the server or losing power loses nothing that was saved; a restart reads the checkpoint back and goes
on at the first item without a record. The checkpoint stays beside the exported file: it is the
record of the session (a record given twice, e.g. from two tabs, keeps the first).

The exported files:

- answers: a raw file ``raw_human-<annotator>.json`` (SPEC section 2), one record per answered
  question, ``model_name`` ``human-<annotator>``, which calculate, evaluate and the judge take as a
  model's; the ``people`` block says who, in which order, with which instruction;
- labels: a labels file ``labels_<labeller>_<model>.json`` (:func:`k9bench.people.labels.labels_document`).
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Callable

from k9bench.artifact_io import CheckpointLog, write_json_atomic
from k9bench.layout import checkpoint_path

log = logging.getLogger("k9bench.people")


class Book:
    """Records by idx: the checkpoint of ``export_path`` and the file :attr:`export` makes of them."""

    def __init__(self, export_path: str | Path, export: Callable[[list[dict]], dict]):
        self.export_path = Path(export_path)
        self.export = export
        self._lock = threading.Lock()
        self._log = CheckpointLog(checkpoint_path(self.export_path))
        self.records: dict[int, dict] = self._log.load()
        if self._log.rejected or self._log.torn:
            log.warning("%s: %d bad line(s) set aside, %d torn line dropped; %d record(s) kept", self._log.path, self._log.rejected,
                        self._log.torn, len(self.records))

    @property
    def checkpoint(self) -> Path:
        return self._log.path

    def add(self, record: dict) -> bool:
        """Keep ``record`` durably, then rewrite the exported file; False (nothing written) when its idx
        already has one."""
        with self._lock:
            if record["idx"] in self.records:
                return False
            self._log.append(record)
            self.records[record["idx"]] = record
            self.write_export()
            return True

    def write_export(self) -> Path:
        """Write the exported file from the records kept (atomically)."""
        return write_json_atomic(self.export_path, self.export([self.records[i] for i in sorted(self.records)]))

    def close(self) -> None:
        self._log.close()
