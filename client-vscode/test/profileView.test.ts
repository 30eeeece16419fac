// The profile view: the server's answer checked, every server string escaped, the roofline drawn
// with its roofs and points in the right places, the page's messages checked, and Nsight
// Compute opened or explained.

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { openReport } from '../src/nsightCompute';
import { parseKernelProfile, parseNcuReport } from '../src/profileModel';
import { parseProfileMessage, renderProfile } from '../src/profileViewHtml';
import { bandwidthLabel, flopsLabel, rooflinePlot } from '../src/roofline';
import { PROFILE_ANSWER } from './profileFixture';

const SECURITY = { cspSource: 'https://webview.test', nonce: 'n0nce' };
const render = (data: unknown = PROFILE_ANSWER) => renderProfile(parseKernelProfile(data), SECURITY);

describe('profile answer', () => {
  it('accepts the documented shape and refuses another', () => {
    assert.equal(parseKernelProfile(PROFILE_ANSWER).kernel, 'divergent');
    const bad = structuredClone(PROFILE_ANSWER) as Record<string, unknown>;
    bad.roofs = { dram_bytes_per_s: '3e12' };
    assert.throws(() => parseKernelProfile(bad), /not the documented shape/);
    assert.deepEqual(parseNcuReport({ path: null, message: 'none yet' }), { path: null, message: 'none yet' });
    assert.throws(() => parseNcuReport({ path: 3 }), /instead of/);
  });
});

describe('profile page', () => {
  it('allows only its own nonce-tagged style and script', () => {
    const html = render();
    assert.match(html, /content="default-src 'none'; style-src https:\/\/webview\.test 'nonce-n0nce'; script-src 'nonce-n0nce'"/);
    assert.equal((html.match(/<script/g) ?? []).length, 1);
    assert.doesNotMatch(html, /\sstyle="/);
  });

  it('shows the change since earlier saves, the state, the measured roofs and the saves', () => {
    const html = render();
    assert.match(html, /<span class="change">1\.71× faster than the previous save, 1\.71× faster since opened<\/span>/);
    assert.match(html, /compute-bound \(SM 78% of peak; FMA pipe 68%\)/);
    assert.match(html, /Roofs measured: measured by Nsight Compute on the NVIDIA H100 80GB HBM3/);
    // the headroom to the roof that limits the state, as the hover says it
    assert.match(html, /<p class="limit">Headroom: the kernel reaches 68% of the FP32 peak/);
    assert.doesNotMatch(html, /Nearest roof/);
    assert.equal((html.match(/<tr class="version/g) ?? []).length, 2);
    assert.match(html, /<tr class="version current">/);
  });

  it('marks a regression', () => {
    const slower = { ...structuredClone(PROFILE_ANSWER), change: 'regression: 1.20× slower than the previous save' };
    assert.match(render(slower), /<span class="change regression">regression: 1\.20× slower/);
  });

  it('escapes what the server sends', () => {
    const hostile = structuredClone(PROFILE_ANSWER) as Record<string, unknown>;
    hostile.kernel = '<img src=x onerror=alert(1)>';
    hostile.blamed = [{ line: 3, text: '</code><script>alert(1)</script>', message: '<b>x</b>', rule: 'r', estimated_speedup: null }];
    const html = render(hostile);
    assert.doesNotMatch(html, /<img src=x/);
    assert.doesNotMatch(html, /<script>alert/);
    assert.match(html, /&lt;img src=x onerror=alert\(1\)&gt;/);
    assert.match(html, /<a href="#" class="line" data-line="3">3<\/a>/);
  });

  it('explains a missing roofline instead of drawing one', () => {
    const html = render({ ...structuredClone(PROFILE_ANSWER), roofs: null, point: null, message: 'No roofs for the GPU' });
    assert.doesNotMatch(html, /<svg class="roofline"/);
    assert.match(html, /No roofs for the GPU/);
  });
});

describe('roofline', () => {
  const roofs = { dram_bytes_per_s: 3.35e12, fp32_flops_per_s: 66.9e12, fp64_flops_per_s: 33.5e12, tensor: [], source: 'measured' as const, note: '' };
  const coordinates = (svg: string, cls: string): [number, number][] =>
    [...svg.matchAll(new RegExp(`<circle class="point ${cls}" cx="([\\d.]+)" cy="([\\d.]+)"`, 'g'))].map((m) => [Number(m[1]), Number(m[2])]);

  it('draws the memory roof up to the ridge, then the FP32 roof, and the FP64 roof below it', () => {
    const svg = rooflinePlot(roofs, []);
    const [memory] = [...svg.matchAll(/<polyline class="roof memory fp32" points="([^"]+)"/g)].map((m) => m[1].split(' ').map((p) => p.split(',').map(Number)));
    assert.equal(memory.length, 3);
    assert.ok(memory[0][1] > memory[1][1], 'the memory roof rises to the ridge');
    assert.equal(memory[1][1], memory[2][1], 'flat after the ridge');
    const fp64 = /<polyline class="roof fp64" points="[\d.]+,([\d.]+)/.exec(svg);
    assert.ok(fp64 !== null && Number(fp64[1]) > memory[2][1], 'FP64 roof below FP32');
    assert.match(svg, /FP32 66\.9 TFLOP\/s/);
    assert.match(svg, /DRAM 3\.35 TB\/s/);
  });

  it('places a faster, more intense save up and to the right of an earlier one', () => {
    const svg = rooflinePlot(roofs, [
      { flops_per_s: 9.1e12, dram_bytes_per_s: 0.62e12, current: false, label: 'save 1' },
      { flops_per_s: 21.57e12, dram_bytes_per_s: 1.188e12, current: true, label: 'this version' },
    ]);
    const [[earlierX, earlierY]] = coordinates(svg, 'earlier');
    const [[currentX, currentY]] = coordinates(svg, 'current');
    assert.ok(currentY < earlierY, 'more FLOP/s is higher');
    assert.ok(currentX > earlierX, 'higher intensity is further right (18.2 vs 14.7 FLOP/byte)');
    assert.match(svg, /this version: 21\.6 TFLOP\/s, 1\.19 TB\/s DRAM, 18\.2 FLOP\/byte/);
  });

  it('keeps a kernel without FLOPs on the axis and says so', () => {
    const svg = rooflinePlot(roofs, [{ flops_per_s: 0, dram_bytes_per_s: 4.3e11, current: true, label: 'this version' }]);
    assert.match(svg, /no FP32, FP64 or tensor-core arithmetic: drawn on the axis/);
    assert.doesNotMatch(svg, /class="roof tensor"/);
  });

  it('draws a tensor-core GEMM under its tensor roof, which the memory roof rises to past the FP32 ridge', () => {
    // cuBLAS's bf16 wgmma GEMM on the H100 (tests/fixtures/ncu/h100-cublas): 807 of 864 TFLOP/s
    const tensorRoofs = { ...roofs, tensor: [{ path: 'BF16', flops_per_s: 864.2e12 }] };
    const svg = rooflinePlot(tensorRoofs, [{ flops_per_s: 807e12, dram_bytes_per_s: 0.997e12, tensor_flops_per_s: 807e12, current: true, label: 'this version' }]);
    const tensor = /<polyline class="roof tensor" points="([^"]+)"/.exec(svg);
    assert.ok(tensor !== null);
    const [start, tensorRidge, end] = tensor[1].split(' ').map((p) => p.split(',').map(Number));
    const memory = /<polyline class="roof memory fp32" points="([^"]+)"/.exec(svg);
    assert.ok(memory !== null);
    const fp32Ridge = memory[1].split(' ')[1].split(',').map(Number);
    assert.deepEqual(start, fp32Ridge, 'it starts at the FP32 ridge');
    assert.ok(tensorRidge[0] > start[0] && tensorRidge[1] < start[1], 'and rises further right');
    assert.equal(end[1], tensorRidge[1], 'flat after its own ridge');
    const [[, pointY]] = coordinates(svg, 'current');
    assert.ok(pointY > tensorRidge[1] && pointY < start[1], 'the point is below the tensor roof, above the FP32 one');
    assert.match(svg, /BF16 tensor 864 TFLOP\/s/);
    assert.match(svg, /this version: 807 TFLOP\/s \(807 TFLOP\/s on the tensor cores\)/);
  });

  it('labels FLOP/s and bandwidth with SI prefixes', () => {
    assert.equal(flopsLabel(66.9e12), '66.9 T');
    assert.equal(bandwidthLabel(512e9), '512 GB/s');
  });
});

describe('page messages', () => {
  it('accepts only its own messages', () => {
    assert.deepEqual(parseProfileMessage({ type: 'openLine', line: 12 }), { type: 'openLine', line: 12 });
    assert.deepEqual(parseProfileMessage({ type: 'openInNsightCompute' }), { type: 'openInNsightCompute' });
    assert.equal(parseProfileMessage({ type: 'openLine', line: 0 }), undefined);
    assert.equal(parseProfileMessage({ type: 'openLine', line: '12' }), undefined);
    assert.equal(parseProfileMessage({ type: 'run', command: 'rm -rf /' }), undefined);
  });
});

describe('Open in Nsight Compute', () => {
  const report = { path: '/ws/.kernelblaster/results/five.cu.reports/1-abc.ncu-rep', message: 'The report is …' };

  it('starts ncu-ui on the kept report when it is on PATH', async () => {
    const launched: [string, string][] = [];
    const outcome = await openReport(report, {
      findExecutable: (name) => Promise.resolve(name === 'ncu-ui' ? '/opt/nsight/ncu-ui' : undefined),
      launch: (program, path) => {
        launched.push([program, path]);
        return Promise.resolve();
      },
    });
    assert.deepEqual(outcome, { kind: 'opened', program: '/opt/nsight/ncu-ui' });
    assert.deepEqual(launched, [['/opt/nsight/ncu-ui', report.path]]);
  });

  it('says where the report is and how to get the UI without ncu-ui', async () => {
    const outcome = await openReport(report, {
      findExecutable: () => Promise.resolve(undefined),
      launch: () => Promise.reject(new Error('not called')),
    });
    assert.ok(outcome.kind === 'explained');
    assert.match(outcome.message, /ncu-ui\) is not on PATH\. The report is \/ws\/.*\.ncu-rep.*developer\.nvidia\.com\/nsight-compute/);
  });

  it('never launches anything but a .ncu-rep', async () => {
    let launched = false;
    const outcome = await openReport({ path: '/etc/passwd', message: 'odd' }, {
      findExecutable: () => Promise.resolve('/opt/nsight/ncu-ui'),
      launch: () => {
        launched = true;
        return Promise.resolve();
      },
    });
    assert.equal(outcome.kind, 'explained');
    assert.equal(launched, false);
  });
});
