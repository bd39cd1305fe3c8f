"""Failure labels: which wrong answers are labelled, the labelling session, and the labels file.

The sample (:func:`stratified_sample`) is drawn from a model's wrong answers (eval records with
``is_correct`` false; failed samples are inference failures, not failure modes, and are left out),
stratified by category: each category gets its share of ``--sample`` by the largest remainder, and its
questions are drawn with a generator seeded by ``--seed``.

The labels file (:func:`labels_document`), written by a person's session and by the LLM labeller alike, a typed
artifact of kind ``failure_labels`` (:class:`LabelsHeader`; the stage table's ``llm-label`` entry owns the kind)::

    {"labeller": "ana", "labeller_kind": "person" | "llm", "model_name": "...", "eval_file": "...", "eval_sha256": "...",
     "sample": {"size", "seed", "wrong_answers", "idx"}, "labels": [{"idx", "label", "note", "question_category", ...}, ...],
     "header": {"kind": "failure_labels", "schema_version": 1, "stage": "people-label" | "llm-label"}}
"""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from k9bench.artifact_io import ArtifactError, read_json
from k9bench.artifacts import QuestionRecord, now_iso
from k9bench.headers.kinds import Header
from k9bench.people import LABELS
from k9bench.people.storage import Book

KIND = "failure_labels"
"""The labels file's header kind."""

PERSON_STAGE = "people-label"
"""The writer a person's labels file names (the LLM labeller's is its stage, ``llm-label``)."""
MAX_NOTE_CHARS = 2000
"""The longest note taken."""


def wrong_answers(records: list[QuestionRecord]) -> list[QuestionRecord]:
    """Records scored wrong that did not fail at inference."""
    return [r for r in records if r.is_correct is False and not r.failed]


def stratified_sample(records: list[QuestionRecord], size: int | None, seed: int) -> list[QuestionRecord]:
    """``size`` of ``records`` (all when None or more), each category in proportion (largest remainder),
    drawn with ``random.Random(seed)``; returned in a seeded shuffled order."""
    rng = random.Random(seed)
    by_cat: dict[str, list] = defaultdict(list)
    for r in sorted(records, key=lambda r: r.idx):
        by_cat[r.question_category].append(r)
    total = len(records)
    if size is None or size >= total:
        chosen = [r for cat in sorted(by_cat) for r in by_cat[cat]]
    else:
        quotas = {cat: size * len(rows) / total for cat, rows in by_cat.items()}
        counts = {cat: int(q) for cat, q in quotas.items()}
        for cat in sorted(quotas, key=lambda c: (-(quotas[c] - counts[c]), c))[: size - sum(counts.values())]:
            counts[cat] += 1
        chosen = [r for cat in sorted(by_cat) for r in rng.sample(by_cat[cat], counts[cat])]
    rng.shuffle(chosen)
    return chosen


def labels_path(output_dir: str | Path, labeller: str, model: str) -> Path:
    """``<output_dir>/labels_<labeller>_<model>.json``."""
    return Path(output_dir) / f"labels_{labeller}_{model.replace('/', '_')}.json"


@dataclass(frozen=True)
class LabelsHeader(Header):
    """A labels file's top level (everything is a header key: the labels too)."""

    KIND: ClassVar[str] = KIND

    labeller: str | None = None
    labeller_kind: str | None = None
    """``person`` or ``llm``."""
    model_name: str | None = None
    """The model whose wrong answers were labelled."""
    eval_file: str | None = None
    eval_sha256: str | None = None
    sample: dict | None = None
    """``size, seed, wrong_answers, idx, stratified_by``."""
    labeller_model: str | None = None
    sent_params: dict | None = None
    run: dict | None = None
    skipped: list | None = None
    updated_at: str | None = None
    labels: list | None = None


def labels_document(labels: list[dict], *, labeller: str, kind: str, model: str, eval_file: str, eval_sha256: str,
                    sample: dict, extra: dict | None = None, stage: str = PERSON_STAGE) -> dict:
    """The labels file's JSON (see the module doc), its header stamped (:func:`k9bench.headers.files.stamped`)."""
    from k9bench.headers.files import stamped

    return stamped(KIND, stage, {"labeller": labeller, "labeller_kind": kind, "model_name": model, "eval_file": eval_file,
                                 "eval_sha256": eval_sha256, "sample": sample, **(extra or {}), "updated_at": now_iso(),
                                 "labels": labels})


@dataclass(frozen=True)
class LabelsFile:
    """A labels file as the report reads it."""

    path: str
    labeller: str
    kind: str
    """``person`` or ``llm``."""
    model: str
    labels: dict
    """idx -> label key."""


def read_labels_file(path: str | Path) -> LabelsFile:
    """A labels file; :class:`ArtifactError` naming the file and the fault."""
    from k9bench.headers.files import read_header
    from k9bench.headers.kinds import HEADER_KEY

    data = read_json(path)
    if not isinstance(data, dict) or not isinstance(data.get(HEADER_KEY), dict):
        raise ArtifactError(f"{path}: not a failure-labels file (no header of kind {KIND!r})")
    read_header(data, kind=KIND, path=path)  # another kind, a newer version: one line naming the file
    out = {}
    for i, row in enumerate(data.get("labels") or []):
        idx = row.get("idx") if isinstance(row, dict) else None
        label = row.get("label") if isinstance(row, dict) else None
        if isinstance(idx, bool) or not isinstance(idx, int) or label not in LABELS:
            raise ArtifactError(f"{path}: labels[{i}]: needs an integer idx and a label among {', '.join(LABELS)} (got {label!r})")
        out[idx] = label
    kind = data.get("labeller_kind")
    if kind not in ("person", "llm"):
        raise ArtifactError(f"{path}: labeller_kind {kind!r} is neither 'person' nor 'llm'")
    return LabelsFile(path=str(path), labeller=str(data.get("labeller") or "?"), kind=kind, model=str(data.get("model_name") or "?"),
                      labels=out)


@dataclass
class LabelSession:
    """What the app needs for the labelling mode (see :mod:`k9bench.people.app`)."""

    labeller: str
    records: list
    """The sampled wrong answers (:class:`QuestionRecord`), in the order shown."""
    book: Book
    video_dir: Path
    model: str

    mode = "label"
    template = "label.html"

    @property
    def items(self) -> list:
        return self.records

    @property
    def who(self) -> str:
        return self.labeller

    def video_of(self, record: QuestionRecord) -> str:
        return record.video

    def context(self, record: QuestionRecord) -> dict:
        return {"question": record.question, "category": record.question_category, "options": list(record.options or []),
                "ground_truth": record.ground_truth, "response": record.response, "answer": record.answer, "model": self.model,
                "labels": LABELS, "max_chars": MAX_NOTE_CHARS}

    def record(self, rec: QuestionRecord, form: dict, seconds: float | None) -> dict:
        label = form.get("label") or ""
        note = (form.get("note") or "").strip()
        if label not in LABELS:
            raise ValueError("Pick one of the labels.")
        if label == "other" and not note:
            raise ValueError("\"Other\" needs a note saying what went wrong.")
        if len(note) > MAX_NOTE_CHARS:
            raise ValueError(f"The note is {len(note)} characters long; keep it under {MAX_NOTE_CHARS}.")
        return {"idx": rec.idx, "label": label, "note": note, "question_category": rec.question_category, "labeller": self.labeller,
                "seconds_spent": seconds, "timestamp": now_iso()}


def open_label_session(eval_path: str | Path, labeller: str, output_dir: str | Path, video_dir: str | Path, *, size: int | None,
                       seed: int) -> LabelSession:
    """The labeller's session over ``eval_path``'s sampled wrong answers, with the labels already saved."""
    from k9bench.artifacts import load_records_artifact
    from k9bench.stage import file_digest

    art = load_records_artifact(eval_path, allow_empty=False)
    if not any(r.is_correct is not None for r in art.records):
        raise ArtifactError(f"{eval_path}: no record carries a verdict (is_correct); give an eval file (evaluate_results.py --mode evaluate)")
    wrong = wrong_answers(art.records)
    if not wrong:
        raise ArtifactError(f"{eval_path}: no wrong answer to label")
    chosen = stratified_sample(wrong, size, seed)
    model = next((r.model_name for r in art.records if r.model_name), Path(eval_path).stem)
    sample = {"size": size, "seed": seed, "wrong_answers": len(wrong), "idx": [r.idx for r in chosen], "stratified_by": "question_category"}
    digest = file_digest(eval_path)

    def export(labels: list[dict]) -> dict:
        return labels_document(labels, labeller=labeller, kind="person", model=model, eval_file=str(eval_path), eval_sha256=digest,
                               sample=sample)

    book = Book(labels_path(output_dir, labeller, model), export)
    return LabelSession(labeller=labeller, records=chosen, book=book, video_dir=Path(video_dir), model=model)
