// The knowledge-base webview's page: per GPU arch and performance state, each technique's track
// record (its attempts' outcomes, measured speedups against the prediction on an axis every row
// shares, the policy update's notes), the techniques agents proposed (where from, status,
// record), then this workspace's kernels, recent attempts and kept candidates with their diffs.
// Pure: data in, HTML out. Every KB string is escaped; the only script is the page's own,
// allowed by its nonce, and it talks to the extension with postMessage (see knowledgeBaseView.ts).

import { escapeHtml } from './html';
import type { Attempt, CandidateDiff, KernelLink, KnowledgeBaseData, Proposal, TrackRecord } from './kbModel';
import { factor, sharedRange, speedupPlot } from './kbPlot';

export interface PageSecurity {
  /** `webview.cspSource`. */
  readonly cspSource: string;
  /** A fresh random value per render, for the page's own style and script. */
  readonly nonce: string;
}

/** Messages the page posts to the extension. */
export type ViewMessage =
  | { readonly type: 'openKernel'; readonly uri: string; readonly line: number }
  | { readonly type: 'openDiff'; readonly source: string; readonly candidate: string; readonly kernel: string }
  | { readonly type: 'refresh' };

export function renderKnowledgeBase(data: KnowledgeBaseData, security: PageSecurity): string {
  const { nonce, cspSource } = security;
  const csp = [
    "default-src 'none'",
    `style-src ${cspSource} 'nonce-${nonce}'`,
    `script-src 'nonce-${nonce}'`,
    `img-src ${cspSource}`,
  ].join('; ');
  const { summary, entries } = data.kb;
  const states = unique(entries.map((e) => e.state));
  const techniques = unique(entries.map((e) => e.technique));
  const titles = new Map(entries.map((e) => [e.technique, e.title]));
  return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="${csp}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>KernelBlaster knowledge base</title>
<style nonce="${nonce}">${STYLE}</style>
</head>
<body>
<header>
  <h1>KernelBlaster knowledge base</h1>
  <p class="summary"><code>${escapeHtml(summary.path)}</code> · ${String(summary.attempts)} recorded attempt${plural(summary.attempts)} · ${String(summary.techniques)} techniques</p>
  <div class="filters">
    <label>State <select id="state-filter"><option value="">all states</option>${states.map((s) => option(s, s)).join('')}</select></label>
    <label>Technique <select id="technique-filter"><option value="">all techniques</option>${techniques.map((t) => option(t, titles.get(t) ?? t)).join('')}</select></label>
    <button id="refresh" type="button">Refresh</button>
  </div>
</header>
<main>
<section id="track-records">
<h2>Track record by GPU and performance state</h2>
${entries.length === 0 ? EMPTY_KB : `${PLOT_LEGEND}\n${groups(entries)}`}
</section>
${proposalsSection(data.kb.proposals)}
${workspaceSection(data)}
</main>
<script nonce="${nonce}">${SCRIPT}</script>
</body>
</html>`;
}

const EMPTY_KB = `<p class="empty">No optimization attempts recorded yet: predictions come from the catalog's priors and Nsight Compute's estimates. Every verified outcome of "Optimize kernel" is added here.</p>`;

// What the plots' marks mean, and what "verified" and "faster" count (they are not the same).
const PLOT_LEGEND = `<p class="plot-legend" id="plot-legend">Speedup over the kernel before, × on a log scale (the same axis in every row): \
<svg class="key" width="12" height="12" viewBox="0 0 12 12"><circle class="dot faster" cx="6" cy="6" r="4"/></svg> measured, faster \
<svg class="key" width="12" height="12" viewBox="0 0 12 12"><circle class="dot slower" cx="6" cy="6" r="4"/></svg> measured, not faster \
<svg class="key" width="12" height="12" viewBox="0 0 12 12"><rect class="predicted" x="4.5" y="0" width="3" height="12"/></svg> predicted speedup of trying it again \
<svg class="key" width="12" height="12" viewBox="0 0 12 12"><line class="unity" x1="6" x2="6" y1="0" y2="12"/></svg> 1× (no change).<br>\
An attempt is <em>verified</em> when its output matched the reference; a verified attempt is then <em>faster</em> or <em>slower</em> than the kernel before. <em>Failed</em>: it did not build, crashed or gave wrong results.</p>`;

function groups(entries: readonly TrackRecord[]): string {
  const range = sharedRange(entries);
  const byGroup = new Map<string, TrackRecord[]>();
  for (const entry of entries) {
    const key = `${entry.arch} ${entry.state}`;
    byGroup.set(key, [...(byGroup.get(key) ?? []), entry]);
  }
  return [...byGroup.values()]
    .sort((a, b) => a[0].arch.localeCompare(b[0].arch) || a[0].state.localeCompare(b[0].state))
    .map((group) => {
      const { arch, state } = group[0];
      const rows = [...group].sort((a, b) => b.predicted_speedup - a.predicted_speedup).map((entry) => trackRecordRow(entry, range));
      return `<div class="group" data-state="${escapeHtml(state)}">
<h3><code>${escapeHtml(state)}</code> on ${escapeHtml(arch)}</h3>
<table>
<thead><tr><th>technique</th><th>attempts</th><th>measured speedup vs predicted (×, log)</th><th class="num">predicted</th><th>notes from the policy update</th></tr></thead>
<tbody>${rows.join('')}</tbody>
</table>
</div>`;
    })
    .join('\n');
}

function trackRecordRow(entry: TrackRecord, range: readonly [number, number]): string {
  const verified = entry.successes + entry.regressions;
  const failed = entry.failures === 0 ? '' : `, ${String(entry.failures)} failed`;
  const checked = entry.attempts === 0 ? '' : verified === entry.attempts ? `; all ${String(verified)} verified` : `; ${String(verified)} of ${String(entry.attempts)} verified`;
  const outcomes = `${String(entry.attempts)} attempt${plural(entry.attempts)}: ${String(entry.successes)} faster, ${String(entry.regressions)} slower${failed}${checked}`;
  const mean =
    entry.mean_log_speedup === null ? '' : `<div class="detail">geomean ${factor(Math.exp(entry.mean_log_speedup))}</div>`;
  const prior =
    entry.prior_speedup === null
      ? ''
      : `<div class="detail">prior ${factor(entry.prior_speedup)}${entry.prior_source ? `: ${escapeHtml(entry.prior_source)}` : ''}</div>`;
  const notes =
    entry.notes.length === 0 ? '<span class="detail">none</span>' : `<ul>${entry.notes.map((n) => `<li>${escapeHtml(n)}</li>`).join('')}</ul>`;
  return `<tr class="record" data-state="${escapeHtml(entry.state)}" data-technique="${escapeHtml(entry.technique)}">
<td><strong>${escapeHtml(entry.title)}</strong>${proposalBadge(entry.proposal)}<div class="detail"><code>${escapeHtml(entry.technique)}</code> · ${escapeHtml(entry.category)}</div></td>
<td class="outcomes">${outcomes}</td>
<td>${speedupPlot(entry.measurements, entry.predicted_speedup, range)}${mean}</td>
<td class="num">${factor(entry.predicted_speedup)}<div class="detail">confidence ${String(Math.round(entry.confidence * 100))}%</div>${prior}</td>
<td class="notes">${notes}</td>
</tr>`;
}

function proposalBadge(status: string | null): string {
  if (status === null) {
    return '';
  }
  const label = status === 'proposed' ? 'proposed · on trial' : `proposed · ${status}`;
  return ` <span class="badge ${escapeHtml(status)}">${escapeHtml(label)}</span>`;
}

function proposalsSection(proposals: readonly Proposal[]): string {
  if (proposals.length === 0) {
    return '';
  }
  return `<section id="proposals">
<h2>Techniques agents proposed</h2>
<p class="detail">Proposed where the knowledge base had no technique left for a state; ranked with a conservative prior until their measured outcomes promote or retire them.</p>
<table>
<thead><tr><th>technique</th><th>proposed for</th><th>status</th><th class="num">attempts</th><th class="num">geomean</th></tr></thead>
<tbody>${proposals.map(proposalRow).join('')}</tbody>
</table>
</section>`;
}

function proposalRow(proposal: Proposal): string {
  const when = new Date(proposal.time * 1000).toISOString().slice(0, 10);
  const outcomes = `${String(proposal.successes)} faster, ${String(proposal.regressions)} slower, ${String(proposal.failures)} failed`;
  const mean = proposal.mean_speedup === null ? '–' : factor(proposal.mean_speedup);
  const findings = proposal.addresses_findings.map((f) => `<code>${escapeHtml(f)}</code>`).join(', ');
  return `<tr class="proposal" data-state="${escapeHtml(proposal.state)}" data-technique="${escapeHtml(proposal.technique)}">
<td><strong>${escapeHtml(proposal.title)}</strong><div class="detail"><code>${escapeHtml(proposal.technique)}</code> · addresses ${findings}</div><div class="detail">${escapeHtml(proposal.description)}</div><details><summary>how to apply</summary>${escapeHtml(proposal.how_to_apply)}</details></td>
<td><code>${escapeHtml(proposal.state)}</code> on ${escapeHtml(proposal.arch)}<div class="detail">kernel <code>${escapeHtml(proposal.kernel)}</code>, ${escapeHtml(when)}, by ${escapeHtml(proposal.model)}</div><div class="detail">claimed ${factor(proposal.prior_speedup)}: ${escapeHtml(proposal.prior_source)}</div></td>
<td>${proposalBadge(proposal.status)}<div class="detail">${escapeHtml(proposal.status_reason)}</div></td>
<td class="num">${String(proposal.attempts)}<div class="detail">${outcomes}</div></td>
<td class="num">${mean}</td>
</tr>`;
}

function workspaceSection(data: KnowledgeBaseData): string {
  const { kernels, attempts, candidates } = data.workspace;
  const links = new Map(kernels.map((k) => [k.kernel, k]));
  const kernelList =
    kernels.length === 0
      ? '<p class="empty">Open a .cu file to see its kernels here.</p>'
      : `<p class="kernels">Kernels: ${kernels.map((k) => kernelLink(k.kernel, k)).join(' · ')}</p>`;
  const attemptRows =
    attempts.length === 0
      ? '<p class="empty">No optimization attempts on the open kernels yet.</p>'
      : `<table>
<thead><tr><th>when</th><th>kernel</th><th>technique</th><th>state</th><th>outcome</th><th class="num">predicted</th><th class="num">measured</th></tr></thead>
<tbody>${attempts.map((a) => attemptRow(a, links)).join('')}</tbody>
</table>`;
  return `<section id="workspace">
<h2>This workspace</h2>
${kernelList}
<h3>Recent attempts</h3>
${attemptRows}
<h3>Kept candidates</h3>
${candidates.length === 0 ? '<p class="empty">No verified candidate kept yet.</p>' : candidates.map(candidateBlock).join('\n')}
</section>`;
}

function attemptRow(attempt: Attempt, links: ReadonlyMap<string, KernelLink>): string {
  const measured = attempt.measured_speedup === null ? '–' : factor(attempt.measured_speedup);
  const state = attempt.after_state && attempt.after_state !== attempt.before_state
    ? `${escapeHtml(attempt.before_state)} → ${escapeHtml(attempt.after_state)}`
    : escapeHtml(attempt.before_state);
  const detail = attempt.correctness_detail ? `<div class="detail">${escapeHtml(attempt.correctness_detail)}</div>` : '';
  return `<tr class="attempt" data-state="${escapeHtml(attempt.before_state)}" data-technique="${escapeHtml(attempt.technique)}">
<td>${escapeHtml(new Date(attempt.time * 1000).toISOString().slice(0, 16).replace('T', ' '))}</td>
<td>${kernelLink(attempt.kernel, links.get(attempt.kernel))}</td>
<td><code>${escapeHtml(attempt.technique)}</code></td>
<td>${state}</td>
<td><span class="outcome ${escapeHtml(attempt.outcome)}">${escapeHtml(attempt.outcome.replace('_', ' '))}</span>${detail}</td>
<td class="num">${factor(attempt.predicted_speedup)}</td>
<td class="num">${measured}</td>
</tr>`;
}

function candidateBlock(candidate: CandidateDiff): string {
  const speedup = candidate.speedup === null ? '' : ` · ${factor(candidate.speedup)} faster`;
  const techniques = candidate.techniques.length === 0 ? '' : ` · ${candidate.techniques.map(escapeHtml).join(' → ')}`;
  const diff =
    candidate.diff === ''
      ? '<p class="empty">Applied: the source is this candidate.</p>'
      : `<pre class="diff">${candidate.diff
          .split('\n')
          .map((line) => `<span class="${diffClass(line)}">${escapeHtml(line)}</span>`)
          .join('\n')}</pre>${candidate.truncated ? '<p class="detail">(diff cut short: open it for the rest)</p>' : ''}`;
  return `<div class="candidate">
<p><strong>${escapeHtml(candidate.kernel)}</strong>${speedup}${techniques} · <a href="#" class="open-diff" data-source="${escapeHtml(candidate.source_uri)}" data-candidate="${escapeHtml(candidate.candidate_uri)}" data-kernel="${escapeHtml(candidate.kernel)}">Open diff</a></p>
${diff}
</div>`;
}

function diffClass(line: string): string {
  if (line.startsWith('+++') || line.startsWith('---')) {
    return 'file';
  }
  return line.startsWith('+') ? 'added' : line.startsWith('-') ? 'removed' : line.startsWith('@@') ? 'hunk' : 'context';
}

function kernelLink(name: string, link: KernelLink | undefined): string {
  if (link === undefined) {
    return `<code>${escapeHtml(name)}</code>`;
  }
  return `<a href="#" class="kernel" data-uri="${escapeHtml(link.uri)}" data-line="${String(link.line)}"><code>${escapeHtml(name)}</code></a>`;
}

function option(value: string, label: string): string {
  return `<option value="${escapeHtml(value)}">${escapeHtml(label)}</option>`;
}

function unique(values: readonly string[]): string[] {
  return [...new Set(values)].sort();
}

function plural(count: number): string {
  return count === 1 ? '' : 's';
}

const STYLE = `
body { font-family: var(--vscode-font-family); font-size: var(--vscode-font-size); color: var(--vscode-foreground); padding: 0 16px 24px; }
h1 { font-size: 1.4em; margin-bottom: 4px; }
h2 { font-size: 1.15em; margin-top: 24px; border-bottom: 1px solid var(--vscode-panel-border); padding-bottom: 4px; }
h3 { font-size: 1em; margin: 16px 0 6px; }
.summary, .detail, .empty { color: var(--vscode-descriptionForeground); }
.detail { font-size: 0.9em; }
.filters { display: flex; gap: 16px; align-items: center; margin: 8px 0; }
select, button { font: inherit; color: var(--vscode-dropdown-foreground); background: var(--vscode-dropdown-background); border: 1px solid var(--vscode-dropdown-border); padding: 2px 4px; }
button { color: var(--vscode-button-foreground); background: var(--vscode-button-background); border: none; padding: 3px 10px; cursor: pointer; }
table { border-collapse: collapse; width: 100%; margin-bottom: 8px; }
th, td { text-align: left; vertical-align: top; padding: 4px 8px; border-bottom: 1px solid var(--vscode-panel-border); }
th { font-weight: 600; color: var(--vscode-descriptionForeground); }
.num { text-align: right; white-space: nowrap; }
td.notes ul { margin: 0; padding-left: 16px; }
a { color: var(--vscode-textLink-foreground); text-decoration: none; }
a:hover { text-decoration: underline; }
.plot-legend { color: var(--vscode-descriptionForeground); font-size: 0.9em; line-height: 1.6; }
.plot-legend .key { vertical-align: middle; margin-left: 8px; }
.plot .axis, .plot .tick { stroke: var(--vscode-descriptionForeground); stroke-width: 1; }
.plot .tick-label { fill: var(--vscode-descriptionForeground); font-size: 9px; }
.plot .unity, .key .unity { stroke: var(--vscode-descriptionForeground); stroke-dasharray: 2 2; }
.plot .predicted, .key .predicted { fill: var(--vscode-charts-blue); opacity: 0.8; }
.plot .dot.faster, .key .dot.faster { fill: var(--vscode-charts-green); }
.plot .dot.slower, .key .dot.slower { fill: var(--vscode-charts-orange); }
.badge { font-size: 0.85em; padding: 0 6px; border-radius: 8px; border: 1px solid var(--vscode-charts-purple); color: var(--vscode-charts-purple); white-space: nowrap; }
.badge.promoted { border-color: var(--vscode-charts-green); color: var(--vscode-charts-green); }
.badge.retired { border-color: var(--vscode-descriptionForeground); color: var(--vscode-descriptionForeground); }
.outcome.success { color: var(--vscode-charts-green); }
.outcome.regression { color: var(--vscode-charts-orange); }
.outcome.compile_error, .outcome.wrong_result, .outcome.rejected, .outcome.crash, .outcome.timeout, .outcome.error { color: var(--vscode-charts-red); }
.outcome.infrastructure { color: var(--vscode-descriptionForeground); font-style: italic; }
pre.diff { font-family: var(--vscode-editor-font-family); font-size: 0.9em; background: var(--vscode-textCodeBlock-background); padding: 8px; overflow-x: auto; max-height: 360px; }
pre.diff .added { color: var(--vscode-charts-green); }
pre.diff .removed { color: var(--vscode-charts-red); }
pre.diff .hunk, pre.diff .file { color: var(--vscode-descriptionForeground); }
[hidden] { display: none !important; }
`;

// Filters hide the rows (and groups) that don't match; links ask the extension to open things.
const SCRIPT = `
const vscode = acquireVsCodeApi();
const stateFilter = document.getElementById('state-filter');
const techniqueFilter = document.getElementById('technique-filter');
function applyFilters() {
  const state = stateFilter.value, technique = techniqueFilter.value;
  for (const row of document.querySelectorAll('tr.record, tr.attempt, tr.proposal')) {
    row.hidden = (state !== '' && row.dataset.state !== state) || (technique !== '' && row.dataset.technique !== technique);
  }
  for (const group of document.querySelectorAll('.group')) {
    group.hidden = group.querySelectorAll('tr.record:not([hidden])').length === 0;
  }
}
stateFilter.addEventListener('change', applyFilters);
techniqueFilter.addEventListener('change', applyFilters);
document.getElementById('refresh').addEventListener('click', () => vscode.postMessage({ type: 'refresh' }));
document.addEventListener('click', (event) => {
  const link = event.target.closest('a.kernel, a.open-diff');
  if (link === null) return;
  event.preventDefault();
  if (link.classList.contains('kernel')) {
    vscode.postMessage({ type: 'openKernel', uri: link.dataset.uri, line: Number(link.dataset.line) });
  } else {
    vscode.postMessage({ type: 'openDiff', source: link.dataset.source, candidate: link.dataset.candidate, kernel: link.dataset.kernel });
  }
});
`;

/** A message from the page, checked; undefined for anything else. */
export function parseViewMessage(message: unknown): ViewMessage | undefined {
  if (typeof message !== 'object' || message === null) {
    return undefined;
  }
  const m = message as Record<string, unknown>;
  if (m.type === 'refresh') {
    return { type: 'refresh' };
  }
  if (m.type === 'openKernel' && typeof m.uri === 'string' && typeof m.line === 'number' && Number.isInteger(m.line)) {
    return { type: 'openKernel', uri: m.uri, line: m.line };
  }
  if (m.type === 'openDiff' && typeof m.source === 'string' && typeof m.candidate === 'string' && typeof m.kernel === 'string') {
    return { type: 'openDiff', source: m.source, candidate: m.candidate, kernel: m.kernel };
  }
  return undefined;
}
