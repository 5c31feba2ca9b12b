import sys
from pathlib import Path

# the dense reference implementations live beside the tests
sys.path.insert(0, str(Path(__file__).parent))
