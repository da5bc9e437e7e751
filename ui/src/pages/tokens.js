// Personal API tokens on the settings page: a person makes one for a script, sees it once, lists
// and revokes them (docs/api.md, 'API tokens'). The secret is in the creation's answer only:
// it is shown once, in this page's memory, and gone with the next render.
import {h, swap, loading, errorBox, describeError, empty} from '../dom.js';
import {get, request} from '../api.js';
import {time} from '../format.js';

const scopeWords = {read: 'read', 'read apply': 'read and apply'};

export function mountTokens(region) {
  const notice = h('div', {'aria-live': 'polite', id: 'token-notice'});
  const list = h('div', {id: 'token-list'});
  const name = h('input', {id: 'token-name', name: 'name', type: 'text', maxlength: 64, required: true, autocomplete: 'off', 'data-focus': 'token-name'});
  const days = h('input', {id: 'token-days', name: 'days', type: 'number', min: 1, max: 365, value: 90, required: true, 'data-focus': 'token-days'});
  const scope = (value, label, checked) => h('label', {for: `scope-${value.replace(' ', '-')}`},
    h('input', {type: 'radio', name: 'scope', value, id: `scope-${value.replace(' ', '-')}`, checked}), ' ', label);
  const make = h('button', {type: 'submit', class: 'primary', id: 'token-make', 'data-focus': 'token-make'}, 'Make a token');
  const form = h('form', {id: 'token-form', class: 'card'},
    h('h3', {}, 'Make a token'),
    h('div', {class: 'field'}, h('label', {for: 'token-name'}, 'What is it for?'), name),
    h('fieldset', {class: 'choices'}, h('legend', {}, 'It may'),
      h('p', {}, scope('read', 'read your requests and the catalog', true)),
      h('p', {}, scope('read apply', 'also apply, and revoke and withdraw your requests', false))),
    h('div', {class: 'field'}, h('label', {for: 'token-days'}, 'Days until it expires (1 to 365)'), days),
    h('p', {class: 'actions'}, make));
  region.append(
    h('h2', {}, 'API tokens for your scripts'),
    h('p', {class: 'lead'}, 'A script sends a token as ', h('code', {}, 'Authorization: Bearer bdy_…'),
      ': it acts as you, within what the token may do — never the ops console. bindery shows a token once, when it is made, and keeps only a fingerprint of it.'),
    notice, list, form);
  let stopped = false;

  function render(data) {
    const items = data.items || [];
    if (!items.length) {
      swap(list, empty(h('p', {}, 'You have no API tokens.')));
      return;
    }
    swap(list, h('div', {class: 'table-scroll'}, h('table', {id: 'tokens', class: 'list'},
      h('thead', {}, h('tr', {}, ['Name', 'May', 'Made', 'Expires', 'Last used', ''].map((c) => h('th', {scope: 'col'}, c)))),
      h('tbody', {}, items.map((t) => h('tr', {'data-token-id': t.id},
        h('td', {}, t.name),
        h('td', {}, scopeWords[(t.scopes || []).join(' ')] || (t.scopes || []).join(', ')),
        h('td', {}, time(t.createdAt)),
        h('td', {}, t.expired ? h('span', {class: 'badge tone-off'}, 'expired') : time(t.expiresAt)),
        h('td', {}, t.lastUsedAt ? time(t.lastUsedAt) : h('span', {class: 'muted'}, 'never')),
        h('td', {}, h('button', {type: 'button', class: 'danger', 'data-revoke': t.id, 'data-focus': `revoke-${t.id}`, onclick: () => revoke(t)}, 'Revoke'))))))),
    h('p', {class: 'muted small'}, `At most ${data.max} tokens at a time.`));
  }

  async function load() {
    try {
      const data = await get('/api/tokens');
      if (!stopped) render(data);
    } catch (err) {
      if (!stopped) swap(list, errorBox(err, load));
    }
  }

  async function revoke(t) {
    try {
      await request('DELETE', `/api/tokens/${t.id}`);
      swap(notice, h('div', {class: 'notice tone-ok', role: 'status', id: 'token-revoked'}, `Revoked “${t.name}”: it no longer works anywhere.`));
    } catch (err) {
      swap(notice, h('div', {class: 'notice tone-bad', role: 'alert'}, describeError(err)));
    }
    load();
  }

  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    make.disabled = true;
    const chosen = form.querySelector('input[name=scope]:checked').value.split(' ');
    try {
      const {data} = await request('POST', '/api/tokens', {name: name.value, scopes: chosen, expiresInDays: Number(days.value)});
      name.value = '';
      swap(notice, h('div', {class: 'notice tone-ok', role: 'status', id: 'token-created'},
        h('p', {}, `Made “${data.name}”. Copy it now: it is not shown again.`),
        h('p', {}, h('code', {id: 'new-token', class: 'secret'}, data.token))));
      load();
    } catch (err) {
      swap(notice, h('div', {class: 'notice tone-bad', role: 'alert', id: 'token-error'}, describeError(err)));
    }
    make.disabled = false;
  });

  swap(list, loading('your tokens'));
  load();
  return () => { stopped = true; };
}
