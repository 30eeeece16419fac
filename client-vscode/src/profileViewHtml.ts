// The profile view's page for one kernel: its time and change since earlier saves, the roofline
// with this version's point and its earlier saves' points under the GPU's roofs, the state and
// its findings, and the source lines ncu blames. Pure: data in, HTML out. The same rules as the
// knowledge-base view (kbViewHtml.ts): every string from the server is escaped, the only script
// is the page's own (nonce), and it talks to the extension with postMessage (profileView.ts).

import { escapeHtml } from './html';
import { factor } from './kbPlot';
import type { PageSecurity } from './kbViewHtml';
import type { BlamedLine, KernelProfileData, PerfState, VersionPoint } from './profileModel';
import { measuredLevels, type PlotPoint, rooflinePlot } from './roofline';

/** Messages the page posts to the extension. */
export type ProfileViewMessage =
  | { readonly type: 'openLine'; readonly line: number }
  | { readonly type: 'openInNsightCompute' }
  | { readonly type: 'refresh' };

export function renderProfile(data: KernelProfileData, security: PageSecurity): string {
  const { nonce, cspSource } = security;
  const csp = ["default-src 'none'", `style-src ${cspSource} 'nonce-${nonce}'`, `script-src 'nonce-${nonce}'`].join('; ');
  return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="${csp}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escapeHtml(data.kernel)} profile</title>
<style nonce="${nonce}">${STYLE}</style>
</head>
<body>
<header>
  <h1><code>${escapeHtml(data.kernel)}</code>${data.device ? ` on ${escapeHtml(data.device)}` : ''}</h1>
  <p class="summary" id="timing">${timing(data)}</p>
  <div class="actions">
    <button id="refresh" type="button">Refresh</button>
    <button id="open-ncu" type="button"${data.report === null ? ' class="secondary"' : ''}>Open in Nsight Compute</button>
  </div>
  ${data.profiled && !data.current ? '<p class="note">From the profile of an earlier version of this file; save to refresh.</p>' : ''}
  ${data.message ? `<p class="note" id="message">${escapeHtml(data.message)}</p>` : ''}
</header>
<main>
<section id="roofline">
<h2>Roofline</h2>
${roofline(data)}
</section>
<section id="state">
<h2>State and findings</h2>
${state(data.state)}
</section>
<section id="blamed">
<h2>Source lines ncu blames</h2>
${blamed(data.blamed)}
</section>
<section id="history">
<h2>Saves</h2>
${history(data.history)}
</section>
</main>
<script nonce="${nonce}">${SCRIPT}</script>
</body>
</html>`;
}

function timing(data: KernelProfileData): string {
  const parts = [];
  if (data.duration_ms !== null) {
    parts.push(`kernel ${ms(data.duration_ms)} (ncu)`);
  }
  if (data.median_ms !== null) {
    parts.push(`whole target ${ms(data.median_ms)} per call`);
  }
  const versus = [
    data.speedup_vs_eager === null ? '' : `${factor(data.speedup_vs_eager)} vs eager`,
    data.speedup_vs_compile === null ? '' : `${factor(data.speedup_vs_compile)} vs torch.compile`,
  ].filter((s) => s !== '');
  parts.push(...versus);
  const change = data.change === null ? '' : ` <span class="change${data.change.startsWith('regression') ? ' regression' : ''}">${escapeHtml(data.change)}</span>`;
  return `${escapeHtml(parts.join(' · ') || 'not timed yet')}${change}`;
}

function roofline(data: KernelProfileData): string {
  if (data.roofs === null) {
    return '<p class="empty">No roofs for this GPU yet (see above).</p>';
  }
  const earlier: PlotPoint[] = data.history.flatMap((version, index) =>
    version.current || version.flops_per_s === null || version.dram_bytes_per_s === null
      ? []
      : [
          {
            flops_per_s: version.flops_per_s,
            dram_bytes_per_s: version.dram_bytes_per_s,
            l1_bytes_per_s: version.l1_bytes_per_s,
            l2_bytes_per_s: version.l2_bytes_per_s,
            current: false,
            label: `save ${String(index + 1)} (${ms(version.median_ms)} per call)`,
          },
        ],
  );
  const current: PlotPoint[] = data.point === null ? [] : [{ ...data.point, current: true, label: 'this version' }];
  // The roof that limits the kernel's state, not the chart's nearest (a launch-bound kernel's
  // fix is parallelism however far below the DRAM roof it sits).
  const nearest = data.limit === null ? '' : `<p class="limit">${escapeHtml(data.limit)}</p>`;
  const levels = measuredLevels(data.roofs)
    .map(({ level, name }) => `<span class="swatch level ${level}"></span> ${name}`)
    .join(' ');
  const unmeasured = data.roofs.l1_bytes_per_s == null ? ' <span class="detail">(no L1 and L2 roofs: this profile did not measure them)</span>' : '';
  return `${rooflinePlot(data.roofs, [...earlier, ...current])}
<p class="legend" id="roofline-legend">memory level (roof and point): ${levels}${unmeasured}; version: <span class="marker current"></span> this one <span class="marker earlier"></span> earlier saves (same GPU and reference)</p>
<p class="detail roofs-source">Roofs: ${escapeHtml(data.roofs.note)}.</p>
${nearest}`;
}

function state(value: PerfState | null): string {
  if (value === null) {
    return '<p class="empty">No performance state yet.</p>';
  }
  const findings =
    value.findings.length === 0
      ? '<p class="empty">No findings.</p>'
      : `<ul class="findings">${value.findings
          .map((finding) => {
            const gain = finding.estimated_speedup === null ? '' : ` <span class="detail">(ncu estimates up to ${String(Math.round(finding.estimated_speedup))}%)</span>`;
            return `<li><code>${escapeHtml(finding.id)}</code>: ${escapeHtml(finding.message)}${gain}</li>`;
          })
          .join('')}</ul>`;
  return `<p><strong>${escapeHtml(value.summary)}</strong></p><p class="detail">state <code>${escapeHtml(value.state)}</code> on ${escapeHtml(value.arch)}</p>${findings}`;
}

function blamed(lines: readonly BlamedLine[]): string {
  if (lines.length === 0) {
    return '<p class="empty">None (a profile of this version built with -lineinfo names them).</p>';
  }
  return `<table><thead><tr><th class="num">line</th><th>source</th><th>why</th></tr></thead><tbody>${lines
    .map(
      (line) =>
        `<tr class="blamed-line"><td class="num"><a href="#" class="line" data-line="${String(line.line)}">${String(line.line)}</a></td><td><code>${escapeHtml(line.text.trim())}</code></td><td>${escapeHtml(line.message)} <span class="detail">${escapeHtml(line.rule)}${line.estimated_speedup === null ? '' : `, up to ${String(Math.round(line.estimated_speedup))}%`}</span></td></tr>`,
    )
    .join('')}</tbody></table>`;
}

function history(versions: readonly VersionPoint[]): string {
  if (versions.length === 0) {
    return '<p class="empty">No verified saves timed yet on this GPU.</p>';
  }
  const rows = versions.map((version, index) => {
    const when = new Date(version.time * 1000).toLocaleString();
    const previous = index > 0 ? versions[index - 1].median_ms / version.median_ms : null;
    const change = previous === null ? '' : previous >= 1 ? `${factor(previous)} faster` : `${factor(1 / previous)} slower`;
    return `<tr class="version${version.current ? ' current' : ''}"><td class="num">${String(index + 1)}</td><td>${escapeHtml(when)}</td><td class="num">${ms(version.median_ms)}</td><td class="num">${version.duration_ms === null ? '–' : ms(version.duration_ms)}</td><td>${escapeHtml(change)}</td><td><code>${escapeHtml(version.state ?? '–')}</code></td></tr>`;
  });
  return `<table><thead><tr><th class="num">#</th><th>saved</th><th class="num">per call</th><th class="num">kernel (ncu)</th><th>vs previous</th><th>state</th></tr></thead><tbody>${rows.join('')}</tbody></table>`;
}

function ms(value: number): string {
  return value >= 100 ? `${value.toFixed(0)} ms` : value >= 1 ? `${value.toFixed(2)} ms` : `${String(Number(value.toPrecision(3)))} ms`;
}

const STYLE = `
body { font-family: var(--vscode-font-family); font-size: var(--vscode-font-size); color: var(--vscode-foreground); padding: 0 16px 24px; }
h1 { font-size: 1.4em; margin-bottom: 4px; }
h2 { font-size: 1.15em; margin-top: 20px; border-bottom: 1px solid var(--vscode-panel-border); padding-bottom: 4px; }
.summary, .detail, .empty, .note { color: var(--vscode-descriptionForeground); }
.detail { font-size: 0.9em; }
.change { color: var(--vscode-charts-green); font-weight: 600; margin-left: 8px; }
.change.regression { color: var(--vscode-charts-orange); }
.actions { display: flex; gap: 8px; margin: 8px 0; }
button { font: inherit; color: var(--vscode-button-foreground); background: var(--vscode-button-background); border: none; padding: 3px 10px; cursor: pointer; }
button.secondary { color: var(--vscode-button-secondaryForeground); background: var(--vscode-button-secondaryBackground); }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; vertical-align: top; padding: 4px 8px; border-bottom: 1px solid var(--vscode-panel-border); }
th { font-weight: 600; color: var(--vscode-descriptionForeground); }
.num { text-align: right; white-space: nowrap; }
tr.version.current { font-weight: 600; }
a { color: var(--vscode-textLink-foreground); text-decoration: none; }
a:hover { text-decoration: underline; }
.roofline { max-width: 720px; height: auto; display: block; }
.roofline .grid { stroke: var(--vscode-panel-border); stroke-width: 1; }
.roofline .tick-label, .roofline .axis-label, .roofline .roof-label { fill: var(--vscode-descriptionForeground); font-size: 10px; }
.roofline .roof { fill: none; stroke-width: 2.5; }
.roofline .roof.compute { stroke: var(--vscode-foreground); stroke-width: 1.5; opacity: 0.8; }
.roofline .roof.fp64 { stroke-dasharray: 5 4; }
.roofline .roof.tensor { stroke: var(--vscode-charts-purple); stroke-dasharray: 2 3; stroke-width: 2; opacity: 1; }
.roofline .l1 { stroke: var(--vscode-charts-yellow); }
.roofline .l2 { stroke: var(--vscode-charts-green); }
.roofline .dram { stroke: var(--vscode-charts-blue); }
.roofline .roof-label.l1 { fill: var(--vscode-charts-yellow); stroke: none; }
.roofline .roof-label.l2 { fill: var(--vscode-charts-green); stroke: none; }
.roofline .roof-label.dram { fill: var(--vscode-charts-blue); stroke: none; }
.roofline .point.current.l1 { fill: var(--vscode-charts-yellow); }
.roofline .point.current.l2 { fill: var(--vscode-charts-green); }
.roofline .point.current.dram { fill: var(--vscode-charts-blue); }
.roofline .point.current { stroke: var(--vscode-foreground); stroke-width: 1; }
.roofline .point.earlier { fill: none; stroke-width: 1.5; }
.legend .swatch { display: inline-block; width: 14px; height: 3px; margin: 0 4px 0 10px; vertical-align: middle; }
.legend .swatch.l1 { background: var(--vscode-charts-yellow); }
.legend .swatch.l2 { background: var(--vscode-charts-green); }
.legend .swatch.dram { background: var(--vscode-charts-blue); }
.legend .marker { display: inline-block; width: 9px; height: 9px; margin: 0 4px 0 10px; vertical-align: middle; }
.legend .marker.current { border-radius: 50%; background: var(--vscode-foreground); }
.legend .marker.earlier { border: 1.5px solid var(--vscode-foreground); transform: rotate(45deg); width: 7px; height: 7px; }
`;

const SCRIPT = `
const vscode = acquireVsCodeApi();
document.getElementById('refresh').addEventListener('click', () => vscode.postMessage({ type: 'refresh' }));
document.getElementById('open-ncu').addEventListener('click', () => vscode.postMessage({ type: 'openInNsightCompute' }));
document.addEventListener('click', (event) => {
  const link = event.target.closest('a.line');
  if (link === null) return;
  event.preventDefault();
  vscode.postMessage({ type: 'openLine', line: Number(link.dataset.line) });
});
`;

/** A message from the page, checked; undefined for anything else. */
export function parseProfileMessage(message: unknown): ProfileViewMessage | undefined {
  if (typeof message !== 'object' || message === null) {
    return undefined;
  }
  const m = message as Record<string, unknown>;
  if (m.type === 'refresh' || m.type === 'openInNsightCompute') {
    return { type: m.type };
  }
  if (m.type === 'openLine' && typeof m.line === 'number' && Number.isInteger(m.line) && m.line > 0) {
    return { type: 'openLine', line: m.line };
  }
  return undefined;
}
