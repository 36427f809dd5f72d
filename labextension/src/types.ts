/**
 * The API's shapes (docs/api.md, `GET /bai/api/v1/openapi.json`) and the session
 * lifecycle's status sets, defined once for every view. Types and constants only.
 */

// --- statuses (bai_jupyter/model/status.py) ------------------------------------------------------

/** Every status of a session or kernel, in lifecycle order (the API's `status` enum). */
export const Status = {
  PENDING: 'PENDING',
  SCHEDULED: 'SCHEDULED',
  PREPARING: 'PREPARING',
  PULLING: 'PULLING',
  PREPARED: 'PREPARED',
  CREATING: 'CREATING',
  RUNNING: 'RUNNING',
  RESTARTING: 'RESTARTING',
  TERMINATING: 'TERMINATING',
  TERMINATED: 'TERMINATED',
  ERROR: 'ERROR',
  CANCELLED: 'CANCELLED'
} as const;

export type StatusName = (typeof Status)[keyof typeof Status];

/** Every status, in lifecycle order. */
export const ALL_STATUSES: readonly StatusName[] = Object.values(Status);

/** Placed on agents, kernels not yet running (Python's `STARTING`). */
export const STARTING: ReadonlySet<string> = new Set<StatusName>([
  Status.SCHEDULED,
  Status.PREPARING,
  Status.PULLING,
  Status.PREPARED,
  Status.CREATING
]);

/**
 * Started and not ending: its kernels run, or one restarts (the manager's `ACTIVE`).
 * Idle rules count, signals reach it, notebooks run in it.
 */
export const ACTIVE: ReadonlySet<string> = new Set<StatusName>([Status.RUNNING, Status.RESTARTING]);

/** Over for good: it never runs again (Python's `TERMINAL`). */
export const ENDED: ReadonlySet<string> = new Set<StatusName>([
  Status.TERMINATED,
  Status.CANCELLED,
  Status.ERROR
]);

/** Every status but the ended ones: queued, starting, active or ending. */
export const NOT_ENDED: ReadonlySet<string> = new Set<StatusName>(
  ALL_STATUSES.filter(status => !ENDED.has(status))
);

/** Ending or ended: nothing can be asked of it any more (the server's "has ended", 409). */
export const ENDING_OR_ENDED: ReadonlySet<string> = new Set<StatusName>([
  Status.TERMINATING,
  ...(ENDED as ReadonlySet<StatusName>)
]);

/** Whether a status is over for good (in `ENDED`). */
export function isEnded(status: string): boolean {
  return ENDED.has(status);
}

// --- the API's shapes (docs/api.md) -----------------------------------------------------------

export type Slots = Record<string, string>;

export interface SchedulerRecord {
  retries?: number;
  last_try?: number;
  failed_predicates?: { name: string; msg: string }[];
  msg?: string;
}

export interface KernelJSON {
  id: string;
  hostname: string;
  role: string;
  slots: Slots;
  status: string;
  status_info: string | null;
  agent_id: string | null;
}

export interface ServiceJSON {
  name: string;
  protocol: string;
  port: number;
  url: string | null;
}

export interface SpecJSON {
  image: string | null;
  name: string | null;
  type: string;
  resources: Slots;
  cluster_size: number;
  cluster_mode: string;
  resource_group: string;
  priority: number;
  depends_on: string[];
  startup_command: string | null;
  batch_timeout: number | null;
  service_ports: string[];
}

/** One idle rule that applies to a running session (docs/api.md, `idle`). */
export interface IdleRuleJSON {
  /** Seconds before it ends the session if nothing happens, when the reply was made. */
  left: number | null;
  timeout?: number;
  cpu_percent?: number;
  window?: number;
  cpu_used?: number;
  source?: string | null;
}

export interface IdleJSON {
  idle_timeout?: IdleRuleJSON;
  session_lifetime?: IdleRuleJSON;
  utilization?: IdleRuleJSON;
  last_activity?: number;
  activity?: string | null;
}

/** A running system session's SFTP server (the private key only with `connection=true`). */
export interface SftpJSON {
  host: string;
  port: number;
  user: string;
  known_hosts: string;
  command: string;
}

export interface SessionJSON {
  id: string;
  name: string | null;
  owner: string;
  created_at: number;
  status: string;
  status_info: string | null;
  status_data: { scheduler?: SchedulerRecord; error?: string; [key: string]: unknown };
  /** Why it waits (or waited, if cancelled in the queue): the scheduler's reasons, once each. */
  pending_reason: string | null;
  result: string;
  exit_code: number | null;
  spec: SpecJSON;
  kernels: KernelJSON[];
  meta: Record<string, unknown>;
  services: ServiceJSON[];
  idle?: IdleJSON;
  sftp?: SftpJSON | null;
  /** Once someone ended it on purpose: who, why, and that its notebook kernel is over. */
  end_notice?: string | null;
  /** Each status it went through, and when (seconds since the epoch). */
  status_history?: { status: string; at: number; info: string | null }[];
}

/** When a session ended: its last ending status's time (else when it was made). */
export function endedAt(session: SessionJSON): number {
  const history = session.status_history ?? [];
  for (let i = history.length - 1; i >= 0; i--) {
    if (ENDED.has(history[i].status)) {
      return history[i].at;
    }
  }
  return session.created_at;
}

export interface SessionEvent {
  type: string;
  session_id: string;
  name: string | null;
  owner: string;
  status: string;
  status_info: string | null;
  kernels: Record<string, string>;
  at: number;
  notice?: { kind: string; kernel: string; at: number; message: string };
  /** Its place in the store's change log: a stream resumes after it (`since`). */
  seq?: number;
}

export interface QueueEntry {
  position: number;
  mine: boolean;
  session_id?: string;
  name?: string | null;
  owner?: string;
  priority?: number;
  created_at?: number;
  resources?: Slots;
  cluster_size?: number;
  scheduler?: SchedulerRecord;
  /** The same sentence as the session's `pending_reason`. */
  pending_reason?: string | null;
}

/** `GET /scheduler`: per resource group, its scheduler settings and its pending queue. */
export interface QueueJSON {
  resource_groups: Record<
    string,
    { sequencer: string; selector: string; pending: number; queue: QueueEntry[] }
  >;
}

export interface AgentJSON {
  id: string;
  resource_group: string;
  backend: string;
  schedulable: boolean;
  capacity: Slots;
  occupied: Slots;
  free: Slots;
  /** Each kernel on it; who runs it only for the caller's own sessions (an admin's: all). */
  kernels: {
    slots: Slots;
    /** The pool that keeps it warm: an unclaimed warm session's kernel (nobody's yet). */
    pool?: string;
    session_id?: string;
    kernel_id?: string;
    hostname?: string;
    owner?: string;
    status?: string;
  }[];
  /** Warm sessions whose main1 runs here, by pool name. */
  warm?: Record<string, number>;
}

export interface TemplateJSON {
  name: string;
  description: string;
  shared: boolean;
  spec: Record<string, unknown>;
}

/** A create request, as the dialog builds it (only the fields the user set). */
export type SessionRequest = Record<string, unknown>;

/** The kernelspec the server writes to attach notebooks to a running session. */
export function attachSpecName(sessionId: string): string {
  return `bai-session-${sessionId.slice(0, 12)}`;
}
