"""Typed, versioned artifact headers (k9bench.headers, issue 28 item 3): each kind round-trips, the writing
stage is written by every writer, a newer schema_version is refused in one line (exit 2) by every script,
the reference's header-less layouts read as before, and an older file of ours without a version reads as 1."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

import evaluate_results
from k9bench import CATEGORIES
from k9bench.artifact_io import ArtifactError, write_json_atomic
from k9bench.artifacts import load_records_artifact
from k9bench.headers.blocks import BackendInfo, FrameSettings, JudgeSettings
from k9bench.headers.files import NewerSchema, header_of, read_header, stamped
from k9bench.headers.kinds import (
    HEADER_CLASSES,
    HEADER_KEY,
    SCHEMA_VERSIONS,
    EvalHeader,
    JudgeHeader,
    ManifestHeader,
    RawHeader,
    ReportHeader,
    SimHeader,
)

from tests.fake_openai_server import fake_openai  # noqa: F401 (fixture: the local OpenAI-compatible server)

OPTIONS = [f"{k}. option {k}" for k in "ABCDE"]


def record(idx: int, **more) -> dict:
    return {"idx": idx, "question_category": CATEGORIES[idx % 5], "video": f"v{idx:03d}.mp4", "ground_truth": "A",
            "response": f"option A {idx}", "answer": "option A", "scene_name": f"v{idx:03d}", "question": "q?",
            "options": OPTIONS, "prompt": "p", "model_name": "tiny", "max_frames": 4, "timestamp": "t", **more}


def write_raw(path: Path, idxs=range(6), **top) -> Path:
    rows = [record(i) for i in idxs]
    write_json_atomic(path, {"individual_results": rows, "total_count": len(rows), **top})
    return path


def error_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if "ERROR" in line or line.startswith("report:")]


# --------------------------------------------------------------------------- each kind round-trips

SAMPLES = {
    "raw": ("inference", {"total_count": 2, "model_name": "tiny", "num_shards": 1, "shard_id": None,
                          "inference": {"frames": {"max_frames": 4, "audio": False}, "dataset": {"source": "demo"}}}),
    "sim": ("calculate", {"total_count": 2, "similarity_model": "m", "similarity_calculated_at": "t", "model_name": "tiny"}),
    "eval": ("evaluate", {"evaluation_timestamp": "t", "eval_mode": "fine", "threshold": 0.5, "accuracy": 0.5,
                          "correct_count": 1, "total_count": 2, "metadata": {"similarity_model": "m"},
                          "input_meta": {"model_name_or_path": "org/tiny", "inference": {"dataset": {"source": "demo"}}}}),
    "judge": ("judge", {"input": {"evaluations": "eval.json", "sha256": "ab"}, "judge": {"model": "gpt-4o"}, "run": {}}),
    "report": ("report", {"generated_at": "t", "runs": [{"label": "tiny"}], "notes": []}),
    "manifest": ("download", {"manifest_version": 1, "output_dir": "/v", "complete": True, "videos": []}),
}


@pytest.mark.parametrize("kind", sorted(SAMPLES))
def test_each_kind_round_trips_with_its_stage_version_and_unknown_keys(kind):
    stage, meta = SAMPLES[kind]
    meta = {**meta, "provenance": {"script": "x"}, "from_a_newer_minor_writer": {"kept": [1, 2]}}
    written = stamped(kind, stage, meta)
    assert written[HEADER_KEY] == {"kind": kind, "schema_version": SCHEMA_VERSIONS[kind], "stage": stage}
    assert list(written)[-1] == HEADER_KEY and {k: v for k, v in written.items() if k != HEADER_KEY} == meta  # order kept
    header = header_of(json.loads(json.dumps(written)))
    assert type(header) is HEADER_CLASSES[kind] and header.KIND == kind
    assert (header.stage, header.schema_version, header.declared) == (stage, SCHEMA_VERSIONS[kind], True)
    assert header.extra == {"from_a_newer_minor_writer": {"kept": [1, 2]}}  # unknown keys kept, not dropped
    assert {**header.to_meta(), HEADER_KEY: header.block()} == written


def test_typed_fields_read_what_the_report_reads():
    _, meta = SAMPLES["eval"]
    header = header_of(stamped("eval", "evaluate", meta))
    assert isinstance(header, EvalHeader)
    assert (header.threshold, header.correct_count, header.similarity_model) == (0.5, 1, "m")
    assert isinstance(header.raw, RawHeader) and header.raw.model_name_or_path == "org/tiny"
    assert header.raw.dataset.source == "demo" and header.raw.frames == FrameSettings()  # absent: all None
    raw = header_of(stamped("raw", "inference", SAMPLES["raw"][1]))
    assert raw.frames.max_frames == 4 and raw.audio is False and raw.shard_id is None and "shard_id" in raw.to_meta()
    assert raw.dataset.extra == {} and raw.text_only is None


def test_the_nested_blocks_are_typed_and_keep_unknown_keys():
    frames = FrameSettings.of({"fps": 2.0, "max_frames": 32, "a_newer_key": 1})
    assert (frames.fps, frames.max_frames, frames.audio, frames.extra) == (2.0, 32, None, {"a_newer_key": 1})
    assert FrameSettings.of(None) == FrameSettings.of([1, 2]) == FrameSettings()  # not an object: all None
    server = {"url": "http://127.0.0.1:8000/v1", "models": ["m"]}
    assert BackendInfo.of({"server": server, "engine": {"in_process": True}}).serving == server
    assert BackendInfo.of({"engine": {"in_process": True, "model": "m"}}).serving == {"in_process": True, "model": "m"}
    assert BackendInfo.of({"engine": {"model": "m"}}).serving is None
    judge = JudgeSettings.of({"model": "gpt-4o", "reference_prompt": True, "temperature": 0})
    assert (judge.model, judge.reference_prompt, judge.extra) == ("gpt-4o", True, {"temperature": 0})


# --------------------------------------------------------------------------- the stage written by every writer


def test_every_writer_writes_its_kind_and_stage(tmp_path, monkeypatch):
    import k9bench.scoring.embedding
    from k9bench.merge import main as merge_main
    from tests.fake_embedder import FakeLoader

    monkeypatch.setattr(k9bench.scoring.embedding, "load_embedding_model", FakeLoader())
    s0 = write_raw(tmp_path / "raw_tiny_mf4_n6.shard0of2.json", [0, 1, 2], num_shards=2, shard_id=0)
    s1 = write_raw(tmp_path / "raw_tiny_mf4_n6.shard1of2.json", [3, 4, 5], num_shards=2, shard_id=1)
    raw = tmp_path / "raw_tiny_mf4_n6.json"
    assert merge_main(["--output_file", str(raw), str(s0), str(s1), "-q"]) == 0
    sim, ev = tmp_path / "sim_tiny_mf4_n6.json", tmp_path / "eval_tiny_mf4_n6.json"
    assert evaluate_results.main(["--mode", "calculate", "--input_file", str(raw), "--output_file", str(sim), "-q"]) == 0
    assert evaluate_results.main(["--mode", "evaluate", "--input_file", str(sim), "--output_file", str(ev),
                                  "--bootstrap_resamples", "0", "-q"]) == 0
    assert evaluate_results.main(["--mode", "report", "--input_file", str(ev), "--report_dir", str(tmp_path / "rep"), "-q"]) == 0
    expected = {raw: ("raw", "merge", RawHeader), sim: ("sim", "calculate", SimHeader), ev: ("eval", "evaluate", EvalHeader),
                tmp_path / "rep" / "report.json": ("report", "report", ReportHeader)}
    for path, (kind, stage, cls) in expected.items():
        data = json.loads(path.read_text())
        assert data[HEADER_KEY] == {"kind": kind, "schema_version": 1, "stage": stage}, path
        header = read_header(path)
        assert type(header) is cls and header.stage == stage and header.stage_block["name"] == stage
    eval_data = json.loads(ev.read_text())
    assert list(eval_data)[:8] == ["evaluation_timestamp", "eval_mode", "threshold", "accuracy", "correct_count",
                                   "total_count", "category_wise_accuracy", "individual_results"]  # the reference's order kept
    assert "header" not in eval_data["input_meta"]  # the sim's header is replaced, never carried
    assert load_records_artifact(sim).stage == "sim" and load_records_artifact(ev).stage == "eval"


def test_inference_and_the_manifest_write_their_header():
    from k9bench.download.manifest import DownloadReport
    from k9bench.inference.records import RunStats, final_meta
    from k9bench.inference.stage import config_from_argv

    config = config_from_argv(["--model_name_or_path", "org/tiny", "--video_dir", "videos"])
    meta = final_meta(config, [], records=[], model_name="tiny", describe=None, image_patch_size=None,
                      prompt=("system", "built in"), loaded=SimpleNamespace(source="demo", dropped=[]), stats=RunStats(),
                      started="t", frame_cache=None, download_summary=None)
    assert meta[HEADER_KEY] == {"kind": "raw", "schema_version": 1, "stage": "inference"}
    assert header_of(meta).model_name_or_path == "org/tiny"
    manifest = DownloadReport(output_dir="/videos").manifest()
    assert manifest[HEADER_KEY] == {"kind": "manifest", "schema_version": 1, "stage": "download"}
    assert manifest["manifest_version"] == 1  # the older readers' key stays
    assert isinstance(header_of(manifest), ManifestHeader)


def test_the_artifacts_page_lists_every_kind_of_the_stage_table_with_its_version():
    """docs/artifacts.md's table of kinds has one row per kind the stage table knows, with its schema version."""
    import re

    page = (Path(__file__).resolve().parent.parent / "docs" / "artifacts.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `(\w+)` \| .* \| (\d+) \|$", page.split("\n## Headers\n", 1)[1].split("\n## ", 1)[0], flags=re.M))
    assert rows == {kind: str(version) for kind, version in SCHEMA_VERSIONS.items()}


# --------------------------------------------------------------------------- a newer version refused in one line


def newer(path: Path, kind: str, stage: str) -> Path:
    data = json.loads(path.read_text())
    target = data if isinstance(data, dict) else None
    target[HEADER_KEY] = {"kind": kind, "schema_version": SCHEMA_VERSIONS[kind] + 1, "stage": stage}
    path.write_text(json.dumps(target))
    return path


def assert_one_line_naming(text: str, path: Path, kind: str) -> None:
    lines = error_lines(text)
    assert len(lines) == 1, text
    assert str(path) in lines[0] and f"schema_version {SCHEMA_VERSIONS[kind] + 1}" in lines[0]
    assert f"up to version {SCHEMA_VERSIONS[kind]}" in lines[0] and "Traceback" not in text


def test_scoring_refuses_a_newer_raw_file_in_one_line_exit_2(tmp_path, capsys):
    raw = newer(write_raw(tmp_path / "raw_tiny_mf4_n6.json"), "raw", "inference")
    sim = tmp_path / "sim_tiny_mf4_n6.json"
    assert evaluate_results.main(["--mode", "calculate", "--input_file", str(raw), "--output_file", str(sim)]) == 2
    assert_one_line_naming(capsys.readouterr().err, raw, "raw")
    assert not sim.exists()


def test_merge_refuses_a_newer_shard_in_one_line_exit_2(tmp_path, capsys):
    from k9bench.merge import main as merge_main

    s0 = newer(write_raw(tmp_path / "a.json", [0, 1]), "raw", "inference")
    s1 = write_raw(tmp_path / "b.json", [2, 3])
    out = tmp_path / "raw.json"
    assert merge_main(["--output_file", str(out), str(s0), str(s1)]) == 2
    assert_one_line_naming(capsys.readouterr().err, s0, "raw")
    assert not out.exists()


def test_the_report_refuses_a_newer_eval_file_in_one_line_exit_2(tmp_path, capsys, monkeypatch):
    import k9bench.scoring.embedding
    from tests.fake_embedder import FakeLoader

    monkeypatch.setattr(k9bench.scoring.embedding, "load_embedding_model", FakeLoader())
    raw, sim, ev = (tmp_path / f"{k}_tiny_mf4_n6.json" for k in ("raw", "sim", "eval"))
    write_raw(raw)
    assert evaluate_results.main(["--mode", "all", "--input_file", str(raw), "--output_file", str(ev), "-q"]) == 0
    newer(ev, "eval", "evaluate")
    capsys.readouterr()
    assert evaluate_results.main(["--mode", "report", "--input_file", str(ev), "--report_dir", str(tmp_path / "rep")]) == 2
    assert_one_line_naming(capsys.readouterr().err, ev, "eval")
    assert not (tmp_path / "rep" / "report.json").exists()


def test_the_download_refuses_a_newer_manifest_in_one_line_exit_2(tmp_path, capsys, monkeypatch):
    import download_videos
    import k9bench.download.one as one

    monkeypatch.setattr(one, "fetch", lambda *a, **k: (_ for _ in ()).throw(AssertionError("no online fetch")))
    out = tmp_path / "videos"
    assert download_videos.main(["--dataset_name", "demo", "--output_dir", str(out), "-q"]) == 0
    manifest = out / "download_manifest.json"
    assert read_header(manifest).stage == "download"
    newer(manifest, "manifest", "download")
    before = manifest.read_bytes()
    capsys.readouterr()
    assert download_videos.main(["--dataset_name", "demo", "--output_dir", str(out)]) == 2
    assert_one_line_naming(capsys.readouterr().err, manifest, "manifest")
    assert manifest.read_bytes() == before  # never overwritten with an older layout


def test_the_judge_refuses_a_newer_eval_file_in_one_line_exit_2(tmp_path, capsys, monkeypatch):
    import subjective_evals
    from tests.test_judge_run import make_records, write_eval

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-headers-never-sent")
    ev = newer(write_eval(tmp_path / "eval.json", make_records(3)), "eval", "evaluate")
    out = tmp_path / "judge.json"
    assert subjective_evals.main(["--evaluations", str(ev), "--output", str(out), "--base_url", "http://127.0.0.1:9/v1"]) == 2
    assert_one_line_naming(capsys.readouterr().err, ev, "eval")
    assert not out.exists() and not Path(f"{out}.meta.json").exists()


def test_the_judge_refuses_a_newer_meta_sidecar(tmp_path):
    from k9bench.judge.run import read_meta
    from k9bench.judge.settings import JudgeInputError

    sidecar = tmp_path / "judge.json.meta.json"
    sidecar.write_text(json.dumps({"judge": {"model": "m"}, "input": {}, HEADER_KEY: {"kind": "judge", "schema_version": 9}}))
    with pytest.raises(JudgeInputError) as err:
        read_meta(SimpleNamespace(meta=sidecar))
    assert err.value.exit_code == 2 and str(sidecar) in str(err.value) and "schema_version 9" in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("block, fault", [({"kind": "raw", "schema_version": "2"}, "is not a positive integer"),
                                          ({"kind": "video", "schema_version": 1}, "is none of"),
                                          ([1], "not an object")])
def test_a_malformed_header_block_is_one_line(tmp_path, block, fault):
    path = write_raw(tmp_path / "raw.json", **{HEADER_KEY: block})
    with pytest.raises(ArtifactError) as err:
        load_records_artifact(path)
    assert str(path) in str(err.value) and fault in str(err.value) and not isinstance(err.value, NewerSchema)


# --------------------------------------------------------------------------- a file of another kind refused in one line (issue 40)


@pytest.mark.parametrize("kind, stage", [("judge", "judge"), ("report", "report"), ("manifest", "download")])
def test_calculate_refuses_a_record_file_whose_header_names_another_kind(tmp_path, capsys, monkeypatch, kind, stage):
    """Issue 40: a raw-shaped file whose header says judge, report or manifest was scored as a raw file."""
    import k9bench.scoring.embedding
    from tests.fake_embedder import FakeLoader

    monkeypatch.setattr(k9bench.scoring.embedding, "load_embedding_model", FakeLoader())
    raw = write_raw(tmp_path / "raw_tiny_mf4_n6.json", **{HEADER_KEY: {"kind": kind, "schema_version": 1, "stage": stage}})
    sim = tmp_path / "sim_tiny_mf4_n6.json"
    assert evaluate_results.main(["--mode", "calculate", "--input_file", str(raw), "--output_file", str(sim)]) == 1
    err = capsys.readouterr().err
    lines = error_lines(err)
    assert len(lines) == 1 and "Traceback" not in err, err
    assert f"{raw}: its header says kind '{kind}', written by stage {stage}; this reads raw, sim or eval files" in lines[0]
    assert not sim.exists()


def test_every_reader_refuses_another_kind_through_the_one_function(tmp_path):
    """The records reader (scoring, merge, the report, the judge's input, subsets), the judge's sidecar and the
    download manifest all go through header_of: a file naming another kind, by its header or its writing stage's
    block, is one line naming the file and both kinds."""
    from k9bench.judge.run import read_meta
    from k9bench.judge.settings import JudgeInputError

    shard = write_raw(tmp_path / "raw.shard0of2.json", [0], stage={"name": "report", "fingerprint": {}, "inputs": {}})
    with pytest.raises(ArtifactError, match=r"raw.shard0of2.json: its header says kind 'report', written by stage report; this reads raw, sim or eval files"):
        load_records_artifact(shard)
    sidecar = tmp_path / "judge.json.meta.json"
    sidecar.write_text(json.dumps({"judge": {}, "input": {}, HEADER_KEY: {"kind": "raw", "schema_version": 1, "stage": "inference"}}))
    with pytest.raises(JudgeInputError, match=r"its header says kind 'raw', written by stage inference; this reads judge files"):
        read_meta(SimpleNamespace(meta=sidecar))
    manifest = {"manifest_version": 1, "videos": [], HEADER_KEY: {"kind": "eval", "schema_version": 1, "stage": "evaluate"}}
    with pytest.raises(ArtifactError, match=r"m.json: its header says kind 'eval', written by stage evaluate; this reads manifest files"):
        read_header(manifest, kind="manifest", path="m.json")
    assert type(read_header(write_raw(tmp_path / "sim.json", [0], **{HEADER_KEY: {"kind": "sim", "schema_version": 1}}))) is SimHeader


@pytest.mark.parametrize("block, fault", [({}, "the 'header' block names no kind (it is empty)"),
                                          ({"schema_version": 1, "stage": "inference"}, "the 'header' block names no kind (only schema_version, stage)")])
def test_a_header_block_without_a_kind_says_so(tmp_path, block, fault):
    """Issue 40: an empty header {} said "'header' is dict, not an object"."""
    path = write_raw(tmp_path / "raw.json", **{HEADER_KEY: block})
    with pytest.raises(ArtifactError) as err:
        load_records_artifact(path)
    assert str(err.value).startswith(f"{path}: {fault}") and "\n" not in str(err.value) and "is dict" not in str(err.value)


# --------------------------------------------------------------------------- the reference's files, and older ones of ours


def test_the_reference_layouts_read_as_before_without_a_header(tmp_path):
    raw = write_raw(tmp_path / "raw.json", [0, 1])
    header = read_header(raw)
    assert type(header) is RawHeader and (header.stage, header.schema_version, header.declared) == (None, 1, False)
    assert header.total_count == 2
    art = load_records_artifact(raw)
    assert art.stage == "raw" and art.to_dict() == json.loads(raw.read_text())  # written back as it was: no header added
    failed = {"individual_results": [record(0), {"example_id": 1, "error": "Video not found"}], "total_count": 2}
    assert type(read_header(failed)) is RawHeader
    sim = {"individual_results": [record(0, cosine_similarities=dict.fromkeys("ABCDE", 0.1))], "total_count": 1}
    assert type(read_header(sim)) is SimHeader
    ev = {"evaluation_timestamp": "t", "eval_mode": "fine", "threshold": 0.5, "accuracy": 1.0, "correct_count": 1,
          "total_count": 1, "category_wise_accuracy": {}, "individual_results": [record(0, is_correct=True)],
          "metadata": {"similarity_model": "m"}}
    header = read_header(ev)
    assert type(header) is EvalHeader and header.stage is None and header.similarity_model == "m"
    older = {"model": "m", "threshold_results": {"0.5": {k: v for k, v in ev.items()}}}
    assert type(read_header(older)) is EvalHeader and read_header(older).threshold_key == "0.5"
    judge = tmp_path / "judge.json"
    judge.write_text(json.dumps([{"idx": 0, "scores": {}}]))
    header = read_header(judge)  # a bare list, no sidecar
    assert type(header) is JudgeHeader and not header.declared and header.stage is None


def test_a_header_carried_over_by_an_older_k9bench_is_not_taken_for_the_files_own(tmp_path):
    """An older k9bench scoring our raw file kept its unknown top-level keys, the raw header among them: the eval
    file it wrote is what its own stage block says (an eval file, written before headers), not a raw file."""
    ev = {"evaluation_timestamp": "t", "eval_mode": "fine", "threshold": 0.5, "accuracy": 1.0, "correct_count": 1,
          "total_count": 1, "category_wise_accuracy": {}, "individual_results": [record(0, is_correct=True)],
          "stage": {"name": "evaluate", "fingerprint": {}, "inputs": {}},
          HEADER_KEY: {"kind": "raw", "schema_version": SCHEMA_VERSIONS["raw"] + 1, "stage": "inference"}}
    path = tmp_path / "eval.json"
    path.write_text(json.dumps(ev))
    header = read_header(path)
    assert type(header) is EvalHeader and (header.stage, header.declared, header.schema_version) == ("evaluate", False, 1)
    assert load_records_artifact(path).stage == "eval"


def test_a_stage_no_kind_is_known_for_still_has_its_stage_block_read(tmp_path):
    from k9bench.headers.kinds import Header

    path = tmp_path / "toy.json"
    path.write_text(json.dumps({"stage": {"name": "toy", "fingerprint": {"n": 1}, "inputs": {}}, "value": 3}))
    header = read_header(path)
    assert type(header) is Header and header.stage == "toy" and header.stage_block["fingerprint"] == {"n": 1}
    assert header.extra == {"value": 3}
    with pytest.raises(ArtifactError, match="not a k9bench artifact"):
        read_header({"value": 3}, path=path)


def test_an_older_file_of_ours_without_a_version_reads_as_version_1(tmp_path):
    sim = write_raw(tmp_path / "sim.json", [0], similarity_model="m", provenance={"script": "evaluate_results.py"},
                    stage={"name": "calculate", "fingerprint": {}, "inputs": {}})
    header = read_header(sim)
    assert type(header) is SimHeader and (header.schema_version, header.stage, header.declared) == (1, "calculate", False)
    no_version = write_raw(tmp_path / "raw.json", [0], **{HEADER_KEY: {"kind": "raw", "stage": "inference"}})
    header = read_header(no_version)
    assert (header.schema_version, header.stage, header.declared) == (1, "inference", True)
    judge = tmp_path / "judge.json"
    judge.write_text("[]")
    (tmp_path / "judge.json.meta.json").write_text(json.dumps({"judge": {"model": "gpt-4o"}, "input": {"sha256": "ab"},
                                                                "stage": {"name": "judge"}}))
    header = read_header(judge)  # through its sidecar
    assert type(header) is JudgeHeader and header.schema_version == 1 and header.settings.model == "gpt-4o"
    assert header.judged.sha256 == "ab"


def test_inference_writes_its_header_and_refuses_a_newer_raw_file_on_rerun(fake_openai, tmp_path, monkeypatch, capsys):  # noqa: F811
    import eval_video_llm

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-headers-never-written")
    out = tmp_path / "raw.json"
    argv = ["--backend", "openai", "--api_model", "gpt-test", "--base_url", fake_openai.base_url, "--dataset_name", "demo",
            "--max_frames", "0", "--max_samples", "2", "--max_retries", "0", "--output_file", str(out), "-q"]
    assert eval_video_llm.main(argv) == 0
    data = json.loads(out.read_text())
    assert data[HEADER_KEY] == {"kind": "raw", "schema_version": 1, "stage": "inference"} and data["stage"]["name"] == "inference"
    assert list(data)[0] == "individual_results" and data["total_count"] == 2  # the reference's layout first
    newer(out, "raw", "inference")
    before = out.read_bytes()
    capsys.readouterr()
    assert eval_video_llm.main(argv) == 2
    assert_one_line_naming(capsys.readouterr().err, out, "raw")
    assert out.read_bytes() == before
