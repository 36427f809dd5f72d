/**
 * The sidebar's queue sections: each resource group's pending sessions in the order
 * the scheduler's next pass tries them, the user's own with name, size and why they
 * wait, other users' as "another user's session".
 */
import { h, section } from './dom';
import { POOL_OWNER } from './pools';
import { BaiState, queueOrder } from './store';
import { label, resourcesText, whyPending } from './text';
import { QueueEntry, Status } from './types';

/** One section per resource group the user may see. */
export function queueSections(state: BaiState): HTMLElement[] {
  const queue = state.queue;
  const names = state.names();
  return Object.entries(queue?.resource_groups ?? {}).map(([group, info]) => {
    const entries = queueOrder(queue, group);
    const content = entries.length
      ? h(
          'ol',
          { class: 'bai-Queue', attrs: { 'aria-label': `Queue of resource group ${group}` } },
          ...entries.map(entry => queueEntry(entry, names))
        )
      : h('p', { class: 'bai-Empty' }, 'Nobody waits.');
    const title = `Queue · ${group} (${info.sequencer}, ${entries.length} pending)`;
    return section(title, `queue-${group}`, content);
  });
}

function queueEntry(entry: QueueEntry, names: Map<string, string>): HTMLElement {
  if (!entry.session_id) {
    return h(
      'li',
      { class: 'bai-QueueEntry bai-mod-other' },
      `#${entry.position} another user’s session`
    );
  }
  const why = whyPending(
    { status: Status.PENDING, pending_reason: entry.pending_reason ?? null },
    names
  );
  // A warm session waiting for room is the pool's, not a user's: its owner says so.
  const who = entry.mine ? '' : entry.owner === POOL_OWNER ? ' (warm pool)' : ` (${entry.owner})`;
  return h(
    'li',
    {
      class: `bai-QueueEntry${entry.mine ? ' bai-mod-mine' : ''}`,
      attrs: { 'data-session-id': entry.session_id }
    },
    h('strong', {}, `#${entry.position} ${label({ id: entry.session_id, name: entry.name })}`),
    who,
    ` · ${entry.cluster_size ?? 1} × ${resourcesText(entry.resources)}`,
    why ? h('div', { class: 'bai-QueueWhy' }, why) : null
  );
}
