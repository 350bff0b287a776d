"""The Mininet runner gives the controller time to program every switch it starts: bmv2
parses ina.p4's JSON (3.2 MB) in each switch, and 34 of them on this 2-core machine did not
all take it within the controller's default 15 s (`ina bench scale --target bmv2` at 100
workers); the runner itself waits for the controller longer than that."""

from __future__ import annotations

from controller.cli import build_parser
from controller.emulation.mininet_runner import (
    PROGRAM_SECONDS,
    controller_wait,
    program_timeout,
    switch_grace,
)


def test_the_controller_waits_longer_for_more_switches_and_longest_for_bmv2():
    default = (
        build_parser().parse_args(["controller", "t.yaml", "--switches", "s.json"]).connect_timeout
    )
    assert program_timeout("embedded", 1) >= default
    assert program_timeout("bmv2", 34) > default  # what failed at 100 workers
    assert program_timeout("bmv2", 48) >= default + 48 * PROGRAM_SECONDS["bmv2"]
    assert program_timeout("bmv2", 48) > program_timeout("embedded", 48)


def test_the_runner_waits_for_the_controller_longer_than_the_controller_waits_for_switches():
    for target in ("embedded", "bmv2"):
        for switches in (1, 34, 48):
            assert controller_wait(target, switches) > program_timeout(target, switches) + 30


def test_a_slow_bmv2_switch_among_many_is_not_taken_for_a_failed_one():
    args = ["controller", "t.yaml", "--switches", "s.json"]
    default = build_parser().parse_args(args).switch_grace
    assert switch_grace("embedded", 48) == default  # the failover tests' detection time
    assert switch_grace("bmv2", 2) < default + 2
    assert switch_grace("bmv2", 36) > 2 * default  # what starved at 200 workers
