"""Answer extraction from a model's reply (SPEC section 3), as pure functions.

The system prompt asks for ``{"reasoning": "...", "answer": "..."}``. The answer is found by,
in order:

1. ``json``        the whole reply (after the steps below) is a JSON object with ``answer``;
2. ``json_block``  the first balanced ``{...}`` block that parses as a JSON object with ``answer``;
3. ``regex``       the first ``"answer": "..."`` pair (escapes decoded), for replies that are not
                   valid JSON, e.g. cut off after the answer or with unescaped quotes in the reasoning;
4. ``raw``         otherwise the whole reply is the answer.

Before that, a Thinking model's ``<think>...</think>`` reasoning is removed (a reply that starts
inside the thinking block, because the chat template opened ``<think>`` in the prompt, loses
everything up to the last ``</think>``), and Markdown code fences around the JSON are tolerated.
The full reply is always kept separately in the record's ``response``.

    >>> extract_answer('<think>hm</think>```json\\n{"reasoning": "r", "answer": "It sits."}\\n```').answer
    'It sits.'
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"

_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL)
_FENCE = re.compile(r"```[A-Za-z0-9_+-]*[ \t]*\n?(.*?)```", re.DOTALL)
_ANSWER_PAIR = re.compile(r'"answer"\s*:\s*"((?:[^"\\]|\\.)*)"', re.DOTALL)

METHODS = ("json", "json_block", "regex", "raw")
"""How an answer was found, in the order tried."""


@dataclass(frozen=True)
class Extraction:
    """The answer found in a reply, and how."""

    answer: str
    """The extracted answer text (stripped)."""
    method: str
    """One of :data:`METHODS`."""
    thinking: str | None = None
    """The removed thinking text, if the reply had any."""
    thinking_unfinished: bool = False
    """The reply ended inside a ``<think>`` block (generation cut in the reasoning): the answer,
    if any, comes from unfinished reasoning."""


def prompt_opens_thinking(prompt: str | None) -> bool:
    """True when a rendered prompt leaves a ``<think>`` block open (a Thinking model's template
    may end the generation prompt with ``<think>``), so the reply starts inside the reasoning."""
    prompt = prompt or ""
    return prompt.rfind(THINK_OPEN) > prompt.rfind(THINK_CLOSE)


def strip_thinking(text: str) -> tuple[str, str | None]:
    """Remove ``<think>...</think>`` reasoning; return ``(rest, thinking or None)``.

    - complete blocks are removed wherever they are;
    - a ``</think>`` without its opening tag (the template opened it in the prompt) drops
      everything before it;
    - an unclosed ``<think>`` (generation cut inside the reasoning) drops only the tag, so the
      later steps still see the text.
    """
    thoughts: list[str] = []

    def _take(match: re.Match) -> str:
        thoughts.append(match.group(0)[len(THINK_OPEN):-len(THINK_CLOSE)])
        return ""

    rest = _THINK_BLOCK.sub(_take, text)
    if THINK_CLOSE in rest:
        head, _, rest = rest.rpartition(THINK_CLOSE)
        thoughts.insert(0, head.replace(THINK_OPEN, ""))
    if THINK_OPEN in rest:
        rest = rest.replace(THINK_OPEN, "")
    if not thoughts:
        return rest, None
    return rest, "\n".join(t.strip() for t in thoughts).strip()


def strip_code_fences(text: str) -> str:
    """The content of the first Markdown code fence holding a ``{``, else ``text`` unchanged.

    An unterminated opening fence (generation cut short) is dropped too.
    """
    for match in _FENCE.finditer(text):
        if "{" in match.group(1):
            return match.group(1)
    stripped = text.strip()
    if stripped.startswith("```"):
        first_nl = stripped.find("\n")
        return stripped[first_nl + 1:] if first_nl != -1 else ""
    return text


def _answer_of(obj: object) -> str | None:
    if not isinstance(obj, dict) or "answer" not in obj:
        return None
    value = obj["answer"]
    if value is None:
        return ""
    if isinstance(value, str):
        return value.strip()
    return json.dumps(value, ensure_ascii=False)


def iter_brace_blocks(text: str):
    """Yield each balanced ``{...}`` substring, by position of its opening brace.

    Braces inside JSON strings are skipped, so ``{"answer": "a } b"}`` is one block.
    """
    for start, ch in enumerate(text):
        if ch != "{":
            continue
        depth = 0
        in_string = False
        escaped = False
        for pos in range(start, len(text)):
            c = text[pos]
            if in_string:
                if escaped:
                    escaped = False
                elif c == "\\":
                    escaped = True
                elif c == '"':
                    in_string = False
                continue
            if c == '"':
                in_string = True
            elif c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    yield text[start:pos + 1]
                    break


def _loads(text: str) -> object:
    try:
        return json.loads(text)
    except (json.JSONDecodeError, ValueError, RecursionError):
        return None


def extract_answer(response: str, *, thinking_opened: bool = False) -> Extraction:
    """Extract the answer from a full model reply (see the module doc for the rules).

    ``thinking_opened``: the prompt opened a ``<think>`` block (:func:`prompt_opens_thinking`),
    so the reply starts inside it. The answer is the same either way (a ``</think>`` without its
    opening tag already drops what precedes it); what changes is that a reply cut before its
    ``</think>`` is flagged :attr:`Extraction.thinking_unfinished`.
    """
    response = response or ""
    if thinking_opened and not response.lstrip().startswith(THINK_OPEN):
        response = THINK_OPEN + response
    unfinished = response.rfind(THINK_OPEN) > response.rfind(THINK_CLOSE)
    found = _extract(response)
    return Extraction(found.answer, found.method, found.thinking, unfinished)


def _extract(response: str) -> Extraction:
    text, thinking = strip_thinking(response)
    text = strip_code_fences(text).strip()

    found = _answer_of(_loads(text))
    if found is not None:
        return Extraction(found, "json", thinking)

    for block in iter_brace_blocks(text):
        found = _answer_of(_loads(block))
        if found is not None:
            return Extraction(found, "json_block", thinking)

    match = _ANSWER_PAIR.search(text)
    if match:
        raw = match.group(1)
        decoded = _loads(f'"{raw}"')
        return Extraction((decoded if isinstance(decoded, str) else raw).strip(), "regex", thinking)

    return Extraction(text.strip(), "raw", thinking)
