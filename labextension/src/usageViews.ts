/**
 * The usage charts: per kernel of a running session, CPU and memory as SVG
 * sparklines over the last few minutes with the current numbers beside them (the
 * sidebar's session card), and per agent the sum of the caller's kernels there (the
 * Agents section, beside the occupancy bars). Each block names what it shows
 * (`data-usage-session`, `data-usage-agent`), so `refreshUsage` redraws only the
 * charts on a new reading instead of the whole sidebar.
 */
import { h } from './dom';
import { kernelUsageText, memShort, Point, UsageHistory } from './usage';

const SVG = 'http://www.w3.org/2000/svg';
const WIDTH = 100;
const HEIGHT = 20;

/** A sparkline of `points` (at most the history's window, the newest at the right edge),
 * 0 … `max` high. */
export function sparkline(points: Point[], max: number, window: number, label: string): SVGElement {
  const svg = document.createElementNS(SVG, 'svg');
  svg.setAttribute('class', 'bai-Spark');
  svg.setAttribute('viewBox', `0 0 ${WIDTH} ${HEIGHT}`);
  svg.setAttribute('preserveAspectRatio', 'none');
  svg.setAttribute('role', 'img');
  svg.setAttribute('aria-label', label);
  if (points.length) {
    const end = points[points.length - 1].at;
    // The time the points cover, a minute at least: a young session's line grows from
    // the left instead of hiding at the right edge of the whole window.
    const span = Math.min(window, Math.max(60, end - points[0].at));
    const top = Math.max(max, ...points.map(p => p.value)) || 1;
    const xy = points.map(p => {
      const x = WIDTH - ((end - p.at) / span) * WIDTH;
      const y = HEIGHT - 1 - (p.value / top) * (HEIGHT - 2);
      return `${x.toFixed(1)},${y.toFixed(1)}`;
    });
    const first = xy[0].split(',')[0];
    const area = document.createElementNS(SVG, 'polygon');
    area.setAttribute('class', 'bai-Spark-area');
    area.setAttribute('points', `${first},${HEIGHT} ${xy.join(' ')} ${WIDTH},${HEIGHT}`);
    const line = document.createElementNS(SVG, 'polyline');
    line.setAttribute('class', 'bai-Spark-line');
    line.setAttribute('points', xy.length > 1 ? xy.join(' ') : `${first} ${xy[0]}`);
    svg.append(area, line);
  }
  return svg;
}

/** A chart with its caption above: what it shows and the current number (in full in
 * the caption's tooltip). */
function chartCell(name: string, chart: SVGElement, value: string, full: string): HTMLElement {
  return h(
    'div',
    { class: 'bai-Usage-cell' },
    h(
      'div',
      { class: 'bai-Usage-caption', attrs: { title: `${name}: ${full}` } },
      h('span', { class: 'bai-Usage-label' }, name),
      ' ',
      h('span', { class: 'bai-Usage-value', attrs: { 'data-role': `usage-${name}` } }, value)
    ),
    chart
  );
}

function pair(...cells: HTMLElement[]): HTMLElement {
  return h('div', { class: 'bai-Usage-pair' }, ...cells);
}

/** The charts of one session's kernels (filled now and on every `refreshUsage`). */
export function sessionUsage(history: UsageHistory, sessionId: string): HTMLElement {
  const block = h('div', {
    class: 'bai-Usage',
    attrs: { 'data-role': 'usage', 'data-usage-session': sessionId, 'aria-label': 'usage' }
  });
  fillSession(block, history, sessionId);
  return block;
}

function fillSession(block: HTMLElement, history: UsageHistory, sessionId: string): void {
  const kernels = history.kernels(sessionId);
  if (!kernels.length) {
    block.replaceChildren(h('div', { class: 'bai-Usage-none' }, 'Usage: reading…'));
    return;
  }
  const several = kernels.length > 1;
  block.replaceChildren(
    ...kernels.map(k => {
      const text = kernelUsageText(k.last);
      const where = several ? `${k.kernel} ` : '';
      const cpu = k.last.cpu_percent === null ? '–' : `${k.last.cpu_percent.toFixed(0)} %`;
      const mem = k.last.mem_bytes === null ? '–' : memShort(k.last.mem_bytes, k.last.mem_limit);
      return h(
        'div',
        { class: 'bai-Usage-kernel', attrs: { 'data-kernel': k.kernel } },
        several ? h('div', { class: 'bai-Usage-host' }, k.kernel) : null,
        pair(
          chartCell(
            'CPU',
            sparkline(k.cpu, 100, history.window, `${where}CPU over the last minutes: ${text.cpu}`),
            cpu,
            text.cpu
          ),
          chartCell(
            'Mem',
            sparkline(
              k.mem,
              k.last.mem_limit ?? 0,
              history.window,
              `${where}memory over the last minutes: ${text.mem}`
            ),
            mem,
            text.mem
          )
        ),
        text.net === '–' ? null : h('div', { class: 'bai-Usage-net' }, `Net ${text.net}`)
      );
    })
  );
}

/** An agent's chart: the caller's kernels there, CPU cores of its capacity and memory. */
export function agentUsage(
  history: UsageHistory,
  agentId: string,
  cpu: number,
  mem: number
): HTMLElement {
  const block = h('div', {
    class: 'bai-Usage bai-mod-agent',
    attrs: { 'data-role': 'agent-usage', 'data-usage-agent': agentId }
  });
  block.dataset.cpu = String(cpu);
  block.dataset.mem = String(mem);
  fillAgent(block, history, agentId);
  return block;
}

function fillAgent(block: HTMLElement, history: UsageHistory, agentId: string): void {
  const sums = history.agent(agentId);
  if (!sums || !sums.cores.length) {
    block.replaceChildren();
    return;
  }
  const cpu = Number(block.dataset.cpu) || 0;
  const mem = Number(block.dataset.mem) || 0;
  const cores = sums.cores[sums.cores.length - 1].value;
  const used = sums.mem[sums.mem.length - 1].value;
  const cpuText = `${cores.toFixed(2)}/${cpu} cores`;
  const memText = memShort(used, mem || null);
  block.replaceChildren(
    h('div', { class: 'bai-Usage-host' }, 'Your kernels’ use, live'),
    pair(
      chartCell(
        'CPU',
        sparkline(sums.cores, cpu, history.window, `CPU in use: ${cpuText}`),
        cpuText,
        `${cores.toFixed(2)} of ${cpu} cores in use by your kernels`
      ),
      chartCell(
        'Mem',
        sparkline(sums.mem, mem, history.window, `memory in use: ${memText}`),
        memText,
        `${memText} in use by your kernels`
      )
    )
  );
}

/** Redraw every usage block under `root` from `history` (on each new reading). */
export function refreshUsage(root: HTMLElement, history: UsageHistory): void {
  root.querySelectorAll<HTMLElement>('[data-usage-session]').forEach(block => {
    fillSession(block, history, block.dataset.usageSession!);
  });
  root.querySelectorAll<HTMLElement>('[data-usage-agent]').forEach(block => {
    fillAgent(block, history, block.dataset.usageAgent!);
  });
}
