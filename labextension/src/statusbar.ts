/**
 * The status-bar item of a notebook whose kernel runs on a bai session: while the
 * session is queued, its place and why ("queued #3 — needs cpu=2 …"), so a queued
 * kernel never looks like a hung one; once started, its status and cluster size.
 * A click (or Enter) reveals the session in the sidebar.
 */
import { INotebookTracker } from '@jupyterlab/notebook';
import { ISignal, Signal } from '@lumino/signaling';
import { Widget } from '@lumino/widgets';

import { LiveState } from './live';
import { label, whyPending } from './text';
import { SessionJSON, Status } from './types';
import { usageTooltip } from './usage';

export class SessionStatus extends Widget {
  private session: SessionJSON | undefined;
  private readonly changedActive = new Signal<this, void>(this);

  constructor(
    private readonly live: LiveState,
    private readonly tracker: INotebookTracker,
    private readonly reveal: (id: string) => void
  ) {
    super();
    // JupyterLab's own text item class: the same font and line box as its neighbours.
    this.addClass('jp-StatusBar-TextItem');
    this.addClass('bai-StatusItem');
    this.node.setAttribute('role', 'button');
    this.node.tabIndex = 0;
    this.node.addEventListener('click', () => this.open());
    this.node.addEventListener('keydown', event => {
      if (event.key === 'Enter' || event.key === ' ') {
        event.preventDefault();
        this.open();
      }
    });
    live.state.changed.connect(this.update, this);
    live.usage.changed.connect(this.update, this);
    tracker.currentChanged.connect(() => this.update());
    tracker.widgetAdded.connect((_, panel) => {
      panel.sessionContext.kernelChanged.connect(() => this.update());
      panel.sessionContext.statusChanged.connect(() => this.update());
    });
  }

  /** Shown only for a notebook that runs (or waits for) a bai session. */
  get active(): boolean {
    return this.session !== undefined;
  }

  /** Emitted when the item appears or goes (the status bar asks `active` again). */
  get activeStateChanged(): ISignal<this, void> {
    return this.changedActive;
  }

  private open(): void {
    if (this.session) {
      this.reveal(this.session.id);
    }
  }

  /** The bai session of the current notebook, by its kernel or, while queued, by its path. */
  private find(): SessionJSON | undefined {
    const panel = this.tracker.currentWidget;
    if (!panel) {
      return undefined;
    }
    const kernel = panel.sessionContext.session?.kernel;
    const state = this.live.state;
    if (kernel) {
      const found = state.sessionOfKernel({ id: kernel.id, spec: kernel.name });
      if (found) {
        return found;
      }
    }
    const path = '/' + panel.context.path;
    return state
      .list(false)
      .find(session => String(session.meta?.notebook_path ?? '').endsWith(path));
  }

  protected onUpdateRequest(): void {
    const had = this.session !== undefined;
    const session = (this.session = this.find());
    if (had !== (session !== undefined)) {
      this.changedActive.emit();
    }
    if (!session) {
      this.node.textContent = '';
      return;
    }
    const size = session.spec.cluster_size;
    let text: string;
    let title: string;
    if (session.status === Status.PENDING) {
      const place = this.live.state.position(session.id);
      const why = whyPending(session, this.live.state.names());
      text = `bai: queued${place ? ` #${place.position}` : ''}${why ? ` — ${why}` : ''}`;
      title = `Session ${label(session)} waits in the queue${why ? `: ${why}` : ''}. Click to show it.`;
    } else {
      const cluster = size > 1 ? ` · cluster ×${size}` : '';
      text = `bai: ${session.status}${cluster}`;
      title = `Session ${label(session)} is ${session.status}. Click to show it.`;
      const usage = usageTooltip(this.live.usage, session.id);
      title += usage ? `\n${usage}` : '';
    }
    this.node.textContent = text;
    this.node.title = title;
    this.node.setAttribute('aria-label', title);
    this.node.dataset.status = session.status;
  }
}
