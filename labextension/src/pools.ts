/**
 * Warm pools as people read them (`GET /bai/api/v1/pools`, and the agents' `warm`
 * counts): interactive sessions started ahead of demand, owned by no user until a
 * matching launch claims one. No DOM, no JupyterLab: unit-tested on their own.
 */
import { label, resourcesText } from './text';
import type { AgentJSON, Slots, SpecJSON } from './types';

/** The owner of every unclaimed warm session: no user (a name no login can take). */
export const POOL_OWNER = '(warm pool)';

/** One pool as the API gives it (docs/api.md, `pools`). */
export interface PoolJSON {
  name: string;
  /** Sessions it keeps warm. */
  size: number;
  /** What it is made of: a bai kernelspec, a template, or (both null) its own request. */
  kernelspec: string | null;
  template: string | null;
  /** Its sessions mount the notebooks' root (and serve launches from notebooks). */
  notebook: boolean;
  /** The most its sessions may hold in all; null: its size alone bounds it. */
  max_slots: Slots | null;
  /** Running and free to claim. */
  warm: number;
  /** On their way (queued or starting). */
  starting: number;
  /** Of an older setting of the pool, being ended (or, just after a start, not yet checked). */
  draining: number;
  /** What its live sessions hold in all. */
  held: Slots;
  /** Launches that matched it, served warm, started cold; warm sessions ended to make room. */
  claims: number;
  hits: number;
  misses: number;
  given_way: number;
  /** Its request after templates and defaults (absent while it is refused). */
  request?: Partial<SpecJSON>;
  resource_group?: string;
  /** Why its request is refused (then it keeps nothing warm). */
  error?: string;
  /** Its live sessions' ids (only for an admin). */
  sessions?: string[];
}

/** Where a pool stands: refused, full (`warm` = size), filling (some starting), short. */
export type PoolState = 'refused' | 'full' | 'filling' | 'short';

export function poolState(pool: PoolJSON): PoolState {
  if (pool.error) {
    return 'refused';
  }
  if (pool.warm >= pool.size) {
    return 'full';
  }
  return pool.starting > 0 ? 'filling' : 'short';
}

/** The colour family of a pool's state (the sessions' `bai-Status` tones). */
export function poolTone(pool: PoolJSON): string {
  return { refused: 'failed', full: 'running', filling: 'starting', short: 'queued' }[
    poolState(pool)
  ];
}

/** Its badge: `1/2 warm`, `refused`. */
export function poolBadge(pool: PoolJSON): string {
  return pool.error ? 'refused' : `${pool.warm}/${pool.size} warm`;
}

/** What it keeps warm: `kernelspec bai-py`, `template small`, `its own request`. */
export function poolSource(pool: Pick<PoolJSON, 'kernelspec' | 'template'>): string {
  if (pool.kernelspec) {
    return `kernelspec ${pool.kernelspec}`;
  }
  return pool.template ? `template ${pool.template}` : 'its own request';
}

/** `Size 2 · 1 warm · 1 starting`. */
export function poolSizeText(pool: PoolJSON): string {
  return `Size ${pool.size} · ${pool.warm} warm · ${pool.starting} starting`;
}

/**
 * What it keeps warm and what each of its sessions is: `From kernelspec bai-py:
 * 1 × 0.25 CPU · 192 MiB in default` (kernels × resources per kernel, resource group).
 */
export function poolFromText(pool: PoolJSON): string {
  const request = pool.request;
  if (!request) {
    return `From ${poolSource(pool)}`;
  }
  const size = request.cluster_size ?? 1;
  const group = pool.resource_group ?? request.resource_group;
  const each = `${size} × ${resourcesText(request.resources)}${group ? ` in ${group}` : ''}`;
  return `From ${poolSource(pool)}: ${each}`;
}

/**
 * The most a pool may hold: its `max_slots`, else its size times what each of its
 * sessions holds (null when neither is known: a refused pool without a limit).
 */
export function poolMost(pool: PoolJSON): Slots | null {
  if (pool.max_slots) {
    return pool.max_slots;
  }
  const request = pool.request;
  if (!request?.resources) {
    return null;
  }
  const times = pool.size * (request.cluster_size ?? 1);
  return Object.fromEntries(
    Object.entries(request.resources).map(([slot, amount]) => [
      slot,
      String(Number(amount) * times)
    ])
  );
}

/** `Holds 0.25 CPU · 192 MiB of at most 1 CPU · 1 GiB`. */
export function poolHeldText(pool: PoolJSON): string {
  return `Holds ${heldWords(pool)}`;
}

/** Where the "at most" comes from (the held line's tooltip). */
export function poolMostHelp(pool: PoolJSON): string {
  return pool.max_slots
    ? 'at most: the pool’s max_slots'
    : 'at most: its size × what each of its sessions holds (it sets no max_slots)';
}

function heldWords(pool: PoolJSON): string {
  const held = Object.keys(pool.held ?? {}).length ? resourcesText(pool.held) : 'nothing';
  const most = poolMost(pool);
  return most ? `${held} of at most ${resourcesText(most)}` : held;
}

/** Why a pool is refused: the server's own message, or `null`. */
export function poolErrorText(pool: Pick<PoolJSON, 'error'>): string | null {
  return pool.error || null;
}

/** `Claims 3 · hits 2 · misses 1 · given way 0`. */
export function poolCountsText(pool: PoolJSON): string {
  return (
    `Claims ${pool.claims} · hits ${pool.hits} · misses ${pool.misses}` +
    ` · given way ${pool.given_way}`
  );
}

/** What the counts mean (their tooltip). */
export const POOL_COUNTS_HELP =
  'claims: launches that matched the pool; hits: served by a warm session; misses: ' +
  'started cold (none warm, or someone waits, or a limit); given way: warm sessions ' +
  'ended to make room for a user’s session';

/** A pool in one sentence, for screen readers. */
export function poolSummary(pool: PoolJSON): string {
  const state = pool.error
    ? `refused: ${poolErrorText(pool)}`
    : `${pool.warm} of ${pool.size} warm, ${pool.starting} starting`;
  return (
    `warm pool ${pool.name}, ${poolSource(pool)}, ${state}; ` +
    `holds ${heldWords(pool)}; ` +
    `claims ${pool.claims}, hits ${pool.hits}, misses ${pool.misses}, ` +
    `given way ${pool.given_way}`
  );
}

/** An agent's warm sessions by pool: `warm: 2 · python, 1 · gpu` (null when none). */
export function agentWarmText(agent: Pick<AgentJSON, 'warm'>): string | null {
  const entries = Object.entries(agent.warm ?? {})
    .filter(([, count]) => count > 0)
    .sort(([a], [b]) => a.localeCompare(b));
  if (!entries.length) {
    return null;
  }
  return `warm: ${entries.map(([pool, count]) => `${count} · ${pool}`).join(', ')}`;
}

/** How many warm sessions an agent keeps, all pools together. */
export function agentWarmCount(agent: Pick<AgentJSON, 'warm'>): number {
  return Object.values(agent.warm ?? {}).reduce((sum, count) => sum + count, 0);
}

/**
 * Whose an agent's kernel is, in words: `main1 of train` (a session of the user's, or
 * one an admin sees), `main1 warm in pool python` (an unclaimed warm session's, which
 * is nobody's), or `a kernel of another user`.
 */
export function agentKernelOwner(
  kernel: AgentJSON['kernels'][number],
  sessions: ReadonlyMap<string, { id: string; name?: string | null }>
): string {
  if (kernel.pool !== undefined) {
    return `${kernel.hostname ?? 'a kernel'} warm in pool ${kernel.pool}`;
  }
  if (!kernel.session_id) {
    return 'a kernel of another user';
  }
  const session = sessions.get(kernel.session_id);
  return `${kernel.hostname} of ${label(session ?? { id: kernel.session_id })}`;
}

/** The pool a session of the user's was claimed from (its `status_data.warm_pool`), if any. */
export function claimedFrom(session: { status_data?: Record<string, unknown> }): string | null {
  const mark = session.status_data?.warm_pool;
  if (mark && typeof mark === 'object' && typeof (mark as { pool?: unknown }).pool === 'string') {
    return (mark as { pool: string }).pool;
  }
  return null;
}

/** Whether an event is an unclaimed warm session's (nobody's: no session of the user's). */
export function isWarmEvent(event: { owner: string }): boolean {
  return event.owner === POOL_OWNER;
}
