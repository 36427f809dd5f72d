/**
 * The state store: events folded into state, lists, the queue, the Jupyter
 * kernels' sessions, idle countdowns, and its `changed` signal.
 */
import { BaiState, queueOrder, queuePositions } from '../src/store';
import { whyPending } from '../src/text';
import type { QueueJSON } from '../src/types';
import { event, EVAL, session, TRAIN } from './fixtures';

describe('folding events into the state', () => {
  it('applies an event’s status and kernel states to the session it knows', () => {
    const state = new BaiState();
    state.loadSessions([session(TRAIN)]);
    let changes = 0;
    state.changed.connect(() => changes++);
    const folded = state.fold(
      event(TRAIN, 'PREPARING', { main1: 'PREPARING', sub1: 'PREPARING', sub2: 'SCHEDULED' })
    );
    expect(folded).toEqual({ unknown: false, statusChanged: true });
    const after = state.sessions.get(TRAIN)!;
    expect(after.status).toBe('PREPARING');
    expect(after.kernels.map(k => k.status)).toEqual(['PREPARING', 'PREPARING', 'SCHEDULED']);
    expect(changes).toBe(1);
  });

  it('drops the why-pending record once the session leaves the queue', () => {
    const state = new BaiState();
    const pending = session(TRAIN, {
      status_data: {
        scheduler: { retries: 2, msg: 'needs cpu=8 but the largest agent has 4 free' }
      },
      pending_reason: 'needs cpu=8 but the largest agent has 4 free'
    });
    state.loadSessions([pending]);
    expect(whyPending(state.sessions.get(TRAIN)!)).toContain('needs cpu=8');
    state.fold(event(TRAIN, 'SCHEDULED', { main1: 'SCHEDULED' }));
    expect(state.sessions.get(TRAIN)!.status_data.scheduler).toBeUndefined();
    expect(state.sessions.get(TRAIN)!.pending_reason).toBeNull();
    expect(whyPending(state.sessions.get(TRAIN)!)).toBeNull();
  });

  it('reports an unknown session so that the live view reads it', () => {
    const state = new BaiState();
    expect(state.fold(event(EVAL, 'PENDING', {})).unknown).toBe(true);
    expect(state.sessions.size).toBe(0);
  });

  it('says when a status did not change (only kernels moved)', () => {
    const state = new BaiState();
    state.loadSessions([session(TRAIN, { status: 'RUNNING' })]);
    expect(state.fold(event(TRAIN, 'RUNNING', { main1: 'RUNNING' })).statusChanged).toBe(false);
  });

  it('lists sessions newest first, ended ones only when asked', () => {
    const state = new BaiState();
    state.loadSessions([
      session(TRAIN, { created_at: 10, status: 'TERMINATED' }),
      session(EVAL, { created_at: 20 }),
      session('c'.repeat(32), { created_at: 30, status: 'RUNNING' })
    ]);
    expect(state.list().map(s => s.created_at)).toEqual([30, 20, 10]);
    expect(state.list(false).map(s => s.created_at)).toEqual([30, 20]);
  });

  it('finds the session of a Jupyter kernel by kernel id, the newest after restarts', () => {
    const state = new BaiState();
    state.loadSessions([
      session(TRAIN, { created_at: 1, status: 'TERMINATED', meta: { jupyter_kernel_id: 'k1' } }),
      session(EVAL, { created_at: 2, status: 'RUNNING', meta: { jupyter_kernel_id: 'k1' } })
    ]);
    expect(state.sessionOfKernel({ id: 'k1', spec: 'bai-python' })?.id).toBe(EVAL);
    expect(
      state.sessionOfKernel({ id: 'k2', spec: `bai-session-${TRAIN.slice(0, 12)}` })
    ).toBeUndefined();
    expect(state.sessionOfKernel({ id: 'k2', spec: `bai-session-${EVAL.slice(0, 12)}` })?.id).toBe(
      EVAL
    );
  });
});

describe('the queue', () => {
  const queue: QueueJSON = {
    resource_groups: {
      default: {
        sequencer: 'fifo',
        selector: 'concentrated',
        pending: 3,
        queue: [
          { position: 3, mine: true, session_id: EVAL, name: 'eval' },
          { position: 1, mine: false },
          { position: 2, mine: true, session_id: TRAIN, name: 'train-1' }
        ]
      },
      gpu: { sequencer: 'drf', selector: 'dispersed', pending: 0, queue: [] }
    }
  };

  it('is shown in the order the scheduler tries it', () => {
    expect(queueOrder(queue, 'default').map(e => e.position)).toEqual([1, 2, 3]);
    expect(queueOrder(queue, 'gpu')).toEqual([]);
    expect(queueOrder(null, 'default')).toEqual([]);
  });

  it('gives each of my pending sessions its place and the queue’s length', () => {
    const places = queuePositions(queue);
    expect(places.get(TRAIN)).toEqual({ group: 'default', position: 2, of: 3 });
    expect(places.get(EVAL)).toEqual({ group: 'default', position: 3, of: 3 });
    expect(places.size).toBe(2); // another user's entry has no id
  });

  it('names sessions from the queue too', () => {
    const state = new BaiState();
    state.loadQueue(queue);
    expect(state.names().get(TRAIN)).toBe('train-1');
    expect(state.position(EVAL)).toEqual({ group: 'default', position: 3, of: 3 });
  });
});

describe('idle rules, counted down', () => {
  const idle = {
    idle_timeout: { timeout: 600, left: 598, source: 'resource_groups.default.idle' },
    session_lifetime: { timeout: 86400, left: 86000 },
    utilization: { cpu_percent: 5, window: 600, cpu_used: 1.5, left: 300 }
  };

  it('counts down only while a running session has rules', () => {
    const state = new BaiState();
    state.loadSessions([session(TRAIN, { status: 'RUNNING' })], 1000);
    expect(state.counting()).toBe(false);
    state.loadSession(session(EVAL, { status: 'RUNNING', idle }), 1000);
    expect(state.counting()).toBe(true);
    expect(state.idleOf(state.sessions.get(EVAL)!, 1100)[0]).toBe(
      'CPU below 5% ends it in 3 min 20 s (now 1.5% over 10 min)'
    );
  });
});
