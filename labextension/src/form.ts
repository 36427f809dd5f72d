/**
 * The new-session form: its fields and values, the request they make, and which
 * field a server message is about. Pure functions; the dialog draws them.
 */
import type { SessionRequest, Slots } from './types';

/** The dialog's fields a server message can be about. */
export const FORM_FIELDS = [
  'template',
  'name',
  'image',
  'type',
  'cluster_size',
  'cluster_mode',
  'resources',
  'mounts',
  'env',
  'startup_command',
  'batch_timeout',
  'depends_on',
  'priority',
  'resource_group'
] as const;

export type FormField = (typeof FORM_FIELDS)[number] | 'form';

/**
 * The form's field a server error is about, from the error body's `field` (a
 * dotted path: `resources.cpu` and `mounts[2]` belong to `resources` and
 * `mounts`); no field, or one the form has no row for, is the form as a whole.
 */
export function formField(field: string | null): FormField {
  const head = field ? field.split(/[.[]/, 1)[0] : '';
  return (FORM_FIELDS as readonly string[]).includes(head) ? (head as FormField) : 'form';
}

/**
 * The message without the part of its field path the form's row already says: the
 * row's name goes, what is inside it stays (`resources.cpu: cannot parse 'abc'` under
 * "Resources per kernel" reads `cpu: cannot parse 'abc'`).
 */
export function messageText(message: string, field: string | null): string {
  const prefix = field ? `${field}: ` : '';
  if (!prefix || !message.startsWith(prefix)) {
    return message;
  }
  const head = formField(field);
  return field!.startsWith(`${head}.`)
    ? message.slice(head.length + 1)
    : message.slice(prefix.length);
}

/** The input of a slot the server names (`resources.cuda.device` → `gpu`), if one. */
export function slotInput(field: string | null): keyof FormValues | null {
  const slot = field?.startsWith('resources.') ? field.slice('resources.'.length) : null;
  const inputs: Record<string, keyof FormValues> = { cpu: 'cpu', mem: 'mem', 'cuda.device': 'gpu' };
  return slot !== null ? (inputs[slot] ?? null) : null;
}

/**
 * The request without what a server error was about, so the next dry run finds the
 * next error: a slot of `resources` alone, else the whole field (null: nothing left
 * to take out, the check is over).
 */
export function without(request: SessionRequest, field: string | null): SessionRequest | null {
  const head = formField(field);
  if (head === 'form' || !(head in request)) {
    return null;
  }
  const next: SessionRequest = { ...request };
  const slot = field!.startsWith('resources.') ? field!.slice('resources.'.length) : null;
  const slots = (request.resources ?? {}) as Slots;
  if (slot !== null && slot in slots) {
    next.resources = Object.fromEntries(Object.entries(slots).filter(([key]) => key !== slot));
  } else {
    delete next[head];
  }
  return next;
}

/** The dialog's inputs as text, as the user typed them. */
export interface FormValues {
  template: string;
  name: string;
  image: string;
  type: string;
  cluster_size: string;
  cluster_mode: string;
  cpu: string;
  mem: string;
  gpu: string;
  mounts: string;
  env: string;
  startup_command: string;
  batch_timeout: string;
  depends_on: string;
  priority: string;
}

export const EMPTY_FORM: FormValues = {
  template: '',
  name: '',
  image: '',
  type: 'interactive',
  cluster_size: '1',
  cluster_mode: 'single-node',
  cpu: '',
  mem: '',
  gpu: '',
  mounts: '',
  env: '',
  startup_command: '',
  batch_timeout: '',
  depends_on: '',
  priority: ''
};

function list(text: string): string[] {
  return text
    .split(/[,\n]/)
    .map(item => item.trim())
    .filter(Boolean);
}

/**
 * The create request of a filled-in form: only what the user set, so the template
 * and the server's defaults fill the rest. What cannot even be sent (an `env` line
 * without `=`, a count that is not a number) comes back in `problems` by field;
 * everything else is the server's to judge.
 */
export function buildRequest(form: FormValues): {
  request: SessionRequest;
  problems: Partial<Record<FormField, string>>;
} {
  const request: SessionRequest = { type: form.type };
  const problems: Partial<Record<FormField, string>> = {};
  if (form.template.trim()) {
    request.template = form.template.trim();
  }
  const system = form.type === 'system'; // one kernel: its cluster rows are hidden
  for (const key of ['name', 'image', 'cluster_mode'] as const) {
    if (form[key].trim() && !(system && key === 'cluster_mode')) {
      request[key] = form[key].trim();
    }
  }
  for (const key of ['cluster_size', 'priority', 'batch_timeout'] as const) {
    const text = form[key].trim();
    if (!text) {
      continue;
    }
    const value = Number(text);
    if (!Number.isFinite(value)) {
      problems[key] = `must be a number, got ${JSON.stringify(text)}`;
    } else if (system && key === 'cluster_size') {
      continue;
    } else if (key !== 'batch_timeout' || form.type === 'batch') {
      request[key] = value;
    }
  }
  const resources: Slots = {};
  for (const [slot, text] of [
    ['cpu', form.cpu],
    ['mem', form.mem],
    ['cuda.device', form.gpu]
  ]) {
    if (text.trim()) {
      resources[slot] = text.trim();
    }
  }
  if (Object.keys(resources).length) {
    request.resources = resources;
  }
  const mounts = list(form.mounts);
  if (mounts.length) {
    request.mounts = mounts;
  }
  const env: Record<string, string> = {};
  form.env.split('\n').forEach((line, index) => {
    if (!line.trim()) {
      return;
    }
    const eq = line.indexOf('=');
    if (eq <= 0) {
      problems.env = `line ${index + 1}: write NAME=value, got ${JSON.stringify(line.trim())}`;
      return;
    }
    env[line.slice(0, eq).trim()] = line.slice(eq + 1);
  });
  if (Object.keys(env).length) {
    request.env = env;
  }
  if (form.type === 'batch' && form.startup_command.trim()) {
    request.startup_command = form.startup_command.trim();
  }
  const depends = list(form.depends_on);
  if (depends.length) {
    request.depends_on = depends;
  }
  return { request, problems };
}
