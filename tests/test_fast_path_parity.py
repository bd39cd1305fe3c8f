"""Issue 22's parity cases for the shared-prefix engine, Qwen2.5-VL and Qwen3-VL, float32, greedy, CPU:
token-identical to batch size 1 (``model.generate`` per question, as HFBackend.generate does it)

- a 300 s video (16 frames) with a two-word question: Qwen2.5-VL's temporal positions run far past the
  question's end there, so decoding from the prompt's largest position + 1 (transformers 4's rule, the
  engine before) differs from ``generate``'s last position + 1 from the second token on;
- rows that stop at very different steps (stop tokens chosen from the model's own greedy answers), with the
  stop check every 4 steps;
- batch sizes 1, 7 and 24 over two videos;
- and the layout itself: one prefix copy per video per batch, never one per question.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from k9bench.inference.backend import GenerationRequest
from k9bench.inference.prefix_cache import SharedPrefixEngine
from tests.test_prefix_cache import Loaded, messages

pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.slow]

WORDS = ("dog", "tail", "ball", "door", "bark", "sit", "run", "calm", "owner", "grass", "play", "sleep")


def questions(n: int) -> list[str]:
    """n short questions of 1-2 words and a few longer ones (deterministic)."""
    out = []
    for i in range(n):
        if i % 5 == 4:
            out.append(" ".join(WORDS[(i + k) % len(WORDS)] for k in range(9)) + "?")
        else:
            out.append(f"{WORDS[i % len(WORDS)].capitalize()} {WORDS[(3 * i + 1) % len(WORDS)]}?")
    return out


@pytest.fixture(scope="module")
def long_videos(tmp_path_factory) -> list[Path]:
    """A 300 s clip and a 40 s one, tiny frames at 1 fps (cheap to make and decode)."""
    from k9bench.video.ffmpeg import make_video

    folder = tmp_path_factory.mktemp("long")
    return [make_video(folder / "long300.mp4", duration=300, fps=1, width=64, height=48),
            make_video(folder / "short40.mp4", duration=40, fps=1, width=64, height=48, pattern="mandelbrot")]


@pytest.fixture(scope="module", params=["qwen2_5_vl", "qwen3_vl"])
def model(request, tmp_path_factory) -> Loaded:
    from k9bench.tiny_model import build_tiny

    return Loaded(build_tiny(request.param, tmp_path_factory.mktemp(request.param) / "m", seed=0))


def requests(model: Loaded, videos: list[Path], per_video: int, max_frames: int = 16) -> list[GenerationRequest]:
    from k9bench.video.sampling import sample

    out = []
    for v, path in enumerate(videos):
        frames = sample(path, fps=1.0, max_frames=max_frames, max_pixels=4096, min_pixels=1024, image_patch_size=model.patch)
        for q, text in enumerate(questions(per_video)):
            out.append(GenerationRequest(key=v * 100 + q, messages=messages(text, "system", True), frames=frames, video_path=str(path)))
    return out


def engine_answers(model: Loaded, reqs: list[GenerationRequest], batch_size: int, **kwargs) -> tuple[list[tuple], SharedPrefixEngine]:
    engine = SharedPrefixEngine(model.model, model.processor, model.gen, model.stop_ids, resize_in_processor=False, **kwargs)
    answers = []
    for i in range(0, len(reqs), batch_size):
        chunk = reqs[i:i + batch_size]
        answers += [(o.text, o.num_input_tokens, o.num_output_tokens, o.finish_reason, o.prompt)
                    for o in engine.generate(chunk, [model.render(r.messages) for r in chunk])]
    return answers, engine


def processor_inputs(model: Loaded, r: GenerationRequest):
    return model.processor(text=[model.render(r.messages)], videos=[r.frames.frames], video_metadata=[r.frames.processor_metadata()],
                           do_sample_frames=False, do_resize=False, return_tensors="pt")


def generated_ids(model: Loaded, r: GenerationRequest) -> list[int]:
    import torch

    inputs = processor_inputs(model, r)
    with torch.inference_mode():
        return model.model.generate(**inputs, generation_config=model.gen)[0, inputs["input_ids"].shape[1]:].tolist()


def test_long_video_two_word_question(model, long_videos):
    reqs = requests(model, long_videos[:1], 1)
    assert len(reqs[0].messages[-1]["content"][-1]["text"].split()) == 2 and reqs[0].frames.num_frames == 16
    if model.model.config.model_type == "qwen2_5_vl":  # the case that broke: the video's time axis runs past the question
        engine = SharedPrefixEngine(model.model, model.processor, model.gen, model.stop_ids, resize_in_processor=False)
        state = engine.prefill(engine.prepare(reqs, [model.render(reqs[0].messages)]).videos.popitem()[1])
        assert state.max_position > state.next_position + 20
    want = [model.reference(r) for r in reqs]
    for batch_size in (1, 2):
        have, _ = engine_answers(model, reqs * batch_size, batch_size)
        assert have == want * batch_size, f"batch size {batch_size}"


def test_batch_sizes_1_7_24(model, long_videos):
    reqs = requests(model, long_videos, 12, max_frames=8)
    want = [model.reference(r) for r in reqs]
    assert len({w[0] for w in want}) > 3
    for batch_size in (1, 7, 24):
        have, engine = engine_answers(model, reqs, batch_size)
        assert have == want, f"batch size {batch_size}"
        # each video's prefix copied into a batch once, not once per question
        assert engine.stats.prefix_copies == {1: 24, 7: 5, 24: 2}[batch_size]
        assert engine.stats.prefills == 2
    # at batch 24 the batch cache (two prefixes, 24 question slots) is smaller than 24 copies of one prefix alone
    prefix_bytes = next(iter(engine._states.values())).nbytes
    assert engine.stats.peak_cache_bytes < 24 * prefix_bytes
    # the questions' suffixes prefilled one slot at a time (a small attention budget): the same tokens
    chunked, engine = engine_answers(model, reqs, 24, prefill_elements=1)
    assert chunked == want


def test_rows_that_stop_at_very_different_steps(model, long_videos):
    reqs = requests(model, long_videos, 12, max_frames=8)
    free = [model.reference(r) for r in reqs]  # no stop token in 12 steps (random weights)
    assert {a[3] for a in free} == {"length"}
    # stop tokens taken from the answers at different steps: rows stop after 1 token, after 10, or never
    ids = [generated_ids(model, r) for r in (reqs[0], reqs[17])]
    stops = set(model.stop_ids) | {ids[0][0], ids[1][9]}
    stopping = model.with_generation(eos_token_id=sorted(stops))
    stopping.stop_ids = stops
    want = [stopping.reference(r) for r in reqs]
    lengths = {w[2] for w in want}
    assert min(lengths) == 1 and max(lengths) >= 10 and len(lengths) >= 3, lengths
    assert {w[3] for w in want} == {"stop", "length"}
    for batch_size, every in ((24, 4), (7, 1), (24, 16)):
        have, engine = engine_answers(stopping, reqs, batch_size, eos_check_every=every)
        assert have == want, f"batch size {batch_size}, stop check every {every}"


def test_the_old_position_rule_would_differ(model, long_videos):
    """Guard for the test above: decoding Qwen2.5-VL's long-video prompt from the largest position + 1
    (the engine before) gives other tokens than generate, so the two-word case really tests the rule."""
    import torch

    if model.model.config.model_type != "qwen2_5_vl":
        pytest.skip("Qwen3-VL's timestamps are text: the two rules agree")
    import inspect

    r = requests(model, long_videos[:1], 1)[0]
    good = generated_ids(model, r)
    inputs = processor_inputs(model, r)
    params = set(inspect.signature(model.model.model.get_rope_index).parameters) - {"input_ids"}
    with torch.inference_mode():
        pos, _ = model.model.model.get_rope_index(inputs["input_ids"], **{k: v for k, v in inputs.items() if k in params})
        n = inputs["input_ids"].shape[1]
        out = model.model(**inputs, use_cache=True)
        cache = getattr(out, "cache", None) or out.past_key_values
        token, old = out.logits[:, -1].argmax(-1), []
        for step in range(len(good)):
            old.append(int(token))
            p = torch.full((3, 1, 1), int(pos.max()) + 1 + step)
            text = torch.full((1, 1, 1), n + step)
            out = model.model(input_ids=token[:, None], position_ids=torch.cat([text, p]), cache=cache, use_cache=True)
            token = out.logits[:, -1].argmax(-1)
    assert int(pos.max()) > int(pos[0, 0, -1]) + 20 and old[0] == good[0] and old != good


def test_a_model_loaded_with_eager_attention_keeps_it_outside_the_engine(model, long_videos, tmp_path):
    """The engine's 4-D mask needs its own sdpa kernel (flash_attention_2 cannot take it): the kernel is switched
    for the engine's forwards only, recorded, and the model keeps its own kernel for generate."""
    import torch
    from transformers import AutoModelForImageTextToText

    eager = Loaded.__new__(Loaded)
    eager.__dict__.update(model.__dict__)
    eager.model = AutoModelForImageTextToText.from_pretrained(model.model.name_or_path, dtype=torch.float32,
                                                              attn_implementation="eager").eval()
    reqs = requests(eager, long_videos[:1], 3, max_frames=4)
    want = [eager.reference(r) for r in reqs]
    have, engine = engine_answers(eager, reqs, 3)
    assert have == want
    assert "(the model's own eager" in engine.describe()["decode_attention"]
    assert eager.model.config.get_text_config()._attn_implementation == "eager"
