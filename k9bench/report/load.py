"""Reading the report's inputs: eval files (ours and the reference's) and judge files.

Only the keys our writers and the reference write are read:

- an eval file's top level (SPEC section 2): ``threshold``, ``correct_count``, ``total_count``,
  ``category_wise_accuracy``, ``metadata.similarity_model``; ours adds ``statistics`` (its
  ``overall.all.ci95`` and ``categories.<cat>.all.ci95`` intervals, fractions), ``subset`` (scored with
  ``--subset``: its ``description`` and ``sha256``) and ``input_meta`` (the raw file's top level:
  ``model_name``, ``model_name_or_path``, ``inference``);
- the raw file's ``inference`` block (:func:`k9bench.inference.records.inference_block`): ``text_only``,
  ``frames.{max_frames,fps,max_pixels,audio}``, ``prompt.{placement,system_prompt_source,
  system_prompt_sha256,reference_prompts}``, ``dataset.source``, ``backend.server``;
- each record: ``idx``, ``question_category``, ``scene_name``/``video``, ``model_name``, ``max_frames``,
  ``is_correct``, ``error``/``error_class``, and ours ``video_duration``, ``audio_used``;
- a judge file (a list of entries with ``scores``), its ``<judge>_skipped.json`` and its
  ``<judge>.meta.json`` sidecar (``input.{evaluations,sha256}``,
  ``judge.{model,prompt_source,prompt_sha256,reference_prompt,prompt_status}``).
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from pathlib import Path
from typing import Any, Iterable

from k9bench import CATEGORIES
from k9bench.artifacts import QuestionRecord, is_finite_number, load_records_artifact
from k9bench.artifact_io import ArtifactError, read_json
from k9bench.headers.files import NewerSchema, read_header
from k9bench.headers.kinds import EvalHeader, JudgeHeader
from k9bench.layout import next_stage_path, parse_artifact_name, short_model_name, skipped_path
from k9bench.data.published import AXIS_KEYS, CONFIRMED_PROMPTS, JUDGE_AXES, PAPER_SETUP
from k9bench.report.model import (
    AUDIO_MARK,
    DURATION_BINS,
    PROMPT_PLACEMENTS,
    CommonQuestions,
    JudgeSummary,
    ReportError,
    RunSettings,
    RunSummary,
    Score,
    batch_caveats,
    duration_bin_label,
    prompt_is_reference,
)
from k9bench.report.paper import compare_judge, compare_with_paper, snapshot_caveat
from k9bench.stats import DEFAULT_RESAMPLES, DEFAULT_SEED
from k9bench.data.subset import VIDEO_ABSENT

log = logging.getLogger(__name__)

BOOTSTRAP_SAMPLES = DEFAULT_RESAMPLES
"""Resamples for the intervals computed here (as evaluate_results.py draws them)."""

BOOTSTRAP_SEED = DEFAULT_SEED
"""Seed of those resamples (reports are reproducible)."""


def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _most_common(values: Iterable[Any]) -> Any:
    counted = Counter(v for v in values if v not in (None, ""))
    return counted.most_common(1)[0][0] if counted else None


def _number(value: Any) -> float | None:
    return float(value) if is_finite_number(value) else None


def _whole(value: Any) -> int | None:
    return int(value) if is_finite_number(value) and float(value).is_integer() and value >= 0 else None


def _count(block: Any, key: str) -> int | None:
    return _whole(_dict(block).get(key))


def is_correct(record: QuestionRecord) -> bool:
    """The verdict as the report counts it: a failed sample is wrong."""
    return bool(record.is_correct) and not record.failed


def record_duration(record: QuestionRecord) -> float | None:
    """The video duration (seconds) that eval_video_llm.py stores in each record, or None."""
    value = record.extra.get("video_duration")
    return float(value) if is_finite_number(value) and value >= 0 else None


def score_of(records: list[QuestionRecord]) -> Score:
    """Correct / total of some records, with the number of their videos."""
    return Score(correct=sum(is_correct(r) for r in records), total=len(records), videos=len({r.video_key for r in records}))


def bootstrap_intervals(records: list[QuestionRecord], *, samples: int = BOOTSTRAP_SAMPLES, seed: int = BOOTSTRAP_SEED) -> dict:
    """95% intervals (percent) for overall and per-category accuracy, by :func:`k9bench.stats.bootstrap_accuracy`.

    Whole videos are resampled with replacement (a video's questions move together); failed samples
    count as wrong. Returns ``{"overall": (lo, hi), category: (lo, hi), ...}``; a category absent from
    the records has no entry.
    """
    from k9bench.stats import bootstrap_accuracy

    if not records:
        return {}
    result = bootstrap_accuracy([is_correct(r) for r in records], [r.video_key for r in records],
                                [r.question_category for r in records], resamples=samples, seed=seed)
    out = {}
    for name, interval in [("overall", result.overall), *result.by_label.items()]:
        if interval.low is not None and (name == "overall" or name in CATEGORIES):
            out[name] = (100.0 * interval.low, 100.0 * interval.high)
    return out


def _ci95(block: Any) -> tuple | None:
    """The ``all.ci95`` interval (fractions) of a ``statistics`` block of ours, in percent."""
    value = _dict(_dict(block).get("all")).get("ci95")
    if isinstance(value, list) and len(value) == 2 and all(is_finite_number(v) for v in value) and value[0] <= value[1]:
        return (100.0 * value[0], 100.0 * value[1])
    return None


def _hide_thin_intervals(scores: Iterable[Score]) -> None:
    for score in scores:
        if score.too_few_videos:
            score.ci = None


# ---------------------------------------------------------------------------
# A run's settings


def read_settings(meta: "EvalHeader | dict", records: list[QuestionRecord], questions: int) -> RunSettings:
    """A run's settings from its eval file's typed header (or top-level keys) and records (see :class:`RunSettings`)."""
    header = meta if isinstance(meta, EvalHeader) else EvalHeader.from_meta(_dict(meta))
    raw = header.raw  # the raw file's header, carried in input_meta
    frames, prompt = raw.frames, raw.prompt
    record_frames = _most_common(r.max_frames for r in records if isinstance(r.max_frames, int) and not isinstance(r.max_frames, bool))
    max_frames = record_frames if record_frames is not None else frames.max_frames
    text_only = raw.text_only
    if text_only is None:
        text_only = (max_frames == 0) if max_frames is not None else None
    placement = prompt.placement
    if placement not in PROMPT_PLACEMENTS:
        if placement is not None:
            log.warning("unknown prompt placement %r in the inference settings; read as not recorded", placement)
        placement = None
    audio = raw.audio
    if audio is None:
        # no setting recorded (a text-only run, or a reference file): the records say
        flags = {r.extra.get("audio_used") for r in records} - {None}
        audio = True if True in flags else False if False in flags else None
    prompts = {}
    if prompt.system_prompt_source is not None or prompt.system_prompt_sha256 is not None:
        digest = prompt.system_prompt_sha256
        prompts["system_prompt"] = {"source": prompt.system_prompt_source, "sha256": digest,
                                    "reference": prompt_is_reference("system_prompt", digest, prompt.reference_prompts)}
    settings = RunSettings(
        model_name_or_path=raw.model_name_or_path,
        embedding_model=header.similarity_model,
        threshold=_number(header.threshold),
        prompts=prompts,
        prompt_placement=placement,
        audio=audio,
        text_only=text_only,
        max_frames=int(max_frames) if is_finite_number(max_frames) else None,
        fps=_number(frames.fps),
        max_pixels=int(frames.max_pixels) if is_finite_number(frames.max_pixels) else None,
        questions=questions,
        dataset=raw.dataset.source,
        server=raw.backend.serving,  # a server's fingerprint, or --backend vllm's in-process engine's
    )
    settings.dtype, settings.batch_size = inference_dtype_and_batch(raw.settings, _dict(raw.run_stats))
    settings.frame_size, settings.max_new_tokens, settings.thinking, settings.thinking_limit = generation_settings(raw.settings)
    seconds = [record_duration(r) for r in records]
    if any(sec is not None for sec in seconds):
        settings.long_videos = sum(1 for sec in seconds if sec is not None and sec >= PAPER_SETUP.short_video_seconds)
    model = raw.model_name or _most_common(r.model_name for r in records)
    settings.differences, settings.unconfirmed = compare_with_paper(settings, model)
    settings.caveats = batch_caveats(settings) + snapshot_caveat(settings)
    return settings


def generation_settings(inference: dict) -> tuple[str | None, int | None, bool | None, str | None]:
    """``(frame_size, max_new_tokens, thinking, thinking_limit)`` from the raw file's ``inference`` block: the
    ``--frame_size`` of the backend's settings (or what the backend reported), the response limit, ``--thinking_mode``,
    and which documented limit that is (:data:`k9bench.data.published.THINKING_LIMITS`: ``reference``, ``paper``,
    else ``own``; None for a run that does not think)."""
    from k9bench.data.published import THINKING_LIMITS

    size = _dict(inference.get("backend_settings")).get("frame_size") or _dict(inference.get("backend")).get("frame_size")
    tokens = _whole(inference.get("max_new_tokens"))
    thinking = inference.get("thinking_mode")
    thinking = thinking if isinstance(thinking, bool) else None
    limit = None
    if thinking and tokens is not None:
        limit = next((name for name, value in THINKING_LIMITS.items() if value == tokens), "own")
    return (str(size) if isinstance(size, str) and size else None), tokens, thinking, limit


def inference_dtype_and_batch(inference: dict, run_stats: dict) -> tuple[str | None, int | None]:
    """The weights' dtype (the backend's resolved ``dtype``, else ``model.torch_dtype`` or ``bf16``, in older files
    ``backend_settings``') and the largest batch size used (``run_stats.batch_size``: the size chosen and its history,
    else ``inference.batch_size`` when it is a number); None for what the raw file does not say."""
    backend, asked = _dict(inference.get("backend")), {**_dict(inference.get("backend_settings")), **_dict(inference.get("model"))}
    dtype = backend.get("dtype") or (asked.get("torch_dtype") if asked.get("torch_dtype") != "auto" else None)
    if dtype is None and asked.get("bf16") is True:
        dtype = "bfloat16"
    chosen = _dict(run_stats.get("batch_size"))
    sizes = [chosen.get("batch_size"), inference.get("batch_size")] if chosen.get("batch_size") is None else [chosen.get("batch_size")]
    sizes += [h[0] for h in chosen.get("history") or [] if isinstance(h, list) and h]
    sizes = [int(v) for v in sizes if is_finite_number(v) and float(v).is_integer() and v >= 1]
    return (str(dtype) if isinstance(dtype, str) and dtype else None), (max(sizes) if sizes else None)


def run_name(model: str, audio: bool | None) -> str:
    """A run's display name: the model, with ``(A+V)`` for an audio+video run (kept apart from the
    same model's video-only runs in every table and plot)."""
    return f"{model} ({AUDIO_MARK})" if audio else model


# ---------------------------------------------------------------------------
# Eval files


def _load_eval(path: str | Path):
    try:
        art = load_records_artifact(path, allow_empty=False)  # an eval file of no records has nothing to report
    except NewerSchema:
        raise  # a file of a newer k9bench: exit 2, not the report's exit 1 for a bad input
    except ArtifactError as exc:
        raise ReportError(str(exc)) from None
    if art.stage != "eval":
        raise ReportError(f"{path}: this is a {art.stage} file, not an eval file; run evaluate_results.py --mode evaluate on it first")
    from k9bench.scoring.rule import check_finite, check_scored_record, where_of
    from k9bench.scoring.settings import ScoringError

    try:  # NaN or inf anywhere (a similarity, a count), a record with no ground truth: refused, naming it
        check_finite([r.to_dict() for r in art.records], art.meta, path)
        for rec in art.records:
            check_scored_record(rec, where_of(path, rec))
    except ScoringError as exc:
        raise ReportError(str(exc)) from None
    return art


def _durations(records: list[QuestionRecord]) -> tuple[dict, int]:
    bins: dict[str, list] = {}
    missing = 0
    for rec in records:
        seconds = record_duration(rec)
        if seconds is None:
            missing += 1
            continue
        for low, high in DURATION_BINS:
            if low <= seconds < high:
                bins.setdefault(duration_bin_label(low, high), []).append(rec)
                break
    ordered = {}
    for low, high in DURATION_BINS:
        label = duration_bin_label(low, high)
        if label in bins:
            ordered[label] = score_of(bins[label])
    return ordered, missing


def load_run(path: str | Path, subset: frozenset | None = None, subset_description: str | None = None) -> RunSummary:
    """Summarize one eval file (restricted to ``subset`` idx when given); raise :class:`ReportError`
    naming it when it is not one."""
    art = _load_eval(path)
    header = art.header
    records = art.records
    outside = absent = 0
    if subset is not None:
        kept = [r for r in records if r.idx in subset]
        outside = len(records) - len(kept)
        absent = len(subset - {r.idx for r in kept})
        records = kept

    by_cat = {cat: [r for r in records if r.question_category == cat] for cat in CATEGORIES}
    overall = score_of(records)
    categories = {cat: score_of(rows) for cat, rows in by_cat.items()}
    unknown = sorted({str(r.question_category) for r in records} - set(CATEGORIES))
    if unknown:
        log.warning("%s: categories outside the five released ones are left out of the table: %s", path, ", ".join(unknown))

    ci_source = "none"
    stats = _dict(header.statistics)
    if subset is None:
        # the file's own aggregates are authoritative for the whole file (a reference failed sample has no category)
        total, correct = _whole(header.total_count), _whole(header.correct_count)
        if total is not None and correct is not None:
            if correct > total:
                raise ReportError(f"{path}: correct_count {correct} exceeds total_count {total}")
            overall.correct, overall.total = correct, total
        blocks = _dict(header.category_wise_accuracy)
        for cat, score in categories.items():
            c, t = _count(blocks.get(cat), "correct"), _count(blocks.get(cat), "total")
            if c is not None and t is not None:
                score.correct, score.total = c, t
        overall.ci = _ci95(stats.get("overall"))
        if overall.ci is not None:
            ci_source = "file"
            for cat, score in categories.items():
                score.ci = _ci95(_dict(stats.get("categories")).get(cat))
    if ci_source == "none" and records:
        ci_source = "bootstrap"
        computed = bootstrap_intervals(records)
        overall.ci = computed.get("overall")
        for cat, score in categories.items():
            score.ci = computed.get(cat)
    _hide_thin_intervals([overall, *categories.values()])

    durations, missing = _durations(records)
    short = None
    short_categories: dict[str, Score] = {}
    if missing < len(records):  # the short-video subset, over the records that carry a duration
        seconds = [(r, record_duration(r)) for r in records]
        shorter = [r for r, sec in seconds if sec is not None and sec < PAPER_SETUP.short_video_seconds]
        short = score_of(shorter)
        short_categories = {cat: score_of([r for r in shorter if r.question_category == cat]) for cat in CATEGORIES}

    settings = read_settings(header, records, overall.total)
    scored_on = _dict(header.subset)  # evaluate_results.py --subset: the file itself holds a subset
    if subset is not None:
        settings.subset = subset_description
    elif scored_on.get("description"):
        settings.subset = f"{scored_on['description']} (sha256 {str(scored_on.get('sha256'))[:12]}…)"
    model = _most_common(r.model_name for r in records) or header.raw.model_name
    if not model and settings.model_name_or_path:
        model = short_model_name(settings.model_name_or_path)
    if not model:
        name = parse_artifact_name(path)
        model = name.model if name else Path(path).stem
    return RunSummary(
        path=str(path), label=run_name(str(model), settings.audio), model=str(model), max_frames=settings.max_frames,
        overall=overall, categories=categories, failed=sum(r.failed for r in records),
        missing_videos=sum(1 for r in records if r.error_class in VIDEO_ABSENT), ci_source=ci_source,
        durations=durations, missing_durations=missing, settings=settings, short=short, short_categories=short_categories,
        outside_subset=outside, absent_from_subset=absent, records=records,
    )


def disambiguate(runs: list[RunSummary], labels: list[str] | None) -> None:
    """``--labels`` names the runs; otherwise two runs of one model get their frame budget (or file) in the label."""
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


def common_questions(runs: list[RunSummary]) -> CommonQuestions | None:
    """Two runs or more on the questions whose videos all of them had (None for a lone run)."""
    if len(runs) < 2:
        return None
    have = [{r.idx for r in run.records if r.error_class not in VIDEO_ABSENT} for run in runs]
    common = set.intersection(*have)
    same = all(h == common for h in have) and all(len(run.records) == len(common) for run in runs)
    scores, categories = {}, {}
    videos: set = set()
    for run in runs:
        rows = [r for r in run.records if r.idx in common]
        videos |= {r.video_key for r in rows}
        score = score_of(rows)
        if rows:
            score.ci = bootstrap_intervals(rows).get("overall")
        _hide_thin_intervals([score])
        scores[run.label] = score
        categories[run.label] = {cat: score_of([r for r in rows if r.question_category == cat]) for cat in CATEGORIES}
    return CommonQuestions(count=len(common), videos=len(videos), scores=scores, categories=categories, same_questions=same)


# ---------------------------------------------------------------------------
# Judge files


def _read_list(path: Path, what: str) -> list:
    data = read_json(path)
    if not isinstance(data, list):
        raise ReportError(f"{path}: a {what} is a JSON list of entries; got {type(data).__name__}")
    return data


def _skipped_reason(entry: dict) -> str:
    kind = entry.get("kind")
    error = " ".join(str(entry.get("error") or "").split())
    if len(error) > 120:
        error = error[:117] + "..."
    return f"{kind}: {error}" if kind and error else str(kind or error or "no reason recorded")


def load_judge(path: str | Path, subset: frozenset | None = None) -> JudgeSummary:
    """Mean judge scores of one judge file (a list of entries, SPEC section 2), scaled to 0-100, with
    its skipped entries (``<judge>_skipped.json``) and its meta sidecar's judge model and prompt; restricted
    to the ``subset`` idx when given (entries and skipped entries of other questions are left out)."""
    path = Path(path)
    data = _read_list(path, "judge file")
    if subset is not None:
        data = [e for e in data if isinstance(e, dict) and e.get("idx") in subset]
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
    name = parse_artifact_name(path)
    stem = path.stem
    label = name.model if name else (stem[len("judge_"):] if stem.startswith("judge_") else stem)
    summary = JudgeSummary(path=str(path), label=label, scores={a: 10.0 * sums[a] / scored for a in JUDGE_AXES} if scored else {},
                           scored=scored, ignored=ignored, counted_in_subset=len(data) if subset is not None else None)
    if not scored:
        log.warning("%s: no judge entry with all five scores; the judge table leaves it out", path)
    skipped = skipped_path(path)
    if skipped.is_file():
        summary.skipped_file = str(skipped)
        summary.skipped = [{"idx": e.get("idx"), "reason": _skipped_reason(e)} for e in _read_list(skipped, "skipped file")
                           if isinstance(e, dict) and (subset is None or e.get("idx") in subset)]
    judge = judge_meta(path).settings
    summary.judge_model = judge.model
    if judge.prompt_sha256 or judge.prompt_source:
        digest = judge.prompt_sha256
        # the judge checked its template (k9bench.data.published.is_reference_prompt: the reference hash covers the template
        # filled with its placeholders' names, so the raw sha256 never matches) and records the result as
        # reference_prompt / prompt_status; reference_prompts is an older spelling
        status = judge.prompt_status if judge.prompt_status is not None else judge.reference_prompts
        recorded = CONFIRMED_PROMPTS if judge.reference_prompt is True else status
        summary.prompt = {"source": judge.prompt_source, "sha256": digest,
                          "reference": prompt_is_reference("judge_prompt", digest, recorded)}
    return summary


def judge_meta(path: str | Path) -> JudgeHeader:
    """The typed header of the judge's ``<judge>.meta.json`` sidecar (empty when absent or unreadable, with a
    log line; one written by a newer k9bench is refused, :class:`~k9bench.headers.files.NewerSchema`)."""
    sidecar = Path(f"{path}.meta.json")
    if not sidecar.is_file():
        return JudgeHeader()
    try:
        header = read_header(sidecar, kind="judge")
    except NewerSchema:
        raise
    except ArtifactError as exc:
        log.warning("%s: unreadable (%s); the judge file is matched to a run by its name", sidecar, exc)
        return JudgeHeader()
    return header if isinstance(header, JudgeHeader) else JudgeHeader()


def judge_side_files(path: str | Path) -> list[Path]:
    """The files beside a judge file that the report reads (skipped list, meta sidecar), where they exist."""
    return [p for p in (skipped_path(path), Path(f"{path}.meta.json")) if p.is_file()]


def match_judge_to_run(judge: JudgeSummary, runs: list[RunSummary]) -> RunSummary | None:
    """Give a judge row the label (and model) of the eval file it judged, so Table 3 names runs as
    Table 1 does (``--labels`` included): the eval file with the bytes (or path) the judge's meta sidecar
    names, else the eval file whose default judge output (``eval_X.json`` -> ``judge_X.json``) it is; then
    its standing against the paper's judge rows (:func:`k9bench.report.paper.compare_judge`)."""
    info = judge_meta(judge.path).judged
    digest, source = info.sha256, info.evaluations
    match = None
    for run in runs:
        try:
            same_bytes = bool(digest) and hashlib.sha256(Path(run.path).read_bytes()).hexdigest() == digest
        except OSError:
            same_bytes = False
        if same_bytes or (bool(source) and Path(str(source)).resolve() == Path(run.path).resolve()):
            match = run
            break
    if match is None:
        candidates = [r for r in runs if next_stage_path(r.path, "judge").name == Path(judge.path).name]
        if len(candidates) == 1:
            match = candidates[0]
    if match is not None:
        judge.label, judge.model = match.label, match.model
    compare_judge(judge, match.settings if match is not None else None)
    return match


# ---------------------------------------------------------------------------
# The launcher's frame sweep


def _run_identity(path: str | Path) -> tuple[tuple, int | None]:
    """What makes two eval files points of one frame-budget curve: the model, the dataset, the
    questions (their idx), the embedding model and threshold, audio or not; and the file's frame budget."""
    art = _load_eval(path)
    settings = read_settings(art.header, art.records, len(art.records))
    model = settings.model_name_or_path or _most_common(r.model_name for r in art.records)
    questions = tuple(sorted(r.idx for r in art.records))
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


__all__ = ["bootstrap_intervals", "common_questions", "disambiguate", "frame_sweep_files",
           "judge_side_files", "load_judge", "load_run", "match_judge_to_run", "read_settings", "run_name"]
