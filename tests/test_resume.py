"""k9bench.resume: the generic resumable stage (final file + checkpoint + retry of failed entries +
fingerprint refusal); a damaged checkpoint resumes with every valid record (issue 23)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from k9bench.artifact_io import ArtifactError

from k9bench.resume import ResumableStage, ResumeRefused
from k9bench.settings import fingerprint_differences


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
    stage.checkpoint.mkdir()
    with pytest.raises(ArtifactError, match="partial.jsonl: is a folder, not a file"):
        stage.load()


def test_a_bad_checkpoint_line_is_moved_aside_and_counted(tmp_path):
    stage = stage_at(tmp_path)
    stage.checkpoint.write_text('{"idx": 1, "v": "a"}\nnot json\n{"idx": 2, "v": "b"}\n{"idx": 3, "v": "c')
    assert sorted(stage.load()) == [1, 2]  # every valid record; the torn last line dropped
    assert stage.rejected == 1 and (tmp_path / "out.json.partial.jsonl.rejected").is_file()
    stage.append({"idx": 3, "v": "c"})
    stage.finish([{"idx": k} for k in (1, 2, 3)])
    assert not stage.checkpoint.exists()


def test_fingerprint_refusal_names_entry_and_setting(tmp_path):
    stage = stage_at(tmp_path)
    done = {3: {"idx": 3, "seed": 0, "run_settings": {"frames": {"fps": 1.0}, "backend": "hf"}}}
    stage.check(done, {"seed": 0, "run_settings": {"frames": {"fps": 1.0}}})  # a partial fingerprint checks part
    with pytest.raises(ResumeRefused, match=r"idx 3 .*run_settings\.frames\.fps: 1\.0 in the existing file, 2\.0 now"):
        stage.check(done, {"seed": 0, "run_settings": {"frames": {"fps": 2.0}}})
    # a top-level key the entry lacks is not compared (older files); inside a dict a missing key is None
    assert fingerprint_differences({"idx": 3}, {"seed": 4}, partial=True) == []
    assert fingerprint_differences({"g": {}}, {"g": {"temperature": 0.5}}, partial=True) == [
        "g.temperature: None in the existing file, 0.5 now"]
    # tuples and lists compare equal (JSON round trip)
    assert fingerprint_differences({"g": [1, 2]}, {"g": (1, 2)}, partial=True) == []
    # fingerprint_of fills in what an entry may omit
    with pytest.raises(ResumeRefused):
        stage.check({1: {"mode": None}}, {"mode": "b"}, fingerprint_of=lambda e: {"mode": e["mode"] or "a"})
