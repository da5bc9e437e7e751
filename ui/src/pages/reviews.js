// Reviews: the access reviews of the targets the reader owns (all of them, for an operator), open
// ones first, and a form to start one (docs/workflow.md, 'Access reviews').
import {h, swap, loading, empty, errorBox, describeError} from '../dom.js';
import {get, post, newOperationId} from '../api.js';
import {poll, liveIndicator} from '../poll.js';
import {time, since} from '../format.js';

export function mount(root, ctx) {
  ctx.title('Reviews');
  const live = liveIndicator();
  const region = h('div', {});
  const notice = h('div', {'aria-live': 'polite'});
  const form = h('div', {});
  root.append(h('div', {class: 'title-row'}, h('h1', {}, 'Access reviews'), live.el),
    h('p', {class: 'muted'}, 'The owners of a target keep or remove each binding of it in effect; completing a review removes what was decided through the same review path as a revocation.'),
    region, h('h2', {}, 'Start a review'), notice, form);
  let stopped = false;

  function render(list) {
    const items = (list && list.items) || [];
    if (!items.length) {
      swap(region, empty(h('p', {}, 'No reviews of the targets you own.')));
      return;
    }
    swap(region, h('div', {class: 'table-scroll'}, h('table', {class: 'list', id: 'reviews'},
      h('thead', {}, h('tr', {}, ['Review', 'Target', 'Status', 'Due', 'Started'].map((c) => h('th', {scope: 'col'}, c)))),
      h('tbody', {}, items.map((r) => h('tr', {'data-review': r.id},
        h('td', {'data-label': 'Review'}, h('a', {href: `/reviews/${r.id}`}, `#${r.id}`)),
        h('td', {'data-label': 'Target'}, h('code', {}, r.targetKey)),
        h('td', {'data-label': 'Status'}, h('span', {class: `badge tone-${r.status === 'OPEN' ? (r.overdue ? 'bad' : 'busy') : 'ok'}`}, r.overdue ? 'OPEN, overdue' : r.status)),
        h('td', {'data-label': 'Due'}, time(r.due)),
        h('td', {'data-label': 'Started'}, `${since(r.startedAt)} ago by ${r.startedBy}`)))))));
  }

  // The start form: a target of the catalog and a due date (two weeks from now by default).
  function renderForm(targets) {
    const select = h('select', {id: 'review-target', name: 'target', 'data-focus': 'review-target'},
      targets.map((t) => h('option', {value: t.key}, `${t.title} (${t.key})`)));
    const dueDefault = new Date(Date.now() + 14 * 86400000).toISOString().slice(0, 10);
    const due = h('input', {type: 'date', id: 'review-due', name: 'due', value: dueDefault, required: true});
    const start = h('button', {type: 'submit', class: 'primary', id: 'review-start', 'data-focus': 'review-start'}, 'Start the review');
    const f = h('form', {id: 'start-review'},
      h('p', {}, h('label', {for: 'review-target'}, 'Target '), select),
      h('p', {}, h('label', {for: 'review-due'}, 'Due by '), due),
      h('p', {class: 'actions'}, start));
    f.addEventListener('submit', async (e) => {
      e.preventDefault();
      start.disabled = true;
      try {
        const {data} = await post('/api/reviews', {operationId: newOperationId(), targetKey: select.value, due: new Date(`${due.value}T23:59:59Z`).toISOString()});
        ctx.navigate(`/reviews/${data.id}`);
      } catch (err) {
        swap(notice, h('div', {class: 'notice tone-bad', role: 'alert', id: 'review-start-error'}, describeError(err)));
        start.disabled = false;
      }
    });
    swap(form, f);
  }

  get('/api/targets').then((t) => { if (!stopped) renderForm((t && t.items) || []); }, (err) => { if (!stopped) swap(form, errorBox(err)); });
  swap(region, loading('the reviews'));
  const p = poll(() => get('/api/reviews'), (list) => {
    live.ok();
    render(list);
  }, (err) => {
    live.failed();
    swap(region, errorBox(err, () => p.now()));
  }, () => 10000);
  return () => { stopped = true; p.stop(); };
}
