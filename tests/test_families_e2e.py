"""The other model families end to end through eval_video_llm.py main() (issue 17): a tiny InternVL
(transformers-native, fixed-size frames) and a tiny Qwen2.5-Omni thinker (audio-in-video), built offline by
``k9bench.tiny_model --family``, on the demo set: greedy answers of cross-video batches equal batch size 1,
a failed video is retried on resume, and the raw file has the layout of the Qwen3-VL runs.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import eval_video_llm
from k9bench.inference.runner import EXIT_OK
from k9bench.tiny_model import build_tiny

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    built: dict[str, Path] = {}

    def get(family: str) -> Path:
        if family not in built:
            built[family] = build_tiny(family, tmp_path_factory.mktemp(family) / "model", seed=0)
        return built[family]

    return get


def run(model: Path, video_dir: Path, out: Path, *extra: str) -> dict:
    args = ["--model_name_or_path", str(model), "--dataset_name", "demo", "--video_dir", str(video_dir),
            "--max_frames", "4", "--max_pixels", "16384", "--min_pixels", "2048", "--max_new_tokens", "6", "--greedy",
            "--output_file", str(out), "-q", *extra]
    assert eval_video_llm.main(args) == EXIT_OK
    return json.loads(out.read_text(encoding="utf-8"))


def answers(data: dict) -> dict:
    keys = ("response", "num_input_tokens", "num_output_tokens", "frame_size", "num_frames", "error_class", "audio_used")
    return {r["idx"]: tuple(r.get(k) for k in keys) for r in data["individual_results"]}


def layout(data: dict) -> tuple:
    """Top-level keys, and the keys of an answered record."""
    answered = next(r for r in data["individual_results"] if not r.get("error"))
    return tuple(sorted(data)), tuple(sorted(answered))


@pytest.fixture(scope="module")
def qwen3_layout(model, demo_video_dir, tmp_path_factory) -> tuple:
    out = tmp_path_factory.mktemp("qwen3") / "raw.json"
    return layout(run(model("qwen3_vl"), demo_video_dir, out, "--max_samples", "2"))


@pytest.mark.parametrize("family, model_class, rule", [
    ("internvl", "InternVLForConditionalGeneration", "fixed_size"),
    ("qwen2_5_omni", "Qwen2_5OmniThinkerForConditionalGeneration", "qwen_vl_rules"),
])
def test_family_end_to_end(family, model_class, rule, model, demo_video_dir, qwen3_layout, tmp_path):
    path = model(family)
    single = run(path, demo_video_dir, tmp_path / "b1.json", "--batch_size", "1")
    backend = single["inference"]["backend"]
    assert backend["model_class"] == model_class and backend["frame_policy"]["rule"] == rule
    assert single["failed_count"] == 0 and len(single["individual_results"]) == 12
    if rule == "fixed_size":  # InternVL: every frame at the processor's fixed size
        size = backend["frame_policy"]["frame_size"]
        assert all(r["frame_size"] == size for r in single["individual_results"])

    # cross-video batches (batched generate) give the same answers
    videos = tmp_path / "videos"
    shutil.copytree(demo_video_dir, videos)
    held = videos / "demoVid0002.mp4"
    held.rename(tmp_path / held.name)
    out = tmp_path / "batched.json"
    first = run(path, videos, out, "--batch_size", "12")
    assert first["failures_by_class"] == {"missing_video": 4}
    assert first["run_stats"]["prepare"]["prepared"] == 1 and first["run_stats"]["batch_fallbacks"] == 0  # one batch of 8
    (tmp_path / held.name).rename(held)
    again = run(path, videos, out, "--batch_size", "12")  # resume: the failed records are retried
    assert again["run_stats"]["resumed"] == 8 and again["failed_count"] == 0
    assert answers(again) == answers(single)
    assert layout(single) == layout(again) == qwen3_layout


def test_omni_thinker_hears_the_soundtrack(model, av_video_dir, tmp_path):
    path = model("qwen2_5_omni")
    single = run(path, av_video_dir, tmp_path / "b1.json", "--audio", "--batch_size", "1")
    assert Path(single["provenance"]["args"]["output_file"]).name == "b1.json"
    records = single["individual_results"]
    silent = [r for r in records if r["scene_name"] == "demoVid0003"]
    assert all(r["error_class"] == "no_audio_stream" and "demoVid0003.mp4" in r["error"] for r in silent) and len(silent) == 4
    heard = [r for r in records if r["scene_name"] != "demoVid0003"]
    assert all(r["audio_used"] and r["audio"]["sampling_rate"] == 16000 for r in heard)
    assert {r["scene_name"]: round(r["audio"]["duration"]) for r in heard} == {"demoVid0001": 6, "demoVid0002": 5}
    # the soundtrack reaches the model: the prompt is longer than without it (audio tokens in the video)
    plain = run(path, av_video_dir, tmp_path / "plain.json", "--batch_size", "1")
    by_idx = {r["idx"]: r for r in plain["individual_results"]}
    assert all(r["num_input_tokens"] > by_idx[r["idx"]]["num_input_tokens"] for r in heard)
    assert all(r["audio_used"] is False for r in plain["individual_results"])
    batched = run(path, av_video_dir, tmp_path / "batched.json", "--audio", "--batch_size", "12")
    assert answers(batched) == answers(single)
    assert single["inference"]["backend"]["audio"] is True
    assert batched["run_stats"]["prepare"]["prepared"] == 1 and batched["run_stats"]["batch_fallbacks"] == 0
