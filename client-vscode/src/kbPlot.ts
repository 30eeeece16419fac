// The small plot of a technique's track record: every measured speedup as a dot on a log axis,
// against the speedup predicted now and the 1× line. The rows of the view share one axis
// (sharedRange), so their dots compare by position. Inline SVG, drawn here: the webview loads
// nothing from outside (strict CSP), and colours come from the theme through CSS classes.

import { escapeHtml } from './html';
import type { Measurement } from './kbModel';

const WIDTH = 260;
const HEIGHT = 46;
const PAD_X = 14;
const AXIS_Y = 32;

/** `measured` dots (faster: `.faster`, not faster: `.slower`), `predicted` as a bar, on the
 * axis `range` (a row's own when not given). */
export function speedupPlot(measurements: readonly Measurement[], predicted: number, range?: readonly [number, number]): string {
  const values = measuredSpeedups(measurements);
  const [low, high] = range ?? axisRange([...values, predicted, 1]);
  const x = (value: number): number =>
    PAD_X + ((Math.log2(value) - Math.log2(low)) / (Math.log2(high) - Math.log2(low))) * (WIDTH - 2 * PAD_X);
  const ticks = axisTicks(low, high).map(
    (tick) =>
      `<line class="tick" x1="${fixed(x(tick))}" x2="${fixed(x(tick))}" y1="${String(AXIS_Y)}" y2="${String(AXIS_Y + 3)}"/>` +
      `<text class="tick-label" x="${fixed(x(tick))}" y="${String(HEIGHT - 2)}" text-anchor="middle">${factor(tick)}</text>`,
  );
  const dots = values.map((value, index) => {
    // Deterministic jitter in three rows, so repeated values stay visible as several dots.
    const y = AXIS_Y - 8 - (index % 3) * 7;
    const kind = value > 1 ? 'faster' : 'slower';
    return `<circle class="dot ${kind}" cx="${fixed(x(value))}" cy="${String(y)}" r="3"><title>measured ${factor(value)}</title></circle>`;
  });
  const label =
    values.length === 0
      ? `no measured speedups yet; predicted ${factor(predicted)}`
      : `measured ${values.map(factor).join(', ')}; predicted ${factor(predicted)}`;
  return [
    `<svg class="plot" width="${String(WIDTH)}" height="${String(HEIGHT)}" viewBox="0 0 ${String(WIDTH)} ${String(HEIGHT)}" role="img" aria-label="${escapeHtml(label)}">`,
    `<line class="axis" x1="${String(PAD_X)}" x2="${String(WIDTH - PAD_X)}" y1="${String(AXIS_Y)}" y2="${String(AXIS_Y)}"/>`,
    ...ticks,
    `<line class="unity" x1="${fixed(x(1))}" x2="${fixed(x(1))}" y1="4" y2="${String(AXIS_Y)}"/>`,
    `<rect class="predicted" x="${fixed(x(predicted) - 1.5)}" y="4" width="3" height="${String(AXIS_Y - 4)}"><title>predicted ${factor(predicted)}</title></rect>`,
    ...dots,
    '</svg>',
  ].join('');
}

/** One axis for several plots: powers of two around every plot's measurements and prediction. */
export function sharedRange(plots: readonly { readonly measurements: readonly Measurement[]; readonly predicted_speedup: number }[]): [number, number] {
  return axisRange(plots.flatMap((p) => [...measuredSpeedups(p.measurements), p.predicted_speedup, 1]));
}

function measuredSpeedups(measurements: readonly Measurement[]): number[] {
  return measurements.map((m) => m.measured_speedup).filter((v) => v > 0);
}

/** Powers of two around every value, at least 0.5× to 2×. */
function axisRange(values: readonly number[]): [number, number] {
  const low = Math.min(0.5, ...values);
  const high = Math.max(2, ...values);
  return [2 ** Math.floor(Math.log2(low)), 2 ** Math.ceil(Math.log2(high))];
}

function axisTicks(low: number, high: number): number[] {
  const ticks = [];
  for (let tick = low; tick <= high * 1.0001; tick *= 2) {
    ticks.push(tick);
  }
  // A wide range gets every other power of two, always keeping 1×.
  return ticks.length <= 6 ? ticks : ticks.filter((tick) => Math.round(Math.log2(tick)) % 2 === 0);
}

export function factor(value: number): string {
  return `${value >= 10 ? value.toFixed(0) : String(Number(value.toFixed(2)))}×`;
}

function fixed(value: number): string {
  return value.toFixed(1);
}
