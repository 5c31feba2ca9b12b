import numpy as np
import pytest

from sparsesim.exceptions import FileFormatError
from sparsesim.persistence import load_bundle, save_bundle


def test_round_trip_and_checksum(tmp_path):
    path = tmp_path / "m.npz"
    arrays = {"a": np.arange(5, dtype=np.int64), "b": np.linspace(0, 1, 7)}
    save_bundle(path, arrays, {"algorithm": "x"}, kind="model")
    loaded, meta = load_bundle(path, kind="model")
    assert meta["algorithm"] == "x"
    np.testing.assert_array_equal(loaded["a"], arrays["a"])
    np.testing.assert_array_equal(loaded["b"], arrays["b"])


def test_truncated_and_wrong_kind_refused(tmp_path):
    path = tmp_path / "m.npz"
    save_bundle(path, {"a": np.arange(1000.0)}, {}, kind="model")
    with pytest.raises(FileFormatError, match="expected a 'index'"):
        load_bundle(path, kind="index")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(FileFormatError):
        load_bundle(path, kind="model")


def test_failed_write_leaves_no_file(tmp_path):
    path = tmp_path / "m.npz"
    with pytest.raises(TypeError):
        save_bundle(path, {"a": np.array([object()], dtype=object)}, {}, kind="model")
    assert list(tmp_path.iterdir()) == []
