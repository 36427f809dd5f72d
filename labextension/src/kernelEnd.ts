/**
 * What a notebook says when the bai session under its kernel has ended, in words, in
 * a bar above the notebook (JupyterLab itself only shows a dead kernel). A session
 * someone ended on purpose ended the kernel for good: the bar gives the server's
 * `end_notice` (who, why, start a new kernel). One that died was restarted by
 * Jupyter on a new session: the bar says which. The kernel a notebook last had is
 * kept, since JupyterLab drops an ended kernel from the notebook's session. The words
 * come from `BaiState.endNotice`.
 */
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { Widget } from '@lumino/widgets';

import type { BaiState, JupyterKernel } from './store';

/** The bar of one notebook: shown while its kernel's sessions have something to say. */
class EndBar extends Widget {
  private kernel: Pick<JupyterKernel, 'id' | 'spec'> | null = null;
  private dismissed: string | null = null;
  private readonly text = document.createElement('span');

  constructor(
    panel: NotebookPanel,
    private readonly state: BaiState
  ) {
    super();
    this.addClass('bai-KernelEnd');
    this.node.setAttribute('role', 'status');
    this.node.setAttribute('aria-live', 'polite');
    const close = document.createElement('button');
    close.className = 'bai-Button bai-KernelEnd-dismiss';
    close.textContent = 'Dismiss';
    close.setAttribute('aria-label', 'Dismiss this notice');
    close.addEventListener('click', () => {
      this.dismissed = this.text.textContent;
      this.update();
    });
    this.text.className = 'bai-KernelEnd-text';
    this.node.append(this.text, close);
    const context = panel.sessionContext;
    const remember = () => {
      const kernel = context.session?.kernel;
      if (kernel) {
        this.kernel = { id: kernel.id, spec: kernel.name };
        this.update();
      }
    };
    context.kernelChanged.connect(remember);
    context.sessionChanged.connect(remember);
    remember();
    state.changed.connect(this.update, this);
    panel.disposed.connect(() => state.changed.disconnect(this.update, this));
  }

  update(): void {
    const notice = this.kernel ? this.state.endNotice(this.kernel) : null;
    const shown = notice !== null && notice !== this.dismissed;
    if (shown) {
      this.text.textContent = notice;
    }
    this.setHidden(!shown);
    this.node.dataset.kernelId = this.kernel?.id ?? '';
  }
}

/** A bar above every notebook, saying how its bai session ended. */
export function followKernelEnds(notebooks: INotebookTracker, state: BaiState): void {
  notebooks.widgetAdded.connect((_, panel) => {
    const bar = new EndBar(panel, state);
    panel.contentHeader.addWidget(bar);
    bar.update();
  });
}
