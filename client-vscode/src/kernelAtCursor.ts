// Which `__global__` kernel "Optimize kernel at cursor" means. Pure: works on the document's
// text and the server's diagnostics, so it is unit-tested without VS Code.

export interface Position {
  readonly line: number;
  readonly character: number;
}

export interface KernelDefinition {
  readonly name: string;
  /** Line of the `__global__` keyword. */
  readonly startLine: number;
  /** Line of the kernel's name (a declaration can span lines). */
  readonly nameLine: number;
  /** Line of the closing brace of the body. */
  readonly endLine: number;
}

/** The parts of a VS Code or LSP diagnostic this logic reads. */
export interface DiagnosticLike {
  readonly code?: string | number | { readonly value: string | number };
  readonly source?: string;
  readonly message?: string;
  readonly range: { readonly start: Position; readonly end: Position };
  readonly data?: unknown;
}

export type KernelChoice =
  | { readonly kind: 'found'; readonly kernel: string }
  | { readonly kind: 'choose'; readonly candidates: readonly string[] }
  | { readonly kind: 'none' };

/**
 * In order: the kernel whose definition contains the cursor; the kernel of the server's `state`
 * diagnostic that contains, else most closely precedes, the cursor (covers kernels the scan
 * can't see, e.g. made by macros); the nearest kernel defined above the cursor; the file's only
 * kernel. With the cursor above several kernels, the user chooses.
 */
export function kernelAtCursor(
  text: string,
  cursor: Position,
  diagnostics: readonly DiagnosticLike[],
): KernelChoice {
  const kernels = findKernels(text);
  const enclosing = kernels.find((k) => k.startLine <= cursor.line && cursor.line <= k.endLine);
  if (enclosing !== undefined) {
    return { kind: 'found', kernel: enclosing.name };
  }

  const states = diagnostics
    .filter((d) => codeOf(d) === 'state' && (d.source === undefined || d.source === 'kernelblaster'))
    .sort((a, b) => comparePositions(a.range.start, b.range.start));
  const containing = states.find(
    (d) => comparePositions(d.range.start, cursor) <= 0 && comparePositions(cursor, d.range.end) <= 0,
  );
  const preceding = states.filter((d) => comparePositions(d.range.start, cursor) <= 0).pop();
  for (const diagnostic of [containing, preceding]) {
    const name = diagnostic === undefined ? undefined : kernelOfDiagnostic(diagnostic, kernels);
    if (name !== undefined) {
      return { kind: 'found', kernel: name };
    }
  }

  const above = kernels.filter((k) => k.endLine < cursor.line).pop();
  if (above !== undefined) {
    return { kind: 'found', kernel: above.name };
  }
  const names = [...new Set(kernels.map((k) => k.name))];
  if (names.length === 1) {
    return { kind: 'found', kernel: names[0] };
  }
  return names.length === 0 ? { kind: 'none' } : { kind: 'choose', candidates: names };
}

function codeOf(diagnostic: DiagnosticLike): string | number | undefined {
  const code = diagnostic.code;
  return typeof code === 'object' ? code.value : code;
}

/** The server may name the kernel in `data.kernel`; otherwise it is the kernel defined at the
 * diagnostic's line, or the `name:` the state message starts with. */
function kernelOfDiagnostic(
  diagnostic: DiagnosticLike,
  kernels: readonly KernelDefinition[],
): string | undefined {
  const data = diagnostic.data;
  if (typeof data === 'object' && data !== null && 'kernel' in data && typeof data.kernel === 'string') {
    return data.kernel;
  }
  const line = diagnostic.range.start.line;
  const defined = kernels.find((k) => k.startLine <= line && line <= k.endLine);
  if (defined !== undefined) {
    return defined.name;
  }
  return /^([A-Za-z_]\w*):/.exec(diagnostic.message ?? '')?.[1];
}

function comparePositions(a: Position, b: Position): number {
  return a.line !== b.line ? a.line - b.line : a.character - b.character;
}

/** Kernels defined (with a body) in CUDA source; prototypes are skipped. */
export function findKernels(text: string): KernelDefinition[] {
  const code = maskNonCode(text);
  const lineOf = lineIndex(text);
  const kernels: KernelDefinition[] = [];
  for (const match of code.matchAll(/\b__global__\b/g)) {
    const start = match.index;
    const declaration = parseDeclaration(code, start + match[0].length);
    if (declaration !== undefined) {
      kernels.push({
        name: declaration.name,
        startLine: lineOf(start),
        nameLine: lineOf(declaration.nameOffset),
        endLine: lineOf(declaration.bodyEnd),
      });
    }
  }
  return kernels;
}

const ATTRIBUTE_WORDS = new Set(['__launch_bounds__', '__attribute__', '__declspec', 'alignas']);

/** From just after `__global__`: the function name (the identifier before the parameter list,
 * skipping attributes like `__launch_bounds__(256)`) and the end of the body. */
function parseDeclaration(
  code: string,
  from: number,
): { name: string; nameOffset: number; bodyEnd: number } | undefined {
  let index = from;
  let lastIdentifier: { name: string; offset: number } | undefined;
  while (index < code.length) {
    const char = code[index];
    if (/\s/.test(char) || char === '*' || char === '&' || char === ':') {
      index += 1;
    } else if (/[A-Za-z_]/.test(char)) {
      const word = /^[A-Za-z_]\w*/.exec(code.slice(index, index + 256))?.[0] ?? char;
      if (ATTRIBUTE_WORDS.has(word)) {
        const open = skipWhitespace(code, index + word.length);
        index = code[open] === '(' ? matching(code, open, '(', ')') + 1 : open;
      } else {
        lastIdentifier = { name: word, offset: index };
        index += word.length;
      }
    } else if (char === '<') {
      index = matching(code, index, '<', '>') + 1;
    } else if (char === '(') {
      if (lastIdentifier === undefined) {
        return undefined;
      }
      const afterParameters = skipWhitespace(code, matching(code, index, '(', ')') + 1);
      if (code[afterParameters] !== '{') {
        return undefined;
      }
      const bodyEnd = matching(code, afterParameters, '{', '}');
      return { name: lastIdentifier.name, nameOffset: lastIdentifier.offset, bodyEnd };
    } else {
      return undefined;
    }
  }
  return undefined;
}

function skipWhitespace(code: string, from: number): number {
  let index = from;
  while (index < code.length && /\s/.test(code[index])) {
    index += 1;
  }
  return index;
}

/** Index of the bracket closing the one at `open` (the last index when unbalanced). */
function matching(code: string, open: number, opener: string, closer: string): number {
  let depth = 0;
  for (let index = open; index < code.length; index += 1) {
    if (code[index] === opener) {
      depth += 1;
    } else if (code[index] === closer) {
      depth -= 1;
      if (depth === 0) {
        return index;
      }
    }
  }
  return code.length - 1;
}

/** The text with comments, string and character literals and preprocessor lines blanked out
 * (newlines kept), so offsets and lines still match the original. */
export function maskNonCode(text: string): string {
  const out = text.split('');
  const blank = (from: number, to: number): void => {
    for (let index = from; index < to; index += 1) {
      if (out[index] !== '\n') {
        out[index] = ' ';
      }
    }
  };
  let index = 0;
  let atLineStart = true;
  while (index < text.length) {
    const char = text[index];
    const next = text[index + 1];
    let end = index;
    if (char === '/' && next === '/') {
      end = endOfLine(text, index, false);
    } else if (char === '/' && next === '*') {
      const close = text.indexOf('*/', index + 2);
      end = close === -1 ? text.length : close + 2;
    } else if (char === '"' || char === "'") {
      end = endOfLiteral(text, index);
    } else if (char === '#' && atLineStart) {
      end = endOfLine(text, index, true);
    }
    if (end > index) {
      blank(index, end);
      index = end;
      continue;
    }
    if (char === '\n') {
      atLineStart = true;
    } else if (!/\s/.test(char)) {
      atLineStart = false;
    }
    index += 1;
  }
  return out.join('');
}

function endOfLine(text: string, from: number, honourContinuations: boolean): number {
  let index = from;
  while (index < text.length) {
    if (text[index] === '\n' && !(honourContinuations && text[index - 1] === '\\')) {
      return index;
    }
    index += 1;
  }
  return index;
}

function endOfLiteral(text: string, from: number): number {
  const quote = text[from];
  let index = from + 1;
  while (index < text.length && text[index] !== quote && text[index] !== '\n') {
    index += text[index] === '\\' ? 2 : 1;
  }
  return Math.min(index + 1, text.length);
}

function lineIndex(text: string): (offset: number) => number {
  const starts = [0];
  for (let index = 0; index < text.length; index += 1) {
    if (text[index] === '\n') {
      starts.push(index + 1);
    }
  }
  return (offset) => {
    let low = 0;
    let high = starts.length - 1;
    while (low < high) {
      const middle = Math.ceil((low + high) / 2);
      if (starts[middle] <= offset) {
        low = middle;
      } else {
        high = middle - 1;
      }
    }
    return low;
  };
}
