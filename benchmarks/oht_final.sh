#!/bin/sh
# The reported OHT runs (split seed 0; parameters from benchmarks/oht_search.py on split seed 1).
# Usage: SPARSESIM_DATA=../shared/data PYTHONPATH=. sh benchmarks/oht_final.sh
set -e
O=benchmarks/out
KS='"k_values": [2, 5, 10, 25, 50, 100, 200, 400], "k_permutations": 20'
# Wikipedia, tuned (C=5, sigma=4; OHT1 K=50 eta=0.05; OHT2 K=50)
python benchmarks/oht_run.py wikipedia-xmodal pa2,oht1-pa2,oht2-pa2 \
  --params '{"*": {"C": 5, "sigma": 4, "n_neighbors": 50}, "oht1-pa2": {"eta": 0.05}, "oht2-pa2": {"alpha": 0.5}}' \
  --options "{\"n_permutations\": 100, $KS}" --out $O/oht_wiki_tuned.json --plots $O/plots_wiki
# Wikipedia, the paper's settings (sigma=8, C=5, K=100, eta=0.5, alpha = paper's beta)
python benchmarks/oht_run.py wikipedia-xmodal pa2,oht1-pa2,oht2-pa2 \
  --params '{"*": {"C": 5, "sigma": 8, "n_neighbors": 100}}' \
  --options '{"n_permutations": 100}' --out $O/oht_wiki_paper.json
# Wikipedia, tuned, PA and PA-I sets
python benchmarks/oht_run.py wikipedia-xmodal pa,oht1-pa,oht2-pa \
  --params '{"*": {"C": 5, "sigma": 4, "n_neighbors": 50}, "oht1-pa": {"eta": 0.05}}' \
  --options '{"n_permutations": 100}' --out $O/oht_wiki_pa.json
python benchmarks/oht_run.py wikipedia-xmodal pa1,oht1-pa1,oht2-pa1 \
  --params '{"*": {"C": 5, "sigma": 4, "n_neighbors": 50}, "oht1-pa1": {"eta": 0.05}}' \
  --options '{"n_permutations": 100}' --out $O/oht_wiki_pa1.json
# Wikipedia, tuned, pairs from all ten classes (ablation)
python benchmarks/oht_run.py wikipedia-xmodal pa2,oht1-pa2,oht2-pa2 \
  --params '{"*": {"C": 5, "sigma": 4, "n_neighbors": 50}, "oht1-pa2": {"eta": 0.05}}' \
  --options '{"n_permutations": 100, "pair_classes": "all"}' --out $O/oht_wiki_allpairs.json
# mfeat (target fou, source pix), tuned (C=20, sigma=4; OHT1 K=2 eta=0.01; OHT2 K=3)
python benchmarks/oht_run.py mfeat pa2,oht1-pa2,oht2-pa2 \
  --params '{"*": {"C": 20, "sigma": 4}, "oht1-pa2": {"n_neighbors": 2, "eta": 0.01}, "oht2-pa2": {"n_neighbors": 3, "alpha": 0.5}}' \
  --options "{\"n_permutations\": 100, $KS}" --out $O/oht_mfeat_tuned.json --plots $O/plots_mfeat
# mfeat, the paper's settings
python benchmarks/oht_run.py mfeat pa2,oht1-pa2,oht2-pa2 \
  --params '{"*": {"C": 5, "sigma": 8, "n_neighbors": 100}}' \
  --options '{"n_permutations": 100}' --out $O/oht_mfeat_paper.json
