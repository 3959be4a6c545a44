"""Datasets for calibration, evaluation and checks: arrays named after the model's inputs.

An ``.npz`` holds one array per model input with samples on the first axis (plus ``labels``
for evaluation). A sample whose array has the model input's rank is taken as a batch of
one (``arr[i:i+1]``); one rank higher, ``arr[i]`` is the whole input.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from edgeopt.files import read_text_file


@dataclass
class Dataset:
    arrays: dict[str, np.ndarray]
    labels: np.ndarray | None = None
    source: str = ""
    synthetic: bool = False
    ranks: dict[str, int] = field(default_factory=dict)  # the model input's rank, per name
    notes: list[str] = field(default_factory=list)  # what loading changed (dtype casts): for warnings
    # each sample's position in the data set it was taken from (subset, split); None: the data as loaded
    positions: np.ndarray | None = None

    def __len__(self) -> int:
        return len(next(iter(self.arrays.values()))) if self.arrays else 0

    def feed(self, i: int) -> dict[str, np.ndarray]:
        out = {}
        for name, arr in self.arrays.items():
            rank = self.ranks.get(name, arr.ndim - 1)
            out[name] = arr[i : i + 1] if arr.ndim == rank else np.asarray(arr[i])
        return out

    def feeds(self, n: int | None = None, start: int = 0) -> list[dict[str, np.ndarray]]:
        stop = len(self) if n is None else min(len(self), start + n)
        return [self.feed(i) for i in range(start, stop)]

    def split(self, fraction: float, seed: int = 0) -> tuple[Dataset, Dataset]:
        """Two disjoint parts (e.g. search / confirm), shuffled with a fixed seed."""
        idx = np.random.default_rng(seed).permutation(len(self))
        k = int(round(len(self) * fraction))
        return self.subset(idx[:k]), self.subset(idx[k:])

    def subset(self, idx) -> Dataset:
        return Dataset(
            {k: v[idx] for k, v in self.arrays.items()},
            None if self.labels is None else self.labels[idx],
            self.source,
            self.synthetic,
            dict(self.ranks),
            list(self.notes),
            np.asarray(idx) if self.positions is None else self.positions[idx],
        )


# --------------------------------------------------------------------------- loading and checking
# ``inputs`` below are the model's inputs (``edgeopt.model.TensorSpec``) with static shapes.

LABELS = "labels"
_SAFE_KINDS = {"f": "f", "i": "iu", "u": "iu"}  # model dtype kind -> data dtype kinds that may be cast


def _err(message: str, hint: str | None = None):
    from edgeopt.errors import BadDataError

    return BadDataError(message, hint)


def load_data(path, inputs, *, preprocess=None, role: str = "calib", need_labels: bool = False) -> Dataset:
    """A checked :class:`Dataset` from an ``.npz`` or an image folder (with ``preprocess``)."""
    from pathlib import Path

    p = Path(path)
    if not p.exists():
        raise _err(f"--{role} '{p}' not found", "check the path")
    if p.is_dir():
        ds = load_image_folder(p, inputs, preprocess, role=role)
    elif p.suffix.lower() == ".npz":
        ds = load_npz(p, role=role)
    else:
        raise _err(f"--{role} '{p}' is neither an .npz file nor a folder of images", "pass an .npz with arrays named after the model inputs")
    ds = check_dataset(ds, inputs, role=role)
    if need_labels and ds.labels is None:
        raise _err(f"--{role} '{p}' has no 'labels' array", "add labels (one int per sample) for accuracy figures")
    return ds


def load_npz(path, *, role: str = "calib") -> Dataset:
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: _npz_array(z, k, path, role) for k in z.files}
    except _PythonObjects as err:
        raise _err(f"--{role} '{path}': array '{err.name}' holds Python objects (dtype=object), which edgeopt "
                   "never loads (loading them would run code from the file)",
                   f"store '{err.name}' as numbers (int64 labels, float32 inputs), then numpy.savez") from err
    except Exception as err:  # noqa: BLE001 - zip/pickle/format errors all mean the same to the user
        raise _err(f"--{role} '{path}' is not a readable .npz ({type(err).__name__})", "write it with numpy.savez") from err
    labels = arrays.pop(LABELS, None)
    return Dataset(arrays, labels, source=str(path))


class _PythonObjects(Exception):
    def __init__(self, name: str):
        super().__init__(name)
        self.name = name


def _npz_array(z, name: str, path, role: str) -> np.ndarray:
    """One array of an open ``.npz``; an object array (pickled Python objects) is refused by name."""
    try:
        return z[name]
    except ValueError as err:
        if "allow_pickle" in str(err) or "Object arrays" in str(err):
            raise _PythonObjects(name) from err
        raise


def _sample_shape(arr: np.ndarray, rank: int) -> tuple:
    return (1, *arr.shape[1:]) if arr.ndim == rank else tuple(arr.shape[1:])


def _layout_hint(got: tuple, want: tuple) -> str | None:
    if len(got) == 4 and len(want) == 4 and sorted(got) == sorted(want):
        if (got[0], got[3], got[1], got[2]) == want:
            return "the data looks NHWC but the model takes NCHW: arr.transpose(0, 3, 1, 2)"
        if (got[0], got[2], got[3], got[1]) == want:
            return "the data looks NCHW but the model takes NHWC: arr.transpose(0, 2, 3, 1)"
    return None


def _cast(name: str, arr: np.ndarray, want: str, role: str, notes: list[str]) -> np.ndarray:
    """Cast to the input's dtype, noting what was cast; refused where the cast would change values
    (fractions into an int input, values out of the target type's range, ints too big for a float)."""
    want_dt = np.dtype(want)
    if arr.dtype == want_dt:
        return arr
    ok = _SAFE_KINDS.get(want_dt.kind, "")
    if want_dt.kind == "f":
        ok = "fiub"
    elif want_dt.kind in "iu":
        ok = "fiub"
    if arr.dtype.kind not in ok:
        raise _err(f"--{role}: array '{name}' is {arr.dtype}; the model input takes {want_dt}",
                   f"save it as {want_dt} (e.g. arr.astype(np.{want_dt.name}))")
    fix = f"save it as {want_dt} yourself if that is what you mean"
    if want_dt.kind in "iu" and arr.dtype.kind == "f":
        finite = np.isfinite(arr)
        if not np.all(finite) or np.any(arr != np.round(arr)):
            raise _err(f"--{role}: array '{name}' is {arr.dtype} with fractional or non-finite values; the model "
                       f"input takes {want_dt}: casting would change them", fix)
    if want_dt.kind in "iu" and arr.size:
        info = np.iinfo(want_dt)
        lo, hi = arr.min(), arr.max()
        if lo < info.min or hi > info.max:
            raise _err(f"--{role}: array '{name}' holds values {lo}..{hi}, outside {want_dt}'s range "
                       f"({info.min}..{info.max})", fix)
    if want_dt.kind == "f" and arr.dtype.kind in "iu" and arr.size:
        exact = 2 ** (np.finfo(want_dt).nmant + 1)
        if max(abs(int(arr.min())), abs(int(arr.max()))) > exact:
            raise _err(f"--{role}: array '{name}' holds integers beyond ±{exact}, which {want_dt} cannot hold exactly",
                       fix)
    if want_dt.kind == "f" and arr.dtype.kind == "f" and arr.size and np.any(np.abs(arr[np.isfinite(arr)])
                                                                           > np.finfo(want_dt).max):
        raise _err(f"--{role}: array '{name}' holds values beyond {want_dt}'s range", fix)
    notes.append(f"--{role}: array '{name}' was cast from {arr.dtype} to {want_dt} (the model input's dtype)")
    return arr.astype(want_dt)


def check_labels(labels, n: int, role: str) -> None:
    """What can be told about labels without the model: numbers (not strings), one per sample. (Range,
    one-hot and chance are checked against the model's output by :mod:`edgeopt.metrics`.)"""
    from edgeopt.metrics.labels import count_check, refuse_non_numeric

    refuse_non_numeric(labels, role)
    count_check(labels, n, role)
    arr = np.asarray(labels)
    if arr.dtype.kind == "f" and not np.all(np.isfinite(arr)):
        raise _err(f"--{role}: labels hold NaN/Inf", "labels are class indices (ints)")


def check_dataset(ds: Dataset, inputs, *, role: str = "calib") -> Dataset:
    """Names, sizes, shapes, dtypes and values against the model's inputs; casts safe dtypes."""
    from edgeopt.errors import did_you_mean

    want = {t.name: t for t in inputs}
    have = set(ds.arrays)
    for name in sorted(have - set(want)):
        raise _err(f"--{role}: array '{name}' is not a model input",
                   did_you_mean(name, want) or f"the model's inputs are: {', '.join(want)}")
    for name in want:
        if name not in have:
            raise _err(f"--{role}: no array named '{name}' (a model input)",
                       f"the file has: {', '.join(sorted(have)) or 'nothing'}; name the arrays after the model inputs")
    counts = {name: len(a) if a.ndim else 0 for name, a in ds.arrays.items()}
    if not counts or min(counts.values()) == 0:
        raise _err(f"--{role}: the data set is empty", "give at least one sample")
    if len(set(counts.values())) > 1:
        raise _err(f"--{role}: arrays have different sample counts {counts}", "samples go on the first axis of every array")
    if ds.labels is not None:
        check_labels(ds.labels, len(ds), role)
    arrays, ranks, notes = {}, {}, list(ds.notes)
    for name, spec in want.items():
        arr = np.asarray(ds.arrays[name])
        rank = len(spec.shape)
        shape = _sample_shape(arr, rank) if arr.ndim in (rank, rank + 1) else tuple(arr.shape)
        if arr.ndim not in (rank, rank + 1) or shape != tuple(spec.shape):
            raise _err(f"--{role}: array '{name}' has samples of shape {list(shape)}; the model input is {list(spec.shape)}",
                       _layout_hint(shape, tuple(spec.shape)) or "samples go on the first axis, each shaped like the input")
        arr = _cast(name, arr, spec.dtype, role, notes)
        if arr.dtype.kind == "f" and not np.all(np.isfinite(arr)):
            bad = int(arr.size - np.count_nonzero(np.isfinite(arr)))
            raise _err(f"--{role}: array '{name}' holds {bad} NaN/Inf values", "clean the data before converting")
        arrays[name], ranks[name] = arr, rank
    return Dataset(arrays, ds.labels, ds.source, ds.synthetic, ranks, notes)


def synthetic_dataset(inputs, n: int = 32, *, seed: int = 0, distribution: str = "uniform") -> Dataset:
    """Random samples at the inputs' shapes (uniform in [0, 1) or standard normal); labelled synthetic."""
    rng = np.random.default_rng(seed)
    arrays = {}
    for spec in inputs:
        shape = (n, *[d if isinstance(d, int) and d > 0 else 1 for d in spec.shape])
        dt = np.dtype(spec.dtype) if spec.dtype not in ("", None) else np.dtype("float32")
        if dt.kind == "f":
            a = rng.standard_normal(shape) if distribution == "normal" else rng.random(shape)
        elif dt.kind in "iu":
            a = rng.integers(0, 2, shape)
        else:
            a = np.zeros(shape)
        arrays[spec.name] = a.astype(dt)
    return Dataset(arrays, None, source=f"synthetic ({distribution}, seed {seed})", synthetic=True,
                   ranks={s.name: len(s.shape) for s in inputs})


# --------------------------------------------------------------------------- image folders

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp")


def parse_preprocess(spec):
    """``resize=224x224,mean=0.485:0.456:0.406,...`` or a YAML file -> :class:`Preprocess`."""
    from pathlib import Path

    import yaml
    from pydantic import ValidationError

    from edgeopt.errors import BadInputError, did_you_mean

    if spec is None or isinstance(spec, Preprocess):
        return spec
    if isinstance(spec, dict):
        data = spec
    elif str(spec).endswith((".yaml", ".yml")):
        if not Path(spec).is_file():
            raise BadInputError(f"--preprocess file '{spec}' not found", "check the path")
        data = yaml.safe_load(read_text_file(spec, "--preprocess file")) or {}
    else:
        data = {}
        for part in str(spec).split(","):
            key, sep, value = part.partition("=")
            if not sep:
                raise BadInputError(f"--preprocess '{part}' is not KEY=VALUE", "e.g. resize=224x224,scale=255")
            data[key.strip()] = value.strip()
        for key in ("mean", "std"):
            if key in data:
                data[key] = [float(v) for v in str(data[key]).split(":")]
        if "resize" in data:
            data["resize"] = [int(v) for v in str(data["resize"]).split("x")]
    try:
        return Preprocess.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        key = str(first["loc"][0]) if first["loc"] else ""
        hint = did_you_mean(key, Preprocess.model_fields) if first["type"] == "extra_forbidden" else None
        raise BadInputError(f"--preprocess: '{key}': {first['msg']}", hint or f"keys: {', '.join(Preprocess.model_fields)}") from err


def _preprocess_model():
    from typing import Literal

    from pydantic import BaseModel, ConfigDict, Field

    class Preprocess(BaseModel):
        """How an image file becomes a model input: ``(pixels / scale - mean) / std``."""

        model_config = ConfigDict(extra="forbid", frozen=True)
        resize: tuple[int, int] | None = None  # H x W
        mean: tuple[float, ...] = (0.0,)
        std: tuple[float, ...] = (1.0,)
        scale: float = Field(default=255.0, gt=0)
        layout: Literal["NCHW", "NHWC"] = "NCHW"
        channels: Literal["RGB", "BGR", "L"] = "RGB"

    return Preprocess


Preprocess = _preprocess_model()


def _image_array(path, pre, size) -> np.ndarray:
    from PIL import Image

    with Image.open(path) as im:
        im = im.convert("L" if pre.channels == "L" else "RGB")
        if size is not None:
            im = im.resize((size[1], size[0]), Image.BILINEAR)
        a = np.asarray(im, dtype=np.float32)
    a = a[..., None] if a.ndim == 2 else a
    if pre.channels == "BGR":
        a = a[..., ::-1]
    a = (a / pre.scale - np.asarray(pre.mean, np.float32)) / np.asarray(pre.std, np.float32)
    return a.transpose(2, 0, 1) if pre.layout == "NCHW" else a


def load_image_folder(folder, inputs, preprocess, *, role: str = "calib") -> Dataset:
    """Images in ``folder`` (unlabelled) or in class sub-folders (label = folder name's index)."""
    pre = parse_preprocess(preprocess)
    if pre is None:
        raise _err(f"--{role} '{folder}' is a folder of images but no --preprocess was given",
                   "e.g. --preprocess resize=224x224,mean=0.485:0.456:0.406,std=0.229:0.224:0.225,scale=255")
    if len(inputs) != 1:
        raise _err(f"--{role}: an image folder feeds one input; the model has {len(inputs)}", "use an .npz instead")
    spec = inputs[0]
    subdirs = sorted(d for d in folder.iterdir() if d.is_dir())
    files, labels = [], []
    if subdirs:
        numeric = all(d.name.isdigit() for d in subdirs)
        for idx, d in enumerate(subdirs):
            for f in sorted(d.iterdir()):
                if f.suffix.lower() in IMAGE_SUFFIXES:
                    files.append(f)
                    labels.append(int(d.name) if numeric else idx)
    else:
        files = [f for f in sorted(folder.iterdir()) if f.suffix.lower() in IMAGE_SUFFIXES]
    if not files:
        raise _err(f"--{role} '{folder}' holds no images ({', '.join(IMAGE_SUFFIXES)})", "point it at a folder of images")
    size = pre.resize
    if size is None and len(spec.shape) == 4:
        size = tuple(spec.shape[2:4]) if pre.layout == "NCHW" else tuple(spec.shape[1:3])
    try:
        arr = np.stack([_image_array(f, pre, size) for f in files]).astype(np.float32)
    except (OSError, ValueError) as err:
        raise _err(f"--{role}: cannot read the images in '{folder}' ({err})", "check the files and --preprocess") from err
    return Dataset({spec.name: arr}, np.asarray(labels, np.int64) if labels else None, source=str(folder))
