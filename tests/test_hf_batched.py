"""The HF backend's batched path through eval_video_llm.py main(): ``generate`` over batches spanning videos (left
padding), prepared on the CPU ahead of the model (issue 13; the shared-prefix engine these tests once checked was
retired in issue 36, and every answer check moved here, onto batched ``generate``).

Parity: on CPU with the tiny Qwen3-VL in float32 and greedy decoding, an explicit --batch_size larger than
one video's question count (the demo set has 4 per video) gives token-identical answers to --batch_size 1
(the reference's generate path) for every question, with short videos under a 32-frame budget, text-only
mode and a Thinking template too.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

import eval_video_llm
from k9bench.inference.hf.batching import DEFAULT_MAX_AUTO_BATCH
from k9bench.inference.runner import EXIT_OK
from k9bench.tiny_model import build_tiny_qwen3vl

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return build_tiny_qwen3vl(tmp_path_factory.mktemp("tiny") / "qwen3vl", seed=0)


def run(model: Path, video_dir: Path, out: Path, *extra: str) -> dict:
    args = ["--model_name_or_path", str(model), "--dataset_name", "demo", "--video_dir", str(video_dir),
            "--max_pixels", "16384", "--min_pixels", "2048", "--max_new_tokens", "8", "--greedy",
            "--output_file", str(out), "-q", *extra]
    if "--max_frames" not in extra:
        args += ["--max_frames", "4"]
    assert eval_video_llm.main(args) == EXIT_OK
    return json.loads(out.read_text(encoding="utf-8"))


def answers(data: dict) -> dict:
    keys = ("response", "num_input_tokens", "num_output_tokens", "finish_reason", "prompt", "num_frames", "error")
    return {r["idx"]: tuple(r.get(k) for k in keys) for r in data["individual_results"]}


def check_parity(model: Path, video_dir: Path, tmp_path: Path, *extra: str, batch: str = "7") -> dict:
    single = run(model, video_dir, tmp_path / "b1.json", "--batch_size", "1", *extra)
    fast = run(model, video_dir, tmp_path / "fast.json", "--batch_size", batch, *extra)
    assert len(single["individual_results"]) == 12 and single["failed_count"] == 0
    assert answers(fast) == answers(single)
    assert single["run_stats"]["prepare"] is None  # batch size 1: the reference's generate, video by video
    stats = fast["run_stats"]
    assert stats["batch_size"]["batch_size"] == int(batch) and stats["batch_size"]["reason"] == "given"
    assert stats["batch_fallbacks"] == 0  # every batch answered by one batched generate, none rerun
    assert stats["prepare"]["prepared"] == -(-12 // int(batch)) and stats["prepare"]["wait_seconds"] >= 0
    assert fast["inference"]["backend"]["padding_side"] == "left"
    return fast


def test_default_on_cpu_is_batch_size_1_recorded(tiny, demo_video_dir, tmp_path):
    data = run(tiny, demo_video_dir, tmp_path / "auto.json", "--max_samples", "2")
    assert data["inference"]["batch_size"] == "auto"
    choice = data["run_stats"]["batch_size"]
    assert choice["requested"] == "auto" and choice["batch_size"] == 1 and "CPU" in choice["reason"]
    assert data["run_stats"]["prepare"] is None  # the video-by-video path


def test_cross_video_batches_match_batch_size_1(tiny, demo_video_dir, tmp_path, monkeypatch):
    from k9bench.inference.hf.backend import HFBackend

    sizes = []
    original = HFBackend.run_prepared
    monkeypatch.setattr(HFBackend, "run_prepared", lambda self, prepared: sizes.append(len(prepared.requests)) or original(self, prepared))
    check_parity(tiny, demo_video_dir, tmp_path)
    assert sizes == [7, 5]  # 3 videos x 4 questions: one batch spans videos 1-2 (the second one split), the next the rest


@pytest.mark.slow
def test_short_videos_with_fewer_frames_than_the_budget(tiny, demo_video_dir, tmp_path):
    fast = check_parity(tiny, demo_video_dir, tmp_path, "--max_frames", "32", batch="12")
    frames = {r["num_frames"] for r in fast["individual_results"]}
    assert max(frames) < 32 and len(frames) > 1


@pytest.mark.slow
def test_text_only_mode(tiny, demo_video_dir, tmp_path):
    fast = check_parity(tiny, demo_video_dir, tmp_path, "--max_frames", "0", batch="5")
    assert all(r["num_frames"] == 0 for r in fast["individual_results"])


@pytest.mark.slow
def test_thinking_model(tiny, demo_video_dir, tmp_path):
    folder = tmp_path / "thinking"
    shutil.copytree(tiny, folder)
    template = folder / "chat_template.jinja"
    text = template.read_text(encoding="utf-8")
    template.write_text(text.replace("enable_thinking is defined and enable_thinking is true", "true"), encoding="utf-8")
    fast = check_parity(folder, demo_video_dir, tmp_path, "--thinking_mode", "--max_new_tokens", "8", batch="12")
    assert all(r["prompt"].endswith("<think>\n") for r in fast["individual_results"])


def test_failed_video_then_resume(tiny, demo_video_dir, tmp_path):
    """A missing video gives failed records inside cross-video batches; the same command, once the video
    is there, retries them and the file equals the batch-size-1 run."""
    videos = tmp_path / "videos"
    shutil.copytree(demo_video_dir, videos)
    missing = sorted(videos.glob("*.mp4"))[1]
    held = tmp_path / missing.name
    missing.rename(held)
    out = tmp_path / "fast.json"
    first = run(tiny, videos, out, "--batch_size", "6")
    failed = [r for r in first["individual_results"] if r.get("error")]
    assert len(failed) == 4 and {r["error_class"] for r in failed} == {"missing_video"}
    assert all(missing.name in r["error"] for r in failed)
    held.rename(missing)
    again = run(tiny, videos, out, "--batch_size", "6")
    assert again["failed_count"] == 0 and again["run_stats"]["resumed"] == 8
    single = run(tiny, videos, tmp_path / "b1.json", "--batch_size", "1")
    assert answers(again) == answers(single)


def test_out_of_memory_halves_the_batch_and_keeps_the_answers(tiny, demo_video_dir, tmp_path, monkeypatch):
    import torch

    from k9bench.inference.hf.backend import HFBackend

    original = HFBackend.run_prepared
    calls = []

    def failing_once(self, prepared):
        calls.append(len(prepared.requests))
        if len(calls) == 1:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return original(self, prepared)

    monkeypatch.setattr(HFBackend, "run_prepared", failing_once)
    single = run(tiny, demo_video_dir, tmp_path / "b1.json", "--batch_size", "1")
    fast = run(tiny, demo_video_dir, tmp_path / "fast.json", "--batch_size", "8")
    assert answers(fast) == answers(single)
    choice = fast["run_stats"]["batch_size"]
    assert choice["batch_size"] == 4 and choice["history"] == [[8, "given"], [4, "out of memory"]]
    assert fast["run_stats"]["batch_fallbacks"] == 1 and calls[0] == 8


def test_auto_batch_size_on_a_gpu_follows_free_memory(tiny, monkeypatch):
    """``--batch_size auto`` on a GPU: the memory rule over the loaded model's config (the free memory faked)."""
    import torch

    from k9bench.inference.hf.backend import HFBackend
    from k9bench.inference.settings import RunConfig, resolve

    backend = HFBackend(resolve(RunConfig(model=dataclasses.replace(RunConfig().model, model_name_or_path=str(tiny)))))
    backend.load()
    backend.device = "cuda:0"  # the rule only; nothing runs on it
    free = {"bytes": 8 * 2**30}
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free["bytes"], 80 * 2**30))
    big = backend.choose_batch_size("auto", questions=4744, max_frames=32, max_pixels=360 * 420)
    assert big.requested == "auto" and 1 < big.batch_size <= DEFAULT_MAX_AUTO_BATCH and big.inputs["free_bytes"] == 8 * 2**30
    assert big.inputs["prompt_tokens"] > 32 // 2 * 100  # 16 temporal pairs of ~100+ tokens each, plus text
    # each row holds its whole prompt: the batch is what the free memory holds at that many bytes a row
    free["bytes"] = int(5 * big.inputs["row_bytes"] / 0.85) + 1
    assert backend.choose_batch_size("auto", questions=4744, max_frames=32, max_pixels=360 * 420).batch_size == 5
    free["bytes"] = 2**20
    assert backend.choose_batch_size("auto", questions=4744, max_frames=32, max_pixels=360 * 420).batch_size == 1
    free["bytes"] = 8 * 2**30
    capped = backend.choose_batch_size("auto", questions=3, max_frames=32, max_pixels=360 * 420)
    assert capped.batch_size == 3 and big.batch_size > 3
    given = backend.choose_batch_size(6, questions=4744, max_frames=32, max_pixels=None)
    assert (given.batch_size, given.reason) == (6, "given")
    backend.close()


def test_audio_with_a_model_that_cannot_hear_is_refused_at_load(tiny, demo_video_dir, tmp_path, capfd):
    out = tmp_path / "raw.json"
    capfd.readouterr()
    # refused from the model's config.json before anything loads: bad input, exit 2
    assert eval_video_llm.main(["--model_name_or_path", str(tiny), "--dataset_name", "demo", "--video_dir", str(demo_video_dir),
                                "--max_frames", "4", "--output_file", str(out), "-q", "--audio"]) == 2
    err = capfd.readouterr().err
    assert "--audio" in err and "qwen3_vl" in err and not out.exists()


def test_sigterm_between_cross_video_batches_then_resume(tiny, demo_video_dir, tmp_path, monkeypatch):
    import os
    import signal

    from k9bench.layout import checkpoint_path
    from k9bench.inference.hf.backend import HFBackend
    from k9bench.inference.runner import EXIT_INTERRUPTED

    original = HFBackend.run_prepared
    calls = []

    def stop_at_second(self, prepared):
        calls.append(len(prepared.requests))
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGTERM)
        return original(self, prepared)

    out = tmp_path / "fast.json"
    argv = ["--model_name_or_path", str(tiny), "--dataset_name", "demo", "--video_dir", str(demo_video_dir), "--max_frames", "4",
            "--max_pixels", "16384", "--min_pixels", "2048", "--max_new_tokens", "8", "--greedy", "--output_file", str(out), "-q",
            "--batch_size", "5"]
    with monkeypatch.context() as m:
        m.setattr(HFBackend, "run_prepared", stop_at_second)
        assert eval_video_llm.main(argv) == EXIT_INTERRUPTED
    kept = [json.loads(line) for line in checkpoint_path(out).read_text(encoding="utf-8").splitlines() if line.strip()]
    assert len(kept) == 5 and not out.exists()  # the first batch is safe, nothing of the interrupted one
    assert eval_video_llm.main(argv) == EXIT_OK
    again = json.loads(out.read_text(encoding="utf-8"))
    assert again["run_stats"]["resumed"] == 5
    single = run(tiny, demo_video_dir, tmp_path / "b1.json", "--batch_size", "1")
    assert answers(again) == answers(single)


INTERNALS = ("_get_logits_processor", "_attn_implementation", "lazy_initialization", "cumulative_length", "get_rope_index",
             "_hf_hook", "_update_model_kwargs_for_generation", "_prepare_cache_for_generation")
"""transformers' (and accelerate's) internals the retired shared-prefix engine leaned on (issue 36)."""


def test_the_package_uses_no_private_attribute_of_transformers():
    """No module of the package names one of transformers' internals: the explicit list above, and every single-underscore
    attribute of the classes a backend touches (models, configs, generation, processors, caches)."""
    import re

    from transformers import GenerationConfig, GenerationMixin, PretrainedConfig, PreTrainedModel, ProcessorMixin
    from transformers.cache_utils import Cache, DynamicCache, StaticCache

    names = set(INTERNALS)
    for cls in (PreTrainedModel, PretrainedConfig, GenerationMixin, GenerationConfig, ProcessorMixin, Cache, DynamicCache, StaticCache):
        names |= {n for n in dir(cls) if n.startswith("_") and not n.startswith("__")}
    assert "_attn_implementation" in names and len(names) > 50
    pattern = re.compile(r"""(?:\.|["'])(""" + "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True)) + r""")\b""")
    package = Path(__file__).resolve().parent.parent / "k9bench"
    found = {f"{p.relative_to(package.parent)}: {m.group(1)}" for p in package.rglob("*.py") for m in pattern.finditer(p.read_text())}
    assert not found, sorted(found)
