"""Test-wide environment. Set at import time, i.e. before any test module imports pypto."""

import atexit
import os
import shutil
import tempfile

# The interpreter's calculator takes ~40 s to build; keep it across test runs, outside the home dir.
os.environ.setdefault("TORCH2PYPTO_CALC_CACHE", os.path.join(tempfile.gettempdir(), "torch2pypto-calc-cache"))

# `import pypto` alone writes ~/.pypto and ~/ascend/log, and kernels write ./output.
_scratch = tempfile.mkdtemp(prefix="torch2pypto-tests-")
atexit.register(shutil.rmtree, _scratch, True)
for _var, _sub in (("TILE_FWK_OUTPUT_DIR", "output"), ("PYPTO_HOME", "pypto"), ("ASCEND_PROCESS_LOG_PATH", "log")):
    os.environ.setdefault(_var, os.path.join(_scratch, _sub))
