"""Published model versions of a served learner that keeps learning (:class:`ModelVersion`).

A version is immutable: a query reads the current one once (one reference) and is answered
entirely from it, while the learner thread prepares the next. Publishing must not copy the whole
model each time: after a batch of OASIS updates (``M += tau_t x_t z_t^T``, Chechik et al. 2010) the
change since the last full copy is the low-rank sum ``A^T B`` with row t of ``A`` equal to
``tau_t x_t`` and row t of ``B`` equal to ``z_t = x+_t - x-_t``. A version is therefore a *base*
model plus these two factor matrices; a query computes ``Q M = Q M_base + (Q A^T) B`` (two small
sparse products) and publishing costs O(nnz of the batch), not O(nnz(W)). Once the factors hold
``rebase_every`` triplets the learner folds them into a new base (``W_base + A^T B``, scipy's
sparse product, which releases the GIL for most of its run).

The folded sums are the learner's own updates added in another order, so a version equals the
learner's model up to floating-point rounding (differences of the order of 1e-15 relative).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..exceptions import InvalidInputError
from ..models import BilinearSimilarity

__all__ = ["ModelVersion"]


class ModelVersion:
    """One published model version: ``base`` (a :class:`BilinearSimilarity`) plus a low-rank change
    (or a :class:`~sparsesim.compact.CompactSimilarity`, always published whole).

    Parameters
    ----------
    number : int
        Versions published since start (0: the starting model).
    base : BilinearSimilarity
    A, B : csr_matrix, shape (m, n_features), optional
        Factors of the change since ``base``: ``M = M_base + A^T B`` (``m`` updates).
    """

    __slots__ = ("number", "base", "A", "B", "_AT", "_model")

    def __init__(self, number: int, base: BilinearSimilarity, A: sp.csr_matrix | None = None,
                 B: sp.csr_matrix | None = None):
        self.number = int(number)
        self.base = base
        if A is not None and A.shape[0] == 0:
            A = B = None
        self.A, self.B = A, B
        self._AT = None if A is None else A.T.tocsr()
        self._model = base if A is None else None

    @property
    def n_pending(self) -> int:
        """Updates held as factors (not yet folded into the base)."""
        return 0 if self.A is None else int(self.A.shape[0])

    @property
    def n_features(self) -> int:
        return self.base.n_features

    def transform_queries(self, Q: sp.csr_matrix) -> sp.csr_matrix:
        """``Q M`` of this version (``Q`` checked CSR rows)."""
        QM = self.base.transform_queries(Q)
        if self.A is None:
            return QM
        return (QM + (Q @ self._AT) @ self.B).tocsr()

    def dense_query(self, q: sp.csr_matrix) -> np.ndarray:
        """``q M`` of one query row as a dense vector of ``n_features`` (what scores a corpus
        with one sparse matrix-vector product, ``X @ (q M)``)."""
        if q.shape[0] != 1:  # one row: the dense result is n_features values, never queries x d
            raise InvalidInputError(f"dense_query takes one query row, got {q.shape[0]}")
        base = self.base
        if not isinstance(base, BilinearSimilarity):  # a compact model (published whole, no factors)
            return base.dense_query(q)
        out = (q @ base.W).toarray().ravel()
        if base.identity:
            np.add.at(out, q.indices, q.data)
        if self.A is not None:
            out += ((q @ self._AT) @ self.B).toarray().ravel()
        return out

    def with_updates(self, number: int, A_new: sp.csr_matrix, B_new: sp.csr_matrix) -> "ModelVersion":
        """The next version: this one plus ``A_new^T B_new`` (O(nnz of the factors), base shared)."""
        if A_new.shape[0] == 0:
            return ModelVersion(number, self.base, self.A, self.B)
        if self.A is None:
            return ModelVersion(number, self.base, A_new, B_new)
        return ModelVersion(number, self.base, sp.vstack([self.A, A_new], format="csr"),
                            sp.vstack([self.B, B_new], format="csr"))

    def model(self, metadata: dict | None = None) -> BilinearSimilarity:
        """The version as one :class:`BilinearSimilarity` (the base with the factors folded in;
        computed once per version)."""
        if self._model is None:
            W = (self.base.W + self._AT @ self.B).tocsr()
            W.sum_duplicates()
            self._model = BilinearSimilarity(W, identity=self.base.identity, normalize=self.base.normalize,
                                             metadata=dict(self.base.metadata if metadata is None else metadata),
                                             featurizer=self.base.featurizer)
        return self._model

    def rebased(self) -> "ModelVersion":
        """The same version with the factors folded into a new base (same number)."""
        return ModelVersion(self.number, self.model())


def oasis_factors(Q: sp.csr_matrix, Z: sp.csr_matrix, steps) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """Factors ``A`` (rows ``tau_t x_t``) and ``B`` (rows ``z_t = x+_t - x-_t``) of a batch of OASIS
    updates, from the query rows ``Q``, the differences ``Z`` and the step ``tau_t`` each update
    took (the learner's ``last_steps_``, computed by the engine: 0 for a triplet without loss);
    updates without a step are left out."""
    steps = np.asarray(steps, np.float64)
    keep = np.flatnonzero(steps != 0)
    A = (sp.diags(steps[keep]) @ Q[keep]).tocsr()
    return A, Z[keep]
