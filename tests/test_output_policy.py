"""The output policy of every command that writes (keras2clash/fsutil.py): a project, a folder
of reports or a report file is written in full or not at all, never over something that is
there without --force, with the umask's modes; a place it cannot be written to is refused
before any work, in one `error:` line naming it, exit code 2. What the operating system
reports during a run (a full file system, a read-only one, a directory where a file goes, an
I/O error) and a malformed YAML file are one `error:` line too, exit code 2, no traceback,
nothing left behind.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from helpers import FLOW_COMMANDS, error_lines, listing, random_dense_model, run_cli
from keras2clash import api, fsutil
from keras2clash.errors import K2CError

ROOT = Path(__file__).resolve().parent.parent
IRIS = ROOT / "examples" / "iris"


def test_out_dot_is_refused_cleanly(tmp_path: Path, saturating_model: Path, capsys, monkeypatch) -> None:
    """`--out .` is refused (with or without --force): one error line, no `..tmp-*` folder."""
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    for extra in ([], ["--force"]):
        code, text = run_cli(["emit", saturating_model, "--out", ".", *extra], capsys)
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


def test_out_on_a_mount_point_is_refused(tmp_path: Path, saturating_model: Path, capsys, monkeypatch) -> None:
    """An output on a mount point cannot be renamed into place, so it is refused before any
    work: one error line, no `.NAME.tmp-*` folder."""
    mount = tmp_path / "mnt"
    with _tmpfs(mount) as mounted:
        if not mounted:  # no permission to mount: make the check see a mount point
            monkeypatch.setattr(os.path, "ismount", lambda p: Path(p) == mount)
        code, text = run_cli(["emit", saturating_model, "--out", mount], capsys)
        assert code == 2, text
        assert len(error_lines(text)) == 1 and "mount point" in text
        assert listing(tmp_path) == ["mnt"] and listing(mount) == []


def test_rename_across_devices_fails_cleanly(tmp_path: Path, saturating_model: Path, capsys, monkeypatch) -> None:
    """When the final rename fails (EXDEV here), one error line, exit 2, and no
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
    monkeypatch.setattr(
        fsutil, "rename_noreplace", crossing(getattr(fsutil, "rename_noreplace", os.rename)), raising=False
    )
    code, text = run_cli(["emit", saturating_model, "--out", out], capsys)
    assert code == 2, text
    assert len(error_lines(text)) == 1 and str(out) in text
    assert listing(tmp_path) == []


def _chattr(path: Path, flag: str) -> bool:
    return (
        shutil.which("chattr") is not None
        and subprocess.run(["chattr", flag, str(path)], capture_output=True).returncode == 0
    )


@pytest.mark.parametrize("how", ["immutable", "read-only"])
def test_unwritable_parent_is_refused_before_any_work(
    tmp_path: Path, saturating_model: Path, capsys, monkeypatch, how: str
) -> None:
    """A read-only or immutable parent is refused before the model is loaded: one line,
    exit 2."""
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
        code, text = run_cli(["emit", saturating_model, "--out", parent / "net"], capsys)
        assert code == 2, text
        assert len(error_lines(text)) == 1 and str(parent) in text and "Traceback" not in text
        assert listing(parent) == []


def test_folder_appearing_meanwhile_is_not_replaced(
    tmp_path: Path, saturating_model: Path, capsys, monkeypatch
) -> None:
    """A folder that appears at --out between the early check and the final rename is kept:
    without --force nothing is replaced, one error line."""
    out = tmp_path / "net"
    real = api.write_project

    def racing(*args, **kwargs):
        out.mkdir()
        (out / "precious.txt").write_text("keep me")
        return real(*args, **kwargs)

    monkeypatch.setattr(api, "write_project", racing)
    code, text = run_cli(["emit", saturating_model, "--out", out], capsys)
    assert code == 2, text
    assert len(error_lines(text)) == 1 and "use --force" in text
    assert (out / "precious.txt").read_text() == "keep me"
    assert listing(tmp_path) == ["net", "net/precious.txt"]


def test_forced_replacement_keeps_the_original_when_the_rename_fails(tmp_path: Path, monkeypatch) -> None:
    """--force: the old folder is moved aside, and put back if the new one cannot be
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
    """Where renameat2 is missing, the name is claimed with mkdir/link first, so a
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
def test_emitted_folders_respect_the_umask(tmp_path: Path, saturating_model: Path, mask: int) -> None:
    """Emitted folders have the umask's modes, though they start as mkdtemp's 0700 folders."""
    import keras2clash as k2c

    old = os.umask(mask)
    try:
        out = k2c.emit(saturating_model, "1,7,8", tmp_path / "net", show=False)
        other = tmp_path / "deeper" / "folder"
        with fsutil.atomic_directory(other) as tmp:
            (tmp / "f").write_text("x")
    finally:
        os.umask(old)
    for folder in (out, out / "weights", other, other.parent):
        assert folder.stat().st_mode & 0o777 == 0o777 & ~mask, folder


def test_overlong_name_is_refused(tmp_path: Path, saturating_model: Path, capsys) -> None:
    """A 300-character --name or output name (longer than the file system allows) is one error line."""
    code, text = run_cli(["emit", saturating_model, "--out", tmp_path / "net", "--name", "a" * 300], capsys)
    assert code == 2, text
    assert len(error_lines(text)) == 1 and "--name" in text
    code, text = run_cli(["emit", saturating_model, "--out", tmp_path / ("n" * 300)], capsys)
    assert code == 2, text
    assert len(error_lines(text)) == 1 and "longer than" in text
    assert listing(tmp_path) == []


def test_unwritable_report_files_are_refused_before_the_run(tmp_path: Path, saturating_model: Path, capsys) -> None:
    """`options --json` (and simulate's --json/--markdown) to an unwritable path is refused
    before the run, exit 2 (not 1, the mismatch code)."""
    blocker = tmp_path / "file.txt"
    blocker.write_text("not a folder")
    code, text = run_cli(["options", saturating_model, "--json", blocker / "o.json"], capsys)
    assert code == 2, text
    assert len(error_lines(text)) == 1 and str(blocker) in text
    code, text = run_cli(["options", saturating_model, "--csv", tmp_path], capsys)
    assert code == 2 and "is a directory" in text, text
    # simulate checks its report files before it even reads the project
    code, text = run_cli(
        ["simulate", tmp_path / "no-project", "--data", IRIS / "test.npz", "--markdown", blocker / "r.md"], capsys
    )
    assert code == 2 and str(blocker) in text and "not an emitted" not in text, text
    # an existing report file is replaced only with --force
    existing = tmp_path / "o.json"
    existing.write_text("old")
    code, text = run_cli(["options", saturating_model, "--json", existing], capsys)
    assert code == 2 and "use --force" in text and existing.read_text() == "old", text
    code, text = run_cli(["options", saturating_model, "--json", existing, "--force"], capsys)
    assert code == 0, text
    assert json.loads(existing.read_text())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file.txt", "o.json"]


def test_profile_and_report_refuse_a_non_empty_out_dir(
    tmp_path: Path, saturating_model: Path, tiny_data: Path, capsys
) -> None:
    """profile and report refuse a non-empty --out-dir without --force, as sweep does."""
    import keras2clash as k2c

    project = k2c.emit(saturating_model, "1,7,8", tmp_path / "net", show=False)
    for args in (["profile", saturating_model, "--data", tiny_data], ["report", project, "--no-yosys"]):
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


def test_simulate_in_a_read_only_project_fails_cleanly(
    tmp_path: Path, saturating_model: Path, tiny_data: Path, capsys
) -> None:
    """simulate builds in DIR/.build: in an immutable project folder that is one error line
    naming it, exit 2, before any work."""
    import keras2clash as k2c

    project = k2c.emit(saturating_model, "1,7,8", tmp_path / "net", show=False)
    if not _chattr(project, "+i"):
        pytest.skip("chattr +i is not available on this file system")
    try:
        code, text = run_cli(["simulate", project, "--data", tiny_data], capsys)
    finally:
        _chattr(project, "-i")
    assert code == 2, text
    assert len(error_lines(text)) == 1 and str(project / ".build") in text


# --- operating-system errors during a run -------------------------------------------------


def _only_error_line(code: int, text: str) -> str:
    """The one `error:` line of a failed command (exit 2, no traceback)."""
    assert code == 2, text
    assert "Traceback" not in text, text
    lines = error_lines(text)
    assert len(lines) == 1, text
    return lines[0]


def test_a_full_file_system_is_one_error_line(tmp_path: Path, capsys) -> None:
    """emit onto a 200 kB tmpfs (the project's Clash blocks alone are larger): the line names
    the file being written at its final place and the project; nothing is left behind."""
    model = tmp_path / "wide.keras"
    random_dense_model([(256, "relu"), (10, "linear")], n_in=256, seed=1).save(model)
    mount = tmp_path / "small"
    with _tmpfs(mount, "size=200k") as mounted:
        if not mounted:
            pytest.skip("no permission to mount a tmpfs")
        code, text = run_cli(["emit", model, "--out", mount / "net"], capsys)
        line = _only_error_line(code, text)
        assert "No space left on device" in line and f"nothing was written to {mount / 'net'}" in line
        assert f"{mount / 'net'}{os.sep}" in line and ".tmp-" not in line  # the file, at its final place
        assert listing(mount) == []


def test_a_file_system_turned_read_only_mid_run(tmp_path: Path, saturating_model: Path, capsys, monkeypatch) -> None:
    """The output's file system becomes read-only after the early checks, while the model
    loads: one line naming the output, and nothing written."""
    import keras2clash.network as network

    parent = tmp_path / "disk"
    real = network.load_model

    def load_then_lock(*args, **kwargs):
        subprocess.run(["mount", "-o", "remount,ro", str(parent)], check=True, capture_output=True)
        return real(*args, **kwargs)

    with _tmpfs(parent) as mounted:
        if not mounted:
            pytest.skip("no permission to mount a tmpfs")
        monkeypatch.setattr(network, "load_model", load_then_lock)
        code, text = run_cli(["emit", saturating_model, "--out", parent / "net"], capsys)
        line = _only_error_line(code, text)
        assert str(parent / "net") in line and "Read-only file system" in line
        assert listing(parent) == []


def test_a_directory_where_a_file_goes(tmp_path: Path, saturating_model: Path, capsys, monkeypatch) -> None:
    """A weight file's name is taken by a directory while emit writes the project: one line
    naming the file at its final place, and the temporary folder is removed."""
    from keras2clash.backend import emitter

    work = tmp_path / "work"
    out = work / "net"
    real = emitter.memfile_text

    def take_the_next_name(*args, **kwargs):
        (tmp,) = work.glob(".net.tmp-*")
        (tmp / "weights" / "dense_1.mem").mkdir(exist_ok=True)
        return real(*args, **kwargs)

    monkeypatch.setattr(emitter, "memfile_text", take_the_next_name)
    code, text = run_cli(["emit", saturating_model, "--out", out], capsys)
    line = _only_error_line(code, text)
    assert f"{out / 'weights' / 'dense_1.mem'}: Is a directory" in line
    assert f"nothing was written to {out}" in line
    assert listing(tmp_path) == []


@pytest.mark.parametrize(
    ("command", "function"),
    FLOW_COMMANDS
    + [
        (["testbench", "PROJECT", "--data", "DATA"], "testbench"),
        (["synth", "PROJECT"], "synth"),
    ],
)
def test_io_errors_are_one_error_line(tmp_path: Path, monkeypatch, capsys, command, function) -> None:
    """An I/O error escaping any command: the path and the errno's text, exit 2."""
    disk = str(tmp_path / "disk" / "file")

    def failing(*args, **kwargs):
        raise OSError(errno.EIO, os.strerror(errno.EIO), disk)

    monkeypatch.setattr(api, function, failing)
    args = [
        {
            "MODEL": str(tmp_path / "m.keras"),
            "OUT": str(tmp_path / "o"),
            "PROJECT": str(tmp_path),
            "DATA": str(tmp_path / "d.npz"),
        }.get(a, a)
        for a in command
    ]
    code, text = run_cli(args, capsys)
    assert _only_error_line(code, text) == f"error: {disk}: {os.strerror(errno.EIO)}"


BAD_YAML = "default: 1,7,8\nlayers:\n  dense_0: {w: 1,7,8\n  dense_1: [\n"
"""A flow mapping left open: PyYAML reports line 4, column 10 (and where the mapping began)."""


@pytest.mark.parametrize("command", ["emit --layer-formats", "emit --hls4ml-config", "search run"])
def test_malformed_yaml_is_one_error_line(tmp_path: Path, saturating_model: Path, capsys, command: str) -> None:
    """One line naming the file, the line and the column, without the parser's quoted
    context (its source lines and caret)."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD_YAML)
    out = tmp_path / "out"
    args = {
        "emit --layer-formats": ["emit", saturating_model, "--layer-formats", bad, "--out", out],
        "emit --hls4ml-config": ["emit", saturating_model, "--hls4ml-config", bad, "--out", out],
        "search run": ["search", "run", bad, "--out", out],
    }[command]
    code, text = run_cli(args, capsys)
    line = _only_error_line(code, text)
    assert str(bad) in line and "not valid YAML at line 4, column 10: expected ',' or '}'" in line, line
    assert "^" not in text and "<unicode string>" not in text
    assert [line for line in text.splitlines() if line.strip()] == [line]
    assert listing(tmp_path) == ["bad.yaml"]


def test_a_search_worker_reports_one_error_line(tmp_path: Path, capsys, monkeypatch) -> None:
    """A search worker process (`python -m keras2clash.search.study`) prints what stops it as
    one line and exits 2; the parent then reports the failed worker."""
    from keras2clash.search import study

    code = study.worker_main([str(tmp_path / "nowhere"), "sqlite:///unused.db", "1", "3"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: search worker 3: ") and "is not a search folder" in err
    assert len(err.strip().splitlines()) == 1

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "study.db"))

    monkeypatch.setattr(study, "open_folder", full)
    assert study.worker_main([str(tmp_path), "sqlite:///unused.db", "1", "0"]) == 2
    assert (
        capsys.readouterr().err.strip() == f"error: search worker 0: {tmp_path / 'study.db'}: No space left on device"
    )
