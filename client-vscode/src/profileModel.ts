// The answer to `kernelblaster.kernelProfile` (docs/protocol.md): one kernel's profile view data,
// checked here once so the view renders only what has the documented shape. Fields the view
// does not draw are not listed.

export interface TensorRoof {
  readonly path: string;
  readonly flops_per_s: number;
}

export interface Roofs {
  readonly dram_bytes_per_s: number;
  /** The L1 and L2 bandwidth roofs of the hierarchical roofline; null when not measured. */
  readonly l1_bytes_per_s?: number | null;
  readonly l2_bytes_per_s?: number | null;
  readonly fp32_flops_per_s: number;
  readonly fp64_flops_per_s: number | null;
  /** The dense tensor-core roofs of the input types the kernel's MMAs used, highest first. */
  readonly tensor: readonly TensorRoof[];
  readonly source: 'measured' | 'published';
  readonly note: string;
}

export interface RooflinePoint {
  /** CUDA-core FP32 + FP64 and tensor-core FLOP/s. */
  readonly flops_per_s: number;
  readonly dram_bytes_per_s: number;
  /** The tensor cores' share of flops_per_s (0 for earlier saves, whose history has none). */
  readonly tensor_flops_per_s?: number;
  /** The traffic through L1 and L2 (the hierarchical roofline); null when not measured. */
  readonly l1_bytes_per_s?: number | null;
  readonly l2_bytes_per_s?: number | null;
}

export interface Finding {
  readonly id: string;
  readonly message: string;
  readonly estimated_speedup: number | null;
  readonly lines: readonly number[];
}

export interface PerfState {
  readonly state: string;
  readonly summary: string;
  readonly arch: string;
  readonly findings: readonly Finding[];
  readonly headroom: { readonly roof: string; readonly achieved_fraction: number } | null;
}

export interface VersionPoint {
  readonly time: number;
  readonly median_ms: number;
  readonly duration_ms: number | null;
  readonly state: string | null;
  readonly flops_per_s: number | null;
  readonly dram_bytes_per_s: number | null;
  readonly l1_bytes_per_s?: number | null;
  readonly l2_bytes_per_s?: number | null;
  readonly current: boolean;
}

export interface BlamedLine {
  readonly line: number;
  readonly text: string;
  readonly message: string;
  readonly rule: string;
  readonly estimated_speedup: number | null;
}

export interface KernelProfileData {
  readonly uri: string;
  readonly kernel: string;
  readonly device: string | null;
  readonly arch: string | null;
  readonly profiled: boolean;
  readonly current: boolean;
  readonly state: PerfState | null;
  /** The headroom to the roof that limits the state, said as the hover says it. */
  readonly limit: string | null;
  readonly duration_ms: number | null;
  readonly median_ms: number | null;
  readonly speedup_vs_eager: number | null;
  readonly speedup_vs_compile: number | null;
  readonly change: string | null;
  readonly roofs: Roofs | null;
  readonly point: RooflinePoint | null;
  readonly history: readonly VersionPoint[];
  readonly blamed: readonly BlamedLine[];
  readonly report: string | null;
  readonly message: string;
}

type Check = (value: unknown) => boolean;

const isString: Check = (v) => typeof v === 'string';
const isNumber: Check = (v) => typeof v === 'number' && Number.isFinite(v);
const isBoolean: Check = (v) => typeof v === 'boolean';
const orNull = (check: Check): Check => (v) => v === null || v === undefined || check(v);
const arrayOf = (check: Check): Check => (v) => Array.isArray(v) && v.every(check);
const record =
  (fields: Record<string, Check>): Check =>
  (v) =>
    typeof v === 'object' && v !== null && Object.entries(fields).every(([key, check]) => check((v as Record<string, unknown>)[key]));

const ROOFS = record({
  dram_bytes_per_s: isNumber,
  l1_bytes_per_s: orNull(isNumber),
  l2_bytes_per_s: orNull(isNumber),
  fp32_flops_per_s: isNumber,
  fp64_flops_per_s: orNull(isNumber),
  tensor: arrayOf(record({ path: isString, flops_per_s: isNumber })),
  source: (v) => v === 'measured' || v === 'published',
  note: isString,
});
const POINT = record({
  flops_per_s: isNumber,
  dram_bytes_per_s: isNumber,
  tensor_flops_per_s: isNumber,
  l1_bytes_per_s: orNull(isNumber),
  l2_bytes_per_s: orNull(isNumber),
});
const FINDING = record({ id: isString, message: isString, estimated_speedup: orNull(isNumber), lines: arrayOf(isNumber) });
const STATE = record({
  state: isString,
  summary: isString,
  arch: isString,
  findings: arrayOf(FINDING),
  headroom: orNull(record({ roof: isString, achieved_fraction: isNumber })),
});
const VERSION = record({
  time: isNumber,
  median_ms: isNumber,
  duration_ms: orNull(isNumber),
  state: orNull(isString),
  flops_per_s: orNull(isNumber),
  dram_bytes_per_s: orNull(isNumber),
  l1_bytes_per_s: orNull(isNumber),
  l2_bytes_per_s: orNull(isNumber),
  current: isBoolean,
});
const BLAMED = record({ line: isNumber, text: isString, message: isString, rule: isString, estimated_speedup: orNull(isNumber) });
const PROFILE = record({
  uri: isString,
  kernel: isString,
  device: orNull(isString),
  arch: orNull(isString),
  profiled: isBoolean,
  current: isBoolean,
  state: orNull(STATE),
  limit: orNull(isString),
  duration_ms: orNull(isNumber),
  median_ms: orNull(isNumber),
  speedup_vs_eager: orNull(isNumber),
  speedup_vs_compile: orNull(isNumber),
  change: orNull(isString),
  roofs: orNull(ROOFS),
  point: orNull(POINT),
  history: arrayOf(VERSION),
  blamed: arrayOf(BLAMED),
  report: orNull(isString),
  message: isString,
});

/** The server's answer, or an error saying it is not the documented shape. */
export function parseKernelProfile(answer: unknown): KernelProfileData {
  if (!PROFILE(answer)) {
    throw new Error(`the server's kernelblaster.kernelProfile answer is not the documented shape: ${JSON.stringify(answer).slice(0, 300)}`);
  }
  // Absent optional fields (msgspec leaves none out, but a null check admits undefined) read as null.
  const data = answer as Record<string, unknown>;
  const nullable = ['device', 'arch', 'state', 'limit', 'duration_ms', 'median_ms', 'speedup_vs_eager', 'speedup_vs_compile', 'change', 'roofs', 'point', 'report'];
  return Object.fromEntries(Object.entries(data).concat(nullable.filter((k) => data[k] === undefined).map((k) => [k, null]))) as unknown as KernelProfileData;
}

/** `kernelblaster.ncuReport`'s answer. */
export function parseNcuReport(answer: unknown): { path: string | null; message: string } {
  if (!record({ path: orNull(isString), message: isString })(answer)) {
    throw new Error(`the server answered ${JSON.stringify(answer)} instead of {"path", "message"}`);
  }
  const { path, message } = answer as { path?: string | null; message: string };
  return { path: path ?? null, message };
}
