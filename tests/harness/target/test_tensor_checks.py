"""Memory overlap, bit equality and output signatures: the facts verification's aliasing,
unfinished-output and cached-output checks rest on (CPU tensors)."""

import torch

from kernelblaster.harness.target.tensor_checks import Signature, overlaps, same_bits


def test_views_of_one_tensor_overlap_and_separate_tensors_do_not():
    x = torch.randn(64, 64)
    assert overlaps(x, x[10:20])
    assert overlaps(x.t(), x[63:, 63:])  # the transposed view spans the same bytes
    assert not overlaps(x[:32], x[32:])  # two halves of one buffer don't share a byte
    assert not overlaps(x, torch.randn(64, 64))
    assert not overlaps(x, x[:0])


def test_a_tensor_made_over_an_inputs_memory_overlaps_it():
    x = torch.randn(1024)
    alias = torch.tensor([], dtype=x.dtype).set_(x.untyped_storage(), 256, (128,), (1,))
    assert overlaps(alias, x) and not overlaps(alias, x[:256])


def test_same_bits_holds_for_nan_in_the_same_places_only():
    poisoned = torch.full((4,), float("nan"))
    assert same_bits(poisoned, poisoned.clone())
    assert not same_bits(poisoned, torch.zeros(4))
    assert same_bits(torch.tensor([0.0, 1.0]).half(), torch.tensor([0.0, 1.0]).half())
    assert not same_bits(torch.tensor([0.0]), torch.tensor([-0.0]))  # different bits
    assert not same_bits(torch.zeros(4), torch.zeros(5))


def test_signatures_tell_a_repeated_output_from_a_new_one():
    output = torch.randn(1000, 100)
    assert Signature.of(output) == Signature.of(output.clone())
    assert Signature.of(output) != Signature.of(torch.randn(1000, 100))
    changed = output.clone()
    changed[999, 99] += 1.0  # outside the sample, caught by the byte sum
    assert Signature.of(output) != Signature.of(changed)
    assert Signature.of(torch.ones(3, dtype=torch.bool)).shape == (3,)
