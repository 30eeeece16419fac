"""Output comparison: tolerances, NaN/Inf, unwritten elements, reporting (CPU tensors)."""

import pytest
import torch

from kernelblaster.harness.compare import compare, describe, describe_layout_mismatch, tolerances


def run(actual, expected, dtype=torch.float32):
    atol, rtol = tolerances(dtype, None, None)
    return compare(actual, expected, atol=atol, rtol=rtol, output=0, trial=1, seed=42)


def test_identical_outputs_pass():
    x = torch.randn(1000)
    assert run(x.clone(), x) is None


def test_fp32_tolerance_is_tight():
    x = torch.randn(1000)
    assert run(x * (1 + 1e-6), x) is None
    assert run(x + 1e-2, x) is not None


def test_half_precision_is_looser():
    x = torch.randn(1000).half()
    assert run((x.float() * (1 + 5e-3)).half(), x, torch.float16) is None
    assert tolerances(torch.bfloat16, None, None) > tolerances(torch.float32, None, None)


def test_configured_tolerance_overrides_default():
    assert tolerances(torch.float32, 0.5, None) == (0.5, 1e-4)


def test_unwritten_elements_show_as_nan_and_fail_with_first_index():
    expected = torch.randn(4, 8)
    actual = expected.clone()
    actual[2, 5:] = float("nan")  # poison never overwritten
    mismatch = run(actual, expected)
    assert mismatch is not None
    assert mismatch.first_bad_index == [2, 5]
    assert mismatch.nonfinite == 3 and mismatch.bad_elements == 3
    assert "NaN" in describe(mismatch) and "[2, 5]" in describe(mismatch)


def test_inf_never_passes_against_finite_reference():
    expected = torch.ones(10)
    actual = expected.clone()
    actual[3] = float("inf")
    assert run(actual, expected).first_bad_index == [3]


def test_matching_nonfinite_values_pass():
    expected = torch.tensor([1.0, float("inf"), float("nan")])
    assert run(expected.clone(), expected) is None


def test_reports_max_errors():
    expected = torch.zeros(5)
    actual = torch.tensor([0.0, 0.5, 0.0, -2.0, 0.0])
    mismatch = run(actual, expected)
    assert mismatch.max_abs_error == pytest.approx(2.0)
    assert (mismatch.expected, mismatch.actual) == (0.0, 0.5)


def test_layout_mismatches_are_named():
    assert "shape (3,)" in describe_layout_mismatch(torch.zeros(3), torch.zeros(4))
    assert "dtype" in describe_layout_mismatch(torch.zeros(3).half(), torch.zeros(3))
    assert describe_layout_mismatch(torch.zeros(3), torch.zeros(3)) is None
