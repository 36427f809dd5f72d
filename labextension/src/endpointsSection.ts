/**
 * The sidebar's "Endpoints" section: per inference endpoint its state, replicas
 * wanted and ready, load, route, replicas, latest scaling decisions and any
 * trouble; Scale… and Delete. Nothing at all while the user has no endpoint.
 */
import { Clipboard } from '@jupyterlab/apputils';

import { confirmThen } from './dialog';
import { button, Child, h, section } from './dom';
import {
  EndpointJSON,
  endpointTone,
  loadText,
  recentDecisions,
  replicaParts,
  replicasText,
  targetText
} from './endpoints';
import { LiveState } from './live';
import { scaleDialog } from './scale';

/** How many of an endpoint's latest decisions are shown. */
const DECISIONS_SHOWN = 3;

/** The section, or null when there is no endpoint to show. */
export function endpointsSection(
  live: LiveState,
  /** Show a replica's session in the sidebar. */
  reveal: (sessionId: string) => void
): HTMLElement | null {
  const endpoints = live.state.endpoints;
  if (!endpoints.length) {
    return null;
  }
  const now = Date.now() / 1000;
  return section(
    `Endpoints (${endpoints.length})`,
    'endpoints',
    h(
      'ul',
      { class: 'bai-EndpointList', attrs: { 'aria-label': 'My endpoints' } },
      ...endpoints.map(endpoint => card(live, endpoint, now, reveal))
    )
  );
}

function card(
  live: LiveState,
  endpoint: EndpointJSON,
  now: number,
  reveal: (sessionId: string) => void
): HTMLElement {
  const { name } = endpoint;
  const replicas = replicasText(endpoint);
  // Its route under the server's public URL (the page's), as a link and to copy.
  const route = live.client.pageUrl(endpoint.url);
  const lines: Child[] = [
    h(
      'div',
      { class: 'bai-Session-head' },
      h(
        'span',
        {
          class: `bai-Status bai-mod-${endpointTone(endpoint)}`,
          attrs: { 'data-state': endpoint.state }
        },
        endpoint.state
      ),
      h('span', { class: 'bai-Session-name', attrs: { title: `owner ${endpoint.owner}` } }, name),
      h(
        'span',
        { class: 'bai-Session-age', attrs: { title: 'generation of its replica request' } },
        `gen ${endpoint.generation}`
      )
    ),
    h(
      'div',
      { class: 'bai-Session-detail', attrs: { 'data-role': 'replicas' } },
      `Replicas: ${replicas}`
    ),
    h(
      'div',
      {
        class: 'bai-Session-detail',
        attrs: {
          'data-role': 'load',
          title: `over the last ${Math.round(endpoint.load.seconds)} s; ${targetText(
            endpoint.spec.scaling
          )}`
        }
      },
      `Load: ${loadText(endpoint.load)}`
    ),
    h(
      'div',
      { class: 'bai-Services bai-Route', attrs: { 'data-role': 'route' } },
      'Route: ',
      h(
        'a',
        {
          class: 'bai-Link',
          attrs: {
            href: route,
            title: route,
            target: '_blank',
            rel: 'noopener noreferrer',
            'data-focus-key': `route-${name}`,
            'aria-label': `Open the route of endpoint ${name} in a new tab`
          }
        },
        `${endpoint.url} ↗`
      )
    )
  ];
  if (endpoint.error) {
    lines.push(h('div', { class: 'bai-Error', attrs: { 'data-role': 'error' } }, endpoint.error));
  }
  if (endpoint.replicas.length) {
    lines.push(
      h(
        'ul',
        { class: 'bai-Replicas', attrs: { 'aria-label': `Replicas of ${name}` } },
        ...endpoint.replicas.map(replica => {
          const parts = replicaParts(replica);
          return h(
            'li',
            { attrs: { 'data-session-id': replica.session_id } },
            h(
              'a',
              {
                class: 'bai-Link',
                attrs: {
                  href: '#',
                  title: replica.session_id,
                  'data-focus-key': `replica-${replica.session_id}`,
                  'aria-label': `Show replica session ${parts.id} in My sessions`
                },
                on: {
                  click: event => {
                    event.preventDefault();
                    reveal(replica.session_id);
                  }
                }
              },
              parts.id
            ),
            ` · ${parts.status} · `,
            h('span', { class: `bai-Health bai-mod-${parts.tone}` }, parts.health),
            ` · ${parts.generation}`,
            replica.in_flight ? ` · ${replica.in_flight} in flight` : null
          );
        })
      )
    );
  }
  const decisions = recentDecisions(endpoint, now, DECISIONS_SHOWN);
  if (decisions.length) {
    lines.push(
      h(
        'ol',
        { class: 'bai-Decisions', attrs: { 'aria-label': `Latest scaling decisions of ${name}` } },
        ...decisions.map(decision =>
          h(
            'li',
            { attrs: { title: new Date(decision.at * 1000).toLocaleString() } },
            decision.text
          )
        )
      )
    );
  }
  lines.push(
    h(
      'div',
      { class: 'bai-Actions' },
      button(
        'Scale…',
        `Scale endpoint ${name}`,
        `scale-${name}`,
        () => void scaleDialog(live, endpoint)
      ),
      button('Copy URL', `Copy the URL of endpoint ${name}`, `copy-${name}`, () =>
        Clipboard.copyToSystem(route)
      ),
      button(
        'Delete',
        `Delete endpoint ${name}`,
        `del-${name}`,
        () =>
          void confirmThen(
            `Delete endpoint ${name}?`,
            `Its route ${endpoint.url} stops answering and ` +
              (endpoint.replicas.length === 1
                ? 'its replica ends.'
                : `its ${endpoint.replicas.length} replicas end.`),
            'Delete',
            async () => {
              try {
                await live.client.deleteEndpoint(name);
              } finally {
                live.refreshEndpoints(0); // gone, or what it is now when that failed
              }
            }
          ),
        'bai-mod-warn'
      )
    )
  );
  return h(
    'li',
    {
      class: 'bai-Endpoint',
      attrs: {
        tabindex: '0',
        'data-endpoint': name,
        'data-focus-key': `endpoint-${name}`,
        'aria-label': `endpoint ${name}, ${endpoint.state}, ${replicas}`
      }
    },
    ...lines
  );
}
