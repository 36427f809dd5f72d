/** The bai-jupyter icon: a main kernel and its sub kernels, in the theme's icon colour. */
import { LabIcon } from '@jupyterlab/ui-components';

const svg = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
  <g class="jp-icon3" fill="#616161">
    <rect x="8" y="2" width="8" height="8" rx="1.5"/>
    <rect x="1" y="14" width="6" height="6" rx="1.2"/>
    <rect x="9" y="14" width="6" height="6" rx="1.2"/>
    <rect x="17" y="14" width="6" height="6" rx="1.2"/>
    <path d="M12 10v4M12 12H4v2M12 12h8v2" stroke="#616161" stroke-width="1.5" fill="none"/>
  </g>
</svg>`;

export const baiIcon = new LabIcon({ name: 'bai-jupyter:sessions', svgstr: svg });
