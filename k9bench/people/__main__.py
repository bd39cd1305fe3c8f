"""People in the loop: a local web app to answer K9-Bench questions or to label a model's wrong answers.

Usage::

    python -m k9bench.people answer --subset subset.json --annotator ana --output_dir people/ --dataset_name demo --video_dir videos/
    python -m k9bench.people label eval_MODEL.json --labeller ana --output_dir people/ --video_dir videos/ --sample 105 --seed 0
    python -m k9bench.people llm-label --evaluations eval_MODEL.json --output_dir people/ --labeller_model gpt-4o [--base_url URL]

``answer`` and ``label`` print the app's address with its token (``http://127.0.0.1:PORT/?token=...``) as the
first line of stdout, then serve until Ctrl-C; every answer or label is saved the moment it is submitted,
and a restart goes on at the first item without one. ``llm-label`` is the LLM labeller
(:mod:`k9bench.people.labeller`). Exit status: 0; 2 for a bad flag or input (one line naming it).
See docs/people.md.
"""

from __future__ import annotations

import argparse
import logging
import sys

from k9bench.people.settings import AnswerSettings, LabelSettings, ServeSettings
from k9bench.settings import add_arguments, from_namespace

log = logging.getLogger("k9bench.people")


def build_parser() -> argparse.ArgumentParser:
    from k9bench.cli import ArgumentParser, add_logging_args
    from k9bench.data.dataset import DatasetSettings

    parser = ArgumentParser(prog="python -m k9bench.people", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="{answer,label,llm-label}")
    answer = sub.add_parser("answer", help="answer a subset's questions in free form (the human baseline)")
    add_arguments(answer, AnswerSettings)
    add_arguments(answer, DatasetSettings)
    label = sub.add_parser("label", help="label a model's wrong answers with failure types")
    label.add_argument("eval_file", metavar="EVAL_FILE", help="the model's eval file (evaluate_results.py --mode evaluate)")
    add_arguments(label, LabelSettings)
    for mode in (answer, label):
        add_arguments(mode.add_argument_group("server"), ServeSettings)
        add_logging_args(mode)
    from k9bench.people.labeller import add_labeller_args

    llm = sub.add_parser("llm-label", help="the LLM labeller: wrong answers sorted into failure types by a model")
    add_labeller_args(llm)
    add_logging_args(llm)
    return parser


def _listen_on(serve: ServeSettings) -> None:
    from k9bench.people.app import LOOPBACK
    from k9bench.stage import StageError

    if serve.host in (LOOPBACK, "localhost", "::1"):
        return
    if not serve.allow_remote:
        raise StageError(f"--host {serve.host}: the app listens on {LOOPBACK} only, unless --allow_remote is given too "
                         "(anyone who can reach the port and has the URL could then write answers)")
    log.warning("listening on %s (--allow_remote): anyone who can reach port %s there and has the URL can read the questions and "
                "write answers; keep the URL private", serve.host, serve.port or "(any)")


def _answer_session(s: AnswerSettings, data):
    """The annotator's session over ``data``'s (:class:`k9bench.data.dataset.DatasetSettings`) questions of ``--subset``."""
    from k9bench.artifact_io import ArtifactError
    from k9bench.data.dataset import DatasetError, load_selected
    from k9bench.data.subset import read_subset
    from k9bench.people.answering import open_session
    from k9bench.stage import StageError

    chosen = read_subset(s.subset)
    try:
        loaded = load_selected(data)
    except DatasetError as exc:
        raise StageError(f"--dataset_name {data.dataset_name}: {str(exc).splitlines()[0]}") from None
    questions = [q for q in loaded.questions if q.idx in chosen.idx]
    unknown = sorted(chosen.idx - {q.idx for q in questions})
    if unknown:
        raise StageError(f"--subset {s.subset}: {len(unknown)} idx not in {data.dataset_name}: "
                         + ", ".join(str(i) for i in unknown[:20]) + (" ..." if len(unknown) > 20 else ""))
    try:
        return open_session(s.annotator, questions, s.output_dir, s.video_dir, seed=s.seed, dataset=data.dataset_name,
                            subset=chosen.summary())
    except ArtifactError as exc:
        raise StageError(str(exc)) from None


def _label_session(s: LabelSettings):
    from k9bench.people.labels import open_label_session

    return open_label_session(s.eval_file, s.labeller, s.output_dir, s.video_dir, size=s.sample, seed=s.seed)


def serve(session, serve_settings: ServeSettings) -> int:
    """Print the URL (first line of stdout) and serve ``session`` until Ctrl-C or SIGTERM."""
    import secrets
    import signal

    from k9bench.people.app import Server, create_app

    token = secrets.token_urlsafe(24)
    server = Server(create_app(session, token), serve_settings.host, serve_settings.port)
    print(server.url(token), flush=True)
    missing = sorted({session.video_of(i) for i in session.items if not (session.video_dir / session.video_of(i)).is_file()})
    if missing:
        log.warning("%d video(s) not in %s (their items say so): %s", len(missing), session.video_dir, ", ".join(missing[:10]))
    done = sum(1 for i in session.items if i.idx in session.book.records)
    log.info("%s: %d of %d already saved in %s; open the URL above", session.who, done, len(session.items), session.book.export_path)
    def _stop(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _stop)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        session.book.close()
    log.info("stopped; %d saved in %s", len(session.book.records), session.book.export_path)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["llm-label"]:
        from k9bench.people.labeller import main as labeller_main

        return labeller_main(argv[1:])
    from k9bench.artifact_io import ArtifactError
    from k9bench.logs import setup_logging
    from k9bench.stage import StageError

    args = build_parser().parse_args(argv)
    setup_logging(args.verbose, args.quiet)
    serve_settings = from_namespace(ServeSettings, args)
    try:
        _listen_on(serve_settings)
        if args.command == "answer":
            from k9bench.data.dataset import DatasetSettings

            session = _answer_session(from_namespace(AnswerSettings, args), from_namespace(DatasetSettings, args))
        else:
            session = _label_session(from_namespace(LabelSettings, args))
    except (StageError, ArtifactError) as exc:
        log.error("%s", exc)
        return 2
    return serve(session, serve_settings)


if __name__ == "__main__":
    sys.exit(main())
