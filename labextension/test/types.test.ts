/**
 * The status sets: each status in one part of the lifecycle, as the server has them;
 * RESTARTING counts as active everywhere a view asks.
 */
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
  Status
} from '../src/types';
import { EVAL, session, TRAIN } from './fixtures';

describe('the status sets', () => {
  it('are the server’s lifecycle sets', () => {
    // bai_jupyter/model/status.py: STARTING, TERMINAL; the manager's ACTIVE.
    expect([...STARTING]).toEqual(['SCHEDULED', 'PREPARING', 'PULLING', 'PREPARED', 'CREATING']);
    expect([...ACTIVE]).toEqual(['RUNNING', 'RESTARTING']);
    expect([...ENDED]).toEqual(['TERMINATED', 'CANCELLED', 'ERROR']);
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
