"""``evaluate`` (sim -> eval): verdicts by the fine rule, the reference's accuracies, our statistics.

Every record that is not a failed sample is decided by the rule from its similarities, an empty or
blank answer included (as the reference decides it); such answers are flagged (``answer_flag``) and
counted (``statistics.empty_answers``, and how many of them the rule found correct), never
overridden. A failed sample is wrong whatever similarities it carries (ours carry 0.0 each).

Beyond the reference, in extra keys: ALL accuracy (failed samples count as wrong; this is the
reference's ``accuracy``) and VALID accuracy (failed samples left out), failure-reason counts, 95%
intervals from a bootstrap over videos (:mod:`k9bench.stats`), accuracy at other thresholds and under
argmax alone, and per record the margin between the ground truth and the best distractor.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from k9bench.artifacts import QuestionRecord, RecordsArtifact, is_finite_number, now_iso
from k9bench.scoring.calculate import RECORD_EVAL_EXTRAS, carried_meta, finish_meta, split_provenance
from k9bench.scoring.rule import EVAL_MODE, SKIP_FAILED, answer_flag, check_record, check_sims, fine_verdict, is_correct_fine, where_of
from k9bench.scoring.settings import DEFAULT_THRESHOLD, SENSITIVITY_THRESHOLDS, EvalSettings, ScoringError
from k9bench.stats import DEFAULT_RESAMPLES, DEFAULT_SEED, MIN_INTERVAL_VIDEOS, interval_shown

log = logging.getLogger("k9bench.scoring")


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
    """Its similarities (None for a failed sample)."""
    ground_truth: str
    """Its ground-truth letter."""


def _category_of(record: QuestionRecord) -> str:
    value = record.question_category
    # a reference failed sample ({"example_id": N, "error": ...}) has no category
    return value if isinstance(value, str) and value else "unknown"


def _accuracy(correct: int, total: int) -> float | None:
    return correct / total if total else None


def _decide(rec: QuestionRecord, row: dict | None, where: str, threshold: float) -> RecordOutcome:
    """Fill in one record's verdict fields; return its outcome."""
    rec.eval_mode = EVAL_MODE
    if rec.failed:
        reason = rec.error_class or "error"
        rec.is_correct = False
        message = " ".join(str(rec.error).split())
        rec.evaluation_explanation = f"failed sample ({reason}): {message[:200]}"
        rec.extra["failure_reason"] = reason
        return RecordOutcome(False, False, _category_of(rec), rec.video_key, None, str(rec.ground_truth))
    check_record(rec, row, where)
    if rec.cosine_similarities is None:
        raise ScoringError(f"{where}: no 'cosine_similarities' (run --mode calculate on the raw file first)")
    sims = check_sims(rec, where)
    verdict = fine_verdict(sims, rec.ground_truth, threshold)
    rec.is_correct = verdict.is_correct
    rec.evaluation_explanation = verdict.explanation
    flag = answer_flag(rec.answer)
    rec.extra.pop("answer_flag", None)
    if flag:
        rec.extra["answer_flag"] = flag
        rec.evaluation_explanation += f" (the answer is {'empty' if flag == 'empty_answer' else 'blank'}; decided by its similarities, as the reference does)"
    rec.extra["similarity_margin"] = verdict.margin
    rec.extra["best_option"] = verdict.best_option
    return RecordOutcome(verdict.is_correct, True, _category_of(rec), rec.video_key, sims, rec.ground_truth)


def evaluate(
    artifact: RecordsArtifact,
    settings: EvalSettings | None = None,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    path: str | os.PathLike | None = None,
    raw_rows: Sequence[dict] | None = None,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    level: float = 0.95,
    sensitivity: Iterable[float] = SENSITIVITY_THRESHOLDS,
    provenance: dict | None = None,
    extra_meta: dict | None = None,
) -> RecordsArtifact:
    """The eval stage (see the module doc).

    ``settings`` (what the stage passes) gives the threshold, resamples, seed and sensitivity
    thresholds; without it the keywords do. ``raw_rows`` (the file's dicts) tells a missing ``answer``
    from an empty one. A record that is not a failed sample and lacks an answer, options, a ground
    truth or valid similarities is an error naming the file and idx."""
    from k9bench.stats import bootstrap_accuracy

    if settings is not None:
        threshold, resamples, seed, sensitivity = (
            settings.threshold, settings.bootstrap_resamples, settings.seed, settings.sensitivity_thresholds)
    if not is_finite_number(threshold):
        raise ScoringError(f"--threshold must be a finite number, got {threshold!r}")
    records: list[QuestionRecord] = []
    outcomes: list[RecordOutcome] = []
    failure_reasons: dict[str, int] = {}
    flags: dict[str, list[bool]] = {}
    for pos, record in enumerate(artifact.records):
        extra = {k: v for k, v in record.extra.items() if k not in RECORD_EVAL_EXTRAS}
        if extra.get("similarity_skipped") not in (None, SKIP_FAILED):
            extra.pop("similarity_skipped")  # an older sim file of ours flagged empty answers there
        rec = dataclasses.replace(record, extra=extra)
        outcome = _decide(rec, raw_rows[pos] if raw_rows is not None else None, where_of(path, rec), threshold)
        if rec.failed:
            reason = rec.extra["failure_reason"]
            failure_reasons[reason] = failure_reasons.get(reason, 0) + 1
        elif rec.extra.get("answer_flag"):
            flags.setdefault(rec.extra["answer_flag"], []).append(outcome.correct)
        outcomes.append(outcome)
        records.append(rec)

    total = len(outcomes)
    correct = sum(o.correct for o in outcomes)
    categories = list(dict.fromkeys(o.category for o in outcomes))
    per_cat: dict[str, dict] = {}
    for cat in categories:
        sub = [o for o in outcomes if o.category == cat]
        c = sum(o.correct for o in sub)
        per_cat[cat] = {"accuracy": _accuracy(c, len(sub)) or 0.0, "correct": c, "total": len(sub)}

    def block(sub: Sequence[RecordOutcome]) -> dict:
        all_c = sum(o.correct for o in sub)
        valid = [o for o in sub if o.valid]
        valid_c = sum(o.correct for o in valid)
        return {
            "all": {"accuracy": _accuracy(all_c, len(sub)), "correct": all_c, "total": len(sub), "videos": len({o.unit for o in sub})},
            "valid": {"accuracy": _accuracy(valid_c, len(valid)), "correct": valid_c, "total": len(valid),
                      "videos": len({o.unit for o in valid})},
            "failed": len(sub) - len(valid),
        }

    stats: dict[str, Any] = {"overall": block(outcomes), "categories": {cat: block([o for o in outcomes if o.category == cat]) for cat in categories}}
    stats["failed_samples"] = {"count": sum(failure_reasons.values()), "reasons": dict(sorted(failure_reasons.items()))}
    stats["empty_answers"] = sum(len(v) for v in flags.values())
    stats["answer_flags"] = {flag: {"count": len(v), "correct": sum(v)} for flag, v in sorted(flags.items())}
    if flags:
        log.info("%d empty or blank answer(s) decided by their similarities, as the reference does (%d correct)",
                 stats["empty_answers"], sum(sum(v) for v in flags.values()))

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

    rest, chain = split_provenance(artifact.meta)
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
    leftover = carried_meta(rest)
    if leftover:
        meta["input_meta"] = leftover
    return RecordsArtifact(records=records, meta=finish_meta(meta, extra_meta=extra_meta, chain=chain, provenance=provenance))


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
# The printed table


def _pct(value: float | None) -> str:
    return "   n/a" if value is None else f"{100.0 * value:5.1f}%"


def _ci(block: dict, videos: int | None = None) -> str:
    """The block's interval in percent; ``n/a`` when drawn over fewer than
    :data:`k9bench.stats.MIN_INTERVAL_VIDEOS` videos (as the report shows it: such an interval says
    nothing and often comes out as ``[0.0, 0.0]``). ``videos`` is the count when the block has none
    (an eval file written before blocks recorded theirs)."""
    ci = block.get("ci95")
    if not ci:
        return ""
    units = block.get("videos", videos)
    if not interval_shown(units if isinstance(units, int) and not isinstance(units, bool) else None):
        return "[n/a]"
    return f"[{100.0 * ci[0]:4.1f}, {100.0 * ci[1]:4.1f}]"


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

    def row(name: str, b: dict, videos: int | None = None) -> str:
        a, v = b["all"], b["valid"]
        return (f"{name:<{name_w}}  {a['total']:>5}  {a['correct']:>7}  {_pct(a['accuracy']):>6}  {_ci(a, videos):<14}  "
                f"{v['total']:>5}  {_pct(v['accuracy']):>6}  {_ci(v, videos):<14}")

    for cat, b in stats["categories"].items():
        lines.append(row(cat, b))
    lines.append("-" * len(head))
    lines.append(row("overall", stats["overall"], boot.get("videos") if boot else None))
    failed = stats["failed_samples"]
    reasons = ", ".join(f"{k} {v}" for k, v in failed["reasons"].items())
    flagged = stats.get("answer_flags") or {}
    empty_correct = sum(v["correct"] for v in flagged.values())
    lines.append(f"failed samples: {failed['count']}" + (f" ({reasons})" if reasons else "")
                 + f"; empty or blank answers: {stats['empty_answers']}"
                 + (f" (decided by their similarities, {empty_correct} correct)" if stats["empty_answers"] else ""))
    if boot:
        videos = f"{boot['videos']} video{'' if boot['videos'] == 1 else 's'}"
        lines.append(f"95% CI: percentile bootstrap over {videos}, {boot['resamples']} resamples, seed {boot['seed']}")
    if any("[n/a]" in line for line in lines):
        lines.append(f"[n/a]: an interval over fewer than {MIN_INTERVAL_VIDEOS} videos is not shown (it says nothing)")
    sens = stats["threshold_sensitivity"]
    lines.append("threshold sensitivity (ALL): " + " | ".join(f"{k} {_pct(v['accuracy_all']).strip()}" for k, v in sens.items()))
    return "\n".join(lines)
