// One access review: each binding of the target that was in effect when it started, with its
// holder, since when, who approved it and its last renewal; the reader keeps or removes each with
// a comment, then completes the review (docs/workflow.md, 'Access reviews'). After completion
// the page follows each removal until its deploy took it out of effect.
import {h, swap, loading, errorBox, describeError, busyReading} from '../dom.js';
import {get, post, newOperationId} from '../api.js';
import {poll, liveIndicator} from '../poll.js';
import {time} from '../format.js';

export function mount(root, ctx) {
  const id = ctx.params[0];
  ctx.title(`Review #${id}`);
  const live = liveIndicator();
  const region = h('div', {});
  const notice = h('div', {'aria-live': 'polite', id: 'review-notice'});
  root.append(h('p', {class: 'crumbs'}, h('a', {href: '/reviews'}, '← Reviews')), notice, region);
  let view = null;
  let shown = null; // the answer on screen: one that brings nothing new is not drawn again
  const comments = new Map(); // what a reviewer typed stays while the page refreshes (by item)

  function render() {
    const v = view;
    const open = v.status === 'OPEN';
    const complete = h('button', {type: 'button', class: 'primary', id: 'review-complete', 'data-focus': 'review-complete'}, 'Complete the review');
    complete.addEventListener('click', () => act(complete, `/api/reviews/${id}/complete`, {operationId: newOperationId()},
      'Completed: every removal goes through a batch and the deploy; this page follows them.'));
    swap(region,
      h('div', {class: 'title-row'}, h('h1', {tabindex: '-1'}, `Review of ${v.targetTitle || v.targetKey}`), live.el),
      h('p', {class: 'muted'}, h('code', {}, v.targetKey), ` · started by ${v.startedBy} ${time(v.startedAt)} · due ${time(v.due)}`,
        v.overdue ? h('span', {class: 'badge tone-bad'}, ' overdue') : null),
      h('p', {id: 'review-status'}, h('span', {class: `badge tone-${open ? 'busy' : 'ok'}`}, v.status),
        open ? ` ${v.undecided} of ${v.items.length} still to decide (undecided ones are kept).` : ` by ${v.completedBy} ${time(v.completedAt)}.`),
      h('div', {class: 'table-scroll'}, h('table', {class: 'list', id: 'review-items'},
        h('thead', {}, h('tr', {}, ['Holder', 'In effect since', 'Approved by', 'Last renewal', 'Decision', ''].map((c) => h('th', {scope: 'col'}, c)))),
        h('tbody', {}, v.items.map((it) => row(it, open))))),
      open ? h('p', {class: 'actions'}, complete) : null,
      h('p', {class: 'muted small'}, 'The record: ',
        h('a', {href: `/api/reviews/${id}/export?format=csv`, id: 'review-export-csv', download: ''}, 'CSV'), ' · ',
        h('a', {href: `/api/reviews/${id}/export?format=ndjson`, download: ''}, 'NDJSON')));
  }

  function row(it, open) {
    const comment = h('input', {type: 'text', name: 'comment', maxlength: 1000, placeholder: 'Comment', 'aria-label': `Comment on ${it.subject}`,
      'data-comment': it.id, 'data-focus': `comment-${it.id}`});
    comment.value = comments.get(it.id) || '';
    comment.addEventListener('input', () => comments.set(it.id, comment.value));
    const decide = (decision) => {
      const b = h('button', {type: 'button', class: decision === 'remove' ? 'danger small' : 'small', 'data-decide': decision, 'data-item': it.id}, decision === 'remove' ? 'Remove' : 'Keep');
      b.addEventListener('click', () => act(b, `/api/reviews/${id}/items/${it.id}/decide`, {operationId: newOperationId(), decision, comment: comment.value},
        `${decision === 'remove' ? 'Remove' : 'Keep'}: ${it.subject}.`));
      return b;
    };
    let decision;
    if (it.decision) {
      decision = [h('strong', {'data-decision': it.decision}, it.decision === 'remove' ? 'Remove' : 'Keep'),
        h('span', {class: 'small block muted'}, `by ${it.decidedBy} ${time(it.decidedAt)}`),
        it.comment ? h('span', {class: 'small block'}, it.comment) : null];
    } else if (open) {
      decision = [comment, ' ', decide('keep'), ' ', decide('remove')];
    } else {
      decision = h('span', {class: 'muted'}, 'Kept (not decided)');
    }
    return h('tr', {'data-item': it.id, 'data-subject': it.subject},
      h('td', {'data-label': 'Holder'}, it.subject, h('span', {class: 'small block'}, h('a', {href: `/requests/${encodeURIComponent(it.operationId)}`}, h('code', {}, it.operationId)))),
      h('td', {'data-label': 'In effect since'}, it.since ? time(it.since) : '—'),
      h('td', {'data-label': 'Approved by'}, it.approvedBy || '—'),
      h('td', {'data-label': 'Last renewal'}, it.renewedAt ? time(it.renewedAt) : 'never', it.expiresAt ? h('span', {class: 'small block muted'}, `expires ${time(it.expiresAt)}`) : null),
      h('td', {'data-label': 'Decision'}, decision),
      h('td', {'data-label': 'What became of it'}, it.note ? h('span', {class: 'small', 'data-note': it.removal || (it.inEffect ? '' : 'closed')}, it.note) : null,
        it.removedAt ? h('span', {class: 'small block', 'data-removed': it.id}, `removed ${time(it.removedAt)}`) : null));
  }

  async function act(button, path, body, done) {
    button.disabled = true;
    try {
      const {data} = await post(path, body);
      view = data;
      shown = JSON.stringify(data);
      swap(notice, h('div', {class: 'notice tone-ok', role: 'status'}, done));
      render();
    } catch (err) {
      swap(notice, h('div', {class: 'notice tone-bad', role: 'alert'}, describeError(err)));
      button.disabled = false;
    }
  }

  swap(region, loading('the review'));
  const p = poll(() => get(`/api/reviews/${id}`), (data) => {
    live.ok();
    const seen = JSON.stringify(data);
    if (seen === shown || busyReading(region)) return;
    view = data;
    shown = seen;
    render();
  }, (err) => {
    live.failed();
    if (!view) swap(region, h('h1', {}, `Review #${id}`), errorBox(err, () => p.now()));
  }, () => (view && view.status === 'COMPLETED' && view.items.some((i) => i.removal === 'STARTED' && !i.removedAt) ? 2000 : 10000));
  return () => p.stop();
}
