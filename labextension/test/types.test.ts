/**
 * The status sets: each status in one part of the lifecycle, as the server has them.
 */
import {
  ACTIVE,
  ALL_STATUSES,
  ENDED,
  ENDING_OR_ENDED,
  isEnded,
  NOT_ENDED,
  STARTING,
  Status
} from '../src/types';

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
