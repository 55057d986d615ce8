"""The same training in Keras float: the comparison the golden trainer is held to.

The same layers, the same initial weights (the golden trainer's, after quantization, so the
two start from one point), `keras.optimizers.SGD` with the same learning rate and momentum,
the same batch size and the same sample order each epoch. What differs is the arithmetic
alone: float32 against the formats of the golden trainer.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from keras2clash.train.golden import Epoch, Sgd
from keras2clash.train.net import TrainNet


def keras_model(net: TrainNet, weights: Sequence[tuple[np.ndarray, np.ndarray]], sgd: Sgd):  # type: ignore[no-untyped-def]
    import keras

    inputs = keras.Input((net.layers[0].n_in,))
    h = inputs
    for layer in net.layers:
        h = keras.layers.Dense(layer.n_out, activation=layer.activation, name=layer.name)(h)
    model = keras.Model(inputs, h, name=net.name)
    for layer, (w, b) in zip(net.layers, weights):
        model.get_layer(layer.name).set_weights([w.astype(np.float32), b.astype(np.float32)])
    loss = "sparse_categorical_crossentropy" if net.loss == "categorical_crossentropy" else "mse"
    metrics = ["accuracy"] if net.loss == "categorical_crossentropy" else []
    model.compile(
        optimizer=keras.optimizers.SGD(learning_rate=sgd.learning_rate, momentum=sgd.momentum),
        loss=loss,
        metrics=metrics,
    )
    return model


def keras_fit(
    net: TrainNet,
    weights: Sequence[tuple[np.ndarray, np.ndarray]],
    sgd: Sgd,
    x: np.ndarray,
    target: np.ndarray,
    orders: Sequence[np.ndarray],
    test: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[list[Epoch], list[tuple[np.ndarray, np.ndarray]]]:
    """Keras' epochs (running loss and accuracy, as `fit` reports them; test accuracy after
    each) and its final weights."""
    model = keras_model(net, weights, sgd)
    flat = np.asarray(x, dtype=np.float32).reshape(len(x), -1)
    out = []
    for e, order in enumerate(orders):
        hist = model.fit(flat[order], target[order], batch_size=sgd.batch, epochs=1, shuffle=False, verbose=0)
        loss = float(hist.history["loss"][-1])
        acc = float(hist.history["accuracy"][-1]) if "accuracy" in hist.history else float("nan")
        test_acc = None
        if test is not None and net.loss == "categorical_crossentropy":
            tx, ty = test
            pred = np.argmax(model.predict(np.asarray(tx, dtype=np.float32).reshape(len(tx), -1), verbose=0), axis=-1)
            test_acc = float(np.mean(pred == ty))
        out.append(Epoch(e + 1, loss, acc, test_acc))
    final = [
        tuple(np.asarray(v, dtype=np.float64) for v in model.get_layer(layer.name).get_weights())
        for layer in net.layers
    ]
    return out, final  # type: ignore[return-value]
