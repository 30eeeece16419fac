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
    assert.match(html, /Roofs: measured by Nsight Compute on the NVIDIA H100 80GB HBM3/);
    assert.doesNotMatch(html, /measured: measured/);
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
  // the H100's measured roofs (tests/fixtures/ncu/h100-five): L1 33.4, L2 8.74, DRAM 3.35 TB/s
  const roofs = { dram_bytes_per_s: 3.35e12, l1_bytes_per_s: 33.4e12, l2_bytes_per_s: 8.74e12, fp32_flops_per_s: 66.9e12, fp64_flops_per_s: 33.5e12, tensor: [], source: 'measured' as const, note: '' };
  const coordinates = (svg: string, cls: string): [number, number][] =>
    [...svg.matchAll(new RegExp(`<circle class="point ${cls}" cx="([\\d.]+)" cy="([\\d.]+)"`, 'g'))].map((m) => [Number(m[1]), Number(m[2])]);
  /** The centres of the earlier saves' diamonds of `level`. */
  const diamonds = (svg: string, level: string): [number, number][] =>
    [...svg.matchAll(new RegExp(`<polygon class="point earlier ${level}" points="([^"]+)"`, 'g'))].map((m) => {
      const corners = m[1].split(' ').map((p) => p.split(',').map(Number));
      return [corners[0][0], corners[1][1]];
    });
  const line = (svg: string, cls: string): number[][] => {
    const found = new RegExp(`<polyline class="roof ${cls}" points="([^"]+)"`).exec(svg);
    assert.ok(found !== null, `a ${cls} roof`);
    return found[1].split(' ').map((p) => p.split(',').map(Number));
  };

  it('draws a bandwidth roof per memory level rising to the FP32 roof, fastest furthest left, and the FP64 roof below', () => {
    const svg = rooflinePlot(roofs, []);
    const [l1, l2, dram] = ['memory l1', 'memory l2', 'memory dram'].map((cls) => line(svg, cls));
    const fp32 = line(svg, 'compute fp32');
    for (const roof of [l1, l2, dram]) {
      assert.ok(roof[0][1] > roof[1][1], 'a bandwidth roof rises');
      assert.equal(roof[1][1], fp32[0][1], 'up to the FP32 roof');
    }
    assert.ok(l1[1][0] < l2[1][0] && l2[1][0] < dram[1][0], 'the L1 ridge is left of L2’s, L2’s of DRAM’s');
    assert.equal(fp32[0][0], l1[1][0], 'the FP32 roof is flat from the fastest level’s ridge');
    assert.ok(line(svg, 'compute fp64')[0][1] > fp32[0][1], 'FP64 roof below FP32');
    assert.match(svg, /FP32 66\.9 TFLOP\/s/);
    for (const label of ['L1 33.4 TB/s', 'L2 8.74 TB/s', 'DRAM 3.35 TB/s']) {
      assert.match(svg, new RegExp(`<text class="roof-label (l1|l2|dram)"[^>]*>${label}</text>`));
    }
    assert.match(svg, /aria-label="Roofline: L1 33\.4 TB\/s, L2 8\.74 TB\/s, DRAM 3\.35 TB\/s, FP32 66\.9 TFLOP\/s/);
    assert.match(svg, />arithmetic intensity \(FLOP per byte of each memory level\)</);
  });

  it('places an uncoalesced kernel’s L1 point left of its DRAM point, all at its FLOP/s', () => {
    // the H200's softmax_rowthread (tests/fixtures/ncu/h200-naive3): 4.5× more L1 than DRAM bytes
    const svg = rooflinePlot(roofs, [{ flops_per_s: 1.161e12, dram_bytes_per_s: 541.7e9, l1_bytes_per_s: 2.453e12, l2_bytes_per_s: 423.3e9, current: true, label: 'this version' }]);
    const [[l1x, l1y]] = coordinates(svg, 'current l1');
    const [[l2x, l2y]] = coordinates(svg, 'current l2');
    const [[dramx, dramy]] = coordinates(svg, 'current dram');
    assert.ok(l1x < dramx && dramx < l2x, 'L1 0.473, DRAM 2.14, L2 2.74 FLOP/byte');
    assert.deepEqual([l1y, l2y], [dramy, dramy]);
    assert.match(svg, /this version, L1: 1\.16 TFLOP\/s, 2\.45 TB\/s L1, 0\.473 FLOP\/L1 byte/);
    assert.match(svg, /moving 2\.45 TB\/s L1, 423 GB\/s L2, 542 GB\/s DRAM/);
  });

  it('draws an earlier save as a hollow diamond over this version’s circle, even at the same place', () => {
    const same = { flops_per_s: 21.57e12, dram_bytes_per_s: 1.188e12, l1_bytes_per_s: 1.348e12, l2_bytes_per_s: 0.682e12 };
    const svg = rooflinePlot(roofs, [
      { ...same, current: false, label: 'save 1' },
      { ...same, current: true, label: 'this version' },
    ]);
    for (const level of ['l1', 'l2', 'dram']) {
      const [[cx, cy]] = coordinates(svg, `current ${level}`);
      assert.deepEqual(diamonds(svg, level), [[cx, cy]], `${level}: the earlier save at the same place`);
      assert.ok(svg.indexOf(`<polygon class="point earlier ${level}"`) > svg.indexOf(`<circle class="point current ${level}"`), 'drawn after, so on top');
    }
  });

  it('places a faster, more intense save up and to the right of an earlier one', () => {
    const svg = rooflinePlot(roofs, [
      { flops_per_s: 9.1e12, dram_bytes_per_s: 0.62e12, current: false, label: 'save 1' },
      { flops_per_s: 21.57e12, dram_bytes_per_s: 1.188e12, current: true, label: 'this version' },
    ]);
    const [[earlierX, earlierY]] = diamonds(svg, 'dram');
    const [[currentX, currentY]] = coordinates(svg, 'current dram');
    assert.ok(currentY < earlierY, 'more FLOP/s is higher');
    assert.ok(currentX > earlierX, 'higher intensity is further right (18.2 vs 14.7 FLOP/byte)');
    assert.match(svg, /this version, DRAM: 21\.6 TFLOP\/s, 1\.19 TB\/s DRAM, 18\.2 FLOP\/DRAM byte/);
    assert.equal(coordinates(svg, 'current l1').length, 0, 'no L1 point without L1 traffic counts');
  });

  it('draws only the DRAM roof when the report measured no L1 and L2 roofs', () => {
    const svg = rooflinePlot({ ...roofs, l1_bytes_per_s: null, l2_bytes_per_s: null, source: 'published' }, []);
    assert.doesNotMatch(svg, /class="roof memory l[12]"/);
    assert.equal(line(svg, 'compute fp32')[0][0], line(svg, 'memory dram')[1][0]);
  });

  it('keeps a kernel without FLOPs on the axis and says so', () => {
    const svg = rooflinePlot(roofs, [{ flops_per_s: 0, dram_bytes_per_s: 4.3e11, current: true, label: 'this version' }]);
    assert.match(svg, /no FP32, FP64 or tensor-core arithmetic: drawn on the axis/);
    assert.doesNotMatch(svg, /class="roof compute tensor"/);
  });

  it('draws a tensor-core GEMM under its tensor roof, which the bandwidth roofs rise to past the FP32 ridge', () => {
    // cuBLAS's bf16 wgmma GEMM on the H100 (tests/fixtures/ncu/h100-cublas): 807 of 864 TFLOP/s
    const tensorRoofs = { ...roofs, tensor: [{ path: 'BF16', flops_per_s: 864.2e12 }] };
    const svg = rooflinePlot(tensorRoofs, [{ flops_per_s: 807e12, dram_bytes_per_s: 0.997e12, tensor_flops_per_s: 807e12, current: true, label: 'this version' }]);
    const tensor = line(svg, 'compute tensor');
    const fp32 = line(svg, 'compute fp32');
    const dram = line(svg, 'memory dram');
    assert.equal(dram[1][1], tensor[0][1], 'the DRAM roof rises to the tensor roof');
    assert.ok(tensor[0][1] < fp32[0][1], 'above the FP32 one');
    const [[, pointY]] = coordinates(svg, 'current dram');
    assert.ok(pointY > tensor[0][1] && pointY < fp32[0][1], 'the point is below the tensor roof, above the FP32 one');
    assert.match(svg, /BF16 tensor 864 TFLOP\/s/);
    assert.match(svg, /this version, DRAM: 807 TFLOP\/s \(807 TFLOP\/s on the tensor cores\)/);
  });

  it('labels FLOP/s and bandwidth with SI prefixes', () => {
    assert.equal(flopsLabel(66.9e12), '66.9 T');
    assert.equal(bandwidthLabel(512e9), '512 GB/s');
  });
});

describe('profile page roofline', () => {
  it('draws this version and the earlier save at every level, with a legend for levels and markers', () => {
    const html = render();
    for (const level of ['l1', 'l2', 'dram']) {
      assert.equal((html.match(new RegExp(`<circle class="point current ${level}"`, 'g')) ?? []).length, 1);
      assert.equal((html.match(new RegExp(`<polygon class="point earlier ${level}"`, 'g')) ?? []).length, 1);
    }
    const legend = /<p class="legend" id="roofline-legend">(.*?)<\/p>/.exec(html);
    assert.ok(legend !== null);
    assert.match(legend[1], /swatch level l1"><\/span> L1 .*swatch level l2"><\/span> L2 .*swatch level dram"><\/span> DRAM/);
    assert.match(legend[1], /marker current"><\/span> this one .*marker earlier"><\/span> earlier saves/);
    assert.match(html, /save 1 \(0\.18 ms per call\), L1:/);
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
