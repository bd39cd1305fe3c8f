"""The report states each run's settings, read from the files' contents, and marks a run that is not
comparable to the paper's Table 1; the short-video subset; the frame-budget inputs (issue 14)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from k9bench import CATEGORIES

from k9bench.data import published
from k9bench.artifact_io import write_json_atomic
from k9bench.data.published import PAPER_SETUP
from k9bench.report import NOT_COMPARABLE_MARK, build_report, frame_series, frame_sweep_files, load_run, write_report

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
PROMPT_HASH = "ab" * 32


def inference_block(*, max_frames: int = 32, fps: float = 1.0, max_pixels: int = 360 * 420, source: str = "builtin:system_prompt",
                    use_system_message: bool = True, text_only: bool = False, audio: bool = False) -> dict:
    """The raw file's ``inference`` block as eval_video_llm.py writes it."""
    return {
        "text_only": text_only,
        "frames": None if text_only else {"fps": fps, "max_frames": max_frames, "max_pixels": max_pixels, "min_pixels": None,
                                          "audio": audio},
        "prompt": {"system_prompt_source": source, "system_prompt_sha256": PROMPT_HASH, "use_system_message": use_system_message,
                   "placement": "system" if use_system_message else "empty_system"},
        "dataset": {"source": "ogmen/K9Bench", "split": "test", "max_samples": -1},
        "backend": {"name": "hf", "fps": 99.0, "max_pixels": 1},  # machine description: never read as the run's settings
    }


def write_eval(path: Path, *, n: int = 10, model: str = "Qwen3-VL-8B-Instruct", frames: int = 32, embedding: str = "Qwen/Qwen3-Embedding-8B",
               threshold: float = 0.5, inference: dict | None = None, durations: bool = True, idx_offset: int = 0,
               correct_every: int = 3) -> Path:
    """An eval file as evaluate_results.py writes it: the raw file's top level travels under input_meta."""
    records = []
    for i in range(n):
        rec = {"idx": i + idx_offset, "question_category": CATEGORIES[i % 5], "video": f"v{i // 2}.mp4", "scene_name": f"v{i // 2}",
               "ground_truth": "A", "response": "{}", "answer": "x", "question": "q", "options": [f"{k}. o" for k in "ABCDE"],
               "prompt": "p", "model_name": model, "max_frames": frames, "timestamp": "t",
               "cosine_similarities": {k: 0.1 for k in "ABCDE"}, "is_correct": i % correct_every == 0,
               "evaluation_explanation": "e", "eval_mode": "fine"}
        if durations:
            rec["video_duration"] = None if frames == 0 else 60.0 * (i // 2)  # 0, 60, 120, 180, ... s
        records.append(rec)
    correct = sum(r["is_correct"] for r in records)
    cats = {}
    for c in CATEGORIES:
        rows = [r for r in records if r["question_category"] == c]
        k = sum(r["is_correct"] for r in rows)
        cats[c] = {"accuracy": k / len(rows) if rows else 0.0, "correct": k, "total": len(rows)}
    data = {
        "evaluation_timestamp": "t", "eval_mode": "fine", "threshold": threshold, "accuracy": correct / n, "correct_count": correct,
        "total_count": n, "category_wise_accuracy": cats, "individual_results": records,
        "metadata": {"similarity_model": embedding, "similarity_calculated_at": "t"},
        "input_meta": {"model_name": model, "model_name_or_path": f"Qwen/{model}",
                       "inference": inference if inference is not None else inference_block(max_frames=frames)},
    }
    write_json_atomic(path, data)
    return path


def test_minilm_run_carries_the_mark_and_names_minilm(tmp_path):
    path = write_eval(tmp_path / "eval_Qwen3-VL-8B-Instruct_mf32_n10.json", embedding=MINILM)
    report = build_report([str(path)], published="all")
    run = report.runs[0]
    assert run.settings.standing == "not comparable"
    assert any("MiniLM" in d for d in run.settings.differences)
    md = Path(write_report(report, tmp_path / "rep")["markdown"]).read_text()
    board = md.split("## MCQ accuracy")[1].split("### Files")[0]
    run_rows = [ln for ln in board.splitlines() if "Qwen3-VL-8B-Instruct" in ln]
    assert run_rows and all(NOT_COMPARABLE_MARK in ln for ln in run_rows)  # beside the paper's rows only with the mark
    assert "| paper |" in board
    settings = md.split("## Run settings")[1].split("##")[0]
    assert MINILM in settings and NOT_COMPARABLE_MARK in settings
    summary = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert summary["runs"][0]["settings"]["standing"] == "not comparable"
    assert summary["runs"][0]["settings"]["embedding_model"] == MINILM


def reference_hash(monkeypatch, digest: str | None = PROMPT_HASH) -> None:
    """The reference system prompt's hash in force (published.py's, swapped for the test's)."""
    monkeypatch.setattr(published, "REFERENCE_SYSTEM_PROMPT_SHA256", digest, raising=False)


def test_paper_setup_is_comparable_and_unmarked(tmp_path, monkeypatch):
    reference_hash(monkeypatch)
    path = write_eval(tmp_path / "eval_full.json", n=PAPER_SETUP.questions,
                      inference=inference_block(source="prompts/reference_system.txt"))
    report = build_report([str(path)], published="matching")
    run = report.runs[0]
    assert run.settings.standing == "comparable", (run.settings.differences, run.settings.unconfirmed)
    md = Path(write_report(report, tmp_path / "rep")["markdown"]).read_text()
    assert NOT_COMPARABLE_MARK not in md
    assert "comparable (the paper's setup)" in md
    assert "| Qwen3-VL-8B | paper |" in md
    assert "system_prompt: reference prompts (confirmed): prompts/reference_system.txt" in md


@pytest.mark.parametrize(
    "kwargs, expected",
    [
        ({"threshold": 0.3}, "threshold 0.3 (paper: 0.5)"),
        ({"inference": inference_block(source="builtin:system_prompt")}, "system_prompt in this project's own words"),
        ({"inference": inference_block(use_system_message=False)}, "an empty system turn"),
        ({"frames": 8, "inference": inference_block(max_frames=8)}, "frames 8 (paper: 32)"),
        ({"inference": inference_block(fps=2.0)}, "fps 2 (paper: 1)"),
        ({"inference": inference_block(max_pixels=1000)}, "max_pixels 1000"),
        ({"frames": 0, "inference": inference_block(text_only=True), "durations": False}, "text only, no video"),
        ({}, "10 questions (paper: 4,744)"),
    ],
)
def test_each_difference_from_the_paper_is_named(tmp_path, kwargs, expected):
    run = load_run(write_eval(tmp_path / "eval_x.json", **kwargs))
    assert run.settings.standing == "not comparable"
    assert any(expected in d for d in run.settings.differences), run.settings.differences


def test_prompt_file_checked_by_hash_and_missing_settings_are_unconfirmed(tmp_path, monkeypatch):
    path = write_eval(tmp_path / "eval_x.json", n=PAPER_SETUP.questions, inference=inference_block(source="my_prompt.txt"))
    reference_hash(monkeypatch, None)  # no reference hash to check against: unconfirmed
    run = load_run(path)
    assert run.settings.standing == "unconfirmed"
    assert any("my_prompt.txt" in u for u in run.settings.unconfirmed)
    reference_hash(monkeypatch, "cd" * 32)  # a file whose text differs from the reference's (by one character, say)
    run = load_run(path)
    assert run.settings.standing == "not comparable" and not run.settings.prompts_confirmed
    assert any("my_prompt.txt" in d and "not the reference's" in d for d in run.settings.differences)
    reference_hash(monkeypatch)
    assert load_run(path).settings.prompts_confirmed
    bare = tmp_path / "eval_bare.json"  # a reference-style eval file: no inference settings at all
    data = json.loads(path.read_text())
    data.pop("input_meta")
    bare.write_text(json.dumps(data))
    settings = load_run(bare).settings
    assert settings.standing == "unconfirmed"
    assert {"prompts not recorded", "fps not recorded", "max_pixels not recorded"} <= set(settings.unconfirmed)
    assert settings.max_frames == 32  # from the records


def test_settings_come_from_contents_not_the_file_name(tmp_path):
    misleading = write_eval(tmp_path / "eval_Other-Model_mf8_n3.json", frames=32)
    run = load_run(misleading)
    assert (run.model, run.max_frames, run.settings.questions) == ("Qwen3-VL-8B-Instruct", 32, 10)
    plain = write_eval(tmp_path / "results.json", frames=16, inference=inference_block(max_frames=16))
    assert load_run(plain).max_frames == 16
    settings = load_run(plain).settings
    assert settings.prompts == {"system_prompt": {"source": "builtin:system_prompt", "sha256": PROMPT_HASH, "reference": False}}
    assert (settings.fps, settings.max_pixels) == (1.0, 151200)  # not the backend block's fps 99 / max_pixels 1


def test_short_video_subset_is_its_own_row(tmp_path):
    run = load_run(write_eval(tmp_path / "eval_x.json", n=10))
    # durations 0, 0, 60, 60, 120, 120, 180, 180, 240, 240 s: six under 150 s
    assert run.short.total == 6
    assert run.short.correct == sum(1 for i in range(6) if i % 3 == 0)
    md = Path(write_report(build_report([str(tmp_path / "eval_x.json")]), tmp_path / "rep")["markdown"]).read_text()
    short = md.split("## Short-video subset (videos under 150 s)")[1].split("##")[0]
    assert "2,693 questions" in short
    assert f"| {run.label} | 6 | {100 * run.short.correct / 6:.1f} |" in short


def test_text_only_wording_and_grammar(tmp_path):
    path = write_eval(tmp_path / "eval_t.json", frames=0, inference=inference_block(text_only=True))
    md = Path(write_report(build_report([str(path)]), tmp_path / "rep")["markdown"]).read_text()
    assert "from 1 eval file." in md
    assert "lack" not in md and "No record carries a video duration" not in md
    assert "Text-only run (MAX_FRAMES 0, no video)" in md
    assert "text only: no video" in md  # the short-video row says why it is empty


def test_frame_sweep_files_pick_the_same_model_and_questions(tmp_path):
    four = write_eval(tmp_path / "eval_m_mf4_n10.json", frames=4, inference=inference_block(max_frames=4))
    six = write_eval(tmp_path / "eval_m_mf6_n10.json", frames=6, inference=inference_block(max_frames=6))
    write_eval(tmp_path / "eval_m_mf8_n10.json", frames=8, inference=inference_block(max_frames=8), idx_offset=100)  # other questions
    write_eval(tmp_path / "eval_o_mf8_n10.json", model="Other", frames=8, inference=inference_block(max_frames=8))  # other model
    write_eval(tmp_path / "eval_m_mf12_n10.json", frames=12, inference=inference_block(max_frames=12), threshold=0.3)  # other scoring
    (tmp_path / "eval_broken.json").write_text("{")
    assert frame_sweep_files(four) == [four, six]
    assert frame_sweep_files(six) == [six, four]
    report = build_report([str(p) for p in frame_sweep_files(four)])
    written = write_report(report, tmp_path / "rep")
    assert Path(written["accuracy_vs_frames"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("where", ["file", "inside_file", "md_is_dir"])
def test_unwritable_report_location_is_refused_before_reading(tmp_path, caplog, where):
    """--report_dir that is a file (or under one), --output_file that is a folder: exit 2, one line, nothing written."""
    from tests.test_report import report_args

    from k9bench.report import run_report

    blocker = tmp_path / "blocker"
    blocker.write_text("x")
    path = write_eval(tmp_path / "eval_x.json")
    extra = {"file": ["--report_dir", str(blocker)], "inside_file": ["--report_dir", str(blocker / "rep")],
             "md_is_dir": ["--output_file", str(tmp_path)]}[where]
    args = report_args(tmp_path, "--input_file", str(path), *extra)
    assert run_report(args) == 2
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "\n" not in errors[0].getMessage()
    assert ("--report_dir" if where != "md_is_dir" else "--output_file") in errors[0].getMessage()
    assert blocker.read_text() == "x" and not (tmp_path / "rep").exists()


@pytest.mark.parametrize(
    "prompt, placement, difference, shown",
    [
        ({"use_system_message": True, "placement": "system"}, "system", None, None),
        ({"use_system_message": False, "placement": "empty_system"}, "empty_system", "an empty system turn: the model got no instructions",
         "empty system turn (no instructions)"),
        ({"use_system_message": False, "instructions_in_user_turn": True, "placement": "user_turn"}, "user_turn",
         "not sent as the system message", "instructions in the user turn"),
        # no placement recorded: not guessed from use_system_message
        ({"use_system_message": False}, None, None, None),
    ],
)
def test_prompt_placement_is_read_not_guessed(tmp_path, monkeypatch, prompt, placement, difference, shown):
    reference_hash(monkeypatch)
    block = inference_block(source="prompts/reference_system.txt")
    block["prompt"] = {"system_prompt_source": "prompts/reference_system.txt", "system_prompt_sha256": PROMPT_HASH, **prompt}
    path = write_eval(tmp_path / "eval_x.json", n=PAPER_SETUP.questions, inference=block)
    run = load_run(path)
    assert run.settings.prompt_placement == placement
    if placement is None:
        assert run.settings.standing == "unconfirmed" and "prompt placement not recorded" in run.settings.unconfirmed
    elif difference is None:
        assert run.settings.standing == "comparable", run.settings.differences
    else:
        assert run.settings.standing == "not comparable"
        assert [d for d in run.settings.differences if difference in d], run.settings.differences
        assert "empty system turn" not in " ".join(run.settings.differences) or placement == "empty_system"
    md = Path(write_report(build_report([str(path)]), tmp_path / "rep")["markdown"]).read_text()
    settings = md.split("## Run settings")[1].split("##")[0]
    if shown:
        assert shown in settings
    assert json.loads((tmp_path / "rep" / "report.json").read_text())["runs"][0]["settings"]["prompt_placement"] == placement


def test_audio_video_runs_are_kept_apart_from_video_only_runs(tmp_path):
    """An audio+video run is labelled A+V, named as a difference from Table 1, and is never a point of
    the same model's video-only frame-budget curve (nor picked by the launcher's frame sweep)."""
    video = [write_eval(tmp_path / f"eval_m_mf{f}_n10.json", frames=f, inference=inference_block(max_frames=f)) for f in (8, 16)]
    av = []
    for f in (8, 32):
        block = inference_block(max_frames=f, audio=True)
        av.append(write_eval(tmp_path / f"eval_m_mf{f}_n10_av.json", frames=f, inference=block))
    report = build_report([str(p) for p in video + av], published="matching")
    labels = {r.path: r.label for r in report.runs}
    assert labels[str(av[0])] == "Qwen3-VL-8B-Instruct (A+V) @8f" and labels[str(video[0])] == "Qwen3-VL-8B-Instruct @8f"
    run_av = next(r for r in report.runs if r.path == str(av[0]))
    assert run_av.settings.audio is True and any("audio+video" in d for d in run_av.settings.differences)
    series = frame_series(report.runs)
    assert set(series) == {"Qwen3-VL-8B-Instruct", "Qwen3-VL-8B-Instruct (A+V)"}
    assert [r.path for r in series["Qwen3-VL-8B-Instruct"]] == [str(p) for p in video]
    assert [r.path for r in series["Qwen3-VL-8B-Instruct (A+V)"]] == [str(p) for p in av]
    md = Path(write_report(report, tmp_path / "rep")["markdown"]).read_text()
    assert "+ audio (A+V)" in md.split("## Run settings")[1]
    assert frame_sweep_files(video[0]) == [video[0], video[1]]
    assert frame_sweep_files(av[1]) == [av[1], av[0]]
    # without an inference block, the records say (as eval_video_llm.py writes them: soundtrack
    # details and audio_used, False where a video had none)
    data = json.loads(video[1].read_text())
    data.pop("input_meta")
    bare = tmp_path / "bare.json"
    for i, r in enumerate(data["individual_results"]):
        if i % 2:
            r["audio"] = {"sampling_rate": 16000, "num_samples": 96000}
        r["audio_used"] = bool(i % 2)
    bare.write_text(json.dumps(data))
    assert load_run(bare).settings.audio is True and load_run(bare).label.endswith("(A+V)")
    for r in data["individual_results"]:
        r.pop("audio", None)
        r["audio_used"] = False
    bare.write_text(json.dumps(data))
    assert load_run(bare).settings.audio is False
