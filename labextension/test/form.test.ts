/**
 * The create form: the request its values make, and which field a server message
 * is about.
 */
import { buildRequest, EMPTY_FORM, formField, messageText, slotInput, without } from '../src/form';

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
    ['resources.cpu', 'resources'],
    ['resources.cuda.device', 'resources'],
    ['env.FOO', 'env'],
    ['mounts', 'mounts'],
    ['mounts[2]', 'mounts'],
    ['depends_on', 'depends_on'],
    ['image', 'image'],
    ['resources', 'resources'],
    ['name', 'name'],
    ['template', 'template'],
    ['roles[1].image', 'form'],
    ['meta', 'form'],
    ['', 'form'],
    [null, 'form']
  ])('the body names %s → %s', (field, about) => {
    expect(formField(field)).toBe(about);
  });

  it('reads the field from the body, never from the English message', () => {
    // A message that looks like a path but a body without a field: the form as a whole.
    expect(formField(null)).toBe('form');
    expect(messageText('image: no such thing', null)).toBe('image: no such thing');
  });

  it('drops the part of the field path the form already shows, keeps the slot', () => {
    const message = "resources.cpu: amount must not be negative, got '-1'";
    expect(messageText(message, 'resources.cpu')).toBe(
      "cpu: amount must not be negative, got '-1'"
    );
    expect(messageText('image: no such thing', 'image')).toBe('no such thing');
    const never = "resource group 'default': needs cpu=64 (largest agent: 4) on one agent";
    expect(messageText(never, 'resources')).toBe(never);
    expect(messageText('no path here', null)).toBe('no path here');
  });
});

describe('every error at once', () => {
  it('takes out only the slot at fault, then the field, until nothing is left', () => {
    const request = { type: 'interactive', cluster_size: 0, resources: { cpu: 'abc', mem: '-1' } };
    expect(without(request, 'resources.cpu')).toEqual({ ...request, resources: { mem: '-1' } });
    expect(without(request, 'cluster_size')).toEqual({
      type: 'interactive',
      resources: request.resources
    });
    expect(without(request, 'startup_command')).toBeNull(); // not in it: no next run
    expect(without(request, null)).toBeNull();
  });

  it('finds the input of the slot the server names', () => {
    expect(slotInput('resources.cuda.device')).toBe('gpu');
    expect(slotInput('resources.mem')).toBe('mem');
    expect(slotInput('cluster_size')).toBeNull();
  });
});
