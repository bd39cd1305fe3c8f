"""Loading and validating K9-Bench question rows.

One loader serves every script. ``source`` may be

* a Hugging Face Hub dataset id (default ``ogmen/K9Bench``, split ``test``);
* a local ``.parquet``, ``.json`` or ``.jsonl`` file, a ``save_to_disk`` folder, or a
  folder of such files (a Hub snapshot from ``hf download``: the files whose name starts
  with the split name, e.g. ``data/test-00000-of-00001.parquet``), with the Hub schema
  (SPEC section 1);
* ``demo``: the bundled synthetic demo set (see :mod:`k9bench.data.demo`).

Rows are validated as a whole: every problem (missing field, options not A-E (lower-case
keys ``a``-``e`` included), answer letter not among the options, a question that is not text (a number),
duplicate idx, bad URL, unknown category)
is collected and reported in one :class:`DatasetError` naming each idx and field.
``drop_invalid=True`` drops the offending rows instead and reports which.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from k9bench import CATEGORIES, LETTERS
from k9bench.data.demo import DEMO_NAME, demo_rows
from k9bench.models.hub import assignment, setting_name
from k9bench.settings import setting
from k9bench.download.youtube import InvalidYouTubeURL, is_valid_scene_name, parse_youtube_id

log = logging.getLogger(__name__)

DEFAULT_DATASET = "ogmen/K9Bench"
DEFAULT_SPLIT = "test"

LEGACY_CATEGORIES = {
    "causal_inference": "cause-effect analysis",
    "contextual_interpretation": "context analysis",
    "interaction_loop_analysis": "action sequence",
    "posture_analysis": "posture analysis",
    "social_interaction_analysis": "interaction analysis",
    "steps_of_actions": "action sequence",
}
"""Category labels from earlier drafts, mapped onto the released ones."""

REQUIRED_FIELDS = ("idx", "video_url", "question_category", "question", "options", "correct_answer")


@dataclass(frozen=True)
class DatasetSettings:
    """Which questions a script reads: ``--dataset_name``, ``--split``, ``--drop_invalid_rows``
    (the same flags in every script, generated from these fields)."""

    dataset_name: str = setting(
        DEFAULT_DATASET,
        "Hub dataset id, a local parquet/json/jsonl file or save_to_disk folder, or 'demo' (default: %(default)s)",
        result=True,
    )
    split: str = setting(DEFAULT_SPLIT, "dataset split (default: %(default)s)", result=True)
    drop_invalid_rows: bool = setting(
        False,
        "drop rows that fail validation (reporting how many and which) instead of stopping",
        action="store_true",
        result=True,
    )


class DatasetError(Exception):
    """The dataset could not be loaded or holds invalid rows; the message says what to do."""


@dataclass(frozen=True)
class Question:
    """One validated K9-Bench question."""

    idx: int
    """Stable question id."""
    video_url: str
    """The YouTube URL of the video."""
    scene_name: str
    """The 11-character YouTube id; the video file is ``{scene_name}.mp4``."""
    category: str
    """One of :data:`k9bench.CATEGORIES` (legacy labels already mapped)."""
    question: str
    """The question text."""
    options: dict
    """Letter (``A``..``E``) to option text."""
    correct_answer: str
    """The letter of the right option."""

    @property
    def video(self) -> str:
        """The video file name inside the video folder."""
        return f"{self.scene_name}.mp4"

    @property
    def option_list(self) -> list[str]:
        """Options as ``"A. text"`` strings in letter order (the reference's form)."""
        return [f"{k}. {self.options[k]}" for k in LETTERS]

    @property
    def correct_text(self) -> str:
        """The text of the right option."""
        return self.options[self.correct_answer]

    def record_fields(self) -> dict[str, Any]:
        """The question's part of a raw record, in the reference's field names."""
        return {
            "idx": self.idx,
            "question_category": self.category,
            "video": self.video,
            "ground_truth": self.correct_answer,
            "scene_name": self.scene_name,
            "question": self.question,
            "options": self.option_list,
        }


@dataclass(frozen=True)
class RowProblem:
    """One thing wrong with one row."""

    idx: Any
    """The row's idx (or ``row #n`` when it has none)."""
    field: str
    """The offending field."""
    message: str
    """What is wrong."""

    def __str__(self) -> str:
        return f"idx {self.idx}: {self.field}: {self.message}"


@dataclass
class LoadedDataset:
    """The outcome of :func:`load_questions`."""

    questions: list[Question]
    """Valid questions, in source order."""
    source: str
    """What was loaded (Hub id, file path, or ``demo``)."""
    dropped: list[RowProblem] = field(default_factory=list)
    """Problems of the rows dropped under ``drop_invalid``."""

    def __len__(self) -> int:
        return len(self.questions)


# ---------------------------------------------------------------------------
# Normalisation of single fields


def normalize_category(value: Any) -> str:
    """Map a category label (released or legacy) to its released spelling."""
    if not isinstance(value, str):
        raise ValueError(f"not a string: {value!r}")
    text = value.strip()
    lowered = text.lower()
    if lowered in CATEGORIES:
        return lowered
    if lowered in LEGACY_CATEGORIES:
        return LEGACY_CATEGORIES[lowered]
    raise ValueError(f"unknown category {value!r} (expected one of {', '.join(CATEGORIES)})")


def normalize_options(value: Any) -> dict[str, str]:
    """Return options as ``{letter: text}`` for exactly the letters A-E.

    Accepts a mapping, a JSON string holding a mapping, or a list of ``"A. text"``
    strings in letter order.
    """
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not a mapping of letters to texts: {exc}") from None
    lower: list[str] = []
    if isinstance(value, (list, tuple)):
        mapping = {}
        for item in value:
            if not isinstance(item, str) or len(item) < 2 or item[1] not in ".):":
                raise ValueError(f"list item {item!r} is not of the form 'A. text'")
            letter = item[0].upper()
            if letter in mapping:
                raise ValueError(f"letter {letter} appears twice in the list")
            if item[0] != letter:
                lower.append(item[:2])
            mapping[letter] = item[2:].strip()
        value = mapping
    if not isinstance(value, dict):
        raise ValueError(f"expected a mapping of letters A-E, got {type(value).__name__}")
    present: dict[str, Any] = {}
    for k, v in value.items():
        if v is None:
            continue
        letter = str(k).strip().upper()
        if letter in present:
            raise ValueError(f"letter {letter} is given twice (keys {sorted(map(str, value))})")
        present[letter] = v
        if str(k).strip() != letter:
            lower.append(str(k))
    if lower:
        raise ValueError(f"option key(s) {', '.join(repr(k) for k in lower)} in lower case; K9-Bench's option keys are "
                         "the capital letters A-E (the model is shown them, and scoring reads only those)")
    if sorted(present) != list(LETTERS):
        raise ValueError(f"keys are {sorted(present)}, expected exactly A-E")
    out = {}
    for letter in LETTERS:
        text = present[letter]
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"option {letter} is empty or not text")
        out[letter] = text.strip()
    return out


def _as_int(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError(f"not an integer: {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    raise ValueError(f"not an integer: {value!r}")


def validate_rows(rows: Iterable[dict]) -> tuple[list[Question], list[RowProblem]]:
    """Validate raw rows; return the valid questions and every problem found.

    A row with any problem is excluded from the questions. Duplicate idx values
    exclude every row sharing that idx.
    """
    problems: list[RowProblem] = []
    parsed: list[tuple[int, Question]] = []
    for n, row in enumerate(rows):
        row_problems: list[RowProblem] = []
        if not isinstance(row, dict):
            problems.append(RowProblem(f"row #{n}", "row", f"not an object: {type(row).__name__}"))
            continue
        label: Any = row.get("idx", f"row #{n}")
        for name in REQUIRED_FIELDS:
            if row.get(name) is None or (isinstance(row.get(name), str) and not row[name].strip()):
                row_problems.append(RowProblem(label, name, "missing or empty"))
        missing = {p.field for p in row_problems}
        for name in ("question",):  # text the model is shown: a number there is not a question
            if name not in missing and not isinstance(row[name], str):
                row_problems.append(RowProblem(label, name, f"{row[name]!r:.80} ({type(row[name]).__name__}) is not text"))
                missing.add(name)
        idx = None
        if "idx" not in missing:
            try:
                idx = _as_int(row["idx"])
            except ValueError as exc:
                row_problems.append(RowProblem(label, "idx", str(exc)))
        category = options = scene = None
        if "question_category" not in missing:
            try:
                category = normalize_category(row["question_category"])
            except ValueError as exc:
                row_problems.append(RowProblem(label, "question_category", str(exc)))
        if "options" not in missing:
            try:
                options = normalize_options(row["options"])
            except ValueError as exc:
                row_problems.append(RowProblem(label, "options", str(exc)))
        if "correct_answer" not in missing:
            letter = str(row["correct_answer"]).strip().upper()
            if letter not in LETTERS:
                row_problems.append(RowProblem(label, "correct_answer", f"{row['correct_answer']!r} is not one of A-E"))
            elif options is not None and letter not in options:
                row_problems.append(RowProblem(label, "correct_answer", f"{letter} is not among the options"))
        if "video_url" not in missing:
            try:
                from_url = parse_youtube_id(str(row["video_url"]))
            except InvalidYouTubeURL as exc:
                row_problems.append(RowProblem(label, "video_url", str(exc)))
                from_url = None
            given = row.get("scene_name")
            given = given.strip() if isinstance(given, str) else ""
            if given:
                if not is_valid_scene_name(given):
                    row_problems.append(RowProblem(label, "scene_name", f"{given!r} is not an 11-character YouTube id"))
                elif from_url is not None and given != from_url:
                    row_problems.append(RowProblem(label, "scene_name", f"{given!r} differs from the URL's id {from_url!r}"))
                else:
                    scene = given
            else:
                scene = from_url
        if row_problems:
            problems.extend(row_problems)
            continue
        question = Question(
            idx=idx,
            video_url=str(row["video_url"]).strip(),
            scene_name=scene,
            category=category,
            question=str(row["question"]).strip(),
            options=options,
            correct_answer=str(row["correct_answer"]).strip().upper(),
        )
        parsed.append((n, question))
    counts: dict[int, int] = {}
    for _, q in parsed:
        counts[q.idx] = counts.get(q.idx, 0) + 1
    questions = []
    for _, q in parsed:
        if counts[q.idx] > 1:
            problems.append(RowProblem(q.idx, "idx", f"duplicate idx ({counts[q.idx]} rows share it)"))
        else:
            questions.append(q)
    return questions, problems


# ---------------------------------------------------------------------------
# Sources


def _dataset_setting() -> str:
    """``--dataset_name`` by hand, ``DATASET_NAME`` under the launcher."""
    return setting_name("--dataset_name", "DATASET_NAME")


def _hub_help(name: str, split: str, reason: str) -> str:
    setting = _dataset_setting()
    return (
        f"Could not load the dataset {name!r} (split {split!r}) from the Hugging Face Hub: {reason}\n"
        f"K9-Bench is gated. To use it:\n"
        f"  1. accept its terms at https://huggingface.co/datasets/{name}\n"
        f"  2. log in on this machine: `hf auth login` (or set HF_TOKEN)\n"
        f"Offline or without access, pass a local copy instead: {assignment(setting, 'path/to/k9bench.parquet')} "
        f"(parquet, json, jsonl or a save_to_disk folder), or {assignment(setting, DEMO_NAME)} for the bundled demo set."
    )


def _check_hub_reachable(name: str) -> None:
    """Fail within seconds, in one line, when ``name`` is not cached and the Hub is out of reach
    (instead of ``datasets``' minutes of retries). In offline mode ``datasets`` answers at once
    from its own cache, so it is left to do so (its failure gets :func:`_hub_help`)."""
    from k9bench.models import hub

    if hub.offline_requested("HF_DATASETS_OFFLINE"):
        return
    setting = _dataset_setting()
    fixes = [
        f"K9-Bench is gated: accept its terms at https://huggingface.co/datasets/{name} and log in "
        f"(`hf auth login`) on a machine that is online, download it (`hf download {name} --repo-type dataset "
        f"--local-dir k9bench_data`) and pass {assignment(setting, 'k9bench_data')}",
        f"pass another local copy ({assignment(setting, 'path/to/k9bench.parquet')})",
        f"use the bundled demo set ({assignment(setting, DEMO_NAME)})",
    ]
    try:
        hub.check_hub_repo(name, repo_type="dataset", what="dataset", fixes=fixes, offline_vars=("HF_DATASETS_OFFLINE",))
    except hub.HubUnavailable as exc:
        raise DatasetError(str(exc)) from None


def _rows_from_hub(name: str, split: str) -> list[dict]:
    _check_hub_reachable(name)
    try:
        import datasets
    except ImportError as exc:  # pragma: no cover - datasets is a hard requirement
        raise DatasetError(f"the 'datasets' package is needed to load {name!r}: {exc}") from None
    try:
        ds = datasets.load_dataset(name, split=split)
    except Exception as exc:  # the Hub raises many unrelated types; all mean "not reachable/allowed"
        text = f"{type(exc).__name__}: {exc}".strip()
        lowered = text.lower()
        if "gated" in lowered or "401" in lowered or "403" in lowered or "authenticat" in lowered:
            reason = "access denied (the dataset is gated: you must accept its terms and log in)."
        elif "offline" in lowered or "connection" in lowered or "resolve" in lowered or "socket" in lowered:
            reason = "the Hub is not reachable from this machine."
        elif "split" in lowered:
            reason = f"no split {split!r}."
        else:
            reason = "the dataset was not found or could not be read."
        raise DatasetError(_hub_help(name, split, f"{reason}\n  ({text.splitlines()[0][:300]})")) from None
    return [dict(r) for r in ds]


def _json_lines(path: Path, text: str) -> list[dict]:
    rows = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise DatasetError(f"{path}: line {lineno} is not valid JSON: {exc}") from None
    return rows


def _rows_from_json(path: Path) -> list[dict]:
    """Rows of a ``.jsonl`` file, or of a ``.json`` file holding a list of rows, an object with a
    ``rows``/``data``/``test`` list, or JSON lines (what ``datasets``' ``to_json`` writes by default)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"{path}: cannot read as UTF-8 text: {exc}") from None
    if path.suffix.lower() == ".jsonl":
        return _json_lines(path, text)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        if exc.msg == "Extra data" and text.lstrip().startswith("{"):
            log.info("%s: read as JSON lines (one row per line, as datasets' to_json writes them)", path)
            return _json_lines(path, text)
        raise DatasetError(f"{path}: not valid JSON: {exc}") from None
    if isinstance(data, dict):
        for key in ("rows", "data", DEFAULT_SPLIT):
            if isinstance(data.get(key), list):
                return data[key]
        if "idx" in data:  # a single row (a one-line JSON lines file)
            return [data]
        raise DatasetError(f"{path}: expected a list of rows (or an object with a 'rows' list)")
    if not isinstance(data, list):
        raise DatasetError(f"{path}: expected a list of rows")
    return data


def _rows_from_parquet(path: Path) -> list[dict]:
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:  # pragma: no cover
        raise DatasetError(f"reading {path} needs pyarrow: {exc}") from None
    try:
        return pq.read_table(path).to_pylist()
    except Exception as exc:
        raise DatasetError(f"{path}: not a readable parquet file: {exc}") from None


_DATA_SUFFIXES = (".parquet", ".jsonl", ".json")


def _rows_from_data_folder(path: Path, split: str) -> list[dict] | None:
    """Rows of a folder of data files (a Hub snapshot from ``hf download``: ``data/test-00000-of-00001.parquet``).

    The split's files are those whose name starts with the split name; None when the folder holds no data file.
    """
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in _DATA_SUFFIXES
                   and not any(part.startswith(".") for part in p.relative_to(path).parts))
    if not files:
        return None
    chosen = [p for p in files if p.name.lower().startswith(split.lower())]
    if not chosen:
        names = ", ".join(str(p.relative_to(path)) for p in files[:10])
        raise DatasetError(f"{path}: no data file for split {split!r} (files named {split}*.parquet/.jsonl/.json); found: {names}")
    log.info("%s: reading split %r from %s", path, split, ", ".join(str(p.relative_to(path)) for p in chosen))
    rows: list[dict] = []
    for file in chosen:
        rows.extend(_rows_from_parquet(file) if file.suffix.lower() == ".parquet" else _rows_from_json(file))
    return rows


def _rows_from_disk(path: Path, split: str) -> list[dict]:
    if not any((path / marker).is_file() for marker in ("dataset_dict.json", "state.json", "dataset_info.json")):
        rows = _rows_from_data_folder(path, split)
        if rows is not None:
            return rows
    import datasets

    try:
        ds = datasets.load_from_disk(str(path))
    except Exception as exc:
        raise DatasetError(f"{path}: not a dataset saved with save_to_disk: {exc}") from None
    if isinstance(ds, datasets.DatasetDict):
        if split not in ds:
            raise DatasetError(f"{path}: no split {split!r} (has {', '.join(ds)})")
        ds = ds[split]
    return [dict(r) for r in ds]


def read_rows(source: str = DEFAULT_DATASET, split: str = DEFAULT_SPLIT) -> list[dict]:
    """Read raw (unvalidated) rows from any supported source."""
    if source == DEMO_NAME:
        return demo_rows()
    path = Path(os.path.expanduser(source))
    if path.is_dir():
        return _rows_from_disk(path, split)
    if path.is_file():
        suffix = path.suffix.lower()
        if suffix in (".json", ".jsonl"):
            return _rows_from_json(path)
        if suffix == ".parquet":
            return _rows_from_parquet(path)
        raise DatasetError(f"{path}: unsupported file type {suffix!r} (use parquet, json, jsonl or a save_to_disk folder)")
    looks_local = source.startswith((".", "/", "~")) or path.suffix.lower() in (".json", ".jsonl", ".parquet")
    if looks_local or source.count("/") != 1:
        raise DatasetError(f"{source}: no such file or folder, and not a Hub dataset id of the form owner/name")
    return _rows_from_hub(source, split)


def load_questions(
    source: str = DEFAULT_DATASET,
    split: str = DEFAULT_SPLIT,
    *,
    drop_invalid: bool = False,
) -> LoadedDataset:
    """Load and validate questions from ``source`` (see module doc).

    Raises :class:`DatasetError` listing every offending idx and field, unless
    ``drop_invalid`` is set, in which case the bad rows are dropped, logged and
    listed in :attr:`LoadedDataset.dropped`.
    """
    rows = read_rows(source, split)
    questions, problems = validate_rows(rows)
    if problems and not drop_invalid:
        lines = "\n".join(f"  - {p}" for p in problems[:200])
        more = f"\n  ... and {len(problems) - 200} more" if len(problems) > 200 else ""
        raise DatasetError(
            f"{source}: {len(problems)} problem(s) in {len({str(p.idx) for p in problems})} row(s):\n{lines}{more}\n"
            f"Fix the rows, or pass --drop_invalid_rows to skip them."
        )
    if problems:
        bad = sorted({str(p.idx) for p in problems})
        log.warning("dropped %d invalid row(s) from %s: %s", len(bad), source, ", ".join(bad))
        for p in problems:
            log.warning("  %s", p)
    if not questions:
        raise DatasetError(f"{source}: no valid questions")
    return LoadedDataset(questions=questions, source=source, dropped=problems)


def load_selected(settings: DatasetSettings) -> LoadedDataset:
    """:func:`load_questions` for the dataset a script's settings name."""
    return load_questions(settings.dataset_name, settings.split, drop_invalid=settings.drop_invalid_rows)


def select_range(questions: list[Question], start_idx: int = 0, end_idx: int | None = None, max_samples: int = -1) -> list[Question]:
    """Slice questions by position like the reference: ``[start_idx:end_idx]`` then the first ``max_samples``."""
    out = questions[start_idx:end_idx]
    if max_samples is not None and max_samples >= 0:
        out = out[:max_samples]
    return out


def unique_videos(questions: Iterable[Question]) -> dict[str, str]:
    """Scene name to URL for each distinct video, in first-seen order."""
    out: dict[str, str] = {}
    for q in questions:
        out.setdefault(q.scene_name, q.video_url)
    return out
