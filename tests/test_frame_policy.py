"""k9bench.video.policy: the frame and audio handling chosen by the processor's type."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

from k9bench.video.audio import Audio
from k9bench.video.policy import FramePolicy, policy_for
from k9bench.video.sampling import Frames


def _fake(name: str, **attrs):
    """An instance of a class called ``name`` with ``attrs`` (the policy reads only types and attributes)."""
    return type(name, (), dict(attrs))()


def _processor(name="SomeProcessor", video=None, feature_extractor=None, omni=False):
    attrs = {"video_processor": video}
    if feature_extractor is not None:
        attrs["feature_extractor"] = feature_extractor
    if omni:
        attrs["load_audio_from_video"] = False
    return _fake(name, **attrs)


def _frames(n=4, h=56, w=56, fps=10.0, step=10) -> Frames:
    pixels = torch.zeros((n, 3, h, w), dtype=torch.uint8)
    return Frames(frames=pixels, indices=[i * step for i in range(n)], source_fps=fps, total_frames=n * step,
                  sample_fps=fps / step, height=h, width=w, duration=n * step / fps, decoder="pyav")


QWEN3_VP = _fake("Qwen3VLVideoProcessor", patch_size=16, merge_size=2, size={"shortest_edge": 1024, "longest_edge": 65536})
INTERNVL_VP = _fake("InternVLVideoProcessor", size={"height": 448, "width": 448})
WHISPER = _fake("WhisperFeatureExtractor", sampling_rate=16000, n_samples=300 * 16000)


def test_qwen_style_processor_keeps_our_resize_and_passes_metadata():
    policy = policy_for(_processor("Qwen3VLProcessor", QWEN3_VP))
    assert policy.rule == "qwen_vl_rules" and policy.image_patch_size == 16
    assert policy.sampling_overrides() == {"image_patch_size": 16}
    assert policy.audio_sampling_rate is None and not policy.fps_keyword
    f = _frames(h=64, w=96)
    kw = policy.processor_kwargs([f])
    assert kw["videos"][0].dtype == torch.uint8 and kw["do_resize"] is False and kw["do_sample_frames"] is False
    assert kw["video_metadata"] == [f.processor_metadata()]
    assert "fps" not in kw and "audio" not in kw
    with pytest.raises(ValueError, match="multiples of 32"):
        policy.processor_kwargs([_frames(h=56, w=56)])  # sampled for patch 14, not 16


def test_fixed_size_processor_gets_exact_frames_without_metadata():
    policy = policy_for(_processor("InternVLProcessor", INTERNVL_VP))
    assert policy.rule == "fixed_size" and policy.frame_size == (448, 448)
    assert policy.recommended_max_frames == 32  # InternVL3.5's evaluation setting
    assert policy.sampling_overrides() == {"frame_size": (448, 448)}
    kw = policy.processor_kwargs([_frames(h=448, w=448)])
    assert kw["do_resize"] is False and "video_metadata" not in kw
    with pytest.raises(ValueError, match="448x448"):
        policy.processor_kwargs([_frames(h=448, w=336)])


def test_decision_follows_the_processor_type_not_the_model_name():
    # the same Qwen-style video processor inside any processor gets the same rule
    a = policy_for(_processor("AnyNameProcessor", QWEN3_VP))
    b = policy_for(_processor("Qwen3VLProcessor", QWEN3_VP))
    assert (a.rule, a.image_patch_size) == (b.rule, b.image_patch_size)
    # a fixed size only counts for video processors known to resize to it
    other = policy_for(_processor("P", _fake("OtherVideoProcessor", size={"height": 448, "width": 448})))
    assert other.rule == "processor_resizes"


def test_unknown_video_processor_resizes_itself_with_a_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="k9bench.video.policy"):
        policy = policy_for(_processor("P", _fake("OddVideoProcessor", patch_size=14, merge_size=3)))
    assert policy.rule == "processor_resizes" and "no known frame rule" in caplog.text
    assert policy.sampling_overrides() == {}
    kw = policy.processor_kwargs([_frames()])
    assert kw["videos"][0].dtype == torch.float32 and "do_resize" not in kw and "video_metadata" in kw


def test_processor_without_video():
    policy = policy_for(_fake("TextOnlyProcessor", tokenizer=None))
    assert policy.video_processor_class is None
    with pytest.raises(ValueError, match="takes no video"):
        policy.processor_kwargs([_frames()])


def test_omni_processor_takes_audio_in_video_and_one_fps():
    vp = _fake("Qwen2VLVideoProcessor", patch_size=14, merge_size=2)
    policy = policy_for(_processor("Qwen2_5OmniProcessor", vp, WHISPER, omni=True))
    assert policy.rule == "qwen_vl_rules" and policy.image_patch_size == 14
    assert policy.audio_sampling_rate == 16000 and policy.audio_window_seconds == 300.0
    assert policy.audio_in_video and policy.fps_keyword
    frames = [_frames(), _frames()]
    audio = [Audio(samples=np.zeros(16000, np.float32), sampling_rate=16000, path=f"v{i}.mp4") for i in range(2)]
    kw = policy.processor_kwargs(frames, audio)
    assert kw["fps"] == pytest.approx(1.0) and kw["sampling_rate"] == 16000
    assert kw["audio_from_video_indices"] == [0, 1] and kw["load_audio_from_video"] is True
    assert [a.shape for a in kw["audio"]] == [(16000,), (16000,)]
    assert policy.generate_kwargs(with_audio=True) == {"use_audio_in_video": True}
    assert policy.generate_kwargs(with_audio=False) == {}
    with pytest.raises(ValueError, match="one fps per call"):
        policy.processor_kwargs([_frames(fps=10.0), _frames(fps=25.0)])
    with pytest.raises(ValueError, match="24000 Hz"):
        policy.processor_kwargs(frames[:1], [Audio(samples=np.zeros(8, np.float32), sampling_rate=24000, path="x.mp4")])
    with pytest.raises(ValueError, match="2 soundtracks for 1 videos"):
        policy.processor_kwargs(frames[:1], audio)


def test_audio_to_a_processor_without_feature_extractor_is_refused():
    policy = policy_for(_processor("Qwen3VLProcessor", QWEN3_VP))
    with pytest.raises(ValueError, match="takes no audio"):
        policy.processor_kwargs([_frames(h=64, w=64)], [Audio(samples=np.zeros(8, np.float32), sampling_rate=16000, path="a.mp4")])


def test_feature_extractor_without_omni_mixin_takes_standalone_audio():
    vp = _fake("Qwen2VLVideoProcessor", patch_size=14, merge_size=2)
    policy = policy_for(_processor("SomeAudioProcessor", vp, WHISPER))
    assert policy.audio_sampling_rate == 16000 and not policy.audio_in_video
    kw = policy.processor_kwargs([_frames()], [Audio(samples=np.zeros(8, np.float32), sampling_rate=16000, path="a.mp4")])
    assert "load_audio_from_video" not in kw and len(kw["audio"]) == 1
    assert policy.generate_kwargs(with_audio=True) == {}


def test_summary_is_json_safe():
    import json

    policy = policy_for(_processor("InternVLProcessor", INTERNVL_VP))
    data = json.loads(json.dumps(policy.summary()))
    assert data["frame_size"] == [448, 448] and data["rule"] == "fixed_size"
    assert set(data) == set(FramePolicy.__dataclass_fields__)


def test_real_tiny_processors(tmp_path):
    """The tiny families' real processors get the expected rules (processors only, no model needed)."""
    from transformers import AutoProcessor

    from k9bench.tiny_model import build_tiny

    path = build_tiny("internvl", tmp_path / "ivl")
    policy = policy_for(AutoProcessor.from_pretrained(path))
    assert (policy.rule, policy.frame_size, policy.recommended_max_frames) == ("fixed_size", (56, 56), 32)
