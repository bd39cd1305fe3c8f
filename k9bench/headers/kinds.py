"""One typed, frozen header class per artifact kind, the versions this code reads and the stage -> kind
table (see :mod:`k9bench.headers`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping

from k9bench.headers.blocks import BackendInfo, DatasetSettings, FrameSettings, JudgeInput, JudgeSettings, PromptSettings
from k9bench.stage_table import TableView, header_classes, schema_versions, stage_kinds

HEADER_KEY = "header"
"""The top-level key of the header block (``kind``, ``schema_version``, ``stage``)."""

SCHEMA_VERSIONS = TableView(schema_versions)
"""Kind -> the newest header version this code reads (and the one it writes): each kind's owner's
:attr:`~k9bench.stage_table.StageEntry.schema_version` in the stage table."""

STAGE_KINDS = TableView(stage_kinds)
"""Stage name -> the kind of file it writes (the stage table's :attr:`~k9bench.stage_table.StageEntry.kind`)."""


def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


@dataclass(frozen=True)
class Header:
    """What every header has. Subclasses add the top-level keys of their kind as fields."""

    KIND: ClassVar[str] = ""
    RECORDS: ClassVar[bool] = False
    """Its file holds records (``individual_results``): a reader of records reads it."""
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
    RECORDS: ClassVar[bool] = True

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
    def frames(self) -> FrameSettings:
        """``inference.frames`` (all None in text-only mode or when absent)."""
        return FrameSettings.of(self.settings.get("frames"))

    @property
    def prompt(self) -> PromptSettings:
        """``inference.prompt``."""
        return PromptSettings.of(self.settings.get("prompt"))

    @property
    def dataset(self) -> DatasetSettings:
        """``inference.dataset`` (source, split, range)."""
        return DatasetSettings.of(self.settings.get("dataset"))

    @property
    def backend(self) -> BackendInfo:
        """``inference.backend`` (what the backend reported: classes, dtype, server or engine)."""
        return BackendInfo.of(self.settings.get("backend"))

    @property
    def text_only(self) -> bool | None:
        """``inference.text_only`` when it is a boolean, else None."""
        value = self.settings.get("text_only")
        return value if isinstance(value, bool) else None

    @property
    def audio(self) -> bool | None:
        """Whether the run heard the soundtrack, as its settings say (``frames.audio``, or an older file's
        ``inference.audio``); None when they do not."""
        heard = self.frames.audio if self.frames.audio is not None else self.settings.get("audio")
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
    RECORDS: ClassVar[bool] = True

    evaluation_timestamp: str | None = None
    """When it was scored (ISO 8601)."""
    eval_mode: str | None = None
    """Always ``fine``."""
    threshold: float | None = None
    """The similarity threshold of the rule."""
    accuracy: float | None = None
    """Correct / total, a fraction."""
    correct_count: int | None = None
    """Records judged correct."""
    total_count: int | None = None
    """Records scored (failed samples included)."""
    category_wise_accuracy: dict | None = None
    """The reference's per-category ``{accuracy, correct, total}``."""
    metadata: dict | None = None
    """The reference's ``{similarity_model, similarity_calculated_at}``."""
    statistics: dict | None = None
    """Ours: intervals, failed samples, threshold sensitivity."""
    similarity_run: dict | None = None
    """How the sim file's similarities were computed."""
    input_file: str | None = None
    """The sim file scored."""
    input_meta: dict | None = None
    """The input's other top-level keys (the raw file's: model, ``inference``, ``run_stats``...)."""
    input_provenance: list | None = None
    """Earlier stages' provenance, oldest first."""
    subset: dict | None = None
    """``--subset``: path, description, sha256, counts."""
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
    """``--dataset_name``: the judged file's questions checked against the dataset."""
    judge: dict | None = None
    """The judge's settings: model, prompt source and hash, request settings, fingerprint."""
    run: dict | None = None
    """This run's counts."""
    counts: dict | None = None
    """Entries scored and skipped, and records failed at inference."""
    failed_at_inference: list | None = None
    """Records that failed at inference (``{idx, error, error_class}``), not judged."""

    @property
    def settings(self) -> JudgeSettings:
        """The ``judge`` block."""
        return JudgeSettings.of(self.judge)

    @property
    def judged(self) -> JudgeInput:
        """The ``input`` block."""
        return JudgeInput.of(self.input)


@dataclass(frozen=True)
class ReportHeader(Header):
    """``report_<tag>/report.json``."""

    KIND: ClassVar[str] = "report"

    generated_at: str | None = None
    """When (ISO 8601)."""
    runs: list | None = None
    """One summary per eval file: scores, intervals, settings, standing against the paper."""
    common_questions: dict | None = None
    """Two runs or more on the questions all of them had."""
    paired_comparison: dict | None = None
    """``--baseline``: the paired differences."""
    subset: Any = None
    """The subset the tables cover, when one was given."""
    judges: list | None = None
    """One summary per judge file."""
    published: list | None = None
    """The paper's rows shown beside ours."""
    plots: dict | None = None
    """Plot name -> file (None when skipped)."""
    stamp: Any = None
    """What made the report (versions, commit)."""
    notes: list | None = None
    """The report's own notes."""
    caller_notes: list | None = None
    """``--note`` lines."""


@dataclass(frozen=True)
class ManifestHeader(Header):
    """``download_manifest.json`` (docs/download.md); ``manifest_version`` is its older version key."""

    KIND: ClassVar[str] = "manifest"

    manifest_version: int | None = None
    """The manifest's own version key (older than headers; still written)."""
    output_dir: str | None = None
    """The video folder."""
    started_at: str | None = None
    finished_at: str | None = None
    complete: bool | None = None
    """False when the run was interrupted before every video was tried."""
    summary: dict | None = None
    """Counts per status and failure class."""
    failure_classes: Any = None
    """The failure classes an entry may name."""
    config: dict | None = None
    """The download settings used."""
    videos: list | None = None
    """One entry per video (status, file, size, format...)."""
    earlier: dict | None = None
    """An earlier manifest's entries for videos this run did not decide."""


HEADER_CLASSES = TableView(header_classes)
"""Kind -> header class (the stage table's :attr:`~k9bench.stage_table.StageEntry.header`: a new stage's class may
live in its own module)."""


__all__ = ["EvalHeader", "HEADER_CLASSES", "HEADER_KEY", "Header", "JudgeHeader", "ManifestHeader", "RawHeader",
           "ReportHeader", "SCHEMA_VERSIONS", "STAGE_KINDS", "SimHeader"]
