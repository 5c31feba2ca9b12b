"""sparsesim: online similarity learning on sparse, high-dimensional data, served as top-k retrieval."""

__version__ = "0.1.0"
