// The roofline as inline SVG (the webview loads nothing from outside; colours come from the
// theme through CSS classes), hierarchical as Nsight Compute's: log-log, arithmetic intensity
// (FLOP per byte moved through each memory level) across, achieved FLOP/s up; a bandwidth roof
// per level the report measured (L1, L2, DRAM), each rising to the FP32 roof (the FP64 roof
// dashed) and on to the tensor-core roof of each input type the kernel's MMAs used; for each
// version, one point per level at its FLOP/s, so a kernel whose L1 traffic dwarfs its DRAM
// traffic (uncoalesced accesses) shows it. Earlier saves are hollow diamonds drawn over this
// version's filled circles: a save at the same place still shows. A point without FLOPs or
// without traffic can't sit on log axes: it is drawn on the edge it tends to, and says so.

import { escapeHtml } from './html';
import type { RooflinePoint, Roofs } from './profileModel';

const WIDTH = 560;
const HEIGHT = 340;
const LEFT = 64;
const RIGHT = 16;
const TOP = 16;
const BOTTOM = 44;
const EARLIER_RADIUS = 8; // a diamond's half-diagonal: larger than this version's circle

export interface PlotPoint extends RooflinePoint {
  readonly label: string;
  readonly current: boolean;
}

export type Level = 'l1' | 'l2' | 'dram';

/** The memory levels, fastest first, with their names on screen. */
export const LEVELS: readonly { readonly level: Level; readonly name: string }[] = [
  { level: 'l1', name: 'L1' },
  { level: 'l2', name: 'L2' },
  { level: 'dram', name: 'DRAM' },
];

/** The bandwidth of `level`: its roof, or a point's traffic; undefined when not measured. */
function bytesPerSecond(of: Roofs | RooflinePoint, level: Level): number | undefined {
  const value = level === 'dram' ? of.dram_bytes_per_s : level === 'l2' ? of.l2_bytes_per_s : of.l1_bytes_per_s;
  return value ?? undefined;
}

/** The levels whose roof the report measured, with their bandwidth. */
export function measuredLevels(roofs: Roofs): { level: Level; name: string; bandwidth: number }[] {
  return LEVELS.flatMap(({ level, name }) => {
    const bandwidth = bytesPerSecond(roofs, level);
    return bandwidth === undefined ? [] : [{ level, name, bandwidth }];
  });
}

export function rooflinePlot(roofs: Roofs, points: readonly PlotPoint[]): string {
  const levels = measuredLevels(roofs);
  const fastest = Math.max(...levels.map((l) => l.bandwidth));
  const top = Math.max(roofs.fp32_flops_per_s, ...roofs.tensor.map((t) => t.flops_per_s));
  const ridge = (flops: number, bandwidth: number): number => flops / bandwidth;
  const intensities = points.flatMap((p) => levels.map((l) => intensity(p, l.level))).filter((v): v is number => v !== undefined && v > 0 && Number.isFinite(v));
  const flops = points.map((p) => p.flops_per_s).filter((v) => v > 0);
  const xLow = decadeBelow(Math.min(ridge(roofs.fp32_flops_per_s, fastest) / 1000, ...intensities));
  const xHigh = decadeAbove(Math.max(ridge(roofs.fp32_flops_per_s, roofs.dram_bytes_per_s) * 100, ridge(top, roofs.dram_bytes_per_s) * 10, ...intensities));
  const yHigh = decadeAbove(Math.max(top * 1.5, ...flops));
  const yLow = decadeBelow(Math.min(roofs.fp32_flops_per_s / 1e5, ...flops));
  const x = (v: number): number => LEFT + ((Math.log10(v) - Math.log10(xLow)) / (Math.log10(xHigh) - Math.log10(xLow))) * (WIDTH - LEFT - RIGHT);
  const y = (v: number): number => HEIGHT - BOTTOM - ((Math.log10(v) - Math.log10(yLow)) / (Math.log10(yHigh) - Math.log10(yLow))) * (HEIGHT - TOP - BOTTOM);
  const parts = [
    `<svg class="roofline" width="100%" viewBox="0 0 ${String(WIDTH)} ${String(HEIGHT)}" role="img" aria-label="${escapeHtml(ariaLabel(roofs, points))}">`,
    ...decades(xLow, xHigh).map((t) => `<line class="grid" x1="${f(x(t))}" x2="${f(x(t))}" y1="${String(TOP)}" y2="${String(HEIGHT - BOTTOM)}"/><text class="tick-label" x="${f(x(t))}" y="${String(HEIGHT - BOTTOM + 14)}" text-anchor="middle">${tickLabel(t)}</text>`),
    ...yTicks(yLow, yHigh).map((t) => `<line class="grid" x1="${String(LEFT)}" x2="${String(WIDTH - RIGHT)}" y1="${f(y(t))}" y2="${f(y(t))}"/><text class="tick-label" x="${String(LEFT - 4)}" y="${f(y(t) + 3)}" text-anchor="end">${flopsLabel(t)}</text>`),
    `<text class="axis-label" x="${f((LEFT + WIDTH - RIGHT) / 2)}" y="${String(HEIGHT - 6)}" text-anchor="middle">arithmetic intensity (FLOP per byte of each memory level)</text>`,
    `<text class="axis-label" x="12" y="${f((TOP + HEIGHT - BOTTOM) / 2)}" text-anchor="middle" transform="rotate(-90 12 ${f((TOP + HEIGHT - BOTTOM) / 2)})">performance (FLOP/s)</text>`,
  ];
  // Each level's bandwidth roof rises to the highest compute roof; the compute roofs are flat
  // from where the fastest level meets them (each level's own ridge is where its line meets them).
  for (const { level, name, bandwidth } of levels) {
    const start = Math.max(xLow, yLow / bandwidth);
    const end = ridge(top, bandwidth);
    const label = `${name} ${bandwidthLabel(bandwidth)}`;
    // the label along its line, a quarter of the way up
    const at = start * (end / start) ** 0.25;
    const angle = (Math.atan2(y(end * bandwidth) - y(start * bandwidth), x(end) - x(start)) * 180) / Math.PI;
    parts.push(
      `<polyline class="roof memory ${level}" points="${f(x(start))},${f(y(start * bandwidth))} ${f(x(end))},${f(y(end * bandwidth))}"><title>${escapeHtml(`${label} (${name} bandwidth roof)`)}</title></polyline>`,
      `<text class="roof-label ${level}" x="${f(x(at))}" y="${f(y(at * bandwidth) - 4)}" transform="rotate(${f(angle)} ${f(x(at))} ${f(y(at * bandwidth) - 4)})">${escapeHtml(label)}</text>`,
    );
  }
  const compute = (cls: string, label: string, flopsPerS: number, labelBelow: boolean): void => {
    parts.push(
      `<polyline class="roof compute ${cls}" points="${f(x(ridge(flopsPerS, fastest)))},${f(y(flopsPerS))} ${f(x(xHigh))},${f(y(flopsPerS))}"><title>${escapeHtml(label)}</title></polyline>`,
      `<text class="roof-label" x="${f(x(xHigh) - 4)}" y="${f(y(flopsPerS) + (labelBelow ? 12 : -5))}" text-anchor="end">${escapeHtml(label)}</text>`,
    );
  };
  compute('fp32', `FP32 ${flopsLabel(roofs.fp32_flops_per_s)}FLOP/s`, roofs.fp32_flops_per_s, false);
  if (roofs.fp64_flops_per_s !== null && roofs.fp64_flops_per_s > yLow) {
    compute('fp64', `FP64 ${flopsLabel(roofs.fp64_flops_per_s)}FLOP/s`, roofs.fp64_flops_per_s, true);
  }
  for (const [index, roof] of roofs.tensor.entries()) {
    compute('tensor', `${roof.path} tensor ${flopsLabel(roof.flops_per_s)}FLOP/s (dense)`, roof.flops_per_s, index !== 0);
  }
  // This version first, then the earlier saves' hollow diamonds over it.
  for (const point of [...points].sort((a, b) => Number(b.current) - Number(a.current))) {
    for (const { level, name } of levels) {
      const traffic = bytesPerSecond(point, level);
      if (traffic === undefined) {
        continue; // an earlier save whose profile had no counts for this level
      }
      const where = intensity(point, level);
      const px = where === undefined ? x(xHigh) : where <= 0 ? x(xLow) : x(Math.min(Math.max(where, xLow), xHigh));
      const py = point.flops_per_s > 0 ? y(Math.max(point.flops_per_s, yLow)) : y(yLow);
      const edge = point.flops_per_s <= 0 ? ' (no FP32, FP64 or tensor-core arithmetic: drawn on the axis)' : where === undefined ? ` (no ${name} traffic: drawn on the right edge)` : '';
      const tensor = point.tensor_flops_per_s ? ` (${flopsLabel(point.tensor_flops_per_s)}FLOP/s on the tensor cores)` : '';
      const title = `${point.label}, ${name}: ${flopsLabel(point.flops_per_s)}FLOP/s${tensor}, ${bandwidthLabel(traffic)} ${name}${where !== undefined && where > 0 ? `, ${where.toPrecision(3)} FLOP/${name} byte` : ''}${edge}`;
      const shape = point.current
        ? `<circle class="point current ${level}" cx="${f(px)}" cy="${f(py)}" r="4.5">`
        : `<polygon class="point earlier ${level}" points="${diamond(px, py)}">`;
      parts.push(`${shape}<title>${escapeHtml(title)}</title>${point.current ? '</circle>' : '</polygon>'}`);
    }
  }
  parts.push('</svg>');
  return parts.join('');
}

function diamond(cx: number, cy: number): string {
  const r = EARLIER_RADIUS;
  return [`${f(cx)},${f(cy - r)}`, `${f(cx + r)},${f(cy)}`, `${f(cx)},${f(cy + r)}`, `${f(cx - r)},${f(cy)}`].join(' ');
}

/** FLOPs per byte of `level`; undefined when the point moved no bytes there (or was not measured). */
function intensity(point: RooflinePoint, level: Level): number | undefined {
  const traffic = bytesPerSecond(point, level);
  return traffic !== undefined && traffic > 0 ? point.flops_per_s / traffic : undefined;
}

function ariaLabel(roofs: Roofs, points: readonly PlotPoint[]): string {
  const levels = measuredLevels(roofs);
  const current = points.find((p) => p.current);
  const traffic = (p: RooflinePoint): string =>
    levels.flatMap(({ level, name }) => {
      const value = bytesPerSecond(p, level);
      return value === undefined ? [] : [`${bandwidthLabel(value)} ${name}`];
    }).join(', ');
  const where = current === undefined ? 'no point for this version' : `this version at ${flopsLabel(current.flops_per_s)}FLOP/s moving ${traffic(current)}`;
  const bandwidths = levels.map(({ name, bandwidth }) => `${name} ${bandwidthLabel(bandwidth)}`).join(', ');
  const tensor = roofs.tensor.map((t) => `, ${t.path} tensor ${flopsLabel(t.flops_per_s)}FLOP/s`).join('');
  return `Roofline: ${bandwidths}, FP32 ${flopsLabel(roofs.fp32_flops_per_s)}FLOP/s${tensor}; ${where}; ${String(points.length - (current ? 1 : 0))} earlier saves`;
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
