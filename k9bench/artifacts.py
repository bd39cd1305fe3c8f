"""Artifact records, atomic writes, per-record checkpoints and provenance.

The JSON layouts are those of SPEC section 2, so files written here load in tools
written for the reference scripts, and the reference's own files load here.

=========  ================================================================
raw        ``{"individual_results": [record...], "total_count": N, ...}``
sim        raw + ``cosine_similarities`` per record, ``similarity_model`` and
           ``similarity_calculated_at`` at the top
eval       ``evaluation_timestamp, eval_mode, threshold, accuracy, correct_count,
           total_count, category_wise_accuracy, individual_results, metadata``
judge      a bare list of :class:`JudgeEntry`; skipped entries in a second list;
           provenance in a ``<output>.meta.json`` sidecar
=========  ================================================================

Our own extra keys (provenance, failure reasons, sampling details...) are added
beside the reference's and never replace them. A file a stage of ours writes carries its typed,
versioned header block (:mod:`k9bench.headers`: kind, schema_version, the writing stage), stamped by
:meth:`RecordsArtifact.to_dict`; :func:`load_records_artifact` refuses one newer than this code reads.

Files are read and written through :mod:`k9bench.artifact_io` (the one reader, atomic writes,
checkpoints; its names are re-exported here): a file that is missing, a folder, not UTF-8, not
JSON, too deep or empty is one :class:`ArtifactError` line naming it. :func:`load_records_artifact`
also refuses a file whose records are not records (an idx that is not an integer, a duplicate idx:
both positions named) or that holds no records.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import logging
import math
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from k9bench.artifact_io import ArtifactError, read_json
from k9bench.headers.files import find_records, header_of, stamped
from k9bench.headers.kinds import HEADER_CLASSES, HEADER_KEY, STAGE_KINDS, Header
from k9bench.redact import redact, redact_argv

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
"""The ``provenance`` block's own version (kept for its readers); what a file is and which version of
its layout it follows is its header's (:data:`k9bench.headers.kinds.SCHEMA_VERSIONS`)."""


REFERENCE_FAILED_ID = "example_id"
"""The key holding a failed sample's id in the reference's raw files (``{"example_id": N, "error": ...}``,
no ``idx``). Readers take ``idx`` from it, count the record as failed and keep the key on write."""


def now_iso() -> str:
    """The current local time as an ISO 8601 string (the reference's timestamp form)."""
    return _dt.datetime.now().isoformat()


# ---------------------------------------------------------------------------
# Records


@dataclass
class QuestionRecord:
    """One question's record, as it grows through raw -> sim -> eval.

    Field names are the reference's; optional fields are written only when set.
    Unknown keys read from a file are kept in :attr:`extra` and written back.
    """

    idx: int
    """Stable question id."""
    question_category: str = ""
    """Released category name."""
    video: str = ""
    """Video file name (``{scene_name}.mp4``)."""
    ground_truth: str = ""
    """Letter of the right option."""
    response: str = ""
    """The model's full generated text (empty for a failed sample)."""
    answer: str = ""
    """The answer extracted from :attr:`response`."""
    scene_name: str = ""
    """YouTube id of the video."""
    question: str = ""
    """Question text."""
    options: list = field(default_factory=list)
    """Options as ``"A. text"`` strings in letter order."""
    prompt: str = ""
    """The rendered chat prompt given to the model."""
    model_name: str = ""
    """Short model name (after the last ``/``)."""
    max_frames: int | None = None
    """Frame budget used for the video."""
    timestamp: str = ""
    """When the record was produced (ISO 8601)."""
    error: str | None = None
    """Set for a failed sample: what went wrong (the reference's key)."""
    error_class: str | None = None
    """Failure reason class (e.g. ``missing_video``, ``decode_error``, ``oom``, ``generation_error``)."""
    cosine_similarities: dict | None = None
    """sim stage: letter -> cosine similarity between answer and option."""
    is_correct: bool | None = None
    """eval stage: the verdict."""
    evaluation_explanation: str | None = None
    """eval stage: a short human-readable reason for the verdict."""
    eval_mode: str | None = None
    """eval stage: always ``fine``."""
    extra: dict = field(default_factory=dict)
    """Any further keys (ours or unknown), written back as top-level keys of the record."""
    absent: frozenset = field(default=frozenset(), repr=False, compare=False)
    """Reference fields missing from the record this was read from (e.g. a reference failed sample
    holds only ``idx, question_category, video, ground_truth, error``); left out again on write while
    they keep their empty defaults, so a file round-trips field for field."""

    _OPTIONAL = ("max_frames", "error", "error_class", "cosine_similarities", "is_correct", "evaluation_explanation", "eval_mode")

    @property
    def failed(self) -> bool:
        """True for a failed sample (carries an error)."""
        return self.error is not None

    @property
    def video_key(self) -> str:
        """The record's video: its scene name, else its file name without the extension, else ``idx:N`` (the
        bootstrap's resampling unit, and how the report and the results page group questions by video)."""
        if self.scene_name:
            return str(self.scene_name)
        if self.video:
            return str(self.video).rsplit(".", 1)[0]
        return f"idx:{self.idx}"

    def to_dict(self) -> dict:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            if f.name in ("extra", "absent"):
                continue
            value = getattr(self, f.name)
            if f.name in self._OPTIONAL and value is None:
                continue
            if f.name in self.absent and value in ("", [], None):
                continue
            out[f.name] = value
        for key, value in self.extra.items():
            out.setdefault(key, value)
        return out

    @classmethod
    def from_dict(cls, data: dict, *, where: str = "record") -> "QuestionRecord":
        if not isinstance(data, dict):
            raise ArtifactError(f"{where}: expected an object, got {type(data).__name__}")
        if "idx" not in data:
            if REFERENCE_FAILED_ID not in data:
                raise ArtifactError(f"{where}: record has no 'idx'")
            # the reference's failed sample: {"example_id": N, "error": "..."} (SPEC section 9)
            example_id = data[REFERENCE_FAILED_ID]
            if isinstance(example_id, bool) or not isinstance(example_id, int):
                raise ArtifactError(f"{where}: record has no 'idx' and its 'example_id' {example_id!r} is not an integer")
            if data.get("error") is None:
                raise ArtifactError(f"{where}: record has no 'idx' (only an 'example_id', and no 'error' marking a failed sample)")
            data = {"idx": example_id, **data}
        idx = data["idx"]
        if isinstance(idx, bool) or not isinstance(idx, int):
            raise ArtifactError(f"{where}: idx {idx!r} is not an integer")
        known = {f.name for f in dataclasses.fields(cls)} - {"extra", "absent"}
        kwargs = {k: v for k, v in data.items() if k in known}
        extra = {k: v for k, v in data.items() if k not in known}
        absent = frozenset(k for k in known if k not in data)
        if kwargs.get("error") is not None and not isinstance(kwargs["error"], str):
            kwargs["error"] = str(kwargs["error"])
        for text_field in ("response", "answer"):
            if kwargs.get(text_field) is None:
                kwargs[text_field] = ""
        return cls(**kwargs, extra=extra, absent=absent)


@dataclass
class RecordsArtifact:
    """A raw, sim or eval file: records plus top-level keys.

    :attr:`meta` holds every top-level key other than ``individual_results``,
    in file order (``total_count``, ``similarity_model``, ``accuracy``, ...).
    """

    records: list[QuestionRecord]
    """The per-question records."""
    meta: dict = field(default_factory=dict)
    """Top-level keys besides ``individual_results``."""
    path: str | None = None
    """Where it was read from, if read."""

    @property
    def header(self) -> Header:
        """The typed header of :attr:`meta` (:func:`k9bench.headers.files.header_of`): the declared kind and
        stage, else the stage block's, else judged from the keys (the reference's files)."""
        return header_of(self.meta, rows=[{"cosine_similarities": r.cosine_similarities} for r in self.records], path=self.path)

    @property
    def stage(self) -> str:
        """The kind: ``eval``, ``sim`` or ``raw`` (see :attr:`header`)."""
        return self.header.KIND

    def to_dict(self) -> dict:
        """The file's JSON object with ``individual_results`` where the reference puts it."""
        out: dict[str, Any] = {}
        meta = self._stamped()
        if self.stage == "eval":
            # evaluation_timestamp .. category_wise_accuracy, then records, then metadata
            head = ["evaluation_timestamp", "eval_mode", "threshold", "accuracy", "correct_count", "total_count", "category_wise_accuracy"]
            for key in head:
                if key in meta:
                    out[key] = meta.pop(key)
            out["individual_results"] = [r.to_dict() for r in self.records]
            out.update(meta)
        else:
            out["individual_results"] = [r.to_dict() for r in self.records]
            meta.setdefault("total_count", len(self.records))
            out.update(meta)
        return out

    def _stamped(self) -> dict:
        """:attr:`meta` with the header block (:func:`k9bench.headers.files.stamped`) when a stage of ours
        writes it (it carries a ``stage`` block) or it declared one; the reference's layouts as they are."""
        meta = dict(self.meta)
        declared = meta.get(HEADER_KEY) if isinstance(meta.get(HEADER_KEY), dict) else {}
        block = meta.get("stage") if isinstance(meta.get("stage"), dict) else {}
        stage = block.get("name") if isinstance(block.get("name"), str) else declared.get("stage")
        kind = STAGE_KINDS.get(stage) if isinstance(stage, str) else None
        if kind is None or not HEADER_CLASSES[kind].RECORDS:  # the stage writes no file of records
            if not declared:
                return meta
            kind = self.stage
        return stamped(kind, stage, meta)


def check_unique_idx(records: Sequence["QuestionRecord"], *, where: str) -> None:
    """Refuse a question counted twice: :class:`ArtifactError` naming the idx and both positions.

    A reference failed sample (idx taken from its ``example_id``, a position in the reference's loop)
    may share a number with a real question; that is logged, not refused."""
    seen: dict[int, int] = {}
    for pos, record in enumerate(records):
        first = seen.setdefault(record.idx, pos)
        if first == pos:
            continue
        if REFERENCE_FAILED_ID in record.extra or REFERENCE_FAILED_ID in records[first].extra:
            log.warning("%s: idx %s at records #%d and #%d (one is a reference failed sample's example_id); both kept",
                        where, record.idx, first, pos)
            continue
        raise ArtifactError(f"{where}: idx {record.idx} appears twice, records #{first} and #{pos} (a question counted twice)")


def load_records_artifact(path: str | os.PathLike, *, allow_empty: bool = True) -> RecordsArtifact:
    """Load a raw, sim or eval file (ours or the reference's) through the one reader.

    Raises :class:`ArtifactError` naming the file: any fault of :func:`read_json`, a layout without
    records, a record without an integer idx, a duplicate idx (both positions named), and with
    ``allow_empty=False`` a file holding no records."""
    return records_artifact_from(read_json(path), path, allow_empty=allow_empty)


def records_artifact_from(data: Any, path: str | os.PathLike, *, allow_empty: bool = True) -> RecordsArtifact:
    """:func:`load_records_artifact` on a file's already-read JSON ``data`` (same checks)."""
    rows, meta = find_records(data, where=str(path))
    if not rows and not allow_empty:
        raise ArtifactError(f"{path}: no records in 'individual_results' (an earlier stage wrote nothing)")
    header_of(meta, rows=rows, path=path)  # a newer header version than this code reads: refused, naming the file
    records = [QuestionRecord.from_dict(r, where=f"{path}: record #{i}") for i, r in enumerate(rows)]
    check_unique_idx(records, where=str(path))
    return RecordsArtifact(records=records, meta=meta, path=str(path))


@dataclass
class JudgeScores:
    """The five judge axes, integers 1-10."""

    Logic: int
    Factuality: int
    Accuracy: int
    Conciseness: int
    Overall: int

    AXES = ("Logic", "Factuality", "Accuracy", "Conciseness", "Overall")


@dataclass
class JudgeEntry:
    """One judged question (an entry of the judge JSON list)."""

    idx: int
    """Question id."""
    video_url: str
    """YouTube URL of the video."""
    scene_name: str
    """YouTube id."""
    question_category: str
    """Released category name."""
    question: str
    """Question text."""
    correct_answer: str
    """The text of the right option."""
    model_output: str
    """The evaluated model's answer."""
    cot: str
    """The judge's ``CoT:`` reasoning line."""
    scores: dict
    """Axis name -> integer 1-10 (see :class:`JudgeScores`)."""
    judge_model: str
    """Judge model id."""
    timestamp: str
    """When it was judged (ISO 8601)."""
    extra: dict = field(default_factory=dict)
    """Further keys, written back as top-level keys."""

    def to_dict(self) -> dict:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "extra"}
        for key, value in self.extra.items():
            out.setdefault(key, value)
        return out

    @classmethod
    def from_dict(cls, data: dict, *, where: str = "entry") -> "JudgeEntry":
        names = [f.name for f in dataclasses.fields(cls) if f.name != "extra"]
        missing = [n for n in names if n not in data]
        if missing:
            raise ArtifactError(f"{where}: judge entry lacks {', '.join(missing)}")
        return cls(**{n: data[n] for n in names}, extra={k: v for k, v in data.items() if k not in names})


@dataclass
class SkippedEntry:
    """One entry of the judge's skipped file."""

    idx: int
    """Question id."""
    error: str
    """Why it was skipped (the judge's raw reply is kept in ``extra['raw_reply']`` when there was one)."""
    timestamp: str
    """When it was skipped (ISO 8601)."""
    extra: dict = field(default_factory=dict)
    """Further keys, written back as top-level keys."""

    def to_dict(self) -> dict:
        out = {"idx": self.idx, "error": self.error, "timestamp": self.timestamp}
        for key, value in self.extra.items():
            out.setdefault(key, value)
        return out

    @classmethod
    def from_dict(cls, data: dict, *, where: str = "entry") -> "SkippedEntry":
        if "idx" not in data:
            raise ArtifactError(f"{where}: skipped entry has no 'idx'")
        rest = {k: v for k, v in data.items() if k not in ("idx", "error", "timestamp")}
        return cls(idx=data["idx"], error=str(data.get("error", "")), timestamp=str(data.get("timestamp", "")), extra=rest)


# ---------------------------------------------------------------------------
# Provenance

_PACKAGES = (
    "k9bench", "torch", "torchvision", "transformers", "accelerate", "qwen-vl-utils", "sentence-transformers",
    "datasets", "numpy", "av", "decord", "yt-dlp", "openai", "flash-attn", "vllm",
)


def package_versions(names: Iterable[str] = _PACKAGES) -> dict[str, str | None]:
    """Installed versions of the packages that shape our numbers (None when absent)."""
    from importlib import metadata

    out: dict[str, str | None] = {}
    for name in names:
        if name == "k9bench":
            from k9bench import __version__

            out[name] = __version__
            continue
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def git_commit(repo: str | os.PathLike | None = None) -> str | None:
    """The git commit of this checkout (with ``-dirty`` when modified), or None outside git."""
    repo = Path(repo) if repo else Path(__file__).resolve().parent.parent
    try:
        sha = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        if sha.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True, timeout=5)
        return sha.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def provenance(script: str, argv: list[str] | None, args: "Mapping[str, Any] | None" = None) -> dict:
    """What produced an artifact: script, arguments, package versions, git commit, host, time.

    ``args``: the run's settings as a flat mapping (name -> value); secrets are masked."""
    argv = list(sys.argv[1:] if argv is None else argv)
    info: dict[str, Any] = {
        "script": script,
        "argv": redact_argv(argv),
        "python": sys.version.split()[0],
        "packages": package_versions(),
        "git_commit": git_commit(),
        "hostname": os.uname().nodename if hasattr(os, "uname") else None,
        "created_at": now_iso(),
        "schema_version": SCHEMA_VERSION,
    }
    if args is not None:
        values = dict(args)
        info["args"] = redact({k: v for k, v in values.items() if isinstance(v, (str, int, float, bool, type(None), list))})
    return info


def is_finite_number(value: Any) -> bool:
    """True for an int/float that is neither NaN nor infinite (bools excluded)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
