"""Output comparison: tolerances scaled to each output's magnitude, NaN/Inf, unwritten
elements, reporting, and how degenerate a reference output is (CPU tensors)."""

import pytest
import torch

from kernelblaster.harness.target import compare as compare_module
from kernelblaster.harness.target.compare import (
    compare,
    degenerate_fractions,
    describe,
    describe_layout_mismatch,
    output_scale,
    tolerances,
)


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
    cpu = torch.device("cpu")
    layout = {"shape": (3,), "dtype": torch.float32, "device": cpu}
    assert "shape (4,)" in describe_layout_mismatch(torch.zeros(4), **layout)
    assert "dtype" in describe_layout_mismatch(torch.zeros(3).half(), **layout)
    assert describe_layout_mismatch(torch.zeros(3), **layout) is None
    assert "device" in describe_layout_mismatch(torch.zeros(3, device="meta"), **layout)


def test_atol_is_relative_to_the_outputs_own_magnitude():
    # a softmax over 393,216 columns: every value ~2.5e-6, far below an absolute atol of 1e-4
    expected = torch.softmax(torch.randn(2, 393_216), dim=-1)
    assert float(expected.abs().mean()) < 3e-6
    zeros = run(torch.zeros_like(expected), expected)
    assert zeros is not None and zeros.bad_elements == expected.numel()
    assert run(expected * (1 + 2e-5), expected) is None  # an honest fp32 answer still passes
    assert run(expected * 1.01, expected) is not None


def test_the_scale_is_the_rms_so_large_outputs_are_not_held_tighter():
    expected = 1000.0 * torch.randn(1000)
    noise = 1e-4 * 1000.0 * 0.5 * torch.randn(1000).clamp(-1, 1)  # within atol * RMS
    assert output_scale(expected) == pytest.approx(float(expected.pow(2).mean().sqrt()), rel=1e-6)
    assert run(expected + noise, expected) is None


def test_an_all_zero_reference_falls_back_to_an_absolute_atol():
    expected = torch.zeros(100)
    assert output_scale(expected) == 1.0
    assert run(torch.full((100,), 5e-5), expected) is None
    assert run(torch.full((100,), 5e-3), expected) is not None


def test_comparison_in_chunks_reports_the_same_as_in_one(monkeypatch):
    expected = torch.randn(7, 300)
    actual = expected.clone()
    actual[4, 17] = 3.0
    actual[6, 299] = float("nan")
    whole = run(actual, expected)
    monkeypatch.setattr(compare_module, "CHUNK_ELEMENTS", 64)
    chunked = run(actual, expected)
    assert chunked == whole
    assert chunked.first_bad_index == [4, 17] and chunked.bad_elements == 2
    assert chunked.nonfinite == 1


def test_a_scalar_output_mismatch_has_an_empty_index():
    mismatch = run(torch.tensor(2.0), torch.tensor(1.0))
    assert mismatch.first_bad_index == [] and mismatch.actual == 2.0


def test_scaled_input_mismatches_say_so():
    mismatch = run(torch.ones(3), torch.zeros(3))
    mismatch.input_scale = 8.0
    assert "on inputs scaled by 8" in describe(mismatch)


def _fractions(expected):
    atol, rtol = tolerances(expected.dtype, None, None)
    return degenerate_fractions(expected, atol=atol, rtol=rtol)


def test_relu_after_subtracting_two_is_a_weak_reference():
    # KernelBench level 2 problem 9's pattern: nearly every output is zero
    zeros, constant = _fractions(torch.relu(torch.randn(2000, 500) - 2.0))
    assert zeros == pytest.approx(0.977, abs=0.005) and constant == zeros


def test_informative_references_are_not_weak():
    x = torch.randn(2000, 500)
    assert max(_fractions(torch.relu(x))) == pytest.approx(0.5, abs=0.01)
    assert max(_fractions(torch.softmax(x, dim=-1))) < 0.01
    assert max(_fractions(x @ torch.randn(500, 64))) < 0.01


def test_a_single_value_is_weak_only_when_zero_would_match_it():
    # A loss is one number: "a constant output" would be the number itself, which says
    # nothing of how informative it is; whether zero passes does.
    assert _fractions(torch.tensor(0.98)) == (0.0, 0.0)
    assert _fractions(torch.zeros(1)) == (1.0, 1.0)


def test_a_constant_reference_is_weak_by_its_constant_fraction():
    zeros, constant = _fractions(torch.full((1000,), 0.25))
    assert (zeros, constant) == (0.0, 1.0)
