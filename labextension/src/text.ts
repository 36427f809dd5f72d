/**
 * Words and numbers for people: statuses, resources, ages and durations, idle
 * countdowns, why a session waits, results, agents' bars. Pure functions of API
 * records; no DOM.
 */
import {
  ACTIVE,
  STARTING,
  Status,
  type AgentJSON,
  type IdleJSON,
  type IdleRuleJSON,
  type SessionJSON,
  type Slots
} from './types';

const GIB = 1024 ** 3;
const MIB = 1024 ** 2;

/**
 * The colour family of a status (a CSS class suffix): queued, starting, running,
 * ending, and how it ended (ok, failed, cancelled).
 */
export function statusTone(session: Pick<SessionJSON, 'status' | 'result'>): string {
  const { status, result } = session;
  if (status === Status.PENDING) {
    return 'queued';
  }
  // A restarting session is active (ACTIVE), but drawn like one starting: its
  // kernel comes back.
  if (STARTING.has(status) || status === Status.RESTARTING) {
    return 'starting';
  }
  if (status === Status.RUNNING) {
    return 'running';
  }
  if (status === Status.TERMINATING) {
    return 'ending';
  }
  if (status === Status.ERROR || result === 'FAILURE') {
    return 'failed';
  }
  if (status === Status.CANCELLED) {
    return 'cancelled';
  }
  return 'ok';
}

/** An amount of one slot as a person reads it: `2 CPU`, `512 MiB`, `1.5 GiB`, `1 GPU`. */
export function slotText(slot: string, amount: string): string {
  const value = Number(amount);
  if (slot === 'mem') {
    if (value >= GIB) {
      return `${+(value / GIB).toFixed(2)} GiB`;
    }
    return `${+(value / MIB).toFixed(1)} MiB`;
  }
  if (slot === 'cpu') {
    return `${+value.toFixed(3)} CPU`;
  }
  if (slot === 'cuda.device') {
    return `${+value.toFixed(3)} GPU`;
  }
  return `${slot} ${amount}`;
}

/** Per-kernel resources: `1 CPU · 2 GiB`. */
export function resourcesText(slots: Slots | undefined): string {
  const parts = Object.entries(slots ?? {}).map(([slot, amount]) => slotText(slot, amount));
  return parts.length ? parts.join(' · ') : 'no limits';
}

/** `main1, sub1, sub2` (the hostnames in cluster order). */
export function clusterHosts(session: Pick<SessionJSON, 'kernels'>): string {
  return session.kernels.map(kernel => kernel.hostname).join(', ');
}

/** How long ago, in the largest unit that fits: `12 s`, `5 min`, `3 h`, `2 d`. */
export function ageText(createdAt: number, now: number): string {
  const seconds = Math.max(0, Math.floor(now - createdAt));
  if (seconds < 60) {
    return `${seconds} s`;
  }
  if (seconds < 3600) {
    return `${Math.floor(seconds / 60)} min`;
  }
  if (seconds < 86400) {
    return `${Math.floor(seconds / 3600)} h`;
  }
  return `${Math.floor(seconds / 86400)} d`;
}

/** A duration in its two largest units: `45 s`, `9 min 58 s`, `3 h 5 min`, `2 d 4 h`. */
export function durationText(seconds: number): string {
  let left = Math.max(0, Math.round(seconds));
  const parts: string[] = [];
  for (const [unit, size] of [
    ['d', 86400],
    ['h', 3600],
    ['min', 60],
    ['s', 1]
  ] as const) {
    if (left >= size || (unit === 's' && !parts.length)) {
      parts.push(`${Math.floor(left / size)} ${unit}`);
      left %= size;
    }
    if (parts.length === 2 || (parts.length && left === 0)) {
      break;
    }
  }
  return parts.join(' ');
}

/**
 * When each idle rule ends a running session if nothing happens, counted down from
 * the reply (`loadedAt`) to `now` (both epoch seconds): one line per rule, soonest
 * first. Empty when no rule applies.
 */
export function idleLines(
  session: Pick<SessionJSON, 'idle' | 'status'>,
  loadedAt: number,
  now: number
): string[] {
  const idle = session.idle ?? {};
  if (!ACTIVE.has(session.status)) {
    return [];
  }
  const since = Math.max(0, now - loadedAt);
  const lines: [number, string][] = [];
  const rules: [keyof IdleJSON, (rule: IdleRuleJSON, left: string) => string][] = [
    [
      'idle_timeout',
      (r, left) => `Idle for ${left} more ends it (idle timeout ${durationText(r.timeout ?? 0)})`
    ],
    [
      'utilization',
      (r, left) =>
        `CPU below ${r.cpu_percent}% ends it in ${left} (now ${r.cpu_used ?? 0}% over ${durationText(r.window ?? 0)})`
    ],
    [
      'session_lifetime',
      (r, left) => `Ends in ${left} at most (lifetime ${durationText(r.timeout ?? 0)})`
    ]
  ];
  for (const [name, text] of rules) {
    const rule = idle[name] as IdleRuleJSON | undefined;
    if (rule && typeof rule.left === 'number') {
      const left = Math.max(0, rule.left - since);
      lines.push([left, text(rule, durationText(left))]);
    }
  }
  return lines.sort((a, b) => a[0] - b[0]).map(([, line]) => line);
}

/**
 * A link the API gives (a path from the server's root, which holds its base URL:
 * `/user/alice/bai/endpoints/echo/`, or a manager service's full URL) as a full URL
 * on the server the page came from (`baseUrl`: its public URL, as the page knows it).
 */
export function pageUrlOf(path: string, baseUrl: string): string {
  return new URL(path, baseUrl).toString();
}

/** A session as people name it: its name, else the first 8 characters of its id. */
export function label(session: { id: string; name?: string | null }): string {
  return session.name || session.id.slice(0, 8);
}

const SESSION_ID = /\b[0-9a-f]{32}\b/g;

/**
 * A server's message with each session id read as people know the session: its name
 * (`names`: id → name), else its short id; never a 32-character id to scroll past.
 */
export function namedIds(text: string, names: ReadonlyMap<string, string> = new Map()): string {
  return text.replace(SESSION_ID, id => names.get(id) ?? id.slice(0, 8));
}

/**
 * Why a pending session waits, in words: the server's `pending_reason` (one sentence
 * built from the scheduler's record, each reason once), with session ids replaced by
 * the names people know them by ("waiting for train-1 (RUNNING) to succeed"). Null
 * when it is not pending or the scheduler has not said why yet.
 */
export function whyPending(
  session: Pick<SessionJSON, 'status' | 'pending_reason'>,
  names: ReadonlyMap<string, string> = new Map()
): string | null {
  if (session.status !== Status.PENDING || !session.pending_reason) {
    return null;
  }
  return session.pending_reason.replace(SESSION_ID, id => {
    const known = names.get(id);
    return known ? `session ${known}` : `session ${id.slice(0, 8)}`;
  });
}

/** How a batch session ended: `SUCCESS (exit code 0)`; null while it has no result. */
export function resultText(session: Pick<SessionJSON, 'result' | 'exit_code'>): string | null {
  if (session.result === 'UNDEFINED') {
    return null;
  }
  return `${session.result} (exit code ${session.exit_code ?? '–'})`;
}

/** Occupied / capacity per slot, 0..1, for an agent's bars. */
export function usage(agent: AgentJSON): { slot: string; used: number; text: string }[] {
  return Object.entries(agent.capacity).map(([slot, capacity]) => {
    const occupied = Number(agent.occupied[slot] ?? 0);
    const total = Number(capacity);
    return {
      slot,
      used: total > 0 ? Math.min(1, occupied / total) : 0,
      text: `${slotText(slot, String(occupied))} of ${slotText(slot, capacity)}`
    };
  });
}

/** How each phase of an agent's image fetch reads (`status_data.pulling`). */
const PULL_PHASES: Record<string, string> = {
  waiting: 'waiting',
  pulling: 'pulling',
  copying: 'copying',
  loading: 'loading into the engine',
  done: 'done'
};

/**
 * While PULLING: each agent's fetch of the image, e.g. `node2: copying from node1 43%`;
 * `loading` once every byte is sent and that engine adds the layers (no percentage).
 */
export function pullingText(session: Pick<SessionJSON, 'status' | 'status_data'>): string | null {
  if (session.status !== Status.PULLING) {
    return null;
  }
  const record = session.status_data?.pulling as
    { image?: string; agents?: Record<string, Record<string, unknown>> } | undefined;
  const parts = Object.entries(record?.agents ?? {}).map(([agent, entry]) => {
    const phase = typeof entry.phase === 'string' ? entry.phase : '';
    let text = `${agent}: ${PULL_PHASES[phase] ?? (phase || 'fetching')}`;
    const moving = phase === 'pulling' || phase === 'copying';
    if (moving && typeof entry.from === 'string' && entry.from !== 'registry') {
      text += ` from ${entry.from}`;
    }
    if (moving && typeof entry.progress === 'number') {
      text += ` ${Math.floor(100 * entry.progress)}%`;
    }
    return text;
  });
  return parts.length ? `image ${record?.image ?? '?'}: ${parts.join(', ')}` : null;
}
