// Text into HTML: everything the knowledge-base view shows from the KB (titles, notes written by
// an LLM, kernel names, diffs) goes through here, so none of it can become markup or script.

const ESCAPES: Record<string, string> = {
  '&': '&amp;',
  '<': '&lt;',
  '>': '&gt;',
  '"': '&quot;',
  "'": '&#39;',
};

export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (char) => ESCAPES[char]);
}
