"""Networks that are not series-parallel (any DAG): a tensor read by several later layers in any
order, as wiring (forks, a FIFO on every merge input), golden == Clash simulation bit for bit and
the hardware model's cycles == the simulation's, under random input gaps and output stalls.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from helpers import assert_clash_matches_golden, needs_toolchain, random_graph, small_weights
from keras2clash.ir.structure import Chain, Dag, Run, network_shape
from keras2clash.quant import golden


class _N:
    def __init__(self, name: str, *inputs: str) -> None:
        self.name, self.inputs = name, tuple(inputs)


def densenet_block(seed: int = 0, size: int = 5):
    """c0 is concatenated again two blocks later (and c1 one block later), as in DenseNet."""
    import keras
    from keras import layers

    keras.utils.set_random_seed(seed)
    inp = keras.Input((size, size, 2))
    c0 = layers.Conv2D(3, 3, padding="same", activation="relu", name="c0")(inp)
    c1 = layers.Conv2D(2, 3, padding="same", activation="relu", name="c1")(c0)
    cat1 = layers.Concatenate(name="cat1")([c0, c1])
    c2 = layers.ReLU(name="r2")(layers.Conv2D(2, 1, name="c2")(cat1))
    cat2 = layers.Concatenate(name="cat2")([c0, c1, c2])
    x = layers.Flatten(name="flat")(layers.MaxPooling2D(2, name="pool")(cat2))
    return small_weights(
        keras.Model(inp, layers.Dense(3, name="out")(x), name="densenet_block"), np.random.default_rng(seed)
    )


def three_forks(seed: int = 0):
    """One 3-input merge reading tensors forked at three depths of a chain."""
    import keras
    from keras import layers

    keras.utils.set_random_seed(seed)
    inp = keras.Input((6,))
    d1 = layers.Dense(5, activation="relu", name="d1")(inp)
    d2 = layers.Dense(5, activation="relu", name="d2")(d1)
    d3 = layers.Dense(5, name="d3")(d2)
    total = layers.Add(name="total")([d3, d1, d2])
    return small_weights(
        keras.Model(inp, layers.Dense(3, name="out")(total), name="three_forks"), np.random.default_rng(seed)
    )


def input_forks(seed: int = 0):
    """The network's input read by three layers, a tensor read twice by one 4-input merge."""
    import keras
    from keras import layers

    keras.utils.set_random_seed(seed)
    inp = keras.Input((4,))
    d1 = layers.Dense(4, activation="relu", name="d1")(inp)
    m1 = layers.Add(name="m1")([inp, d1])
    d2 = layers.Dense(4, name="d2")(m1)
    m2 = layers.Add(name="m2")([d2, inp, d1, d1])
    return small_weights(
        keras.Model(inp, layers.Dense(3, name="out")(m2), name="input_forks"), np.random.default_rng(seed)
    )


def gated_dense_block(seed: int = 0, size: int = 4):
    """A squeeze-and-excitation gate on c1 (held per image in hardware), and c0 and c1 both
    concatenated again after the gated product: not series-parallel."""
    import keras
    from keras import layers

    keras.utils.set_random_seed(seed)
    inp = keras.Input((size, size, 2))
    c0 = layers.Conv2D(3, 3, padding="same", activation="relu", name="c0")(inp)
    c1 = layers.Conv2D(3, 3, padding="same", activation="relu", name="c1")(c0)
    g = layers.Dense(2, activation="relu", name="reduce")(layers.GlobalAveragePooling2D(name="squeeze")(c1))
    g = layers.Reshape((1, 1, 3), name="gate")(layers.Dense(3, activation="sigmoid", name="excite")(g))
    scaled = layers.Multiply(name="scale")([c1, g])
    cat = layers.Concatenate(name="cat")([scaled, c0, c1])
    out = layers.Dense(3, name="out")(layers.Flatten(name="flat")(cat))
    return small_weights(keras.Model(inp, out, name="gated_dense_block"), np.random.default_rng(seed))


def film_block(seed: int = 0, size: int = 4):
    """Feature-wise linear modulation: a map scaled by one (C,) gate and shifted by another,
    both computed from its global pooling (two broadcast merges in a row, not series-parallel)."""
    import keras
    from keras import layers

    keras.utils.set_random_seed(seed)
    inp = keras.Input((size, size, 2))
    c0 = layers.Conv2D(3, 3, padding="same", activation="relu", name="c0")(inp)
    pooled = layers.GlobalAveragePooling2D(name="squeeze")(c0)
    gamma = layers.Dense(3, name="gamma")(pooled)
    beta = layers.Dense(3, name="beta")(pooled)
    scaled = layers.Multiply(name="scale")([c0, gamma])
    shifted = layers.Add(name="shift")([scaled, beta])
    out = layers.Dense(3, name="out")(layers.Flatten(name="flat")(shifted))
    return small_weights(keras.Model(inp, out, name="film_block"), np.random.default_rng(seed))


def small_unet(seed: int = 0, size: int = 16):
    """An encoder/decoder with a skip from before a MaxPooling2D to after an UpSampling2D,
    joined by Concatenate, with an image output."""
    import keras
    from keras import layers

    keras.utils.set_random_seed(seed)
    inp = keras.Input((size, size, 1))
    e1 = layers.Conv2D(2, 3, padding="same", activation="relu", name="enc1")(inp)
    e2 = layers.Conv2D(3, 3, padding="same", activation="relu", name="enc2")(layers.MaxPooling2D(2, name="down1")(e1))
    cat = layers.Concatenate(name="skip1")([layers.UpSampling2D(2, name="up1")(e2), e1])
    out = layers.Conv2D(1, 3, padding="same", name="dec1")(cat)
    return small_weights(keras.Model(inp, out, name="small_unet"), np.random.default_rng(seed))


def unet_forks(seed: int = 0, size: int = 16):
    """A U-Net level whose skip and upsampled path are both read again by one 3-input Add, with
    the decoder's convolution: forks from three depths into one merge (not series-parallel)."""
    import keras
    from keras import layers

    keras.utils.set_random_seed(seed)
    inp = keras.Input((size, size, 1))
    e1 = layers.Conv2D(2, 3, padding="same", activation="relu", name="enc1")(inp)
    e2 = layers.Conv2D(2, 3, padding="same", activation="relu", name="enc2")(layers.MaxPooling2D(2, name="down1")(e1))
    up = layers.UpSampling2D(2, name="up1")(e2)
    dec = layers.Conv2D(2, 3, padding="same", name="dec1")(up)
    total = layers.Add(name="total")([e1, up, dec])
    out = layers.Conv2D(1, 3, padding="same", name="head")(total)
    return small_weights(keras.Model(inp, out, name="unet_forks"), np.random.default_rng(seed))


def random_dag(seed: int, image: bool, nodes: int):
    """A random DAG: merges of two or three earlier tensors by Add, Concatenate, Maximum or Average."""
    return random_graph(seed, nodes, image=image, merges=("add", "concatenate", "maximum", "average"), widest_merge=3)


def test_densenet_wiring() -> None:
    nodes = [
        _N("c0", "in"),
        _N("c1", "c0"),
        _N("cat1", "c0", "c1"),
        _N("c2", "cat1"),
        _N("r2", "c2"),
        _N("cat2", "c0", "c1", "r2"),
        _N("o", "cat2"),
    ]
    shape = network_shape(nodes, "in", "o")
    assert isinstance(shape, Dag)
    assert shape.runs == (
        Run(("c0",), "in"),
        Run(("c1",), "c0"),
        Run(("cat1", "c2", "r2"), None),
        Run(("cat2", "o"), None),
    )
    assert shape.readers["c0"] == (("c1", 0), ("cat1", 0), ("cat2", 0))
    assert shape.readers["c1"] == (("cat1", 1), ("cat2", 1))
    assert shape.readers["in"] == (("c0", 0),)


def test_series_parallel_graphs_stay_chains() -> None:
    nodes = [_N("a", "in"), _N("b", "a"), _N("add", "b", "a"), _N("o", "add")]
    assert isinstance(network_shape(nodes, "in", "o"), Chain)


def test_densenet_emits_forks_and_fifos_sized_by_the_model(tmp_path) -> None:
    from keras2clash import api
    from keras2clash.backend.project import load_project
    from keras2clash.hw import hwmodel

    api.emit(densenet_block(), "1,7,8", tmp_path / "net", show=False)
    text = (tmp_path / "net" / "Network.hs").read_text()
    assert "(c0_reads, c0_out_ready) = fork c0_out (c1_ready :> cat1_fifo_ready_0 :> cat2_fifo_ready_0 :> Nil)" in text
    assert "cat2_in = joined cat2_fifo_0 (joined cat2_fifo_1 cat2_fifo_2)" in text
    assert "(out_out, cat2_ready) = (cat2 |> pool |> flat |> out p_out b_out l_out) (cat2_in, ready)" in text
    project = load_project(tmp_path / "net")
    depths = {p.name: p.params.fifo_depths for p in project.plans if p.is_merge}
    assert depths == hwmodel.fifo_depths(project.plans)
    needs = hwmodel.branch_needs(project.plans)
    assert all(d >= n for name in depths for d, n in zip(depths[name], needs[name]))
    # c0 waits in cat2's FIFO while c1, cat1 and c2 compute: more than a row of pixels
    assert depths["cat2"][0] > depths["cat2"][2] and depths["cat2"][0] >= 5 + 1
    # no throughput lost: the II of FIFOs a whole image deeper
    deep = hwmodel.with_deep_branch_fifos(project.plans)
    assert hwmodel.timing(project.plans).ii == hwmodel.timing(deep).ii == 89


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 10_000), image=st.booleans(), nodes=st.integers(2, 6))
def test_random_dags_golden_and_model(seed, image, nodes) -> None:
    """The golden model follows Keras at a wide format, and the hardware model times every image
    with the FIFO depths it found (a deadlock would leave an output untimed)."""
    from keras2clash.hw import hwmodel
    from keras2clash.network import load_network

    model = random_dag(seed, image, nodes)
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 1, size=(4, *model.inputs[0].shape[1:])).astype(np.float32)
    wide = load_network(model, "1,9,14", fifos=False)
    raw = golden.run(wide.plans, wide.params, golden.quantize_inputs(wide.plans, x))
    want = np.asarray(model(x, training=False), dtype=np.float64)
    np.testing.assert_allclose(raw / (1 << 14), want, atol=0.03)
    network = load_network(model, "1,7,8")
    t = hwmodel.timing(network.plans, 3)
    assert len(t.output_cycle) == 3 and np.all(np.diff(t.output_cycle) > 0)
    assert t.ii == hwmodel.timing(hwmodel.with_deep_branch_fifos(network.plans)).ii


# --- bit-exact in the Clash simulation, cycles as the hardware model says -----------------


def _clash(model, tmp_path, seed: int = 0, images: int = 5):
    from keras2clash import api
    from keras2clash.backend.project import load_project

    api.emit(model, "1,7,8", tmp_path / "net", show=False)
    project = load_project(tmp_path / "net")
    x = np.random.default_rng(seed).uniform(-0.5, 1.5, size=(images, *model.inputs[0].shape[1:]))
    assert_clash_matches_golden(project, golden.quantize_inputs(project.plans, x), seed)
    return project


@needs_toolchain
def test_densenet_block_bit_exact_in_clash(tmp_path) -> None:
    _clash(densenet_block(), tmp_path)


@needs_toolchain
def test_unet_with_forks_from_three_depths_bit_exact_in_clash(tmp_path) -> None:
    """The skip waits in its merge FIFO while the pooled path computes and is upsampled: the
    deepest FIFO holds several rows of pixels (and an image output)."""
    project = _clash(unet_forks(size=12), tmp_path, images=3)
    (total,) = [p for p in project.plans if p.is_merge]
    assert total.params.fifo_depths[0] > 5 * 12  # five rows of pixels
    text = (tmp_path / "net" / "Network.hs").read_text()
    assert "(total_fifo_0, total_fifo_ready_0) = blockFifo d_total_0 (enc1_reads !! 1, total_moves)" in text


@needs_toolchain
@pytest.mark.slow
def test_three_forks_into_one_merge_bit_exact_in_clash(tmp_path) -> None:
    _clash(three_forks(), tmp_path)


@needs_toolchain
@pytest.mark.slow
def test_input_forks_bit_exact_in_clash(tmp_path) -> None:
    project = _clash(input_forks(), tmp_path)
    text = (project.root / "Network.hs").read_text()
    assert "fork input (d1_layer_ready :> m1_fifo_ready_0 :> m2_fifo_ready_1 :> Nil)" in text
    assert "fork d1_layer_out (m1_fifo_ready_1 :> m2_fifo_ready_2 :> m2_fifo_ready_3 :> Nil)" in text


@needs_toolchain
@pytest.mark.slow
def test_gated_dense_block_bit_exact_in_clash(tmp_path) -> None:
    """A held gate (`repeatS` before its FIFO) inside the wiring."""
    project = _clash(gated_dense_block(), tmp_path, images=4)
    text = (project.root / "Network.hs").read_text()
    assert "= (repeatS (SNat @16) |> fifo d_scale_1) (" in text and "fork c1_out" in text


@needs_toolchain
@pytest.mark.slow
def test_film_block_bit_exact_in_clash(tmp_path) -> None:
    """Two held gates (scale, then shift) of one pooled map inside the wiring: the golden model
    follows Keras at a wide format, and Clash equals it at 1,7,8 with the model's cycles."""
    from keras2clash.network import load_network

    model = film_block()
    x = np.random.default_rng(1).uniform(0, 1, size=(4, 4, 4, 2)).astype(np.float32)
    wide = load_network(model, "1,9,14", fifos=False)
    raw = golden.run(wide.plans, wide.params, golden.quantize_inputs(wide.plans, x))
    np.testing.assert_allclose(raw / (1 << 14), np.asarray(model(x, training=False)), atol=0.02)
    project = _clash(model, tmp_path, images=4)
    text = (project.root / "Network.hs").read_text()
    assert text.count("repeatS (SNat @16)") == 2


@needs_toolchain
@pytest.mark.slow
def test_small_unet_bit_exact_in_clash(tmp_path) -> None:
    """A U-Net is series-parallel (skips nest): its skip FIFO holds a row and more of pixels."""
    _clash(small_unet(), tmp_path)


@needs_toolchain
@pytest.mark.slow
@settings(
    max_examples=3, deadline=None, suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate]
)
@given(seed=st.integers(0, 10_000), image=st.booleans(), nodes=st.integers(3, 6))
def test_random_dags_bit_exact_in_clash(tmp_path_factory, seed, image, nodes) -> None:
    _clash(random_dag(seed, image, nodes), tmp_path_factory.mktemp("dag"), seed, images=4)


@needs_toolchain
@pytest.mark.slow
def test_densenet_block_in_verilator(tmp_path) -> None:
    """The generated Verilog of the wiring, bit-exact under input gaps and output stalls."""
    from keras2clash import api

    model = densenet_block()
    api.emit(model, "1,7,8", tmp_path / "net", show=False)
    x = np.random.default_rng(2).uniform(-0.5, 1.5, size=(12, *model.inputs[0].shape[1:])).astype(np.float32)
    np.savez(tmp_path / "data.npz", x=x, y=np.zeros(12, dtype=np.int64))
    rtl = api.rtlsim(tmp_path / "net", tmp_path / "data.npz", "verilator", gap_max=3, seed=11, show=False)
    assert rtl.ok and len(rtl.samples) == rtl.passed == 12
