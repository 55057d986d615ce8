"""The golden trainer: its integer arithmetic against the contract written with fractions,
its training against Keras float SGD, and what it refuses."""

from __future__ import annotations

import math
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from keras2clash.errors import K2CError
from keras2clash.quant import activations
from keras2clash.quant.formats import FixedFormat
from keras2clash.train.golden import GoldenTrainer, LayerFormats, Sgd, constant
from keras2clash.train.net import TrainLayer, TrainNet

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))


def _round(v: Fraction, fmt: FixedFormat) -> Fraction:
    """The contract's one rounding: half up to fmt's step, saturated to its range."""
    q = math.floor(v * (1 << fmt.frac) + Fraction(1, 2))
    return Fraction(min(max(q, fmt.q_min), fmt.q_max), 1 << fmt.frac)


def _raw(v: Fraction, fmt: FixedFormat) -> int:
    return int(v * (1 << fmt.frac))


class Contract:
    """The training contract (keras2clash.train.golden's docstring) in fractions, sample by sample."""

    def __init__(self, trainer: GoldenTrainer) -> None:
        self.t = trainer
        self.w = [
            [[Fraction(int(v), 1 << f.w.frac) for v in row] for row in w]
            for w, f in zip(trainer.weights, trainer.formats)
        ]
        self.b = [[Fraction(int(v), 1 << f.b.frac) for v in b] for b, f in zip(trainer.biases, trainer.formats)]
        self.vw = [[[Fraction(0)] * len(row) for row in w] for w in self.w]
        self.vb = [[Fraction(0)] * len(b) for b in self.b]

    def _act(self, i: int, z: list[Fraction]) -> list[Fraction]:
        layer, f = self.t.net.layers[i], self.t.formats[i]
        if layer.activation == "relu":
            return [max(v, Fraction(0)) for v in z]
        if layer.activation == "linear":
            return z
        out = f.g if layer.activation == "softmax" else f.a
        raw = activations.apply(np.array([[_raw(v, f.a) for v in z]]), layer.activation, f.a, out)[0]
        return [Fraction(int(r), 1 << out.frac) for r in raw]

    def _slope(self, i: int, z: Fraction, y: Fraction) -> Fraction:
        act = self.t.net.layers[i].activation
        return {"relu": Fraction(int(z > 0)), "linear": Fraction(1), "tanh": 1 - y * y, "sigmoid": y * (1 - y)}[act]

    def step(self, xs: list[list[Fraction]], targets: list) -> None:
        t, n = self.t, len(self.t.net.layers)
        gw = [[[Fraction(0)] * len(row) for row in w] for w in self.w]
        gb = [[Fraction(0)] * len(b) for b in self.b]
        for x, target in zip(xs, targets):
            hs, zs = [x], []
            for i in range(n):
                z = [
                    _round(sum(hs[-1][k] * self.w[i][k][j] for k in range(len(hs[-1]))) + self.b[i][j], t.formats[i].a)
                    for j in range(len(self.b[i]))
                ]
                zs.append(z)
                hs.append(self._act(i, z))
            g = t.formats[-1].g
            if t.net.loss == "categorical_crossentropy":
                d = [_round(p - (j == target), g) for j, p in enumerate(hs[-1])]
            else:
                d = [
                    _round((y - _round(Fraction(v), t.formats[-1].a)) * self._slope(n - 1, z, y), g)
                    for y, z, v in zip(hs[-1], zs[-1], target)
                ]
            for i in range(n - 1, -1, -1):
                for k, h in enumerate(hs[i]):
                    for j, dj in enumerate(d):
                        gw[i][k][j] += h * dj
                for j, dj in enumerate(d):
                    gb[i][j] += dj
                if i:
                    back = [sum(d[j] * self.w[i][k][j] for j in range(len(d))) for k in range(len(hs[i]))]
                    d = [
                        _round(bk * self._slope(i - 1, z, y), t.formats[i - 1].g)
                        for bk, z, y in zip(back, zs[i - 1], hs[i])
                    ]
        s, m = t.scale.value, t.momentum.value
        for i, f in enumerate(t.formats):
            for values, velocity, grads, fmt in (
                (self.w[i], self.vw[i], gw[i], f.w),
                ([self.b[i]], [self.vb[i]], [gb[i]], f.b),
            ):
                for row, vrow, grow in zip(values, velocity, grads):
                    for j, gj in enumerate(grow):
                        if m:
                            vrow[j] = _round(m * vrow[j] - s * gj, f.v)
                            row[j] = _round(row[j] + vrow[j], fmt)
                        else:
                            row[j] = _round(row[j] - s * gj, fmt)


def _net(sizes, acts, loss, seed):
    rng = np.random.default_rng(seed)
    layers = tuple(
        TrainLayer(f"dense_{i + 1}", rng.normal(0, 1.2 / math.sqrt(a), (a, b)), rng.normal(0, 0.3, b), act)
        for i, (a, b, act) in enumerate(zip(sizes[:-1], sizes[1:], acts))
    )
    return TrainNet("net", (sizes[0],), layers, loss)


FORMATS = st.sampled_from(
    [
        LayerFormats(),
        LayerFormats(
            a=FixedFormat(1, 3, 6),
            w=FixedFormat(1, 1, 7),
            b=FixedFormat(1, 2, 5),
            g=FixedFormat(1, 1, 9),
            v=FixedFormat(1, 0, 12),
        ),
        LayerFormats(
            a=FixedFormat(1, 2, 4),
            w=FixedFormat(1, 0, 5),
            b=FixedFormat(1, 0, 5),
            g=FixedFormat(1, 0, 6),
            v=FixedFormat(1, 0, 8),
        ),
    ]
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    hidden=st.lists(
        st.tuples(st.integers(1, 5), st.sampled_from(["relu", "linear", "tanh", "sigmoid"])), min_size=0, max_size=2
    ),
    n_in=st.integers(1, 5),
    n_out=st.integers(2, 4),
    loss=st.sampled_from(["categorical_crossentropy", "mse"]),
    out_act=st.sampled_from(["linear", "sigmoid", "relu"]),
    fmt=FORMATS,
    lr=st.sampled_from([2.0**-3, 2.0**-6, 0.1]),
    momentum=st.sampled_from([0.0, 0.5, 0.9]),
    batch=st.integers(1, 3),
    seed=st.integers(0, 1000),
)
def test_golden_trainer_is_the_contract(hidden, n_in, n_out, loss, out_act, fmt, lr, momentum, batch, seed) -> None:
    sizes = [n_in, *(n for n, _ in hidden), n_out]
    acts = [a for _, a in hidden] + ["softmax" if loss == "categorical_crossentropy" else out_act]
    net = _net(sizes, acts, loss, seed)
    trainer = GoldenTrainer(net, Sgd(lr, momentum, batch), [fmt] * len(acts), x_format=fmt.a)
    contract = Contract(trainer)
    rng = np.random.default_rng(seed + 1)
    for _ in range(3):
        x = rng.uniform(-2, 2, (batch, n_in))
        target = rng.integers(0, n_out, batch) if loss != "mse" else rng.uniform(-1, 1, (batch, n_out))
        xq = trainer.quantize_inputs(x)
        trainer.step(xq, target)
        contract.step([[Fraction(int(v), 1 << fmt.a.frac) for v in row] for row in xq], list(target))
    for w, cw, b, cb, f in zip(trainer.weights, contract.w, trainer.biases, contract.b, trainer.formats):
        assert w.tolist() == [[_raw(v, f.w) for v in row] for row in cw]
        assert b.tolist() == [_raw(v, f.b) for v in cb]


def test_trains_digits_as_keras_float_does() -> None:
    """64-16-10 on the 8x8 digits, 6 epochs of SGD at 2^-5, batch 1, the same order and
    initial weights: the golden trainer (default formats: activations 1,5,12, weights and
    gradients 1,0,17) and Keras float32 reach the same test accuracy within 2 points."""
    from digits8 import digits_8x8

    from keras2clash.train.reference import keras_fit

    xtr, xte, ytr, yte = (a.reshape(len(a), -1) if a.ndim > 1 else a for a in digits_8x8())
    net = _net([64, 16, 10], ["relu", "softmax"], "categorical_crossentropy", 7)
    sgd = Sgd(2.0**-5, 0.0, 1)
    rng = np.random.default_rng(0)
    orders = [rng.permutation(len(xtr)) for _ in range(6)]
    golden = GoldenTrainer(net, sgd)
    start = golden.real_weights()
    ours = golden.fit(xtr, ytr, 6, orders, (xte, yte))
    theirs, _ = keras_fit(net, start, sgd, xtr, ytr, orders, (xte, yte))
    assert golden.steps == 6 * len(xtr)
    assert ours[-1].test_accuracy > 0.9 and theirs[-1].test_accuracy > 0.9
    assert abs(ours[-1].test_accuracy - theirs[-1].test_accuracy) <= 0.02
    assert ours[-1].loss < ours[0].loss / 3


def test_update_scale_is_a_shift_or_a_stated_constant() -> None:
    assert (constant(Fraction(1, 32), 24).raw, constant(Fraction(1, 32), 24).frac) == (1, 5)
    third = constant(Fraction(1, 30), 24)
    assert not third.exact and abs(third.value - Fraction(1, 30)) <= Fraction(1, 2**25)
    trainer = GoldenTrainer(_net([3, 2], ["softmax"], "categorical_crossentropy", 0), Sgd(2.0**-4, 0.0, 4))
    assert trainer.scale.value == Fraction(1, 64) and trainer.scale.exact


@pytest.mark.parametrize(
    ("layers", "message"),
    [
        ("conv", "training takes a chain of Dense layers"),
        ("softmax_hidden", "activation softmax: training takes"),
        ("no_softmax_ce", "needs a softmax output"),
    ],
)
def test_refusals_name_the_layer(layers, message) -> None:
    import keras

    from keras2clash.frontend.convert import to_graph
    from keras2clash.train.net import train_net

    if layers == "conv":
        inp = keras.Input((6, 6, 1))
        h = keras.layers.Conv2D(2, 3, name="conv")(inp)
        h = keras.layers.Flatten()(h)
        out = keras.layers.Dense(3, activation="softmax")(h)
        loss = None
    else:
        inp = keras.Input((4,))
        h = keras.layers.Dense(3, activation="softmax" if layers == "softmax_hidden" else "relu", name="hidden")(inp)
        out = keras.layers.Dense(3, activation="softmax" if layers == "softmax_hidden" else "linear")(h)
        loss = "categorical_crossentropy" if layers == "no_softmax_ce" else None
    with pytest.raises(K2CError, match=message):
        train_net(to_graph(keras.Model(inp, out)), loss)


TRAIN = ROOT / "examples" / "train_digits"


def test_train_command_writes_the_epochs_and_weights(tmp_path: Path, capsys) -> None:
    import json

    from helpers import run_cli

    args = [
        "train",
        TRAIN / "digits8.keras",
        "--data",
        TRAIN / "train_digits8.npz",
        "--test",
        TRAIN / "test_digits8.npz",
    ]
    out = tmp_path / "run.json"
    code, text = run_cli(
        [
            *args,
            "--epochs",
            "1",
            "--no-keras",
            "--layer-format",
            "classes:g=1,0,15",
            "--json",
            out,
            "--save-weights",
            tmp_path / "w.npz",
        ],
        capsys,
    )
    assert code == 0, text
    result = json.loads(out.read_text())
    assert result["sizes"] == [64, 16, 10] and result["samples"] == 1437 and not result["keras"]
    assert result["formats"][1] == "classes: a=1,5,12 w=1,0,17 b=1,0,17 g=1,0,15"
    assert result["golden"][0]["test_accuracy"] > 0.8
    with np.load(tmp_path / "w.npz") as w:
        assert w["classes/kernel_raw"].shape == (16, 10)
        assert np.array_equal(w["classes/kernel"], w["classes/kernel_raw"] / 2**17)
    code, text = run_cli([*args, "--json", out], capsys)
    assert code == 2 and "exists" in text and "Traceback" not in text  # nothing overwritten
    code, text = run_cli([*args, "--lr", "fast"], capsys)
    assert code == 2 and "--lr 'fast'" in text
    code, text = run_cli([*args, "--layer-format", "nope:w=1,0,15"], capsys)
    assert code == 2 and "no Dense layer 'nope'" in text


def test_auto_formats_cover_the_profile() -> None:
    """`--auto-bits`: each tensor's format has the asked width and room for twice the largest
    magnitude the profile saw (the softmax output's gradient p - onehot reaches -1)."""
    from keras2clash.train.profile import HEADROOM, auto_formats

    net = _net([5, 6, 3], ["tanh", "softmax"], "categorical_crossentropy", 3)
    rng = np.random.default_rng(3)
    x, labels = rng.uniform(-1, 1, (40, 5)), rng.integers(0, 3, 40)
    formats, seen = auto_formats(net, Sgd(2.0**-4), x, labels, [rng.permutation(40)], 12)
    for fmt, top in zip(formats, seen):
        for key in ("a", "w", "b", "g"):
            f = getattr(fmt, key)
            assert f.bits == 12 and f.sign == 1
            assert top[key] * HEADROOM <= 2.0**f.int, (key, f, top[key])
            assert f.int == 0 or top[key] * HEADROOM > 2.0 ** (f.int - 1)  # and no more than that
    assert seen[1]["g"] >= 0.5 and formats[1].g.int == 1
