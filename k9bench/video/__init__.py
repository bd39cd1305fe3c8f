"""Video frames for the model, decoded once, with an explicit decoder.

- :mod:`k9bench.video.sampling`: qwen-vl-utils' sampling rules, the frame defaults (defined once), ``sample()``;
- :mod:`k9bench.video.cache`: ``FrameCache``, each video decoded once per run, optionally stored on disk;
- :mod:`k9bench.video.policy`: how frames (and a soundtrack) are handed to a model's processor;
- :mod:`k9bench.video.audio`: a video's soundtrack for audio-capable models;
- :mod:`k9bench.video.ffmpeg`: locating ffmpeg, synthetic videos.

Import each name from the module that defines it (this package re-exports nothing)::

    from k9bench.video.sampling import sample, PROCESSOR_VIDEO_KWARGS
    frames = sample("k9bench_videos/abcdefghijk.mp4", fps=1.0, max_frames=32)
"""
