import pytest
import torch


@pytest.fixture(autouse=True)
def _seeded():
    """Every test starts from the same random state (tests must not depend on order)."""
    torch.manual_seed(0)
