// Apply: pick a catalog target, say why, see the file change, submit. One form = one
// operationId (the idempotency key). A form that reached the server stays locked: an accepted
// application must not be sent twice, and DUPLICATE_SUBMIT means it already was.
import {h, swap, loading, empty, errorBox, describeError} from '../dom.js';
import {get, post, newOperationId, qs} from '../api.js';
import {statusBadge, ttl} from '../format.js';

export function mount(root, ctx) {
  ctx.title('Request access');
  const region = h('div', {});
  root.append(
    h('h1', {}, 'Request access'),
    h('p', {class: 'lead'}, 'Ask for a binding to a catalog target. It is approved, merged into the configuration repository and takes effect when deployed — you can follow every step.'),
    region);

  let alive = true;
  let targets = [];

  async function loadCatalog() {
    swap(region, loading('the catalog'));
    try {
      const page = await get('/api/targets');
      if (!alive) return;
      targets = (page && page.items) || [];
      if (!targets.length) {
        swap(region, empty(h('p', {}, 'The catalog is empty: there is nothing to apply for yet.'), h('p', {class: 'muted'}, 'Operators add targets in the configuration file.')));
        return;
      }
      form(ctx.query.get('target'));
    } catch (err) {
      if (alive) swap(region, errorBox(err, loadCatalog));
    }
  }

  function form(preselect) {
    let operationId = newOperationId();
    const idCode = h('code', {}, operationId);
    let selected = targets.some((t) => t.key === preselect) ? preselect : '';
    let previewToken = 0;

    const reason = h('textarea', {id: 'reason', name: 'reason', rows: '3', maxlength: '1000', required: true,
      'aria-describedby': 'reason-hint reason-error', 'data-focus': 'reason'});
    const reasonError = h('p', {id: 'reason-error', class: 'field-error'});
    const counter = h('p', {id: 'reason-count', class: 'hint', 'aria-live': 'polite'}, '0 / 1000 characters');
    let previewData = null; // the last preview: its reason placeholder shows what is typed

    const targetError = h('p', {id: 'target-error', class: 'field-error'});
    const filter = h('input', {type: 'search', id: 'target-filter', placeholder: 'Filter targets', 'aria-label': 'Filter targets'});
    const list = h('div', {class: 'targets'}); // a fieldset with its legend already groups the radios
    const preview = h('div', {class: 'preview', 'aria-live': 'polite'});
    const outcome = h('div', {class: 'outcome'});
    const submit = h('button', {type: 'submit', class: 'primary', id: 'submit'}, 'Submit request');
    const fields = h('fieldset', {class: 'plain'},
      h('fieldset', {class: 'plain', 'aria-describedby': 'target-error'},
        h('legend', {id: 'target-legend'}, 'What do you need?'),
        targets.length > 6 ? filter : null,
        list, targetError),
      h('div', {class: 'field'},
        h('label', {for: 'reason'}, 'Why do you need it?'),
        h('p', {id: 'reason-hint', class: 'hint'}, 'The approvers read this; it is also written into the change.'),
        reason, counter, reasonError),
      h('section', {'aria-labelledby': 'preview-title'}, h('h2', {id: 'preview-title'}, 'Preview of the change'), preview),
      h('div', {class: 'actions'}, submit));
    const el = h('form', {id: 'apply-form', novalidate: true, 'data-operation-id': operationId},
      fields, outcome,
      h('p', {class: 'muted small'}, 'Form id ', idCode, ' — sending this form again can never create a second request.'));

    function renderTargets() {
      const q = filter.value.trim().toLowerCase();
      const shown = targets.filter((t) => !q || `${t.key} ${t.title} ${t.project}`.toLowerCase().includes(q));
      swap(list, shown.length ? shown.map((t) => {
        const id = `target-${t.key}`;
        // What the server says of this target for the caller, before anything is typed.
        const blocked = t.mayApply === false || !!t.yours;
        const radio = h('input', {type: 'radio', name: 'target', id, value: t.key, checked: t.key === selected && !blocked, disabled: blocked, 'data-focus': id});
        radio.addEventListener('change', () => select(t.key));
        // A failed request of the caller's holds the target too: its page offers the way out.
        const failedOne = t.yours && (t.yours.status === 'CREATE_FAILED' || t.yours.status === 'HANDLE_FAILED');
        const yours = t.yours ? h('span', {class: 'small block', 'data-yours': t.yours.state},
          t.yours.state === 'IN_EFFECT' ? 'You already have this in effect. '
            : failedOne ? 'Your request for this failed: withdraw it on its page, then apply again. ' : 'You already have a request for this on its way. ',
          h('a', {href: `/requests/${encodeURIComponent(t.yours.operationId)}`}, t.yours.state === 'IN_EFFECT' ? 'View it' : failedOne ? 'Open it' : 'Follow it')) : null;
        return h('label', {class: `target${blocked ? ' blocked' : ''}`, for: id, 'data-may-apply': String(t.mayApply !== false)},
          radio,
          h('span', {class: 'target-body'},
            h('strong', {}, t.title || t.key), ' ', h('code', {}, t.key),
            h('span', {class: 'muted small block'},
              t.project, ' · ',
              t.ruleCodes && t.ruleCodes.length ? `needs permission: ${t.ruleCodes.join(' or ')}` : 'anyone may apply',
              ' · ', ttl(t.ttl)),
            t.mayApply === false ? h('span', {class: 'small block field-error', 'data-denied': ''}, 'You do not have the permission this target needs.') : null,
            yours));
      }) : h('p', {class: 'muted'}, 'No target matches the filter.'));
    }

    async function select(key) {
      selected = key;
      targetError.textContent = '';
      const token = ++previewToken;
      swap(preview, loading('the preview'));
      let data = {};
      try {
        data = (await get(`/api/preview${qs({target: key})}`)) || {};
      } catch (err) {
        data = {}; // the preview never blocks applying
      }
      if (!alive || token !== previewToken) return;
      if (!data.path && !data.content) {
        swap(preview, h('p', {class: 'muted'}, 'No preview is available right now. You can still apply.'));
        return;
      }
      previewData = data;
      showPreview();
    }

    // showPreview draws the last preview with the typed reason in place of its placeholder.
    function showPreview() {
      if (!previewData) return;
      const typed = reason.value.trim();
      const content = (previewData.content || '').replace('(your reason)', typed ? JSON.stringify(typed).slice(1, -1) : '(your reason)');
      swap(preview, h('p', {class: 'small'}, 'File ', h('code', {class: 'path'}, previewData.path || '—')),
        h('pre', {class: 'file', tabindex: '0', 'aria-label': 'File content'}, content));
    }

    function lock(locked) {
      fields.disabled = locked;
    }

    function restart() {
      form(selected);
    }

    function settled(result) {
      const follow = h('a', {href: `/requests/${encodeURIComponent(result.operationId)}`, class: 'button primary', 'data-focus': 'follow'}, 'Follow your request');
      const again = h('button', {type: 'button', onclick: restart}, 'Start a new request');
      if (result.code === 'DUPLICATE_SUBMIT') {
        swap(outcome, h('div', {class: 'notice tone-warn', role: 'status', id: 'apply-duplicate'},
          h('p', {}, h('strong', {}, 'Already submitted. '), 'bindery had already received this form, so nothing was sent twice. The form stays locked.'),
          result.status ? h('p', {}, 'Current status: ', statusBadge(result.status, !!(ctx.me && ctx.me.ops))) : null,
          h('div', {class: 'actions'}, follow, again)));
      } else {
        swap(outcome, h('div', {class: 'notice tone-ok', role: 'status', id: 'apply-accepted'},
          h('p', {}, h('strong', {}, 'Request submitted. '), 'It now waits for approval; the request page shows every step live.'),
          result.status ? h('p', {}, 'Status: ', statusBadge(result.status, !!(ctx.me && ctx.me.ops))) : null,
          h('div', {class: 'actions'}, follow, again)));
      }
      follow.focus();
    }

    function failed(err) {
      // Only a definite refusal frees the form for edits under a new id. After a lost answer
      // (network, 5xx) the same id is kept, so sending again is answered DUPLICATE_SUBMIT if
      // the first attempt did arrive.
      const definite = err.status >= 400 && err.status < 500 && err.status !== 408 && err.status !== 429;
      let message = describeError(err);
      if (err.code === 'INVALID_ARGUMENT' && err.field === 'reason') {
        // Said once, next to the field; the summary points to it.
        reasonError.textContent = err.message.replace(/^reason:\s*/, '');
        message = 'The reason needs a change: see below the field.';
        reason.setAttribute('aria-invalid', 'true');
      } else if (err.code === 'INVALID_ARGUMENT' && err.field === 'targetKey') {
        targetError.textContent = err.message;
      }
      if (err.code === 'APPLY_IN_PROGRESS') message = 'You already have an active request for this target. Follow it in “My requests”.';
      if (err.code === 'APPLY_CLOSED') message = err.message || 'Applications are closed right now.';
      // The same form id with other content: an earlier submission of this form arrived (its
      // answer was lost) before the edit. The edit is kept and goes out as a new request, under
      // the new id given below, only when the requester says so.
      const reused = err.code === 'IDEMPOTENCY_KEY_REUSED' ? operationId : null;
      if (reused) message = 'This form had already reached bindery before your edit: its answer was lost on the way. Your edited text was not sent; it is kept here.';
      if (err.status === 0 || err.status >= 500) message += ' Submitting again is safe: it is the same form.';
      swap(outcome, h('div', {class: 'notice tone-bad', role: 'alert', id: 'apply-error', tabindex: '-1'},
        h('p', {}, message),
        err.code === 'APPLY_IN_PROGRESS' ? h('p', {}, activeLink()) : null,
        reused ? [h('p', {}, arrivedLink(reused)),
          h('div', {class: 'actions'}, h('button', {type: 'button', class: 'primary', id: 'submit-as-new', onclick: () => el.requestSubmit()}, 'Submit the edited text as a new request'))] : null,
        err.requestId ? h('p', {class: 'muted small'}, 'Request id: ', h('code', {}, err.requestId)) : null));
      if (definite) {
        operationId = newOperationId();
        el.setAttribute('data-operation-id', operationId);
        idCode.textContent = operationId;
      }
      lock(false);
      submit.textContent = 'Submit request';
      // Focus goes to the error summary, not to <body>: a keyboard or screen reader user hears it.
      outcome.querySelector('#apply-error').focus();
    }

    // arrivedLink leads to the request an earlier submission of this form made, when there is
    // one (the earlier submission may also have been refused).
    function arrivedLink(id) {
      const slot = h('span', {});
      get(`/api/requests/${encodeURIComponent(id)}`).then((v) => {
        if (v && v.operationId) swap(slot, 'The earlier submission is ', h('a', {href: `/requests/${encodeURIComponent(v.operationId)}`, id: 'arrived-request'}, `your request for ${v.targetKey}`), '.');
      }).catch(() => {});
      return slot;
    }

    // activeLink leads to the caller's active request of the selected target: the catalog,
    // read again now, names it (else the list).
    function activeLink() {
      const key = selected;
      const slot = h('span', {}, h('a', {href: '/requests'}, 'My requests'));
      get('/api/targets').then((page) => {
        const t = ((page && page.items) || []).find((x) => x.key === key);
        if (t && t.yours) swap(slot, h('a', {href: `/requests/${encodeURIComponent(t.yours.operationId)}`, id: 'active-request'}, 'Open your active request'));
      }).catch(() => {});
      return slot;
    }

    el.addEventListener('submit', async (e) => {
      e.preventDefault();
      if (fields.disabled) return; // submitting, or settled: this form is never sent again
      reasonError.textContent = '';
      reason.removeAttribute('aria-invalid');
      let bad = null;
      if (!selected) {
        targetError.textContent = 'Choose a target.';
        bad = bad || list.querySelector('input');
      }
      if (!reason.value.trim()) {
        reasonError.textContent = 'Say why you need it.';
        reason.setAttribute('aria-invalid', 'true');
        bad = bad || reason;
      }
      if (bad) {
        bad.focus();
        return;
      }
      lock(true);
      submit.textContent = 'Submitting…';
      swap(outcome, h('p', {class: 'state loading', role: 'status'}, h('span', {class: 'spinner', 'aria-hidden': 'true'}), 'Submitting…'));
      try {
        const {data} = await post('/api/apply', {operationId, targetKey: selected, reason: reason.value.trim()});
        if (!alive) return;
        submit.textContent = 'Submitted';
        settled(data || {operationId, code: 'ACCEPTED'});
      } catch (err) {
        if (alive) failed(err);
      }
    });
    filter.addEventListener('input', renderTargets);
    reason.addEventListener('input', () => {
      counter.textContent = `${[...reason.value].length} / 1000 characters`;
      showPreview();
    });

    renderTargets();
    swap(region, el);
    if (selected) select(selected);
    else swap(preview, h('p', {class: 'muted'}, 'Choose a target to see the file this request adds.'));
  }

  loadCatalog();
  return () => { alive = false; };
}
