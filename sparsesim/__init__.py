"""sparsesim: online similarity learning on sparse, high-dimensional data, served as top-k retrieval."""

from .cachedir import configure_numba_cache as _configure_numba_cache

__version__ = "0.1.0"

# compiled kernels are cached per user, never inside the installed package (see sparsesim.cachedir)
_configure_numba_cache()
del _configure_numba_cache
