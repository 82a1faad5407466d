// Markdown → safe HTML. marked renders (GFM: tables, fenced code, lists); DOMPurify removes
// anything that could run (scripts, event attributes, javascript: links) from what marked lets
// through, since marked passes raw HTML in the text on by design. The page's CSP forbids inline
// scripts other than its own besides.
import DOMPurify from "dompurify";
import { marked } from "marked";

marked.setOptions({ gfm: true, breaks: true });

export function renderMarkdown(text: string): string {
  return DOMPurify.sanitize(marked.parse(text, { async: false }) as string);
}
