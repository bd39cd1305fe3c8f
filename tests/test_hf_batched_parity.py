"""The HF backend's batched ``generate`` against its batch size 1 (the reference's path), Qwen2.5-VL and Qwen3-VL,
float32, greedy, CPU: token-identical answers, prompt token counts, stop reasons and prompts (issue 36: every answer
check of the retired shared-prefix engine, from issues 13 and 22, moved onto batched ``generate``).

- a 300 s video (16 frames) with a two-word question: Qwen2.5-VL's temporal positions run far past the question's
  end there (the case that once broke the engine);
- batch sizes 1, 7 and 24 over a long and a short video: prompts of different lengths in one batch, left-padded;
- rows that stop at very different steps (stop tokens chosen from the model's own greedy answers);
- the demo set: repetition penalty and an n-gram ban, sampling at top-k 1, short videos under a 32-frame budget,
  the other system-prompt placements, text only, a Thinking template.

The requests go through the backend's own ``prepare_batch``/``run_prepared`` (batched) and ``generate`` (one each).
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from k9bench.inference.backend import GenerationRequest
from k9bench.inference.planning import build_messages

pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.slow]

WORDS = ("dog", "tail", "ball", "door", "bark", "sit", "run", "calm", "owner", "grass", "play", "sleep")
SYSTEM = "Answer with one letter."


def questions(n: int) -> list[str]:
    """n short questions of 1-2 words and a few longer ones (deterministic)."""
    out = []
    for i in range(n):
        if i % 5 == 4:
            out.append(" ".join(WORDS[(i + k) % len(WORDS)] for k in range(9)) + "?")
        else:
            out.append(f"{WORDS[i % len(WORDS)].capitalize()} {WORDS[(3 * i + 1) % len(WORDS)]}?")
    return out


def backend_for(path: Path, **generation):
    """The HF backend on CPU in float32, greedy, 12 new tokens (``generation``: more generation-config settings)."""
    from k9bench.inference.hf.backend import HFBackend
    from k9bench.inference.settings import RunConfig, resolve

    base = RunConfig()
    config = resolve(dataclasses.replace(base, model=dataclasses.replace(base.model, model_name_or_path=str(path)),
                                         generation=dataclasses.replace(base.generation, max_new_tokens=12, do_sample=False)))
    backend = HFBackend(config)
    backend.load()
    if generation:
        backend.generation_config.update(**generation)
    return backend


def sampled(backend, path: Path, max_frames: int, fps: float = 1.0, max_pixels: int = 4096, min_pixels: int = 1024):
    from k9bench.video.sampling import sample

    return sample(path, fps=fps, max_frames=max_frames, max_pixels=max_pixels, min_pixels=min_pixels,
                  image_patch_size=backend.frame_patch_size())


def request(key: int, text: str, frames, path: Path | None, placement: str = "system") -> GenerationRequest:
    return GenerationRequest(key=key, messages=build_messages(text, SYSTEM, placement, frames is not None), frames=frames,
                             video_path=str(path) if path else None)


def answer(o) -> tuple:
    return (o.text, o.num_input_tokens, o.num_output_tokens, o.finish_reason, o.prompt)


def generated_ids(backend, r: GenerationRequest) -> list[int]:
    import torch

    inputs = backend._to_device(backend._cpu_inputs([r], [backend.render_prompt(r.messages)]))
    with torch.inference_mode():
        return backend.model.generate(**inputs, generation_config=backend.generation_config)[0, inputs["input_ids"].shape[1]:].tolist()


def one_by_one(backend, reqs: list[GenerationRequest]) -> list[tuple]:
    return [answer(backend.generate([r])[0]) for r in reqs]


def batched(backend, reqs: list[GenerationRequest], batch_size: int) -> list[tuple]:
    out = []
    for i in range(0, len(reqs), batch_size):
        out += [answer(o) for o in backend.run_prepared(backend.prepare_batch(reqs[i:i + batch_size]))]
    return out


def check_parity(backend, reqs: list[GenerationRequest], batch_sizes=(5, 12)) -> list[tuple]:
    want = one_by_one(backend, reqs)
    assert len({w[0] for w in want}) > 1, "the tiny model should give varied answers"
    for batch_size in batch_sizes:
        have = batched(backend, reqs, batch_size)
        for r, w, h in zip(reqs, want, have):
            assert h == w, f"idx {r.key}, batch size {batch_size}"
    return want


# --------------------------------------------------------------------------- long videos (issue 22's cases)


@pytest.fixture(scope="module")
def long_videos(tmp_path_factory) -> list[Path]:
    """A 300 s clip and a 40 s one, tiny frames at 1 fps (cheap to make and decode)."""
    from k9bench.video.ffmpeg import make_video

    folder = tmp_path_factory.mktemp("long")
    return [make_video(folder / "long300.mp4", duration=300, fps=1, width=64, height=48),
            make_video(folder / "short40.mp4", duration=40, fps=1, width=64, height=48, pattern="mandelbrot")]


@pytest.fixture(scope="module", params=["qwen2_5_vl", "qwen3_vl"])
def model(request, tmp_path_factory):
    from k9bench.tiny_model import build_tiny

    backend = backend_for(build_tiny(request.param, tmp_path_factory.mktemp(request.param) / "m", seed=0))
    yield backend
    backend.close()


def long_requests(backend, videos: list[Path], per_video: int, max_frames: int = 16) -> list[GenerationRequest]:
    out = []
    for v, path in enumerate(videos):
        frames = sampled(backend, path, max_frames)
        out += [request(v * 100 + q, text, frames, path) for q, text in enumerate(questions(per_video))]
    return out


def test_long_video_two_word_question(model, long_videos):
    reqs = long_requests(model, long_videos[:1], 1)
    assert len(reqs[0].messages[-1]["content"][-1]["text"].split()) == 2 and reqs[0].frames.num_frames == 16
    want = one_by_one(model, reqs)
    short = long_requests(model, long_videos[1:], 1)
    for batch in (reqs * 2, reqs + short):  # the same question twice; beside a shorter prompt (left padding)
        assert batched(model, batch, len(batch))[0] == want[0]


def test_batch_sizes_1_7_24(model, long_videos):
    reqs = long_requests(model, long_videos, 12, max_frames=8)
    check_parity(model, reqs, batch_sizes=(1, 7, 24))


def test_rows_that_stop_at_very_different_steps(model, long_videos):
    reqs = long_requests(model, long_videos, 12, max_frames=8)
    free = one_by_one(model, reqs)  # no stop token in 12 steps (random weights)
    assert {a[3] for a in free} == {"length"}
    # stop tokens taken from the answers at different steps: rows stop after 1 token, after 10, or never
    ids = [generated_ids(model, r) for r in (reqs[0], reqs[17])]
    stops = sorted(set(model._stop_ids) | {ids[0][0], ids[1][9]})
    saved = (model.generation_config.eos_token_id, set(model._stop_ids))
    model.generation_config.eos_token_id, model._stop_ids = stops, set(stops)
    try:
        want = check_parity(model, reqs, batch_sizes=(24, 7))
    finally:
        model.generation_config.eos_token_id, model._stop_ids = saved
    lengths = {w[2] for w in want}
    assert min(lengths) == 1 and max(lengths) >= 10 and len(lengths) >= 3 and {w[3] for w in want} == {"stop", "length"}, lengths


# --------------------------------------------------------------------------- the demo set (issue 13's cases)


@pytest.fixture(scope="module")
def tiny_qwen3(tmp_path_factory) -> Path:
    from k9bench.tiny_model import build_tiny_qwen3vl

    return build_tiny_qwen3vl(tmp_path_factory.mktemp("pc") / "qwen3vl", seed=0)


@pytest.fixture(scope="module")
def qwen3(tiny_qwen3):
    backend = backend_for(tiny_qwen3)
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def demo_questions():
    from k9bench.data.dataset import load_questions

    return load_questions("demo", "train").questions


def demo_requests(backend, qs, video_dir: Path | None, max_frames: int, placement: str = "system") -> list[GenerationRequest]:
    """One request per demo question; each video sampled once, as the runner does."""
    frames: dict = {}
    out = []
    for q in qs:
        path = video_dir / q.video if video_dir is not None else None
        if path is not None and q.scene_name not in frames:
            frames[q.scene_name] = sampled(backend, path, max_frames, max_pixels=16384, min_pixels=2048)
        out.append(request(q.idx, q.question, frames.get(q.scene_name) if path else None, path, placement))
    return out


def test_cross_video_batches_match_batch_size_1(qwen3, demo_questions, demo_video_dir):
    check_parity(qwen3, demo_requests(qwen3, demo_questions, demo_video_dir, max_frames=4), batch_sizes=(5, 12))


def test_logits_processors_as_generate_applies_them(tiny_qwen3, demo_questions, demo_video_dir):
    """A repetition penalty and an n-gram ban (they read the whole sequence, padding excluded), and sampling with top-k 1."""
    for settings in (dict(repetition_penalty=1.3, no_repeat_ngram_size=2), dict(do_sample=True, temperature=0.7, top_k=1, top_p=0.8)):
        backend = backend_for(tiny_qwen3, **settings)
        check_parity(backend, demo_requests(backend, demo_questions, demo_video_dir, max_frames=4), batch_sizes=(12,))
        backend.close()


def test_short_videos_with_fewer_frames_than_the_budget(qwen3, demo_questions, demo_video_dir):
    reqs = demo_requests(qwen3, demo_questions, demo_video_dir, max_frames=32)
    assert all(r.frames.num_frames < 32 for r in reqs)  # 5-8 s clips at 1 fps
    assert len({r.frames.num_frames for r in reqs}) > 1  # prompts of different lengths share batches
    check_parity(qwen3, reqs, batch_sizes=(7,))


@pytest.mark.parametrize("placement", ["empty_system", "user_turn"])
def test_other_system_prompt_placements(qwen3, demo_questions, demo_video_dir, placement):
    check_parity(qwen3, demo_requests(qwen3, demo_questions[:6], demo_video_dir, max_frames=4, placement=placement), batch_sizes=(6,))


def test_text_only_mode(qwen3, demo_questions):
    check_parity(qwen3, demo_requests(qwen3, demo_questions, None, max_frames=0), batch_sizes=(5, 12))


def test_thinking_template(tiny_qwen3, demo_questions, demo_video_dir, tmp_path):
    """A Thinking-style template opens <think> after the assistant turn."""
    folder = tmp_path / "thinking"
    shutil.copytree(tiny_qwen3, folder)
    template = folder / "chat_template.jinja"
    text = template.read_text(encoding="utf-8")
    template.write_text(text.replace("enable_thinking is defined and enable_thinking is true", "true"), encoding="utf-8")
    backend = backend_for(folder)
    reqs = demo_requests(backend, demo_questions, demo_video_dir, max_frames=4)
    assert backend.render_prompt(reqs[0].messages).endswith("<|im_start|>assistant\n<think>\n")
    check_parity(backend, reqs, batch_sizes=(12,))
    backend.close()


def test_qwen2_5_vl_demo(demo_questions, demo_video_dir, tmp_path):
    from k9bench.tiny_model import build_tiny_qwen2_5vl

    backend = backend_for(build_tiny_qwen2_5vl(tmp_path / "qwen25", seed=0))
    check_parity(backend, demo_requests(backend, demo_questions, demo_video_dir, max_frames=4), batch_sizes=(12,))
    backend.close()
