"""Common checks every index kind passes, in process and sharded.

``tests/test_index_checks.py`` runs :func:`index_checks` over :func:`index_forms`: every kind an
index directory may declare (:data:`~sparsesim.indexes.INDEX_KINDS`, the embedding kinds and the
compact kinds), and the sharded form of every kind of
:data:`~sparsesim.indexes.INDEX_KINDS` (in this process, and
on a local Dask cluster when the ``dask`` extra is installed), so a kind added to
``INDEX_KINDS`` is checked the moment it is registered. A form's settings come from its class's
``_unit_test_params()`` and ``_unit_test_model()``, next to the class.

What is checked (each check builds its own small index; a few hundred documents at most):

=========================  ===================================================================
check                      what it asserts
=========================  ===================================================================
``check_query``            shapes, scores best first, every score the model's exact score; rows
                           and ``top_k`` checked by the caller (``CheckedQueries``): the same answers
``check_answers``          exact kinds: the brute-force top-k (ties to the lower position);
                           approximate kinds: recall@k against it of at least 0.9
``check_ties``             duplicated documents: equal scores ordered by position
``check_add``              fit on part, ``add`` the rest: the answers of a fit on the whole
``check_save_load``        ``save`` then :func:`~sparsesim.indexes.open_index`: the same answers
``check_bad_input``        wrong width (also of checked rows), NaN, ``top_k`` 0 or past the corpus
                           (also a ``CheckedTopK``), an unknown option
``check_empty``            an empty corpus is refused or searched as empty; empty query batches
``check_ids``              string ids through query, search, add, save/load; clashes refused
``check_similar``          ``query_similar`` leaves the document out (or names the capability)
``check_surface``          capability flags match what the operations do; records; ``release``
=========================  ===================================================================

Example
-------
>>> from sparsesim.indexes.checks import index_forms, index_checks
>>> forms = index_forms()
>>> sorted(f.name for f in forms)[:3]
['ann', 'compact-ann', 'compact-exact']
>>> [name for name, _ in index_checks(forms[0])][:2]
['check_query', 'check_answers']
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import scipy.sparse as sp

from sparsesim.exceptions import InvalidInputError, UnsupportedOperationError
from sparsesim.topk import top_k_rows
from sparsesim.validation import CheckedTopK, check_queries, check_rows

from . import INDEX_KINDS, STORED_KINDS, Index, open_index

__all__ = ["IndexForm", "index_forms", "index_checks", "make_corpus"]

N_DOCUMENTS, N_FEATURES, N_QUERIES, TOP_K = 60, 16, 8, 5


@dataclass
class IndexForm:
    """One way of building an index: a kind, in process or sharded.

    Attributes
    ----------
    name : str
        ``"exact"``, ``"sharded-ann"``, ``"dask-sharded-exact"``, ...
    cls : type
        The class whose flags and test settings apply (a sharded form: the shards' kind's).
    build : callable
        ``build(model) -> Index``, not yet fitted.
    scheduler : str or None
        Scheduler address :func:`~sparsesim.indexes.open_index` loads the saved index onto.
    """

    name: str
    cls: type
    build: Callable
    scheduler: str | None = None
    make_model: Callable = field(default=None)

    def model(self, seed: int = 0):
        return self.cls._unit_test_model(N_FEATURES, seed)


def index_forms(client=None, n_shards: int = 3) -> list[IndexForm]:
    """Every stored kind in process, and every kind of ``INDEX_KINDS`` sharded in process (or,
    with a ``distributed.Client``, sharded on its cluster: names ``dask-sharded-KIND``)."""
    from .sharded import ShardedIndex

    def plain(cls):
        return lambda model: cls(model, **cls._unit_test_params())

    def sharded(kind, cls):
        return lambda model: ShardedIndex(model, kind=kind, n_shards=n_shards, client=client, **cls._unit_test_params())

    if client is not None:
        address = client.scheduler.address
        return [IndexForm(f"dask-sharded-{kind}", cls, sharded(kind, cls), scheduler=address)
                for kind, cls in INDEX_KINDS.items()]
    forms = [IndexForm(kind, cls, plain(cls)) for kind, cls in STORED_KINDS.items()]
    forms += [IndexForm(f"sharded-{kind}", cls, sharded(kind, cls)) for kind, cls in INDEX_KINDS.items()]
    return forms


def make_corpus(seed: int = 0, n: int = N_DOCUMENTS, d: int = N_FEATURES) -> sp.csr_matrix:
    """A small sparse corpus with no empty row (nonnegative values, like term weights)."""
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=0.25, format="csr", random_state=rng, data_rvs=lambda m: rng.uniform(0.1, 1.0, m))
    X = X + sp.csr_matrix((np.full(n, 0.5), (np.arange(n), rng.integers(0, d, n))), shape=(n, d))
    return sp.csr_matrix(X)


def _truth(model, Q, X, k):
    """Brute-force top-k (rows, scores) under ``model`` (ties to the lower row)."""
    return top_k_rows(np.asarray(model.score_matrix(Q, X), dtype=np.float64), k)


def _recall(found, truth) -> float:
    return float(np.mean([len(set(map(int, f)) & set(map(int, t))) / len(t) for f, t in zip(found, truth)]))


def _check_answer(form, model, index, Q, X, k, what):
    """The answer of ``index`` to ``Q``: exact kinds equal the brute force; others meet recall 0.9;
    scores are always the model's scores of the returned documents."""
    ids, scores = index.query(Q, top_k=k)
    rows = np.asarray([np.asarray(r, dtype=np.int64) for r in ids])
    want_rows, want_scores = _truth(model, Q, X, k)
    exact_scores = np.asarray(model.score_matrix(Q, X))[np.arange(rows.shape[0])[:, None], rows]
    np.testing.assert_allclose(scores, exact_scores, rtol=1e-5, atol=1e-9, err_msg=f"{what}: scores")
    if index.exact:
        np.testing.assert_array_equal(rows, want_rows, err_msg=f"{what}: ids differ from the brute-force top-k")
        np.testing.assert_allclose(scores, want_scores, rtol=1e-5, atol=1e-9)
    else:
        recall = _recall(rows, want_rows)
        assert recall >= 0.9, f"{what}: recall@{k} {recall:.3f} against the exact top-k"
    return ids, scores


# -- the checks ---------------------------------------------------------------------------------
def check_query(form: IndexForm):
    model, X = form.model(), make_corpus()
    index = form.build(model).fit(X)
    try:
        assert isinstance(index, Index) and index.n_documents == len(index) == index.ntotal == X.shape[0]
        ids, scores = index.query(X[:N_QUERIES], top_k=TOP_K)
        assert len(ids) == N_QUERIES and scores.shape == (N_QUERIES, TOP_K)
        assert all(len(r) == TOP_K for r in ids)
        assert np.all(np.diff(scores, axis=1) <= 1e-12), "scores are not best first"
        rows = np.asarray(ids, dtype=np.int64)
        assert rows.min() >= 0 and rows.max() < X.shape[0]
        exact = np.asarray(model.score_matrix(X[:N_QUERIES], X))[np.arange(N_QUERIES)[:, None], rows]
        np.testing.assert_allclose(scores, exact, rtol=1e-5, atol=1e-9)
        s2, i2 = index.search(X[:2], k=X.shape[0] + 3)
        assert s2.shape == i2.shape == (2, X.shape[0] + 3)
        assert np.all(i2[:, -3:] == -1) and np.all(np.isneginf(s2[:, -3:]))
        # rows and top_k checked once by a caller (the service's parser) are taken as they are
        checked = check_queries(X[:N_QUERIES], TOP_K, N_FEATURES, X.shape[0])
        before = checked.rows.copy()
        ids_c, scores_c = index.query(checked, checked.top_k)
        np.testing.assert_array_equal(np.asarray(ids_c), np.asarray(ids))
        np.testing.assert_array_equal(scores_c, scores)
        assert (checked.rows != before).nnz == 0 and checked.rows.dtype == before.dtype, "the caller's rows changed"
    finally:
        index.release()


def check_answers(form: IndexForm):
    model, X = form.model(), make_corpus(1)
    Q = make_corpus(2, n=N_QUERIES)
    index = form.build(model).fit(X)
    try:
        _check_answer(form, model, index, Q, X, TOP_K, "fresh index")
        _check_answer(form, model, index, Q, X, 1, "top-1")
    finally:
        index.release()


def check_ties(form: IndexForm):
    model, base = form.model(), make_corpus(3, n=20)
    X = sp.vstack([base, base, base], format="csr")  # every document three times: rows i, i+20, i+40
    index = form.build(model).fit(X)
    try:
        ids, scores = index.query(base[:N_QUERIES], top_k=6)
        for r, (row, vals) in enumerate(zip(ids, scores)):
            row = np.asarray(row, dtype=np.int64)
            for j in range(len(row) - 1):
                if vals[j] == vals[j + 1]:
                    assert row[j] < row[j + 1], f"query {r}: equal scores not ordered by position: {row.tolist()}"
        if index.exact:
            want, _ = _truth(model, base[:N_QUERIES], X, 6)
            np.testing.assert_array_equal(np.asarray(ids, dtype=np.int64), want)
    finally:
        index.release()


def check_add(form: IndexForm):
    model, X = form.model(), make_corpus(4)
    Q = make_corpus(5, n=N_QUERIES)
    index = form.build(model).fit(X[:45])
    try:
        if not index.supports_add:
            _expect_unsupported(lambda: index.add(X[45:]), "add")
            return
        index.add(X[45:])
        assert index.n_documents == X.shape[0]
        _check_answer(form, model, index, Q, X, TOP_K, "after add")
        index.add(X[:0])  # nothing to add: unchanged
        assert index.n_documents == X.shape[0]
    finally:
        index.release()


def check_save_load(form: IndexForm):
    model, X = form.model(), make_corpus(6)
    Q = make_corpus(7, n=N_QUERIES)
    index = form.build(model).fit(X)
    loaded = None
    try:
        ids, scores = index.query(Q, top_k=TOP_K)
        if not index.supports_save:
            with tempfile.TemporaryDirectory() as tmp:
                _expect_unsupported(lambda: index.save(Path(tmp) / "index"), "save")
            return
        with tempfile.TemporaryDirectory() as tmp:
            target = Path(tmp) / "index"
            index.save(target)
            loaded = open_index(target, scheduler=form.scheduler)
            assert loaded.kind == index.kind and loaded.sharded == index.sharded
            assert loaded.n_documents == index.n_documents and loaded.params() == index.params()
            ids2, scores2 = loaded.query(Q, top_k=TOP_K)
            np.testing.assert_array_equal(np.asarray(ids2), np.asarray(ids))
            np.testing.assert_allclose(scores2, scores, rtol=1e-12, atol=0)
            assert loaded.search_metadata() == index.search_metadata()
            loaded.release()
            try:
                index.save(target)
            except InvalidInputError:
                pass  # an existing index is replaced only with overwrite=True
            else:
                raise AssertionError("save over an existing index without overwrite was not refused")
    finally:
        index.release()
        if loaded is not None:
            loaded.release()


def check_bad_input(form: IndexForm):
    model, X = form.model(), make_corpus(8)
    index = form.build(model).fit(X)
    try:
        bad = {"wrong width": sp.random(2, N_FEATURES + 1, density=0.5, format="csr", random_state=0)}
        nan = X[:2].copy()
        nan.data[0] = np.nan
        bad["NaN value"] = nan
        for what, Q in bad.items():
            _expect(InvalidInputError, lambda: index.query(Q, top_k=3), what)
        for k in (0, -1, X.shape[0] + 1):
            _expect(InvalidInputError, lambda: index.query(X[:2], top_k=k), f"top_k={k}")
        _expect(InvalidInputError, lambda: index.search(X[:2], k=0), "search k=0")
        wide = check_rows(bad["wrong width"])
        _expect(InvalidInputError, lambda: index.query(wide, top_k=3), "checked rows of the wrong width")
        _expect(InvalidInputError, lambda: index.query(X[:2], top_k=CheckedTopK(X.shape[0] + 1)),
                "a checked top_k past the corpus")
        _expect(InvalidInputError, lambda: index.query(X[:2], top_k=3, no_such_option=1), "an unknown option")
        _expect(InvalidInputError, lambda: index.add(X[:2, :N_FEATURES - 1]), "add of the wrong width")
        ids, scores = index.query(X[:2], top_k=3)  # the index still answers
        assert len(ids) == 2
    finally:
        index.release()


def check_empty(form: IndexForm):
    model, X = form.model(), make_corpus(9)
    index = form.build(model)
    try:
        try:
            index.fit(X[:0])
        except InvalidInputError:
            pass  # refusing an empty corpus is allowed (one clear error)
        else:
            assert index.n_documents == 0
            scores, ids = index.search(X[:2], k=3)
            assert scores.shape == (2, 3) and np.all(np.isneginf(scores)) and np.all(ids == -1)
    finally:
        index.release()
    index = form.build(model).fit(X)
    try:
        ids, scores = index.query(X[:0], top_k=3)
        assert len(ids) == 0 and scores.shape == (0, 3)
    finally:
        index.release()


def check_ids(form: IndexForm):
    model, X = form.model(), make_corpus(10)
    names = [f"doc-{i:03d}" for i in range(X.shape[0])]
    _expect(InvalidInputError, lambda: form.build(model).fit(X, ids=names[:-1] + names[:1]), "duplicate ids")
    index = form.build(model).fit(X[:50], ids=names[:50])
    loaded = None
    try:
        ids, _ = index.query(X[:3], top_k=TOP_K)
        assert all(isinstance(i, str) and i in names for row in ids for i in row.tolist())
        _, sids = index.search(X[:3], k=X.shape[0] + 2)
        assert sids.dtype.kind == "U" and sids[0, -1] == ""
        assert sids[:, :TOP_K].tolist() == [row.tolist() for row in ids], "search ids differ from query ids"
        if index.supports_add:
            _expect(InvalidInputError, lambda: index.add(X[50:52], ids=names[:2]), "an id already in the index")
            _expect(InvalidInputError, lambda: index.add(X[50:52]), "string-id index, no ids for the new documents")
            index.add(X[50:], ids=names[50:])
        ids, _ = index.query(X[50:51], top_k=1)
        if index.exact and index.supports_add:
            want, _ = _truth(model, X[50:51], X, 1)
            assert ids[0][0] == names[int(want[0, 0])], f"{ids[0][0]} is not the brute-force top-1"
        if not index.supports_save:
            return
        with tempfile.TemporaryDirectory() as tmp:
            index.save(Path(tmp) / "index")
            loaded = open_index(Path(tmp) / "index", scheduler=form.scheduler)
            ids2, _ = loaded.query(X[50:51], top_k=1)
            assert ids2[0].tolist() == ids[0].tolist()
    finally:
        index.release()
        if loaded is not None:
            loaded.release()


def check_similar(form: IndexForm):
    model, X = form.model(), make_corpus(11)
    index = form.build(model).fit(X)
    try:
        if not index.supports_similar:
            _expect_unsupported(lambda: index.query_similar([0, 1], top_k=3), "query_similar")
            return
        ids, scores = index.query_similar([0, 7], top_k=TOP_K)
        for own, row in zip((0, 7), ids):
            assert own not in row.tolist(), "a document is in its own 'more like this' answer"
        if index.exact:
            full = np.asarray(model.score_matrix(X[[0, 7]], X), dtype=np.float64)
            full[[0, 1], [0, 7]] = -np.inf
            want, _ = top_k_rows(full, TOP_K)
            np.testing.assert_array_equal(np.asarray(ids, dtype=np.int64), want)
        records = index.similar_records([7], top_k=2)
        assert records[0]["query"] == 7 and len(records[0]["results"]) == 2
        _expect(InvalidInputError, lambda: index.query_similar([X.shape[0] + 5], top_k=2), "an unknown id")
    finally:
        index.release()


def check_surface(form: IndexForm):
    model, X = form.model(), make_corpus(12)
    index = form.build(model).fit(X)
    try:
        for flag in ("exact", "calibrated", "supports_add", "supports_save", "supports_refit", "supports_similar",
                     "supports_learning", "sharded"):
            assert isinstance(getattr(index, flag), bool), f"capability flag {flag} is not a bool"
        assert index.sharded == form.name.startswith(("sharded", "dask-sharded"))
        if not index.calibrated:
            _expect_unsupported(lambda: index.calibrate(), "calibrate")
            assert index.calibration_ is None
        if not index.supports_refit:
            _expect_unsupported(lambda: index.refit(), "refit")
        else:
            assert index.n_fit_documents_ == X.shape[0]
        meta = index.search_metadata()
        assert meta["kind"] == index.kind
        json.dumps(meta)
        records = index.query_records(X[:2], top_k=3, query_ids=["a", "b"])
        json.dumps(records)
        ids, scores = index.query(X[:2], top_k=3)
        assert [r["query"] for r in records] == ["a", "b"]
        assert [[h["id"] for h in r["results"]] for r in records] == [row.tolist() for row in ids]
        ids1, _ = index.query(X[:2], top_k=3, n_jobs=1)
        assert [r.tolist() for r in ids1] == [r.tolist() for r in ids]
        placement = index.placement()
        assert (placement is not None) == index.sharded
        index.check_placement()
    finally:
        index.release()


def _expect(error, call, what):
    try:
        call()
    except error:
        return
    except Exception as exc:  # noqa: BLE001 - any other error is the failure reported
        raise AssertionError(f"{what}: raised {type(exc).__name__} ({exc}), not {error.__name__}") from exc
    raise AssertionError(f"{what}: not refused")


def _expect_unsupported(call, capability):
    try:
        call()
    except UnsupportedOperationError as exc:
        assert exc.capability.startswith(capability), f"the error names {exc.capability!r}, not {capability!r}"
        assert capability in str(exc)
        return
    except Exception as exc:  # noqa: BLE001 - any other error is the failure reported
        raise AssertionError(f"{capability}: raised {type(exc).__name__} ({exc}), not "
                             "UnsupportedOperationError") from exc
    raise AssertionError(f"{capability}: not refused as unsupported")


CHECKS = (check_query, check_answers, check_ties, check_add, check_save_load, check_bad_input, check_empty,
          check_ids, check_similar, check_surface)


def index_checks(form: IndexForm):
    """Yield ``(name, check)`` for ``form``: call ``check()`` to run it (it raises on failure)."""
    for check in CHECKS:
        yield check.__name__, (lambda check=check: check(form))
