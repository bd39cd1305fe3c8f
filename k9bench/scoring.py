"""The scoring rule and its two stages: ``calculate`` (raw -> sim) and ``evaluate`` (sim -> eval).

The rule is the reference's "fine" rule (SPEC section 4): a record is correct when
the similarity between the model's answer and the ground-truth option is above
the threshold AND no other option is *strictly* more similar (a tie with the
ground truth counts as correct). Accuracy is correct / total over all records.

``calculate`` checks every record first (:func:`plan_calculation`, before any model
loads), then asks :mod:`k9bench.embedding` for the similarity table (the embedding
model, its loading and encoding live there). Every record that is not a failed
sample gets all five similarities, an empty answer included: it is embedded as the
reference embeds it, so the reference's tools read our sim files, and it is still
counted wrong and flagged (``similarity_skipped: empty_answer``).

Beyond the reference, ``evaluate`` adds in extra keys: ALL accuracy (failed samples
count as wrong; this is the reference's ``accuracy``) and VALID accuracy (failed
samples left out), failure-reason counts, 95% intervals from a bootstrap over
videos (:mod:`k9bench.stats`), accuracy at other thresholds and under argmax
alone, and per record the margin between the ground truth and the best distractor.

Reading the reference's files (:func:`load_for_scoring`): a lower-case ground-truth
letter is upper-cased as the reference does (the letter as given is kept in
``ground_truth_as_given``); its failed records ``{"example_id": N, "error": ...}``
are read by :mod:`k9bench.artifacts` (idx from ``example_id``) and counted as failed.
Malformed records stop the run with a message naming the file and the record's idx.

Settings (threshold, statistics, embedding model...) are the frozen dataclasses of
:mod:`k9bench.scoring_settings`.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from k9bench import LETTERS
from k9bench.artifacts import QuestionRecord, RecordsArtifact, is_finite_number, now_iso
from k9bench.embedding import (  # noqa: F401  (re-exported: the scoring stage's public names)
    QUERY_PROMPT_NAME,
    EmbeddingError,
    EmbeddingRun,
    ScoringItem,
    batched_similarities,
    bundled_small_model_path,
    encode_texts,
    load_embedding_model,
    one_at_a_time_similarities,
)
from k9bench.scoring_settings import (  # noqa: F401  (re-exported)
    DEFAULT_BATCH_SIZE,
    DEFAULT_EMBEDDING_MODEL,
    DEFAULT_THRESHOLD,
    SENSITIVITY_THRESHOLDS,
    EvalSettings,
    ScoringError,
)
from k9bench.stats import DEFAULT_RESAMPLES, DEFAULT_SEED

log = logging.getLogger(__name__)

EVAL_MODE = "fine"
"""The only evaluation mode (the reference's name for the rule above)."""

SKIP_FAILED = "failed_sample"
"""``similarity_skipped`` value: the record carries an ``error`` (no similarities)."""
SKIP_EMPTY = "empty_answer"
"""``similarity_skipped`` value: the answer is empty; it is embedded as the reference does, but counted wrong."""

SIMILARITY_SLACK = 1e-4
"""How far outside [-1, 1] a stored similarity may lie (float rounding of normalised vectors)."""

# Top-level keys of an eval file (reference and ours); dropped when a file is re-scored.
_EVAL_TOP_KEYS = (
    "evaluation_timestamp", "eval_mode", "threshold", "accuracy", "correct_count", "category_wise_accuracy",
    "metadata", "statistics", "input_file", "input_meta", "threshold_key",
)
# Top-level keys a sim file gets from us (replaced when recomputed).
_SIM_TOP_KEYS = ("similarity_model", "similarity_calculated_at", "similarity_run")
# Our per-record eval keys (dropped when a record is re-scored).
_RECORD_EVAL_EXTRAS = ("similarity_margin", "best_option", "failure_reason")


# ---------------------------------------------------------------------------
# The fine rule


@dataclass(frozen=True)
class Verdict:
    """The fine rule's outcome for one record."""

    is_correct: bool
    """Ground truth above the threshold and no option strictly more similar."""
    explanation: str
    """A short human-readable reason."""
    margin: float | None
    """sim(ground truth) minus the best distractor's similarity (None with a single option)."""
    best_option: str
    """The most similar option (the ground truth when it ties for best)."""


def is_correct_fine(sims: dict[str, float], ground_truth: str, threshold: float | None) -> bool:
    """The fine rule; ``threshold=None`` means argmax alone (no threshold)."""
    gt_sim = sims[ground_truth]
    if threshold is not None and not gt_sim > threshold:
        return False
    return not any(value > gt_sim for letter, value in sims.items() if letter != ground_truth)


def fine_verdict(sims: dict[str, float], ground_truth: str, threshold: float | None) -> Verdict:
    """Apply the fine rule and explain it.

    ``sims`` maps option letters to similarities and must hold ``ground_truth``.
    """
    gt_sim = sims[ground_truth]
    others = {k: v for k, v in sims.items() if k != ground_truth}
    best_other = max(others.values()) if others else None
    margin = None if best_other is None else float(gt_sim - best_other)
    if best_other is None or gt_sim >= best_other:
        best = ground_truth
    else:
        best = next(k for k, v in others.items() if v == best_other)
    correct = is_correct_fine(sims, ground_truth, threshold)
    above = threshold is None or gt_sim > threshold
    thr_text = "argmax (no threshold)" if threshold is None else f"the threshold {threshold:g}"
    if correct:
        tied = [k for k, v in others.items() if v == gt_sim]
        if tied:
            text = (f"correct: {ground_truth} ties for the highest similarity ({gt_sim:.4f}, with "
                    f"{', '.join(tied)}; a tie counts as correct)")
        else:
            text = f"correct: {ground_truth} has the highest similarity ({gt_sim:.4f})"
        if threshold is not None:
            text += f" and is above {thr_text}"
    elif not above and best != ground_truth:
        text = (f"wrong: {ground_truth} similarity {gt_sim:.4f} is not above {thr_text}, "
                f"and {best} is more similar ({sims[best]:.4f})")
    elif not above:
        text = f"wrong: {ground_truth} has the highest similarity ({gt_sim:.4f}) but is not above {thr_text}"
    else:
        text = f"wrong: {best} is more similar ({sims[best]:.4f}) than the ground truth {ground_truth} ({gt_sim:.4f})"
    return Verdict(is_correct=correct, explanation=text, margin=margin, best_option=best)


# ---------------------------------------------------------------------------
# Record checks


_OPTION_LABEL = re.compile(r"^([A-Za-z])[.):](?:\s|$)")


def _where(path: str | os.PathLike | None, record: QuestionRecord) -> str:
    return f"{path or '<input>'}: record idx {record.idx}"


def option_letters(options: Any, where: str) -> tuple[list[str], list[str]]:
    """Option strings (as encoded) and their letters, from a record's ``options``.

    A list holds ``"A. text"`` strings in letter order (the letter is the position;
    a differing prefix letter is an error); a mapping letter -> text is turned into
    that form. Raises :class:`ScoringError` naming ``where``.
    """
    if isinstance(options, dict):
        try:
            pairs = sorted((str(k).strip().upper(), v) for k, v in options.items())
        except TypeError:
            raise ScoringError(f"{where}: 'options' has keys that cannot be ordered") from None
        letters = [k for k, _ in pairs]
        if any(k not in LETTERS for k in letters) or letters != list(LETTERS[: len(letters)]):
            raise ScoringError(f"{where}: 'options' keys are {letters}, expected letters from A in order")
        texts = []
        for letter, text in pairs:
            if not isinstance(text, str) or not text.strip():
                raise ScoringError(f"{where}: option {letter} is empty or not text")
            texts.append(f"{letter}. {text.strip()}")
        return texts, letters
    if not isinstance(options, list) or not options:
        raise ScoringError(f"{where}: 'options' is missing or not a non-empty list of 'A. text' strings")
    if len(options) > len(LETTERS):
        raise ScoringError(f"{where}: {len(options)} options, at most {len(LETTERS)} (A-E) expected")
    letters = list(LETTERS[: len(options)])
    for letter, text in zip(letters, options):
        if not isinstance(text, str) or not text.strip():
            raise ScoringError(f"{where}: option {letter} is empty or not text: {text!r}")
        stripped = text.strip()
        label = _OPTION_LABEL.match(stripped)
        if label and label.group(1).upper() != letter:
            raise ScoringError(f"{where}: option #{letters.index(letter) + 1} is labelled {stripped[0]!r}, expected {letter!r} (options must be in letter order)")
    return list(options), letters


def _check_ground_truth(record: QuestionRecord, letters: Sequence[str], where: str) -> None:
    gt = record.ground_truth
    if gt is None or (isinstance(gt, str) and not gt.strip()):
        raise ScoringError(f"{where}: 'ground_truth' is missing or empty")
    if not isinstance(gt, str):
        raise ScoringError(f"{where}: 'ground_truth' is not an option letter: {gt!r}")
    if gt not in letters:
        raise ScoringError(f"{where}: ground truth {gt!r} is not one of the options ({', '.join(letters)})")


def _check_idx(record: QuestionRecord, pos: int, path: str | os.PathLike | None) -> None:
    idx = record.idx
    if isinstance(idx, bool) or not isinstance(idx, int):
        raise ScoringError(f"{path or '<input>'}: record #{pos}: idx {idx!r} is not an integer")


def _check_category(record: QuestionRecord, where: str) -> None:
    from k9bench.dataset import normalize_category

    try:
        normalize_category(record.question_category)
    except ValueError as exc:
        raise ScoringError(f"{where}: 'question_category' {record.question_category!r}: {exc}") from None


def plan_calculation(
    records: Sequence[QuestionRecord], path: str | os.PathLike | None = None, raw_rows: Sequence[dict] | None = None
) -> tuple[list[ScoringItem], dict[int, str]]:
    """Check every record and split them into items to embed and skipped positions.

    Returns ``(items, skipped)`` where ``skipped`` maps a record's position to
    :data:`SKIP_FAILED` or :data:`SKIP_EMPTY` (an empty answer is embedded all the same by
    :func:`calculate`, see the module doc). ``raw_rows`` (the file's dicts) lets a missing
    ``answer`` key be told apart from an empty answer. Raises :class:`ScoringError` on the
    first malformed record: an idx that is not an integer, an answer that is not text,
    options that are not exactly A-E, a ground truth that is not one of them, a category that
    is neither a released nor a legacy K9-Bench category.
    """
    items: list[ScoringItem] = []
    skipped: dict[int, str] = {}
    seen: dict[Any, int] = {}
    for pos, record in enumerate(records):
        _check_idx(record, pos, path)
        where = _where(path, record)
        if record.idx in seen:
            log.warning("%s appears twice (positions %d and %d); both are scored", where, seen[record.idx], pos)
        seen.setdefault(record.idx, pos)
        if record.failed:
            skipped[pos] = SKIP_FAILED
            continue
        if raw_rows is not None and "answer" not in raw_rows[pos]:
            raise ScoringError(f"{where}: no 'answer' (and no 'error' marking a failed sample)")
        if not isinstance(record.answer, str):
            raise ScoringError(f"{where}: 'answer' is not text: {record.answer!r}")
        texts, letters = option_letters(record.options, where)
        if len(letters) != len(LETTERS):
            raise ScoringError(f"{where}: {len(letters)} options ({', '.join(letters)}); a K9-Bench question has {len(LETTERS)} (A-E)")
        _check_ground_truth(record, letters, where)
        _check_category(record, where)
        if not record.answer.strip():
            skipped[pos] = SKIP_EMPTY
            continue
        items.append(ScoringItem(position=pos, idx=record.idx, answer=record.answer, options=texts, letters=letters))
    return items, skipped


# ---------------------------------------------------------------------------
# Stages


def _clear_eval_fields(record: QuestionRecord) -> QuestionRecord:
    extra = {k: v for k, v in record.extra.items() if k not in _RECORD_EVAL_EXTRAS and k != "similarity_skipped"}
    return dataclasses.replace(record, is_correct=None, evaluation_explanation=None, eval_mode=None, cosine_similarities=None, extra=extra)


def _split_provenance(meta: dict) -> tuple[dict, list]:
    """Input meta without provenance keys, and the provenance chain so far (oldest first)."""
    rest = {k: v for k, v in meta.items() if k not in ("provenance", "input_provenance")}
    chain = list(meta.get("input_provenance") or []) if isinstance(meta.get("input_provenance"), list) else []
    if isinstance(meta.get("provenance"), dict):
        chain.append(meta["provenance"])
    return rest, chain


def calculate(
    artifact: RecordsArtifact,
    model,
    run: EmbeddingRun,
    *,
    path: str | os.PathLike | None = None,
    raw_rows: Sequence[dict] | None = None,
    provenance: dict | None = None,
    plan: tuple[list[ScoringItem], dict[int, str]] | None = None,
) -> RecordsArtifact:
    """The sim stage: every record but a failed sample gains all five ``cosine_similarities``.

    An empty answer is embedded like any other text (as the reference does, so its tools can read
    the file) and flagged ``similarity_skipped: empty_answer`` (evaluate counts it wrong); a failed
    sample gets ``similarity_skipped: failed_sample`` and no similarities. The result's top level is
    the input's plus ``similarity_model``, ``similarity_calculated_at`` and our ``similarity_run``.
    Raises :class:`ScoringError` before anything is written when a record is malformed or a
    similarity is not a finite number. ``plan`` is :func:`plan_calculation`'s result when the
    caller already checked the records (before loading the model).
    """
    items, skipped = plan if plan is not None else plan_calculation(artifact.records, path, raw_rows)
    empties = []
    for pos, reason in skipped.items():
        if reason == SKIP_EMPTY:
            record = artifact.records[pos]
            texts, letters = option_letters(record.options, _where(path, record))
            empties.append(ScoringItem(position=pos, idx=record.idx, answer=record.answer, options=texts, letters=letters))
    to_embed = [*items, *empties]
    started = time.perf_counter()
    sims = batched_similarities(model, to_embed, prompt_name=run.query_prompt_name, batch_size=run.batch_size, run=run) if to_embed else []
    run.seconds = round(time.perf_counter() - started, 3)
    records = [_clear_eval_fields(r) for r in artifact.records]
    for item, table in zip(to_embed, sims):
        bad = [k for k, v in table.items() if not math.isfinite(v)]
        if bad:
            raise ScoringError(f"{path or '<input>'}: record idx {item.idx}: similarity of option(s) {', '.join(bad)} is not a finite number (the model produced NaN/inf)")
        records[item.position].cosine_similarities = table
    for pos, reason in skipped.items():
        records[pos].extra["similarity_skipped"] = reason
    run.scored_records = len(items)
    run.embedded_empty_answers = len(empties)
    counts: dict[str, int] = {}
    for reason in skipped.values():
        counts[reason] = counts.get(reason, 0) + 1
    run.skipped_records = counts
    if counts:
        log.info("not decided by their similarities: %s (empty answers embedded all the same, counted wrong)",
                 ", ".join(f"{v} {k}" for k, v in counts.items()))
    if to_embed and run.seconds > 0:
        log.info("similarities for %d records in %.1f s (%.1f records/s)", len(to_embed), run.seconds, len(to_embed) / run.seconds)

    rest, chain = _split_provenance(artifact.meta)
    meta: dict[str, Any] = {
        "total_count": len(records),
        "similarity_model": run.model,
        "similarity_calculated_at": now_iso(),
    }
    for key, value in rest.items():
        if key not in _EVAL_TOP_KEYS and key not in _SIM_TOP_KEYS and key != "total_count":
            meta[key] = value
    meta["similarity_run"] = run.to_dict()
    if chain:
        meta["input_provenance"] = chain
    if provenance is not None:
        meta["provenance"] = provenance
    return RecordsArtifact(records=records, meta=meta)


@dataclass
class RecordOutcome:
    """What evaluation decided for one record (used for the statistics)."""

    correct: bool
    """The verdict at the chosen threshold."""
    valid: bool
    """False for a failed sample (left out of VALID accuracy)."""
    category: str
    """The record's category."""
    unit: str
    """Its video (bootstrap resampling unit)."""
    sims: dict | None
    """Its similarities (None when unscored)."""
    ground_truth: str
    """Its ground-truth letter."""


def _unit_of(record: QuestionRecord) -> str:
    if record.scene_name:
        return str(record.scene_name)
    if record.video:
        return str(record.video).rsplit(".", 1)[0]
    return f"idx:{record.idx}"


def _category_of(record: QuestionRecord) -> str:
    value = record.question_category
    # a reference failed sample ({"example_id": N, "error": ...}) has no category
    return value if isinstance(value, str) and value else "unknown"


def _check_sims(record: QuestionRecord, where: str) -> dict[str, float]:
    sims = record.cosine_similarities
    if not isinstance(sims, dict) or not sims:
        raise ScoringError(f"{where}: 'cosine_similarities' is not a mapping of option letters to numbers")
    for letter, value in sims.items():
        if not is_finite_number(value):
            raise ScoringError(f"{where}: similarity of option {letter} is {value!r}, not a finite number")
        if not -1.0 - SIMILARITY_SLACK <= value <= 1.0 + SIMILARITY_SLACK:
            raise ScoringError(f"{where}: similarity of option {letter} is {value!r}, outside [-1, 1] (not a cosine similarity)")
    letters = list(sims)
    if record.options:
        _, opt_letters = option_letters(record.options, where)
        if sorted(opt_letters) != sorted(letters):
            raise ScoringError(f"{where}: similarities cover {', '.join(sorted(letters))} but the options are {', '.join(opt_letters)}")
        letters = opt_letters
    _check_ground_truth(record, letters, where)
    return {k: float(v) for k, v in sims.items()}


def _accuracy(correct: int, total: int) -> float | None:
    return correct / total if total else None


def evaluate(
    artifact: RecordsArtifact,
    settings: EvalSettings | None = None,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    path: str | os.PathLike | None = None,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    level: float = 0.95,
    sensitivity: Iterable[float] = SENSITIVITY_THRESHOLDS,
    provenance: dict | None = None,
) -> RecordsArtifact:
    """The eval stage: verdicts by the fine rule, accuracies and our statistics.

    ``settings`` (what ``evaluate_results.py`` passes) gives the threshold, resamples, seed and
    sensitivity thresholds; without it the keywords do. Failed samples are wrong (and left out of
    VALID accuracy); an empty answer is wrong whether or not it carries similarities. A record that
    has neither an error, nor an empty answer, nor valid similarities is an error.
    """
    from k9bench.stats import bootstrap_accuracy

    if settings is not None:
        threshold, resamples, seed, sensitivity = (
            settings.threshold, settings.bootstrap_resamples, settings.seed, settings.sensitivity_thresholds)

    if not is_finite_number(threshold):
        raise ScoringError(f"--threshold must be a finite number, got {threshold!r}")
    records: list[QuestionRecord] = []
    outcomes: list[RecordOutcome] = []
    failure_reasons: dict[str, int] = {}
    empty_answers = 0
    failed_with_sims = 0
    for record in artifact.records:
        where = _where(path, record)
        rec = dataclasses.replace(record, extra={k: v for k, v in record.extra.items() if k not in _RECORD_EVAL_EXTRAS})
        rec.eval_mode = EVAL_MODE
        if rec.failed:
            reason = rec.error_class or "error"
            failure_reasons[reason] = failure_reasons.get(reason, 0) + 1
            if rec.cosine_similarities:
                failed_with_sims += 1
            rec.is_correct = False
            message = " ".join(str(rec.error).split())
            rec.evaluation_explanation = f"failed sample ({reason}): {message[:200]}"
            rec.extra["failure_reason"] = reason
            outcomes.append(RecordOutcome(False, False, _category_of(rec), _unit_of(rec), None, str(rec.ground_truth)))
        elif rec.extra.get("similarity_skipped") == SKIP_EMPTY or not str(rec.answer or "").strip():
            if rec.cosine_similarities is not None:
                _check_sims(rec, where)  # present for the reference's tools; checked, not used
            empty_answers += 1
            rec.is_correct = False
            rec.evaluation_explanation = "wrong: the answer is empty, nothing to compare with the options"
            rec.extra["failure_reason"] = SKIP_EMPTY
            outcomes.append(RecordOutcome(False, True, _category_of(rec), _unit_of(rec), None, str(rec.ground_truth)))
        elif rec.cosine_similarities is None:
            raise ScoringError(f"{where}: no 'cosine_similarities' (run --mode calculate on the raw file first)")
        else:
            sims = _check_sims(rec, where)
            verdict = fine_verdict(sims, rec.ground_truth, threshold)
            rec.is_correct = verdict.is_correct
            rec.evaluation_explanation = verdict.explanation
            rec.extra["similarity_margin"] = verdict.margin
            rec.extra["best_option"] = verdict.best_option
            outcomes.append(RecordOutcome(verdict.is_correct, True, _category_of(rec), _unit_of(rec), sims, rec.ground_truth))
        records.append(rec)
    if failed_with_sims:
        log.warning("%d failed sample(s) carry similarities; they are scored as wrong all the same", failed_with_sims)

    total = len(outcomes)
    correct = sum(o.correct for o in outcomes)
    categories = list(dict.fromkeys(o.category for o in outcomes))
    per_cat: dict[str, dict] = {}
    for cat in categories:
        sub = [o for o in outcomes if o.category == cat]
        c = sum(o.correct for o in sub)
        per_cat[cat] = {"accuracy": _accuracy(c, len(sub)) or 0.0, "correct": c, "total": len(sub)}

    # --- statistics beyond the reference
    def block(sub: Sequence[RecordOutcome]) -> dict:
        all_c = sum(o.correct for o in sub)
        valid = [o for o in sub if o.valid]
        valid_c = sum(o.correct for o in valid)
        return {
            "all": {"accuracy": _accuracy(all_c, len(sub)), "correct": all_c, "total": len(sub)},
            "valid": {"accuracy": _accuracy(valid_c, len(valid)), "correct": valid_c, "total": len(valid)},
            "failed": len(sub) - len(valid),
        }

    stats: dict[str, Any] = {"overall": block(outcomes), "categories": {cat: block([o for o in outcomes if o.category == cat]) for cat in categories}}
    stats["failed_samples"] = {"count": sum(failure_reasons.values()), "reasons": dict(sorted(failure_reasons.items()))}
    stats["empty_answers"] = empty_answers

    if resamples > 0 and outcomes:
        correct_v = [o.correct for o in outcomes]
        units = [o.unit for o in outcomes]
        labels = [o.category for o in outcomes]
        boot_all = bootstrap_accuracy(correct_v, units, labels, None, resamples=resamples, seed=seed, level=level)
        boot_valid = bootstrap_accuracy(correct_v, units, labels, [o.valid for o in outcomes], resamples=resamples, seed=seed, level=level)
        stats["overall"]["all"]["ci95"] = boot_all.overall.as_list()
        stats["overall"]["valid"]["ci95"] = boot_valid.overall.as_list()
        for cat in categories:
            stats["categories"][cat]["all"]["ci95"] = boot_all.by_label[cat].as_list()
            stats["categories"][cat]["valid"]["ci95"] = boot_valid.by_label[cat].as_list()
        stats["bootstrap"] = {"unit": "video", "videos": boot_all.units, "resamples": resamples, "seed": seed,
                              "level": level, "method": "percentile"}
    else:
        stats["bootstrap"] = None

    rows: dict[str, Any] = {}
    for t in list(dict.fromkeys([*sensitivity, threshold])):
        rows[f"{t:g}"] = _at_threshold(outcomes, t)
    rows["argmax"] = _at_threshold(outcomes, None)
    stats["threshold_sensitivity"] = rows

    rest, chain = _split_provenance(artifact.meta)
    old_metadata = rest.get("metadata") if isinstance(rest.get("metadata"), dict) else {}
    meta: dict[str, Any] = {
        "evaluation_timestamp": now_iso(),
        "eval_mode": EVAL_MODE,
        "threshold": threshold,
        "accuracy": _accuracy(correct, total) or 0.0,
        "correct_count": correct,
        "total_count": total,
        "category_wise_accuracy": per_cat,
        "metadata": {
            "similarity_model": rest.get("similarity_model", old_metadata.get("similarity_model")),
            "similarity_calculated_at": rest.get("similarity_calculated_at", old_metadata.get("similarity_calculated_at")),
        },
        "statistics": stats,
    }
    if "similarity_run" in rest:
        meta["similarity_run"] = rest["similarity_run"]
    if path is not None:
        meta["input_file"] = str(path)
    leftover = {k: v for k, v in rest.items() if k not in _EVAL_TOP_KEYS and k not in _SIM_TOP_KEYS and k != "total_count"}
    if leftover:
        meta["input_meta"] = leftover
    if chain:
        meta["input_provenance"] = chain
    if provenance is not None:
        meta["provenance"] = provenance
    return RecordsArtifact(records=records, meta=meta)


def _at_threshold(outcomes: Sequence[RecordOutcome], threshold: float | None) -> dict:
    all_c = valid_c = valid_n = 0
    for o in outcomes:
        ok = o.sims is not None and is_correct_fine(o.sims, o.ground_truth, threshold)
        all_c += ok
        if o.valid:
            valid_n += 1
            valid_c += ok
    return {"accuracy_all": _accuracy(all_c, len(outcomes)), "accuracy_valid": _accuracy(valid_c, valid_n), "correct": all_c}


# ---------------------------------------------------------------------------
# Presentation and paths


def _pct(value: float | None) -> str:
    return "   n/a" if value is None else f"{100.0 * value:5.1f}%"


def _ci(block: dict) -> str:
    ci = block.get("ci95")
    return "" if not ci else f"[{100.0 * ci[0]:4.1f}, {100.0 * ci[1]:4.1f}]"


def format_table(eval_meta: dict, title: str = "") -> str:
    """The printed summary of an eval file: accuracies, intervals, failures, threshold row."""
    stats = eval_meta["statistics"]
    boot = stats.get("bootstrap")
    ci_head = "95% CI" if boot else ""
    name_w = max([len("overall"), len("category")] + [len(c) for c in stats["categories"]])
    head = f"{'category':<{name_w}}  {'n':>5}  {'correct':>7}  {'ALL':>6}  {ci_head:<14}  {'valid':>5}  {'VALID':>6}  {ci_head:<14}"
    lines = []
    if title:
        lines.append(title)
    lines.append(f"fine rule, threshold {eval_meta['threshold']:g}; ALL counts failed samples as wrong, VALID leaves them out")
    lines.append(head)
    lines.append("-" * len(head))

    def row(name: str, b: dict) -> str:
        a, v = b["all"], b["valid"]
        return (f"{name:<{name_w}}  {a['total']:>5}  {a['correct']:>7}  {_pct(a['accuracy']):>6}  {_ci(a):<14}  "
                f"{v['total']:>5}  {_pct(v['accuracy']):>6}  {_ci(v):<14}")

    for cat, b in stats["categories"].items():
        lines.append(row(cat, b))
    lines.append("-" * len(head))
    lines.append(row("overall", stats["overall"]))
    failed = stats["failed_samples"]
    reasons = ", ".join(f"{k} {v}" for k, v in failed["reasons"].items())
    lines.append(f"failed samples: {failed['count']}" + (f" ({reasons})" if reasons else "") + f"; empty answers: {stats['empty_answers']}")
    if boot:
        videos = f"{boot['videos']} video{'' if boot['videos'] == 1 else 's'}"
        lines.append(f"95% CI: percentile bootstrap over {videos}, {boot['resamples']} resamples, seed {boot['seed']}")
    sens = stats["threshold_sensitivity"]
    lines.append("threshold sensitivity (ALL): " + " | ".join(f"{k} {_pct(v['accuracy_all']).strip()}" for k, v in sens.items()))
    return "\n".join(lines)


def default_output_path(input_path: str | os.PathLike, stage: str) -> Path:
    """``raw_X.json`` -> ``sim_X.json`` / ``eval_X.json`` beside it (:func:`k9bench.layout.next_stage_path`)."""
    from k9bench.layout import next_stage_path

    return next_stage_path(input_path, stage)


def output_problem(path: str | os.PathLike, *, folder: bool = False) -> str | None:
    """Why ``path`` (a file, or a folder with ``folder=True``) cannot be written, or None.

    Checked before any work: the nearest existing ancestor must be a folder we may write into
    (missing folders below it are created at write time); an existing target must be a file
    (a folder for ``folder=True``). Nothing is created.
    """
    target = Path(path)
    try:
        if target.exists() and target.is_dir() != folder:
            return "is a folder, not a file" if not folder else "exists and is not a folder"
        ancestor = target if folder else target.parent
        ancestor = ancestor if str(ancestor) else Path(".")
        while not ancestor.exists() and ancestor.parent != ancestor:
            ancestor = ancestor.parent
        if not ancestor.is_dir():
            return f"{ancestor} is not a folder"
        if not os.access(ancestor, os.W_OK | os.X_OK):
            return f"folder {ancestor} is not writable"
    except OSError as exc:  # e.g. a name too long, a permission error while looking
        return f"cannot be checked: {exc.strerror or exc}"
    return None


def normalise_ground_truth(records: Sequence[QuestionRecord], path: str | os.PathLike | None = None) -> int:
    """Upper-case lower-case ground-truth letters in place, as the reference does (SPEC section 9).

    The letter as given is kept in the record's ``ground_truth_as_given``; returns how many
    records changed. Anything else (a letter outside the options, an empty value) is left for
    the record checks to refuse.
    """
    changed = 0
    for record in records:
        gt = record.ground_truth
        if isinstance(gt, str) and gt.upper() != gt:
            record.extra.setdefault("ground_truth_as_given", gt)
            record.ground_truth = gt.upper()
            changed += 1
    if changed:
        log.warning("%s: %d ground-truth letter(s) in lower case, upper-cased as the reference does "
                    "(kept as given in 'ground_truth_as_given')", path or "<input>", changed)
    return changed


def load_for_scoring(path: str | os.PathLike) -> tuple[RecordsArtifact, list[dict]]:
    """Read a raw/sim/eval file (ours, the reference's, or the older ``threshold_results`` layout).

    Returns the artifact and the record dicts as stored (to tell a missing key from an empty
    value). Lower-case ground-truth letters are upper-cased (:func:`normalise_ground_truth`); the
    reference's failed records (``example_id`` + ``error``) are read as failed samples by
    :mod:`k9bench.artifacts`. Raises :class:`~k9bench.artifacts.ArtifactError` naming the file.
    """
    from k9bench.artifacts import QuestionRecord as _Record, find_records, read_json

    data = read_json(path)
    rows, meta = find_records(data, where=str(path))
    records = [_Record.from_dict(row, where=f"{path}: record #{i}") for i, row in enumerate(rows)]
    normalise_ground_truth(records, path)
    return RecordsArtifact(records=records, meta=meta, path=str(path)), list(rows)
