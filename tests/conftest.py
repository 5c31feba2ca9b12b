import os
import sys
from pathlib import Path

# the dense reference implementations live beside the tests
sys.path.insert(0, str(Path(__file__).parent))

# Subprocesses the tests start (`python -m sparsesim.cli`, the service) import sparsesim the way
# the tests do: from the installed package, never from the current directory (a checkout's
# `sparsesim/` folder alone lacks `sparsesim.cli` and `sparsesim.indexes`, which the package-dir
# map installs from `cli/` and `indexes/`). Python >= 3.11 honours PYTHONSAFEPATH.
os.environ.setdefault("PYTHONSAFEPATH", "1")
