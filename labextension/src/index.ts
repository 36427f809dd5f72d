/**
 * The plugin: wires the live state to the sidebar, the dialog, the log viewers,
 * the status-bar item, the launcher card, the settings, and the cells run while a
 * notebook's kernel is still starting (held, then run in order).
 */
import { ILabShell, JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { Dialog, ICommandPalette, showDialog } from '@jupyterlab/apputils';
import { ILauncher } from '@jupyterlab/launcher';
import { INotebookTracker } from '@jupyterlab/notebook';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { IStatusBar } from '@jupyterlab/statusbar';

import { BaiClient } from './api';
import { afterFirstPass, errorBody, NOTEBOOK_FOLDER, newSessionDialog } from './dialog';
import { HeldRuns } from './heldRuns';
import { followKernelEnds } from './kernelEnd';
import { baiIcon } from './icon';
import { LiveState } from './live';
import { logViewer } from './logs';
import { SessionsSidebar } from './sidebar';
import { SessionStatus } from './statusbar';
import { label, whyPending } from './text';
import { SessionJSON } from './types';

const PLUGIN = 'bai-jupyter:plugin';

namespace CommandIDs {
  export const newSession = 'bai-jupyter:new-session';
  export const showSessions = 'bai-jupyter:show-sessions';
  export const reveal = 'bai-jupyter:reveal-session';
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN,
  description: 'bai-jupyter sessions, queue and agents in JupyterLab.',
  autoStart: true,
  requires: [ILabShell],
  optional: [ISettingRegistry, ILauncher, IStatusBar, INotebookTracker, ICommandPalette],
  activate: async (
    app: JupyterFrontEnd,
    shell: ILabShell,
    settings: ISettingRegistry | null,
    launcher: ILauncher | null,
    statusBar: IStatusBar | null,
    notebooks: INotebookTracker | null,
    palette: ICommandPalette | null
  ) => {
    const client = new BaiClient(app.serviceManager.serverSettings);
    const live = new LiveState(client);
    let logLines = 2000;

    // Which notebook uses which Jupyter kernel, from JupyterLab's own sessions.
    const sessionsManager = app.serviceManager.sessions;
    const trackKernels = () => {
      live.state.setKernels(
        [...sessionsManager.running()]
          .filter(model => model.kernel)
          .map(model => ({ id: model.kernel!.id, spec: model.kernel!.name, path: model.path }))
      );
    };
    sessionsManager.runningChanged.connect(trackKernels);
    trackKernels();

    // An ended session's attach kernelspec is gone from the server: read the kernelspecs
    // now (JupyterLab's own poll is a minute apart), once for a burst of endings, so the
    // launcher drops its card before anyone clicks it.
    let specsTimer: ReturnType<typeof setTimeout> | null = null;
    live.ended.connect(() => {
      specsTimer ??= setTimeout(() => {
        specsTimer = null;
        void app.serviceManager.kernelspecs.refreshSpecs();
      }, 200);
    });

    const openNotebook = async (session: SessionJSON) => {
      try {
        const name = await client.attachKernelspec(session.id);
        await app.serviceManager.kernelspecs.refreshSpecs();
        const model = await app.commands.execute('docmanager:new-untitled', {
          path: NOTEBOOK_FOLDER,
          type: 'notebook'
        });
        await app.commands.execute('docmanager:open', {
          path: model.path,
          factory: 'Notebook',
          kernel: { name }
        });
      } catch (error) {
        await showDialog({
          title: `No notebook on ${label(session)}`,
          body: errorBody(error, live.state.names()),
          buttons: [Dialog.okButton()]
        });
      }
    };

    const sidebar = new SessionsSidebar(
      live,
      {
        newSession: () => void app.commands.execute(CommandIDs.newSession),
        showLogs: session => {
          const id = `bai-logs-${session.id}`;
          const open = [...shell.widgets('main')].find(widget => widget.id === id);
          if (open) {
            shell.activateById(id);
            return;
          }
          shell.add(logViewer(live, session, logLines), 'main');
          shell.activateById(id);
        },
        openNotebook: session => void openNotebook(session),
        openNotebookPath: path => void app.commands.execute('docmanager:open', { path })
      },
      { showEnded: true, maxEnded: 10 }
    );
    sidebar.title.icon = baiIcon;
    sidebar.title.caption = 'bai sessions';
    shell.add(sidebar, 'left', { rank: 250 });

    app.commands.addCommand(CommandIDs.newSession, {
      label: args => (args.isLauncher ? 'New bai Session' : 'New bai Session…'),
      caption: 'Create a bai session: a cluster of kernels the scheduler queues until it fits',
      icon: baiIcon,
      execute: async () => {
        const created = await newSessionDialog(client, live.state.list(false));
        if (!created) {
          return;
        }
        live.state.loadSession(created);
        shell.activateById(sidebar.id);
        sidebar.reveal(created.id);
        // A session that must wait says why at once, not only in the sidebar.
        const session = await afterFirstPass(client, created);
        live.state.loadSession(session);
        const why = whyPending(session, live.state.names());
        const state = why ? `It waits in the queue: ${why}.` : `It is ${session.status}.`;
        if (session.spec.type !== 'interactive' && why) {
          await showDialog({
            title: `Session ${label(session)} was created`,
            body: state,
            buttons: [Dialog.okButton()]
          });
        }
        if (session.spec.type === 'interactive') {
          const answer = await showDialog({
            title: `Session ${label(session)} was created`,
            body: `${state} Open a notebook whose kernel runs in its main1?`,
            buttons: [
              Dialog.cancelButton({ label: 'Not now' }),
              Dialog.okButton({ label: 'Open notebook' })
            ]
          });
          if (answer.button.accept) {
            await openNotebook(session);
          }
        }
      }
    });
    app.commands.addCommand(CommandIDs.showSessions, {
      label: 'Show bai Sessions',
      execute: () => shell.activateById(sidebar.id)
    });
    app.commands.addCommand(CommandIDs.reveal, {
      label: 'Reveal a bai Session',
      execute: args => {
        shell.activateById(sidebar.id);
        sidebar.reveal(String(args.id));
      }
    });
    palette?.addItem({ command: CommandIDs.newSession, category: 'bai-jupyter' });
    palette?.addItem({ command: CommandIDs.showSessions, category: 'bai-jupyter' });
    launcher?.add({ command: CommandIDs.newSession, category: 'Other', rank: 0 });

    if (notebooks) {
      new HeldRuns(notebooks);
      followKernelEnds(notebooks, live.state);
    }
    if (statusBar && notebooks) {
      const item = new SessionStatus(
        live,
        notebooks,
        id => void app.commands.execute(CommandIDs.reveal, { id })
      );
      statusBar.registerStatusItem(PLUGIN, {
        item,
        align: 'left',
        rank: 5,
        isActive: () => item.active,
        activeStateChanged: item.activeStateChanged
      });
    }

    if (settings) {
      const apply = (loaded: ISettingRegistry.ISettings) => {
        const composite = loaded.composite as Record<string, unknown>;
        logLines = Number(composite.logLines ?? 2000);
        sidebar.configure({
          showEnded: composite.showEnded !== false,
          maxEnded: Number(composite.maxEnded ?? 10)
        });
        live.setAll(composite.showAllSessions === true);
      };
      try {
        const loaded = await settings.load(PLUGIN);
        apply(loaded);
        loaded.changed.connect(apply);
      } catch (error) {
        console.warn('bai-jupyter: settings not loaded', error);
      }
    }
    live.start();
  }
};

export default plugin;
