"""The results page: one self-contained HTML file (its data inline, hand-written CSS and JavaScript,
no CDN, no request beyond ``file://``) beside a ``frames/`` folder of thumbnails.

The data is a JSON ``<script type="application/json">`` block in which every ``<`` is written as
``\\u003c`` (so no text of the data, ``</script``, ``<!--`` or ``<script`` included, can end or bend the
block: the HTML parser sees no ``<`` in it), read once by the page's script. The palette is Okabe-Ito (colour-blind safe): correct blue, wrong vermillion, failed grey,
the ground truth marked by a bold outline and a "GT" tag as well as its colour.
"""

from __future__ import annotations

import json
from pathlib import Path

from k9bench.artifact_io import write_text_atomic

ASSETS = Path(__file__).with_name("assets")
"""page.css and page.js, inlined into every page."""


def render(data: dict, title: str) -> str:
    """The whole page as a string."""
    import html

    payload = json.dumps(data, separators=(",", ":"), ensure_ascii=False).replace("<", "\\u003c")
    css = (ASSETS / "page.css").read_text(encoding="utf-8")
    js = (ASSETS / "page.js").read_text(encoding="utf-8")
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; img-src 'self' file: data:; "
        "style-src 'unsafe-inline'; script-src 'unsafe-inline'\">"
        f"<title>{html.escape(title)}</title><style>{css}</style></head><body>\n"
        f"<header><h1>{html.escape(title)}</h1><div id=\"notes\"></div><div id=\"runs\"></div><div id=\"across\"></div></header>\n"
        "<nav id=\"filters\" aria-label=\"filters\"></nav>\n<main><section id=\"list\" aria-label=\"questions\"><table id=\"qtable\"><thead></thead><tbody></tbody></table>"
        "<button type=\"button\" id=\"more\" hidden></button></section>"
        "<section id=\"detail\" aria-label=\"the open question\"><p class=\"hint\">Choose a question (click; or Tab to the list, Enter, j/k and the "
        "arrow keys; ? lists the keys).</p></section></main>\n"
        f"<script type=\"application/json\" id=\"k9data\">{payload}</script>\n<script>{js}</script>\n</body></html>\n"
    )


def write_page(data: dict, output_dir: str | Path, title: str = "K9-Bench results") -> Path:
    """Write ``index.html`` into ``output_dir`` (atomically); return its path."""
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    return write_text_atomic(out / "index.html", render(data, title))
