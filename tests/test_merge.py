"""Merging the shard raw files of a SLURM array run (k9bench.merge)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from k9bench import CATEGORIES
from k9bench.artifact_io import write_json_atomic
from k9bench.layout import checkpoint_path
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
    a = write_shard(tmp_path / "raw.shard0of3.json", [0])
    assert main(["--output_file", str(tmp_path / "raw.json"), "--expect_shards", "3", str(a)]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if " ERROR " in line]
    # one line: the flag, how many were given and which, how many expected, the missing ones by name
    assert len(err) == 1 and "--expect_shards 3: 1 shard file(s) given" in err[0] and str(a) in err[0] and "3 expected" in err[0]
    assert "raw.shard1of3.json, raw.shard2of3.json" in err[0] and "Traceback" not in err[0]
    assert not (tmp_path / "raw.json").exists()
    assert main(["--output_file", str(tmp_path / "raw.json"), "--expect_shards", "0", str(a)]) == 2
    assert "--expect_shards" in capsys.readouterr().err


@pytest.mark.parametrize("where", ["folder", "under a file"])
def test_an_output_that_cannot_be_a_file_is_one_line_exit_2(tmp_path, capsys, where):
    a = write_shard(tmp_path / "a.json", [0])
    out = tmp_path / "folder" if where == "folder" else a / "o.json"
    (tmp_path / "folder").mkdir()
    before = a.read_bytes()
    assert main(["--output_file", str(out), str(a)]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if " ERROR " in line]
    assert len(err) == 1 and str(out) in err[0] and "Traceback" not in err[0] and a.read_bytes() == before


def test_merge_stage_is_done_until_a_shard_changes(tmp_path):
    from k9bench.merge import MergeStage
    from k9bench.stage import run_stage

    s0 = write_shard(tmp_path / "a.json", [0, 1])
    s1 = write_shard(tmp_path / "b.json", [3, 4])
    stage = MergeStage([s0, s1], tmp_path / "m.json", expect_shards=2)
    assert stage.done() == f"{tmp_path / 'm.json'} is missing"
    assert run_stage(stage) == 0
    assert stage.done() is None and json.loads((tmp_path / "m.json").read_text())["stage"]["name"] == "merge"
    write_shard(s1, [3, 5])
    assert "changed" in stage.done()
    s1.unlink()
    assert stage.done() == f"shard file {s1} is missing"


def test_videos_of_the_shards_are_listed_once(tmp_path):
    s0 = write_shard(tmp_path / "a.json", [0, 1])
    s1 = write_shard(tmp_path / "b.json", [3, 4])
    for path, scene in ((s0, "v0000000000"), (s1, "v0000000001")):
        data = json.loads(path.read_text())
        data["videos"] = [{"scene_name": scene, "bytes": 10, "sha256": "0" * 64, "duration": 5.0, "frames_sampled": 4}]
        path.write_text(json.dumps(data))
    meta = merge_shards([s0, s1]).artifact.meta
    assert [v["scene_name"] for v in meta["videos"]] == ["v0000000000", "v0000000001"] and "differing_by_shard" not in meta


def shard_meta(shard_id: int, num_shards: int, *, failures: dict, tokens: tuple, generated: int, wall: float,
               started: str, finished: str, **inference) -> dict:
    """Top-level keys of a raw shard, as eval_video_llm.py writes them (the per-shard ones included)."""
    return {
        "model_name": "tiny", "model_name_or_path": "/m/tiny", "num_shards": num_shards, "shard_id": shard_id,
        "failed_count": sum(failures.values()), "failures_by_class": failures,
        "token_totals": {"input": tokens[0], "output": tokens[1], "records_with_counts": tokens[2]},
        "inference": {"backend": {"name": "hf", "warnings": [f"w{shard_id}"]}, "batch_size": 1, "seed": 0,
                      "prompt": {"system_prompt_sha256": "abc"}, **inference},
        "run_stats": {"started_at": started, "finished_at": finished, "resumed": 1, "generated": generated, "failed": 0,
                      "oom_retries": shard_id, "batch_fallbacks": 0, "generate_seconds": 2.0, "frame_wait_seconds": 0.5,
                      "wall_seconds": wall, "questions_per_second": generated / wall, "frame_cache": None, "auto_download": None},
    }


def write_full_shard(path: Path, idxs, meta: dict, errors: dict | None = None) -> Path:
    records = []
    for i in idxs:
        rec = raw_record(i)
        rec.update(num_input_tokens=100 + i, num_output_tokens=10)
        if errors and i in errors:
            rec.update(error="e", error_class=errors[i], response="", answer="")
            rec.pop("num_input_tokens")
            rec.pop("num_output_tokens")
        records.append(rec)
    write_json_atomic(path, {"individual_results": records, "total_count": len(records), **meta})
    return path


def test_per_shard_counters_are_recomputed_or_listed_not_copied_from_shard0(tmp_path):
    """failed_count, failures_by_class, token_totals and run_stats describe one shard each: the merged
    file recomputes them over every record, or lists them per shard, never shows shard 0's as the run's."""
    meta0 = shard_meta(0, 2, failures={}, tokens=(303, 30, 3), generated=2, wall=4.0,
                       started="2026-01-01T00:00:05", finished="2026-01-01T00:01:00")
    meta0.update(thinking_unfinished_count=0, queue_host="node-a", same_everywhere="x")
    s0 = write_full_shard(tmp_path / "raw.shard0of2.json", [0, 1, 2], meta0)
    meta1 = shard_meta(1, 2, failures={"decode_error": 1, "missing_video": 1}, tokens=(103, 10, 1),
                       generated=3, wall=6.0, started="2026-01-01T00:00:01", finished="2026-01-01T00:02:00")
    meta1.update(thinking_unfinished_count=1, queue_host="node-b", same_everywhere="x")
    s1 = write_full_shard(tmp_path / "raw.shard1of2.json", [3, 4, 5], meta1, errors={4: "decode_error", 5: "missing_video"})
    data1 = json.loads(s1.read_text())
    data1["individual_results"][0]["thinking_unfinished"] = True
    write_json_atomic(s1, data1)
    out = tmp_path / "raw.json"
    assert main(["--output_file", str(out), "--expect_shards", "2", str(s0), str(s1)]) == 0
    data = json.loads(out.read_text())
    assert data["failed_count"] == 2
    assert data["failures_by_class"] == {"decode_error": 1, "missing_video": 1}
    assert data["token_totals"] == {"input": 100 * 4 + 0 + 1 + 2 + 3, "output": 40, "records_with_counts": 4}
    stats = data["run_stats"]
    assert [s["shard_id"] for s in stats["per_shard"]] == [0, 1]
    assert [s["generated"] for s in stats["per_shard"]] == [2, 3]
    assert (stats["generated"], stats["resumed"], stats["oom_retries"]) == (5, 2, 1)
    assert stats["wall_seconds_sum"] == 10.0 and stats["generate_seconds"] == 4.0
    assert (stats["started_at"], stats["finished_at"]) == ("2026-01-01T00:00:01", "2026-01-01T00:02:00")
    assert "num_shards" not in data and "shard_id" not in data
    # settings shared by every shard are kept; the backend description differs (warnings): listed per shard
    assert data["inference"]["batch_size"] == 1 and data["model_name_or_path"] == "/m/tiny"
    assert [b["warnings"] for b in data["inference"]["backend_by_shard"]] == [["w0"], ["w1"]]
    assert data["thinking_unfinished_count"] == 1  # recomputed from the records (shard 0 said 0)
    # an unknown per-shard key: listed per shard, not shard 0's value for the whole run
    assert "queue_host" not in data
    assert [d["value"] for d in data["differing_by_shard"]["queue_host"]] == ["node-a", "node-b"]
    assert data["same_everywhere"] == "x"


def test_shard_set_must_be_complete_and_consistent(tmp_path, capsys):
    """Without --expect_shards, the shards' own num_shards/shard_id still catch a missing or repeated shard."""
    def meta(sid: int, n: int = 3, **inference) -> dict:
        return shard_meta(sid, n, failures={}, tokens=(0, 0, 0), generated=1, wall=1.0, started="a", finished="b", **inference)

    s0 = write_full_shard(tmp_path / "s0.json", [0], meta(0))
    s1 = write_full_shard(tmp_path / "s1.json", [1], meta(1))
    out = tmp_path / "out.json"
    assert main(["--output_file", str(out), str(s0), str(s1)]) == 1
    assert "shard 2 of 3 missing" in capsys.readouterr().err
    copy = write_full_shard(tmp_path / "s1copy.json", [2], meta(1))
    assert main(["--output_file", str(out), str(s0), str(s1), str(copy)]) == 1
    err = capsys.readouterr().err
    assert "shard_id 1" in err and "s1copy.json" in err
    other_n = write_full_shard(tmp_path / "s2.json", [2], meta(2, n=4))
    assert main(["--output_file", str(out), str(s0), str(s1), str(other_n)]) == 1
    assert "num_shards" in capsys.readouterr().err
    other_model = write_full_shard(tmp_path / "s2m.json", [2], {**meta(2), "model_name_or_path": "/other/tiny"})
    assert main(["--output_file", str(out), str(s0), str(s1), str(other_model)]) == 1
    assert "disagree on model_name_or_path" in capsys.readouterr().err
    other_prompt = write_full_shard(tmp_path / "s2p.json", [2], meta(2, prompt={"system_prompt_sha256": "zzz"}))
    assert main(["--output_file", str(out), str(s0), str(s1), str(other_prompt)]) == 1
    err = capsys.readouterr().err
    assert "inference.prompt" in err and "s2p.json" in err
    assert not out.exists()
    good = write_full_shard(tmp_path / "s2ok.json", [2], meta(2))
    assert main(["--output_file", str(out), str(s0), str(s1), str(good)]) == 0


def test_output_that_is_a_shard_is_refused_and_missing_shards_are_named(tmp_path):
    """The merged file never overwrites a shard; a missing shard is named as k9bench.layout names it."""
    s0 = write_shard(tmp_path / "raw_m_mf4_n-1.shard0of2.json", [0, 1])
    with pytest.raises(MergeError, match="the output file is one of the shards"):
        merge_shards([s0], output=s0)
    assert main(["--output_file", str(s0), str(s0)]) == 2  # the writable-output check (k9bench.stage): bad input
    assert json.loads(s0.read_text())["total_count"] == 2
    data = json.loads(s0.read_text())
    data.update(num_shards=2, shard_id=0)
    s0.write_text(json.dumps(data))
    with pytest.raises(MergeError, match=r"shard 1 of 2 missing \(expected .*raw_m_mf4_n-1\.shard1of2\.json\)"):
        merge_shards([s0], output=tmp_path / "raw_m_mf4_n-1.json")


@pytest.mark.parametrize("fault, words", [
    ("empty", ["no records"]),
    ("four_options", ["record idx 4", "4 options", "A-E"]),
    ("ground_truth_z", ["record idx 4", "ground truth 'Z'", "options"]),
])
def test_a_shard_scoring_would_refuse_is_refused_naming_file_record_and_field(tmp_path, capsys, fault, words):
    """Issue 23: a shard with no records, a record with four options or the answer letter Z is refused
    (one line, no traceback, nothing written, an earlier merged file unchanged), not merged silently."""
    a = write_shard(tmp_path / "a.json", [0, 1, 2])
    b = tmp_path / "b.json"
    if fault == "empty":
        write_json_atomic(b, {"individual_results": [], "total_count": 0})
    else:
        rec = raw_record(4)
        if fault == "four_options":
            rec["options"] = rec["options"][:4]
        else:
            rec["ground_truth"] = "Z"
        write_json_atomic(b, {"individual_results": [raw_record(3), rec], "total_count": 2})
    out = tmp_path / "m.json"
    out.write_text('{"earlier": true}')
    assert main(["--output_file", str(out), str(a), str(b)]) == 1
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and str(b) in lines[0] and "Traceback" not in err
    assert all(w in lines[0] for w in words), lines[0]
    assert out.read_text() == '{"earlier": true}'


def test_failed_records_of_both_forms_and_a_lower_case_letter_still_merge(tmp_path):
    """The record checks skip failed samples: ours and the reference's {"example_id", "error"} form merge;
    a lower-case ground truth is checked as scoring reads it and merged as given."""
    a = write_shard(tmp_path / "a.json", [0, 1])
    lower = raw_record(3)
    lower["ground_truth"] = "b"
    records = [raw_record(2, error="cannot decode"), {"example_id": 5, "error": "boom"}, lower]
    write_json_atomic(tmp_path / "b.json", {"individual_results": records, "total_count": 3})
    out = tmp_path / "m.json"
    assert main(["--output_file", str(out), str(a), str(tmp_path / "b.json")]) == 0
    merged = {r["idx"]: r for r in json.loads(out.read_text())["individual_results"]}
    assert sorted(merged) == [0, 1, 2, 3, 5] and merged[5]["error"] == "boom" and merged[3]["ground_truth"] == "b"


@pytest.mark.parametrize("which", ["shard", "second shard", "output"])
def test_a_symlink_loop_is_one_line_naming_it_and_exit_2(tmp_path, capsys, which):
    """Issue 31 item 3: a shard (or the output) that is a symbolic link loop was a traceback (RuntimeError: Symlink loop)."""
    a = write_shard(tmp_path / "raw.shard0of2.json", [0])
    loop = tmp_path / "loop_a.json"
    loop.symlink_to(tmp_path / "loop_b.json")
    (tmp_path / "loop_b.json").symlink_to(loop)
    out = tmp_path / "raw.json"
    shards = {"shard": [loop, a], "second shard": [a, loop], "output": [a]}[which]
    if which == "output":
        out = loop
    assert main(["--output_file", str(out), *map(str, shards)]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and str(loop) in lines[0] and "symbolic link loop" in lines[0] and "Traceback" not in err
    assert not (tmp_path / "raw.json").exists()
    # the library call says the same (a MergeError naming the path, no RuntimeError)
    if which != "output":
        with pytest.raises(MergeError, match="symbolic link loop"):
            merge_shards(shards, tmp_path / "raw.json")
