import copy
import json

import pytest

from k9bench import CATEGORIES
from k9bench.data.dataset import DatasetError, load_questions, normalize_category, unique_videos
from k9bench.data.demo import demo_rows

GOOD = {
    "idx": 7,
    "video_url": "https://www.youtube.com/watch?v=abcdefghijk&t=3",
    "scene_name": "",
    "question_category": "posture analysis",
    "question": "What does the dog do?",
    "options": {"A": "sits", "B": "runs", "C": "sleeps", "D": "barks", "E": "jumps"},
    "correct_answer": "B",
}


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_demo_set_loads_and_covers_every_category():
    ds = load_questions("demo")
    assert len(ds) >= 12
    assert {q.category for q in ds.questions} == set(CATEGORIES)
    assert len(unique_videos(ds.questions)) >= 3
    for q in ds.questions:
        assert q.video == f"{q.scene_name}.mp4"
        assert q.option_list[0].startswith("A. ") and len(q.option_list) == 5


def test_record_fields_match_reference_shape(tmp_path):
    ds = load_questions(str(write_jsonl(tmp_path / "one.jsonl", [GOOD])))
    rec = ds.questions[0].record_fields()
    assert rec == {
        "idx": 7,
        "question_category": "posture analysis",
        "video": "abcdefghijk.mp4",
        "ground_truth": "B",
        "scene_name": "abcdefghijk",  # derived from the URL when empty
        "question": "What does the dog do?",
        "options": ["A. sits", "B. runs", "C. sleeps", "D. barks", "E. jumps"],
    }


def test_local_parquet_json_jsonl_and_save_to_disk_copies_of_demo(tmp_path):
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = demo_rows()
    expected = load_questions("demo").questions
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "demo.parquet")
    write_jsonl(tmp_path / "demo.jsonl", rows)
    (tmp_path / "demo.json").write_text(json.dumps(rows))
    datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)}).save_to_disk(str(tmp_path / "saved"))
    for name in ("demo.parquet", "demo.jsonl", "demo.json", "saved"):
        got = load_questions(str(tmp_path / name)).questions
        assert got == expected, name


@pytest.mark.parametrize("label,expected", [
    ("causal_inference", "cause-effect analysis"),
    ("contextual_interpretation", "context analysis"),
    ("interaction_loop_analysis", "action sequence"),
    ("posture_analysis", "posture analysis"),
    ("social_interaction_analysis", "interaction analysis"),
    ("steps_of_actions", "action sequence"),
    ("Posture Analysis ", "posture analysis"),
])
def test_legacy_categories_are_mapped(label, expected):
    assert normalize_category(label) == expected


def _bad(**changes):
    row = copy.deepcopy(GOOD)
    for key, value in changes.items():
        if value is KeyError:
            row.pop(key)
        else:
            row[key] = value
    return row


BAD_CASES = [
    (_bad(question=KeyError), "question", "missing"),
    (_bad(video_url=""), "video_url", "missing"),
    (_bad(options={"A": "x", "B": "y", "C": "z", "D": "w"}), "options", "expected exactly A-E"),
    (_bad(options={"A": "x", "B": "y", "C": "z", "D": "w", "E": "v", "F": "u"}), "options", "expected exactly A-E"),
    (_bad(options={"A": "x", "B": "y", "C": "", "D": "w", "E": "v"}), "options", "option C is empty"),
    (_bad(options=["A. x", "A. y", "B. b", "C. c", "D. d", "E. e"]), "options", "letter A appears twice"),
    (_bad(options={"A": "x", "a": "y", "B": "b", "C": "c", "D": "d", "E": "e"}), "options", "letter A is given twice"),
    (_bad(correct_answer="F"), "correct_answer", "not one of A-E"),
    (_bad(video_url="https://vimeo.com/12345"), "video_url", "not a YouTube host"),
    (_bad(video_url="https://www.youtube.com/watch?v=bad"), "video_url", "no valid 11-character"),
    (_bad(video_url="https://[::1/watch?v=abcdefghijk"), "video_url", "not a valid URL"),
    (_bad(scene_name="../../etc/pw"), "scene_name", "not an 11-character"),
    (_bad(question_category="dog vibes"), "question_category", "unknown category"),
    (_bad(idx="seven"), "idx", "not an integer"),
    # issue 31 item 3: accepted without a word before
    (_bad(options={"a": "x", "b": "y", "c": "z", "d": "w", "e": "v"}), "options", "option key(s) 'a', 'b', 'c', 'd', 'e' in lower case"),
    (_bad(options={"A": "x", "B": "y", "c": "z", "D": "w", "E": "v"}), "options", "option key(s) 'c' in lower case"),
    (_bad(options=["a. x", "b. y", "c. z", "d. w", "e. v"]), "options", "option key(s) 'a.', 'b.', 'c.', 'd.', 'e.' in lower case"),
    (_bad(question=7), "question", "7 (int) is not text"),
    (_bad(question=2.5), "question", "2.5 (float) is not text"),
]


@pytest.mark.parametrize("row,field,text", BAD_CASES, ids=[c[1] + ":" + c[2] for c in BAD_CASES])
def test_each_bad_row_is_named_with_idx_and_field(tmp_path, row, field, text):
    path = write_jsonl(tmp_path / "rows.jsonl", [dict(GOOD, idx=1), row])
    with pytest.raises(DatasetError) as exc:
        load_questions(str(path))
    msg = str(exc.value)
    assert f": {field}: " in msg and text in msg, msg
    assert f"idx {row.get('idx', 'row #1')}" in msg
    assert "--drop_invalid_rows" in msg
    ds = load_questions(str(path), drop_invalid=True)
    assert [q.idx for q in ds.questions] == [1]
    assert {p.field for p in ds.dropped} == {field}


def test_duplicate_idx_and_all_problems_listed_at_once(tmp_path):
    rows = [GOOD, dict(GOOD), _bad(idx=9, correct_answer="Z"), _bad(idx=10, question_category="nope"), dict(GOOD, idx=11)]
    path = write_jsonl(tmp_path / "rows.jsonl", rows)
    with pytest.raises(DatasetError) as exc:
        load_questions(str(path))
    msg = str(exc.value)
    assert "idx 7: idx: duplicate idx (2 rows share it)" in msg
    assert "idx 9: correct_answer" in msg and "idx 10: question_category" in msg
    ds = load_questions(str(path), drop_invalid=True)
    assert [q.idx for q in ds.questions] == [11]


def test_unreadable_sources_say_what_is_wrong(tmp_path):
    bad = tmp_path / "broken.jsonl"
    bad.write_text('{"idx": 1}\n{not json\n')
    with pytest.raises(DatasetError, match="line 2 is not valid JSON"):
        load_questions(str(bad))
    with pytest.raises(DatasetError, match="no such file"):
        load_questions(str(tmp_path / "absent.parquet"))
    (tmp_path / "x.csv").write_text("a,b")
    with pytest.raises(DatasetError, match="unsupported file type"):
        load_questions(str(tmp_path / "x.csv"))


def test_unreachable_hub_gives_guidance_not_traceback(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(DatasetError) as exc:
        load_questions("ogmen/K9Bench")
    msg = str(exc.value)
    assert "hf auth login" in msg and "accept its terms" in msg and "--dataset_name" in msg


@pytest.mark.parametrize("error, reason", [
    ("Dataset 'ogmen/K9Bench' is a gated dataset on the Hub. You must be authenticated to access it.", "access denied"),
    ("401 Client Error: Unauthorized for url", "access denied"),
    ("Couldn't reach 'ogmen/K9Bench' on the Hub (ConnectionError)", "not reachable"),
    ("Unknown split \"test\". Should be one of ['train'].", "no split 'test'"),
    ("Dataset 'ogmen/K9Bnech' doesn't exist on the Hub", "not found"),
])
def test_hub_failures_are_classified_with_guidance(monkeypatch, error, reason):
    import datasets

    def fail(*args, **kwargs):
        raise RuntimeError(error)

    monkeypatch.setattr(datasets, "load_dataset", fail)
    with pytest.raises(DatasetError) as exc:
        load_questions("ogmen/K9Bench")
    msg = str(exc.value)
    assert reason in msg, msg
    assert "accept its terms" in msg and "hf auth login" in msg and "--dataset_name" in msg
    assert exc.value.__cause__ is None and exc.value.__suppress_context__  # no chained traceback


def test_hub_snapshot_folder_of_parquet_files(tmp_path):
    # the layout `hf download <id> --repo-type dataset --local-dir x` gives: data/<split>-NNNNN-of-NNNNN.parquet
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = demo_rows()
    snap = tmp_path / "snapshot"
    (snap / "data").mkdir(parents=True)
    (snap / "README.md").write_text("---\nconfigs: ...\n---\n")
    pq.write_table(pa.Table.from_pylist(rows[:5]), snap / "data" / "test-00000-of-00002.parquet")
    pq.write_table(pa.Table.from_pylist(rows[5:]), snap / "data" / "test-00001-of-00002.parquet")
    pq.write_table(pa.Table.from_pylist([dict(rows[0], idx=999)]), snap / "data" / "train-00000-of-00001.parquet")
    assert load_questions(str(snap)).questions == load_questions("demo").questions
    assert [q.idx for q in load_questions(str(snap), "train").questions] == [999]
    with pytest.raises(DatasetError, match=r"no data file for split 'validation'.*data/test-00000-of-00002\.parquet"):
        load_questions(str(snap), "validation")


def test_undecodable_json_is_a_dataset_error(tmp_path):
    path = tmp_path / "rows.json"
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(DatasetError, match="rows.json: cannot read as UTF-8"):
        load_questions(str(path))


def test_json_file_written_by_datasets_to_json_loads(tmp_path):
    # datasets' Dataset.to_json writes JSON lines by default, whatever the suffix
    import datasets

    rows = demo_rows()
    datasets.Dataset.from_list(rows).to_json(str(tmp_path / "k9.json"))
    assert load_questions(str(tmp_path / "k9.json")).questions == load_questions("demo").questions
    datasets.Dataset.from_list(rows[:1]).to_json(str(tmp_path / "one.json"))  # one line: a single object
    assert [q.idx for q in load_questions(str(tmp_path / "one.json")).questions] == [rows[0]["idx"]]
    (tmp_path / "upper.JSONL").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert len(load_questions(str(tmp_path / "upper.JSONL"))) == len(rows)
    (tmp_path / "broken.json").write_text('[{"idx": 1},\n')
    with pytest.raises(DatasetError, match="broken.json: not valid JSON"):
        load_questions(str(tmp_path / "broken.json"))


def test_demo_videos_are_silent_unless_a_soundtrack_is_asked_for(tmp_path, monkeypatch):
    """Today's demo videos are made exactly as before (no audio argument at all); with soundtrack=True
    two scenes get one (sine, noise) and the third stays silent."""
    import k9bench.video.ffmpeg
    from k9bench.data.demo import DEMO_SOUNDTRACKS, DEMO_VIDEOS, make_demo_videos

    calls = {}

    def fake_make_video(path, **kwargs):
        calls[path.stem] = kwargs
        path.write_bytes(b"x")
        return path

    monkeypatch.setattr(k9bench.video.ffmpeg, "make_video", fake_make_video)
    make_demo_videos(tmp_path / "silent")
    assert calls == DEMO_VIDEOS  # the same settings, no audio key
    calls.clear()
    make_demo_videos(tmp_path / "av", soundtrack=True)
    assert {scene: kw.get("audio") for scene, kw in calls.items()} == {"demoVid0001": "sine", "demoVid0002": "noise", "demoVid0003": None}
    assert set(DEMO_SOUNDTRACKS) < set(DEMO_VIDEOS)
    calls.clear()
    make_demo_videos(tmp_path / "av", soundtrack=True)  # existing files are kept
    assert calls == {}


@pytest.mark.slow
def test_demo_soundtracks_are_real(tmp_path):
    from k9bench.video.audio import NoAudioStream, read_audio
    from k9bench.data.demo import make_demo_videos

    paths = {p.stem: p for p in make_demo_videos(tmp_path, soundtrack=True)}
    for scene in ("demoVid0001", "demoVid0002"):
        audio = read_audio(paths[scene], 16000)
        assert audio.samples.size > 16000 * 4  # as long as the video (5-6 s)
    with pytest.raises(NoAudioStream):
        read_audio(paths["demoVid0003"], 16000)


@pytest.mark.parametrize("change, field, words", [
    ({"options": {"a": "sits", "b": "runs", "c": "sleeps", "d": "barks", "e": "jumps"}}, "options", "in lower case"),
    ({"question": 42}, "question", "42 (int) is not text"),
], ids=["lower-case-option-keys", "a-number-for-the-question"])
def test_inference_refuses_such_a_row_before_the_model_loads(tmp_path, monkeypatch, capfd, change, field, words):
    """Issue 31 item 3: eval_video_llm.py ran such rows without a word (scoring refuses them later); now the
    dataset check refuses them, naming the row and the field, before any model loads and before anything is written."""
    import eval_video_llm
    from k9bench.inference import stage as inference_stage

    loads = []
    monkeypatch.setattr(inference_stage, "create_backend", lambda config: loads.append(config) or pytest.fail("a model loaded"))
    rows = demo_rows()
    rows[1] = {**rows[1], **change}
    dataset = tmp_path / "questions.json"
    dataset.write_text(json.dumps(rows))
    (tmp_path / "videos").mkdir()
    out = tmp_path / "raw.json"
    rc = eval_video_llm.main(["--dataset_name", str(dataset), "--video_dir", str(tmp_path / "videos"), "--max_frames", "4",
                              "--output_file", str(out), "-q"])
    err = capfd.readouterr().err
    assert rc != 0 and "Traceback" not in err
    assert f"idx {rows[1]['idx']}: {field}:" in err and words in err and str(dataset) in err
    assert loads == [] and not out.exists()
