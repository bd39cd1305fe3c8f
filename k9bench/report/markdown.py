"""The report's Markdown: Table 1 and Table 3 layouts, run settings, common questions, short videos."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from k9bench import CATEGORIES
from k9bench.artifacts import now_iso
from k9bench.data.published import (
    CONFIRMED_PROMPTS,
    JUDGE_AXES,
    PAPER_SETUP,
    PUBLISHED_ACCURACY,
    PUBLISHED_JUDGE,
    RANDOM_GUESS,
    find_published_accuracy,
    normalize_model_name,
)
from k9bench.report.load import BOOTSTRAP_SAMPLES, BOOTSTRAP_SEED
from k9bench.report.paired import paired_markdown
from k9bench.report.people import people_markdown
from k9bench.stats import MIN_INTERVAL_VIDEOS
from k9bench.report.model import (
    CATEGORY_HEADERS,
    NOT_COMPARABLE,
    NOT_COMPARABLE_MARK,
    PLACEMENT_SHOWN,
    SERVER_FIELDS,
    UNCONFIRMED,
    Report,
    RunSummary,
    Score,
)

NO_INTERVAL = "n/a"
"""How an interval from fewer than :data:`MIN_INTERVAL_VIDEOS` videos is shown."""


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|")


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def fmt_score(score: Score | None) -> str:
    """``27.5 [24.1, 30.9]``; ``27.5 [n/a]`` when the questions come from too few videos; ``—`` for none."""
    if score is None or score.accuracy is None:
        return "—"
    text = f"{score.accuracy:.1f}"
    if score.ci is not None:
        text += f" [{score.ci[0]:.1f}, {score.ci[1]:.1f}]"
    elif score.too_few_videos:
        text += f" [{NO_INTERVAL}]"
    return text


def _fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}"


def published_rows_for(runs: list[RunSummary], mode: str) -> list:
    """Paper rows to show: none, those matching a run's model, or all of Table 1."""
    if mode == "all":
        return list(PUBLISHED_ACCURACY)
    rows: list = []
    if mode == "matching":
        for run in runs:
            row = find_published_accuracy(run.model)
            if row is not None and row not in rows:
                rows.append(row)
    return rows


def run_source(run: RunSummary, beside_paper: bool) -> str:
    """The Source cell of a run: beside the paper's rows, a run that differs from the paper's setup
    carries the mark (and one whose setup cannot be confirmed says so)."""
    if not beside_paper:
        return "this run"
    if run.settings.standing == NOT_COMPARABLE:
        return f"this run, {NOT_COMPARABLE_MARK}"
    if run.settings.standing == UNCONFIRMED:
        return "this run, comparability to Table 1 unconfirmed"
    return "this run"


def _ranked(rows: list[tuple]) -> list[tuple]:
    """Rows sorted by their first item, each with its rank; a lone row has none (``—``)."""
    rows = sorted(rows, key=lambda r: -r[0])
    return [("—" if len(rows) == 1 else str(i), *row[1:]) for i, row in enumerate(rows, 1)]


def leaderboard_markdown(runs: list[RunSummary], published: list) -> str:
    """The Table 1 layout: rank, model, average, five categories (with intervals), runs and paper rows ranked together."""
    rows = []
    for run in runs:
        cells = [fmt_score(run.overall)] + [fmt_score(run.categories[c]) for c in CATEGORIES]
        frames = "—" if run.max_frames is None else str(run.max_frames)
        rows.append((run.overall.accuracy or 0.0, run.label, run_source(run, bool(published)), frames, cells, f"{run.overall.total:,}", str(run.failed)))
    for pub in published:
        cells = [_fmt(pub.average)] + [_fmt(pub.categories.get(c)) for c in CATEGORIES]
        rows.append((pub.average, pub.model, "paper", pub.setting, cells, f"{PAPER_SETUP.questions:,}", "—"))
    head = ["Rank", "Model", "Source", "Frames", "Avg", *[CATEGORY_HEADERS[c] for c in CATEGORIES], "N", "Failed"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] * 4 + ["---:"] * 8) + "|"]
    for rank, label, source, frames, cells, n, failed in _ranked(rows):
        lines.append("| " + " | ".join([rank, _cell(label), source, frames, *cells, n, failed]) + " |")
    return "\n".join(lines)


def _short_hash(digest: Any) -> str:
    return f"sha256 {str(digest)[:12]}…" if digest else "no hash recorded"


def prompt_text(prompt: dict) -> str:
    """A prompt's cell: ``reference prompts (confirmed)`` or its source and short hash."""
    shown = f"{prompt.get('source') or '?'} ({_short_hash(prompt.get('sha256'))})"
    return f"{CONFIRMED_PROMPTS}: {shown}" if prompt.get("reference") else shown


def server_text(server: dict | None) -> str:
    """The inference server's block (``inference.backend.server``), or ``—`` for a local backend."""
    if not server:
        return "—"
    if server.get("in_process"):  # --backend vllm: no server, the engine's fingerprint
        keys = ("engine", "version", "checkpoint", "dtype", "tensor_parallel", "max_model_len", "prefix_caching")
        return "in-process; " + "; ".join(f"{k} {server[k]}" for k in keys if server.get(k) not in (None, ""))
    parts = []
    for key in SERVER_FIELDS:
        value = server.get(key)
        if isinstance(value, list):
            value = ", ".join(str(v) for v in value)
        if value not in (None, ""):
            parts.append(f"{key} {value}")
    if not server.get("root"):
        parts.append("checkpoint not reported")
    return "; ".join(parts)


def settings_markdown(runs: list[RunSummary]) -> str:
    """One row per run: what it was made with, and how it stands against the paper's Table 1 setup."""
    with_server = any(r.settings.server for r in runs)
    head = ["Model", "Questions", "Embedding model", "Threshold", "Prompts", "Frames", *(["Server"] if with_server else []), "Paper's Table 1"]
    lines = ["| " + " | ".join(head) + " |", "|---|---:|---|---:|---|---|" + ("---|" if with_server else "") + "---|"]
    for run in runs:
        st = run.settings
        prompts = "; ".join(f"{kind}: {prompt_text(p)}" for kind, p in st.prompts.items()) or "not recorded"
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
        if st.caveats:
            standing += "; **" + "; ".join(st.caveats) + "**"
        questions = f"{st.questions:,}" + (f" (subset: {st.subset})" if st.subset else "")
        cells = [run.label, questions, st.embedding_model or "not recorded",
                 f"{st.threshold:g}" if st.threshold is not None else "not recorded", prompts, frames,
                 *([server_text(st.server)] if with_server else []), standing]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines)


def common_markdown(report: Report) -> list[str]:
    """The runs on the questions whose videos all of them had (two runs or more)."""
    common = report.common
    if common is None:
        return []
    out = ["## Common questions", ""]
    if common.same_questions:
        return out + [f"All {len(report.runs)} runs answered the same {_plural(common.count, 'question')}, each with its video: "
                      "the table above compares them on common ground.", ""]
    out += [f"The runs do not hold the same questions (a video missing from one of them, say). On the "
            f"**{_plural(common.count, 'question')}** ({_plural(common.videos, 'video')}) that every run answered with its video:", ""]
    head = ["Model", "Common", "Avg", *[CATEGORY_HEADERS[c] for c in CATEGORIES], "Questions in file", "Missing videos"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * 9) + "|"]
    for run in report.runs:
        score = common.scores[run.label]
        cats = [_fmt(common.categories[run.label][c].accuracy) for c in CATEGORIES]
        lines.append("| " + " | ".join([_cell(run.label), f"{score.total:,}", fmt_score(score), *cats, f"{run.overall.total:,}",
                                        str(run.missing_videos)]) + " |")
    out += lines + ["", "`python -m k9bench.data.subset --runs RAW_OR_EVAL... --output subset.json` writes these questions as a "
                    "subset file with its own hash; `--subset subset.json` restricts a report (and scoring) to them.", ""]
    return out


def short_video_markdown(runs: list[RunSummary]) -> str:
    """The short-video subset (videos under 150 s) of each run, in the Table 1 layout."""
    head = ["Model", "Questions", "Avg", *[CATEGORY_HEADERS[c] for c in CATEGORIES]]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * 7) + "|"]
    for run in runs:
        if run.short is None:
            why = "text only: no video" if run.settings.text_only else "no video durations in the records"
            lines.append(f"| {_cell(run.label)} | — | {why} |" + " |" * len(CATEGORIES))
            continue
        cells = [_fmt(run.short.accuracy)] + [_fmt(run.short_categories[c].accuracy) for c in CATEGORIES]
        lines.append("| " + " | ".join([_cell(run.label), f"{run.short.total:,}", *cells]) + " |")
    return "\n".join(lines)


def judge_markdown(judges: list, published: str = "none") -> str:
    """The Table 3 layout: rank, model, Logical, Factual, Concise, Accuracy, Overall (0-100)."""
    rows = [(j.scores["Overall"], j.label, "this run", [f"{j.scores[a]:.2f}" for a in JUDGE_AXES], str(j.scored)) for j in judges if j.scored]
    if published != "none":
        shown = {normalize_model_name(j.model or j.label) for j in judges}
        for pub in PUBLISHED_JUDGE:
            if published == "all" or normalize_model_name(pub.model) in shown:
                rows.append((pub.scores["Overall"], pub.model, "paper", [f"{pub.scores[a]:.2f}" for a in JUDGE_AXES], "—"))
    head = ["Rank", "Model", "Source", *JUDGE_AXES, "Scored"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] * 3 + ["---:"] * 6) + "|"]
    for rank, label, source, cells, n in _ranked(rows):
        lines.append("| " + " | ".join([rank, _cell(label), source, *cells, n]) + " |")
    return "\n".join(lines)


SKIPPED_SHOWN = 20
"""Skipped judge entries listed by idx before the rest are counted."""


def judge_section(report: Report) -> list[str]:
    """The judge table, then per judge file: its judge model and prompt, and its skipped entries."""
    if not report.judges:
        return []
    out = ["## Judge scores (paper's Table 3 layout)", "", "Mean of each axis (1–10) scaled to 0–100.", "",
           judge_markdown(report.judges, report.published_mode), ""]
    for judge in report.judges:
        facts = [f"{judge.scored} entr{'y' if judge.scored == 1 else 'ies'} scored"]
        if judge.ignored:
            facts.append(f"{judge.ignored} without complete scores (left out)")
        facts.append(f"{len(judge.skipped)} skipped" if judge.skipped_file else "no skipped file beside it")
        if judge.judge_model:
            facts.append(f"judge {judge.judge_model}")
        if judge.prompt:
            facts.append(f"prompt: {prompt_text(judge.prompt)}")
        out.append(f"- `{judge.path}` ({_cell(judge.label)}): " + ", ".join(facts) + ".")
        for entry in judge.skipped[:SKIPPED_SHOWN]:
            out.append(f"  - skipped idx {entry['idx']}: {entry['reason']}")
        if len(judge.skipped) > SKIPPED_SHOWN:
            out.append(f"  - … and {len(judge.skipped) - SKIPPED_SHOWN} more in `{judge.skipped_file}`")
    return out + [""]


def interval_sentence(runs: list[RunSummary]) -> str:
    """Where the intervals come from, and why some are n/a."""
    ci_text = {
        "file": "read from the eval file",
        "bootstrap": f"computed here by bootstrap over videos ({BOOTSTRAP_SAMPLES} resamples, seed {BOOTSTRAP_SEED})",
        "none": "not available",
    }
    return ("Brackets hold the 95% confidence interval, " + "; ".join(ci_text[s] for s in sorted({r.ci_source for r in runs})) +
            f"; `[{NO_INTERVAL}]` where the questions come from fewer than {MIN_INTERVAL_VIDEOS} videos (too few for an interval).")


def report_markdown(report: Report, plots: dict, notes: list[str], md_path: Path) -> str:
    """The whole report.md."""
    md = ["# K9-Bench report", "", f"Generated {now_iso()} from {_plural(len(report.runs), 'eval file')}.", ""]
    md += [f"**{note.strip()}**\n" for note in report.notes]
    if report.subset:
        s = report.subset
        md += [f"Restricted to the subset `{s['path']}`: {s['description']} ({_plural(s['count'], 'question')}, sha256 "
               f"`{s['sha256']}`).", ""]
        absent = [f"{r.label} ({r.absent_from_subset})" for r in report.runs if r.absent_from_subset]
        if absent:
            md += ["Questions of the subset that a run has no record of are left out of its scores: " + ", ".join(absent) + ".", ""]
    md += ["## MCQ accuracy (paper's Table 1 layout)", "",
           f"Accuracy in %, failed samples counted as wrong (as the paper counts them). {interval_sentence(report.runs)} "
           f"Random guessing scores {RANDOM_GUESS:.0f}%.", "", leaderboard_markdown(report.runs, report.published), ""]
    if report.published:
        md += [f"Rows marked `paper` are the published numbers (K9-Bench paper, Table 1; {PAPER_SETUP.questions:,} questions).", ""]
        if any(r.settings.standing == NOT_COMPARABLE for r in report.runs):
            md += [f"Runs marked *{NOT_COMPARABLE_MARK}* were made with other settings than the paper's (see Run settings): "
                   "their place among the paper's rows says nothing about the models.", ""]
    md += ["### Files", "", "| Model | Frames | Eval file | Questions | Correct | Failed | Interval |", "|---|---:|---|---:|---:|---:|---|"]
    for run in report.runs:
        frames = run.max_frames if run.max_frames is not None else "—"
        md.append(f"| {_cell(run.label)} | {frames} | `{run.path}` | {run.overall.total} | {run.overall.correct} | {run.failed} | {run.ci_source} |")
    md.append("")
    md += common_markdown(report)
    md += paired_markdown(report.paired)
    md += ["## Run settings", "",
           f"Read from each eval file. The paper's Table 1: embedding model {PAPER_SETUP.embedding_model}, threshold "
           f"{PAPER_SETUP.threshold:g}, the reference scripts' prompts, {PAPER_SETUP.max_frames} frames at {PAPER_SETUP.fps:g} fps "
           f"and at most 360x420 pixels, {PAPER_SETUP.questions:,} questions. A prompt whose SHA-256 is the reference's is shown "
           f"as \"{CONFIRMED_PROMPTS}\".", "", settings_markdown(report.runs), ""]
    md += [f"## Short-video subset (videos under {PAPER_SETUP.short_video_seconds:g} s)", "",
           f"Accuracy in % over the questions whose video is shorter than {PAPER_SETUP.short_video_seconds:g} s "
           f"(the paper's subset has {PAPER_SETUP.short_video_questions:,} questions).", "", short_video_markdown(report.runs), ""]
    md += judge_section(report)
    md += people_markdown(report.people, report.published_mode, plots)  # k9bench.report.people (docs/people.md)
    md += ["## Plots", ""]
    for name, path in plots.items():
        if path is not None:
            shown = Path(path).name if Path(path).parent.resolve() == md_path.parent.resolve() else str(path)
            md += [f"![{name}]({shown})", ""]
    md += [f"- {note}" for note in notes]
    return "\n".join(md).rstrip() + "\n"
