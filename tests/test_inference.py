"""eval_video_llm.py end to end on CPU: the tiny random Qwen3-VL, generated videos, main([...])."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import eval_video_llm
from k9bench.layout import checkpoint_path
from k9bench.inference.runner import EXIT_BACKEND, EXIT_OK
from k9bench.prompts import sha256
from k9bench.tiny_model import build_tiny_qwen3vl

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SPEC_KEYS = {"idx", "question_category", "video", "ground_truth", "response", "answer", "scene_name", "question",
             "options", "prompt", "model_name", "max_frames", "timestamp"}
OUR_KEYS = {"frame_indices", "num_frames", "sample_fps", "video_duration", "frame_size", "video_decoder", "text_only",
            "generation", "seed", "attn_implementation", "prompt_sha256", "run_settings", "thinking_unfinished"}
PER_INVOCATION = ("provenance", "run_stats")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return build_tiny_qwen3vl(tmp_path_factory.mktemp("tiny") / "qwen3vl", seed=0)


def base_args(tiny: Path, video_dir: Path, out: Path, *extra: str) -> list[str]:
    return [
        "--model_name_or_path", str(tiny), "--dataset_name", "demo", "--video_dir", str(video_dir),
        "--max_frames", "4", "--max_pixels", "16384", "--min_pixels", "2048", "--max_new_tokens", "8",
        "--greedy", "--output_file", str(out), "-q", *extra,
    ]


def load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def comparable(data: dict) -> dict:
    """The file without per-invocation keys and record timestamps."""
    out = {k: v for k, v in data.items() if k not in PER_INVOCATION}
    out["individual_results"] = [{k: v for k, v in r.items() if k != "timestamp"} for r in data["individual_results"]]
    return out


@pytest.fixture(scope="module")
def reference_run(tiny, demo_video_dir, tmp_path_factory) -> Path:
    """One uninterrupted batch-size-1 run over the 12 demo questions."""
    out = tmp_path_factory.mktemp("ref") / "raw.json"
    assert eval_video_llm.main(base_args(tiny, demo_video_dir, out, "--batch_size", "1")) == EXIT_OK
    return out


def test_end_to_end_layout(reference_run, tiny):
    data = load(reference_run)
    records = data["individual_results"]
    assert data["total_count"] == len(records) == 12
    assert [r["idx"] for r in records] == list(range(12))
    assert not checkpoint_path(reference_run).exists()
    for r in records:
        assert SPEC_KEYS | OUR_KEYS <= set(r), sorted(SPEC_KEYS | OUR_KEYS - set(r))
        assert "error" not in r
        assert r["model_name"] == tiny.name and r["max_frames"] == 4
        assert r["video"] == f"{r['scene_name']}.mp4" and len(r["options"]) == 5 and r["options"][0].startswith("A. ")
        assert r["response"] and r["answer"]
        assert r["prompt"].startswith("<|im_start|>system\n") and r["prompt"].endswith("<|im_start|>assistant\n")
        assert r["question"] in r["prompt"] and "<|video_pad|>" in r["prompt"]
        assert not any(opt[3:] in r["prompt"] for opt in r["options"])  # options are never shown
        assert r["prompt_sha256"] == sha256(r["prompt"])
        assert r["num_frames"] == len(r["frame_indices"]) and r["num_frames"] <= 4 and r["num_frames"] % 2 == 0
        assert r["generation"]["do_sample"] is False and r["generation"]["max_new_tokens"] == 8
        assert r["num_output_tokens"] <= 8 and r["attn_implementation"] == "sdpa"
        assert r["run_settings"] == {
            "backend": "hf", "dtype": "float32", "system_prompt_sha256": data["inference"]["prompt"]["system_prompt_sha256"],
            "use_system_message": True,
            "frames": {"fps": 1.0, "max_pixels": 16384, "min_pixels": 2048, "image_patch_size": 16, "decoder": "decord"},
        }
    inference = data["inference"]
    assert inference["backend"]["attn_implementation"] == "sdpa"
    assert any("sdpa" in w for w in inference["backend"]["warnings"])  # the fallback is recorded
    assert inference["backend"]["dtype"] == "float32"
    assert any("float32" in w and "bfloat16" in w for w in inference["backend"]["warnings"])  # so is the CPU dtype
    assert inference["frames"]["image_patch_size"] == 16
    assert inference["prompt"]["system_prompt_source"] == "builtin:system_prompt"
    assert data["provenance"]["script"] == "eval_video_llm.py"
    assert data["failed_count"] == 0 and data["thinking_unfinished_count"] == 0
    assert all(r["thinking_unfinished"] is False for r in records)


def test_batched_equals_batch_size_one_under_greedy(reference_run, tiny, demo_video_dir, tmp_path):
    out = tmp_path / "raw_b4.json"
    assert eval_video_llm.main(base_args(tiny, demo_video_dir, out, "--batch_size", "4")) == EXIT_OK
    batched = {r["idx"]: r for r in load(out)["individual_results"]}
    single = {r["idx"]: r for r in load(reference_run)["individual_results"]}
    assert batched.keys() == single.keys()
    for idx, rec in single.items():
        assert batched[idx]["response"] == rec["response"], idx
        assert batched[idx]["num_input_tokens"] == rec["num_input_tokens"]
    assert load(out)["inference"]["batch_size"] == 4


@pytest.mark.slow
def test_resume_after_sigkill(reference_run, tiny, demo_video_dir, tmp_path, repo_root):
    out = tmp_path / "raw.json"
    part = checkpoint_path(out)
    args = base_args(tiny, demo_video_dir, out, "--batch_size", "1")
    env = dict(os.environ, K9BENCH_NO_PROGRESS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, str(repo_root / "eval_video_llm.py"), *args], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    lines = 0
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if part.exists():
                lines = part.read_bytes().count(b"\n")
                if lines >= 3:
                    proc.send_signal(signal.SIGKILL)
                    break
            time.sleep(0.005)
    finally:
        proc.wait(timeout=60)
        stderr = proc.stderr.read().decode(errors="replace")
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL, f"child ended on its own ({proc.returncode}) before the kill: {stderr[-2000:]}"
    assert not out.exists()
    before = [json.loads(line) for line in part.read_text().splitlines() if line.strip()]
    assert 3 <= len(before) < 12
    assert eval_video_llm.main(args) == EXIT_OK
    final = load(out)
    ids = [r["idx"] for r in final["individual_results"]]
    assert ids == list(range(12))  # none lost, none duplicated
    assert final["run_stats"]["resumed"] == len(before)
    assert comparable(final) == comparable(load(reference_run)) | {"model_name_or_path": final["model_name_or_path"]}
    assert not part.exists()


def test_a_run_piped_to_a_file_logs_progress_lines_and_no_bars(tiny, demo_video_dir, tmp_path, repo_root):
    """Issue 25: the job log of a SLURM run (stderr to a file) gets periodic progress lines with done/total and
    ETA, and no progress bar of ours or of a library (transformers' weight loading)."""
    import re

    out = tmp_path / "raw.json"
    log_file = tmp_path / "job.log"
    args = [a for a in base_args(tiny, demo_video_dir, out, "--batch_size", "1") if a != "-q"]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1", K9BENCH_PROGRESS_INTERVAL="1000")
    env.pop("K9BENCH_NO_PROGRESS", None)
    with log_file.open("w") as fh:
        proc = subprocess.run([sys.executable, str(repo_root / "eval_video_llm.py"), *args], cwd=tmp_path, env=env,
                              stdout=fh, stderr=subprocess.STDOUT, timeout=300)
    text = log_file.read_text()
    assert proc.returncode == EXIT_OK, text[-2000:]
    lines = [line for line in text.splitlines() if "k9bench.progress" in line]
    form = re.compile(r"inference: \d+/12 \(\d+%\), [0-9.]+ questions/s, (ETA|took) [0-9]+ (s|min), 0 failed$")
    assert len(lines) == 10 and all(form.search(line) for line in lines), lines  # one per tenth of 12 questions
    assert "ETA" in lines[0] and "12/12 (100%)" in lines[-1]
    assert "it/s" not in text and "s/it" not in text and "\r" not in text and "Loading" not in text


def test_missing_and_corrupt_videos_fail_alone(tiny, demo_video_dir, tmp_path):
    video_dir = tmp_path / "videos"
    video_dir.mkdir()
    shutil.copy(demo_video_dir / "demoVid0001.mp4", video_dir / "goodVideo01.mp4")
    (video_dir / "brokenVid01.mp4").write_bytes(b"\x00\x00\x00\x18ftypmp42" + os.urandom(3000))
    rows = []
    for n, scene in enumerate(["goodVideo01", "missingVid1", "brokenVid01", "goodVideo01"]):
        rows.append({
            "idx": 100 + n, "video_url": f"https://youtu.be/{scene}", "scene_name": scene, "question_category": "posture analysis",
            "question": f"Question {n}?", "options": {k: f"option {k}" for k in "ABCDE"}, "correct_answer": "A",
        })
    dataset = tmp_path / "rows.jsonl"
    dataset.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    out = tmp_path / "raw.json"
    args = base_args(tiny, video_dir, out, "--batch_size", "2")
    args[args.index("demo")] = str(dataset)
    assert eval_video_llm.main(args) == EXIT_OK
    data = load(out)
    by_idx = {r["idx"]: r for r in data["individual_results"]}
    assert [r["idx"] for r in data["individual_results"]] == [100, 101, 102, 103]
    assert by_idx[101]["error_class"] == "missing_video" and "not found" in by_idx[101]["error"]
    assert by_idx[102]["error_class"] == "decode_error" and by_idx[102]["error"]
    for idx in (101, 102):
        assert by_idx[idx]["response"] == "" and by_idx[idx]["answer"] == "" and by_idx[idx]["num_frames"] == 0
    for idx in (100, 103):
        assert "error" not in by_idx[idx] and by_idx[idx]["response"]
    assert data["failed_count"] == 2 and data["failures_by_class"] == {"missing_video": 1, "decode_error": 1}


def test_a_run_where_every_question_failed_is_not_a_success(tiny, tmp_path):
    """Every video undecodable: the file is written for inspection, but the exit code says the run cannot be trusted."""
    from k9bench.inference.runner import EXIT_ERROR

    broken = tmp_path / "broken_videos"
    broken.mkdir()
    (broken / "demoVid0001.mp4").write_bytes(b"not a video at all")
    out = tmp_path / "raw.json"
    assert eval_video_llm.main(base_args(tiny, broken, out, "--max_samples", "3")) == EXIT_ERROR
    data = load(out)
    assert data["failed_count"] == 3 == len(data["individual_results"])
    assert data["failures_by_class"] == {"decode_error": 3}


def test_a_video_dir_holding_none_of_the_videos_is_refused_before_the_model_loads(tiny, tmp_path, capfd, monkeypatch):
    """Issue 25: a wrong VIDEO_DIR exits 2 in seconds, naming the folder, and no model is loaded."""
    import transformers

    from k9bench.inference.runner import EXIT_USAGE

    def must_not_load(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(transformers.AutoModelForImageTextToText, "from_pretrained", must_not_load)
    empty = tmp_path / "no_videos_here"
    empty.mkdir()
    out = tmp_path / "raw.json"
    capfd.readouterr()
    assert eval_video_llm.main(base_args(tiny, empty, out, "--max_samples", "3")) == EXIT_USAGE
    err = [line for line in capfd.readouterr().err.splitlines() if " ERROR " in line]
    assert len(err) == 1 and str(empty) in err[0] and "holds none of the 1 video(s) of the 3 question(s)" in err[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["no_videos_here"]


def test_auto_download_makes_the_demo_videos_locally_and_a_corrupt_one_again(tiny, demo_video_dir, tmp_path, monkeypatch):
    """Issue 25: the demo set with an empty --video_dir and --auto_download: the three videos are made here (yt-dlp
    is never asked) and every question is answered; a torn video is made again on the next run."""
    import k9bench.download.one as download_one

    def refuse(*args, **kwargs):
        raise AssertionError("yt-dlp was asked for a demo video")

    monkeypatch.setattr(download_one, "fetch", refuse)
    videos = tmp_path / "videos"
    videos.mkdir()
    out = tmp_path / "raw.json"
    args = base_args(tiny, videos, out, "--auto_download", "--batch_size", "4")
    args[args.index("--max_frames") + 1] = "2"
    assert eval_video_llm.main(args) == EXIT_OK
    scenes = ("demoVid0001", "demoVid0002", "demoVid0003")
    for scene in scenes:
        assert (videos / f"{scene}.mp4").read_bytes() == (demo_video_dir / f"{scene}.mp4").read_bytes()
    data = load(out)
    assert len(data["individual_results"]) == 12 and data["failed_count"] == 0
    assert data["run_stats"]["auto_download"]["counts"] == {"ok": 3, "skipped": 0, "failed": 0}

    torn = videos / "demoVid0002.mp4"
    torn.write_bytes(torn.read_bytes()[:2000])
    again = tmp_path / "raw_again.json"
    args = [again if a == str(out) else a for a in args] + ["--start_idx", "4", "--max_samples", "2"]
    assert eval_video_llm.main([str(a) for a in args]) == EXIT_OK
    assert torn.read_bytes() == (demo_video_dir / "demoVid0002.mp4").read_bytes()
    data = load(again)
    assert [r["scene_name"] for r in data["individual_results"]] == ["demoVid0002"] * 2 and data["failed_count"] == 0
    assert data["run_stats"]["auto_download"]["counts"] == {"ok": 1, "skipped": 0, "failed": 0}


@pytest.mark.parametrize("frames", ["1", "-1"])
def test_a_frame_budget_qwen_vl_utils_cannot_sample_is_refused_up_front(tiny, demo_video_dir, tmp_path, frames):
    from k9bench.inference.runner import EXIT_USAGE

    out = tmp_path / "raw.json"
    args = base_args(tiny, demo_video_dir, out)
    args[args.index("--max_frames") + 1] = frames
    assert eval_video_llm.main(args) == EXIT_USAGE
    assert not out.exists()


def test_text_only_mode(tiny, tmp_path):
    out = tmp_path / "raw_text.json"
    args = base_args(tiny, tmp_path / "no_videos_here", out, "--max_samples", "3", "--batch_size", "3")
    args[args.index("--max_frames") + 1] = "0"
    assert eval_video_llm.main(args) == EXIT_OK
    data = load(out)
    assert len(data["individual_results"]) == 3 and data["failed_count"] == 0
    for r in data["individual_results"]:
        assert r["text_only"] is True and r["num_frames"] == 0 and r["frame_indices"] is None
        assert r["max_frames"] == 0 and "<|video_pad|>" not in r["prompt"] and r["response"]
    assert data["inference"]["frames"] is None and data["inference"]["text_only"] is True


def test_thinking_template_reply_cut_in_reasoning_is_flagged(tiny, demo_video_dir, tmp_path):
    """A Thinking-style template opens <think> in the prompt; the tiny model never closes it."""
    model = tmp_path / "thinking"
    shutil.copytree(tiny, model)
    template = model / "chat_template.jinja"
    text = template.read_text(encoding="utf-8")
    assert "enable_thinking is defined and enable_thinking is true" in text
    template.write_text(text.replace("enable_thinking is defined and enable_thinking is true", "true"), encoding="utf-8")
    out = tmp_path / "raw.json"
    assert eval_video_llm.main(base_args(model, demo_video_dir, out, "--max_samples", "2", "--thinking_mode")) == EXIT_OK
    data = load(out)
    assert data["thinking_unfinished_count"] == 2
    for r in data["individual_results"]:
        assert r["prompt"].endswith("<|im_start|>assistant\n<think>\n") and "</think>" not in r["response"]
        assert r["thinking_unfinished"] is True and r["finish_reason"] == "length"
    assert load(out)["inference"]["thinking_mode"] is True


def test_sampling_config_that_cannot_generate_stops_at_load(tiny, demo_video_dir, tmp_path, capfd):
    """A model whose config samples (as Qwen's do): --temperature 0 without --greedy would fail every question."""
    model = tmp_path / "sampling"
    shutil.copytree(tiny, model)
    config = json.loads((model / "generation_config.json").read_text())
    (model / "generation_config.json").write_text(json.dumps({**config, "do_sample": True, "temperature": 0.7}))
    out = tmp_path / "raw.json"
    args = [a for a in base_args(model, demo_video_dir, out, "--max_samples", "1", "--temperature", "0") if a != "--greedy"]
    capfd.readouterr()
    assert eval_video_llm.main(args) == EXIT_BACKEND
    assert "--greedy" in capfd.readouterr().err and not out.exists() and not checkpoint_path(out).exists()


def test_qwen2_5_vl_needs_no_model_specific_code(demo_video_dir, tmp_path):
    from k9bench.tiny_model import build_tiny_qwen2_5vl

    model = build_tiny_qwen2_5vl(tmp_path / "qwen25", seed=0)
    outs = {}
    for bs in ("1", "4"):
        out = tmp_path / f"raw_{bs}.json"
        assert eval_video_llm.main(base_args(model, demo_video_dir, out, "--max_samples", "4", "--batch_size", bs)) == EXIT_OK
        data = load(out)
        assert data["inference"]["backend"]["model_class"] == "Qwen2_5_VLForConditionalGeneration"
        assert data["inference"]["frames"]["image_patch_size"] == 14
        outs[bs] = [(r["idx"], r["response"]) for r in data["individual_results"]]
        assert all(r["frame_size"][0] % 28 == 0 and r["frame_size"][1] % 28 == 0 for r in data["individual_results"])
    assert outs["1"] == outs["4"] and all(text for _, text in outs["1"])
