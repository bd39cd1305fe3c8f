"""Secrets on a command line: registered before parsing, masked in error lines and by value later."""

import pytest
from k9bench.cli import ArgumentParser
from k9bench import redact
def test_bad_value_error_masks_url_credentials(capsys):
    p = ArgumentParser(prog="x")
    p.add_argument("--embedding_model", type=int)
    with pytest.raises(SystemExit):
        p.parse_args(["--embedding_model", "https://user:CANARYSECRET99@host/m"])
    err = capsys.readouterr().err
    assert "CANARYSECRET99" not in err and "--embedding_model" in err
    assert "CANARYSECRET99" not in redact.redact_text("later: CANARYSECRET99 printed alone")


def test_every_value_of_a_secret_named_flag_is_registered():
    redact.register_argv_secrets(["--model", "m", "--api_key", "CANARY-KEY-1", "--judge_api_token=CANARY-TOKEN-2"])
    text = redact.redact_text("sent CANARY-KEY-1 and CANARY-TOKEN-2")
    assert "CANARY" not in text and text.count(redact.MASK) == 2
