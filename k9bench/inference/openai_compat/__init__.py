"""``--backend openai``: an OpenAI-compatible server. :mod:`.backend` is the backend, :mod:`.request` what a request is
built from, :mod:`.video_transport` how a video travels, :mod:`.server_info` what the server says about itself,
:mod:`.settings` its flags."""
