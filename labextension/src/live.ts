/**
 * Keeps a `BaiState` current from the server: one full read at (re)connection,
 * then the event stream. Each event is folded in at once (the views redraw with
 * the new status), then what events do not carry is re-read: the session (why it
 * waits, services, result), and the queue and agents after a status change.
 * Nothing is polled.
 */
import { ApiError, BaiClient } from './api';
import { BaiState, SessionEvent } from './model';

export class LiveState {
  readonly state = new BaiState();
  private abort = new AbortController();
  private clusterTimer: ReturnType<typeof setTimeout> | null = null;

  constructor(
    readonly client: BaiClient,
    /** Admins may ask for everyone's sessions (the setting `showAllSessions`). */
    private all = false
  ) {}

  start(): void {
    void this.client.events(
      {
        event: event => void this.onEvent(event),
        connected: () => {
          this.state.offline = null;
          void this.reload();
        },
        disconnected: reason => {
          this.state.offline = reason;
          this.state.changed();
        }
      },
      this.abort.signal
    );
  }

  dispose(): void {
    this.abort.abort();
  }

  setAll(all: boolean): void {
    if (all !== this.all) {
      this.all = all;
      void this.reload();
    }
  }

  /** Everything, read again. */
  async reload(): Promise<void> {
    try {
      const [sessions, scheduler, agents] = await Promise.all([
        this.client.sessions(this.all),
        this.client.scheduler(),
        this.client.agents()
      ]);
      this.state.loadSessions(sessions);
      this.state.loadScheduler(scheduler);
      this.state.loadAgents(agents);
    } catch (error) {
      this.state.offline = error instanceof ApiError ? error.message : String(error);
      this.state.changed();
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

  private async onEvent(event: SessionEvent): Promise<void> {
    const folded = this.state.fold(event);
    // A pending session's event may be a scheduler pass's new why-pending record:
    // its place in the queue may have moved too.
    if (folded.statusChanged || event.status === 'PENDING') {
      this.refreshCluster();
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
  }

  /** The queue and the agents, once for a burst of status changes. */
  private refreshCluster(): void {
    if (this.clusterTimer !== null) {
      return;
    }
    this.clusterTimer = setTimeout(async () => {
      this.clusterTimer = null;
      try {
        const [scheduler, agents] = await Promise.all([
          this.client.scheduler(),
          this.client.agents()
        ]);
        this.state.loadScheduler(scheduler);
        this.state.loadAgents(agents);
      } catch (error) {
        console.warn('bai-jupyter: could not re-read the queue and agents', error);
      }
    }, 50);
  }
}
