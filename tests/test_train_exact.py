"""The exactness check of `ina train` (controller.emulation.training.exact_steps): a step
counts only when every worker's digest of its result is the digest of the int64 sum of what
all workers sent, computed here independently."""

import hashlib

import numpy as np

from controller.emulation.training import exact_steps


def digest(values: np.ndarray) -> str:
    return hashlib.sha256(values.astype(np.int64).tobytes()).hexdigest()


def records(sent: list[list[np.ndarray]], got: list[list[np.ndarray]]) -> dict[str, dict]:
    return {
        f"W{w}": {
            "lengths": np.array([len(s) for s in sent[w]]),
            "sent": np.concatenate(sent[w]).astype(np.int64),
            "got": np.array([digest(g) for g in got[w]]),
        }
        for w in range(len(sent))
    }


def test_counts_steps_whose_every_result_is_the_sum_of_what_was_sent():
    rng = np.random.default_rng(0)
    workers, steps = 3, 4
    sent = [[rng.integers(-(2**28), 2**28, 37) for _ in range(steps)] for _ in range(workers)]
    sums = [sum(sent[w][s] for w in range(workers)) for s in range(steps)]
    got = [[s.copy() for s in sums] for _ in range(workers)]
    assert exact_steps(records(sent, got)) == steps
    got[1][2][5] += 1  # one element off by one at one worker in step 2
    assert exact_steps(records(sent, got)) == steps - 1
