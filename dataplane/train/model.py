"""A multilayer perceptron in NumPy: ReLU hidden layers, softmax cross-entropy.

The parameters live in one flat float64 vector, so a step's gradient is one array for one
all-reduce; `layers` gives each layer's weight and bias as views into it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Mlp:
    """Layer widths, input first (64-32-10 for 8x8 digits)."""

    sizes: tuple[int, ...] = (64, 32, 10)

    @property
    def shapes(self) -> list[tuple[tuple[int, int], int]]:
        return [((a, b), b) for a, b in zip(self.sizes, self.sizes[1:], strict=False)]

    @property
    def n_params(self) -> int:
        return sum(a * b + b for (a, b), _ in self.shapes)

    def init(self, seed: int) -> np.ndarray:
        """He-initialised weights, zero biases; the same vector for the same seed."""
        rng = np.random.default_rng(seed)
        parts = []
        for (a, b), _ in self.shapes:
            parts += [rng.normal(0.0, np.sqrt(2.0 / a), a * b), np.zeros(b)]
        return np.concatenate(parts)

    def layers(self, params: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        out, at = [], 0
        for (a, b), _ in self.shapes:
            w = params[at : at + a * b].reshape(a, b)
            at += a * b
            out.append((w, params[at : at + b]))
            at += b
        return out

    def logits(self, params: np.ndarray, x: np.ndarray) -> np.ndarray:
        h = x
        layers = self.layers(params)
        for i, (w, b) in enumerate(layers):
            h = h @ w + b
            if i < len(layers) - 1:
                h = np.maximum(h, 0.0)
        return h

    def loss(self, params: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
        """Mean softmax cross-entropy over the rows of x."""
        z = self.logits(params, x)
        z = z - z.max(axis=1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
        return float(-logp[np.arange(len(y)), y].mean())

    def gradient(self, params: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """d loss / d params (backpropagation), flat like params."""
        layers = self.layers(params)
        acts = [x]
        for i, (w, b) in enumerate(layers):
            z = acts[-1] @ w + b
            acts.append(np.maximum(z, 0.0) if i < len(layers) - 1 else z)
        z = acts[-1] - acts[-1].max(axis=1, keepdims=True)
        p = np.exp(z)
        p /= p.sum(axis=1, keepdims=True)
        p[np.arange(len(y)), y] -= 1.0
        delta = p / len(y)
        grads: list[np.ndarray] = []
        for i in range(len(layers) - 1, -1, -1):
            w, _ = layers[i]
            grads = [(acts[i].T @ delta).ravel(), delta.sum(axis=0), *grads]
            if i:
                delta = (delta @ w.T) * (acts[i] > 0)
        return np.concatenate(grads)

    def accuracy(self, params: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
        return float((self.logits(params, x).argmax(axis=1) == y).mean())
