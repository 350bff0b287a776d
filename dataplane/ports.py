"""Raw Ethernet ports over AF_PACKET, read from the asyncio loop.

Frames the host itself sent (PACKET_OUTGOING) are skipped: a packet socket sees them too, and a
switch must not process its own output. Large socket buffers absorb bursts while Python is busy.
A port whose link is down drops what is sent to it, as a switch port would, instead of failing.
"""

from __future__ import annotations

import socket
from collections.abc import Callable

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4
BUFFER_BYTES = 8 * 1024 * 1024
SO_RCVBUFFORCE = 33
SO_SNDBUFFORCE = 32


def open_raw(ifname: str) -> socket.socket:
    """A non-blocking packet socket bound to `ifname` with large buffers."""
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    for option, fallback in ((SO_RCVBUFFORCE, socket.SO_RCVBUF),
                             (SO_SNDBUFFORCE, socket.SO_SNDBUF)):
        try:
            sock.setsockopt(socket.SOL_SOCKET, option, BUFFER_BYTES)
        except PermissionError:
            sock.setsockopt(socket.SOL_SOCKET, fallback, BUFFER_BYTES)
    sock.bind((ifname, 0))
    sock.setblocking(False)
    return sock


def drain(sock: socket.socket, handle: Callable[[bytes], None], limit: int = 256) -> None:
    """Hand every waiting incoming frame (up to `limit`) to `handle`."""
    for _ in range(limit):
        try:
            frame, address = sock.recvfrom(65535)
        except OSError:  # nothing waiting, or the link went down (ENETDOWN, reported once)
            return
        if address[2] != PACKET_OUTGOING:
            handle(frame)


def send(sock: socket.socket, frame: bytes) -> bool:
    """Send without blocking; a full socket buffer drops the frame like a full queue would."""
    try:
        sock.send(frame)
    except OSError:  # full buffer (BlockingIOError) or link down (ENETDOWN, ENXIO)
        return False
    return True
