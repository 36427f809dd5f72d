/**
 * API records for the tests, shaped like the server's replies (docs/api.md).
 */
import type { SessionEvent, SessionJSON } from '../src/types';

export const TRAIN = 'a'.repeat(32);
export const EVAL = 'b'.repeat(32);

export function session(id: string, overrides: Partial<SessionJSON> = {}): SessionJSON {
  return {
    id,
    name: null,
    owner: 'alice',
    created_at: 1000,
    status: 'PENDING',
    status_info: null,
    status_data: {},
    pending_reason: null,
    result: 'UNDEFINED',
    exit_code: null,
    spec: {
      image: 'bai-jupyter/python:3.11',
      name: null,
      type: 'interactive',
      resources: { cpu: '1', mem: '2147483648' },
      cluster_size: 3,
      cluster_mode: 'single-node',
      resource_group: 'default',
      priority: 10,
      depends_on: [],
      startup_command: null,
      batch_timeout: null,
      service_ports: []
    },
    kernels: ['main1', 'sub1', 'sub2'].map((hostname, i) => ({
      id: `${id.slice(0, 30)}k${i}`,
      hostname,
      role: i ? 'sub' : 'main',
      slots: { cpu: '1', mem: '2147483648' },
      status: 'PENDING',
      status_info: null,
      agent_id: null
    })),
    meta: {},
    services: [],
    ...overrides
  };
}

export function event(id: string, status: string, kernels: Record<string, string>): SessionEvent {
  return {
    type: 'session',
    session_id: id,
    name: null,
    owner: 'alice',
    status,
    status_info: null,
    kernels,
    at: 2000
  };
}
