"""What an impairment really does to a stream of numbered frames on one impaired link.

Interface counters show loss and duplication but not order, so this sends `frames` numbered
frames from one Mininet host to another across a link impaired by `LinkImpairments` and counts,
at the receiver: frames lost, copies, and frames that arrived after a higher-numbered one
(reordered). `ina bench reliability --item calibrate` records it next to the runs.

Also `python -m controller.emulation.faults.calibrate send|receive ...`, the two ends, run in the
hosts' namespaces.
"""

from __future__ import annotations

import json
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

ETHERTYPE = b"\x08\x00"  # IPv4, as the job's frames: the impairment rules treat it the same
MAGIC = b"INACAL"


def _frame(seq: int) -> bytes:
    return b"\xff" * 6 + b"\x02" * 6 + ETHERTYPE + MAGIC + struct.pack("!I", seq) + bytes(160)


def send(interface: str, frames: int, gap: float) -> None:
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    sock.bind((interface, 0))
    next_at = time.monotonic()
    for seq in range(frames):
        while time.monotonic() < next_at:
            pass
        try:  # noqa: SIM105 (a paced loop: no context manager per frame)
            sock.send(_frame(seq))
        except OSError:  # ENOBUFS: the egress hook dropped it (the loss rule), as intended
            pass
        next_at += gap


def receive(interface: str) -> dict[str, int]:
    """Count until SIGTERM (the caller sends it once the sender is done and held frames had
    time to arrive): a loaded machine may pause the sender for any time."""
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
    sock.bind((interface, 0))
    stop: list[bool] = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    print(json.dumps({"ready": True}), flush=True)
    seen: set[int] = set()
    received = copies = reordered = 0
    highest = -1
    while not stop:
        if not select.select([sock], [], [], 0.2)[0]:
            continue
        frame, address = sock.recvfrom(2048)
        if address[2] == 4 or frame[14:20] != MAGIC:
            continue
        (seq,) = struct.unpack_from("!I", frame, 20)
        received += 1
        if seq in seen:
            copies += 1
            continue
        seen.add(seq)
        if seq < highest:
            reordered += 1
        highest = max(highest, seq)
    return {"received": received, "distinct": len(seen), "copies": copies, "reordered": reordered}


def calibrate(impairment, frames: int = 3000, gap: float = 0.0005) -> dict:
    """Two Mininet hosts on one link impaired in both directions; h1 sends, h2 counts."""
    from mininet.net import Mininet

    from controller.emulation.faults.impair import LinkImpairments

    net = Mininet(controller=None, build=False)
    h1, h2 = net.addHost("cal1"), net.addHost("cal2")
    net.addLink(h1, h2)
    net.build()
    try:
        for host in (h1, h2):
            host.cmd("sysctl -qw net.ipv6.conf.all.disable_ipv6=1")
        emu = SimpleNamespace(
            node={"cal1": h1, "cal2": h2},
            net=net,
            workdir=Path(tempfile.mkdtemp(prefix="ina-calibrate-")),
        )
        env = {"PYTHONPATH": str(Path(__file__).resolve().parents[3])}
        with LinkImpairments(emu, impairment) as faults:
            receiver = h2.popen(
                [
                    sys.executable,
                    "-m",
                    "controller.emulation.faults.calibrate",
                    "receive",
                    h2.defaultIntf().name,
                ],
                stdout=subprocess.PIPE,
                env=env,
            )
            receiver.stdout.readline()
            h1.popen(
                [
                    sys.executable,
                    "-m",
                    "controller.emulation.faults.calibrate",
                    "send",
                    h1.defaultIntf().name,
                    str(frames),
                    str(gap),
                ],
                env=env,
            ).wait()
            time.sleep(1.0)  # frames held by a delay line are still on their way
            receiver.terminate()
            counts = json.loads(receiver.communicate(timeout=60)[0].decode().splitlines()[-1])
            chain = faults.counters()[h1.defaultIntf().name]
        return {
            "impairment": impairment.label(),
            "sent": frames,
            **counts,
            "lost": frames - counts["distinct"],
            "lost_percent": round(100 * (frames - counts["distinct"]) / frames, 2),
            "copies_percent": round(100 * counts["copies"] / frames, 2),
            "reordered_percent": round(100 * counts["reordered"] / frames, 2),
            "rule_hit_percent": round(100 * chain["hit"] / max(1, chain["seen"]), 2),
        }
    finally:
        net.stop()


def main(argv: list[str]) -> int:
    if argv[0] == "send":
        send(argv[1], int(argv[2]), float(argv[3]))
    else:
        print(json.dumps(receive(argv[1])), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
