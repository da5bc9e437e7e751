// My requests: the caller's records, newest first, refreshed live. The first page is polled;
// older pages are loaded on demand with the cursor.
import {h, swap, loading, empty, errorBox, externalLink, busyReading} from '../dom.js';
import {get, qs} from '../api.js';
import {poll, liveIndicator} from '../poll.js';
import {statusBadge, stateBadge, nextActionBadge, stepName, time, since} from '../format.js';

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
      swap(region, requestTable(items, {showSubject: false, codes: !!(ctx.me && ctx.me.ops)}));
    }
    swap(more, cursor ? h('button', {type: 'button', onclick: loadMore, disabled: loadingMore, 'data-focus': 'more'}, loadingMore ? 'Loading…' : 'Load older requests') : null);
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
export function requestTable(items, {showSubject, actions, forOps = false, codes = forOps}) {
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
      h('td', {'data-label': 'Next'}, r.blocker ? blockerNote(r.blocker) : nextActionBadge(r.nextAction, forOps)),
      h('td', {'data-label': 'Updated'}, time(r.updatedAt), h('span', {class: 'muted small block'}, `${since(r.updatedAt)} ago`)),
      h('td', {'data-label': 'MR'}, r.mr ? externalLink(r.mr.url, `!${r.mr.id}`) : h('span', {class: 'muted'}, '—')),
      actions ? h('td', {class: 'row-actions'}, actions(r)) : null)))));
}

// blockerNote is a merge held for a person, as the request page tells it: the badge, then what
// holds it, who must act and where.
export function blockerNote(b) {
  return h('span', {'data-blocker': b.batchId || ''}, h('span', {class: 'badge tone-warn'}, b.label), h('span', {class: 'small block'}, b.text));
}
