"""keras2clash: a trained Keras network -> readable Clash -> Verilog/VHDL, verified bit-exact.

Python API (the CLI calls the same functions):

    import keras2clash as k2c
    k2c.emit("model.keras", "1,7,8", "build/net", parallelism=[1, 2, 5])
    design = k2c.DesignOptions.of("1,5,10", parallelism=[1, 2, 5], pipeline="auto@150")
    k2c.emit("model.keras", design, "build/net5")  # the same knobs as one record
    k2c.hdl("build/net", ["verilog", "vhdl"])
    comparison = k2c.simulate("build/net", "test.npz")
    out = k2c.predict(model, x, "1,7,8")          # golden model outputs, nothing written
    tr = k2c.trace(model, x, "1,7,8")             # every layer: fixed point vs Keras float
"""

import os as _os

# TensorFlow's C++ start-up chatter would drown the tool's own output; users can override.
_os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# oneDNN reorders float sums run to run; off, the Keras float rung is reproducible.
_os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

from keras2clash.api import emit, hdl, run, simulate  # noqa: E402
from keras2clash.debug import Prediction, predict, trace  # noqa: E402
from keras2clash.design import DesignOptions  # noqa: E402
from keras2clash.errors import K2CError  # noqa: E402
from keras2clash.quant.formats import FixedFormat, parse_format  # noqa: E402
from keras2clash.version import __version__  # noqa: E402

__all__ = [
    "DesignOptions",
    "FixedFormat",
    "K2CError",
    "Prediction",
    "emit",
    "hdl",
    "parse_format",
    "predict",
    "run",
    "simulate",
    "trace",
    "__version__",
]
