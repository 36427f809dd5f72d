/**
 * Endpoints as the sidebar shows them: state colour, replica counts, load,
 * replicas, decisions, when to read them again, and the scale dialog's checks.
 * The records are shaped like `GET /bai/api/v1/endpoints` (docs/endpoints.md).
 */
import {
  buildScaling,
  EndpointJSON,
  endpointTone,
  isSteady,
  LOADED_MS,
  loadText,
  recentDecisions,
  refreshDelay,
  replicaOf,
  replicaParts,
  ReplicaJSON,
  replicasText,
  scaleRefusal,
  targetText,
  UNSTEADY_MS
} from '../src/endpoints';
import { BaiState } from '../src/store';

const A = 'a'.repeat(32);
const B = 'b'.repeat(32);

function replica(id: string, overrides: Partial<ReplicaJSON> = {}): ReplicaJSON {
  return {
    session_id: id,
    status: 'RUNNING',
    generation: 1,
    healthy: true,
    draining: false,
    in_flight: 0,
    answered: 12,
    problem: '',
    ...overrides
  };
}

function endpoint(overrides: Partial<EndpointJSON> = {}): EndpointJSON {
  return {
    id: 'e1',
    name: 'echo',
    owner: 'alice',
    created_at: 1000,
    url: '/bai/endpoints/echo/',
    state: 'ready',
    ready_replicas: 2,
    desired: 2,
    generation: 1,
    spec: {
      replica: { image: 'bai-jupyter/python:3.11' },
      service: 'model',
      health_path: '/health',
      health_interval: 5,
      scaling: { min_replicas: 1, max_replicas: 4, metric: 'inflight', target: 4, window: 30 }
    },
    replicas: [replica(A), replica(B)],
    load: { in_flight: 0, rps: 0, seconds: 30 },
    decisions: [
      { at: 1000, from: 0, to: 1, reason: 'created: min_replicas 1' },
      {
        at: 1100,
        from: 1,
        to: 2,
        reason: '2.97 requests in flight over the last 30 s, target 4 per replica: more replicas'
      }
    ],
    error: null,
    ...overrides
  };
}

describe('an endpoint in words', () => {
  it('colours its state like the sessions: ready, queued, starting, failing', () => {
    expect(endpointTone(endpoint())).toBe('running');
    expect(endpointTone(endpoint({ state: 'queued' }))).toBe('queued');
    expect(endpointTone(endpoint({ state: 'starting' }))).toBe('starting');
    const failing = endpoint({ state: 'starting', error: 'replica 3f2a… died; next try in 10 s' });
    expect(endpointTone(failing)).toBe('failed');
    // Ready wins: it answers requests, whatever else goes wrong.
    expect(endpointTone({ ...failing, state: 'ready' })).toBe('running');
  });

  it('says how many replicas are ready of how many wanted, and the bounds', () => {
    expect(replicasText(endpoint({ ready_replicas: 2, desired: 3 }))).toBe(
      '2 ready of 3 wanted (min 1, max 4)'
    );
    const fixed = endpoint();
    fixed.spec.scaling = { ...fixed.spec.scaling, min_replicas: 2, max_replicas: 2 };
    expect(replicasText(fixed)).toBe('2 ready of 2 wanted (fixed at 2)');
  });

  it('rounds the load as people read it', () => {
    expect(loadText({ in_flight: 3.24, rps: 12.4, seconds: 30 })).toBe('3.2 in flight · 12 req/s');
    expect(loadText({ in_flight: 0, rps: 0.05, seconds: 3 })).toBe('0 in flight · 0.1 req/s');
    const scaling = endpoint().spec.scaling;
    expect(targetText(scaling)).toBe('target 4 in flight per replica over 30 s');
    expect(targetText({ ...scaling, metric: 'rps', target: 2.5, window: 5 })).toBe(
      'target 2.5 req/s per replica over 5 s'
    );
  });

  it('shows each replica: short id, status, its health and generation', () => {
    expect(replicaParts(replica(A, { generation: 2 }))).toEqual({
      id: 'aaaaaaaa',
      status: 'RUNNING',
      health: 'healthy',
      tone: 'running',
      generation: 'gen 2'
    });
    expect(replicaParts(replica(A, { draining: true }))).toMatchObject({
      health: 'draining',
      tone: 'queued'
    });
    const sick = replica(A, { healthy: false, problem: 'GET /health: 500 Internal Server Error' });
    expect(replicaParts(sick)).toMatchObject({
      health: 'GET /health: 500 Internal Server Error',
      tone: 'failed'
    });
    // A replica still queued or starting has no router record: no problem, no counts.
    const queued: ReplicaJSON = {
      session_id: B,
      status: 'PENDING',
      generation: 1,
      healthy: false,
      draining: false
    };
    expect(replicaParts(queued)).toMatchObject({
      status: 'PENDING',
      health: 'not ready',
      tone: 'starting'
    });
  });

  it('lists the newest decisions first, with their age and reason', () => {
    const many = endpoint();
    many.decisions = [0, 1, 2, 3].map(i => ({
      at: 1000 + i * 60,
      from: i,
      to: i + 1,
      reason: `reason ${i}`
    }));
    expect(recentDecisions(many, 1200)).toEqual([
      { at: 1180, text: '20 s ago · 3 → 4: reason 3' },
      { at: 1120, text: '1 min ago · 2 → 3: reason 2' },
      { at: 1060, text: '2 min ago · 1 → 2: reason 1' }
    ]);
    expect(recentDecisions(endpoint({ decisions: [] }), 1200)).toEqual([]);
  });

  it('knows a replica session by its meta', () => {
    expect(replicaOf({ meta: { endpoint: { id: 'e1', name: 'echo', generation: 2 } } })).toEqual({
      id: 'e1',
      name: 'echo',
      generation: 2
    });
    expect(replicaOf({ meta: {} })).toBeNull();
    expect(replicaOf({ meta: { endpoint: 'echo' } })).toBeNull();
    expect(replicaOf({})).toBeNull();
  });
});

describe('when the endpoints are read again', () => {
  it('never while every endpoint is steady and idle', () => {
    expect(isSteady(endpoint())).toBe(true);
    expect(refreshDelay([endpoint()])).toBeNull();
    expect(refreshDelay([])).toBeNull();
  });

  it('soon while one is on its way: starting, scaling, unhealthy, draining, rolling', () => {
    const starting = endpoint({
      state: 'starting',
      ready_replicas: 0,
      desired: 1,
      replicas: [replica(A, { healthy: false, status: 'PREPARING' })]
    });
    const scalingUp = endpoint({ ready_replicas: 2, desired: 3 });
    const unhealthy = endpoint({
      ready_replicas: 1,
      replicas: [replica(A), replica(B, { healthy: false, problem: 'refused' })]
    });
    const draining = endpoint({
      ready_replicas: 1,
      desired: 1,
      replicas: [replica(A), replica(B, { draining: true })]
    });
    // A rolling update: as many ready as wanted, plus one new one starting.
    const rolling = endpoint({
      replicas: [replica(A), replica(B), replica('c'.repeat(32), { healthy: false })]
    });
    for (const unsteady of [starting, scalingUp, unhealthy, draining, rolling]) {
      expect(isSteady(unsteady)).toBe(false);
      expect(refreshDelay([endpoint({ name: 'calm' }), unsteady])).toBe(UNSTEADY_MS);
    }
  });

  it('now and then while one serves requests (its load figures move)', () => {
    const busy = endpoint({ load: { in_flight: 1.5, rps: 3, seconds: 30 } });
    expect(refreshDelay([busy])).toBe(LOADED_MS);
    expect(refreshDelay([endpoint({ load: { in_flight: 0, rps: 0.2, seconds: 30 } })])).toBe(
      LOADED_MS
    );
    expect(LOADED_MS).toBeGreaterThan(UNSTEADY_MS);
  });
});

describe('the scale dialog', () => {
  it('sends whole-number bounds', () => {
    expect(buildScaling('2', ' 4 ')).toEqual({
      scaling: { min_replicas: 2, max_replicas: 4 },
      problems: {}
    });
    expect(buildScaling('3', '3').scaling).toEqual({ min_replicas: 3, max_replicas: 3 });
  });

  it('says what cannot be meant, next to its field', () => {
    expect(buildScaling('', '2')).toEqual({
      scaling: null,
      problems: { min_replicas: 'must be a whole number, got ""' }
    });
    expect(buildScaling('1.5', '0').problems).toEqual({
      min_replicas: 'must be a whole number, got "1.5"',
      max_replicas: 'must be at least 1, got 0'
    });
    expect(buildScaling('3', '2').problems).toEqual({
      max_replicas: 'must be at least the minimum (3), got 2'
    });
  });

  it('puts a server refusal next to the field it names', () => {
    const max = 'scaling.max_replicas: must be an integer from 1 to 32, got 40';
    expect(scaleRefusal(max, 'scaling.max_replicas')).toEqual({
      field: 'max_replicas',
      text: 'must be an integer from 1 to 32, got 40'
    });
    expect(scaleRefusal('scaling.min_replicas: must be …', 'scaling.min_replicas')).toEqual({
      field: 'min_replicas',
      text: 'must be …'
    });
    expect(scaleRefusal("no endpoint 'x' of alice", null)).toEqual({
      field: 'form',
      text: "no endpoint 'x' of alice"
    });
    // The body's field decides, not the message's words.
    expect(scaleRefusal(max, null)).toEqual({ field: 'form', text: max });
    expect(scaleRefusal('scaling: must be a mapping', 'scaling')).toEqual({
      field: 'form',
      text: 'scaling: must be a mapping'
    });
  });
});

describe('the state keeps the endpoints', () => {
  it('by name, a changed one replacing what it had, and tells the views', () => {
    const state = new BaiState();
    let changes = 0;
    state.changed.connect(() => changes++);
    state.loadEndpoints([endpoint({ name: 'zeta' }), endpoint({ name: 'echo' })]);
    expect(state.endpoints.map(e => e.name)).toEqual(['echo', 'zeta']);
    state.loadEndpoint(endpoint({ name: 'echo', desired: 3 }));
    expect(state.endpoints.map(e => [e.name, e.desired])).toEqual([
      ['echo', 3],
      ['zeta', 2]
    ]);
    expect(changes).toBe(2);
  });
});
