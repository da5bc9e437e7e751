// Demo mailbox: what bindery told, as it arrives — the emails its mail sink received and the
// webhooks its receiver took, each signature checked with the Standard Webhooks library. Watch
// it while a request moves (apply, approve in the inbox, …).
import {h, swap, empty} from '../dom.js';
import {liveIndicator} from '../poll.js';
import {pollSimulator} from '../simulator.js';
import {time} from '../format.js';

export function mount(root, ctx) {
  ctx.title('Mailbox');
  const live = liveIndicator();
  const region = h('div', {});
  root.append(
    h('div', {class: 'title-row'}, h('h1', {}, 'Mailbox'), live.el),
    h('p', {class: 'lead'}, h('span', {class: 'demo-tag'}, 'demo'), ' What bindery told, as it arrives: the emails its mail sink received and the webhooks its receiver took. Apply on the ',
      h('a', {href: '/'}, 'Apply'), ' page, approve in the ', h('a', {href: '/inbox'}, 'inbox'), ', and watch the news come in.'),
    region);
  if (!ctx.me.demo) {
    swap(region, empty(h('p', {}, 'The mailbox exists in demo mode only. In production, bindery emails people and calls the configured webhooks.')));
    return null;
  }
  let box = null;

  function render() {
    const emails = box.emails || [];
    const hooks = box.webhooks || [];
    swap(region,
      h('h2', {}, `Emails (${emails.length})`),
      emails.length ? h('ul', {class: 'mail', id: 'emails'}, emails.map(email))
        : empty(h('p', {}, 'No email yet. Requesters are emailed when their request is in effect, failed, rejected or needs them (their choice, on the settings page).')),
      h('h2', {}, `Webhooks (${hooks.length})`),
      hooks.length ? h('ul', {class: 'mail', id: 'webhooks'}, hooks.map(webhook))
        : empty(h('p', {}, "No webhook yet. Every event is posted to the demo's webhook endpoint, signed.")));
  }

  function email(m) {
    return h('li', {class: 'card', 'data-email': m.messageId},
      h('div', {}, h('strong', {}, m.subject)),
      h('p', {class: 'muted small'}, 'To ', (m.to || []).join(', '), ' · ', time(m.at), m.inReplyTo ? [' · thread ', h('code', {}, m.inReplyTo)] : null),
      h('details', {}, h('summary', {}, 'Read it'), h('pre', {class: 'mail-text'}, m.text || '')));
  }

  function webhook(w) {
    let pretty = '';
    try { pretty = JSON.stringify(w.body, null, 2); } catch (e) { pretty = String(w.body); }
    return h('li', {class: 'card', 'data-webhook': w.id},
      h('div', {}, h('strong', {}, w.type || '(no type)'), ' ',
        h('span', {class: `badge tone-${w.verified ? 'ok' : 'bad'}`}, w.verified ? 'signature verified' : 'signature not verified'),
        w.repeat > 1 ? [' ', h('span', {class: 'badge tone-warn'}, `delivered ${w.repeat} times`)] : null),
      h('p', {class: 'muted small'}, 'To ', h('code', {}, w.endpoint), ' · ', time(w.at), ' · webhook-id ', h('code', {}, w.id)),
      w.error ? h('p', {class: 'small'}, w.error) : null,
      h('details', {}, h('summary', {}, 'Body'), h('pre', {class: 'mail-text'}, pretty)));
  }

  const p = pollSimulator(region, live, {path: '/sim/mailbox', what: 'the mailbox',
    absent: 'The mailbox is not running on this server.', take: (data) => { box = data || {}; }, render});
  return () => p.stop();
}
