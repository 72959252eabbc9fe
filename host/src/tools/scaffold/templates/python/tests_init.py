# The SDK is vendored: the tests import it from vendor/, where the build's
# python-path (pyproject.toml) finds it too.
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "vendor"))
