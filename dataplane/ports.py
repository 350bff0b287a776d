"""Raw Ethernet ports over AF_PACKET, read from the asyncio loop.

Frames the host itself sent (PACKET_OUTGOING) are skipped: a packet socket sees them too, and a
switch must not process its own output. Large socket buffers absorb bursts while Python is busy.
A port whose link is down drops what is sent to it, as a switch port would, instead of failing.

802.1Q / 802.1ad tags: Linux removes the outer VLAN tag of every received frame before packet
sockets see it (in software on veths, in the NIC with rx-vlan offload) and reports it in the
socket's PACKET_AUXDATA instead; turning the offload off does not help on veths. So the tag is
put back from there, as libpcap does, and the pipeline sees the frame as it was on the wire
(p4src/README.md: a tagged frame is not IPv4 and is dropped). The socket options are Linux's
(<linux/if_packet.h>, <linux/filter.h>); Python names none of them, so they are spelled out here.

Reading the auxdata takes `recvmsg`, and CPython's `recvmsg` (as `recvfrom`) turns every
AF_PACKET source address into an interface name with an ioctl: about half the cost of a
receive. So a socket filter (classic BPF, in the kernel) splits a port in two: `open_raw`'s
socket gets only untagged frames and never outgoing ones, read with a plain `recv`;
`open_raw(..., tagged=True)` gets only the tagged ones, read with `receive_tagged` (the
embedded switch opens both per port; host agents take INA frames only and need no tags).
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import socket
import struct
import termios
import threading
import time
import weakref
from collections.abc import Callable

from dataplane import qdisc
from dataplane.frame import INA_UDP_PORT, OFF_ELEMS, OFF_UDP

ETH_P_ALL = 0x0003
MAX_FRAME_BYTES = 65535
PACKET_OUTGOING = 4
BUFFER_BYTES = 8 * 1024 * 1024
SO_RCVBUFFORCE = 33
SO_SNDBUFFORCE = 32
SOL_PACKET = 263
PACKET_AUXDATA = 8
PACKET_IGNORE_OUTGOING = 23  # Linux 4.20 on; the filter drops outgoing frames without it too
SO_ATTACH_FILTER = 26
TP_STATUS_VLAN_VALID = 1 << 4
TP_STATUS_VLAN_TPID_VALID = 1 << 6
ETH_P_8021Q = 0x8100
# struct tpacket_auxdata: status, len, snaplen (u32); mac, net, vlan_tci, vlan_tpid (u16).
_AUXDATA = struct.Struct("=IIIHHHH")
_ANCILLARY_BYTES = socket.CMSG_SPACE(_AUXDATA.size)
# Classic BPF (<linux/filter.h>): struct sock_filter {u16 code; u8 jt, jf; u32 k}. Loads of
# the kernel's ancillary fields (SKF_AD_OFF + n) read the frame's metadata, not its bytes.
_BPF_INSN = struct.Struct("=HBBI")
_BPF_LD_ABS, _BPF_JEQ_K, _BPF_RET_K = 0x20, 0x15, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, RET|K
_SKF_AD_PKTTYPE = (-0x1000 + 4) & 0xFFFFFFFF
_SKF_AD_VLAN_TAG_PRESENT = (-0x1000 + 48) & 0xFFFFFFFF
_INA_PORT = INA_UDP_PORT.to_bytes(2, "big")
# A packet loop woken by a frame lets the frames of this many seconds gather before it
# serves them, as NAPI does with interrupts: one wake-up and one read of every port per
# turn cost as much as the frame itself (docs/loop-profile.md).
GATHER = 0.001
SIOCOUTQ = termios.TIOCOUTQ  # the same request number: bytes a socket sent not yet freed
# Seconds between two reads of an interface's queue limit: links are shaped after the switches
# and workers have started (Mininet, `congest`). A read runs `tc` (milliseconds on a loaded
# machine), so it runs on a thread of its own and the packet path takes the last value.
QUEUE_REREAD = 1.0


def port_filter(tagged: bool) -> bytes:
    """The filter program of one half of a port: frames received (never the host's own
    output, PACKET_OUTGOING) without a VLAN tag, or with one (`tagged`)."""
    untagged_to, tagged_to = (0, 1) if not tagged else (1, 0)  # 0: accept, 1: drop
    program = [
        (_BPF_LD_ABS, 0, 0, _SKF_AD_PKTTYPE),
        (_BPF_JEQ_K, 3, 0, PACKET_OUTGOING),  # outgoing: to the last instruction
        (_BPF_LD_ABS, 0, 0, _SKF_AD_VLAN_TAG_PRESENT),
        (_BPF_JEQ_K, untagged_to, tagged_to, 0),  # tag present == 0
        (_BPF_RET_K, 0, 0, MAX_FRAME_BYTES),
        (_BPF_RET_K, 0, 0, 0),
    ]
    return b"".join(_BPF_INSN.pack(*insn) for insn in program)


def _attach(sock: socket.socket, program: bytes) -> None:
    """SO_ATTACH_FILTER: the kernel copies the program from a struct sock_fprog
    {unsigned short len; struct sock_filter *filter}."""
    code = ctypes.create_string_buffer(program)
    fprog = struct.pack("HP", len(program) // _BPF_INSN.size, ctypes.addressof(code))
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)


def open_raw(ifname: str, tagged: bool = False) -> socket.socket:
    """A non-blocking packet socket bound to `ifname` with large buffers: the frames it
    receives (not its host's own), untagged ones only (read them with `receive`), or with
    `tagged` the tagged ones only (with `receive_tagged`)."""
    # Protocol 0 until bound: it receives nothing before its filter is in place.
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    for option, fallback in (
        (SO_RCVBUFFORCE, socket.SO_RCVBUF),
        (SO_SNDBUFFORCE, socket.SO_SNDBUF),
    ):
        try:
            sock.setsockopt(socket.SOL_SOCKET, option, BUFFER_BYTES)
        except PermissionError:
            sock.setsockopt(socket.SOL_SOCKET, fallback, BUFFER_BYTES)
    if tagged:
        sock.setsockopt(SOL_PACKET, PACKET_AUXDATA, 1)
    with contextlib.suppress(OSError):  # not even handed to the filter
        sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
    _attach(sock, port_filter(tagged))
    sock.bind((ifname, ETH_P_ALL))
    sock.setblocking(False)
    return sock


def receive(sock: socket.socket) -> bytes | None:
    """The next frame waiting on an `open_raw` socket; None when none waits."""
    try:
        return sock.recv(MAX_FRAME_BYTES)
    except OSError:  # nothing waiting, or the link went down (ENETDOWN, reported once)
        return None


def receive_tagged(sock: socket.socket) -> bytes | None:
    """The next frame waiting on an `open_raw(..., tagged=True)` socket, its VLAN tag put
    back; None when none waits."""
    try:
        frame, ancillary, _, _ = sock.recvmsg(MAX_FRAME_BYTES, _ANCILLARY_BYTES)
    except OSError:
        return None
    return with_vlan_tag(frame, ancillary)


def drain(sock: socket.socket, handle: Callable[[bytes], None], limit: int = 256) -> None:
    """Hand every frame waiting on an `open_raw` socket (up to `limit`) to `handle`."""
    for _ in range(limit):
        frame = receive(sock)
        if frame is None:
            return
        handle(frame)


def ina_frames(sock: socket.socket) -> list[bytes]:
    """The INA frames waiting on a host agent's `sock` (up to 4096), others dropped."""
    frames: list[bytes] = []
    drain(
        sock,
        lambda f: (
            frames.append(f)
            if f[OFF_UDP + 2 : OFF_UDP + 4] == _INA_PORT and len(f) >= OFF_ELEMS
            else None
        ),
        limit=4096,
    )
    return frames


def with_vlan_tag(frame: bytes, ancillary: list[tuple[int, int, bytes]]) -> bytes:
    """`frame` with the VLAN tag the kernel moved into its auxdata put back after the MACs."""
    for level, kind, data in ancillary:
        if level != SOL_PACKET or kind != PACKET_AUXDATA or len(data) < _AUXDATA.size:
            continue
        status, _, _, _, _, tci, tpid = _AUXDATA.unpack_from(data)
        if status & TP_STATUS_VLAN_VALID:
            tpid = tpid if status & TP_STATUS_VLAN_TPID_VALID else ETH_P_8021Q
            return frame[:12] + struct.pack("!HH", tpid, tci) + frame[12:]
    return frame


def send(sock: socket.socket, frame: bytes) -> bool:
    """Send without blocking; a full socket buffer drops the frame like a full queue would."""
    try:
        sock.send(frame)
    except OSError:  # full buffer (BlockingIOError) or link down (ENETDOWN, ENXIO)
        return False
    return True


def interface_of(sock: object) -> str | None:
    """The interface a packet socket is bound to (None for any other socket)."""
    try:
        name = sock.getsockname()[0]  # type: ignore[attr-defined]
    except (AttributeError, OSError, IndexError, TypeError):
        return None
    return name if isinstance(name, str) and name else None


class Backlog:
    """Frames waiting in the egress queue of the interface a packet socket sends on, read with
    SIOCOUTQ: the kernel charges each sent frame's buffer (its truesize, about a kilobyte for
    an INA frame, not its length) to the socket until the interface takes it from its queue
    disciplines (a veth hands it to its peer), so the charge is the backlog of this socket's
    frames behind the port's shaper. The charge of one frame is what one waiting frame costs,
    whatever the kernel's sizes: the least non-zero value read, and the least rise from one read
    to the next (every charge is a whole number of frames, and a read right after one send that
    found nothing drained rises by exactly one). A first read can see several frames; the
    rises of the reads after it correct that (`EgressDepth` reads every frame until they have).
    The embedded switch reads it for its congestion mark (p4src/README.md, "Congestion mark")."""

    def __init__(self, interface: str | None = None) -> None:
        self.unit = 0  # bytes one waiting frame is charged (0: none seen yet)
        self._last = 0  # the last read's charge
        self.interface = interface
        self._depth: int | None = None
        self._read_at = -QUEUE_REREAD
        self._reading: threading.Thread | None = None

    def frames(self, sock: socket.socket) -> int:
        try:
            outq = struct.unpack("i", fcntl.ioctl(sock.fileno(), SIOCOUTQ, b"\0" * 4))[0]
        except OSError:
            return 0
        rise, self._last = outq - self._last, max(outq, 0)
        if outq <= 0:
            return 0
        for charge in (outq, rise):
            if charge > 0 and (not self.unit or charge < self.unit):
                self.unit = charge
        return outq // self.unit

    def depth(self) -> int | None:
        """The depth this queue marks from when none is given: half the frames the interface's
        queue holds (`dataplane.qdisc`), read again every QUEUE_REREAD seconds on a thread;
        None when it has no queue, no interface was named or the first read is under way."""
        now = time.monotonic()
        stale = self.interface is not None and now - self._read_at >= QUEUE_REREAD
        if stale and (self._reading is None or not self._reading.is_alive()):
            self._read_at = now
            self._reading = threading.Thread(target=self._read, args=(self.interface,))
            self._reading.daemon = True
            self._reading.start()
        return self._depth

    def _read(self, interface: str) -> None:
        self._depth = qdisc.mark_depth(qdisc.queue_limit(interface))


LEARNING_READS = 16  # see EgressDepth


class EgressDepth:
    """The frames in a packet socket's egress queue as a congestion mark needs them, read
    (`read`, a Backlog's) only when they may have reached the threshold: the sender counts
    the frames it sends (`sent`) and the interface only takes frames out, so the last read
    plus the frames sent since bounds the queue from above. Below the threshold that bound
    decides as a fresh read does; a read (an ioctl) per frame sent cost as much as the send."""

    def __init__(self, read: Callable[[], int], backlog: Backlog | None = None) -> None:
        self.read = read
        self.bound: int | None = None
        self.backlog = backlog or Backlog()  # whose `depth` gives the queue's own threshold
        # Reads that found frames waiting, up to LEARNING_READS: until then a queue that holds
        # frames is read after every frame sent, so that the backlog sees a rise of one frame
        # (its first read, after several sends, could take several frames for one).
        self._busy_reads = 0
        self._waiting = False

    def at(self, threshold: int) -> int:
        """The queue's depth if it may be `threshold` or more, else a number below it."""
        learning = self._waiting and self._busy_reads < LEARNING_READS
        if self.bound is None or self.bound >= threshold or learning:
            self.bound = self.read()
            self._waiting = self.bound > 0
            self._busy_reads += self._waiting
        return self.bound

    def sent(self) -> None:
        """One more frame was sent on the socket."""
        if self.bound is not None:
            self.bound += 1


_DEPTHS: weakref.WeakKeyDictionary[socket.socket, EgressDepth] = weakref.WeakKeyDictionary()


def egress_depth(sock: socket.socket) -> EgressDepth:
    """The one EgressDepth of `sock`, whoever sends on it (a worker's shards share a socket)."""
    depth = _DEPTHS.get(sock)
    if depth is None:
        backlog = Backlog(interface_of(sock))
        depth = _DEPTHS[sock] = EgressDepth(lambda: backlog.frames(sock), backlog)
    return depth
