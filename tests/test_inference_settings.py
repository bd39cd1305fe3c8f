"""eval_video_llm.py's typed settings (issue 12): flags generated from frozen dataclasses, each
default defined once, engines built from the config, the raw file's ``inference`` block as the
settings were run; and the prompt placements of issue 14 as they reach the backend and the file."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

import eval_video_llm
from k9bench.layout import checkpoint_path
from k9bench.inference.runner import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from k9bench.inference.settings import (
    FrameSettings,
    GenerationSettings,
    RunConfig,
    config_from_namespace,
    resolve,
    sections,
    settings_docs,
)
from k9bench.settings import default_of
from tests.test_inference_units import use_backend  # noqa: F401 (fixture)
from tests.test_inference_units import FakeBackend, args_for, records

REPO = Path(__file__).resolve().parent.parent


def config_of(*argv: str) -> RunConfig:
    return resolve(config_from_namespace(eval_video_llm.build_parser().parse_args(list(argv))))


def test_frame_defaults_are_the_video_modules_own(use_backend, demo_video_dir, tmp_path):
    """A run without frame flags samples exactly what k9bench.video.sampling.sample does by default (the flags' defaults
    are the video module's, not a copy that could drift)."""
    from k9bench.video.sampling import sample

    use_backend(FakeBackend())
    out = tmp_path / "raw.json"
    argv = ["--dataset_name", "demo", "--video_dir", str(demo_video_dir), "--max_samples", "5", "--output_file", str(out), "-q"]
    assert eval_video_llm.main(argv) == EXIT_OK
    seen = set()
    for rec in records(out).values():
        if rec["scene_name"] in seen:
            continue
        seen.add(rec["scene_name"])
        # every sampling setting at the module's default; the patch size is the backend's (FakeBackend: 16)
        frames = sample(demo_video_dir / rec["video"], image_patch_size=16)
        assert rec["frame_indices"] == list(frames.indices) and rec["frame_size"] == [frames.height, frames.width]
        assert rec["sample_fps"] == frames.sample_fps and rec["video_decoder"] == frames.decoder
    assert len(seen) == 2


def test_no_namespace_below_main(use_backend, demo_video_dir, tmp_path, monkeypatch):
    """The stage runs from a RunConfig made in code: nothing below the front end parses flags or needs a Namespace."""
    import argparse

    from k9bench.inference.settings import DataSettings, OutputSettings
    from k9bench.inference.stage import InferenceStage
    from k9bench.stage import run_stage

    def no_parsing(*args, **kwargs):
        raise AssertionError("a command line was parsed below the front end")

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", no_parsing)
    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", no_parsing)
    use_backend(FakeBackend())
    out = tmp_path / "raw.json"
    config = resolve(RunConfig(data=DataSettings(dataset_name="demo", video_dir=str(demo_video_dir), max_samples=2),
                               frames=FrameSettings(max_frames=4, max_pixels=16384, min_pixels=2048),
                               output=OutputSettings(output_file=str(out))))
    assert run_stage(InferenceStage(config)) == EXIT_OK
    data = json.loads(out.read_text())
    assert len(data["individual_results"]) == 2 and data["provenance"]["args"]["max_frames"] == 4
    assert data["stage"]["fingerprint"] == InferenceStage(config).fingerprint()


def test_config_is_built_once_and_derived_values_come_by_replace():
    config = config_from_namespace(eval_video_llm.build_parser().parse_args([]))
    assert config.generation.max_new_tokens is None
    resolved = resolve(config)
    assert resolved.generation.max_new_tokens == 2048 and config.generation.max_new_tokens is None  # the original is untouched
    assert resolve(config_from_namespace(eval_video_llm.build_parser().parse_args(["--thinking_mode"]))).generation.max_new_tokens == 3072
    with pytest.raises(dataclasses.FrozenInstanceError):
        resolved.generation.seed = 3  # type: ignore[misc]
    # --frame_size raises the default --max_pixels (recorded), an explicit one is kept
    adjusted = config_of("--backend", "openai", "--frame_size", "512x512")
    assert adjusted.frames.max_pixels == 2 * 512 * 512 and set(adjusted.adjustments) == {"max_pixels"}
    kept = config_of("--backend", "openai", "--frame_size", "512x512", "--max_pixels", "1000000")
    assert kept.frames.max_pixels == 1000000 and kept.adjustments == {}


def test_every_flag_is_a_settings_field():
    parser = eval_video_llm.build_parser()
    fields = {f.name for cls in sections().values() for f in dataclasses.fields(cls)}
    dests = {a.dest for a in parser._actions if a.option_strings and a.dest not in ("help", "verbose", "quiet")}
    assert dests <= fields, dests - fields
    assert default_of(GenerationSettings, "do_sample") is None


@pytest.mark.parametrize("placement_flags, placement, roles", [
    ([], "system", ["system", "user"]),
    (["--use_system_message", "False"], "empty_system", ["system", "user"]),
    (["--use_system_message", "False", "--instructions_in_user_turn"], "user_turn", ["user"]),
])
def test_prompt_placement_reaches_the_backend_and_the_file(use_backend, demo_video_dir, tmp_path, placement_flags, placement, roles):
    from k9bench.prompts import load_prompt, sha256

    use_backend(FakeBackend())
    out = tmp_path / "raw.json"
    assert eval_video_llm.main(args_for(demo_video_dir, out, "--max_samples", "2", *placement_flags)) == EXIT_OK
    data = json.loads(out.read_text())
    text, _ = load_prompt("system_prompt")
    for rec in data["individual_results"]:
        messages = json.loads(rec["prompt"])
        assert [m["role"] for m in messages] == roles
        user_text = messages[-1]["content"][-1]["text"]
        if placement == "system":
            assert messages[0]["content"][0]["text"] == text and user_text == rec["question"]
        elif placement == "empty_system":  # the reference's --use_system_message False: no instructions at all
            assert messages[0]["content"] == [{"type": "text", "text": ""}] and user_text == rec["question"]
        else:
            assert user_text == f"{text}\n\n{rec['question']}"
        assert rec["run_settings"].get("prompt_placement", "system") == placement
    prompt = data["inference"]["prompt"]
    assert prompt["placement"] == placement
    assert prompt["system_prompt_source"] == "builtin:system_prompt" and prompt["system_prompt_sha256"] == sha256(text)


def test_instructions_in_user_turn_needs_use_system_message_false(use_backend, demo_video_dir, tmp_path, capfd):
    use_backend(FakeBackend())
    capfd.readouterr()
    assert eval_video_llm.main(args_for(demo_video_dir, tmp_path / "raw.json", "--instructions_in_user_turn")) == EXIT_USAGE
    assert "--use_system_message False" in capfd.readouterr().err and not (tmp_path / "raw.json").exists()


def test_resume_refuses_another_placement_and_reads_older_records(use_backend, demo_video_dir, tmp_path, capfd):
    out = tmp_path / "raw.json"
    use_backend(FakeBackend(signal_after=2))
    assert eval_video_llm.main(args_for(demo_video_dir, out, "--max_samples", "4", "--use_system_message", "False")) == EXIT_INTERRUPTED
    part = checkpoint_path(out)
    backend = use_backend(FakeBackend())
    capfd.readouterr()
    assert eval_video_llm.main(args_for(demo_video_dir, out, "--max_samples", "4", "--use_system_message", "False",
                                        "--instructions_in_user_turn")) == EXIT_USAGE
    assert "prompt_placement" in capfd.readouterr().err and backend.answered == 0
    # a record written before the empty system turn existed (no prompt_placement, use_system_message False)
    # had its instructions in the user turn: the new --use_system_message False does not resume from it
    rec = json.loads(part.read_text().splitlines()[0])
    del rec["run_settings"]["prompt_placement"]
    part.write_text(json.dumps(rec) + "\n")
    assert eval_video_llm.main(args_for(demo_video_dir, out, "--max_samples", "4", "--use_system_message", "False")) == EXIT_USAGE
    assert eval_video_llm.main(args_for(demo_video_dir, out, "--max_samples", "4", "--use_system_message", "False",
                                        "--instructions_in_user_turn")) == EXIT_OK
    assert backend.answered == 3


def test_inference_block_is_the_settings_as_run(use_backend, demo_video_dir, tmp_path):
    use_backend(FakeBackend())
    out = tmp_path / "raw.json"
    assert eval_video_llm.main(args_for(demo_video_dir, out, "--max_samples", "1", "--seed", "5")) == EXIT_OK
    block = json.loads(out.read_text())["inference"]
    config = config_of(*args_for(demo_video_dir, out, "--max_samples", "1", "--seed", "5"))
    assert block["model"] == dataclasses.asdict(config.model)
    assert block["backend_settings"] == dataclasses.asdict(config.hf)
    assert {k: block[k] for k in dataclasses.asdict(config.generation)} == dataclasses.asdict(config.generation)
    assert dataclasses.asdict(config.frames).items() <= block["frames"].items()
    assert dataclasses.asdict(config.prompt).items() <= block["prompt"].items()
    assert block["seed"] == 5 and block["max_new_tokens"] == 2048 and block["dataset"]["split"] == "test"
    # every key of every section is documented by its field's help
    docs = settings_docs()
    for section, cls in sections().items():
        assert set(docs[section]) == {f.name for f in dataclasses.fields(cls)}
        assert all(docs[section].values()), section


def test_weights_settings_are_one_shared_section_every_weights_loading_backend_reads():
    """dtype, bf16 and trust_remote_code are the shared model section (issue 36): the transformers and vLLM backends read
    ``config.model``, the hf section holds only transformers' own flags, and the report reads the dtype asked from there."""
    from k9bench.inference.hf.settings import HFSettings
    from k9bench.inference.settings import WEIGHTS_FIELDS, ModelSettings
    from k9bench.report.load import inference_dtype_and_batch

    config = config_of("--torch_dtype", "float16", "--trust_remote_code", "--bf16", "False")
    assert (config.model.torch_dtype, config.model.trust_remote_code, config.model.bf16) == ("float16", True, False)
    hf_fields = {f.name for f in dataclasses.fields(HFSettings)}
    assert set(WEIGHTS_FIELDS) <= {f.name for f in dataclasses.fields(ModelSettings)} and not set(WEIGHTS_FIELDS) & hf_fields
    block = {"model": dataclasses.asdict(config.model), "backend_settings": dataclasses.asdict(config.hf)}
    assert inference_dtype_and_batch(block, {}) == ("float16", None)
    assert inference_dtype_and_batch({"backend_settings": {"torch_dtype": "bfloat16"}}, {}) == ("bfloat16", None)  # an older file


@pytest.mark.parametrize("argv, ignored", [
    (["--tensor_parallel", "2"], "--tensor_parallel (for --backend vllm): not read by --backend hf, ignored"),
    (["--gpu_memory_utilization", "0.5", "--concurrency", "4"],
     "--concurrency (for --backend openai); --gpu_memory_utilization (for --backend vllm): not read by --backend hf, ignored"),
    (["--backend", "vllm", "--attn_implementation", "eager"], "--attn_implementation (for --backend hf): not read by --backend vllm, ignored"),
    (["--backend", "openai", "--enforce_eager", "--base_url", "http://127.0.0.1:9/v1", "--bf16"],
     "--enforce_eager (for --backend vllm); --bf16 (for a backend that loads the weights here): not read by --backend openai, ignored"),
    (["--backend", "vllm", "--torch_dtype", "float16"], None),  # the shared weights section: every weights-loading backend reads it
])
def test_flags_another_backend_reads_are_named_by_one_rule(argv, ignored):
    """Issue 40: flags that do not apply to the chosen backend are named, from the registry's rows, for every backend."""
    from k9bench.inference.settings import inapplicable_flags

    assert inapplicable_flags(config_of(*argv)) == ignored


def test_flags_another_backend_reads_are_warned_and_recorded(use_backend, demo_video_dir, tmp_path, capfd):
    use_backend(FakeBackend())
    out = tmp_path / "raw.json"
    capfd.readouterr()
    assert eval_video_llm.main(args_for(demo_video_dir, out, "--max_samples", "1", "--tensor_parallel", "2", "--concurrency", "3")) == EXIT_OK
    line = "--concurrency (for --backend openai); --tensor_parallel (for --backend vllm): not read by --backend hf, ignored"
    assert line in capfd.readouterr().err
    assert json.loads(out.read_text())["inference"]["ignored_flags"] == line


def test_api_model_with_a_backend_that_loads_weights_is_refused(use_backend, demo_video_dir, tmp_path, capfd):
    """Issue 40: ``--backend hf --api_model OTHER`` loaded OTHER silently; now one line, exit 2, nothing loaded."""
    backend = use_backend(FakeBackend())
    out = tmp_path / "raw.json"
    capfd.readouterr()
    assert eval_video_llm.main(args_for(demo_video_dir, out, "--api_model", "other/model")) == EXIT_USAGE
    err = capfd.readouterr().err
    assert "--api_model other/model" in err and "--model_name_or_path" in err and "Traceback" not in err
    assert not backend.calls and not out.exists()
    # equal to --model_name_or_path, in either order: accepted (and nothing else changes)
    for argv in (["--model_name_or_path", "m/x", "--api_model", "m/x"], ["--api_model", "m/x", "--model_name_or_path", "m/x"]):
        config = config_of(*argv)
        assert (config.model.model_name_or_path, config.openai.api_model) == ("m/x", "m/x")
    # --backend openai: --api_model names the run when --model_name_or_path is not given
    assert config_of("--backend", "openai", "--base_url", "http://127.0.0.1:9/v1", "--api_model", "gpt-4o").model.model_name_or_path == "gpt-4o"


def test_every_numeric_flag_has_its_range_checked_by_the_parser():
    """Issue 40: one mechanism, the field's ``type=`` a :mod:`k9bench.validators` range function (or the batch size's own),
    never a bare int/float; out-of-range values are refused at parse time (exit 2)."""
    import k9bench.validators as validators
    from k9bench.inference.settings import batch_size_value

    checked = {getattr(validators, n) for n in dir(validators) if callable(getattr(validators, n))} | {batch_size_value}
    numeric = []
    for action in eval_video_llm.build_parser()._actions:
        number = isinstance(action.default, (int, float)) and not isinstance(action.default, bool)
        if action.option_strings and action.nargs != 0 and (action.type in (int, float) or number or getattr(action.type, "__module__", "") == validators.__name__
                                      and action.type.__name__.startswith(("int_", "positive", "non_negative", "unit", "fraction", "all_or"))):
            numeric.append(action.option_strings[0])
            assert action.type is not None and action.type not in (int, float), f"{action.option_strings[0]}: no range check"
            assert action.type in checked or action.type.__module__ == validators.__name__, action.option_strings[0]
    assert {"--max_samples", "--gpu_memory_utilization", "--tensor_parallel", "--seed", "--concurrency"} <= set(numeric)
    for argv in (["--max_samples", "-5"], ["--max_samples", "0"], ["--tensor_parallel", "0"], ["--top_p", "1.5"],
                 ["--gpu_memory_utilization", "0"]):
        with pytest.raises(SystemExit) as exc:
            eval_video_llm.build_parser().parse_args(argv)
        assert exc.value.code == 2, argv
    with pytest.raises(Exception):
        validators.fraction("0")
    assert validators.fraction("1") == 1.0
