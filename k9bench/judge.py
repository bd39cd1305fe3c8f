"""LLM-as-judge scoring of free-form answers (SPEC section 5): prompt, parsing, resumable runs, summary.

One request per question: our judge prompt (``k9bench/prompts/judge_prompt.txt``, or a
file given verbatim) filled with the question, the text of the right option and the
model's answer. The judge replies with a ``CoT:`` line and a dictionary of five
integer scores 1-10; :func:`parse_judgement` reads the *last* ``{...}`` block (single
quotes and code fences tolerated). As the reference does (SPEC section 9), a numeric
string (``"9"``) is read as its number and a non-integer (``7.5``) is truncated toward
zero; both are flagged in the entry (``score_adjustments``). Anything else (a score out
of 1-10, ``true``, a missing key, no dictionary) and any failed call is never turned into
a score: it goes to the skipped list with its reason (and the raw reply).

Settings are frozen dataclasses whose fields carry the flags of ``subjective_evals.py``
(:class:`JudgeSettings`: model, prompt, sampling; :class:`RequestSettings`: endpoint,
concurrency, retries; :class:`JudgeRunSettings`: input, outputs, selection), combined in
:class:`JudgeConfig`, which the engine takes. The default judge model is
:data:`DEFAULT_JUDGE_MODEL`, defined here only.

A run (:func:`run_judge`) checkpoints each result as it arrives
(``<output>.partial.jsonl``), writes the judge list in idx order and the skipped list
atomically, and on a rerun of the same command skips what is done and retries what
was skipped; it refuses earlier files made with other result settings (the
fingerprint of :func:`judge_fingerprint`, checked by :func:`load_prior`; files and
checkpoint through the shared :class:`k9bench.resume.ResumableStage`). Records that
failed at inference (``error`` set, the reference's ``example_id`` failures included)
are not judged; they are counted and reported. With a dataset, questions that have no
record in the file become skipped entries with the reason ``missing_model_answer``.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import logging
import math
import re
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from k9bench import CATEGORIES, LETTERS, layout
from k9bench.artifacts import (
    ArtifactError,
    JudgeEntry,
    QuestionRecord,
    SkippedEntry,
    checkpoint_path,
    load_records_artifact,
    now_iso,
    read_json,
    write_json_atomic,
)
from k9bench.dataset import DEFAULT_SPLIT
from k9bench.redact import redact
from k9bench.settings import result_fingerprint, setting, to_dict
from k9bench.validators import float_in_range, non_negative_int, positive_float, positive_int

log = logging.getLogger(__name__)

AXES = ("Logic", "Factuality", "Accuracy", "Conciseness", "Overall")
"""The five score keys the judge must return."""

TABLE3_AXES = (("Logical", "Logic"), ("Factual", "Factuality"), ("Concise", "Conciseness"), ("Accuracy", "Accuracy"), ("Overall", "Overall"))
"""(paper column, score key) in the order of the paper's Table 3."""

PLACEHOLDERS = ("question", "correct_answer", "model_output")
"""The fields a judge prompt template must contain."""

DEFAULT_JUDGE_MODEL = "gpt-4o"
"""The judge model when ``--judge_model`` is not given (the paper's judge); defined here only."""

MISSING_MODEL_ANSWER = "missing_model_answer"
"""Skip reason (the reference's) of a dataset question with no record in the judged file."""


class JudgeInputError(Exception):
    """The evaluations file, the prompt or an earlier output cannot be used; the message names what and where."""


class JudgeParseError(ValueError):
    """A judge reply that holds no valid score dictionary; the message says why."""


# ---------------------------------------------------------------------------
# Settings (the flags of subjective_evals.py are generated from these fields)

_TEMPERATURE_RANGE = float_in_range(0.0, 2.0)


def temperature_value(text: str) -> float | None:
    """``--temperature``: a number in [0, 2], or ``none``/``default`` for the API's own default."""
    if str(text).strip().lower() in ("none", "default"):
        return None
    try:
        return _TEMPERATURE_RANGE(text)
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"{exc} (or 'none' for the API's own default)") from None


@dataclass(frozen=True)
class JudgeSettings:
    """What shapes a judge call: model, prompt and sampling (recorded in the meta sidecar). The
    fields marked ``result=True`` and the prompt's sha256 form the resume fingerprint."""

    judge_model: str = setting(
        DEFAULT_JUDGE_MODEL,
        "judge model id (default: %(default)s); pin a dated snapshot (e.g. gpt-4o-2024-08-06) for comparable numbers",
        result=True,
    )
    temperature: float | None = setting(
        0.0, "judge sampling temperature (default: %(default)s; 'none': the API's own default)", type=temperature_value, result=True
    )
    max_tokens: int | None = setting(
        None, "limit on the judge's reply length (default: the API's)", type=positive_int
    )  # not a result setting: raising it to retry replies cut short must not refuse the earlier entries
    prompt_file: str | None = setting(
        None, "judge prompt template used verbatim instead of ours ({question}, {correct_answer}, {model_output})"
    )
    template: str = setting("", "the judge prompt template (the built-in one, or --prompt_file's text)", cli=False)
    prompt_source: str = setting("builtin:judge_prompt", "where the template came from (builtin:judge_prompt or the file)", cli=False)

    @property
    def prompt_sha256(self) -> str:
        """SHA-256 of the template (part of the fingerprint)."""
        return hashlib.sha256(self.template.encode("utf-8")).hexdigest()

    def record(self) -> dict:
        """The settings as written to the meta sidecar (the template by its source and sha256)."""
        out = {k: v for k, v in to_dict(self).items() if k != "template"}
        out["prompt_sha256"] = self.prompt_sha256
        return out


@dataclass(frozen=True)
class RequestSettings:
    """How judge requests are sent (no effect on the scores)."""

    base_url: str | None = setting(None, "OpenAI-compatible endpoint (vLLM, SGLang, Azure, a proxy); default: the OpenAI API")
    concurrency: int = setting(8, "requests in flight at once (default: %(default)s)", type=positive_int)
    max_retries: int = setting(
        5, "retries per request on 429, 5xx, timeouts and connection errors (default: %(default)s)", type=non_negative_int
    )
    timeout: float = setting(120.0, "seconds per request attempt (default: %(default)s)", type=positive_float)
    retry_backoff: float = setting(
        1.0, "seconds before the first retry, doubled each time, with jitter (default: %(default)s)", type=positive_float
    )
    retry_backoff_max: float = setting(60.0, "ceiling of the retry backoff in seconds (default: %(default)s)", type=positive_float)

    def retry_policy(self) -> Any:
        """The :class:`k9bench.openai_api.RetryPolicy` these settings describe."""
        from k9bench.openai_api import RetryPolicy

        return RetryPolicy(max_retries=self.max_retries, backoff_base=self.retry_backoff, backoff_max=self.retry_backoff_max)

    def record(self) -> dict:
        """As written to the meta sidecar (secrets inside ``base_url`` masked)."""
        return redact(to_dict(self))


@dataclass(frozen=True)
class JudgeRunSettings:
    """What is judged and where the results go."""

    evaluations: str | None = setting(
        None, "raw, sim or eval JSON file (individual_results, or the older threshold_results layout)", required=True
    )
    output: str | None = setting(None, "judge JSON list (default: judge_<name>.json beside --evaluations)")
    skipped: str | None = setting(None, "skipped entries JSON list (default: <output stem>_skipped.json)")
    limit: int | None = setting(None, "judge only the first N answered questions (idx order)", type=non_negative_int)
    dataset_name: str | None = setting(
        None,
        "cross-check the records against this dataset (Hub id, local file, or 'demo'), report mismatches, and list "
        f"its questions that have no record in the file as skipped ({MISSING_MODEL_ANSWER})",
    )
    split: str = setting(DEFAULT_SPLIT, "dataset split for --dataset_name (default: %(default)s)")


@dataclass(frozen=True)
class JudgeConfig:
    """Everything a judge run needs, built once in ``subjective_evals.main``."""

    judge: JudgeSettings
    """Model, prompt, sampling."""
    requests: RequestSettings = field(default_factory=RequestSettings)
    """Endpoint, concurrency, retries."""
    run: JudgeRunSettings = field(default_factory=JudgeRunSettings)
    """Input, outputs, selection."""


def judge_fingerprint(settings: JudgeSettings) -> dict:
    """The settings that change a judgement: the ``result=True`` fields and the prompt's sha256."""
    return {**result_fingerprint(settings), "prompt_sha256": settings.prompt_sha256}


# ---------------------------------------------------------------------------
# Prompt


def check_prompt_template(template: str, source: str) -> None:
    """Refuse a template that ``str.format`` cannot fill or that lacks a placeholder."""
    try:
        fields = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    except ValueError as exc:
        raise JudgeInputError(f"judge prompt {source}: not a valid template ({exc}); write literal braces as {{{{ and }}}}") from None
    missing = [p for p in PLACEHOLDERS if p not in fields]
    unknown = sorted(f for f in fields if f not in PLACEHOLDERS)
    if unknown:
        raise JudgeInputError(
            f"judge prompt {source}: unknown placeholder(s) {', '.join('{' + u + '}' for u in unknown)}; "
            f"only {{question}}, {{correct_answer}} and {{model_output}} are filled (write literal braces as {{{{ and }}}})"
        )
    if missing:
        raise JudgeInputError(f"judge prompt {source}: lacks the placeholder(s) {', '.join('{' + m + '}' for m in missing)}")


def render_prompt(template: str, *, question: str, correct_answer: str, model_output: str) -> str:
    """The judge prompt for one question."""
    return template.format(question=question, correct_answer=correct_answer, model_output=model_output)


# ---------------------------------------------------------------------------
# Parsing

_FENCE = re.compile(r"```[A-Za-z0-9_+-]*[ \t]*\n?|```")
_BLOCK = re.compile(r"\{[^{}]*\}", re.S)
_COT = re.compile(r"^[\s>*_#-]*CoT[\s*_]*:[\s*_]*(.*)$", re.I | re.M)


@dataclass
class Judgement:
    """A parsed judge reply."""

    scores: dict
    """Axis name (see :data:`AXES`) -> integer 1-10, in :data:`AXES` order."""
    cot: str
    """The text of the ``CoT:`` line ("" when the judge wrote none)."""
    adjustments: dict = field(default_factory=dict)
    """Axis name -> the value as the judge wrote it, for each score that was not a plain integer
    (a numeric string, or a non-integer truncated toward zero as the reference's ``int()`` does)."""


_INT_TEXT = re.compile(r"^\s*[+-]?\d{1,6}\s*$")


def _read_score(axis: str, value: Any) -> tuple[int, bool]:
    """``(score, adjusted)``: an integer 1-10 read the reference's way where the meaning is clear
    (``"9"`` -> 9, ``7.5`` -> 7); a bool, an out-of-range score or any other value raises."""
    adjusted = False
    number: Any = value
    if isinstance(value, str) and _INT_TEXT.match(value):
        number, adjusted = int(value), True
    elif isinstance(value, float) and math.isfinite(value):
        number = int(value)  # toward zero, as int() does
        adjusted = number != value
    if isinstance(number, bool) or not isinstance(number, int):
        raise JudgeParseError(f"score {axis!r} is {value!r}, not an integer 1-10")
    if not 1 <= number <= 10:
        shown = f"{value!r} ({number} after truncation)" if adjusted and isinstance(value, float) else (repr(value) if adjusted else str(value))
        raise JudgeParseError(f"score {axis!r} is {shown}, outside 1-10")
    return number, adjusted


def _score_value(axis: str, value: Any) -> int:
    """A score as stored in a judge file: exactly an integer 1-10."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise JudgeParseError(f"score {axis!r} is {value!r}, not an integer 1-10")
    if not 1 <= value <= 10:
        raise JudgeParseError(f"score {axis!r} is {value}, outside 1-10")
    return value


def parse_judgement(reply: str | None) -> Judgement:
    """Parse a judge reply; raise :class:`JudgeParseError` unless it ends in a valid score dictionary.

    The last ``{...}`` block is read as JSON, else as a Python literal (single
    quotes); code fences are ignored. All five keys of :data:`AXES` are required
    (matched case-insensitively; extra keys are ignored) and every value must be an
    integer 1-10 once read as the reference reads it: an integer string counts as its
    number and a finite non-integer is truncated toward zero (both listed in
    :attr:`Judgement.adjustments`); a bool, ``NaN``, other text or a value outside 1-10
    after truncation is refused.
    """
    if reply is None or not reply.strip():
        raise JudgeParseError("empty reply")
    text = _FENCE.sub("\n", reply)
    blocks = list(_BLOCK.finditer(text))
    if not blocks:
        raise JudgeParseError("no {...} score dictionary in the reply")
    block = blocks[-1]
    raw = block.group(0)
    data: Any
    try:
        data = json.loads(raw)
    except json.JSONDecodeError:
        try:
            data = ast.literal_eval(raw)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            raise JudgeParseError(f"the last {{...}} block is neither JSON nor a Python dict: {raw[:200]!r}") from None
    if not isinstance(data, dict):
        raise JudgeParseError(f"the last {{...}} block is a {type(data).__name__}, not a dictionary")
    by_key: dict[str, Any] = {}
    for key, value in data.items():
        norm = str(key).strip().lower()
        for axis in AXES:
            if norm == axis.lower():
                if axis in by_key:
                    raise JudgeParseError(f"score {axis!r} is given twice")
                by_key[axis] = value
    missing = [a for a in AXES if a not in by_key]
    if missing:
        raise JudgeParseError(f"missing score key(s): {', '.join(missing)}")
    scores: dict[str, int] = {}
    adjustments: dict[str, Any] = {}
    for axis in AXES:
        scores[axis], adjusted = _read_score(axis, by_key[axis])
        if adjusted:
            adjustments[axis] = by_key[axis]
    cot = ""
    head = text[: block.start()]
    in_head = list(_COT.finditer(head))
    if in_head:
        # the CoT runs from its label to the score block (it may span lines)
        cot_text = head[in_head[-1].start(1):]
        earlier = _BLOCK.search(cot_text)
        if earlier:  # stop at an earlier dictionary the judge wrote before the final one
            cot_text = cot_text[: earlier.start()]
    else:
        anywhere = list(_COT.finditer(text))
        cot_text = anywhere[-1].group(1) if anywhere else ""
    cot = " ".join(cot_text.split()).strip(" *_")
    return Judgement(scores=scores, cot=cot, adjustments=adjustments)


# ---------------------------------------------------------------------------
# Tasks from an evaluations file


@dataclass(frozen=True)
class JudgeTask:
    """One question to judge."""

    idx: int
    """Question id."""
    question: str
    """Question text."""
    correct_answer: str
    """Text of the right option."""
    model_output: str
    """The evaluated model's answer."""
    question_category: str
    """Category."""
    scene_name: str
    """YouTube id."""
    video_url: str
    """YouTube URL."""
    ground_truth: str
    """Letter of the right option."""


def option_text(options: Any, letter: str) -> str | None:
    """The text of option ``letter`` from ``["A. text", ...]`` or ``{"A": text}``; None if absent."""
    if isinstance(options, dict):
        value = options.get(letter)
        return str(value) if value is not None else None
    if isinstance(options, list):
        for item in options:
            if not isinstance(item, str):
                continue
            s = item.strip()
            if len(s) >= 2 and s[0] == letter and s[1] in ".):":
                return s[2:].strip()
    return None


def _video_url(record: QuestionRecord, scene: str) -> str:
    url = record.extra.get("video_url")
    if isinstance(url, str) and url:
        return url
    from k9bench.youtube import canonical_url, is_valid_scene_name

    return canonical_url(scene) if scene and is_valid_scene_name(scene) else ""


def _not_text(name: str, value: Any) -> str | None:
    """A problem when a field that must be text holds something else (a number, NaN, a dict...)."""
    if isinstance(value, str):
        return None
    return f"{name} is {value!r:.80} (type {type(value).__name__}), not text"


def _idx_problem(idx: Any) -> str | None:
    if isinstance(idx, bool) or not isinstance(idx, int):
        return f"idx {idx!r:.40} is not an integer"
    return None


def task_from_record(record: QuestionRecord) -> tuple[JudgeTask | None, list[str]]:
    """The task for one (non-failed) record, or the list of problems that prevent it.

    The question, answer, category and scene must be text: a number, ``NaN`` or a dict there
    would be sent to the judge as its ``repr`` (and a NaN would break every later write)."""
    problems: list[str] = []
    if (why := _idx_problem(record.idx)) is not None:
        problems.append(why)
    for name in ("question", "answer", "question_category", "scene_name"):
        if (why := _not_text(name, getattr(record, name))) is not None:
            problems.append(why)
    if problems:
        return None, problems
    letter = str(record.ground_truth or "").strip().upper()
    if letter not in LETTERS:
        problems.append(f"ground_truth {record.ground_truth!r} is not a letter A-E")
    correct = option_text(record.options, letter) if letter in LETTERS else None
    if letter in LETTERS and not correct:
        problems.append(f"options have no text for the ground-truth letter {letter} (options: {record.options!r:.200})")
    if not record.question.strip():
        problems.append("question is empty")
    if problems:
        return None, problems
    scene = record.scene_name or (record.video[:-4] if record.video.endswith(".mp4") else "")
    return (
        JudgeTask(
            idx=record.idx,
            question=record.question,
            correct_answer=correct or "",
            model_output=record.answer,
            question_category=record.question_category,
            scene_name=scene,
            video_url=_video_url(record, scene),
            ground_truth=letter,
        ),
        [],
    )


@dataclass
class TaskSet:
    """What an evaluations file gives the judge."""

    tasks: list[JudgeTask]
    """Judgeable questions, in idx order."""
    failed: list[dict]
    """Records that failed at inference: ``{idx, error, error_class}``, not judged."""
    stage: str
    """raw, sim or eval."""
    total_records: int
    """Records in the file."""
    missing: list[int] = field(default_factory=list)
    """Dataset questions with no record in the file (filled by :func:`with_missing_answers`)."""

    @property
    def record_idx(self) -> set:
        """idx of every record in the file (judgeable or failed)."""
        return {t.idx for t in self.tasks} | {f["idx"] for f in self.failed}


def build_tasks(path: str | Path) -> TaskSet:
    """Read an evaluations file (raw/sim/eval, or the older threshold_results layout) into judge tasks.

    Every problem (bad ground truth, missing option text, duplicate idx) is collected
    and raised together in a :class:`JudgeInputError` naming the file and each idx.
    """
    try:
        artifact = load_records_artifact(path)
    except ArtifactError as exc:
        raise JudgeInputError(str(exc)) from None
    if not artifact.records:
        raise JudgeInputError(f"{path}: no records in 'individual_results'; nothing to judge")
    tasks: list[JudgeTask] = []
    failed: list[dict] = []
    problems: list[str] = []
    seen: set = set()
    for n, record in enumerate(artifact.records):
        key = record.idx
        if (why := _idx_problem(key)) is not None:
            problems.append(f"record #{n}: {why}")
            continue
        if key in seen:
            problems.append(f"idx {key}: appears more than once")
            continue
        seen.add(key)
        if record.failed:
            error_class = record.error_class if isinstance(record.error_class, str) or record.error_class is None else str(record.error_class)
            failed.append({"idx": record.idx, "error": record.error, "error_class": error_class})
            continue
        task, why = task_from_record(record)
        if task is None:
            problems.extend(f"idx {record.idx} (record #{n}): {w}" for w in why)
        else:
            tasks.append(task)
    if len(problems) == 1:
        raise JudgeInputError(f"{path}: {problems[0]}; cannot judge this file")
    if problems:
        shown = "\n  ".join(problems[:25])
        more = f"\n  ... and {len(problems) - 25} more" if len(problems) > 25 else ""
        raise JudgeInputError(f"{path}: {len(problems)} record problem(s) prevent judging:\n  {shown}{more}")
    tasks.sort(key=lambda t: t.idx)
    failed.sort(key=lambda f: f["idx"])
    return TaskSet(tasks=tasks, failed=failed, stage=artifact.stage, total_records=len(artifact.records))


def with_missing_answers(taskset: TaskSet, questions: Iterable[Any]) -> TaskSet:
    """``taskset`` with :attr:`TaskSet.missing` set: the idx of dataset questions that have no record
    in the file (the reference reports each as a skipped ``missing_model_answer``)."""
    from dataclasses import replace

    present = taskset.record_idx
    missing = sorted({q.idx for q in questions} - present)
    return replace(taskset, missing=missing)


def cross_check(tasks: Iterable[JudgeTask], questions: Iterable[Any]) -> list[dict]:
    """Compare tasks with dataset questions (:class:`k9bench.dataset.Question`); one dict per mismatch."""
    by_idx = {q.idx: q for q in questions}
    out: list[dict] = []
    for t in tasks:
        q = by_idx.get(t.idx)
        if q is None:
            out.append({"idx": t.idx, "field": "idx", "record": t.idx, "dataset": None})
            continue
        pairs = (
            ("question", t.question.strip(), q.question.strip()),
            ("question_category", t.question_category, q.category),
            ("scene_name", t.scene_name, q.scene_name),
            ("ground_truth", t.ground_truth, q.correct_answer),
            ("correct_answer", t.correct_answer.strip(), q.correct_text.strip()),
        )
        for name, mine, theirs in pairs:
            if mine != theirs:
                out.append({"idx": t.idx, "field": name, "record": mine, "dataset": theirs})
    return out


# ---------------------------------------------------------------------------
# Judging one task


@dataclass
class Outcome:
    """The result of judging one task: an entry or a skip."""

    idx: int
    """Question id."""
    entry: JudgeEntry | None = None
    """The scored entry, when scored."""
    skipped: SkippedEntry | None = None
    """The skip record, when not scored."""


def judge_task(task: JudgeTask, client: Any, settings: JudgeSettings) -> Outcome:
    """Send one task to the judge and turn the reply into an entry, or a skip with the reason."""
    prompt = render_prompt(settings.template, question=task.question, correct_answer=task.correct_answer, model_output=task.model_output)
    result = client.chat(
        [{"role": "user", "content": prompt}],
        model=settings.judge_model,
        label=f"idx {task.idx}",
        temperature=settings.temperature,
        max_tokens=settings.max_tokens,
    )
    stamp = now_iso()
    common = {"judge_attempts": result.attempts, "judge_usage": result.usage.to_dict()}
    if not result.ok:
        return Outcome(
            idx=task.idx,
            skipped=SkippedEntry(
                idx=task.idx,
                error=f"judge call failed ({result.error_kind}): {result.error}",
                timestamp=stamp,
                extra={"kind": "api_error", "error_kind": result.error_kind, "status_code": result.status_code, "judge_model": settings.judge_model, **common},
            ),
        )
    try:
        judgement = parse_judgement(result.text)
    except JudgeParseError as exc:
        log.warning("idx %s: unparseable judge reply (%s)", task.idx, exc)
        return Outcome(
            idx=task.idx,
            skipped=SkippedEntry(
                idx=task.idx,
                error=f"parse failure: {exc}",
                timestamp=stamp,
                extra={"kind": "parse_error", "raw_reply": result.text, "finish_reason": result.finish_reason, "judge_model": settings.judge_model, **common},
            ),
        )
    entry = JudgeEntry(
        idx=task.idx,
        video_url=task.video_url,
        scene_name=task.scene_name,
        question_category=task.question_category,
        question=task.question,
        correct_answer=task.correct_answer,
        model_output=task.model_output,
        cot=judgement.cot,
        scores=judgement.scores,
        judge_model=settings.judge_model,
        timestamp=stamp,
        extra={"judge_model_served": result.model, **common},
    )
    if judgement.adjustments:
        # read as the reference reads them (int()), and said so in the entry
        entry.extra["score_adjustments"] = judgement.adjustments
        log.info("idx %s: score(s) read the reference's way: %s", task.idx,
                 ", ".join(f"{axis} {value!r} -> {judgement.scores[axis]}" for axis, value in judgement.adjustments.items()))
    return Outcome(idx=task.idx, entry=entry)


# ---------------------------------------------------------------------------
# Summary


def _mean(values: list[int]) -> float | None:
    return sum(values) / len(values) if values else None


def axis_means(entries: Iterable[dict]) -> dict:
    """Per Table-3 axis: ``{column: {key, mean_1_10, score_0_100, n}}`` (score_0_100 = 10 x mean)."""
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
    from k9bench.openai_api import Usage, sum_usage

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
    u = summary["usage"]["this_run"]
    t = summary["usage"]["entries_and_skipped"]
    lines.append(
        f"tokens this run: prompt {u['prompt_tokens']}, completion {u['completion_tokens']}, total {u['total_tokens']} "
        f"({u['requests']} responses); all entries: total {t['total_tokens']}"
    )
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# Output locations (checked before any request is paid for)


def sidecar_path(output: str | Path, suffix: str) -> Path:
    """``<output>.<suffix>`` (e.g. ``meta.json``, ``summary.json``)."""
    output = Path(output)
    return output.with_name(f"{output.name}.{suffix}")


@dataclass(frozen=True)
class RunPaths:
    """Where a judge run reads and writes."""

    output: Path
    """The judge JSON list."""
    skipped: Path
    """The skipped list."""

    @property
    def checkpoint(self) -> Path:
        return checkpoint_path(self.output)

    @property
    def meta(self) -> Path:
        return sidecar_path(self.output, "meta.json")

    @property
    def summary(self) -> Path:
        return sidecar_path(self.output, "summary.json")


def check_output_location(flag: str, path: Path, *, inputs: Iterable[Path] = ()) -> None:
    """Raise :class:`JudgeInputError` (one line naming ``flag`` and the path) unless ``path`` can be
    written: a file name (not ``.``), not a folder or a device, not one of ``inputs``, in a folder that
    exists or can be made and accepts new files (:func:`k9bench.resume.check_output_location`:
    nothing is left behind)."""
    from k9bench.resume import OutputLocationError, check_output_location as check_location

    if path.name in ("", ".", ".."):
        raise JudgeInputError(f"{flag} {str(path) or repr(str(path))}: not a file name; give a file such as judge.json")
    if path.exists() and not path.is_dir() and not path.is_file():  # a device, a pipe: an atomic write would replace it
        raise JudgeInputError(f"{flag} {path} is not a regular file; give a file name")
    try:
        check_location(path, inputs=list(inputs), flag=flag)
    except OutputLocationError as exc:
        raise JudgeInputError(str(exc)) from None


def resolve_paths(run: JudgeRunSettings) -> RunPaths:
    """The output and skipped paths (defaults from :mod:`k9bench.layout`), each checked with
    :func:`check_output_location` before anything is sent; :class:`JudgeInputError` otherwise."""
    evaluations = Path(str(run.evaluations))
    output = Path(run.output) if run.output is not None else layout.next_stage_path(evaluations, "judge")
    check_output_location("--output", output, inputs=[evaluations])
    skipped = Path(run.skipped) if run.skipped is not None else layout.skipped_path(output)
    check_output_location("--skipped", skipped, inputs=[evaluations])
    paths = RunPaths(output=output, skipped=skipped)
    taken = {paths.output.resolve(): "--output", paths.checkpoint.resolve(): "the checkpoint of --output",
             paths.meta.resolve(): "the meta sidecar of --output", paths.summary.resolve(): "the summary sidecar of --output"}
    if paths.skipped.resolve() in taken:
        raise JudgeInputError(f"--skipped {paths.skipped} is also {taken[paths.skipped.resolve()]}; give another name")
    return paths


# ---------------------------------------------------------------------------
# Resume: what earlier runs of the same command left (one function, swappable for k9bench.resume)


@dataclass
class PriorState:
    """What earlier runs of the same command left."""

    entries: dict = field(default_factory=dict)
    """idx -> entry dict (from the output file and the checkpoint)."""
    skipped: dict = field(default_factory=dict)
    """idx -> skipped dict (from the skipped file and the checkpoint)."""


def _load_list(path: Path, what: str) -> list[dict]:
    try:
        data = read_json(path)
    except ArtifactError as exc:
        raise JudgeInputError(f"{exc} (the {what} of an earlier run; move it away to start afresh)") from None
    if not isinstance(data, list) or not all(isinstance(x, dict) and "idx" in x for x in data):
        raise JudgeInputError(f"{path}: not a list of entries with 'idx' (the {what} of an earlier run; move it away to start afresh)")
    return data


def _legacy_fingerprint(judge_model: Any, prompt_sha256: Any) -> dict:
    """The fingerprint of a file written before fingerprints were recorded (model and prompt only)."""
    return {k: v for k, v in (("judge_model", judge_model), ("prompt_sha256", prompt_sha256)) if v is not None}


def _record_fingerprint(record: dict) -> dict:
    """A checkpoint record's fingerprint (older records carry only the model and the prompt sha256)."""
    prior = record.get("fingerprint")
    return prior if isinstance(prior, dict) else _legacy_fingerprint(record.get("judge_model"), record.get("prompt_sha256"))


def _meta_fingerprint(paths: RunPaths) -> dict:
    """The fingerprint the meta sidecar of an earlier final output records ({} when there is no sidecar)."""
    if not paths.meta.exists():
        log.warning("%s has no %s sidecar: cannot confirm its entries used this prompt; keeping them", paths.output, paths.meta.name)
        return {}
    try:
        meta = read_json(paths.meta)
    except ArtifactError as exc:
        raise JudgeInputError(str(exc)) from None
    judge = meta.get("judge") if isinstance(meta, dict) else None
    judge = judge if isinstance(judge, dict) else {}
    prior = judge.get("fingerprint")
    return prior if isinstance(prior, dict) else _legacy_fingerprint(judge.get("model"), judge.get("prompt_sha256"))


def _final_records(paths: RunPaths) -> list[dict]:
    """An earlier run's final files as checkpoint-shaped records (skipped first, so a scored entry of
    the same idx wins), each with the fingerprint its meta sidecar records."""
    fingerprint = _meta_fingerprint(paths)
    records = []
    if paths.skipped.exists():
        for s in _load_list(paths.skipped, "skipped list"):
            records.append({"idx": s["idx"], "fingerprint": fingerprint, "status": "skipped", "skipped": s, "source": str(paths.skipped)})
    for n, e in enumerate(_load_list(paths.output, "output")):
        try:
            JudgeEntry.from_dict(e, where=f"{paths.output}: entry #{n}")
            scores = e.get("scores")
            if not isinstance(scores, dict):
                raise JudgeParseError("scores is not a dictionary")
            for axis in AXES:
                _score_value(axis, scores.get(axis))
        except ArtifactError as exc:
            raise JudgeInputError(str(exc)) from None
        except JudgeParseError as exc:
            raise JudgeInputError(f"{paths.output}: idx {e['idx']}: {exc}; fix or move the file away") from None
        records.append({"idx": e["idx"], "fingerprint": fingerprint, "status": "scored", "entry": e, "source": str(paths.output)})
    return records


def judge_stage(paths: RunPaths) -> Any:
    """The judge's :class:`k9bench.resume.ResumableStage`: key idx; final files read as records; a
    skipped record is the stage's "failed" entry (kept in the skipped list until a rerun scores it)."""
    from k9bench.resume import ResumableStage

    return ResumableStage(paths.output, read_final=lambda _final: _final_records(paths),
                          is_failed=lambda record: record.get("status") != "scored")


def load_prior(paths: RunPaths, fingerprint: dict, tasks_by_idx: dict) -> PriorState:
    """Read the output, skipped file and checkpoint of earlier runs (through :func:`judge_stage`),
    refusing any made with another fingerprint (:func:`judge_fingerprint`: model, temperature,
    prompt) or from another input. The one place the judge's resume rules live."""
    from k9bench.resume import ResumeRefused, fingerprint_mismatch

    state = PriorState()
    try:
        records = judge_stage(paths).load(retry_failed=False)
    except ResumeRefused as exc:  # an unreadable checkpoint (the final files raise JudgeInputError themselves)
        raise JudgeInputError(str(exc)) from None
    if not paths.output.exists() and paths.skipped.exists():
        # a skipped list whose output is gone (the stage reads the final files only with the output)
        for s in _load_list(paths.skipped, "skipped list"):
            records.setdefault(s["idx"], {"idx": s["idx"], "status": "skipped", "skipped": s})
    for idx in sorted(records, key=str):
        rec = records[idx]
        prior = _record_fingerprint(rec)
        diffs = fingerprint_mismatch(prior, fingerprint)
        if diffs:
            where = Path(rec["source"]) if "source" in rec else paths.checkpoint
            made = f"judge model {prior.get('judge_model')!r}" if "judge_model" in prior else "other settings"
            raise JudgeInputError(
                f"{where}: idx {idx} was judged with {made} and settings that differ from this run's ({'; '.join(diffs)}); "
                "use another --output, or delete the old files to rejudge"
            )
        if rec.get("status") == "scored":
            state.entries[idx] = rec["entry"]
        elif rec.get("status") == "skipped":
            state.skipped[idx] = rec["skipped"]
    model = fingerprint.get("judge_model")
    for idx, e in state.entries.items():
        if e.get("judge_model") != model:
            raise JudgeInputError(
                f"{paths.output}: idx {idx} was judged by {e.get('judge_model')!r}, not {model!r}; use another --output"
            )
        task = tasks_by_idx.get(idx)
        if task is not None and (e.get("model_output") != task.model_output or e.get("question") != task.question):
            raise JudgeInputError(
                f"{paths.output}: idx {idx} holds a judgement of a different answer or question than the evaluations file; "
                "it was made from another input: use another --output"
            )
    return state


# ---------------------------------------------------------------------------
# Run


@dataclass
class RunResult:
    """What :func:`run_judge` did."""

    entries: list[dict]
    """Final judge list, idx order."""
    skipped: list[dict]
    """Final skipped list, idx order (``missing_model_answer`` entries included)."""
    summary: dict
    """The saved summary."""
    judged_now: int
    """Requests resolved this run (scored + skipped)."""
    interrupted: bool = False
    """True when stopped by Ctrl-C (files hold what was done)."""
    unreachable: str | None = None
    """Set (the reason) when the run stopped because the endpoint refused every connection (see
    :func:`unreachable_after`); the checkpoint holds what was done, no final file is written."""

    @property
    def retryable_skipped(self) -> list[dict]:
        """Skipped entries a rerun may still score (all but the questions with no answer to judge)."""
        return [s for s in self.skipped if s.get("kind") != MISSING_MODEL_ANSWER]


def unreachable_after(concurrency: int) -> int:
    """Consecutive results that failed to connect (after their retries) that stop a run: the endpoint is down
    or ``--base_url`` is wrong, and going on would spend hours in retry backoff for nothing."""
    return max(10, 3 * concurrency)


def missing_answer_entry(idx: int, dataset: str | None) -> dict:
    """The skipped entry of a dataset question with no record in the judged file."""
    return SkippedEntry(
        idx=idx,
        error=MISSING_MODEL_ANSWER,
        timestamp=now_iso(),
        extra={"kind": MISSING_MODEL_ANSWER, "detail": f"question {idx} of {dataset or 'the dataset'} has no record in the judged file"},
    ).to_dict()


def run_judge(
    config: JudgeConfig,
    *,
    taskset: TaskSet,
    paths: RunPaths,
    make_client: Callable[[], Any],
    meta: dict | None = None,
    progress_disable: bool | None = None,
) -> RunResult:
    """Judge every task not already done; checkpoint each result; write output, skipped, meta and summary.

    ``make_client`` is called only when there is something to judge and returns an
    object with ``chat(messages, model=..., label=..., **params) -> ChatResult``
    (:class:`k9bench.openai_api.ChatClient`). Everything written passes through
    :func:`k9bench.redact.redact` where it holds settings or error texts.
    """
    from tqdm import tqdm

    from k9bench.openai_api import Usage, run_concurrent

    settings = config.judge
    limit = config.run.limit
    concurrency = config.requests.concurrency
    fingerprint = judge_fingerprint(settings)
    targets = taskset.tasks[:limit] if limit is not None and limit >= 0 else list(taskset.tasks)
    by_idx = {t.idx: t for t in taskset.tasks}
    prior = load_prior(paths, fingerprint, by_idx)
    todo = [t for t in targets if t.idx not in prior.entries]
    log.info(
        "%d record(s): %d to judge, %d already scored, %d failed at inference (not judged)%s",
        taskset.total_records,
        len(todo),
        len(targets) - len(todo),
        len(taskset.failed),
        f", {len(taskset.tasks) - len(targets)} beyond --limit" if len(targets) < len(taskset.tasks) else "",
    )
    retrying = sum(1 for t in todo if t.idx in prior.skipped)
    if retrying:
        log.info("retrying %d previously skipped entr%s", retrying, "y" if retrying == 1 else "ies")
    if taskset.failed:
        shown = ", ".join(str(f["idx"]) for f in taskset.failed[:20])
        log.warning("%d record(s) failed at inference and are not judged: idx %s%s", len(taskset.failed), shown, " ..." if len(taskset.failed) > 20 else "")
    entries = dict(prior.entries)
    skipped = dict(prior.skipped)
    if taskset.missing:
        shown = ", ".join(str(i) for i in taskset.missing[:20])
        log.warning("%d question(s) of %s have no record in %s: skipped as %s (idx %s%s)", len(taskset.missing),
                    config.run.dataset_name, config.run.evaluations, MISSING_MODEL_ANSWER, shown, " ..." if len(taskset.missing) > 20 else "")
        for idx in taskset.missing:
            if idx not in entries:
                skipped[idx] = missing_answer_entry(idx, config.run.dataset_name)
    usage = Usage()
    served: dict[str, int] = {}
    interrupted = False
    unreachable: str | None = None
    refused_streak = 0
    stop_after = unreachable_after(concurrency)
    scored_now = skipped_now = 0
    client = None
    if todo:
        client = make_client()
        ckpt = judge_stage(paths)
        bar = tqdm(total=len(todo), unit="entry", desc="judging", disable=progress_disable, dynamic_ncols=True)
        results = run_concurrent(lambda t: judge_task(t, client, settings), todo, concurrency)
        try:
            for task, outcome in results:
                record = {"idx": task.idx, "fingerprint": fingerprint}
                if outcome.entry is not None:
                    data = outcome.entry.to_dict()
                    ckpt.append({**record, "status": "scored", "entry": data})
                    entries[task.idx] = data
                    skipped.pop(task.idx, None)
                    scored_now += 1
                    name = data.get("judge_model_served") or "?"
                    served[name] = served.get(name, 0) + 1
                    usage = usage + Usage.from_dict(data.get("judge_usage"))
                else:
                    data = outcome.skipped.to_dict()
                    ckpt.append({**record, "status": "skipped", "skipped": data})
                    skipped[task.idx] = data
                    skipped_now += 1
                    usage = usage + Usage.from_dict(data.get("judge_usage"))
                bar.update(1)
                bar.set_postfix(scored=scored_now, skipped=skipped_now, refresh=False)
                if outcome.skipped is not None and outcome.skipped.extra.get("error_kind") == "connection":
                    refused_streak += 1
                else:
                    refused_streak = 0
                if refused_streak >= stop_after:
                    unreachable = (
                        f"the judge endpoint {getattr(client, 'base_url', '?')} could not be reached for {refused_streak} "
                        f"entries in a row (each after its retries): check --base_url and that the server is up"
                    )
                    unreachable = redact(unreachable)
                    log.error("%s; stopping. %d result(s) of this run are checkpointed in %s; rerun the same command "
                              "to finish", unreachable, scored_now + skipped_now, paths.checkpoint)
                    break
        except KeyboardInterrupt:
            interrupted = True
            log.warning("interrupted: %d result(s) of this run are checkpointed in %s; rerun the same command to finish", scored_now + skipped_now, paths.checkpoint)
        finally:
            results.close()  # no new request starts; calls in flight are abandoned (daemon threads)
            bar.close()
            ckpt.close()
    final_entries = [entries[i] for i in sorted(entries)]
    final_skipped = [skipped[i] for i in sorted(skipped) if i not in entries]
    retries = getattr(client, "retries_done", 0) if client is not None else 0
    run_info = {
        "judge_model": settings.judge_model,
        "to_judge_this_run": len(todo),
        "scored_this_run": scored_now,
        "skipped_this_run": skipped_now,
        "retries_this_run": retries,
        "served_models_this_run": served,
        "targets": len(targets),
        "records": taskset.total_records,
        "missing_model_answer": len(taskset.missing),
        "interrupted": interrupted,
        "unreachable": unreachable,
    }
    summary = summarize(final_entries, final_skipped, taskset.failed, usage_this_run=usage.to_dict(), extra=run_info)
    if interrupted or unreachable:
        # The checkpoint holds everything; leave the final files to the rerun.
        return RunResult(final_entries, final_skipped, summary, scored_now + skipped_now, interrupted=interrupted,
                         unreachable=unreachable)
    write_json_atomic(paths.skipped, final_skipped)
    meta_out = dict(meta or {})
    judge_block = dict(meta_out.get("judge") or {})
    judge_block.update(config.requests.record())
    judge_block.update(settings.record())
    judge_block.update({"model": settings.judge_model, "fingerprint": fingerprint})
    if client is not None:
        judge_block["base_url_used"] = getattr(client, "base_url", None)
    meta_out["judge"] = judge_block
    meta_out["run"] = run_info
    meta_out["counts"] = summary["counts"]
    meta_out["failed_at_inference"] = taskset.failed
    write_json_atomic(paths.meta, redact(meta_out))
    write_json_atomic(paths.summary, redact(summary))
    judge_stage(paths).finish(final_entries)  # the output last, then the checkpoint goes
    return RunResult(final_entries, final_skipped, summary, scored_now + skipped_now)


def default_output(evaluations: str | Path) -> Path:
    """``judge_<name>.json`` beside the evaluations file (:func:`k9bench.layout.next_stage_path`)."""
    return layout.next_stage_path(evaluations, "judge")


def default_skipped(output: str | Path) -> Path:
    """``<output stem>_skipped.json`` beside the output (:func:`k9bench.layout.skipped_path`)."""
    return layout.skipped_path(output)


__all__ = [
    "AXES",
    "TABLE3_AXES",
    "DEFAULT_JUDGE_MODEL",
    "JudgeInputError",
    "JudgeParseError",
    "Judgement",
    "JudgeTask",
    "JudgeSettings",
    "RequestSettings",
    "JudgeRunSettings",
    "JudgeConfig",
    "judge_fingerprint",
    "temperature_value",
    "MISSING_MODEL_ANSWER",
    "check_output_location",
    "resolve_paths",
    "with_missing_answers",
    "missing_answer_entry",
    "TaskSet",
    "Outcome",
    "RunPaths",
    "RunResult",
    "parse_judgement",
    "check_prompt_template",
    "render_prompt",
    "option_text",
    "task_from_record",
    "build_tasks",
    "cross_check",
    "judge_task",
    "axis_means",
    "summarize",
    "format_summary",
    "load_prior",
    "run_judge",
    "unreachable_after",
    "default_output",
    "default_skipped",
    "sidecar_path",
]
