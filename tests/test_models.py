import numpy as np
import pytest
import scipy.sparse as sp

from sparsesim.exceptions import FileFormatError, InvalidInputError
from sparsesim.learners.bilinear import SORS
from sparsesim.models import BilinearSimilarity


def learned_model(seed=0, d=40):
    rng = np.random.default_rng(seed)
    X = sp.random(60, d, density=0.15, random_state=seed, format="csr")
    triplets = rng.integers(0, 60, size=(300, 3))
    return SORS(lam=1e-3, eta=0.3).partial_fit_triplets(X, triplets).model_, X


def test_scores_agree_with_dense_bilinear_form():
    model, X = learned_model()
    M = model.M.toarray()
    Xd = X.toarray()
    np.testing.assert_allclose(model.score_matrix(X[:7], X, block_size=3), Xd[:7] @ M @ Xd.T, atol=1e-12)
    np.testing.assert_allclose(model.score_pairs(X[:5], X[5:10]), np.einsum("ij,jk,ik->i", Xd[:5], M, Xd[5:10]),
                               atol=1e-12)
    assert model.score(Xd[0], Xd[1]) == pytest.approx(Xd[0] @ M @ Xd[1])
    scorer = model.scorer(X)
    np.testing.assert_allclose(scorer(np.array([2, 3])), Xd[[2, 3]] @ M @ Xd.T, atol=1e-12)


@pytest.mark.parametrize("entries", [8 * 2**20, 90])  # one dense piece; pieces of two rows (d = 40)
def test_dense_and_sparse_query_blocks_give_the_same_scores(monkeypatch, entries):
    """A query block denser than DENSE_BLOCK_DENSITY is multiplied as a dense array (in pieces of
    at most DENSE_BLOCK_ENTRIES values), a sparser one as a sparse product: same scores either way."""
    from sparsesim import models

    model, X = learned_model()
    Xd, M = X.toarray(), model.M.toarray()
    monkeypatch.setattr(models, "DENSE_BLOCK_ENTRIES", entries)
    dense_rows = model._times_M(X[:7])
    assert dense_rows.nnz >= models.DENSE_BLOCK_DENSITY * dense_rows.shape[0] * dense_rows.shape[1]
    got = models.block_scores(dense_rows, X, X.T.tocsc())
    np.testing.assert_allclose(got, Xd[:7] @ M @ Xd.T, atol=1e-12)
    sparse_rows = sp.csr_matrix((np.ones(3), ([0, 3, 6], [1, 2, 3])), shape=(7, X.shape[1]))
    assert sparse_rows.nnz < models.DENSE_BLOCK_DENSITY * 7 * X.shape[1]
    np.testing.assert_allclose(models.block_scores(sparse_rows, X, X.T.tocsc()), sparse_rows.toarray() @ Xd.T,
                               atol=1e-12)
    np.testing.assert_allclose(model.scorer(X)(np.arange(7)), got, atol=1e-12)


def test_sparsity_counts_all_entries_of_M():
    W = sp.csr_matrix(np.array([[-1.0, 2.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.5]]))
    model = BilinearSimilarity(W, identity=True)  # M = [[0,2,0],[0,1,0],[0,0,1.5]]
    assert model.nnz() == 3
    assert model.sparsity() == pytest.approx(1 - 3 / 9)


def test_save_load_round_trip_is_bit_identical(tmp_path):
    model, X = learned_model(seed=2)
    model.metadata["algorithm"] = "sors-l1"
    path = tmp_path / "model.npz"
    meta = model.save(path)
    loaded = BilinearSimilarity.load(path)
    assert meta["checksum"] == loaded.metadata["checksum"]
    assert loaded.metadata["algorithm"] == "sors-l1" and loaded.n_features == model.n_features
    np.testing.assert_array_equal(loaded.score_matrix(X, X), model.score_matrix(X, X))


def test_corrupt_and_truncated_model_files_refused(tmp_path):
    model, _ = learned_model()
    path = tmp_path / "model.npz"
    model.save(path)
    raw = bytearray(path.read_bytes())
    (tmp_path / "trunc.npz").write_bytes(raw[: len(raw) // 3])
    with pytest.raises(FileFormatError):
        BilinearSimilarity.load(tmp_path / "trunc.npz")
    # flip bytes inside the stored data array: the checksum must catch it
    pos = raw.find(b"data.npy")
    raw[-400] ^= 0xFF
    (tmp_path / "flip.npz").write_bytes(bytes(raw))
    with pytest.raises(FileFormatError):
        BilinearSimilarity.load(tmp_path / "flip.npz")
    (tmp_path / "text.npz").write_text("not a model")
    with pytest.raises(FileFormatError):
        BilinearSimilarity.load(tmp_path / "text.npz")
    assert pos > 0


def test_dimension_mismatch_refused():
    model, X = learned_model()
    with pytest.raises(InvalidInputError, match="feature-count mismatch"):
        model.score_matrix(sp.random(3, model.n_features + 2, density=0.5, format="csr"), X)
