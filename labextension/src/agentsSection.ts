/**
 * The sidebar's "Agents" section: per agent its backend, occupancy bars, warm sessions
 * by pool and the kernels on it; then, when any pool is configured, the warm pools:
 * size, warm and starting sessions, what they hold and may hold, claim counts, and
 * why a pool's request is refused.
 */
import { Child, h, section } from './dom';
import { BaiState } from './store';
import { resourcesText, usage } from './text';
import { AgentJSON } from './types';
import {
  agentKernelOwner,
  agentWarmText,
  POOL_COUNTS_HELP,
  poolBadge,
  poolCountsText,
  poolErrorText,
  poolFromText,
  poolHeldText,
  PoolJSON,
  poolMostHelp,
  poolSizeText,
  poolState,
  poolSummary,
  poolTone
} from './pools';
import { UsageHistory } from './usage';
import { agentUsage } from './usageViews';

export function agentsSection(state: BaiState, usage?: UsageHistory): HTMLElement {
  const agents = state.agents;
  const content = agents.length
    ? h(
        'ul',
        { class: 'bai-Agents', attrs: { 'aria-label': 'Agents' } },
        ...agents.map(a => agent(state, a, usage))
      )
    : h('p', { class: 'bai-Empty' }, 'No agents.');
  return section(`Agents (${agents.length})`, 'agents', content, poolsBlock(state.pools));
}

function agent(state: BaiState, agent: AgentJSON, live?: UsageHistory): HTMLElement {
  const bars = usage(agent).map(({ slot, used, text }) =>
    h(
      'div',
      { class: 'bai-Bar' },
      h('span', { class: 'bai-Bar-label' }, slot),
      h(
        'div',
        {
          class: 'bai-Bar-track',
          attrs: {
            role: 'meter',
            'aria-label': `${slot} occupied on ${agent.id}: ${text}`,
            'aria-valuemin': '0',
            'aria-valuemax': '100',
            'aria-valuenow': String(Math.round(used * 100))
          }
        },
        h('div', {
          // Any share held shows (a few pixels at least), not a fraction of a pixel.
          class: used > 0 ? 'bai-Bar-fill bai-mod-held' : 'bai-Bar-fill',
          attrs: { style: `width: ${(used * 100).toFixed(1)}%` }
        })
      ),
      h('span', { class: 'bai-Bar-text' }, text)
    )
  );
  const kernels = agent.kernels.map(kernel =>
    h(
      'li',
      { class: kernel.pool !== undefined ? 'bai-mod-warm' : undefined },
      `${agentKernelOwner(kernel, state.sessions)} · ${resourcesText(kernel.slots)}`
    )
  );
  const warm = agentWarmText(agent);
  const count = agent.kernels.length;
  return h(
    'li',
    { class: 'bai-Agent', attrs: { 'data-agent-id': agent.id } },
    h(
      'div',
      { class: 'bai-Agent-head' },
      h('strong', {}, agent.id),
      // The default agent is named after its backend: "docker", not "docker · docker".
      agent.backend === agent.id ? null : ` · ${agent.backend}`,
      ` · ${count} kernel${count === 1 ? '' : 's'}`,
      agent.schedulable ? null : ' · not schedulable'
    ),
    ...bars,
    live
      ? agentUsage(live, agent.id, Number(agent.capacity.cpu), Number(agent.capacity.mem))
      : null,
    warm
      ? h(
          'div',
          {
            class: 'bai-Agent-warm',
            attrs: { 'data-role': 'warm', title: 'warm sessions whose main1 runs here, by pool' }
          },
          warm
        )
      : null,
    kernels.length
      ? h(
          'ul',
          { class: 'bai-Agent-kernels', attrs: { 'aria-label': `Kernels on ${agent.id}` } },
          ...kernels
        )
      : null
  );
}

/** The warm pools, or nothing when none is configured. */
function poolsBlock(pools: PoolJSON[]): HTMLElement | null {
  if (!pools.length) {
    return null;
  }
  const headingId = 'bai-heading-pools';
  return h(
    'div',
    { class: 'bai-Pools', attrs: { role: 'group', 'aria-labelledby': headingId } },
    h('h4', { class: 'bai-Pools-title', attrs: { id: headingId } }, `Warm pools (${pools.length})`),
    h('ul', { class: 'bai-PoolList', attrs: { 'aria-label': 'Warm pools' } }, ...pools.map(pool))
  );
}

function pool(pool: PoolJSON): HTMLElement {
  const error = poolErrorText(pool);
  const counted = pool.claims + pool.hits + pool.misses + pool.given_way > 0;
  const lines: Child[] = [
    h(
      'div',
      { class: 'bai-Session-head' },
      h(
        'span',
        {
          class: `bai-Status bai-mod-${poolTone(pool)}`,
          attrs: { 'data-state': poolState(pool) }
        },
        poolBadge(pool)
      ),
      h('span', { class: 'bai-Session-name', attrs: { title: pool.name } }, pool.name)
    ),
    h('div', { class: 'bai-Session-detail', attrs: { 'data-role': 'from' } }, poolFromText(pool))
  ];
  if (error) {
    // Refused: it keeps nothing warm; why comes first, then only counts it ever had.
    lines.push(
      h('div', { class: 'bai-Error', attrs: { 'data-role': 'error', title: pool.error } }, error)
    );
  } else {
    lines.push(
      h('div', { class: 'bai-Session-detail', attrs: { 'data-role': 'size' } }, poolSizeText(pool)),
      h(
        'div',
        { class: 'bai-Session-detail', attrs: { 'data-role': 'held', title: poolMostHelp(pool) } },
        poolHeldText(pool)
      )
    );
  }
  if (!error || counted) {
    lines.push(
      h(
        'div',
        { class: 'bai-Pool-counts', attrs: { 'data-role': 'counts', title: POOL_COUNTS_HELP } },
        poolCountsText(pool)
      )
    );
  }
  return h(
    'li',
    {
      class: 'bai-Pool',
      attrs: {
        tabindex: '0',
        'data-pool': pool.name,
        'data-focus-key': `pool-${pool.name}`,
        'aria-label': poolSummary(pool)
      }
    },
    ...lines
  );
}
