/**
 * Keeps a `BaiState` current from the server: one full read at (re)connection,
 * then the event stream. Each event is folded in at once (the views redraw with
 * the new status), then what events do not carry is re-read: the session (why it
 * waits, services, result), the queue, agents and warm pools after a status change,
 * and the endpoints after an event of one of their replicas (an unclaimed warm
 * session's events, which an admin's stream carries, re-read only the queue, agents
 * and pools: it is nobody's session). Sessions are never polled;
 * endpoints are read again every few seconds only while the sidebar shows them and
 * one is not steady (a replica starting, failing its checks or draining: no event
 * says when that ends) or serves requests (its load moves). `ended` says which
 * session ended, as its event comes (the server has removed its attach kernelspec:
 * the plugin reads the kernelspecs again, so the launcher drops its card).
 */
import { ISignal, Signal } from '@lumino/signaling';

import { ApiError, BaiClient } from './api';
import { EndpointJSON, refreshDelay, replicaOf } from './endpoints';
import { isWarmEvent, PoolJSON } from './pools';
import { BaiState } from './store';
import { UsageHistory } from './usage';
import { ENDED, SessionEvent, Status } from './types';

export class LiveState {
  readonly state = new BaiState();
  /** Running sessions' usage per kernel, from the stream's usage events. */
  readonly usage = new UsageHistory();
  private abort = new AbortController();
  private clusterTimer: ReturnType<typeof setTimeout> | null = null;
  private endpointsTimer: ReturnType<typeof setTimeout> | null = null;
  private endpointsDue = 0;
  /** Bumped by every read of the endpoints, so an older reply never overwrites a newer one. */
  private endpointReads = 0;
  /** Whether a view shows the endpoints (only then are they polled). */
  private watching = false;
  private readonly _ended = new Signal<this, string>(this);

  constructor(
    readonly client: BaiClient,
    /** Admins may ask for everyone's sessions (the setting `showAllSessions`). */
    private all = false
  ) {}

  /** A session ended (its id), as its event came. */
  get ended(): ISignal<this, string> {
    return this._ended;
  }

  start(): void {
    void this.client.events(
      {
        event: event => void this.onEvent(event),
        connected: () => {
          this.state.setOffline(null, false); // the full read that follows tells the views
          void this.reload();
        },
        disconnected: reason => {
          this.state.setOffline(reason);
        },
        usage: event => this.usage.add(event)
      },
      this.abort.signal
    );
  }

  dispose(): void {
    this.abort.abort();
    if (this.endpointsTimer !== null) {
      clearTimeout(this.endpointsTimer);
    }
  }

  setAll(all: boolean): void {
    if (all !== this.all) {
      this.all = all;
      void this.reload();
    }
  }

  /** Everything, read again. */
  async reload(): Promise<void> {
    void this.readEndpoints();
    try {
      const [sessions, queue, agents, pools] = await Promise.all([
        this.client.sessions(this.all),
        this.client.queue(),
        this.client.agents(),
        this.readPools()
      ]);
      this.state.loadSessions(sessions);
      this.state.loadQueue(queue);
      this.state.loadAgents(agents);
      if (pools) {
        this.state.loadPools(pools);
      }
    } catch (error) {
      this.state.setOffline(error instanceof ApiError ? error.message : String(error));
    }
  }

  /** Read one session again (after an action of the user's, for instance). */
  async refresh(id: string): Promise<void> {
    try {
      this.state.loadSession(await this.client.session(id));
    } catch (error) {
      if (!(error instanceof ApiError && error.status === 404)) {
        throw error;
      }
    }
  }

  /** Whether the endpoints are on screen: while they are, unsteady ones are followed. */
  watchEndpoints(watching: boolean): void {
    if (watching !== this.watching) {
      this.watching = watching;
      if (watching) {
        this.refreshEndpoints(0); // what changed while nobody looked
      }
    }
  }

  /** Read the endpoints in `delayMs` (or sooner, when a read is due sooner already). */
  refreshEndpoints(delayMs = 50): void {
    const due = Date.now() + delayMs;
    if (this.endpointsTimer !== null) {
      if (this.endpointsDue <= due) {
        return;
      }
      clearTimeout(this.endpointsTimer);
    }
    this.endpointsDue = due;
    this.endpointsTimer = setTimeout(() => {
      this.endpointsTimer = null;
      void this.readEndpoints();
    }, delayMs);
  }

  /** An endpoint's view from a reply (after a change of the user's), then its next round. */
  showEndpoint(endpoint: EndpointJSON): void {
    ++this.endpointReads;
    this.state.loadEndpoint(endpoint);
    // The keeper acts on a change in its next round: read it again then.
    this.refreshEndpoints(1500);
  }

  private async readEndpoints(): Promise<void> {
    const read = ++this.endpointReads;
    try {
      const endpoints = await this.client.endpoints(this.all);
      if (read === this.endpointReads) {
        this.state.loadEndpoints(endpoints);
      }
    } catch (error) {
      console.warn('bai-jupyter: could not read the endpoints', error);
    }
    const delay = this.watching ? refreshDelay(this.state.endpoints) : null;
    if (read === this.endpointReads && delay !== null) {
      this.refreshEndpoints(delay);
    }
  }

  private async onEvent(event: SessionEvent): Promise<void> {
    const folded = this.state.fold(event);
    if (ENDED.has(event.status)) {
      this._ended.emit(event.session_id);
      this.usage.forget(event.session_id);
    }
    // A pending session's event may be a scheduler pass's new why-pending record:
    // its place in the queue may have moved too.
    if (folded.statusChanged || event.status === Status.PENDING) {
      this.refreshCluster();
    }
    if (folded.unknown && isWarmEvent(event) && !this.all) {
      return; // not one of the user's sessions: the agents and pools show it
    }
    try {
      if (folded.unknown && !this.all) {
        // A new session; an admin's stream also carries other users' (not listed here).
        this.state.loadSessions(await this.client.sessions(false));
      } else {
        await this.refresh(event.session_id);
      }
    } catch (error) {
      console.warn('bai-jupyter: could not re-read a session', error);
    }
    if (folded.statusChanged) {
      this.refreshDependants(event.session_id);
    }
    const session = this.state.sessions.get(event.session_id);
    if (session && replicaOf(session)) {
      this.refreshEndpoints(); // a replica came, went, or changed status
    }
  }

  /**
   * The pending sessions that wait for `id`: their why-pending names it with its status
   * as the server read it, so they are read again when that status changes.
   */
  private refreshDependants(id: string): void {
    for (const waiting of this.state.sessions.values()) {
      if (waiting.status === Status.PENDING && waiting.spec.depends_on?.includes(id)) {
        this.refresh(waiting.id).catch(error =>
          console.warn('bai-jupyter: could not re-read a session', error)
        );
      }
    }
  }

  /** The queue, the agents and the warm pools, once for a burst of status changes. */
  private refreshCluster(): void {
    if (this.clusterTimer !== null) {
      return;
    }
    this.clusterTimer = setTimeout(async () => {
      this.clusterTimer = null;
      try {
        const [queue, agents, pools] = await Promise.all([
          this.client.queue(),
          this.client.agents(),
          this.readPools()
        ]);
        this.state.loadQueue(queue);
        this.state.loadAgents(agents);
        if (pools) {
          this.state.loadPools(pools);
        }
      } catch (error) {
        console.warn('bai-jupyter: could not re-read the queue and agents', error);
      }
    }, 50);
  }

  /**
   * The warm pools, or null when they could not be read (the rest of the sidebar still
   * shows); a server without pools to show (an older one: 404) has none.
   */
  private async readPools(): Promise<PoolJSON[] | null> {
    try {
      return await this.client.pools();
    } catch (error) {
      if (error instanceof ApiError && error.status === 404) {
        return [];
      }
      console.warn('bai-jupyter: could not read the warm pools', error);
      return null;
    }
  }
}
