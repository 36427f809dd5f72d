/**
 * The model under the views: events folded into state, queue order, the
 * why-pending wording, the create form's request and where server messages go.
 * The records are shaped like the server's replies (docs/api.md).
 */
import {
  ageText,
  BaiState,
  buildRequest,
  clusterHosts,
  durationText,
  EMPTY_FORM,
  fieldOfMessage,
  idleLines,
  messageText,
  pageUrlOf,
  queueOrder,
  queuePositions,
  resourcesText,
  resultText,
  SchedulerJSON,
  SessionEvent,
  SessionJSON,
  statusTone,
  usage,
  whyPending
} from '../src/model';

const TRAIN = 'a'.repeat(32);
const EVAL = 'b'.repeat(32);

function session(id: string, overrides: Partial<SessionJSON> = {}): SessionJSON {
  return {
    id,
    name: null,
    owner: 'alice',
    created_at: 1000,
    status: 'PENDING',
    status_info: null,
    status_data: {},
    result: 'UNDEFINED',
    exit_code: null,
    spec: {
      image: 'bai-jupyter/python:3.11',
      name: null,
      type: 'interactive',
      resources: { cpu: '1', mem: '2147483648' },
      cluster_size: 3,
      cluster_mode: 'single-node',
      resource_group: 'default',
      priority: 10,
      depends_on: [],
      startup_command: null,
      batch_timeout: null,
      service_ports: []
    },
    kernels: ['main1', 'sub1', 'sub2'].map((hostname, i) => ({
      id: `${id.slice(0, 30)}k${i}`,
      hostname,
      role: i ? 'sub' : 'main',
      slots: { cpu: '1', mem: '2147483648' },
      status: 'PENDING',
      status_info: null,
      agent_id: null
    })),
    meta: {},
    services: [],
    ...overrides
  };
}

function event(id: string, status: string, kernels: Record<string, string>): SessionEvent {
  return {
    type: 'session',
    session_id: id,
    name: null,
    owner: 'alice',
    status,
    status_info: null,
    kernels,
    at: 2000
  };
}

describe('folding events into the state', () => {
  it('applies an event’s status and kernel states to the session it knows', () => {
    const state = new BaiState();
    state.loadSessions([session(TRAIN)]);
    let changes = 0;
    state.onChange(() => changes++);
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
      }
    });
    state.loadSessions([pending]);
    expect(whyPending(state.sessions.get(TRAIN)!)).toContain('needs cpu=8');
    state.fold(event(TRAIN, 'SCHEDULED', { main1: 'SCHEDULED' }));
    expect(state.sessions.get(TRAIN)!.status_data.scheduler).toBeUndefined();
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
  const scheduler: SchedulerJSON = {
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
    expect(queueOrder(scheduler, 'default').map(e => e.position)).toEqual([1, 2, 3]);
    expect(queueOrder(scheduler, 'gpu')).toEqual([]);
    expect(queueOrder(null, 'default')).toEqual([]);
  });

  it('gives each of my pending sessions its place and the queue’s length', () => {
    const places = queuePositions(scheduler);
    expect(places.get(TRAIN)).toEqual({ group: 'default', position: 2, of: 3 });
    expect(places.get(EVAL)).toEqual({ group: 'default', position: 3, of: 3 });
    expect(places.size).toBe(2); // another user's entry has no id
  });

  it('names sessions from the queue too', () => {
    const state = new BaiState();
    state.loadScheduler(scheduler);
    expect(state.names().get(TRAIN)).toBe('train-1');
    expect(state.position(EVAL)).toEqual({ group: 'default', position: 3, of: 3 });
  });
});

describe('why a session waits, in words', () => {
  it('joins the failed predicates and the scheduler’s message, once each', () => {
    const waiting = session(EVAL, {
      status_data: {
        scheduler: {
          retries: 4,
          failed_predicates: [
            { name: 'resources', msg: 'needs cpu=8 but the largest agent has 4 free' },
            { name: 'starts_at', msg: 'starts at 2026-11-25 10:00' }
          ],
          msg: 'needs cpu=8 but the largest agent has 4 free'
        }
      }
    });
    expect(whyPending(waiting)).toBe(
      'needs cpu=8 but the largest agent has 4 free; starts at 2026-11-25 10:00'
    );
  });

  it('names the sessions it waits for instead of their ids', () => {
    const waiting = session(EVAL, {
      status_data: {
        scheduler: {
          failed_predicates: [
            { name: 'dependencies', msg: `waiting for ${TRAIN} (RUNNING) to succeed` }
          ],
          msg: `waiting behind ${'f'.repeat(32)} (head of the queue)`
        }
      }
    });
    const names = new Map([[TRAIN, 'train-1']]);
    expect(whyPending(waiting, names)).toBe(
      'waiting for session train-1 (RUNNING) to succeed; waiting behind session ffffffff (head of the queue)'
    );
  });

  it('is null while the scheduler has not looked, and for sessions that are not pending', () => {
    expect(whyPending(session(EVAL))).toBeNull();
    const running = session(EVAL, { status: 'RUNNING', status_data: { scheduler: { msg: 'x' } } });
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

describe('the create form', () => {
  it('sends only what the user set', () => {
    expect(buildRequest(EMPTY_FORM)).toEqual({
      request: { type: 'interactive', cluster_size: 1, cluster_mode: 'single-node' },
      problems: {}
    });
    const { request, problems } = buildRequest({
      ...EMPTY_FORM,
      template: 'gpu-box',
      name: ' train ',
      type: 'batch',
      cluster_size: '2',
      cpu: '2',
      mem: '4g',
      mounts: 'data, models',
      env: 'A=1\nB=x=y\n',
      startup_command: 'python train.py',
      batch_timeout: '600',
      depends_on: 'prep,\nclean',
      priority: '20'
    });
    expect(problems).toEqual({});
    expect(request).toEqual({
      type: 'batch',
      template: 'gpu-box',
      name: 'train',
      cluster_mode: 'single-node',
      cluster_size: 2,
      priority: 20,
      batch_timeout: 600,
      resources: { cpu: '2', mem: '4g' },
      mounts: ['data', 'models'],
      env: { A: '1', B: 'x=y' },
      startup_command: 'python train.py',
      depends_on: ['prep', 'clean']
    });
  });

  it('leaves batch fields out of an interactive request', () => {
    const { request } = buildRequest({ ...EMPTY_FORM, startup_command: 'x', batch_timeout: '5' });
    expect(request.startup_command).toBeUndefined();
    expect(request.batch_timeout).toBeUndefined();
  });

  it('asks a system session for its data folders, not for a cluster', () => {
    const { request } = buildRequest({
      ...EMPTY_FORM,
      type: 'system',
      cluster_size: '3',
      cluster_mode: 'multi-node',
      mounts: 'data, results'
    });
    expect(request).toEqual({ type: 'system', mounts: ['data', 'results'] });
  });

  it('says which field cannot even be sent', () => {
    const { problems } = buildRequest({ ...EMPTY_FORM, env: 'A=1\noops', cluster_size: 'two' });
    expect(problems.env).toBe('line 2: write NAME=value, got "oops"');
    expect(problems.cluster_size).toBe('must be a number, got "two"');
  });
});

describe('server messages next to their fields', () => {
  it.each([
    ["resources.cpu: amount must not be negative, got '-1'", 'resources'],
    ['resources.cuda.device: unknown slot', 'resources'],
    ['env.FOO: must be a string', 'env'],
    ['mounts: /: contains /dev, which is never mountable', 'mounts'],
    ["depends_on: alice has no session 'prep'", 'depends_on'],
    ["image: nope:1 is on no agent of resource group 'default'; pull or build it", 'image'],
    ["resource group 'default': needs cpu=64 (largest agent: 4) on one agent", 'resources'],
    ["alice already has a live session named 'train' (abc); pick another name", 'name'],
    ["no template named 'gpu'", 'template'],
    ['the session manager is not started', 'form']
  ])('%s → %s', (message, field) => {
    expect(fieldOfMessage(message)).toBe(field);
  });

  it('drops the field path the form already shows', () => {
    expect(messageText("resources.cpu: amount must not be negative, got '-1'")).toBe(
      "amount must not be negative, got '-1'"
    );
    expect(messageText('no path here')).toBe('no path here');
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
