// "Open in Nsight Compute": the extension host starts Nsight Compute's UI on the report the
// server kept, when `ncu-ui` is on PATH; otherwise it says where the report is and how to get
// the UI. The extension host, not the server, starts it: it runs where the user's session is
// (a desktop, or the remote machine the files are on), and the UI is the user's own program.
// Only a path the server answered and that ends in .ncu-rep is passed, as one argument, with no
// shell: nothing in it can become a command.

import { spawn } from 'node:child_process';

import * as vscode from 'vscode';

import { findExecutable } from './probes';

export const NCU_UI = 'ncu-ui';
export const NSIGHT_COMPUTE_URL = 'https://developer.nvidia.com/nsight-compute';

export interface NsightComputeDeps {
  readonly findExecutable: (name: string) => Promise<string | undefined>;
  readonly launch: (program: string, report: string) => Promise<void>;
}

export const REAL_DEPS: NsightComputeDeps = {
  findExecutable: (name) => findExecutable(name),
  launch: (program, report) =>
    new Promise((resolve, reject) => {
      const child = spawn(program, [report], { detached: true, stdio: 'ignore', shell: false });
      child.once('error', reject);
      child.once('spawn', () => {
        child.unref();
        resolve();
      });
    }),
};

/** What happened, for the caller's log and the tests. */
export type NsightComputeOutcome = { kind: 'opened'; program: string } | { kind: 'explained'; message: string };

export async function openReport(
  report: { path: string | null; message: string },
  deps: NsightComputeDeps,
): Promise<NsightComputeOutcome> {
  if (!report.path?.endsWith('.ncu-rep')) {
    void vscode.window.showInformationMessage(`KernelBlaster: ${report.message}`);
    return { kind: 'explained', message: report.message };
  }
  const program = await deps.findExecutable(NCU_UI);
  if (program !== undefined) {
    try {
      await deps.launch(program, report.path);
      return { kind: 'opened', program };
    } catch (error) {
      const why = error instanceof Error ? error.message : String(error);
      return explain(report.path, `${program} could not be started (${why}).`);
    }
  }
  return explain(report.path, `Nsight Compute's UI (${NCU_UI}) is not on PATH.`);
}

async function explain(path: string, why: string): Promise<NsightComputeOutcome> {
  const message = `${why} The report is ${path}: open it in Nsight Compute (File > Open), or put ${NCU_UI} on PATH; the UI comes with the CUDA toolkit and from ${NSIGHT_COMPUTE_URL}.`;
  const choice = await vscode.window.showInformationMessage(`KernelBlaster: ${message}`, 'Copy Path', 'Get Nsight Compute');
  if (choice === 'Copy Path') {
    await vscode.env.clipboard.writeText(path);
  } else if (choice === 'Get Nsight Compute') {
    await vscode.env.openExternal(vscode.Uri.parse(NSIGHT_COMPUTE_URL));
  }
  return { kind: 'explained', message };
}
