"""The whole paper as data, and each run compared with the rows whose setup it followed (issue 37 items 1 and 6):
runs made with each row's documented setup (eval files with the inference block eval_video_llm.py writes) name
that row; a run that follows no row is "not comparable", naming what differs from the nearest row."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from k9bench import CATEGORIES
from k9bench.data import published
from k9bench.data.published import (
    FIGURE_3A,
    FRAME_ABLATION,
    PAPER_ROWS,
    QUESTION_SETS,
    TABLE_1,
    TABLE_2,
    TABLE_3,
    TABLE_4,
    normalize_model_name,
    rows_of,
)
from k9bench.report import build_report, load_run, write_report
from k9bench.report.markdown import report_markdown
from tests.test_report_comparable import PROMPT_HASH, inference_block, reference_hash, write_eval

REFERENCE_PROMPT = "prompts/reference_system.txt"


def test_every_table_and_figure_point_is_data():
    assert [len(t) for t in (TABLE_1, TABLE_2, TABLE_3, TABLE_4)] == [11, 4, 9, 4]
    assert FRAME_ABLATION == {"Qwen3-VL-8B": {32: 28.8, 64: 29.5, 128: 29.9}, "Qwen3-VL-32B": {32: 31.4, 64: 30.7, 128: 31.9}}
    assert len(FIGURE_3A) == 6 and len(PAPER_ROWS) == 34
    for row in PAPER_ROWS:  # each row carries its own setup and its figures
        assert row.average is not None or row.judge, row.name
        if row.categories:
            assert set(row.categories) == set(CATEGORIES)
            assert min(row.categories.values()) - 0.05 <= row.average <= max(row.categories.values()) + 0.05, row.name
    gemini_av_short = next(r for r in TABLE_2 if r.setup.audio and r.setup.questions == "short" and r.model == "Gemini-2.5 Pro")
    assert (gemini_av_short.average, gemini_av_short.judge["Overall"], gemini_av_short.setup.frames) == (42.37, 71.54, None)
    gpt4o = rows_of("gpt-4o-2024-08-06", TABLE_1)[0]
    assert (gpt4o.setup.frame_size, gpt4o.api_model, gpt4o.setup.frames) == ("512x512", "gpt-4o-2024-08-06", 32)
    thinking = rows_of("Qwen/Qwen3-VL-8B-Thinking", TABLE_1)[0]
    assert thinking.setup.thinking and thinking.setup.max_new_tokens == 2048
    assert {r.model: r.judge["Accuracy"] for r in TABLE_4} == {"Qwen3-VL-32B": 48.4, "InternVL-3.5-14B": 54.3, "Gemini-2.5 Pro": 63.9,
                                                              "human": 69.9}
    assert {r.setup.questions for r in TABLE_4} == {"human100"} and QUESTION_SETS["short"][0] == 2693
    assert not rows_of("Qwen3-VL-4B", TABLE_3)  # the paper has no Table 3 row for it
    assert normalize_model_name("OpenGVLab/InternVL3_5-14B-HF") == normalize_model_name("InternVL-3.5-14B")
    assert normalize_model_name("Qwen3-VL-8B-Thinking") != normalize_model_name("Qwen3-VL-8B")


def paper_block(*, max_frames: int = 32, fps: float = 1.0, max_pixels: int = 360 * 420, audio: bool = False,
                frame_size: str | None = None, max_new_tokens: int = 2048, thinking: bool = False) -> dict:
    """The inference block of a run made with the reference prompt file, as eval_video_llm.py writes it."""
    block = inference_block(max_frames=max_frames, fps=fps, max_pixels=max_pixels, audio=audio, source=REFERENCE_PROMPT)
    block.update(max_new_tokens=max_new_tokens, thinking_mode=thinking, backend_settings={"frame_size": frame_size})
    return block


def paper_run(path: Path, model: str, n: int, block: dict, *, seconds: float | None = None) -> Path:
    """An eval file of ``n`` questions of model ``model`` (every video ``seconds`` long when given)."""
    write_eval(path, n=n, model=model.rsplit("/", 1)[-1], frames=block["frames"]["max_frames"], inference=block)
    data = json.loads(path.read_text())
    data["input_meta"]["model_name_or_path"] = model
    data["statistics"] = {"overall": {"all": {"ci95": [0.3, 0.4]}}}  # the file's own interval: no bootstrap over 4,744 questions
    if seconds is not None:
        for rec in data["individual_results"]:
            rec["video_duration"] = seconds
    path.write_text(json.dumps(data))
    return path


# (what the docs' command makes, the row it must name)
RUNS = {
    "gpt-4o 32 frames 512x512": ("gpt-4o-2024-08-06", 4744, dict(frame_size="512x512", max_pixels=2 * 512 * 512), None,
                                 "Table 1: GPT-4o (32 frames, 512x512)"),
    "gemini 1 fps": ("gemini-2.5-pro", 4744, dict(max_frames=1800), None, "Table 1: Gemini-2.5 Pro (1 FPS)"),
    "gemini A+V full": ("gemini-2.5-pro", 4744, dict(max_frames=1800, audio=True), None, "Table 2: Gemini-2.5 Pro (A+V, 1 FPS)"),
    "gemini A+V < 150 s": ("gemini-2.5-pro", 2693, dict(max_frames=1800, audio=True), 90.0,
                           "Table 2: Gemini-2.5 Pro (A+V, 1 FPS, videos < 150 s)"),
    "omni A+V < 150 s": ("qwen3-omni-flash", 2693, dict(max_frames=1800, audio=True), 90.0,
                         "Table 2: Qwen3-Omni-Flash (A+V, 1 FPS, videos < 150 s)"),
    "qwen3-vl-8b 64 frames": ("Qwen/Qwen3-VL-8B-Instruct", 4744, dict(max_frames=64), None, "Figure 3(a): Qwen3-VL-8B (64 frames)"),
    "qwen3-vl-8b-thinking paper limit": ("Qwen/Qwen3-VL-8B-Thinking", 4744, dict(thinking=True), None,
                                         "Table 1: Qwen3-VL-8B-Thinking (32 frames)"),
}


@pytest.mark.parametrize("name", list(RUNS))
def test_a_run_made_as_the_row_was_names_that_row(tmp_path, monkeypatch, name):
    reference_hash(monkeypatch)
    model, n, frames, seconds, row = RUNS[name]
    path = paper_run(tmp_path / "eval_x.json", model, n, paper_block(**frames), seconds=seconds)
    settings = load_run(path).settings
    assert settings.standing == "comparable", (settings.differences, settings.unconfirmed)
    assert row in settings.paper_rows
    report = build_report([str(path)], published="matching")
    md = report_markdown(report, {}, [], tmp_path / "report.md")  # the text alone (write_report adds plots and the page)
    paper_cell = md.split("## Run settings")[1].split("## ")[0]
    assert f"comparable (the paper's setup) with {row}: " in paper_cell  # the row, and why: its setup in words
    assert "not comparable" not in md
    shown = {(r.table, r.model) for r in report.published}
    assert (row.split(":")[0], row.split(": ")[1].split(" (")[0]) in shown  # the leaderboard shows the row beside the run


def test_a_moving_alias_is_marked_not_refused(tmp_path, monkeypatch):
    reference_hash(monkeypatch)
    block = paper_block(frame_size="512x512", max_pixels=2 * 512 * 512)
    alias = load_run(paper_run(tmp_path / "a.json", "gpt-4o", 4744, block)).settings
    assert alias.standing == "comparable" and alias.paper_rows == ["Table 1: GPT-4o (32 frames, 512x512)"]
    assert alias.caveats == ["gpt-4o is a moving alias: the paper's rows used the dated snapshot gpt-4o-2024-08-06"]
    assert load_run(paper_run(tmp_path / "d.json", "gpt-4o-2024-08-06", 4744, block)).settings.caveats == []


def test_video_only_gemini_matches_tables_1_and_2_and_av_never_table_1(tmp_path, monkeypatch):
    reference_hash(monkeypatch)
    video = load_run(paper_run(tmp_path / "v.json", "gemini-2.5-pro", 4744, paper_block(max_frames=1800))).settings
    assert video.paper_rows == ["Table 1: Gemini-2.5 Pro (1 FPS)", "Table 2: Gemini-2.5 Pro (video only, 1 FPS)"]
    av = load_run(paper_run(tmp_path / "av.json", "gemini-2.5-pro", 4744, paper_block(max_frames=1800, audio=True))).settings
    assert av.paper_rows == ["Table 2: Gemini-2.5 Pro (A+V, 1 FPS)"]


@pytest.mark.parametrize(
    "model, n, frames, seconds, nearest, difference",
    [
        # GPT-4o without --frame_size: frames not resized to 512x512
        ("gpt-4o-2024-08-06", 4744, {}, None, "Table 1: GPT-4o (32 frames, 512x512)",
         "frames not resized to a fixed size (paper: every frame resized to 512x512)"),
        # Gemini at 32 frames instead of the whole video at 1 FPS
        ("gemini-2.5-pro", 4744, {}, None, "Table 1: Gemini-2.5 Pro (1 FPS)", "frames 32 (paper: the whole video at 1 FPS)"),
        # the A+V subset run holding long videos
        ("qwen3-omni-flash", 2693, dict(max_frames=1800, audio=True), 200.0, "Table 2: Qwen3-Omni-Flash (A+V, 1 FPS, videos < 150 s)",
         "2,693 questions of videos of 150 s or more (paper: the 2,693 questions of videos under 150 s)"),
        # Omni on the full set: the paper's Omni row is the < 150 s subset only
        ("qwen3-omni-flash", 4744, dict(max_frames=1800, audio=True), 90.0, "Table 2: Qwen3-Omni-Flash (A+V, 1 FPS, videos < 150 s)",
         "4,744 questions (paper: 2,693)"),
        # 96 frames: no ablation point
        ("Qwen/Qwen3-VL-8B-Instruct", 4744, dict(max_frames=96), None, "Table 1: Qwen3-VL-8B (32 frames)", "frames 96 (paper: 32)"),
        # the reference scripts' thinking limit against the paper's
        ("Qwen/Qwen3-VL-8B-Thinking", 4744, dict(thinking=True, max_new_tokens=3072), None, "Table 1: Qwen3-VL-8B-Thinking (32 frames)",
         "max_new_tokens 3,072: the reference scripts' thinking limit (paper: 2,048)"),
    ],
)
def test_a_run_that_follows_no_row_names_what_differs_from_the_nearest(tmp_path, monkeypatch, model, n, frames, seconds, nearest,
                                                                       difference):
    reference_hash(monkeypatch)
    path = paper_run(tmp_path / "eval_x.json", model, n, paper_block(**frames), seconds=seconds)
    settings = load_run(path).settings
    assert settings.standing == "not comparable" and settings.paper_rows == []
    assert settings.nearest_row == nearest
    assert difference in settings.differences, settings.differences
    assert len(settings.differences) == 1  # only what differs: the rest of the setup is the row's
    md = report_markdown(build_report([str(path)], published="matching"), {}, [], tmp_path / "report.md")
    assert f"(nearest: {nearest}): {difference}" in md


def test_a_full_av_run_shows_the_papers_short_video_row_beside_its_own(tmp_path, monkeypatch):
    reference_hash(monkeypatch)
    path = paper_run(tmp_path / "eval_av.json", "gemini-2.5-pro", 4744, paper_block(max_frames=1800, audio=True))
    data = json.loads(path.read_text())
    for rec in data["individual_results"]:
        rec["video_duration"] = 90.0 if rec["idx"] < 2693 else 200.0
    path.write_text(json.dumps(data))
    report = build_report([str(path)], published="matching")
    short = report_markdown(report, {}, [], tmp_path / "report.md").split("## Short-video subset")[1].split("## ")[0]
    assert "| gemini-2.5-pro (A+V) | 2,693 |" in short
    assert "| Gemini-2.5 Pro (paper, Table 2: A+V, 1 FPS, videos < 150 s) | 2,693 | 42.4 | 38.4 | 37.8 | 45.1 | 50.0 | 45.0 |" in short
    alone = build_report([str(path)], published="none")
    assert "(paper, Table 2" not in report_markdown(alone, {}, [], tmp_path / "report.md")


def test_thinking_limit_is_named_in_the_run_settings(tmp_path, monkeypatch):
    reference_hash(monkeypatch)
    ref = paper_run(tmp_path / "eval_ref.json", "Qwen/Qwen3-VL-8B-Thinking", 4744, paper_block(thinking=True, max_new_tokens=3072))
    paper = paper_run(tmp_path / "eval_paper.json", "Qwen/Qwen3-VL-8B-Thinking", 4744, paper_block(thinking=True))
    assert (load_run(ref).settings.thinking_limit, load_run(paper).settings.thinking_limit) == ("reference", "paper")
    md = Path(write_report(build_report([str(ref), str(paper)], published="matching"), tmp_path / "rep")["markdown"]).read_text()
    settings = md.split("## Run settings")[1].split("## ")[0]
    assert "max_new_tokens 3,072 (thinking: the reference scripts' limit)" in settings
    assert "max_new_tokens 2,048 (thinking: the paper's limit)" in settings
    assert "2,048 new tokens (the paper's thinking limit)" in settings  # why the paper-limit run matches


def test_a_model_the_paper_has_no_row_of_is_compared_with_the_setups(tmp_path, monkeypatch):
    reference_hash(monkeypatch)
    path = paper_run(tmp_path / "eval_x.json", "Qwen/Qwen3-VL-2B-Instruct", 4744, paper_block())
    settings = load_run(path).settings
    assert settings.standing == "comparable" and settings.paper_rows == []
    assert settings.paper_why == ["Table 1's 32 frames setup: 32 frames, at most 360x420 px, video only, all 4,744 questions, "
                                  "2,048 new tokens (the paper has no row of this model)"]
    short = load_run(paper_run(tmp_path / "eval_s.json", "Qwen/Qwen3-VL-2B-Instruct", 10, paper_block())).settings
    assert short.nearest_row == "Table 1's 32 frames setup" and short.differences == ["10 questions (paper: 4,744)"]


def judge_file(path: Path, idx: range, judge_model: str | None = "gpt-4o-2024-08-06", evaluations: Path | None = None) -> Path:
    entries = [{"idx": i, "scores": {"Logic": 7, "Factuality": 6, "Accuracy": 5, "Conciseness": 8, "Overall": 6}} for i in idx]
    path.write_text(json.dumps(entries))
    if judge_model:
        judge = {"model": judge_model, "prompt_source": "prompts/reference_judge.txt", "prompt_sha256": PROMPT_HASH,
                 "reference_prompt": True}
        path.with_name(path.name + ".meta.json").write_text(json.dumps({"judge": judge, "input": {"evaluations": str(evaluations)}}))
    return path


def test_judge_files_are_compared_with_the_judge_rows(tmp_path, monkeypatch):
    reference_hash(monkeypatch)
    run = paper_run(tmp_path / "eval_gemini.json", "gemini-2.5-pro", 2693, paper_block(max_frames=1800, audio=True), seconds=90.0)
    judged = judge_file(tmp_path / "judge_gemini.json", range(2693), evaluations=run)
    report = build_report([str(run)], [str(judged)], published="matching")
    judge = report.judges[0]
    assert judge.standing == "comparable" and judge.paper_rows == ["Table 2: Gemini-2.5 Pro (A+V, 1 FPS, videos < 150 s)"]
    md = Path(write_report(report, tmp_path / "rep")["markdown"]).read_text()
    section = md.split("## Judge scores")[1]
    assert "71.54" in section and "comparable with Table 2: Gemini-2.5 Pro (A+V, 1 FPS, videos < 150 s)" in section
    other = judge_file(tmp_path / "judge_mini.json", range(2693), judge_model="gpt-4o-mini", evaluations=run)
    judge = build_report([str(run)], [str(other)], published="matching").judges[0]
    assert judge.standing == "not comparable" and "judge gpt-4o-mini (paper: GPT-4o)" in judge.differences


def test_published_all_shows_every_table(tmp_path):
    path = write_eval(tmp_path / "eval_x.json")
    judged = judge_file(tmp_path / "judge_x.json", range(10), evaluations=path)
    report = build_report([str(path)], [str(judged)], published="all")
    md = Path(write_report(report, tmp_path / "rep")["markdown"]).read_text()
    for row in TABLE_1:
        assert f"| {row.model} | paper | {row.setting} (Table 1) | {row.average:.1f} |" in md
    for row in TABLE_3:
        assert f"| {row.model} | paper | " + " | ".join(f"{row.judge[a]:.2f}" for a in published.JUDGE_AXES) in md
    tables = md.split("## The paper's other tables")[1]
    for row in TABLE_2:
        assert f"| {row.model} | {row.setting} | {QUESTION_SETS[row.setup.questions][0]:,} | {row.average:.1f} |" in tables
    for row in TABLE_4:
        assert f"| {row.model} | {row.setting} | {row.judge['Accuracy']:.1f} |" in tables
    assert "| Qwen3-VL-8B | 28.8 | 29.5 | 29.9 |" in tables and "| Qwen3-VL-32B | 31.4 | 30.7 | 31.9 |" in tables
