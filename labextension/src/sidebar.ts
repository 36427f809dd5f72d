/**
 * The left sidebar "bai sessions": the user's sessions (newest first), their
 * inference endpoints, the queue of each resource group, and the agents and warm
 * pools, redrawn from the live state on every change.
 */
import { Widget } from '@lumino/widgets';

import { agentsSection } from './agentsSection';
import { button, Child, h, redraw, section } from './dom';
import { replicaOf } from './endpoints';
import { endpointsSection } from './endpointsSection';
import { LiveState } from './live';
import { claimedFrom } from './pools';
import { queueSections } from './queueSection';
import { sessionActions, SidebarActions } from './sessionActions';
import {
  ageText,
  clusterHosts,
  label,
  pullingText,
  resourcesText,
  resultText,
  statusTone,
  whyPending
} from './text';
import { endedAt, isEnded, SessionJSON, Status } from './types';
import { refreshUsage, sessionUsage } from './usageViews';

export interface SidebarOptions {
  showEnded: boolean;
  maxEnded: number;
}

export class SessionsSidebar extends Widget {
  private readonly body: HTMLElement;
  private pending = false;
  private highlighted: string | null = null;
  private readonly ticker: ReturnType<typeof setInterval>;
  private ticks = 0;

  constructor(
    private readonly live: LiveState,
    private readonly actions: SidebarActions,
    private options: SidebarOptions
  ) {
    super();
    this.id = 'bai-jupyter-sessions';
    this.addClass('bai-Sidebar');
    this.node.setAttribute('role', 'region');
    this.node.setAttribute('aria-label', 'bai sessions');
    this.body = h('div', { class: 'bai-Sidebar-body' });
    this.node.append(this.body);
    live.state.changed.connect(this.schedule, this);
    live.usage.changed.connect(() => refreshUsage(this.body, live.usage)); // charts only
    // Idle countdowns every 5 s while a session has idle rules; ages every 30 s.
    this.ticker = setInterval(() => {
      this.ticks += 1;
      if (this.ticks % 6 === 0 || live.state.counting()) {
        this.schedule();
      }
    }, 5_000);
    this.schedule();
  }

  dispose(): void {
    clearInterval(this.ticker);
    this.live.watchEndpoints(false);
    super.dispose();
  }

  /** Endpoints on their way somewhere are followed only while the sidebar shows them. */
  protected onAfterShow(): void {
    this.live.watchEndpoints(true);
  }

  protected onAfterHide(): void {
    this.live.watchEndpoints(false);
  }

  configure(options: SidebarOptions): void {
    this.options = options;
    this.schedule();
  }

  /** Scroll to a session, mark it and put the keyboard focus on it. */
  reveal(id: string): void {
    this.highlighted = id;
    this.draw();
    const card = this.node.querySelector<HTMLElement>(`.bai-Session[data-session-id="${id}"]`);
    card?.scrollIntoView({ block: 'nearest' });
    card?.focus();
  }

  /** Coalesce the changes of one turn of the event loop into one redraw. */
  private schedule(): void {
    if (!this.pending) {
      this.pending = true;
      queueMicrotask(() => {
        this.pending = false;
        this.draw();
      });
    }
  }

  private draw(): void {
    redraw(this.body, this.node, () => {
      const endpoints = endpointsSection(this.live, id => this.reveal(id));
      return [
        this.header(),
        this.sessionsSection(),
        ...(endpoints ? [endpoints] : []),
        ...queueSections(this.live.state),
        agentsSection(this.live.state, this.live.usage)
      ];
    });
  }

  private header(): HTMLElement {
    const offline = this.live.state.offline;
    return h(
      'div',
      { class: 'bai-Sidebar-header' },
      h('h2', { class: 'bai-Sidebar-title' }, 'bai sessions'),
      button(
        '+ New session',
        'New session',
        'new',
        () => this.actions.newSession(),
        'bai-mod-accept'
      ),
      button(
        '↻',
        'Reload sessions, endpoints, queue and agents',
        'reload',
        () => void this.live.reload()
      ),
      offline
        ? h(
            'p',
            { class: 'bai-Offline', attrs: { role: 'status' } },
            `Not live: ${offline} (retrying)`
          )
        : null
    );
  }

  private sessionsSection(): HTMLElement {
    const state = this.live.state;
    const live = state.list(false);
    // The most recently ended first, whenever they were made.
    const ended = this.options.showEnded
      ? state
          .list(true)
          .filter(s => isEnded(s.status))
          .sort((a, b) => endedAt(b) - endedAt(a))
          .slice(0, this.options.maxEnded)
      : [];
    const sessions = [...live, ...ended];
    const names = state.names();
    const anyEnded = state.list(true).some(s => isEnded(s.status));
    const content = sessions.length
      ? h(
          'ul',
          { class: 'bai-SessionList', attrs: { 'aria-label': 'My sessions' } },
          ...sessions.map(session => this.card(session, names))
        )
      : h(
          'p',
          { class: 'bai-Empty' },
          anyEnded
            ? 'No live sessions; ended ones are hidden (Settings → bai sessions).'
            : 'No sessions yet. Start one with “New session”.'
        );
    return section(`My sessions (${live.length} live)`, 'sessions', content);
  }

  private card(session: SessionJSON, names: Map<string, string>): HTMLElement {
    const state = this.live.state;
    const tone = statusTone(session);
    const name = label(session);
    const why = whyPending(session, names);
    const place = state.position(session.id);
    const result = resultText(session);
    const ended = isEnded(session.status);
    const kernels = state.kernelsOf(session);
    const replica = replicaOf(session);
    const notebook =
      typeof session.meta?.notebook_path === 'string' ? session.meta.notebook_path : null;
    const status = h(
      'span',
      { class: `bai-Status bai-mod-${tone}`, attrs: { 'data-status': session.status } },
      session.status
    );
    const lines: Child[] = [
      h(
        'div',
        { class: 'bai-Session-head' },
        status,
        h('span', { class: 'bai-Session-name', attrs: { title: session.id } }, name),
        h('span', { class: 'bai-Session-age' }, ageText(session.created_at, Date.now() / 1000))
      ),
      h(
        'div',
        { class: 'bai-Session-detail' },
        h('span', { class: 'bai-Session-type' }, session.spec.type),
        replica ? ` of endpoint ${replica.name} (gen ${replica.generation})` : null,
        ' · ',
        h('span', { attrs: { 'aria-label': 'cluster hosts' } }, clusterHosts(session)),
        ' · ',
        h(
          'span',
          { attrs: { 'aria-label': 'resources per kernel' } },
          resourcesText(session.spec.resources)
        )
      )
    ];
    const pool = claimedFrom(session);
    if (pool !== null) {
      lines.push(
        h(
          'div',
          { class: 'bai-Session-detail', attrs: { 'data-role': 'warm' } },
          `Started warm: claimed from pool ${pool}`
        )
      );
    }
    if (session.status === Status.PENDING) {
      const where = place ? `Queued #${place.position} of ${place.of}` : 'Queued';
      lines.push(
        h(
          'div',
          { class: 'bai-Pending', attrs: { 'data-role': 'why-pending' } },
          h('strong', {}, where),
          why ? ` — ${why}` : ' — waiting for the scheduler’s next pass'
        )
      );
    }
    const pulling = pullingText(session);
    if (pulling) {
      lines.push(
        h('div', { class: 'bai-Session-detail', attrs: { 'data-role': 'pulling' } }, pulling)
      );
    }
    if (result) {
      lines.push(
        h('div', { class: `bai-Result bai-mod-${tone}`, attrs: { 'data-role': 'result' } }, result)
      );
    } else if (ended && session.status_info) {
      lines.push(h('div', { class: 'bai-Result' }, `${session.status} (${session.status_info})`));
    }
    if (typeof session.status_data?.error === 'string') {
      lines.push(h('div', { class: 'bai-Error' }, session.status_data.error));
    }
    for (const line of state.idleOf(session)) {
      lines.push(h('div', { class: 'bai-Idle', attrs: { 'data-role': 'idle' } }, line));
    }
    if (session.sftp && !ended) {
      lines.push(
        h(
          'div',
          { class: 'bai-Sftp', attrs: { 'data-role': 'sftp', title: session.sftp.known_hosts } },
          'SFTP: ',
          h('code', {}, session.sftp.command)
        )
      );
    }
    for (const kernel of kernels) {
      lines.push(this.kernelLine(kernel.path, `kernel ${kernel.id.slice(0, 8)}`, true));
    }
    if (!kernels.length && notebook && !ended) {
      lines.push(this.kernelLine(notebook, 'its kernel is starting', false));
    }
    const services = session.services.filter(service => service.url);
    if (services.length && !ended) {
      lines.push(
        h(
          'div',
          { class: 'bai-Services', attrs: { 'aria-label': 'service ports' } },
          ...services.map(service =>
            h(
              'a',
              {
                class: 'bai-Link',
                attrs: {
                  href: this.live.client.pageUrl(service.url!),
                  target: '_blank',
                  rel: 'noopener noreferrer',
                  'data-focus-key': `svc-${session.id}-${service.name}`,
                  'aria-label': `Open service ${service.name} of ${name} in a new tab`
                }
              },
              `${service.name} ↗`
            )
          )
        )
      );
    }
    if (session.status === Status.RUNNING || session.status === Status.RESTARTING) {
      lines.push(sessionUsage(this.live.usage, session.id));
    }
    lines.push(sessionActions(session, name, this.live, this.actions));
    const classes = ['bai-Session', this.highlighted === session.id ? 'bai-mod-highlighted' : ''];
    return h(
      'li',
      {
        class: classes.join(' ').trim(),
        attrs: {
          tabindex: '0',
          'data-session-id': session.id,
          'data-focus-key': `card-${session.id}`,
          'aria-label': `${session.spec.type} session ${name}, ${session.status}${
            why ? `, waiting: ${why}` : ''
          }`
        }
      },
      ...lines
    );
  }

  /** The notebook (or, without one, the Jupyter kernel) that runs in a session. */
  private kernelLine(path: string | null, what: string, link: boolean): HTMLElement {
    const text = path ? path.split('/').pop()! : what;
    return h(
      'div',
      { class: 'bai-Kernel' },
      'Notebook: ',
      path && link
        ? h(
            'a',
            {
              class: 'bai-Link',
              attrs: { href: '#', title: path, 'data-focus-key': `nb-${path}` },
              on: {
                click: event => {
                  event.preventDefault();
                  this.actions.openNotebookPath(path);
                }
              }
            },
            text
          )
        : text,
      path ? ` (${what})` : null
    );
  }
}
