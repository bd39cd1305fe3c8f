"""``calculate`` (raw -> sim): every record's ``cosine_similarities``, as the reference's tools read them.

Every record with an answer string is embedded and gets all five similarities; an empty or blank
answer too, as the reference embeds it, flagged ``answer_flag: empty_answer`` / ``blank_answer``
and counted, but decided by the rule like any other (never overridden). A failed sample (a record
with ``error``) is not embedded: it gets a similarity of 0.0 for each option next to its ``error``
(``similarity_skipped: failed_sample``), and its ``ground_truth`` and ``question_category`` are
always written (the reference's own failed sample, ``{"example_id", "error"}``, has neither). The
reference's evaluate reads both of every record and computes ``ord(ground_truth.upper()) - ord('A')``
(SPEC section 9), so the ground truth is one character: the record's own letter when it has one, else
:data:`FAILED_GROUND_TRUTH`, a placeholder outside A-E (the letter as given, when there was one, is kept
in ``ground_truth_as_given``); the category is the record's, or ``""``. The reference then reads our
file and finds the record wrong (0.0 is above no threshold in [0, 1]; the placeholder is no option).

:func:`plan_calculation` checks every record before any model loads; :func:`calculate` asks
:mod:`k9bench.scoring.embedding` for the similarity table.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import time
from typing import Any, Sequence

from k9bench import LETTERS
from k9bench.artifacts import QuestionRecord, RecordsArtifact, now_iso
from k9bench.scoring.embedding import EmbeddingRun, ScoringItem, batched_similarities
from k9bench.scoring.rule import SKIP_FAILED, answer_flag, check_record, where_of
from k9bench.scoring.settings import ScoringError

log = logging.getLogger("k9bench.scoring")

FAILED_SIMILARITY = 0.0
"""The similarity a failed sample gets for each option (a placeholder the reference's evaluate can read)."""

FAILED_GROUND_TRUTH = "Z"
"""The ground truth written for a failed sample that has no one-letter ground truth (the reference's own
failed record): one character, as the reference's evaluate needs, and outside A-E, so it is no option
(a letter after ``A``: ``ord("Z") - ord("A")`` is no negative index)."""

EVAL_TOP_KEYS = (
    "evaluation_timestamp", "eval_mode", "threshold", "accuracy", "correct_count", "category_wise_accuracy",
    "metadata", "statistics", "input_file", "input_meta", "threshold_key", "stage", "subset", "header",
)
"""Top-level keys of an eval file (reference and ours); dropped when a file is scored again."""
SIM_TOP_KEYS = ("similarity_model", "similarity_calculated_at", "similarity_run", "stage", "subset", "header")
"""Top-level keys a sim file gets from us (replaced when recomputed)."""
RECORD_EVAL_EXTRAS = ("similarity_margin", "best_option", "failure_reason")
"""Our per-record eval keys (dropped when a record is scored again)."""
RECORD_SIM_EXTRAS = ("similarity_skipped", "answer_flag")
"""Our per-record sim keys (replaced when recomputed)."""
REFERENCE_READS = frozenset({"ground_truth", "question_category"})
"""Record keys the reference's evaluate reads besides ``cosine_similarities`` (written even when empty)."""


def plan_calculation(
    records: Sequence[QuestionRecord], path: str | os.PathLike | None = None, raw_rows: Sequence[dict] | None = None
) -> tuple[list[ScoringItem], dict[int, str]]:
    """Check every record and split them into items to embed and failed samples.

    Returns ``(items, skipped)``: ``items`` every record with an answer string (empty and blank ones
    included), ``skipped`` a failed record's position -> :data:`SKIP_FAILED`. ``raw_rows`` (the file's
    dicts) lets a missing ``answer`` key be told apart from an empty answer. Raises
    :class:`ScoringError` on the first malformed record (see :func:`k9bench.scoring.rule.check_record`).
    """
    items: list[ScoringItem] = []
    skipped: dict[int, str] = {}
    for pos, record in enumerate(records):
        if isinstance(record.idx, bool) or not isinstance(record.idx, int):
            raise ScoringError(f"{path or '<input>'}: record #{pos}: idx {record.idx!r} is not an integer")
        if record.failed:
            skipped[pos] = SKIP_FAILED
            continue
        texts, letters = check_record(record, raw_rows[pos] if raw_rows is not None else None, where_of(path, record))
        items.append(ScoringItem(position=pos, idx=record.idx, answer=record.answer, options=texts, letters=letters))
    return items, skipped


def clear_scores(record: QuestionRecord) -> QuestionRecord:
    """A copy of ``record`` without the sim and eval fields (before they are computed again)."""
    extra = {k: v for k, v in record.extra.items() if k not in RECORD_EVAL_EXTRAS and k not in RECORD_SIM_EXTRAS}
    return dataclasses.replace(record, is_correct=None, evaluation_explanation=None, eval_mode=None, cosine_similarities=None,
                               extra=extra)


def split_provenance(meta: dict) -> tuple[dict, list]:
    """Input meta without provenance keys, and the provenance chain so far (oldest first)."""
    rest = {k: v for k, v in meta.items() if k not in ("provenance", "input_provenance")}
    chain = list(meta.get("input_provenance") or []) if isinstance(meta.get("input_provenance"), list) else []
    if isinstance(meta.get("provenance"), dict):
        chain.append(meta["provenance"])
    return rest, chain


def carried_meta(rest: dict) -> dict:
    """The input file's top-level keys that neither the sim nor the eval layout defines (kept, not lost)."""
    return {k: v for k, v in rest.items() if k not in EVAL_TOP_KEYS and k not in SIM_TOP_KEYS and k != "total_count"}


def finish_meta(meta: dict, *, extra_meta: dict | None, chain: list, provenance: dict | None) -> dict:
    """``meta`` with the caller's extra keys, the input's provenance chain and this stage's provenance."""
    meta.update(extra_meta or {})
    if chain:
        meta["input_provenance"] = chain
    if provenance is not None:
        meta["provenance"] = provenance
    return meta


def failed_similarities(record: QuestionRecord) -> dict[str, float]:
    """0.0 for each of a failed record's option letters (A-E when it lists none, as the reference's do)."""
    letters = list(LETTERS[: len(record.options)]) if isinstance(record.options, list) and record.options else list(LETTERS)
    return {letter: FAILED_SIMILARITY for letter in letters}


def failed_record_fields(record: QuestionRecord) -> QuestionRecord:
    """A failed record with what the reference's evaluate reads of every record (SPEC section 9): all
    its similarities (:func:`failed_similarities`), a one-character ground truth (its own letter, else
    :data:`FAILED_GROUND_TRUTH`) and its category (``""`` when it has none), every one written."""
    gt = record.ground_truth
    extra = dict(record.extra)
    if not (isinstance(gt, str) and len(gt) == 1 and gt.strip()):
        if gt not in (None, ""):
            extra.setdefault("ground_truth_as_given", gt)
        gt = FAILED_GROUND_TRUTH
    category = record.question_category if isinstance(record.question_category, str) else ""
    if record.question_category not in (None, "") and not isinstance(record.question_category, str):
        extra.setdefault("question_category_as_given", record.question_category)
    return dataclasses.replace(record, cosine_similarities=failed_similarities(record), ground_truth=gt,
                               question_category=category, extra=extra, absent=record.absent - REFERENCE_READS)


def calculate(
    artifact: RecordsArtifact,
    model,
    run: EmbeddingRun,
    *,
    path: str | os.PathLike | None = None,
    raw_rows: Sequence[dict] | None = None,
    provenance: dict | None = None,
    plan: tuple[list[ScoringItem], dict[int, str]] | None = None,
    extra_meta: dict | None = None,
) -> RecordsArtifact:
    """The sim stage (see the module doc). The result's top level is the input's plus
    ``similarity_model``, ``similarity_calculated_at``, our ``similarity_run`` and ``extra_meta``.
    Raises :class:`ScoringError` before anything is written when a record is malformed or a
    similarity is not a finite number. ``plan`` is :func:`plan_calculation`'s result when the caller
    already checked the records (before loading the model)."""
    items, skipped = plan if plan is not None else plan_calculation(artifact.records, path, raw_rows)
    started = time.perf_counter()
    sims = batched_similarities(model, items, prompt_name=run.query_prompt_name, batch_size=run.batch_size, run=run) if items else []
    run.seconds = round(time.perf_counter() - started, 3)
    records = [clear_scores(r) for r in artifact.records]
    flagged: dict[str, int] = {}
    for item, table in zip(items, sims):
        bad = [k for k, v in table.items() if not math.isfinite(v)]
        if bad:
            raise ScoringError(f"{path or '<input>'}: record idx {item.idx}: similarity of option(s) {', '.join(bad)} is not a "
                               "finite number (the model produced NaN/inf)")
        records[item.position].cosine_similarities = table
        flag = answer_flag(item.answer)
        if flag:
            records[item.position].extra["answer_flag"] = flag
            flagged[flag] = flagged.get(flag, 0) + 1
    for pos, reason in skipped.items():
        # what the reference's evaluate reads of every record: its similarities, ground truth and category
        records[pos] = failed_record_fields(records[pos])
        records[pos].extra["similarity_skipped"] = reason
    run.scored_records = len(items)
    run.embedded_empty_answers = sum(flagged.values())
    run.skipped_records = {SKIP_FAILED: len(skipped)} if skipped else {}
    if skipped:
        log.info("%d failed sample(s): similarity %.1f for each option next to the error (wrong in any evaluation)",
                 len(skipped), FAILED_SIMILARITY)
    if flagged:
        log.info("%s: embedded and decided by the rule, as the reference does (flagged in 'answer_flag')",
                 ", ".join(f"{v} {k.replace('_', ' ')}{'' if v == 1 else 's'}" for k, v in flagged.items()))
    if items and run.seconds > 0:
        log.info("similarities for %d records in %.1f s (%.1f records/s)", len(items), run.seconds, len(items) / run.seconds)

    rest, chain = split_provenance(artifact.meta)
    meta: dict[str, Any] = {
        "total_count": len(records),
        "similarity_model": run.model,
        "similarity_calculated_at": now_iso(),
    }
    meta.update(carried_meta(rest))
    meta["similarity_run"] = run.to_dict()
    return RecordsArtifact(records=records, meta=finish_meta(meta, extra_meta=extra_meta, chain=chain, provenance=provenance))
