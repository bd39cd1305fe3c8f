"""evaluate_results.py refuses bad inputs before the expensive work (issue 15): exit code, one line naming
the culprit, no traceback, nothing written, earlier outputs unchanged, and the embedding model never loaded.

Exit 2: a flag value or an output location (checked before any file is read). Exit 1: a bad input file
(the message names the file and the record's idx), found before the model loads."""

import json
import os
import time

import pytest

import evaluate_results
import k9bench.scoring

OPTS = ["A. the dog sits", "B. the dog runs", "C. the dog sleeps", "D. the dog barks at a cat", "E. the dog eats"]


def raw_record(idx, answer="The dog sits", gt="A", cat="posture analysis"):
    return {"idx": idx, "question_category": cat, "video": f"vid{idx:08d}.mp4", "ground_truth": gt, "response": answer,
            "answer": answer, "scene_name": f"vid{idx:08d}", "question": "What does the dog do?", "options": list(OPTS),
            "prompt": "<prompt>", "model_name": "FakeVLM", "max_frames": 32, "timestamp": "2026-01-01T00:00:00"}


@pytest.fixture
def model_loads(monkeypatch):
    """Every attempt to load an embedding model, recorded (and refused: none may happen here)."""
    calls = []

    def fake_load(*args, **kwargs):
        calls.append(args)
        raise AssertionError("the embedding model was loaded")

    monkeypatch.setattr(k9bench.scoring, "load_embedding_model", fake_load)
    return calls


@pytest.fixture
def raw_file(tmp_path):
    path = tmp_path / "raw_FakeVLM_mf32_n3.json"
    path.write_text(json.dumps({"individual_results": [raw_record(i) for i in range(3)], "total_count": 3}))
    return path


@pytest.fixture
def sim_file(tmp_path):
    recs = []
    for i in range(3):
        r = raw_record(i)
        r["cosine_similarities"] = {"A": 0.8, "B": 0.2, "C": 0.1, "D": 0.0, "E": -0.1}
        recs.append(r)
    path = tmp_path / "sim_FakeVLM_mf32_n3.json"
    path.write_text(json.dumps({"individual_results": recs, "total_count": 3, "similarity_model": "m",
                                "similarity_calculated_at": "2026-01-01T00:00:00"}))
    return path


def run(argv):
    """(exit code, stderr lines) of evaluate_results.main; SystemExit (argparse) counts as an exit."""
    try:
        return evaluate_results.main([*argv, "-q"])
    except SystemExit as exc:
        return exc.code


def snapshot(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def check_refused(capsys, tmp_path, before, rc, expected_rc, *needles):
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == expected_rc, err
    assert len(lines) == 1, err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert snapshot(tmp_path) == before  # nothing written, earlier outputs unchanged, no temporary left


# ---------------------------------------------------------------- outputs that cannot be written


@pytest.mark.parametrize("mode, flag, target, needle", [
    ("calculate", "--output_file", "/etc/passwd/sim.json", "/etc/passwd is not a folder"),
    ("evaluate", "--output_file", "/etc/passwd/eval.json", "/etc/passwd is not a folder"),
    ("all", "--output_file", "/etc/passwd/x/eval.json", "/etc/passwd is not a folder"),
    ("all", "--sim_file", "/etc/passwd/sim.json", "/etc/passwd is not a folder"),
])
def test_unwritable_output_is_refused_before_anything(tmp_path, capsys, model_loads, raw_file, sim_file, mode, flag, target, needle):
    before = snapshot(tmp_path)
    source = sim_file if mode == "evaluate" else raw_file
    started = time.perf_counter()
    rc = run(["--mode", mode, "--input_file", str(source), flag, target, "--embedding_model", "no-such/model"])
    assert time.perf_counter() - started < 2.0
    check_refused(capsys, tmp_path, before, rc, 2, flag, target, needle)
    assert model_loads == []


def test_output_under_a_file_in_the_tree_is_refused(tmp_path, capsys, model_loads, raw_file):
    (tmp_path / "afile").write_text("keep me")
    before = snapshot(tmp_path)
    rc = run(["--mode", "calculate", "--input_file", str(raw_file), "--output_file", str(tmp_path / "afile" / "sim.json")])
    check_refused(capsys, tmp_path, before, rc, 2, "afile is not a folder")
    assert model_loads == []


def test_read_only_folder_is_refused(tmp_path, capsys, model_loads, raw_file, monkeypatch):
    out_dir = tmp_path / "ro"
    out_dir.mkdir()
    out_dir.chmod(0o555)
    try:
        if os.access(out_dir, os.W_OK):  # root writes anywhere: pretend the folder is read-only
            real = os.access
            monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if str(p) == str(out_dir) else real(p, mode, **kw))
        before = snapshot(tmp_path)
        rc = run(["--mode", "all", "--input_file", str(raw_file), "--output_file", str(out_dir / "eval.json")])
        check_refused(capsys, tmp_path, before, rc, 2, f"folder {out_dir} is not writable")
        assert list(out_dir.iterdir()) == [] and model_loads == []
    finally:
        out_dir.chmod(0o755)


def test_report_dir_that_is_a_file_is_refused(tmp_path, capsys, monkeypatch, sim_file):
    import k9bench.report

    monkeypatch.setattr(k9bench.report, "run_report", lambda args: pytest.fail("the report was built"))
    (tmp_path / "report").write_text("not a folder")
    before = snapshot(tmp_path)
    rc = run(["--mode", "report", "--input_file", str(sim_file), "--report_dir", str(tmp_path / "report")])
    check_refused(capsys, tmp_path, before, rc, 2, "--report_dir", "exists and is not a folder")


def test_report_dir_under_a_file_is_refused(tmp_path, capsys, monkeypatch, sim_file):
    import k9bench.report

    monkeypatch.setattr(k9bench.report, "run_report", lambda args: pytest.fail("the report was built"))
    rc = run(["--mode", "report", "--input_file", str(sim_file), "--report_dir", "/etc/passwd/report"])
    check_refused(capsys, tmp_path, snapshot(tmp_path), rc, 2, "/etc/passwd is not a folder")


# ---------------------------------------------------------------- flag values


@pytest.mark.parametrize("flags, needle", [
    (["--threshold", "5"], "--threshold must lie in [0, 1] (got 5)"),
    (["--threshold", "-1"], "--threshold must lie in [0, 1] (got -1)"),
    (["--sensitivity_thresholds", "0.3", "7"], "--sensitivity_thresholds must lie in [0, 1] (got 7)"),
    (["--threshold", "nan"], "must be finite numbers"),
    (["--sensitivity_thresholds", "inf"], "must be finite numbers"),
    (["--bootstrap_resamples", "1000000000000"], "--bootstrap_resamples must be at most 100,000"),
    (["--bootstrap_resamples", "-5"], "--bootstrap_resamples must be 0 (off) or more"),
    (["--batch_size", "0"], "--batch_size must be at least 1"),
    (["--batch_size", "1000000000"], "--batch_size must be at most"),
    (["--device", "gpu"], "--device 'gpu'"),
])
def test_bad_flag_values_are_refused_up_front(tmp_path, capsys, model_loads, raw_file, flags, needle):
    # an earlier eval output exists: it must survive
    (tmp_path / "eval_FakeVLM_mf32_n3.json").write_text('{"earlier": true}\n')
    before = snapshot(tmp_path)
    started = time.perf_counter()
    rc = run(["--mode", "all", "--input_file", str(raw_file), "--embedding_model", "no-such/model", *flags])
    assert time.perf_counter() - started < 2.0
    check_refused(capsys, tmp_path, before, rc, 2, needle)
    assert model_loads == []


# ---------------------------------------------------------------- bad records


@pytest.mark.parametrize("mutate, needle", [
    (lambda r: r.update(idx="seven"), "record #1: idx 'seven' is not an integer"),
    (lambda r: r.update(idx=float("nan")), "record #1: idx nan is not an integer"),
    (lambda r: r.update(options=OPTS[:4] + ["F. the dog digs"]), "record idx 1: option #5 is labelled 'F', expected 'E'"),
    (lambda r: r.update(options=OPTS[:4]), "record idx 1: 4 options (A, B, C, D)"),
    (lambda r: r.update(question_category="dog yoga"), "record idx 1: 'question_category' 'dog yoga'"),
    (lambda r: r.update(answer=float("nan")), "record idx 1: 'answer' is not text: nan"),
    (lambda r: r.update(answer=["a", "list"]), "record idx 1: 'answer' is not text"),
])
def test_bad_record_in_calculate_is_refused_before_the_model_loads(tmp_path, capsys, model_loads, raw_file, mutate, needle):
    data = json.loads(raw_file.read_text())
    mutate(data["individual_results"][1])
    raw_file.write_text(json.dumps(data, allow_nan=True))
    before = snapshot(tmp_path)
    rc = run(["--mode", "calculate", "--input_file", str(raw_file)])
    check_refused(capsys, tmp_path, before, rc, 1, str(raw_file), needle)
    assert model_loads == []


def test_legacy_category_is_accepted_in_calculate(raw_file):
    data = json.loads(raw_file.read_text())
    data["individual_results"][1]["question_category"] = "causal_inference"
    raw_file.write_text(json.dumps(data))
    artifact, rows = k9bench.scoring.load_for_scoring(raw_file)
    items, skipped = k9bench.scoring.plan_calculation(artifact.records, raw_file, rows)
    assert len(items) == 3 and skipped == {}


@pytest.mark.parametrize("value, needle", [
    (5.0, "record idx 1: similarity of option B is 5.0, outside [-1, 1]"),
    (-1.5, "record idx 1: similarity of option B is -1.5, outside [-1, 1]"),
    (float("inf"), "record idx 1: similarity of option B is inf, not a finite number"),
    ("0.5", "record idx 1: similarity of option B is '0.5', not a finite number"),
])
def test_similarity_outside_the_cosine_range_is_refused(tmp_path, capsys, sim_file, value, needle):
    data = json.loads(sim_file.read_text())
    data["individual_results"][1]["cosine_similarities"]["B"] = value
    sim_file.write_text(json.dumps(data, allow_nan=True))
    (tmp_path / "eval_FakeVLM_mf32_n3.json").write_text('{"earlier": true}\n')
    before = snapshot(tmp_path)
    rc = run(["--mode", "evaluate", "--input_file", str(sim_file)])
    check_refused(capsys, tmp_path, before, rc, 1, str(sim_file), needle)


def test_similarity_within_rounding_of_one_is_accepted(tmp_path, sim_file):
    data = json.loads(sim_file.read_text())
    data["individual_results"][1]["cosine_similarities"]["A"] = 1.0000001  # float32 rounding of a unit vector
    sim_file.write_text(json.dumps(data))
    assert run(["--mode", "evaluate", "--input_file", str(sim_file), "--output_file", str(tmp_path / "e.json")]) == 0


def test_output_problem_unit():
    from k9bench.scoring import output_problem

    assert output_problem("/etc/passwd/x.json") == "/etc/passwd is not a folder"
    assert output_problem("/etc/passwd", folder=True) == "exists and is not a folder"
    assert output_problem("/tmp", folder=False) == "is a folder, not a file"
    assert output_problem("relative_name_that_does_not_exist.json") is None
