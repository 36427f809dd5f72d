/**
 * The usage history behind the charts: what each kernel keeps (the last few minutes),
 * an agent's sum over the caller's kernels per reading, and the numbers as text.
 */
import {
  KernelUsage,
  UsageEvent,
  UsageHistory,
  bytesText,
  memShort,
  usageTooltip
} from '../src/usage';

function kernel(name: string, extra: Partial<KernelUsage> = {}): KernelUsage {
  return {
    kernel: name,
    agent: 'docker',
    cpu_percent: 50,
    cpu_cores: 0.25,
    cpu_slots: 0.5,
    mem_bytes: 100 << 20,
    mem_limit: 512 << 20,
    net_rx_rate: 2048,
    net_tx_rate: 10,
    ...extra
  };
}

function event(id: string, at: number, kernels: KernelUsage[]): UsageEvent {
  return { type: 'usage', session_id: id, name: null, owner: 'alice', at, interval: 2, kernels };
}

test('each kernel keeps its readings of the window, main1 first', () => {
  const history = new UsageHistory(10);
  let told = 0;
  history.changed.connect(() => (told += 1));
  for (let at = 0; at <= 20; at += 2) {
    history.add(event('s', at, [kernel('sub1', { cpu_percent: at }), kernel('main1')]));
  }
  const [main1, sub1] = history.kernels('s');
  expect([main1.kernel, sub1.kernel]).toEqual(['main1', 'sub1']);
  expect(sub1.cpu.map(p => p.at)).toEqual([10, 12, 14, 16, 18, 20]);
  expect(sub1.last.cpu_percent).toBe(20);
  expect(told).toBe(11);
  history.forget('s');
  expect(history.kernels('s')).toEqual([]);
});

test('a first reading without rates adds no CPU point but its memory', () => {
  const history = new UsageHistory();
  history.add(event('s', 1, [kernel('main1', { cpu_percent: null, cpu_cores: null })]));
  const [main1] = history.kernels('s');
  expect(main1.cpu).toEqual([]);
  expect(main1.mem).toEqual([{ at: 1, value: 100 << 20 }]);
});

test('an agent sums the kernels of every session read in one tick', () => {
  const history = new UsageHistory();
  history.add(event('a', 4, [kernel('main1')]));
  history.add(event('b', 4, [kernel('main1', { cpu_cores: 0.5, mem_bytes: 50 << 20 })]));
  history.add(event('a', 6, [kernel('main1')]));
  const sums = history.agent('docker')!;
  expect(sums.cores).toEqual([
    { at: 4, value: 0.75 },
    { at: 6, value: 0.25 }
  ]);
  expect(sums.mem[0].value).toBe(150 << 20);
});

test('the numbers read as a person reads them', () => {
  expect([bytesText(820), bytesText(1536), bytesText(512 << 20), bytesText(3 * 2 ** 30)]).toEqual([
    '820 B',
    '1.5 KiB',
    '512 MiB',
    '3 GiB'
  ]);
  expect([memShort(66 << 20, 256 << 20), memShort(900 << 20, 1.5 * 2 ** 30)]).toEqual([
    '66/256 MiB',
    '900 MiB/1.5 GiB'
  ]);
  const history = new UsageHistory();
  history.add(event('s', 1, [kernel('main1', { net_rx_rate: null, net_tx_rate: null })]));
  expect(usageTooltip(history, 's')).toBe('main1: CPU 50 % of 0.5 cpu · memory 100 MiB of 512 MiB');
  expect(usageTooltip(history, 'other')).toBe('');
});
