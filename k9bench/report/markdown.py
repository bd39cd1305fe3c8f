"""The report's Markdown: Table 1 and Table 3 layouts, run settings, common questions, short videos."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from k9bench import CATEGORIES
from k9bench.artifacts import now_iso
from k9bench.data.published import (
    CONFIRMED_PROMPTS,
    FIGURE_3A,
    JUDGE_AXES,
    PAPER_SETUP,
    PUBLISHED_ACCURACY,
    QUESTION_SETS,
    RANDOM_GUESS,
    SHORT,
    TABLE_2,
    TABLE_3,
    TABLE_4,
    PaperRow,
    rows_of,
)
from k9bench.report.load import BOOTSTRAP_SAMPLES, BOOTSTRAP_SEED
from k9bench.report.paired import paired_markdown
from k9bench.report.paper import judge_rows, row_named
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
    mark_for,
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


def _matched_or_nearest(names: list, nearest: str | None) -> list[PaperRow]:
    """The rows of these names (the nearest one when none matched); a Figure 3(a) point only when no table row is there."""
    rows = [r for r in (row_named(n) for n in (names or [nearest])) if r is not None]
    tables = [r for r in rows if r.table != "Figure 3(a)"]
    return tables or rows


def published_rows_for(runs: list[RunSummary], mode: str) -> list:
    """Paper rows of the leaderboard: none; the rows each run followed (else its nearest row of its model's); or all
    of Table 1 (``all``: Table 2 and Figure 3(a) have their own tables, :func:`published_tables_markdown`)."""
    if mode == "all":
        return list(PUBLISHED_ACCURACY)
    rows: list = []
    if mode == "matching":
        for run in runs:
            for row in _matched_or_nearest(run.settings.paper_rows, run.settings.nearest_row):
                if row not in rows:
                    rows.append(row)
    return rows


def run_source(run: RunSummary, beside_paper: bool) -> str:
    """The Source cell of a run: beside the paper's rows, a run that differs from the paper's setup
    carries the mark (and one whose setup cannot be confirmed says so)."""
    if not beside_paper:
        return "this run"
    if run.settings.standing == NOT_COMPARABLE:
        return f"this run, {mark_for(run.settings.nearest_table)}"
    if run.settings.standing == UNCONFIRMED:
        return f"this run, comparability to {run.settings.nearest_table or 'Table 1'} unconfirmed"
    return "this run"


def paper_setting(row: PaperRow) -> str:
    """A paper row's setting cell: ``32 frames (Table 1)``."""
    return f"{row.setting} ({row.table})"


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
        rows.append((pub.average, pub.model, "paper", paper_setting(pub), cells, f"{QUESTION_SETS[pub.setup.questions][0]:,}", "—"))
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
    head = ["Model", "Questions", "Embedding model", "Threshold", "Prompts", "Frames", *(["Server"] if with_server else []), "Paper"]
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
            if st.frame_size:
                parts.append(f"resized to {st.frame_size}")
            frames = ", ".join(parts) + (" + audio (A+V)" if st.audio else "")
        if st.max_new_tokens is not None:
            frames += f"; max_new_tokens {st.max_new_tokens:,}" + (f" ({THINKING_SHOWN[st.thinking_limit]})" if st.thinking_limit else "")
        standing = standing_text(st)
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


THINKING_SHOWN = {"reference": "thinking: the reference scripts' limit", "paper": "thinking: the paper's limit",
                  "own": "thinking: neither documented limit"}
"""How a thinking run's limit is named (:attr:`k9bench.report.model.RunSettings.thinking_limit`)."""


def standing_text(st) -> str:
    """The Paper cell of a run: the rows it followed and why, or the mark with what differs from the nearest row."""
    if st.standing == NOT_COMPARABLE:
        nearest = f" (nearest: {st.nearest_row})" if st.nearest_row else ""
        return f"**{mark_for(st.nearest_table)}**{nearest}: " + "; ".join(st.differences)
    if st.standing == UNCONFIRMED:
        rows = f" ({'; '.join(st.paper_why)})" if st.paper_why else ""
        return f"unconfirmed{rows}: " + "; ".join(st.unconfirmed)
    if st.paper_why:
        return "comparable (the paper's setup) with " + "; ".join(st.paper_why)
    return "comparable (the paper's setup)"


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


def short_rows_for(run: RunSummary) -> list[PaperRow]:
    """Table 2's rows of videos under 150 s for a run that followed the same model's full-set Table 2 setup (the
    paper's Gemini A+V run restricted to short videos): beside the run's own short-video figures."""
    followed = [r for r in (row_named(n) for n in run.settings.paper_rows) if r is not None and r.table == "Table 2"]
    return [row for row in TABLE_2 if row.setup.questions == SHORT and any(
        f.model == row.model and f.setup.audio == row.setup.audio and f.setup.frames == row.setup.frames for f in followed)]


def short_video_markdown(runs: list[RunSummary], published: str = "none") -> str:
    """The short-video subset (videos under 150 s) of each run, in the Table 1 layout; with ``--published``, the
    Table 2 row of videos under 150 s beside a run that followed that model's full-set setup."""
    head = ["Model", "Questions", "Avg", *[CATEGORY_HEADERS[c] for c in CATEGORIES]]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * 7) + "|"]
    for run in runs:
        if run.short is None:
            why = "text only: no video" if run.settings.text_only else "no video durations in the records"
            lines.append(f"| {_cell(run.label)} | — | {why} |" + " |" * len(CATEGORIES))
            continue
        cells = [_fmt(run.short.accuracy)] + [_fmt(run.short_categories[c].accuracy) for c in CATEGORIES]
        lines.append("| " + " | ".join([_cell(run.label), f"{run.short.total:,}", *cells]) + " |")
        for row in short_rows_for(run) if published != "none" else []:
            cells = [_fmt(row.average)] + [_fmt(row.categories.get(c)) for c in CATEGORIES]
            lines.append("| " + " | ".join([f"{row.model} (paper, {row.table}: {row.setting})",
                                            f"{QUESTION_SETS[row.setup.questions][0]:,}", *cells]) + " |")
    return "\n".join(lines)


def judge_rows_for(judges: list, published: str) -> list[PaperRow]:
    """Paper judge rows shown: none; the rows each judge file followed (else its nearest); or all of Table 3."""
    if published == "all":
        return list(TABLE_3)
    rows: list = []
    if published != "none":
        for judge in judges:
            found = _matched_or_nearest(judge.paper_rows, judge.nearest_row)
            if not found:  # no eval file of the judged run: its model's rows
                found = rows_of(judge.model or judge.label, tuple(judge_rows()))[:1]
            rows += [r for r in found if r not in rows]
    return rows


def judge_markdown(judges: list, published: str = "none") -> str:
    """The Table 3 layout: rank, model, Logical, Factual, Concise, Accuracy, Overall (0-100)."""
    rows = [(j.scores["Overall"], j.label, "this run", [f"{j.scores[a]:.2f}" for a in JUDGE_AXES], str(j.scored)) for j in judges if j.scored]
    for pub in judge_rows_for(judges, published):
        cells = [f"{pub.judge[a]:.2f}" if a in pub.judge else "—" for a in JUDGE_AXES]
        source = "paper" if pub.table == "Table 3" else f"paper, {pub.table} ({pub.setting})"
        rows.append((pub.judge.get("Overall", pub.judge.get("Accuracy", 0.0)), pub.model, source, cells, "—"))
    head = ["Rank", "Model", "Source", *JUDGE_AXES, "Scored"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] * 3 + ["---:"] * 6) + "|"]
    for rank, label, source, cells, n in _ranked(rows):
        lines.append("| " + " | ".join([rank, _cell(label), source, *cells, n]) + " |")
    return "\n".join(lines)


def judge_standing_text(judge) -> str:
    """A judge file's standing against the judge rows (Tables 2, 3, 4)."""
    if judge.standing == NOT_COMPARABLE:
        nearest = f" (nearest: {judge.nearest_row})" if judge.nearest_row else ""
        return f"not comparable to the paper's judge rows{nearest}: " + "; ".join(judge.differences)
    rows = ", ".join(judge.paper_rows)
    if judge.standing == UNCONFIRMED:
        return f"comparability to the paper's judge rows unconfirmed{' (' + rows + ')' if rows else ''}: " + "; ".join(judge.unconfirmed)
    return f"comparable with {rows}" if rows else "comparable"


def published_tables_markdown() -> list[str]:
    """``--published all``: Table 2, Table 4 and Figure 3(a) as the paper gives them (Table 1 is in the
    leaderboard, Table 3 in the judge section)."""
    out = ["## The paper's other tables", "", "### Table 2: audio + video (1 FPS; MCQ accuracy %, then judge 0-100)", ""]
    head = ["Model", "Setting", "Questions", "Avg", *[CATEGORY_HEADERS[c] for c in CATEGORIES], *JUDGE_AXES]
    out += ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] * 2 + ["---:"] * 12) + "|"]
    for row in TABLE_2:
        cells = [_fmt(row.average), *[f"{row.categories[c]:g}" for c in CATEGORIES], *[f"{row.judge[a]:.2f}" for a in JUDGE_AXES]]
        out.append("| " + " | ".join([row.model, row.setting, f"{QUESTION_SETS[row.setup.questions][0]:,}", *cells]) + " |")
    out += ["", "### Table 4: humans vs models on 100 questions (the judge's Accuracy axis, 0-100; not MCQ accuracy)", "",
            "| Model | Setting | Accuracy (judge) |", "|---|---|---:|"]
    out += [f"| {row.model} | {row.setting} | {row.judge['Accuracy']:.1f} |" for row in TABLE_4]
    out += ["", "The paper does not publish the 100 question ids.", "",
            "### Figure 3(a): frame ablation (overall MCQ accuracy %)", "", "| Model | 32 frames | 64 frames | 128 frames |", "|---|---:|---:|---:|"]
    for model in dict.fromkeys(r.model for r in FIGURE_3A):
        points = {r.frames: r.average for r in FIGURE_3A if r.model == model}
        out.append(f"| {model} | " + " | ".join(_fmt(points.get(f)) for f in (32, 64, 128)) + " |")
    return out + [""]


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
        if judge.counted_in_subset is not None:
            facts.append(f"{judge.counted_in_subset} of its entries in the --subset counted (the others left out)")
        if report.published_mode != "none":
            facts.append(judge_standing_text(judge))
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
        md += ["Rows marked `paper` are the published numbers (K9-Bench paper; the Frames cell names the table and setting, "
               "N the row's questions).", ""]
        if any(r.settings.standing == NOT_COMPARABLE for r in report.runs):
            md += [f"Runs marked *{NOT_COMPARABLE_MARK}* (or another table) were made with other settings than any row of the "
                   "paper (see Run settings): their place among the paper's rows says nothing about the models.", ""]
    md += ["### Files", "", "| Model | Frames | Eval file | Questions | Correct | Failed | Interval |", "|---|---:|---|---:|---:|---:|---|"]
    for run in report.runs:
        frames = run.max_frames if run.max_frames is not None else "—"
        md.append(f"| {_cell(run.label)} | {frames} | `{run.path}` | {run.overall.total} | {run.overall.correct} | {run.failed} | {run.ci_source} |")
    md.append("")
    md += common_markdown(report)
    md += paired_markdown(report.paired)
    md += ["## Run settings", "",
           f"Read from each eval file. Every row of the paper: embedding model {PAPER_SETUP.embedding_model}, threshold "
           f"{PAPER_SETUP.threshold:g}, the reference scripts' prompts in the system turn; each row has its own frames (32, or the "
           f"whole video at 1 FPS), frame size, audio, questions and response limit. Each run is compared with the rows of its "
           f"model (Tables 1 and 2, Figure 3(a)): the Paper column names the rows whose setup it followed, or what differs from "
           f"the nearest one. A prompt whose SHA-256 is the reference's is shown as \"{CONFIRMED_PROMPTS}\".", "",
           settings_markdown(report.runs), ""]
    md += [f"## Short-video subset (videos under {PAPER_SETUP.short_video_seconds:g} s)", "",
           f"Accuracy in % over the questions whose video is shorter than {PAPER_SETUP.short_video_seconds:g} s "
           f"(the paper's subset has {PAPER_SETUP.short_video_questions:,} questions).", "", short_video_markdown(report.runs, report.published_mode), ""]
    md += judge_section(report)
    md += people_markdown(report.people, report.published_mode, plots)  # k9bench.report.people (docs/people.md)
    if report.published_mode == "all":
        md += published_tables_markdown()
    md += ["## Plots", ""]
    for name, path in plots.items():
        if path is not None:
            shown = Path(path).name if Path(path).parent.resolve() == md_path.parent.resolve() else str(path)
            md += [f"![{name}]({shown})", ""]
    md += [f"- {note}" for note in notes]
    return "\n".join(md).rstrip() + "\n"
