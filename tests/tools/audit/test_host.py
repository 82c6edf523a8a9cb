"""Host work per kernel call (tools.audit.host), counted: the torch operations a call dispatches
besides its Triton kernels, with the launches stubbed. Machine-independent: counts, not times."""

import pytest

from tools.audit import host


@pytest.fixture(scope="module")
def rows():
    return {(r["call"], r["part"]): r for r in host.measure(reps=2)}


def test_attention_and_rope_calls_do_no_host_work_besides_their_kernels(rows):
    """T5 used to rebuild its bucket index per call (24 torch operations), Shaw's scalar bias an
    index (3), every backward delta on float32 copies and casts of its gradients (7-8); now the
    index is cached, delta is a kernel and the gradients are written in the inputs' dtype. What
    is left: T5's table gathered per relative index once a call (its band reads one value a
    score), the table gradient's sum over rows (T5: and a matmul from indices to buckets), and
    Shaw's key+value terms (torch matmuls that autograd differentiates)."""
    for family in ("alibi", "t5", "shaw_bias"):
        for causal in ("", " causal"):
            call = f"attention {family}{causal}"
            per_index = family == "t5"
            assert rows[(call, "forward")]["launches"] == per_index, rows[(call, "forward")]
            assert rows[(call, "forward")]["kernels"] == 1
            table_sum = {"alibi": 0, "shaw_bias": 1, "t5": 2}[family]  # ALiBi's: not trained
            assert rows[(call, "backward")]["launches"] == table_sum, rows[(call, "backward")]
            assert rows[(call, "backward")]["kernels"] == 3  # delta, dk/dv, dq
    # grouped-query heads: the dk/dv kernel sums each kv head's group (no per-head float32
    # partials summed on the host, which cost 2 operations)
    for part, kernels in (("forward", 1), ("backward", 3)):
        row = rows[("attention alibi gqa", part)]
        assert row["launches"] == 0 and row["kernels"] == kernels, row
    for part in ("forward", "backward"):
        assert rows[("rope", part)]["launches"] == 0 and rows[("rope", part)]["kernels"] == 1
