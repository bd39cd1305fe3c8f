"""LLM-as-judge scoring of free-form answers (SPEC section 5): prompt, parsing, resumable runs, summary.

One request per question: our judge prompt (``k9bench/prompts/judge_prompt.txt``, or a
file given verbatim) filled with the question, the text of the right option and the
model's answer. The judge replies with a ``CoT:`` line and a dictionary of five
integer scores 1-10; :func:`parse_judgement` reads the *last* ``{...}`` block (single
quotes and code fences tolerated) and refuses anything that is not exactly five
integers 1-10, so a malformed reply or a failed call is never turned into a score:
it goes to the skipped list with its reason (and the raw reply).

A run (:func:`run_judge`) checkpoints each result as it arrives
(``<output>.partial.jsonl``), writes the judge list in idx order and the skipped list
atomically, and on a rerun of the same command skips what is done and retries what
was skipped. Records that failed at inference (``error`` set) are not judged; they
are counted and reported.
"""

from __future__ import annotations

import ast
import hashlib
import json
import logging
import re
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from k9bench import CATEGORIES, LETTERS
from k9bench.artifacts import (
    ArtifactError,
    CheckpointLog,
    JudgeEntry,
    QuestionRecord,
    SkippedEntry,
    checkpoint_path,
    load_records_artifact,
    now_iso,
    read_json,
    write_json_atomic,
)

log = logging.getLogger(__name__)

AXES = ("Logic", "Factuality", "Accuracy", "Conciseness", "Overall")
"""The five score keys the judge must return."""

TABLE3_AXES = (("Logical", "Logic"), ("Factual", "Factuality"), ("Concise", "Conciseness"), ("Accuracy", "Accuracy"), ("Overall", "Overall"))
"""(paper column, score key) in the order of the paper's Table 3."""

PLACEHOLDERS = ("question", "correct_answer", "model_output")
"""The fields a judge prompt template must contain."""

DEFAULT_JUDGE_MODEL = "gpt-4o"


class JudgeInputError(Exception):
    """The evaluations file, the prompt or an earlier output cannot be used; the message names what and where."""


class JudgeParseError(ValueError):
    """A judge reply that holds no valid score dictionary; the message says why."""


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


def _score_value(axis: str, value: Any) -> int:
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
    integer 1-10 (not a float, string or bool).
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
    scores = {axis: _score_value(axis, by_key[axis]) for axis in AXES}
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
    return Judgement(scores=scores, cot=cot)


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


def task_from_record(record: QuestionRecord) -> tuple[JudgeTask | None, list[str]]:
    """The task for one (non-failed) record, or the list of problems that prevent it."""
    problems: list[str] = []
    if isinstance(record.idx, bool) or not isinstance(record.idx, int):
        problems.append(f"idx {record.idx!r} is not an integer")
    letter = str(record.ground_truth or "").strip().upper()
    if letter not in LETTERS:
        problems.append(f"ground_truth {record.ground_truth!r} is not a letter A-E")
    correct = option_text(record.options, letter) if letter in LETTERS else None
    if letter in LETTERS and not correct:
        problems.append(f"options have no text for the ground-truth letter {letter} (options: {record.options!r:.200})")
    if not str(record.question or "").strip():
        problems.append("question is empty")
    if problems:
        return None, problems
    scene = record.scene_name or (record.video[:-4] if record.video.endswith(".mp4") else "")
    return (
        JudgeTask(
            idx=record.idx,
            question=record.question,
            correct_answer=correct or "",
            model_output=record.answer or "",
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
        if key in seen:
            problems.append(f"idx {key}: appears more than once")
            continue
        seen.add(key)
        if record.failed:
            failed.append({"idx": record.idx, "error": record.error, "error_class": record.error_class})
            continue
        task, why = task_from_record(record)
        if task is None:
            problems.extend(f"idx {record.idx} (record #{n}): {w}" for w in why)
        else:
            tasks.append(task)
    if problems:
        shown = "\n  ".join(problems[:25])
        more = f"\n  ... and {len(problems) - 25} more" if len(problems) > 25 else ""
        raise JudgeInputError(f"{path}: {len(problems)} record problem(s) prevent judging:\n  {shown}{more}")
    tasks.sort(key=lambda t: t.idx)
    failed.sort(key=lambda f: f["idx"])
    return TaskSet(tasks=tasks, failed=failed, stage=artifact.stage, total_records=len(artifact.records))


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
class JudgeSettings:
    """What shapes a judge call (recorded in the output's sidecar)."""

    model: str = DEFAULT_JUDGE_MODEL
    """Judge model id as sent to the API."""
    template: str = ""
    """The judge prompt template."""
    prompt_source: str = "builtin:judge_prompt"
    """Where the template came from."""
    temperature: float | None = 0.0
    """Sampling temperature (None: the API's default)."""
    max_tokens: int | None = None
    """Reply length limit (None: the API's default)."""

    @property
    def prompt_sha256(self) -> str:
        return hashlib.sha256(self.template.encode("utf-8")).hexdigest()


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
        model=settings.model,
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
                extra={"kind": "api_error", "error_kind": result.error_kind, "status_code": result.status_code, "judge_model": settings.model, **common},
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
                extra={"kind": "parse_error", "raw_reply": result.text, "finish_reason": result.finish_reason, "judge_model": settings.model, **common},
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
        judge_model=settings.model,
        timestamp=stamp,
        extra={"judge_model_served": result.model, **common},
    )
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
# Resumable run


def sidecar_path(output: str | Path, suffix: str) -> Path:
    """``<output>.<suffix>`` (e.g. ``meta.json``, ``summary.json``)."""
    output = Path(output)
    return output.with_name(f"{output.name}.{suffix}")


@dataclass
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


def load_prior(paths: RunPaths, settings: JudgeSettings, tasks_by_idx: dict) -> PriorState:
    """Read the output, skipped file and checkpoint of earlier runs, refusing any that another judge/prompt/input made."""
    state = PriorState()
    if paths.meta.exists() and paths.output.exists():
        try:
            meta = read_json(paths.meta)
        except ArtifactError as exc:
            raise JudgeInputError(str(exc)) from None
        judge = meta.get("judge", {}) if isinstance(meta, dict) else {}
        for key, mine in (("model", settings.model), ("prompt_sha256", settings.prompt_sha256)):
            if key in judge and judge[key] != mine:
                raise JudgeInputError(
                    f"{paths.output} was judged with {key} {judge[key]!r} ({paths.meta}), not {mine!r}; "
                    "use another --output, or delete the old files to rejudge"
                )
    if paths.output.exists():
        if not paths.meta.exists():
            log.warning("%s has no %s sidecar: cannot confirm its entries used this prompt; keeping them", paths.output, paths.meta.name)
        for n, e in enumerate(_load_list(paths.output, "output")):
            try:
                JudgeEntry.from_dict(e, where=f"{paths.output}: entry #{n}")
            except ArtifactError as exc:
                raise JudgeInputError(str(exc)) from None
            scores = e.get("scores")
            try:
                if not isinstance(scores, dict):
                    raise JudgeParseError("scores is not a dictionary")
                for axis in AXES:
                    _score_value(axis, scores.get(axis))
            except JudgeParseError as exc:
                raise JudgeInputError(f"{paths.output}: idx {e['idx']}: {exc}; fix or move the file away") from None
            state.entries[e["idx"]] = e
    if paths.skipped.exists():
        for s in _load_list(paths.skipped, "skipped list"):
            state.skipped[s["idx"]] = s
    log_ = CheckpointLog(paths.checkpoint)
    try:
        records = log_.load()
    except ArtifactError as exc:
        raise JudgeInputError(f"{exc}; delete {paths.checkpoint} to start afresh") from None
    for idx, rec in records.items():
        if rec.get("judge_model") != settings.model or rec.get("prompt_sha256") != settings.prompt_sha256:
            raise JudgeInputError(
                f"{paths.checkpoint}: idx {idx} was judged with model {rec.get('judge_model')!r} and another prompt "
                f"than this run's ({settings.model!r}, prompt sha256 {settings.prompt_sha256[:12]}); use another --output or delete it"
            )
        if rec.get("status") == "scored":
            state.entries[idx] = rec["entry"]
            state.skipped.pop(idx, None)
        elif rec.get("status") == "skipped" and idx not in state.entries:
            state.skipped[idx] = rec["skipped"]
    for idx, e in state.entries.items():
        if e.get("judge_model") != settings.model:
            raise JudgeInputError(
                f"{paths.output}: idx {idx} was judged by {e.get('judge_model')!r}, not {settings.model!r}; use another --output"
            )
        task = tasks_by_idx.get(idx)
        if task is not None and (e.get("model_output") != task.model_output or e.get("question") != task.question):
            raise JudgeInputError(
                f"{paths.output}: idx {idx} holds a judgement of a different answer or question than the evaluations file; "
                "it was made from another input: use another --output"
            )
    return state


@dataclass
class RunResult:
    """What :func:`run_judge` did."""

    entries: list[dict]
    """Final judge list, idx order."""
    skipped: list[dict]
    """Final skipped list, idx order."""
    summary: dict
    """The saved summary."""
    judged_now: int
    """Requests resolved this run (scored + skipped)."""
    interrupted: bool = False
    """True when stopped by Ctrl-C (files hold what was done)."""
    unreachable: str | None = None
    """Set (the reason) when the run stopped because the endpoint refused every connection (see
    :func:`unreachable_after`); the checkpoint holds what was done, no final file is written."""


def unreachable_after(concurrency: int) -> int:
    """Consecutive results that failed to connect (after their retries) that stop a run: the endpoint is down
    or ``--base_url`` is wrong, and going on would spend hours in retry backoff for nothing."""
    return max(10, 3 * concurrency)


def run_judge(
    *,
    taskset: TaskSet,
    settings: JudgeSettings,
    paths: RunPaths,
    make_client: Callable[[], Any],
    concurrency: int = 8,
    limit: int | None = None,
    meta: dict | None = None,
    progress_disable: bool | None = None,
) -> RunResult:
    """Judge every task not already done; checkpoint each result; write output, skipped, meta and summary.

    ``make_client`` is called only when there is something to judge and returns an
    object with ``chat(messages, model=..., label=..., **params) -> ChatResult``
    (:class:`k9bench.openai_api.ChatClient`).
    """
    from tqdm import tqdm

    from k9bench.openai_api import Usage, run_concurrent

    targets = taskset.tasks[:limit] if limit is not None and limit >= 0 else list(taskset.tasks)
    by_idx = {t.idx: t for t in taskset.tasks}
    prior = load_prior(paths, settings, by_idx)
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
        ckpt = CheckpointLog(paths.checkpoint)
        bar = tqdm(total=len(todo), unit="entry", desc="judging", disable=progress_disable, dynamic_ncols=True)
        results = run_concurrent(lambda t: judge_task(t, client, settings), todo, concurrency)
        try:
            for task, outcome in results:
                record = {"idx": task.idx, "judge_model": settings.model, "prompt_sha256": settings.prompt_sha256}
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
        "judge_model": settings.model,
        "to_judge_this_run": len(todo),
        "scored_this_run": scored_now,
        "skipped_this_run": skipped_now,
        "retries_this_run": retries,
        "served_models_this_run": served,
        "targets": len(targets),
        "records": taskset.total_records,
        "interrupted": interrupted,
        "unreachable": unreachable,
    }
    summary = summarize(final_entries, final_skipped, taskset.failed, usage_this_run=usage.to_dict(), extra=run_info)
    if interrupted or unreachable:
        # The checkpoint holds everything; leave the final files to the rerun.
        return RunResult(final_entries, final_skipped, summary, scored_now + skipped_now, interrupted=interrupted,
                         unreachable=unreachable)
    write_json_atomic(paths.output, final_entries)
    write_json_atomic(paths.skipped, final_skipped)
    meta_out = dict(meta or {})
    meta_out.setdefault("judge", {})
    meta_out["judge"].update(
        {
            "model": settings.model,
            "prompt_source": settings.prompt_source,
            "prompt_sha256": settings.prompt_sha256,
            "temperature": settings.temperature,
            "max_tokens": settings.max_tokens,
        }
    )
    if client is not None:
        meta_out["judge"]["base_url_used"] = getattr(client, "base_url", None)
    meta_out["run"] = run_info
    meta_out["counts"] = summary["counts"]
    meta_out["failed_at_inference"] = taskset.failed
    write_json_atomic(paths.meta, meta_out)
    write_json_atomic(paths.summary, summary)
    CheckpointLog(paths.checkpoint).remove()
    return RunResult(final_entries, final_skipped, summary, scored_now + skipped_now)


def default_output(evaluations: str | Path) -> Path:
    """``judge_<name>.json`` beside the evaluations file (``eval_``/``sim_``/``raw_`` prefix replaced)."""
    p = Path(evaluations)
    name = p.name
    for prefix in ("eval_", "sim_", "raw_"):
        if name.startswith(prefix):
            name = name[len(prefix):]
            break
    stem = name[:-5] if name.endswith(".json") else name
    return p.with_name(f"judge_{stem}.json")


def default_skipped(output: str | Path) -> Path:
    """``<output stem>_skipped.json`` beside the output."""
    p = Path(output)
    stem = p.name[:-5] if p.name.endswith(".json") else p.name
    return p.with_name(f"{stem}_skipped.json")


__all__ = [
    "AXES",
    "TABLE3_AXES",
    "DEFAULT_JUDGE_MODEL",
    "JudgeInputError",
    "JudgeParseError",
    "Judgement",
    "JudgeTask",
    "JudgeSettings",
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
