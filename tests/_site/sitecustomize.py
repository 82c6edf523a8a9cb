"""On the PYTHONPATH of the processes the tests start (python -m bench, the GPU-run rehearsal):
Triton's interpreter made faster as in the tests themselves (tests/_interpreter.py)."""

import os

if os.environ.get("TRITON_INTERPRET") == "1":
    from tests._interpreter import install

    install()
