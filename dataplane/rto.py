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
resend makes the same result: sampled, the peers' recoveries pushed the RTO to its maximum.
Nor is a fragment sent once sampled when a peer's retransmission completed it: the RESULT says
so (`aux`, p4src/README.md), since every switch forwards the `aux` of the contribution that
completed its slot. With 16 workers and 5 % loss on every link nearly every fragment waits for
someone's recovery; sampled, those waits grew the RTOs from 0.5 s to 3.5 s within 20 simulated
seconds (`controller.emulation.faults.lossy_sim`; 2.6-10 s on Mininet), each stuck window then
waited that long, and iterations hung. A result that a peer's first DATA completed waited for that
peer to send it, which under loss a stalled window does seconds late: the `aux` also names the
contributor whose DATA came last, and a worker samples such a result at most at
PEER_WAIT_CAP times its own round trip (its own DATA's results, its first queries' NACKs;
dataplane/recovery.py). In a quarter megabyte at 16 workers and 5 % loss (lossy_sim,
seed 0), sampled whole, every sample over 0.5 s was such a wait (the last peer had sent a
median 0.7-2.5 s, at most 5.1 s, after this worker; the result came at most 0.3 s after
that), the RTOs reached MAX_RTO and 59 of 2048 fragments were still missing after 60 virtual
s; capped, the largest RTO was 0.61 s and it finished in 22.0 s. Sampling the completer
alone went too far: the peers' wait is real under congestion, and timeouts without it came
before the peers' contributions (0.1 MB on Fig. 1 through 2-packet queues: 28 virtual s,
where its test allows 3.1 s).

A fragment that times out again waits twice as long each time
(section 5.5, per fragment here); its backoff ends with its result, and a fresh sample
recomputes the RTO (section 5.7).

The backoff stops at BACKOFF_CEILING, not at the RFC's 60 s, and once a fragment has timed
out the ceiling holds even when the RTO is longer: an aggregating switch forgets a partial
sum nobody has touched for STALE_AFTER (2 s, p4src/README.md 4.2). A contribution waits there
for its peers' resends; if a contributor of a fragment resent it less often than that, each of
its resends would find the others' already abandoned (measured: a worker whose peers lagged
learnt a 5 s RTO and, with 5 % loss per link, three fragments never completed).

MIN_RTO is 0.5 s, the fixed timeout the agents had before: with 0.2 s the workers behind
their peers (whose fragments complete as soon as they arrive) learnt 6 ms round trips and
timed out four times as often as before on ARO Fig. 1 without any impairment.
"""

from __future__ import annotations

from dataclasses import dataclass

from dataplane.frame import STALE_AFTER_SECONDS

K = 4
ALPHA = 1 / 8
BETA = 1 / 4
# The RFC's 1 s floor is for Internet paths; here the floor is the fixed timeout the agents
# had before (module docstring: a lower one multiplied spurious resends).
MIN_RTO = 0.5
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
        if self.srtt is None or self.rttvar is None:  # both set by the first sample
            return min(MAX_RTO, max(MIN_RTO, self.initial))
        return min(MAX_RTO, max(MIN_RTO, self.srtt + max(GRANULARITY, K * self.rttvar)))

    def sample(self, rtt: float) -> None:
        """One round trip of a fragment that was sent once."""
        if self.srtt is None or self.rttvar is None:
            self.srtt, self.rttvar = rtt, rtt / 2
        else:
            self.rttvar = (1 - BETA) * self.rttvar + BETA * abs(self.srtt - rtt)
            self.srtt = (1 - ALPHA) * self.srtt + ALPHA * rtt
        self.samples += 1

    def backed_off(self, timeouts: int) -> float:
        """The RTO of a fragment that already timed out `timeouts` times: doubled per timeout
        (section 5.5) up to BACKOFF_CEILING, which also caps a longer RTO once it timed out."""
        if timeouts == 0:
            return self.rto
        return min(BACKOFF_CEILING, self.rto * 2 ** min(timeouts, 16))
