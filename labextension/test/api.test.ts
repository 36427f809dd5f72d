/**
 * The API client's event stream: a stream that breaks is reopened where it left off
 * (`since` the last event's `seq`), so nothing that happened meanwhile is missed, and a
 * `reset` is not taken for a session's event. The server is a stand-in `fetch`.
 */
import { ServerConnection } from '@jupyterlab/services';
import { BaiClient } from '../src/api';
import { SessionEvent } from '../src/types';

function frames(...events: object[]): Response {
  const body = events.map(e => `id: ${(e as { seq: number }).seq}\ndata: ${JSON.stringify(e)}\n\n`);
  return new Response(body.join(''), { headers: { 'Content-Type': 'text/event-stream' } });
}

function event(seq: number, status: string): object {
  return {
    type: 'session',
    session_id: 's',
    name: null,
    owner: 'alice',
    status,
    kernels: {},
    at: 1,
    seq
  };
}

it('reopens a broken stream after the last event it got, and passes no reset on', async () => {
  const asked: string[] = [];
  const replies = [
    frames(event(5, 'PENDING'), event(6, 'SCHEDULED')),
    frames({ type: 'reset', seq: 9, at: 2 }, event(10, 'RUNNING'))
  ];
  const abort = new AbortController();
  const fetch = async (request: RequestInfo | URL): Promise<Response> => {
    asked.push(request instanceof Request ? request.url : String(request));
    const reply = replies.shift();
    if (!reply) {
      abort.abort();
      throw new Error('stopped');
    }
    return reply;
  };
  const settings = ServerConnection.makeSettings({ baseUrl: 'http://h/', fetch });
  const seen: SessionEvent[] = [];
  let connections = 0;
  await new BaiClient(settings).events(
    { event: e => seen.push(e), connected: () => (connections += 1), disconnected: () => {} },
    abort.signal,
    0
  );
  expect(asked[0]).not.toContain('since=');
  expect(asked[1]).toContain('since=6');
  expect(asked[2]).toContain('since=10');
  expect(seen.map(e => [e.seq, e.status])).toEqual([
    [5, 'PENDING'],
    [6, 'SCHEDULED'],
    [10, 'RUNNING']
  ]);
  expect(connections).toBe(2);
});
