"""Every tiny family builds offline, loads with the Auto classes and generates greedily on CPU
from frames sampled by k9bench.video, handed over the way k9bench.video.policy says."""

from __future__ import annotations

import pytest

from k9bench.video.ffmpeg import make_video
from k9bench.video.policy import policy_for
from k9bench.models.families import FAMILIES, tiny_names
from k9bench.tiny_model import build_tiny, main
from k9bench.video.cache import FrameCache, SamplingSettings

pytestmark = pytest.mark.slow  # each family builds a model (a second or two) and generates on CPU

EXPECTED = {
    # family: (model class, processor class, frame rule)
    "qwen3_vl": ("Qwen3VLForConditionalGeneration", "Qwen3VLProcessor", "qwen_vl_rules"),
    "qwen2_5_vl": ("Qwen2_5_VLForConditionalGeneration", "Qwen2_5_VLProcessor", "qwen_vl_rules"),
    "internvl": ("InternVLForConditionalGeneration", "InternVLProcessor", "fixed_size"),
    "qwen2_5_omni": ("Qwen2_5OmniThinkerForConditionalGeneration", "Qwen2_5OmniProcessor", "qwen_vl_rules"),
    "qwen3_omni": ("Qwen3OmniMoeThinkerForConditionalGeneration", "Qwen3OmniMoeProcessor", "qwen_vl_rules"),
}

MESSAGES = [
    {"role": "system", "content": [{"type": "text", "text": "Answer in JSON."}]},
    {"role": "user", "content": [{"type": "video"}, {"type": "text", "text": "What does the dog do?"}]},
]


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    d = tmp_path_factory.mktemp("family_clips")
    return {
        "a": make_video(d / "a.mp4", duration=4, fps=10, width=160, height=120, audio="sine"),
        "b": make_video(d / "b.mp4", duration=6, fps=10, width=128, height=96, pattern="mandelbrot", audio="noise"),
    }


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    """family -> (processor, model, policy), each built once for the module."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    out = {}

    def get(family):
        if family not in out:
            path = build_tiny(family, tmp_path_factory.mktemp(family) / "model", seed=0)
            processor = AutoProcessor.from_pretrained(path)
            model = AutoModelForImageTextToText.from_pretrained(path)
            out[family] = (processor, model, policy_for(processor))
        return out[family]

    return get


def _generate(processor, model, policy, frames, audio=None, max_new_tokens=8):
    import torch

    text = processor.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    inputs = processor(text=[text] * len(frames), padding=True, return_tensors="pt", **policy.processor_kwargs(frames, audio))
    with torch.inference_mode():
        out = model.generate(**inputs, **policy.generate_kwargs(with_audio=audio is not None),
                             max_new_tokens=max_new_tokens, do_sample=False)
    return inputs, out[:, inputs["input_ids"].shape[1]:].tolist()


@pytest.mark.parametrize("family", list(EXPECTED))
def test_family_builds_loads_and_generates(family, loaded, clips):
    processor, model, policy = loaded(family)
    model_class, processor_class, rule = EXPECTED[family]
    assert type(model).__name__ == model_class and type(processor).__name__ == processor_class
    assert policy.rule == rule
    cache = FrameCache(SamplingSettings(max_frames=8, **policy.sampling_overrides()))
    frames = cache.get(clips["a"])
    if rule == "fixed_size":
        assert (frames.height, frames.width) == policy.frame_size == (56, 56)
    inputs, outs = _generate(processor, model, policy, [frames])
    _, again = _generate(processor, model, policy, [frames])
    assert outs == again and len(outs[0]) == 8
    assert inputs["input_ids"].shape[1] > 20


@pytest.mark.parametrize("family", list(EXPECTED))
def test_batch_of_two_matches_one_at_a_time(family, loaded, clips):
    """Greedy output of a left-padded batch equals each video alone (same frame rate, so one fps)."""
    processor, model, policy = loaded(family)
    cache = FrameCache(SamplingSettings(max_frames=4, **policy.sampling_overrides()))
    frames = [cache.get(clips["a"]), cache.get(clips["b"])]
    frames[1] = frames[1] if not policy.fps_keyword else cache.get(clips["a"])  # the Omni processor takes one fps
    _, batched = _generate(processor, model, policy, frames, max_new_tokens=6)
    single = [_generate(processor, model, policy, [f], max_new_tokens=6)[1][0] for f in frames]
    assert batched == single


# audio tokens for the 4 s clip: Qwen2.5-Omni's encoder halves the 10 ms mel frames twice (400 -> 100);
# Qwen3-Omni's cuts them into 1 s chunks of 100 and downsamples each to 13 (4 x 13 = 52)
@pytest.mark.parametrize("family, window, n_tokens", [("qwen2_5_omni", 300.0, 100), ("qwen3_omni", None, 52)])
def test_omni_takes_the_soundtrack_as_audio_in_video(loaded, clips, family, window, n_tokens):
    processor, model, policy = loaded(family)
    assert policy.audio_sampling_rate == 16000 and policy.audio_in_video and policy.fps_keyword
    assert policy.audio_window_seconds == window  # Qwen2.5-Omni pads/cuts to 300 s, Qwen3-Omni keeps all
    cache = FrameCache(SamplingSettings(max_frames=8, **policy.sampling_overrides()))
    frames = cache.get(clips["a"])
    audio = cache.get_audio(clips["a"], policy.audio_sampling_rate)
    with_audio, outs = _generate(processor, model, policy, [frames], [audio])
    without, _ = _generate(processor, model, policy, [frames])
    audio_id = processor.tokenizer.convert_tokens_to_ids("<|AUDIO|>")
    n_audio_tokens = int((with_audio["input_ids"] == audio_id).sum())
    assert n_audio_tokens == n_tokens
    assert int(with_audio["feature_attention_mask"].sum()) == 400  # 4 s of 10 ms mel frames
    assert with_audio["input_ids"].shape[1] == without["input_ids"].shape[1] + n_audio_tokens + 2  # + audio_bos/eos
    assert len(outs[0]) == 8


def test_cli_accepts_every_family_and_alias(tmp_path, capsys):
    assert set(tiny_names().values()) <= set(FAMILIES) and "qwen2_5omni" in tiny_names()
    assert main([str(tmp_path / "ivl"), "--family", "internvl"]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "ivl")
    assert (tmp_path / "ivl" / "chat_template.jinja").is_file() or (tmp_path / "ivl" / "processor_config.json").is_file()
    with pytest.raises(SystemExit):
        main([str(tmp_path / "x"), "--family", "llava"])


def test_unknown_family_is_a_value_error(tmp_path):
    with pytest.raises(ValueError, match="unknown family"):
        build_tiny("llava", tmp_path / "x")
