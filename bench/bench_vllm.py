"""Benchmark: the same questions through vLLM in-process, a vLLM server (``video`` transport) and HF batched ``generate``.

All three go through ``eval_video_llm.py`` itself, in one process tree:

* ``inprocess``: ``--backend vllm``, run by the vLLM environment's python (``--vllm_python``, default
  ``$K9BENCH_VLLM_PYTHON``); its JSON shows the engine's chunks (``generate_calls``) and ``video_arrays``;
* ``server``: ``k9bench.serving.serve.serve_vllm`` starts ``vllm serve`` on the same checkpoint (loopback only),
  answered with ``--backend openai --video_transport video``;
* ``hf``: the transformers backend's batched ``generate`` across videos, ``--batch_size N`` (``--hf_batch_size``,
  default 8; ``auto`` is 1 on a CPU), in this python. Its JSON shows the batches it ran (``hf.batches``, from
  ``run_stats.prepare.prepared``) and the size in use; a route that did not batch ends the bench with exit 1.

The figure of each is the run's own ``run_stats.questions_per_second`` (answering only: the engine start and
the server start are left out, and printed apart). Answers: in-process against the server (same engine,
greedy: want identical) and against HF (agreement reported); prompt token counts: in-process against each other
route (want equal: the same frames and the same chat template).

Like for like: the server gets the in-process engine's ``max_num_seqs`` and ``max_num_batched_tokens`` (vLLM's
defaults differ between ``vllm.LLM`` and its server) and the same ``--dtype``; its mp4 is the lossless one
unless ``--video_crf`` says otherwise. The inputs are compared (prompt token counts, the ``<t seconds>`` stamps),
and unless ``--no_serial`` both vLLM routes run again one request at a time (in-process ``--batch_size 1``, the
client ``--concurrency 1``): with no batching on either side, a difference left there is in the inputs, one that
appears only when batched is the engine's numerics (bf16 sums are not batch-invariant).

Questions: the demo set's 12, repeated over ``--copies`` copies of its 3 videos (each copy a file of its own,
decoded on its own). Model: on CPU the tiny random-weight Qwen3-VL with head size 64 (vLLM's CPU attention
refuses 16); with ``--device cuda`` the full-size random Qwen3-VL-4B architecture of ``bench/bench_gpu.py``,
written to disk, 32 frames and 64 new tokens, and the minutes for 4,744 questions are printed.

Usage::

    K9BENCH_VLLM_PYTHON=vllm-venv/bin/python python bench/bench_vllm.py --device cpu --copies 4
    python bench/bench_vllm.py --device cuda --copies 40 --json_out /tmp/bench_vllm.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FULL = 4744
"""K9-Bench's question count."""
CPU_PIXELS = ["--min_pixels", "16384", "--max_pixels", "65536"]
"""CPU: frames that stay within the tiny processor's video budget (as tests/test_vllm.py)."""
ENV = {"VLLM_HOST_IP": "127.0.0.1", "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "K9BENCH_NO_PROGRESS": "1"}


def build_parser() -> argparse.ArgumentParser:
    from k9bench.cli import ArgumentParser  # the project's one parser: no abbreviated flags
    p = ArgumentParser(prog="bench_vllm.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--copies", type=int, default=4, help="copies of the demo's 3 videos (12 questions each copy; default 4)")
    p.add_argument("--max_frames", type=int, default=None, help="default: 8 on CPU, 32 on cuda")
    p.add_argument("--max_new_tokens", type=int, default=None, help="default: 24 on CPU, 64 on cuda")
    p.add_argument("--routes", default="inprocess,server,hf", help="comma-separated subset of inprocess,server,hf")
    p.add_argument("--hf_batch_size", type=int, default=8, help="the HF route's --batch_size (default: %(default)s)")
    p.add_argument("--dtype", default="auto", help="vLLM's dtype on both vLLM routes (auto: the checkpoint's, as vLLM resolves it; "
                   "float32 takes bf16's rounding out)")
    p.add_argument("--video_crf", type=int, default=None, help="the server route's mp4 lossy at this CRF (eval_video_llm.py's --video_crf; "
                   "default: lossless)")
    p.add_argument("--no_serial", action="store_true", help="skip the second answer check: both vLLM routes again, one request at a time")
    p.add_argument("--vllm_python", default=os.environ.get("K9BENCH_VLLM_PYTHON", ""), help="the vLLM environment's python")
    p.add_argument("--work_dir", default=None, help="keep the model, videos and raw files here (default: a temporary folder)")
    p.add_argument("--json_out", default=None, help="write the figures here")
    return p


def build_model(device: str, folder: Path) -> Path:
    if device == "cpu":
        from k9bench.tiny_model import build_tiny_qwen3vl

        return build_tiny_qwen3vl(folder, seed=0, head_dim=64)
    sys.path.insert(0, str(ROOT / "bench"))
    import bench_gpu

    args = bench_gpu.build_parser().parse_args(["--device", "cuda"])
    model, processor, gen = bench_gpu.build_model(args, folder.parent / "work")
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    gen.save_pretrained(folder)
    del model
    return folder


def make_dataset(folder: Path, copies: int) -> tuple[Path, Path]:
    from k9bench.data.demo import demo_rows, make_demo_videos
    from k9bench.download.youtube import parse_youtube_id

    videos = folder / "videos"
    make_demo_videos(videos)
    rows, idx = [], 0
    originals = sorted(videos.glob("*.mp4"))
    number = {path.stem: i for i, path in enumerate(originals)}
    for c in range(copies):
        for path in originals:
            if c:  # an 11-character id of its own, as K9-Bench's scene names are
                shutil.copyfile(path, videos / f"cp{c:05d}{number[path.stem]:04d}.mp4")
        for row in demo_rows():
            original = row["scene_name"] or parse_youtube_id(row["video_url"])  # the loader takes it from the URL
            scene = original if c == 0 else f"cp{c:05d}{number[original]:04d}"
            rows.append({**row, "idx": idx, "scene_name": scene, "video_url": f"https://www.youtube.com/watch?v={scene}"})
            idx += 1
    data = folder / "questions.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return data, videos


def common(model: Path, data: Path, videos: Path, out: Path, args) -> list[str]:
    """The flags every route shares (the first two, ``--model_name_or_path M``, are dropped for the server's route)."""
    argv = ["--model_name_or_path", str(model), "--dataset_name", str(data), "--video_dir", str(videos), "--output_file", str(out),
            "--max_frames", str(args.max_frames), "--max_new_tokens", str(args.max_new_tokens), "--greedy", "-q"]
    return argv + (CPU_PIXELS if args.device == "cpu" else [])


def run_script(python: str, argv: list[str], log: Path, env: dict) -> tuple[dict, float]:
    t0 = time.monotonic()
    with open(log, "w", encoding="utf-8") as f:
        done = subprocess.run([python, str(ROOT / "eval_video_llm.py"), *argv], env=env, stdout=f, stderr=subprocess.STDOUT, check=False)
    seconds = time.monotonic() - t0
    if done.returncode != 0:
        raise SystemExit(f"bench_vllm: {' '.join(argv[:2])}... exited {done.returncode}; see {log}")
    out = Path(argv[argv.index("--output_file") + 1])
    return json.loads(out.read_text(encoding="utf-8")), seconds


def figures(raw: dict, total_seconds: float) -> dict:
    stats = raw["run_stats"]
    return {"questions": raw["total_count"], "failed": raw["failed_count"], "questions_per_second": stats["questions_per_second"],
            "answer_seconds": stats["wall_seconds"], "process_seconds": total_seconds}


def hf_batches(raw: dict) -> dict:
    """The batches the HF route ran: the size in use and the batches prepared across videos (0: it did not batch)."""
    stats = raw["run_stats"]
    return {"batch_size": (stats.get("batch_size") or {}).get("batch_size"), "batches": (stats.get("prepare") or {}).get("prepared", 0)}


def token_counts_equal(a: dict, b: dict) -> str:
    """Questions whose prompt token count (video tokens included) is the same in both raw files."""
    x = {r["idx"]: r.get("num_input_tokens") for r in a["individual_results"]}
    y = {r["idx"]: r.get("num_input_tokens") for r in b["individual_results"]}
    return f"{sum(1 for k in x if x[k] and x[k] == y.get(k))}/{len(x)}"


def answers(raw: dict) -> dict:
    return {r["idx"]: r.get("response") for r in raw["individual_results"]}


def agreement(a: dict, b: dict) -> str:
    same = sum(1 for k in a if k in b and a[k] == b[k])
    return f"{same}/{len(a)}"


def pair_stamps(times: list[float]) -> list[float]:
    """Qwen3-VL's ``<t seconds>`` stamps of frames shown at ``times``: the mean of each frame pair, one decimal."""
    times = times + times[-1:] if len(times) % 2 else times
    return [round(float(f"{(times[i] + times[i + 1]) / 2:.1f}"), 1) for i in range(0, len(times), 2)]


def same_inputs(inprocess: dict, server: dict) -> dict:
    """How many questions got the same prompt token count and the same stamps (the server's: its mp4's frame times) on both routes."""
    a = {r["idx"]: r for r in inprocess["individual_results"]}
    b = {r["idx"]: r for r in server["individual_results"]}
    tokens = sum(1 for k in a if k in b and a[k].get("num_input_tokens") and a[k]["num_input_tokens"] == b[k].get("num_input_tokens"))
    stamps = sum(1 for k in a if k in b and a[k].get("prompt_timestamps")
                 and a[k]["prompt_timestamps"] == pair_stamps((b[k].get("video_sent") or {}).get("played_times_s") or []))
    codecs = sorted({(r.get("video_sent") or {}).get("codec") or "?" for r in b.values()})
    return {"prompt_tokens_equal": f"{tokens}/{len(a)}", "stamps_equal": f"{stamps}/{len(a)}", "codecs": ", ".join(codecs)}


def matched_engine_args(engine: dict | None) -> list[str]:
    """The server's engine args that make it the in-process engine: vLLM's defaults differ between ``vllm.LLM`` and the
    server (on CPU 256 sequences and 4,096 batched tokens against 128 and 2,048), and the split of a step changes bf16 sums."""
    if not engine:
        return []
    out = ["--max-num-seqs", str(engine["max_num_seqs"])]
    if engine.get("max_num_batched_tokens"):
        out += ["--max-num-batched-tokens", str(engine["max_num_batched_tokens"])]
    return out


def inprocess_route(args, model: Path, data: Path, videos: Path, work: Path, env: dict, engine: list[str], tag: str) -> tuple[dict, dict]:
    raw, secs = run_script(args.vllm_python, ["--backend", "vllm", *common(model, data, videos, work / f"{tag}.json", args), *engine],
                           work / f"{tag}.log", env)
    return raw, {**figures(raw, secs), "engine": raw["inference"]["backend"]["engine"]}


def server_route(args, model: Path, data: Path, videos: Path, work: Path, env: dict, max_len: str, match: list[str], tag: str, *,
                 concurrency: int) -> tuple[dict, dict]:
    from k9bench.serving.serve import serve_vllm

    serve_args = ["--served-model-name", "bench", "--max-model-len", max_len, "--limit-mm-per-prompt", '{"image": 32, "video": 1}',
                  "--media-io-kwargs", '{"video": {"num_frames": -1}}', "--trust-request-mm-kwargs", "--dtype", args.dtype, *match]
    serve_args += ["--enforce-eager"] if args.device == "cpu" else []
    s0 = time.monotonic()
    saved = {k: os.environ.get(k) for k in ENV}
    os.environ.update(ENV)
    try:
        with serve_vllm(str(model), python=args.vllm_python, args=serve_args, log_path=work / f"{tag}.vllm_server.log", timeout=1200,
                        env={k: env[k] for k in (*ENV, "VLLM_CPU_KVCACHE_SPACE") if k in env}) as url:
            started = time.monotonic() - s0
            raw, secs = run_script(sys.executable, ["--backend", "openai", "--api_model", "bench", "--base_url", url,
                                                    "--video_transport", "video", "--concurrency", str(concurrency), "--timeout", "1200",
                                                    *(["--video_crf", str(args.video_crf)] if args.video_crf is not None else []),
                                                    *common(model, data, videos, work / f"{tag}.json", args)[2:]],
                                   work / f"{tag}_client.log", env)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return raw, {**figures(raw, secs), "server_start_seconds": started, "concurrency": concurrency}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.max_frames = args.max_frames or (32 if args.device == "cuda" else 8)
    args.max_new_tokens = args.max_new_tokens or (64 if args.device == "cuda" else 24)
    routes = [r.strip() for r in args.routes.split(",") if r.strip()]
    if {"inprocess", "server"} & set(routes) and not args.vllm_python:
        raise SystemExit("bench_vllm: name the vLLM environment's python (--vllm_python or K9BENCH_VLLM_PYTHON)")
    work = Path(args.work_dir) if args.work_dir else Path(tempfile.mkdtemp(prefix="bench_vllm_"))
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **ENV, "PYTHONPATH": str(ROOT)}
    if args.device == "cpu":
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    t0 = time.monotonic()
    model = build_model(args.device, work / "model")
    data, videos = make_dataset(work, args.copies)
    questions = sum(1 for _ in data.open(encoding="utf-8"))
    print(f"model {model} ({'tiny head_dim 64' if args.device == 'cpu' else 'full-size random Qwen3-VL-4B'}), built in "
          f"{time.monotonic() - t0:.0f} s; {questions} questions over {3 * args.copies} videos, {args.max_frames} frames, "
          f"{args.max_new_tokens} new tokens, greedy", flush=True)
    max_len = "4096" if args.device == "cpu" else "8192"  # the tiny model's max_position_embeddings is 4096
    engine = ["--max_model_len", max_len] + (["--enforce_eager"] if args.device == "cpu" else [])
    engine += ["--torch_dtype", args.dtype] if args.dtype != "auto" else []
    result: dict = {"device": args.device, "copies": args.copies, "max_frames": args.max_frames, "max_new_tokens": args.max_new_tokens,
                    "dtype": args.dtype, "video_crf": args.video_crf}
    raws: dict = {}
    if "inprocess" in routes:
        raws["inprocess"], result["inprocess"] = inprocess_route(args, model, data, videos, work, env, engine, "inprocess")
    if "server" in routes:
        match = matched_engine_args(result.get("inprocess", {}).get("engine"))
        result["server_engine_args"] = match
        raws["server"], result["server"] = server_route(args, model, data, videos, work, env, max_len, match, "server", concurrency=64)
    if "hf" in routes:
        hf_dtype = args.dtype if args.dtype != "auto" else ("bfloat16" if args.device == "cuda" else None)
        raw, secs = run_script(sys.executable, ["--batch_size", str(args.hf_batch_size), *common(model, data, videos, work / "hf.json", args),
                                                *(["--torch_dtype", hf_dtype] if hf_dtype else [])], work / "hf.log", env)
        raws["hf"], result["hf"] = raw, {**figures(raw, secs), **hf_batches(raw)}
    for name in routes:
        f = result[name]
        line = (f"{name:10s} {f['questions_per_second']:8.2f} q/s  ({f['questions']} questions, {f['failed']} failed, "
                f"answering {f['answer_seconds']:.1f} s, process {f['process_seconds']:.0f} s")
        if name == "hf":
            line += f", batch size {f['batch_size']}, {f['batches']} batches"
        if name == "inprocess":
            counts = raws[name]["run_stats"]["decoding"]["vllm"]
            line += f", {counts['generate_calls']} chunk(s), {counts['video_arrays']} video arrays"
        if args.device == "cuda":
            line += f", {FULL / f['questions_per_second'] / 60:.1f} min for {FULL}"
        print(line + ")")
    if "inprocess" in raws:
        print(f"in-process engine: {json.dumps(result['inprocess']['engine'], sort_keys=True)}")
        q = result["inprocess"]["questions_per_second"]
        for other in ("server", "hf"):
            if other in raws:
                result[f"inprocess_over_{other}"] = q / result[other]["questions_per_second"]
                result[f"same_answers_inprocess_{other}"] = agreement(answers(raws["inprocess"]), answers(raws[other]))
                result[f"prompt_tokens_equal_inprocess_{other}"] = token_counts_equal(raws["inprocess"], raws[other])
                print(f"in-process / {other}: {result[f'inprocess_over_{other}']:.2f}x; identical answers "
                      f"{result[f'same_answers_inprocess_{other}']}; prompt tokens equal {result[f'prompt_tokens_equal_inprocess_{other}']}")
    if "inprocess" in raws and "server" in raws:
        inputs = same_inputs(raws["inprocess"], raws["server"])
        result["inputs_inprocess_server"] = inputs
        print(f"in-process vs server inputs: prompt tokens equal {inputs['prompt_tokens_equal']}, "
              f"<t seconds> stamps equal {inputs['stamps_equal']}, mp4 {inputs['codecs']}; server engine args {' '.join(match)}")
        if not args.no_serial:  # the same again, one request at a time on each side: no batching, so only the inputs can differ
            raw_i, result["inprocess_serial"] = inprocess_route(args, model, data, videos, work, env, [*engine, "--batch_size", "1"],
                                                                "inprocess_serial")
            raw_s, result["server_serial"] = server_route(args, model, data, videos, work, env, max_len, match, "server_serial",
                                                          concurrency=1)
            result["same_answers_inprocess_server_serial"] = agreement(answers(raw_i), answers(raw_s))
            result["same_answers_inprocess_serial_batched"] = agreement(answers(raw_i), answers(raws["inprocess"]))
            result["same_answers_server_serial_batched"] = agreement(answers(raw_s), answers(raws["server"]))
            print(f"one request at a time on both: identical answers {result['same_answers_inprocess_server_serial']} "
                  f"(each route against its own batched run: in-process {result['same_answers_inprocess_serial_batched']}, "
                  f"server {result['same_answers_server_serial_batched']})")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result, indent=1), encoding="utf-8")
    if not args.work_dir:
        shutil.rmtree(work, ignore_errors=True)
    if "hf" in routes and not (result["hf"]["batches"] and (result["hf"]["batch_size"] or 0) > 1):
        print(f"FAIL: the HF route did not batch (batch size {result['hf']['batch_size']}, {result['hf']['batches']} batches)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
