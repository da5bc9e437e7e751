// My requests: the caller's records, newest first, refreshed live. The first page is polled;
// older pages are loaded on demand with the cursor.
import {h, swap, loading, empty, errorBox, externalLink, busyReading, describeError} from '../dom.js';
import {get, post, qs, newOperationId} from '../api.js';
import {poll, liveIndicator} from '../poll.js';
import {statusBadge, stateBadge, nextActionBadge, stepName, time, since, linkify} from '../format.js';

export function mount(root, ctx) {
  ctx.title('My requests');
  const live = liveIndicator();
  const region = h('div', {});
  const more = h('div', {class: 'actions'});
  root.append(h('div', {class: 'title-row'}, h('h1', {}, 'My requests'), live.el), region, more);

  let first = null; // the polled first page
  let older = []; // items of pages loaded with "Load more"
  let cursor = '';
  let loadingMore = false;

  function render() {
    const items = [...first.items, ...older.filter((o) => !first.items.some((f) => f.operationId === o.operationId))];
    if (!items.length) {
      swap(region, empty(h('p', {}, 'You have no requests yet.'), h('p', {}, h('a', {href: '/', class: 'button primary'}, 'Request access'))));
    } else {
      swap(region, requestTable(items, {showSubject: false, codes: !!(ctx.me && ctx.me.ops), renew}));
    }
    swap(more, cursor ? h('button', {type: 'button', onclick: loadMore, disabled: loadingMore, 'data-focus': 'more'}, loadingMore ? 'Loading…' : 'Load older requests') : null);
  }

  // renew asks a renewal of r from the list; the row says what became of it (the list's next
  // read shows the new expiry).
  async function renew(r, button, note) {
    button.disabled = true;
    try {
      await post(`/api/requests/${encodeURIComponent(r.operationId)}/renew`, {operationId: newOperationId()});
      swap(note, 'Renewal asked: see its page.');
    } catch (err) {
      swap(note, describeError(err));
      button.disabled = false;
    }
    p.now();
  }

  async function loadMore() {
    loadingMore = true;
    render();
    try {
      const page = await get(`/api/my/requests${qs({cursor})}`);
      older = older.concat(page.items || []);
      cursor = page.nextCursor || '';
    } catch (err) {
      swap(more, errorBox(err, loadMore));
      loadingMore = false;
      return;
    } finally {
      loadingMore = false;
    }
    render();
  }

  swap(region, loading('your requests'));
  const p = poll(() => get('/api/my/requests'), (page) => {
    const firstLoad = first === null;
    first = {items: (page && page.items) || []};
    if (firstLoad) cursor = (page && page.nextCursor) || '';
    live.ok();
    if (!busyReading(region)) render();
  }, (err) => {
    live.failed();
    if (first === null) swap(region, errorBox(err, () => p.now()));
  }, () => (first && first.items.some((r) => r.nextAction === 'WAIT') ? 2000 : 5000));
  return () => p.stop();
}

/** requestTable lists request summaries; rows link to the request page. Used by ops too (forOps:
 * the next action in an operator's words). A requester reads each state's label; the status and
 * step codes are an operator's (codes, and always forOps). */
export function requestTable(items, {showSubject, actions, forOps = false, codes = forOps, renew = null}) {
  return h('div', {class: 'table-scroll'}, h('table', {class: 'list'},
    h('thead', {}, h('tr', {},
      h('th', {scope: 'col'}, 'Target'),
      showSubject ? h('th', {scope: 'col'}, 'Subject') : null,
      h('th', {scope: 'col'}, 'Status'),
      codes ? h('th', {scope: 'col'}, 'Step') : null,
      h('th', {scope: 'col'}, 'Next'),
      h('th', {scope: 'col'}, 'Updated'),
      h('th', {scope: 'col'}, 'MR'),
      actions ? h('th', {scope: 'col'}, h('span', {class: 'sr-only'}, 'Actions')) : null)),
    h('tbody', {}, items.map((r) => h('tr', {'data-operation-id': r.operationId},
      h('td', {'data-label': 'Target'}, h('a', {href: `/requests/${encodeURIComponent(r.operationId)}`}, r.targetKey), h('span', {class: 'muted small block'}, h('code', {}, r.operationId))),
      showSubject ? h('td', {'data-label': 'Subject'}, r.subject) : null,
      h('td', {'data-label': 'Status'}, codes ? statusBadge(r.status) : stateBadge(r)),
      codes ? h('td', {'data-label': 'Step'}, stepName(r.step)) : null,
      h('td', {'data-label': 'Next'}, held(r) || nextActionBadge(r.nextAction, forOps), expiry(r, renew)),
      h('td', {'data-label': 'Updated'}, time(r.updatedAt), h('span', {class: 'muted small block'}, `${since(r.updatedAt)} ago`)),
      h('td', {'data-label': 'MR'}, r.mr ? externalLink(r.mr.url, `!${r.mr.id}`) : h('span', {class: 'muted'}, '—')),
      actions ? h('td', {class: 'row-actions'}, actions(r)) : null)))));
}

// expiry is "expires in 6 days — Renew" on a row in effect with an expiry (renew: the list's
// renewal; without it, the words alone).
function expiry(r, renew) {
  if (!r.expiresIn) return null;
  const note = h('span', {class: 'small block muted', 'aria-live': 'polite'});
  if (!renew) return h('span', {class: 'small block', 'data-expires': r.operationId}, r.expiresIn);
  const button = h('button', {type: 'button', class: 'small', 'data-renew': r.operationId}, 'Renew');
  button.addEventListener('click', () => renew(r, button, note));
  return h('span', {class: 'small block', 'data-expires': r.operationId}, r.expiresIn, ' — ', button, note);
}

// held is what holds a request, told as its request page tells it (the server's words: the same
// sentence, the same facts): a merge held for a person, a blocked batch ahead of it, an operator's
// pause of its project's queue (null: nothing holds it).
function held(r) {
  if (r.blocker && r.blocker.behind) {
    return h('span', {'data-behind': r.blocker.batchId}, h('span', {class: 'badge tone-warn'}, `Behind blocked batch #${r.blocker.batchId}`),
      h('span', {class: 'small block'}, linkify(r.nextActionText || r.blocker.text)));
  }
  if (r.blocker) return blockerNote(r.blocker, r.nextActionText);
  if (r.paused) {
    return h('span', {'data-paused': r.paused.by}, h('span', {class: 'badge tone-warn'}, 'Queue paused'),
      h('span', {class: 'small block'}, linkify(r.nextActionText)));
  }
  return null;
}

// blockerNote is a merge held for a person, as the request page tells it: the badge, then what
// holds it, who must act and where.
// (text: the request's sentence of it, where the row has one).
export function blockerNote(b, text) {
  return h('span', {'data-blocker': b.batchId || ''}, h('span', {class: 'badge tone-warn'}, b.label), h('span', {class: 'small block'}, linkify(text || b.text)));
}
