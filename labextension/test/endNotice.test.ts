/**
 * What a notebook says of the bai sessions under its kernel: the server's words for a
 * session ended on purpose; which new session a died one's kernel restarted on.
 */
import { BaiState } from '../src/store';
import { EVAL, session, TRAIN } from './fixtures';

const KERNEL = { id: 'k1', spec: 'bai-python' };
const ENDED_NOTICE =
  'bai session a was ended (user-requested) by alice; its kernel does not restart: start a new one';

describe('BaiState.endNotice', () => {
  it('says nothing while the session runs', () => {
    const state = new BaiState();
    state.loadSessions([session(TRAIN, { status: 'RUNNING', meta: { jupyter_kernel_id: 'k1' } })]);
    expect(state.endNotice(KERNEL)).toBeNull();
  });

  it("gives the server's words for a session ended on purpose", () => {
    const state = new BaiState();
    const ended = session(TRAIN, {
      status: 'TERMINATED',
      status_info: 'user-requested',
      end_notice: ENDED_NOTICE,
      meta: { jupyter_kernel_id: 'k1' }
    });
    state.loadSessions([ended]);
    expect(state.endNotice(KERNEL)).toBe(ENDED_NOTICE);
    // An attached notebook's kernel: by its attach kernelspec.
    const attached = { ...ended, meta: {} };
    state.loadSessions([attached]);
    expect(state.endNotice({ id: 'k9', spec: `bai-session-${TRAIN.slice(0, 12)}` })).toBe(
      ENDED_NOTICE
    );
  });

  it('says which session a died one restarted on', () => {
    const state = new BaiState();
    const meta = { jupyter_kernel_id: 'k1' };
    const died = session(TRAIN, {
      created_at: 1,
      status: 'ERROR',
      status_info: 'kernel-died',
      meta
    });
    const fresh = session(EVAL, { created_at: 2, status: 'PENDING', meta });
    state.loadSessions([died, fresh]);
    const tail = `on a new session, ${EVAL.slice(0, 8)}; what the old one held is gone`;
    expect(state.endNotice(KERNEL)).toBe(
      `bai session ${TRAIN.slice(0, 8)} ended (kernel-died): its kernel is restarting ${tail}`
    );
    state.loadSession({ ...fresh, status: 'RUNNING' });
    expect(state.endNotice(KERNEL)).toBe(
      `bai session ${TRAIN.slice(0, 8)} ended (kernel-died): its kernel restarted ${tail}`
    );
  });
});
