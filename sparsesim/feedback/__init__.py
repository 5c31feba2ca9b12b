"""A served index that keeps learning from feedback.

* :class:`FeedbackLearner` (:mod:`sparsesim.feedback.learner`) -- queries answered by the newest
  model version while a learner thread applies feedback, snapshots, active questions.
* :func:`click_triplets` and the feedback record format (:mod:`sparsesim.feedback.records`).
* :class:`ModelVersion` (:mod:`sparsesim.feedback.versions`) -- published versions without a copy
  of the whole model per version.
* The candidate stage's drift checks and rebuilds (:mod:`sparsesim.feedback.candidates`).
* Active questions, ``ask`` (:mod:`sparsesim.feedback.questions`).
* Where snapshots may be written and which snapshot may be resumed: the output-path policy and
  the index identity a snapshot records (:mod:`sparsesim.feedback.snapshots`).
"""

from .learner import FeedbackLearner
from .records import click_triplets
from .versions import ModelVersion

__all__ = ["FeedbackLearner", "ModelVersion", "click_triplets"]
