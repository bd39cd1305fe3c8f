"""Merging the shard raw files of a SLURM array run (k9bench.merge)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from k9bench import CATEGORIES
from k9bench.artifacts import checkpoint_path, write_json_atomic
from k9bench.merge import MergeError, main, merge_shards


def raw_record(idx: int, *, model: str = "tiny", frames: int = 4, error: str | None = None) -> dict:
    rec = {
        "idx": idx, "question_category": CATEGORIES[idx % 5], "video": f"v{idx // 3:010d}.mp4", "ground_truth": "A",
        "response": f"r{idx}", "answer": f"a{idx}", "scene_name": f"v{idx // 3:010d}", "question": "q",
        "options": [f"{k}. o" for k in "ABCDE"], "prompt": "p", "model_name": model, "max_frames": frames,
        "timestamp": f"t{idx}", "video_duration": 5.0,
    }
    if error:
        rec.update(error=error, error_class="decode_error", response="", answer="")
    return rec


def write_shard(path: Path, idxs, **kw) -> Path:
    records = [raw_record(i, **kw) for i in idxs]
    write_json_atomic(path, {"individual_results": records, "total_count": len(records), "attn_implementation": "sdpa",
                             "provenance": {"script": "eval_video_llm.py"}})
    return path


def test_merge_cli_sorts_and_keeps_failures(tmp_path):
    # shards by video: videos 0,2 in shard 0; videos 1,3 in shard 1 (idx = 3*video + k)
    s0 = write_shard(tmp_path / "raw.shard0of2.json", [0, 1, 2, 6, 7, 8])
    records1 = [raw_record(i) for i in (3, 4, 5, 9, 10)] + [raw_record(11, error="cannot decode")]
    write_json_atomic(tmp_path / "raw.shard1of2.json", {"individual_results": records1, "total_count": 6})
    out = tmp_path / "raw.json"
    assert main(["--output_file", str(out), "--expect_shards", "2", str(s0), str(tmp_path / "raw.shard1of2.json")]) == 0
    data = json.loads(out.read_text())
    assert [r["idx"] for r in data["individual_results"]] == list(range(12))
    assert data["total_count"] == 12
    assert data["individual_results"][11]["error"] == "cannot decode"
    assert data["attn_implementation"] == "sdpa"  # top-level keys of the first shard kept
    assert [m["records"] for m in data["merged_from"]] == [6, 6]
    assert data["provenance"]["script"] == "k9bench.merge"
    # the merged record equals the shard record exactly
    assert data["individual_results"][6] == raw_record(6)


def test_single_shard_and_identical_duplicates(tmp_path):
    a = write_shard(tmp_path / "a.json", [0, 1, 2])
    b = write_shard(tmp_path / "b.json", [2, 3])
    result = merge_shards([a, b])
    assert [r.idx for r in result.artifact.records] == [0, 1, 2, 3]
    assert result.duplicates == 1


@pytest.mark.parametrize(
    "setup, message",
    [
        ("missing", "shard file missing"),
        ("partial", "shard not finished"),
        ("conflict", "differs from the one in"),
        ("model", "disagree on model_name"),
        ("frames", "disagree on max_frames"),
        ("eval", "is an eval file"),
        ("twice", "given twice"),
        ("badjson", "invalid JSON"),
    ],
)
def test_refusals_name_the_file(tmp_path, capsys, setup, message):
    a = write_shard(tmp_path / "shard0.json", [0, 1, 2])
    b = tmp_path / "shard1.json"
    if setup == "partial":
        checkpoint_path(b).write_text(json.dumps(raw_record(3)) + "\n")
    elif setup == "conflict":
        recs = [raw_record(2), raw_record(3)]
        recs[0]["answer"] = "something else"
        write_json_atomic(b, {"individual_results": recs, "total_count": 2})
    elif setup == "model":
        write_shard(b, [3], model="other")
    elif setup == "frames":
        write_shard(b, [3], frames=8)
    elif setup == "eval":
        write_json_atomic(b, {"evaluation_timestamp": "t", "category_wise_accuracy": {}, "individual_results": [raw_record(3)]})
    elif setup == "twice":
        b = a
    elif setup == "badjson":
        b.write_text("{")
    out = tmp_path / "out.json"
    assert main(["--output_file", str(out), str(a), str(b)]) == 1
    err = capsys.readouterr().err
    assert message in err
    if setup not in ("model", "frames"):
        assert str(b) in err
    assert not out.exists()


def test_expect_shards_count(tmp_path, capsys):
    a = write_shard(tmp_path / "a.json", [0])
    assert main(["--output_file", str(tmp_path / "o.json"), "--expect_shards", "3", str(a)]) == 2
    assert "3 expected" in capsys.readouterr().err
