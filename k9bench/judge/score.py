"""Judging one task (one request, its reply turned into an entry or a skip) and the run's summary.

A call that fails after its retries, a reply over :data:`MAX_REPLY_CHARS` and a reply that holds no
usable score dictionary each become a skipped entry with the reason (and the raw reply, cut to
:data:`RAW_REPLY_KEPT` characters): never a score.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Iterable

from k9bench import CATEGORIES
from k9bench.artifacts import JudgeEntry, SkippedEntry, now_iso
from k9bench.judge.cache import request_key
from k9bench.judge.parse import TABLE3_AXES, JudgeParseError, parse_judgement
from k9bench.judge.settings import MISSING_MODEL_ANSWER, JudgeSettings, render_prompt
from k9bench.judge.tasks import JudgeTask
from k9bench.serving.openai_api import MAX_REPLY_CHARS

log = logging.getLogger("k9bench.judge")


RAW_REPLY_KEPT = 4_000
"""Characters of an oversized reply kept in its skipped entry."""


@dataclass
class Outcome:
    """The result of judging one task: an entry or a skip."""

    idx: int
    """Question id."""
    entry: JudgeEntry | None = None
    """The scored entry, when scored."""
    skipped: SkippedEntry | None = None
    """The skip record, when not scored."""
    reply: str | None = None
    """The judge's reply text, when scored (what the reply store keeps)."""
    finish_reason: str | None = None
    """The reply's finish reason, when scored."""
    from_store: bool = False
    """True when the reply came from the reply store (nothing was paid)."""


def task_prompt(task: JudgeTask, settings: JudgeSettings) -> str:
    """The filled judge prompt of one task."""
    return render_prompt(settings.template, question=task.question, correct_answer=task.correct_answer, model_output=task.model_output)


def task_key(task: JudgeTask, settings: JudgeSettings) -> str:
    """The request key of one task (:func:`k9bench.judge.cache.request_key`)."""
    return request_key(judge_model=settings.judge_model, prompt=task_prompt(task, settings), params=settings.request_params())


def judge_task(task: JudgeTask, client: Any, settings: JudgeSettings, key: str | None = None) -> Outcome:
    """Send one task to the judge and turn the reply into an entry, or a skip with the reason.
    Only the sampling parameters given are sent (:meth:`JudgeSettings.request_params`)."""
    result = client.chat([{"role": "user", "content": task_prompt(task, settings)}], model=settings.judge_model, label=f"idx {task.idx}",
                         **settings.request_params())
    if not result.ok:
        extra = {"kind": "api_error", "error_kind": result.error_kind, "status_code": result.status_code, "judge_model": settings.judge_model,
                 "judge_attempts": result.attempts, "judge_usage": result.usage.to_dict()}
        return Outcome(idx=task.idx, skipped=SkippedEntry(idx=task.idx, error=f"judge call failed ({result.error_kind}): {result.error}",
                                                          timestamp=now_iso(), extra=extra))
    return outcome_from_reply(task, settings, text=result.text or "", model=result.model, finish_reason=result.finish_reason,
                              usage=result.usage.to_dict(), attempts=result.attempts, key=key,
                              reply_chars=getattr(result, "reply_chars", None))


def outcome_from_reply(task: JudgeTask, settings: JudgeSettings, *, text: str, model: str | None, finish_reason: str | None,
                       usage: dict | None, attempts: int, key: str | None = None, from_store: bool = False,
                       reply_chars: int | None = None) -> Outcome:
    """One reply (just paid, or from the reply store) -> an entry, or a skip with the reason. ``reply_chars``:
    the reply's length as sent, when ``text`` was cut to the cap before anything scanned it."""
    stamp = now_iso()
    common = {"judge_attempts": attempts, "judge_usage": usage}
    if key is not None:
        common["request_sha256"] = key

    def skip(error: str, **extra: Any) -> Outcome:
        return Outcome(idx=task.idx, skipped=SkippedEntry(idx=task.idx, error=error, timestamp=stamp,
                                                          extra={**extra, "judge_model": settings.judge_model, **common}))

    size = max(len(text), reply_chars or 0)
    if size > MAX_REPLY_CHARS:
        log.warning("idx %s: the judge's reply is %d characters, over the %d-character cap; skipped", task.idx, size, MAX_REPLY_CHARS)
        return skip(f"reply too large: {size} characters, over the {MAX_REPLY_CHARS}-character cap (not parsed)",
                    kind="reply_too_large", reply_chars=size, raw_reply=text[:RAW_REPLY_KEPT], finish_reason=finish_reason)
    try:
        judgement = parse_judgement(text, strict=settings.strict_scores)
    except JudgeParseError as exc:
        log.warning("idx %s: unparseable judge reply (%s)", task.idx, exc)
        return skip(f"parse failure: {exc}", kind="parse_error", raw_reply=text, finish_reason=finish_reason)
    entry = JudgeEntry(
        idx=task.idx, video_url=task.video_url, scene_name=task.scene_name, question_category=task.question_category,
        question=task.question, correct_answer=task.correct_answer, model_output=task.model_output, cot=judgement.cot,
        scores=judgement.scores, judge_model=settings.judge_model, timestamp=stamp,
        extra={"judge_model_served": model, **common},
    )
    if from_store:
        entry.extra["from_reply_store"] = True
    if judgement.adjustments:
        # read as the reference reads them (int(), kept as given), and said so in the entry
        entry.extra["score_adjustments"] = judgement.adjustments
        log.info("idx %s: score(s) read the reference's way: %s", task.idx,
                 ", ".join(f"{axis} {value!r} -> {judgement.scores[axis]}" for axis, value in judgement.adjustments.items()))
    if judgement.out_of_range:
        entry.extra["scores_out_of_range"] = judgement.out_of_range
    return Outcome(idx=task.idx, entry=entry, reply=text, finish_reason=finish_reason, from_store=from_store)


# ---------------------------------------------------------------------------
# Summary


def _mean(values: list[int]) -> float | None:
    return sum(values) / len(values) if values else None


def axis_means(entries: Iterable[dict]) -> dict:
    """Per Table-3 axis: ``{column: {key, mean_1_10, score_0_100, n}}`` (score_0_100 = 10 x mean;
    out-of-range scores are averaged in as given, as the reference does)."""
    entries = list(entries)
    out: dict[str, dict] = {}
    for column, key in TABLE3_AXES:
        values = [e["scores"][key] for e in entries]
        mean = _mean(values)
        out[column] = {
            "key": key,
            "mean_1_10": round(mean, 4) if mean is not None else None,
            "score_0_100": round(mean * 10, 2) if mean is not None else None,
            "n": len(values),
        }
    return out


def summarize(entries: list[dict], skipped: list[dict], failed: list[dict], *, usage_this_run: dict, extra: dict | None = None) -> dict:
    """The summary saved beside the output: per-axis and per-category means, counts, token usage."""
    from k9bench.serving.openai_api import Usage, sum_usage

    categories = [c for c in CATEGORIES if any(e.get("question_category") == c for e in entries)]
    categories += sorted({e.get("question_category", "") for e in entries} - set(categories))
    per_category = {}
    for cat in categories:
        members = [e for e in entries if e.get("question_category", "") == cat]
        per_category[cat or "(none)"] = {"count": len(members), "axes": axis_means(members)}
    usage_files = sum_usage(Usage.from_dict(r.get("judge_usage")) for r in [*entries, *skipped])
    out = {
        "counts": {"scored": len(entries), "skipped": len(skipped), "failed_at_inference": len(failed)},
        "axes": axis_means(entries),
        "per_category": per_category,
        "usage": {"entries_and_skipped": usage_files.to_dict(), "this_run": usage_this_run},
        "skipped_idx": [s["idx"] for s in skipped],
        "missing_model_answer_idx": [s["idx"] for s in skipped if s.get("kind") == MISSING_MODEL_ANSWER],
        "score_adjusted_idx": [e["idx"] for e in entries if e.get("score_adjustments")],
        "out_of_range_idx": [e["idx"] for e in entries if e.get("scores_out_of_range")],
        "failed_at_inference_idx": [f["idx"] for f in failed],
    }
    if extra:
        out.update(extra)
    return out


def format_summary(summary: dict) -> str:
    """The summary as a small text table (printed at the end of a run)."""
    c = summary["counts"]
    lines = [
        f"judge: {summary.get('judge_model', '?')}   scored {c['scored']}   skipped {c['skipped']}   failed at inference {c['failed_at_inference']}",
        "",
        f"{'':24s}" + "".join(f"{col:>10s}" for col, _ in TABLE3_AXES) + f"{'n':>7s}",
    ]

    def row(name: str, axes: dict, n: int) -> str:
        cells = "".join(f"{axes[col]['score_0_100']:>10.2f}" if axes[col]["score_0_100"] is not None else f"{'-':>10s}" for col, _ in TABLE3_AXES)
        return f"{name[:24]:24s}{cells}{n:>7d}"

    lines.append(row("all (0-100)", summary["axes"], c["scored"]))
    for cat, block in summary["per_category"].items():
        lines.append(row(cat, block["axes"], block["count"]))
    means = "  ".join(f"{col} {summary['axes'][col]['mean_1_10']:.2f}" for col, _ in TABLE3_AXES if summary["axes"][col]["mean_1_10"] is not None)
    if means:
        lines.append(f"mean on 1-10: {means}")
    set_aside = summary.get("checkpoint_rejected_lines") or 0
    if set_aside or summary.get("checkpoint_torn_lines"):
        lines.append(f"checkpoint of the earlier run: {set_aside} bad line(s) moved to {summary.get('checkpoint_rejected_file') or '-'}, "
                     f"{summary.get('checkpoint_torn_lines') or 0} torn final line dropped")
    u = summary["usage"]["this_run"]
    t = summary["usage"]["entries_and_skipped"]
    lines.append(
        f"tokens this run: prompt {u['prompt_tokens']}, completion {u['completion_tokens']}, total {u['total_tokens']} "
        f"({u['requests']} responses); all entries: total {t['total_tokens']}"
    )
    return "\n".join(lines)


__all__ = ["MAX_REPLY_CHARS", "RAW_REPLY_KEPT", "Outcome", "axis_means", "format_summary", "judge_task", "outcome_from_reply", "summarize",
           "task_key", "task_prompt"]
