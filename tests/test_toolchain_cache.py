"""The object cache of the blocks: a second project compiles only its own modules, the cached
objects give the same simulator, and a changed block is compiled again."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from helpers import needs_toolchain, random_dense_model

pytestmark = [needs_toolchain, pytest.mark.toolchain]


def _compiled(project: Path) -> list[str]:
    log = (project / ".build" / "sim" / "ghc.log").read_text()
    return [line.split("Compiling")[1].split()[0] for line in log.splitlines() if " Compiling " in line]


def test_second_project_reuses_the_compiled_blocks(tmp_path: Path, monkeypatch) -> None:
    import keras2clash as k2c
    from keras2clash.backend.project import load_project
    from keras2clash.quant import golden
    from keras2clash.verify import toolchain
    from keras2clash.verify.simulate import run_simulator

    monkeypatch.setenv("K2C_CACHE_DIR", str(tmp_path / "cache"))
    model = random_dense_model([(6, "relu"), (3, "linear")], 5, seed=3)
    first = load_project(k2c.emit(model, "1,5,6", tmp_path / "a", show=False))
    second = load_project(k2c.emit(model, "1,5,6", tmp_path / "b", parallelism=[2, 3], show=False))

    toolchain.build_simulator(first.root)
    blocks = {name for name in _compiled(first.root) if name.startswith("K2C.")}
    assert {"K2C.Stream", "K2C.Engine", "K2C.Dense"} <= blocks
    cached = {entry.name.split("-")[0] for entry in (tmp_path / "cache" / "ghc").iterdir()}
    assert cached == {name.removeprefix("K2C.") for name in blocks}

    exe = toolchain.build_simulator(second.root)
    assert not [name for name in _compiled(second.root) if name.startswith("K2C.")]
    x = golden.quantize_inputs(second.plans, np.random.default_rng(0).uniform(-2, 2, (20, 5)))
    assert np.array_equal(
        run_simulator(exe, second.root, x, second.n_out).outputs, golden.run(second.plans, second.params, x)
    )

    # A block that differs from the cached one is compiled again, with its importers.
    third = load_project(k2c.emit(model, "1,5,6", tmp_path / "c", show=False))
    stream = third.root / "clash_lib" / "K2C" / "Stream.hs"
    stream.write_text(stream.read_text() + "\n-- a changed block\n")
    toolchain.build_simulator(third.root)
    rebuilt = set(_compiled(third.root))
    assert "K2C.Stream" in rebuilt and "K2C.Engine" in rebuilt and "K2C.Relu" not in rebuilt


def test_empty_cache_setting_turns_it_off(tmp_path: Path, monkeypatch) -> None:
    from keras2clash.verify import toolchain

    monkeypatch.setenv("K2C_CACHE_DIR", "")
    assert toolchain.cache_root() is None
    monkeypatch.delenv("K2C_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert toolchain.cache_root() == tmp_path / "keras2clash"
