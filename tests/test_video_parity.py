"""Parity with qwen-vl-utils itself (decord backend) and the metadata the Qwen3-VL processor needs.

Each case generates a clip, asks qwen-vl-utils' ``fetch_video`` for it the way the reference does,
and checks that ``k9bench.video.sampling.sample`` gives the same frame count, the same indices, the same
resized size, the same sample fps and metadata, and the same pixels (decord: identical; PyAV:
mean absolute difference within 1/255). The longer and larger clips are marked slow.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from k9bench.video.ffmpeg import make_video
from k9bench.video.sampling import PROCESSOR_VIDEO_KWARGS, sample

# Small, fast encodes: low bitrate keeps generation and decoding quick.
FAST = ["-b:v", "300k"]

CASES = {
    # name: (duration s, fps, width, height, extra ffmpeg args, slow)
    "short_24fps": (9, "24", 320, 240, FAST, False),
    "short_ntsc_portrait": (7, "30000/1001", 240, 432, FAST, False),
    "very_short_60fps": (3, "60", 256, 144, FAST, False),
    "bframes_25fps": (12, "25", 320, 180, [*FAST, "-bf", "3"], False),
    "mkv_30fps": (10, "30", 320, 240, FAST, False),
    "one_min_30fps": (75, "30", 480, 270, FAST, True),
    "two_min_60fps": (125, "60", 320, 180, FAST, True),
    "five_min_25fps": (300, "25", 320, 180, FAST, True),
    "portrait_ntsc_40s": (40, "30000/1001", 360, 640, FAST, True),
    "three_min_24fps": (190, "24", 426, 240, FAST, True),
    "hd1080_30fps": (12, "30", 1920, 1080, ["-b:v", "800k"], True),
}

ITEM = {"fps": 1.0, "max_frames": 32, "max_pixels": 360 * 420}


@pytest.fixture(scope="module")
def clip_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("parity_clips")


def _clip(clip_dir: Path, name: str) -> Path:
    duration, fps, w, h, extra, _ = CASES[name]
    suffix = ".mkv" if name.startswith("mkv") else ".mp4"
    path = clip_dir / f"{name}{suffix}"
    if not path.exists():
        make_video(path, duration=duration, fps=fps, width=w, height=h, extra_args=extra)
    return path


@pytest.fixture(scope="module")
def qwen_decord():
    """qwen-vl-utils' vision module, checked to read videos with decord (the reference's backend here)."""
    from qwen_vl_utils import vision_process as vp

    backend = vp.get_video_reader_backend()
    if backend != "decord":  # torchcodec installed or FORCE_QWENVL_VIDEO_READER set: pin decord
        vp.get_video_reader_backend.cache_clear()
        vp.FORCE_QWENVL_VIDEO_READER = "decord"
    assert vp.get_video_reader_backend() == "decord"
    return vp


def _params():
    return [pytest.param(name, marks=[pytest.mark.slow] if CASES[name][5] else [], id=name) for name in CASES]


@pytest.mark.parametrize("name", _params())
def test_parity_with_qwen_vl_utils(clip_dir, qwen_decord, name):
    path = _clip(clip_dir, name)
    (ref_video, ref_meta), ref_sample_fps = qwen_decord.fetch_video(
        {"video": str(path), **ITEM}, return_video_sample_fps=True, return_video_metadata=True
    )
    # qwen-vl-utils falls back to torchvision on a decord error: make sure it did not
    assert ref_meta["video_backend"] == "decord"

    ours = sample(path, decoder="decord", **ITEM)
    assert ours.num_frames == ref_video.shape[0]
    assert ours.indices == list(ref_meta["frames_indices"])
    assert (ours.height, ours.width) == tuple(ref_video.shape[-2:])
    assert ours.sample_fps == pytest.approx(ref_sample_fps, rel=1e-9)
    assert ours.processor_metadata() == {**ref_meta, "frames_indices": list(ref_meta["frames_indices"])}
    assert ours.frames.dtype == torch.uint8
    assert torch.equal(ours.frames.float(), ref_video)  # same decoder, same resize: identical

    other = sample(path, decoder="pyav", **ITEM)
    assert other.indices == ours.indices and other.total_frames == ours.total_frames
    assert other.source_fps == pytest.approx(ours.source_fps, rel=1e-6)
    assert other.frames.shape == ours.frames.shape
    mad = (other.frames.float() - ref_video).abs().mean().item()
    assert mad <= 1.0, f"PyAV frames differ from qwen-vl-utils by {mad:.3f}/255 on average"


@pytest.mark.parametrize("name", ["short_ntsc_portrait", pytest.param("hd1080_30fps", marks=pytest.mark.slow)])
def test_parity_at_qwen3_vl_patch_size(clip_dir, qwen_decord, name):
    """``image_patch_size=16`` (Qwen3-VL's): multiples of 32 and the 32-based pixel floor, as qwen-vl-utils."""
    path = _clip(clip_dir, name)
    ref_video, ref_meta = qwen_decord.fetch_video({"video": str(path), **ITEM}, image_patch_size=16, return_video_metadata=True)
    ours = sample(path, image_patch_size=16, **ITEM)
    assert ours.indices == list(ref_meta["frames_indices"])
    assert (ours.height, ours.width) == tuple(ref_video.shape[-2:])
    assert ours.height % 32 == 0 and ours.width % 32 == 0
    assert torch.equal(ours.video_tensor(), ref_video)


def test_portrait_and_short_rules_exercised(clip_dir):
    """The fast cases do cover the rules the issue names: portrait, fewer frames than max, even counts."""
    portrait = sample(_clip(clip_dir, "short_ntsc_portrait"))
    assert portrait.height > portrait.width
    assert portrait.num_frames == 6  # 7 s at 1 fps -> 7 -> floored to even
    assert sample(_clip(clip_dir, "very_short_60fps")).num_frames == 4  # the minimum


# --------------------------------------------------------------------------- processor


@pytest.fixture(scope="module")
def processor(tmp_path_factory):
    """A Qwen3-VL processor built offline: the tiny model's tokenizer and chat template, real classes."""
    from transformers import Qwen2VLImageProcessor, Qwen3VLProcessor, Qwen3VLVideoProcessor

    from k9bench.tiny_model import CHAT_TEMPLATE, build_tokenizer

    tokenizer = build_tokenizer(tmp_path_factory.mktemp("tok"))
    common = dict(patch_size=16, temporal_patch_size=2, merge_size=2, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    return Qwen3VLProcessor(
        image_processor=Qwen2VLImageProcessor(**common),
        tokenizer=tokenizer,
        video_processor=Qwen3VLVideoProcessor(**common, fps=2, min_frames=4, max_frames=768, cap_pixels_per_frame=True),
        chat_template=CHAT_TEMPLATE,
    )


def _messages(path: Path) -> list[dict]:
    return [
        {"role": "system", "content": "Watch the whole video."},
        {"role": "user", "content": [{"type": "video", "video": str(path), **ITEM}, {"type": "text", "text": "What moves?"}]},
    ]


def _timestamps(text: str) -> list[float]:
    return [float(x) for x in re.findall(r"<(\d+\.\d) seconds>", text)]


@pytest.mark.parametrize(
    "patch, extra, video_of",
    [
        # qwen-vl-utils' default patch 14: the processor resizes again (to multiples of 32), so it
        # must get the float frames the reference hands it
        (14, {}, lambda f: f.video_tensor()),
        # Qwen3-VL's patch 16: frames are already multiples of 32, no second resize; uint8 is fine
        (16, {"do_resize": False}, lambda f: f.frames),
    ],
    ids=["patch14_processor_resizes", "patch16_no_resize"],
)
def test_metadata_gives_the_processor_correct_timestamps(clip_dir, qwen_decord, processor, patch, extra, video_of):
    """Our frames and metadata render the same prompt, with the right timestamps, as the reference's."""
    from qwen_vl_utils import process_vision_info

    path = _clip(clip_dir, "bframes_25fps")  # 12 s at 25 fps: 12 frames, 6 temporal pairs
    messages = _messages(path)
    text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    # reference: qwen-vl-utils frames + metadata
    _, videos, video_kwargs = process_vision_info(
        messages, return_video_kwargs=True, return_video_metadata=True, image_patch_size=patch
    )
    ref_frames, ref_meta = videos[0]
    ref = processor(text=[text], videos=[ref_frames], video_metadata=[ref_meta], return_tensors="pt", **video_kwargs, **extra)

    # ours
    f = sample(path, image_patch_size=patch)
    ours = processor(
        text=[text], videos=[video_of(f)], video_metadata=[f.processor_metadata()], return_tensors="pt",
        **PROCESSOR_VIDEO_KWARGS, **extra,
    )
    assert torch.equal(ours["input_ids"], ref["input_ids"])
    assert torch.equal(ours["video_grid_thw"], ref["video_grid_thw"])
    assert torch.equal(ours["pixel_values_videos"], ref["pixel_values_videos"])

    rendered = processor.tokenizer.decode(ours["input_ids"][0])
    expected = [round((f.indices[i] + f.indices[i + 1]) / 2 / 25.0, 1) for i in range(0, f.num_frames, 2)]
    assert _timestamps(rendered) == expected
    # worked out by hand: indices round(linspace(0, 299, 12)), pairs averaged, / 25 fps
    assert f.indices == [0, 27, 54, 82, 109, 136, 163, 190, 217, 245, 272, 299]
    assert expected == [0.5, 2.7, 4.9, 7.1, 9.2, 11.4]

    # without the metadata the processor guesses 24 fps and frame positions: the prompt would be wrong
    bare = processor(text=[text], videos=[video_of(f)], return_tensors="pt", **PROCESSOR_VIDEO_KWARGS, **extra)
    assert _timestamps(processor.tokenizer.decode(bare["input_ids"][0])) != expected
