"""Tests of keras2clash.frontend: every load route, every accepted and rejected layer rule."""

from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path
from typing import Any, Callable

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from keras import layers  # noqa: E402

from keras2clash.errors import K2CError  # noqa: E402
from keras2clash.frontend import (  # noqa: E402
    load_keras_model,
    parse,
    supported_layers,
    to_ir,
)

REPO = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------


def seq(input_shape: tuple[int | None, ...], *stack: layers.Layer, dtype: str = "float32") -> keras.Model:
    return keras.Sequential([keras.Input(shape=input_shape, dtype=dtype), *stack])


def run_ir(ir: list[dict[str, Any]], x: np.ndarray) -> np.ndarray:
    """Float reference forward pass of the IR (softmax computed for real, for comparison)."""
    y = np.asarray(x, dtype=np.float64)
    for layer in ir:
        if layer["type"] == "flatten":
            y = y.reshape(len(y), -1)
            continue
        y = y @ layer["weights"]["kernel"] + layer["weights"]["bias"]
        if layer["activation"] == "relu":
            y = np.maximum(y, 0.0)
        elif layer["activation"] == "sigmoid":
            y = 1.0 / (1.0 + np.exp(-y))
        elif layer["activation"] == "softmax":
            e = np.exp(y - y.max(axis=1, keepdims=True))
            y = e / e.sum(axis=1, keepdims=True)
    return y


def assert_matches_keras(model: keras.Model, ir: list[dict[str, Any]]) -> None:
    rng = np.random.default_rng(7)
    x = rng.normal(size=(5, *model.inputs[0].shape[1:])).astype(np.float32)
    expected = np.asarray(model(x, training=False))
    np.testing.assert_allclose(run_ir(ir, x), expected, rtol=1e-4, atol=1e-5)


def assert_same_ir(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> None:
    """Identical IR: same metadata and bit-identical weight arrays."""
    assert len(a) == len(b)
    for la, lb in zip(a, b):
        assert {k: v for k, v in la.items() if k != "weights"} == {
            k: v for k, v in lb.items() if k != "weights"
        }
        assert sorted(la["weights"]) == sorted(lb["weights"])
        for key in la["weights"]:
            assert la["weights"][key].dtype == np.float64
            np.testing.assert_array_equal(la["weights"][key], lb["weights"][key])


def rejects(build: Callable[[], keras.Model], *fragments: str) -> str:
    """Assert `to_ir` raises K2CError whose message contains every fragment."""
    with pytest.raises(K2CError) as info:
        to_ir(build())
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    return message


# --------------------------------------------------------------------------------------
# The reference model, saved once per module in every supported format
# --------------------------------------------------------------------------------------


def build_reference() -> keras.Model:
    keras.utils.set_random_seed(3)
    return seq(
        (3, 4),
        layers.Flatten(name="flat"),
        layers.Dense(6, name="d1", kernel_regularizer="l2", kernel_constraint="max_norm"),
        layers.ReLU(name="act1"),
        layers.Dropout(0.5, name="drop"),
        layers.Dense(5, activation="sigmoid", name="d2", use_bias=False),
        layers.Dense(3, name="d3"),
        layers.Softmax(name="probs"),
    )


@pytest.fixture(scope="module")
def reference() -> keras.Model:
    model = build_reference()
    # non-trivial biases so a lost or zeroed bias is visible
    weights = model.get_weights()
    rng = np.random.default_rng(0)
    model.set_weights([w + rng.normal(scale=0.1, size=w.shape).astype(w.dtype) for w in weights])
    return model


@pytest.fixture(scope="module")
def reference_ir(reference: keras.Model) -> list[dict[str, Any]]:
    return to_ir(reference)


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory, reference: keras.Model) -> dict[str, Path]:
    """The reference model in every on-disk form the frontend reads."""
    root = tmp_path_factory.mktemp("saved")
    paths: dict[str, Path] = {}
    paths["keras"] = root / "model.keras"
    reference.save(paths["keras"])
    paths["h5"] = root / "model.h5"
    reference.save(paths["h5"])
    paths["hdf5"] = root / "model.hdf5"
    shutil.copy(paths["h5"], paths["hdf5"])
    pickled = pickle.dumps(reference.get_weights())

    beside = root / "beside"
    beside.mkdir()
    (beside / "net.json").write_text(reference.to_json())
    (beside / "net.pkl").write_bytes(pickled)
    paths["json_beside_pkl"] = beside / "net.json"

    beside2 = root / "beside_pickle"
    beside2.mkdir()
    (beside2 / "net.json").write_text(reference.to_json())
    (beside2 / "net.pickle").write_bytes(pickled)
    paths["json_beside_pickle"] = beside2 / "net.json"

    thesis = root / "thesis"  # the 2021 thesis layout: config.json + weights.pkl
    thesis.mkdir()
    (thesis / "config.json").write_text(reference.to_json())
    (thesis / "weights.pkl").write_bytes(pickled)
    paths["dir"] = thesis
    paths["json_weights_pkl"] = thesis / "config.json"

    explicit = root / "explicit"
    explicit.mkdir()
    (explicit / "arch.json").write_text(reference.to_json())
    (explicit / "params.bin").write_bytes(pickled)
    paths["json_explicit"] = explicit / "arch.json"
    paths["explicit_weights"] = explicit / "params.bin"
    return paths


# --------------------------------------------------------------------------------------
# Accepted: the reference model and every load route
# --------------------------------------------------------------------------------------


def test_reference_ir_structure(reference: keras.Model, reference_ir: list[dict[str, Any]]) -> None:
    ir = reference_ir
    assert [layer["type"] for layer in ir] == ["flatten", "dense", "dense", "dense"]
    assert [layer["name"] for layer in ir] == ["flat", "d1", "d2", "d3"]
    flat, d1, d2, d3 = ir
    assert flat == {
        "type": "flatten",
        "name": "flat",
        "input_shape": (3, 4),
        "output_shape": (12,),
        "activation": "linear",
        "use_bias": False,
        "weights": {},
        "fused": [],
    }
    assert (d1["input_shape"], d1["output_shape"]) == ((12,), (6,))
    assert (d1["activation"], d1["fused"], d1["use_bias"]) == ("relu", ["act1"], True)
    assert (d2["activation"], d2["fused"], d2["use_bias"]) == ("sigmoid", [], False)
    np.testing.assert_array_equal(d2["weights"]["bias"], np.zeros(5))
    assert (d3["activation"], d3["fused"], d3["output_shape"]) == ("softmax", ["probs"], (3,))
    for layer in (d1, d2, d3):
        assert layer["weights"]["kernel"].dtype == np.float64
        assert layer["weights"]["kernel"].shape == (layer["input_shape"][0], layer["output_shape"][0])
        assert layer["weights"]["bias"].shape == layer["output_shape"]
        assert isinstance(layer["input_shape"], tuple) and isinstance(layer["output_shape"], tuple)
    np.testing.assert_array_equal(
        d1["weights"]["kernel"], np.asarray(reference.get_layer("d1").kernel, dtype=np.float64)
    )
    np.testing.assert_array_equal(
        d3["weights"]["bias"], np.asarray(reference.get_layer("d3").bias, dtype=np.float64)
    )
    assert_matches_keras(reference, ir)


@pytest.mark.parametrize(
    "route",
    ["keras", "h5", "hdf5", "json_beside_pkl", "json_beside_pickle", "json_weights_pkl", "dir", "json_explicit"],
)
def test_every_load_route_gives_identical_ir(
    route: str, saved: dict[str, Path], reference_ir: list[dict[str, Any]]
) -> None:
    weights = saved["explicit_weights"] if route == "json_explicit" else None
    assert_same_ir(parse(saved[route], weights=weights), reference_ir)


def test_str_paths_and_in_memory_model(saved: dict[str, Path], reference: keras.Model, reference_ir: list[dict[str, Any]]) -> None:
    assert load_keras_model(reference) is reference
    assert_same_ir(parse(reference), reference_ir)
    assert_same_ir(parse(str(saved["keras"])), reference_ir)
    assert_same_ir(parse(str(saved["json_explicit"]), weights=str(saved["explicit_weights"])), reference_ir)


def test_explicit_weights_override_the_file_beside(tmp_path: Path, saved: dict[str, Path], reference: keras.Model) -> None:
    shutil.copy(saved["json_beside_pkl"], tmp_path / "net.json")
    shutil.copy(saved["json_beside_pkl"].with_suffix(".pkl"), tmp_path / "net.pkl")
    doubled = [2 * w for w in reference.get_weights()]
    (tmp_path / "other.pkl").write_bytes(pickle.dumps(doubled))
    ir = parse(tmp_path / "net.json", weights=tmp_path / "other.pkl")
    np.testing.assert_array_equal(
        ir[1]["weights"]["kernel"], 2 * np.asarray(reference.get_layer("d1").kernel, dtype=np.float64)
    )


KERAS2_THESIS_CONFIG = {
    "class_name": "Sequential",
    "config": {
        "name": "sequential",
        "layers": [
            {"class_name": "InputLayer", "config": {"batch_input_shape": [None, 64], "dtype": "float32", "sparse": False, "ragged": False, "name": "dense_input"}},
            {"class_name": "Dense", "config": {"name": "dense", "trainable": True, "dtype": "float32", "units": 39, "activation": "relu", "use_bias": True, "kernel_initializer": {"class_name": "GlorotUniform", "config": {"seed": None}}, "bias_initializer": {"class_name": "Zeros", "config": {}}, "kernel_regularizer": None, "bias_regularizer": None, "activity_regularizer": None, "kernel_constraint": None, "bias_constraint": None}},
            {"class_name": "Dropout", "config": {"name": "dropout", "trainable": True, "dtype": "float32", "rate": 0.2, "noise_shape": None, "seed": None}},
            {"class_name": "Dense", "config": {"name": "dense_1", "trainable": True, "dtype": "float32", "units": 10, "activation": "sigmoid", "use_bias": True, "kernel_initializer": {"class_name": "GlorotUniform", "config": {"seed": None}}, "bias_initializer": {"class_name": "Zeros", "config": {}}, "kernel_regularizer": None, "bias_regularizer": None, "activity_regularizer": None, "kernel_constraint": None, "bias_constraint": None}},
        ],
    },
    "keras_version": "2.4.0",
    "backend": "tensorflow",
}


def test_keras2_thesis_json_config(tmp_path: Path) -> None:
    """A Keras 2 `model.to_json()` (no "module" keys), as the 2021 thesis stored it."""
    (tmp_path / "config.json").write_text(json.dumps(KERAS2_THESIS_CONFIG))
    rng = np.random.default_rng(1)
    arrays = [rng.normal(size=s).astype(np.float32) for s in [(64, 39), (39,), (39, 10), (10,)]]
    (tmp_path / "weights.pkl").write_bytes(pickle.dumps(arrays))
    ir = parse(tmp_path)
    assert [(l["name"], l["activation"], l["input_shape"], l["output_shape"]) for l in ir] == [
        ("dense", "relu", (64,), (39,)),
        ("dense_1", "sigmoid", (39,), (10,)),
    ]
    np.testing.assert_array_equal(ir[0]["weights"]["kernel"], arrays[0].astype(np.float64))
    np.testing.assert_array_equal(ir[1]["weights"]["bias"], arrays[3].astype(np.float64))


@pytest.mark.parametrize("example", ["iris/iris.keras", "digits_dense/digits_dense.keras"])
def test_shipped_examples_parse(example: str) -> None:
    path = REPO / "examples" / example
    if not path.exists():
        pytest.skip(f"{path} not trained yet")
    ir = parse(path)
    assert all(layer["type"] == "dense" for layer in ir)
    assert ir[-1]["activation"] in ("softmax", "sigmoid")
    data = np.load(path.parent / "test.npz")
    assert data["x"].dtype == np.float32 and data["y"].dtype == np.int64
    assert data["x"].shape[1:] == ir[0]["input_shape"]
    accuracy = np.mean(np.argmax(run_ir(ir, data["x"]), axis=1) == data["y"])
    assert accuracy > 0.9


# --------------------------------------------------------------------------------------
# Accepted: removal, fusion, flatten, functional chains
# --------------------------------------------------------------------------------------


IDENTITIES: dict[str, Callable[[str], layers.Layer]] = {
    "dropout0": lambda n: layers.Dropout(0.0, name=n),
    "dropout0.5": lambda n: layers.Dropout(0.5, name=n),
    "dropout0.99": lambda n: layers.Dropout(0.99, name=n),
    "gaussian_noise": lambda n: layers.GaussianNoise(1.0, name=n),
    "gaussian_dropout": lambda n: layers.GaussianDropout(0.3, name=n),
    "alpha_dropout": lambda n: layers.AlphaDropout(0.3, name=n),
    "activity_regularization": lambda n: layers.ActivityRegularization(l1=0.1, name=n),
    "identity": lambda n: layers.Identity(name=n),
    "linear_activation": lambda n: layers.Activation("linear", name=n),
}


@pytest.mark.parametrize("identity", list(IDENTITIES.values()), ids=list(IDENTITIES))
def test_inference_identities_disappear(identity: Callable[[str], layers.Layer]) -> None:
    model = seq((4,), identity("n1"), layers.Dense(3, name="a"), identity("n2"), layers.Dense(2, name="b"), identity("n3"))
    ir = to_ir(model)
    assert [layer["name"] for layer in ir] == ["a", "b"]
    assert_matches_keras(model, ir)


def test_spatial_dropout_disappears() -> None:
    model = seq((3, 4), layers.SpatialDropout1D(0.5, name="sd"), layers.Flatten(name="f"), layers.Dense(2, name="d"))
    assert [layer["name"] for layer in to_ir(model)] == ["f", "d"]


def test_linear_activation_layer_is_recorded_as_fused() -> None:
    ir = to_ir(seq((4,), layers.Dense(3, activation="relu", name="d"), layers.Activation("linear", name="lin")))
    assert (ir[0]["activation"], ir[0]["fused"]) == ("relu", ["lin"])


@pytest.mark.parametrize(
    ("layer", "activation"),
    [
        (lambda: layers.Activation("relu", name="act"), "relu"),
        (lambda: layers.Activation("sigmoid", name="act"), "sigmoid"),
        (lambda: layers.Activation(keras.activations.relu, name="act"), "relu"),
        (lambda: layers.ReLU(name="act"), "relu"),
    ],
)
def test_activation_layers_fuse_into_linear_dense(layer: Callable[[], layers.Layer], activation: str) -> None:
    model = seq((4,), layers.Dense(3, name="d"), layer(), layers.Dense(2, name="out"))
    ir = to_ir(model)
    assert [(l["name"], l["activation"], l["fused"]) for l in ir] == [
        ("d", activation, ["act"]),
        ("out", "linear", []),
    ]
    assert_matches_keras(model, ir)


@pytest.mark.parametrize(
    "layer",
    [
        lambda: layers.Softmax(name="sm"),
        lambda: layers.Softmax(axis=1, name="sm"),
        lambda: layers.Activation("softmax", name="sm"),
    ],
)
def test_softmax_layer_fuses_at_the_output(layer: Callable[[], layers.Layer]) -> None:
    model = seq((4,), layers.Dense(3, name="d"), layers.Dropout(0.1, name="x"), layer())
    ir = to_ir(model)
    assert [(l["name"], l["activation"], l["fused"]) for l in ir] == [("d", "softmax", ["sm"])]
    assert_matches_keras(model, ir)


def test_dense_softmax_at_output_and_dropout_after_it() -> None:
    model = seq((4,), layers.Dense(3, activation="relu", name="h"), layers.Dense(2, activation="softmax", name="o"), layers.Dropout(0.3))
    ir = to_ir(model)
    assert [l["activation"] for l in ir] == ["relu", "softmax"]


def test_activation_fuses_across_dropout() -> None:
    ir = to_ir(seq((4,), layers.Dense(3, name="d"), layers.Dropout(0.5, name="dr"), layers.ReLU(name="r")))
    assert (ir[0]["activation"], ir[0]["fused"]) == ("relu", ["r"])


def test_flatten_rules() -> None:
    # consecutive Flattens merge; Flatten on 1-D data disappears (before and after Dense)
    model = seq(
        (2, 3, 4),
        layers.Flatten(name="f1"),
        layers.Flatten(name="f2"),
        layers.Dense(5, name="d"),
        layers.Flatten(name="f3"),
        layers.Dense(2, name="o"),
    )
    ir = to_ir(model)
    assert [(l["type"], l["name"], l["input_shape"], l["output_shape"]) for l in ir] == [
        ("flatten", "f1", (2, 3, 4), (24,)),
        ("dense", "d", (24,), (5,)),
        ("dense", "o", (5,), (2,)),
    ]
    assert_matches_keras(model, ir)
    one_d = to_ir(seq((4,), layers.Flatten(name="f"), layers.Dense(2, name="d")))
    assert [l["name"] for l in one_d] == ["d"]


def test_float64_input_is_accepted() -> None:
    ir = to_ir(seq((4,), layers.Dense(2, name="d"), dtype="float64"))
    assert ir[0]["input_shape"] == (4,)


def test_functional_chain_matches_sequential() -> None:
    keras.utils.set_random_seed(5)
    inp = keras.Input((2, 2), name="in")
    x = layers.Flatten(name="f")(inp)
    x = layers.Dense(3, name="d")(x)
    x = layers.ReLU(name="r")(x)
    x = layers.Dropout(0.2, name="dr")(x)
    out = layers.Dense(2, activation="softmax", name="o")(x)
    functional = keras.Model(inp, out)
    sequential = seq((2, 2), *[functional.get_layer(n) for n in ("f", "d", "r", "dr", "o")])
    assert_same_ir(to_ir(functional), to_ir(sequential))
    assert [l["name"] for l in to_ir(functional)] == ["f", "d", "o"]
    assert_matches_keras(functional, to_ir(functional))


def test_nested_sequential_is_inlined() -> None:
    inner = keras.Sequential([keras.Input((3,)), layers.Dense(2, name="inner_d"), layers.ReLU(name="inner_r")], name="inner")
    inp = keras.Input((4,))
    model = keras.Model(inp, inner(layers.Dense(3, name="outer_d")(inp)))
    ir = to_ir(model)
    assert [(l["name"], l["activation"], l["fused"]) for l in ir] == [
        ("outer_d", "linear", []),
        ("inner_d", "relu", ["inner_r"]),
    ]
    assert_matches_keras(model, ir)


def test_supported_layers_lists_the_registry() -> None:
    names = supported_layers()
    for name in ("Dense", "Flatten", "Dropout", "Activation", "ReLU", "Softmax"):
        assert name in names
    assert "Conv2D" not in names and names == sorted(names)


# --------------------------------------------------------------------------------------
# Rejected: activations
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("activation", ["tanh", "elu", "gelu", "swish", "leaky_relu", "selu", "softplus", "hard_sigmoid", "relu6"])
def test_dense_with_unsupported_activation(activation: str) -> None:
    rejects(
        lambda: seq((4,), layers.Dense(3, activation=activation, name="bad_dense")),
        "'bad_dense'",
        # Keras 3 names swish by its other name, silu
        f"activation '{ {'swish': 'silu'}.get(activation, activation) }'",
        "linear, relu, sigmoid, softmax",
    )


def test_dense_with_custom_activation_function() -> None:
    def my_act(x: Any) -> Any:
        return x * 2

    rejects(lambda: seq((4,), layers.Dense(3, activation=my_act, name="cd")), "'cd'", "'my_act'")


@pytest.mark.parametrize("activation", ["tanh", "elu", "gelu"])
def test_activation_layer_with_unsupported_function(activation: str) -> None:
    rejects(
        lambda: seq((4,), layers.Dense(3, name="d"), layers.Activation(activation, name="bad_act")),
        "'bad_act'",
        f"'{activation}'",
    )


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"max_value": 6.0}, "max_value=6.0"),
        ({"negative_slope": 0.1}, "negative_slope=0.1"),
        ({"threshold": 0.5}, "threshold=0.5"),
    ],
)
def test_relu_with_non_default_arguments(kwargs: dict[str, float], fragment: str) -> None:
    rejects(lambda: seq((4,), layers.Dense(3, name="d"), layers.ReLU(name="capped", **kwargs)), "'capped'", fragment)


@pytest.mark.parametrize(
    "second",
    [
        lambda: layers.Activation("relu", name="act2"),
        lambda: layers.Activation("sigmoid", name="act2"),
        lambda: layers.ReLU(name="act2"),
        lambda: layers.Softmax(name="act2"),
    ],
)
def test_activation_after_nonlinear_dense(second: Callable[[], layers.Layer]) -> None:
    rejects(
        lambda: seq((4,), layers.Dense(3, activation="relu", name="d"), second()),
        "'act2'",
        "Dense layer 'd'",
        "already applies 'relu'",
    )


def test_two_activation_layers_in_a_row() -> None:
    rejects(
        lambda: seq((4,), layers.Dense(3, name="d"), layers.ReLU(name="r1"), layers.Activation("sigmoid", name="s2")),
        "'s2'",
        "already applies 'relu'",
    )


def test_activation_with_no_dense_before_it() -> None:
    rejects(lambda: seq((4,), layers.ReLU(name="first"), layers.Dense(2, name="d")), "'first'", "model input", "not a Dense")
    rejects(
        lambda: seq((2, 2), layers.Flatten(name="f"), layers.Activation("sigmoid", name="sig"), layers.Dense(2)),
        "'sig'",
        "flatten layer 'f'",
        "not a Dense",
    )


def test_softmax_not_at_the_output() -> None:
    for build in (
        lambda: seq((4,), layers.Dense(3, activation="softmax", name="mid"), layers.Dense(2, name="o")),
        lambda: seq((4,), layers.Dense(3, name="mid"), layers.Softmax(name="sm"), layers.Dense(2, name="o")),
    ):
        rejects(build, "'mid'", "softmax", "only supported at the output", "argmax")


def test_softmax_over_a_non_last_axis() -> None:
    rejects(lambda: seq((4,), layers.Dense(3, name="d"), layers.Softmax(axis=0, name="sm0")), "'sm0'", "axis 0", "last axis")


# --------------------------------------------------------------------------------------
# Rejected: layers, shapes, graphs, inputs
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "cls", "name"),
    [
        (lambda: seq((8, 8, 1), layers.Conv2D(2, 3, name="conv"), layers.Flatten(), layers.Dense(2)), "Conv2D", "conv"),
        (lambda: seq((8, 8, 1), layers.MaxPooling2D(name="pool"), layers.Flatten(), layers.Dense(2)), "MaxPooling2D", "pool"),
        (lambda: seq((4,), layers.BatchNormalization(name="bn"), layers.Dense(2)), "BatchNormalization", "bn"),
        (lambda: seq((5, 3), layers.LSTM(4, name="lstm"), layers.Dense(2)), "LSTM", "lstm"),
        (lambda: seq((4,), layers.Lambda(lambda t: t * 2, name="lam"), layers.Dense(2)), "Lambda", "lam"),
        (lambda: seq((4,), layers.Dense(3), layers.LeakyReLU(name="leaky")), "LeakyReLU", "leaky"),
        (lambda: seq((2, 3), layers.Reshape((6,), name="resh"), layers.Dense(2)), "Reshape", "resh"),
    ],
)
def test_unsupported_layer_classes(build: Callable[[], keras.Model], cls: str, name: str) -> None:
    message = rejects(build, f"unsupported layer {cls} '{name}'", "supported layers:", "Dense", "Flatten")
    assert message.count("\n") == 0


def test_subclass_of_a_supported_layer_is_not_trusted() -> None:
    class DoubledDense(layers.Dense):
        def call(self, inputs: Any) -> Any:
            return super().call(inputs) * 2

    rejects(lambda: seq((4,), DoubledDense(2, name="dd")), "unsupported layer DoubledDense 'dd'")


def test_dense_on_rank_2_input() -> None:
    rejects(lambda: seq((3, 4), layers.Dense(2, name="d2d")), "'d2d'", "(3, 4)", "add a Flatten before it")


def test_flatten_channels_first() -> None:
    rejects(
        lambda: seq((2, 3), layers.Flatten(data_format="channels_first", name="fcf"), layers.Dense(2)),
        "'fcf'",
        "channels_first",
    )


def test_model_without_dense() -> None:
    rejects(lambda: keras.Sequential([keras.Input((4,)), layers.Dropout(0.1)], name="nodense"), "'nodense'", "no Dense layer")
    rejects(lambda: keras.Sequential([keras.Input((2, 2)), layers.Flatten()], name="flatonly"), "no Dense layer")


@pytest.mark.parametrize("dtype", ["int32", "uint8", "bool"])
def test_non_float_input(dtype: str) -> None:
    rejects(lambda: seq((4,), layers.Dense(2), dtype=dtype), f"dtype {dtype}", "only float")


def test_unknown_input_dimension() -> None:
    rejects(lambda: seq((None, 4), layers.Flatten()), "(None, None, 4)", "must be known")


def test_unbuilt_model() -> None:
    rejects(lambda: keras.Sequential([layers.Dense(2)], name="unbuilt"), "'unbuilt'", "not built")


def test_merge_is_rejected() -> None:
    def build() -> keras.Model:
        inp = keras.Input((4,))
        a = layers.Dense(3, name="a")(inp)
        b = layers.Dense(3, name="b")(a)
        return keras.Model(inp, layers.Add(name="merge")([a, b]))

    rejects(build, "'merge'", "takes 2 inputs", "single chain")


def test_multiple_inputs_and_outputs_are_rejected() -> None:
    def two_inputs() -> keras.Model:
        i1, i2 = keras.Input((2,), name="i1"), keras.Input((2,), name="i2")
        return keras.Model([i1, i2], layers.Dense(1)(layers.Concatenate(name="cat")([i1, i2])))

    def two_outputs() -> keras.Model:
        inp = keras.Input((2,))
        h = layers.Dense(3, name="h")(inp)
        return keras.Model(inp, [layers.Dense(1, name="o1")(h), layers.Dense(1, name="o2")(h)])

    rejects(two_inputs, "2 inputs", "exactly one")
    rejects(two_outputs, "2 outputs", "exactly one")


def test_functional_op_is_rejected() -> None:
    def build() -> keras.Model:
        inp = keras.Input((4,))
        return keras.Model(inp, keras.ops.multiply(layers.Dense(3, name="d")(inp), 2.0))

    rejects(build, "unsupported layer Multiply")


def test_dropout_called_in_training_mode() -> None:
    def build() -> keras.Model:
        inp = keras.Input((4,))
        return keras.Model(inp, layers.Dense(2)(layers.Dropout(0.5, name="mc")(inp, training=True)))

    rejects(build, "'mc'", "training=True")


def test_shared_layer_is_rejected() -> None:
    def build() -> keras.Model:
        inp = keras.Input((3,))
        shared = layers.Dense(3, name="shared")
        return keras.Model(inp, shared(shared(inp)))

    rejects(build, "shared", "more than once")


def test_subclassed_model_is_rejected() -> None:
    class Net(keras.Model):
        def __init__(self) -> None:
            super().__init__(name="subnet")
            self.d = layers.Dense(2)

        def call(self, x: Any) -> Any:
            return self.d(x)

    def build() -> keras.Model:
        net = Net()
        net(np.zeros((1, 4), dtype=np.float32))
        return net

    rejects(build, "'subnet'", "subclassed Net", "only Sequential and functional")


def test_non_model_argument() -> None:
    with pytest.raises(K2CError, match="expected a keras.Model, got Dense"):
        to_ir(layers.Dense(2))  # type: ignore[arg-type]
    with pytest.raises(K2CError, match="got int"):
        load_keras_model(42)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------
# Rejected: files
# --------------------------------------------------------------------------------------


def load_error(source: Any, weights: Any = None) -> str:
    with pytest.raises(K2CError) as info:
        load_keras_model(source, weights=weights)
    return str(info.value)


def test_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.keras"
    message = load_error(missing)
    assert "not found" in message and str(missing) in message


def test_unknown_extension(tmp_path: Path) -> None:
    path = tmp_path / "model.onnx"
    path.write_bytes(b"x")
    message = load_error(path)
    assert "unknown model file extension '.onnx'" in message and str(path) in message


def test_garbage_keras_file(tmp_path: Path) -> None:
    path = tmp_path / "garbage.keras"
    path.write_bytes(os.urandom(500))
    message = load_error(path)
    assert "corrupt .keras file" in message and "not a zip" in message and str(path) in message


def test_truncated_keras_file(tmp_path: Path, saved: dict[str, Path]) -> None:
    data = saved["keras"].read_bytes()
    path = tmp_path / "cut.keras"
    path.write_bytes(data[: len(data) // 2])
    message = load_error(path)
    assert "corrupt .keras file" in message and str(path) in message


def test_zip_that_is_not_a_keras_archive(tmp_path: Path) -> None:
    import zipfile

    path = tmp_path / "other.keras"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("readme.txt", "hello")
    assert "holds no config.json" in load_error(path)


def test_keras_archive_with_broken_weights(tmp_path: Path, saved: dict[str, Path]) -> None:
    import zipfile

    path = tmp_path / "broken.keras"
    with zipfile.ZipFile(saved["keras"]) as src, zipfile.ZipFile(path, "w") as dst:
        for item in src.namelist():
            data = src.read(item)
            dst.writestr(item, data[:100] if item.endswith(".h5") else data)
    message = load_error(path)
    assert "cannot load Keras model" in message and str(path) in message and "\n" not in message


def test_garbage_and_truncated_h5(tmp_path: Path, saved: dict[str, Path]) -> None:
    garbage = tmp_path / "garbage.h5"
    garbage.write_bytes(os.urandom(300))
    message = load_error(garbage)
    assert "corrupt HDF5 file" in message and str(garbage) in message

    data = saved["h5"].read_bytes()
    for cut in (len(data) // 2, 4000, 100):
        truncated = tmp_path / f"cut{cut}.h5"
        truncated.write_bytes(data[:cut])
        message = load_error(truncated)
        assert str(truncated) in message
        assert "corrupt HDF5 file" in message


def test_weights_only_h5(tmp_path: Path, reference: keras.Model) -> None:
    path = tmp_path / "model.weights.h5"
    reference.save_weights(path)
    message = load_error(path)
    assert "no model architecture" in message and str(path) in message


def test_broken_json(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"class_name": "Sequential", "config": ')
    message = load_error(path)
    assert "bad JSON config" in message and "line 1" in message and str(path) in message


def test_json_that_is_not_a_model_config(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text("[1, 2, 3]")
    assert "not a Keras model config" in load_error(path)
    path.write_bytes(b"\xff\xfe\x00garbage")
    assert "not UTF-8" in load_error(path)


def test_json_with_unknown_layer_class(tmp_path: Path, reference: keras.Model) -> None:
    config = json.loads(reference.to_json())
    config["config"]["layers"][2]["class_name"] = "FancyLayer"
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    (tmp_path / "weights.pkl").write_bytes(pickle.dumps(reference.get_weights()))
    message = load_error(path)
    assert "cannot rebuild a model from JSON config" in message and "FancyLayer" in message


def test_json_without_input_shape(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(keras.Sequential([layers.Dense(2)]).to_json())
    assert "defines no input shape" in load_error(path)


def test_json_without_weights(tmp_path: Path, saved: dict[str, Path]) -> None:
    path = tmp_path / "lonely.json"
    shutil.copy(saved["json_beside_pkl"], path)
    message = load_error(path)
    assert "no weights found" in message and str(path) in message
    assert "lonely.pkl" in message and "weights.pkl" in message


def test_explicit_weights_file_missing(tmp_path: Path, saved: dict[str, Path]) -> None:
    missing = tmp_path / "nothing.pkl"
    message = load_error(saved["json_explicit"], weights=missing)
    assert "weights file not found" in message and str(missing) in message


@pytest.mark.parametrize(
    ("payload", "fragments"),
    [
        (b"this is not a pickle", ["cannot read weights pickle"]),
        (pickle.dumps([np.zeros(3)])[:-5], ["cannot read weights pickle"]),
        (pickle.dumps({"kernel": np.zeros(3)}), ["holds a dict", "get_weights()"]),
        (pickle.dumps(["abc"]), ["entry 0 is not a numeric array"]),
    ],
)
def test_bad_weight_pickles(tmp_path: Path, saved: dict[str, Path], payload: bytes, fragments: list[str]) -> None:
    weights = tmp_path / "w.pkl"
    weights.write_bytes(payload)
    message = load_error(saved["json_explicit"], weights=weights)
    assert str(weights) in message
    for fragment in fragments:
        assert fragment in message


def test_weight_pickle_with_wrong_count(tmp_path: Path, saved: dict[str, Path], reference: keras.Model) -> None:
    weights = tmp_path / "w.pkl"
    weights.write_bytes(pickle.dumps(reference.get_weights()[:-1]))
    n = len(reference.get_weights())
    message = load_error(saved["json_explicit"], weights=weights)
    assert f"has {n - 1} arrays but the model config needs {n}" in message and str(weights) in message


def test_weight_pickle_with_wrong_shape(tmp_path: Path, saved: dict[str, Path], reference: keras.Model) -> None:
    arrays = reference.get_weights()
    arrays[2] = arrays[2].T  # d2 kernel (6, 5) -> (5, 6)
    weights = tmp_path / "w.pkl"
    weights.write_bytes(pickle.dumps(arrays))
    message = load_error(saved["json_explicit"], weights=weights)
    assert "array 2 has shape (5, 6)" in message and "needs (6, 5)" in message and "d2" in message


def test_weights_argument_with_self_contained_sources(saved: dict[str, Path], reference: keras.Model) -> None:
    assert "only used with a JSON config" in load_error(saved["keras"], weights=saved["explicit_weights"])
    assert "only used with a JSON config" in load_error(reference, weights=saved["explicit_weights"])


def test_directory_without_config(tmp_path: Path) -> None:
    message = load_error(tmp_path)
    assert "holds no config.json" in message and str(tmp_path) in message
    (tmp_path / "saved_model.pb").write_bytes(b"")
    assert "SavedModel" in load_error(tmp_path)
