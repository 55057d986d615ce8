"""Reliability issue, items 2, 3 and 5: wide formats stay exact, one output policy for every
command that writes, and tampered projects are refused.

Each test names the defect it guards; each failed on the code before the fix.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import shutil
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keras2clash import cli, fsutil
from keras2clash.errors import K2CError
from keras2clash.hw.plan import LayerFormats, LayerPlan, make_plan
from keras2clash.quant import golden
from keras2clash.quant.formats import FixedFormat, MAX_BITS, count_saturated, parse_format, quantize

from helpers import needs_toolchain, random_dense_model

ROOT = Path(__file__).resolve().parent.parent
IRIS = ROOT / "examples" / "iris"


def run_cli(args: list[str], capsys) -> tuple[int, str]:
    """The console entry point in-process: (exit code, stderr + stdout). An exception that
    escapes main() is what a user sees as a traceback with exit code 1."""
    old = sys.argv
    sys.argv = ["keras2clash", *map(str, args)]
    try:
        cli.main()
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    except Exception as exc:  # noqa: BLE001 - the defect under test
        code = 1
        print(f"Traceback: {type(exc).__name__}: {exc}", file=sys.stderr)
    finally:
        sys.argv = old
    captured = capsys.readouterr()
    return code, captured.err + captured.out


def error_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("error:")]


def listing(folder: Path) -> list[str]:
    """Everything under `folder` (hidden names too), to show nothing was left behind."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    """4 inputs, weights up to about 3 in magnitude (so narrow-integer formats saturate)."""
    path = tmp_path_factory.mktemp("m") / "tiny.keras"
    random_dense_model([(3, "relu"), (2, "linear")], n_in=4, seed=5, scale=1.5).save(path)
    return path


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory) -> Path:
    rng = np.random.default_rng(3)
    path = tmp_path_factory.mktemp("d") / "tiny.npz"
    np.savez(path, x=rng.normal(0, 1, (6, 4)).astype("float32"), y=rng.integers(0, 2, 6))
    return path


# --- item 2: wide formats ------------------------------------------------------------------


def _reference_quantize(x: float, fmt: FixedFormat) -> int:
    q = math.floor(Fraction(x) * 2**fmt.frac + Fraction(1, 2))
    return max(fmt.raw_min, min(fmt.raw_max, q))


@st.composite
def any_format(draw) -> FixedFormat:
    bits = draw(st.integers(1, MAX_BITS))
    integer = draw(st.integers(0, bits - 1))
    return FixedFormat(1, integer, bits - 1 - integer)


EXTREMES = [np.finfo(np.float64).max, -np.finfo(np.float64).max, np.finfo(np.float64).tiny,
            -np.finfo(np.float64).tiny, 5e-324, -5e-324, 0.5 - 2.0**-54, -0.5 - 2.0**-53, 2.0**63, -(2.0**63),
            2.0**62 - 2.0**9, 2.0**53 + 2, 1.0, -1.0, 0.0, -0.0]


@settings(max_examples=500, deadline=None)
@given(fmt=any_format(), xs=st.lists(st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from(EXTREMES),
                                     min_size=1, max_size=12))
def test_quantize_every_width_matches_exact_rationals(fmt: FixedFormat, xs: list[float]) -> None:
    """Item 2 (property): for every accepted width, any finite float64 saturates to the
    format's range and equals floor(x * 2^frac + 1/2) computed in fractions.Fraction."""
    got = quantize(np.array(xs, dtype=np.float64), fmt)
    assert got.dtype == np.int64
    want = [_reference_quantize(x, fmt) for x in xs]
    assert got.tolist() == want
    over, _ = count_saturated(np.array(xs), fmt)
    assert over == sum(math.floor(Fraction(x) * 2**fmt.frac + Fraction(1, 2)) != w for x, w in zip(xs, want))


def test_64_bit_extremes_saturate_never_wrap() -> None:
    """Item 2: at 64 bits the largest value used to wrap to the most negative one."""
    fmt = parse_format("1,0,63")
    x = np.array([1.0, 7.9, 1e300, -1.0, -7.9, -1e300, 0.5])
    assert quantize(x, fmt).tolist() == [fmt.raw_max] * 3 + [fmt.raw_min] * 3 + [1 << 62]


def test_iris_at_64_bits_keeps_its_accuracy_in_the_golden_model() -> None:
    """Item 2: iris at 1,0,63 fell to 33.33% (wrapped inputs and weights); saturated, the
    golden model keeps 84.44% (the format's range is [-1, 1))."""
    from keras2clash.data import load_dataset
    from keras2clash.network import load_network

    network = load_network(IRIS / "iris.keras", "1,0,63")
    data = load_dataset(IRIS / "test.npz", network.plans[0].input_shape, network.plans[-1].n_out)
    x_raw = golden.quantize_inputs(network.plans, data.x)
    assert x_raw.tolist() == [[_reference_quantize(float(v), network.plans[0].in_fmt) for v in row]
                              for row in data.x.astype(np.float64)]
    classes = golden.predict_classes(golden.run(network.plans, network.params, x_raw))
    assert np.mean(classes == data.y) > 0.8


@pytest.mark.parametrize("fmt", ["1,0,55", "1,0,60", "1,0,63", "1,63,0", "1,31,32"])
def test_wide_formats_emit_exact_weight_files(tmp_path: Path, tiny_model: Path, capsys, fmt: str) -> None:
    """Item 2: from 55 to 63 bits emit crashed with a traceback (a saturated weight rounded
    in float to 2^(W-1), which does not fit W bits); at 64 it wrote wrapped weights."""
    from keras2clash.backend.memfiles import rom_table

    out = tmp_path / "net"
    # the weights in the wide format itself (`same`; the default `fit` would move their bits)
    code, text = run_cli(["emit", tiny_model, "--format", fmt, "--weight-format", "same", "--out", out], capsys)
    assert code == 0, text
    from keras2clash.backend.project import load_project

    project = load_project(out)
    f = parse_format(fmt)
    import keras

    weights = keras.models.load_model(tiny_model).get_weights()
    for plan, (kernel, bias) in zip(project.compute_plans, zip(weights[::2], weights[1::2])):
        params = project.params[plan.name]
        assert params.kernel.tolist() == [[_reference_quantize(float(v), f) for v in row] for row in kernel]
        assert params.bias.tolist() == [_reference_quantize(float(v), f) for v in bias]
        words = (out / "weights" / f"{plan.name}.mem").read_text().split()
        table = rom_table(plan, params)
        for word, row in zip(words, table):
            fields = [int(word[i:i + f.bits], 2) for i in range(0, len(word), f.bits)]
            signed = [v - (1 << f.bits) if v >> (f.bits - 1) else v for v in fields]
            assert signed == row.reshape(-1).tolist()


def _ref_sigmoid(r: int, fmt: FixedFormat) -> int:
    scale = 2**fmt.frac
    c = lambda v: math.floor(Fraction(v) * scale + Fraction(1, 2))  # noqa: E731
    a = abs(r)
    if Fraction(a, scale) >= 5:
        y = scale
    elif a >= c(Fraction(19, 8)):
        y = a // 32 + c(Fraction(27, 32))
    elif a >= scale:
        y = a // 8 + c(Fraction(5, 8))
    else:
        y = a // 4 + c(Fraction(1, 2))
    y = scale - y if r < 0 else y
    return max(fmt.raw_min, min(fmt.raw_max, y))


def _round_sat(value: Fraction, fmt: FixedFormat) -> int:
    return max(fmt.raw_min, min(fmt.raw_max, math.floor(value * 2**fmt.frac + Fraction(1, 2))))


def _dense_layer(n_in: int, n_out: int, act: str) -> dict:
    return {"type": "dense", "name": "d", "input_shape": (n_in,), "output_shape": (n_out,),
            "activation": act, "use_bias": True, "fused": [], "weights": {}}


wide_formats = st.builds(lambda i, f: FixedFormat(1, i, f), st.integers(0, 63), st.integers(0, 63)).filter(
    lambda f: f.bits <= MAX_BITS)


def _raws(fmt: FixedFormat):
    return st.integers(fmt.raw_min, fmt.raw_max) | st.sampled_from([fmt.raw_min, fmt.raw_max, -1, 0])


@settings(max_examples=200, deadline=None)
@given(data=st.data(), n_in=st.integers(1, 6), n_out=st.integers(1, 3), in_fmt=wide_formats, w_fmt=wide_formats,
       b_fmt=wide_formats, out_fmt=wide_formats, act=st.sampled_from(["linear", "relu", "sigmoid"]))
def test_golden_dense_exact_at_any_width(data, n_in, n_out, in_fmt, w_fmt, b_fmt, out_fmt, act) -> None:
    """Item 2, end to end in the golden model: quantize -> accumulate -> requantize ->
    activate equals exact rationals for mixed formats up to 64 bits (Python integers where
    int64 cannot hold the values, never a wrap)."""
    plan = make_plan([_dense_layer(n_in, n_out, act)], out_fmt, input_fmt=in_fmt,
                     layer_formats={"d": LayerFormats(weight=w_fmt, bias=b_fmt, output=out_fmt)})[0]
    kernel = np.array(data.draw(st.lists(_raws(w_fmt), min_size=n_in * n_out, max_size=n_in * n_out)),
                      dtype=np.int64).reshape(n_in, n_out)
    bias = np.array(data.draw(st.lists(_raws(b_fmt), min_size=n_out, max_size=n_out)), dtype=np.int64)
    xs = np.array(data.draw(st.lists(st.lists(_raws(in_fmt), min_size=n_in, max_size=n_in), min_size=1, max_size=3)),
                  dtype=np.int64)
    got = golden.dense(xs, plan, golden.QuantizedLayer(kernel, bias))
    assert got.dtype == np.int64
    for x, row in zip(xs, got):
        want = []
        for n in range(n_out):
            acc = sum(Fraction(int(xi), 2**in_fmt.frac) * Fraction(int(wi), 2**w_fmt.frac)
                      for xi, wi in zip(x, kernel[:, n])) + Fraction(int(bias[n]), 2**b_fmt.frac)
            r = _round_sat(acc, out_fmt)
            # sigmoid: the table itself is tested in tests/test_layers_activations.py
            want.append(max(r, 0) if act == "relu" else
                        int(golden.activate(np.array([r]), "sigmoid", out_fmt)[0]) if act == "sigmoid" else r)
        assert row.tolist() == want


@settings(max_examples=150, deadline=None)
@given(data=st.data(), n_in=st.integers(1, 6), in_fmt=wide_formats, w_fmt=wide_formats, out_fmt=wide_formats)
def test_golden_narrow_accumulator_exact_at_any_width(data, n_in, in_fmt, w_fmt, out_fmt) -> None:
    """Item 2: a narrow (user-chosen) accumulator saturating after each chunk, in chunk
    order, stays exact with wide formats: acc_0 = sat(S_0 + bias), acc_t = sat(acc_{t-1} + S_t)."""
    from keras2clash.hw.plan import accumulator_format

    exact = accumulator_format(in_fmt, w_fmt, n_in, w_fmt)
    bits = data.draw(st.integers(exact.frac + 1, exact.bits))
    cycles = data.draw(st.integers(1, n_in))
    plan = make_plan([_dense_layer(n_in, 2, "linear")], out_fmt, input_fmt=in_fmt, cycles=[cycles],
                     layer_formats={"d": LayerFormats(weight=w_fmt, output=out_fmt, accumulator_bits=bits)})[0]
    acc_fmt = plan.acc_fmt
    kernel = np.array(data.draw(st.lists(_raws(w_fmt), min_size=2 * n_in, max_size=2 * n_in)),
                      dtype=np.int64).reshape(n_in, 2)
    bias = np.array(data.draw(st.lists(_raws(w_fmt), min_size=2, max_size=2)), dtype=np.int64)
    x = np.array(data.draw(st.lists(_raws(in_fmt), min_size=n_in, max_size=n_in)), dtype=np.int64)
    got = golden.dense(x[None, :], plan, golden.QuantizedLayer(kernel, bias))[0].tolist()
    sat = lambda v, f: max(f.raw_min, min(f.raw_max, v))  # noqa: E731
    shift = acc_fmt.frac - (in_fmt.frac + w_fmt.frac)
    want = []
    for n in range(2):
        acc = None
        for t in range(plan.cycles):
            part = sum(int(x[j]) * int(kernel[j, n]) for j in range(t * plan.chunk, min((t + 1) * plan.chunk, n_in)))
            part <<= shift
            acc = sat(part + (int(bias[n]) << (acc_fmt.frac - w_fmt.frac)), acc_fmt) if acc is None else sat(acc + part, acc_fmt)
        want.append(_round_sat(Fraction(acc, 2**acc_fmt.frac), out_fmt))
    assert got == want


def test_sigmoid_at_64_bits_does_not_overflow() -> None:
    """Item 2: |most negative| overflowed int64 in the PLAN sigmoid at 64 bits."""
    for fmt in (FixedFormat(1, 63, 0), FixedFormat(1, 0, 63), FixedFormat(1, 20, 43), FixedFormat(1, 60, 1)):
        r = np.array([fmt.raw_min, fmt.raw_min + 1, -1, 0, 1, fmt.raw_max], dtype=np.int64)
        assert golden.sigmoid_plan(r, fmt).tolist() == [_ref_sigmoid(int(v), fmt) for v in r]


MERGES = ("add", "subtract", "multiply", "average", "maximum", "minimum", "concatenate")


@settings(max_examples=200, deadline=None)
@given(op=st.sampled_from(MERGES), n=st.integers(2, 3), data=st.data(), out=wide_formats)
def test_golden_merges_exact_at_any_width(op, n, data, out) -> None:
    """Item 2: merges (golden.merge) stay exact with operands and outputs up to 64 bits."""
    n = 2 if op == "subtract" else n
    in_fmts = [data.draw(wide_formats) for _ in range(n)]
    raws = [np.array(data.draw(st.lists(_raws(f), min_size=2, max_size=2)), dtype=np.int64) for f in in_fmts]
    plan = LayerPlan(name="m", type=op, input_shape=(2,), output_shape=(2 * n if op == "concatenate" else 2,),
                     activation="linear", in_fmt=in_fmts[0], out_fmt=out, inputs=tuple(f"t{i}" for i in range(n)),
                     in_fmts=tuple(in_fmts), input_shapes=((2,),) * n)
    got = golden.merge([r[None, :] for r in raws], plan)[0]
    values = [[Fraction(int(v), 2**f.frac) for v in r] for r, f in zip(raws, in_fmts)]
    if op == "concatenate":
        want = [_round_sat(v, out) for vs in values for v in vs]
    else:
        want = []
        for k in range(2):
            column = [vs[k] for vs in values]
            exact = {"add": sum(column), "subtract": column[0] - column[-1], "multiply": math.prod(column),
                     "average": sum(column) / len(column), "maximum": max(column), "minimum": min(column)}[op]
            want.append(_round_sat(exact, out))
    assert got.tolist() == want


def test_average_pooling_exact_at_64_bits() -> None:
    """Item 2: 2*sum + N overflowed int64 in the average pooling at 64 bits."""
    fmt = FixedFormat(1, 31, 32)
    plan = LayerPlan(name="p", type="avgpool2d", input_shape=(2, 2, 1), output_shape=(1, 1, 1), activation="linear",
                     in_fmt=fmt, out_fmt=fmt, kernel_size=(2, 2), strides=(2, 2), pads=(0, 0, 0, 0))
    for values in ([fmt.raw_max] * 4, [fmt.raw_min] * 4, [fmt.raw_max, fmt.raw_max, fmt.raw_min, 7]):
        x = np.array(values, dtype=np.int64).reshape(1, 2, 2, 1)
        want = (2 * sum(values) + 4) // 8
        assert golden.avgpool2d(x, plan).reshape(-1).tolist() == [want]


@pytest.mark.parametrize("extra", [["--format", "1,0,0"], ["--layer-format", "dense_1:o=1,0,0"]])
def test_one_bit_format_is_refused_at_emit(tmp_path: Path, tiny_model: Path, capsys, extra) -> None:
    """Item 2: a 1-bit format was emitted and then failed the Verilog lint (Clash writes a
    zero-width bit slice); emit refuses it with one clear line and writes nothing."""
    code, text = run_cli(["emit", tiny_model, "--out", tmp_path / "net", *extra], capsys)
    assert code == 2, text
    assert len(error_lines(text)) == 1 and "at least 2 bits" in text and "1,0,0" in text
    assert listing(tmp_path) == []


@needs_toolchain
def test_64_bit_iris_is_bit_exact_and_accurate_in_clash_and_verilator(tmp_path: Path) -> None:
    """Item 2: at 1,0,63 simulate printed BIT-EXACT at 33.33% (golden and hardware wrapped
    alike); now both saturate: bit-exact in the Clash simulation and in Verilator, with the
    golden model's accuracy."""
    import keras2clash as k2c

    project = k2c.emit(IRIS / "iris.keras", "1,0,63", tmp_path / "iris64", [2, 3], show=False)
    comp = k2c.simulate(project, IRIS / "test.npz", show=False)
    assert comp.bit_exact == comp.samples == 45
    assert comp.golden_accuracy == comp.sim_accuracy and comp.golden_accuracy > 0.8
    from keras2clash import api

    result = api.rtlsim(project, IRIS / "test.npz", "verilator", 10, show=False)
    assert result.ok and result.passed == 10


# --- item 3: output locations ----------------------------------------------------------------


def test_out_dot_is_refused_cleanly(tmp_path: Path, tiny_model: Path, capsys, monkeypatch) -> None:
    """Item 3: `--out .` gave a traceback and left `..tmp-*` debris holding a project."""
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    for extra in ([], ["--force"]):
        code, text = run_cli(["emit", tiny_model, "--out", ".", *extra], capsys)
        assert code == 2, text
        assert len(error_lines(text)) == 1 and "current directory" in text
        assert listing(tmp_path) == ["here"]


@contextlib.contextmanager
def _tmpfs(path: Path, options: str = "size=4m"):
    path.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "k2c-test", str(path)], capture_output=True)
    if proc.returncode != 0:
        yield False
        return
    try:
        yield True
    finally:
        subprocess.run(["umount", str(path)], check=False)


def test_out_on_a_mount_point_is_refused(tmp_path: Path, tiny_model: Path, capsys, monkeypatch) -> None:
    """Item 3: an output on a mount point could not be renamed into place: traceback and a
    whole project left in `.NAME.tmp-*`. It is refused before any work."""
    mount = tmp_path / "mnt"
    with _tmpfs(mount) as mounted:
        if not mounted:  # no permission to mount: make the check see a mount point
            monkeypatch.setattr(os.path, "ismount", lambda p: Path(p) == mount)
        code, text = run_cli(["emit", tiny_model, "--out", mount], capsys)
        assert code == 2, text
        assert len(error_lines(text)) == 1 and "mount point" in text
        assert listing(tmp_path) == ["mnt"] and listing(mount) == []


def test_rename_across_devices_fails_cleanly(tmp_path: Path, tiny_model: Path, capsys, monkeypatch) -> None:
    """Item 3: when the final rename fails (EXDEV here), one error line, exit 2, and no
    `.NAME.tmp-*` / `.NAME.old-*` folder left behind."""
    out = tmp_path / "net"

    def crossing(real):
        def rename(src, dst, *args, **kwargs):
            if Path(dst) == out:
                raise OSError(errno.EXDEV, os.strerror(errno.EXDEV), str(dst))
            return real(src, dst, *args, **kwargs)
        return rename

    monkeypatch.setattr(os, "rename", crossing(os.rename))
    monkeypatch.setattr(os, "replace", crossing(os.replace))
    monkeypatch.setattr(fsutil, "rename_noreplace", crossing(getattr(fsutil, "rename_noreplace", os.rename)),
                        raising=False)
    code, text = run_cli(["emit", tiny_model, "--out", out], capsys)
    assert code == 2, text
    assert len(error_lines(text)) == 1 and str(out) in text
    assert listing(tmp_path) == []


def _chattr(path: Path, flag: str) -> bool:
    return shutil.which("chattr") is not None and subprocess.run(["chattr", flag, str(path)],
                                                                 capture_output=True).returncode == 0


@pytest.mark.parametrize("how", ["immutable", "read-only"])
def test_unwritable_parent_is_refused_before_any_work(tmp_path: Path, tiny_model: Path, capsys, monkeypatch,
                                                      how: str) -> None:
    """Item 3: a read-only or immutable parent gave a traceback (exit 1) after loading the
    model. Now: refused before the model is loaded, one line, exit 2."""
    import keras2clash.network as network

    def no_load(*args, **kwargs):
        raise AssertionError("the model was loaded before the output was checked")

    monkeypatch.setattr(network, "load_model", no_load)
    parent = tmp_path / "locked"
    with contextlib.ExitStack() as stack:
        if how == "immutable":
            parent.mkdir()
            if not _chattr(parent, "+i"):
                pytest.skip("chattr +i is not available on this file system")
            stack.callback(_chattr, parent, "-i")
        else:  # root ignores mode bits: a read-only file system is what stops root
            if not stack.enter_context(_tmpfs(parent, "ro,size=1m")):
                pytest.skip("no permission to mount a read-only tmpfs")
        code, text = run_cli(["emit", tiny_model, "--out", parent / "net"], capsys)
        assert code == 2, text
        assert len(error_lines(text)) == 1 and str(parent) in text and "Traceback" not in text
        assert listing(parent) == []


def test_folder_appearing_meanwhile_is_not_replaced(tmp_path: Path, tiny_model: Path, capsys, monkeypatch) -> None:
    """Item 3: a folder that appeared at --out between the early check and the final rename
    was replaced (deleted) without --force."""
    from keras2clash.backend import emitter

    out = tmp_path / "net"
    real = emitter.write_project

    def racing(*args, **kwargs):
        out.mkdir()
        (out / "precious.txt").write_text("keep me")
        return real(*args, **kwargs)

    monkeypatch.setattr(emitter, "write_project", racing)
    code, text = run_cli(["emit", tiny_model, "--out", out], capsys)
    assert code == 2, text
    assert len(error_lines(text)) == 1 and "use --force" in text
    assert (out / "precious.txt").read_text() == "keep me"
    assert listing(tmp_path) == ["net", "net/precious.txt"]


def test_forced_replacement_keeps_the_original_when_the_rename_fails(tmp_path: Path, monkeypatch) -> None:
    """Item 3, --force: the old folder is moved aside, and put back if the new one cannot be
    renamed into place; nothing is left behind either way."""
    out = tmp_path / "o"
    out.mkdir()
    (out / "old.txt").write_text("old")
    real = fsutil.rename_noreplace

    def failing(src, dst):
        if Path(dst) == out:
            raise OSError(errno.EXDEV, os.strerror(errno.EXDEV), str(dst))
        return real(src, dst)

    monkeypatch.setattr(fsutil, "rename_noreplace", failing)
    with pytest.raises(K2CError, match="cannot move the finished output"):
        with fsutil.atomic_directory(out, force=True) as tmp:
            (tmp / "new.txt").write_text("new")
    assert listing(tmp_path) == ["o", "o/old.txt"]
    monkeypatch.setattr(fsutil, "rename_noreplace", real)
    with fsutil.atomic_directory(out, force=True) as tmp:
        (tmp / "new.txt").write_text("new")
    assert listing(tmp_path) == ["o", "o/new.txt"]


def test_no_replace_without_renameat2(tmp_path: Path, monkeypatch) -> None:
    """Item 3: where renameat2 is missing, the name is claimed with mkdir/link first, so a
    folder or file that appeared meanwhile is still never replaced."""
    monkeypatch.setattr(fsutil, "_renameat2", lambda: None)
    out = tmp_path / "net"
    with pytest.raises(K2CError, match="appeared"):
        with fsutil.atomic_directory(out):
            out.mkdir()
            (out / "p").write_text("keep")
    assert listing(tmp_path) == ["net", "net/p"]
    report = tmp_path / "r.json"
    fsutil.write_output_file(report, "1")
    with pytest.raises(K2CError, match="exists; use --force"):
        fsutil.write_output_file(report, "2")
    fsutil.write_output_file(report, "3", force=True)
    assert report.read_text() == "3" and listing(tmp_path) == ["net", "net/p", "r.json"]


@pytest.mark.parametrize("mask", [0o022, 0o027])
def test_emitted_folders_respect_the_umask(tmp_path: Path, tiny_model: Path, mask: int) -> None:
    """Item 3: emitted folders were mode 0700 whatever the umask (they come from mkdtemp)."""
    import keras2clash as k2c

    old = os.umask(mask)
    try:
        out = k2c.emit(tiny_model, "1,7,8", tmp_path / "net", show=False)
        other = tmp_path / "deeper" / "folder"
        with fsutil.atomic_directory(other) as tmp:
            (tmp / "f").write_text("x")
    finally:
        os.umask(old)
    for folder in (out, out / "weights", other, other.parent):
        assert folder.stat().st_mode & 0o777 == 0o777 & ~mask, folder


def test_overlong_name_is_refused(tmp_path: Path, tiny_model: Path, capsys) -> None:
    """Item 3: a 300-character --name crashed (file names longer than the file system allows)."""
    code, text = run_cli(["emit", tiny_model, "--out", tmp_path / "net", "--name", "a" * 300], capsys)
    assert code == 2, text
    assert len(error_lines(text)) == 1 and "--name" in text
    code, text = run_cli(["emit", tiny_model, "--out", tmp_path / ("n" * 300)], capsys)
    assert code == 2, text
    assert len(error_lines(text)) == 1 and "longer than" in text
    assert listing(tmp_path) == []


def test_unwritable_report_files_are_refused_before_the_run(tmp_path: Path, tiny_model: Path, capsys) -> None:
    """Item 3: `options --json` (and simulate's --json/--markdown) to an unwritable path gave
    a traceback after the whole run, exit 1 (the mismatch code). Now: before, exit 2."""
    blocker = tmp_path / "file.txt"
    blocker.write_text("not a folder")
    code, text = run_cli(["options", tiny_model, "--json", blocker / "o.json"], capsys)
    assert code == 2, text
    assert len(error_lines(text)) == 1 and str(blocker) in text
    code, text = run_cli(["options", tiny_model, "--csv", tmp_path], capsys)
    assert code == 2 and "is a directory" in text, text
    # simulate checks its report files before it even reads the project
    code, text = run_cli(["simulate", tmp_path / "no-project", "--data", IRIS / "test.npz",
                          "--markdown", blocker / "r.md"], capsys)
    assert code == 2 and str(blocker) in text and "not an emitted" not in text, text
    # an existing report file is replaced only with --force
    existing = tmp_path / "o.json"
    existing.write_text("old")
    code, text = run_cli(["options", tiny_model, "--json", existing], capsys)
    assert code == 2 and "use --force" in text and existing.read_text() == "old", text
    code, text = run_cli(["options", tiny_model, "--json", existing, "--force"], capsys)
    assert code == 0, text
    assert json.loads(existing.read_text())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file.txt", "o.json"]


def test_profile_and_report_refuse_a_non_empty_out_dir(tmp_path: Path, tiny_model: Path, tiny_data: Path,
                                                       capsys) -> None:
    """Item 3: profile and report overwrote a non-empty --out-dir silently (sweep refuses)."""
    import keras2clash as k2c

    project = k2c.emit(tiny_model, "1,7,8", tmp_path / "net", show=False)
    for args in (["profile", tiny_model, "--data", tiny_data],
                 ["report", project, "--no-yosys"]):
        out = tmp_path / f"out-{args[0]}"
        out.mkdir()
        (out / "precious.txt").write_text("keep me")
        code, text = run_cli([*args, "--out-dir", out], capsys)
        assert code == 2, text
        assert len(error_lines(text)) == 1 and "not empty; use --force" in text
        assert listing(out) == ["precious.txt"]
        code, text = run_cli([*args, "--out-dir", out, "--force"], capsys)
        assert code == 0, text
        assert not (out / "precious.txt").exists() and any(out.glob(f"{args[0]}.json"))
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_simulate_in_a_read_only_project_fails_cleanly(tmp_path: Path, tiny_model: Path, tiny_data: Path,
                                                        capsys) -> None:
    """Item 3: simulate builds in DIR/.build; in an immutable project folder that was a
    traceback (PermissionError). Now one line, exit 2, before any work."""
    import keras2clash as k2c

    project = k2c.emit(tiny_model, "1,7,8", tmp_path / "net", show=False)
    if not _chattr(project, "+i"):
        pytest.skip("chattr +i is not available on this file system")
    try:
        code, text = run_cli(["simulate", project, "--data", tiny_data], capsys)
    finally:
        _chattr(project, "-i")
    assert code == 2, text
    assert len(error_lines(text)) == 1 and str(project / ".build") in text


# --- item 5: tampered projects ------------------------------------------------------------


@pytest.fixture(scope="module")
def built_project(tmp_path_factory, tiny_model: Path) -> Path:
    """An emitted project with its Verilog (Clash runs once for the module)."""
    import keras2clash as k2c

    project = k2c.emit(tiny_model, "1,7,8", tmp_path_factory.mktemp("built") / "net", [2, 1], show=False)
    if shutil.which("clash"):
        from keras2clash.verify import toolchain

        toolchain.generate_hdl(project, "verilog")
    return project


@pytest.fixture
def copy_of(built_project: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "net"
    shutil.copytree(built_project, copy, symlinks=True)
    return copy


def _first_mem(project: Path) -> Path:
    return sorted((project / "weights").glob("*.mem"))[0]


@needs_toolchain
def test_hdl_refuses_a_malformed_weight_file(copy_of: Path, capsys) -> None:
    """Item 5: `hdl` exited 0 ("lint clean") with a malformed .mem file and shipped it."""
    victim = _first_mem(copy_of)
    victim.write_text(victim.read_text().replace("0", "2", 1))
    shutil.rmtree(copy_of / "hdl")
    code, text = run_cli(["hdl", copy_of], capsys)
    assert code == 2, text
    assert len(error_lines(text)) == 1 and str(victim) in text
    assert not (copy_of / "hdl").exists()


@needs_toolchain
def test_simulate_names_the_malformed_weight_file(copy_of: Path, tiny_data: Path, capsys) -> None:
    """Item 5: simulate's error on a malformed .mem did not name the file."""
    victim = _first_mem(copy_of)
    victim.write_text(victim.read_text()[:-3] + "x\n")
    code, text = run_cli(["simulate", copy_of, "--data", tiny_data], capsys)
    assert code == 2, text
    assert len(error_lines(text)) == 1 and str(victim) in text


@needs_toolchain
def test_rtlsim_notices_a_deleted_weight_file(copy_of: Path, tiny_data: Path, capsys) -> None:
    """Item 5: rtlsim used the HDL folder's copy and did not notice a deleted weight file."""
    victim = _first_mem(copy_of)
    victim.unlink()
    code, text = run_cli(["rtlsim", copy_of, "--data", tiny_data, "--sim", "verilator"], capsys)
    assert code == 2, text
    assert len(error_lines(text)) == 1 and str(victim) in text and "missing" in text


@needs_toolchain
def test_edited_manifest_is_refused(copy_of: Path, tiny_data: Path, capsys) -> None:
    """Item 5: an edited manifest (`pe`) still reported BIT-EXACT with the wrong figures."""
    path = copy_of / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["layers"][0]["pe"] = 3
    path.write_text(json.dumps(manifest, indent=2))
    for args in (["simulate", copy_of, "--data", tiny_data], ["hdl", copy_of], ["options", copy_of],
                 ["rtlsim", copy_of, "--data", tiny_data]):
        code, text = run_cli(args, capsys)
        assert code == 2, (args, text)
        assert len(error_lines(text)) == 1 and "manifest.json was changed after emit" in text


def test_integrity_record_covers_every_emitted_weight_file(copy_of: Path) -> None:
    """Item 5: the manifest records a hash of golden.npz and of every weights/*.mem; an intact
    project loads, a changed golden.npz or a foreign .mem file is refused by name."""
    from keras2clash.backend.project import load_project

    record = json.loads((copy_of / "manifest.json").read_text())["integrity"]
    assert set(record["files"]) == {"golden.npz"} | {f"weights/{p.name}" for p in (copy_of / "weights").glob("*.mem")}
    load_project(copy_of)
    extra = copy_of / "weights" / "stray.mem"
    extra.write_text("0\n")
    with pytest.raises(K2CError, match="stray.mem was not written by emit"):
        load_project(copy_of)
    extra.unlink()
    with open(copy_of / "golden.npz", "ab") as handle:
        handle.write(b"\0")
    with pytest.raises(K2CError, match="golden.npz was changed after emit"):
        load_project(copy_of)
