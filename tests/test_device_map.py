"""A model across devices (issue 22, item 1) and every floating --torch_dtype name (issue 24, item 3).

On a CPU the split is between the CPU and the disk (accelerate offloads a layer's weights to
``offload_folder`` and loads them for each forward): the tiny Qwen3-VL placed that way answers
exactly as on one device, through ``generate`` (batch size 1) and through the shared-prefix engine
(a larger batch), and the raw file says where each layer went.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import eval_video_llm
from k9bench.models import accelerator as acc
from k9bench.inference.runner import EXIT_OK
from k9bench.tiny_model import build_tiny_qwen3vl

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SPLIT = {"model.visual": "cpu", "model.language_model.embed_tokens": "cpu", "model.language_model.layers.0": "cpu",
         "model.language_model.layers.1": "disk", "model.language_model.norm": "cpu", "model.language_model.rotary_emb": "cpu",
         "lm_head": "cpu"}


# --------------------------------------------------------------------------- units


def test_device_map_values():
    assert acc.parse_device_map("auto") == "auto" and acc.parse_device_map("balanced_low_0") == "balanced_low_0"
    assert acc.parse_device_map('{"model.visual": 0, "lm_head": "cuda:1", "x": "disk", "y": "1"}') == {
        "model.visual": 0, "lm_head": "cuda:1", "x": "disk", "y": 1}
    for bad in ("everywhere", "[1, 2]", "{}", '{"lm_head": "tpu"}', '{"lm_head": -1}'):
        with pytest.raises(acc.AcceleratorError, match="--device_map"):
            acc.parse_device_map(bad)


def test_max_memory_values():
    assert acc.parse_max_memory("0=40GiB,cpu=2GiB") == {0: "40GiB", "cpu": "2GiB"}
    assert acc.parse_max_memory('{"cpu": "200MB", "0": "40GiB", "cuda:1": 1000}') == {"cpu": "200MB", 0: "40GiB", 1: "1000"}
    for bad in ("", "cpu", "cpu=lots", '{"gpu": "1GB"}', "[1]"):
        with pytest.raises(acc.AcceleratorError, match="--max_memory"):
            acc.parse_max_memory(bad)
    assert acc.placement_gpus({"a": 0, "b": "cuda:2", "c": "cpu"}, {1: "1GB", "cpu": "1GB"}) == [0, 1, 2]


def test_placement_is_checked_against_the_visible_gpus(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert acc.resolve_placement("auto", None) == "cpu"
    assert acc.resolve_placement(dict(SPLIT), {"cpu": "1GB"}) == "cpu"
    with pytest.raises(acc.AcceleratorError, match="GPU 1 but 0 CUDA"):
        acc.resolve_placement({"lm_head": 1}, None)


@pytest.mark.parametrize("argv, message", [
    (["--device_map", "everywhere"], "--device_map 'everywhere'"),
    (["--max_memory", "cpu=lots"], "size 'lots'"),
])
def test_bad_flags_exit_2(argv, message, capsys):
    assert eval_video_llm.main(["--dataset_name", "demo", *argv]) == 2
    assert message in capsys.readouterr().err


def test_every_floating_torch_dtype_name_is_accepted():
    import torch

    floating = {n for n in dir(torch) if isinstance(getattr(torch, n, None), torch.dtype) and getattr(torch, n).is_floating_point}
    assert floating == set(acc.DTYPE_NAMES)
    for name in floating:
        choice = acc.resolve_dtype(name, "cpu")
        assert choice.torch_dtype() is getattr(torch, name) and choice.requested == name and choice.explicit
    assert acc.resolve_dtype("half", "cpu").name == "float16" and "half (= float16)" in acc.resolve_dtype("half", "cpu").reason
    assert acc.resolve_dtype("double", "cpu").name == "float64"
    with pytest.raises(acc.AcceleratorError):
        acc.resolve_dtype("int8", "cpu")


# --------------------------------------------------------------------------- end to end (tiny model)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return build_tiny_qwen3vl(tmp_path_factory.mktemp("tiny") / "qwen3vl", seed=0)


def run(model: Path, video_dir: Path, out: Path, *extra: str) -> dict:
    args = ["--model_name_or_path", str(model), "--dataset_name", "demo", "--video_dir", str(video_dir), "--max_frames", "4",
            "--max_pixels", "16384", "--min_pixels", "2048", "--max_new_tokens", "8", "--greedy", "--output_file", str(out), "-q",
            *extra]
    assert eval_video_llm.main(args) == EXIT_OK
    return json.loads(out.read_text(encoding="utf-8"))


def answers(data: dict) -> dict:
    keys = ("response", "num_input_tokens", "num_output_tokens", "finish_reason", "prompt", "error")
    return {r["idx"]: tuple(r.get(k) for k in keys) for r in data["individual_results"]}


@pytest.mark.slow
def test_model_split_between_cpu_and_disk_answers_as_on_one_device(tiny, demo_video_dir, tmp_path):
    single = run(tiny, demo_video_dir, tmp_path / "one.json", "--batch_size", "1")
    assert single["inference"]["backend"]["placement"] is None and single["failed_count"] == 0
    split_map = json.dumps(SPLIT)
    for batch in ("1", "7"):
        split = run(tiny, demo_video_dir, tmp_path / f"split{batch}.json", "--batch_size", batch, "--device_map", split_map)
        assert answers(split) == answers(single), f"batch size {batch}"
        backend = split["inference"]["backend"]
        assert backend["device_map"] == SPLIT
        assert backend["placement"]["layers_per_device"]["model.language_model.layers"] == {"cpu": 1, "disk": 1}
        assert backend["placement"]["layers_per_device"]["model.visual.blocks"] == {"cpu": 2}
        assert backend["placement"]["modules_per_device"] == {"cpu": 6, "disk": 1}
        assert backend["offload_folder"] and not Path(backend["offload_folder"]).exists()  # removed at close
    stats = split["run_stats"]  # batched generate ran on the split model, no batch rerun
    assert stats["prepare"]["prepared"] == 2 and stats["batch_fallbacks"] == 0


@pytest.mark.slow
def test_auto_with_max_memory_offloads_and_answers_the_same(tiny, demo_video_dir, tmp_path):
    single = run(tiny, demo_video_dir, tmp_path / "one.json", "--batch_size", "1", "--max_samples", "4")
    auto = run(tiny, demo_video_dir, tmp_path / "auto.json", "--batch_size", "1", "--max_samples", "4",
               "--device_map", "auto", "--max_memory", "cpu=600KB")
    assert answers(auto) == answers(single)
    backend = auto["inference"]["backend"]
    assert backend["device_map"] == "auto" and backend["max_memory"] == {"cpu": "600KB"}
    assert "disk" in backend["placement"]["modules_per_device"]  # 600 KB of a ~1 MB model: the rest went to disk
    assert auto["inference"]["backend_settings"]["max_memory"] == '{"cpu": "600KB"}'


@pytest.mark.slow
@pytest.mark.parametrize("flags, message", [
    (["--max_memory", "cpu=1GB"], "--max_memory needs --device_map"),
    (["--device", "cpu", "--device_map", "auto"], "--device cpu and --device_map auto: give one of them"),
])
def test_placement_flags_that_cannot_mean_one_thing_are_refused_before_loading(flags, message, tiny, demo_video_dir, tmp_path,
                                                                               capsys, monkeypatch):
    from transformers import AutoModelForImageTextToText

    def no_load(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(AutoModelForImageTextToText, "from_pretrained", no_load)
    code = eval_video_llm.main(["--model_name_or_path", str(tiny), "--dataset_name", "demo", "--video_dir", str(demo_video_dir),
                                *flags, "--output_file", str(tmp_path / "x.json"), "-q"])
    assert code != EXIT_OK and message in capsys.readouterr().err and not (tmp_path / "x.json").exists()


@pytest.mark.slow
def test_torch_dtype_alias_is_used_and_recorded(tiny, demo_video_dir, tmp_path):
    data = run(tiny, demo_video_dir, tmp_path / "double.json", "--batch_size", "1", "--max_samples", "1", "--torch_dtype", "double")
    backend = data["inference"]["backend"]
    assert backend["dtype"] == "float64" and backend["dtype_requested"] == "double"
    assert backend["dtype_reason"] == "--torch_dtype double (= float64)"
    assert data["failed_count"] == 0
