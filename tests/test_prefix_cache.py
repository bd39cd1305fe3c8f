"""The shared video prefix (k9bench.inference.prefix_cache): token-identical greedy answers to batch size 1.

The reference is what the HF backend does for one question: the processor on the whole prompt with
the video (frames as k9bench.video.sampling.sample gives them, no second resize), then ``model.generate``.
The engine answers the same 12 demo questions in batches that span videos, each video prefilled
once; responses, token counts and finish reasons must be equal, on CPU in float32 with the tiny
random models (Qwen3-VL, Qwen2.5-VL, a Thinking-style template), with a frame budget larger than
the short demo videos hold, with every system-prompt placement, and in text-only mode.
"""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

import pytest

from k9bench.inference.backend import GenerationRequest
from k9bench.inference.prefix_cache import PrefixCacheError, SharedPrefixEngine, split_shared_prefix, unsupported_reason

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SYSTEM = "You are an expert in dog behaviour. Watch the video and answer the question."
MAX_NEW_TOKENS = 12


def messages(question: str, placement: str, with_video: bool) -> list[dict]:
    """The runner's chat layout: system turn (or none), then the video and the question."""
    user: list[dict] = [{"type": "video"}] if with_video else []
    user.append({"type": "text", "text": f"{SYSTEM}\n\n{question}" if placement == "user_turn" else question})
    turns: list[dict] = []
    if placement != "user_turn":
        turns.append({"role": "system", "content": [{"type": "text", "text": SYSTEM if placement == "system" else ""}]})
    turns.append({"role": "user", "content": user})
    return turns


class Loaded:
    """A tiny model loaded the way the HF backend loads it (float32, sdpa, left padding, greedy)."""

    def __init__(self, path: Path):
        import torch
        from transformers import AutoModelForImageTextToText, AutoProcessor

        self.processor = AutoProcessor.from_pretrained(path)
        self.processor.tokenizer.padding_side = "left"
        self.model = AutoModelForImageTextToText.from_pretrained(path, dtype=torch.float32, attn_implementation="sdpa").eval()
        gen = copy.deepcopy(self.model.generation_config)
        gen.update(max_new_tokens=MAX_NEW_TOKENS, do_sample=False)
        self.gen = gen
        eos = gen.eos_token_id
        self.stop_ids = set(eos if isinstance(eos, (list, tuple)) else [eos])
        self.patch = self.processor.video_processor.patch_size

    def with_generation(self, **updates) -> "Loaded":
        """The same model and processor with other generation settings."""
        other = copy.copy(self)
        other.gen = copy.deepcopy(self.gen)
        other.gen.update(**updates)
        return other

    def engine(self, cache: str = "static") -> SharedPrefixEngine:
        return SharedPrefixEngine(self.model, self.processor, self.gen, self.stop_ids, resize_in_processor=False, cache=cache)

    def render(self, msgs: list[dict]) -> str:
        return self.processor.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)

    def reference(self, request: GenerationRequest) -> tuple:
        """Batch size 1, as HFBackend.generate does it."""
        import torch

        prompt = self.render(request.messages)
        kwargs = {"text": [prompt], "padding": True, "return_tensors": "pt"}
        if request.frames is not None:
            kwargs.update(videos=[request.frames.frames], video_metadata=[request.frames.processor_metadata()],
                          do_sample_frames=False, do_resize=False)
        inputs = self.processor(**kwargs)
        with torch.inference_mode():
            out = self.model.generate(**inputs, generation_config=self.gen)
        new = out[:, inputs["input_ids"].shape[1]:]
        text = self.processor.batch_decode(new, skip_special_tokens=True, clean_up_tokenization_spaces=False)[0]
        ids = new[0].tolist()
        stop_at = next((i for i, t in enumerate(ids) if t in self.stop_ids), None)
        return (text, int(inputs["attention_mask"][0].sum()), stop_at + 1 if stop_at is not None else len(ids),
                "stop" if stop_at is not None else "length", prompt)


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory) -> Loaded:
    from k9bench.tiny_model import build_tiny_qwen3vl

    return Loaded(build_tiny_qwen3vl(tmp_path_factory.mktemp("pc") / "qwen3vl", seed=0))


@pytest.fixture(scope="module")
def demo_questions():
    from k9bench.data.dataset import load_questions

    return load_questions("demo", "train").questions


def requests_for(model: Loaded, questions, video_dir: Path | None, max_frames: int, placement: str = "system") -> list[GenerationRequest]:
    """One request per demo question; each video sampled once, as the runner does."""
    from k9bench.video.sampling import sample

    frames: dict = {}
    out = []
    for q in questions:
        f = None
        path = None
        if video_dir is not None:
            path = video_dir / q.video
            if q.scene_name not in frames:
                frames[q.scene_name] = sample(path, fps=1.0, max_frames=max_frames, max_pixels=16384, min_pixels=2048,
                                              image_patch_size=model.patch)
            f = frames[q.scene_name]
        out.append(GenerationRequest(key=q.idx, messages=messages(q.question, placement, f is not None), frames=f,
                                     video_path=str(path) if path else None))
    return out


def engine_answers(model: Loaded, requests: list[GenerationRequest], batch_size: int, cache: str = "static") -> list[tuple]:
    engine = model.engine(cache)
    answers = []
    for i in range(0, len(requests), batch_size):
        chunk = requests[i:i + batch_size]
        for o in engine.generate(chunk, [model.render(r.messages) for r in chunk]):
            answers.append((o.text, o.num_input_tokens, o.num_output_tokens, o.finish_reason, o.prompt))
    return answers, engine.stats


def check_parity(model: Loaded, requests: list[GenerationRequest], batch_sizes=(5, 12), cache: str = "static") -> dict:
    """Engine answers at each batch size equal the batch-size-1 reference; returns the engine stats by batch size."""
    reference = [model.reference(r) for r in requests]
    assert len({a[0] for a in reference}) > 1, "the tiny model should give varied answers"
    stats = {}
    for batch_size in batch_sizes:
        answers, stats[batch_size] = engine_answers(model, requests, batch_size, cache)
        for r, want, have in zip(requests, reference, answers):
            assert have == want, f"idx {r.key}, batch size {batch_size}"
    return stats


# --------------------------------------------------------------------------- units (fast)


def test_split_cuts_after_the_last_shared_special_token():
    specials = ["<|im_start|>", "<|im_end|>", "<|vision_end|>"]
    a = "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\n<|vision_end|>What is it?<|im_end|>"
    b = "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\n<|vision_end|>Why?<|im_end|>"
    prefix, suffixes = split_shared_prefix([a, b], specials)
    assert prefix.endswith("<|vision_end|>") and suffixes == ["What is it?<|im_end|>", "Why?<|im_end|>"]
    # a shared text start after the special token ("Wh") is not part of the prefix
    prefix, suffixes = split_shared_prefix([a, a], specials)
    assert prefix.endswith("<|vision_end|>") and suffixes == ["What is it?<|im_end|>"] * 2
    # nothing shared: empty prefix
    assert split_shared_prefix(["x<|im_end|>", "y"], specials) == ("", ["x<|im_end|>", "y"])
    # with the video's closing token as anchor, one prompt alone splits where several do
    alone, _ = split_shared_prefix([a], specials, anchor="<|vision_end|>")
    together, _ = split_shared_prefix([a, b], specials, anchor="<|vision_end|>")
    assert alone == together == a[:a.index("What")]
    c = a + "\n<|im_start|>assistant\n"
    assert split_shared_prefix([c], specials) == (a + "\n<|im_start|>", ["assistant\n"])  # without it: the last special token
    assert split_shared_prefix([c], specials, anchor="<|vision_end|>")[0] == alone
    # a prompt that ends with a special token keeps at least that token as its suffix
    prefix, suffixes = split_shared_prefix(["<|im_start|>", "<|im_start|>"], specials)
    assert prefix == "" and suffixes == ["<|im_start|>"] * 2


def test_unsupported_settings_keep_generate(qwen3):
    gen = copy.deepcopy(qwen3.gen)
    assert unsupported_reason(qwen3.model, gen) is None
    for key, value in (("num_beams", 2), ("min_new_tokens", 3), ("guidance_scale", 2.0), ("stop_strings", ["dog"])):
        changed = copy.deepcopy(gen)
        setattr(changed, key, value)
        assert key in unsupported_reason(qwen3.model, changed)
        with pytest.raises(PrefixCacheError):
            SharedPrefixEngine(qwen3.model, qwen3.processor, changed, qwen3.stop_ids, resize_in_processor=False)
        engine, why = SharedPrefixEngine.create_or_explain(qwen3.model, qwen3.processor, changed, qwen3.stop_ids, resize_in_processor=False)
        assert engine is None and why == unsupported_reason(qwen3.model, changed)
    # sampling and the processors generate applies (penalties, n-gram bans) are reproduced
    sampling = copy.deepcopy(gen)
    sampling.update(do_sample=True, temperature=0.7, top_k=20, top_p=0.8, repetition_penalty=1.05, no_repeat_ngram_size=4)
    assert unsupported_reason(qwen3.model, sampling) is None
    engine, why = SharedPrefixEngine.create_or_explain(qwen3.model, qwen3.processor, gen, qwen3.stop_ids, resize_in_processor=False)
    assert isinstance(engine, SharedPrefixEngine) and why is None
    with pytest.raises(ValueError):
        SharedPrefixEngine(qwen3.model, qwen3.processor, gen, qwen3.stop_ids, resize_in_processor=False, cache="dynamic")


# --------------------------------------------------------------------------- parity (slow)


@pytest.mark.slow
@pytest.mark.parametrize("cache", ["static"])
def test_cross_video_batches_with_shared_prefix_match_batch_size_1(qwen3, demo_questions, demo_video_dir, cache):
    requests = requests_for(qwen3, demo_questions, demo_video_dir, max_frames=4)
    stats = check_parity(qwen3, requests, batch_sizes=(5, 12), cache=cache)
    # three videos of 4 questions, one prefill each: at batch size 12 in one batch; at 5 in three batches,
    # where the videos split across batches (1+4, 3+2) reuse the prefix of the batch before
    assert (stats[12].prefills, stats[12].batches) == (3, 1)
    assert (stats[5].prefills, stats[5].prefix_reuses, stats[5].batches) == (3, 2, 3)


@pytest.mark.slow
def test_logits_processors_as_generate_applies_them(qwen3, demo_questions, demo_video_dir):
    """A repetition penalty and an n-gram ban (they read the whole sequence), and sampling with top-k 1."""
    requests = requests_for(qwen3, demo_questions, demo_video_dir, max_frames=4)
    check_parity(qwen3.with_generation(repetition_penalty=1.3, no_repeat_ngram_size=2), requests, batch_sizes=(12,))
    check_parity(qwen3.with_generation(do_sample=True, temperature=0.7, top_k=1, top_p=0.8), requests, batch_sizes=(12,))


@pytest.mark.slow
def test_sampling_is_seeded_like_generate(qwen3, demo_questions, demo_video_dir):
    import torch

    model = qwen3.with_generation(do_sample=True, temperature=1.5, top_k=50, top_p=0.95)
    requests = requests_for(model, demo_questions, demo_video_dir, max_frames=4)
    runs = []
    for seed in (7, 7, 8):
        torch.manual_seed(seed)
        runs.append([a[0] for a in engine_answers(model, requests, 12)[0]])
    assert runs[0] == runs[1] and runs[0] != runs[2]
    greedy = [a[0] for a in engine_answers(qwen3, requests, 12)[0]]
    assert runs[0] != greedy


@pytest.mark.slow
def test_short_videos_with_fewer_frames_than_the_budget(qwen3, demo_questions, demo_video_dir):
    requests = requests_for(qwen3, demo_questions, demo_video_dir, max_frames=32)
    assert all(r.frames.num_frames < 32 for r in requests)  # 5-8 s clips at 1 fps
    assert len({r.frames.num_frames for r in requests}) > 1  # prefixes of different lengths share batches
    check_parity(qwen3, requests, batch_sizes=(7,))


@pytest.mark.slow
@pytest.mark.parametrize("placement", ["empty_system", "user_turn"])
def test_other_system_prompt_placements(qwen3, demo_questions, demo_video_dir, placement):
    requests = requests_for(qwen3, demo_questions[:6], demo_video_dir, max_frames=4, placement=placement)
    check_parity(qwen3, requests, batch_sizes=(6,))


@pytest.mark.slow
@pytest.mark.parametrize("cache", ["static"])
def test_text_only_mode_batches_without_prefix(qwen3, demo_questions, cache):
    requests = requests_for(qwen3, demo_questions, None, max_frames=0)
    stats = check_parity(qwen3, requests, batch_sizes=(5, 12), cache=cache)
    assert stats[5].prefills == stats[12].prefills == 0


@pytest.mark.slow
def test_thinking_template(qwen3, demo_questions, demo_video_dir, tmp_path):
    """A Thinking-style template opens <think> after the assistant turn; the prefix still ends at the video."""
    folder = tmp_path / "thinking"
    shutil.copytree(qwen3.model.name_or_path, folder)
    template = folder / "chat_template.jinja"
    text = template.read_text(encoding="utf-8")
    template.write_text(text.replace("enable_thinking is defined and enable_thinking is true", "true"), encoding="utf-8")
    thinking = Loaded(folder)
    requests = requests_for(thinking, demo_questions, demo_video_dir, max_frames=4)
    assert thinking.render(requests[0].messages).endswith("<|im_start|>assistant\n<think>\n")
    check_parity(thinking, requests, batch_sizes=(12,))


@pytest.mark.slow
def test_qwen2_5_vl(demo_questions, demo_video_dir, tmp_path):
    from k9bench.tiny_model import build_tiny_qwen2_5vl

    model = Loaded(build_tiny_qwen2_5vl(tmp_path / "qwen25", seed=0))
    requests = requests_for(model, demo_questions, demo_video_dir, max_frames=4)
    check_parity(model, requests, batch_sizes=(12,))


@pytest.mark.slow
def test_planner_pipeline_and_engine_together_as_the_runner_would(qwen3, demo_questions, demo_video_dir):
    """plan_batches over the demo videos, frames from a FrameCache and the engine's preparation on two
    worker threads ahead of the model, frames released as the plan says: the batch-size-1 answers."""
    from k9bench.inference.batching import plan_batches
    from k9bench.inference.pipeline import AheadPipeline
    from k9bench.video.cache import FrameCache

    groups: dict[str, list] = {}
    for q in demo_questions:
        groups.setdefault(q.video, []).append(q)
    videos = list(groups)
    plan = plan_batches([len(groups[v]) for v in videos], 5)
    engine = qwen3.engine()
    cache = FrameCache(fps=1.0, max_frames=4, max_pixels=16384, min_pixels=2048, image_patch_size=qwen3.patch)

    def prepare(batch):
        requests = []
        for part in batch.parts:
            path = demo_video_dir / videos[part.group]
            frames = cache.get(path)
            requests += [GenerationRequest(key=q.idx, messages=messages(q.question, "system", True), frames=frames,
                                           video_path=str(path)) for q in groups[videos[part.group]][part.start:part.stop]]
        return requests, engine.prepare(requests, [qwen3.render(r.messages) for r in requests])

    answers = {}
    with AheadPipeline(prepare, workers=2, depth=2) as ahead:
        for ready in ahead.run(plan):
            assert ready.error is None
            requests, prepared = ready.value
            for r, o in zip(requests, engine.run(prepared)):
                answers[r.key] = (o.text, o.num_input_tokens, o.num_output_tokens, o.finish_reason, o.prompt)
            for g in ready.item.release:
                cache.release(demo_video_dir / videos[g])
    assert len(cache) == 0 and ahead.stats.prepared == len(plan) == 3
    assert (engine.stats.prefills, engine.stats.prefix_reuses) == (3, 2)
    reference = requests_for(qwen3, demo_questions, demo_video_dir, max_frames=4)
    assert [answers[r.key] for r in reference] == [qwen3.reference(r) for r in reference]


def test_grouped_sdpa_equals_transformers_sdpa():
    """The engine's kernel packs each key/value head's query heads instead of repeating the keys and values."""
    from types import SimpleNamespace

    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from k9bench.inference.shared_decode import grouped_sdpa

    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(shape, generator=gen) for shape in ((2, 8, 5, 16), (2, 2, 11, 16), (2, 2, 11, 16)))
    mask = torch.rand((2, 1, 5, 11), generator=gen) > 0.5
    mask[..., :5] |= torch.eye(5, dtype=torch.bool)  # every query sees at least itself
    module = SimpleNamespace(num_key_value_groups=4, is_causal=False, training=False)
    want, _ = sdpa_attention_forward(module, q, k, v, mask, scaling=0.25)
    have, _ = grouped_sdpa(module, q, k, v, mask, scaling=0.25)
    assert have.shape == want.shape == (2, 5, 8, 16) and torch.allclose(have, want, atol=1e-6)


def test_the_engine_decodes_through_its_grouped_kernel(qwen3, demo_questions, demo_video_dir, monkeypatch):
    from k9bench.inference import shared_decode

    calls = []
    real = shared_decode.grouped_sdpa

    def counting(*args, **kwargs):
        calls.append(args[1].shape[2])  # query tokens in flight
        return real(*args, **kwargs)

    monkeypatch.setattr(shared_decode, "grouped_sdpa", counting)
    requests = requests_for(qwen3, demo_questions[:4], demo_video_dir, max_frames=2)
    qwen3.engine().generate(requests, [qwen3.render(r.messages) for r in requests])
    assert calls and max(calls) > 1  # the suffixes (several slots at once) and the steps (4 slots) went through it
    assert qwen3.model.config.get_text_config()._attn_implementation == "sdpa"  # restored
