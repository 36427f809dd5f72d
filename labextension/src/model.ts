/**
 * What the views show, folded from API replies and the event stream. No DOM,
 * no JupyterLab: plain data and functions, unit-tested on their own.
 */
import type { EndpointJSON } from './endpoints';
import type { PoolJSON } from './pools';

// --- the API's shapes (docs/api.md) -----------------------------------------------------------

export type Slots = Record<string, string>;

export interface SchedulerRecord {
  retries?: number;
  last_try?: number;
  failed_predicates?: { name: string; msg: string }[];
  msg?: string;
}

export interface KernelJSON {
  id: string;
  hostname: string;
  role: string;
  slots: Slots;
  status: string;
  status_info: string | null;
  agent_id: string | null;
}

export interface ServiceJSON {
  name: string;
  protocol: string;
  port: number;
  url: string | null;
}

export interface SpecJSON {
  image: string | null;
  name: string | null;
  type: string;
  resources: Slots;
  cluster_size: number;
  cluster_mode: string;
  resource_group: string;
  priority: number;
  depends_on: string[];
  startup_command: string | null;
  batch_timeout: number | null;
  service_ports: string[];
}

/** One idle rule that applies to a running session (docs/api.md, `idle`). */
export interface IdleRuleJSON {
  /** Seconds before it ends the session if nothing happens, when the reply was made. */
  left: number | null;
  timeout?: number;
  cpu_percent?: number;
  window?: number;
  cpu_used?: number;
  source?: string | null;
}

export interface IdleJSON {
  idle_timeout?: IdleRuleJSON;
  session_lifetime?: IdleRuleJSON;
  utilization?: IdleRuleJSON;
  last_activity?: number;
  activity?: string | null;
}

/** A running system session's SFTP server (the private key only with `connection=true`). */
export interface SftpJSON {
  host: string;
  port: number;
  user: string;
  known_hosts: string;
  command: string;
}

export interface SessionJSON {
  id: string;
  name: string | null;
  owner: string;
  created_at: number;
  status: string;
  status_info: string | null;
  status_data: { scheduler?: SchedulerRecord; error?: string; [key: string]: unknown };
  result: string;
  exit_code: number | null;
  spec: SpecJSON;
  kernels: KernelJSON[];
  meta: Record<string, unknown>;
  services: ServiceJSON[];
  idle?: IdleJSON;
  sftp?: SftpJSON | null;
}

export interface SessionEvent {
  type: string;
  session_id: string;
  name: string | null;
  owner: string;
  status: string;
  status_info: string | null;
  kernels: Record<string, string>;
  at: number;
  notice?: { kind: string; kernel: string; at: number; message: string };
}

export interface QueueEntry {
  position: number;
  mine: boolean;
  session_id?: string;
  name?: string | null;
  owner?: string;
  priority?: number;
  created_at?: number;
  resources?: Slots;
  cluster_size?: number;
  scheduler?: SchedulerRecord;
}

export interface SchedulerJSON {
  resource_groups: Record<
    string,
    { sequencer: string; selector: string; pending: number; queue: QueueEntry[] }
  >;
}

export interface AgentJSON {
  id: string;
  resource_group: string;
  backend: string;
  schedulable: boolean;
  capacity: Slots;
  occupied: Slots;
  free: Slots;
  /** Each kernel on it; who runs it only for the caller's own sessions (an admin's: all). */
  kernels: {
    slots: Slots;
    /** The pool that keeps it warm: an unclaimed warm session's kernel (nobody's yet). */
    pool?: string;
    session_id?: string;
    kernel_id?: string;
    hostname?: string;
    owner?: string;
    status?: string;
  }[];
  /** Warm sessions whose main1 runs here, by pool name. */
  warm?: Record<string, number>;
}

export interface TemplateJSON {
  name: string;
  description: string;
  shared: boolean;
  spec: Record<string, unknown>;
}

/** A create request, as the dialog builds it (only the fields the user set). */
export type SessionRequest = Record<string, unknown>;

// --- words and numbers for people -------------------------------------------------------------

const TERMINAL = new Set(['TERMINATED', 'CANCELLED', 'ERROR']);
const STARTING = new Set(['SCHEDULED', 'PREPARING', 'PULLING', 'PREPARED', 'CREATING']);
const GIB = 1024 ** 3;
const MIB = 1024 ** 2;

export function isEnded(status: string): boolean {
  return TERMINAL.has(status);
}

/**
 * The colour family of a status (a CSS class suffix): queued, starting, running,
 * ending, and how it ended (ok, failed, cancelled).
 */
export function statusTone(session: Pick<SessionJSON, 'status' | 'result'>): string {
  const { status, result } = session;
  if (status === 'PENDING') {
    return 'queued';
  }
  if (STARTING.has(status) || status === 'RESTARTING') {
    return 'starting';
  }
  if (status === 'RUNNING') {
    return 'running';
  }
  if (status === 'TERMINATING') {
    return 'ending';
  }
  if (status === 'ERROR' || result === 'FAILURE') {
    return 'failed';
  }
  if (status === 'CANCELLED') {
    return 'cancelled';
  }
  return 'ok';
}

/** An amount of one slot as a person reads it: `2 CPU`, `512 MiB`, `1.5 GiB`, `1 GPU`. */
export function slotText(slot: string, amount: string): string {
  const value = Number(amount);
  if (slot === 'mem') {
    if (value >= GIB) {
      return `${+(value / GIB).toFixed(2)} GiB`;
    }
    return `${+(value / MIB).toFixed(1)} MiB`;
  }
  if (slot === 'cpu') {
    return `${+value.toFixed(3)} CPU`;
  }
  if (slot === 'cuda.device') {
    return `${+value.toFixed(3)} GPU`;
  }
  return `${slot} ${amount}`;
}

/** Per-kernel resources: `1 CPU · 2 GiB`. */
export function resourcesText(slots: Slots | undefined): string {
  const parts = Object.entries(slots ?? {}).map(([slot, amount]) => slotText(slot, amount));
  return parts.length ? parts.join(' · ') : 'no limits';
}

/** `main1, sub1, sub2` (the hostnames in cluster order). */
export function clusterHosts(session: Pick<SessionJSON, 'kernels'>): string {
  return session.kernels.map(kernel => kernel.hostname).join(', ');
}

/** How long ago, in the largest unit that fits: `12 s`, `5 min`, `3 h`, `2 d`. */
export function ageText(createdAt: number, now: number): string {
  const seconds = Math.max(0, Math.floor(now - createdAt));
  if (seconds < 60) {
    return `${seconds} s`;
  }
  if (seconds < 3600) {
    return `${Math.floor(seconds / 60)} min`;
  }
  if (seconds < 86400) {
    return `${Math.floor(seconds / 3600)} h`;
  }
  return `${Math.floor(seconds / 86400)} d`;
}

/** A duration in its two largest units: `45 s`, `9 min 58 s`, `3 h 5 min`, `2 d 4 h`. */
export function durationText(seconds: number): string {
  let left = Math.max(0, Math.round(seconds));
  const parts: string[] = [];
  for (const [unit, size] of [
    ['d', 86400],
    ['h', 3600],
    ['min', 60],
    ['s', 1]
  ] as const) {
    if (left >= size || (unit === 's' && !parts.length)) {
      parts.push(`${Math.floor(left / size)} ${unit}`);
      left %= size;
    }
    if (parts.length === 2 || (parts.length && left === 0)) {
      break;
    }
  }
  return parts.join(' ');
}

/**
 * When each idle rule ends a running session if nothing happens, counted down from
 * the reply (`loadedAt`) to `now` (both epoch seconds): one line per rule, soonest
 * first. Empty when no rule applies.
 */
export function idleLines(
  session: Pick<SessionJSON, 'idle' | 'status'>,
  loadedAt: number,
  now: number
): string[] {
  const idle = session.idle ?? {};
  if (session.status !== 'RUNNING' && session.status !== 'RESTARTING') {
    return [];
  }
  const since = Math.max(0, now - loadedAt);
  const lines: [number, string][] = [];
  const rules: [keyof IdleJSON, (rule: IdleRuleJSON, left: string) => string][] = [
    [
      'idle_timeout',
      (r, left) => `Idle for ${left} more ends it (idle timeout ${durationText(r.timeout ?? 0)})`
    ],
    [
      'utilization',
      (r, left) =>
        `CPU below ${r.cpu_percent}% ends it in ${left} (now ${r.cpu_used ?? 0}% over ${durationText(r.window ?? 0)})`
    ],
    [
      'session_lifetime',
      (r, left) => `Ends in ${left} at most (lifetime ${durationText(r.timeout ?? 0)})`
    ]
  ];
  for (const [name, text] of rules) {
    const rule = idle[name] as IdleRuleJSON | undefined;
    if (rule && typeof rule.left === 'number') {
      const left = Math.max(0, rule.left - since);
      lines.push([left, text(rule, durationText(left))]);
    }
  }
  return lines.sort((a, b) => a[0] - b[0]).map(([, line]) => line);
}

/**
 * A link the API gives (a path from the server's root, which holds its base URL:
 * `/user/alice/bai/endpoints/echo/`, or a manager service's full URL) as a full URL
 * on the server the page came from (`baseUrl`: its public URL, as the page knows it).
 */
export function pageUrlOf(path: string, baseUrl: string): string {
  return new URL(path, baseUrl).toString();
}

/** A session as people name it: its name, else the first 8 characters of its id. */
export function label(session: { id: string; name?: string | null }): string {
  return session.name || session.id.slice(0, 8);
}

const SESSION_ID = /\b[0-9a-f]{32}\b/g;

/**
 * Why a pending session waits, in words: the scheduler's failed predicates and its
 * message, with session ids replaced by the names people know them by
 * ("waiting for train-1 (RUNNING) to succeed"). Null when it is not pending or the
 * scheduler has not looked at it yet.
 */
export function whyPending(
  session: Pick<SessionJSON, 'status' | 'status_data'>,
  names: ReadonlyMap<string, string> = new Map()
): string | null {
  if (session.status !== 'PENDING') {
    return null;
  }
  const record = session.status_data?.scheduler;
  if (!record) {
    return null;
  }
  const reasons = (record.failed_predicates ?? []).map(p => p.msg || p.name);
  if (record.msg) {
    reasons.push(record.msg);
  }
  const unique = [...new Set(reasons)].map(reason =>
    reason.replace(SESSION_ID, id => {
      const known = names.get(id);
      return known ? `session ${known}` : `session ${id.slice(0, 8)}`;
    })
  );
  return unique.length ? unique.join('; ') : null;
}

/** How a batch session ended: `SUCCESS (exit code 0)`; null while it has no result. */
export function resultText(session: Pick<SessionJSON, 'result' | 'exit_code'>): string | null {
  if (session.result === 'UNDEFINED') {
    return null;
  }
  return `${session.result} (exit code ${session.exit_code ?? '–'})`;
}

/** One group's queue in the order the scheduler tries it (position 1 first). */
export function queueOrder(scheduler: SchedulerJSON | null, group: string): QueueEntry[] {
  const queue = scheduler?.resource_groups[group]?.queue ?? [];
  return [...queue].sort((a, b) => a.position - b.position);
}

/** Session id → [its group's name, its position there, the length of that queue]. */
export function queuePositions(
  scheduler: SchedulerJSON | null
): Map<string, { group: string; position: number; of: number }> {
  const positions = new Map<string, { group: string; position: number; of: number }>();
  for (const [group, info] of Object.entries(scheduler?.resource_groups ?? {})) {
    for (const entry of info.queue) {
      if (entry.session_id) {
        positions.set(entry.session_id, { group, position: entry.position, of: info.queue.length });
      }
    }
  }
  return positions;
}

/** Occupied / capacity per slot, 0..1, for an agent's bars. */
export function usage(agent: AgentJSON): { slot: string; used: number; text: string }[] {
  return Object.entries(agent.capacity).map(([slot, capacity]) => {
    const occupied = Number(agent.occupied[slot] ?? 0);
    const total = Number(capacity);
    return {
      slot,
      used: total > 0 ? Math.min(1, occupied / total) : 0,
      text: `${slotText(slot, String(occupied))} of ${slotText(slot, capacity)}`
    };
  });
}

// --- the create form's validation ---------------------------------------------------------------

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
 * The field a server error is about. Messages start with the field's path
 * (`resources.cpu: …`, `mounts: …`); a whole-request problem (it can never fit
 * the agents) belongs to the resources; anything else to the form as a whole.
 */
export function fieldOfMessage(message: string): FormField {
  const head = /^([a-z_]+)(?:[.[][^:\s]*)?:/.exec(message);
  if (head && (FORM_FIELDS as readonly string[]).includes(head[1])) {
    return head[1] as FormField;
  }
  if (/^resource group '[^']*': /.test(message)) {
    return 'resources';
  }
  if (/live session named/.test(message)) {
    return 'name';
  }
  if (/^no template named/.test(message)) {
    return 'template';
  }
  return 'form';
}

/** The message without the field path the form already shows next to it. */
export function messageText(message: string): string {
  return message.replace(/^[a-z_]+(?:[.[][^:\s]*)?:\s*/, '');
}

/** A Jupyter kernel of JupyterLab: its id, kernelspec name and the notebook using it. */
export interface JupyterKernel {
  id: string;
  spec: string;
  path: string | null;
}

/** The kernelspec the server writes to attach notebooks to a running session. */
export function attachSpecName(sessionId: string): string {
  return `bai-session-${sessionId.slice(0, 12)}`;
}

// --- the state, folded from replies and events --------------------------------------------------

/** What one event changed, so the live view knows what to re-read. */
export interface Folded {
  /** A session the state did not know (re-read it to show it). */
  unknown: boolean;
  /** Its status changed (queue and agents may have changed too). */
  statusChanged: boolean;
}

/**
 * The caller's sessions, endpoints, the queue, the agents and the warm pools, kept
 * current by full API replies (`load…`) and by events (`fold`). Listeners run after
 * every change.
 */
export class BaiState {
  readonly sessions = new Map<string, SessionJSON>();
  /** When each session's record was read (epoch seconds): idle times count down from it. */
  readonly loadedAt = new Map<string, number>();
  scheduler: SchedulerJSON | null = null;
  agents: AgentJSON[] = [];
  /** The warm pools (none configured: empty). */
  pools: PoolJSON[] = [];
  /** The user's inference endpoints, by name. */
  endpoints: EndpointJSON[] = [];
  /** JupyterLab's running kernels: their id, kernelspec and the notebook using each. */
  kernels: JupyterKernel[] = [];
  /** Set when the event stream is down (shown to the user), null while it is live. */
  offline: string | null = null;
  private listeners = new Set<() => void>();

  onChange(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  changed(): void {
    for (const listener of [...this.listeners]) {
      listener();
    }
  }

  loadSessions(sessions: SessionJSON[], at: number = Date.now() / 1000): void {
    this.sessions.clear();
    this.loadedAt.clear();
    for (const session of sessions) {
      this.sessions.set(session.id, session);
      this.loadedAt.set(session.id, at);
    }
    this.changed();
  }

  /** One session as the API gives it: replaces what the state had. */
  loadSession(session: SessionJSON, at: number = Date.now() / 1000): void {
    this.sessions.set(session.id, session);
    this.loadedAt.set(session.id, at);
    this.changed();
  }

  /** A running session's idle rules, counted down to `now` (epoch seconds). */
  idleOf(session: SessionJSON, now: number = Date.now() / 1000): string[] {
    return idleLines(session, this.loadedAt.get(session.id) ?? now, now);
  }

  /** Whether some running session has an idle rule (its countdown needs redrawing). */
  counting(): boolean {
    return [...this.sessions.values()].some(
      session => session.status === 'RUNNING' && Object.keys(session.idle ?? {}).length > 0
    );
  }

  loadScheduler(scheduler: SchedulerJSON): void {
    this.scheduler = scheduler;
    this.changed();
  }

  loadAgents(agents: AgentJSON[]): void {
    this.agents = agents;
    this.changed();
  }

  loadPools(pools: PoolJSON[]): void {
    this.pools = pools;
    this.changed();
  }

  loadEndpoints(endpoints: EndpointJSON[]): void {
    this.endpoints = [...endpoints].sort((a, b) => a.name.localeCompare(b.name));
    this.changed();
  }

  /** One endpoint as the API gives it (after a change): replaces what the state had. */
  loadEndpoint(endpoint: EndpointJSON): void {
    this.loadEndpoints([...this.endpoints.filter(e => e.name !== endpoint.name), endpoint]);
  }

  /** Apply an event's status and kernel states at once (the full record follows). */
  fold(event: SessionEvent): Folded {
    const session = this.sessions.get(event.session_id);
    if (event.type !== 'session' || !session) {
      return { unknown: event.type === 'session', statusChanged: true };
    }
    const statusChanged = session.status !== event.status;
    const kernels = session.kernels.map(kernel => ({
      ...kernel,
      status: event.kernels[kernel.hostname] ?? kernel.status
    }));
    const updated: SessionJSON = {
      ...session,
      status: event.status,
      status_info: event.status_info,
      kernels
    };
    if (event.status !== 'PENDING' && updated.status_data?.scheduler) {
      const { scheduler: _dropped, ...rest } = updated.status_data;
      updated.status_data = rest;
    }
    this.sessions.set(session.id, updated);
    this.changed();
    return { unknown: false, statusChanged };
  }

  /** Session id → its name, for wording the scheduler's messages. */
  names(): Map<string, string> {
    const names = new Map<string, string>();
    for (const session of this.sessions.values()) {
      if (session.name) {
        names.set(session.id, session.name);
      }
    }
    for (const info of Object.values(this.scheduler?.resource_groups ?? {})) {
      for (const entry of info.queue) {
        if (entry.session_id && entry.name) {
          names.set(entry.session_id, entry.name);
        }
      }
    }
    return names;
  }

  /** Newest first; ended ones only when `ended`. */
  list(ended = true): SessionJSON[] {
    return [...this.sessions.values()]
      .filter(session => ended || !isEnded(session.status))
      .sort((a, b) => b.created_at - a.created_at);
  }

  /**
   * The session a Jupyter kernel runs in: the one started for it (its
   * `meta.jupyter_kernel_id`, the newest after restarts), else the running session
   * its attach kernelspec names.
   */
  sessionOfKernel(kernel: Pick<JupyterKernel, 'id' | 'spec'>): SessionJSON | undefined {
    let found: SessionJSON | undefined;
    for (const session of this.sessions.values()) {
      const mine =
        session.meta?.jupyter_kernel_id === kernel.id ||
        (kernel.spec === attachSpecName(session.id) && !isEnded(session.status));
      if (mine && (!found || session.created_at > found.created_at)) {
        found = session;
      }
    }
    return found;
  }

  /** The Jupyter kernels (and notebooks) that run in a session. */
  kernelsOf(session: SessionJSON): JupyterKernel[] {
    return this.kernels.filter(kernel => this.sessionOfKernel(kernel)?.id === session.id);
  }

  /** A pending session's place in its queue: `{position, of}` or null. */
  position(id: string): { position: number; of: number } | null {
    return queuePositions(this.scheduler).get(id) ?? null;
  }
}

// --- the create form: values → request ---------------------------------------------------------

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
