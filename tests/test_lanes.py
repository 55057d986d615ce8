"""Serial BatchNormalization (hw.lanes, K2C.BatchNorm.batchNormLanes): the lanes chosen keep
the exact II with fewer multipliers, and any lanes are bit-exact in Clash with the hardware
model's every accept and output cycle, with and without stalls."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from helpers import assert_clash_matches_golden, needs_toolchain
from keras2clash.errors import K2CError
from keras2clash.hw import hwmodel
from keras2clash.hw.hwmodel import with_fifos
from keras2clash.hw.lanes import divisors, resolve_lanes, with_lanes
from keras2clash.quant import golden

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_lanes_option() -> None:
    assert resolve_lanes(None, None) == "full" and resolve_lanes(None, "ecp5-85k") == "auto"
    assert resolve_lanes(" Full ", 132) == "full" and resolve_lanes("auto", None) == "auto"
    with pytest.raises(K2CError, match=r"bad --lanes 'half': expected 'auto'.*or 'full'"):
        resolve_lanes("half", None)
    assert divisors(12) == [1, 2, 3, 4, 6, 12] and divisors(1) == [1]


def test_mlp_tanh_balanced_to_ecp5_85k_is_serial() -> None:
    """mlp_tanh within the routable 132 multipliers: both BatchNormalizations one channel a
    cycle (their beats come once per II of 65), 132 -> 78 multipliers, the same II, 58 cycles
    more latency (hw/lanes.py's measurement on the LFE5U-85F)."""
    from keras2clash.network import load_network

    model = EXAMPLES / "mlp_tanh" / "mlp_tanh.keras"
    serial = load_network(model, "1,7,8", dsp_budget="ecp5-85k").plans
    full = load_network(model, "1,7,8", dsp_budget="ecp5-85k", lanes="full").plans
    assert {p.name: (p.params.lanes, p.lane_chunks) for p in serial if p.type == "batchnorm"} == {
        "bn_1": (1, 32),
        "bn_2": (1, 24),
    }
    assert all(p.params.lanes == 0 for p in full if p.type == "batchnorm")
    s, f = hwmodel.figures(serial), hwmodel.figures(full)
    assert (f.multipliers, f.ii, f.latency) == (132, 65, 301)
    assert (s.multipliers, s.ii, s.latency) == (78, 65, 359)
    # the default without a budget stays a whole beat a cycle; `auto` asks for it
    default = load_network(model, "1,7,8").plans
    assert all(p.params.lanes == 0 for p in default if p.type == "batchnorm")
    auto = load_network(model, "1,7,8", lanes="auto").plans
    assert hwmodel.timing(auto).ii == hwmodel.timing(default).ii
    assert sum(p.multipliers for p in auto) < sum(p.multipliers for p in default)


def _model(seed: int, channels: int, conv_channels: int):
    """BatchNormalizations the passes cannot fold: after a convolution's ReLU (one beat a
    pixel), on one branch of an Add, after a tanh table, and one with a fused sigmoid (a
    table stage after it)."""
    import keras
    from keras import layers as L

    keras.utils.set_random_seed(seed)
    inp = keras.Input((5, 5, 2))
    x = L.Conv2D(conv_channels, 3, padding="same", activation="relu", name="conv")(inp)
    x = L.BatchNormalization(name="bn_conv")(x)
    x = L.MaxPooling2D(name="pool")(x)
    x = L.Flatten(name="flat")(x)
    x = L.Dense(channels, activation="tanh", name="d1")(x)
    a = L.BatchNormalization(name="bn_a")(x)
    b = L.Dense(channels, name="d_b")(x)
    x = L.Add(name="add")([a, b])
    x = L.Dense(channels, activation="relu", name="d2")(x)
    x = L.BatchNormalization(name="bn_sig")(x)
    x = L.Activation("sigmoid", name="sig")(x)
    x = L.Dense(3, name="out")(x)
    model = keras.Model(inp, x)
    rng = np.random.default_rng(seed)
    for layer in model.layers:  # trained-looking statistics (fresh ones are the identity)
        if isinstance(layer, L.BatchNormalization):
            gamma, beta, mean, var = layer.get_weights()
            layer.set_weights(
                [
                    rng.uniform(0.5, 2, gamma.shape),
                    rng.uniform(-0.5, 0.5, beta.shape),
                    rng.uniform(-0.3, 0.3, mean.shape),
                    rng.uniform(0.3, 2, var.shape),
                ]
            )
    return model


@pytest.mark.parametrize("channels", [6, 12])
def test_auto_lanes_keep_the_ii_and_are_the_fewest(channels) -> None:
    """Every serial layer's lanes are the fewest that keep the II: one divisor fewer is slower."""
    from keras2clash.network import load_network

    plans = load_network(_model(1, channels, 4), "1,7,8").plans
    full_ii = hwmodel.timing(with_fifos(plans)).ii
    serial = with_lanes(plans)
    assert hwmodel.timing(serial).ii == full_ii
    bns = [i for i, p in enumerate(serial) if p.type == "batchnorm"]
    assert len(bns) == 3 and any(serial[i].params.lanes for i in bns)
    for i in bns:
        lanes, c = serial[i].channel_lanes, serial[i].output_shape[-1]
        assert c % lanes == 0
        fewer = [d for d in divisors(c) if d < lanes]
        if fewer:
            slower = with_fifos([p.kind.with_lanes(p, fewer[-1]) if j == i else p for j, p in enumerate(serial)])
            assert hwmodel.timing(slower).ii > full_ii
    assert sum(p.multipliers for p in serial) < sum(p.multipliers for p in plans)


@needs_toolchain
@pytest.mark.toolchain
@settings(
    max_examples=2, deadline=None, suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate]
)
@given(
    seed=st.integers(0, 1000),
    channels=st.sampled_from([4, 6, 12]),
    conv_channels=st.sampled_from([2, 4]),
    pick=st.lists(st.integers(0, 5), min_size=3, max_size=3),
    fmt=st.sampled_from(["1,7,8", "1,5,10"]),
)
def test_any_lanes_bit_exact_in_clash(tmp_path_factory, seed, channels, conv_channels, pick, fmt) -> None:
    """Random lanes (any divisor of each BatchNormalization's channels, also where the II
    suffers): Clash == golden model, and the model's accept and output cycles are the
    simulation's; under random input gaps and output stalls still bit-exact."""
    from keras2clash import api
    from keras2clash.backend.project import load_project
    from keras2clash.network import load_network

    network = load_network(_model(seed, channels, conv_channels), fmt)
    bns = iter(pick)

    def lanes(plan):
        options = divisors(plan.output_shape[-1])[:-1]
        return plan.kind.with_lanes(plan, options[next(bns) % len(options)])

    plans = with_fifos([lanes(p) if p.type == "batchnorm" else p for p in network.plans])
    network = replace(network, plans=plans)
    out = tmp_path_factory.mktemp("lanes") / "net"
    out.mkdir()
    api._write_project(network, out, None, show=False)
    project = load_project(out)
    assert [p.params for p in project.plans] == [p.params for p in plans]
    assert "BatchNorm.batchNormLanes" in (out / "Network.hs").read_text()
    rng = np.random.default_rng(seed)
    x_raw = golden.quantize_inputs(project.plans, rng.uniform(-2, 2, size=(6, 5, 5, 2)))
    assert_clash_matches_golden(project, x_raw, seed)
