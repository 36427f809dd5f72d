/**
 * Warm pools in words: a pool's state, badge, size, what it holds and may hold, its
 * counts and why it is refused; an agent's warm sessions by pool, and its warm kernels
 * shown as the pool's. The records are shaped like the server's replies (docs/api.md).
 */
import {
  agentKernelOwner,
  agentWarmCount,
  agentWarmText,
  claimedFrom,
  isWarmEvent,
  POOL_OWNER,
  poolBadge,
  poolCountsText,
  poolErrorText,
  poolFromText,
  poolHeldText,
  PoolJSON,
  poolMost,
  poolSizeText,
  poolSource,
  poolState,
  poolSummary,
  poolTone
} from '../src/pools';
import { BaiState } from '../src/store';
import { AgentJSON } from '../src/types';

const MIB = 1024 ** 2;

function pool(overrides: Partial<PoolJSON> = {}): PoolJSON {
  return {
    name: 'python',
    size: 2,
    kernelspec: 'bai-warm',
    template: null,
    notebook: true,
    max_slots: null,
    warm: 2,
    starting: 0,
    draining: 0,
    held: { cpu: '0.500', mem: String(384 * MIB) },
    claims: 3,
    hits: 2,
    misses: 1,
    given_way: 0,
    request: {
      type: 'interactive',
      resources: { cpu: '0.25', mem: String(192 * MIB) },
      cluster_size: 1,
      resource_group: 'default'
    },
    resource_group: 'default',
    ...overrides
  };
}

function agent(overrides: Partial<AgentJSON> = {}): AgentJSON {
  return {
    id: 'docker',
    resource_group: 'default',
    backend: 'docker',
    schedulable: true,
    capacity: { cpu: '2' },
    occupied: { cpu: '0.5' },
    free: { cpu: '1.5' },
    kernels: [],
    warm: {},
    ...overrides
  };
}

describe('a warm pool in words', () => {
  it('says how full it is, with a colour', () => {
    expect([poolState(pool()), poolTone(pool()), poolBadge(pool())]).toEqual([
      'full',
      'running',
      '2/2 warm'
    ]);
    const filling = pool({ warm: 1, starting: 1 });
    expect([poolState(filling), poolTone(filling), poolBadge(filling)]).toEqual([
      'filling',
      'starting',
      '1/2 warm'
    ]);
    // Nothing starting and not full: no room now, or a user waits (it gives way).
    const short = pool({ warm: 0 });
    expect([poolState(short), poolTone(short)]).toEqual(['short', 'queued']);
    const refused = pool({ warm: 0, error: 'image: no image', request: undefined });
    expect([poolState(refused), poolTone(refused), poolBadge(refused)]).toEqual([
      'refused',
      'failed',
      'refused'
    ]);
  });

  it('names what it keeps warm and what each session is', () => {
    expect(poolSource(pool())).toBe('kernelspec bai-warm');
    expect(poolSource(pool({ kernelspec: null, template: 'small' }))).toBe('template small');
    expect(poolSource(pool({ kernelspec: null }))).toBe('its own request');
    expect(poolSizeText(pool({ warm: 1, starting: 1 }))).toBe('Size 2 · 1 warm · 1 starting');
    expect(poolFromText(pool())).toBe(
      'From kernelspec bai-warm: 1 × 0.25 CPU · 192 MiB in default'
    );
    const cluster = pool({
      kernelspec: null,
      template: 'mpi',
      request: { resources: { cpu: '1' }, cluster_size: 3 },
      resource_group: 'gpu'
    });
    expect(poolFromText(cluster)).toBe('From template mpi: 3 × 1 CPU in gpu');
    expect(poolFromText(pool({ kernelspec: null, request: undefined }))).toBe(
      'From its own request'
    );
  });

  it('says what it holds, and the most it may hold: its max_slots, else size × each', () => {
    expect(poolHeldText(pool())).toBe('Holds 0.5 CPU · 384 MiB of at most 0.5 CPU · 384 MiB');
    const cluster = pool({ size: 2, request: { resources: { cpu: '0.5' }, cluster_size: 3 } });
    expect(poolMost(cluster)).toEqual({ cpu: '3' });
    const limited = pool({ max_slots: { cpu: '1.000', mem: String(1024 * MIB) } });
    expect(poolHeldText(limited)).toBe('Holds 0.5 CPU · 384 MiB of at most 1 CPU · 1 GiB');
    expect(poolHeldText(pool({ held: {}, max_slots: { cpu: '1' } }))).toBe(
      'Holds nothing of at most 1 CPU'
    );
    // Refused and unlimited: nothing known to multiply.
    expect(poolMost(pool({ request: undefined }))).toBeNull();
    expect(poolHeldText(pool({ request: undefined, held: {} }))).toBe('Holds nothing');
  });

  it('says why it is refused in the server’s words', () => {
    const message = "resource group 'default': needs cpu=64 (largest agent: 2) on one agent";
    expect(poolErrorText(pool({ error: message }))).toBe(message);
    expect(poolErrorText(pool({ error: 'no template named big' }))).toBe('no template named big');
    expect(poolErrorText(pool())).toBeNull();
  });

  it('counts claims, hits, misses and sessions given way', () => {
    expect(poolCountsText(pool({ given_way: 4 }))).toBe(
      'Claims 3 · hits 2 · misses 1 · given way 4'
    );
  });

  it('sums it up in one sentence for screen readers, with why it is refused', () => {
    expect(poolSummary(pool({ warm: 1, starting: 1 }))).toBe(
      'warm pool python, kernelspec bai-warm, 1 of 2 warm, 1 starting; ' +
        'holds 0.5 CPU · 384 MiB of at most 0.5 CPU · 384 MiB; ' +
        'claims 3, hits 2, misses 1, given way 0'
    );
    const refused = pool({ error: 'no template named big', held: {} });
    expect(poolSummary(refused)).toContain('refused: no template named big;');
  });
});

describe('agents and their warm sessions', () => {
  it('lists an agent’s warm sessions by pool, none when it keeps none', () => {
    expect(agentWarmText(agent({ warm: { python: 2 } }))).toBe('warm: 2 · python');
    expect(agentWarmText(agent({ warm: { python: 2, big: 1 } }))).toBe('warm: 1 · big, 2 · python');
    expect(agentWarmText(agent({ warm: {} }))).toBeNull();
    expect(agentWarmText(agent({ warm: undefined }))).toBeNull(); // an older server
    expect(agentWarmCount(agent({ warm: { python: 2, big: 1 } }))).toBe(3);
  });

  it('shows a warm session’s kernels as the pool’s, not as another user’s', () => {
    const mine = 'a'.repeat(32);
    const sessions = new Map([[mine, { id: mine, name: 'train' }]]);
    // A user sees only the pool of a warm kernel; an admin its hostname too.
    expect(agentKernelOwner({ slots: {}, pool: 'python' }, sessions)).toBe(
      'a kernel warm in pool python'
    );
    const seen = { slots: {}, pool: 'python', session_id: 'w'.repeat(32), hostname: 'main1' };
    expect(agentKernelOwner(seen, sessions)).toBe('main1 warm in pool python');
    expect(agentKernelOwner({ slots: {}, session_id: mine, hostname: 'sub1' }, sessions)).toBe(
      'sub1 of train'
    );
    expect(agentKernelOwner({ slots: {} }, sessions)).toBe('a kernel of another user');
  });

  it('knows a claimed session’s pool and an unclaimed one’s events', () => {
    expect(claimedFrom({ status_data: { warm_pool: { pool: 'python', claimed_at: 1 } } })).toBe(
      'python'
    );
    expect(claimedFrom({ status_data: {} })).toBeNull();
    expect(isWarmEvent({ owner: POOL_OWNER })).toBe(true);
    expect(isWarmEvent({ owner: 'alice' })).toBe(false);
  });

  it('keeps the pools in the state and tells its views', () => {
    const state = new BaiState();
    let changes = 0;
    state.changed.connect(() => changes++);
    state.loadPools([pool()]);
    expect(state.pools.map(p => p.name)).toEqual(['python']);
    expect(changes).toBe(1);
  });
});
