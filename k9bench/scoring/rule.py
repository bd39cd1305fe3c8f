"""The fine rule, the record checks both scoring stages run, and reading a file for scoring.

The rule is the reference's "fine" rule (SPEC section 4): a record is correct when the similarity
between the model's answer and the ground-truth option is above the threshold AND no other option
is *strictly* more similar (a tie with the ground truth counts as correct).

Record checks (:func:`check_record`, :func:`check_sims`) refuse, naming the file and the record's idx:
a record that is not a failed sample without an ``answer`` key, an answer that is not text, options
that are not exactly A-E, a missing ground truth or one outside the options, a category that is not a
K9-Bench one, similarities that are not finite numbers in [-1, 1]. The reader
(:func:`load_for_scoring`, on :func:`k9bench.artifacts.records_artifact_from`) refuses a file that
cannot be read, an idx that is not an integer, a duplicate idx, a file with no records and a number that
is not finite anywhere in it (:func:`check_finite`: ``NaN``, or ``1e400``, which parses as inf), failed
samples included. :func:`check_scored_record` is what the report needs of an eval record.
"""

from __future__ import annotations

import logging
import math
import os
import re
from dataclasses import dataclass
from typing import Any, Sequence

from k9bench import LETTERS
from k9bench.artifacts import QuestionRecord, RecordsArtifact, is_finite_number, records_artifact_from
from k9bench.headers.files import find_records
from k9bench.artifact_io import read_json
from k9bench.scoring.settings import ScoringError

log = logging.getLogger("k9bench.scoring")

EVAL_MODE = "fine"
"""The only evaluation mode (the reference's name for the rule)."""

SKIP_FAILED = "failed_sample"
"""``similarity_skipped`` value: a failed sample; its ``cosine_similarities`` are placeholders (0.0 each)."""
FLAG_EMPTY = "empty_answer"
"""``answer_flag`` value: the answer is the empty string (embedded and decided by the rule, as the reference does)."""
FLAG_BLANK = "blank_answer"
"""``answer_flag`` value: the answer is only white space (embedded and decided by the rule, as the reference does)."""

SIMILARITY_SLACK = 1e-4
"""How far outside [-1, 1] a stored similarity may lie (float rounding of normalised vectors)."""

_OPTION_LABEL = re.compile(r"^([A-Za-z])[.):](?:\s|$)")


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
    """Apply the fine rule and explain it. ``sims`` maps option letters to similarities and must hold
    ``ground_truth``."""
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


def where_of(path: str | os.PathLike | None, record: QuestionRecord) -> str:
    """``file: record idx N``, the prefix of every record message."""
    return f"{path or '<input>'}: record idx {record.idx}"


def answer_flag(answer: str) -> str | None:
    """:data:`FLAG_EMPTY`, :data:`FLAG_BLANK` or None for an answer string."""
    if answer == "":
        return FLAG_EMPTY
    return FLAG_BLANK if not answer.strip() else None


def option_letters(options: Any, where: str) -> tuple[list[str], list[str]]:
    """Option strings (as encoded) and their letters, from a record's ``options``.

    A list holds ``"A. text"`` strings in letter order (the letter is the position; a differing prefix
    letter is an error); a mapping letter -> text is turned into that form. Raises
    :class:`ScoringError` naming ``where``.
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
            raise ScoringError(f"{where}: option #{letters.index(letter) + 1} is labelled {stripped[0]!r}, expected {letter!r} "
                               "(options must be in letter order)")
    return list(options), letters


def check_ground_truth(record: QuestionRecord, letters: Sequence[str], where: str) -> None:
    """Refuse a missing, empty or non-letter ground truth, or one outside ``letters``."""
    gt = record.ground_truth
    if gt is None or (isinstance(gt, str) and not gt.strip()):
        raise ScoringError(f"{where}: 'ground_truth' is missing or empty")
    if not isinstance(gt, str):
        raise ScoringError(f"{where}: 'ground_truth' is not an option letter: {gt!r}")
    if gt not in letters:
        raise ScoringError(f"{where}: ground truth {gt!r} is not one of the options ({', '.join(letters)})")


def _check_category(record: QuestionRecord, where: str) -> None:
    from k9bench.data.dataset import normalize_category

    try:
        normalize_category(record.question_category)
    except ValueError as exc:
        raise ScoringError(f"{where}: 'question_category' {record.question_category!r}: {exc}") from None


def check_record(record: QuestionRecord, row: dict | None, where: str) -> tuple[list[str], list[str]]:
    """The checks of a record that is not a failed sample; returns its option texts and letters.

    ``row`` (the record's dict as stored) tells a missing ``answer`` key from an empty answer."""
    if row is not None and "answer" not in row:
        raise ScoringError(f"{where}: no 'answer' (and no 'error' marking a failed sample)")
    if not isinstance(record.answer, str):
        raise ScoringError(f"{where}: 'answer' is not text: {record.answer!r}")
    texts, letters = option_letters(record.options, where)
    if len(letters) != len(LETTERS):
        raise ScoringError(f"{where}: {len(letters)} options ({', '.join(letters)}); a K9-Bench question has {len(LETTERS)} (A-E)")
    check_ground_truth(record, letters, where)
    _check_category(record, where)
    return texts, letters


def check_sims(record: QuestionRecord, where: str) -> dict[str, float]:
    """A record's similarities as floats; refuses a missing table, a value that is not a finite number
    (NaN and infinities included) or lies outside [-1, 1], letters that differ from the options', and
    a ground truth outside them."""
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
    check_ground_truth(record, letters, where)
    return {k: float(v) for k, v in sims.items()}


# ---------------------------------------------------------------------------
# Reading


def normalise_ground_truth(records: Sequence[QuestionRecord], path: str | os.PathLike | None = None) -> int:
    """Upper-case lower-case ground-truth letters in place, as the reference does (SPEC section 9).

    The letter as given is kept in the record's ``ground_truth_as_given``; returns how many records
    changed. Anything else (a letter outside the options, an empty value) is left for the checks."""
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


def _non_finite(value: Any, where: str) -> tuple[str, float] | None:
    """``(where, value)`` of the first number in ``value`` that is not finite (NaN, an infinity: ``1e400``
    parses as one), or None."""
    if isinstance(value, float) and not math.isfinite(value):
        return where, value
    if isinstance(value, dict):
        for key, item in value.items():
            found = _non_finite(item, f"{where}.{key}" if where else str(key))
            if found:
                return found
    elif isinstance(value, list):
        for n, item in enumerate(value):
            found = _non_finite(item, f"{where}[{n}]")
            if found:
                return found
    return None


def check_finite(rows: Sequence[dict], meta: dict, path: str | os.PathLike | None = None) -> None:
    """Refuse a file holding a number that is not finite anywhere (a similarity written as ``1e400`` reads
    as inf, ``NaN`` as nan: no verdict can be drawn from them and no JSON file can hold them): a
    :class:`ScoringError` naming the file, the record's idx and the field (or the top-level key)."""
    for n, row in enumerate(rows):
        if not isinstance(row, dict):
            continue
        found = _non_finite(row, "")
        if found is None:
            continue
        idx = row.get("idx", row.get("example_id", f"#{n}"))
        where = f"{path or '<input>'}: record idx {idx}"
        name, value = found
        sims = row.get("cosine_similarities")
        letter = next((k for k, v in sims.items() if v is value), None) if isinstance(sims, dict) else None
        if letter is not None:
            raise ScoringError(f"{where}: similarity of option {letter} is {value!r}, not a finite number")
        declared = QuestionRecord.__dataclass_fields__.get(name)
        if declared is not None and declared.type == "str":  # a text field (the answer): said as the record checks say it
            raise ScoringError(f"{where}: '{name}' is not text: {value!r}")
        raise ScoringError(f"{where}: '{name}' is {value!r}, not a finite number")
    found = _non_finite(meta, "")
    if found is not None:
        raise ScoringError(f"{path or '<input>'}: top-level '{found[0]}' is {found[1]!r}, not a finite number")


def check_scored_record(record: QuestionRecord, where: str) -> None:
    """What a report needs of an eval record: a record that is not a failed sample has a ground-truth
    letter among its options; any record's similarities, where given, are finite numbers in [-1, 1]
    (:func:`check_sims`). Raises :class:`ScoringError` naming ``where`` and the field."""
    if record.failed:
        sims = record.cosine_similarities
        for letter, value in (sims.items() if isinstance(sims, dict) else ()):
            if not is_finite_number(value):
                raise ScoringError(f"{where}: similarity of option {letter} is {value!r}, not a finite number")
        return
    if record.cosine_similarities is not None:
        check_sims(record, where)
        return
    letters = option_letters(record.options, where)[1] if record.options else list(LETTERS)
    check_ground_truth(record, letters, where)


def load_for_scoring(path: str | os.PathLike) -> tuple[RecordsArtifact, list[dict]]:
    """Read a raw/sim/eval file (ours, the reference's, or the older ``threshold_results`` layout)
    through the one reader, refusing a file without records.

    Returns the artifact and the record dicts as stored (to tell a missing key from an empty value).
    Lower-case ground-truth letters are upper-cased (:func:`normalise_ground_truth`); the reference's
    failed records (``example_id`` + ``error``) are read as failed samples. Raises
    :class:`~k9bench.artifacts.ArtifactError` naming the file."""
    artifact, rows = read_records(path)
    check_finite(rows, artifact.meta, path)
    return artifact, rows


def read_records(path: str | os.PathLike) -> tuple[RecordsArtifact, list[dict]]:
    """The records of ``path`` as scoring sees them: read through the one reader (a file without records
    refused), ground-truth letters normalised (:func:`normalise_ground_truth`). The one reading shared by
    scoring (:func:`load_for_scoring`) and the judge's checks before it pays (issue 40 item 2), so the
    judge refuses only what scoring refuses. Raises :class:`~k9bench.artifacts.ArtifactError`."""
    data = read_json(path)
    artifact = records_artifact_from(data, path, allow_empty=False)
    rows = list(find_records(data, where=str(path))[0])
    normalise_ground_truth(artifact.records, path)
    return artifact, rows
