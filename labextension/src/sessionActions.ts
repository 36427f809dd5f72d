/**
 * A session card's actions: cancel or terminate (confirmed first), interrupt and
 * open a notebook while it is active, its logs, copy its id.
 */
import { Clipboard } from '@jupyterlab/apputils';

import { confirmThen } from './dialog';
import { button, Child, h } from './dom';
import { LiveState } from './live';
import { clusterHosts, label } from './text';
import { ACTIVE, ENDING_OR_ENDED, SessionJSON, Status } from './types';

/** What the sidebar asks of the rest of the extension. */
export interface SidebarActions {
  newSession(): void;
  showLogs(session: SessionJSON): void;
  openNotebook(session: SessionJSON): void;
  openNotebookPath(path: string): void;
}

/** A session card's buttons: what can be asked of the session in its status. */
export function sessionActions(
  session: SessionJSON,
  name: string,
  live: LiveState,
  actions: SidebarActions
): HTMLElement {
  const client = live.client;
  const ended = ENDING_OR_ENDED.has(session.status);
  const id = session.id;
  const buttons: Child[] = [];
  if (!ended) {
    const verb = session.status === Status.PENDING ? 'Cancel' : 'Terminate';
    buttons.push(
      button(
        verb,
        `${verb} session ${name}`,
        `end-${id}`,
        () => void end(live, session, verb),
        'bai-mod-warn'
      )
    );
  }
  if (ACTIVE.has(session.status) && session.spec.type === 'interactive') {
    buttons.push(
      button(
        'Interrupt',
        `Interrupt what main1 of ${name} runs`,
        `int-${id}`,
        () =>
          void confirmThen(
            `Interrupt ${name}?`,
            'What its main1 kernel runs now stops (SIGINT).' +
              notebooksOn(live, session, 'interrupt'),
            'Interrupt',
            () => client.interrupt(id),
            'Cancel',
            live.state.names()
          )
      ),
      button('Open notebook', `Open a notebook on session ${name}`, `nb-${id}`, () =>
        actions.openNotebook(session)
      )
    );
  }
  buttons.push(
    button('Logs', `Show the logs of ${name}`, `logs-${id}`, () => actions.showLogs(session)),
    button('Copy id', `Copy the id of ${name}`, `copy-${id}`, () => Clipboard.copyToSystem(id))
  );
  return h('div', { class: 'bai-Actions' }, ...buttons);
}

/**
 * What the confirmation adds when the session holds the kernel of notebooks open here:
 * their names, and what happens to them, so no one ends their own notebook unawares.
 */
export function notebooksOn(
  live: LiveState,
  session: SessionJSON,
  what: 'end' | 'interrupt'
): string {
  const paths = live.state
    .kernelsOf(session)
    .map(kernel => kernel.path)
    .filter((path): path is string => !!path);
  if (!paths.length) {
    return '';
  }
  const them = paths.length === 1 ? `notebook ${paths[0]}` : `notebooks ${paths.join(', ')}`;
  return what === 'end'
    ? ` It runs the kernel of your ${them}: what that kernel holds is lost, and it does not restart.`
    : ` It runs the kernel of your ${them}: the cell running there stops.`;
}

/** Cancel or terminate a session, once the user confirms. */
async function end(live: LiveState, session: SessionJSON, verb: string): Promise<void> {
  const name = label(session);
  const what =
    (verb === 'Cancel'
      ? `${name} leaves the queue and never starts.`
      : `Its kernels (${clusterHosts(session)}) stop and their containers are removed.`) +
    notebooksOn(live, session, 'end');
  // Not "Cancel" twice: the button that does nothing says what it keeps.
  const keep = verb === 'Cancel' ? 'Keep waiting' : undefined;
  await confirmThen(
    `${verb} session ${name}?`,
    what,
    verb,
    async () => {
      await live.client.destroy(session.id);
      await live.refresh(session.id);
    },
    keep,
    live.state.names()
  );
}
