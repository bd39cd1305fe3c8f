import errno
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from k9bench.artifacts import (
    JudgeEntry,
    QuestionRecord,
    RecordsArtifact,
    SkippedEntry,
    load_records_artifact,
    provenance,
)
from k9bench.artifact_io import ArtifactError, CheckpointLog, WriteFailed, read_json, write_json_atomic

RAW_KEYS = ["idx", "question_category", "video", "ground_truth", "response", "answer", "scene_name",
            "question", "options", "prompt", "model_name", "max_frames", "timestamp"]

REF_RAW_RECORD = {
    "idx": 3, "question_category": "context analysis", "video": "abcdefghijk.mp4", "ground_truth": "C",
    "response": '{"reasoning": "r", "answer": "a park"}', "answer": "a park", "scene_name": "abcdefghijk",
    "question": "Where?", "options": ["A. a", "B. b", "C. c", "D. d", "E. e"], "prompt": "<|im_start|>...",
    "model_name": "Qwen3-VL-4B-Instruct", "max_frames": 32, "timestamp": "2026-01-01T00:00:00",
}
REF_FAILED_RECORD = {"idx": 4, "question_category": "context analysis", "video": "abcdefghijk.mp4",
                     "ground_truth": "A", "error": "Video not found"}


def test_raw_round_trip_field_for_field(tmp_path):
    ref = {"individual_results": [REF_RAW_RECORD, REF_FAILED_RECORD], "total_count": 2}
    path = tmp_path / "raw.json"
    path.write_text(json.dumps(ref))
    art = load_records_artifact(path)
    assert art.stage == "raw"
    assert art.records[1].failed and not art.records[0].failed
    out = art.to_dict()
    assert list(out) == ["individual_results", "total_count"]
    assert out["individual_results"][0] == REF_RAW_RECORD
    assert list(out["individual_results"][0]) == RAW_KEYS
    # the failed record comes back exactly as the reference wrote it
    assert out["individual_results"][1] == REF_FAILED_RECORD
    write_json_atomic(tmp_path / "again.json", art)
    assert load_records_artifact(tmp_path / "again.json").to_dict() == out


def test_sim_and_eval_round_trip(tmp_path):
    sims = {"A": 0.1, "B": 0.2, "C": 0.9, "D": 0.3, "E": 0.0}
    sim = {"individual_results": [dict(REF_RAW_RECORD, cosine_similarities=sims)], "total_count": 1,
           "similarity_model": "Qwen/Qwen3-Embedding-8B", "similarity_calculated_at": "2026-01-01T00:00:01"}
    (tmp_path / "sim.json").write_text(json.dumps(sim))
    art = load_records_artifact(tmp_path / "sim.json")
    assert art.stage == "sim"
    assert art.to_dict() == sim
    ev_record = dict(REF_RAW_RECORD, cosine_similarities=sims, is_correct=True,
                     evaluation_explanation="C is the best match (0.900 > 0.5)", eval_mode="fine")
    ev = {"evaluation_timestamp": "t", "eval_mode": "fine", "threshold": 0.5, "accuracy": 1.0, "correct_count": 1,
          "total_count": 1, "category_wise_accuracy": {"context analysis": {"accuracy": 1.0, "correct": 1, "total": 1}},
          "individual_results": [ev_record],
          "metadata": {"similarity_model": "m", "similarity_calculated_at": "t"}}
    (tmp_path / "eval.json").write_text(json.dumps(ev))
    art = load_records_artifact(tmp_path / "eval.json")
    assert art.stage == "eval"
    assert art.to_dict() == ev
    assert list(art.to_dict()) == list(ev)  # key order as the reference writes it


def test_older_threshold_results_layout_loads(tmp_path):
    old = {"threshold_results": {"0.5": {"accuracy": 0.0, "individual_results": [REF_RAW_RECORD]}}}
    (tmp_path / "old.json").write_text(json.dumps(old))
    art = load_records_artifact(tmp_path / "old.json")
    assert [r.idx for r in art.records] == [3]


def test_older_layout_with_several_thresholds_says_which_it_used(tmp_path, caplog):
    old = {"threshold_results": {"0.3": {"individual_results": [REF_RAW_RECORD]},
                                 "0.5": {"individual_results": [dict(REF_RAW_RECORD, idx=9)]}}}
    (tmp_path / "old.json").write_text(json.dumps(old))
    with caplog.at_level("WARNING", logger="k9bench.artifacts"):
        art = load_records_artifact(tmp_path / "old.json")
    assert [r.idx for r in art.records] == [3] and art.meta["threshold_key"] == "0.3"
    assert "holds 2 record lists (0.3, 0.5); using the first, '0.3'" in caplog.text


def test_judge_entry_and_skipped_round_trip():
    entry = {"idx": 1, "video_url": "https://youtu.be/abcdefghijk", "scene_name": "abcdefghijk",
             "question_category": "posture analysis", "question": "q", "correct_answer": "sits",
             "model_output": "it sits", "cot": "fine", "scores": {"Logic": 7, "Factuality": 8, "Accuracy": 9,
             "Conciseness": 6, "Overall": 8}, "judge_model": "gpt-4o", "timestamp": "t"}
    assert JudgeEntry.from_dict(entry).to_dict() == entry
    skipped = {"idx": 2, "error": "parse failure", "timestamp": "t", "raw_reply": "??"}
    assert SkippedEntry.from_dict(skipped).to_dict() == skipped
    with pytest.raises(ArtifactError, match="lacks scores"):
        JudgeEntry.from_dict({k: v for k, v in entry.items() if k != "scores"})


def test_bad_artifacts_name_the_file(tmp_path):
    with pytest.raises(ArtifactError, match="no such file"):
        load_records_artifact(tmp_path / "nope.json")
    (tmp_path / "bad.json").write_text("{oops")
    with pytest.raises(ArtifactError, match=r"bad\.json: invalid JSON at line 1"):
        read_json(tmp_path / "bad.json")
    (tmp_path / "shape.json").write_text("[1, 2]")
    with pytest.raises(ArtifactError, match="no 'individual_results'"):
        load_records_artifact(tmp_path / "shape.json")
    (tmp_path / "noidx.json").write_text(json.dumps({"individual_results": [{"answer": "x"}]}))
    with pytest.raises(ArtifactError, match="record #0: record has no 'idx'"):
        load_records_artifact(tmp_path / "noidx.json")


def test_atomic_write_leaves_old_file_when_serialisation_fails(tmp_path):
    target = tmp_path / "out.json"
    write_json_atomic(target, {"ok": 1})
    with pytest.raises(ValueError):
        write_json_atomic(target, {"bad": float("nan")})
    assert json.loads(target.read_text()) == {"ok": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]  # no temp file left behind


def test_atomic_write_gives_the_usual_file_mode(tmp_path):
    from k9bench import artifact_io

    write_json_atomic(tmp_path / "shared.json", {"a": 1})
    assert (tmp_path / "shared.json").stat().st_mode & 0o777 == 0o666 & ~artifact_io._UMASK


def test_provenance_records_args_versions_commit_and_hides_secrets():
    info = provenance("x.py", ["--api_key", "sk-123", "--model", "m", "--token=abc"])
    assert info["argv"] == ["--api_key", "***", "--model", "m", "--token=***"]
    assert info["packages"]["torch"]
    assert "git_commit" in info and info["script"] == "x.py"


def test_provenance_keeps_numbers_of_flags_that_only_mention_tokens():
    argv = ["--max_tokens", "512", "--max_new_tokens=3072", "--tokenizer", "t", "--hf_token", "hf_x", "--openai-api-key=sk"]
    info = provenance("x.py", argv, dict(max_tokens=512, max_new_tokens=3072, hf_token="hf_x", secret_key="s"))
    assert info["argv"] == ["--max_tokens", "512", "--max_new_tokens=3072", "--tokenizer", "t", "--hf_token", "***",
                            "--openai-api-key=***"]
    assert info["args"] == {"max_tokens": 512, "max_new_tokens": 3072, "hf_token": "***", "secret_key": "***"}


def test_checkpoint_discards_torn_line_and_dedups(tmp_path):
    path = tmp_path / "ck.jsonl"
    path.write_text('{"idx": 1, "v": "a"}\n{"idx": 2, "v": "b"}\n{"idx": 1, "v": "c"}\n{"idx": 3, "v')
    log = CheckpointLog(path)
    done = log.load()
    assert done == {1: {"idx": 1, "v": "c"}, 2: {"idx": 2, "v": "b"}}
    log.append({"idx": 3, "v": "d"})
    log.close()
    assert CheckpointLog(path).load()[3] == {"idx": 3, "v": "d"}


WRITER = r"""
import sys, time
from k9bench.artifact_io import CheckpointLog
log = CheckpointLog(sys.argv[1])
done = log.load()
for i in range(int(sys.argv[2])):
    if i in done:
        continue
    log.append({"idx": i, "payload": "x" * 2000})
    print(i, flush=True)
    time.sleep(0.002)
log.close()
"""


def test_sigkilled_writer_resumes_without_loss_or_duplicates(tmp_path, repo_root):
    path = tmp_path / "ck.jsonl"
    n = 400
    env = dict(os.environ, PYTHONPATH=str(repo_root))
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(n)], stdout=subprocess.PIPE, text=True, env=env)
    seen = 0
    for line in proc.stdout:
        seen += 1
        if seen == 120:
            os.kill(proc.pid, signal.SIGKILL)
            break
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    partial = CheckpointLog(path).load()
    assert 120 <= len(partial) < n
    subprocess.run([sys.executable, "-c", WRITER, str(path), str(n)], check=True, env=env, capture_output=True)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert sorted(r["idx"] for r in lines) == list(range(n))  # each exactly once


# ---------------------------------------------------------------- the one reader (issue 23)


@pytest.mark.parametrize("make, needle", [
    (lambda p: p.write_bytes(b'{"a": "\xff\xfe"}'), "not UTF-8 text (byte 0xff at offset 7)"),
    (lambda p: p.write_bytes(b"\x00\x01\x02binary"), "invalid JSON at line 1 column 1"),
    (lambda p: p.write_text("[" * 200_000), "JSON nested too deeply to read"),
    (lambda p: p.write_text(""), "the file is empty"),
    (lambda p: p.write_text("  \n\n"), "the file holds only white space"),
    (lambda p: p.write_text('{"a": 1'), "invalid JSON at line 1 column 8"),
    (lambda p: p.mkdir(), "is a folder, not a file"),
    (lambda p: (p.symlink_to(p.with_name("loop2")), p.with_name("loop2").symlink_to(p)), "a symbolic link loop"),
    (lambda p: p.symlink_to(p.with_name("gone")), "a symbolic link to nothing"),
    (lambda p: os.mkfifo(p), "not a regular file"),
])
def test_the_one_reader_names_the_file_and_the_fault(tmp_path, make, needle):
    path = tmp_path / "in.json"
    make(path)
    with pytest.raises(ArtifactError) as info:
        read_json(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ") and needle in message and "\n" not in message


def test_a_path_under_a_file_names_the_file(tmp_path):
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ArtifactError, match=r"afile is a file, not a folder"):
        read_json(tmp_path / "afile" / "in.json")
    with pytest.raises(ArtifactError, match="no such file"):
        read_json(tmp_path / "nope" / "in.json")


def test_read_text_refuses_bad_bytes_and_empty_files(tmp_path):
    from k9bench.artifact_io import read_text

    (tmp_path / "p.txt").write_bytes(b"caf\xe9")
    with pytest.raises(ArtifactError, match=r"p\.txt: not UTF-8 text \(byte 0xe9 at offset 3\)"):
        read_text(tmp_path / "p.txt")
    (tmp_path / "e.txt").write_text("")
    with pytest.raises(ArtifactError, match="the file is empty"):
        read_text(tmp_path / "e.txt")
    assert read_text(tmp_path / "e.txt", allow_empty=True) == ""


def record_dict(idx, **extra):
    return {"idx": idx, "question_category": "posture analysis", "ground_truth": "A", "answer": "x", **extra}


@pytest.mark.parametrize("idx", [1.0, True, "3", None])
def test_an_idx_that_is_not_an_integer_is_refused(tmp_path, idx):
    path = tmp_path / "raw.json"
    path.write_text(json.dumps({"individual_results": [record_dict(0), record_dict(idx)]}))
    with pytest.raises(ArtifactError, match=rf"record #1: idx {re.escape(repr(idx))} is not an integer"):
        load_records_artifact(path)


def test_a_duplicate_idx_names_both_positions(tmp_path):
    path = tmp_path / "raw.json"
    path.write_text(json.dumps({"individual_results": [record_dict(4), record_dict(5), record_dict(4)]}))
    with pytest.raises(ArtifactError, match=r"idx 4 appears twice, records #0 and #2"):
        load_records_artifact(path)
    # a reference failed sample's example_id (a position) may share a number with a question: kept
    path.write_text(json.dumps({"individual_results": [record_dict(4), {"example_id": 4, "error": "boom"}]}))
    assert [r.idx for r in load_records_artifact(path).records] == [4, 4]


def test_a_file_without_records_is_refused_where_records_are_needed(tmp_path):
    path = tmp_path / "eval.json"
    path.write_text(json.dumps({"individual_results": [], "total_count": 0}))
    assert load_records_artifact(path).records == []
    with pytest.raises(ArtifactError, match=r"eval\.json: no records in 'individual_results'"):
        load_records_artifact(path, allow_empty=False)


# ---------------------------------------------------------------- damaged checkpoints resume (issue 23)

GOOD = [{"idx": i, "v": "x" * i} for i in range(4)]


def lines_of(records):
    return b"".join(json.dumps(r).encode() + b"\n" for r in records)


@pytest.mark.parametrize("damage, rejected, torn", [
    (lambda good, cut: good + b'{"idx": 4, "v": "half', 0, 1),                      # torn by a kill
    (lambda good, cut: good[:cut] + b"#garbage line%%\n" + good[cut:], 1, 0),       # garbage between records
    (lambda good, cut: good + b"\x00" * 300, 0, 1),                                 # NUL tail, no newline
    (lambda good, cut: good + b"\x00" * 300 + b"\n", 1, 0),                         # NUL tail, a whole line
    (lambda good, cut: good[:cut] + b"\x00" * 50 + b"\n" + good[cut:], 1, 0),       # NULs before later records
    (lambda good, cut: good + b'[1, 2]\n{"no_idx": 1}\n', 2, 0),                    # JSON, but no record
])
def test_a_damaged_checkpoint_resumes_with_every_valid_record(tmp_path, caplog, damage, rejected, torn):
    path = tmp_path / "out.json.partial.jsonl"
    good = lines_of(GOOD)
    data = damage(good, good.index(b"\n") + 1)
    path.write_bytes(data)
    log = CheckpointLog(path)
    with caplog.at_level("WARNING"):
        done = log.load()
    assert done == {r["idx"]: r for r in GOOD}  # every valid record
    assert (log.rejected, log.torn) == (rejected, torn)
    if rejected:
        moved = [json.loads(line) for line in log.rejected_path.read_text().splitlines()]
        assert len(moved) == rejected and all(m["line"] >= 1 and m["reason"] for m in moved)
        assert "moved aside to" in caplog.text
    else:
        assert not log.rejected_path.exists()
    if torn:
        assert "dropping a torn final line" in caplog.text
    # the checkpoint is clean again: the rerun appends and a second load sees no damage
    log.append({"idx": 9, "v": "new"})
    log.close()
    again = CheckpointLog(path)
    assert sorted(again.load()) == [0, 1, 2, 3, 9] and again.rejected == 0 and again.torn == 0


def test_a_garbage_line_is_moved_aside_with_its_line_number(tmp_path):
    path = tmp_path / "ck.jsonl"
    path.write_bytes(lines_of(GOOD[:2]) + b"not json at all\n" + lines_of(GOOD[2:]))
    log = CheckpointLog(path)
    assert sorted(log.load()) == [0, 1, 2, 3] and log.rejected == 1
    moved = json.loads(log.rejected_path.read_text())
    assert moved["line"] == 3 and moved["text"] == "not json at all" and moved["checkpoint"] == str(path)


def enospc(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_during_an_append_is_one_line_and_the_checkpoint_stays_valid(tmp_path, monkeypatch):
    path = tmp_path / "ck.jsonl"
    log = CheckpointLog(path)
    log.append(GOOD[0])
    real_write = os.write
    calls = []

    def half_then_full(fd, data):
        calls.append(1)
        if len(calls) == 1:  # a partial write first, then the disk is full
            return real_write(fd, bytes(data[:5]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", half_then_full)
    with pytest.raises(WriteFailed) as info:
        log.append(GOOD[1])
    monkeypatch.undo()
    message = str(info.value)
    assert message.startswith(f"{path}: cannot write: no space left on device (") and " free in " in message
    assert "\n" not in message and info.value.__cause__ is None and info.value.__suppress_context__
    assert path.read_bytes() == lines_of(GOOD[:1])  # the half line is cut away
    again = CheckpointLog(path)
    assert sorted(again.load()) == [0]
    again.append(GOOD[1])  # the rerun resumes
    again.close()
    assert sorted(CheckpointLog(path).load()) == [0, 1]


def test_a_full_disk_during_the_final_write_keeps_the_earlier_file(tmp_path, monkeypatch):
    target = tmp_path / "sim.json"
    write_json_atomic(target, {"earlier": True})
    monkeypatch.setattr(os, "fsync", enospc)
    with pytest.raises(WriteFailed, match=r"sim\.json: cannot write: no space left on device \(.* free in "):
        write_json_atomic(target, {"new": list(range(1000))})
    monkeypatch.undo()
    assert json.loads(target.read_text()) == {"earlier": True}
    assert [p.name for p in tmp_path.iterdir()] == ["sim.json"]  # no temporary left


def test_a_failed_write_is_still_an_oserror_for_code_that_tolerates_one(tmp_path, monkeypatch):
    """The frame cache skips an entry it cannot write: WriteFailed keeps that working (and the errno)."""
    monkeypatch.setattr(os, "fsync", enospc)
    with pytest.raises(OSError) as info:
        write_json_atomic(tmp_path / "cache.json", {"a": 1})
    assert isinstance(info.value, WriteFailed) and info.value.errno == errno.ENOSPC and info.value.exit_code == 1


@pytest.fixture
def tiny_disk(tmp_path):
    """A 64 KiB tmpfs (root only; skipped where mounting is not allowed)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)],
                                           capture_output=True).returncode != 0:
        pytest.skip("needs root and permission to mount a tmpfs")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True)


def test_a_really_full_disk_keeps_the_checkpoint_valid_and_the_rerun_resumes(tiny_disk):
    path = tiny_disk / "raw.json.partial.jsonl"
    log = CheckpointLog(path)
    appended = 0
    with pytest.raises(WriteFailed) as info:
        for i in range(1000):
            log.append({"idx": i, "payload": "x" * 3000})
            appended += 1
    message = str(info.value)
    assert message.startswith(f"{path}: cannot write: no space left on device (") and f"free in {tiny_disk}" in message
    assert "\n" not in message and 5 <= appended < 1000
    again = CheckpointLog(path)
    assert sorted(again.load()) == list(range(appended)) and again.torn == 0  # every whole record, no torn line
    with pytest.raises(WriteFailed, match="no space left on device"):  # the final write fails the same way
        write_json_atomic(tiny_disk / "raw.json", {"records": ["y" * 3000] * 40})
    assert sorted(p.name for p in tiny_disk.iterdir()) == [path.name]  # no temporary left
    with open(path, "r+b") as fh:  # space is freed (here: the first records dropped), the rerun appends again
        lines = fh.read().splitlines(keepends=True)
        fh.seek(0)
        fh.truncate()
        fh.write(b"".join(lines[-3:]))
    resumed = CheckpointLog(path)
    assert len(resumed.load()) == 3
    resumed.append({"idx": 5000, "payload": "z"})
    resumed.close()
    assert 5000 in CheckpointLog(path).load()


def test_a_record_s_video_key_is_its_scene_else_its_file_stem_else_its_idx():
    """One rule for the bootstrap's unit (scoring), the report's video counts and the results page's grouping."""
    from k9bench.artifacts import QuestionRecord

    assert QuestionRecord(idx=3, scene_name="abcdefghijk", video="other.mp4").video_key == "abcdefghijk"
    assert QuestionRecord(idx=3, video="abcdefghijk.mp4").video_key == "abcdefghijk"
    assert QuestionRecord(idx=3).video_key == "idx:3"
