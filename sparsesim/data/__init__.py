"""Data layer: readers, the registry of named data sets, containers."""

from .containers import LabelledData
from .paths import data_home, locate

__all__ = ["LabelledData", "data_home", "locate"]
