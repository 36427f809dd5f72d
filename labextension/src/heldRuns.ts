/**
 * Cells run while a notebook's kernel is still being started (a bai session waiting
 * in the queue): JupyterLab has no kernel connection to send them to until the
 * server answers the kernel's start, and would clear them silently (the prompt
 * stays `[ ]`, the cell never runs). They are held instead, shown as `[*]`, and run
 * in the order they were run once the kernel is there. A start that fails (JupyterLab
 * shows why) clears their prompts, and a notification says how many were not run.
 */
import { Notification } from '@jupyterlab/apputils';
import { INotebookTracker, Notebook, NotebookActions, NotebookPanel } from '@jupyterlab/notebook';

type Cell = Notebook['widgets'][number];

export class HeldRuns {
  private readonly held = new Map<NotebookPanel, Cell[]>();

  constructor(private readonly tracker: INotebookTracker) {
    NotebookActions.executionScheduled.connect((_, { notebook, cell }) =>
      this.scheduled(notebook, cell)
    );
  }

  private scheduled(notebook: Notebook, cell: Cell): void {
    const panel = this.tracker.find(found => found.content === notebook);
    if (!panel || cell.model.type !== 'code' || !cell.model.sharedModel.getSource().trim()) {
      return;
    }
    const context = panel.sessionContext;
    if (context.session?.kernel || context.hasNoKernel || context.isDisposed) {
      return; // a kernel takes it, or JupyterLab asks for one: nothing to hold
    }
    let cells = this.held.get(panel);
    if (!cells) {
      cells = [];
      this.held.set(panel, cells);
      this.follow(panel);
    }
    if (!cells.includes(cell)) {
      cells.push(cell);
    }
    // JupyterLab clears the run right after this signal: mark it held once it has.
    void Promise.resolve().then(() => {
      if (this.held.get(panel)?.includes(cell)) {
        cell.setPrompt('*');
        cell.node.title = 'Runs once the kernel has started';
      }
    });
  }

  /** Run the held cells once the kernel is there; let them go if it never comes. */
  private follow(panel: NotebookPanel): void {
    const context = panel.sessionContext;
    const stop = (): Cell[] => {
      context.kernelChanged.disconnect(changed);
      panel.disposed.disconnect(stop);
      const cells = this.held.get(panel) ?? [];
      this.held.delete(panel);
      for (const cell of cells) {
        cell.node.removeAttribute('title');
      }
      return cells.filter(cell => !cell.isDisposed && panel.content.widgets.includes(cell));
    };
    const changed = (): void => {
      if (context.session?.kernel) {
        const cells = stop();
        if (cells.length) {
          const mode = panel.content.mode; // running switches to command mode:
          void NotebookActions.runCells(panel.content, cells, context);
          panel.content.mode = mode; // someone typing meanwhile goes on typing
        }
      } else if (context.hasNoKernel) {
        this.notRun(panel, stop()); // the start failed: JupyterLab's dialog says why
      }
    };
    context.kernelChanged.connect(changed);
    panel.disposed.connect(stop);
  }

  private notRun(panel: NotebookPanel, cells: Cell[]): void {
    for (const cell of cells) {
      cell.setPrompt('');
    }
    if (cells.length) {
      const what = cells.length === 1 ? '1 cell was' : `${cells.length} cells were`;
      Notification.warning(`${what} not run: the kernel of ${panel.context.path} did not start.`, {
        autoClose: false
      });
    }
  }
}
