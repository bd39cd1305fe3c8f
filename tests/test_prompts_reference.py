"""Reference prompts by hash (issue 24 item 4): the hashes in published.py with their normalisation,
and ``python -m k9bench.prompts from-reference`` taking the prompts out of a stand-in script (our own
strings, never the reference's) without running it."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from k9bench.data import published
from k9bench.prompts import load_prompt
from k9bench.prompts.__main__ import main

REPO = Path(__file__).resolve().parent.parent

SYSTEM = "You are a patient test assistant.\nLook at every frame, think in steps, and reply as JSON."
JUDGE_TEMPLATE = ("Grade a test answer.\nQuestion: {question}\nExpected: {correct_answer}\nGiven: {model_output}\n"
                  "Write CoT: first, then {{'Logic': X, 'Overall': X}}.\n")
FILLED = JUDGE_TEMPLATE.format(question="{question}", correct_answer="{correct_answer}", model_output="{model_output}")

STANDIN_FSTRING = '''
import pathlib
pathlib.Path(MARKER).write_text("the script was run")

SYSTEM_PROMPT = """You are a patient test assistant.
Look at every frame, think in steps, and reply as JSON."""

def build(item, reply):
    gold = item["options"][item["correct_answer"]]
    return f"""Grade a test answer.
Question: {item['question']}
Expected: {gold}
Given: {reply}
Write CoT: first, then {{'Logic': X, 'Overall': X}}.
"""

client.chat(messages=[{"role": "system", "content": SYSTEM_PROMPT}])
'''

STANDIN_FORMAT = '''
TEMPLATE = "Grade a test answer.\\nQuestion: {q}\\nExpected: {gold}\\nGiven: {out}\\nWrite CoT: first, then {{'Logic': X, 'Overall': X}}.\\n"
def build(q, gold, out):
    return TEMPLATE.format(out=out, q=q, gold=gold)
ask("You are a patient test assistant.\\n" + "Look at every frame, think in steps, and reply as JSON.\\n")
'''

STANDIN_CONCAT = '''
def build(question, right, said):
    return ("Grade a test answer.\\nQuestion: " + question + "\\nExpected: " + right + "\\nGiven: " + said
            + "\\nWrite CoT: first, then {'Logic': X, 'Overall': X}.\\n")
SYS = """
    You are a patient test assistant.
    Look at every frame, think in steps, and reply as JSON.
"""
'''


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@pytest.fixture
def standin_hashes(monkeypatch):
    """The hashes in force become the stand-in strings' own."""
    monkeypatch.setattr(published, "REFERENCE_SYSTEM_PROMPT_SHA256", sha(SYSTEM))
    monkeypatch.setattr(published, "REFERENCE_JUDGE_PROMPT_SHA256", sha(FILLED))


def test_the_issues_hashes_and_their_normalisation_are_published():
    assert published.REFERENCE_SYSTEM_PROMPT_SHA256 == "392d2ea2400ae21fa6b1011f2f3bde6d8521e6edd3dc56103bd81d0d7e49155e"
    assert published.REFERENCE_JUDGE_PROMPT_SHA256 == "7a769edca037e5dff97c586648000366919f2b36b367f5e7d874d1934029bd7e"
    # our own built-in prompts are our wording, never the reference's
    assert not published.is_reference_prompt("system_prompt", load_prompt("system_prompt")[0])
    assert not published.is_reference_prompt("judge_prompt", load_prompt("judge_prompt")[0])


def test_normalisation_one_trailing_newline_for_the_system_prompt_only(standin_hashes):
    assert published.is_reference_prompt("system_prompt", SYSTEM)
    assert published.is_reference_prompt("system_prompt", SYSTEM + "\n")
    assert not published.is_reference_prompt("system_prompt", SYSTEM + "\n\n")
    assert not published.is_reference_prompt("system_prompt", SYSTEM.replace("patient", "Patient"))
    assert published.is_reference_prompt("judge_prompt", JUDGE_TEMPLATE)
    assert not published.is_reference_prompt("judge_prompt", JUDGE_TEMPLATE.rstrip("\n"))
    assert not published.is_reference_prompt("judge_prompt", JUDGE_TEMPLATE.replace("{question}", "{question:>999999}"))
    assert published.reference_prompts_confirmed(SYSTEM, JUDGE_TEMPLATE)
    assert published.reference_prompts_confirmed(system_prompt=SYSTEM + "\n")
    assert not published.reference_prompts_confirmed(SYSTEM, JUDGE_TEMPLATE.replace("Grade", "grade"))
    assert not published.reference_prompts_confirmed()


@pytest.mark.parametrize("source", [STANDIN_FSTRING, STANDIN_FORMAT, STANDIN_CONCAT], ids=["fstring", "format", "concat"])
def test_from_reference_writes_both_files_without_running_the_script(source, standin_hashes, tmp_path):
    marker = tmp_path / "ran.txt"
    script = tmp_path / "reference_eval.py"
    script.write_text(source.replace("MARKER", repr(str(marker))), encoding="utf-8")
    out = tmp_path / "prompts"
    assert main(["from-reference", str(script), "--output_dir", str(out), "-q"]) == 0
    assert not marker.exists()  # parsed, never run
    system = (out / "system_prompt.txt").read_text(encoding="utf-8")
    judge = (out / "judge_prompt.txt").read_text(encoding="utf-8")
    assert system == SYSTEM and judge == JUDGE_TEMPLATE
    # the files are what the tools read: the loaders give the texts back, and they are confirmed
    assert load_prompt("system_prompt", out / "system_prompt.txt")[0] == SYSTEM
    assert published.reference_prompts_confirmed(system, judge)
    assert judge.format(question="Q?", correct_answer="yes", model_output="no").startswith("Grade a test answer.\nQuestion: Q?")


def test_a_script_without_the_prompts_writes_nothing_and_exits_1(standin_hashes, tmp_path, capfd):
    script = tmp_path / "other.py"
    script.write_text('PROMPT = "You are a patient test assistant."\nJ = f"{a}{b}{c}"\n')
    assert main(["from-reference", str(script), "--output_dir", str(tmp_path / "p")]) == 1
    assert not (tmp_path / "p").exists()
    err = capfd.readouterr().err
    assert "system_prompt and judge_prompt" in err and "Traceback" not in err


def test_one_prompt_found_is_written_and_the_other_said(standin_hashes, tmp_path, capfd):
    script = tmp_path / "half.py"
    script.write_text(f"S = {SYSTEM!r}\n")
    assert main(["from-reference", str(script), "--output_dir", str(tmp_path / "p")]) == 1
    assert (tmp_path / "p" / "system_prompt.txt").read_text() == SYSTEM
    assert not (tmp_path / "p" / "judge_prompt.txt").exists()
    assert "judge_prompt" in capfd.readouterr().err


@pytest.mark.parametrize("content, needle", [
    (b"def broken(:\n", "not a Python script"),
    (b"X = '\xff\xfe'\n", "not UTF-8"),
    (None, "cannot read it"),
])
def test_bad_scripts_are_one_line_and_exit_2(content, needle, tmp_path, capfd):
    script = tmp_path / "ref.py"
    if content is not None:
        script.write_bytes(content)
    assert main(["from-reference", str(script), "--output_dir", str(tmp_path / "p")]) == 2
    err = [ln for ln in capfd.readouterr().err.splitlines() if " ERROR " in ln]
    assert len(err) == 1 and needle in err[0] and str(script) in err[0]
    assert not (tmp_path / "p").exists()


def test_an_output_under_a_file_is_refused(standin_hashes, tmp_path, capfd):
    (tmp_path / "f").write_text("x")
    script = tmp_path / "ref.py"
    script.write_text(f"S = {SYSTEM!r}\n")
    assert main(["from-reference", str(script), "--output_dir", str(tmp_path / "f" / "p")]) == 2
    assert "--output_dir" in capfd.readouterr().err


def test_the_module_runs_with_python_m(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "k9bench.prompts", "from-reference", "--help"], capture_output=True, text=True,
                          cwd=REPO)
    assert proc.returncode == 0 and "PATH_TO_THE_REFERENCE" in proc.stdout and "subjective_evals.py" in proc.stdout


# ---------------------------------------------------------------- the reference's layout: two scripts (issue 31 item 2)

# a stand-in of each script, named like the reference's, each holding only its own prompt (our strings)
STANDIN_INFERENCE_SCRIPT = '''
import argparse
SYSTEM_PROMPT = """You are a patient test assistant.
Look at every frame, think in steps, and reply as JSON."""

def messages(question, use_system):
    return [{"role": "system", "content": SYSTEM_PROMPT if use_system else ""}, {"role": "user", "content": question}]
'''

STANDIN_JUDGE_SCRIPT = '''
def judge_request(item, reply):
    return f"""Grade a test answer.
Question: {item['question']}
Expected: {item['gold']}
Given: {reply}
Write CoT: first, then {{'Logic': X, 'Overall': X}}.
"""
'''


@pytest.fixture
def reference_copy(tmp_path):
    """A copy of the reference as a user holds it: the two scripts in one folder (and unrelated files)."""
    folder = tmp_path / "reference_repo"
    folder.mkdir()
    (folder / "eval_video_llm.py").write_text(STANDIN_INFERENCE_SCRIPT, encoding="utf-8")
    (folder / "subjective_evals.py").write_text(STANDIN_JUDGE_SCRIPT, encoding="utf-8")
    (folder / "README.md").write_text("# a reference\n")
    return folder


def test_each_standin_script_holds_only_its_own_prompt(standin_hashes, reference_copy):
    from k9bench.prompts.reference import extract_reference_prompts

    inference = extract_reference_prompts(reference_copy / "eval_video_llm.py")
    judge = extract_reference_prompts(reference_copy / "subjective_evals.py")
    assert (inference.system_prompt, inference.judge_prompt) == (SYSTEM, None)
    assert (judge.system_prompt, judge.judge_prompt) == (None, JUDGE_TEMPLATE)


@pytest.mark.parametrize("given", ["folder", "two_scripts", "two_scripts_reversed"])
def test_the_two_reference_scripts_confirm_both_prompts(given, standin_hashes, reference_copy, tmp_path, capfd):
    paths = {"folder": [reference_copy],
             "two_scripts": [reference_copy / "eval_video_llm.py", reference_copy / "subjective_evals.py"],
             "two_scripts_reversed": [reference_copy / "subjective_evals.py", reference_copy / "eval_video_llm.py"]}[given]
    out = tmp_path / "prompts"
    assert main(["from-reference", *map(str, paths), "--output_dir", str(out)]) == 0
    system = (out / "system_prompt.txt").read_text(encoding="utf-8")
    judge = (out / "judge_prompt.txt").read_text(encoding="utf-8")
    assert (system, judge) == (SYSTEM, JUDGE_TEMPLATE)
    assert published.reference_prompts_confirmed(system, judge)
    err = capfd.readouterr().err
    assert "both prompts confirmed" in err and " ERROR " not in err
    assert f"from {reference_copy / 'eval_video_llm.py'}" in err and f"from {reference_copy / 'subjective_evals.py'}" in err


def test_a_folder_with_the_scripts_below_its_top_is_searched(standin_hashes, reference_copy, tmp_path):
    nested = tmp_path / "clone"
    (nested / "scripts").mkdir(parents=True)
    (nested / ".git").mkdir()
    for name in ("eval_video_llm.py", "subjective_evals.py"):
        (nested / "scripts" / name).write_bytes((reference_copy / name).read_bytes())
    (nested / ".git" / "eval_video_llm.py").write_text("X = 1\n")  # hidden folders are not searched
    assert main(["from-reference", str(nested), "--output_dir", str(tmp_path / "p"), "-q"]) == 0
    assert (tmp_path / "p" / "judge_prompt.txt").read_text(encoding="utf-8") == JUDGE_TEMPLATE


@pytest.mark.parametrize("script, missing, holder", [
    ("eval_video_llm.py", "judge_prompt", "subjective_evals.py"),
    ("subjective_evals.py", "system_prompt", "eval_video_llm.py"),
])
def test_one_of_the_two_scripts_confirms_its_prompt_and_names_the_other(script, missing, holder, standin_hashes, reference_copy,
                                                                        tmp_path, capfd):
    out = tmp_path / "p"
    assert main(["from-reference", str(reference_copy / script), "--output_dir", str(out)]) == 1
    found = "judge_prompt" if missing == "system_prompt" else "system_prompt"
    assert (out / f"{found}.txt").exists() and not (out / f"{missing}.txt").exists()
    err = [ln for ln in capfd.readouterr().err.splitlines() if " ERROR " in ln]
    assert len(err) == 1 and missing in err[0] and holder in err[0] and str(reference_copy / script) in err[0]


def test_a_folder_missing_one_script_confirms_the_other_and_exits_1(standin_hashes, reference_copy, tmp_path, capfd):
    (reference_copy / "subjective_evals.py").unlink()
    assert main(["from-reference", str(reference_copy), "--output_dir", str(tmp_path / "p")]) == 1
    assert (tmp_path / "p" / "system_prompt.txt").read_text(encoding="utf-8") == SYSTEM
    err = [ln for ln in capfd.readouterr().err.splitlines() if " ERROR " in ln]
    assert len(err) == 1 and "judge_prompt" in err[0] and "subjective_evals.py" in err[0]


def test_a_folder_holding_neither_script_is_one_line_and_exit_2(standin_hashes, tmp_path, capfd):
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    (folder / "other.py").write_text(f"S = {SYSTEM!r}\n")
    assert main(["from-reference", str(folder), "--output_dir", str(tmp_path / "p")]) == 2
    err = [ln for ln in capfd.readouterr().err.splitlines() if " ERROR " in ln]
    assert len(err) == 1 and str(folder) in err[0] and "eval_video_llm.py" in err[0] and "subjective_evals.py" in err[0]
    assert not (tmp_path / "p").exists()
