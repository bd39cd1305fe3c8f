"""The reference's prompt texts, taken out of a copy of its script that the user supplies.

Nothing of the reference is stored in this project: only the two SHA-256 hashes in
:mod:`k9bench.data.published`. :func:`extract_reference_prompts` reads the script as text and parses it
with :mod:`ast`, never running it, and collects every string it could build from literals:

* string constants (a plain text, and read as a ``str.format`` template);
* f-strings, their ``{expression}`` parts kept as placeholders;
* ``"..." + name + "..."`` concatenations;
* ``"...".format(...)`` calls.

A candidate is the system prompt when its text (one trailing newline ignored, also tried stripped and
dedented) has :data:`~k9bench.data.published.REFERENCE_SYSTEM_PROMPT_SHA256`. A candidate with exactly
three distinct placeholders is the judge prompt when, its placeholders named ``question``,
``correct_answer`` and ``model_output`` in some order, it has
:data:`~k9bench.data.published.REFERENCE_JUDGE_PROMPT_SHA256` in our template form (literal braces
doubled); the hash decides, so no guess about the reference's variable names is needed.

The reference keeps the two prompts in two scripts (SPEC section 9): the system prompt in
:data:`SYSTEM_SCRIPT`, the judge prompt in :data:`JUDGE_SCRIPT`. :func:`reference_scripts` takes the
paths a user gives (those scripts, or the folder of a copy of the reference holding them) and
:func:`extract_from_scripts` searches them all, each prompt found in whichever script holds it.
"""

from __future__ import annotations

import ast
import itertools
import string
import textwrap
from dataclasses import dataclass
from pathlib import Path

from k9bench.data import published

SYSTEM_SCRIPT = "eval_video_llm.py"
"""The reference's script holding the system prompt."""
JUDGE_SCRIPT = "subjective_evals.py"
"""The reference's script holding the judge prompt."""
SCRIPT_OF = {"system_prompt": SYSTEM_SCRIPT, "judge_prompt": JUDGE_SCRIPT}
"""Which of the reference's scripts holds each prompt."""

Part = tuple[str, str]
"""``("text", literal)`` or ``("hole", key)``: a piece of a candidate string."""


class ReferenceScriptError(ValueError):
    """The reference script cannot be read or parsed; the message names the file."""


@dataclass(frozen=True)
class Extracted:
    """What was found: each prompt's text in our file form (None when not found)."""

    system_prompt: str | None
    """The system prompt, exactly the reference's text (for ``eval_video_llm.py --system_prompt_file``)."""
    judge_prompt: str | None
    """The judge prompt as our template (for ``subjective_evals.py --prompt_file``)."""
    candidates: int
    """How many candidate strings the script(s) held."""
    scripts: tuple[str, ...] = ()
    """The scripts searched (by :func:`extract_from_scripts`)."""
    found_in: tuple[tuple[str, str], ...] = ()
    """``(prompt kind, script)`` for each prompt found."""


def _template_parts(text: str, holes: dict[str, str] | None = None) -> list[Part] | None:
    """``text`` read as a ``str.format`` template (None when it is not one); field names map to keys
    through ``holes`` (a ``.format(...)`` call's arguments) where given."""
    try:
        parsed = list(string.Formatter().parse(text))
    except ValueError:
        return None
    parts: list[Part] = []
    for literal, name, _spec, _conv in parsed:
        if literal:
            parts.append(("text", literal))
        if name is not None:
            parts.append(("hole", (holes or {}).get(name, name or "<positional>")))
    return parts


def _flatten(node: ast.AST) -> list[Part] | None:
    """The pieces of a string expression, or None when it is not built from string literals."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [("text", node.value)]
    if isinstance(node, ast.JoinedStr):
        parts: list[Part] = []
        for value in node.values:
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                parts.append(("text", value.value))
            elif isinstance(value, ast.FormattedValue):
                parts.append(("hole", ast.unparse(value.value)))
            else:
                return None
        return parts
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _flatten(node.left), _flatten(node.right)
        if left is None and right is None:
            return None
        return (left or [("hole", ast.unparse(node.left))]) + (right or [("hole", ast.unparse(node.right))])
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format"
            and isinstance(node.func.value, ast.Constant) and isinstance(node.func.value.value, str)):
        holes = {kw.arg: ast.unparse(kw.value) for kw in node.keywords if kw.arg}
        holes.update({str(i): ast.unparse(arg) for i, arg in enumerate(node.args)})
        return _template_parts(node.func.value.value, holes)
    return None


def candidates(source: str, *, filename: str = "<script>") -> list[list[Part]]:
    """Every candidate string of the script's source (see the module doc)."""
    try:
        tree = ast.parse(source, filename=filename)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise ReferenceScriptError(f"{filename}: not a Python script that can be parsed ({type(exc).__name__}: {exc})") from None
    out: list[list[Part]] = []
    for node in ast.walk(tree):
        parts = _flatten(node)
        if parts is None:
            continue
        out.append(parts)
        if isinstance(node, ast.Constant):  # a template kept in a constant and formatted elsewhere
            as_template = _template_parts(node.value)
            if as_template and any(kind == "hole" for kind, _ in as_template):
                out.append(as_template)
    return out


def _variants(text: str) -> list[str]:
    """The text as written, stripped and dedented (how a script may hold a triple-quoted prompt)."""
    dedented = textwrap.dedent(text)
    seen: list[str] = []
    for v in (text, text.strip(), dedented, dedented.strip(), text.strip() + "\n", dedented.strip() + "\n"):
        if v not in seen:
            seen.append(v)
    return seen


def _escape(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


def _match_system(parts: list[Part]) -> str | None:
    if any(kind == "hole" for kind, _ in parts):
        return None
    text = "".join(value for _, value in parts)
    for variant in _variants(text):
        if published.is_reference_prompt("system_prompt", variant):
            return variant[:-1] if variant.endswith("\n") else variant
    return None


def _match_judge(parts: list[Part]) -> str | None:
    keys = list(dict.fromkeys(value for kind, value in parts if kind == "hole"))
    if len(keys) != len(published.JUDGE_FIELDS):
        return None
    for names in itertools.permutations(published.JUDGE_FIELDS):
        mapping = dict(zip(keys, names))
        template = "".join(_escape(value) if kind == "text" else "{" + mapping[value] + "}" for kind, value in parts)
        for variant in _variants(template):
            if published.is_reference_prompt("judge_prompt", variant):
                return variant
    return None


def extract_reference_prompts(path: str | Path) -> Extracted:
    """Find the reference's system and judge prompts in the script at ``path`` without running it."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ReferenceScriptError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    try:
        source = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ReferenceScriptError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    found = candidates(source, filename=str(path))
    system = next((t for t in map(_match_system, found) if t is not None), None)
    judge = next((t for t in map(_match_judge, found) if t is not None), None)
    return Extracted(system_prompt=system, judge_prompt=judge, candidates=len(found))


def _skipped_folder(part: str) -> bool:
    return part.startswith(".") or part in ("__pycache__", "node_modules") or part.endswith(".egg-info")


def reference_scripts(paths: list[str | Path]) -> list[Path]:
    """The scripts to search: each path that is a file as given; for a folder (a copy of the reference
    repository), its :data:`SYSTEM_SCRIPT` and :data:`JUDGE_SCRIPT`, at its top or, when not there, the
    only one of each name below it (hidden folders skipped). Raises :class:`ReferenceScriptError`
    naming the path: a path that does not exist, a folder holding neither script, or one holding a
    script name twice below its top (pass the scripts themselves then)."""
    out: list[Path] = []
    for given in paths:
        path = Path(given)
        try:
            is_dir = path.is_dir()
            exists = is_dir or path.exists()
        except OSError as exc:  # a symlink loop, a path too long
            raise ReferenceScriptError(f"{path}: cannot read it ({exc.strerror or exc})") from None
        if not exists:
            raise ReferenceScriptError(f"{path}: cannot read it (no such file or folder)")
        if not is_dir:
            out.append(path)
            continue
        found = []
        for name in (SYSTEM_SCRIPT, JUDGE_SCRIPT):
            top = path / name
            if top.is_file():
                found.append(top)
                continue
            try:
                below = sorted(p for p in path.rglob(name)
                               if p.is_file() and not any(_skipped_folder(part) for part in p.relative_to(path).parts[:-1]))
            except OSError as exc:
                raise ReferenceScriptError(f"{path}: cannot search it ({exc.strerror or exc})") from None
            if len(below) > 1:
                raise ReferenceScriptError(f"{path}: holds {len(below)} files named {name} ({', '.join(map(str, below[:4]))}); "
                                           "pass the reference's scripts themselves")
            found.extend(below)
        if not found:
            raise ReferenceScriptError(f"{path}: a folder holding neither {SYSTEM_SCRIPT} nor {JUDGE_SCRIPT} (the reference's "
                                       "two scripts); pass the folder of your copy of the reference, or the two scripts")
        out.extend(found)
    unique: list[Path] = []
    for p in out:
        if p not in unique:
            unique.append(p)
    return unique


def extract_from_scripts(paths: list[str | Path]) -> Extracted:
    """:func:`extract_reference_prompts` over every script of :func:`reference_scripts` (``paths``): each
    prompt is taken from the first script that holds it."""
    scripts = reference_scripts(paths)
    system = judge = None
    found_in: list[tuple[str, str]] = []
    count = 0
    for script in scripts:
        one = extract_reference_prompts(script)
        count += one.candidates
        if system is None and one.system_prompt is not None:
            system = one.system_prompt
            found_in.append(("system_prompt", str(script)))
        if judge is None and one.judge_prompt is not None:
            judge = one.judge_prompt
            found_in.append(("judge_prompt", str(script)))
    return Extracted(system_prompt=system, judge_prompt=judge, candidates=count, scripts=tuple(map(str, scripts)),
                     found_in=tuple(found_in))
