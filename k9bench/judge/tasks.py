"""What is judged: one task per answered record of an evaluations file.

Any raw, sim or eval file (or the older ``threshold_results`` layout) gives the tasks; the question,
the text of the right option and the model's answer come from the records themselves. Records that
failed at inference are counted, not judged. Every problem in the file is collected and refused in one
message naming the file and each idx, before the first request.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable

from k9bench import LETTERS
from k9bench.artifacts import QuestionRecord
from k9bench.artifact_io import ArtifactError
from k9bench.judge.settings import JudgeInputError

# ---------------------------------------------------------------------------
# Tasks


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
    from k9bench.download.youtube import canonical_url, is_valid_scene_name

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
    task = JudgeTask(idx=record.idx, question=record.question, correct_answer=correct or "", model_output=record.answer,
                     question_category=record.question_category, scene_name=scene, video_url=_video_url(record, scene),
                     ground_truth=letter)
    return task, []


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


def read_evaluations(path: str | Path) -> Any:
    """The records artifact of ``path`` through the one reader (:func:`k9bench.artifacts.load_records_artifact`,
    ``allow_empty=False``): every fault of the file (missing, a folder, a loop, empty, not UTF-8, binary,
    nested too deeply, not JSON, no records list, no records) is one :class:`JudgeInputError` line naming
    the file and the flag."""
    return _read(path)[0]


def _read(path: str | Path) -> tuple[Any, list]:
    """The records artifact and the records as stored (to tell a missing ``answer`` key from an empty one)."""
    from k9bench.scoring.rule import read_records

    try:
        return read_records(path)  # scoring's own reading: lower-case ground truth upper-cased as scoring does
    except ArtifactError as exc:
        raise JudgeInputError(f"--evaluations {exc}") from None


def record_problem(record: QuestionRecord, row: Any, where: str) -> str | None:
    """What the scoring would refuse in a judged record (:func:`k9bench.scoring.rule.check_record`: no
    ``answer``, not five options A-E, a ground truth outside them, an unknown category), or None. The
    judge refuses the same records, before any paid request (issue 31 item 3)."""
    from k9bench.scoring.rule import check_record
    from k9bench.scoring.settings import ScoringError

    try:
        check_record(record, row if isinstance(row, dict) else None, where)
    except ScoringError as exc:
        return str(exc)
    return None


def build_tasks(path: str | Path) -> TaskSet:
    """Read an evaluations file (raw/sim/eval, or the older threshold_results layout) into judge tasks.

    Every problem (bad ground truth, missing option text, duplicate idx) is collected and raised
    together in a :class:`JudgeInputError` naming the file and each idx."""
    artifact, rows = _read(path)
    tasks: list[JudgeTask] = []
    failed: list[dict] = []
    problems: list[str] = []
    seen: dict = {}
    for n, record in enumerate(artifact.records):
        key = record.idx
        if (why := _idx_problem(key)) is not None:
            problems.append(f"record #{n}: {why}")
            continue
        if key in seen:
            problems.append(f"idx {key}: appears more than once (records #{seen[key]} and #{n})")
            continue
        seen[key] = n
        if record.failed:
            error_class = record.error_class if isinstance(record.error_class, str) or record.error_class is None else str(record.error_class)
            failed.append({"idx": record.idx, "error": record.error, "error_class": error_class})
            continue
        task, why = task_from_record(record)
        if task is None:
            problems.extend(f"idx {record.idx} (record #{n}): {w}" for w in why)
        elif (bad := record_problem(record, rows[n] if n < len(rows) else None, f"idx {record.idx} (record #{n})")) is not None:
            problems.append(bad)
        else:
            tasks.append(task)
    if len(problems) == 1:
        raise JudgeInputError(f"{path}: {problems[0]}; cannot judge this file")
    if problems:
        shown = "; ".join(problems[:10])
        more = f"; ... and {len(problems) - 10} more" if len(problems) > 10 else ""
        raise JudgeInputError(f"{path}: {len(problems)} record problem(s) prevent judging: {shown}{more}")
    tasks.sort(key=lambda t: t.idx)
    failed.sort(key=lambda f: f["idx"])
    return TaskSet(tasks=tasks, failed=failed, stage=artifact.stage, total_records=len(artifact.records))


def with_missing_answers(taskset: TaskSet, questions: Iterable[Any]) -> TaskSet:
    """``taskset`` with :attr:`TaskSet.missing` set: the idx of dataset questions that have no record
    in the file (the reference reports each as a skipped ``missing_model_answer``)."""
    missing = sorted({q.idx for q in questions} - taskset.record_idx)
    return replace(taskset, missing=missing)


def cross_check(tasks: Iterable[JudgeTask], questions: Iterable[Any]) -> list[dict]:
    """Compare tasks with dataset questions (:class:`k9bench.data.dataset.Question`); one dict per mismatch."""
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


__all__ = ["JudgeTask", "TaskSet", "build_tasks", "cross_check", "option_text", "read_evaluations", "task_from_record",
           "with_missing_answers"]
