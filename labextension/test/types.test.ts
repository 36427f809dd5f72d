/**
 * The API's types and the status sets, against the server's own: its OpenAPI
 * schemas and its lifecycle sets, as `scripts/openapi_snapshot.py` wrote them into
 * `api-snapshot.json` (`jlpm snapshot` after changing the API). And RESTARTING
 * counts as active everywhere a view asks.
 */
import { FORM_FIELDS } from '../src/form';
import type { EndpointJSON } from '../src/endpoints';
import { BaiState } from '../src/store';
import { idleLines, statusTone } from '../src/text';
import {
  ACTIVE,
  ALL_STATUSES,
  attachSpecName,
  ENDED,
  ENDING_OR_ENDED,
  isEnded,
  NOT_ENDED,
  STARTING,
  Status,
  type SessionJSON,
  type TemplateJSON
} from '../src/types';
import snapshot from './api-snapshot.json';
import { EVAL, session, TRAIN } from './fixtures';

interface Schema {
  type?: string;
  enum?: string[];
  nullable?: boolean;
  required?: string[];
  properties?: Record<string, Schema>;
  items?: Schema;
}

const schemas = snapshot.schemas as Record<string, Schema>;

/** The keys a type must have (not optional). */
type RequiredKeys<T> = { [K in keyof T]-?: object extends Pick<T, K> ? never : K }[keyof T];

// Each interface's fields, spelt out so they can be compared with the schemas at run
// time; the `Record<keyof …>` types make tsc fail when a list and its interface part.
const SESSION_FIELDS: Record<keyof SessionJSON, true> = {
  id: true,
  name: true,
  owner: true,
  created_at: true,
  status: true,
  status_info: true,
  status_data: true,
  pending_reason: true,
  result: true,
  exit_code: true,
  spec: true,
  kernels: true,
  meta: true,
  services: true,
  idle: true,
  sftp: true,
  end_notice: true,
  status_history: true
};
const SESSION_REQUIRED: Record<RequiredKeys<SessionJSON>, true> = {
  id: true,
  name: true,
  owner: true,
  created_at: true,
  status: true,
  status_info: true,
  status_data: true,
  pending_reason: true,
  result: true,
  exit_code: true,
  spec: true,
  kernels: true,
  meta: true,
  services: true
};
const ENDPOINT_FIELDS: Record<keyof EndpointJSON, true> = {
  id: true,
  name: true,
  owner: true,
  created_at: true,
  url: true,
  state: true,
  ready_replicas: true,
  desired: true,
  generation: true,
  spec: true,
  replicas: true,
  load: true,
  decisions: true,
  rollout: true,
  error: true
};
const TEMPLATE_FIELDS: Record<keyof TemplateJSON, true> = {
  name: true,
  description: true,
  shared: true,
  spec: true
};

function fieldsOf(name: string): string[] {
  return Object.keys(schemas[name].properties ?? {});
}

describe('the status sets', () => {
  it('are the server’s: its status enum and its lifecycle sets', () => {
    expect(ALL_STATUSES).toEqual(schemas.Session.properties!.status.enum);
    expect([...STARTING]).toEqual(snapshot.statuses.STARTING);
    expect([...ACTIVE]).toEqual(snapshot.statuses.ACTIVE);
    expect([...ENDED].sort()).toEqual([...snapshot.statuses.TERMINAL].sort());
  });

  it('split the lifecycle: queued, starting, active, ending, ended, each status once', () => {
    const parts = [[Status.PENDING], [...STARTING], [...ACTIVE], [Status.TERMINATING], [...ENDED]];
    expect(parts.flat().sort()).toEqual([...ALL_STATUSES].sort());
    expect(ACTIVE).toEqual(new Set(['RUNNING', 'RESTARTING']));
    expect([...NOT_ENDED]).toEqual(ALL_STATUSES.filter(s => !ENDED.has(s)));
    expect(ENDING_OR_ENDED).toEqual(new Set(['TERMINATING', ...ENDED]));
    expect(ALL_STATUSES.filter(isEnded)).toEqual(['TERMINATED', 'ERROR', 'CANCELLED']);
  });
});

describe('RESTARTING counts as active everywhere', () => {
  const idle = { idle_timeout: { timeout: 600, left: 300 } };
  const restarting = session(TRAIN, { status: 'RESTARTING', idle });

  it('in idle countdowns, and in whether they need redrawing', () => {
    expect(idleLines(restarting, 1000, 1000)).toEqual([
      'Idle for 5 min more ends it (idle timeout 10 min)'
    ]);
    const state = new BaiState();
    state.loadSessions([restarting], 1000);
    expect(state.counting()).toBe(true);
    expect(state.idleOf(restarting, 1010)).toHaveLength(1);
  });

  it('in the live sessions and in the sessions notebooks attach to', () => {
    const state = new BaiState();
    state.loadSessions([restarting, session(EVAL, { status: 'TERMINATED' })]);
    expect(state.list(false).map(s => s.id)).toEqual([TRAIN]);
    expect(state.sessionOfKernel({ id: 'k', spec: attachSpecName(TRAIN) })?.id).toBe(TRAIN);
    expect(state.sessionOfKernel({ id: 'k', spec: attachSpecName(EVAL) })).toBeUndefined();
  });

  it('while drawn like a session starting (its kernel comes back)', () => {
    expect(statusTone({ status: 'RESTARTING', result: 'UNDEFINED' })).toBe('starting');
  });
});

describe('the API types, against the OpenAPI schemas', () => {
  it.each([
    ['Session', Object.keys(SESSION_FIELDS)],
    ['Endpoint', Object.keys(ENDPOINT_FIELDS)],
    ['Template', Object.keys(TEMPLATE_FIELDS)]
  ])('%s: every field the extension reads is in the schema', (name, fields) => {
    const known = fieldsOf(name);
    expect(fields.filter(field => !known.includes(field))).toEqual([]);
  });

  it.each([
    ['Session', Object.keys(SESSION_REQUIRED)],
    ['Endpoint', Object.keys(ENDPOINT_FIELDS)]
  ])('%s: what the schema requires is not optional in the type', (name, required) => {
    expect((schemas[name].required ?? []).filter(field => !required.includes(field))).toEqual([]);
  });

  it('the form only names fields a session request has', () => {
    const request = fieldsOf('SessionRequest');
    expect(FORM_FIELDS.filter(field => !request.includes(field))).toEqual([]);
  });

  it('an endpoint’s states and a session’s results are the schema’s', () => {
    const states: EndpointJSON['state'][] = ['ready', 'queued', 'starting'];
    expect(states).toEqual(schemas.Endpoint.properties!.state.enum);
    expect(schemas.Session.properties!.result.enum).toEqual(['UNDEFINED', 'SUCCESS', 'FAILURE']);
  });
});
