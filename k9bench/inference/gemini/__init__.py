"""``--backend gemini``: Gemini through its own SDK (``google-genai``), each video uploaded once through the Files API.

- :mod:`k9bench.inference.gemini.settings` its flags (thinking budget, uploads) and where its key comes from
- :mod:`k9bench.inference.gemini.uploads`  each video uploaded once, reused for its questions and across reruns (the ledger)
- :mod:`k9bench.inference.gemini.backend`  the backend: requests, replies, finish reasons, retries
"""
