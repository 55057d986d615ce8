"""Writable weights (`--writable-weights`, K2C.WeightBus): the weight port's messages, a reload
of every weight memory between two images in the Clash simulation and in Verilator (outputs
bit-exact with the golden model of the design's weights before the reload and of the new
weights after it, under random gaps and stalls), the memories read back through the port of
a design emitted with `--readable-weights` too (K2C.WeightReadBack: the .mem files' words
before the reload, the written ones after it, under random stalls of the answer's tready), a
write-only design without any of the read-back, and the designs and outputs refused.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import keras2clash as k2c
from helpers import needs_toolchain, random_dense_model, run_cli
from keras2clash import api
from keras2clash.backend.memfiles import rom_params, rom_words
from keras2clash.backend.project import load_project
from keras2clash.backend.weightbus import (
    READ_FLAG,
    WeightMessage,
    answer_words,
    beats_text,
    bus_layers,
    layer_message,
    messages_text,
    read_answers,
    read_back,
    read_message,
    read_messages,
    weight_messages,
)
from keras2clash.errors import K2CError
from keras2clash.quant import golden
from keras2clash.verify import rtlsim, toolchain
from keras2clash.verify.simulate import run_simulator

ROOT = Path(__file__).resolve().parent.parent
IRIS = ROOT / "examples" / "iris"
GAP_MAX, SEED = 3, 5


def _perturbed(source, out: Path, seed: int) -> Path:
    """`source`'s architecture with other weights: each scaled by a random factor in
    [-1.2, 1.2] plus a little noise (a model the design was not emitted from)."""
    import keras

    model = keras.models.load_model(source) if isinstance(source, str | Path) else source
    rng = np.random.default_rng(seed)
    model.set_weights([w * rng.uniform(-1.2, 1.2, w.shape) + rng.normal(0, 0.05, w.shape) for w in model.get_weights()])
    model.save(out)
    return out


@pytest.fixture(scope="module")
def iris(tmp_path_factory):
    """The iris classifier emitted with writable weights it reads back, and a model of other
    weights."""
    folder = tmp_path_factory.mktemp("reload_iris")
    project = k2c.emit(
        IRIS / "iris.keras", "1,7,8", folder / "net", [3, 2], writable_weights=True, readable_weights=True, show=False
    )
    return Path(project), _perturbed(IRIS / "iris.keras", folder / "other.keras", 3)


@pytest.fixture(scope="module")
def write_only(tmp_path_factory) -> Path:
    """The iris classifier emitted with writable weights only."""
    folder = tmp_path_factory.mktemp("write_only_iris")
    return Path(k2c.emit(IRIS / "iris.keras", "1,7,8", folder / "net", [3, 2], writable_weights=True, show=False))


def _old_golden(project: Path, n: int) -> np.ndarray:
    p = load_project(project)
    x = np.load(IRIS / "test.npz")["x"][:n]
    return golden.predict(p.plans, p.params, golden.quantize_inputs(p.plans, x))[0]


# --- the messages (no toolchain) ---------------------------------------------------------------


def test_a_message_is_the_layers_memory_file_in_32_bit_beats(iris) -> None:
    project_dir, other = iris
    project = load_project(project_dir)
    params = api.new_weights(project_dir, other)
    messages = weight_messages(project, params)
    assert [m.layer for m in messages] == [p.name for p in bus_layers(project.plans)] == ["hidden", "output"]
    for index, (message, plan) in enumerate(zip(messages, bus_layers(project.plans))):
        assert message.beats[0] == index << 24  # the layer's index, address 0
        words = rom_words(plan, params[plan.name])
        per_word = (len(words[0]) + 31) // 32
        assert len(message.beats) == 1 + per_word * len(words)
        for k, word in enumerate(words):  # least significant beat first
            beats = message.beats[1 + k * per_word : 1 + (k + 1) * per_word]
            assert sum(b << (32 * i) for i, b in enumerate(beats)) == int(word, 2)
    assert rom_words(bus_layers(project.plans)[0], params["hidden"]) != rom_words(
        bus_layers(project.plans)[0], project.params["hidden"]
    )
    assert messages_text(messages).splitlines()[0].split()[0] == "00000000"
    # the design's own weights: nothing changes
    assert weight_messages(project, project.params, changed_only=True) == []


def test_the_generated_haskell_names_the_bus_table(iris) -> None:
    project_dir, _ = iris
    weights = (project_dir / "Weights.hs").read_text()
    assert "busTable = (3, 8) :> (2, 9) :> Nil" in weights
    assert "hidden = writable 0 ?weightBus hidden_rom" in weights
    assert "readAnswer layer (mirror 0 bus hidden_rom address :> mirror 1 bus output_rom address :> Nil)" in weights
    assert "(HiddenClockResetEnable dom, W.HiddenWeightBus dom)" in (project_dir / "Network.hs").read_text()
    top = (project_dir / "Top.hs").read_text()
    assert 'PortName "s_axis_weights_tdata"' in top and 'PortName "s_axis_weights_tready"' in top
    assert 'PortName "m_axis_weights_tready"' in top and 'PortName "m_axis_weights_tlast"' in top


def test_a_read_message_and_its_answer(iris) -> None:
    """A read is a header with bit 23 and a count beat; its answer is the words in a write's
    beats, which `read_back` unpacks into the layer's raw constants."""
    project_dir, other = iris
    project = load_project(project_dir)
    hidden, output = bus_layers(project.plans)
    assert [m.beats for m in read_messages(project)] == [(READ_FLAG, 3), (1 << 24 | READ_FLAG, 2)]
    assert [m.answer_beats for m in read_messages(project)] == [3 * 8, 2 * 9]
    assert read_message(output, 1, 1, 5) == WeightMessage("output", 1, (1 << 24 | READ_FLAG | 1, 5), 9)
    with pytest.raises(K2CError, match="has 3 words: no read of 1 from address 3"):
        read_message(hidden, 0, 3, 1)
    with pytest.raises(K2CError, match="no weight memory 'nope'"):
        read_messages(project, ["nope"])
    new = api.new_weights(project_dir, other)
    answers = read_answers(project, new)
    assert answers == [layer_message(plan, k, new[plan.name]).beats[1:] for k, plan in enumerate((hidden, output))]
    assert answer_words(hidden, answers[0]) == rom_words(hidden, new["hidden"])
    back = read_back(project, {"hidden": answers[0], "output": answers[1]})
    for name in ("hidden", "output"):
        assert np.array_equal(back[name].kernel, new[name].kernel) and np.array_equal(back[name].bias, new[name].bias)
    with pytest.raises(K2CError, match="an answer of 7 beats is not whole words of 8 beats"):
        answer_words(hidden, answers[0][:7])
    with pytest.raises(K2CError, match="an answer of 2 words, its memory has 3"):
        read_back(project, {"hidden": answers[0][:16]})


def test_memory_words_unpack_to_the_constants_they_hold(tmp_path: Path) -> None:
    """`rom_params` inverts `rom_words` where the words pad filters and window elements (PEs
    that do not divide the filters, chunks that do not divide the window)."""
    project = load_project(
        k2c.emit(_conv_model(1), "1,7,8", tmp_path / "net", [3, 2], cycles=[4, 2], writable_weights=True, show=False)
    )
    for plan in bus_layers(project.plans):
        params = project.params[plan.name]
        back = rom_params(plan, rom_words(plan, params))
        assert np.array_equal(back.kernel, params.kernel) and np.array_equal(back.bias, params.bias), plan.name


READ_BACK_NAMES = ("m_axis_weights", "WeightReadBack", "readableWeightPort", "readBack", "mirror", "readAnswer")
"""What only a design that reads its weights back holds in its Haskell."""


def test_a_write_only_design_has_the_write_port_alone(write_only: Path) -> None:
    """Without --readable-weights: the write-only port (K2C.WeightBus.weightPort, three inputs,
    tready its only output), no read-back copy of any memory, no answer port, no read."""
    for name in ("Weights.hs", "Network.hs", "Top.hs", "Sim.hs", "README.md"):
        text = (write_only / name).read_text()
        assert not [word for word in READ_BACK_NAMES if word in text], name
    top = (write_only / "Top.hs").read_text()
    assert "(writes, closed, wReady) = weightPort W.busTable wData wValid wLast" in top
    assert 'PortName "s_axis_tready"' in top and top.count("weights_t") == 12  # 4 ports, each 3 times
    assert "simMainWritable" in (write_only / "Sim.hs").read_text()
    weight_port = (write_only / "clash_lib" / "K2C" / "WeightBus.hs").read_text()
    assert "mirror" not in weight_port.split("module K2C.WeightBus")[1]  # the write-only block reads nothing
    project = load_project(write_only)
    assert project.writable_weights and not project.readable_weights
    for read in (lambda: read_messages(project), lambda: api.weight_reads(write_only)):
        with pytest.raises(K2CError, match="does not read its weights back .* --readable-weights") as err:
            read()
        assert len(str(err.value).splitlines()) == 1
    reload = api.weight_reload(write_only, write_only / "golden.npz", at=1)
    assert reload.answers == () and [m.answer_beats for m in reload.messages] == [0, 0]


def test_readable_weights_need_writable_ones(tmp_path: Path, capsys) -> None:
    with pytest.raises(
        K2CError, match="--readable-weights reads back the weight port's memories: add --writable-weights"
    ):
        k2c.emit(IRIS / "iris.keras", "1,7,8", tmp_path / "net", readable_weights=True, show=False)
    args = ["emit", IRIS / "iris.keras", "--format", "1,7,8", "--out", tmp_path / "net", "--readable-weights"]
    code, text = run_cli(args, capsys)
    assert code == 2 and "add --writable-weights" in " ".join(text.split()) and text.count("error") == 1
    assert not (tmp_path / "net").exists()


def test_outputs_are_not_overwritten_without_force(iris, write_only: Path, tmp_path: Path, capsys) -> None:
    """weight-messages --out, read-messages --out and read-answer --out refuse an existing file,
    leave it as it was, and replace it whole with --force; reads of a write-only design are
    refused."""
    project_dir, other = iris
    out = tmp_path / "messages.txt"
    out.write_text("mine\n")
    code, text = run_cli(["weight-messages", project_dir, other, "--out", out], capsys)
    assert code != 0 and "exists; use --force to replace it" in text and out.read_text() == "mine\n"
    code, text = run_cli(["weight-messages", project_dir, other, "--out", out, "--force"], capsys)
    assert code == 0 and [len(line.split()) for line in out.read_text().splitlines()] == [25, 19]
    code, text = run_cli(["read-messages", project_dir, "--out", out], capsys)
    assert code != 0 and "exists; use --force" in text
    code, text = run_cli(["read-messages", project_dir, "--out", out, "--force"], capsys)
    assert code == 0 and out.read_text() == "00800000 00000003\n01800000 00000002\n"
    project = load_project(project_dir)
    answers = tmp_path / "answers.txt"
    answers.write_text(beats_text(read_answers(project, api.new_weights(project_dir, other))))
    npz = tmp_path / "w.npz"
    npz.write_bytes(b"mine")
    code, text = run_cli(["read-answer", project_dir, answers, "--out", npz], capsys)
    assert code != 0 and "exists; use --force" in text and npz.read_bytes() == b"mine"
    code, text = run_cli(["read-answer", project_dir, answers, "--out", npz, "--force"], capsys)
    assert code == 0 and "hidden: other than the design's weights" in text
    back, new = api.new_weights(project_dir, npz), api.new_weights(project_dir, other)
    assert all(np.array_equal(back[n].kernel, new[n].kernel) for n in ("hidden", "output"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["answers.txt", "messages.txt", "w.npz"]  # no leftovers
    code, text = run_cli(["read-messages", write_only], capsys)
    assert code != 0 and "does not read its weights back" in text
    code, text = run_cli(["read-answer", write_only, answers, "--out", tmp_path / "x.npz"], capsys)
    assert code != 0 and "does not read its weights back" in text and not (tmp_path / "x.npz").exists()


def test_without_the_option_the_project_has_no_weight_port(tmp_path: Path) -> None:
    project = Path(k2c.emit(IRIS / "iris.keras", "1,7,8", tmp_path / "net", [3, 2], show=False))
    for name in ("Weights.hs", "Network.hs", "Top.hs", "Sim.hs"):
        text = (project / name).read_text()
        assert "WeightBus" not in text and "weights_t" not in text and "ImplicitParams" not in text
    with pytest.raises(K2CError, match="has no weight port; emit it with --writable-weights"):
        api.weight_messages(project, project / "golden.npz")


# --- refusals -------------------------------------------------------------------------------


def test_a_latency_layer_is_refused_with_its_name(tmp_path: Path) -> None:
    model = random_dense_model([(4, "relu"), (3, "linear")], 5, seed=1, scale=0.5)
    with pytest.raises(K2CError, match="layer 'dense_0' uses the latency strategy") as err:
        k2c.emit(model, "1,7,8", tmp_path / "net", strategy="latency,resource", writable_weights=True, show=False)
    assert len(str(err.value).splitlines()) == 1
    assert not (tmp_path / "net").exists()


def test_a_design_of_several_outputs_is_refused(tmp_path: Path) -> None:
    import keras

    x = keras.Input((4,))
    h = keras.layers.Dense(5, activation="relu", name="h")(x)
    model = keras.Model(x, [keras.layers.Dense(2, name="a")(h), keras.layers.Dense(3, name="b")(h)])
    with pytest.raises(K2CError, match="several input or output ports; --writable-weights"):
        k2c.emit(model, "1,7,8", tmp_path / "net", writable_weights=True, show=False)


def test_new_weights_of_another_architecture_are_refused(iris, tmp_path: Path) -> None:
    project_dir, _ = iris
    other = random_dense_model([(5, "relu"), (3, "softmax")], 4, seed=2)
    other.save(tmp_path / "wrong.keras")
    with pytest.raises(K2CError, match="the new model has no layer 'hidden'"):
        api.weight_messages(project_dir, tmp_path / "wrong.keras")


@needs_toolchain
@pytest.mark.toolchain
def test_a_message_to_a_design_without_the_port_fails_the_simulation(tmp_path: Path) -> None:
    project = Path(k2c.emit(IRIS / "iris.keras", "1,7,8", tmp_path / "net", [3, 2], show=False))
    p = load_project(project)
    x = golden.quantize_inputs(p.plans, np.load(IRIS / "test.npz")["x"][:3])
    with pytest.raises(K2CError, match="weights are not writable"):
        run_simulator(toolchain.build_simulator(project), project, x, p.n_out, messages={1: [[0, 1, 2, 3]]})


@needs_toolchain
@pytest.mark.toolchain
def test_a_read_message_to_a_write_only_design_writes_nothing(write_only: Path) -> None:
    """On the write-only port a read header (bit 23) is a write past every memory's end: the
    read messages of every memory, sent before image 3, change no weight and get no answer;
    the harness refuses a read it would wait the answer of."""
    project = load_project(write_only)
    reads = [(k << 24 | READ_FLAG, plan.rom_depth) for k, plan in enumerate(bus_layers(project.plans))]
    x = golden.quantize_inputs(project.plans, np.load(IRIS / "test.npz")["x"][:8])
    exe = toolchain.build_simulator(write_only)
    args = ["--gap-max", str(GAP_MAX), "--seed", str(SEED)]
    sim = run_simulator(exe, write_only, x, project.n_out, args, messages={3: reads})
    assert np.array_equal(sim.outputs, _old_golden(write_only, 8)) and sim.answers == ()
    answered = [WeightMessage("hidden", 0, reads[0], 24)]
    with pytest.raises(K2CError, match="weights are not readable \\(emit --readable-weights\\)"):
        run_simulator(exe, write_only, x, project.n_out, messages={3: answered})


@needs_toolchain
@pytest.mark.toolchain
def test_only_a_readable_design_has_the_read_back_in_its_verilog(iris, write_only: Path) -> None:
    """The Verilog: the write-only design has no m_axis_weights port and a block RAM per weight
    memory (and per softmax table); the readable one a copy of each weight memory more."""
    project_dir, _ = iris
    texts = {}
    for name, project in (("write-only", write_only), ("readable", project_dir)):
        toolchain.generate_hdl(project, "verilog")
        texts[name] = "".join(path.read_text() for path in toolchain.hdl_files(project, "verilog"))
    memories = len(bus_layers(load_project(write_only).plans))
    assert "m_axis_weights" not in texts["write-only"] and "m_axis_weights_tready" in texts["readable"]
    assert texts["readable"].count("$readmem") == texts["write-only"].count("$readmem") + memories


# --- a reload between two images -------------------------------------------------------------


@needs_toolchain
@pytest.mark.toolchain
def test_dense_reload_in_the_clash_simulation(iris) -> None:
    project, other = iris
    check = api.simulate_reload(project, IRIS / "test.npz", other, at=10, limit=30, gap_max=GAP_MAX, seed=SEED)
    assert check.exact
    old = _old_golden(project, 30)
    assert np.array_equal(check.sim.outputs[:10], old[:10])
    assert np.any(check.sim.outputs[10:] != old[10:], axis=1).sum() >= 15  # the new weights are in use
    # every memory read back before the writes (the .mem files' words) and after (the new words)
    assert check.read_back_exact and len(check.sim.answers) == 4
    p = load_project(project)
    for plan, answer in zip(bus_layers(p.plans), check.sim.answers[:2]):
        assert answer_words(plan, answer) == (project / "weights" / f"{plan.name}.mem").read_text().split()
    new = api.new_weights(project, other)
    for plan, answer in zip(bus_layers(p.plans), check.sim.answers[2:]):
        assert answer_words(plan, answer) == rom_words(plan, new[plan.name]) != rom_words(plan, p.params[plan.name])


@needs_toolchain
@pytest.mark.toolchain
def test_reads_of_some_words_and_reads_the_port_cannot_answer(iris) -> None:
    """Reads of one word, of words clipped at the memory's end, with beats after the count
    beat (skipped after the answer), a read right after a write (it answers the written word),
    and reads answered by nothing (no words, past the end, no layer): the answers are the words
    due and no more, and the images around them equal the golden model of what is loaded."""
    project_dir, other = iris
    project = load_project(project_dir)
    new = api.new_weights(project_dir, other)
    hidden, output = bus_layers(project.plans)
    old_words = {plan.name: rom_words(plan, project.params[plan.name]) for plan in (hidden, output)}
    new_word = rom_words(hidden, new["hidden"])[1]
    write = [m.beats for m in weight_messages(project, new) if m.layer == "hidden"][0]
    per_word = 8
    messages = [
        read_message(hidden, 0, 1, 1),  # word 1
        read_message(output, 1, 1, 5),  # clipped: word 1 only
        [READ_FLAG | 2, 0],  # no words: no answer
        [READ_FLAG | 3, 2],  # past the end: no answer
        [7 << 24 | READ_FLAG, 1],  # no layer 7: skipped
        [READ_FLAG],  # a header alone: no read
        WeightMessage("hidden", 0, (READ_FLAG | 2, 1, 0xDEAD, 0xBEEF), per_word),  # word 2, the rest skipped
        [0 << 24 | 1, *write[1 + per_word : 1 + 2 * per_word]],  # the new word 1 of hidden
        read_message(hidden, 0),  # right after the write: words 0, new 1, 2
    ]
    x = golden.quantize_inputs(project.plans, np.load(IRIS / "test.npz")["x"][:14])
    sim = run_simulator(
        toolchain.build_simulator(project_dir),
        project_dir,
        x,
        project.n_out,
        ["--gap-max", str(GAP_MAX), "--seed", str(SEED)],
        messages={5: messages},
    )
    got = [answer_words(plan, answer) for plan, answer in zip((hidden, output, hidden, hidden), sim.answers)]
    assert got == [
        old_words["hidden"][1:2],
        old_words["output"][1:2],
        old_words["hidden"][2:3],
        [old_words["hidden"][0], new_word, old_words["hidden"][2]],
    ]
    assert len(sim.answers) == 4 and list(sim.answer_cycle) == sorted(sim.answer_cycle)
    loaded = {**project.params, "hidden": _with_word(hidden, project.params["hidden"], new["hidden"], 1)}
    for start, stop, params in ((0, 5, project.params), (5, 14, loaded)):
        want, classes = golden.predict(project.plans, params, x[start:stop])
        assert np.array_equal(sim.outputs[start:stop], want), (start, stop)
        assert np.array_equal(sim.classes[start:stop], classes)


@needs_toolchain
@pytest.mark.toolchain
def test_reloads_back_and_forth_and_a_message_of_one_layer(iris) -> None:
    """The new weights before image 5, the design's own before image 12, then the new hidden
    layer alone before image 20: each segment equals the golden model of what is loaded."""
    project_dir, other = iris
    project = load_project(project_dir)
    new = api.new_weights(project_dir, other)
    to_new = [m.beats for m in weight_messages(project, new)]
    to_old = [m.beats for m in weight_messages(project, project.params)]
    mixed = {**project.params, "hidden": new["hidden"]}
    hidden_only = [m.beats for m in weight_messages(project, mixed, changed_only=True)]
    assert len(hidden_only) == 1
    x = golden.quantize_inputs(project.plans, np.load(IRIS / "test.npz")["x"][:26])
    sim = run_simulator(
        toolchain.build_simulator(project_dir),
        project_dir,
        x,
        project.n_out,
        ["--gap-max", str(GAP_MAX), "--seed", str(SEED)],
        messages={5: to_new, 12: to_old, 20: hidden_only},
    )
    segments = [(0, 5, project.params), (5, 12, new), (12, 20, project.params), (20, 26, mixed)]
    for start, stop, params in segments:
        want, classes = golden.predict(project.plans, params, x[start:stop])
        assert np.array_equal(sim.outputs[start:stop], want), (start, stop)
        assert np.array_equal(sim.classes[start:stop], classes)


def _with_word(plan, old, new, address: int):
    """`old` constants with those of memory word `address` taken from `new`: word `g*b + t`
    holds chunk `t` (window elements `t*ch ..`) of filters `g*p ..` and, for `t = 0`, their
    biases (K2C.Memory's layout, written out here apart from backend.memfiles)."""
    p, b, ch = plan.engine_knobs.pe, plan.engine_knobs.cycles, plan.chunk
    g, t = divmod(address, b)
    kernel, bias = old.kernel.copy(), old.bias.copy()
    filters = [f for f in range(g * p, g * p + p) if f < kernel.shape[1]]
    elements = [e for e in range(t * ch, t * ch + ch) if e < kernel.shape[0]]
    kernel[np.ix_(elements, filters)] = new.kernel[np.ix_(elements, filters)]
    if t == 0:
        bias[filters] = new.bias[filters]
    return type(old)(kernel, bias)


@needs_toolchain
@pytest.mark.toolchain
def test_the_port_writes_single_words_and_drops_what_it_cannot_write(iris) -> None:
    """A message naming no layer (skipped whole), one word then a word cut short by tlast (the
    cut word is not written), one word then a word past the memory's end (not written): only
    the two whole words in range change."""
    project_dir, other = iris
    project = load_project(project_dir)
    new = api.new_weights(project_dir, other)
    hidden, output = bus_layers(project.plans)
    full = {m.layer: m.beats for m in weight_messages(project, new)}
    per_word = {"hidden": 8, "output": 9}
    assert len(full["hidden"]) == 1 + 3 * 8 and len(full["output"]) == 1 + 2 * 9

    def word(layer: str, address: int) -> list[int]:
        return list(full[layer][1 + address * per_word[layer] : 1 + (address + 1) * per_word[layer]])

    messages = [
        [7 << 24] + word("hidden", 0),  # no layer 7: skipped to its tlast
        [0 << 24 | 1] + word("hidden", 1) + word("hidden", 2)[:3],  # word 1, then a cut word
        [1 << 24 | 1] + word("output", 1) + word("output", 0),  # word 1, then address 2 of 2 words
    ]
    loaded = dict(project.params)
    loaded["hidden"] = _with_word(hidden, project.params["hidden"], new["hidden"], 1)
    loaded["output"] = _with_word(output, project.params["output"], new["output"], 1)
    assert rom_words(hidden, loaded["hidden"])[1] == rom_words(hidden, new["hidden"])[1]
    assert rom_words(hidden, loaded["hidden"])[2] == rom_words(hidden, project.params["hidden"])[2]
    x = golden.quantize_inputs(project.plans, np.load(IRIS / "test.npz")["x"][:16])
    sim = run_simulator(
        toolchain.build_simulator(project_dir),
        project_dir,
        x,
        project.n_out,
        ["--gap-max", str(GAP_MAX), "--seed", str(SEED)],
        messages={6: messages},
    )
    for start, stop, params in ((0, 6, project.params), (6, 16, loaded)):
        want, classes = golden.predict(project.plans, params, x[start:stop])
        assert np.array_equal(sim.outputs[start:stop], want), (start, stop)
        assert np.array_equal(sim.classes[start:stop], classes)
    before = golden.predict(project.plans, project.params, x[6:])[0]
    assert np.any(sim.outputs[6:] != before)  # the two words matter


@needs_toolchain
@pytest.mark.toolchain
def test_dense_reload_in_verilator(iris) -> None:
    """The messages that load the other model's weights, between a message naming no layer and
    messages the port drops (a cut word, a word past the end): the Verilator testbench checks
    the images after them against the new weights' golden model, in the Clash simulation's
    cycles."""
    project_dir, other = iris
    project = load_project(project_dir)
    reload = api.weight_reload(project_dir, other, at=10)
    full = {m.layer: m.beats for m in reload.messages}
    dropped = [
        WeightMessage("none", 9, (9 << 24, 1, 2)),
        WeightMessage("hidden", 0, (0 << 24 | 2, *full["output"][1:4])),  # 3 of a word's 8 beats
        WeightMessage("output", 1, (1 << 24 | 2, *full["output"][1:10])),  # address 2 of 2 words
    ]
    reload = replace(reload, messages=(dropped[0], *reload.messages, *dropped[1:]))
    result = rtlsim.rtlsim(project_dir, IRIS / "test.npz", "verilator", 30, gap_max=GAP_MAX, seed=SEED, reload=reload)
    assert result.ok, (result.messages, [s.note for s in result.samples if not s.passed])
    assert np.any(result.samples[10].expected != _old_golden(project_dir, 30)[10])
    x = golden.quantize_inputs(project.plans, np.load(IRIS / "test.npz")["x"][:30])
    clash = run_simulator(
        toolchain.build_simulator(project_dir),
        project_dir,
        x,
        project.n_out,
        ["--gap-max", str(GAP_MAX), "--seed", str(SEED)],
        messages={10: [m.beats for m in reload.messages]},
    )
    assert list(result.output_cycles()) == list(clash.output_cycle)  # the same cycles
    assert list(result.accept_cycles()) == list(clash.accept_cycle)
    assert clash.answers == reload.answers  # the read-backs the testbench checked


@needs_toolchain
@pytest.mark.toolchain
def test_the_testbench_fails_a_wrong_or_missing_read_back(iris) -> None:
    """One bit of one answer beat changed, and an answer the testbench does not expect: the
    Verilator run fails on each, naming the beat."""
    project_dir, other = iris
    reload = api.weight_reload(project_dir, other, at=3)
    answers = list(reload.answers)
    answers[2] = (*answers[2][:4], answers[2][4] ^ 1 << 7, *answers[2][5:])
    wrong = rtlsim.rtlsim(
        project_dir,
        IRIS / "test.npz",
        "verilator",
        6,
        gap_max=GAP_MAX,
        seed=SEED,
        reload=replace(reload, answers=tuple(answers)),
    )
    assert not wrong.ok and wrong.passed == 6
    assert any(m.startswith("ERROR read answer beat 46 ") for m in wrong.messages), wrong.messages
    missing = rtlsim.rtlsim(
        project_dir,
        IRIS / "test.npz",
        "verilator",
        6,
        gap_max=GAP_MAX,
        seed=SEED,
        reload=replace(reload, answers=reload.answers[:3]),
    )
    assert not missing.ok and any(m.startswith("ERROR extra read answer beat") for m in missing.messages)


@needs_toolchain
@pytest.mark.toolchain
@pytest.mark.slow  # Icarus and GHDL: a minute of Clash for each language, then slow simulators
@pytest.mark.parametrize("sim", ["icarus", "ghdl"])
def test_read_back_in_icarus_and_ghdl(iris, sim: str) -> None:
    project_dir, other = iris
    reload = api.weight_reload(project_dir, other, at=2)
    result = rtlsim.rtlsim(project_dir, IRIS / "test.npz", sim, 4, gap_max=2, seed=SEED, reload=reload)
    assert result.ok, (result.messages, [s.note for s in result.samples if not s.passed])


@needs_toolchain
@pytest.mark.toolchain
def test_the_commands(iris, tmp_path: Path, capsys) -> None:
    project, other = iris
    out = tmp_path / "messages.txt"
    code, text = run_cli(["weight-messages", project, other, "--out", out], capsys)
    assert code == 0 and "layer 1 output: 19 beats" in text
    lines = out.read_text().splitlines()
    assert [len(line.split()) for line in lines] == [25, 19] and lines[1].startswith("01000000 ")
    args = ["reload", project, other, "--data", IRIS / "test.npz", "--at", "4", "-n", "12", "--gap-max", "2"]
    code, text = run_cli(args, capsys)
    assert code == 0 and "12/12 samples equal the golden model (4 with the design's weights" in " ".join(text.split())
    assert "read back before and after the writes: the words due, bit for bit" in " ".join(text.split())
    # read-messages, the answers the simulation gets, read-answer: the design's weights again
    code, text = run_cli(["read-messages", project, "--out", tmp_path / "reads.txt"], capsys)
    assert code == 0 and "layer 1 output: an answer of 18 beats" in text
    assert (tmp_path / "reads.txt").read_text() == "00800000 00000003\n01800000 00000002\n"
    code, text = run_cli(["read-messages", project, "--layer", "output", "--first", "1"], capsys)
    assert code == 0 and "01800001 00000001\n" in text
    p = load_project(project)
    x = golden.quantize_inputs(p.plans, np.load(IRIS / "test.npz")["x"][:2])
    sim = run_simulator(
        toolchain.build_simulator(project), project, x, p.n_out, messages={1: read_messages(p, ["output", "hidden"])}
    )
    (tmp_path / "answers.txt").write_text(beats_text(sim.answers))
    args = [
        "read-answer",
        project,
        tmp_path / "answers.txt",
        "-l",
        "output",
        "-l",
        "hidden",
        "--out",
        tmp_path / "w.npz",
    ]
    code, text = run_cli(args, capsys)
    assert code == 0 and "output: as the design's weights" in text
    back = api.new_weights(project, tmp_path / "w.npz")
    assert all(np.array_equal(back[n].kernel, p.params[n].kernel) for n in ("hidden", "output"))
    code, text = run_cli(["read-answer", project, tmp_path / "answers.txt", "--out", tmp_path / "x.npz"], capsys)
    assert code != 0  # the answers in another order than the memories named


def _conv_model(seed: int):
    """A small CNN with random weights: 6x6x2 -> conv 4 3x3 (relu) -> max pool -> dense 3."""
    import keras

    return _randomized(
        keras.Sequential(
            [
                keras.Input((6, 6, 2)),
                keras.layers.Conv2D(4, 3, activation="relu", name="conv"),
                keras.layers.MaxPooling2D(2, name="pool"),
                keras.layers.Flatten(name="flatten"),
                keras.layers.Dense(3, name="out"),
            ]
        ),
        seed,
    )


def _depthwise_model(seed: int):
    """Depthwise (multiplier 2) and dilated convolutions, global pooling, dense: 7x7x2 -> 3."""
    import keras

    return _randomized(
        keras.Sequential(
            [
                keras.Input((7, 7, 2)),
                keras.layers.DepthwiseConv2D(3, depth_multiplier=2, activation="relu", name="dw"),
                keras.layers.Conv2D(3, 2, dilation_rate=2, name="dilated"),
                keras.layers.GlobalAveragePooling2D(name="gap"),
                keras.layers.Dense(3, name="out"),
            ]
        ),
        seed,
    )


def _lstm_model(seed: int):
    """An LSTM over 5 steps of 3 values, then dense: the engine inside a recurrent cell."""
    import keras

    return _randomized(
        keras.Sequential([keras.Input((5, 3)), keras.layers.LSTM(4, name="lstm"), keras.layers.Dense(3, name="out")]),
        seed,
    )


def _randomized(model, seed: int):
    rng = np.random.default_rng(seed)
    model.set_weights([rng.normal(0, 0.5, w.shape).astype("float32") for w in model.get_weights()])
    return model


@needs_toolchain
@pytest.mark.toolchain
@pytest.mark.parametrize(
    ("build", "knobs"),
    [
        pytest.param(_conv_model, {"parallelism": [2, 3], "cycles": [3, 2]}, id="conv"),
        pytest.param(_depthwise_model, {}, id="depthwise-dilated"),
        pytest.param(_lstm_model, {}, id="lstm"),
    ],
)
def test_engine_kinds_reload_in_the_clash_simulation(build, knobs, tmp_path: Path) -> None:
    model = build(1)
    rng = np.random.default_rng(0)
    data = tmp_path / "test.npz"
    np.savez(data, x=rng.uniform(-1, 1, (16, *model.input_shape[1:])).astype("float32"), y=rng.integers(0, 3, 16))
    project = k2c.emit(model, "1,7,8", tmp_path / "net", writable_weights=True, show=False, **knobs)
    check = api.simulate_reload(project, data, build(2), at=6, gap_max=GAP_MAX, seed=SEED)
    assert check.exact
    p = load_project(project)
    old = golden.predict(p.plans, p.params, golden.quantize_inputs(p.plans, np.load(data)["x"]))[0]
    assert np.array_equal(check.sim.outputs[:6], old[:6])
    assert np.any(check.sim.outputs[6:] != old[6:], axis=1).sum() >= 8  # the new weights are in use


@needs_toolchain
@pytest.mark.toolchain
@pytest.mark.parametrize(
    "example",
    [
        pytest.param("digits_dense", id="digits_dense"),
        pytest.param("thesis_cnn", id="thesis_cnn", marks=pytest.mark.slow),  # minutes of ghc on its CNN
    ],
)
def test_an_example_reloads_weights_between_two_images(example: str, tmp_path: Path) -> None:
    """An inference example emitted with writable weights, and the same model with other weights
    loaded after 20 of its test images: golden == hardware before and after."""
    folder = ROOT / "examples" / example
    project = k2c.emit(folder / f"{example}.keras", "1,7,8", tmp_path / "net", writable_weights=True, show=False)
    other = _perturbed(folder / f"{example}.keras", tmp_path / "other.keras", 7)
    check = api.simulate_reload(project, folder / "test.npz", other, at=20, limit=60, gap_max=GAP_MAX, seed=SEED)
    assert check.exact
    p = load_project(project)
    x = golden.quantize_inputs(p.plans, np.load(folder / "test.npz")["x"][:60])
    old = golden.predict(p.plans, p.params, x)[0]
    assert np.array_equal(check.sim.outputs[:20], old[:20])
    assert np.any(check.sim.outputs[20:] != old[20:], axis=1).sum() >= 20
