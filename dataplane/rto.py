"""Adaptive retransmission timeout of a host agent, after RFC 6298 ("Computing TCP's
Retransmission Timer").

A fragment's round trip is the time from sending its contribution to receiving its result:
the network both ways plus the wait at the aggregators for the peers' contributions. That
wait depends on load, pacing and queues (seconds behind a congested 1000-packet queue, a few
milliseconds on an idle emulated link), so no fixed timeout fits: too short resends what is
only queued (about 15 % of all fragments with a fixed 0.5 s on a loaded machine) and each
spurious timeout halves the window; too long idles after a real loss. The estimator learns it
from the agent's own samples.

Notation of RFC 6298 section 2, with K = 4, alpha = 1/8, beta = 1/4:
  first sample R:   SRTT = R, RTTVAR = R / 2
  later samples R': RTTVAR = (1 - beta) RTTVAR + beta |SRTT - R'|,
                    SRTT = (1 - alpha) SRTT + alpha R'          (RTTVAR first, with the old SRTT)
  RTO = SRTT + max(G, K RTTVAR), clamped to [MIN_RTO, MAX_RTO]   (2.4; G: clock granularity)
Only fragments answered before any timeout of theirs are sampled (Karn's rule, section 3):
the result of a resent fragment cannot tell which copy it answers, and in INA neither can
the late result of one that timed out and was not resent yet, since every contributor's
resend makes the same result: sampled, the peers' recoveries pushed the RTO to its maximum. A fragment that times out
again waits twice as long each time (section 5.5, per fragment here); its backoff ends with
its result, and a fresh sample recomputes the RTO (section 5.7).

The backoff stops at BACKOFF_CEILING (unless the RTO itself is longer), not at the RFC's 60 s:
an aggregating switch forgets a partial sum nobody has touched for STALE_AFTER (2 s,
p4src/README.md 4.2). A contribution waits there for its peers' resends; if every
contributor of a fragment backed off beyond that, each resend would find the others' already
abandoned and start a new sum that is abandoned in turn, for ever.
"""

from __future__ import annotations

from dataclasses import dataclass

from dataplane.frame import STALE_AFTER_SECONDS

K = 4
ALPHA = 1 / 8
BETA = 1 / 4
# The RFC's 1 s floor is for Internet paths; an emulated link's round trip is milliseconds,
# and a floor well above the pacing gap of a window still prevents spurious resends.
MIN_RTO = 0.2
MAX_RTO = 10.0  # RFC 6298 allows 60 s; a stuck fragment here is retried at least this often
GRANULARITY = 0.001  # G: time.monotonic() resolves far finer; 1 ms keeps RTO > SRTT
BACKOFF_CEILING = STALE_AFTER_SECONDS / 2  # a waiting partial sum is touched in time


@dataclass
class RtoEstimator:
    """SRTT, RTTVAR and the RTO they give; `initial` is the RTO before the first sample."""

    initial: float = 1.0
    srtt: float | None = None
    rttvar: float | None = None
    samples: int = 0

    @property
    def rto(self) -> float:
        if self.srtt is None:
            return min(MAX_RTO, max(MIN_RTO, self.initial))
        return min(MAX_RTO, max(MIN_RTO, self.srtt + max(GRANULARITY, K * self.rttvar)))

    def sample(self, rtt: float) -> None:
        """One round trip of a fragment that was sent once."""
        if self.srtt is None:
            self.srtt, self.rttvar = rtt, rtt / 2
        else:
            self.rttvar = (1 - BETA) * self.rttvar + BETA * abs(self.srtt - rtt)
            self.srtt = (1 - ALPHA) * self.srtt + ALPHA * rtt
        self.samples += 1

    def backed_off(self, timeouts: int) -> float:
        """The RTO of a fragment that already timed out `timeouts` times: doubled per timeout
        (section 5.5) up to BACKOFF_CEILING, or not at all if the RTO is already longer."""
        rto = self.rto
        return min(max(rto, BACKOFF_CEILING), rto * 2 ** min(timeouts, 16))
