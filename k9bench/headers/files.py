"""Reading and writing headers: :func:`read_header` (the one reader), :func:`header_of`, :func:`stamped`
(the one writer) and the refusal of a newer version, :class:`NewerSchema` (see :mod:`k9bench.headers`)."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Mapping

from k9bench.artifact_io import ArtifactError, read_json
from k9bench.headers.kinds import HEADER_CLASSES, HEADER_KEY, SCHEMA_VERSIONS, STAGE_KINDS, Header, JudgeHeader

log = logging.getLogger(__name__)

_OURS = ("stage", "provenance")
"""Top-level keys only our writers put in a file: a file with one of them and no header block is an
older file of ours (version 1)."""


class NewerSchema(ArtifactError):
    """A header whose ``schema_version`` is above what this code reads: one line naming the file and both
    versions; exit 2 (:data:`k9bench.errors.EXIT_USAGE`) in every script, whatever its other input faults exit with."""


# ---------------------------------------------------------------------------
# Reading


def find_records(data: Any, *, where: str) -> tuple[list, dict]:
    """Split a loaded raw, sim or eval file into ``(records, top-level meta)``.

    Accepts ``{"individual_results": [...]}`` and the older layout with records under
    ``threshold_results -> <key> -> individual_results`` (the first key is used)."""
    if isinstance(data, dict) and isinstance(data.get("individual_results"), list):
        meta = {k: v for k, v in data.items() if k != "individual_results"}
        return data["individual_results"], meta
    if isinstance(data, dict) and isinstance(data.get("threshold_results"), dict):
        usable = [k for k, b in data["threshold_results"].items() if isinstance(b, dict) and isinstance(b.get("individual_results"), list)]
        if len(usable) > 1:
            log.warning("%s: 'threshold_results' holds %d record lists (%s); using the first, %r", where, len(usable),
                        ", ".join(map(str, usable)), usable[0])
        if usable:
            block = data["threshold_results"][usable[0]]
            meta = {k: v for k, v in data.items() if k != "threshold_results"}
            meta.update({k: v for k, v in block.items() if k != "individual_results"})
            meta.setdefault("threshold_key", usable[0])
            return block["individual_results"], meta
    raise ArtifactError(f"{where}: no 'individual_results' list (nor 'threshold_results' -> <key> -> 'individual_results')")


def _guess_kind(meta: Mapping, rows: list | None) -> str | None:
    """The kind of a file that declares none (the reference's), from its keys, as before headers."""
    if "category_wise_accuracy" in meta or "evaluation_timestamp" in meta:
        return "eval"
    if rows is not None:
        if "similarity_model" in meta or any(isinstance(r, dict) and r.get("cosine_similarities") is not None for r in rows):
            return "sim"
        return "raw"
    if "manifest_version" in meta:
        return "manifest"
    if "runs" in meta and "generated_at" in meta:
        return "report"
    if "judge" in meta and "input" in meta:
        return "judge"
    return None


def _version(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ArtifactError(f"{where}: header schema_version {value!r} is not a positive integer")
    return value


def _check_kind(said: str | None, stage: str | None, rows: list | None, kind: str | None, where: str) -> None:
    """Refuse, in one line, a file that names a kind (its header's, or its writing stage's) other than what the
    reader reads: ``kind`` when it says, a kind of records (:attr:`Header.RECORDS`) for a file of records."""
    if said is None:
        return
    wanted = [kind] if kind else [k for k, c in HEADER_CLASSES.items() if c.RECORDS] if rows is not None else []
    if wanted and said not in wanted:
        by = f", written by stage {stage}" if stage else ""
        kinds = ", ".join(wanted[:-1]) + " or " + wanted[-1] if len(wanted) > 1 else wanted[0]
        raise ArtifactError(f"{where}: its header says kind {said!r}{by}; this reads {kinds} files")


def header_of(meta: Mapping, *, rows: list | None = None, path: str | os.PathLike | None = None,
              kind: str | None = None) -> Header:
    """The typed header of a file's top-level keys ``meta`` (``rows``: its records, for a record file).

    The kind is the declared one, else the writing stage's (:data:`STAGE_KINDS`), else judged from the
    keys; ``kind`` is what the caller reads, and the kind when nothing says. A file of a stage no kind is known
    for (its ``stage`` block names another) reads as a plain :class:`Header`. Raises :class:`ArtifactError` (one
    line naming the file) for a malformed header block, a file that names another kind than ``kind`` (or, for a
    file of records, ``rows`` given, a kind that holds none), or a version newer than :data:`SCHEMA_VERSIONS`."""
    where = str(path) if path is not None else "<artifact>"
    raw_block = meta.get(HEADER_KEY)
    if raw_block is not None and not isinstance(raw_block, dict):
        raise ArtifactError(f"{where}: 'header' is {type(raw_block).__name__}, not an object (kind, schema_version, stage)")
    block = raw_block or {}
    if raw_block is not None and "kind" not in block:
        raise ArtifactError(f"{where}: the 'header' block names no kind ({'it is empty' if not block else 'only ' + ', '.join(map(str, block))}); "
                            "a header block holds kind, schema_version and stage")
    stage_block = meta["stage"] if isinstance(meta.get("stage"), dict) else {}
    named = stage_block.get("name")
    if block and isinstance(named, str) and isinstance(block.get("stage"), str) and block["stage"] != named:
        # an earlier stage's header carried over by an older k9bench (which kept unknown top-level keys): the file
        # is what its own stage block says, written before headers
        log.debug("%s: header of stage %r under a %r stage block; read as a file without a header", where, block["stage"], named)
        block = {}
    written_stage = block.get("stage", named)
    stage = written_stage if isinstance(written_stage, str) else None
    declared_kind = block.get("kind")
    if block and declared_kind not in HEADER_CLASSES:
        raise ArtifactError(f"{where}: header kind {declared_kind!r} is none of {', '.join(HEADER_CLASSES)}")
    said = declared_kind or STAGE_KINDS.get(stage or "")
    _check_kind(said, stage, rows, kind, where)
    found = said or _guess_kind(meta, rows) or kind
    if found is None and stage_block:  # a stage of ours this table does not know (a new one): its block still reads
        return Header.from_meta(meta, stage=stage, path=None if path is None else str(path))
    if found is None:
        raise ArtifactError(f"{where}: not a k9bench artifact (no header block, no records, no known keys)")
    if "schema_version" in block:
        version = _version(block["schema_version"], where)
    elif found == "manifest" and isinstance(meta.get("manifest_version"), int):
        version = meta["manifest_version"]  # the manifest's own version key, older than headers
    else:
        version = 1  # an older file of ours (or the reference's): the layout of version 1
    known = SCHEMA_VERSIONS[found]
    if version > known:
        raise NewerSchema(f"{where}: {found} header schema_version {version} is newer than this k9bench reads "
                          f"(up to version {known}); update k9bench to read it")
    if not block and not any(k in meta for k in _OURS):
        stage = None  # the reference's file: no stage wrote it
    return HEADER_CLASSES[found].from_meta(meta, schema_version=version, stage=stage, declared=bool(block),
                                           path=None if path is None else str(path))


def read_header(path_or_data: Any, *, kind: str | None = None, path: str | os.PathLike | None = None) -> Header:
    """The typed header of an artifact: a file path (read through :func:`k9bench.artifact_io.read_json`)
    or its loaded JSON. A bare list is a judge file (the reference's layout): its header is that of its
    ``<file>.meta.json`` sidecar when there is one, else an undeclared :class:`JudgeHeader`. Faults are
    :class:`ArtifactError` lines naming the file."""
    if isinstance(path_or_data, (str, os.PathLike)):
        path = path_or_data
        data = read_json(path)
    else:
        data = path_or_data
    where = str(path) if path is not None else "<artifact>"
    if isinstance(data, list):
        sidecar = Path(f"{path}.meta.json") if path is not None else None
        if sidecar is not None and sidecar.is_file():
            return read_header(sidecar, kind="judge")
        return JudgeHeader(path=None if path is None else str(path))
    if not isinstance(data, dict):
        raise ArtifactError(f"{where}: expected a JSON object or list, got {type(data).__name__}")
    if isinstance(data.get("individual_results"), list) or isinstance(data.get("threshold_results"), dict):
        rows, meta = find_records(data, where=where)
        return header_of(meta, rows=rows, path=path, kind=kind)
    return header_of(data, path=path, kind=kind)


# ---------------------------------------------------------------------------
# Writing


def stamped(kind: str, stage: str, meta: Mapping) -> dict:
    """The one way a writer puts its header into a file: ``meta`` (the file's top-level keys, records
    aside) through the kind's typed class, with the header block ``{kind, schema_version (this code's),
    stage}`` last. Unknown keys are kept, in their order."""
    header = HEADER_CLASSES[kind].from_meta(meta, schema_version=SCHEMA_VERSIONS[kind], stage=stage, declared=True)
    return {**header.to_meta(), HEADER_KEY: header.block()}


__all__ = ["NewerSchema", "find_records", "header_of", "read_header", "stamped"]
