/**
 * A typed client of the bai-jupyter REST API (`/bai/api/v1/…`) and its event
 * stream, over Jupyter's `ServerConnection`: the same authentication (token,
 * cookies, XSRF) as every other request of JupyterLab, so it works unchanged
 * against the server it was loaded from in every deployment shape.
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import type { EndpointJSON, EndpointUpdate } from './endpoints';
import type { PoolJSON } from './pools';
import { pageUrlOf } from './text';
import type {
  AgentJSON,
  QueueJSON,
  SessionEvent,
  SessionJSON,
  SessionRequest,
  TemplateJSON
} from './types';
import { isUsageEvent, UsageEvent } from './usage';

const API = 'bai/api/v1';

/**
 * An answer of the API that is not a success: `{"error", "message"}` and its
 * status, and `field`: the request field it is about (`resources.cpu`,
 * `scaling.max_replicas`, `name`), `null` for the request as a whole.
 */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly field: string | null = null
  ) {
    super(message);
  }
}

/** An error as the user reads it: the server's message, then its status and code. */
export function errorText(error: unknown): string {
  if (error instanceof ApiError && error.status > 0) {
    return `${error.message} (${error.status} ${error.code})`;
  }
  return error instanceof Error ? error.message : String(error);
}

/** What `events()` calls while it runs. */
export interface EventHandlers {
  /** One session event, as the server sent it. */
  event(event: SessionEvent): void;
  /** The stream is (re)connected: events may have been missed, so re-read everything. */
  connected(): void;
  /** The stream broke (it reconnects by itself after `retryMs`). */
  disconnected(reason: string): void;
  /** Given: the stream also asks for usage events (`?usage=1`), which come here. */
  usage?(event: UsageEvent): void;
}

export class BaiClient {
  constructor(readonly settings: ServerConnection.ISettings = ServerConnection.makeSettings()) {}

  /** The absolute URL of an API path (`sessions/abc/logs`) with query parameters. */
  url(path: string, query: Record<string, string> = {}): string {
    const base = URLExt.join(this.settings.baseUrl, API, path);
    const search = URLExt.objectToQueryString(query);
    return search === '?' ? base : base + search;
  }

  /**
   * A page of the server as a full URL: a service-port link (`/bai/sessions/…/proxy/web/`)
   * or an endpoint's route (`/bai/endpoints/echo/`), as the API gives them.
   */
  pageUrl(path: string): string {
    return pageUrlOf(path, this.settings.baseUrl);
  }

  private async call<T>(
    method: string,
    path: string,
    query: Record<string, string> = {},
    body?: unknown
  ): Promise<T> {
    const init: RequestInit = { method };
    if (body !== undefined) {
      init.body = JSON.stringify(body);
      init.headers = { 'Content-Type': 'application/json' };
    }
    let reply: Response;
    try {
      reply = await ServerConnection.makeRequest(this.url(path, query), init, this.settings);
    } catch (error) {
      throw new ApiError(0, 'unavailable', `the server does not answer: ${String(error)}`);
    }
    const text = await reply.text();
    let data: any = null;
    try {
      data = text ? JSON.parse(text) : null;
    } catch {
      data = {
        error: 'error',
        message: `${reply.status} ${reply.statusText}: ${text.slice(0, 200)}`
      };
    }
    if (!reply.ok) {
      const code = data?.error ?? 'error';
      const message = data?.message ?? `${reply.status} ${reply.statusText}`;
      const field = typeof data?.field === 'string' && data.field ? data.field : null;
      throw new ApiError(reply.status, code, message, field);
    }
    return data as T;
  }

  async sessions(all = false): Promise<SessionJSON[]> {
    const query: Record<string, string> = all ? { all: 'true' } : {};
    return (await this.call<{ sessions: SessionJSON[] }>('GET', 'sessions', query)).sessions;
  }

  session(id: string): Promise<SessionJSON> {
    return this.call('GET', `sessions/${encodeURIComponent(id)}`);
  }

  /** Create a session; with `dryRun` only check it (the server's own rules and messages). */
  create(request: SessionRequest, dryRun = false): Promise<SessionJSON> {
    return this.call('POST', 'sessions', dryRun ? { dry_run: 'true' } : {}, request);
  }

  /** Cancel a pending session, terminate a started one. */
  destroy(id: string): Promise<SessionJSON> {
    return this.call('DELETE', `sessions/${encodeURIComponent(id)}`);
  }

  interrupt(id: string, kernel = 'main1'): Promise<void> {
    return this.call('POST', `sessions/${encodeURIComponent(id)}/interrupt`, { kernel });
  }

  async logs(id: string, kernel = 'main1'): Promise<string> {
    const path = `sessions/${encodeURIComponent(id)}/logs`;
    return (await this.call<{ logs: string }>('GET', path, { kernel })).logs;
  }

  /** A kernelspec that attaches a notebook's kernel to this running session (its name). */
  async attachKernelspec(id: string): Promise<string> {
    const path = `sessions/${encodeURIComponent(id)}/kernelspec`;
    return (await this.call<{ name: string }>('POST', path)).name;
  }

  async agents(): Promise<AgentJSON[]> {
    return (await this.call<{ agents: AgentJSON[] }>('GET', 'agents')).agents;
  }

  /** The warm pools: size, limits, warm and starting sessions, claim counts. */
  async pools(): Promise<PoolJSON[]> {
    return (await this.call<{ pools: PoolJSON[] }>('GET', 'pools')).pools;
  }

  /** Each resource group's pending queue, in the order the scheduler tries it. */
  queue(): Promise<QueueJSON> {
    return this.call('GET', 'scheduler');
  }

  async templates(): Promise<TemplateJSON[]> {
    return (await this.call<{ templates: TemplateJSON[] }>('GET', 'templates')).templates;
  }

  /** The caller's inference endpoints (`all`: everyone's, for an admin). */
  async endpoints(all = false): Promise<EndpointJSON[]> {
    const query: Record<string, string> = all ? { all: 'true' } : {};
    return (await this.call<{ endpoints: EndpointJSON[] }>('GET', 'endpoints', query)).endpoints;
  }

  endpoint(name: string): Promise<EndpointJSON> {
    return this.call('GET', `endpoints/${encodeURIComponent(name)}`);
  }

  /** Change an endpoint's settings (`{"scaling": {"max_replicas": 8}}`); its new view. */
  updateEndpoint(name: string, change: EndpointUpdate): Promise<EndpointJSON> {
    return this.call('PATCH', `endpoints/${encodeURIComponent(name)}`, {}, change);
  }

  /** Delete an endpoint: its route goes, its replicas end. */
  deleteEndpoint(name: string): Promise<EndpointJSON> {
    return this.call('DELETE', `endpoints/${encodeURIComponent(name)}`);
  }

  /**
   * Follow the event stream (`GET events`, Server-Sent Events read with a streaming
   * fetch so Jupyter's own authentication applies) until `signal` aborts. A broken
   * stream is reopened after `retryMs` where it left off (`since` the last event's
   * `seq`: the store replays what was missed, whichever replica answers); each
   * (re)connection calls `connected()`. A `reset` (the store no longer holds what was
   * missed) is not passed on: `connected()`'s full read covers it.
   */
  async events(handlers: EventHandlers, signal: AbortSignal, retryMs = 2000): Promise<void> {
    let since: number | null = null;
    while (!signal.aborted) {
      let reason = 'the server closed the event stream';
      try {
        const reply = await ServerConnection.makeRequest(
          this.url('events', {
            ...(since === null ? {} : { since: String(since) }),
            ...(handlers.usage ? { usage: '1' } : {})
          }),
          { method: 'GET', signal, headers: { Accept: 'text/event-stream' } },
          this.settings
        );
        if (!reply.ok || !reply.body) {
          throw new Error(`${reply.status} ${reply.statusText}`);
        }
        handlers.connected();
        await readEvents(reply.body, signal, data => {
          const event = JSON.parse(data) as SessionEvent | UsageEvent;
          if (isUsageEvent(event)) {
            handlers.usage?.(event); // no seq: never replayed, never a place to resume from
          } else {
            since = typeof event.seq === 'number' ? event.seq : since;
            if (event.type !== 'reset') {
              handlers.event(event);
            }
          }
        });
      } catch (error) {
        if (signal.aborted) {
          return;
        }
        reason = String(error);
      }
      handlers.disconnected(reason);
      await new Promise(resolve => setTimeout(resolve, retryMs));
    }
  }
}

/** Read Server-Sent Events frames from `body`; call `onData` with each frame's data. */
async function readEvents(
  body: ReadableStream<Uint8Array>,
  signal: AbortSignal,
  onData: (data: string) => void
): Promise<void> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  const cancel = () => void reader.cancel();
  signal.addEventListener('abort', cancel);
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) {
        return;
      }
      buffer += decoder.decode(value, { stream: true });
      let end: number;
      while ((end = buffer.indexOf('\n\n')) >= 0) {
        const frame = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const data = frame
          .split('\n')
          .filter(line => line.startsWith('data:'))
          .map(line => line.slice(5).trimStart())
          .join('\n');
        if (data) {
          onData(data);
        }
      }
    }
  } finally {
    signal.removeEventListener('abort', cancel);
  }
}
