"""The calibration check of scripts/calibration_check.py on the synthetic RCV1-like corpus of 10^5
documents (OASIS, 2·10^4 triplets on the per-class 70% split, seed 0; ann index with the defaults,
calibration stratified by the 20 classes). Prints JSON: the certified recall and bound, and
(recall, lower bound, queries below 10/10) of 300 fresh balanced corpus queries and 300 held-out
split queries against the exact top-10. About 6 min and 5 GiB.
"""
import json, time
import numpy as np
from sparsesim.data.synthetic import rcv1_like
from sparsesim.learners.bilinear import OASIS
from sparsesim.triplets import stratified_split as tts
from sparsesim.indexes import build_index
from sparsesim.indexes.calibration import stratified_split, measure_recall, summary
t = time.time()
data = rcv1_like(100_000, n_features=47236, nnz_per_doc=75, n_classes=20, class_vocab=2000, seed=0)
y = np.asarray(data.y)
train, test = tts(y, 0.7, seed=0)
model = OASIS(n_triplets=20000, random_state=0).fit(data.X[train], y[train]).model_
print("trained", time.time() - t, flush=True)
index = build_index(model, data.X, kind="ann", target_recall=None, n_jobs=2)
index.target_recall = 0.95
cal = index.calibrate(strata=y)
print("built", time.time() - t, flush=True)
used = np.zeros(y.size, bool); used[cal["rows"]] = True; used[cal["selection"]["rows"]] = True
out = {"setting": cal["setting"], "certified": cal["recall"], "bound": cal["recall_lower_bound"], "met": cal["met"],
       "selection": cal["selection"]["recall"]}
for name, pool in (("fresh", np.flatnonzero(~used)), ("heldout", np.setdiff1d(test, np.flatnonzero(used)))):
    rows = np.sort(pool[stratified_split(y[pool], [300], cal["sample_seed"] + 1)[0]])
    (pq, _), = measure_recall(index, rows, 10, [index.search_setting()])
    out[name] = summary(pq) + (int(np.sum(pq < 1)),)
print(json.dumps(out), flush=True)
