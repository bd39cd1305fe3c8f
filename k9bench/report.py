"""Leaderboard report from eval (and judge) artifacts: ``evaluate_results.py --mode report``.

Contract with evaluate_results.py (which owns the parser): it calls
``add_report_args(parser)`` while building its parser (the flags are generated from
:class:`ReportSettings`), builds ``ReportSettings`` once in its ``main()`` with
:func:`k9bench.settings.from_namespace` (``input_file`` and ``output_file`` come from its own
flags) and calls ``run_report(settings)`` for ``--mode report``. Options added here do not
collide with evaluate_results.py's own flags (--mode, --input_file, --output_file,
--threshold, --embedding_model, --batch_size, --device, -v, -q).

What it writes into ``--report_dir`` (default ``report``):

=============================  ===================================================
``report.md``                  the leaderboard in the layout of the paper's Table 1
                               (rank, average, five categories, 95% intervals), the
                               judge table in the layout of Table 3 when judge files
                               are given, and links to the plots. ``--output_file``
                               puts the Markdown elsewhere.
``report.json``                the same figures, machine-readable
``accuracy_by_category.png``   accuracy per category for each run
``accuracy_by_duration.png``   accuracy by video-duration bin (when records carry
                               the video duration written by eval_video_llm.py)
``accuracy_vs_frames.png``     accuracy against the frame budget, when one model
                               was run with several MAX_FRAMES
=============================  ===================================================

Accuracy counts failed samples as wrong, like the paper. Confidence intervals are
read from the eval file when it carries them; otherwise they are computed here by
bootstrap resampling whole videos (a video's questions move together), seeded.

Each run's settings (model, embedding model, threshold, prompt sources and hashes, frame
settings, question count) are read from the eval file's contents (the raw file's settings
travel in it), never from its name, and stated in the report; a run whose settings differ from
the paper's setup (:data:`k9bench.published.PAPER_SETUP`) is marked "not comparable to the
paper's Table 1", and the paper's rows appear beside it only with that mark. The short-video
subset (videos under 150 s, the paper's 2,693 questions) has its own table.
"""

from __future__ import annotations

import argparse
import logging
import math
import re
import sys
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable

from k9bench import CATEGORIES
from k9bench.artifacts import (
    ArtifactError,
    QuestionRecord,
    is_finite_number,
    load_records_artifact,
    now_iso,
    read_json,
    write_json_atomic,
    write_text_atomic,
)
from k9bench.layout import next_stage_path, parse_artifact_name, short_model_name
from k9bench.settings import add_arguments, setting
from k9bench.stats import DEFAULT_RESAMPLES, DEFAULT_SEED
from k9bench.published import (
    AXIS_KEYS,
    FRAME_ABLATION,
    JUDGE_AXES,
    PAPER_SETUP,
    PUBLISHED_ACCURACY,
    PUBLISHED_JUDGE,
    RANDOM_GUESS,
    REFERENCE_PROMPT_SHA256,
    find_published_accuracy,
    normalize_model_name,
)

log = logging.getLogger(__name__)

CATEGORY_HEADERS = {
    "posture analysis": "Posture",
    "action sequence": "Action seq.",
    "context analysis": "Context",
    "cause-effect analysis": "Cause-effect",
    "interaction analysis": "Interaction",
}
"""Table 1 column heads for the five categories."""

DURATION_BINS: tuple[tuple[float, float], ...] = ((0, 30), (30, 60), (60, 150), (150, 300), (300, math.inf))
"""Video-duration bins in seconds, ``[low, high)``; 150 s is the paper's short-video cut."""

DURATION_KEYS = ("video_duration", "video_duration_s", "duration_s", "duration", "video_seconds")
"""Record keys that may hold the video duration in seconds (our inference writes one of them)."""

DURATION_CONTAINERS = ("video_info", "frames", "sampling", "frame_sampling", "video_meta", "video_sampling")
"""Nested record objects searched for a duration key."""

BOOTSTRAP_SAMPLES = DEFAULT_RESAMPLES
"""Resamples for the intervals computed here (as evaluate_results.py draws them)."""

BOOTSTRAP_SEED = DEFAULT_SEED
"""Seed of those resamples (reports are reproducible)."""

PROMPT_PLACEMENTS = ("system", "empty_system", "user_turn")
"""Where a run's instructions stood (the raw file's ``inference.prompt.placement``)."""

PLACEMENT_DIFFERENCES = {
    "empty_system": "an empty system turn: the model got no instructions (the reference's --use_system_message False)",
    "user_turn": "instructions not sent as the system message (no system turn; they open the user turn)",
}
"""How a placement other than the paper's is named among a run's differences."""

PLACEMENT_SHOWN = {"empty_system": "empty system turn (no instructions)", "user_turn": "instructions in the user turn"}
"""How a placement other than ``system`` is shown in the Run settings table."""

AUDIO_MARK = "A+V"
"""The label suffix of an audio+video run; such runs are never mixed with video-only ones."""

COMPARABLE, NOT_COMPARABLE, UNCONFIRMED = "comparable", "not comparable", "unconfirmed"
"""A run's standing against the paper's Table 1 setup."""

NOT_COMPARABLE_MARK = "not comparable to the paper's Table 1"
"""The mark a run carries when its settings differ from the paper's."""


class ReportError(ArtifactError):
    """An input of the report is unusable; the message names the file."""


# ---------------------------------------------------------------------------
# Data


@dataclass
class Score:
    """An accuracy with its counts and interval, in percent."""

    correct: int
    """Correct answers."""
    total: int
    """Questions counted (failed samples included)."""
    ci: tuple | None = None
    """95% interval ``(low, high)`` in percent, or None."""

    @property
    def accuracy(self) -> float | None:
        """Accuracy in percent (None when there is no question)."""
        return 100.0 * self.correct / self.total if self.total else None


@dataclass
class RunSettings:
    """What a run was made with, read from its eval file's contents (never from the file name)."""

    model_name_or_path: str | None = None
    """The model as given to eval_video_llm.py (None when the file does not say)."""
    embedding_model: str | None = None
    """Similarity model of the sim stage."""
    threshold: float | None = None
    """Threshold of the fine rule."""
    prompts: dict = field(default_factory=dict)
    """Prompt kind (``system_prompt``...) -> ``{"source": ..., "sha256": ...}``."""
    use_system_message: bool | None = None
    """The file's ``use_system_message`` as written (read :attr:`prompt_placement` for its meaning)."""
    prompt_placement: str | None = None
    """Where the instructions stood: ``system`` (the system turn), ``empty_system`` (the reference's
    ``--use_system_message False``: an empty system turn, no instructions at all) or ``user_turn``
    (ours: no system turn, the instructions open the user turn); None when the file does not say."""
    audio: bool | None = None
    """True for an audio+video run (the model heard the soundtracks); None when the file does not say."""
    text_only: bool | None = None
    """True for a run without video (MAX_FRAMES 0)."""
    max_frames: int | None = None
    """Frame budget per video."""
    fps: float | None = None
    """Frames per second sampled before the budget."""
    max_pixels: int | None = None
    """Pixels per resized frame."""
    questions: int = 0
    """Questions in the file."""
    dataset: str | None = None
    """Dataset source (Hub id, file, ``demo``)."""
    differences: list = field(default_factory=list)
    """How the run differs from the paper's Table 1 setup (empty: it does not)."""
    unconfirmed: list = field(default_factory=list)
    """Settings the file does not record, or that cannot be checked (a prompt file's text)."""

    @property
    def standing(self) -> str:
        """``comparable``, ``not comparable`` or ``unconfirmed``."""
        if self.differences:
            return NOT_COMPARABLE
        return UNCONFIRMED if self.unconfirmed else COMPARABLE


@dataclass
class RunSummary:
    """The figures of one eval file."""

    path: str
    """The eval file."""
    label: str
    """Display name (the model, disambiguated when needed)."""
    model: str
    """Short model name."""
    max_frames: int | None
    """Frame budget of the run (None when unknown)."""
    overall: Score
    """Accuracy over all questions (failed samples count as wrong)."""
    categories: dict = field(default_factory=dict)
    """Category -> :class:`Score`."""
    failed: int = 0
    """Records that carry an error."""
    ci_source: str = "none"
    """``file`` (read from the eval file), ``bootstrap`` (computed here) or ``none``."""
    durations: dict = field(default_factory=dict)
    """Duration-bin label -> :class:`Score` (empty when records carry no duration)."""
    missing_durations: int = 0
    """Records without a usable duration."""
    settings: RunSettings = field(default_factory=RunSettings)
    """What the run was made with, and how it stands against the paper's setup."""
    short: Score | None = None
    """Accuracy over the short-video subset (videos under 150 s); None without durations."""
    short_categories: dict = field(default_factory=dict)
    """Category -> :class:`Score` over the short-video subset."""

    def to_dict(self) -> dict:
        out = asdict(self)
        out["overall"]["accuracy"] = self.overall.accuracy
        for name, score in self.categories.items():
            out["categories"][name]["accuracy"] = score.accuracy
        for name, score in self.durations.items():
            out["durations"][name]["accuracy"] = score.accuracy
        if self.short is not None:
            out["short"]["accuracy"] = self.short.accuracy
        for name, score in self.short_categories.items():
            out["short_categories"][name]["accuracy"] = score.accuracy
        out["settings"]["standing"] = self.settings.standing
        return out


@dataclass
class JudgeSummary:
    """Judge scores of one run, in the layout of the paper's Table 3."""

    path: str
    """The judge file."""
    label: str
    """Display name."""
    scores: dict
    """Table 3 column -> mean score scaled to 0-100 (1-10 mean times 10)."""
    scored: int
    """Entries with all five scores."""
    ignored: int = 0
    """Entries without usable scores."""
    model: str | None = None
    """The judged run's model (matched to an eval file of the report), used to find the paper's row."""


# ---------------------------------------------------------------------------
# Loading eval files


def _pct_interval(value: Any, accuracy_in_block: Any, pct: float | None) -> tuple | None:
    """Normalize an interval found in a file to percent, or None when it is not one."""
    low = high = None
    if isinstance(value, (list, tuple)) and len(value) == 2:
        low, high = value
    elif isinstance(value, dict):
        for lo_key, hi_key in (("low", "high"), ("lower", "upper"), ("lo", "hi"), ("ci_low", "ci_high")):
            if lo_key in value and hi_key in value:
                low, high = value[lo_key], value[hi_key]
                break
    if not (is_finite_number(low) and is_finite_number(high)) or low > high:
        return None
    scale = 1.0
    if is_finite_number(accuracy_in_block) and pct is not None:
        # the block's accuracy tells whether the file uses fractions or percent
        if abs(accuracy_in_block * 100.0 - pct) < abs(accuracy_in_block - pct):
            scale = 100.0
    elif high <= 1.0:
        scale = 100.0
    return (float(low) * scale, float(high) * scale)


_CI_KEYS = ("ci95", "ci_95", "ci", "confidence_interval", "accuracy_ci")


def interval_in_block(block: Any, pct: float | None) -> tuple | None:
    """A 95% interval stored in an accuracy block (several spellings accepted), in percent."""
    if not isinstance(block, dict):
        return None
    acc = block.get("accuracy")
    for key in _CI_KEYS:
        if key in block:
            found = _pct_interval(block[key], acc, pct)
            if found:
                return found
    for lo_key, hi_key in (("ci_low", "ci_high"), ("ci_lower", "ci_upper"), ("ci95_low", "ci95_high")):
        if lo_key in block and hi_key in block:
            found = _pct_interval({"low": block[lo_key], "high": block[hi_key]}, acc, pct)
            if found:
                return found
    return None


def _count(block: Any, key: str) -> int | None:
    value = block.get(key) if isinstance(block, dict) else None
    return int(value) if is_finite_number(value) and float(value).is_integer() and value >= 0 else None


def _most_common(values: Iterable[Any]) -> Any:
    counted = Counter(v for v in values if v not in (None, ""))
    return counted.most_common(1)[0][0] if counted else None


def record_duration(record: QuestionRecord) -> float | None:
    """The video duration (seconds) a record carries, or None."""
    places = [record.extra] + [record.extra.get(k) for k in DURATION_CONTAINERS]
    for place in places:
        if not isinstance(place, dict):
            continue
        for key in DURATION_KEYS:
            value = place.get(key)
            if is_finite_number(value) and value >= 0:
                return float(value)
    return None


def duration_bin_label(low: float, high: float) -> str:
    """``0-30 s``, ..., ``300+ s``."""
    return f"{low:g}+ s" if math.isinf(high) else f"{low:g}-{high:g} s"


def _is_correct(record: QuestionRecord) -> bool:
    return bool(record.is_correct) and not record.failed


def bootstrap_intervals(records: list[QuestionRecord], *, samples: int = BOOTSTRAP_SAMPLES, seed: int = BOOTSTRAP_SEED) -> dict:
    """95% intervals (percent) for overall and per-category accuracy, by :func:`k9bench.stats.bootstrap_accuracy`.

    Whole videos are resampled with replacement (a video's questions move together);
    failed samples count as wrong. Returns ``{"overall": (lo, hi), category: (lo, hi), ...}``;
    a category absent from the records has no entry.
    """
    from k9bench.stats import bootstrap_accuracy

    if not records:
        return {}
    result = bootstrap_accuracy(
        [_is_correct(r) for r in records],
        [r.scene_name or r.video or f"idx{r.idx}" for r in records],
        [r.question_category for r in records],
        resamples=samples,
        seed=seed,
    )
    out = {}
    for name, interval in [("overall", result.overall), *result.by_label.items()]:
        if interval.low is not None and (name == "overall" or name in CATEGORIES):
            out[name] = (100.0 * interval.low, 100.0 * interval.high)
    return out


def _file_intervals(meta: dict, overall: Score, categories: dict) -> bool:
    """Fill intervals from the eval file (evaluate_results.py's ``statistics`` block, or another
    spelling at the top level); True when the overall interval was found."""
    stats = meta.get("statistics") if isinstance(meta.get("statistics"), dict) else {}
    overall_block = stats.get("overall") if isinstance(stats.get("overall"), dict) else {}
    overall.ci = interval_in_block(overall_block.get("all"), overall.accuracy) or interval_in_block(meta, overall.accuracy)
    if overall.ci is None:
        return False
    cat_stats = stats.get("categories") if isinstance(stats.get("categories"), dict) else {}
    blocks = meta.get("category_wise_accuracy") if isinstance(meta.get("category_wise_accuracy"), dict) else {}
    for cat, score in categories.items():
        block = cat_stats.get(cat) if isinstance(cat_stats.get(cat), dict) else {}
        score.ci = interval_in_block(block.get("all"), score.accuracy) or interval_in_block(blocks.get(cat), score.accuracy)
    return True


_SKIPPED_BLOCKS = ("backend", "backend_by_shard", "backend_settings", "adjusted_settings", "run_stats", "provenance", "input_provenance",
                   "merged_from")
"""Sub-objects that describe the machine or the history, not the run's settings."""


def _holders(meta: dict) -> list[dict]:
    """Where a run's settings sit in an eval file: its top level, then the raw file's top level
    carried along by the scoring stages (``input_meta``)."""
    inner = meta.get("input_meta")
    return [meta] + ([inner] if isinstance(inner, dict) else [])


def _top(meta: dict, key: str) -> Any:
    for holder in _holders(meta):
        if holder.get(key) is not None:
            return holder[key]
    return None


def _find(obj: Any, key: str) -> Any:
    """The first value of ``key`` in nested dicts (depth first; machine and history blocks skipped)."""
    if not isinstance(obj, dict):
        return None
    if obj.get(key) is not None:
        return obj[key]
    for name, value in obj.items():
        if isinstance(value, dict) and name not in _SKIPPED_BLOCKS:
            found = _find(value, key)
            if found is not None:
                return found
    return None


_PROMPT_KEY = re.compile(r"(?P<kind>\w*prompt)_(?P<what>source|file|sha256)")


def _prompts(block: dict) -> dict:
    """Prompt kind -> source and hash, from ``<kind>_source``/``<kind>_file``/``<kind>_sha256`` keys
    anywhere in the inference settings (a ``<kind>_file`` of None means the built-in text)."""
    sources: dict = {}
    files: dict = {}
    hashes: dict = {}

    def walk(obj: dict) -> None:
        for key, value in obj.items():
            if isinstance(value, dict):
                if key not in _SKIPPED_BLOCKS:
                    walk(value)
                continue
            match = _PROMPT_KEY.fullmatch(str(key))
            if not match or "judge" in match["kind"]:
                continue
            kind, what = match["kind"], match["what"]
            target = {"source": sources, "file": files, "sha256": hashes}[what]
            target.setdefault(kind, value)

    walk(block)
    out = {}
    for kind in sorted(set(sources) | set(files) | set(hashes)):
        source = sources.get(kind)
        if source is None and kind in files:
            source = files[kind] if files[kind] is not None else f"builtin:{kind}"
        out[kind] = {"source": source, "sha256": hashes.get(kind)}
    return out


def _number(value: Any) -> float | None:
    return float(value) if is_finite_number(value) else None


def _record_audio(record: QuestionRecord) -> bool | None:
    """Whether a record was made with the soundtrack asked for: its ``audio`` flag or soundtrack
    details, or its ``audio_used``; None when it does not say."""
    audio = record.extra.get("audio")
    if isinstance(audio, bool):
        return audio
    if isinstance(audio, dict):
        return True
    used = record.extra.get("audio_used")
    return used if isinstance(used, bool) else None


def read_settings(meta: dict, records: list[QuestionRecord], questions: int) -> RunSettings:
    """A run's settings from its eval file's top level and records (see :class:`RunSettings`)."""
    inference = _top(meta, "inference")
    inference = inference if isinstance(inference, dict) else {}
    metadata = meta.get("metadata") if isinstance(meta.get("metadata"), dict) else {}
    frames = inference.get("frames") if isinstance(inference.get("frames"), dict) else {}
    record_frames = _most_common(r.max_frames for r in records if isinstance(r.max_frames, int) and not isinstance(r.max_frames, bool))
    max_frames = record_frames if record_frames is not None else _find(frames, "max_frames") if frames else _find(inference, "max_frames")
    text_only = inference.get("text_only")
    if text_only is None and max_frames is not None:
        text_only = max_frames == 0
    dataset = _find(inference, "dataset")
    use_system = _find(inference, "use_system_message")
    placement = _find(inference, "placement")
    if placement not in PROMPT_PLACEMENTS:
        if placement is not None:
            log.warning("unknown prompt placement %r in the inference settings; read as not recorded", placement)
        # written before the placement was recorded: False then meant the instructions in the user turn
        placement = None if not isinstance(use_system, bool) else "system" if use_system else "user_turn"
    audio = _find(inference, "audio")
    if not isinstance(audio, bool):
        # no setting recorded: the records say whether the model heard a soundtrack
        flags = {_record_audio(r) for r in records} - {None}
        audio = True if True in flags else False if flags else None
    settings = RunSettings(
        model_name_or_path=_top(meta, "model_name_or_path"),
        embedding_model=metadata.get("similarity_model") or _top(meta, "similarity_model"),
        threshold=_number(meta.get("threshold")),
        prompts=_prompts(inference),
        use_system_message=use_system if isinstance(use_system, bool) else None,
        prompt_placement=placement,
        audio=audio,
        text_only=bool(text_only) if text_only is not None else None,
        max_frames=int(max_frames) if is_finite_number(max_frames) else None,
        fps=_number(_find(frames, "fps") if frames else _find(inference, "fps")),
        max_pixels=int(v) if is_finite_number(v := (_find(frames, "max_pixels") if frames else _find(inference, "max_pixels"))) else None,
        questions=questions,
        dataset=(dataset.get("source") if isinstance(dataset, dict) else dataset) if dataset is not None else None,
    )
    settings.differences, settings.unconfirmed = compare_with_paper(settings)
    return settings


def compare_with_paper(settings: RunSettings) -> tuple[list[str], list[str]]:
    """``(differences, unconfirmed)`` of a run's settings against the paper's Table 1 setup."""
    paper = PAPER_SETUP
    differences: list[str] = []
    unconfirmed: list[str] = []
    if settings.embedding_model is None:
        unconfirmed.append("embedding model not recorded")
    elif normalize_model_name(settings.embedding_model) != normalize_model_name(paper.embedding_model):
        differences.append(f"embedding model {settings.embedding_model} (paper: {paper.embedding_model})")
    if settings.threshold is None:
        unconfirmed.append("threshold not recorded")
    elif settings.threshold != paper.threshold:
        differences.append(f"threshold {settings.threshold:g} (paper: {paper.threshold:g})")
    if settings.prompt_placement is None:
        unconfirmed.append("prompt placement not recorded")
    elif settings.prompt_placement != paper.prompt_placement:
        differences.append(PLACEMENT_DIFFERENCES.get(settings.prompt_placement, f"prompt placement {settings.prompt_placement}"))
    if settings.audio and not paper.audio:
        differences.append("audio+video: the model heard the soundtracks (paper's Table 1: video only)")
    if not settings.prompts:
        unconfirmed.append("prompts not recorded")
    for kind, prompt in settings.prompts.items():
        source, digest = str(prompt.get("source")), prompt.get("sha256")
        if digest and digest in REFERENCE_PROMPT_SHA256:
            continue
        if source.startswith("builtin"):
            differences.append(f"{kind} in this project's own words ({source}), not the reference's")
        else:
            unconfirmed.append(f"{kind} from {source} (not confirmed as the reference's text)")
    if settings.text_only:
        differences.append("text only, no video (paper: 32 frames)")
    else:
        for name, have, want, shown in (
            ("frames", settings.max_frames, paper.max_frames, f"{paper.max_frames}"),
            ("fps", settings.fps, paper.fps, f"{paper.fps:g}"),
            ("max_pixels", settings.max_pixels, paper.max_pixels, f"{paper.max_pixels} = 360x420"),
        ):
            if have is None:
                unconfirmed.append(f"{name} not recorded")
            elif have != want:
                differences.append(f"{name} {have:g} (paper: {shown})")
    if settings.questions != paper.questions:
        differences.append(f"{settings.questions:,} question{'' if settings.questions == 1 else 's'} (paper: {paper.questions:,})")
    return differences, unconfirmed


def load_run(path: str | Path) -> RunSummary:
    """Summarize one eval file; raise :class:`ReportError` naming it when it is not one."""
    try:
        art = load_records_artifact(path)
    except ArtifactError as exc:
        raise ReportError(str(exc)) from None
    if art.stage != "eval":
        raise ReportError(
            f"{path}: this is a {art.stage} file, not an eval file; run evaluate_results.py --mode evaluate on it first"
        )
    records = art.records
    meta = art.meta

    # counts: the file's own aggregates are authoritative; records fill any gap
    total = _count(meta, "total_count")
    correct = _count(meta, "correct_count")
    if total is None or correct is None:
        total, correct = len(records), sum(_is_correct(r) for r in records)
    if correct > total:
        raise ReportError(f"{path}: correct_count {correct} exceeds total_count {total}")
    overall = Score(correct=correct, total=total)

    blocks = meta.get("category_wise_accuracy") if isinstance(meta.get("category_wise_accuracy"), dict) else {}
    categories: dict[str, Score] = {}
    for cat in CATEGORIES:
        block = blocks.get(cat)
        c, t = _count(block, "correct"), _count(block, "total")
        if c is None or t is None:
            in_cat = [r for r in records if r.question_category == cat]
            c, t = sum(_is_correct(r) for r in in_cat), len(in_cat)
        categories[cat] = Score(correct=c, total=t)
    unknown = sorted(set(blocks) - set(CATEGORIES))
    if unknown:
        log.warning("%s: categories outside the five released ones are left out of the table: %s", path, ", ".join(unknown))

    # intervals: the file's, else a bootstrap over videos
    ci_source = "none"
    if _file_intervals(meta, overall, categories):
        ci_source = "file"
    elif records:
        ci_source = "bootstrap"
        computed = bootstrap_intervals(records)
        overall.ci = computed.get("overall")
        for cat, score in categories.items():
            score.ci = computed.get(cat)

    # durations
    durations: dict[str, Score] = {}
    missing = 0
    for rec in records:
        seconds = record_duration(rec)
        if seconds is None:
            missing += 1
            continue
        for low, high in DURATION_BINS:
            if low <= seconds < high:
                score = durations.setdefault(duration_bin_label(low, high), Score(0, 0))
                score.total += 1
                score.correct += int(_is_correct(rec))
                break
    ordered = {duration_bin_label(lo, hi): durations[duration_bin_label(lo, hi)] for lo, hi in DURATION_BINS if duration_bin_label(lo, hi) in durations}

    # the short-video subset (the paper's < 150 s), over the records that carry a duration
    short = None
    short_categories: dict[str, Score] = {}
    timed = [(rec, record_duration(rec)) for rec in records]
    timed = [(rec, sec) for rec, sec in timed if sec is not None]
    if timed:
        subset = [rec for rec, sec in timed if sec < PAPER_SETUP.short_video_seconds]
        short = Score(correct=sum(_is_correct(r) for r in subset), total=len(subset))
        for cat in CATEGORIES:
            in_cat = [r for r in subset if r.question_category == cat]
            short_categories[cat] = Score(correct=sum(_is_correct(r) for r in in_cat), total=len(in_cat))

    settings = read_settings(meta, records, total)
    # the model as the records (or the file) name it; the file name is only a last-resort label
    model = _most_common(r.model_name for r in records) or meta.get("model_name") or _top(meta, "model_name")
    if not model and settings.model_name_or_path:
        model = short_model_name(settings.model_name_or_path)
    if not model:
        name = parse_artifact_name(path)
        model = name.model if name else Path(path).stem
    frames = settings.max_frames
    return RunSummary(
        path=str(path),
        label=run_name(str(model), settings.audio),
        model=str(model),
        max_frames=frames,
        overall=overall,
        categories=categories,
        failed=sum(r.failed for r in records),
        ci_source=ci_source,
        durations=ordered,
        missing_durations=missing,
        settings=settings,
        short=short,
        short_categories=short_categories,
    )


def run_name(model: str, audio: bool | None) -> str:
    """A run's display name: the model, with ``(A+V)`` for an audio+video run (kept apart from the
    same model's video-only runs in every table and plot)."""
    return f"{model} ({AUDIO_MARK})" if audio else model


def _disambiguate(runs: list[RunSummary], labels: list[str] | None) -> None:
    if labels:
        for run, label in zip(runs, labels):
            run.label = label
        return
    names = {id(r): run_name(r.model, r.settings.audio) for r in runs}
    by_name = Counter(names.values())
    by_name_frames = Counter((names[id(r)], r.max_frames) for r in runs)
    for run in runs:
        name = names[id(run)]
        if by_name_frames[(name, run.max_frames)] > 1:
            run.label = f"{name} [{Path(run.path).stem}]"
        elif by_name[name] > 1:
            run.label = f"{name} @{run.max_frames}f"


# ---------------------------------------------------------------------------
# Judge files


def load_judge(path: str | Path) -> JudgeSummary:
    """Mean judge scores of one judge file (a list of entries, SPEC section 2), scaled to 0-100."""
    data = read_json(path)
    if isinstance(data, dict) and isinstance(data.get("entries"), list):
        data = data["entries"]
    if not isinstance(data, list):
        raise ReportError(f"{path}: a judge file is a JSON list of entries; got {type(data).__name__}")
    sums = {axis: 0.0 for axis in JUDGE_AXES}
    scored = ignored = 0
    for i, entry in enumerate(data):
        scores = entry.get("scores") if isinstance(entry, dict) else None
        values = [scores.get(AXIS_KEYS[axis]) if isinstance(scores, dict) else None for axis in JUDGE_AXES]
        if not all(is_finite_number(v) for v in values):
            ignored += 1
            log.warning("%s: entry #%d (idx %s) has no complete scores; left out", path, i, entry.get("idx") if isinstance(entry, dict) else "?")
            continue
        scored += 1
        for axis, value in zip(JUDGE_AXES, values):
            sums[axis] += float(value)
    stem = Path(path).stem
    name = parse_artifact_name(path)
    label = name.model if name else re.sub(r"^judge_", "", stem)
    if not scored:
        log.warning("%s: no judge entry with all five scores; the judge table leaves it out", path)
        return JudgeSummary(path=str(path), label=label, scores={}, scored=0, ignored=ignored)
    return JudgeSummary(path=str(path), label=label, scores={a: 10.0 * sums[a] / scored for a in JUDGE_AXES}, scored=scored, ignored=ignored)


def match_judge_to_run(judge: JudgeSummary, runs: list[RunSummary]) -> RunSummary | None:
    """Give a judge row the label (and model) of the eval file it judged, so Table 3 names runs as
    Table 1 does (``--labels`` included).

    The judge's ``<file>.meta.json`` sidecar (subjective_evals.py) names its input and that file's
    sha256: an eval file of the report with the same bytes or path is the one. Otherwise a judge
    file named as the default judge output of an eval file of the report
    (:func:`k9bench.layout.next_stage_path`: ``eval_X.json`` -> ``judge_X.json``) belongs to it.
    """
    import hashlib

    match = None
    sidecar = Path(f"{judge.path}.meta.json")
    info = {}
    if sidecar.exists():
        try:
            data = read_json(sidecar)
            info = data.get("input") if isinstance(data, dict) and isinstance(data.get("input"), dict) else {}
        except ArtifactError as exc:
            log.warning("%s: unreadable (%s); matching the judge file to a run by its name", sidecar, exc)
    digest, source = info.get("sha256"), info.get("evaluations")
    for run in runs:
        try:
            same_bytes = bool(digest) and hashlib.sha256(Path(run.path).read_bytes()).hexdigest() == digest
        except OSError:
            same_bytes = False
        same_path = bool(source) and Path(str(source)).resolve() == Path(run.path).resolve()
        if same_bytes or same_path:
            match = run
            break
    if match is None:
        candidates = [r for r in runs if next_stage_path(r.path, "judge").name == Path(judge.path).name]
        if len(candidates) == 1:
            match = candidates[0]
    if match is not None:
        judge.label, judge.model = match.label, match.model
    return match


# ---------------------------------------------------------------------------
# Markdown


def _fmt(value: float | None, ci: tuple | None = None) -> str:
    if value is None:
        return "—"
    text = f"{value:.1f}"
    if ci is not None:
        text += f" [{ci[0]:.1f}, {ci[1]:.1f}]"
    return text


def published_rows_for(runs: list[RunSummary], mode: str) -> list:
    """Paper rows to show: none, those matching a run's model, or all of Table 1."""
    if mode == "all":
        return list(PUBLISHED_ACCURACY)
    if mode == "matching":
        seen, rows = set(), []
        for run in runs:
            row = find_published_accuracy(run.model)
            if row is not None and row.model not in seen:
                seen.add(row.model)
                rows.append(row)
        return rows
    return []


def run_source(run: RunSummary, beside_paper: bool) -> str:
    """The Source cell of a run: beside the paper's rows, a run that differs from the paper's setup
    carries the mark (and one whose setup cannot be confirmed says so)."""
    if not beside_paper:
        return "this run"
    standing = run.settings.standing
    if standing == NOT_COMPARABLE:
        return f"this run, {NOT_COMPARABLE_MARK}"
    if standing == UNCONFIRMED:
        return "this run, comparability to Table 1 unconfirmed"
    return "this run"


def leaderboard_markdown(runs: list[RunSummary], published: list) -> str:
    """The Table 1 layout: rank, model, average, five categories (with intervals), runs and paper rows ranked together."""
    rows = []
    for run in runs:
        cells = [_fmt(run.overall.accuracy, run.overall.ci)] + [_fmt(run.categories[c].accuracy, run.categories[c].ci) for c in CATEGORIES]
        frames = "—" if run.max_frames is None else str(run.max_frames)
        rows.append((run.overall.accuracy or 0.0, run.label, run_source(run, bool(published)), frames, cells, str(run.overall.total), str(run.failed)))
    for pub in published:
        cells = [_fmt(pub.average)] + [_fmt(pub.categories.get(c)) for c in CATEGORIES]
        rows.append((pub.average, pub.model, "paper", pub.setting, cells, "4744", "—"))
    rows.sort(key=lambda r: -r[0])
    head = ["Rank", "Model", "Source", "Frames", "Avg", *[CATEGORY_HEADERS[c] for c in CATEGORIES], "N", "Failed"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] * 4 + ["---:"] * 8) + "|"]
    for rank, (_, label, source, frames, cells, n, failed) in enumerate(rows, 1):
        lines.append("| " + " | ".join([str(rank), label.replace("|", "\\|"), source, frames, *cells, n, failed]) + " |")
    return "\n".join(lines)


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def _short_hash(digest: Any) -> str:
    return f"sha256 {str(digest)[:12]}…" if digest else "no hash recorded"


def settings_markdown(runs: list[RunSummary]) -> str:
    """One row per run: what it was made with, and how it stands against the paper's Table 1 setup."""
    lines = ["| Model | Questions | Embedding model | Threshold | Prompts | Frames | Paper's Table 1 |",
             "|---|---:|---|---:|---|---|---|"]
    for run in runs:
        st = run.settings
        prompts = "; ".join(f"{kind}: {p.get('source') or '?'} ({_short_hash(p.get('sha256'))})" for kind, p in st.prompts.items()) or "not recorded"
        if st.prompt_placement in PLACEMENT_SHOWN:
            prompts += "; " + PLACEMENT_SHOWN[st.prompt_placement]
        if st.text_only:
            frames = "text only (no video)"
        else:
            parts = [f"{st.max_frames if st.max_frames is not None else '?'} frames",
                     f"{st.fps:g} fps" if st.fps is not None else "fps not recorded",
                     f"max {st.max_pixels:,} px" if st.max_pixels is not None else "max_pixels not recorded"]
            frames = ", ".join(parts) + (" + audio (A+V)" if st.audio else "")
        if st.standing == NOT_COMPARABLE:
            standing = f"**{NOT_COMPARABLE_MARK}**: " + "; ".join(st.differences)
        elif st.standing == UNCONFIRMED:
            standing = "unconfirmed: " + "; ".join(st.unconfirmed)
        else:
            standing = "comparable (the paper's setup)"
        if st.differences and st.unconfirmed:
            standing += " (also unconfirmed: " + "; ".join(st.unconfirmed) + ")"
        cells = [run.label, f"{st.questions:,}", st.embedding_model or "not recorded",
                 f"{st.threshold:g}" if st.threshold is not None else "not recorded", prompts, frames, standing]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


def short_video_markdown(runs: list[RunSummary]) -> str:
    """The short-video subset (videos under 150 s) of each run, in the Table 1 layout."""
    head = ["Model", "Questions", "Avg", *[CATEGORY_HEADERS[c] for c in CATEGORIES]]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * 7) + "|"]
    for run in runs:
        if run.short is None:
            why = "text only: no video" if run.settings.text_only else "no video durations in the records"
            lines.append(f"| {run.label} | — | {why} |" + " |" * len(CATEGORIES))
            continue
        cells = [_fmt(run.short.accuracy)] + [_fmt(run.short_categories[c].accuracy) for c in CATEGORIES]
        lines.append("| " + " | ".join([run.label.replace("|", "\\|"), f"{run.short.total:,}", *cells]) + " |")
    return "\n".join(lines)


def judge_markdown(judges: list[JudgeSummary], published: str = "none") -> str:
    """The Table 3 layout: rank, model, Logical, Factual, Concise, Accuracy, Overall (0-100)."""
    rows = [(j.scores["Overall"], j.label, "this run", [f"{j.scores[a]:.2f}" for a in JUDGE_AXES], str(j.scored)) for j in judges if j.scored]
    if published != "none":
        shown = {normalize_model_name(j.model or j.label) for j in judges}
        for pub in PUBLISHED_JUDGE:
            if published == "all" or normalize_model_name(pub.model) in shown:
                rows.append((pub.scores["Overall"], pub.model, "paper", [f"{pub.scores[a]:.2f}" for a in JUDGE_AXES], "—"))
    rows.sort(key=lambda r: -r[0])
    head = ["Rank", "Model", "Source", *JUDGE_AXES, "Scored"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] * 3 + ["---:"] * 6) + "|"]
    for rank, (_, label, source, cells, n) in enumerate(rows, 1):
        lines.append("| " + " | ".join([str(rank), label.replace("|", "\\|"), source, *cells, n]) + " |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# Plots


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _legend_below(ax, entries: int) -> None:
    """The legend under the axes, so it never hides a bar."""
    ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=min(max(entries, 1), 3), frameon=False)


def _error(score_value: float | None, ci: tuple | None) -> list:
    if score_value is None or ci is None:
        return [0.0, 0.0]
    return [max(score_value - ci[0], 0.0), max(ci[1] - score_value, 0.0)]


def plot_categories(runs: list[RunSummary], published: list, path: Path) -> Path:
    """Grouped bars: accuracy per category (and average) for each run and shown paper row."""
    import numpy as np

    plt = _pyplot()
    groups = [*CATEGORIES, "average"]
    series = []
    for run in runs:
        values = [run.categories[c].accuracy for c in CATEGORIES] + [run.overall.accuracy]
        cis = [run.categories[c].ci for c in CATEGORIES] + [run.overall.ci]
        label = run.label if not published or run.settings.standing == COMPARABLE else f"{run.label} ({run.settings.standing} to Table 1)"
        series.append((label, values, cis))
    for pub in published:
        series.append((f"{pub.model} (paper)", [pub.categories.get(c) for c in CATEGORIES] + [pub.average], [None] * 6))
    fig, ax = plt.subplots(figsize=(max(7.0, 1.6 * len(groups)), 4.5))
    x = np.arange(len(groups))
    width = 0.8 / max(len(series), 1)
    for i, (label, values, cis) in enumerate(series):
        heights = [v if v is not None else 0.0 for v in values]
        errors = np.array([_error(v, c) for v, c in zip(values, cis)]).T
        ax.bar(x + (i - (len(series) - 1) / 2) * width, heights, width, label=label,
               yerr=errors if any(c is not None for c in cis) else None, capsize=2)
    ax.axhline(RANDOM_GUESS, color="grey", linestyle="--", linewidth=1, label="random guess (20%)")
    ax.set_xticks(x)
    ax.set_xticklabels([CATEGORY_HEADERS.get(g, "Average") for g in groups])
    ax.set_ylabel("accuracy (%)")
    ax.set_ylim(0, 100)
    ax.set_title("K9-Bench accuracy per category (95% intervals)")
    _legend_below(ax, len(series) + 1)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def plot_durations(runs: list[RunSummary], path: Path) -> Path | None:
    """Grouped bars: accuracy by video-duration bin for the runs whose records carry durations."""
    import numpy as np

    with_durations = [r for r in runs if r.durations]
    if not with_durations:
        return None
    plt = _pyplot()
    bins = [duration_bin_label(lo, hi) for lo, hi in DURATION_BINS]
    bins = [b for b in bins if any(b in r.durations for r in with_durations)]
    fig, ax = plt.subplots(figsize=(max(6.0, 1.4 * len(bins)), 4.5))
    x = np.arange(len(bins))
    width = 0.8 / len(with_durations)
    for i, run in enumerate(with_durations):
        values = [run.durations[b].accuracy if b in run.durations else 0.0 for b in bins]
        bars = ax.bar(x + (i - (len(with_durations) - 1) / 2) * width, values, width, label=run.label)
        for bar, b in zip(bars, bins):
            n = run.durations[b].total if b in run.durations else 0
            ax.annotate(f"n={n}", (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom", fontsize=7)
    ax.axhline(RANDOM_GUESS, color="grey", linestyle="--", linewidth=1, label="random guess (20%)")
    ax.set_xticks(x)
    ax.set_xticklabels(bins)
    ax.set_xlabel("video duration")
    ax.set_ylabel("accuracy (%)")
    ax.set_ylim(0, 108)  # room for the n= labels over full bars
    ax.set_title("K9-Bench accuracy by video duration")
    _legend_below(ax, len(with_durations) + 1)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def frame_series(runs: list[RunSummary]) -> dict[str, list[RunSummary]]:
    """Models run with at least two frame budgets -> their runs, sorted by frames. An audio+video
    model's runs are a series of their own (``<model> (A+V)``), never mixed with its video-only runs."""
    by_model: dict[str, list[RunSummary]] = defaultdict(list)
    for run in runs:
        if run.max_frames and not run.settings.text_only:  # a text-only run has no place on a frame axis
            by_model[run_name(run.model, run.settings.audio)].append(run)
    return {m: sorted(rs, key=lambda r: r.max_frames) for m, rs in by_model.items() if len({r.max_frames for r in rs}) >= 2}


def plot_frames(runs: list[RunSummary], path: Path, *, with_published: bool) -> Path | None:
    """Lines: accuracy against frame budget, one per model run with several MAX_FRAMES."""
    series = frame_series(runs)
    if not series:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for model, model_runs in series.items():
        xs = [r.max_frames for r in model_runs]
        ys = [r.overall.accuracy or 0.0 for r in model_runs]
        errors = [[_error(r.overall.accuracy, r.overall.ci)[k] for r in model_runs] for k in (0, 1)]
        ax.errorbar(xs, ys, yerr=errors, marker="o", capsize=3, label=model)
        if with_published and not model_runs[0].settings.audio:  # the paper's ablation is video only
            for name, points in FRAME_ABLATION.items():
                if normalize_model_name(name) == normalize_model_name(model):
                    px = sorted(points)
                    ax.plot(px, [points[f] for f in px], linestyle=":", marker="s", label=f"{name} (paper)")
    ax.axhline(RANDOM_GUESS, color="grey", linestyle="--", linewidth=1, label="random guess (20%)")
    ax.set_xscale("log", base=2)
    all_frames = sorted({r.max_frames for rs in series.values() for r in rs})
    ax.set_xticks(all_frames)
    ax.set_xticklabels([str(f) for f in all_frames])
    ax.set_xlabel("MAX_FRAMES")
    ax.set_ylabel("accuracy (%)")
    ax.set_ylim(0, 100)
    ax.set_title("K9-Bench accuracy against frame budget")
    _legend_below(ax, len(series) + 1)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


# ---------------------------------------------------------------------------
# Entry points


PUBLISHED_MODES = ("none", "matching", "all")
"""``--published``: no paper rows, those of the runs' models, or all of Table 1."""


@dataclass(frozen=True)
class ReportSettings:
    """What ``--mode report`` is asked for (built once in evaluate_results.py's ``main``)."""

    input_file: list | tuple | str | None = setting(None, cli=False)
    """The eval JSON files (evaluate_results.py's own ``--input_file``; one path is accepted too)."""
    output_file: str | None = setting(None, cli=False)
    """Where report.md goes instead of ``report_dir`` (evaluate_results.py's own ``--output_file``)."""
    report_dir: str = setting("report", "folder for report.md, report.json and the PNG plots (default: %(default)s)")
    """Folder of the report."""
    judge_files: list | None = setting(None, "judge JSON files (subjective_evals.py output) for the Table 3 judge table",
                                       nargs="+", metavar="JUDGE_JSON")
    """Judge files for the Table 3 layout."""
    published: str = setting("none", "show the paper's published numbers beside the runs: those of the same models, or all "
                             "(default: %(default)s)", choices=PUBLISHED_MODES)
    """Paper rows shown beside the runs."""
    labels: list | None = setting(None, "display names for the eval files, in --input_file order", nargs="+", metavar="NAME")
    """Display names, one per eval file."""
    note: list | None = setting(None, "a line shown in bold at the top of report.md and kept in report.json (repeatable), "
                                "e.g. that a run is a smoke test whose scores mean nothing", action="append", metavar="TEXT")
    """Lines shown at the top of the report."""


def add_report_args(parser: argparse.ArgumentParser) -> None:
    """Options used by ``--mode report`` only (generated from :class:`ReportSettings`)."""
    group = parser.add_argument_group("report mode (--mode report; --input_file takes one or more eval JSON files)")
    add_arguments(group, ReportSettings)


@dataclass
class Report:
    """Everything a report holds, before it is written."""

    runs: list
    """:class:`RunSummary` per eval file."""
    judges: list
    """:class:`JudgeSummary` per judge file."""
    published: list
    """Table 1 rows shown beside the runs."""
    published_mode: str
    """``none``, ``matching`` or ``all``."""
    notes: list = field(default_factory=list)
    """Caller's lines shown at the top of the report (``--note``)."""


def build_report(eval_files: list[str], judge_files: list[str] | None = None, *, published: str = "none", labels: list[str] | None = None,
                 notes: list[str] | None = None) -> Report:
    """Load every input (raising :class:`ReportError` on the first bad one)."""
    if not eval_files:
        raise ReportError("no eval file given (--input_file eval_A.json [eval_B.json ...])")
    if labels and len(labels) != len(eval_files):
        raise ReportError(f"--labels gives {len(labels)} names for {len(eval_files)} eval files")
    runs = [load_run(p) for p in eval_files]
    _disambiguate(runs, labels)
    judges = [load_judge(p) for p in (judge_files or [])]
    for judge in judges:
        match_judge_to_run(judge, runs)
    return Report(runs=runs, judges=judges, published=published_rows_for(runs, published), published_mode=published,
                  notes=[n for n in (notes or []) if n.strip()])


def write_report(report: Report, report_dir: str | Path, markdown_path: str | Path | None = None) -> dict:
    """Write report.md, report.json and the plots; return ``{name: path}`` of what was written."""
    report_dir = Path(report_dir)
    report_dir.mkdir(parents=True, exist_ok=True)
    md_path = Path(markdown_path) if markdown_path else report_dir / "report.md"
    written: dict[str, str] = {}
    notes: list[str] = []

    plots = {
        "accuracy_by_category": plot_categories(report.runs, report.published, report_dir / "accuracy_by_category.png"),
        "accuracy_by_duration": plot_durations(report.runs, report_dir / "accuracy_by_duration.png"),
        "accuracy_vs_frames": plot_frames(report.runs, report_dir / "accuracy_vs_frames.png", with_published=report.published_mode != "none"),
    }
    text_only = [r.label for r in report.runs if r.settings.text_only]
    if text_only:
        notes.append(f"Text-only run{'' if len(text_only) == 1 else 's'} (MAX_FRAMES 0, no video): {', '.join(text_only)}; "
                     "not part of the duration plot or the short-video table.")
    with_video = [r for r in report.runs if not r.settings.text_only]
    if plots["accuracy_by_duration"] is None:
        if with_video:
            notes.append("No record carries a video duration (eval_video_llm.py writes one), so the duration plot is skipped.")
    else:
        partial = [r for r in with_video if r.missing_durations]
        if partial:
            notes.append("Records without a video duration are left out of the duration plot: " + ", ".join(
                f"{r.label} ({r.missing_durations})" for r in partial) + ".")
    if plots["accuracy_vs_frames"] is None:
        notes.append("The frame-count plot needs one model run with at least two MAX_FRAMES values (eval files of the same model "
                     "and questions); skipped.")

    ci_sources = {r.ci_source for r in report.runs}
    ci_text = {
        "file": "read from the eval file",
        "bootstrap": f"computed here by bootstrap over videos ({BOOTSTRAP_SAMPLES} resamples, seed {BOOTSTRAP_SEED})",
        "none": "not available",
    }
    md = ["# K9-Bench report", "", f"Generated {now_iso()} from {_plural(len(report.runs), 'eval file')}.", ""]
    for note in report.notes:
        md += [f"**{note.strip()}**", ""]
    md += ["## MCQ accuracy (paper's Table 1 layout)", ""]
    md += [
        "Accuracy in %, failed samples counted as wrong (as the paper counts them). "
        "Brackets hold the 95% confidence interval, " + "; ".join(ci_text[s] for s in sorted(ci_sources)) + ". "
        f"Random guessing scores {RANDOM_GUESS:.0f}%.",
        "",
    ]
    md += [leaderboard_markdown(report.runs, report.published), ""]
    if report.published:
        md += [f"Rows marked `paper` are the published numbers (K9-Bench paper, Table 1; {PAPER_SETUP.questions:,} questions).", ""]
        marked = [r.label for r in report.runs if r.settings.standing == NOT_COMPARABLE]
        if marked:
            md += [f"Runs marked *{NOT_COMPARABLE_MARK}* were made with other settings than the paper's (see Run settings): "
                   "their place among the paper's rows says nothing about the models.", ""]
    md += ["### Files", "", "| Model | Frames | Eval file | Questions | Correct | Failed | Interval |", "|---|---:|---|---:|---:|---:|---|"]
    for run in report.runs:
        md.append(f"| {run.label} | {run.max_frames if run.max_frames is not None else '—'} | `{run.path}` | {run.overall.total} | {run.overall.correct} | {run.failed} | {run.ci_source} |")
    md.append("")
    md += ["## Run settings", "",
           f"Read from each eval file. The paper's Table 1: embedding model {PAPER_SETUP.embedding_model}, threshold "
           f"{PAPER_SETUP.threshold:g}, the reference scripts' prompts, {PAPER_SETUP.max_frames} frames at {PAPER_SETUP.fps:g} fps "
           f"and at most 360x420 pixels, {PAPER_SETUP.questions:,} questions.", "",
           settings_markdown(report.runs), ""]
    md += [f"## Short-video subset (videos under {PAPER_SETUP.short_video_seconds:g} s)", "",
           f"Accuracy in % over the questions whose video is shorter than {PAPER_SETUP.short_video_seconds:g} s "
           f"(the paper's subset has {PAPER_SETUP.short_video_questions:,} questions).", "",
           short_video_markdown(report.runs), ""]
    if report.judges:
        md += ["## Judge scores (paper's Table 3 layout)", "", "Mean of each axis (1–10) scaled to 0–100.", ""]
        md += [judge_markdown(report.judges, report.published_mode), ""]
        for judge in report.judges:
            if judge.ignored or not judge.scored:
                md += [f"- `{judge.path}`: {judge.scored} entries scored, {judge.ignored} without complete scores (left out).", ""]
    md += ["## Plots", ""]
    for name, path in plots.items():
        if path is not None:
            written[name] = str(path)
            md.append(f"![{name}]({Path(path).name})" if Path(path).parent.resolve() == md_path.parent.resolve() else f"![{name}]({path})")
            md.append("")
    for note in notes:
        md += [f"- {note}"]
    text = "\n".join(md).rstrip() + "\n"
    written["markdown"] = str(write_text_atomic(md_path, text))
    summary = {
        "generated_at": now_iso(),
        "runs": [r.to_dict() for r in report.runs],
        "judges": [asdict(j) for j in report.judges],
        "published": [asdict(p) for p in report.published],
        "plots": {k: (str(v) if v else None) for k, v in plots.items()},
        "notes": notes,
        "caller_notes": list(report.notes),
    }
    written["json"] = str(write_json_atomic(report_dir / "report.json", summary))
    return written


def _run_identity(path: str | Path) -> tuple[tuple, int | None]:
    """What makes two eval files points of one frame-budget curve: the model, the dataset, the
    questions (their idx), the embedding model and threshold, audio or not; and the file's frame budget."""
    art = load_records_artifact(path)
    if art.stage != "eval":
        raise ReportError(f"{path}: not an eval file")
    settings = read_settings(art.meta, art.records, len(art.records))
    model = settings.model_name_or_path or _most_common(r.model_name for r in art.records)
    questions = tuple(sorted(str(r.idx) for r in art.records))
    identity = (str(model), str(settings.dataset), questions, str(settings.embedding_model), settings.threshold, bool(settings.audio))
    return identity, (None if settings.text_only else settings.max_frames)


def frame_sweep_files(eval_file: str | Path, folder: str | Path | None = None) -> list[Path]:
    """``eval_file`` and every other eval file (``eval_*.json``) in ``folder`` (default: its own)
    of the same model, dataset, questions, embedding model and threshold with another frame
    budget, one file per budget (``eval_file`` first): the inputs of the frame-budget plot.
    Files that cannot be read are left out, with a log line."""
    eval_file = Path(eval_file)
    folder = Path(folder) if folder is not None else eval_file.parent
    identity, frames = _run_identity(eval_file)
    chosen = [eval_file]
    budgets = {frames}
    for candidate in sorted(folder.glob("eval_*.json")):
        if candidate.resolve() == eval_file.resolve():
            continue
        try:
            other, other_frames = _run_identity(candidate)
        except ArtifactError as exc:
            log.info("frame sweep: %s left out (%s)", candidate, exc)
            continue
        if other == identity and other_frames is not None and other_frames not in budgets:
            budgets.add(other_frames)
            chosen.append(candidate)
    return chosen


def main(argv: list[str] | None = None) -> int:
    """``python -m k9bench.report --frame_sweep EVAL``: print the eval files of EVAL's frame-budget
    curve (see :func:`frame_sweep_files`), one per line. The report itself is
    ``evaluate_results.py --mode report``."""
    parser = argparse.ArgumentParser(prog="python -m k9bench.report", description=main.__doc__)
    parser.add_argument("--frame_sweep", required=True, metavar="EVAL_JSON", help="an eval file; its folder is searched")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        files = frame_sweep_files(args.frame_sweep)
    except ArtifactError as exc:
        print(f"report: {exc}", file=sys.stderr)
        return 2
    for path in files:
        print(path)
    return 0


def check_report_outputs(report_dir: str | Path, markdown_path: str | Path | None = None) -> None:
    """Before anything is read: the report folder can be made or written, and the Markdown file is
    not a folder and can be written. Raises :class:`ReportError` (one line naming the flag); writes nothing."""
    from k9bench.layout import LauncherError, check_output_folder

    targets = [("--report_dir", Path(report_dir))]
    if markdown_path:
        md = Path(markdown_path)
        if md.is_dir():
            raise ReportError(f"--output_file {md} is a folder; give the Markdown file's path")
        targets.append(("--output_file", md.parent))
    for flag, folder in targets:
        try:
            check_output_folder(flag, str(folder))
        except LauncherError as exc:
            raise ReportError(str(exc).replace(f"{flag}=", f"{flag} ", 1)) from None


def run_report(settings: ReportSettings) -> int:
    """Write the report; returns the exit code (1 with a message naming the file on bad input;
    2, before any input is read, when the report cannot be written where asked)."""
    given = settings.input_file
    inputs = [given] if isinstance(given, str) else list(given or [])
    inputs = [p for p in inputs if p]
    try:
        check_report_outputs(settings.report_dir, settings.output_file)
    except ReportError as exc:
        log.error("report: %s", exc)
        return 2
    try:
        report = build_report(inputs, settings.judge_files, published=settings.published, labels=settings.labels,
                              notes=settings.note)
        written = write_report(report, settings.report_dir, settings.output_file)
    except ArtifactError as exc:
        log.error("report: %s", exc)
        return 1
    print(leaderboard_markdown(report.runs, report.published))
    if report.judges:
        print()
        print(judge_markdown(report.judges, report.published_mode))
    for name, path in written.items():
        log.info("wrote %s: %s", name, path)
    return 0

if __name__ == "__main__":
    raise SystemExit(main())
