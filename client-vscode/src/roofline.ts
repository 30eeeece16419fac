// The roofline as inline SVG (the webview loads nothing from outside; colours come from the
// theme through CSS classes): log-log, arithmetic intensity (FLOP per DRAM byte) across,
// achieved FLOP/s up; the DRAM-bandwidth roof rising to the FP32 roof (and the FP64 roof,
// dashed), and on past it to the tensor-core roof of each input type the kernel's MMAs used;
// this kernel's point and its earlier saves' points. A point without FLOPs or without DRAM
// traffic can't sit on log axes: it is drawn on the edge it tends to, and says so.

import { escapeHtml } from './html';
import type { RooflinePoint, Roofs } from './profileModel';

const WIDTH = 560;
const HEIGHT = 340;
const LEFT = 64;
const RIGHT = 16;
const TOP = 16;
const BOTTOM = 44;

export interface PlotPoint extends RooflinePoint {
  readonly label: string;
  readonly current: boolean;
}

export function rooflinePlot(roofs: Roofs, points: readonly PlotPoint[]): string {
  const ridge = roofs.fp32_flops_per_s / roofs.dram_bytes_per_s;
  const top = Math.max(roofs.fp32_flops_per_s, ...roofs.tensor.map((t) => t.flops_per_s));
  const intensities = points.map(intensity).filter((v): v is number => v !== undefined && v > 0 && Number.isFinite(v));
  const flops = points.map((p) => p.flops_per_s).filter((v) => v > 0);
  const xLow = decadeBelow(Math.min(ridge / 1000, ...intensities));
  const xHigh = decadeAbove(Math.max(ridge * 100, (top / roofs.dram_bytes_per_s) * 10, ...intensities));
  const yHigh = decadeAbove(Math.max(top * 1.5, ...flops));
  const yLow = decadeBelow(Math.min(roofs.fp32_flops_per_s / 1e5, ...flops));
  const x = (v: number): number => LEFT + ((Math.log10(v) - Math.log10(xLow)) / (Math.log10(xHigh) - Math.log10(xLow))) * (WIDTH - LEFT - RIGHT);
  const y = (v: number): number => HEIGHT - BOTTOM - ((Math.log10(v) - Math.log10(yLow)) / (Math.log10(yHigh) - Math.log10(yLow))) * (HEIGHT - TOP - BOTTOM);
  const memoryStart = Math.max(xLow, yLow / roofs.dram_bytes_per_s);
  const parts = [
    `<svg class="roofline" width="100%" viewBox="0 0 ${String(WIDTH)} ${String(HEIGHT)}" role="img" aria-label="${escapeHtml(ariaLabel(roofs, points))}">`,
    ...decades(xLow, xHigh).map((t) => `<line class="grid" x1="${f(x(t))}" x2="${f(x(t))}" y1="${String(TOP)}" y2="${String(HEIGHT - BOTTOM)}"/><text class="tick-label" x="${f(x(t))}" y="${String(HEIGHT - BOTTOM + 14)}" text-anchor="middle">${tickLabel(t)}</text>`),
    ...yTicks(yLow, yHigh).map((t) => `<line class="grid" x1="${String(LEFT)}" x2="${String(WIDTH - RIGHT)}" y1="${f(y(t))}" y2="${f(y(t))}"/><text class="tick-label" x="${String(LEFT - 4)}" y="${f(y(t) + 3)}" text-anchor="end">${flopsLabel(t)}</text>`),
    `<text class="axis-label" x="${f((LEFT + WIDTH - RIGHT) / 2)}" y="${String(HEIGHT - 6)}" text-anchor="middle">arithmetic intensity (FLOP / DRAM byte)</text>`,
    `<text class="axis-label" x="12" y="${f((TOP + HEIGHT - BOTTOM) / 2)}" text-anchor="middle" transform="rotate(-90 12 ${f((TOP + HEIGHT - BOTTOM) / 2)})">FLOP/s</text>`,
    `<polyline class="roof memory fp32" points="${f(x(memoryStart))},${f(y(memoryStart * roofs.dram_bytes_per_s))} ${f(x(ridge))},${f(y(roofs.fp32_flops_per_s))} ${f(x(xHigh))},${f(y(roofs.fp32_flops_per_s))}"><title>DRAM ${bandwidthLabel(roofs.dram_bytes_per_s)}, FP32 ${flopsLabel(roofs.fp32_flops_per_s)}FLOP/s</title></polyline>`,
    `<text class="roof-label" x="${f(x(xHigh) - 4)}" y="${f(y(roofs.fp32_flops_per_s) - 5)}" text-anchor="end">FP32 ${flopsLabel(roofs.fp32_flops_per_s)}FLOP/s</text>`,
    `<text class="roof-label" x="${f(x(memoryStart) + 6)}" y="${f(y(memoryStart * roofs.dram_bytes_per_s) - 6)}">DRAM ${bandwidthLabel(roofs.dram_bytes_per_s)}</text>`,
  ];
  if (roofs.fp64_flops_per_s !== null && roofs.fp64_flops_per_s > yLow) {
    const fp64Ridge = roofs.fp64_flops_per_s / roofs.dram_bytes_per_s;
    parts.push(
      `<polyline class="roof fp64" points="${f(x(fp64Ridge))},${f(y(roofs.fp64_flops_per_s))} ${f(x(xHigh))},${f(y(roofs.fp64_flops_per_s))}"><title>FP64 ${flopsLabel(roofs.fp64_flops_per_s)}FLOP/s</title></polyline>`,
      `<text class="roof-label" x="${f(x(xHigh) - 4)}" y="${f(y(roofs.fp64_flops_per_s) + 12)}" text-anchor="end">FP64 ${flopsLabel(roofs.fp64_flops_per_s)}FLOP/s</text>`,
    );
  }
  // Each tensor roof: the memory roof goes on rising past the FP32 ridge to its own ridge.
  for (const [index, roof] of roofs.tensor.entries()) {
    const tensorRidge = roof.flops_per_s / roofs.dram_bytes_per_s;
    const label = `${roof.path} tensor ${flopsLabel(roof.flops_per_s)}FLOP/s`;
    parts.push(
      `<polyline class="roof tensor" points="${f(x(ridge))},${f(y(roofs.fp32_flops_per_s))} ${f(x(tensorRidge))},${f(y(roof.flops_per_s))} ${f(x(xHigh))},${f(y(roof.flops_per_s))}"><title>${escapeHtml(`${label} (dense)`)}</title></polyline>`,
      `<text class="roof-label" x="${f(x(xHigh) - 4)}" y="${f(y(roof.flops_per_s) + (index === 0 ? -5 : 12))}" text-anchor="end">${escapeHtml(label)}</text>`,
    );
  }
  // Earlier saves first, so the current point is drawn on top.
  for (const point of [...points].sort((a, b) => Number(a.current) - Number(b.current))) {
    const where = intensity(point);
    const px = where === undefined ? x(xHigh) : where <= 0 ? x(xLow) : x(Math.min(Math.max(where, xLow), xHigh));
    const py = point.flops_per_s > 0 ? y(Math.max(point.flops_per_s, yLow)) : y(yLow);
    const edge = point.flops_per_s <= 0 ? ' (no FP32, FP64 or tensor-core arithmetic: drawn on the axis)' : where === undefined ? ' (no DRAM traffic: drawn on the right edge)' : '';
    const tensor = point.tensor_flops_per_s ? ` (${flopsLabel(point.tensor_flops_per_s)}FLOP/s on the tensor cores)` : '';
    const title = `${point.label}: ${flopsLabel(point.flops_per_s)}FLOP/s${tensor}, ${bandwidthLabel(point.dram_bytes_per_s)} DRAM${where !== undefined && where > 0 ? `, ${where.toPrecision(3)} FLOP/byte` : ''}${edge}`;
    parts.push(`<circle class="point ${point.current ? 'current' : 'earlier'}" cx="${f(px)}" cy="${f(py)}" r="${point.current ? '6' : '4'}"><title>${escapeHtml(title)}</title></circle>`);
  }
  parts.push('</svg>');
  return parts.join('');
}

function intensity(point: RooflinePoint): number | undefined {
  return point.dram_bytes_per_s > 0 ? point.flops_per_s / point.dram_bytes_per_s : undefined;
}

function ariaLabel(roofs: Roofs, points: readonly PlotPoint[]): string {
  const current = points.find((p) => p.current);
  const where = current === undefined ? 'no point for this version' : `this version at ${flopsLabel(current.flops_per_s)}FLOP/s and ${bandwidthLabel(current.dram_bytes_per_s)} DRAM`;
  const tensor = roofs.tensor.map((t) => `, ${t.path} tensor ${flopsLabel(t.flops_per_s)}FLOP/s`).join('');
  return `Roofline: DRAM ${bandwidthLabel(roofs.dram_bytes_per_s)}, FP32 ${flopsLabel(roofs.fp32_flops_per_s)}FLOP/s${tensor}; ${where}; ${String(points.length - (current ? 1 : 0))} earlier saves`;
}

const decadeBelow = (v: number): number => 10 ** Math.floor(Math.log10(v));
const decadeAbove = (v: number): number => 10 ** Math.ceil(Math.log10(v));

function decades(low: number, high: number): number[] {
  const ticks = [];
  for (let exponent = Math.round(Math.log10(low)); exponent <= Math.round(Math.log10(high)); exponent++) {
    ticks.push(10 ** exponent);
  }
  return ticks;
}

function yTicks(low: number, high: number): number[] {
  const ticks = decades(low, high);
  return ticks.length <= 8 ? ticks : ticks.filter((_, i) => i % 2 === 0);
}

function tickLabel(value: number): string {
  return String(Number(value.toPrecision(1)));
}

/** "66.9 T", "512 G" (the unit follows). */
export function flopsLabel(value: number): string {
  const units: [number, string][] = [[1e15, 'P'], [1e12, 'T'], [1e9, 'G'], [1e6, 'M'], [1e3, 'k']];
  for (const [scale, unit] of units) {
    if (value >= scale) {
      return `${String(Number((value / scale).toPrecision(3)))} ${unit}`;
    }
  }
  return `${String(Number(value.toPrecision(3)))} `;
}

export function bandwidthLabel(bytesPerSecond: number): string {
  return `${flopsLabel(bytesPerSecond)}B/s`;
}

function f(value: number): string {
  return value.toFixed(1);
}
