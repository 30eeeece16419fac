import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { type DiagnosticLike, findKernels, kernelAtCursor, maskNonCode } from '../src/kernelAtCursor';

const SOURCE = `#include <cuda_runtime.h>
#define KERNEL_LIKE __global__ void fake(
// __global__ void commented(float* x) {}
const char* s = "__global__ void quoted() {}";

template <typename T>
__global__ void __launch_bounds__(256, 2)
softmax_kernel(const T* __restrict__ x,
               T* y, int n) {
  if (threadIdx.x < n) { y[threadIdx.x] = x[threadIdx.x]; }
}

__device__ float helper(float v) { return v * 2.0f; }

extern "C" __global__ void scale(float* x, float a, int n);

extern "C" __global__ void scale(float* x, float a, int n)
{
  /* { unbalanced in a comment */
  x[0] *= a;
}

extern "C" void launch(float* x, int n) {
  scale<<<1, 1>>>(x, 2.0f, n);
}
`;
// Lines (0-based): softmax_kernel 6..10, helper 12, prototype 14, scale 16..20, launch 22..24.

const at = (line: number, character = 0) => ({ line, character });
const stateAt = (line: number, extra: Partial<DiagnosticLike> = {}): DiagnosticLike => ({
  code: 'state',
  source: 'kernelblaster',
  range: { start: at(line), end: at(line, 40) },
  ...extra,
});

describe('kernel scan', () => {
  it('finds kernel definitions, skipping comments, strings, macros and prototypes', () => {
    assert.deepEqual(findKernels(SOURCE), [
      { name: 'softmax_kernel', startLine: 6, nameLine: 7, endLine: 10 },
      { name: 'scale', startLine: 16, nameLine: 16, endLine: 20 },
    ]);
  });

  it('keeps offsets and newlines when masking', () => {
    const masked = maskNonCode(SOURCE);
    assert.equal(masked.length, SOURCE.length);
    assert.equal(masked.split('\n').length, SOURCE.split('\n').length);
    assert.ok(!masked.includes('commented'));
    assert.ok(!masked.includes('quoted'));
    assert.ok(!masked.includes('fake'));
  });

  it('handles void __global__ order and namespaces', () => {
    assert.deepEqual(
      findKernels('static void __global__ k1(int a) { }\n__global__ void ns::k2() {}').map((k) => k.name),
      ['k1', 'k2'],
    );
  });
});

describe('kernel at cursor', () => {
  it('picks the kernel whose definition contains the cursor, including its signature', () => {
    assert.deepEqual(kernelAtCursor(SOURCE, at(9, 10), []), { kind: 'found', kernel: 'softmax_kernel' });
    assert.deepEqual(kernelAtCursor(SOURCE, at(6), []), { kind: 'found', kernel: 'softmax_kernel' });
    assert.deepEqual(kernelAtCursor(SOURCE, at(19, 3), []), { kind: 'found', kernel: 'scale' });
  });

  it('outside any kernel, takes the nearest kernel defined above the cursor', () => {
    assert.deepEqual(kernelAtCursor(SOURCE, at(12, 5), []), { kind: 'found', kernel: 'softmax_kernel' });
    assert.deepEqual(kernelAtCursor(SOURCE, at(23, 5), []), { kind: 'found', kernel: 'scale' });
  });

  it('above every kernel, lets the user choose', () => {
    assert.deepEqual(kernelAtCursor(SOURCE, at(0), []), {
      kind: 'choose',
      candidates: ['softmax_kernel', 'scale'],
    });
    assert.deepEqual(kernelAtCursor('\n\n__global__ void only() {}', at(0), []), { kind: 'found', kernel: 'only' });
  });

  it('uses the state diagnostic for kernels the scan cannot see (macro-made)', () => {
    const macroSource = 'DEFINE_KERNEL(relu)\nDEFINE_KERNEL(gelu)\nint x;\n';
    const diagnostics = [
      stateAt(0, { data: { kernel: 'relu_kernel' } }),
      stateAt(1, { message: 'gelu_kernel: memory-bound: DRAM 87% of peak' }),
      { code: 'uncoalesced_global_access', source: 'kernelblaster', range: { start: at(2), end: at(2, 3) } },
    ];
    assert.deepEqual(kernelAtCursor(macroSource, at(0, 3), diagnostics), { kind: 'found', kernel: 'relu_kernel' });
    assert.deepEqual(kernelAtCursor(macroSource, at(2, 1), diagnostics), { kind: 'found', kernel: 'gelu_kernel' });
  });

  it('accepts codes in the {value, target} form and ignores other sources', () => {
    const text = 'A\nB\n';
    const own = { ...stateAt(0, { message: 'mine: compute-bound' }), code: { value: 'state' } };
    const foreign = stateAt(1, { source: 'clangd', message: 'theirs: x' });
    assert.deepEqual(kernelAtCursor(text, at(1), [own, foreign]), { kind: 'found', kernel: 'mine' });
    assert.deepEqual(kernelAtCursor(text, at(1), [foreign]), { kind: 'none' });
  });

  it('maps a state diagnostic at a declaration to the scanned kernel there', () => {
    const diagnostics = [stateAt(16, { message: 'memory-bound: DRAM 87% of peak' })];
    // Cursor in launch() after scale: found by the scan rule too, but the diagnostic is consulted first.
    assert.deepEqual(kernelAtCursor(SOURCE, at(24), diagnostics), { kind: 'found', kernel: 'scale' });
  });

  it('says so when the file has no kernel', () => {
    assert.deepEqual(kernelAtCursor('int main() { return 0; }\n', at(0), []), { kind: 'none' });
  });
});
