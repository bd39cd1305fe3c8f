"""Typed, versioned artifact headers: what a file says about itself, besides its records.

Each artifact kind has one frozen class: :class:`RawHeader` (``raw_*.json``), :class:`SimHeader`,
:class:`EvalHeader`, :class:`JudgeHeader` (the judge's ``<output>.meta.json`` sidecar, the judge file
itself being a bare list), :class:`ReportHeader` (``report_<tag>/report.json``) and
:class:`ManifestHeader` (``download_manifest.json``). A header is every top-level key of the file
except the records; the keys our writers and the reference write are fields, any other key (a newer
minor writer's addition) is kept in :attr:`Header.extra` and written back, never dropped.

What the file declares about itself sits in one top-level block, written by :func:`stamped` (the one
function every writer goes through)::

    "header": {"kind": "raw", "schema_version": 1, "stage": "inference"}

``stage`` is the stage that wrote the file (:data:`STAGE_KINDS`), written, never guessed. A file
whose ``schema_version`` is above what this code reads (:data:`SCHEMA_VERSIONS`) is refused in one
line naming the file and both versions (:class:`NewerSchema`, an
:class:`~k9bench.artifact_io.ArtifactError`: exit 2 in every script). Files without the block are read as before: one of ours (it has a ``stage`` or
``provenance`` block) as version 1, the reference's (a bare list, or the SPEC section 2 layouts) as
version 1 with ``stage`` None and the kind judged from its keys. :func:`read_header` is the one reader.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Mapping

from k9bench.artifact_io import ArtifactError, read_json

log = logging.getLogger(__name__)

HEADER_KEY = "header"
"""The top-level key of the header block (``kind``, ``schema_version``, ``stage``)."""

SCHEMA_VERSIONS: dict[str, int] = {"raw": 1, "sim": 1, "eval": 1, "judge": 1, "report": 1, "manifest": 1}
"""The newest header version this code reads, per kind (and the one it writes). A key added that old
readers may ignore keeps the version (it lands in their ``extra``); a change of meaning raises it."""

STAGE_KINDS: dict[str, str] = {"inference": "raw", "merge": "raw", "calculate": "sim", "evaluate": "eval",
                               "judge": "judge", "report": "report", "download": "manifest"}
"""The kind of file each writing stage makes."""

_OURS = ("stage", "provenance")
"""Top-level keys only our writers put in a file: a file with one of them and no header block is an
older file of ours (version 1)."""


class NewerSchema(ArtifactError):
    """A header whose ``schema_version`` is above what this code reads: one line naming the file and both
    versions; exit 2 (:data:`k9bench.errors.EXIT_USAGE`) in every script, whatever its other input faults exit with."""


def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


@dataclass(frozen=True)
class Header:
    """What every header has. Subclasses add the top-level keys of their kind as fields."""

    KIND: ClassVar[str] = ""
    FILE_KEYS: ClassVar[dict] = {"stage_block": "stage"}
    """Field name -> top-level key, where they differ."""

    schema_version: int = 1
    """The header's version (1 for a file written before headers carried one)."""
    stage: str | None = None
    """The stage that wrote the file (``inference``, ``merge``, ``calculate``...); None for a file that
    names none (the reference's)."""
    declared: bool = False
    """True when the file carried a header block (its kind and version were written, not inferred)."""
    path: str | None = field(default=None, compare=False)
    """The file it was read from, if read."""
    stage_block: dict | None = None
    """The ``stage`` block (:meth:`k9bench.stage.Stage.stage_block`: name, fingerprint, inputs)."""
    provenance: dict | None = None
    """What produced the file (:func:`k9bench.artifacts.provenance`)."""
    extra: dict = field(default_factory=dict)
    """Top-level keys no field holds (a newer minor writer's), in file order; written back."""
    keys: tuple = field(default=(), compare=False, repr=False)
    """The top-level keys in the order they were given (kept on write)."""

    _BASE = ("schema_version", "stage", "declared", "path", "extra", "keys")

    @classmethod
    def data_fields(cls) -> dict[str, str]:
        """Field name -> top-level key, for every field that is a key of the file."""
        return {f.name: cls.FILE_KEYS.get(f.name, f.name) for f in dataclasses.fields(cls) if f.name not in cls._BASE}

    @classmethod
    def from_meta(cls, meta: Mapping, **header: Any) -> "Header":
        """The header of a file's top-level keys ``meta`` (``header``: schema_version, stage, declared, path)."""
        by_key = {key: name for name, key in cls.data_fields().items()}
        values, extra = {}, {}
        for key, value in meta.items():
            if key == HEADER_KEY:
                continue
            if key in by_key:
                values[by_key[key]] = value
            else:
                extra[key] = value
        return cls(**header, **values, extra=extra, keys=tuple(k for k in meta if k != HEADER_KEY))

    def to_meta(self) -> dict:
        """The file's top-level keys (without the header block): the keys as given, in their order, then
        fields set since (None ones left out), then extra keys."""
        values = {key: getattr(self, name) for name, key in self.data_fields().items()}
        out: dict[str, Any] = {}
        for key in self.keys:
            if key in values:
                out[key] = values[key]
            elif key in self.extra:
                out[key] = self.extra[key]
        for key, value in values.items():
            if key not in out and value is not None:
                out[key] = value
        for key, value in self.extra.items():
            out.setdefault(key, value)
        return out

    def block(self) -> dict:
        """The header block as written."""
        return {"kind": self.KIND, "schema_version": self.schema_version, "stage": self.stage}


@dataclass(frozen=True)
class RawHeader(Header):
    """A raw file's top level (``eval_video_llm.py``, ``k9bench.merge``; docs/artifacts.md "raw JSON")."""

    KIND: ClassVar[str] = "raw"

    total_count: int | None = None
    """Number of records (the reference's key)."""
    model_name: str | None = None
    """Short model name."""
    model_name_or_path: str | None = None
    """The model as given."""
    num_shards: int | None = None
    """Shards of the run (1 unsharded)."""
    shard_id: int | None = None
    """This file's shard."""
    failed_count: int | None = None
    """Failed records."""
    failures_by_class: dict | None = None
    """``error_class`` -> count."""
    thinking_unfinished_count: int | None = None
    """Answers taken from a reply cut inside its ``<think>`` block."""
    token_totals: dict | None = None
    """Input and output tokens over every record."""
    videos: list | None = None
    """One entry per video the records used."""
    inference: dict | None = None
    """The run's settings (:func:`k9bench.inference.records.inference_block`)."""
    run_stats: dict | None = None
    """This invocation's counters."""
    merged_from: list | None = None
    """A merged file's shard files."""
    differing_by_shard: dict | None = None
    """A merged file's settings that differed between shards."""
    data_parallel: dict | None = None
    """``--data_parallel N``: workers, devices, shard files, exit codes."""

    @property
    def settings(self) -> dict:
        """The ``inference`` block (``{}`` when absent)."""
        return _dict(self.inference)

    @property
    def frames(self) -> dict:
        """``inference.frames`` (``{}`` in text-only mode or when absent)."""
        return _dict(self.settings.get("frames"))

    @property
    def prompt(self) -> dict:
        """``inference.prompt``."""
        return _dict(self.settings.get("prompt"))

    @property
    def dataset(self) -> dict:
        """``inference.dataset`` (source, split, range)."""
        return _dict(self.settings.get("dataset"))

    @property
    def backend(self) -> dict:
        """``inference.backend`` (what the backend reported: classes, dtype, server or engine)."""
        return _dict(self.settings.get("backend"))

    @property
    def audio(self) -> bool | None:
        """Whether the run heard the soundtrack, as its settings say (None when they do not)."""
        heard = self.frames.get("audio", self.settings.get("audio"))
        return heard if isinstance(heard, bool) else None


@dataclass(frozen=True)
class SimHeader(RawHeader):
    """A sim file's top level: the raw file's keys plus the similarity ones."""

    KIND: ClassVar[str] = "sim"

    similarity_model: str | None = None
    """The embedding model (the reference's key)."""
    similarity_calculated_at: str | None = None
    """When (ISO 8601; the reference's key)."""
    similarity_run: dict | None = None
    """How the similarities were computed (device, dtype, padding, counts)."""
    subset: dict | None = None
    """``--subset``: path, description, sha256, counts."""
    input_provenance: list | None = None
    """Earlier stages' provenance, oldest first."""


@dataclass(frozen=True)
class EvalHeader(Header):
    """An eval file's top level: the reference's keys, then ours (docs/artifacts.md "eval JSON")."""

    KIND: ClassVar[str] = "eval"

    evaluation_timestamp: str | None = None
    eval_mode: str | None = None
    threshold: float | None = None
    accuracy: float | None = None
    correct_count: int | None = None
    total_count: int | None = None
    category_wise_accuracy: dict | None = None
    """The reference's per-category ``{accuracy, correct, total}``."""
    metadata: dict | None = None
    """The reference's ``{similarity_model, similarity_calculated_at}``."""
    statistics: dict | None = None
    """Ours: intervals, failed samples, threshold sensitivity."""
    similarity_run: dict | None = None
    input_file: str | None = None
    input_meta: dict | None = None
    """The input's other top-level keys (the raw file's: model, ``inference``, ``run_stats``...)."""
    input_provenance: list | None = None
    subset: dict | None = None
    threshold_key: str | None = None
    """The reference's older layout: the ``threshold_results`` key the records came from."""

    @property
    def similarity_model(self) -> str | None:
        """``metadata.similarity_model``."""
        return _dict(self.metadata).get("similarity_model")

    @property
    def raw(self) -> RawHeader:
        """The raw file's header as carried in ``input_meta`` (fields None when the file carries none)."""
        return RawHeader.from_meta(_dict(self.input_meta), path=self.path)


@dataclass(frozen=True)
class JudgeHeader(Header):
    """The judge's ``<output>.meta.json`` sidecar (docs/artifacts.md "judge JSON")."""

    KIND: ClassVar[str] = "judge"

    input: dict | None = None
    """The judged file: ``evaluations``, ``sha256``, ``stage``, ``records``."""
    dataset_check: dict | None = None
    judge: dict | None = None
    """The judge's settings: model, prompt source and hash, request settings, fingerprint."""
    run: dict | None = None
    """This run's counts."""
    counts: dict | None = None
    failed_at_inference: list | None = None

    @property
    def settings(self) -> dict:
        """The ``judge`` block (``{}`` when absent)."""
        return _dict(self.judge)

    @property
    def judged(self) -> dict:
        """The ``input`` block (``{}`` when absent)."""
        return _dict(self.input)


@dataclass(frozen=True)
class ReportHeader(Header):
    """``report_<tag>/report.json``."""

    KIND: ClassVar[str] = "report"

    generated_at: str | None = None
    runs: list | None = None
    common_questions: dict | None = None
    paired_comparison: dict | None = None
    subset: Any = None
    judges: list | None = None
    published: list | None = None
    plots: dict | None = None
    stamp: Any = None
    notes: list | None = None
    caller_notes: list | None = None


@dataclass(frozen=True)
class ManifestHeader(Header):
    """``download_manifest.json`` (docs/download.md); ``manifest_version`` is its older version key."""

    KIND: ClassVar[str] = "manifest"

    manifest_version: int | None = None
    output_dir: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    complete: bool | None = None
    summary: dict | None = None
    failure_classes: Any = None
    config: dict | None = None
    videos: list | None = None
    earlier: dict | None = None


HEADER_CLASSES: dict[str, type[Header]] = {c.KIND: c for c in (RawHeader, SimHeader, EvalHeader, JudgeHeader, ReportHeader, ManifestHeader)}
"""Kind -> header class."""


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


def header_of(meta: Mapping, *, rows: list | None = None, path: str | os.PathLike | None = None,
              kind: str | None = None) -> Header:
    """The typed header of a file's top-level keys ``meta`` (``rows``: its records, for a record file).

    The kind is the declared one, else the writing stage's (:data:`STAGE_KINDS`), else judged from the
    keys; ``kind`` is what the caller expects when nothing says. Raises :class:`ArtifactError` (one line
    naming the file) for a malformed header block or a version newer than :data:`SCHEMA_VERSIONS`."""
    where = str(path) if path is not None else "<artifact>"
    raw_block = meta.get(HEADER_KEY)
    block = _dict(raw_block)
    if raw_block is not None and not block:
        raise ArtifactError(f"{where}: 'header' is {type(raw_block).__name__}, not an object (kind, schema_version, stage)")
    stage_block = _dict(meta.get("stage"))
    written_stage = block.get("stage", stage_block.get("name"))
    stage = written_stage if isinstance(written_stage, str) else None
    declared_kind = block.get("kind")
    if block and declared_kind not in HEADER_CLASSES:
        raise ArtifactError(f"{where}: header kind {declared_kind!r} is none of {', '.join(HEADER_CLASSES)}")
    found = declared_kind or STAGE_KINDS.get(stage or "") or _guess_kind(meta, rows) or kind
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


__all__ = ["EvalHeader", "HEADER_CLASSES", "HEADER_KEY", "Header", "JudgeHeader", "ManifestHeader", "NewerSchema", "RawHeader",
           "ReportHeader", "SCHEMA_VERSIONS", "STAGE_KINDS", "SimHeader", "find_records", "header_of", "read_header", "stamped"]
