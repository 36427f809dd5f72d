/**
 * A session's log viewer, one kernel at a time. While the session runs (a batch
 * job, say) it follows the log; once the session ends it reads the log one last
 * time and shows the result.
 */
import { MainAreaWidget } from '@jupyterlab/apputils';
import { Widget } from '@lumino/widgets';

import { h } from './dom';
import { LiveState } from './live';
import { clusterHosts, label, resultText } from './text';
import { isEnded, SessionJSON } from './types';

/** How often a followed log is read again while its session runs. */
const FOLLOW_MS = 1000;

class LogView extends Widget {
  private kernel = 'main1';
  private timer: ReturnType<typeof setTimeout> | null = null;
  private readonly pre: HTMLPreElement;
  private readonly status: HTMLElement;
  private readonly follow: HTMLInputElement;

  constructor(
    private readonly live: LiveState,
    private readonly sessionId: string,
    private readonly maxLines: number
  ) {
    super();
    this.addClass('bai-Logs');
    const session = live.state.sessions.get(sessionId)!;
    const hosts = clusterHosts(session).split(', ').filter(Boolean);
    const picker = h(
      'select',
      {
        class: 'bai-Input',
        attrs: { 'aria-label': 'Kernel whose log is shown' },
        on: {
          change: event => {
            this.kernel = (event.target as HTMLSelectElement).value;
            void this.read();
          }
        }
      },
      ...(hosts.length ? hosts : ['main1']).map(host =>
        h('option', { attrs: { value: host } }, host)
      )
    );
    this.follow = h('input', {
      attrs: { type: 'checkbox', checked: '' },
      on: { change: () => void this.read() }
    });
    this.status = h('span', { class: 'bai-Logs-status', attrs: { role: 'status' } });
    this.pre = h('pre', {
      class: 'bai-Logs-text',
      attrs: { tabindex: '0', 'aria-label': `Log of ${label(session)}` }
    });
    this.node.append(
      h(
        'div',
        { class: 'bai-Logs-bar' },
        h('label', {}, 'Kernel ', picker),
        h('label', {}, this.follow, ' Follow'),
        this.status
      ),
      this.pre
    );
    live.state.changed.connect(this.showStatus, this);
    void this.read();
  }

  dispose(): void {
    this.live.state.changed.disconnect(this.showStatus, this);
    if (this.timer !== null) {
      clearTimeout(this.timer);
    }
    super.dispose();
  }

  private session(): SessionJSON | undefined {
    return this.live.state.sessions.get(this.sessionId);
  }

  private showStatus(): void {
    const session = this.session();
    if (!session) {
      return;
    }
    const result = resultText(session);
    const text = `${session.status}${result ? ` — ${result}` : ''}`;
    if (this.status.textContent !== text) {
      this.status.textContent = text;
      this.status.dataset.status = session.status;
    }
  }

  private async read(): Promise<void> {
    if (this.timer !== null) {
      clearTimeout(this.timer);
      this.timer = null;
    }
    const session = this.session();
    const ended = !session || isEnded(session.status);
    try {
      const text = await this.live.client.logs(this.sessionId, this.kernel);
      const lines = text.split('\n');
      const atEnd = this.pre.scrollTop + this.pre.clientHeight >= this.pre.scrollHeight - 4;
      this.pre.textContent = lines.slice(-this.maxLines).join('\n');
      if (this.follow.checked && atEnd) {
        this.pre.scrollTop = this.pre.scrollHeight;
      }
    } catch (error) {
      this.pre.textContent = `Could not read the log: ${String(error)}`;
    }
    this.showStatus();
    if (!this.isDisposed && this.follow.checked && !ended) {
      this.timer = setTimeout(() => void this.read(), FOLLOW_MS);
    }
  }
}

/** The log viewer of a session as a main-area tab. */
export function logViewer(
  live: LiveState,
  session: SessionJSON,
  maxLines: number
): MainAreaWidget<Widget> {
  const widget = new MainAreaWidget({ content: new LogView(live, session.id, maxLines) });
  widget.id = `bai-logs-${session.id}`;
  widget.title.label = `Logs: ${label(session)}`;
  widget.title.closable = true;
  return widget;
}
