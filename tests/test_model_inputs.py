"""What the model is actually given for one demo question (issue 14): the frames, their size and
the timestamps the Qwen3-VL processor derives from them, and the three prompt placements.

Uses the tiny random-weight Qwen3-VL (k9bench.tiny_model) on CPU; nothing is generated."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import eval_video_llm
from k9bench.data.dataset import load_questions
from k9bench.inference.backend import GenerationRequest
from k9bench.inference.runner import build_messages
from k9bench.inference.settings import config_from_namespace, resolve
from k9bench.prompts import load_prompt

FLAGS = ["--max_frames", "4", "--max_pixels", "16384", "--min_pixels", "2048", "--max_new_tokens", "8", "--greedy", "-q"]
TIMESTAMP = re.compile(r"<([0-9.]+) seconds>")


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    import torch

    from k9bench.inference.hf.backend import HFBackend
    from k9bench.tiny_model import build_tiny_qwen3vl

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    tiny = build_tiny_qwen3vl(tmp_path_factory.mktemp("tiny") / "qwen3vl", seed=0)
    config = resolve(config_from_namespace(eval_video_llm.build_parser().parse_args(["--model_name_or_path", str(tiny), *FLAGS])))
    hf = HFBackend(config)
    hf.load()
    yield hf
    hf.close()
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def question():
    return load_questions("demo").questions[0]


@pytest.fixture(scope="module")
def frames(backend, question, demo_video_dir: Path):
    from k9bench.video.sampling import sample

    return sample(demo_video_dir / question.video, fps=1.0, max_frames=4, max_pixels=16384, min_pixels=2048,
                  image_patch_size=backend.frame_patch_size())


def _inputs(backend, question, frames, placement="system"):
    system_prompt, _ = load_prompt("system_prompt")
    messages = build_messages(question.question, system_prompt, placement, True)
    prompt = backend.render_prompt(messages)
    return prompt, backend._inputs([GenerationRequest(key=question.idx, messages=messages, frames=frames)], [prompt])


def _timestamps(backend, input_ids) -> list[float]:
    return [float(t) for t in TIMESTAMP.findall(backend.processor.tokenizer.decode(input_ids))]


def test_processor_sees_our_frames_their_size_and_timestamps(backend, question, frames):
    patch = backend.frame_patch_size()
    temporal = backend.processor.video_processor.temporal_patch_size
    assert patch == 16 and temporal == 2
    # the sampler's choice: 4 frames of a 6 s, 24 fps video at 1 fps, resized within the pixel bounds
    assert frames.num_frames == 4 and frames.indices == [0, 48, 95, 143]
    assert (frames.height, frames.width) == (96, 128)
    assert 2048 <= frames.height * frames.width <= 16384 and frames.height % (2 * patch) == 0 == frames.width % (2 * patch)

    _, inputs = _inputs(backend, question, frames)
    t, h, w = inputs["video_grid_thw"][0].tolist()
    assert t * temporal == frames.num_frames  # every sampled frame reaches the model, none re-sampled
    assert (h * patch, w * patch) == (frames.height, frames.width)  # no second resize
    assert inputs["pixel_values_videos"].shape[0] == t * h * w

    # one timestamp per temporal patch: the mean time of its frames (source index / source fps)
    seen = _timestamps(backend, inputs["input_ids"][0])
    expected = [sum(frames.indices[i:i + temporal]) / temporal / frames.source_fps for i in range(0, frames.num_frames, temporal)]
    assert len(seen) == len(expected) == 2
    assert seen == pytest.approx(expected, abs=0.05)  # 1.0 s and 4.96 s, shown as "<1.0 seconds>", "<5.0 seconds>"
    assert seen == [1.0, 5.0]


def test_the_reference_call_without_metadata_gives_the_model_other_frames(backend, question, frames):
    """The reference hands the processor qwen-vl-utils' frames without their metadata (SPEC section 9):
    the processor then assumes 24 fps and samples the given frames again. Ours is the call above; this
    shows the difference that the README's "Reproducing the paper" section describes."""
    prompt, ours = _inputs(backend, question, frames)
    reference = backend.processor(text=[prompt], videos=[frames.video_tensor()], padding=True, return_tensors="pt")
    ref_t = reference["video_grid_thw"][0].tolist()[0]
    ours_t = ours["video_grid_thw"][0].tolist()[0]
    assert ref_t < ours_t  # fewer frames reach the model
    assert _timestamps(backend, reference["input_ids"][0]) != _timestamps(backend, ours["input_ids"][0])


def test_prompt_placements_as_rendered(backend, question, frames):
    system_prompt, _ = load_prompt("system_prompt")
    first_line = system_prompt.splitlines()[0]

    default, _ = _inputs(backend, question, frames, "system")
    assert default.startswith("<|im_start|>system\n" + first_line)

    # --use_system_message False: the reference's empty system turn; the model gets no instructions
    empty, _ = _inputs(backend, question, frames, "empty_system")
    assert empty.startswith("<|im_start|>system\n<|im_end|>") and first_line not in empty
    assert question.question in empty

    # --use_system_message False --instructions_in_user_turn: no system turn, instructions open the user turn
    user_turn, _ = _inputs(backend, question, frames, "user_turn")
    assert "<|im_start|>system" not in user_turn
    assert user_turn.index(first_line) < user_turn.index(question.question)
