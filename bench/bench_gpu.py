"""Benchmark: questions/s of today's HF pattern against cross-video batches with a shared video prefix.

Builds, offline and in memory, a random-weight model with Qwen3-VL-4B-Instruct's architecture
(36 layers x 2560, 32 heads / 8 key-value heads, 24-block vision tower with deepstack; the
tokenizer, chat template and processors of ``k9bench.tiny_model``, so the vocabulary is the tiny
one: the embedding and the tied lm_head are far smaller than the real 151,936-token ones, which
the output states). Generates synthetic videos with ffmpeg (a few distinct clips copied under
``--videos`` names, each file decoded on its own) and ``--questions_per_video`` questions each, then
answers all of them twice in one process:

* today: batches of ``--batch_size`` (8) questions of one video, each question's prompt processed
  and prefilled with its video again (processor + ``model.generate``, as the HF backend does);
  frames decoded before the timing starts (today's runner prefetches them in a thread);
* new: ``k9bench.inference.batching.plan_batches`` (batches of ``--new_batch_size`` questions that
  span videos), ``k9bench.inference.pipeline.AheadPipeline`` (frame decoding and the processor on
  ``--workers`` threads ahead of the model) and ``k9bench.inference.prefix_cache.SharedPrefixEngine``
  (one prefill per video, greedy decoding from the shared cache); decoding is inside the timing.

Prints the batch size ``auto`` chose and the peak memory of each engine (GPU: ``max_memory_allocated``;
CPU: the process's peak RSS, and the batch KV cache the engine allocated). With ``--baseline_engine FILE``
(an older ``prefix_cache.py``) that engine is timed too, as the "before".

Both are greedy with ``--max_new_tokens`` (random weights never stop early: every answer runs to
the limit, the worst case). Prints questions/s of each, the ratio, the time extrapolated to 4,744
questions, how many answers are identical, the model's idle time waiting for the CPU, and writes
the figures as JSON with ``--json_out``: each engine under ``new_by_engine`` (``baseline``, ``new``), and the
new engine's figures also as the top-level ``new``, ``ratio`` and ``same_answers``.

Usage::

    # CPU, reduced model (a minute or two on a shared 2-core machine)
    python bench/bench_gpu.py --device cpu --layers 2 --hidden 256 --vision_depth 2 --vision_hidden 128 \\
        --videos 10 --max_frames 8 --max_pixels 50176 --min_pixels 2048 --max_new_tokens 32 --video_size 320x240 --video_seconds 12
    # one GPU, the full 4B architecture, 32 frames, 64 new tokens; the engine before this one as the baseline
    git show 1ac1e9c:k9bench/inference/prefix_cache.py > /tmp/old_prefix_cache.py
    python bench/bench_gpu.py --device cuda --baseline_engine /tmp/old_prefix_cache.py
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

K9_BENCH_QUESTIONS = 4744
REAL_VOCAB = 151936
"""Qwen3-VL's vocabulary size (the real embedding and lm_head rows)."""

QWEN3_VL_4B = dict(hidden_size=2560, intermediate_size=9728, num_hidden_layers=36, num_attention_heads=32,
                   num_key_value_heads=8, head_dim=128)
"""Qwen3-VL-4B-Instruct's language model (public config)."""

QUESTIONS = (
    "What does the dog do right after the person opens the door?",
    "How does the dog's posture change over the clip?",
    "Why does the dog bark at the end of the video?",
    "What is the dog looking at while its tail is wagging, and how does it react when the ball is thrown?",
    "Is the dog calm, alert or tired?",
)


def add_engine_figures(result: dict, label: str, entry: dict) -> None:
    """Put one engine's figures in the JSON: every engine under ``new_by_engine[label]``; the new engine's
    also at the top level (``new``, and ``ratio``/``same_answers`` against today's path when timed), so that
    a ``--baseline_engine`` run never writes the baseline's figures where the new engine's are read."""
    result.setdefault("new_by_engine", {})[label] = entry
    if label == "new":
        result["new"] = entry
        for key in ("ratio", "same_answers"):
            if key in entry:
                result[key] = entry[key]


def build_parser() -> argparse.ArgumentParser:
    from k9bench.cli import ArgumentParser  # the project's one parser: no abbreviated flags
    p = ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="auto", help="cuda, cpu, or auto: cuda when visible (default)")
    p.add_argument("--layers", type=int, default=QWEN3_VL_4B["num_hidden_layers"], help="language model layers (36)")
    p.add_argument("--hidden", type=int, default=QWEN3_VL_4B["hidden_size"], help="language model width (2560)")
    p.add_argument("--vision_depth", type=int, default=24, help="vision tower blocks (24)")
    p.add_argument("--vision_hidden", type=int, default=1024, help="vision tower width (1024)")
    p.add_argument("--videos", type=int, default=10, help="videos (>= 10 for the issue's figure)")
    p.add_argument("--distinct_videos", type=int, default=2, help="distinct clips generated, copied under --videos names")
    p.add_argument("--questions_per_video", type=int, default=5, help="questions per video (K9-Bench has 5.2)")
    p.add_argument("--video_seconds", type=float, default=60.0, help="clip length")
    p.add_argument("--video_size", default="1280x720", help="clip WIDTHxHEIGHT")
    p.add_argument("--max_frames", type=int, default=32)
    p.add_argument("--fps", type=float, default=1.0)
    p.add_argument("--max_pixels", type=int, default=360 * 420)
    p.add_argument("--min_pixels", type=int, default=None, help="per-frame minimum (default: qwen-vl-utils' video default)")
    p.add_argument("--max_new_tokens", type=int, default=64)
    p.add_argument("--batch_size", type=int, default=8, help="today's batch size (batches within one video)")
    p.add_argument("--new_batch_size", default="auto", help="new path's batch size: a number, or auto (free GPU memory; 24 on CPU)")
    p.add_argument("--workers", type=int, default=4, help="preparation threads of the new path")
    p.add_argument("--baseline_engine", default=None, metavar="FILE",
                   help="also time the SharedPrefixEngine of this file (an older k9bench/inference/prefix_cache.py, e.g. from "
                        "git show REV:k9bench/inference/prefix_cache.py > /tmp/old_prefix_cache.py) as the 'before'; its peak "
                        "memory is only separable on a GPU (on a CPU run it alone with --skip_today --engine baseline)")
    p.add_argument("--engine", default="both", choices=("new", "baseline", "both"),
                   help="which engine(s) to time with --baseline_engine (default: both)")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: leave torch's default)")
    p.add_argument("--skip_today", action="store_true", help="time the new path only")
    p.add_argument("--work_dir", default=None, help="where videos go (default: a temporary folder, removed)")
    p.add_argument("--json_out", default=None, help="write the figures here")
    return p


def build_model(args, work: Path):
    """A random-weight Qwen3-VL (4B architecture unless reduced) and its processor, in memory."""
    import torch
    from transformers import (GenerationConfig, Qwen2VLImageProcessor, Qwen3VLConfig, Qwen3VLForConditionalGeneration,
                              Qwen3VLProcessor, Qwen3VLVideoProcessor)

    from k9bench.tiny_model import CHAT_TEMPLATE, SPECIAL_TOKENS, build_tokenizer

    tok = build_tokenizer(work / "tokenizer")
    ids = {t: tok.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    text = dict(QWEN3_VL_4B)
    text["num_hidden_layers"] = args.layers
    if args.hidden != QWEN3_VL_4B["hidden_size"]:
        head_dim = 128 if args.hidden >= 1024 else 32
        heads = max(1, args.hidden // head_dim)
        text.update(hidden_size=args.hidden, intermediate_size=int(args.hidden * 3.8) // 64 * 64 or 64, head_dim=head_dim,
                    num_attention_heads=heads, num_key_value_heads=max(1, heads // 4))
    half = text["head_dim"] // 2
    section = [half - 2 * (half * 5 // 16), half * 5 // 16, half * 5 // 16]  # [24, 20, 20] at head_dim 128
    deep = [i for i in (5, 11, 17) if i < args.vision_depth] or [0]
    vision_heads = max(1, args.vision_hidden // 64)
    config = Qwen3VLConfig(
        text_config={**text, "vocab_size": len(tok), "max_position_embeddings": 262144, "rms_norm_eps": 1e-6,
                     "rope_parameters": {"rope_type": "default", "rope_theta": 5000000.0, "mrope_section": section,
                                         "mrope_interleaved": True},
                     "pad_token_id": ids["<|endoftext|>"], "bos_token_id": None, "eos_token_id": ids["<|im_end|>"],
                     "tie_word_embeddings": True},
        vision_config={"depth": args.vision_depth, "hidden_size": args.vision_hidden, "intermediate_size": args.vision_hidden * 4,
                       "num_heads": vision_heads, "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2,
                       "out_hidden_size": text["hidden_size"], "num_position_embeddings": 2304, "deepstack_visual_indexes": deep,
                       "hidden_act": "gelu_pytorch_tanh"},
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"], tie_word_embeddings=True,
    )
    config.pad_token_id = ids["<|endoftext|>"]
    config.eos_token_id = ids["<|im_end|>"]
    cuda = args.device.startswith("cuda")
    dtype = torch.bfloat16 if cuda else torch.float32
    torch.manual_seed(0)
    with torch.device(args.device):
        model = Qwen3VLForConditionalGeneration._from_config(config, dtype=dtype, attn_implementation="sdpa")
    with torch.no_grad():
        emb = model.get_input_embeddings().weight
        emb.normal_(0.0, 1.0)  # wide: greedy decoding stays varied
        for tid in (config.eos_token_id, config.pad_token_id):
            emb[tid].mul_(0.0)  # tied head: never stop early (every answer runs to max_new_tokens)
    model.eval()
    gen = GenerationConfig(bos_token_id=None, eos_token_id=[config.eos_token_id, config.pad_token_id],
                           pad_token_id=config.pad_token_id, do_sample=False, max_new_tokens=args.max_new_tokens)
    model.generation_config = gen
    tok.padding_side = "left"
    image_processor = Qwen2VLImageProcessor(patch_size=16, temporal_patch_size=2, merge_size=2,
                                            size={"shortest_edge": 65536, "longest_edge": 16777216},
                                            image_mean=[0.5] * 3, image_std=[0.5] * 3)
    video_processor = Qwen3VLVideoProcessor(patch_size=16, temporal_patch_size=2, merge_size=2,
                                            size={"shortest_edge": 4096, "longest_edge": 25165824},
                                            image_mean=[0.5] * 3, image_std=[0.5] * 3, fps=2, min_frames=4, max_frames=768,
                                            cap_pixels_per_frame=True)
    processor = Qwen3VLProcessor(image_processor=image_processor, tokenizer=tok, video_processor=video_processor,
                                 chat_template=CHAT_TEMPLATE)
    return model, processor, gen


def make_videos(args, folder: Path) -> list[Path]:
    from k9bench.video.ffmpeg import make_video

    width, height = (int(x) for x in args.video_size.lower().split("x"))
    patterns = ["testsrc2", "mandelbrot", "life", "smpte"]
    distinct = []
    for d in range(max(1, min(args.distinct_videos, args.videos))):
        path = folder / f"clip{d}.mp4"
        make_video(path, duration=args.video_seconds * (1 + d) / max(1, args.distinct_videos), fps=25,
                   width=width, height=height, pattern=patterns[d % len(patterns)])
        distinct.append(path)
    paths = []
    for v in range(args.videos):
        path = folder / f"benchVid{v:05d}.mp4"
        shutil.copyfile(distinct[v % len(distinct)], path)
        paths.append(path)
    return paths


def messages(question: str, with_video: bool) -> list[dict]:
    from k9bench.prompts import load_prompt

    system, _ = load_prompt("system_prompt")
    user = ([{"type": "video"}] if with_video else []) + [{"type": "text", "text": question}]
    return [{"role": "system", "content": [{"type": "text", "text": system}]}, {"role": "user", "content": user}]


def sample_frames(args, path: Path):
    from k9bench.video.sampling import sample

    return sample(path, fps=args.fps, max_frames=args.max_frames, max_pixels=args.max_pixels, min_pixels=args.min_pixels,
                  image_patch_size=16)


def run_today(model, processor, gen, reqs_by_video, batch_size, sync) -> tuple[list[str], float, int]:
    """Batches within one video; every question's prompt goes through the processor and the prefill with its video."""
    import torch

    texts: list[str] = []
    tokens = 0
    t0 = time.perf_counter()
    for reqs in reqs_by_video:
        for i in range(0, len(reqs), batch_size):
            batch = reqs[i:i + batch_size]
            prompts = [processor.apply_chat_template(r.messages, tokenize=False, add_generation_prompt=True) for r in batch]
            inputs = processor(text=prompts, videos=[r.frames.frames for r in batch],
                               video_metadata=[r.frames.processor_metadata() for r in batch],
                               do_sample_frames=False, do_resize=False, padding=True, return_tensors="pt").to(model.device)
            inputs["pixel_values_videos"] = inputs["pixel_values_videos"].to(model.dtype)
            with torch.inference_mode():
                out = model.generate(**inputs, generation_config=gen)
            new = out[:, inputs["input_ids"].shape[1]:].cpu()
            tokens += int(inputs["attention_mask"].sum())
            texts += processor.batch_decode(new, skip_special_tokens=True, clean_up_tokenization_spaces=False)
    sync()
    return texts, time.perf_counter() - t0, tokens


def load_engine_class(path: str | None):
    """SharedPrefixEngine of this project, or of the file ``path`` (the baseline)."""
    if path is None:
        from k9bench.inference.prefix_cache import SharedPrefixEngine

        return SharedPrefixEngine
    import importlib.util

    spec = importlib.util.spec_from_file_location("baseline_prefix_cache", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module.SharedPrefixEngine


def peak_rss_gib() -> float:
    """This process's peak resident memory so far (Linux: ru_maxrss in KiB)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def run_new(args, model, processor, gen, questions_by_video, paths, batch_size, sync, engine_class=None) -> tuple[list[str], float, dict]:
    """Cross-video batches, frames and processor ahead on worker threads, one prefill per video."""
    import threading

    from k9bench.inference.backend import GenerationRequest
    from k9bench.inference.batching import plan_batches
    from k9bench.inference.pipeline import AheadPipeline
    eos = gen.eos_token_id
    engine = (engine_class or load_engine_class(None))(model, processor, gen, eos if isinstance(eos, list) else [eos],
                                                        resize_in_processor=False)
    if hasattr(engine, "_batch_cache"):  # the engine before: measure the per-question prefix copies it makes
        make_cache = engine._batch_cache

        def measured(*a, **k):
            cache = make_cache(*a, **k)
            size = sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values)
                       if getattr(layer, "keys", None) is not None and hasattr(layer.keys, "numel"))
            engine.stats.__dict__["peak_cache_bytes"] = max(engine.stats.__dict__.get("peak_cache_bytes", 0), size)
            return cache

        engine._batch_cache = measured
    frames: dict[int, object] = {}
    lock = threading.Lock()

    def frames_of(v: int):
        with lock:
            f = frames.get(v)
        if f is None:
            f = sample_frames(args, paths[v])
            with lock:
                frames[v] = f
        return f

    def prepare(batch):
        reqs = [GenerationRequest(key=v * 1000 + q, messages=messages(questions_by_video[v][q], True), frames=frames_of(v),
                                  video_path=str(paths[v]))
                for part in batch.parts for v in [part.group] for q in range(part.start, part.stop)]
        prompts = [processor.apply_chat_template(r.messages, tokenize=False, add_generation_prompt=True) for r in reqs]
        return engine.prepare(reqs, prompts)

    plan = plan_batches([len(q) for q in questions_by_video], batch_size)
    texts: list[str] = []
    t0 = time.perf_counter()
    with AheadPipeline(prepare, workers=args.workers, depth=max(2, args.workers)) as ahead:
        for ready in ahead.run(plan):
            if ready.error is not None:
                raise ready.error
            texts += [o.text for o in engine.run(ready.value)]
            with lock:
                for g in ready.item.release:
                    frames.pop(g, None)  # the planner says this video is done
    sync()
    wall = time.perf_counter() - t0
    return texts, wall, {"pipeline": ahead.stats.to_dict(), "engine": engine.stats.to_dict(), "batches": len(plan)}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch

    from k9bench.inference.backend import GenerationRequest
    from k9bench.progress import quiet_library_progress_bars

    quiet_library_progress_bars()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    cuda = args.device.startswith("cuda")
    sync = (lambda: torch.cuda.synchronize()) if cuda else (lambda: None)
    work = Path(args.work_dir) if args.work_dir else Path(tempfile.mkdtemp(prefix="bench_gpu_"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        t0 = time.perf_counter()
        model, processor, gen = build_model(args, work)
        n_params = sum(p.numel() for p in model.parameters())
        vocab = model.config.text_config.vocab_size
        hidden = model.config.text_config.hidden_size
        print(f"model: random-weight Qwen3-VL, {n_params / 1e9:.3f}B parameters, {args.layers} layers x {hidden}, "
              f"vision {args.vision_depth} blocks x {args.vision_hidden}; {str(model.dtype).replace('torch.', '')} on {args.device}, sdpa "
              f"(built in {time.perf_counter() - t0:.1f}s)")
        print(f"vocabulary: {vocab} tokens (k9bench.tiny_model's tokenizer) instead of Qwen3-VL's {REAL_VOCAB}: the tied "
              f"embedding/lm_head has {vocab * hidden / 1e6:.1f}M parameters instead of {REAL_VOCAB * hidden / 1e6:.0f}M, so each "
              f"generated token's lm_head costs less than the real model's; prompts are tokenized into more, shorter tokens")
        t0 = time.perf_counter()
        paths = make_videos(args, work / "videos")
        print(f"videos: {len(paths)} files ({args.distinct_videos} distinct {args.video_size} clips, up to {args.video_seconds:.0f}s) "
              f"made in {time.perf_counter() - t0:.1f}s; {args.questions_per_video} questions each, {args.max_frames} frames "
              f"at {args.fps} fps, max_pixels {args.max_pixels}, {args.max_new_tokens} new tokens, greedy")
        questions = [[f"Scene {v}: {QUESTIONS[q % len(QUESTIONS)]}" for q in range(args.questions_per_video)] for v in range(args.videos)]
        n = sum(len(q) for q in questions)

        if args.new_batch_size == "auto":
            if cuda:
                from k9bench.inference.batching import auto_batch_size, memory_model_for
                from k9bench.inference.hf.backend import SUFFIX_TOKENS

                f0 = sample_frames(args, paths[0])
                est = f0.num_frames // 2 * (f0.height // 32) * (f0.width // 32) + 300
                free, _ = torch.cuda.mem_get_info()
                choice = auto_batch_size(free, memory_model_for(model.config, dtype_bytes=2, prompt_tokens=est,
                                                                max_new_tokens=args.max_new_tokens, suffix_tokens=SUFFIX_TOKENS,
                                                                questions_per_video=args.questions_per_video),
                                         device=args.device, questions=n)
                new_bs = choice.batch_size
                print(f"new batch size: auto -> {new_bs} ({choice.reason})")
            else:
                new_bs = min(n, 24)  # batches span videos and split one (its prefix is reused), and the pipeline overlaps
                print(f"new batch size: auto -> {new_bs} on CPU in this benchmark (eval_video_llm.py's auto means 1 on CPU)")
        else:
            new_bs = int(args.new_batch_size)

        # warm-up of both paths (kernels, allocator) on one video's first two questions
        fw = sample_frames(args, paths[0])
        warm = [GenerationRequest(key=i, messages=messages(questions[0][i], True), frames=fw, video_path=str(paths[0]))
                for i in range(min(2, args.questions_per_video))]
        short = type(gen)(**gen.to_dict())
        short.max_new_tokens = 2
        run_today(model, processor, short, [warm], 2, sync)
        engines = {"new": load_engine_class(None)}
        if args.baseline_engine:
            engines = {k: v for k, v in (("baseline", load_engine_class(args.baseline_engine)), ("new", engines["new"]))
                       if args.engine in (k, "both")}
        for engine_class in engines.values():
            run_new(args, model, processor, short, [questions[0][:2]], paths[:1], 2, sync, engine_class)

        result: dict = {"questions": n, "videos": args.videos, "device": args.device, "params": n_params, "vocab": vocab,
                        "settings": {k: v for k, v in vars(args).items() if k not in ("json_out", "work_dir")}}
        today_texts = None
        if not args.skip_today:
            t0 = time.perf_counter()
            reqs = []
            for v in range(args.videos):
                f = sample_frames(args, paths[v])
                reqs.append([GenerationRequest(key=q, messages=messages(text, True), frames=f, video_path=str(paths[v]))
                             for q, text in enumerate(questions[v])])
            decode = time.perf_counter() - t0
            today_texts, today_s, tokens = run_today(model, processor, gen, reqs, args.batch_size, sync)
            del reqs
            qps = n / today_s
            result["today"] = {"seconds": today_s, "questions_per_second": qps, "frame_decode_seconds_excluded": decode,
                               "input_tokens_per_question": tokens / n}
            print(f"today  (batch {args.batch_size}, within one video, every question prefills its video): {n} questions in "
                  f"{today_s:.1f}s = {qps:.2f} q/s -> 4,744 questions in {K9_BENCH_QUESTIONS / qps / 60:.1f} min "
                  f"(frames decoded beforehand in {decode:.1f}s, not counted; {tokens / n:.0f} input tokens per question)")
        for label, engine_class in engines.items():
            if cuda:
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
            new_texts, new_s, info = run_new(args, model, processor, gen, questions, paths, new_bs, sync, engine_class)
            qps_new = n / new_s
            if cuda:
                peak, peak_what = torch.cuda.max_memory_allocated() / 2**30, "GPU memory allocated"
            else:
                peak, peak_what = peak_rss_gib(), "process RSS (CPU; includes the model and everything before)"
            eng, pipe = info["engine"], info["pipeline"]
            entry = {"seconds": new_s, "questions_per_second": qps_new, "batch_size": new_bs, "engine": label, "peak_gib": peak,
                     "peak_of": peak_what, "kv_cache_gib": eng.get("peak_cache_bytes", 0) / 2**30 or None, **info}
            kv = "" if not eng.get("peak_cache_bytes") else (f"; largest batch KV cache {eng['peak_cache_bytes'] / 2**20:.1f} MiB"
                                                             f"{' at the start of decoding' if label == 'baseline' else ''}")
            print(f"{label:8s}(batch {new_bs} across videos, {info['batches']} batches, one prefill per video, {args.workers} prep "
                  f"workers): {n} questions in {new_s:.1f}s = {qps_new:.2f} q/s -> 4,744 questions in "
                  f"{K9_BENCH_QUESTIONS / qps_new / 60:.1f} min (frame decoding included; prefills {eng['prefills']} "
                  f"({eng['prefill_seconds']:.1f}s), decode {eng['decode_seconds']:.1f}s, model waited {pipe['wait_seconds']:.2f}s "
                  f"for the CPU)")
            print(f"peak memory ({label}): {peak:.3f} GiB {peak_what}{kv}")
            if today_texts is not None:
                same = sum(a == b for a, b in zip(today_texts, new_texts))
                ratio = qps_new / result["today"]["questions_per_second"]
                entry.update(ratio=ratio, same_answers=same)
                print(f"ratio {label} / today: {ratio:.2f}x; identical answers: {same}/{n}"
                      f"{'' if cuda else ' (CPU float32: must be all)'}")
            add_engine_figures(result, label, entry)
        if args.json_out:
            Path(args.json_out).write_text(json.dumps(result, indent=2, default=str) + "\n", encoding="utf-8")
        if today_texts is not None and not cuda and any(e.get("same_answers") != n for e in result["new_by_engine"].values()):
            print("FAIL: answers differ on CPU float32")
            return 1
        return 0
    finally:
        if not args.work_dir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
