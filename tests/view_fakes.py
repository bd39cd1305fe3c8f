"""Cheap inputs for the results-page tests: eval files of the 12 demo questions, with the frame indices a
real :class:`k9bench.video.cache.FrameCache` gives for the demo videos, similarities from the fake
embedder and the fine rule's verdicts (no model, no embedding model)."""

from __future__ import annotations

from pathlib import Path

from k9bench.artifact_io import write_json_atomic

MAX_FRAMES = 4
THRESHOLD = 0.5
DEMO_NOTE = "DEMO: a tiny model with random weights: these scores are MEANINGLESS (chance is 20%)."


def _frames_block(video_dir: Path, max_frames: int = MAX_FRAMES) -> dict:
    return {"fps": 2.0, "max_frames": max_frames, "max_pixels": 100352, "min_pixels": None, "image_patch_size": 14, "decoder": "pyav"}


def frame_indices(video_dir: Path, max_frames: int = MAX_FRAMES) -> dict:
    """scene -> (indices, duration) for the demo videos under these sampling settings."""
    from k9bench.video.cache import FrameCache
    from k9bench.view.thumbs import _sampling

    out = {}
    with FrameCache(_sampling(_frames_block(video_dir, max_frames))) as cache:
        for video in sorted(video_dir.glob("*.mp4")):
            frames = cache.get(video)
            out[video.stem] = (list(frames.indices), frames.duration)
            cache.release(video)
    return out


def demo_eval(path: Path, video_dir: Path, *, model: str = "tiny-m", shift: int = 0, failed: tuple = (), indices: dict | None = None,
              max_frames: int = MAX_FRAMES) -> Path:
    """An eval file of the demo's 12 questions: the model answers option ``(gt + shift + idx) % 5``'s text."""
    from k9bench.data.demo import demo_rows
    from tests.fake_embedder import FakeEmbedder

    indices = indices or frame_indices(video_dir, max_frames)
    embed = FakeEmbedder()
    records = []
    for row in demo_rows():
        scene = row["video_url"].rstrip("/").split("v=")[-1].split("/")[-1]
        letters = "ABCDE"
        pick = letters[(letters.index(row["correct_answer"]) + shift + row["idx"] % 3) % 5] if shift >= 0 else row["correct_answer"]
        answer = row["options"][pick]
        vecs = embed.encode([answer, *(row["options"][k] for k in letters)])
        sims = {k: float(vecs[0] @ vecs[1 + i]) for i, k in enumerate(letters)}
        best = max(sims, key=sims.get)
        rec = {"idx": row["idx"], "question_category": row["question_category"], "video": f"{scene}.mp4", "scene_name": scene,
               "video_url": row["video_url"], "ground_truth": row["correct_answer"], "response": answer, "answer": answer,
               "question": row["question"], "options": [f"{k}. {row['options'][k]}" for k in letters], "prompt": "p",
               "model_name": model, "max_frames": max_frames, "timestamp": "t", "frame_indices": indices[scene][0],
               "num_frames": len(indices[scene][0]), "video_duration": indices[scene][1], "cosine_similarities": sims,
               "is_correct": best == row["correct_answer"] and sims[best] >= THRESHOLD,
               "evaluation_explanation": f"closest option {best} ({sims[best]:.3f}), threshold {THRESHOLD}", "eval_mode": "fine"}
        if row["idx"] in failed:
            rec.update(error="VideoError: decode failed", error_class="decode_error", is_correct=False, answer="", response="",
                       cosine_similarities=None)
        records.append(rec)
    inference = {"text_only": False, "frames": _frames_block(video_dir, max_frames), "dataset": {"source": "demo", "video_dir": str(video_dir)},
                 "prompt": {"placement": "system"}}
    from k9bench import CATEGORIES

    cats = {c: {"correct": sum(r["is_correct"] for r in records if r["question_category"] == c),
                "total": sum(r["question_category"] == c for r in records)} for c in CATEGORIES}
    meta = {"threshold": THRESHOLD, "eval_mode": "fine", "category_wise_accuracy": cats, "correct_count": sum(r["is_correct"] for r in records),
            "total_count": len(records), "metadata": {"similarity_model": "fake-embedder"},
            "input_meta": {"model_name": model, "model_name_or_path": f"/models/{model}", "inference": inference},
            "individual_results": records}
    write_json_atomic(path, meta)
    return path


def demo_judge(path: Path, idx: tuple = (0, 1, 2)) -> Path:
    entries = [{"idx": i, "scores": {"Logic": 7, "Factuality": 6, "Accuracy": 5, "Conciseness": 8, "Overall": 6},
                "cot": f"judge reason for {i}", "judge_model": "judge-test"} for i in idx]
    write_json_atomic(path, entries)
    return path
