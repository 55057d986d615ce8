"""Outputs appear whole or not at all: one policy for every command that writes.

- **Checked before any work** (`check_writable_target`, `check_output_file`): the target is
  not a file where a folder goes (or a folder where a file goes), not the current directory
  or one holding it, not a mount point, its name fits the file system, and its nearest
  existing parent is a folder keras2clash can create entries in (probed by creating and
  removing one, so read-only mounts and immutable folders are caught too, even as root).
- **Never overwrite without --force**: a non-empty folder, or an existing file, is refused
  unless `force`; so is one that appears while keras2clash works (the final rename cannot
  replace it: `renameat2(RENAME_NOREPLACE)`, or claiming the name with `mkdir`/`link`,
  which fail if anything is there).
- **Nothing half-written**: every folder is built under a temporary name beside its
  destination (same parent, so the rename never crosses a mount point) and renamed into
  place at the end; on any error, or Ctrl-C, the temporary folder, a folder moved aside
  for --force (moved back), and parent folders created for it are removed.
- **The umask is respected**: folders get `0o777 & ~umask` like `mkdir` would give them
  (`tempfile.mkdtemp` alone makes them 0700).
- Every problem is a `K2CError`: one `error: ...` line naming the path, exit code 2. That
  includes what the operating system reports while a folder is being written (no space
  left, a read-only or immutable place, an I/O error, a directory where a file goes): the
  file it names, seen at its final place, and the output that was not written.
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from keras2clash.errors import K2CError, os_error_text
from keras2clash.procs import deferred_interrupt

_TMP_NAME_CHARS = 40
"""The temporary folder is `.<first 40 characters of the name>.tmp-XXXXXXXX`."""


def _absolute(path: Path | str) -> Path:
    """An absolute path without resolving symlinks of the last component (`.`/`..` folded)."""
    return Path(os.path.abspath(os.fspath(path)))


def _nearest_existing(path: Path) -> Path:
    while not os.path.lexists(path) and path != path.parent:
        path = path.parent
    return path


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _check_names(target: Path, what: str) -> None:
    """Every component of `target` must fit the file system's name length."""
    try:
        name_max = os.pathconf(_nearest_existing(target.parent), "PC_NAME_MAX")
    except (OSError, ValueError):
        name_max = 255
    too_long = [part for part in target.parts if len(os.fsencode(part)) > name_max]
    if too_long:
        raise K2CError(
            f"cannot write {what} {target.parent / (too_long[0][:40] + '...')}: a name "
            f"{len(os.fsencode(too_long[0]))} bytes long is longer than the {name_max} bytes "
            "the file system allows"
        )


def _check_parent(target: Path, what: str) -> None:
    """The folder `target` will be created in (or its nearest existing ancestor, since missing
    parents are created) must be a folder we can create entries in."""
    parent = _nearest_existing(target.parent)
    if not parent.is_dir():
        raise K2CError(f"cannot write {what} {target}: {parent} is not a directory")
    try:
        probe = tempfile.mkdtemp(prefix=".k2c-probe-", dir=parent)
        os.rmdir(probe)
    except OSError as exc:
        raise K2CError(f"cannot write {what} {target}: cannot create anything in {parent} ({_reason(exc)})") from None


def check_writable_target(out: Path, force: bool) -> None:
    """Refuse early (before any work) an output folder keras2clash must not or cannot write
    (commands call this on the user's --out / --out-dir before they start)."""
    out = _absolute(out)
    try:
        cwd = _absolute(Path.cwd())
    except OSError:
        cwd = None
    if cwd is not None and (out == cwd or out in cwd.parents):
        raise K2CError(
            f"output directory {out} is the current directory or holds it; it cannot be "
            f"replaced: give a new folder, e.g. {out / 'net'}"
        )
    _check_target(out, force)


def _check_target(out: Path, force: bool) -> None:
    _check_names(out, "output directory")
    try:
        _check_existing(out, force)
    except OSError as exc:
        raise K2CError(f"cannot use output directory {out} ({_reason(exc)})") from None
    _check_parent(out, "output directory")


def _check_existing(out: Path, force: bool) -> None:
    if os.path.lexists(out) and not out.is_dir():
        raise K2CError(f"output path {out} exists and is not a directory")
    if out.is_dir() and os.path.ismount(out):
        raise K2CError(
            f"output directory {out} is a mount point; it cannot be replaced by renaming: "
            f"give a folder inside it, e.g. {out / 'net'}"
        )
    if out.is_dir():
        try:
            filled = any(out.iterdir())
        except OSError as exc:
            raise K2CError(f"cannot read output directory {out} ({_reason(exc)})") from None
        if filled and not force:
            raise K2CError(f"output directory {out} is not empty; use --force to replace it")


def check_output_file(path: Path | str | None, force: bool = False) -> None:
    """Refuse early a report file (--json, --markdown, --csv) that cannot or must not be written."""
    if path is None:
        return
    path = _absolute(path)
    _check_names(path, "output file")
    if path.is_dir():
        raise K2CError(f"output file {path} is a directory")
    if os.path.lexists(path) and not force:
        raise K2CError(f"output file {path} exists; use --force to replace it")
    _check_parent(path, "output file")


def umask() -> int:
    """The process umask (read from /proc on Linux; else set and restored)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _make_parents(folder: Path) -> list[Path]:
    """mkdir -p, returning the folders it created (outermost first)."""
    missing = []
    while not os.path.lexists(folder) and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    created = []
    for path in reversed(missing):
        try:
            os.mkdir(path)
        except FileExistsError:
            continue
        except OSError as exc:
            _remove_created(created)
            raise K2CError(f"cannot create directory {path} ({_reason(exc)})") from None
        created.append(path)
    return created


def _remove_created(created: list[Path]) -> None:
    for path in reversed(created):
        try:
            os.rmdir(path)
        except OSError:
            break


_RENAME_NOREPLACE = 1
_AT_FDCWD = -100


def _renameat2() -> object | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        function = libc.renameat2
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


def rename_noreplace(src: Path, dst: Path) -> None:
    """Rename `src` to `dst`, failing with FileExistsError if anything is at `dst`, atomically:
    Linux `renameat2(RENAME_NOREPLACE)`; where that is missing, claim `dst` first (`mkdir`
    for a folder, `link` for a file: both fail if the name exists), then rename onto the claim."""
    function = _renameat2()
    if function is not None:
        if function(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), _RENAME_NOREPLACE) == 0:
            return
        code = ctypes.get_errno()
        if code not in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
            raise OSError(code, os.strerror(code), str(dst))
    if Path(src).is_dir():
        os.mkdir(dst)  # FileExistsError if anything is there
        try:
            os.rename(src, dst)  # onto our own empty folder; fails if something was put in it
        except OSError:
            try:
                os.rmdir(dst)
            except OSError:
                pass
            raise
    else:
        os.link(src, dst)  # FileExistsError if anything is there
        os.unlink(src)


def _publish(tmp: Path, out: Path, force: bool) -> None:
    """Move the finished folder `tmp` to `out`; replace what is there only with `force`."""
    try:
        rename_noreplace(tmp, out)
        return
    except FileExistsError:
        pass
    if out.is_dir() and not out.is_symlink() and not any(out.iterdir()):
        try:
            os.rename(tmp, out)  # replaces an empty folder, never a filled one
            return
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
    if not force:
        raise K2CError(
            f"output directory {out} appeared (or was filled) while keras2clash was writing it; "
            "nothing was replaced: use --force to replace it"
        )
    old = Path(tempfile.mkdtemp(prefix=f".{out.name[:_TMP_NAME_CHARS]}.old-", dir=out.parent))
    aside = old / "replaced"
    try:
        os.rename(out, aside)
    except BaseException:
        shutil.rmtree(old, ignore_errors=True)
        raise
    try:
        rename_noreplace(tmp, out)
    except BaseException:
        try:
            os.rename(aside, out)  # put it back
        except OSError as exc:
            raise K2CError(
                f"replacing {out} failed and it could not be put back ({_reason(exc)}); "
                f"the previous contents are kept at {aside}"
            ) from None
        shutil.rmtree(old, ignore_errors=True)
        raise
    shutil.rmtree(old, ignore_errors=True)  # the replaced contents, only once the new ones are in place


@contextmanager
def atomic_directory(out: Path, force: bool = False) -> Iterator[Path]:
    """Yield a fresh temporary directory that becomes `out` when the block succeeds
    (the module docstring has the policy)."""
    out = _absolute(out)
    _check_target(out, force)
    created = _make_parents(out.parent)
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name[:_TMP_NAME_CHARS]}.tmp-", dir=out.parent))
        os.chmod(tmp, 0o777 & ~umask())
    except OSError as exc:
        _remove_created(created)
        raise K2CError(f"cannot create output directory {out} ({_reason(exc)})") from None
    try:
        try:
            yield tmp
        except OSError as exc:
            raise K2CError(f"{os_error_text(_at_final_place(exc, tmp, out))}; nothing was written to {out}") from None
        try:
            with deferred_interrupt():  # a Ctrl-C in the rename would leave neither the old nor the new
                _publish(tmp, out, force)
        except OSError as exc:
            raise K2CError(f"cannot move the finished output into place at {out} ({_reason(exc)})") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        _remove_created(created)
        raise


def _at_final_place(exc: OSError, tmp: Path, out: Path) -> OSError:
    """`exc` with the paths inside the temporary folder `tmp` named where they were going
    (`out/...`): the temporary folder is removed, the user knows `out`."""

    def inside(text: str, folder: Path) -> bool:
        return text == str(folder) or text.startswith(str(folder) + os.sep)

    def moved(name: object) -> str | None:
        if name is None:
            return None
        text = os.fsdecode(name)  # type: ignore[arg-type]
        return str(out) + text[len(str(tmp)) :] if inside(text, tmp) else text

    names = [name for name in (moved(exc.filename), moved(exc.filename2)) if name is not None]
    written = [name for name in names if inside(name, out)]
    if len(names) == 2 and len(written) == 1:  # a copy into the output: the file being written
        names = written
    return OSError(exc.errno, exc.strerror or str(exc), *names[:1], None, *names[1:])


def work_dir(path: Path | str) -> Path:
    """A working folder keras2clash owns (a project's `.build/...`): created if missing;
    one K2CError naming it if it cannot be (e.g. a read-only or immutable project)."""
    path = _absolute(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = tempfile.mkdtemp(prefix=".k2c-probe-", dir=path)
        os.rmdir(probe)
    except OSError as exc:
        raise K2CError(
            f"cannot write the working folder {path} ({_reason(exc)}); is the project folder read-only?"
        ) from None
    return path


def write_output_file(path: Path | str, text: str | bytes, force: bool = False) -> None:
    """Write a report file (text, or bytes such as a PNG) whole (a temporary file beside it, then a rename that replaces an
    existing file only with `force`); problems are one K2CError naming the file."""
    path = _absolute(path)
    check_output_file(path, force)
    created = _make_parents(path.parent)
    tmp: Path | None = None
    done = False
    try:
        fd, name = tempfile.mkstemp(prefix=f".{path.name[:_TMP_NAME_CHARS]}.tmp-", dir=path.parent)
        tmp = Path(name)
        with os.fdopen(fd, "wb" if isinstance(text, bytes) else "w") as handle:
            handle.write(text)
        os.chmod(tmp, 0o666 & ~umask())
        if force:
            os.replace(tmp, path)
        else:
            try:
                rename_noreplace(tmp, path)
            except FileExistsError:
                raise K2CError(
                    f"output file {path} appeared while keras2clash was writing it; use --force to replace it"
                ) from None
        done = True
    except OSError as exc:
        raise K2CError(f"cannot write output file {path} ({_reason(exc)})") from None
    finally:
        if not done:
            if tmp is not None:
                tmp.unlink(missing_ok=True)
            _remove_created(created)


def atomic_write_text(path: Path, text: str) -> None:
    """Write a file under a temporary name, then rename it into place (replacing it)."""
    write_output_file(path, text, force=True)


def cache_root() -> Path | None:
    """Where keras2clash keeps what it reuses between projects (compiled blocks, solved adder
    graphs): $K2C_CACHE_DIR (empty: no cache), else $XDG_CACHE_HOME/keras2clash, else
    ~/.cache/keras2clash."""
    configured = os.environ.get("K2C_CACHE_DIR")
    if configured is not None:
        return Path(configured) if configured else None
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "keras2clash"
