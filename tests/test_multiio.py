"""Models of several outputs (heads): the graph keeps every output in the model's order, the
golden model computes each one (its values, and a class for a vector head) as Keras does, and
the hardware sends each out of its own AXI4-Stream master port: golden == Clash simulation on
every port, back to back and under random input gaps and per-port output stalls, with the
hardware model's cycles per port.

Models of several inputs: the graph keeps every input (named after its InputLayer) in the
model's order, each input in its own format, and the golden model computes them as Keras
does (`predict` on a list or a dict of arrays, or an .npz of `x_<input name>`); the hardware
takes each input on its own AXI4-Stream slave port: golden == Clash simulation back to back
and under per-port input gaps, with the hardware model's cycles."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import keras2clash as k2c
from helpers import needs_toolchain, random_graph, run_cli, small_weights
from keras2clash import api
from keras2clash.backend.project import load_project
from keras2clash.errors import K2CError
from keras2clash.frontend.convert import to_graph
from keras2clash.hw import hwmodel
from keras2clash.hw.inputs import network_inputs
from keras2clash.hw.output import classifies, output_plans
from keras2clash.network import load_network
from keras2clash.quant import golden
from keras2clash.verify import rtlsim, testbench, toolchain
from keras2clash.verify.simulate import run_simulator_heads, samples

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

IRIS_DIGESTS = {"Top.hs": "4e276bbec3cabb79", "Sim.hs": "e673ef896f996613", "Network.hs": "31162af9f46df9e9"}
TWO_HEADS_DIGESTS = {"Top.hs": "4c40e7b9ee89736f", "Sim.hs": "d31f30e527897fc6", "Network.hs": "a18731774528c5a7"}


def two_heads(seed: int = 0):
    """A shared trunk, a classifier head (Dense softmax) and a regression head (Dense linear)."""
    import keras
    from keras import layers

    keras.utils.set_random_seed(seed)
    inp = keras.Input((6,))
    trunk = layers.Dense(8, activation="relu", name="trunk")(inp)
    classes = layers.Dense(3, activation="softmax", name="classes")(trunk)
    hidden = layers.Dense(4, activation="relu", name="hidden")(trunk)
    value = layers.Dense(1, name="value")(hidden)
    return small_weights(keras.Model(inp, [classes, value], name="two_heads"), np.random.default_rng(seed))


def image_and_vector_heads(seed: int = 0):
    """A convolutional trunk with an image head (a 1x1 convolution) and a vector head."""
    import keras
    from keras import layers

    keras.utils.set_random_seed(seed)
    inp = keras.Input((4, 4, 2))
    trunk = layers.Conv2D(3, 3, padding="same", activation="relu", name="trunk")(inp)
    image = layers.Conv2D(2, 1, name="image")(trunk)
    vector = layers.Dense(3, name="vector")(layers.Flatten(name="flat")(trunk))
    return small_weights(keras.Model(inp, [vector, image], name="image_and_vector"), np.random.default_rng(seed))


def random_heads(seed: int, image: bool, nodes: int, heads: int):
    """A random trunk (layers and sums of two earlier tensors), then `heads` heads reading random
    trunk tensors, each a classifier, a regression or a sigmoid."""
    return random_graph(
        seed, nodes, image=image, heads=heads, merge_share=0.4, head_activations=("linear", "softmax", "sigmoid")
    )


def _inputs(model, n: int = 8, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(0, 1, size=(n, *model.inputs[0].shape[1:])).astype(np.float32)


def _assert_golden_follows_keras(model, x: np.ndarray) -> list:
    """Every output at a wide format within a small error of Keras; a vector head's classes
    equal the argmax of Keras' outputs wherever Keras' two best scores are apart."""
    predictions = k2c.predict(model, x, "1,9,14")
    want = model.predict(x, verbose=0)
    assert isinstance(predictions, list) and len(predictions) == len(want) == len(model.outputs)
    for prediction, keras_out in zip(predictions, want):
        keras_out = np.asarray(keras_out, dtype=np.float64).reshape(len(x), -1)
        np.testing.assert_allclose(prediction.values, keras_out, atol=0.03)
        if prediction.classes is not None:
            top2 = np.sort(keras_out, axis=1)[:, -2:] if keras_out.shape[1] > 1 else None
            clear = np.ones(len(x), bool) if top2 is None else top2[:, 1] - top2[:, 0] > 0.01
            assert np.array_equal(prediction.classes[clear], np.argmax(keras_out, axis=1)[clear])
    return predictions


# --- the graph and the golden model -------------------------------------------------------


def test_the_graph_keeps_every_output_in_the_models_order() -> None:
    graph = to_graph(two_heads())
    assert graph.outputs == ("classes", "value")
    network = load_network(two_heads(), "1,7,8", fifos=False)
    ports = {p.name: p.output_port for p in network.plans}
    assert ports == {"trunk": None, "classes": 0, "hidden": None, "value": 1}
    # the classifier head's softmax is applied after its class is taken, as for one output
    assert [p.top_activation for p in network.plans] == [False, True, False, False]


def test_golden_computes_a_classifier_head_and_a_regression_head() -> None:
    model = two_heads()
    classes, value = _assert_golden_follows_keras(model, _inputs(model, 32))
    assert classes.raw.shape == (32, 3) and value.raw.shape == (32, 1)
    assert classes.output_shape == (3,) and value.output_shape == (1,)


def test_golden_computes_an_image_head_beside_a_vector_head() -> None:
    model = image_and_vector_heads()
    vector, image = _assert_golden_follows_keras(model, _inputs(model))
    assert image.classes is None and image.output_shape == (4, 4, 2) and image.raw.shape == (8, 32)
    assert vector.classes is not None and vector.output_shape == (3,)


def test_the_predict_command_writes_every_output(tmp_path, capsys) -> None:
    two_heads().save(tmp_path / "m.keras")
    x = _inputs(two_heads(), 4)
    np.savez(tmp_path / "test.npz", x=x)
    code, text = run_cli(
        ["predict", tmp_path / "m.keras", "--data", tmp_path / "test.npz", "--out", tmp_path / "p.npz"], capsys
    )
    assert code == 0, text
    out = np.load(tmp_path / "p.npz")
    classes, value = k2c.predict(two_heads(), x, "1,7,8")
    np.testing.assert_array_equal(out["raw_classes"], classes.raw)
    np.testing.assert_array_equal(out["classes_classes"], classes.classes)
    np.testing.assert_array_equal(out["values_value"], value.values)
    assert "classes_value" in out and out["input_raw"].shape == (4, 6)


def test_a_single_output_model_still_gives_one_prediction() -> None:
    import keras

    inp = keras.Input((3,))
    model = keras.Model(inp, keras.layers.Dense(2, name="d")(inp))
    assert isinstance(k2c.predict(model, np.zeros((2, 3))), k2c.Prediction)


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 10_000), image=st.booleans(), nodes=st.integers(1, 4), heads=st.integers(2, 3))
def test_random_heads_golden_follows_keras_and_the_model_times_every_port(seed, image, nodes, heads) -> None:
    """Golden == Keras on every output; the hardware model times every port of every image (a
    deadlock would leave one untimed) at the II of FIFOs a whole image deeper."""
    model = random_heads(seed, image, nodes, heads)
    _assert_golden_follows_keras(model, _inputs(model, 4, seed))
    network = load_network(model, "1,7,8")
    t = hwmodel.timing(network.plans, 3)
    assert len(t.head_cycles) == heads and all(len(c) == 3 and np.all(np.diff(c) > 0) for c in t.head_cycles)
    assert t.ii == hwmodel.timing(hwmodel.with_deep_branch_fifos(network.plans)).ii


# --- the hardware: one master port per output ---------------------------------------------


def test_the_trunk_forks_to_one_port_per_output(tmp_path) -> None:
    api.emit(two_heads(), "1,7,8", tmp_path / "net", show=False)
    network = (tmp_path / "net" / "Network.hs").read_text()
    assert "(input, (classes_port_ready, value_port_ready)) =\n  ((classes_out, value_out), trunk_ready)" in network
    assert "fork trunk_out (classes_ready :> hidden_ready :> Nil)" in network
    top = (tmp_path / "net" / "Top.hs").read_text()
    for port in ("m0_axis", "m1_axis"):
        assert all(f'PortName "{port}_{s}"' in top for s in ("tdata", "tvalid", "tlast", "tready"))
    assert "head0 = classify id |> classes_softmax |> fifo (SNat @OutputSlice)" in top


def test_the_model_times_each_output() -> None:
    """Each output's cycles, and a sample's output cycle as the last of them; the heads share
    the trunk's II."""
    network = load_network(image_and_vector_heads(), "1,7,8")
    t = hwmodel.timing(network.plans, 3)
    vector, image = t.head_cycles
    assert np.array_equal(t.output_cycle, np.maximum(vector, image))
    assert np.all(np.diff(vector) == t.ii) and np.all(np.diff(image) == t.ii)
    assert hwmodel.timing(hwmodel.with_deep_branch_fifos(network.plans)).ii == t.ii


def assert_ports_match_golden(project, x_raw: np.ndarray, seed: int) -> list:
    """Every output port of the Clash simulation equals the golden model bit for bit (values
    and class), back to back and under random input gaps and output stalls, with each port's
    cycles as the hardware model has them. Returns the stressed run's results per port."""
    heads = output_plans(project.plans)
    want = golden.predict_outputs(project.plans, project.params, x_raw)
    exe = toolchain.build_simulator(project.root)
    t = hwmodel.timing(project.plans, samples(x_raw))
    shapes = [(h.n_out, classifies(h)) for h in heads]
    for extra in ([], ["--gap-max", "4", "--seed", str(seed)]):
        sims = run_simulator_heads(exe, project.root, x_raw, shapes, extra)
        for k, (sim, (values, classes)) in enumerate(zip(sims, want)):
            assert np.array_equal(sim.outputs, values)
            assert classes is None or np.array_equal(sim.classes, classes)
            if not extra:
                assert np.array_equal(sim.accept_cycle, t.accept_cycle)
                assert np.array_equal(sim.output_cycle, t.head_cycles[k])
    return sims


def _clash(model, tmp_path, seed: int = 0, images: int = 5):
    api.emit(model, "1,7,8", tmp_path / "net", show=False)
    project = load_project(tmp_path / "net")
    x = np.random.default_rng(seed).uniform(-0.5, 1.5, size=(images, *model.inputs[0].shape[1:]))
    stressed = assert_ports_match_golden(project, golden.quantize_inputs(project.plans, x), seed)
    return project, x, stressed


def _assert_testbench_matches_clash(project, x: np.ndarray, stressed: list, simulator: str) -> None:
    """The heads testbench under the Clash run's gaps and stalls (seed 4): every port's beats
    pass, at the Clash simulation's accept and output cycles."""
    tb = testbench.write_heads_testbench(project.root, x, gap_max=4, seed=4)
    rtl = rtlsim.run_heads_testbench(project, simulator, tb)
    assert rtl.ok and all(len(p) == len(x) for p in rtl.passed)
    for k, sim in enumerate(stressed):
        assert np.array_equal(rtl.accept_cycle[k], sim.accept_cycle)
        assert np.array_equal(rtl.output_cycle[k], sim.output_cycle)


@pytest.mark.toolchain
@needs_toolchain
def test_a_classifier_head_and_a_regression_head_bit_exact_in_clash_and_verilator(tmp_path) -> None:
    """Clash: every port; the comparison: one table per output, accuracy for the classifier
    head and errors for the regression head, from the test set's `y_<output layer>`;
    Verilator: every port's beats checked by the testbench, the same cycles as the Clash
    simulation under the same gaps and per-port stalls."""
    model = two_heads()
    project, x, stressed = _clash(model, tmp_path, seed=4)
    _assert_testbench_matches_clash(project, x, stressed, "verilator")
    x = _inputs(model, 24, seed=3)
    classes, value = model.predict(x, verbose=0)
    data = tmp_path / "test.npz"
    np.savez(data, x=x, y_classes=np.argmax(classes, axis=1), y_value=value)
    by_head = api.simulate(project.root, data, gap_max=2, show=False)
    assert [c.model for c in by_head] == ["two_heads:classes", "two_heads:value"]
    assert all(c.bit_exact == c.samples == 24 for c in by_head)
    assert by_head[0].keras_float_accuracy == 1.0 and abs(by_head[0].sim_accuracy - 1.0) <= 2 / 24
    assert by_head[1].task == "regression" and by_head[1].sim_errors.vs_keras.max_abs < 0.05
    tb = api.testbench(project.root, data, 3)
    assert len((tb / "expected_0.hex").read_text().split()) == len((tb / "expected_1.hex").read_text().split()) == 3
    with pytest.raises(K2CError, match="several output ports .*classes, value"):
        testbench.write_testbench(project.root, data)
    assert (tb / "tb.vhdl").is_file()


def test_the_vhdl_testbench_drives_and_checks_every_port(tmp_path) -> None:
    """tb.vhdl of a design of several outputs: one set of m<k>_axis signals, expected_<k>.hex,
    stall pattern and OUT line per port; GHDL analyses it against a stub of the design's ports."""
    import shutil
    import subprocess

    api.emit(image_and_vector_heads(), "1,7,8", tmp_path / "net", show=False)
    tb = testbench.write_heads_testbench(tmp_path / "net", _inputs(image_and_vector_heads(), 3), gap_max=2, seed=5)
    text = (tb.directory / "tb.vhdl").read_text()
    for k in (0, 1):
        assert f"m{k}_axis_tready => m{k}_axis_tready" in text and f'expected_{k}.hex", read_mode' in text
        assert f'say("OUT {k} "' in text
    assert 'x"000000005bd1e996"' in text  # port 1's stalls: the seed xor (0x5bd1e995 + 1), as K2C.Sim
    assert "constant J1         : natural := 16;" in text  # the image head: 4x4 beats
    if shutil.which("ghdl"):  # analysed against a stub of the top entity's ports
        ports = [("s_axis_tdata", "in", tb.spec.tdata_in), ("s_axis_tvalid", "in", 0), ("s_axis_tlast", "in", 0)]
        ports += [("s_axis_tready", "out", 0), ("tlast_error", "out", 0)]
        for k, port in enumerate(tb.ports):
            ports += [(f"m{k}_axis_tdata", "out", port.tdata_out), (f"m{k}_axis_tvalid", "out", 0)]
            ports += [(f"m{k}_axis_tlast", "out", 0), (f"m{k}_axis_tready", "in", 0)]
        decls = "".join(
            f"; {name} : {way} " + (f"std_logic_vector({w - 1} downto 0)" if w else "std_logic")
            for name, way, w in ports
        )
        (tmp_path / "stub.vhdl").write_text(
            "library ieee; use ieee.std_logic_1164.all;\n"
            f"entity {tb.spec.top} is port (clk : in std_logic; rst : in std_logic; en : in boolean{decls}); end entity;\n"
            f"architecture stub of {tb.spec.top} is begin end architecture;\n"
        )
        for source in (tmp_path / "stub.vhdl", tb.directory / "tb.vhdl"):
            run = subprocess.run(
                ["ghdl", "-a", "--std=08", f"--workdir={tmp_path}", str(source)],
                capture_output=True,
                text=True,
                check=False,
            )
            assert run.returncode == 0, run.stderr


@needs_toolchain
@pytest.mark.slow
def test_ghdl_runs_every_port_of_a_design_of_several_outputs(tmp_path) -> None:
    """GHDL: every port's beats checked by the VHDL testbench, the same cycles as the Clash
    simulation under the same gaps and per-port stalls."""
    model = image_and_vector_heads()
    project, x, stressed = _clash(model, tmp_path, seed=4, images=3)
    _assert_testbench_matches_clash(project, x, stressed, "ghdl")


@needs_toolchain
@pytest.mark.slow
def test_an_image_head_and_a_vector_head_bit_exact_in_clash(tmp_path) -> None:
    _clash(image_and_vector_heads(), tmp_path)


# --- the example: a digit head and a value head on one trunk -------------------------------

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "digits_heads"


def test_the_two_head_example_follows_keras_on_its_test_set() -> None:
    """At the default format the golden digit head has Keras' accuracy and the value head
    stays within a few output steps of Keras, on all 360 test samples."""
    import keras

    data = np.load(EXAMPLE / "test.npz")
    digit, value = k2c.predict(EXAMPLE / "digits_heads.keras", data["x"])
    keras_digit, keras_value = keras.models.load_model(EXAMPLE / "digits_heads.keras").predict(data["x"], verbose=0)
    golden_accuracy = np.mean(digit.classes == data["y_digit"])
    assert golden_accuracy == np.mean(np.argmax(keras_digit, axis=1) == data["y_digit"]) == 348 / 360
    assert np.max(np.abs(value.values - keras_value)) < 0.01


@pytest.mark.slow
@needs_toolchain
def test_the_two_head_example_whole_test_set_in_clash(tmp_path) -> None:
    """Every sample of both ports bit-exact in the Clash simulation under gaps and stalls."""
    api.emit(EXAMPLE / "digits_heads.keras", "1,7,8", tmp_path / "net", show=False)
    digit, value = api.simulate(tmp_path / "net", EXAMPLE / "test.npz", gap_max=3, show=False)
    assert digit.bit_exact == value.bit_exact == 360
    assert digit.sim_accuracy == digit.keras_float_accuracy


# --- what is refused ----------------------------------------------------------------------


def test_an_output_read_by_another_layer_is_refused() -> None:
    import keras
    from keras import layers

    inp = keras.Input((4,))
    first = layers.Dense(3, name="first")(inp)
    second = layers.Dense(2, name="second")(first)
    with pytest.raises(K2CError, match="layer 'first' is an output .* also read by layer 'second'"):
        to_graph(keras.Model(inp, [first, second]))


def image_and_side_features(seed: int = 0):
    """An image branch (Conv2D, Flatten, Dense) and a vector of side features merged by a
    Concatenate, then a Dense classifier head."""
    import keras
    from keras import layers

    keras.utils.set_random_seed(seed)
    image = keras.Input((6, 6, 1), name="image")
    side = keras.Input((3,), name="side")
    x = layers.Conv2D(2, 3, activation="relu", name="conv")(image)
    x = layers.Dense(4, activation="relu", name="embed")(layers.Flatten(name="flat")(x))
    merged = layers.Concatenate(name="merge")([x, side])
    out = layers.Dense(3, activation="softmax", name="head")(merged)
    return small_weights(keras.Model([image, side], out, name="image_and_side"), np.random.default_rng(seed))


def images_joined_per_pixel(seed: int = 0):
    """Two images added pixel by pixel after a convolution of one of them, that one also
    concatenated further on (a fork of an input), then a Dense classifier head."""
    import keras
    from keras import layers

    keras.utils.set_random_seed(seed)
    a, b = keras.Input((4, 4, 2), name="a"), keras.Input((4, 4, 2), name="b")
    x = layers.Conv2D(2, 3, padding="same", activation="relu", name="conv_a")(a)
    y = layers.Conv2D(3, 1, name="mix")(layers.Add(name="add")([x, b]))
    z = layers.Flatten(name="flat")(layers.Concatenate(name="cat")([y, a]))
    out = layers.Dense(3, activation="softmax", name="head")(z)
    return small_weights(keras.Model([a, b], out, name="joined_per_pixel"), np.random.default_rng(seed))


def inputs_to_two_outputs(seed: int = 0):
    """Two vector inputs, each read by two layers, a classifier output and a regression output."""
    import keras
    from keras import layers

    keras.utils.set_random_seed(seed)
    a, b = keras.Input((5,), name="a"), keras.Input((3,), name="b")
    merged = layers.Concatenate(name="m")([layers.Dense(4, activation="relu", name="ta")(a), b])
    classes = layers.Dense(3, activation="softmax", name="classes")(merged)
    product = layers.Multiply(name="mul")([layers.Dense(3, name="tb")(b), layers.Dense(3, name="tc")(a)])
    value = layers.Dense(2, name="value")(product)
    return small_weights(keras.Model([a, b], [classes, value], name="two_in_two_out"), np.random.default_rng(seed))


def random_inputs(seed: int, n_inputs: int, nodes: int):
    """`n_inputs` vectors of random widths, each through its own Dense trunk, then random layers
    and merges (Add, Multiply, Concatenate) of two earlier tensors, into one head."""
    return random_graph(
        seed,
        nodes,
        inputs=n_inputs,
        merges=("add", "multiply", "concatenate"),
        merge_share=0.75,
        head_activations=("linear", "softmax", "sigmoid"),
    )


def _several(model, n: int = 8, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, size=(n, *t.shape[1:])).astype(np.float32) for t in model.inputs]


def test_the_graph_keeps_every_input_in_the_models_order() -> None:
    graph = to_graph(image_and_side_features())
    assert graph.inputs == (("image", (6, 6, 1)), ("side", (3,)))
    assert graph["merge"].inputs == ("embed", "side")
    network = load_network(image_and_side_features(), "1,7,8", fifos=False)
    assert [(n, s) for n, s, _ in network.plans[0].network_inputs] == [("image", (6, 6, 1)), ("side", (3,))]


def test_golden_computes_two_inputs_as_keras_does(tmp_path) -> None:
    model = image_and_side_features()
    x = _several(model, 24)
    want = model.predict(x, verbose=0)
    prediction = k2c.predict(model, x, "1,7,8")
    np.testing.assert_allclose(prediction.values, want, atol=0.01)
    assert np.array_equal(prediction.classes, np.argmax(want, axis=1))
    assert [a.shape for a in prediction.input_raw] == [(24, 6, 6, 1), (24, 3)]
    by_name = k2c.predict(model, {"side": x[1], "image": x[0]}, "1,7,8")
    np.testing.assert_array_equal(by_name.raw, prediction.raw)
    np.savez(tmp_path / "test.npz", x_image=x[0], x_side=x[1])
    from_file = k2c.predict(model, tmp_path / "test.npz", "1,7,8")
    np.testing.assert_array_equal(from_file.raw, prediction.raw)


def test_the_predict_command_reads_and_writes_each_input(tmp_path, capsys) -> None:
    model = image_and_side_features()
    model.save(tmp_path / "m.keras")
    x = _several(model, 5)
    np.savez(tmp_path / "test.npz", x_image=x[0], x_side=x[1])
    code, text = run_cli(
        ["predict", tmp_path / "m.keras", "--data", tmp_path / "test.npz", "--out", tmp_path / "p.npz"], capsys
    )
    assert code == 0, text
    out = np.load(tmp_path / "p.npz")
    np.testing.assert_array_equal(out["raw"], k2c.predict(model, x, "1,7,8").raw)
    assert out["input_raw_side"].shape == (5, 3) and str(out["input_format_image"]) == "1,7,8"
    np.savez(tmp_path / "bad.npz", x=x[1])
    code, text = run_cli(
        ["predict", tmp_path / "m.keras", "--data", tmp_path / "bad.npz", "--out", tmp_path / "q.npz"], capsys
    )
    assert code == 2 and "needs an array per model input (x_image, x_side)" in text, text


def test_the_dictionary_ir_keeps_every_input() -> None:
    """The rows name the inputs they read; read back, the graph has them in first-read order
    and the golden model of it is the model's."""
    from keras2clash.ir.graph import Graph
    from keras2clash.network import plan_network

    model = image_and_side_features()
    graph = Graph.from_dict(to_graph(model).to_dict(), name="again")
    assert graph.inputs == to_graph(model).inputs
    x = _several(model, 6)
    again = k2c.predict(plan_network(graph, "1,7,8", fifos=False), x)
    np.testing.assert_array_equal(again.raw, k2c.predict(model, x, "1,7,8").raw)


def test_each_input_takes_its_own_format() -> None:
    """`input_format` sets every input; a layer-format entry named after an input sets it alone."""
    model = image_and_side_features()
    x = _several(model, 4)
    both = k2c.predict(model, x, "1,7,8", input_format="1,1,10")
    assert [str(f) for f in both.input_formats] == ["1,1,10", "1,1,10"]
    side = k2c.predict(model, x, "1,7,8", layer_formats={"side": "1,2,12"})
    assert [str(f) for f in side.input_formats] == ["1,7,8", "1,2,12"]
    np.testing.assert_array_equal(side.input_raw[1], np.round(x[1] * 2**12))
    network = load_network(model, "1,7,8", layer_formats={"side": "1,2,12"}, fifos=False)
    assert network.plans[[p.name for p in network.plans].index("merge")].input_formats[1] == side.input_formats[1]


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 10_000), n_inputs=st.integers(2, 3), nodes=st.integers(0, 4))
def test_random_multi_input_graphs_golden_follows_keras_and_the_model_times_every_sample(seed, n_inputs, nodes) -> None:
    model = random_inputs(seed, n_inputs, nodes)
    x = _several(model, 8, seed)
    want = np.asarray(model.predict(x, verbose=0), dtype=np.float64)
    prediction = k2c.predict(model, x, "1,9,14")
    np.testing.assert_allclose(prediction.values, want, atol=0.03)
    plans = hwmodel.with_fifos(load_network(model, "1,7,8", fifos=False).plans)
    t = hwmodel.timing(plans, 3)
    assert len(t.accept_cycle) == len(t.output_cycle) == 3
    assert np.all(np.diff(t.accept_cycle) > 0) and np.all(t.output_cycle > t.accept_cycle)
    assert t.ii == hwmodel.timing(hwmodel.with_deep_branch_fifos(plans)).ii


def test_the_model_feeds_each_input_port_on_its_own() -> None:
    """Each port's beats back to back from the cycle after that port's previous beat moved;
    an image's beats port by port, with every join FIFO as deep as it holds beats in that
    order; a sample's accept cycle is the last port's first beat's (the Clash simulation's
    cycles: `test_two_inputs_bit_exact_in_clash_with_the_models_cycles`)."""
    plans = hwmodel.with_fifos(load_network(image_and_side_features(), "1,7,8", fifos=False).plans)
    assert [p.kind.branch_fifos(p) for p in plans if p.is_merge] == [(1, 1)]
    t = hwmodel.timing(plans, 4)
    assert list(t.accept_cycle) == [0, 36, 72, 108] and list(t.output_cycle) == [118, 154, 190, 226]
    assert t.ii == 36 == hwmodel.timing(hwmodel.with_deep_branch_fifos(plans)).ii


def test_the_options_of_several_inputs_equal_the_scalar_model() -> None:
    """`options` (the vectorised model) of two inputs with emit's FIFOs: each configuration's
    latency and II as `hwmodel.timing` has them, the default one's as the Clash simulation's
    (118, 36)."""
    from keras2clash.hw import options
    from keras2clash.hw.planner import make_plan
    from keras2clash.quant.formats import parse_format

    plans = hwmodel.with_fifos(make_plan(to_graph(image_and_side_features()), parse_format("1,7,8")))
    configs = options.all_configs(plans)
    many = hwmodel.figures_many(plans, configs)
    for (pes, cyc), fig in zip(configs, many):
        knobs = iter(zip(pes, cyc))
        t = hwmodel.timing([p.with_knobs(*next(knobs)) if p.is_compute else p for p in plans])
        assert (fig.latency, fig.ii) == (t.first_latency, t.ii)
    assert (118, 36) in {(f.latency, f.ii) for f in many}


def test_inputs_that_do_not_match_the_model_get_one_line() -> None:
    model = image_and_side_features()
    x = _several(model, 4)
    for bad, message in (
        (x[0], r"2 inputs \(image, side\): give one array per input"),
        (x[:1], r"2 inputs \(image, side\); 1 arrays were given"),
        ({"image": x[0], "sides": x[1]}, r"missing side"),
        ([x[0], x[1][:3]], r"different numbers of samples"),
    ):
        with pytest.raises(K2CError, match=message) as err:
            k2c.predict(model, bad, "1,7,8")
        assert "\n" not in str(err.value)


def test_automatic_formats_choose_a_format_per_input(tmp_path) -> None:
    """`--format auto` on a calibration set of `x_<input name>`: each input gets the fewest
    integer bits that hold its values (side features up to 6: three), nothing saturates, and
    the golden model follows Keras; the formats of a quantization-aware model stay refused."""
    model = image_and_side_features()
    x = _several(model, 64, seed=1)
    x[1] = x[1] * 6
    want = model.predict(x, verbose=0)
    np.savez(tmp_path / "calib.npz", x_image=x[0], x_side=x[1], y=np.argmax(want, axis=1))
    network = load_network(model, "auto", bits=12, calibration=tmp_path / "calib.npz", fifos=False)
    assert [(port.name, str(port.fmt)) for port in network_inputs(network.plans)] == [
        ("image", "1,0,11"),
        ("side", "1,3,8"),
    ]
    assert network.formats.auto.auto.saturated == 0
    assert [row.layer for row in network.formats.auto.auto.saturation[:2]] == ["input", "side"]
    prediction = k2c.predict(network, x)
    np.testing.assert_allclose(prediction.values, want, atol=0.01)
    assert np.array_equal(prediction.classes, np.argmax(want, axis=1))
    np.savez(tmp_path / "bad.npz", x=x[0])
    with pytest.raises(K2CError, match=r"needs an array per model input \(x_image, x_side\)") as err:
        load_network(model, "auto", bits=12, calibration=tmp_path / "bad.npz", fifos=False)
    assert "\n" not in str(err.value)


def test_the_profile_shows_a_row_per_input(tmp_path, capsys) -> None:
    model = image_and_side_features()
    model.save(tmp_path / "m.keras")
    x = _several(model, 16, seed=1)
    np.savez(tmp_path / "calib.npz", x_image=x[0], x_side=x[1] * 6)
    code, text = run_cli(["profile", tmp_path / "m.keras", "--data", tmp_path / "calib.npz", "-n", "8"], capsys)
    assert code == 0, text
    rows = {line.split("│")[1].strip(): line for line in text.splitlines() if line.count("│") > 5}
    assert " 288 " in rows["image"] and " 24 " in rows["side"]  # 8 samples of 36 and of 3 values
    assert rows["side"].rstrip("│ ").endswith("3")  # int bits of values up to 6


def test_one_slave_port_per_input(tmp_path) -> None:
    """Top.hs of two inputs: an `s<k>_axis` port, beat type and framing check per input, the
    network's tuple of input streams; a design of one input keeps its `s_axis` port."""
    api.emit(image_and_side_features(), "1,7,8", tmp_path / "net", layer_formats={"side": "1,2,12"}, show=False)
    top = (tmp_path / "net" / "Top.hs").read_text()
    for k, (beats, width, fmt) in enumerate([(36, 1, "Q1_7_8"), (1, 3, "Q1_2_12")]):
        assert f'PortName "s{k}_axis_tdata", PortName "s{k}_axis_tvalid", PortName "s{k}_axis_tlast"' in top
        assert f'PortName "s{k}_axis_tready"' in top
        assert f"type BeatsPerImage{k} = {beats}" in top and f"type BeatWidth{k} = {width}" in top
        assert f"type InputBeat{k} = Vec BeatWidth{k} {fmt}" in top
        assert f"axiSlave (SNat @BeatsPerImage{k}) sData{k} sValid{k} sLast{k} coreReady{k}" in top
    assert "tlastError = reduceOr <$> bundle (tlastError0 :> tlastError1 :> Nil)" in top
    assert 'PortName "m_axis_tdata"' in top and "s_axis_tdata" not in top
    network = (tmp_path / "net" / "Network.hs").read_text()
    assert "((input0, input1), (head_layer_port_ready)) =" in network
    assert "fifo d_merge_layer_1 (input1, merge_layer_moves)" in network
    api.emit(two_heads(), "1,7,8", tmp_path / "one", show=False)
    assert 'PortName "s_axis_tdata"' in (tmp_path / "one" / "Top.hs").read_text()


def test_a_layer_named_like_a_stream_of_the_wiring_is_refused(tmp_path) -> None:
    """`input1` names the second input's stream, `trunk_out` the stream of layer `trunk`:
    one line each."""
    import keras
    from keras import layers

    a, b = keras.Input((3,), name="a"), keras.Input((2,), name="b")
    out = layers.Dense(2, name="head")(layers.Concatenate(name="cat")([layers.Dense(2, name="input1")(a), b]))
    with pytest.raises(K2CError, match="the stream name 'input1' of the network's wiring is also a layer's name"):
        api.emit(keras.Model([a, b], out), "1,7,8", tmp_path / "two", show=False)
    x = keras.Input((3,))
    trunk = layers.Dense(2, name="trunk")(x)
    heads = [layers.Dense(2, name="trunk_out")(trunk), layers.Dense(1, name="two")(trunk)]
    with pytest.raises(K2CError, match="the stream name 'trunk_out'"):
        api.emit(keras.Model(x, heads), "1,7,8", tmp_path / "one", show=False)


def test_a_design_of_one_input_keeps_its_modules_byte_for_byte(tmp_path) -> None:
    """The modules of the iris example (one input, one output) and of two_heads (one input,
    two outputs), the version line aside, as the digests pinned here: the ports of several
    inputs leave a design of one input as it is."""
    import hashlib

    from keras2clash.version import __version__

    def digests(root: Path) -> dict[str, str]:
        texts = {f: (root / f).read_text().replace(__version__, "VERSION") for f in ("Top.hs", "Sim.hs", "Network.hs")}
        return {f: hashlib.sha256(t.encode()).hexdigest()[:16] for f, t in texts.items()}

    api.emit(EXAMPLES / "iris" / "iris.keras", "1,7,8", tmp_path / "iris", show=False)
    api.emit(two_heads(), "1,7,8", tmp_path / "two_heads", show=False)
    assert digests(tmp_path / "iris") == IRIS_DIGESTS
    assert digests(tmp_path / "two_heads") == TWO_HEADS_DIGESTS


@pytest.mark.toolchain
@needs_toolchain
def test_two_inputs_bit_exact_in_clash_with_the_models_cycles(tmp_path, capsys) -> None:
    """One Clash build (`keras2clash run`): golden == Clash simulation back to back and under
    per-port input gaps and output stalls; accept and output cycles as the hardware model
    has them; `keras2clash simulate` on the test set of `x_image`, `x_side` and `y`."""
    model = image_and_side_features()
    model.save(tmp_path / "m.keras")
    x = _several(model, 6, seed=2)
    labels = np.argmax(model.predict(x, verbose=0), axis=1)
    data = tmp_path / "test.npz"
    np.savez(data, x_image=x[0], x_side=x[1], y=labels)
    args = [tmp_path / "m.keras", "--data", data, "-f", "1,7,8", "--layer-format", "side:1,2,12"]
    code, text = run_cli(["run", *args, "--out", tmp_path / "net", "--verilog"], capsys)
    assert code == 0, text
    assert "6/6" in text, text
    project = load_project(tmp_path / "net")
    assert [port.fmt.frac for port in network_inputs(project.plans)] == [8, 12]
    x_raw = golden.quantize_inputs(project.plans, x)
    values, classes = golden.predict(project.plans, project.params, x_raw)
    exe = toolchain.build_simulator(project.root)
    t = hwmodel.timing(project.plans, len(labels))
    for extra in ([], ["--gap-max", "4", "--seed", "3"]):
        (sim,) = run_simulator_heads(exe, project.root, x_raw, [(3, True)], extra)
        assert np.array_equal(sim.outputs, values) and np.array_equal(sim.classes, classes)
        if not extra:
            assert np.array_equal(sim.accept_cycle, t.accept_cycle)
            assert np.array_equal(sim.output_cycle, t.output_cycle)
    assert list(t.accept_cycle) == [0, 36, 72, 108, 144, 180]
    code, text = run_cli(["simulate", tmp_path / "net", "--data", data, "--gap-max", "4"], capsys)
    assert code == 0 and "6/6" in text, text
    with pytest.raises(K2CError, match="needs an array per model input .*x_side"):
        np.savez(tmp_path / "bad.npz", x_image=x[0], y=labels)
        api.simulate(tmp_path / "net", tmp_path / "bad.npz", show=False)
    tb = api.testbench(tmp_path / "net", data, 3)
    assert len((tb / "input_0.hex").read_text().split()) == 3 * 36
    assert len((tb / "input_1.hex").read_text().split()) == 3 and not (tb / "input.hex").exists()


def test_the_testbenches_feed_every_input_port(tmp_path) -> None:
    """tb.v and tb.vhdl of two inputs: an input_<j>.hex, a set of signals and an idle-cycle
    seed per slave port (the seed xor 0x2545f491 * j, as K2C.Sim.inputSeed), one master port
    `m_axis`; an image's accept cycle is the latest of its ports' first beats."""
    model = image_and_side_features()
    api.emit(model, "1,7,8", tmp_path / "net", layer_formats={"side": "1,2,12"}, show=False)
    x = _several(model, 3)
    tb = testbench.write_heads_testbench(tmp_path / "net", x, gap_max=2, seed=5)
    assert [(s.beats, s.beat_width, s.in_bits) for s in tb.inputs] == [(36, 1, 16), (1, 3, 15)]
    side = (tb.directory / "input_1.hex").read_text().split()
    raw = np.round(x[1] * 2**12).astype(np.int64)
    assert int(side[0], 16) == testbench.pack_values(raw[0], 15) | 1 << 45  # tlast on the one beat
    verilog, vhdl = (tb.directory / "tb.v").read_text(), (tb.directory / "tb.vhdl").read_text()
    for j in (0, 1):
        assert f".s{j}_axis_tdata(s{j}_tdata)" in verilog and f"s{j}_axis_tready => s{j}_tready" in vhdl
        assert f'input_{j}.hex"' in verilog and f'input_{j}.hex", read_mode' in vhdl
    assert "SEED ^ 64'h2545f491;" in verilog and 'x"000000002545f491"' in vhdl
    assert ".m_axis_tready(m0_axis_tready)" in verilog and "m_axis_tdata => m0_axis_tdata" in vhdl
    assert "cycle > accept[beat1 / K1]" in verilog


@pytest.mark.slow
@pytest.mark.toolchain
@needs_toolchain
def test_verilator_and_ghdl_run_every_input_port(tmp_path) -> None:
    """The testbenches of two inputs in Verilator and GHDL: every sample PASS, with the Clash
    simulation's accept and output cycles under the same per-port gaps and stalls."""
    model = image_and_side_features()
    api.emit(model, "1,7,8", tmp_path / "net", show=False)
    project = load_project(tmp_path / "net")
    x = _several(model, 4, seed=1)
    x_raw = golden.quantize_inputs(project.plans, x)
    exe = toolchain.build_simulator(project.root)
    (sim,) = run_simulator_heads(exe, project.root, x_raw, [(3, True)], ["--gap-max", "4", "--seed", "3"])
    tb = testbench.write_heads_testbench(project.root, x, gap_max=4, seed=3)
    for simulator in ("verilator", "ghdl"):
        rtl = rtlsim.run_heads_testbench(project, simulator, tb)
        assert rtl.ok and rtl.passed[0].all() and len(rtl.passed[0]) == 4, rtl.messages
        assert np.array_equal(rtl.accept_cycle[0], sim.accept_cycle)
        assert np.array_equal(rtl.output_cycle[0], sim.output_cycle)


def test_trace_compares_every_input_and_layer_with_keras() -> None:
    model = image_and_side_features()
    trace = k2c.trace(model, _several(model, 6), "1,9,14")
    assert [row.name for row in trace.layers[:2]] == ["image", "side"]
    assert [row.keras_layer for row in trace.layers[:2]] == ["image", "side"]
    assert trace.samples == 6
    assert all(row.stats is not None and row.stats.max_abs < 0.01 for row in trace.layers)


def test_a_nested_model_of_several_inputs_and_an_unread_input_are_refused() -> None:
    import keras
    from keras import layers

    a, b = keras.Input((3,), name="a"), keras.Input((2,), name="b")
    inner = keras.Model([a, b], layers.Concatenate()([a, b]), name="inner")
    x = keras.Input((3,), name="x")
    with pytest.raises(K2CError, match="nested model 'inner' takes 2 inputs; one is supported"):
        to_graph(keras.Model(x, layers.Dense(2)(inner([x, layers.Dense(2)(x)]))))
    with pytest.raises(K2CError, match="input 'b' is read by no layer"):
        to_graph(keras.Model([a, b], layers.Dense(2)(a)))


def _clash_inputs(model, tmp_path, seed: int = 0) -> None:
    """A model of several inputs in Clash: every output port equals the golden model, back to
    back (with the hardware model's cycles) and under per-port gaps and stalls."""
    api.emit(model, "1,7,8", tmp_path / "net", show=False)
    project = load_project(tmp_path / "net")
    assert_ports_match_golden(project, golden.quantize_inputs(project.plans, _several(model, 5, seed)), seed)


@pytest.mark.slow
@pytest.mark.toolchain
@needs_toolchain
@pytest.mark.parametrize("build", [images_joined_per_pixel, inputs_to_two_outputs])
def test_several_inputs_bit_exact_in_clash(build, tmp_path) -> None:
    _clash_inputs(build(), tmp_path, seed=3)


@pytest.mark.slow
@pytest.mark.toolchain
@needs_toolchain
@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 10_000), n_inputs=st.integers(2, 3), nodes=st.integers(0, 4))
def test_random_multi_input_graphs_bit_exact_in_clash(tmp_path_factory, seed, n_inputs, nodes) -> None:
    _clash_inputs(random_inputs(seed, n_inputs, nodes), tmp_path_factory.mktemp("inputs"), seed)


# --- the example: an image and its ink profile, two inputs -----------------------------------

SIDE = Path(__file__).resolve().parent.parent / "examples" / "digits_side"


def test_the_two_input_example_follows_keras_on_its_test_set() -> None:
    """At the default format the golden model classifies all 360 test samples as Keras does
    (350 right), each input in its own format."""
    import keras

    data = np.load(SIDE / "test.npz")
    x = {"image": data["x_image"], "profile": data["x_profile"]}
    prediction = k2c.predict(SIDE / "digits_side.keras", x)
    scores = keras.models.load_model(SIDE / "digits_side.keras").predict([x["image"], x["profile"]], verbose=0)
    assert np.array_equal(prediction.classes, np.argmax(scores, axis=1))
    assert np.sum(prediction.classes == data["y"]) == 350
    assert np.max(np.abs(prediction.values - scores)) < 0.01


@pytest.mark.slow
@needs_toolchain
def test_the_two_input_example_whole_test_set_in_clash_and_verilator(tmp_path) -> None:
    """Every sample bit-exact in the Clash simulation under per-port gaps and output stalls,
    and in Verilator's testbench of both slave ports."""
    api.emit(SIDE / "digits_side.keras", "1,7,8", tmp_path / "net", show=False)
    result = api.simulate(tmp_path / "net", SIDE / "test.npz", gap_max=3, show=False)
    assert result.bit_exact == 360
    assert result.sim_accuracy == result.keras_float_accuracy == 350 / 360
    rtl = api.rtlsim(tmp_path / "net", SIDE / "test.npz", "verilator", gap_max=3, show=False)
    assert rtl.ok and [int(np.sum(port)) for port in rtl.passed] == [360]
