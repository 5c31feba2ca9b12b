"""What the single-task similarity models share: pair scores, checksums and the parts of their files
that are the same for every kind (the text featuriser, the split facts, the checks of stored arrays).

:class:`SimilarityModel` is the base of :class:`~sparsesim.models.BilinearSimilarity`,
:class:`~sparsesim.compact.CompactSimilarity`, :class:`~sparsesim.embedding.EmbeddingSimilarity`
and :class:`~sparsesim.lexical.BM25Similarity`. A model class defines ``n_features``, ``_check``
(rows in the model's form: width checked, normalised when the model normalises),
``_pair_scores`` (row-wise scores of two checked blocks) and ``_arrays`` (what its file stores).
"""

from __future__ import annotations

import os

import numpy as np
import scipy.sparse as sp

from .exceptions import FileFormatError, InvalidInputError
from .persistence import arrays_checksum, save_bundle
from .text import TextFeaturizer, TextQueries, featurizer_arrays, stored_featurizer
from .validation import bounded, check_csr_arrays

__all__ = ["SimilarityModel", "dense_array"]


def dense_array(name: str, value, shape: tuple) -> np.ndarray:
    """``value`` as a C-ordered float64 array of exactly ``shape`` with finite entries.

    Raises
    ------
    InvalidInputError
        A sparse matrix, values that are not real numbers, another shape, NaN or infinity.
    """
    if sp.issparse(value):
        raise InvalidInputError(f"{name} must be a dense array, got a sparse matrix")
    try:
        value = np.array(value, dtype=np.float64, order="C")
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"{name} must hold real numbers ({bounded(exc, 120)})") from None
    if value.shape != shape:
        raise InvalidInputError(f"{name} must have shape {shape}, got {value.shape}")
    if not np.all(np.isfinite(value)):
        raise InvalidInputError(f"{name} contains NaN or infinite values")
    return value


class SimilarityModel(TextQueries):
    """Base of the single-task similarity models (see the module docstring for what a subclass defines)."""

    #: the ``kind`` written into (and required of) the model's files
    model_kind: str = ""
    metadata: dict

    def _keep(self, metadata: dict | None, featurizer: "TextFeaturizer | None") -> None:
        """Store the metadata (a copy) and attach the featuriser, checked against the model's width."""
        self.metadata = dict(metadata or {})
        self.featurizer = None
        if featurizer is not None:
            self.set_featurizer(featurizer)

    @property
    def nbytes(self) -> int:  # pragma: no cover - every model class defines it
        """Bytes of the model's arrays (the text featuriser not counted)."""
        raise NotImplementedError

    def nnz(self) -> int | None:
        """Stored entries of the model's sparse matrix M; ``None`` for a model without one."""
        return None

    def sparsity(self) -> float | None:
        """Share of M's d x d entries that are zero; ``None`` for a model without a sparse M."""
        return None

    # -- scoring --------------------------------------------------------------------------
    def score(self, x, x2) -> float:
        """S(x, x2) for two single documents (1-D arrays or 1-row matrices)."""
        return float(self.score_pairs(x, x2)[0])

    def score_pairs(self, A, B) -> np.ndarray:
        """Row-wise S(A[i], B[i])."""
        A = self._check(A, "A")
        B = self._check(B, "B")
        if A.shape[0] != B.shape[0]:
            raise InvalidInputError(f"A has {A.shape[0]} rows but B has {B.shape[0]}")
        return self._pair_scores(A, B)

    # -- persistence ----------------------------------------------------------------------
    def checksum(self) -> str:
        """Hash of the model's arrays (the text featuriser not included)."""
        return arrays_checksum(self._arrays())

    def _write(self, path: str | os.PathLike, arrays: dict, meta: dict) -> dict:
        """Write ``arrays`` and ``meta`` with the featuriser's arrays (when the model has one), atomically."""
        meta.pop("text_featurizer", None)
        if self.featurizer is not None:
            text_arrays, text_meta = featurizer_arrays(self.featurizer)
            arrays.update(text_arrays)
            meta["text_featurizer"] = text_meta
        return save_bundle(path, arrays, meta, kind=self.model_kind)

    @staticmethod
    def _check_split_facts(meta: dict, path) -> None:
        if ("split_seed" in meta) != ("train_fraction" in meta):
            raise FileFormatError(f"{path}: metadata holds only one of split_seed / train_fraction")

    @staticmethod
    def _stored_dense(arrays: dict, name: str, shape: tuple, path, model: str) -> np.ndarray:
        """Pop array ``name`` of a model file: exactly float64 of ``shape`` with finite values (nothing coerced)."""
        value = arrays.pop(name, None)
        if value is None:
            raise FileFormatError(f"{path}: the {model} model has no {name} array")
        if value.dtype != np.float64 or value.shape != shape:
            raise FileFormatError(f"{path}: {name} is a {value.dtype} array of shape {bounded(value.shape, 60)}; "
                                  f"expected float64 {shape}")
        if not np.all(np.isfinite(value)):
            raise FileFormatError(f"{path}: {name} contains NaN or infinite values")
        return value

    @staticmethod
    def _stored_csr(indptr, indices, data, d: int, path, allow_duplicates: bool = True) -> sp.csr_matrix:
        """The ``(d, d)`` CSR matrix W of a model file: int64 ``indptr``, int32 ``indices``, finite float64
        ``data``, sorted indices; nothing coerced."""
        try:
            check_csr_arrays(indptr, indices, data, (d, d), name="W", data_dtypes=(np.float64,), sorted_indices=True,
                             allow_duplicates=allow_duplicates)
            if indptr.dtype != np.int64 or indices.dtype != np.int32:
                raise InvalidInputError(f"W index arrays of dtypes {indptr.dtype}/{indices.dtype}; expected "
                                        "int64/int32")
        except InvalidInputError as exc:
            raise FileFormatError(f"{path}: inconsistent model arrays ({bounded(exc, 200)})") from None
        W = sp.csr_matrix((d, d))
        W.data, W.indices, W.indptr = data, indices, indptr
        W.has_sorted_indices = True
        W.has_canonical_format = True
        return W

    @staticmethod
    def _stored_featurizer(arrays: dict, meta: dict, path, d: int) -> "TextFeaturizer | None":
        """The featuriser a model file stores; every array of the file must have been read by now."""
        featurizer = stored_featurizer(arrays, meta, path, d)
        if arrays:
            raise FileFormatError(f"{path}: unexpected model arrays {bounded(sorted(arrays), 120)}")
        return featurizer
