"""A worker's reaction to congestion marks (p4src/README.md, "Congestion mark"): DCTCP.

Switches mark INA packets that find a queue ahead of them, aggregation ORs the marks of a
fragment's contributions and the PS echoes them in the result, so every worker of a task sees
the same marks and cuts alike. As DCTCP (RFC 8257, sections 3.3-3.5) it keeps `alpha`, the
share of marked results averaged with gain 1/16 over one window of results at a time, and on
a marked result cuts the window to window × (1 − alpha / 2), at most once per window: a queue
that is just building costs a little, one that stays full a half, as a loss would, but before
the loss. A marked result grows nothing; above the window its last cut left the worker grows
one per window, below it one per result (TCP's ssthresh), until QUIET_WINDOWS windows of
results in a row came unmarked. Once marks have come it also paces at a window per round
trip: under queues shorter than a window (Mininet's 2-frame ones) a window sent as a burst
overflows them whatever its size (docs/reliability/congestion.md).
"""

from __future__ import annotations

from dataclasses import dataclass

GAIN = 1 / 16  # RFC 8257 section 4.2's recommended g
# Windows per round trip a worker paces at once marks have come, below and above the window a
# cut left (Linux paces TCP at 2 and 1.2): at 1.0 the pace is the rate the window already
# achieves, so no burst of a window outruns a queue shorter than the window.
PACE_BELOW, PACE_ABOVE = 1.5, 1.0
# Windows of results in a row without a mark after which a worker forgets the window its last
# cut left (grows one per result again and stops pacing): the queue that marked has drained.
# Kept for good, one burst of marks under random loss (recovery traffic queued into the PS)
# held the regrowth after every later loss to one per window for the rest of the run
# (16 workers at 5 % loss, seed 0: 51.5 virtual s, 31.4 s with this; docs/reliability/).
QUIET_WINDOWS = 16


@dataclass
class MarkReaction:
    """DCTCP's sender rule, fed one result at a time."""

    alpha: float = 1.0  # RFC 8257 3.3: start as if every result were marked
    results: int = 0  # results of the current observation window
    marked: int = 0  # of those, marked
    window_left: int = 0  # results until the observation window ends
    cut_left: int = 0  # results until the next cut may come (one per window)
    cuts: int = 0
    quiet: int = 0  # windows of results in a row without a mark
    # The window a cut left: above it the worker grows by 1/window per result (one per
    # window: additive), below it by 1 per result, as TCP's ssthresh.
    ssthresh: float = float("inf")

    def gap(self, window: float, rtt: float | None) -> float:
        """Least seconds between two sends once marks have come: the window spread over a
        round trip (Linux paces TCP at 2 and 1.2 windows per round trip below and above
        ssthresh). Under queues shorter than a window a burst overflows them whatever the
        window; 0 before the first mark."""
        if self.ssthresh == float("inf") or not rtt:
            return 0.0
        return rtt / (window * (PACE_BELOW if window < self.ssthresh else PACE_ABOVE))

    def growth(self, window: float) -> float:
        """What an unmarked result adds to `window`."""
        return 1.0 if window < self.ssthresh else 1.0 / window

    def on_result(self, marked: bool, window: float) -> float:
        """The window after a result (`marked`: it carried the mark) with `window` open."""
        self.results += 1
        self.marked += marked
        self.window_left -= 1
        self.cut_left -= 1
        if self.window_left <= 0:  # a window of results seen: fold its marked share in
            self.alpha += GAIN * (self.marked / self.results - self.alpha)
            self.quiet = 0 if self.marked else self.quiet + 1
            if self.quiet >= QUIET_WINDOWS:
                self.ssthresh = float("inf")
            self.results = self.marked = 0
            self.window_left = max(1, int(window))
        if marked and self.cut_left <= 0:
            self.cuts += 1
            window = self.ssthresh = max(1.0, window * (1 - self.alpha / 2))
            self.cut_left = int(window)
        return window
