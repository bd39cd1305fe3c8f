"""k9bench.resume: the generic resumable stage (final file + checkpoint + retry of failed entries +
fingerprint refusal) and the output-location check every stage runs before expensive work."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from k9bench.resume import OutputLocationError, ResumableStage, ResumeRefused, check_output_folder, check_output_location, fingerprint_mismatch


def read_list(path: Path) -> list[dict]:
    data = json.loads(path.read_text())
    if not isinstance(data, list):
        raise ValueError("not a list of entries")
    return data


def stage_at(tmp_path: Path) -> ResumableStage:
    return ResumableStage(tmp_path / "out.json", read_final=read_list)


def test_checkpoint_then_final(tmp_path):
    stage = stage_at(tmp_path)
    assert stage.load() == {} and stage.where == stage.final
    stage.append({"idx": 1, "v": "a"})
    stage.append({"idx": 2, "error": "boom"})
    stage.close()
    assert stage.checkpoint.name == "out.json.partial.jsonl" and stage.where == stage.checkpoint
    again = stage_at(tmp_path)
    assert sorted(again.load()) == [1]  # the failed entry is retried
    assert sorted(again.load(retry_failed=False)) == [1, 2]
    assert sorted(again.load(selected={2}, retry_failed=False)) == [2]
    again.finish([{"idx": 1, "v": "a"}])
    assert not again.checkpoint.exists() and read_list(again.final) == [{"idx": 1, "v": "a"}]
    # the final file's entries come first, the checkpoint's win
    third = stage_at(tmp_path)
    third.append({"idx": 1, "v": "b"})
    third.close()
    assert third.load()[1]["v"] == "b"


def test_unreadable_files_are_refused_with_their_name(tmp_path):
    stage = stage_at(tmp_path)
    stage.final.write_text("{}")
    with pytest.raises(ResumeRefused, match="out.json: exists but cannot be resumed"):
        stage.load()
    stage.final.unlink()
    stage.checkpoint.write_text("not json\n")
    with pytest.raises(ResumeRefused, match="partial.jsonl: cannot be resumed"):
        stage.load()


def test_fingerprint_refusal_names_entry_and_setting(tmp_path):
    stage = stage_at(tmp_path)
    done = {3: {"idx": 3, "seed": 0, "run_settings": {"frames": {"fps": 1.0}, "backend": "hf"}}}
    stage.check(done, {"seed": 0, "run_settings": {"frames": {"fps": 1.0}}})  # a partial fingerprint checks part
    with pytest.raises(ResumeRefused, match=r"idx 3 .*run_settings\.frames\.fps: 1\.0 in the existing file, 2\.0 now"):
        stage.check(done, {"seed": 0, "run_settings": {"frames": {"fps": 2.0}}})
    # a top-level key the entry lacks is not compared (older files); inside a dict a missing key is None
    assert fingerprint_mismatch({"idx": 3}, {"seed": 4}) == []
    assert fingerprint_mismatch({"g": {}}, {"g": {"temperature": 0.5}}) == ["g.temperature: None in the existing file, 0.5 now"]
    # tuples and lists compare equal (JSON round trip)
    assert fingerprint_mismatch({"g": [1, 2]}, {"g": (1, 2)}) == []
    # fingerprint_of fills in what an entry may omit
    with pytest.raises(ResumeRefused):
        stage.check({1: {"mode": None}}, {"mode": "b"}, fingerprint_of=lambda e: {"mode": e["mode"] or "a"})


def test_output_location(tmp_path):
    ok = tmp_path / "new" / "deeper" / "raw.json"
    assert check_output_location(ok) == ok and not (tmp_path / "new").exists()  # nothing created
    assert os.listdir(tmp_path) == []  # the write probe is gone
    with pytest.raises(OutputLocationError, match="is a folder"):
        check_output_location(tmp_path)
    afile = tmp_path / "plain"
    afile.write_text("x")
    with pytest.raises(OutputLocationError, match="is a file, not a folder"):
        check_output_location(afile / "raw.json")
    with pytest.raises(OutputLocationError, match="is the input"):
        check_output_location(afile, inputs=[str(afile)])
    with pytest.raises(OutputLocationError, match="/etc/passwd is a file"):
        check_output_location("/etc/passwd/raw.json")


def test_output_folder(tmp_path):
    assert check_output_folder(tmp_path / "a" / "b", flag="--cache") == tmp_path / "a" / "b" and os.listdir(tmp_path) == []
    (tmp_path / "f").write_text("x")
    with pytest.raises(OutputLocationError, match="--cache .*is a file"):
        check_output_folder(tmp_path / "f" / "c", flag="--cache")
    with pytest.raises(OutputLocationError, match="not writable"):
        check_output_folder("/sys/k9bench-cache", flag="--cache")
