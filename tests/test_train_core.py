"""The training core (K2C.Train): its Clash simulation against the golden trainer, step by step
(the weights and biases after every step, every answer), its cycles against the cycle model,
and the settings it refuses."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from keras2clash.errors import K2CError
from keras2clash.quant.formats import FixedFormat
from keras2clash.train.core import batch_messages, check_core, train_message, write_core
from keras2clash.train.golden import GoldenTrainer, LayerFormats, Sgd
from keras2clash.train.hardware import TrainCore
from keras2clash.train.net import TrainLayer, TrainNet

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "train_digits"


def _net(sizes: list[int], hidden: list[str], seed: int) -> TrainNet:
    rng = np.random.default_rng(seed)
    acts = [*hidden, "softmax"]
    layers = tuple(
        TrainLayer(f"dense_{i}", rng.normal(0, 0.7, (a, b)), rng.normal(0, 0.3, b), act)
        for i, (a, b, act) in enumerate(zip(sizes, sizes[1:], acts))
    )
    return TrainNet("random", (sizes[0],), layers, "categorical_crossentropy")


SMALL = LayerFormats(
    a=FixedFormat(1, 3, 9),
    w=FixedFormat(1, 1, 11),
    b=FixedFormat(1, 1, 11),
    g=FixedFormat(1, 0, 12),
    v=FixedFormat(1, 0, 13),
)
SMALL_X = FixedFormat(1, 2, 7)
"""Formats of the momentum and batch tests' small networks (their input's format)."""

fmt = st.builds(
    lambda i, f: FixedFormat(1, i, f), st.integers(min_value=0, max_value=3), st.integers(min_value=5, max_value=13)
)
layer_formats = st.builds(LayerFormats, a=fmt, w=fmt, b=fmt, g=fmt, v=fmt)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    sizes=st.lists(st.integers(min_value=2, max_value=7), min_size=3, max_size=4),
    hidden=st.lists(st.sampled_from(["relu", "linear", "tanh", "sigmoid"]), min_size=2, max_size=2),
    formats=st.lists(layer_formats, min_size=3, max_size=3),
    pe_choice=st.lists(st.integers(min_value=0, max_value=6), min_size=3, max_size=3),
    lr=st.sampled_from([2.0**-3, 2.0**-5, 0.1, 0.3]),
    momentum=st.sampled_from([0.0, 0.5, 0.9]),
    batch=st.sampled_from([1, 2, 5]),
    seed=st.integers(min_value=0, max_value=99),
)
def test_random_cores_train_as_the_golden_trainer(
    tmp_path_factory, sizes, hidden, formats, pe_choice, lr, momentum, batch, seed
):
    net = _net(sizes, hidden[: len(sizes) - 2], seed)
    formats = [
        f if f.b.frac <= x.frac + f.w.frac else LayerFormats(a=f.a, w=f.w, b=FixedFormat(1, f.b.int, x.frac), g=f.g)
        for f, x in zip(formats, [FixedFormat(1, 2, 7), *(f.a for f in formats)])
    ][: len(net.layers)]
    pes = tuple(1 + c % layer.n_out for c, layer in zip(pe_choice, net.layers))
    sgd = Sgd(learning_rate=lr, momentum=momentum, batch=batch)
    trainer = GoldenTrainer(net, sgd, formats, x_format=FixedFormat(1, 2, 7))
    core = TrainCore(trainer, pes)
    project = write_core(core, tmp_path_factory.mktemp("core") / "core", "random")
    rng = np.random.default_rng(seed)
    x = rng.uniform(-3, 3, (12, sizes[0]))
    labels = rng.integers(0, sizes[-1], 12)
    check = check_core(core, project, x, labels)
    assert check.mismatches == []
    assert check.cycles_match, (
        check.step_cycles,
        check.model_step_cycles,
        check.answer_cycles,
        check.model_answer_cycle,
    )


def test_digits8_core_trains_as_the_golden_trainer_for_200_steps(tmp_path: Path) -> None:
    """The small example network (64-16-10, relu, lr 2^-7, the default 18-bit formats), two
    and five outputs a cycle: every weight after each of the first 200 steps."""
    from keras2clash.frontend.convert import load_keras_model, to_graph
    from keras2clash.train.net import train_net

    net = train_net(to_graph(load_keras_model(EXAMPLE / "digits8.keras")))
    data = np.load(EXAMPLE / "train_digits8.npz")
    core = TrainCore(GoldenTrainer(net, Sgd(learning_rate=2.0**-7)), (2, 5))
    project = write_core(core, tmp_path / "core", "digits8")
    check = check_core(core, project, data["x"][:200], data["y"][:200])
    assert check.steps == 200
    assert check.mismatches == []
    # the command, the input's 64 words and their register; forward 64 x 8 and 16 x 2 words of weights, each
    # pass's output 10 cycles after its last; the loss: the maximum and the exponentials of the 10
    # classes, then 10 divisions of 18 quotient bits (20 cycles each); backward 16 x 2 words and
    # the gradient 11 cycles after, then 64 x 8 and the last writes
    loss = 2 * 10 + 17 + 8 + 9 * 20 + 1
    assert core.step_cycles() == 2 + 64 + (512 + 11) + (32 + 11) - 1 + loss + (32 + 12) + (512 + 8) == 1421
    assert set(check.step_cycles) == {1421}
    assert set(check.answer_cycles) == {core.answer_cycle()}
    assert core.multipliers == 14


@pytest.mark.parametrize(
    ("sgd", "loss", "pes", "message"),
    [
        (Sgd(), "categorical_crossentropy", (1, 4), "parallelism 4 is not within 1 to its 3 outputs"),
        (Sgd(), "categorical_crossentropy", (1,), "1 parallelism values for 2 layers"),
    ],
)
def test_core_refusals_name_the_setting(sgd, loss, pes, message) -> None:
    net = _net([4, 3, 3], ["relu"], 0)
    if loss == "mse":
        last = net.layers[-1]
        net = TrainNet(
            net.name, net.input_shape, (net.layers[0], TrainLayer(last.name, last.kernel, last.bias, "linear")), "mse"
        )
    with pytest.raises(K2CError, match=message):
        TrainCore(GoldenTrainer(net, sgd), pes)


def test_momentum_core_trains_as_the_golden_trainer_with_its_velocities(tmp_path: Path) -> None:
    """Momentum 0.9 (a constant: four multipliers a lane) and a learning rate that is not a power
    of two: every weight and bias after each of 24 steps as the golden trainer's, whose
    velocities move them; the update's six more cycles end a step six cycles later."""
    net = _net([5, 6, 4, 3], ["tanh", "relu"], 3)
    f, x_format = SMALL, SMALL_X
    core = TrainCore(GoldenTrainer(net, Sgd(learning_rate=0.3, momentum=0.9), [f] * 3, x_format=x_format), (2, 3, 2))
    plain = TrainCore(GoldenTrainer(net, Sgd(learning_rate=0.3), [f] * 3, x_format=x_format), (2, 3, 2))
    assert core.multipliers == 4 * (2 + 3 + 2) and plain.multipliers == 2 * (2 + 3 + 2)
    assert core.step_cycles() == plain.step_cycles() + 6
    project = write_core(core, tmp_path / "core", "momentum")
    # 5 inputs x 3 groups, a bank of 16 words
    assert (project / "weights" / "dense_0.vw.mem").read_text().splitlines() == ["0" * 28] * 16
    rng = np.random.default_rng(1)
    x, labels = rng.uniform(-3, 3, (24, 5)), rng.integers(0, 3, 24)
    check = check_core(core, project, x, labels)
    assert check.steps == 24
    assert check.mismatches == []
    assert set(check.step_cycles) == {core.step_cycles()}
    # the velocities matter: the golden trainer without momentum ends elsewhere on the same samples
    ends = []
    for sgd in (Sgd(learning_rate=0.3, momentum=0.9), Sgd(learning_rate=0.3)):
        golden = GoldenTrainer(net, sgd, [f] * 3, x_format=x_format)
        xq = golden.quantize_inputs(x)
        for s in range(len(xq)):
            golden.step(xq[s : s + 1], labels[s : s + 1])
        ends.append(golden.weights[0])
    assert np.count_nonzero(ends[0] != ends[1]) > ends[0].size // 2


def test_batch_core_sums_gradients_and_updates_at_each_batch_end(tmp_path: Path) -> None:
    """Batch 4 with momentum over 14 samples (three batches and a short one of 2): the weights
    stay through a batch's first samples and after its last are the golden trainer's, which
    differ from batch 1's; every answer is the golden trainer's on the batch's weights."""
    net = _net([5, 6, 4, 3], ["sigmoid", "relu"], 5)
    f, x_format = SMALL, SMALL_X
    sgd = Sgd(learning_rate=0.25, momentum=0.75, batch=4)
    core = TrainCore(GoldenTrainer(net, sgd, [f] * 3, x_format=x_format), (3, 2, 3))
    layer = core.layers[0]
    # the sums: x d (10 + 13 bits) and d (13 bits), two bits more for four samples
    assert (layer.xd_bits, layer.d_bits) == (10 + 13 + 2, 13 + 2)
    project = write_core(core, tmp_path / "core", "batch")
    assert (project / "weights" / "dense_0.gb.mem").read_text().splitlines() == ["0" * 3 * 15] * 2
    rng = np.random.default_rng(2)
    x, labels = rng.uniform(-3, 3, (14, 5)), rng.integers(0, 3, 14)
    messages = batch_messages(core, core.trainer.quantize_inputs(x), labels)
    assert [m.command for m in messages] == [4, 4, 4, 0] * 3 + [4, 0]
    check = check_core(core, project, x, labels)
    assert check.steps == 14
    assert check.mismatches == []
    assert set(check.step_cycles) == {core.step_cycles()}
    ends = []
    for batch in (4, 1):
        golden = GoldenTrainer(net, Sgd(learning_rate=0.25, momentum=0.75, batch=batch), [f] * 3, x_format=x_format)
        golden.epoch(x, labels, np.arange(14))
        ends.append(golden.weights[1])
    assert np.count_nonzero(ends[0] != ends[1]) > ends[0].size // 2


@pytest.mark.parametrize(
    ("activation", "sgd"),
    [
        ("linear", Sgd(learning_rate=0.25)),
        ("tanh", Sgd(learning_rate=0.25, momentum=0.9, batch=3)),
        ("sigmoid", Sgd(learning_rate=0.3)),
        ("relu", Sgd(learning_rate=0.25, momentum=0.5, batch=2)),
    ],
)
def test_mse_core_trains_as_the_golden_trainer_and_answers_its_outputs(tmp_path: Path, activation, sgd) -> None:
    """The mean squared error at an output of each activation: the targets (three words, the
    outputs' format) after a sample's values, the gradients (y - t) f'(y) a value a cycle, the
    answer the three outputs; the weights after every sample and the answers as the golden
    trainer's, the cycles as the model's (the loss's 5 cycles, then a gradient a cycle)."""
    net = _net([5, 6, 4, 3], ["tanh", "relu"], 3)
    last = net.layers[-1]
    layers = (*net.layers[:-1], TrainLayer(last.name, last.kernel, last.bias, activation))
    net = TrainNet(net.name, net.input_shape, layers, "mse")
    core = TrainCore(GoldenTrainer(net, sgd, [SMALL] * 3, x_format=SMALL_X), (2, 3, 2))
    assert (core.loss.latency(), core.loss.gradients(), core.loss.answer_count(False)) == (5, 2, 3)
    project = write_core(core, tmp_path / "core", "mse")
    rng = np.random.default_rng(4)
    x, targets = rng.uniform(-3, 3, (15, 5)), rng.uniform(-1.5, 1.5, (15, 3))
    message = train_message(core, core.trainer.quantize_inputs(x[:1])[0], targets[0])
    assert message.words[-3:] == tuple(int(v) for v in np.floor(targets[0] * 2**9 + 0.5))
    check = check_core(core, project, x, targets)
    assert check.steps == 15
    assert check.mismatches == []
    assert check.cycles_match, (check.step_cycles, check.model_step_cycles, check.answer_cycles)


def test_core_refuses_formats_wider_than_the_host_words() -> None:
    net = _net([4, 3, 3], ["relu"], 0)
    wide = LayerFormats(a=FixedFormat(1, 10, 24))
    with pytest.raises(K2CError, match="formats of up to 32 bits"):
        TrainCore(GoldenTrainer(net, Sgd(), [wide, LayerFormats()]), (1, 1))


def test_block_ram_model_counts_what_yosys_maps_and_refuses_a_core_too_big_for_the_part() -> None:
    from keras2clash.frontend.convert import load_keras_model, to_graph
    from keras2clash.train.hardware import banks
    from keras2clash.train.net import train_net

    net = train_net(to_graph(load_keras_model(EXAMPLE / "digits28.keras")))
    core = TrainCore(GoldenTrainer(net, Sgd(2.0**-7)), (14, 8, 5))
    # synth_ecp5 of this core: the first layer's 5,488 weight words in 11 banks of 512, each
    # 7 blocks of 36 bits; 8 and 3 blocks for the others' (1Kx18, 512x36); one for the first
    # layer's 784 inputs, one a slice of the softmax table; the rest in LUT RAM
    assert banks(5488, 14 * 18) == (11, 512)
    assert [(m.name, m.block_rams) for m in core.memories if m.block_rams] == [
        ("hidden_1's input", 1),
        ("hidden_1's weights", 77),
        ("hidden_2's weights", 8),
        ("classes's weights", 3),
        ("classes's softmax table", 1),
        ("classes's softmax table", 1),
        ("classes's softmax table", 1),
    ]
    assert core.block_rams == 92
    assert TrainCore(GoldenTrainer(net, Sgd(2.0**-7)), (7, 4, 2)).block_rams == 90  # synth_ecp5: 90
    core.check_block_rams(208, "LFE5U-85F")
    batched = TrainCore(GoldenTrainer(net, Sgd(2.0**-7, 0.0, 2)), (14, 8, 5))
    assert batched.block_rams == 280  # 37-bit exact sums beside the 18-bit weights
    with pytest.raises(K2CError, match=r"280 DP16KD \(hidden_1's weight gradient sums 165, .* LFE5U-85F's 208"):
        batched.check_block_rams(208, "LFE5U-85F")


def test_host_reads_writes_and_infers_between_steps(tmp_path: Path) -> None:
    """The host's messages mixed: the weights read before and after training steps, new weights
    written and read back, inference and training on them; each answer as the golden trainer
    gives it (its weights reset to the written ones)."""
    from keras2clash.train.core import (
        infer_message,
        read_message,
        simulate_core,
        split_read,
        write_message,
    )

    net = _net([5, 4, 3], ["tanh"], 3)
    formats = [LayerFormats(a=FixedFormat(1, 2, 9), w=FixedFormat(1, 1, 10)), LayerFormats(a=FixedFormat(1, 3, 8))]
    make = lambda: GoldenTrainer(net, Sgd(learning_rate=2.0**-4), formats, x_format=FixedFormat(1, 2, 7))  # noqa: E731
    golden, core = make(), TrainCore(make(), (3, 2))
    project = write_core(core, tmp_path / "core", "host")
    rng = np.random.default_rng(5)
    xq = golden.quantize_inputs(rng.uniform(-2, 2, (6, 5)))
    labels = rng.integers(0, 3, 6)
    written_w = [rng.integers(-900, 900, (5, 4)), rng.integers(-900, 900, (4, 3))]
    written_b = [rng.integers(-300, 300, 4), rng.integers(-300, 300, 3)]
    messages = [
        read_message(core),
        train_message(core, xq[0], labels[0]),
        train_message(core, xq[1], labels[1]),
        read_message(core),
        write_message(core, written_w, written_b),
        read_message(core),
        infer_message(core, xq[2]),
        infer_message(core, xq[3]),
        train_message(core, xq[4], labels[4]),
        read_message(core),
    ]
    run = simulate_core(core, project, messages)
    expected_reads = [([w.copy() for w in golden.weights], [b.copy() for b in golden.biases])]
    answers = []
    for s in (0, 1):
        z, y = golden.step(xq[s : s + 1], labels[s : s + 1])
        answers.append([int(np.argmax(z[0])), int(y[0, labels[s]])])
    expected_reads.append(([w.copy() for w in golden.weights], [b.copy() for b in golden.biases]))
    golden.weights = [np.asarray(w, dtype=np.int64) for w in written_w]
    golden.biases = [np.asarray(b, dtype=np.int64) for b in written_b]
    expected_reads.append(([w.copy() for w in golden.weights], [b.copy() for b in golden.biases]))
    infers = [int(np.argmax(golden.forward(xq[k : k + 1])[-1][0][0])) for k in (2, 3)]
    z, y = golden.step(xq[4:5], labels[4:5])
    expected_reads.append(([w.copy() for w in golden.weights], [b.copy() for b in golden.biases]))
    reads = [split_read(core, run.answers[k]) for k in (0, 3, 5, 9)]
    for (rw, rb), (ew, eb) in zip(reads, expected_reads):
        assert all(np.array_equal(a, b) for a, b in zip(rw, ew))
        assert all(np.array_equal(a, b) for a, b in zip(rb, eb))
    assert [run.answers[1], run.answers[2]] == answers
    assert run.answers[4] == [0]
    assert [run.answers[6], run.answers[7]] == [[c] for c in infers]
    assert run.answers[8] == [int(np.argmax(z[0])), int(y[0, labels[4]])]
    # an inference answers as a training step does, and the core takes the next message then
    assert run.answer_cycle[6] - run.first_word[6] == core.answer_cycle()
    assert run.first_word[7] - run.first_word[6] == core.answer_cycle() + 1


def test_train_command_writes_and_checks_a_core(tmp_path: Path, capsys) -> None:
    import json

    from helpers import run_cli

    args = ["train", EXAMPLE / "digits8.keras", "--data", EXAMPLE / "train_digits8.npz", "--epochs", "0"]
    out = tmp_path / "run.json"
    core = tmp_path / "core"
    code, text = run_cli(
        [*args, "--lr", "2^-7", "--core", core, "--dsp-budget", "20", "--core-steps", "30", "--json", out], capsys
    )
    assert code == 0, text
    result = json.loads(out.read_text())["core"]
    assert result["parallelism"] == [8, 2] and result["multipliers"] == 20
    assert result["checked_steps"] == 30 and result["bit_exact"] and result["cycles_match_model"]
    assert result["simulated_step_cycles"] == [result["step_cycles"]] == [747]
    assert (core / "Trainer.hs").is_file() and (core / "weights" / "hidden_1.w.mem").is_file()
    code, text = run_cli([*args, "--core", core], capsys)
    assert code == 2 and "is not empty; use --force" in text  # nothing overwritten
    code, text = run_cli([*args, "--core", tmp_path / "c2", "--parallelism", "17,1"], capsys)
    assert code == 2 and "parallelism 17 is not within 1 to its 16 outputs" in text
    assert not (tmp_path / "c2").exists()
    code, text = run_cli([*args, "--parallelism", "2,2"], capsys)
    assert code == 2 and "give --core FOLDER" in text
    big = ["train", EXAMPLE / "digits28.keras", "--data", EXAMPLE / "train_digits28.npz", "--epochs", "0"]
    code, text = run_cli([*big, "--batch", "2", "--core", tmp_path / "c3", "--dsp-budget", "ecp5-85k"], capsys)
    assert code == 2 and "DP16KD (hidden_1's weight gradient sums" in text and "LFE5U-85F's 208" in text, text
    assert not (tmp_path / "c3").exists()


def test_digits8_core_in_verilator_reads_the_golden_weights_after_each_of_200_steps(tmp_path: Path) -> None:
    """The core's Verilog with random idle cycles and stalls on both ports: after each of the
    first 200 steps the host reads every weight back (the read command), and each read and
    each answer is the golden trainer's."""
    from keras2clash.frontend.convert import load_keras_model, to_graph
    from keras2clash.train.core import read_message, split_read
    from keras2clash.train.net import train_net
    from keras2clash.train.rtl import rtl_core

    net = train_net(to_graph(load_keras_model(EXAMPLE / "digits8.keras")))
    data = np.load(EXAMPLE / "train_digits8.npz")
    golden = GoldenTrainer(net, Sgd(learning_rate=2.0**-7))
    core = TrainCore(GoldenTrainer(net, Sgd(learning_rate=2.0**-7)), (4, 3))
    project = write_core(core, tmp_path / "core", "digits8_train")
    xq, labels = golden.quantize_inputs(data["x"][:200]), data["y"][:200]
    messages = [m for x, label in zip(xq, labels) for m in (train_message(core, x, label), read_message(core))]
    run = rtl_core(core, project, messages, gap_max=2, seed=3)
    for s in range(200):
        z, y = golden.step(xq[s : s + 1], labels[s : s + 1])
        assert run.answers[2 * s] == [int(np.argmax(z[0])), int(y[0, labels[s]])], s
        weights, biases = split_read(core, run.answers[2 * s + 1])
        assert all(np.array_equal(a, b) for a, b in zip(weights, golden.weights)), s
        assert all(np.array_equal(a, b) for a, b in zip(biases, golden.biases)), s
    # the idle cycles and stalls cost cycles; none of them changes a value
    assert min(np.diff(run.first_word)[::2]) > core.step_cycles()


@pytest.mark.slow
def test_digits28_core_trains_as_the_golden_trainer_for_200_steps_in_clash_and_verilator(tmp_path: Path) -> None:
    """The thesis' network shape (784-98-64-10, relu, the default 18-bit formats) at 14, 8 and 5
    outputs a cycle: every weight after each of the first 200 steps, in the Clash simulation
    (the memories' writes) and in Verilator (the host's read after each step, random idle
    cycles and stalls); the cycles of a step are the model's."""
    from keras2clash.frontend.convert import load_keras_model, to_graph
    from keras2clash.train.core import read_message, split_read
    from keras2clash.train.net import train_net
    from keras2clash.train.rtl import rtl_core

    net = train_net(to_graph(load_keras_model(EXAMPLE / "digits28.keras")))
    data = np.load(EXAMPLE / "train_digits28.npz")
    x, labels = data["x"][:200], data["y"][:200]
    core = TrainCore(GoldenTrainer(net, Sgd(learning_rate=2.0**-7)), (14, 8, 5))
    project = write_core(core, tmp_path / "core", "digits28_train")
    check = check_core(core, project, x, labels)
    assert check.steps == 200
    assert check.mismatches == []
    assert set(check.step_cycles) == {core.step_cycles()} == {13876}
    assert core.multipliers == 54

    golden = GoldenTrainer(net, Sgd(learning_rate=2.0**-7))
    xq = golden.quantize_inputs(x)
    messages = [m for xs, label in zip(xq, labels) for m in (train_message(core, xs, label), read_message(core))]
    run = rtl_core(core, project, messages, gap_max=2, seed=5)
    for s in range(200):
        z, y = golden.step(xq[s : s + 1], labels[s : s + 1])
        assert run.answers[2 * s] == [int(np.argmax(z[0])), int(y[0, labels[s]])], s
        weights, biases = split_read(core, run.answers[2 * s + 1])
        assert all(np.array_equal(a, b) for a, b in zip(weights, golden.weights)), s
        assert all(np.array_equal(a, b) for a, b in zip(biases, golden.biases)), s
