/**
 * Inference endpoints as the views show them: the API's shapes
 * (`GET /bai/api/v1/endpoints`, docs/endpoints.md), their wording, and when the
 * live view should read them again. No DOM, no JupyterLab.
 */
import { ageText, label } from './text';

// --- the API's shapes -------------------------------------------------------------------------

export interface ScalingJSON {
  min_replicas: number;
  max_replicas: number;
  /** `inflight` (requests in flight per ready replica) or `rps` (requests/s per ready replica). */
  metric: string;
  target: number;
  window: number;
}

export interface ReplicaJSON {
  session_id: string;
  status: string;
  generation: number;
  healthy: boolean;
  draining: boolean;
  /** Only for a replica the router knows (RUNNING ones). */
  in_flight?: number;
  answered?: number;
  /** What its last failed health check or connection said ('' when none). */
  problem?: string;
}

export interface DecisionJSON {
  at: number;
  from: number;
  to: number;
  reason: string;
}

export interface EndpointJSON {
  id: string;
  name: string;
  owner: string;
  created_at: number;
  /** Its route: a path from the server's root (`/bai/endpoints/echo/`). */
  url: string;
  state: 'ready' | 'queued' | 'starting';
  ready_replicas: number;
  /** The count the scaling rule wants now. */
  desired: number;
  generation: number;
  spec: {
    replica: Record<string, unknown>;
    service: string;
    health_path: string;
    health_interval: number;
    scaling: ScalingJSON;
  };
  replicas: ReplicaJSON[];
  load: { in_flight: number; rps: number; seconds: number };
  /** Oldest first; the server keeps the newest 50. */
  decisions: DecisionJSON[];
  /** The last rolling update until one completes; `failed` says why it gave up. */
  rollout?: RolloutJSON | null;
  /** Why replicas do not start, while they do not. */
  error: string | null;
}

/** A rolling update in progress, or the last one that gave up (back to `from`). */
export interface RolloutJSON {
  state: 'rolling' | 'failed';
  generation: number;
  from: number;
  since: number;
  at?: number;
  reason: string | null;
}

/** What `PATCH endpoints/<name>` takes (merged key by key). */
export interface EndpointUpdate {
  scaling?: Partial<ScalingJSON>;
  replica?: Record<string, unknown>;
  service?: string;
  health_path?: string;
  health_interval?: number;
}

// --- words and numbers for people -------------------------------------------------------------

/** The colour family of an endpoint's state (the session badges' classes). */
export function endpointTone(endpoint: Pick<EndpointJSON, 'state' | 'error'>): string {
  if (endpoint.state === 'ready') {
    return 'running';
  }
  if (endpoint.error) {
    return 'failed';
  }
  return endpoint.state === 'queued' ? 'queued' : 'starting';
}

/** `2 ready of 3 wanted (min 1, max 4)`, or `(fixed at 2)` when the bounds are one number. */
export function replicasText(
  endpoint: Pick<EndpointJSON, 'ready_replicas' | 'desired' | 'spec'>
): string {
  const { min_replicas, max_replicas } = endpoint.spec.scaling;
  const range =
    min_replicas === max_replicas
      ? `fixed at ${min_replicas}`
      : `min ${min_replicas}, max ${max_replicas}`;
  return `${endpoint.ready_replicas} ready of ${endpoint.desired} wanted (${range})`;
}

/** A rate or a count as people read it: one decimal below 10, whole numbers above. */
function amount(value: number): string {
  return value >= 10 ? String(Math.round(value)) : String(+value.toFixed(1));
}

/** `3.2 in flight · 12 req/s`. */
export function loadText(load: EndpointJSON['load']): string {
  return `${amount(load.in_flight)} in flight · ${amount(load.rps)} req/s`;
}

/** What the scaling rule aims at: `target 4 in flight per replica over 30 s`. */
export function targetText(scaling: ScalingJSON): string {
  const what = scaling.metric === 'rps' ? 'req/s' : 'in flight';
  return `target ${amount(scaling.target)} ${what} per replica over ${amount(scaling.window)} s`;
}

/** One replica in a line's parts: its short id, status, health (and its colour), generation. */
export function replicaParts(replica: ReplicaJSON): {
  id: string;
  status: string;
  health: string;
  tone: string;
  generation: string;
} {
  let health: string;
  let tone: string;
  if (replica.draining) {
    health = 'draining';
    tone = 'queued';
  } else if (replica.healthy) {
    health = 'healthy';
    tone = 'running';
  } else if (replica.problem) {
    health = replica.problem;
    tone = 'failed';
  } else {
    health = 'not ready';
    tone = 'starting';
  }
  return {
    id: label({ id: replica.session_id }),
    status: replica.status,
    health,
    tone,
    generation: `gen ${replica.generation}`
  };
}

/** The newest `count` decisions, newest first, with their age: `12 s ago · 1 → 2: …`. */
export function recentDecisions(
  endpoint: Pick<EndpointJSON, 'decisions'>,
  now: number,
  count = 3
): { at: number; text: string }[] {
  return endpoint.decisions
    .slice(-count)
    .reverse()
    .map(decision => ({
      at: decision.at,
      text: `${ageText(decision.at, now)} ago · ${decision.from} → ${decision.to}: ${decision.reason}`
    }));
}

/** The endpoint a session is a replica of (its `meta.endpoint`), or null. */
export function replicaOf(session: {
  meta?: Record<string, unknown>;
}): { id: string; name: string; generation: number } | null {
  const found = session.meta?.endpoint as { id?: unknown; name?: unknown; generation?: unknown };
  if (!found || typeof found !== 'object' || typeof found.name !== 'string') {
    return null;
  }
  return { id: String(found.id), name: found.name, generation: Number(found.generation ?? 0) };
}

// --- keeping them current ----------------------------------------------------------------------

/** How often endpoints are read again while one of them is on its way somewhere. */
export const UNSTEADY_MS = 2000;
/** … and while one serves requests (its load figures move). */
export const LOADED_MS = 5000;

/**
 * Steady: as many ready replicas as wanted, every replica ready (none starting,
 * unhealthy or draining). Events do not say when a replica passes its health
 * check or starts draining, so an endpoint that is not steady is read again.
 */
export function isSteady(endpoint: EndpointJSON): boolean {
  return (
    endpoint.ready_replicas === endpoint.desired &&
    endpoint.replicas.length === endpoint.desired &&
    endpoint.replicas.every(replica => replica.healthy && !replica.draining)
  );
}

/**
 * When to read the endpoints again without an event: soon while one is not
 * steady, now and then while one has load (the figures move), never when nothing
 * changes (replica sessions' events then say when to).
 */
export function refreshDelay(endpoints: readonly EndpointJSON[]): number | null {
  if (endpoints.some(endpoint => !isSteady(endpoint))) {
    return UNSTEADY_MS;
  }
  if (endpoints.some(endpoint => endpoint.load.in_flight > 0 || endpoint.load.rps > 0)) {
    return LOADED_MS;
  }
  return null;
}

// --- the scale dialog -------------------------------------------------------------------------

export type ScaleField = 'min_replicas' | 'max_replicas' | 'form';

/**
 * The `scaling` change of the dialog's two inputs, or what is wrong with them.
 * Only what cannot be meant is caught here (not a whole number, below 1, a maximum
 * under the minimum); the server judges the rest (its upper bound) and says so.
 */
export function buildScaling(
  min: string,
  max: string
): {
  scaling: Pick<ScalingJSON, 'min_replicas' | 'max_replicas'> | null;
  problems: Partial<Record<ScaleField, string>>;
} {
  const problems: Partial<Record<ScaleField, string>> = {};
  const parse = (field: ScaleField, text: string): number => {
    const value = Number(text.trim());
    if (!text.trim() || !Number.isInteger(value)) {
      problems[field] = `must be a whole number, got ${JSON.stringify(text.trim())}`;
    } else if (value < 1) {
      problems[field] = `must be at least 1, got ${value}`;
    }
    return value;
  };
  const low = parse('min_replicas', min);
  const high = parse('max_replicas', max);
  if (!Object.keys(problems).length && high < low) {
    problems.max_replicas = `must be at least the minimum (${low}), got ${high}`;
  }
  if (Object.keys(problems).length) {
    return { scaling: null, problems };
  }
  return { scaling: { min_replicas: low, max_replicas: high }, problems };
}

/**
 * The field of the dialog a server refusal is about, from the error body's
 * `field` (`scaling.max_replicas`), and the message without the path
 * (`scaling.max_replicas: `) the dialog shows next to it.
 */
export function scaleRefusal(
  message: string,
  field: string | null
): { field: ScaleField; text: string } {
  const about = field?.replace(/^scaling\./, '');
  if (field && (about === 'min_replicas' || about === 'max_replicas')) {
    const prefix = `${field}: `;
    const text = message.startsWith(prefix) ? message.slice(prefix.length) : message;
    return { field: about, text };
  }
  return { field: 'form', text: message };
}
