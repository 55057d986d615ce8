"""The golden trainer: stochastic gradient descent on a chain of Dense layers in integers.

This is the arithmetic a training core computes, bit for bit (docs/guide/training.md states
it as a contract). Every tensor has a fixed-point format (`LayerFormats`, per layer); every
sum and product is exact, and each tensor is rounded once, to its format (round half up,
saturate), where it is stored:

forward, per layer (x: its input, in the previous layer's activation format)
    z = x W + b             exact, then rounded to the activation format `a` (the pre-activation)
    y = f(z)                relu / linear: exact in `a`; tanh / sigmoid: the inference table
                            (`quant.activations`), `a` -> `a`; a softmax output: the inference
                            softmax, `a` -> the last layer's gradient format `g`
backward (d: the gradient of the loss by z, in the layer's gradient format `g`)
    d_out = p - onehot      softmax with cross-entropy: exact in `g`
    d_out = (y - t) f'(z)   mean squared error: its 2/n goes into the update's scale
    d = (d_next W_next^T) f'(z)
                            exact, f' exact from the layer's own values (relu: z > 0;
                            tanh: 1 - y^2; sigmoid: y (1 - y)), then rounded to `g`
    G_W = sum_batch x^T d   exact (the batch's weight gradients accumulated), G_b = sum d
update, once per batch of B samples (the learning rate lr, the momentum m)
    W = W - (lr / B) G_W    exact, then rounded to the weight format `w` (bias: `b`)
    with momentum (Keras' SGD): v = m v - (lr / B) G_W rounded to `v`, then W = W + v
                            rounded to `w`.

`lr / B` (times 2/n for MSE) is the update's scale: exact when it is a power of two (the
shift of the training accelerator this follows), else a constant of `SCALE_FRAC` fraction
bits (the trainer says how far from the asked value). The momentum is a constant of
`MOMENTUM_FRAC` fraction bits.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from keras2clash.errors import K2CError
from keras2clash.quant import activations
from keras2clash.quant.exact import INT64_SAFE_BITS, requantize_to
from keras2clash.quant.formats import FixedFormat, quantize, saturate
from keras2clash.train.net import TrainNet

SCALE_FRAC = 24
"""Fraction bits of an update scale `lr / B` that is not a power of two."""
MOMENTUM_FRAC = 16
"""Fraction bits of the momentum constant."""


@dataclass(frozen=True)
class LayerFormats:
    """One layer's formats: activations `a` (its pre-activation and output), weights `w`,
    bias `b`, the gradient of the loss by its pre-activation `g`, momentum's velocity `v`."""

    a: FixedFormat = FixedFormat(1, 5, 12)
    w: FixedFormat = FixedFormat(1, 0, 17)
    b: FixedFormat = FixedFormat(1, 0, 17)
    g: FixedFormat = FixedFormat(1, 0, 17)
    v: FixedFormat = FixedFormat(1, 0, 17)

    def __post_init__(self) -> None:
        for name in ("a", "w", "b", "g", "v"):
            fmt = getattr(self, name)
            if not fmt.is_plain:
                raise K2CError(f"training format {name}={fmt}: training takes signed formats, round half up, saturate")

    def describe(self) -> str:
        return f"a={self.a} w={self.w} b={self.b} g={self.g}"


@dataclass(frozen=True)
class Sgd:
    """Stochastic gradient descent as Keras' `SGD(learning_rate, momentum)` with `batch`
    samples a step (the loss is the batch's mean)."""

    learning_rate: float = 2.0**-5
    momentum: float = 0.0
    batch: int = 1

    def __post_init__(self) -> None:
        if not (self.learning_rate > 0 and math.isfinite(self.learning_rate)):
            raise K2CError(f"learning rate {self.learning_rate}: a positive number")
        if not 0 <= self.momentum < 1:
            raise K2CError(f"momentum {self.momentum}: from 0 up to (not including) 1")
        if self.batch < 1:
            raise K2CError(f"batch size {self.batch}: at least 1")


@dataclass(frozen=True)
class Constant:
    """A positive constant as `raw * 2^-frac` (raw odd, or 1 for a power of two)."""

    raw: int
    frac: int
    asked: Fraction

    @property
    def value(self) -> Fraction:
        return Fraction(self.raw, 1 << self.frac) if self.frac >= 0 else Fraction(self.raw << -self.frac)

    @property
    def exact(self) -> bool:
        return self.value == self.asked


def constant(value: Fraction, frac: int) -> Constant:
    """`value` exactly when it is a power of two (a shift), else rounded to `frac` fraction bits
    (half up), reduced to an odd raw."""
    if value <= 0:
        return Constant(0, 0, value)
    n, d = value.numerator, value.denominator
    if n & (n - 1) == 0 and d & (d - 1) == 0:
        return Constant(1, d.bit_length() - n.bit_length(), value)
    raw = math.floor(value * (1 << frac) + Fraction(1, 2))
    while raw and raw % 2 == 0 and frac > 0:
        raw, frac = raw // 2, frac - 1
    return Constant(raw, frac, value)


def _dtype(bits: int) -> type:
    """int64 for values of up to `bits` bits, Python integers beyond."""
    return np.int64 if bits <= INT64_SAFE_BITS else object


@dataclass
class Epoch:
    """What one epoch measured: the running loss and accuracy over its samples (each sample's
    forward pass before the update its batch makes), the test accuracy after it."""

    epoch: int
    loss: float
    accuracy: float
    test_accuracy: float | None = None


@dataclass
class GoldenTrainer:
    """The integer trainer of `net` (its layers' initial weights quantized to their formats)."""

    net: TrainNet
    sgd: Sgd = field(default_factory=Sgd)
    formats: Sequence[LayerFormats] = ()
    x_format: FixedFormat = FixedFormat(1, 5, 12)
    weights: list[np.ndarray] = field(init=False)
    biases: list[np.ndarray] = field(init=False)
    velocity: list[tuple[np.ndarray, np.ndarray]] = field(init=False)
    scale: Constant = field(init=False)
    momentum: Constant = field(init=False)
    steps: int = field(init=False, default=0)
    observe: Callable[[int, str, np.ndarray], object] | None = None
    """Told every tensor as it is stored: (layer, key of its format, raw values) (`train.profile`)."""

    def __post_init__(self) -> None:
        n = len(self.net.layers)
        self.formats = list(self.formats) or [LayerFormats() for _ in range(n)]
        if len(self.formats) != n:
            raise K2CError(f"{len(self.formats)} layer formats for {n} layers")
        if self.net.loss == "categorical_crossentropy":
            last = self.formats[-1]
            if last.g.int < 0 or last.g.bits < 2:
                raise K2CError(f"gradient format {last.g} of the softmax layer: it must hold -1 to 1")
        self.weights = [quantize(layer.kernel, f.w) for layer, f in zip(self.net.layers, self.formats)]
        self.biases = [quantize(layer.bias, f.b) for layer, f in zip(self.net.layers, self.formats)]
        self.velocity = [(np.zeros_like(w), np.zeros_like(b)) for w, b in zip(self.weights, self.biases)]
        loss_scale = Fraction(2, self.net.layers[-1].n_out) if self.net.loss == "mse" else Fraction(1)
        asked = Fraction(self.sgd.learning_rate) * loss_scale / self.sgd.batch
        self.scale = constant(asked, SCALE_FRAC)
        if self.scale.raw == 0:
            raise K2CError(f"learning rate {self.sgd.learning_rate}: lr / batch rounds to 0 at {SCALE_FRAC} bits")
        self.momentum = constant(Fraction(self.sgd.momentum), MOMENTUM_FRAC)

    # --- forward -------------------------------------------------------------------------

    def quantize_inputs(self, x: np.ndarray) -> np.ndarray:
        return quantize(np.asarray(x, dtype=np.float64).reshape(len(x), -1), self.x_format)

    def _formats_in(self, i: int) -> FixedFormat:
        return self.x_format if i == 0 else self.formats[i - 1].a

    def forward(self, xq: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """(z, y) raw per layer for raw inputs `xq` (N, n_in): z in `a`, y in `a` (a softmax
        output's in the last layer's `g`)."""
        out = []
        h = xq
        for i, (layer, f) in enumerate(zip(self.net.layers, self.formats)):
            fx = self._formats_in(i)
            frac = fx.frac + f.w.frac
            bits = fx.bits + f.w.bits + max(layer.n_in, 1).bit_length() + 2
            acc: np.ndarray = h.astype(_dtype(bits)) @ self.weights[i].astype(_dtype(bits))
            acc = acc + _align(self.biases[i], f.b.frac, frac, f.b.bits)
            z = np.asarray(requantize_to(acc, frac, f.a), dtype=np.int64)
            if layer.activation == "softmax":
                y = activations.apply(z, "softmax", f.a, f.g)
            else:
                y = activations.apply(z, layer.activation, f.a, f.a)
            out.append((z, y))
            if self.observe is not None:
                self.observe(i, "a", z)
                self.observe(i, "g" if layer.activation == "softmax" else "a", y)
            h = y
        return out

    def predict(self, x: np.ndarray) -> np.ndarray:
        """The class (argmax of the last pre-activation) of every sample of float `x`."""
        return np.argmax(self.forward(self.quantize_inputs(x))[-1][0], axis=-1)

    def accuracy(self, x: np.ndarray, labels: np.ndarray) -> float:
        return float(np.mean(self.predict(x) == np.asarray(labels)))

    # --- backward and update -------------------------------------------------------------

    def _derivative_product(self, i: int, back: np.ndarray, frac: int, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        """back * f'(z) exact (frac fraction bits in `back`), rounded to layer i's `g`."""
        layer, f = self.net.layers[i], self.formats[i]
        act = layer.activation
        if act == "relu":
            prod, pf = np.where(z > 0, back, 0), frac
        elif act == "linear":
            prod, pf = back, frac
        else:
            one = 1 << f.a.frac
            yo = y.astype(object)
            d = one * one - yo * yo if act == "tanh" else yo * (one - yo)  # 2 a.frac fraction bits
            prod, pf = back.astype(object) * d, frac + 2 * f.a.frac
        return np.asarray(requantize_to(prod, pf, f.g), dtype=np.int64)

    def _output_gradient(self, z: np.ndarray, y: np.ndarray, target: np.ndarray) -> np.ndarray:
        f = self.formats[-1]
        if self.net.loss == "categorical_crossentropy":
            onehot = np.zeros_like(y)
            onehot[np.arange(len(y)), target] = 1 << f.g.frac
            return saturate(y - onehot, f.g)
        t = quantize(np.asarray(target, dtype=np.float64).reshape(y.shape), f.a)
        return self._derivative_product(len(self.net.layers) - 1, (y - t).astype(np.int64), f.a.frac, z, y)

    def step(self, x: np.ndarray, target: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """One SGD step on a batch of raw inputs `x` (B, n_in) and targets (class labels, or
        rows of targets for MSE): forward, backward, update. The batch's forward outputs
        (z, y of the last layer) before the update."""
        passes = self.forward(x)
        z_last, y_last = passes[-1]
        d = self._output_gradient(z_last, y_last, target)
        if self.observe is not None:
            self.observe(len(self.net.layers) - 1, "g", d)
        grads: list[tuple[np.ndarray, np.ndarray]] = []
        for i in range(len(self.net.layers) - 1, -1, -1):
            h = x if i == 0 else passes[i - 1][1]
            grads.append((_outer_sum(h, d, self._formats_in(i), self.formats[i].g), d.sum(axis=0)))
            if i:
                f = self.formats[i]
                dt = _dtype(f.g.bits + f.w.bits + self.net.layers[i].n_out.bit_length() + 1)
                back: np.ndarray = d.astype(dt) @ self.weights[i].T.astype(dt)
                zp, yp = passes[i - 1]
                d = self._derivative_product(i - 1, back, f.g.frac + f.w.frac, zp, yp)
                if self.observe is not None:
                    self.observe(i - 1, "g", d)
        grads.reverse()
        for i, (gw, gb) in enumerate(grads):
            f = self.formats[i]
            fx = self._formats_in(i)
            self.weights[i], vw = self._update(self.weights[i], self.velocity[i][0], gw, fx.frac + f.g.frac, f.w, f.v)
            self.biases[i], vb = self._update(self.biases[i], self.velocity[i][1], gb, f.g.frac, f.b, f.v)
            self.velocity[i] = (vw, vb)
            if self.observe is not None:
                self.observe(i, "w", self.weights[i])
                self.observe(i, "b", self.biases[i])
                if self.momentum.raw:
                    self.observe(i, "v", np.concatenate([vw.ravel(), vb]))
        self.steps += 1
        return z_last, y_last

    def _update(
        self, w: np.ndarray, v: np.ndarray, grad: np.ndarray, gfrac: int, wf: FixedFormat, vf: FixedFormat
    ) -> tuple[np.ndarray, np.ndarray]:
        """W - scale * G rounded to `wf` (or through the velocity, rounded to `vf`, with momentum)."""
        s = self.scale
        bits = _magnitude(grad) + s.raw.bit_length()
        step: np.ndarray = grad.astype(_dtype(bits)) * s.raw  # gfrac + s.frac fraction bits
        sfrac = gfrac + s.frac
        if self.momentum.raw == 0:
            top = max(sfrac, wf.frac)
            new = _align(w, wf.frac, top, wf.bits) - _align(step, sfrac, top, bits)
            return np.asarray(requantize_to(new, top, wf), dtype=np.int64), v
        m = self.momentum
        top = max(vf.frac + m.frac, sfrac)
        kept: np.ndarray = v.astype(_dtype(vf.bits + m.raw.bit_length())) * m.raw
        vel = _align(kept, vf.frac + m.frac, top, vf.bits + m.raw.bit_length()) - _align(step, sfrac, top, bits)
        v = np.asarray(requantize_to(vel, top, vf), dtype=np.int64)
        top = max(wf.frac, vf.frac)
        new = _align(w, wf.frac, top, wf.bits) + _align(v, vf.frac, top, vf.bits)
        return np.asarray(requantize_to(new, top, wf), dtype=np.int64), v

    # --- epochs --------------------------------------------------------------------------

    def loss(self, y_last: np.ndarray, target: np.ndarray) -> np.ndarray:
        """Each sample's loss, in float, from the trainer's own outputs (a report, not part of
        the arithmetic): cross-entropy on the fixed-point softmax (its smallest step where
        it is 0), or the mean squared error."""
        f = self.formats[-1]
        if self.net.loss == "categorical_crossentropy":
            p = f.g.to_real(y_last[np.arange(len(y_last)), target])
            return -np.log(np.maximum(p, f.g.lsb))
        y = f.a.to_real(y_last)
        return np.mean((y - np.asarray(target, dtype=np.float64).reshape(y.shape)) ** 2, axis=-1)

    def epoch(self, x: np.ndarray, target: np.ndarray, order: np.ndarray) -> tuple[float, float]:
        """One pass over float samples `x` in `order`, `sgd.batch` at a time (a last short
        batch too): the running loss and accuracy."""
        xq = self.quantize_inputs(x)
        losses, hits = [], []
        for idx in _batches(order, self.sgd.batch):
            z, y = self.step(xq[idx], target[idx])
            losses.append(self.loss(y, target[idx]))
            if self.net.loss == "categorical_crossentropy":
                hits.append(np.argmax(z, axis=-1) == target[idx])
        accuracy = float(np.mean(np.concatenate(hits))) if hits else float("nan")
        return float(np.mean(np.concatenate(losses))), accuracy

    def fit(
        self,
        x: np.ndarray,
        target: np.ndarray,
        epochs: int,
        orders: Sequence[np.ndarray],
        test: tuple[np.ndarray, np.ndarray] | None = None,
        progress: Callable[[str], object] | None = None,
    ) -> list[Epoch]:
        out = []
        for e in range(epochs):
            if progress is not None:
                progress(f"golden trainer: epoch {e + 1} of {epochs}")
            loss, acc = self.epoch(x, target, orders[e])
            test_acc = self.accuracy(*test) if test is not None and self.net.loss != "mse" else None
            out.append(Epoch(e + 1, loss, acc, test_acc))
        return out

    def real_weights(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """The weights and biases as real values (for Keras, or to read back)."""
        return [(f.w.to_real(w), f.b.to_real(b)) for w, b, f in zip(self.weights, self.biases, self.formats)]


def _batches(order: np.ndarray, batch: int) -> Iterator[np.ndarray]:
    for start in range(0, len(order), batch):
        yield order[start : start + batch]


def _align(raw: np.ndarray, frac: int, to: int, bits: int) -> np.ndarray:
    """Raw values of at most `bits` bits with `frac` fraction bits as raw values with
    `to >= frac`, exactly (in int64 while they fit it, with a bit to spare for one sum)."""
    raw = np.asarray(raw)
    shift = to - frac
    return raw.astype(_dtype(bits + shift + 1)) << shift


def _magnitude(raw: np.ndarray) -> int:
    """Bits of the widest value of `raw` (sign included)."""
    raw = np.asarray(raw)
    if raw.size == 0:
        return 1
    return max(int(raw.max()), -int(raw.min()), 1).bit_length() + 1


def _outer_sum(h: np.ndarray, d: np.ndarray, hf: FixedFormat, gf: FixedFormat) -> np.ndarray:
    """sum over the batch of h^T d, exact (hf.frac + gf.frac fraction bits)."""
    bits = hf.bits + gf.bits + max(len(h), 1).bit_length() + 1
    return h.T.astype(_dtype(bits)) @ d.astype(_dtype(bits))
