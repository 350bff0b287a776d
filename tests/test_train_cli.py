"""`ina train`'s bad input: one line and exit 2, before any emulation starts."""

import pytest
from conftest import EXAMPLES

from controller.cli import main

FIG1 = str(EXAMPLES / "aro-fig1.yaml")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--workers", "6"], "--workers 6: task job0/t0 of"),
        (["--workers", "1"], "at least 2 workers"),
        (["--cut-link", "L1S1@2"], "write it as A-B@EPOCH"),
        (["--cut-link", "L1-S7@1"], "has no link L1-S7"),
        (["--cut-link", "L1-S1@3", "--epochs", "2"], "the run has 2 epochs"),
        (["--loss", "100"], "from 0 up to 100"),
        (["--scheme", "nosuch"], "unknown scheme 'nosuch'"),
        (["--png", "/no/such/dir/x.png"], "does not exist"),
        (["--frobnicate"], "unrecognized arguments: --frobnicate"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, says, capsys, monkeypatch):
    # Input that got past the checks must not reach Mininet (others may be using it).
    from controller.emulation import mininet_runner

    monkeypatch.setattr(mininet_runner, "missing_mininet", lambda: "Mininet is off in this test")
    try:
        code = main(["train", FIG1, *args])
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    out = capsys.readouterr()
    text = (out.out + out.err).strip()
    assert code == 2
    assert says in text
    assert "Traceback" not in text
