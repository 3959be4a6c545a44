"""Loading and checking calibration / evaluation data against a model's inputs."""

from __future__ import annotations

import numpy as np
import pytest

from edgeopt.data import check_dataset, load_data, parse_preprocess, synthetic_dataset
from edgeopt.errors import BadDataError, BadInputError, ExitCode
from edgeopt.model import TensorSpec

X = [TensorSpec("x", (1, 3, 8, 8), "float32")]


def _npz(tmp_path, **arrays):
    p = tmp_path / "d.npz"
    np.savez(p, **arrays)
    return p


def _bad(tmp_path, **arrays) -> BadDataError:
    with pytest.raises(BadDataError) as e:
        load_data(_npz(tmp_path, **arrays), X, role="calib")
    assert e.value.exit_code == ExitCode.BAD_INPUT
    return e.value


def test_npz_samples_at_model_rank_and_rank_plus_one(tmp_path):
    a = np.random.default_rng(0).random((5, 3, 8, 8)).astype(np.float32)
    ds = load_data(_npz(tmp_path, x=a, labels=np.arange(5)), X, need_labels=True)
    assert len(ds) == 5 and ds.feed(2)["x"].shape == (1, 3, 8, 8) and list(ds.labels) == [0, 1, 2, 3, 4]
    ds2 = load_data(_npz(tmp_path, x=a[:, None]), X)
    assert ds2.feed(0)["x"].shape == (1, 3, 8, 8)
    np.testing.assert_array_equal(ds2.feed(4)["x"], ds.feed(4)["x"])


def test_safe_casts(tmp_path):
    ds = load_data(_npz(tmp_path, x=np.ones((2, 3, 8, 8), np.float64)), X)
    assert ds.arrays["x"].dtype == np.float32
    ds = load_data(_npz(tmp_path, x=np.ones((2, 3, 8, 8), np.uint8)), X)
    assert ds.arrays["x"].dtype == np.float32


def test_unsafe_dtype_refused(tmp_path):
    e = _bad(tmp_path, x=np.ones((2, 3, 8, 8), np.complex64))
    assert "complex64" in e.message and "float32" in e.message


def test_wrong_shape(tmp_path):
    e = _bad(tmp_path, x=np.ones((2, 3, 7, 8), np.float32))
    assert "[1, 3, 7, 8]" in e.message and "[1, 3, 8, 8]" in e.message


def test_nhwc_layout_mixup_hint(tmp_path):
    e = _bad(tmp_path, x=np.ones((2, 8, 8, 3), np.float32))
    assert "NHWC" in e.hint and "transpose(0, 3, 1, 2)" in e.hint


def test_missing_and_extra_names(tmp_path):
    e = _bad(tmp_path, y=np.ones((2, 3, 8, 8), np.float32))
    assert "'y' is not a model input" in e.message
    e = _bad(tmp_path, x=np.ones((2, 3, 8, 8), np.float32), x2=np.ones((2, 3, 8, 8), np.float32))
    assert "x2" in e.message and "did you mean 'x'" in e.hint


def test_empty_set(tmp_path):
    e = _bad(tmp_path, x=np.ones((0, 3, 8, 8), np.float32))
    assert "empty" in e.message


def test_nan_in_data(tmp_path):
    a = np.ones((3, 3, 8, 8), np.float32)
    a[1, 0, 0, 0] = np.inf
    e = _bad(tmp_path, x=a)
    assert "NaN/Inf" in e.message and "'x'" in e.message


def test_labels_count_and_need_labels(tmp_path):
    e = _bad(tmp_path, x=np.ones((3, 3, 8, 8), np.float32), labels=np.arange(2))
    assert "2 labels for 3 samples" in e.message
    with pytest.raises(BadDataError, match="no 'labels'"):
        load_data(_npz(tmp_path, x=np.ones((3, 3, 8, 8), np.float32)), X, role="eval", need_labels=True)


def test_not_npz_and_missing_file(tmp_path):
    (tmp_path / "d.csv").write_text("1,2\n")
    with pytest.raises(BadDataError, match="neither an .npz"):
        load_data(tmp_path / "d.csv", X)
    with pytest.raises(BadDataError, match="not found"):
        load_data(tmp_path / "nope.npz", X)


def test_synthetic_is_labelled(tmp_path):
    ds = synthetic_dataset(X, 4)
    assert ds.synthetic and "synthetic" in ds.source and ds.feed(0)["x"].shape == (1, 3, 8, 8)
    check_dataset(ds, X)


def test_preprocess_spec_string_and_yaml(tmp_path):
    p = parse_preprocess("resize=4x6,mean=0.5:0.5:0.5,std=0.25:0.25:0.25,layout=NHWC,channels=BGR,scale=255")
    assert p.resize == (4, 6) and p.layout == "NHWC" and p.channels == "BGR" and p.mean == (0.5, 0.5, 0.5)
    y = tmp_path / "pre.yaml"
    y.write_text("resize: [8, 8]\nscale: 1\n")
    assert parse_preprocess(str(y)).scale == 1.0
    with pytest.raises(BadInputError) as e:
        parse_preprocess("sise=4x4")
    assert "did you mean 'resize'" in e.value.hint


def test_image_folder_with_class_subfolders(tmp_path):
    from PIL import Image

    rng = np.random.default_rng(0)
    for label in ("0", "1"):
        (tmp_path / "imgs" / label).mkdir(parents=True)
        for k in range(2):
            Image.fromarray(rng.integers(0, 255, (12, 10, 3), dtype=np.uint8)).save(tmp_path / "imgs" / label / f"{k}.png")
    ds = load_data(tmp_path / "imgs", X, preprocess="resize=8x8,scale=255", role="eval", need_labels=True)
    assert len(ds) == 4 and list(ds.labels) == [0, 0, 1, 1]
    assert ds.feed(0)["x"].shape == (1, 3, 8, 8) and 0.0 <= float(ds.arrays["x"].min()) and float(ds.arrays["x"].max()) <= 1.0
    with pytest.raises(BadDataError, match="no --preprocess"):
        load_data(tmp_path / "imgs", X)


def test_string_labels_refused_in_one_line(tmp_path):
    e = _bad(tmp_path, x=np.ones((3, 3, 8, 8), np.float32), labels=np.array(["cat", "dog", "cat"]))
    assert "labels are strings ('cat', 'dog', 'cat'" in e.message and "\n" not in e.one_line()


def test_casts_are_noted_for_a_warning(tmp_path):
    ds = load_data(_npz(tmp_path, x=np.ones((2, 3, 8, 8), np.uint8)), X)
    assert ds.notes == ["--calib: array 'x' was cast from uint8 to float32 (the model input's dtype)"]
    ds = load_data(_npz(tmp_path, x=np.ones((2, 3, 8, 8), np.float32)), X)
    assert ds.notes == [] and ds.subset([0]).notes == []


def test_lossy_casts_refused(tmp_path):
    ints = [TensorSpec("x", (1, 4), "int32")]
    cases = {"fractions": np.full((2, 4), 0.5), "out of range": np.full((2, 4), 2.0 ** 40),
             "uint8 range": np.full((2, 4), 300, np.int64)}
    for what, arr in cases.items():
        spec = [TensorSpec("x", (1, 4), "uint8")] if what == "uint8 range" else ints
        with pytest.raises(BadDataError) as e:
            load_data(_npz(tmp_path, x=arr), spec)
        assert "'x'" in e.value.message, what
    e = _bad(tmp_path, x=np.full((2, 3, 8, 8), 2 ** 30, np.int64))
    assert "cannot hold exactly" in e.message
    ok = load_data(_npz(tmp_path, x=np.full((2, 4), 3.0)), ints)  # whole numbers cast fine, noted
    assert ok.arrays["x"].dtype == np.int32 and "from float64 to int32" in ok.notes[0]
