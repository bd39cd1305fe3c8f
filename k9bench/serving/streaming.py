"""A streamed chat completion (``stream: true``) assembled into the reply it stands for.

Some APIs answer only streamed (Qwen-Omni's); :meth:`k9bench.serving.openai_api.ChatClient.chat` with
``stream=True`` asks for the stream with ``stream_options: {include_usage: true}`` and hands the ``openai``
client's chunk iterator (it parses the server-sent events, ``data: {...}`` up to ``data: [DONE]``) to
:func:`assemble`, which joins the first choice's ``delta.content`` pieces and keeps its finish reason, the
usage of the final chunk, the model and the fingerprint. The result reads like a non-streamed completion,
so the same checks, the same retries and the same record follow; the response's byte cap and time limit
(:func:`k9bench.serving.endpoint.response_limit_hooks`) bound the stream as they bound any body.

A stream that carries an error event, or ends before its choice's finish reason, is a
:class:`~k9bench.serving.openai_api.BadResponse` (retried: the server broke off).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Iterable


class StreamBroken(Exception):
    """The stream carried an error event or ended before its reply finished (wrapped as a ``BadResponse`` by the caller)."""


def assemble(chunks: Iterable[Any]) -> SimpleNamespace:
    """The completion a stream of ``ChatCompletionChunk`` stands for: ``choices[0].message.content``,
    ``choices[0].finish_reason``, ``usage``, ``model``, ``system_fingerprint`` (see the module doc)."""
    import openai

    pieces: list[str] = []
    finish = model = fingerprint = usage = None
    seen_choice = False
    try:
        for chunk in chunks:
            model = getattr(chunk, "model", None) or model
            fingerprint = getattr(chunk, "system_fingerprint", None) or fingerprint
            if getattr(chunk, "usage", None) is not None:
                usage = chunk.usage
            for choice in getattr(chunk, "choices", None) or []:
                if getattr(choice, "index", 0) != 0:
                    continue
                seen_choice = True
                delta = getattr(choice, "delta", None)
                content = getattr(delta, "content", None) if delta is not None else None
                if content is not None:
                    pieces.append(content if isinstance(content, str) else str(content))
                if getattr(choice, "finish_reason", None) is not None:
                    finish = choice.finish_reason
    except (openai.APIStatusError, openai.APIConnectionError):
        raise  # classified as they are without a stream
    except openai.APIError as exc:  # an error event in the stream
        raise StreamBroken(f"the stream carried an error: {exc}") from None
    if not seen_choice or finish is None:
        raise StreamBroken(f"the stream ended before its reply finished ({len(pieces)} piece(s), no finish_reason)")
    message = SimpleNamespace(content="".join(pieces))
    return SimpleNamespace(choices=[SimpleNamespace(index=0, message=message, finish_reason=finish)], usage=usage, model=model,
                           system_fingerprint=fingerprint)


STREAM_OPTIONS = {"include_usage": True}
"""What a streamed request asks for beside ``stream: true``: the usage in a last chunk."""


__all__ = ["STREAM_OPTIONS", "StreamBroken", "assemble"]
