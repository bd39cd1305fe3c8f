"""evaluate_results.py refuses bad inputs before the expensive work (issues 15 and 23): exit code, one line
naming the culprit, no traceback, nothing written, earlier outputs unchanged, and the embedding model
never loaded.

Exit 2: a flag value, an output location or a --subset file (checked before the input is read). Exit 1:
a bad input file (the message names the file and the fault, or the record's idx), found before the
model loads; or a failed write (a full disk), after which the rerun succeeds."""

import errno
import json
import os
import time

import pytest

import evaluate_results
import k9bench.scoring.embedding
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

    monkeypatch.setattr(k9bench.scoring.embedding, "load_embedding_model", fake_load)
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
    ("calculate", "--output_file", "/etc/passwd/sim.json", "/etc/passwd is a file, not a folder"),
    ("evaluate", "--output_file", "/etc/passwd/eval.json", "/etc/passwd is a file, not a folder"),
    ("all", "--output_file", "/etc/passwd/x/eval.json", "/etc/passwd is a file, not a folder"),
    ("all", "--sim_file", "/etc/passwd/sim.json", "/etc/passwd is a file, not a folder"),
    ("evaluate", "--output_file", "/proc/version", "/proc/version"),
    ("calculate", "--output_file", "/dev/null", "not a regular file"),
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
    check_refused(capsys, tmp_path, before, rc, 2, "afile is a file, not a folder")
    assert model_loads == []


def test_read_only_folder_is_refused(tmp_path, capsys, model_loads, raw_file, monkeypatch):
    import tempfile

    out_dir = tmp_path / "ro"
    out_dir.mkdir()
    out_dir.chmod(0o555)
    real = tempfile.mkstemp

    def mkstemp(*args, dir=None, **kwargs):  # root writes anywhere: the folder refuses new files all the same
        if dir is not None and os.path.samefile(dir, out_dir):
            raise PermissionError(errno.EACCES, "Permission denied")
        return real(*args, dir=dir, **kwargs)

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    try:
        before = snapshot(tmp_path)
        rc = run(["--mode", "all", "--input_file", str(raw_file), "--output_file", str(out_dir / "eval.json")])
        check_refused(capsys, tmp_path, before, rc, 2, f"the folder {out_dir} is not writable")
        assert list(out_dir.iterdir()) == [] and model_loads == []
    finally:
        out_dir.chmod(0o755)


def _no_report(monkeypatch):
    import k9bench.report

    monkeypatch.setattr(k9bench.report.ReportStage, "run", lambda self: pytest.fail("the report was built"))


def test_report_dir_that_is_a_file_is_refused(tmp_path, capsys, monkeypatch, sim_file):
    _no_report(monkeypatch)
    (tmp_path / "report").write_text("not a folder")
    before = snapshot(tmp_path)
    rc = run(["--mode", "report", "--input_file", str(sim_file), "--report_dir", str(tmp_path / "report")])
    check_refused(capsys, tmp_path, before, rc, 2, "--report_dir", "is a file, not a folder")


def test_report_dir_under_a_file_is_refused(tmp_path, capsys, monkeypatch, sim_file):
    _no_report(monkeypatch)
    rc = run(["--mode", "report", "--input_file", str(sim_file), "--report_dir", "/etc/passwd/report"])
    check_refused(capsys, tmp_path, snapshot(tmp_path), rc, 2, "/etc/passwd is a file, not a folder")


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
    (["--device", "gpu"], "argument --device: expected auto, cpu, cuda, cuda:N or mps, got 'gpu'"),
    (["--device", "bogus"], "argument --device: expected auto, cpu, cuda, cuda:N or mps, got 'bogus'"),  # issue 23: at parse time
    (["--seed", "-1"], "--seed must be an integer from 0 to 4294967295 (got -1)"),
    (["--seed", str(2**32)], "--seed must be an integer from 0 to 4294967295 (got 4294967296)"),
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


# ---------------------------------------------------------------- input files that are not what they claim (issue 23)


INPUT_FAULTS = [
    (lambda p: p.write_bytes(b'{"individual_results": [{"answer": "caf\xe9"}]}'), "not UTF-8 text (byte 0xe9 at offset"),
    (lambda p: p.write_bytes(bytes(range(256)) * 4), "not UTF-8 text (byte 0x80 at offset 128)"),
    (lambda p: p.write_text("[" * 200_000), "JSON nested too deeply to read"),
    (lambda p: p.write_text('{"individual_results": [1, 2'), "invalid JSON at line 1"),
    (lambda p: (p.symlink_to(p.with_name("loop_b")), p.with_name("loop_b").symlink_to(p)), "a symbolic link loop"),
    (lambda p: p.mkdir(), "is a folder, not a file"),
    (lambda p: p.write_text(""), "the file is empty"),
    (lambda p: None, "no such file"),
    (lambda p: p.write_text('{"results": []}'), "no 'individual_results' list"),
    (lambda p: p.write_text('{"individual_results": [], "total_count": 0}'), "no records in 'individual_results'"),
]


@pytest.mark.parametrize("mode", ["calculate", "evaluate"])
@pytest.mark.parametrize("make, needle", INPUT_FAULTS)
def test_a_broken_input_file_is_one_line_naming_it(tmp_path, capsys, model_loads, mode, make, needle):
    source = tmp_path / "raw_in.json"
    make(source)
    (tmp_path / "eval_in.json").write_text('{"earlier": true}\n')
    before = snapshot(tmp_path)
    rc = run(["--mode", mode, "--input_file", str(source)])
    check_refused(capsys, tmp_path, before, rc, 1, str(source), needle)
    assert model_loads == []


def test_an_input_under_a_file_names_that_file(tmp_path, capsys, model_loads):
    (tmp_path / "afile").write_text("x")
    before = snapshot(tmp_path)
    rc = run(["--mode", "evaluate", "--input_file", str(tmp_path / "afile" / "sim.json"), "--output_file", str(tmp_path / "e.json")])
    check_refused(capsys, tmp_path, before, rc, 1, f"{tmp_path / 'afile'} is a file, not a folder")


# ---------------------------------------------------------------- records the docs say are refused (issue 23)


RECORD_FAULTS = [
    (lambda recs: recs[1].pop("answer"), "record idx 1: no 'answer' (and no 'error' marking a failed sample)"),
    (lambda recs: recs[1].update(answer=7), "record idx 1: 'answer' is not text: 7"),
    (lambda recs: recs[1].pop("options"), "record idx 1: 'options' is missing"),
    (lambda recs: recs[1].pop("ground_truth"), "record idx 1: 'ground_truth' is missing or empty"),
    (lambda recs: recs[1].update(idx=1.0), "record #1: idx 1.0 is not an integer"),
    (lambda recs: recs[1].update(idx=True), "record #1: idx True is not an integer"),
    (lambda recs: recs[2].update(idx=0), "idx 0 appears twice, records #0 and #2"),
]


@pytest.mark.parametrize("mutate, needle", RECORD_FAULTS)
def test_a_bad_record_in_calculate_is_refused_before_the_model_loads(tmp_path, capsys, model_loads, raw_file, mutate, needle):
    data = json.loads(raw_file.read_text())
    mutate(data["individual_results"])
    raw_file.write_text(json.dumps(data))
    before = snapshot(tmp_path)
    rc = run(["--mode", "all", "--input_file", str(raw_file)])
    check_refused(capsys, tmp_path, before, rc, 1, str(raw_file), needle)
    assert model_loads == []


@pytest.mark.parametrize("mutate, needle", RECORD_FAULTS + [
    (lambda recs: recs[1]["cosine_similarities"].update(C=float("nan")), "record idx 1: similarity of option C is nan"),
    (lambda recs: recs[1]["cosine_similarities"].update(C=float("-inf")), "record idx 1: similarity of option C is -inf"),
    (lambda recs: recs[1]["cosine_similarities"].update(C=True), "record idx 1: similarity of option C is True"),
])
def test_a_bad_record_in_evaluate_is_refused(tmp_path, capsys, model_loads, sim_file, mutate, needle):
    data = json.loads(sim_file.read_text())
    mutate(data["individual_results"])
    sim_file.write_text(json.dumps(data, allow_nan=True))
    (tmp_path / "eval_FakeVLM_mf32_n3.json").write_text('{"earlier": true}\n')
    before = snapshot(tmp_path)
    rc = run(["--mode", "evaluate", "--input_file", str(sim_file)])
    check_refused(capsys, tmp_path, before, rc, 1, str(sim_file), needle)


# ---------------------------------------------------------------- --subset


@pytest.mark.parametrize("content, needle", [
    (None, "--subset"),
    ("[1, 2, 99]", "none of the 3 records"),
    ('["a"]', "'a' is not a question idx"),
])
def test_a_bad_subset_is_refused_before_the_model_loads(tmp_path, capsys, model_loads, raw_file, content, needle):
    subset = tmp_path / "subset.json"
    if content is not None:
        subset.write_text(content.replace("1, 2, 99", "97, 98, 99"))
    before = snapshot(tmp_path)
    rc = run(["--mode", "calculate", "--input_file", str(raw_file), "--subset", str(subset)])
    check_refused(capsys, tmp_path, before, rc, 2, str(subset), needle)
    assert model_loads == []


def test_subset_restricts_evaluate_and_is_recorded(tmp_path, sim_file):
    subset = tmp_path / "subset.txt"
    subset.write_text("0 2 7\n")
    out = tmp_path / "eval_sub.json"
    assert run(["--mode", "evaluate", "--input_file", str(sim_file), "--subset", str(subset), "--output_file", str(out)]) == 0
    ev = json.loads(out.read_text())
    assert [r["idx"] for r in ev["individual_results"]] == [0, 2] and ev["total_count"] == 2
    assert ev["subset"]["path"] == str(subset) and (ev["subset"]["kept"], ev["subset"]["dropped"], ev["subset"]["absent"]) == (2, 1, 1)
    assert str(subset) in ev["stage"]["inputs"]  # a changed subset file reruns the stage


# ---------------------------------------------------------------- a full disk (issue 23)


def enospc(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_at_the_final_write_is_one_line_and_the_rerun_succeeds(tmp_path, capsys, model_loads, sim_file, monkeypatch):
    earlier = tmp_path / "eval_FakeVLM_mf32_n3.json"
    earlier.write_text('{"earlier": true}\n')
    before = snapshot(tmp_path)
    monkeypatch.setattr(os, "fsync", enospc)
    rc = run(["--mode", "evaluate", "--input_file", str(sim_file)])
    monkeypatch.undo()
    check_refused(capsys, tmp_path, before, rc, 1, str(earlier), "cannot write: no space left on device (", " free in ")
    assert run(["--mode", "evaluate", "--input_file", str(sim_file)]) == 0
    assert json.loads(earlier.read_text())["total_count"] == 3


def test_a_full_disk_after_the_embedding_pass_is_one_line_and_the_rerun_succeeds(tmp_path, capsys, raw_file, monkeypatch):
    from tests.fake_embedder import FakeLoader

    loader = FakeLoader()
    monkeypatch.setattr(k9bench.scoring.embedding, "load_embedding_model", loader)
    real_replace = os.replace
    monkeypatch.setattr(os, "replace", enospc)
    before = snapshot(tmp_path)
    rc = run(["--mode", "calculate", "--input_file", str(raw_file)])
    monkeypatch.setattr(os, "replace", real_replace)
    check_refused(capsys, tmp_path, before, rc, 1, "sim_FakeVLM_mf32_n3.json: cannot write: no space left on device")
    assert run(["--mode", "calculate", "--input_file", str(raw_file)]) == 0 and loader.calls == 2
    sim = json.loads((tmp_path / "sim_FakeVLM_mf32_n3.json").read_text())
    assert len(sim["individual_results"]) == 3 and all("cosine_similarities" in r for r in sim["individual_results"])


# ---------------------------------------------------------------- numbers that are not finite, records with no ground truth (issue 31 item 3)


@pytest.mark.parametrize("record, letter", [(1, "B"), ("failed", "A")], ids=["record", "failed-record"])
def test_a_similarity_written_as_1e400_is_refused_in_evaluate(tmp_path, capsys, model_loads, sim_file, record, letter):
    """1e400 parses as inf; a failed record's similarities are read too (they were a traceback at the write)."""
    data = json.loads(sim_file.read_text())
    if record == "failed":
        data["individual_results"][1] = {"example_id": 1, "error": "Video not found", "cosine_similarities": {"A": "INF"}}
    text = json.dumps(data).replace('"B": 0.2', '"B": 1e400', 1 if record == 1 else 0).replace('"INF"', "1e400")
    assert "1e400" in text
    sim_file.write_text(text)
    (tmp_path / "eval_FakeVLM_mf32_n3.json").write_text('{"earlier": true}\n')
    before = snapshot(tmp_path)
    rc = run(["--mode", "evaluate", "--input_file", str(sim_file)])
    check_refused(capsys, tmp_path, before, rc, 1, str(sim_file), "record idx", f"similarity of option {letter} is inf, not a finite number")


def test_a_non_finite_number_in_another_field_is_refused_naming_it(tmp_path, capsys, model_loads, sim_file):
    data = json.loads(sim_file.read_text())
    data["individual_results"][2]["video_duration"] = float("nan")
    sim_file.write_text(json.dumps(data, allow_nan=True))
    before = snapshot(tmp_path)
    rc = run(["--mode", "evaluate", "--input_file", str(sim_file), "--output_file", str(tmp_path / "e.json")])
    check_refused(capsys, tmp_path, before, rc, 1, str(sim_file), "record idx 2: 'video_duration' is nan, not a finite number")


def _eval_file(tmp_path, sim_file):
    out = tmp_path / "eval_FakeVLM_mf32_n3.json"
    assert run(["--mode", "evaluate", "--input_file", str(sim_file), "--output_file", str(out), "--bootstrap_resamples", "0"]) == 0
    return out


@pytest.mark.parametrize("fault, needle", [
    (lambda recs: recs[1]["cosine_similarities"].update(C=float("nan")), "record idx 1: similarity of option C is nan"),
    (lambda recs: recs[2].update(cosine_similarities=dict.fromkeys("ABCDE", float("nan"))), "record idx 2: similarity of option A is nan"),
    (lambda recs: recs[1].pop("ground_truth"), "record idx 1: 'ground_truth' is missing or empty"),
    (lambda recs: recs[0].update(ground_truth=""), "record idx 0: 'ground_truth' is missing or empty"),
    (lambda recs: [r.pop("cosine_similarities") for r in recs] and recs[2].pop("ground_truth"),
     "record idx 2: 'ground_truth' is missing or empty"),
], ids=["nan-similarity", "all-nan", "no-ground-truth", "empty-ground-truth", "no-ground-truth-no-similarities"])
def test_report_refuses_nan_similarities_and_records_with_no_ground_truth(tmp_path, capsys, sim_file, fault, needle):
    evaluated = _eval_file(tmp_path, sim_file)
    data = json.loads(evaluated.read_text())
    fault(data["individual_results"])
    evaluated.write_text(json.dumps(data, allow_nan=True))
    capsys.readouterr()
    before = snapshot(tmp_path)
    rc = run(["--mode", "report", "--input_file", str(evaluated), "--report_dir", str(tmp_path / "report")])
    check_refused(capsys, tmp_path, before, rc, 1, str(evaluated), needle)
    assert not (tmp_path / "report").exists() or not any((tmp_path / "report").iterdir())  # no report written


def test_report_still_reads_failed_samples_of_both_forms(tmp_path, capsys, sim_file):
    data = json.loads(sim_file.read_text())
    data["individual_results"][1] = {"example_id": 1, "error": "Video not found"}  # the reference's failed record
    sim_file.write_text(json.dumps(data))
    evaluated = _eval_file(tmp_path, sim_file)
    assert run(["--mode", "report", "--input_file", str(evaluated), "--report_dir", str(tmp_path / "report")]) == 0
    assert (tmp_path / "report").is_dir()
