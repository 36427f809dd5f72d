/**
 * Live usage of running sessions, per kernel, from the event stream's `usage` events
 * (`GET events?usage=1`; the server sends one per running session every
 * `usage_interval`, 2 s by default): a short history per kernel (the last few
 * minutes) for the sidebar's charts, and per agent the sum of the caller's kernels
 * there. DOM-free; `usageViews.ts` draws it. `changed` tells the views, apart from
 * the state's own signal, so a reading redraws only the charts.
 */
import { ISignal, Signal } from '@lumino/signaling';

/** One kernel's usage, as a `usage` event carries it (`null`: not known). */
export interface KernelUsage {
  kernel: string;
  agent: string | null;
  cpu_percent: number | null;
  cpu_cores: number | null;
  cpu_slots: number;
  mem_bytes: number | null;
  mem_limit: number | null;
  net_rx_rate: number | null;
  net_tx_rate: number | null;
}

/** The `usage` event of one running session. */
export interface UsageEvent {
  type: 'usage';
  session_id: string;
  name: string | null;
  owner: string;
  /** Seconds since the epoch, of the reading. */
  at: number;
  /** Seconds between readings. */
  interval?: number;
  kernels: KernelUsage[];
}

/** One point of a chart: the time of its reading and the value. */
export interface Point {
  at: number;
  value: number;
}

/** One kernel's last readings. */
export interface KernelHistory {
  kernel: string;
  agent: string | null;
  cpu: Point[];
  mem: Point[];
  last: KernelUsage;
}

/** One agent's sum over the caller's kernels there, per reading. */
export interface AgentHistory {
  cores: Point[];
  mem: Point[];
}

/** How much history the charts keep, in seconds. */
export const USAGE_WINDOW_S = 300;

export function isUsageEvent(event: { type?: string }): event is UsageEvent {
  return event.type === 'usage';
}

function keep(points: Point[], point: Point, window: number): void {
  points.push(point);
  while (points.length && points[0].at < point.at - window) {
    points.shift();
  }
}

export class UsageHistory {
  private readonly sessions = new Map<string, Map<string, KernelHistory>>();
  private readonly agents = new Map<string, AgentHistory>();
  /** The seconds between readings, as the server last said. */
  interval = 2;
  private readonly _changed = new Signal<this, void>(this);

  constructor(readonly window = USAGE_WINDOW_S) {}

  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** Fold in one reading of a session. */
  add(event: UsageEvent): void {
    if (event.interval) {
      this.interval = event.interval;
    }
    let kernels = this.sessions.get(event.session_id);
    if (!kernels) {
      kernels = new Map();
      this.sessions.set(event.session_id, kernels);
    }
    const perAgent = new Map<string, { cores: number; mem: number }>();
    for (const usage of event.kernels) {
      let history = kernels.get(usage.kernel);
      if (!history) {
        history = { kernel: usage.kernel, agent: usage.agent, cpu: [], mem: [], last: usage };
        kernels.set(usage.kernel, history);
      }
      history.last = usage;
      history.agent = usage.agent;
      if (usage.cpu_percent !== null) {
        keep(history.cpu, { at: event.at, value: usage.cpu_percent }, this.window);
      }
      if (usage.mem_bytes !== null) {
        keep(history.mem, { at: event.at, value: usage.mem_bytes }, this.window);
      }
      if (usage.agent) {
        const sum = perAgent.get(usage.agent) ?? { cores: 0, mem: 0 };
        sum.cores += usage.cpu_cores ?? 0;
        sum.mem += usage.mem_bytes ?? 0;
        perAgent.set(usage.agent, sum);
      }
    }
    for (const [agent, sum] of perAgent) {
      this.addToAgent(agent, event.at, sum.cores, sum.mem);
    }
    this._changed.emit();
  }

  /** Readings of one tick share their `at`: the agent's point of that tick grows. */
  private addToAgent(agent: string, at: number, cores: number, mem: number): void {
    let history = this.agents.get(agent);
    if (!history) {
      history = { cores: [], mem: [] };
      this.agents.set(agent, history);
    }
    const last = history.cores[history.cores.length - 1];
    if (last && last.at === at) {
      last.value += cores;
      history.mem[history.mem.length - 1].value += mem;
      return;
    }
    keep(history.cores, { at, value: cores }, this.window);
    keep(history.mem, { at, value: mem }, this.window);
  }

  /** A session's kernels (main1 first), with their history; empty when none was read. */
  kernels(sessionId: string): KernelHistory[] {
    const kernels = [...(this.sessions.get(sessionId)?.values() ?? [])];
    return kernels.sort((a, b) =>
      a.kernel === 'main1' ? -1 : b.kernel === 'main1' ? 1 : a.kernel.localeCompare(b.kernel)
    );
  }

  /** The caller's kernels' sum on an agent, per reading (undefined: none read). */
  agent(agentId: string): AgentHistory | undefined {
    return this.agents.get(agentId);
  }

  /** Forget an ended session. */
  forget(sessionId: string): void {
    if (this.sessions.delete(sessionId)) {
      this._changed.emit();
    }
  }
}

/** `512 MiB`, `1.5 GiB`, `820 B`: binary units, three figures. */
export function bytesText(amount: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (Math.abs(amount) >= 1024 && i < units.length - 1) {
    amount /= 1024;
    i += 1;
  }
  const figures =
    i === 0 || amount >= 100 ? amount.toFixed(0) : String(Number(amount.toPrecision(3)));
  return `${figures} ${units[i]}`;
}

/** The numbers of one kernel as the views write them (`–`: not known). */
export function kernelUsageText(usage: KernelUsage): { cpu: string; mem: string; net: string } {
  const cpu =
    usage.cpu_percent === null
      ? '–'
      : `${usage.cpu_percent.toFixed(0)} % of ${usage.cpu_slots} cpu`;
  const mem =
    usage.mem_bytes === null
      ? '–'
      : bytesText(usage.mem_bytes) + (usage.mem_limit ? ` of ${bytesText(usage.mem_limit)}` : '');
  const net =
    usage.net_rx_rate === null || usage.net_tx_rate === null
      ? '–'
      : `↓ ${bytesText(usage.net_rx_rate)}/s ↑ ${bytesText(usage.net_tx_rate)}/s`;
  return { cpu, mem, net };
}

/** `66.1/256 MiB`, `900 MiB/1.5 GiB`: used of limit, short enough for a chart's caption. */
export function memShort(used: number, limit: number | null): string {
  if (!limit) {
    return bytesText(used);
  }
  const [u, uUnit] = bytesText(used).split(' ');
  const [l, lUnit] = bytesText(limit).split(' ');
  return uUnit === lUnit ? `${u}/${l} ${lUnit}` : `${u} ${uUnit}/${l} ${lUnit}`;
}

/** One line per kernel, for a tooltip ('' when nothing was read). */
export function usageTooltip(history: UsageHistory, sessionId: string): string {
  return history
    .kernels(sessionId)
    .map(k => {
      const text = kernelUsageText(k.last);
      const net = text.net === '–' ? '' : ` · net ${text.net}`;
      return `${k.kernel}: CPU ${text.cpu} · memory ${text.mem}${net}`;
    })
    .join('\n');
}
