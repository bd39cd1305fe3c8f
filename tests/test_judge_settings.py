"""Issue 12 for the judge: typed settings generate subjective_evals.py's flags, a default lives in one
place, the engine takes settings objects (never a Namespace), and resume refuses by fingerprint."""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
from pathlib import Path

import pytest

import subjective_evals
from k9bench.judge import (
    DEFAULT_JUDGE_MODEL,
    JudgeConfig,
    JudgeRunSettings,
    JudgeSettings,
    RequestSettings,
    judge_fingerprint,
    resolve_paths,
    run_judge,
)
from k9bench.settings import default_of, from_namespace
from tests.fake_openai_server import FakeOpenAIServer
from tests.test_judge_run import FAST, good, idx_of, make_records, write_eval

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-settings-0123456789")


@pytest.fixture
def server():
    with FakeOpenAIServer(good) as s:
        yield s


def test_every_flag_comes_from_a_settings_field_with_its_default():
    parser = subjective_evals.build_parser()
    fields = {f.name: (cls, f) for cls in (JudgeSettings, RequestSettings, JudgeRunSettings) for f in dataclasses.fields(cls)}
    for action in parser._actions:
        if not action.option_strings or isinstance(action, argparse._HelpAction) or action.dest in ("verbose", "quiet"):
            continue
        assert action.dest in fields, f"{action.option_strings} is not declared in a settings class"
        cls, f = fields[action.dest]
        assert action.default == default_of(cls, f.name), action.dest
        assert action.help == f.metadata["help"]


def test_settings_are_frozen_and_built_from_the_parsed_flags():
    args = subjective_evals.build_parser().parse_args(["--evaluations", "e.json", "--judge_model", "m", "--temperature", "none",
                                                       "--concurrency", "3", "--limit", "5"])
    j, r, run = (from_namespace(cls, args) for cls in (JudgeSettings, RequestSettings, JudgeRunSettings))
    assert (j.judge_model, j.temperature, r.concurrency, run.limit, run.evaluations) == ("m", None, 3, 5, "e.json")
    with pytest.raises(dataclasses.FrozenInstanceError):
        j.judge_model = "other"  # type: ignore[misc]
    policy = r.retry_policy()
    assert (policy.max_retries, policy.backoff_base, policy.backoff_max) == (5, 1.0, 60.0)


def test_judge_model_default_is_defined_once():
    assert default_of(JudgeSettings, "judge_model") == DEFAULT_JUDGE_MODEL == "gpt-4o"
    hits = []
    for path in (REPO / "subjective_evals.py", *sorted((REPO / "k9bench" / "judge").glob("*.py"))):
        for line in path.read_text().splitlines():
            if re.search(r"[\"']gpt-4o[\"']", line.split("#")[0]):
                hits.append(line.strip())
    assert hits == ['DEFAULT_JUDGE_MODEL = "gpt-4o"']


def _walk(value, path="config"):
    """Every leaf of a settings object, with its path."""
    if dataclasses.is_dataclass(value):
        for f in dataclasses.fields(value):
            yield from _walk(getattr(value, f.name), f"{path}.{f.name}")
    elif isinstance(value, (tuple, list)):
        for n, item in enumerate(value):
            yield from _walk(item, f"{path}[{n}]")
    else:
        yield path, value


def test_config_from_argv_gives_frozen_settings_that_a_stage_runs_from_alone(tmp_path, server):
    """Issue 20 item 5 (was a grep of the source for "args." and "Namespace"): what the parser gives the
    engine is frozen settings made of plain values, and a stage built from a hand-made config, no parser
    involved, runs end to end."""
    from k9bench.judge import JudgeStage, config_from_argv
    from k9bench.prompts import load_prompt
    from k9bench.stage import run_stage

    config = config_from_argv(["--evaluations", "e.json", "--judge_model", "m", "--concurrency", "3", "--strict_scores"])
    leaves = dict(_walk(config))
    assert not [p for p, v in leaves.items() if not isinstance(v, (str, int, float, bool, type(None)))]
    assert (leaves["config.judge.judge_model"], leaves["config.requests.concurrency"], leaves["config.judge.strict_scores"]) == ("m", 3, True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.run.limit = 5  # type: ignore[misc]

    write_eval(tmp_path / "eval.json", make_records(3))
    template, source = load_prompt("judge_prompt")
    by_hand = JudgeConfig(judge=JudgeSettings(template=template, prompt_source=source),
                          requests=RequestSettings(base_url=server.base_url, concurrency=2),
                          run=JudgeRunSettings(evaluations=str(tmp_path / "eval.json")))
    assert run_stage(JudgeStage(by_hand)) == 0
    assert [e["idx"] for e in json.loads((tmp_path / "judge_eval.json").read_text())] == [0, 1, 2]


def test_bad_values_are_refused_by_the_shared_validators_naming_the_flag(capsys):
    """(was: no private ``def _positive...`` in the script) the refusal a user sees is the shared
    validators' own message, under the flag's name."""
    from k9bench.judge import config_from_argv
    from k9bench.validators import positive_int

    with pytest.raises(argparse.ArgumentTypeError) as shared:
        positive_int("0")
    with pytest.raises(SystemExit) as info:
        config_from_argv(["--evaluations", "e.json", "--concurrency", "0"])
    assert info.value.code == 2
    assert f"argument --concurrency: {shared.value}" in capsys.readouterr().err


def test_fingerprint_holds_what_changes_scores_only():
    base = JudgeSettings(template="T {question} {correct_answer} {model_output}")
    fp = judge_fingerprint(base)
    assert set(fp) == {"judge_model", "temperature", "strict_scores", "prompt_sha256"}
    assert fp["temperature"] is None  # the reference sends none (issue 24 item 1)
    assert judge_fingerprint(dataclasses.replace(base, max_tokens=50, prompt_file="x.txt")) == fp  # not result settings
    assert judge_fingerprint(dataclasses.replace(base, temperature=0.7)) != fp
    assert judge_fingerprint(dataclasses.replace(base, strict_scores=True)) != fp
    assert judge_fingerprint(dataclasses.replace(base, template="other {question} {correct_answer} {model_output}")) != fp


@pytest.mark.parametrize(
    "evaluations, output, skipped",
    [
        ("out/eval_Qwen3-VL-4B_mf32_n10.json", "out/judge_Qwen3-VL-4B_mf32_n10.json", "out/judge_Qwen3-VL-4B_mf32_n10_skipped.json"),
        ("sim_m.json", "judge_m.json", "judge_m_skipped.json"),
        ("results.json", "judge_results.json", "judge_results_skipped.json"),
    ],
)
def test_default_outputs_come_from_layout(tmp_path, monkeypatch, evaluations, output, skipped):
    from k9bench import layout

    monkeypatch.chdir(tmp_path)
    paths = resolve_paths(JudgeRunSettings(evaluations=evaluations))
    assert str(paths.output) == output == str(layout.next_stage_path(evaluations, "judge"))
    assert str(paths.skipped) == skipped == str(layout.skipped_path(output))
    assert not list(tmp_path.iterdir())  # resolving the paths writes nothing


def _run(tmp: Path, server, *extra: str) -> int:
    return subjective_evals.main(["--evaluations", str(tmp / "eval.json"), "--output", str(tmp / "judge.json"),
                                  "--base_url", server.base_url, *FAST, *extra])


def test_resume_refuses_another_temperature_but_not_request_settings(tmp_path, server, capsys):
    write_eval(tmp_path / "eval.json", make_records(4))
    assert _run(tmp_path, server, "--limit", "2") == 0
    meta = json.loads((tmp_path / "judge.json.meta.json").read_text())
    assert meta["judge"]["fingerprint"] == {"judge_model": "gpt-4o", "temperature": None, "strict_scores": False,
                                            "prompt_sha256": meta["judge"]["prompt_sha256"]}
    server.clear()
    capsys.readouterr()
    assert _run(tmp_path, server, "--temperature", "0.7") == 2
    err = capsys.readouterr().err
    assert "temperature: None in the existing file, 0.7 now" in err and server.chat_requests() == []
    # request settings and --max_tokens do not change a score: the run goes on
    assert _run(tmp_path, server, "--concurrency", "2", "--max_retries", "1", "--max_tokens", "300") == 0
    assert sorted(idx_of(r) for r in server.chat_requests()) == [2, 3]


def test_resume_accepts_files_written_before_fingerprints(tmp_path, server):
    """A meta sidecar and checkpoint of the earlier layout (model and prompt sha256 only) still resume."""
    write_eval(tmp_path / "eval.json", make_records(4))
    assert _run(tmp_path, server, "--limit", "2") == 0
    meta_path = tmp_path / "judge.json.meta.json"
    meta = json.loads(meta_path.read_text())
    del meta["judge"]["fingerprint"]
    meta_path.write_text(json.dumps(meta))
    entries = json.loads((tmp_path / "judge.json").read_text())
    ckpt = tmp_path / "judge.json.partial.jsonl"
    extra = {**entries[0], "idx": 2, "model_output": "answer-2 the dog sits", "question": "Question 2: what does the dog do?",
             "correct_answer": "option C of 2"}
    del extra["request_sha256"]  # the earlier layout recorded no request key: matched by question, right option and answer
    ckpt.write_text(json.dumps({"idx": 2, "judge_model": "gpt-4o", "prompt_sha256": meta["judge"]["prompt_sha256"],
                                "status": "scored", "entry": extra}) + "\n")
    server.clear()
    assert _run(tmp_path, server) == 0
    assert [idx_of(r) for r in server.chat_requests()] == [3]


def test_engine_runs_from_settings_objects_alone(tmp_path, server):
    """run_judge needs no parser: settings objects, a task set and a client factory."""
    from k9bench.judge import build_tasks
    from k9bench.serving.openai_api import ChatClient
    from k9bench.prompts import load_prompt

    write_eval(tmp_path / "eval.json", make_records(3))
    template, source = load_prompt("judge_prompt")
    config = JudgeConfig(judge=JudgeSettings(template=template, prompt_source=source),
                         requests=RequestSettings(base_url=server.base_url, concurrency=2),
                         run=JudgeRunSettings(evaluations=str(tmp_path / "eval.json")))
    paths = resolve_paths(config.run)
    result = run_judge(config, taskset=build_tasks(config.run.evaluations), paths=paths,
                       make_client=lambda: ChatClient(api_key="k", base_url=server.base_url, retry=config.requests.retry_policy()))
    assert [e["idx"] for e in result.entries] == [0, 1, 2] and paths.output.exists()


@pytest.mark.parametrize("extra, fragment", [
    (["--output", "."], "--output .: not a file name"),
    (["--output", "j.json", "--skipped", "j.json.meta.json"], "--skipped j.json.meta.json is also the meta sidecar of --output"),
    (["--base_url", "localhost:8000/v1"], "--base_url: expected an http:// or https:// URL with a host (e.g. http://localhost:8000/v1), got 'localhost:8000/v1'"),
    (["--prompt_file", "/nonexistent/p.txt"], "--prompt_file /nonexistent/p.txt"),
])
def test_config_from_argv_refuses_what_the_launcher_preflight_must_see(extra, fragment, tmp_path):
    """Everything that can be checked without reading the evaluations file is refused by config_from_argv
    (the launcher checks JUDGE_ARGS through it before any stage runs), as one StageError line, exit 2."""
    from k9bench.judge import config_from_argv
    from k9bench.stage import StageError

    with pytest.raises(StageError) as info:
        config_from_argv(["--evaluations", str(tmp_path / "e.json"), *extra])
    assert fragment in str(info.value) and "\n" not in str(info.value) and info.value.exit_code == 2
    assert not list(tmp_path.iterdir())


def test_prompt_file_is_read_verbatim_through_the_one_reader(tmp_path):
    """--prompt_file goes through k9bench.artifacts.read_text: a non-UTF-8 file is one line naming the flag,
    the file and the byte; an empty file is refused as empty; CRLF line ends are kept (verbatim)."""
    from k9bench.judge.settings import JudgeInputError, load_template

    bad = tmp_path / "latin1.txt"
    bad.write_bytes("{question} {correct_answer} {model_output} caf\xe9".encode("latin-1"))
    with pytest.raises(JudgeInputError) as exc:
        load_template(str(bad))
    assert str(exc.value) == f"--prompt_file {bad}: not UTF-8 text (byte 0xe9 at offset 46)"
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    with pytest.raises(JudgeInputError, match="empty.txt: the file is empty"):
        load_template(str(empty))
    crlf = tmp_path / "crlf.txt"
    crlf.write_bytes(b"Q: {question}\r\nRight: {correct_answer}\r\nGiven: {model_output}\r\n")
    assert load_template(str(crlf)) == ("Q: {question}\r\nRight: {correct_answer}\r\nGiven: {model_output}\r\n", str(crlf))
