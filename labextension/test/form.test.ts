/**
 * The create form: the request its values make, and which field a server message
 * is about.
 */
import { buildRequest, EMPTY_FORM, fieldOfMessage, messageText } from '../src/form';

describe('the create form', () => {
  it('sends only what the user set', () => {
    expect(buildRequest(EMPTY_FORM)).toEqual({
      request: { type: 'interactive', cluster_size: 1, cluster_mode: 'single-node' },
      problems: {}
    });
    const { request, problems } = buildRequest({
      ...EMPTY_FORM,
      template: 'gpu-box',
      name: ' train ',
      type: 'batch',
      cluster_size: '2',
      cpu: '2',
      mem: '4g',
      mounts: 'data, models',
      env: 'A=1\nB=x=y\n',
      startup_command: 'python train.py',
      batch_timeout: '600',
      depends_on: 'prep,\nclean',
      priority: '20'
    });
    expect(problems).toEqual({});
    expect(request).toEqual({
      type: 'batch',
      template: 'gpu-box',
      name: 'train',
      cluster_mode: 'single-node',
      cluster_size: 2,
      priority: 20,
      batch_timeout: 600,
      resources: { cpu: '2', mem: '4g' },
      mounts: ['data', 'models'],
      env: { A: '1', B: 'x=y' },
      startup_command: 'python train.py',
      depends_on: ['prep', 'clean']
    });
  });

  it('leaves batch fields out of an interactive request', () => {
    const { request } = buildRequest({ ...EMPTY_FORM, startup_command: 'x', batch_timeout: '5' });
    expect(request.startup_command).toBeUndefined();
    expect(request.batch_timeout).toBeUndefined();
  });

  it('asks a system session for its data folders, not for a cluster', () => {
    const { request } = buildRequest({
      ...EMPTY_FORM,
      type: 'system',
      cluster_size: '3',
      cluster_mode: 'multi-node',
      mounts: 'data, results'
    });
    expect(request).toEqual({ type: 'system', mounts: ['data', 'results'] });
  });

  it('says which field cannot even be sent', () => {
    const { problems } = buildRequest({ ...EMPTY_FORM, env: 'A=1\noops', cluster_size: 'two' });
    expect(problems.env).toBe('line 2: write NAME=value, got "oops"');
    expect(problems.cluster_size).toBe('must be a number, got "two"');
  });
});

describe('server messages next to their fields', () => {
  it.each([
    ["resources.cpu: amount must not be negative, got '-1'", 'resources'],
    ['resources.cuda.device: unknown slot', 'resources'],
    ['env.FOO: must be a string', 'env'],
    ['mounts: /: contains /dev, which is never mountable', 'mounts'],
    ["depends_on: alice has no session 'prep'", 'depends_on'],
    ["image: nope:1 is on no agent of resource group 'default'; pull or build it", 'image'],
    ["resource group 'default': needs cpu=64 (largest agent: 4) on one agent", 'resources'],
    ["alice already has a live session named 'train' (abc); pick another name", 'name'],
    ["no template named 'gpu'", 'template'],
    ['the session manager is not started', 'form']
  ])('%s → %s', (message, field) => {
    expect(fieldOfMessage(message)).toBe(field);
  });

  it('drops the field path the form already shows', () => {
    expect(messageText("resources.cpu: amount must not be negative, got '-1'")).toBe(
      "amount must not be negative, got '-1'"
    );
    expect(messageText('no path here')).toBe('no path here');
  });
});
