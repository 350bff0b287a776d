"""One training run, the same loop for the reference and for every data-parallel worker.

SGD with momentum on the mean cross-entropy of each batch. What differs is only where a
step's gradient comes from (`StepGradient`): the reference takes the float64 gradient of the
whole batch; a worker takes its shard's gradient and all-reduces it (mean) over the job's
workers. With equal shards the mean of the shard gradients is the full-batch gradient, so
both runs are the same run up to the all-reduce's quantization.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np

from dataplane.train.data import Digits, batches, shard
from dataplane.train.model import Mlp

# (parameters, the batch's sample indices, global step number) -> gradient of the batch loss
StepGradient = Callable[[np.ndarray, np.ndarray, int], np.ndarray]
# A float32 all-reduce: (array, op) -> the op over every worker's array
AllReduce = Callable[[np.ndarray, str], np.ndarray]


@dataclass(frozen=True)
class Config:
    epochs: int = 10
    batch: int = 64  # the global batch: every step, each of N workers takes batch / N samples
    lr: float = 0.1
    momentum: float = 0.9
    seed: int = 0  # initial weights and batch order
    sizes: tuple[int, ...] = (64, 32, 10)

    @property
    def model(self) -> Mlp:
        return Mlp(self.sizes)


@dataclass
class Epoch:
    epoch: int
    accuracy: float  # on the test split, after the epoch
    loss: float  # mean batch loss over the epoch's steps, before each step
    steps: int
    step_seconds: list[float] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def run(
    config: Config,
    data: Digits,
    step_gradient: StepGradient,
    on_epoch: Callable[[Epoch, np.ndarray], None] | None = None,
) -> tuple[np.ndarray, list[Epoch]]:
    """Train from the seeded initial weights; returns the final parameters and each epoch."""
    model = config.model
    params = model.init(config.seed)
    velocity = np.zeros_like(params)
    epochs, step = [], 0
    for e in range(1, config.epochs + 1):
        seconds, losses = [], []
        for batch in batches(len(data.y_train), config.batch, config.seed, e):
            started = time.perf_counter()
            losses.append(model.loss(params, data.x_train[batch], data.y_train[batch]))
            grad = step_gradient(params, batch, step)
            velocity = config.momentum * velocity + grad
            params = params - config.lr * velocity
            seconds.append(time.perf_counter() - started)
            step += 1
        result = Epoch(
            e,
            model.accuracy(params, data.x_test, data.y_test),
            float(np.mean(losses)),
            len(seconds),
            seconds,
        )
        epochs.append(result)
        if on_epoch:
            on_epoch(result, params)
    return params, epochs


def reference(config: Config, data: Digits) -> StepGradient:
    """The float64 full-batch gradient: the single-process reference run."""
    model = config.model
    return lambda params, batch, step: model.gradient(
        params, data.x_train[batch], data.y_train[batch]
    )


def worker(config: Config, data: Digits, index: int, workers: int, allreduce: AllReduce):
    """Worker `index` of `workers`: its shard's gradient as float32, all-reduced (mean)."""
    if config.batch % workers:
        raise ValueError(f"batch {config.batch} does not split into {workers} equal shards")
    model = config.model

    def step_gradient(params: np.ndarray, batch: np.ndarray, step: int) -> np.ndarray:
        mine = shard(batch, index, workers)
        grad = model.gradient(params, data.x_train[mine], data.y_train[mine])
        return np.asarray(allreduce(grad.astype(np.float32), "mean"), dtype=np.float64)

    return step_gradient
