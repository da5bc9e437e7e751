// Settings: which events email the caller, and the caller's personal API tokens. Operators'
// channels (webhooks, chats) are the configuration's; this page is each person's own.
import {h, swap, loading, errorBox, describeError} from '../dom.js';
import {get, post} from '../api.js';
import {mountTokens} from './tokens.js';

export function mount(root, ctx) {
  ctx.title('Settings');
  const notice = h('div', {'aria-live': 'polite'});
  const region = h('div', {});
  root.append(h('h1', {}, 'Settings'), h('h2', {}, 'Email about your requests'), notice, region);
  let stopped = false;

  function render(p) {
    const chosen = new Set(p.events || []);
    const boxes = (p.choices || []).map((c) => {
      const box = h('input', {type: 'checkbox', name: 'events', value: c.event, id: `ev-${c.event}`, checked: chosen.has(c.event), 'data-focus': c.event});
      return h('li', {}, h('label', {for: `ev-${c.event}`}, box, ' ', c.label, c.default ? h('span', {class: 'muted small'}, ' (default)') : null));
    });
    const save = h('button', {type: 'submit', class: 'primary', 'data-focus': 'save'}, 'Save');
    const form = h('form', {id: 'email-prefs'},
      h('fieldset', {}, h('legend', {}, 'Email me when my request is…'), h('ul', {class: 'choices'}, boxes)),
      h('p', {class: 'actions'}, save));
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      save.disabled = true;
      const events = [...form.querySelectorAll('input[name=events]:checked')].map((b) => b.value);
      try {
        const {data} = await post('/api/my/notifications', {events});
        swap(notice, h('div', {class: 'notice tone-ok', role: 'status'}, events.length ? `Saved: you are emailed about ${events.length} kinds of news.` : 'Saved: you are not emailed at all.'));
        if (!stopped) render(data);
      } catch (err) {
        swap(notice, h('div', {class: 'notice tone-bad', role: 'alert'}, describeError(err)));
        save.disabled = false;
      }
    });
    swap(region,
      h('p', {class: 'lead', id: 'email-address'}, p.address
        ? ['Email goes to ', h('strong', {}, p.address), '.']
        : 'bindery knows no email address for you: nothing can be emailed. Ask the operators to add you to the identity directory.'),
      p.emailOn ? null : h('p', {class: 'notice tone-warn'}, 'Email is not configured on this bindery (notify.email): your choice is kept for when it is.'),
      p.defaults ? h('p', {class: 'muted small'}, 'You have not chosen yet: the defaults apply.') : null,
      form,
      h('p', {class: 'muted small'}, 'Every message about one request arrives in one thread. Each request page says what was sent about it.'));
  }

  swap(region, loading('your settings'));
  get('/api/my/notifications').then((p) => { if (!stopped) render(p); }, (err) => { if (!stopped) swap(region, errorBox(err, () => location.reload())); });
  const tokens = h('section', {id: 'api-tokens'});
  root.append(tokens);
  const stopTokens = mountTokens(tokens);
  return () => { stopped = true; stopTokens(); };
}
