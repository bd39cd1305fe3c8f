"""The results page's data: one or more runs (raw, sim, eval or judge files, or run folders) read into
one JSON-able dict that :mod:`k9bench.view.page` embeds in the page.

Questions are keyed by ``idx``; each carries one answer per run (or none where a run lacks it). Across
several runs the page also gets the agreement matrix (share of common questions on which two runs'
verdicts agree) and each run's accuracy per category on the common questions only (the report's rule:
the questions whose video every run had, :func:`k9bench.report.load.common_questions`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from k9bench import CATEGORIES
from k9bench.artifacts import is_finite_number, load_records_artifact
from k9bench.artifact_io import ArtifactError, read_json
from k9bench.judge.parse import AXES
from k9bench.layout import next_stage_path, parse_artifact_name
from k9bench.report.paired import option_texts
from k9bench.report.model import DURATION_BINS, duration_bin_label, mark_for

log = logging.getLogger("k9bench.view")

STAGE_ORDER = ("eval", "sim", "raw")
"""In a run folder, the most complete artifact of each run is shown."""

JUDGE_AXES = AXES
"""The judge's five scores, as its files name them (the judge's own keys, :data:`k9bench.judge.parse.AXES`)."""

LETTERS = "ABCDE"


class ViewError(ArtifactError):
    """An input of the page is unusable; the message names the file."""


@dataclass
class RunInput:
    """One run as the page shows it."""

    path: Path
    stage: str
    meta: dict
    records: list
    label: str = ""
    judge: dict = field(default_factory=dict)
    """idx -> the judge's entry (``scores`` and its reason)."""
    judge_path: str | None = None
    failure_labels: dict = field(default_factory=dict)
    """idx -> the failure labels people and the LLM labeller gave its answer (:mod:`k9bench.report.people`), as text."""


def _dict(value) -> dict:
    return value if isinstance(value, dict) else {}


def _judge_entries(path: Path) -> dict:
    data = read_json(path)
    if not isinstance(data, list):
        raise ViewError(f"{path}: a judge file is a JSON list of entries; got {type(data).__name__}")
    return {e["idx"]: e for e in data if isinstance(e, dict) and isinstance(e.get("idx"), int)}


def _is_judge_file(path: Path) -> bool:
    name = parse_artifact_name(path)
    return (name is not None and name.stage == "judge") or path.name.startswith("judge_")


def _folder_files(folder: Path) -> tuple[list[Path], list[Path]]:
    """The runs of a folder (its most complete artifact per tag) and its judge files."""
    by_tag: dict[str, Path] = {}
    for stage in reversed(STAGE_ORDER):  # raw first, eval last: the last one written per tag wins
        for path in sorted(folder.glob(f"{stage}_*.json")):
            if path.name.endswith((".meta.json", "_skipped.json")):
                continue
            by_tag[path.name[len(stage) + 1:]] = path
    judges = [p for p in sorted(folder.glob("judge_*.json")) if not p.name.endswith((".meta.json", "_skipped.json"))]
    if not by_tag:
        raise ViewError(f"{folder}: no raw_*, sim_* or eval_*.json file in this folder")
    return list(by_tag.values()), judges


def load_inputs(paths: list[str | Path], labels: list[str] | None = None, *, strict_judges: bool = True,
                judged: list[tuple] | None = None) -> list[RunInput]:
    """Every run named by ``paths`` (files or folders), judge files attached to the run they judged (one that
    matches none raises, or with ``strict_judges=False`` is left out with a warning); ``judged`` gives
    ``(judge file, run label)`` pairs matched already (the report's)."""
    run_files, judge_files = [], []
    for given in paths:
        path = Path(given)
        if path.is_dir():
            runs, judges = _folder_files(path)
            run_files += runs
            judge_files += judges
        elif not path.is_file():
            raise ViewError(f"{path}: no such file or folder")
        elif _is_judge_file(path):
            judge_files.append(path)
        else:
            run_files.append(path)
    if not run_files:
        raise ViewError("no raw, sim or eval file given (a judge file is shown beside the run it judged)")
    runs = []
    for path in run_files:
        art = load_records_artifact(path, allow_empty=False)
        runs.append(RunInput(path=path, stage=art.stage, meta=art.meta, records=art.records))
    for judge in judge_files:
        matches = [r for r in runs if next_stage_path(r.path, "judge").name == judge.name]
        if not matches and len(runs) == 1:
            matches = runs
        if len(matches) != 1 and not strict_judges:
            log.warning("%s: matches no run of the page by name; its scores are left off the page", judge)
            continue
        if len(matches) != 1:
            raise ViewError(f"{judge}: no run among the inputs is the one this judge file judged (name it judge_<tag>.json "
                            "beside eval_<tag>.json)")
        matches[0].judge, matches[0].judge_path = _judge_entries(judge), str(judge)
    if labels and len(labels) != len(runs):
        raise ViewError(f"--labels gives {len(labels)} names for {len(runs)} runs")
    _label(runs, labels)
    for judge, label in judged or []:  # the report's judge files, already matched to their runs' labels
        match = next((r for r in runs if r.label == label), None)
        if match is None:
            log.warning("%s: matches no run of the page; its scores are left off the page", judge)
        else:
            match.judge, match.judge_path = _judge_entries(Path(judge)), str(judge)
    return runs


def _label(runs: list[RunInput], labels: list[str] | None) -> None:
    from k9bench.report.load import run_name

    for i, run in enumerate(runs):
        if labels:
            run.label = labels[i]
            continue
        models = {r.model_name for r in run.records if r.model_name}
        raw = _dict(run.meta.get("input_meta")) or run.meta
        run.label = run_name(sorted(models)[0] if models else str(raw.get("model_name") or run.path.stem), None)
    seen: dict[str, int] = {}
    for run in runs:
        seen[run.label] = seen.get(run.label, 0) + 1
    for run in runs:
        if seen[run.label] > 1:
            run.label = f"{run.label} [{run.path.stem}]"


def _raw_meta(run: RunInput) -> dict:
    return _dict(run.meta.get("input_meta")) if run.stage != "raw" else run.meta


def inference_of(run: RunInput) -> dict:
    """The raw file's ``inference`` block of a run."""
    return _dict(_raw_meta(run).get("inference"))


def video_dir_of(run: RunInput) -> Path | None:
    """The folder the run read its videos from (``inference.dataset.video_dir``)."""
    folder = _dict(inference_of(run).get("dataset")).get("video_dir")
    return Path(folder) if folder else None


def _settings(run: RunInput) -> dict:
    """The run's settings and its standing against the paper, as report.md shows them."""
    from k9bench.report.load import read_settings

    meta = run.meta if run.stage != "raw" else {"input_meta": run.meta}
    s = read_settings(meta, run.records, len(run.records))
    rows = [("model", s.model_name_or_path), ("frames", "text only" if s.text_only else s.max_frames), ("fps", s.fps),
            ("max pixels", s.max_pixels), ("prompt", s.prompt_placement), ("audio", s.audio), ("dataset", s.dataset),
            ("embedding model", s.embedding_model), ("threshold", s.threshold), ("questions", len(run.records))]
    return {"rows": [[k, str(v)] for k, v in rows if v is not None], "standing": s.standing,
            "mark": mark_for(s.nearest_table) if s.differences else "", "differences": list(s.differences),
            "unconfirmed": list(s.unconfirmed), "threshold": s.threshold}


def duration_bin(seconds) -> str | None:
    if not is_finite_number(seconds) or seconds < 0:
        return None
    for low, high in DURATION_BINS:
        if low <= seconds < high:
            return duration_bin_label(low, high)
    return None


def verdict(record) -> str:
    """``failed``, ``correct``, ``wrong``, or ``none`` (a raw or sim file has no verdict yet)."""
    if record.failed:
        return "failed"
    if record.is_correct is None:
        return "none"
    return "correct" if record.is_correct else "wrong"


def paired_verdict(record) -> int | None:
    """The verdict as every comparison of two runs counts it (the page's comparison filters, its agreement
    matrix, the report's b and c): 1 right, 0 wrong or failed (a failed record counts as wrong, as in the
    report), None when there is none to compare: no verdict yet (a raw or sim file) or no video (the run did
    not have it, :data:`k9bench.data.subset.VIDEO_ABSENT`)."""
    from k9bench.data.subset import VIDEO_ABSENT

    if record.error_class in VIDEO_ABSENT or (record.is_correct is None and not record.failed):
        return None
    return 1 if record.is_correct and not record.failed else 0


def web_link(url) -> str:
    """``url`` when it is an ``http(s)://`` address, else "" (a ``javascript:`` or other scheme never becomes a link)."""
    from urllib.parse import urlsplit

    text = str(url or "").strip()
    try:
        return text if urlsplit(text).scheme.lower() in ("http", "https") and urlsplit(text).netloc else ""
    except ValueError:
        return ""


def _answer(run: RunInput, record) -> dict:
    sims = record.cosine_similarities if isinstance(record.cosine_similarities, dict) else None
    out = {"a": record.answer or "", "v": verdict(record), "p": paired_verdict(record)}
    if sims:
        out["x"] = [round(float(sims[k]), 4) if is_finite_number(sims.get(k)) else None for k in LETTERS]
    explanation = getattr(record, "evaluation_explanation", None) or record.extra.get("evaluation_explanation")
    if explanation:
        out["e"] = str(explanation)
    if record.failed:
        out["f"] = record.error_class or "error"
        out["err"] = str(record.error or "")[:300]
    entry = run.judge.get(record.idx)
    if entry is not None:
        scores = _dict(entry.get("scores"))
        out["j"] = [scores.get(a) for a in JUDGE_AXES]
        reason = entry.get("cot") or entry.get("reason")
        if reason:
            out["jr"] = str(reason)[:1000]
    if run.failure_labels.get(record.idx):
        out["fl"] = run.failure_labels[record.idx]
    return out


def build_data(runs: list[RunInput], *, notes: list[str] | None = None, paired: dict | None = None) -> dict:
    """The page's data: runs, questions with every run's answer, and the across-run tables."""

    questions: dict[int, dict] = {}
    for r_i, run in enumerate(runs):
        vdir = video_dir_of(run)
        demo = _dict(inference_of(run).get("dataset")).get("source") == "demo"
        for rec in run.records:
            q = questions.get(rec.idx)
            if q is None:
                scene = rec.video_key
                video = rec.video or f"{scene}.mp4"
                local = (vdir / video) if vdir else None
                # the demo's videos are made here: their link is the local file, never the YouTube address in their rows
                url = "" if demo else web_link(rec.extra.get("video_url") or (f"https://www.youtube.com/watch?v={scene}" if rec.scene_name else ""))
                q = questions[rec.idx] = {
                    "i": rec.idx, "c": rec.question_category, "d": duration_bin(rec.extra.get("video_duration")),
                    "s": scene, "file": str(local) if local else video, "u": url, "q": rec.question,
                    "lf": local.resolve().as_uri() if local is not None and local.is_file() else "",
                    "o": option_texts(rec.options), "g": rec.ground_truth, "r": [None] * len(runs)}
            q["r"][r_i] = answer = _answer(run, rec)
            key = [rec.ground_truth, option_texts(rec.options)]
            if key != [q["g"], q["o"]]:  # another ground truth or other options than the first run's file: compared apart
                variants = q.setdefault("gv", [[q["g"], q["o"]]])
                if key not in variants:
                    variants.append(key)
                answer["gv"] = variants.index(key)
    ordered = [questions[i] for i in sorted(questions)]
    data = {
        "runs": [{"label": r.label, "path": str(r.path), "stage": r.stage, "judge": r.judge_path, **_settings(r)} for r in runs],
        "categories": list(CATEGORIES), "bins": [duration_bin_label(lo, hi) for lo, hi in DURATION_BINS],
        "questions": ordered, "notes": [n for n in (notes or []) if n and n.strip()], "thumbs": {}, "frames_bytes": 0,
        "thumb_notes": [], "paired": paired,
    }
    if len(runs) > 1:
        data["across"] = across_runs(runs, ordered)
    if paired:  # which of the page's runs the report compared: the paired block's b and c open as comparison filters
        where = {str(Path(r.path).resolve()): k for k, r in enumerate(runs)}
        data["paired"] = {**paired, "run_k": where.get(str(Path(str(paired.get("run_path"))).resolve())),
                          "base_k": where.get(str(Path(str(paired.get("baseline_path"))).resolve()))}
    return data


def comparable(x: dict | None, y: dict | None) -> bool:
    """Whether two runs' answers to a question enter a comparison: both have a :func:`paired_verdict`, and the
    same ground truth and options (``gv``, the variant of them their files give; the report's rule too)."""
    return bool(x and y) and x["p"] is not None and y["p"] is not None and x.get("gv", 0) == y.get("gv", 0)


def across_runs(runs: list[RunInput], questions: list[dict]) -> dict:
    """The agreement matrix (per pair of runs, over the questions :func:`comparable` for them: the share with the
    same verdict, and the four counts behind it) and per-category accuracy on the common
    questions (those whose video every run had, as :func:`k9bench.report.load.common_questions` counts them)."""
    from k9bench.data.subset import VIDEO_ABSENT

    have = [{rec.idx for rec in run.records if rec.error_class not in VIDEO_ABSENT} for run in runs]
    common = set.intersection(*have)
    rows = [q for q in questions if q["i"] in common]
    n = len(runs)
    agree = [[None] * n for _ in range(n)]
    counts = [[None] * n for _ in range(n)]
    for a in range(n):
        for b in range(n):
            pairs = [(q["r"][a]["p"], q["r"][b]["p"]) for q in questions if comparable(q["r"][a], q["r"][b])]
            counts[a][b] = {"n": len(pairs), "rr": pairs.count((1, 1)), "rw": pairs.count((1, 0)), "wr": pairs.count((0, 1)),
                            "ww": pairs.count((0, 0))}
            agree[a][b] = round(100.0 * sum(x == y for x, y in pairs) / len(pairs), 1) if pairs else None
    by_cat = []
    for r_i in range(n):
        line = {}
        for cat in [*CATEGORIES, "overall"]:
            picked = [q for q in rows if cat == "overall" or q["c"] == cat]
            line[cat] = round(100.0 * sum(q["r"][r_i]["v"] == "correct" for q in picked) / len(picked), 1) if picked else None
        by_cat.append(line)
    return {"common": len(common), "agreement": agree, "pairs": counts, "by_category": by_cat}


def read_paired(report_json: str | Path | None) -> dict | None:
    """``paired_comparison`` of a report.json (the report's ``--baseline``), or None."""
    if not report_json:
        return None
    path = Path(report_json)
    if not path.is_file():
        raise ViewError(f"--report_json {path}: no such file")
    try:
        value = read_json(path)
    except ArtifactError as exc:
        raise ViewError(f"--report_json {path}: unreadable ({exc})") from None
    block = _dict(value).get("paired_comparison")
    return block if isinstance(block, dict) and block else None
