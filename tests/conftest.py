import os

import torch

# Triton kernels run on the CPU under Triton's interpreter; the switch must be set before triton
# is imported anywhere in the session, so it lives here, in the first conftest pytest loads.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _seeded():
    """Every test starts from the same random state (tests must not depend on order)."""
    torch.manual_seed(0)
