"""Benchmark helpers: the matrix-product floor under a step counts every product's work once."""

from __future__ import annotations

import pytest
import torch

from benchmarks.pixels import _gemm_floor


def test_gemm_floor_counts_each_product_of_a_step():
    a, b = torch.randn(4, 5), torch.randn(5, 6)
    batched, weights = torch.randn(2, 4, 5), torch.randn(2, 5, 3)
    bias = torch.zeros(2, 1, 3)
    steps = []

    def step() -> None:
        steps.append(1)
        torch.mm(a, b)  # 2 * 4 * 5 * 6 = 240
        torch.nn.functional.linear(a, b.t(), torch.zeros(6))  # addmm: 240
        torch.baddbmm(bias, batched, weights)  # 2 * (2 * 4 * 5 * 3) = 240
        torch.relu(a)  # not a matrix product: not counted

    ms, mflop = _gemm_floor(step, repeats=3)
    assert steps == [1]  # recorded from one call of the step, then replayed without it
    assert mflop == pytest.approx(720e-6)
    assert ms > 0
