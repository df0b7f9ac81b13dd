// A tiny element builder: h('td', { class: 'num' }, '132').

type Child = Node | string | null | undefined | false;

export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Record<string, string | boolean | undefined> = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === true) el.setAttribute(name, '');
    else if (typeof value === 'string') el.setAttribute(name, value);
  }
  for (const c of children) {
    if (c) el.append(c);
  }
  return el;
}

export function $<T extends Element = HTMLElement>(selector: string, root: ParentNode = document): T {
  const el = root.querySelector<T>(selector);
  if (!el) throw new Error(`no element ${selector}`);
  return el;
}

/**
 * Marks dialog as showing something new and returns a check that it still
 * does: a slow answer for something the reader has since left for another
 * (a document, an event) must not overwrite the other's dialog.
 */
export function claimDialog(dialog: HTMLDialogElement): () => boolean {
  const mine = String(Number(dialog.dataset.opened ?? '0') + 1);
  dialog.dataset.opened = mine;
  return () => dialog.dataset.opened === mine;
}
