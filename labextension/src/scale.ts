/**
 * The "Scale endpoint" dialog: its minimum and maximum replicas, checked as the
 * user types (whole numbers, at least 1, the maximum not under the minimum), sent
 * as `PATCH endpoints/<name>` `{"scaling": {...}}`. When the server refuses, the
 * dialog comes back with the values typed and the server's message next to the
 * field it is about.
 */
import { Dialog, showDialog } from '@jupyterlab/apputils';
import { Widget } from '@lumino/widgets';

import { ApiError } from './api';
import { allowAccept, errorBody, formRow, showMessage } from './dialog';
import { h } from './dom';
import {
  buildScaling,
  EndpointJSON,
  replicasText,
  ScaleField,
  scaleRefusal,
  targetText
} from './endpoints';
import { LiveState } from './live';

interface ScaleValues {
  min: string;
  max: string;
}

class ScaleForm extends Widget {
  private readonly min: HTMLInputElement;
  private readonly max: HTMLInputElement;
  private readonly messages = new Map<ScaleField, HTMLElement>();
  private readonly rows = new Map<ScaleField, HTMLElement>();
  private readonly marker = h('span', { attrs: { hidden: '' } });

  constructor(
    endpoint: EndpointJSON,
    values: ScaleValues,
    /** The server's refusal of these values, shown until the user changes them. */
    private refusal: { field: ScaleField; text: string } | null
  ) {
    super();
    this.addClass('bai-Form');
    this.addClass('bai-ScaleForm');
    const input = (field: ScaleField, value: string) =>
      h('input', {
        class: 'bai-Input',
        attrs: {
          type: 'number',
          min: '1',
          step: '1',
          value,
          id: `bai-field-${field}`,
          name: field
        },
        on: {
          input: () => {
            this.refusal = null;
            this.check();
          }
        }
      });
    this.min = input('min_replicas', values.min);
    this.max = input('max_replicas', values.max);
    const form = h(
      'form',
      { attrs: { 'aria-label': `Scale endpoint ${endpoint.name}` } },
      h(
        'p',
        { class: 'bai-Form-intro', attrs: { 'data-role': 'now' } },
        h('strong', {}, 'Now: '),
        replicasText(endpoint)
      ),
      h(
        'p',
        { class: 'bai-Form-intro bai-Form-hint' },
        `Within these bounds the load decides (${targetText(endpoint.spec.scaling)}): ` +
          'replicas are added at once when it asks for more, and taken away one per window ' +
          'while fewer would do. The same number in both keeps a fixed count.'
      ),
      this.row('min_replicas', 'Minimum replicas', this.min),
      this.row('max_replicas', 'Maximum replicas', this.max),
      h('p', { class: 'bai-Form-message', attrs: { 'aria-live': 'polite', 'data-field': 'form' } })
    );
    this.messages.set('form', form.lastElementChild as HTMLElement);
    form.addEventListener('submit', event => event.preventDefault());
    this.node.append(form, this.marker);
    this.check();
  }

  values(): ScaleValues {
    return { min: this.min.value, max: this.max.value };
  }

  private row(field: ScaleField, text: string, control: HTMLElement): HTMLElement {
    const { row, message } = formRow(field, text, control);
    this.messages.set(field, message);
    this.rows.set(field, row);
    return row;
  }

  private check(): void {
    const { problems } = buildScaling(this.min.value, this.max.value);
    for (const [field, node] of this.messages) {
      const text = this.refusal?.field === field ? this.refusal.text : (problems[field] ?? '');
      showMessage(node, this.rows.get(field), text);
    }
    allowAccept(this.node, this.marker, !this.refusal && !Object.keys(problems).length);
  }

  protected onAfterAttach(): void {
    this.check();
  }
}

/** Ask for new scaling bounds of `endpoint` and apply them; false when the user cancelled. */
export async function scaleDialog(live: LiveState, endpoint: EndpointJSON): Promise<boolean> {
  const { min_replicas, max_replicas } = endpoint.spec.scaling;
  let values: ScaleValues = { min: String(min_replicas), max: String(max_replicas) };
  let refusal: { field: ScaleField; text: string } | null = null;
  for (;;) {
    const form = new ScaleForm(endpoint, values, refusal);
    const answer = await showDialog({
      title: `Scale endpoint ${endpoint.name}`,
      body: form,
      focusNodeSelector:
        refusal?.field === 'max_replicas' ? '#bai-field-max_replicas' : '#bai-field-min_replicas',
      buttons: [
        Dialog.cancelButton(),
        Dialog.okButton({ label: 'Scale', ariaLabel: `Scale endpoint ${endpoint.name}` })
      ]
    });
    if (!answer.button.accept) {
      return false;
    }
    values = form.values();
    const { scaling } = buildScaling(values.min, values.max);
    if (!scaling) {
      continue; // Enter on an invalid form: the dialog again, with what is wrong
    }
    try {
      live.showEndpoint(await live.client.updateEndpoint(endpoint.name, { scaling }));
      return true;
    } catch (error) {
      if (error instanceof ApiError && error.status === 400) {
        refusal = scaleRefusal(error.message, error.field);
        continue;
      }
      live.refreshEndpoints(0); // what it is now (deleted meanwhile, say)
      await showDialog({
        title: `Endpoint ${endpoint.name} was not scaled`,
        body: errorBody(error),
        buttons: [Dialog.okButton()]
      });
      return false;
    }
  }
}
