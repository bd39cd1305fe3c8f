"""``python -m k9bench.prompts from-reference PATH [PATH]``: the reference's prompt files, from your copy of it.

The reference keeps its system prompt in ``eval_video_llm.py`` and its judge prompt in
``subjective_evals.py``. Give both scripts, or the folder of your copy of the reference (the two are
found in it); each is parsed, never run. Both prompts are taken out, checked against the SHA-256 in
:mod:`k9bench.data.published`, and written as the two files this project's tools read::

    python -m k9bench.prompts from-reference path/to/reference_repo
    python -m k9bench.prompts from-reference path/to/eval_video_llm.py path/to/subjective_evals.py
    python eval_video_llm.py --system_prompt_file eval_results/reference_prompts/system_prompt.txt ...
    python subjective_evals.py --prompt_file eval_results/reference_prompts/judge_prompt.txt ...

A run made with both files is "reference prompts (confirmed)" in its record and report. Nothing of
the reference is stored in this project: only the hashes.

Exit status: 0 both prompts found and written; 1 one or both not found in the scripts (what was
found is written; the line names the prompt, the scripts searched and the script that holds it in the
reference); 2 bad input (a script that cannot be read or parsed, a folder holding neither script, an
output path that cannot be written).
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from k9bench.layout import RESULTS_DIR

log = logging.getLogger("k9bench.prompts")

DEFAULT_OUTPUT_DIR = f"{RESULTS_DIR}/reference_prompts"
FILES = {"system_prompt": "system_prompt.txt", "judge_prompt": "judge_prompt.txt"}
USED_BY = {"system_prompt": "eval_video_llm.py --system_prompt_file", "judge_prompt": "subjective_evals.py --prompt_file"}


def build_parser() -> argparse.ArgumentParser:
    from k9bench.cli import ArgumentParser, add_logging_args

    parser = ArgumentParser(prog="python -m k9bench.prompts", description=__doc__.split("\n\n")[0],
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    ref = sub.add_parser("from-reference", help="write the reference's prompt files from a copy of its scripts",
                         description="Take the reference's system prompt (eval_video_llm.py) and judge prompt "
                                     "(subjective_evals.py) out of a copy of its scripts (parsed, never run), check them "
                                     "against the published SHA-256, write them.")
    ref.add_argument("scripts", nargs="+", metavar="PATH_TO_THE_REFERENCE",
                     help="the folder of your copy of the reference (holding eval_video_llm.py and subjective_evals.py), "
                          "or those two scripts")
    ref.add_argument("--output_dir", default=DEFAULT_OUTPUT_DIR, help="folder for system_prompt.txt and judge_prompt.txt "
                                                                       "(default: %(default)s)")
    add_logging_args(ref)
    return parser


def main(argv: list[str] | None = None) -> int:
    from k9bench.artifact_io import write_text_atomic
    from k9bench.logs import setup_logging
    from k9bench.prompts.reference import SCRIPT_OF, ReferenceScriptError, extract_from_scripts
    from k9bench.stage import StageError, check_output

    args = build_parser().parse_args(argv)
    setup_logging(args.verbose, args.quiet)
    out_dir = Path(args.output_dir)
    try:
        check_output(out_dir, flag="--output_dir", folder=True)
        found = extract_from_scripts(args.scripts)
    except (ReferenceScriptError, StageError) as exc:
        log.error("%s", exc)
        return 2
    texts = {"system_prompt": found.system_prompt, "judge_prompt": found.judge_prompt}
    missing = [kind for kind, text in texts.items() if text is None]
    where = dict(found.found_in)
    for kind, text in texts.items():
        if text is None:
            continue
        path = out_dir / FILES[kind]
        try:
            check_output(path, flag="--output_dir")
            out_dir.mkdir(parents=True, exist_ok=True)
            write_text_atomic(path, text)
        except (StageError, OSError) as exc:
            log.error("%s", exc)
            return 2
        log.info("%s: the reference's text (SHA-256 confirmed, from %s), %d characters -> %s  (use: %s %s)", kind, where[kind],
                 len(text), path, USED_BY[kind], path)
    if missing:
        searched = [Path(p).name for p in found.scripts]
        absent = [SCRIPT_OF[kind] for kind in missing if SCRIPT_OF[kind] not in searched]
        hint = (f"; the reference keeps it in {' and '.join(dict.fromkeys(absent))}: pass that script too, or the reference's folder"
                if absent else "; are they the reference's scripts, unmodified?")
        log.error("%s: no string of the %d in %s matches the reference's %s (SHA-256 in k9bench/data/published.py)%s",
                  ", ".join(found.scripts), found.candidates, "it" if len(found.scripts) == 1 else "them", " and ".join(missing), hint)
        return 1
    log.info("both prompts confirmed: runs made with these files are marked 'reference prompts (confirmed)'")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
