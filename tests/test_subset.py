"""Runs whose video sets differ, compared on common ground (issue 24): subset files with a stable hash,
--subset, and the report's common-questions table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from k9bench import CATEGORIES
from k9bench.report import build_report, run_report, write_report
from k9bench.data.subset import SubsetError, load_subset, main, read_subset, subset_sha256
from tests.test_report import make_eval, report_args

GONE, ABSENT = "vid00000001", "vid00000002"
"""Lab B's missing videos: one whose questions are missing_video failures, one whose questions are absent."""


def rewrite(path: Path, records: list[dict]) -> Path:
    """An eval file with these records and its aggregates recomputed (as evaluate_results.py writes them)."""
    data = json.loads(path.read_text())
    data["individual_results"] = records
    data["total_count"], data["correct_count"] = len(records), sum(r["is_correct"] for r in records)
    cats = {}
    for c in CATEGORIES:
        rows = [r for r in records if r["question_category"] == c]
        k = sum(r["is_correct"] for r in rows)
        cats[c] = {"accuracy": k / len(rows) if rows else 0.0, "correct": k, "total": len(rows)}
    data["category_wise_accuracy"] = cats
    path.write_text(json.dumps(data))
    return path


@pytest.fixture
def labs(tmp_path) -> tuple[Path, Path]:
    """Two demo-like runs of 20 questions (2 per video); lab B lacks two videos."""
    a = make_eval(tmp_path / "eval_labA_mf32_n20.json", model="labA", hits={c: 2 for c in CATEGORIES})
    b = make_eval(tmp_path / "eval_labB_mf32_n20.json", model="labB", hits={c: 3 for c in CATEGORIES})
    records = []
    for rec in json.loads(b.read_text())["individual_results"]:
        if rec["scene_name"] == ABSENT:
            continue
        if rec["scene_name"] == GONE:
            rec.update(error=f"video file {GONE}.mp4 not found", error_class="missing_video", is_correct=False)
        records.append(rec)
    return a, rewrite(b, records)


def common_idx(a: Path, b: Path) -> set:
    lost = {r["idx"] for r in json.loads(a.read_text())["individual_results"] if r["scene_name"] in (GONE, ABSENT)}
    return set(range(20)) - lost


def test_subset_file_is_the_common_questions_with_a_stable_hash(tmp_path, labs, capsys):
    a, b = labs
    first, second = tmp_path / "subset1.json", tmp_path / "subset2.json"
    assert main(["--runs", str(a), str(b), "--output", str(first)]) == 0
    assert main(["--runs", str(a), str(b), "--output", str(second)]) == 0
    assert first.read_bytes() == second.read_bytes()  # no timestamp anywhere: two writes are identical
    data = json.loads(first.read_text())
    want = common_idx(a, b)
    assert data["subset"]["idx"] == sorted(want) and data["subset"]["count"] == 16
    assert data["sha256"] == subset_sha256(want) == subset_sha256(reversed(sorted(want)))
    assert [r["with_video"] for r in data["runs"]] == [20, 16]
    assert load_subset(first) == frozenset(want)
    assert data["sha256"] in capsys.readouterr().out


def test_report_compares_runs_on_their_common_questions(tmp_path, labs):
    a, b = labs
    report = build_report([str(a), str(b)])
    common = report.common
    assert (common.count, common.videos, common.same_questions) == (16, 8, False)
    rec_a = [r for r in json.loads(a.read_text())["individual_results"] if r["idx"] in common_idx(a, b)]
    assert common.scores["labA"].correct == sum(r["is_correct"] for r in rec_a)
    assert common.scores["labA"].total == common.scores["labB"].total == 16
    md = Path(write_report(report, tmp_path / "rep")["markdown"]).read_text()
    section = md.split("## Common questions")[1].split("\n## ")[0]
    assert "**16 questions** (8 videos)" in section
    row_a = next(ln for ln in section.splitlines() if ln.startswith("| labA |"))
    assert row_a.startswith(f"| labA | 16 | {100 * common.scores['labA'].correct / 16:.1f} ")
    row_b = next(ln for ln in section.splitlines() if ln.startswith("| labB |"))
    assert row_b.rstrip().endswith("| 18 | 2 |")  # questions in its file, missing_video records
    saved = json.loads((tmp_path / "rep" / "report.json").read_text())["common_questions"]
    assert saved["count"] == 16 and saved["scores"]["labB"]["total"] == 16


def test_subset_flag_restricts_the_report(tmp_path, labs):
    a, b = labs
    subset = tmp_path / "subset.json"
    assert main(["--runs", str(a), str(b), "--output", str(subset)]) == 0
    assert run_report(report_args(tmp_path, "--input_file", str(a), str(b), "--subset", str(subset))) == 0
    summary = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert [r["overall"]["total"] for r in summary["runs"]] == [16, 16]
    assert summary["subset"]["sha256"] == json.loads(subset.read_text())["sha256"]
    assert summary["common_questions"]["same_questions"] is True
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "Restricted to the subset" in md and summary["subset"]["sha256"] in md
    assert "restricted to 16 questions" in " ".join(summary["stamp"])
    # another run's file as the subset: the questions whose video it had
    assert run_report(report_args(tmp_path, "--input_file", str(a), "--subset", str(b))) == 0
    assert json.loads((tmp_path / "rep" / "report.json").read_text())["runs"][0]["overall"]["total"] == 16
    (tmp_path / "bad.txt").write_text("1 two")
    assert run_report(report_args(tmp_path, "--input_file", str(a), "--subset", str(tmp_path / "bad.txt"))) == 2


def test_videos_that_differ_by_content_are_listed(tmp_path, labs):
    """Raw files record each video's SHA-256; a video two labs had with other bytes stays in, listed."""
    a, b = labs
    for path, digest in ((a, "aa"), (b, "bb")):
        data = json.loads(path.read_text())
        data.setdefault("input_meta", {})["videos"] = [
            {"scene_name": f"vid{v:08d}", "video": f"vid{v:08d}.mp4", "bytes": 10, "sha256": (digest if v == 3 else "cc") * 32,
             "duration": 1.0, "frames_sampled": 4} for v in range(10)]
        path.write_text(json.dumps(data))
    out = tmp_path / "subset.json"
    assert main(["--runs", str(a), str(b), "--output", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["videos_differing_by_content"] == ["vid00000003"] and data["subset"]["count"] == 16


def test_subset_inputs(tmp_path, labs):
    a, b = labs
    (tmp_path / "list.json").write_text("[3, 1, 2]")
    (tmp_path / "list.txt").write_text("3 1,2\n")
    assert load_subset(tmp_path / "list.json") == load_subset(tmp_path / "list.txt") == {1, 2, 3}
    assert read_subset(b).idx == frozenset(common_idx(a, b))
    bad = {"list.json": "[1, 2.5]", "list.txt": "1 two", "nothing.json": '{"a": 1}'}
    for name, text in bad.items():
        (tmp_path / name).write_text(text)
        with pytest.raises(SubsetError, match=name):
            load_subset(tmp_path / name)
    out = tmp_path / "subset.json"
    assert main(["--runs", str(a), "--output", str(out)]) == 0
    edited = json.loads(out.read_text())
    edited["subset"]["idx"].pop()
    out.write_text(json.dumps(edited))
    with pytest.raises(SubsetError, match="does not match its questions"):
        load_subset(out)
    with pytest.raises(SubsetError, match="no such file"):
        load_subset(tmp_path / "absent.json")


def test_a_subset_list_that_is_not_utf8_is_refused_not_altered(tmp_path):
    """read_subset reads through k9bench.artifacts.read_text: a non-UTF-8 byte is one line naming the flag,
    the file and the byte (it was replaced by U+FFFD and reported as a bad idx); an empty file is refused."""
    (tmp_path / "list.txt").write_bytes(b"1 2 3\n\xe9\n")
    with pytest.raises(SubsetError) as exc:
        read_subset(tmp_path / "list.txt")
    assert str(exc.value) == f"--subset {tmp_path / 'list.txt'}: not UTF-8 text (byte 0xe9 at offset 6)"
    (tmp_path / "empty.txt").write_bytes(b"")
    with pytest.raises(SubsetError, match=r"^--subset .*empty.txt: the file is empty$"):
        read_subset(tmp_path / "empty.txt")
    (tmp_path / "bad.json").write_bytes(b"[1, 2")
    with pytest.raises(SubsetError, match=r"^--subset .*bad.json: invalid JSON"):
        read_subset(tmp_path / "bad.json")


def test_subset_cli_refuses_bad_inputs_in_one_line(tmp_path, labs, capsys):
    a, _ = labs
    assert main(["--runs", str(tmp_path / "absent.json"), "--output", str(tmp_path / "s.json")]) == 2
    assert main(["--runs", str(a), "--output", str(a)]) == 2  # would overwrite its input
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("subset: ") for line in err)
    assert not (tmp_path / "s.json").exists()
