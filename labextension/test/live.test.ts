/**
 * How the live state keeps the endpoints current: replica sessions' events make it
 * read them again, an unsteady endpoint is followed while the sidebar shows it, and
 * nothing is read while nothing changes. A stand-in for the server's API counts the
 * reads; time is jest's.
 */
import { ApiError, type BaiClient, type EventHandlers } from '../src/api';
import { EndpointJSON, UNSTEADY_MS } from '../src/endpoints';
import { LiveState } from '../src/live';
import { SessionEvent, SessionJSON } from '../src/types';
import { POOL_OWNER, PoolJSON } from '../src/pools';

const REPLICA = 'r'.repeat(32);
const OTHER = 'o'.repeat(32);

function sessionOf(id: string, meta: Record<string, unknown>): SessionJSON {
  return {
    id,
    name: null,
    owner: 'alice',
    created_at: 1000,
    status: 'RUNNING',
    status_info: null,
    status_data: {},
    pending_reason: null,
    result: 'UNDEFINED',
    exit_code: null,
    spec: {
      image: null,
      name: null,
      type: 'inference',
      resources: {},
      cluster_size: 1,
      cluster_mode: 'single-node',
      resource_group: 'default',
      priority: 10,
      depends_on: [],
      startup_command: null,
      batch_timeout: null,
      service_ports: []
    },
    kernels: [],
    meta,
    services: []
  };
}

function endpointOf(ready: number, desired: number): EndpointJSON {
  return {
    id: 'e1',
    name: 'echo',
    owner: 'alice',
    created_at: 1000,
    url: '/bai/endpoints/echo/',
    state: ready ? 'ready' : 'starting',
    ready_replicas: ready,
    desired,
    generation: 1,
    spec: {
      replica: {},
      service: 'model',
      health_path: '/health',
      health_interval: 1,
      scaling: { min_replicas: 1, max_replicas: 2, metric: 'inflight', target: 4, window: 30 }
    },
    replicas: Array.from({ length: desired }, (_, i) => ({
      session_id: i ? OTHER : REPLICA,
      status: 'RUNNING',
      generation: 1,
      healthy: i < ready,
      draining: false
    })),
    load: { in_flight: 0, rps: 0, seconds: 30 },
    decisions: [],
    error: null
  };
}

/** The API as far as the live state uses it; `endpoint` is what the next read answers. */
class FakeClient {
  endpointReads = 0;
  sessionReads = 0;
  poolReads = 0;
  /** What the next read of the pools answers (`null`: a server without them, 404). */
  poolsList: PoolJSON[] | null = [];
  endpoint = endpointOf(1, 1);
  handlers: EventHandlers | null = null;
  readonly sessionsList = [
    sessionOf(REPLICA, { endpoint: { id: 'e1', name: 'echo', generation: 1 } }),
    sessionOf(OTHER, {})
  ];

  async endpoints(): Promise<EndpointJSON[]> {
    this.endpointReads++;
    return [this.endpoint];
  }
  async sessions(): Promise<SessionJSON[]> {
    this.sessionReads++;
    return this.sessionsList;
  }
  async session(id: string): Promise<SessionJSON> {
    this.sessionReads++;
    return this.sessionsList.find(s => s.id === id)!;
  }
  async pools(): Promise<PoolJSON[]> {
    this.poolReads++;
    if (this.poolsList === null) {
      throw new ApiError(404, 'not-found', 'no such page');
    }
    return this.poolsList;
  }
  async queue() {
    return { resource_groups: {} };
  }
  async agents() {
    return [];
  }
  events(handlers: EventHandlers): Promise<void> {
    this.handlers = handlers;
    return new Promise(() => undefined);
  }
}

function event(id: string, status: string, owner = 'alice'): SessionEvent {
  return {
    type: 'session',
    session_id: id,
    name: null,
    owner,
    status,
    status_info: null,
    kernels: {},
    at: 2000
  };
}

async function started(): Promise<{ client: FakeClient; live: LiveState }> {
  const client = new FakeClient();
  const live = new LiveState(client as unknown as BaiClient);
  live.start();
  client.handlers!.connected();
  await jest.advanceTimersByTimeAsync(100);
  return { client, live };
}

beforeEach(() => jest.useFakeTimers());
afterEach(() => jest.useRealTimers());

it('reads the endpoints once at (re)connection and then not while nothing changes', async () => {
  const { client, live } = await started();
  live.watchEndpoints(true);
  await jest.advanceTimersByTimeAsync(100);
  expect(live.state.endpoints.map(e => e.name)).toEqual(['echo']);
  const reads = client.endpointReads;
  await jest.advanceTimersByTimeAsync(120_000);
  expect(client.endpointReads).toBe(reads);
  live.dispose();
});

it('follows an unsteady endpoint every few seconds until it is steady, while shown', async () => {
  const { client, live } = await started();
  client.endpoint = endpointOf(1, 2); // a second replica starting
  live.watchEndpoints(true);
  await jest.advanceTimersByTimeAsync(100);
  const first = client.endpointReads;
  await jest.advanceTimersByTimeAsync(3 * UNSTEADY_MS);
  expect(client.endpointReads).toBe(first + 3);
  client.endpoint = endpointOf(2, 2); // it passed its health check: no event says so
  await jest.advanceTimersByTimeAsync(UNSTEADY_MS);
  expect(live.state.endpoints[0].ready_replicas).toBe(2);
  const settled = client.endpointReads;
  await jest.advanceTimersByTimeAsync(60_000);
  expect(client.endpointReads).toBe(settled);
  live.dispose();
});

it('does not follow endpoints nobody looks at', async () => {
  const { client, live } = await started();
  client.endpoint = endpointOf(0, 1);
  live.watchEndpoints(true);
  await jest.advanceTimersByTimeAsync(100);
  live.watchEndpoints(false);
  await jest.advanceTimersByTimeAsync(UNSTEADY_MS + 100); // the read already due
  const reads = client.endpointReads;
  await jest.advanceTimersByTimeAsync(60_000);
  expect(client.endpointReads).toBe(reads);
  live.watchEndpoints(true); // shown again: read at once, then followed
  await jest.advanceTimersByTimeAsync(100);
  expect(client.endpointReads).toBe(reads + 1);
  live.dispose();
});

it('reads them again after a replica session’s events, once for a burst', async () => {
  const { client, live } = await started();
  const reads = client.endpointReads;
  client.handlers!.event(event(OTHER, 'TERMINATING')); // not a replica
  await jest.advanceTimersByTimeAsync(1000);
  expect(client.endpointReads).toBe(reads);
  client.handlers!.event(event(REPLICA, 'TERMINATING'));
  client.handlers!.event(event(REPLICA, 'TERMINATED'));
  await jest.advanceTimersByTimeAsync(1000);
  expect(client.endpointReads).toBe(reads + 1);
  live.dispose();
});

const WARM = 'w'.repeat(32);

function poolOf(warm: number, starting: number, claims = 0): PoolJSON {
  return {
    name: 'python',
    size: 1,
    kernelspec: 'bai-warm',
    template: null,
    notebook: true,
    max_slots: null,
    warm,
    starting,
    draining: 0,
    held: {},
    claims,
    hits: claims,
    misses: 0,
    given_way: 0
  };
}

it('reads the warm pools at (re)connection and after status changes, never on a timer', async () => {
  const client = new FakeClient();
  client.poolsList = [poolOf(0, 1)];
  const live = new LiveState(client as unknown as BaiClient);
  live.start();
  client.handlers!.connected();
  await jest.advanceTimersByTimeAsync(100);
  expect(live.state.pools).toEqual([poolOf(0, 1)]);
  const reads = client.poolReads;
  await jest.advanceTimersByTimeAsync(120_000);
  expect(client.poolReads).toBe(reads);
  // A claim: the warm session becomes one of the user's (an event of theirs, new to them).
  client.poolsList = [poolOf(0, 1, 1)];
  client.handlers!.event(event(WARM, 'RUNNING'));
  await jest.advanceTimersByTimeAsync(100);
  expect(client.poolReads).toBe(reads + 1);
  expect(live.state.pools[0].claims).toBe(1);
  live.dispose();
});

it('follows an unclaimed warm session’s events in the pools, not in My sessions', async () => {
  const { client, live } = await started();
  const sessionReads = client.sessionReads;
  const poolReads = client.poolReads;
  client.poolsList = [poolOf(1, 0)];
  // The refill starting and running: a burst, one read of the queue, agents and pools each.
  client.handlers!.event(event(WARM, 'PENDING', POOL_OWNER));
  client.handlers!.event(event(WARM, 'RUNNING', POOL_OWNER));
  await jest.advanceTimersByTimeAsync(100);
  expect(client.poolReads).toBe(poolReads + 1);
  expect(live.state.pools[0].warm).toBe(1);
  expect(client.sessionReads).toBe(sessionReads); // nobody's session: nothing to re-read
  expect(live.state.sessions.has(WARM)).toBe(false);
  live.dispose();
});

it('shows no pools for a server without them, and the rest as usual', async () => {
  const client = new FakeClient();
  client.poolsList = null; // 404
  const live = new LiveState(client as unknown as BaiClient);
  live.start();
  client.handlers!.connected();
  await jest.advanceTimersByTimeAsync(100);
  expect(live.state.pools).toEqual([]);
  expect(live.state.offline).toBeNull();
  expect(live.state.sessions.size).toBe(2);
  live.dispose();
});

it('says which session ended, as its event comes (the plugin reads the kernelspecs again)', async () => {
  const { client, live } = await started();
  const ended: string[] = [];
  live.ended.connect((_, id) => ended.push(id));
  client.handlers!.event(event(OTHER, 'RUNNING'));
  client.handlers!.event(event(OTHER, 'TERMINATING'));
  expect(ended).toEqual([]);
  client.handlers!.event(event(OTHER, 'TERMINATED'));
  await jest.advanceTimersByTimeAsync(100);
  expect(ended).toEqual([OTHER]);
  live.dispose();
});

it('reads a waiting session again when a session it depends on changes status', async () => {
  const { client, live } = await started();
  const waiting = sessionOf('w'.repeat(32), {});
  waiting.status = 'PENDING';
  waiting.spec.depends_on = [OTHER];
  waiting.pending_reason = 'waiting for session other (CREATING) to succeed';
  client.sessionsList.push(waiting);
  live.state.loadSession({ ...waiting });
  client.sessionsList[2] = {
    ...waiting,
    pending_reason: 'waiting for session other (RUNNING) to succeed'
  };
  client.handlers!.event(event(OTHER, 'TERMINATING'));
  await jest.advanceTimersByTimeAsync(1000);
  expect(live.state.sessions.get(waiting.id)!.pending_reason).toBe(
    'waiting for session other (RUNNING) to succeed'
  );
  live.dispose();
});
