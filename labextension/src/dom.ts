/** A small element builder for the views (no framework). */

export type Child = Node | string | null | undefined | false;

export interface Props {
  class?: string;
  /** Attributes (ARIA, data-*, href …); `undefined` values are left out. */
  attrs?: Record<string, string | undefined>;
  /** Event listeners by event name. */
  on?: Record<string, (event: Event) => void>;
}

export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  props: Props = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  if (props.class) {
    node.className = props.class;
  }
  for (const [name, value] of Object.entries(props.attrs ?? {})) {
    if (value !== undefined) {
      node.setAttribute(name, value);
    }
  }
  for (const [name, listener] of Object.entries(props.on ?? {})) {
    node.addEventListener(name, listener);
  }
  for (const child of children) {
    if (child !== null && child !== undefined && child !== false) {
      node.append(child);
    }
  }
  return node;
}

/** A button with a visible label, an accessible name and a stable focus key. */
export function button(
  text: string,
  ariaLabel: string,
  focusKey: string,
  onClick: () => void,
  extraClass = ''
): HTMLButtonElement {
  return h(
    'button',
    {
      class: `bai-Button ${extraClass}`.trim(),
      attrs: {
        type: 'button',
        'aria-label': ariaLabel,
        title: ariaLabel,
        'data-focus-key': focusKey
      },
      on: { click: () => onClick() }
    },
    text
  );
}

/** A labelled region of a view: its heading (`bai-heading-<key>`) and its content. */
export function section(title: string, key: string, ...content: Child[]): HTMLElement {
  const headingId = `bai-heading-${key}`;
  return h(
    'section',
    { class: 'bai-Section', attrs: { 'aria-labelledby': headingId } },
    h('h3', { class: 'bai-Section-title', attrs: { id: headingId } }, title),
    ...content
  );
}

/**
 * Replace `host`'s children with `render()`'s, keeping keyboard focus (by
 * `data-focus-key`) and the scroll position, so a redraw never loses the user's place.
 */
export function redraw(host: HTMLElement, scroller: HTMLElement, render: () => Node[]): void {
  const active = document.activeElement as HTMLElement | null;
  const key = active && host.contains(active) ? active.dataset.focusKey : undefined;
  const top = scroller.scrollTop;
  host.replaceChildren(...render());
  scroller.scrollTop = top;
  if (key) {
    host.querySelector<HTMLElement>(`[data-focus-key="${CSS.escape(key)}"]`)?.focus();
  }
}
