"""A project changed after emit is refused, naming what changed: a malformed, deleted or
foreign weight file, an edited manifest, a changed golden.npz (the manifest's record of
hashes). One `error:` line, exit code 2, for hdl, simulate, rtlsim and options.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from helpers import error_lines, needs_toolchain, run_cli
from keras2clash.errors import K2CError


@pytest.fixture(scope="module")
def built_project(tmp_path_factory, saturating_model: Path) -> Path:
    """An emitted project with its Verilog (Clash runs once for the module)."""
    import keras2clash as k2c

    project = k2c.emit(saturating_model, "1,7,8", tmp_path_factory.mktemp("built") / "net", [2, 1], show=False)
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
    """`hdl` refuses a malformed .mem file (a lint-clean run would ship it), naming it."""
    victim = _first_mem(copy_of)
    victim.write_text(victim.read_text().replace("0", "2", 1))
    shutil.rmtree(copy_of / "hdl")
    code, text = run_cli(["hdl", copy_of], capsys)
    assert code == 2, text
    assert len(error_lines(text)) == 1 and str(victim) in text
    assert not (copy_of / "hdl").exists()


@needs_toolchain
def test_simulate_names_the_malformed_weight_file(copy_of: Path, tiny_data: Path, capsys) -> None:
    """simulate's error on a malformed .mem names the file."""
    victim = _first_mem(copy_of)
    victim.write_text(victim.read_text()[:-3] + "x\n")
    code, text = run_cli(["simulate", copy_of, "--data", tiny_data], capsys)
    assert code == 2, text
    assert len(error_lines(text)) == 1 and str(victim) in text


@needs_toolchain
def test_rtlsim_notices_a_deleted_weight_file(copy_of: Path, tiny_data: Path, capsys) -> None:
    """rtlsim notices a deleted weight file (the HDL folder holds a copy it could use)."""
    victim = _first_mem(copy_of)
    victim.unlink()
    code, text = run_cli(["rtlsim", copy_of, "--data", tiny_data, "--sim", "verilator"], capsys)
    assert code == 2, text
    assert len(error_lines(text)) == 1 and str(victim) in text and "missing" in text


@needs_toolchain
def test_edited_manifest_is_refused(copy_of: Path, tiny_data: Path, capsys) -> None:
    """An edited manifest (`pe`) is refused by every command (it would report BIT-EXACT with
    the wrong figures)."""
    path = copy_of / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["layers"][0]["knobs"]["pe"] = 3
    path.write_text(json.dumps(manifest, indent=2))
    for args in (
        ["simulate", copy_of, "--data", tiny_data],
        ["hdl", copy_of],
        ["options", copy_of],
        ["rtlsim", copy_of, "--data", tiny_data],
    ):
        code, text = run_cli(args, capsys)
        assert code == 2, (args, text)
        assert len(error_lines(text)) == 1 and "manifest.json was changed after emit" in text


def test_integrity_record_covers_every_emitted_weight_file(copy_of: Path) -> None:
    """The manifest records a hash of golden.npz and of every weights/*.mem; an intact
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
