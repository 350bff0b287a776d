"""scikit-learn's digits (shipped with the package, nothing downloaded), split once, and the
batches of each epoch: the same for every worker and for the reference, given the seed."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

TEST_FRACTION = 0.2


@dataclass(frozen=True)
class Digits:
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


def load(split_seed: int = 0) -> Digits:
    """8x8 digits scaled to [0, 1]; a stratified train/test split fixed by `split_seed`."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    x_tr, x_te, y_tr, y_te = train_test_split(
        x / 16.0, y, test_size=TEST_FRACTION, random_state=split_seed, stratify=y
    )
    return Digits(x_tr, y_tr, x_te, y_te)


def batches(n: int, batch: int, seed: int, epoch: int) -> list[np.ndarray]:
    """Epoch `epoch`'s batches of `batch` sample indices out of n, shuffled by (seed, epoch);
    the last incomplete batch is dropped, so every step splits into equal shards."""
    order = np.random.default_rng([seed, epoch]).permutation(n)
    return [order[i : i + batch] for i in range(0, n - batch + 1, batch)]


def shard(batch: np.ndarray, index: int, workers: int) -> np.ndarray:
    """Worker `index`'s equal share of a batch (len(batch) divisible by workers)."""
    size = len(batch) // workers
    return batch[index * size : (index + 1) * size]
