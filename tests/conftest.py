import os

import torch

# Triton kernels run on the CPU under Triton's interpreter; the switch must be set before triton
# is imported anywhere in the session, so it lives here, in the first conftest pytest loads.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

from tests._interpreter import install  # noqa: E402

pytest_plugins = ["tests._record"]  # the session's record for the README (tests/_record.py)

if os.environ.get("TRITON_INTERPRET") == "1":
    install()  # each interpreted launch patches Triton's language once (tests/_interpreter.py)

# `make test` runs one xdist worker per core; each worker's torch would otherwise start a thread
# per core too, and on 2 cores the 4 threads take turns (OpenMP waits spin): give each worker its
# share. Subprocesses (python -m bench ...) are left to their own settings.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1:
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // _WORKERS))


@pytest.fixture(autouse=True)
def _seeded():
    """Every test starts from the same random state (tests must not depend on order)."""
    torch.manual_seed(0)
