/**
 * Words and numbers for people: why a session waits, links, resources, ages,
 * statuses' colours, agents' bars and idle countdowns.
 */
import {
  ageText,
  clusterHosts,
  durationText,
  idleLines,
  pageUrlOf,
  pullingText,
  resourcesText,
  resultText,
  statusTone,
  usage,
  whyPending,
  namedIds
} from '../src/text';
import { EVAL, session, TRAIN } from './fixtures';

describe('why a session waits, in words', () => {
  it('shows the server’s sentence as it is (the server says each reason once)', () => {
    const waiting = session(EVAL, {
      status_data: {
        scheduler: {
          retries: 4,
          failed_predicates: [
            { name: 'resources', msg: 'needs cpu=8 but the largest agent has 4 free' },
            { name: 'starts_at', msg: 'starts at 2026-11-25 10:00' }
          ],
          msg: 'needs cpu=8 but the largest agent has 4 free; starts at 2026-11-25 10:00'
        }
      },
      pending_reason: 'needs cpu=8 but the largest agent has 4 free; starts at 2026-11-25 10:00'
    });
    expect(whyPending(waiting)).toBe(
      'needs cpu=8 but the largest agent has 4 free; starts at 2026-11-25 10:00'
    );
  });

  it('names the sessions it waits for instead of their ids', () => {
    const waiting = session(EVAL, {
      pending_reason: `waiting for ${TRAIN} (RUNNING) to succeed; waiting behind ${'f'.repeat(32)} (head of the queue)`
    });
    const names = new Map([[TRAIN, 'train-1']]);
    expect(whyPending(waiting, names)).toBe(
      'waiting for session train-1 (RUNNING) to succeed; waiting behind session ffffffff (head of the queue)'
    );
  });

  it('is null while the scheduler has not said why, and for sessions that are not pending', () => {
    expect(whyPending(session(EVAL))).toBeNull();
    expect(whyPending(session(EVAL, { pending_reason: null }))).toBeNull();
    const running = session(EVAL, { status: 'RUNNING', pending_reason: 'x' });
    expect(whyPending(running)).toBeNull();
  });
});

describe('links the API gives', () => {
  it('open on the server the page came from, under its base URL', () => {
    const base = 'https://hub.example.org/user/alice/';
    expect(pageUrlOf('/user/alice/bai/endpoints/echo/', base)).toBe(
      'https://hub.example.org/user/alice/bai/endpoints/echo/'
    );
    // A shared manager's route, through the Hub's proxy on the same host.
    expect(pageUrlOf('/services/bai-jupyter/bai/endpoints/echo/', base)).toBe(
      'https://hub.example.org/services/bai-jupyter/bai/endpoints/echo/'
    );
    expect(pageUrlOf('https://models.example.org/bai/endpoints/echo/', base)).toBe(
      'https://models.example.org/bai/endpoints/echo/'
    );
  });
});

describe('numbers and words for people', () => {
  it('shows resources per kernel, hosts, results and ages', () => {
    expect(resourcesText({ cpu: '1', mem: '2147483648' })).toBe('1 CPU · 2 GiB');
    expect(resourcesText({ cpu: '0.5', mem: '536870912', 'cuda.device': '1' })).toBe(
      '0.5 CPU · 512 MiB · 1 GPU'
    );
    expect(resourcesText({})).toBe('no limits');
    expect(clusterHosts(session(TRAIN))).toBe('main1, sub1, sub2');
    expect(resultText({ result: 'FAILURE', exit_code: 3 })).toBe('FAILURE (exit code 3)');
    expect(resultText({ result: 'UNDEFINED', exit_code: null })).toBeNull();
    expect(ageText(1000, 1012)).toBe('12 s');
    expect(ageText(1000, 1000 + 3 * 3600)).toBe('3 h');
  });

  it('colours a status by where the session is and how it ended', () => {
    expect(statusTone({ status: 'PENDING', result: 'UNDEFINED' })).toBe('queued');
    expect(statusTone({ status: 'CREATING', result: 'UNDEFINED' })).toBe('starting');
    expect(statusTone({ status: 'RUNNING', result: 'UNDEFINED' })).toBe('running');
    expect(statusTone({ status: 'TERMINATED', result: 'SUCCESS' })).toBe('ok');
    expect(statusTone({ status: 'TERMINATED', result: 'FAILURE' })).toBe('failed');
    expect(statusTone({ status: 'CANCELLED', result: 'UNDEFINED' })).toBe('cancelled');
  });

  it('measures an agent’s occupied share per slot', () => {
    const bars = usage({
      id: 'local',
      resource_group: 'default',
      backend: 'docker',
      schedulable: true,
      capacity: { cpu: '4', mem: '8589934592' },
      occupied: { cpu: '3' },
      free: { cpu: '1', mem: '8589934592' },
      kernels: []
    });
    expect(bars).toEqual([
      { slot: 'cpu', used: 0.75, text: '3 CPU of 4 CPU' },
      { slot: 'mem', used: 0, text: '0 MiB of 8 GiB' }
    ]);
  });
});

describe('idle rules, counted down', () => {
  const idle = {
    idle_timeout: { timeout: 600, left: 598, source: 'resource_groups.default.idle' },
    session_lifetime: { timeout: 86400, left: 86000 },
    utilization: { cpu_percent: 5, window: 600, cpu_used: 1.5, left: 300 }
  };

  it('writes durations in their two largest units', () => {
    expect([0, 45, 60, 598, 3725, 90061].map(durationText)).toEqual([
      '0 s',
      '45 s',
      '1 min',
      '9 min 58 s',
      '1 h 2 min',
      '1 d 1 h'
    ]);
  });

  it('says when each rule ends a running session, soonest first, from the reply on', () => {
    const running = session(TRAIN, { status: 'RUNNING', idle });
    expect(idleLines(running, 1000, 1010)).toEqual([
      'CPU below 5% ends it in 4 min 50 s (now 1.5% over 10 min)',
      'Idle for 9 min 48 s more ends it (idle timeout 10 min)',
      'Ends in 23 h 53 min at most (lifetime 1 d)'
    ]);
    expect(idleLines(running, 1000, 5000)).toContain(
      'CPU below 5% ends it in 0 s (now 1.5% over 10 min)'
    );
  });

  it('shows nothing without rules, or once the session has ended', () => {
    expect(idleLines(session(TRAIN, { status: 'RUNNING' }), 1000, 1000)).toEqual([]);
    expect(idleLines(session(TRAIN, { status: 'TERMINATED', idle }), 1000, 1000)).toEqual([]);
  });
});

describe('an image fetch, in words', () => {
  it('says each agent’s phase: copying with its share, then loading with none', () => {
    const pulling = session(EVAL, {
      status: 'PULLING',
      status_data: {
        pulling: {
          image: 'team/train:3',
          agents: {
            node2: { from: 'node1', phase: 'copying', done: 43, total: 100, progress: 0.43 },
            node3: { from: 'node1', phase: 'loading', done: 99, total: 100, progress: 0.999 }
          }
        }
      }
    });
    expect(pullingText(pulling)).toBe(
      'image team/train:3: node2: copying from node1 43%, node3: loading into the engine'
    );
    expect(pullingText(session(EVAL, { status: 'RUNNING', status_data: {} }))).toBeNull();
  });
});

describe('namedIds', () => {
  it('reads a session id in a message by name, else by short id', () => {
    const named = 'a'.repeat(32);
    const other = 'b'.repeat(32);
    const names = new Map([[named, 'train']]);
    expect(namedIds(`session ${named} has ended; ${other} too`, names)).toBe(
      'session train has ended; bbbbbbbb too'
    );
  });
});
