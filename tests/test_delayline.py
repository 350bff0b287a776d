"""The reorder impairment's delay line (controller.emulation.faults.delayline) on real veth pairs
(root): it delays frames without losing any of its own, and accounts for every frame it read."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time

import pytest

from controller.emulation.faults.delayline import SO_RCVBUFFORCE
from dataplane.netns import VethNet, ip

pytestmark = pytest.mark.root
DIVERT, LINK = 1, 2  # VethNet ports: frames diverted into port 1, sent out of port 2


# Ours. The kernel sends a few IPv4 frames of its own on fresh veths, which the delay line
# forwards too: stats are checked as bounds and as a balance, our frames one by one.
SOURCE = b"\x02\x00\x00\x00\x00\x01"


def _frame(number: int) -> bytes:
    """An IPv4-typed frame (the delay line forwards only the job's and the probes' types)."""
    return b"\xff" * 6 + SOURCE + b"\x08\x00" + number.to_bytes(4, "big") + bytes(46)


def _run(net: VethNet, delay_ms: float, send) -> dict:
    """The delay line between the two ports while `send` runs; its stats for the link."""
    line = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "controller.emulation.faults.delayline",
            "--delay-ms",
            str(delay_ms),
            f"{net.switch_if[DIVERT]}:{net.switch_if[LINK]}",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert json.loads(line.stdout.readline()) == {"ready": True}
        send()
        line.send_signal(signal.SIGTERM)
        out, _ = line.communicate(timeout=10)
    finally:
        if line.poll() is None:
            line.kill()
    return json.loads(out)["delayline"][net.switch_if[LINK]]


def _received(sock, count: int, within: float = 5.0) -> list[int]:
    sock.settimeout(0.2)
    numbers, deadline = [], time.monotonic() + within
    while len(numbers) < count and time.monotonic() < deadline:
        try:
            frame = sock.recv(2048)
        except TimeoutError:
            continue
        if frame[6:14] == SOURCE + b"\x08\x00":
            numbers.append(int.from_bytes(frame[14:18], "big"))
    return numbers


def test_every_frame_read_is_sent_once_after_its_delay():
    with VethNet(2) as net:
        inject, far_end = net.host_socket(DIVERT), net.host_socket(LINK)
        # room for the whole burst: by default the receiving socket holds about 256 frames
        far_end.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 1 << 23)
        got = []

        def send():
            for n in range(300):
                inject.send(_frame(n))
            got.extend(_received(far_end, 300))

        stats = _run(net, 5, send)
    assert sorted(got) == list(range(300))
    assert stats["held"] >= 300 and stats["held"] == stats["sent"]
    assert stats["refused_by_link"] == stats["held_at_stop"] == stats["dropped_before_read"] == 0


def test_frames_a_cut_link_refuses_and_frames_held_at_the_stop_are_counted():
    with VethNet(2) as net:
        inject = net.host_socket(DIVERT)

        def send_into_a_cut_link():
            ip("link", "set", net.switch_if[LINK], "down")
            for n in range(40):
                inject.send(_frame(n))
            time.sleep(1.0)  # every frame due and refused

        cut = _run(net, 5, send_into_a_cut_link)

        def send_and_stop_early():
            for n in range(25):
                inject.send(_frame(n))
            time.sleep(0.5)  # read, not yet due

        stopped = _run(net, 60_000, send_and_stop_early)
    for stats in (cut, stopped):  # every frame read is accounted for once
        assert stats["held"] == stats["sent"] + stats["refused_by_link"] + stats["held_at_stop"]
    assert cut["refused_by_link"] >= 40 and cut["held_at_stop"] == 0
    assert stopped["held_at_stop"] >= 25 and stopped["sent"] == 0
