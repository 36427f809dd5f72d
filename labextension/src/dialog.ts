/**
 * The "New session" dialog: every field of a session request, checked by the
 * server as the user types (`POST sessions?dry_run=true`), the server's own
 * message shown next to the field it is about. "Create" stays disabled while the
 * request is invalid. Also the pieces every dialog of the extension shares: a
 * form's labelled rows with their messages, an accept button that waits for a
 * valid form, and "ask first, then act".
 */
import { Dialog, showDialog } from '@jupyterlab/apputils';
import { Widget } from '@lumino/widgets';

import { ApiError, BaiClient, errorText } from './api';
import { h } from './dom';
import {
  buildRequest,
  EMPTY_FORM,
  formField,
  FormField,
  FormValues,
  messageText,
  slotInput,
  without
} from './form';
import { namedIds } from './text';
import { SessionJSON, SessionRequest, TemplateJSON } from './types';

const CHECK_DELAY_MS = 250;
/** Dry runs per check at most: each finds one more error. */
const MAX_CHECKS = 6;
/**
 * Where "Open notebook" makes the notebook of a session the dialog created (the file
 * browser's root): the create asks the server to start the session's kernels in that
 * folder (`meta.notebook_folder`), as a bai kernelspec's notebook starts in its own.
 */
export const NOTEBOOK_FOLDER = '';

type Input = HTMLInputElement | HTMLSelectElement | HTMLTextAreaElement;

/**
 * A form's row: its label (bound to the control, or naming the group of controls)
 * and under the control the message about it, announced and linked to the
 * control with `aria-describedby` (`bai-msg-<field>`).
 */
export function formRow(
  field: string,
  text: string,
  control: HTMLElement
): { row: HTMLElement; message: HTMLElement } {
  const message = h('div', {
    class: 'bai-Form-error',
    attrs: { id: `bai-msg-${field}`, 'aria-live': 'polite', 'data-field': field }
  });
  const first = control.matches('input, select, textarea') ? control : null;
  const row = h(
    'div',
    { class: 'bai-Form-row', attrs: { 'data-row': field } },
    first
      ? h('label', { attrs: { for: first.id } }, text)
      : h('span', { class: 'bai-Form-label' }, text),
    h(
      'div',
      {
        class: 'bai-Form-control',
        attrs: { role: first ? undefined : 'group', 'aria-label': first ? undefined : text }
      },
      control,
      message
    )
  );
  row
    .querySelectorAll('input, select, textarea')
    .forEach(el => el.setAttribute('aria-describedby', message.id));
  return { row, message };
}

/**
 * Show (or clear, with '') the message of a row; the controls at fault (`faulty`: ids;
 * default every control of the row) are marked invalid meanwhile, and only they.
 */
export function showMessage(
  node: HTMLElement,
  row: HTMLElement | undefined,
  text: string,
  faulty?: ReadonlySet<string>
): void {
  node.textContent = text;
  row?.classList.toggle('bai-mod-invalid', Boolean(text));
  row?.querySelectorAll('input, select, textarea').forEach(el => {
    const bad = Boolean(text) && (!faulty?.size || faulty.has(el.id));
    return bad ? el.setAttribute('aria-invalid', 'true') : el.removeAttribute('aria-invalid');
  });
}

/**
 * Enable a dialog's accept button only for a valid form: JupyterLab's dialog
 * disables its accept button (and Enter) while its body holds an element marked
 * `jp-mod-error`, re-read on each input event. `marker` is a hidden element of `body`.
 * The event goes out in a microtask: a dialog being opened listens only once it is
 * attached itself, which is after its body.
 */
export function allowAccept(body: HTMLElement, marker: HTMLElement, valid: boolean): void {
  marker.classList.toggle('jp-mod-error', !valid);
  queueMicrotask(() => body.dispatchEvent(new Event('input', { bubbles: true })));
}

/**
 * What went wrong, for a dialog's body: the server's message with sessions by name or
 * short id (`names`: id → name), wrapped to the dialog's width.
 */
export function errorBody(error: unknown, names?: ReadonlyMap<string, string>): Widget {
  return new Widget({
    node: h('div', { class: 'bai-DialogError' }, namedIds(errorText(error), names))
  });
}

/**
 * Ask first (`verb` on a warning button, `keep` on the one that does nothing), then act;
 * a failure is shown in a dialog (sessions in it by name: `names`, id → name).
 */
export async function confirmThen(
  title: string,
  body: string,
  verb: string,
  act: () => Promise<unknown>,
  keep = 'Cancel',
  names?: ReadonlyMap<string, string>
): Promise<void> {
  const answer = await showDialog({
    title,
    body,
    buttons: [Dialog.cancelButton({ label: keep }), Dialog.warnButton({ label: verb })]
  });
  if (!answer.button.accept) {
    return;
  }
  try {
    await act();
  } catch (error) {
    await showDialog({
      title: `${verb} failed`,
      body: errorBody(error, names),
      buttons: [Dialog.okButton()]
    });
  }
}

class SessionForm extends Widget {
  private readonly inputs = new Map<keyof FormValues, Input>();
  private readonly messages = new Map<FormField, HTMLElement>();
  private readonly rows = new Map<FormField, HTMLElement>();
  private readonly marker = h('span', { attrs: { hidden: '' } });
  private timer: ReturnType<typeof setTimeout> | null = null;
  private checks = 0;
  /** The request as last checked, and whether the server accepted it. */
  valid = false;

  constructor(
    private readonly client: BaiClient,
    templates: TemplateJSON[],
    sessions: SessionJSON[]
  ) {
    super();
    this.addClass('bai-Form');
    const form = h('form', { attrs: { 'aria-label': 'New bai session' } });
    form.addEventListener('submit', event => event.preventDefault());
    const select = (key: keyof FormValues, options: [string, string][]) =>
      this.input(
        key,
        h('select', {}, ...options.map(([value, text]) => h('option', { attrs: { value } }, text)))
      );
    const text = (key: keyof FormValues, placeholder: string, type = 'text') =>
      this.input(key, h('input', { attrs: { type, placeholder } }));
    form.append(
      this.row(
        'template',
        'Template',
        select('template', [
          ['', '(none)'],
          ...templates.map(
            t =>
              [t.name, t.description ? `${t.name} — ${t.description}` : t.name] as [string, string]
          )
        ])
      ),
      this.row('name', 'Name', text('name', 'optional, unique among your live sessions')),
      this.row('image', 'Image', text('image', 'the server’s default image')),
      this.row(
        'type',
        'Type',
        select('type', [
          ['interactive', 'interactive (a notebook, service ports)'],
          ['batch', 'batch (runs a command, then ends)'],
          ['system', 'system (SFTP to your data folders, one kernel)']
        ])
      ),
      this.row('cluster_size', 'Cluster size', text('cluster_size', '1', 'number')),
      this.row(
        'cluster_mode',
        'Cluster mode',
        select('cluster_mode', [
          ['single-node', 'single-node (all kernels on one agent)'],
          ['multi-node', 'multi-node (kernels may spread)']
        ])
      ),
      this.row(
        'resources',
        'Resources per kernel',
        h(
          'div',
          { class: 'bai-Form-slots' },
          h('label', {}, 'CPU ', text('cpu', 'default')),
          h('label', {}, 'Memory ', text('mem', 'e.g. 2g')),
          h('label', {}, 'GPUs ', text('gpu', '0'))
        )
      ),
      this.row('mounts', 'Data folders', text('mounts', 'comma-separated, e.g. data, models')),
      this.row(
        'env',
        'Environment',
        this.input(
          'env',
          h('textarea', { attrs: { rows: '2', placeholder: 'NAME=value, one a line' } })
        )
      ),
      this.row(
        'startup_command',
        'Startup command',
        text('startup_command', 'e.g. python train.py')
      ),
      this.row('batch_timeout', 'Batch timeout (s)', text('batch_timeout', 'none', 'number')),
      this.row(
        'depends_on',
        'Depends on',
        text('depends_on', 'session names or ids, comma-separated')
      ),
      this.row('priority', 'Priority', text('priority', '10 (higher starts first)', 'number')),
      h('p', { class: 'bai-Form-message', attrs: { 'aria-live': 'polite', 'data-field': 'form' } })
    );
    this.messages.set('form', form.lastElementChild as HTMLElement);
    const names = sessions.map(s => s.name).filter(Boolean) as string[];
    const list = h(
      'datalist',
      { attrs: { id: 'bai-session-names' } },
      ...names.map(n => h('option', { attrs: { value: n } }))
    );
    this.inputs.get('depends_on')!.setAttribute('list', list.id);
    form.append(list);
    this.node.append(form, this.marker);
    this.set(EMPTY_FORM);
    this.showBatchFields();
    this.scheduleCheck();
  }

  values(): FormValues {
    const values = { ...EMPTY_FORM };
    for (const [key, input] of this.inputs) {
      values[key] = input.value;
    }
    return values;
  }

  private set(values: FormValues): void {
    for (const [key, input] of this.inputs) {
      input.value = values[key];
    }
  }

  request(): SessionRequest {
    return buildRequest(this.values()).request;
  }

  private input<T extends Input>(key: keyof FormValues, element: T): T {
    element.classList.add('bai-Input');
    element.name = key;
    element.id = `bai-field-${key}`;
    element.addEventListener('input', () => {
      this.showBatchFields();
      this.scheduleCheck();
    });
    this.inputs.set(key, element);
    return element;
  }

  private row(field: FormField, text: string, control: HTMLElement): HTMLElement {
    const { row, message } = formRow(field, text, control);
    this.messages.set(field, message);
    this.rows.set(field, row);
    return row;
  }

  private showBatchFields(): void {
    const type = this.inputs.get('type')!.value;
    const batch = type === 'batch';
    this.rows.get('startup_command')!.hidden = !batch;
    this.rows.get('batch_timeout')!.hidden = !batch;
    // A system session is one kernel serving SFTP: no cluster to shape.
    this.rows.get('cluster_size')!.hidden = type === 'system';
    this.rows.get('cluster_mode')!.hidden = type === 'system';
  }

  private scheduleCheck(): void {
    this.valid = false;
    this.setAccept();
    if (this.timer !== null) {
      clearTimeout(this.timer);
    }
    this.timer = setTimeout(() => void this.check(), CHECK_DELAY_MS);
  }

  /**
   * Ask the server (dry run) and show what it says, next to the field it is about;
   * every error at once: each dry run leaves out what the last one was about, until
   * the server accepts the rest (a few runs at most).
   */
  private async check(): Promise<void> {
    const mine = ++this.checks;
    const { request, problems } = buildRequest(this.values());
    const found = new Map<FormField, string[]>();
    const faulty = new Map<FormField, Set<string>>();
    for (const [field, text] of Object.entries(problems) as [FormField, string][]) {
      found.set(field, [text]);
    }
    let next: SessionRequest | null = request;
    for (let run = 0; next && run < MAX_CHECKS; run++) {
      try {
        await this.client.create(next, true);
        next = null;
      } catch (error) {
        const message = error instanceof Error ? error.message : String(error);
        const named = error instanceof ApiError ? error.field : null;
        const about = formField(named);
        // A field the form has no row for (say, a template's resource_group): say it at the end.
        const field = this.messages.has(about) ? about : 'form';
        const text = field === 'form' ? message : messageText(message, named);
        if (found.get(field)?.includes(text)) {
          break; // taking the field out did not help (say, a required one)
        }
        found.set(field, [...(found.get(field) ?? []), text]);
        const input = slotInput(named);
        if (input) {
          faulty.set(field, (faulty.get(field) ?? new Set()).add(`bai-field-${input}`));
        }
        next = field === 'form' ? null : without(next!, named);
      }
    }
    if (mine !== this.checks || this.isDisposed) {
      return; // the user typed again meanwhile
    }
    for (const [field, node] of this.messages) {
      const texts = found.get(field) ?? [];
      showMessage(node, this.rows.get(field), texts.join('\n'), faulty.get(field));
    }
    this.valid = found.size === 0;
    this.setAccept();
  }

  private setAccept(): void {
    allowAccept(this.node, this.marker, this.valid);
  }

  protected onAfterAttach(): void {
    this.setAccept();
    this.inputs.get('name')?.focus();
  }
}

/**
 * Show the dialog; create the session when the user accepts. Returns the new
 * session, or null when the user cancelled.
 */
export async function newSessionDialog(
  client: BaiClient,
  sessions: SessionJSON[]
): Promise<SessionJSON | null> {
  const templates = await client.templates().catch(() => [] as TemplateJSON[]);
  const form = new SessionForm(client, templates, sessions);
  const answer = await showDialog({
    title: 'New bai session',
    body: form,
    focusNodeSelector: '#bai-field-name',
    buttons: [
      Dialog.cancelButton(),
      Dialog.okButton({ label: 'Create', ariaLabel: 'Create the session' })
    ]
  });
  if (!answer.button.accept) {
    return null;
  }
  const request = form.request();
  try {
    return await client.create(
      request.type === 'interactive'
        ? { ...request, meta: { notebook_folder: NOTEBOOK_FOLDER } }
        : request
    );
  } catch (error) {
    await showDialog({
      title: 'The session was not created',
      body: errorBody(
        error,
        new Map(sessions.filter(s => s.name).map(s => [s.id, s.name!] as [string, string]))
      ),
      buttons: [Dialog.okButton()]
    });
    return null;
  }
}

/**
 * The session as it is once the scheduler's first pass has looked at it (a few
 * seconds at most): still PENDING with the reason it waits, or on its way.
 */
export async function afterFirstPass(
  client: BaiClient,
  session: SessionJSON,
  timeoutMs = 5000
): Promise<SessionJSON> {
  const deadline = Date.now() + timeoutMs;
  let now = session;
  while (now.status === 'PENDING' && !now.pending_reason && Date.now() < deadline) {
    await new Promise(resolve => setTimeout(resolve, 250));
    now = await client.session(session.id).catch(() => now);
  }
  return now;
}
