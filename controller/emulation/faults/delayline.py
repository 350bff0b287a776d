"""A delay line that reorders frames: what `tc netem reorder` would do, without netem.

This kernel has no sch_netem (see RELIABILITY.md), so `controller.emulation.faults.impair` diverts a
random share of a link's outgoing frames (nftables `fwd to`, egress hook) into a veth pair; this
process reads them from the pair's far end, holds each one `delay` seconds and sends it out of
the link's interface again, marked (SO_MARK) so that the egress hook lets it through this time.
Frames sent meanwhile overtake it: the link delivers them out of order.

Run as `python -m controller.emulation.faults.delayline --delay-ms 20 DIVERT:LINK ...` in the
namespace of the interfaces; on SIGTERM it prints one JSON line per link interface: frames held,
sent, refused by the link (a full queue answers ENOBUFS, a cut link ENETDOWN: lost as on a wire),
still held when it stopped, and dropped before it read them (the kernel's count for the
socket): so that a "reorder" row can show it lost nothing of its own.
"""

from __future__ import annotations

import argparse
import heapq
import json
import select
import signal
import socket
import struct
import sys
import time

ETH_P_ALL = 0x0003
PASS_MARK = 0x1  # the egress hook's rule lets frames with this mark through (impair.py)
# Only the job's frames and the controller's probes: a veth pair's own IPv6 chatter must not
# be injected into the link.
FORWARDED_TYPES = (b"\x08\x00", b"\x88\xcc")
PACKET_OUTGOING = 4
COUNTS = ("held", "sent", "refused_by_link", "held_at_stop", "dropped_before_read")
# Not in `socket`: linux/socket.h and linux/if_packet.h, asm-generic/socket.h (needs root)
SOL_PACKET, PACKET_STATISTICS = 263, 6
SO_RCVBUFFORCE, RECEIVE_BUFFER = 33, 1 << 23


def _socket(interface: str, mark: bool) -> socket.socket:
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    sock.bind((interface, 0))
    # A link's burst must not overflow it: by default a packet socket holds about 256 frames
    # (tests/test_delayline.py lost the rest of a 300-frame burst).
    sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RECEIVE_BUFFER)
    if mark:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_MARK, PASS_MARK)
    sock.setblocking(False)
    return sock


def run(pairs: list[tuple[str, str]], delay: float) -> dict[str, dict[str, int]]:
    """Hold and resend until SIGTERM; returns per link interface the frames counted by COUNTS."""
    inputs = {_socket(divert, False): link for divert, link in pairs}
    outputs = {link: _socket(link, True) for _, link in pairs}
    stats = {link: dict.fromkeys(COUNTS, 0) for _, link in pairs}
    pending: list[tuple[float, int, str, bytes]] = []  # (due, order, link, frame)
    order = 0
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    print(json.dumps({"ready": True}), flush=True)
    while not stopping:
        now = time.monotonic()
        while pending and pending[0][0] <= now:
            _, _, link, frame = heapq.heappop(pending)
            try:
                outputs[link].send(frame)
                stats[link]["sent"] += 1
            except OSError:  # a full queue or a cut: the frame is lost, as on a wire
                stats[link]["refused_by_link"] += 1
        # at most 0.5 s, so that SIGTERM is seen soon (select resumes after a signal)
        wait = max(0.0, min(0.5, pending[0][0] - now)) if pending else 0.5
        try:
            ready, _, _ = select.select(list(inputs), [], [], wait)
        except InterruptedError:
            continue
        for sock in ready:
            while True:
                try:
                    frame, address = sock.recvfrom(65535)
                except BlockingIOError:
                    break
                if address[2] == PACKET_OUTGOING or frame[12:14] not in FORWARDED_TYPES:
                    continue
                link = inputs[sock]
                stats[link]["held"] += 1
                order += 1
                heapq.heappush(pending, (time.monotonic() + delay, order, link, frame))
    for _, _, link, _ in pending:
        stats[link]["held_at_stop"] += 1
    for sock, link in inputs.items():
        stats[link]["dropped_before_read"] += _drops(sock)
    return stats


def _drops(sock: socket.socket) -> int:
    """Frames the kernel dropped for `sock` (its receive buffer full) since the last call."""
    _packets, drops = struct.unpack("II", sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))
    return drops


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delay-ms", type=float, default=20.0)
    parser.add_argument("pairs", nargs="+", metavar="DIVERT:LINK")
    args = parser.parse_args(argv)
    pairs = [tuple(p.split(":", 1)) for p in args.pairs]
    stats = run(pairs, args.delay_ms / 1000)  # type: ignore[arg-type]
    print(json.dumps({"delayline": stats}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
