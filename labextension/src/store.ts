/**
 * The state store: the caller's sessions, endpoints, the queue, the agents, the
 * warm pools and JupyterLab's kernels, folded from API replies and the event
 * stream. Views connect to its `changed` signal, like JupyterLab's own models.
 */
import { ISignal, Signal } from '@lumino/signaling';
import type { EndpointJSON } from './endpoints';
import type { PoolJSON } from './pools';
import { idleLines, label } from './text';
import {
  ACTIVE,
  attachSpecName,
  ENDED,
  NOT_ENDED,
  Status,
  type AgentJSON,
  type QueueEntry,
  type QueueJSON,
  type SessionEvent,
  type SessionJSON
} from './types';

/** One group's queue in the order the scheduler tries it (position 1 first). */
export function queueOrder(queue: QueueJSON | null, group: string): QueueEntry[] {
  const entries = queue?.resource_groups[group]?.queue ?? [];
  return [...entries].sort((a, b) => a.position - b.position);
}

/** Session id → [its group's name, its position there, the length of that queue]. */
export function queuePositions(
  queue: QueueJSON | null
): Map<string, { group: string; position: number; of: number }> {
  const positions = new Map<string, { group: string; position: number; of: number }>();
  for (const [group, info] of Object.entries(queue?.resource_groups ?? {})) {
    for (const entry of info.queue) {
      if (entry.session_id) {
        positions.set(entry.session_id, { group, position: entry.position, of: info.queue.length });
      }
    }
  }
  return positions;
}

/** A Jupyter kernel of JupyterLab: its id, kernelspec name and the notebook using it. */
export interface JupyterKernel {
  id: string;
  spec: string;
  path: string | null;
}

/** What one event changed, so the live view knows what to re-read. */
export interface Folded {
  /** A session the state did not know (re-read it to show it). */
  unknown: boolean;
  /** Its status changed (queue and agents may have changed too). */
  statusChanged: boolean;
}

/**
 * The caller's sessions, endpoints, the queue, the agents and the warm pools, kept
 * current by full API replies (`load…`) and by events (`fold`). `changed` is emitted
 * after every change.
 */
export class BaiState {
  readonly sessions = new Map<string, SessionJSON>();
  /** When each session's record was read (epoch seconds): idle times count down from it. */
  readonly loadedAt = new Map<string, number>();
  queue: QueueJSON | null = null;
  agents: AgentJSON[] = [];
  /** The warm pools (none configured: empty). */
  pools: PoolJSON[] = [];
  /** The user's inference endpoints, by name. */
  endpoints: EndpointJSON[] = [];
  private _kernels: JupyterKernel[] = [];
  private _offline: string | null = null;
  private readonly _changed = new Signal<this, void>(this);

  /** Emitted after every change of the state. */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** JupyterLab's running kernels: their id, kernelspec and the notebook using each. */
  get kernels(): readonly JupyterKernel[] {
    return this._kernels;
  }

  /** Set when the event stream is down (shown to the user), null while it is live. */
  get offline(): string | null {
    return this._offline;
  }

  /** JupyterLab's running kernels, as its session manager lists them now. */
  setKernels(kernels: JupyterKernel[]): void {
    this._kernels = kernels;
    this._changed.emit();
  }

  /**
   * Why the state is not live (the event stream broke, a read failed), or null once
   * it is again. `notify: false` while a full read follows that tells the views.
   */
  setOffline(reason: string | null, notify = true): void {
    this._offline = reason;
    if (notify) {
      this._changed.emit();
    }
  }

  loadSessions(sessions: SessionJSON[], at: number = Date.now() / 1000): void {
    this.sessions.clear();
    this.loadedAt.clear();
    for (const session of sessions) {
      this.sessions.set(session.id, session);
      this.loadedAt.set(session.id, at);
    }
    this._changed.emit();
  }

  /** One session as the API gives it: replaces what the state had. */
  loadSession(session: SessionJSON, at: number = Date.now() / 1000): void {
    this.sessions.set(session.id, session);
    this.loadedAt.set(session.id, at);
    this._changed.emit();
  }

  /** A running session's idle rules, counted down to `now` (epoch seconds). */
  idleOf(session: SessionJSON, now: number = Date.now() / 1000): string[] {
    return idleLines(session, this.loadedAt.get(session.id) ?? now, now);
  }

  /** Whether some running session has an idle rule (its countdown needs redrawing). */
  counting(): boolean {
    return [...this.sessions.values()].some(
      session => ACTIVE.has(session.status) && Object.keys(session.idle ?? {}).length > 0
    );
  }

  loadQueue(queue: QueueJSON): void {
    this.queue = queue;
    this._changed.emit();
  }

  loadAgents(agents: AgentJSON[]): void {
    this.agents = agents;
    this._changed.emit();
  }

  loadPools(pools: PoolJSON[]): void {
    this.pools = pools;
    this._changed.emit();
  }

  loadEndpoints(endpoints: EndpointJSON[]): void {
    this.endpoints = [...endpoints].sort((a, b) => a.name.localeCompare(b.name));
    this._changed.emit();
  }

  /** One endpoint as the API gives it (after a change): replaces what the state had. */
  loadEndpoint(endpoint: EndpointJSON): void {
    this.loadEndpoints([...this.endpoints.filter(e => e.name !== endpoint.name), endpoint]);
  }

  /** Apply an event's status and kernel states at once (the full record follows). */
  fold(event: SessionEvent): Folded {
    const session = this.sessions.get(event.session_id);
    if (event.type !== 'session' || !session) {
      return { unknown: event.type === 'session', statusChanged: true };
    }
    const statusChanged = session.status !== event.status;
    const kernels = session.kernels.map(kernel => ({
      ...kernel,
      status: event.kernels[kernel.hostname] ?? kernel.status
    }));
    const updated: SessionJSON = {
      ...session,
      status: event.status,
      status_info: event.status_info,
      kernels
    };
    if (event.status !== Status.PENDING && updated.status_data?.scheduler) {
      const { scheduler: _dropped, ...rest } = updated.status_data;
      updated.status_data = rest;
      updated.pending_reason = null;
    }
    this.sessions.set(session.id, updated);
    this._changed.emit();
    return { unknown: false, statusChanged };
  }

  /** Session id → its name, for wording the scheduler's messages. */
  names(): Map<string, string> {
    const names = new Map<string, string>();
    for (const session of this.sessions.values()) {
      if (session.name) {
        names.set(session.id, session.name);
      }
    }
    for (const info of Object.values(this.queue?.resource_groups ?? {})) {
      for (const entry of info.queue) {
        if (entry.session_id && entry.name) {
          names.set(entry.session_id, entry.name);
        }
      }
    }
    return names;
  }

  /** Newest first; ended ones only when `ended`. */
  list(ended = true): SessionJSON[] {
    return [...this.sessions.values()]
      .filter(session => ended || NOT_ENDED.has(session.status))
      .sort((a, b) => b.created_at - a.created_at);
  }

  /**
   * The session a Jupyter kernel runs in: the one started for it (its
   * `meta.jupyter_kernel_id`, the newest after restarts), else the running session
   * its attach kernelspec names.
   */
  sessionOfKernel(kernel: Pick<JupyterKernel, 'id' | 'spec'>): SessionJSON | undefined {
    let found: SessionJSON | undefined;
    for (const session of this.sessions.values()) {
      const mine =
        session.meta?.jupyter_kernel_id === kernel.id ||
        (kernel.spec === attachSpecName(session.id) && NOT_ENDED.has(session.status));
      if (mine && (!found || session.created_at > found.created_at)) {
        found = session;
      }
    }
    return found;
  }

  /**
   * What a notebook on Jupyter kernel `kernel` says of its bai sessions, or null: the
   * server's `end_notice` for one ended on purpose (the kernel is over), or which new
   * session the kernel of one that died restarts on.
   */
  endNotice(kernel: Pick<JupyterKernel, 'id' | 'spec'>): string | null {
    const mine = [...this.sessions.values()]
      .filter(
        session =>
          session.meta?.jupyter_kernel_id === kernel.id ||
          kernel.spec === attachSpecName(session.id)
      )
      .sort((a, b) => a.created_at - b.created_at);
    const last = mine[mine.length - 1];
    if (!last) {
      return null;
    }
    if (last.end_notice) {
      return last.end_notice;
    }
    const before = mine[mine.length - 2];
    if (before && ENDED.has(before.status) && !before.end_notice && !ENDED.has(last.status)) {
      const restarted = ACTIVE.has(last.status) ? 'restarted' : 'is restarting';
      return (
        `bai session ${label(before)} ended (${before.status_info ?? before.status}): ` +
        `its kernel ${restarted} on a new session, ${label(last)}; what the old one held is gone`
      );
    }
    return null;
  }

  /** The Jupyter kernels (and notebooks) that run in a session. */
  kernelsOf(session: SessionJSON): JupyterKernel[] {
    return this.kernels.filter(kernel => this.sessionOfKernel(kernel)?.id === session.id);
  }

  /** A pending session's place in its queue: `{position, of}` or null. */
  position(id: string): { position: number; of: number } | null {
    return queuePositions(this.queue).get(id) ?? null;
  }
}
